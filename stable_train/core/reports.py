"""The per-step report: its fields, the host-side `StepReports`, the one fault predicate, and the
packed form the in-graph loop returns.

Part of the core (no I/O, no Trainer): the traced step fills a report dict, `pack_report` lays it
out as one float64 row, the loop stacks the rows, `unpack_reports` turns them back into typed
columns and `StepReports` holds one loop of them for the host.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from stable_train import compat


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
    ReportField('flagged', tf.bool, "whether a policy's in-graph detector asked the host to "
                'decide on the step (`Policy.update_state` returned True)', default=False),
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
    """Whether every step was applied and none was faulty, an fp16 overflow or flagged."""
    cached = self.__dict__.get('_clean')
    if cached is None:
      cached = bool(self.applied.all() and self.inputs_finite.all() and self.loss_finite.all()
                    and self.grads_finite.all() and not self.overflow.any()
                    and not self.flagged.any())
      object.__setattr__(self, '_clean', cached)
    return cached

  def fault(self, i: int) -> Optional[str]:
    """The kind of fault of step `i` ('input', 'loss', 'gradient'), 'overflow' for an fp16
    loss-scale overflow (skipped, but not a fault of the run), or None (see `fault_kind`)."""
    return fault_kind(inputs_finite=self.inputs_finite[i], loss_finite=self.loss_finite[i],
                      grads_finite=self.grads_finite[i], overflow=self.overflow[i])

  def last_model_fault(self) -> Optional[int]:
    """The step of the loop's last fault of the model, or None: a skip that was neither an fp16
    overflow (the loss scale's) nor a batch that failed an input check (the data's); both left
    the state as it was, so a checkpoint after them is as good as one before."""
    if self.clean():
      return None
    faulty = self.step[~(self.applied | self.overflow | ~self.inputs_finite)]
    return int(faulty[-1]) if faulty.size else None

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
        ('observed', Optional[Dict[Any, Any]], dataclasses.field(default=None)),
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
      None unless a policy reads it (a `Recovery`, e.g. Rollback).
    observed: the values of the `LoopObserver`s' `observed_variables` as the loop left them, by
      `state.observed_key` (the host writes them only between loops), read in the loop's graph;
      None where the front door does not (`state.host_value` then reads the variable).
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


# -- the packed form ------------------------------------------------------------------------------
# Report fields with their dtypes; `None` stands for the run's report float type (`report_dtypes`).
REPORT_DTYPES = {f.name: f.dtype for f in REPORT_FIELDS}


def report_dtypes(float_dtype: tf.DType = tf.float32) -> Dict[str, tf.DType]:
  """`REPORT_DTYPES` with the loss and norms in `float_dtype` (float64 for a float64 model, so a
  loss beyond float32's range is reported as the finite value it is)."""
  return {k: float_dtype if d is None else d for k, d in REPORT_DTYPES.items()}


def report_groups(dtypes) -> List[Tuple[tf.DType, List[str]]]:
  """The report's fields grouped by dtype, groups in order of first appearance in `dtypes`."""
  groups: Dict[tf.DType, List[str]] = {}
  for k, d in dtypes.items():
    groups.setdefault(d, []).append(k)
  return list(groups.items())


def report_layout(dtypes) -> List[str]:
  """The fields in the order `pack_report` lays them out in a row (grouped by dtype)."""
  return [k for _, names in report_groups(dtypes) for k in names]


def pack_report(report: Dict[str, tf.Tensor], dtypes) -> tf.Tensor:
  """One float64 vector of the report's fields, in `report_layout` order. Traced.

  float64 holds every field exactly (int64 steps below 2**53, float32 and float64 values, flags as
  0/1). One stack and one cast per dtype, not a cast per field: each op costs microseconds in
  TF's executor, every step.
  """
  parts = []
  for dtype, names in report_groups(dtypes):
    values = [report[k] if report[k].dtype == dtype else tf.cast(report[k], dtype)
              for k in names]
    parts.append(tf.cast(tf.stack(values), tf.float64))
  return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)


def report_columns(dtypes) -> Tuple[Tuple[str, int, type], ...]:
  """(field, column, numpy dtype) per field of a packed report matrix, for `unpack_reports`."""
  return tuple((k, j, dtypes[k].as_numpy_dtype) for j, k in enumerate(report_layout(dtypes)))


def unpack_reports(matrix, dtypes) -> Dict[str, np.ndarray]:
  """The typed per-field columns of a loop's packed report matrix.

  Args:
    matrix: float64 numpy array [steps, fields], the fields in `report_layout(dtypes)` order.
    dtypes: field name -> tf.DType, as the loop packed them, or its `report_columns` (computed
      once by a caller that unpacks every loop).
  """
  columns = dtypes if isinstance(dtypes, tuple) else report_columns(dtypes)
  by_field = matrix.T
  return {k: by_field[j].astype(d) for k, j, d in columns}
