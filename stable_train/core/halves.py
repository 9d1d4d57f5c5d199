"""The two halves of a Policy: the hooks traced into the train step, and those run on the host.

A policy overrides only the hooks it needs; every default does nothing. What only some policies
do is not a hook here but a protocol (`protocols`), which a policy implements by defining its
methods.
"""

from typing import Any, Dict, Optional, Sequence

import tensorflow as tf

from stable_train.core.decision import Decision
from stable_train.core.reports import StepReports
from stable_train.core.views import PolicyContext, RunHandle

# The gradient statistics in the `stats` of `transform_gradients` / `allow_update`; they always
# describe the gradients currently being passed (see `InGraphHalf.transform_gradients`).
MEASURED_STATS = ('grad_norm', 'grads_finite', 'grad_finite_flags')


class InGraphHalf:
  """The hooks traced into the one train step (tensor ops; no Python `if` on tensors), and
  `build`, called once, eagerly, before the step is traced."""

  # True for a policy whose `update_state` may raise (an in-graph check): the step then runs every
  # policy's `update_state` after the apply or skip, and its counters after them.
  updates_after_apply = False

  # False for a policy whose `end_step` cannot be compiled with XLA (Forensics stashes tensors of
  # any shape; a `tf.py_function`). The Trainer's loop runs `end_step` outside XLA; a Keras `fit`
  # with jit_compile=True compiles its whole step, and refuses such a policy, as does a
  # `StepGuard(jit_compile=True)`.
  end_step_compiles = True

  @property
  def uses_end_step(self) -> bool:
    """Whether `end_step` may act (the loop then hands it each step's report dict, which the
    step returns beside its packed row: outputs an XLA step pays for). Default: the policy
    overrides `end_step`; a policy whose override does nothing in some configuration says so."""
    return type(self).end_step is not InGraphHalf.end_step

  def build(self, variables, variable_paths: Sequence[str]) -> None:
    """Called once before the step is traced, with the trainable variables and their names in
    layer order (the order of the gradients `transform_gradients` gets), e.g. for a transform
    that needs the weights (AdaptiveGradClip)."""
    del variables, variable_paths

  def check_batch(self, features, labels) -> Optional[tf.Tensor]:
    """Returns a bool vector, one flag per tensor of `flatten_inputs` (True = fine), or None."""
    del features, labels
    return None

  def sanitize_labels(self, labels):
    """Returns labels that are safe to feed to the loss (traced, before the forward pass).

    Only labels of a batch that fails `check_batch` may change: that batch is never applied, but
    it must not crash the step (e.g. an out-of-range sparse label raises on CPU).
    """
    return labels

  def transform_loss(self, loss):
    """Returns the loss to differentiate (traced, under the tape; e.g. fault injection)."""
    return loss

  def transform_gradients(self, grads, stats):
    """Returns transformed gradients (`grads` itself, or a new list).

    The stats contract: `stats['grad_norm']`, `stats['grads_finite']` and
    `stats['grad_finite_flags']` (`MEASURED_STATS`) always describe the gradients currently being
    passed, i.e. `grads` here, the final gradients in `allow_update`. A transform that returns a
    new list may set any of those keys itself to exact values for its output (ClipByGlobalNorm
    sets all three); keys it does not set are measured again by the guard, lazily, when a later
    policy or the report reads them. Returning `grads` itself keeps the stats as they are. The
    report's 'grad_norm' stays the norm before any transform; its 'clipped_grad_norm' is the
    final `stats['grad_norm']`. A value set under a key '<policy name>/<what>' is handed on, in
    the report, to this policy's `update_state` (what the transform read or derived from its
    variables, so the step does not read and compute it twice).

    Args:
      grads: list of aggregated gradients (one per trainable variable, in layer order).
      stats: dict of the step's tensors: 'loss', 'loss_finite', 'inputs_finite',
        'outputs_finite', 'raw_grad_norm' (the global norm before any transform), the
        `MEASURED_STATS` ('grad_norm': global norm, 'grads_finite': scalar bool,
        'grad_finite_flags': one bool per gradient), plus the Python values
        'variable_paths' and 'xla' (compiled with XLA).
    """
    del stats
    return grads

  def allow_update(self, stats) -> Optional[tf.Tensor]:
    """Returns a scalar bool: may this step's update be applied? None means no opinion.

    `stats` is the dict of `transform_gradients`, describing the final (transformed) gradients.
    """
    del stats
    return None

  def update_state(self, report, applied: tf.Tensor) -> Optional[tf.Tensor]:
    """Updates the policy's variables after the apply/skip decision of one step.

    Args:
      report: dict of the step's report tensors (see `StepReports`), in cross-replica context,
        plus the values the transforms handed on ('<policy name>/<what>' keys).
      applied: scalar bool, whether the update was applied.

    Returns:
      None, or a scalar bool: True flags the step (`StepReports.flagged`), so the host asks the
      policies to decide after this loop even when it is otherwise clean. Statistics that only
      the host reads belong in a `LoopObserver`'s `observe` instead: every op here runs on every
      step.
    """
    del report, applied
    return None

  def end_step(self, batch, report) -> Optional[tf.Tensor]:
    """Runs in the in-graph loop after each step, outside XLA, in cross-replica context.

    Args:
      batch: the step's dataset element, as local tensors (per-replica parts concatenated).
      report: dict of the step's report tensors, plus 'grad_finite_flags' (one bool per trainable
        variable, in layer order).

    Returns:
      A scalar bool: end the loop right after this step (the host then sees the state the step
      left), or None for no opinion.
    """
    del batch, report
    return None


class HostHalf:
  """The hooks run eagerly, once per loop. `decide` only decides: from the reports, a
  `PolicyContext` and the policy's own variables (which it may update: that is the policy's state
  transition). Every action on the run (files, events, logs, a restore, the learning rate)
  happens in `execute(decision, run)`, through the `RunHandle`."""

  # False for a policy whose `decide` returns None on every clean loop (`StepReports.clean()`:
  # every step applied, none faulty or an overflow) whatever its state: the controller then does
  # not call it on such loops, which keeps a healthy run's host loop short.
  decides_on_clean_loops = True

  # True for a policy whose host half reads the run's first batch (`Probe.first_batch`): a guarded
  # Keras `fit`, which cannot re-read its data, then keeps a bounded copy of it in-graph.
  uses_first_batch = False

  def decide(self, reports: StepReports,
             context: Optional[PolicyContext]) -> Optional[Decision]:
    """Reads one loop of reports and returns a Decision (or None to continue). No side effects
    on the run: an action it wants is a Decision with `action=ACT` (or ROLLBACK/ESCALATE/ABORT).

    Args:
      reports: the loop's reports.
      context: the read-only `PolicyContext` (None in unit tests of a policy that reads none).
    """
    del reports, context
    return None

  def execute(self, decision: Decision, run: RunHandle) -> Optional[str]:
    """Carries out a decision this policy returned: an ACT, or a ROLLBACK it resolved to.

    Args:
      decision: the decision (`decision.policy` is this policy's name).
      run: the `RunHandle`, the only way a policy acts on the run.

    Returns:
      None to go on training, or the reason why the run must stop (it then ends "aborted").
    """
    raise NotImplementedError(f'{type(self).__name__} cannot carry out {decision.action!r}')

  def summary(self) -> Dict[str, Any]:
    """Extra fields for summary.json (e.g. {'rollbacks': 2})."""
    return {}

  def is_healthy(self) -> bool:
    """Whether a checkpoint written now may be marked as a known-good rollback target."""
    return True
