"""The interfaces of stable_train: step reports, host decisions and the Policy base class.

A policy has two halves. Its in-graph half runs inside the one traced train step (no Python
control flow on tensors there); its host half runs eagerly between loops, reads the reports the
step produced and returns a `Decision`. Policy state lives in `tf.Variable`s owned by the policy (a
`tf.Module`), so it is checkpointed with the model and restored on resume and rollback.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from stable_train import compat

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

  def __post_init__(self):
    if self.action not in ACTIONS:  # A typo must not read as "continue".
      raise ValueError(f'Decision: action={self.action!r} is not one of {ACTIONS}.')


@dataclasses.dataclass(frozen=True)
class ReportField:
  """One per-step report field (see `REPORT_FIELDS`)."""
  name: str
  dtype: Optional[tf.DType]  # None: the run's report float type (float64 for a float64 model).
  doc: str
  scalar: str = ''  # The TensorBoard scalar the loop recorder writes it as; '' for none.
  default: Any = None  # A default (fill value) makes the field optional in `StepReports(...)`.


# The per-step report, in one place: the in-graph loop stores these fields (`step.REPORT_DTYPES`),
# `StepReports` holds them and the loop recorder writes their scalars. Adding a field is one
# entry here (and its value in `step.guard` or the loop's step).
REPORT_FIELDS = (
    ReportField('step', tf.int64, 'global step of each batch after it was consumed (1-based)'),
    ReportField('loss', None, 'loss, averaged over replicas', scalar='loss'),
    ReportField('grad_norm', None, 'global gradient norm before clipping (inf or nan when '
                'non-finite)', scalar='grad_norm'),
    ReportField('clipped_grad_norm', None, "global gradient norm after the policies' "
                'transformations', scalar='grad_norm_clipped'),
    ReportField('loss_finite', tf.bool, 'whether the loss was finite'),
    ReportField('grads_finite', tf.bool, 'whether every gradient was finite'),
    ReportField('inputs_finite', tf.bool, 'whether the batch passed every input check'),
    ReportField('outputs_finite', tf.bool, 'whether the model outputs were finite'),
    ReportField('first_bad_grad', tf.int32, 'index (into `variable_paths`) of the first '
                'non-finite gradient, or -1'),
    ReportField('first_bad_input', tf.int32, 'index (into `input_paths`) of the first bad input '
                'tensor, or -1'),
    ReportField('applied', tf.bool, 'whether the update was applied'),
    ReportField('overflow', tf.bool, 'whether the step was skipped as an fp16 loss-scale '
                'overflow (not a fault)', scalar='overflow', default=False),
    ReportField('loss_scale', tf.float32, 'the dynamic loss scale the step used (1.0 without '
                'loss scaling)', scalar='loss_scale', default=1.0),
    ReportField('learning_rate', tf.float32, 'learning rate used for the step',
                scalar='learning_rate'),
)


class _StepReportsMethods:
  """The methods of `StepReports` (a dataclass generated from `REPORT_FIELDS` below)."""

  def __post_init__(self):
    step = self.step
    if step is None or np.ndim(step) != 1:
      raise TypeError(f'StepReports: step={step!r} must be a 1-D array, one global step per step.')
    n = np.shape(step)[0]
    for f in REPORT_FIELDS:
      value = getattr(self, f.name)
      if value is None:
        if f.default is None:
          raise TypeError(f'StepReports: missing report field {f.name!r}')
        dtype = np.float32 if isinstance(f.default, float) else type(f.default)
        value = np.full([n], f.default, dtype)
      value = np.asarray(value)
      if value.shape[:1] != (n,):
        raise TypeError(f'StepReports: {f.name} has {value.shape[:1]} values for {n} steps.')
      object.__setattr__(self, f.name, value)

  @property
  def num_steps(self) -> int:
    return int(self.step.shape[0])

  @classmethod
  def from_columns(cls, columns: Dict[str, np.ndarray], **context) -> 'StepReports':
    """StepReports from trusted columns: one numpy array of length n per field of
    `REPORT_FIELDS` (as `loop.unpack_reports` makes them), without `__init__`'s checks (the host
    loop builds one per loop of steps). `context`: the non-field attributes."""
    obj = object.__new__(cls)
    for name in _FIELD_NAMES:
      object.__setattr__(obj, name, columns[name])
    for name, default in _CONTEXT_DEFAULTS.items():
      object.__setattr__(obj, name, context.pop(name, default))
    if context:
      raise TypeError(f'StepReports: unknown attributes {sorted(context)}')
    return obj

  def clean(self) -> bool:
    """Whether every step was applied and none was faulty or an fp16 overflow."""
    cached = self.__dict__.get('_clean')
    if cached is None:
      cached = bool(self.applied.all() and self.inputs_finite.all() and self.loss_finite.all()
                    and self.grads_finite.all() and not self.overflow.any())
      object.__setattr__(self, '_clean', cached)
    return cached

  def fault(self, i: int) -> Optional[str]:
    """The kind of fault of step `i` ('input', 'loss', 'gradient'), 'overflow' for an fp16
    loss-scale overflow (skipped, but not a fault of the run), or None (see `fault_kind`)."""
    return fault_kind(inputs_finite=self.inputs_finite[i], loss_finite=self.loss_finite[i],
                      grads_finite=self.grads_finite[i], overflow=self.overflow[i])

  def offending_tensor(self, i: int) -> str:
    """Names the first offending tensor of step `i` (see `offending_tensor`)."""
    return offending_tensor(
        inputs_finite=self.inputs_finite[i], loss_finite=self.loss_finite[i],
        outputs_finite=self.outputs_finite[i], first_bad_input=int(self.first_bad_input[i]),
        first_bad_grad=int(self.first_bad_grad[i]), input_paths=self.input_paths,
        variable_paths=self.variable_paths)


# A frozen dataclass whose fields are `REPORT_FIELDS` (numpy arrays, one value per step; a field
# with a default may be left out), then the loop's context. Generated, so a new report field is
# one entry of REPORT_FIELDS.
StepReports = dataclasses.make_dataclass(
    'StepReports',
    [(f.name, Any, dataclasses.field(default=None)) for f in REPORT_FIELDS] + [
        ('variable_paths', Sequence[str], dataclasses.field(default=())),
        ('input_paths', Sequence[str], dataclasses.field(default=())),
        ('variables_finite', Optional[bool], dataclasses.field(default=None)),
    ],
    bases=(_StepReportsMethods,), frozen=True)
StepReports.__module__ = __name__
_FIELD_NAMES = tuple(f.name for f in REPORT_FIELDS)
_CONTEXT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(StepReports)
                     if f.name not in _FIELD_NAMES}
StepReports.__doc__ = """Per-step reports of one loop, as numpy arrays of length `num_steps` (read once per loop).

  Attributes:
    <each field of `REPORT_FIELDS`>: a numpy array, one value per step (e.g. `reports.loss`).
    variable_paths: names of the trainable variables, in layer order.
    input_paths: names of the input tensors, in the order of the batch's flattened structure.
    variables_finite: whether every model and optimizer variable was finite after the loop;
      None unless a policy reads it (`Policy.reads_variables_finite`).
  """


# The one description of a faulty step, used by every consumer (CheckNumerics, SkipNonFinite,
# Forensics, the loop recorder, provenance and replay): a step is faulty when its inputs, its
# loss or its gradients are non-finite, and the fault kind is the first of those that failed. An
# fp16 loss-scale overflow (DynamicLossScale) is skipped too, but it is no fault of the run.
def fault_kind(*, inputs_finite, loss_finite, grads_finite, overflow=False) -> Optional[str]:
  """'input', 'loss' or 'gradient': the first check a step failed; 'overflow' for an fp16
  loss-scale overflow; None when it was finite."""
  if overflow:
    return 'overflow'
  if not inputs_finite:
    return 'input'
  if not loss_finite:
    return 'loss'
  if not grads_finite:
    return 'gradient'
  return None


def step_faulty(report) -> tf.Tensor:
  """In-graph form of `fault_kind(...) not in (None, 'overflow')`, from a step's report tensors."""
  faulty = tf.logical_not(tf.reduce_all(tf.stack(
      [report['inputs_finite'], report['loss_finite'], report['grads_finite']])))
  if 'overflow' in report:
    faulty = tf.logical_and(faulty, tf.logical_not(report['overflow']))
  return faulty


def offending_tensor(*, inputs_finite, loss_finite, outputs_finite, first_bad_input: int,
                     first_bad_grad: int, input_paths: Sequence[str],
                     variable_paths: Sequence[str]) -> str:
  """Names a faulty step's first offending tensor.

  E.g. 'input features/image', 'loss; first non-finite gradient of net/dense_0/kernel',
  'gradient of net/dense_1/kernel', or 'none' for a finite step.

  Args:
    inputs_finite, loss_finite, outputs_finite: the step's flags.
    first_bad_input: index into `input_paths` of the first bad input tensor, or -1.
    first_bad_grad: index into `variable_paths` of the first non-finite gradient, or -1.
    input_paths, variable_paths: names of the flattened inputs and of the trainable variables.
  """
  if not inputs_finite:
    j = first_bad_input
    return 'input ' + (input_paths[j] if 0 <= j < len(input_paths) else '?')
  j = first_bad_grad
  gradient = ('gradient of ' + variable_paths[j]) if 0 <= j < len(variable_paths) else ''
  if not loss_finite:
    name = 'loss (model outputs already non-finite)' if not outputs_finite else 'loss'
    return f'{name}; first non-finite {gradient}' if gradient else name
  return gradient or 'none'


def first_false(flags: Sequence[bool]) -> int:
  """Host-side twin of `numerics.first_false`: index of the first False, or -1."""
  for i, flag in enumerate(flags):
    if not flag:
      return i
  return -1


def flatten_inputs(features, labels):
  """The flattened input tensors of a batch, in the order `StepReports.input_paths` names them."""
  return tf.nest.flatten({'features': features, 'labels': labels})


def input_paths(features, labels):
  """Names of the flattened input tensors, e.g. 'features/image', 'labels'."""
  def walk(prefix, value):
    # Same order as tf.nest.flatten: dict keys sorted, sequences in order.
    if isinstance(value, dict):
      return [p for k in sorted(value) for p in walk(f'{prefix}/{k}', value[k])]
    fields = compat.namedtuple_fields(value)
    if fields is not None:  # namedtuple: by field name.
      return [p for k in fields for p in walk(f'{prefix}/{k}', getattr(value, k))]
    if isinstance(value, (list, tuple)):
      return [p for i, v in enumerate(value) for p in walk(f'{prefix}/{i}', v)]
    return [prefix]

  return walk('features', features) + walk('labels', labels)


class PolicyContext:
  """What a policy's host half may read when it decides: a small, read-only view of the run.

  `decide` and `handle_escalation` get this, never the Trainer: they return decisions (and may
  update the policy's own variables), and the controller carries the decisions out.

  Attributes:
    step: the global step after the loop.
    data_position: index in the dataset's stream of the next batch the iterator will yield.
    lr_scale: the learning-rate scale (1.0 = as configured; a rollback backs it off).
  """

  def __init__(self, *, step: int, data_position: int, lr_scale: float,
               variables_finite: Callable[[], bool],
               checkpoints: Callable[[], Sequence[Any]] = tuple,
               last_good_checkpoint: Callable[[], Optional[Any]] = lambda: None):
    """Initialises the view; what costs a graph run or a look at the disk is read on demand.

    Args:
      step, data_position, lr_scale: see the attributes.
      variables_finite: returns whether every model and optimizer variable is finite.
      checkpoints: returns the committed checkpoints (`checkpointing.Entry`), oldest first.
      last_good_checkpoint: returns the newest known-good checkpoint, or None.
    """
    self.step = step
    self.data_position = data_position
    self.lr_scale = lr_scale
    self._variables_finite = variables_finite
    self._checkpoints = checkpoints
    self._last_good_checkpoint = last_good_checkpoint

  def variables_finite(self) -> bool:
    """Whether every model and optimizer variable is finite now (one graph run)."""
    return bool(self._variables_finite())

  def checkpoints(self) -> Sequence[Any]:
    """The committed checkpoints, oldest first; () without a model_dir."""
    return tuple(self._checkpoints())

  def last_good_checkpoint(self) -> Optional[Any]:
    """The newest known-good (rollback target) checkpoint, or None."""
    return self._last_good_checkpoint()

  def __getattr__(self, name):
    # Only reached for names the view does not have: a policy written against the Trainer
    # (context.emit, context.global_step, context.lr_control...) gets the contract in one line.
    raise AttributeError(
        f'PolicyContext has no {name!r}: decide() gets a read-only view (step, data_position, '
        'lr_scale, variables_finite(), checkpoints(), last_good_checkpoint()); to act on the run, '
        'return Decision(action=ACT) and do it in execute(decision, trainer).')


class Policy(tf.Module):
  """Base class of stable_train policies. Override only the hooks a policy needs.

  Set-up hook (eager, once, before the step is traced): `build`.
  In-graph hooks (traced into the train step; use tensor ops, no Python `if` on tensors):
    `check_batch`, `sanitize_labels`, `transform_loss`, `transform_gradients`, `allow_update`,
    `update_state`; and `end_step`, traced into the loop around the step (never compiled with XLA).
  Host hooks (eager, once per loop): `decide`, `handle_escalation`, `execute`, `is_healthy`,
    `summary`; after each evaluation: `decide_eval`. `decide`, `handle_escalation` and
    `decide_eval` only decide: from the reports (or eval results), a `PolicyContext` and the
    policy's own variables (which they may update: that is the policy's state transition).
    Every action on the run (files, events, logs, a restore, the learning rate) happens in
    `execute`, which the controller calls with the Trainer.
  """

  # Set True by a policy whose host half reads `StepReports.variables_finite`: the loop then
  # checks every model and optimizer variable once, in the same graph, at its end.
  reads_variables_finite = False

  # False for a policy whose `decide` returns None on every clean loop (`StepReports.clean()`:
  # every step applied, none faulty or an overflow) whatever its state: the controller then does
  # not call it on such loops, which keeps a healthy run's host loop short.
  decides_on_clean_loops = True

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
    final `stats['grad_norm']`.

    Args:
      grads: list of aggregated gradients (one per trainable variable, in layer order).
      stats: dict of the step's tensors: 'loss', 'loss_finite', 'inputs_finite',
        'outputs_finite', the `MEASURED_STATS` ('grad_norm': global norm, 'grads_finite': scalar
        bool, 'grad_finite_flags': one bool per gradient), plus the Python values
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

  def update_state(self, report, applied: tf.Tensor) -> None:
    """Updates the policy's variables after the apply/skip decision of one step.

    Args:
      report: dict of the step's report tensors (see `StepReports`), in cross-replica context.
      applied: scalar bool, whether the update was applied.
    """
    del report, applied

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

  def execute(self, decision: Decision, trainer) -> Optional[str]:
    """Carries out a decision this policy returned: an ACT, or a ROLLBACK it resolved to.

    Args:
      decision: the decision (`decision.policy` is this policy's name).
      trainer: the Trainer, the only place where a policy acts on the run (its `emit`,
        `checkpoints`, `restore_latest`, `skip_batches`, `lr_control`, `scalars`, ...).

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
