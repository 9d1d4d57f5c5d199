"""The interfaces of stable_train: host decisions, the views a policy gets, the Policy base class.

A policy has two halves. Its in-graph half runs inside the one traced train step (no Python
control flow on tensors there); its host half runs eagerly between loops: `decide` reads the
reports the step produced (and a read-only `PolicyContext`) and returns a `Decision`; `execute`
carries a decision out through a `RunHandle`, the one narrow handle onto the run. Policy state
lives in `tf.Variable`s owned by the policy (a `tf.Module`), so it is checkpointed with the model
and restored on resume and rollback. The report fields live in `reports`, the two views of the
run in `views` (both re-exported here).
"""

import dataclasses
from typing import Any, Dict, Optional, Protocol, Sequence, runtime_checkable

import tensorflow as tf

from stable_train.core.reports import (  # pylint: disable=unused-import  (the public names)
    REPORT_FIELDS, ReportField, StepReports, fault_kind, first_false, flatten_inputs,
    input_paths, offending_tensor, step_faulty)
from stable_train.core.views import (  # pylint: disable=unused-import  (the public names)
    NormCeiling, PolicyContext, RunHandle)

CONTINUE = 'continue'
ESCALATE = 'escalate'  # "something is wrong that this policy cannot fix": a recovery policy may act.
ROLLBACK = 'rollback'
ABORT = 'abort'
# "Carry out this policy's own action now (`Policy.execute`), then go on": writing a record,
# emitting a warning, restoring the learning rate. Run for every policy that asks, in policy
# order, before the one resolved continue/rollback/abort decision.
ACT = 'act'
# "End the run cleanly after this evaluation" (early stopping): only from `Policy.decide_eval`.
# The policy's `execute` records it, then the run ends with status 'stopped_early' and this
# decision's reason in the summary.
STOP = 'stop'
ACTIONS = (CONTINUE, ESCALATE, ROLLBACK, ABORT, ACT, STOP)
# A `Decision.status`: how a run that this decision stops ends ('' is 'aborted').
DIVERGED = 'diverged'
STOP_STATUSES = ('', 'aborted', DIVERGED)

# The gradient statistics in the `stats` of `Policy.transform_gradients` / `allow_update`; they
# always describe the gradients currently being passed (see `Policy.transform_gradients`).
MEASURED_STATS = ('grad_norm', 'grads_finite', 'grad_finite_flags')


@dataclasses.dataclass(frozen=True)
class Decision:
  """What a host-side policy asks the loop to do after a loop of steps."""
  action: str = CONTINUE
  reason: str = ''
  trigger: str = ''
  step: int = -1  # The global step at which the trigger fired.
  policy: str = ''  # The policy that carries out an ACT or ROLLBACK; default: the decider.
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)
  # How the run ends when this decision stops it (an ABORT, or an ESCALATE no policy takes
  # over): '' for 'aborted', or 'diverged' (the loss diverged while finite, or never came down).
  status: str = ''

  def __post_init__(self):
    if self.action not in ACTIONS:  # A typo must not read as "continue".
      raise ValueError(f'Decision: action={self.action!r} is not one of {ACTIONS}.')
    if self.status not in STOP_STATUSES:
      raise ValueError(f'Decision: status={self.status!r} is not one of {STOP_STATUSES}.')



class Policy(tf.Module):
  """Base class of stable_train policies. Override only the hooks a policy needs.

  Set-up hook (eager, once, before the step is traced): `build`.
  In-graph hooks (traced into the train step; use tensor ops, no Python `if` on tensors):
    `check_batch`, `sanitize_labels`, `transform_loss`, `transform_gradients`, `allow_update`,
    `update_state`; and `end_step`, traced into the loop around the step (never compiled with XLA).
  Host hooks (eager, once per loop): `decide`, `handle_escalation`, `execute`, `is_healthy`,
    `summary`; after each evaluation: `decide_eval`; before training: `check_fit`,
    `already_stopped`. `decide`, `handle_escalation` and `decide_eval` only decide: from the
    reports (or eval results), a `PolicyContext` and the policy's own variables (which they may
    update: that is the policy's state transition). Every action on the run (files, events,
    logs, a restore, the learning rate) happens in `execute(decision, run)`, through the
    `RunHandle`.
  Protocols a policy implements by defining their methods (the core asks `isinstance`, never
    the class): `LossScaler` (fp16 loss scaling, traced), `NormCeiling` (a fixed ceiling a
    recovery sets), `LoopObserver` (fold each loop's reports into host-read statistics),
    `EndCheck` (a last word on a run about to end).
  Capabilities the core asks for by name: `marks_best`, `reads_variables_finite`,
    `decides_on_clean_loops`, `decides_after_act`, `uses_end_step`, `end_step_compiles`,
    `updates_after_apply`, `wants_start_checkpoint`, `uses_first_batch`.
  """

  # Set True by a policy whose host half reads `StepReports.variables_finite`: the loop then
  # checks every model and optimizer variable once, in the same graph, at its end.
  reads_variables_finite = False

  # False for a policy whose `decide` returns None on every clean loop (`StepReports.clean()`:
  # every step applied, none faulty or an overflow) whatever its state: the controller then does
  # not call it on such loops, which keeps a healthy run's host loop short.
  decides_on_clean_loops = True

  # True for the policy that marks the checkpoint of the best evaluation `best` (at most one per
  # Trainer: one best mark).
  marks_best = False

  # True for a policy whose `execute` of an ACT may change what it decides on the same loop (a
  # check whose finding escalates): the dispatcher then asks it again after the ACTs, so the
  # finding counts in that loop, the run's last included. Its `decide` must then leave its
  # variables as they are (a second ask that changes them is undone and refused).
  decides_after_act = False

  # True for a policy whose `update_state` may raise (an in-graph check): the step then runs every
  # policy's `update_state` after the apply or skip, and its counters after them.
  updates_after_apply = False

  @property
  def uses_end_step(self) -> bool:
    """Whether `end_step` may act (the loop then hands it each step's report dict, which the
    step returns beside its packed row: outputs an XLA step pays for). Default: the policy
    overrides `end_step`; a policy whose override does nothing in some configuration says so."""
    return type(self).end_step is not Policy.end_step

  # False for a policy whose `end_step` cannot be compiled with XLA (it stashes tensors of any
  # shape). The Trainer's loop runs `end_step` outside XLA; a Keras `fit` with jit_compile=True
  # compiles its whole step, and refuses such a policy.
  end_step_compiles = True

  # True for a policy that may roll back as far as the run's start (Rollback): a fresh run then
  # writes a checkpoint of its untrained state at step 0, before the first update.
  wants_start_checkpoint = False

  # True for a policy whose host half reads the run's first batch (`Probe.first_batch`): a guarded
  # Keras `fit`, which cannot re-read its data, then keeps a bounded copy of it in-graph.
  uses_first_batch = False

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
    del values, context
    return None

  def handle_escalation(self, decision: Decision,
                        context: Optional[PolicyContext]) -> Optional[Decision]:
    """Turns another policy's escalation into an action (e.g. a rollback); None if it cannot."""
    del decision, context
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

  def check_fit(self, *, metric_names: Sequence[str], has_eval: bool) -> None:
    """Raises a ConfigError before training if this fit cannot work with the policy (e.g. a
    policy acting on evaluations when fit has none)."""
    del metric_names, has_eval

  def already_stopped(self) -> Optional[str]:
    """Why the run already stopped, by this policy's (restored) state, or None: a run that stopped
    early and is started again with the same command trains no more."""
    return None

  def summary(self) -> Dict[str, Any]:
    """Extra fields for summary.json (e.g. {'rollbacks': 2})."""
    return {}

  def is_healthy(self) -> bool:
    """Whether a checkpoint written now may be marked as a known-good rollback target."""
    return True


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
class EndCheck(Protocol):
  """A policy with a last word on a run about to end normally (the protocol a policy implements
  by defining the method; both front doors ask it once, before the final checkpoint)."""

  def check_at_end(self, run: RunHandle) -> Optional[Decision]:
    """An ESCALATE or ABORT decision that ends the run with its status instead of 'completed'
    (no rollback: the run is over), or None."""


@runtime_checkable
class LoopObserver(Protocol):
  """A policy whose statistics only its host half reads: it folds each loop's reports into its
  state on the host, once per loop, instead of in the traced step on every step (what the step
  does not compute costs a healthy run nothing). Both front doors call it before any `decide`,
  on every loop, clean or not; its state stays in the policy's variables (checkpointed)."""

  def observe(self, reports: StepReports) -> bool:
    """Folds one loop of reports into the state; True when the loop needs the policies'
    decisions although it is clean (a rule fired)."""
