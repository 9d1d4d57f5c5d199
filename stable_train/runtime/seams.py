"""`RunSeams`: the documented places where a plug-in (the testing tools' `Faults`) enters a run.

The library never imports its testing tools: a run calls these hooks on whatever `Trainer(faults=)`
holds, and the base class does nothing at each, so a plug-in overrides only the seams it needs.
"""

from typing import Sequence


class RunSeams:
  """No-op seams of one Trainer's run; subclass and override the ones a plug-in needs.

  Each hook runs where its name says: `wrap_dataset` once per `fit` (a dataset stage),
  `bind` once the variables are built, `transform_loss` traced into the step's loss (before the
  policies see it), `after_loop` on the host after each loop's reports, and
  `before_checkpoint_write` inside the checkpoint keeper's write (None: no hook there).
  """

  before_checkpoint_write = None  # A callable(path) the keeper calls before a write, or None.

  def wrap_dataset(self, dataset):
    """The dataset the run trains on, given the one passed to `fit`."""
    return dataset

  def bind(self, *, global_step, variables: Sequence, variable_paths: Sequence[str]) -> None:
    """Called once the model and optimizer are built, with the run's step counter and variables."""
    del global_step, variables, variable_paths

  def transform_loss(self, loss):
    """The per-replica training loss the step differentiates. Traced."""
    return loss

  def after_loop(self, reports, run) -> None:
    """Called after each loop with its `StepReports` and the run's `RunHandle`."""
    del reports, run
