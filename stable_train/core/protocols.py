"""What only some policies do: small protocols a policy implements by defining their methods.

The core asks `isinstance(policy, Protocol)`, never the class, so a user's policy takes part by
defining the methods (`NormCeiling`, a recovery's fixed norm ceiling, lives with the views).
"""

from typing import Dict, Optional, Protocol, Sequence, runtime_checkable

import tensorflow as tf

from stable_train.core.decision import Decision
from stable_train.core.reports import StepReports
from stable_train.core.views import PolicyContext, RunHandle


@runtime_checkable
class LossScaler(Protocol):
  """A policy that scales the loss before differentiation (fp16 loss scaling; at most one per
  run). The step differentiates `scale_loss(loss)`; every other hook sees the gradients
  `unscale_gradients` returns; `is_overflow(report)` tells a skipped overflow from a fault. All
  four are traced."""

  def scale_loss(self, loss: tf.Tensor) -> tf.Tensor:
    """The loss to differentiate."""

  def unscale_gradients(self, grads: Sequence[tf.Tensor]) -> Sequence[tf.Tensor]:
    """The true gradients of the scaled loss's gradients."""

  def is_overflow(self, report: Dict[str, tf.Tensor]) -> tf.Tensor:
    """Whether a step's non-finite gradients were a loss-scale overflow (a scalar bool)."""

  def loss_scale(self) -> tf.Tensor:
    """The loss scale the step used, as the report records it."""


@runtime_checkable
class LoopObserver(Protocol):
  """A policy whose statistics only its host half reads: it folds each loop's reports into its
  state on the host, once per loop, instead of in the traced step on every step (what the step
  does not compute costs a healthy run nothing). Both front doors call it before any `decide`,
  on every loop, clean or not; its state stays in the policy's variables (checkpointed).

  It may also define `observed_variables()`: the variables `observe` reads with
  `state.host_value(variable, reports)`. Only the host writes them, between loops, so the
  Trainer's loop reads them in its graph and hands their values over with the reports
  (`StepReports.observed`), which saves `observe` a host read per loop."""

  def observe(self, reports: StepReports) -> bool:
    """Folds one loop of reports into the state; True when the loop needs the policies'
    decisions although it is clean (a rule fired)."""


@runtime_checkable
class Recovery(Protocol):
  """A policy that takes over another's escalation (Rollback). Where one is in the stack, a fresh
  run writes a checkpoint of its untrained state at step 0 (a run too hot from its first step can
  go back that far), and each of the Trainer's loops ends with a check of every model and
  optimizer variable, in the same graph (`StepReports.variables_finite`; None at the other front
  doors, where `PolicyContext.variables_finite()` reads them)."""

  def handle_escalation(self, decision: Decision,
                        context: Optional[PolicyContext]) -> Optional[Decision]:
    """The action that answers an ESCALATE (e.g. a ROLLBACK, carried out by this policy's
    `execute`), or None if this policy cannot; the first policy that answers takes it."""


@runtime_checkable
class Rechecker(Protocol):
  """A policy whose `execute` of an ACT may change what it decides on the same loop (a check
  whose finding escalates, DivergenceCheck): the dispatcher asks it again after the ACTs, so the
  finding counts in that loop, the run's last included. Asking again must leave its variables as
  they are (a second ask that changes them is undone and refused)."""

  def decide_after_act(self, reports: StepReports,
                       context: Optional[PolicyContext]) -> Optional[Decision]:
    """The policy's decision on the loop once its ACTs ran (its new ACTs are dropped)."""


@runtime_checkable
class EvalWatcher(Protocol):
  """A policy that acts on evaluations (BestCheckpoint, EarlyStopping)."""

  def decide_eval(self, values: Dict[str, float],
                  context: Optional[PolicyContext]) -> Optional[Decision]:
    """Reads one evaluation's results and returns a Decision (or None). Pure, like `decide`.

    Called after each evaluation of `fit(eval_dataset=...)` that was not an eval divergence, in
    policy order. The decision may be ACT (carried out by `execute`, e.g. marking the best
    checkpoint) or STOP (`execute` records it, then the run ends 'stopped_early'; e.g.
    EarlyStopping). A STOP at the final evaluation of a run is dropped (the run ends anyway).

    Args:
      values: the monitorable values: 'eval_loss', 'eval_<metric name>' for each eval metric,
        and '<metric name>' for each training metric's latest window.
      context: the read-only `PolicyContext` (its `step` is the evaluated step).
    """


@runtime_checkable
class FitCheck(Protocol):
  """A policy that only some fits suit (EarlyStopping needs evaluations): each front door asks it
  before training."""

  def check_fit(self, *, metric_names: Sequence[str], has_eval: bool) -> None:
    """Raises a ConfigError before training if this fit cannot work with the policy (e.g. no
    evaluations to act on, or a monitored value no evaluation gives)."""


@runtime_checkable
class BestMarker(Protocol):
  """A policy that marks the checkpoint of the best evaluation `best` (at most one per run)."""

  def check_monitor(self, available: Sequence[str]) -> None:
    """Raises a one-line ConfigError if the value it watches is not one of `available`."""

  def improves(self, value: float) -> bool:
    """Whether `value` beats the best so far (a checkpoint of it is then marked `best`)."""


@runtime_checkable
class Stopper(Protocol):
  """A policy that may end a run early for good (EarlyStopping): a run that stopped and is
  started again with the same command trains no more."""

  def already_stopped(self) -> Optional[str]:
    """Why the run already stopped, by this policy's (restored) state, or None."""


@runtime_checkable
class EndCheck(Protocol):
  """A policy with a last word on a run about to end normally (both front doors ask it once,
  before the final checkpoint)."""

  def check_at_end(self, run: RunHandle) -> Optional[Decision]:
    """An ESCALATE or ABORT decision that ends the run with its status instead of 'completed'
    (no rollback: the run is over), or None."""
