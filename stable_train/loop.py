"""The traced train step and the in-graph loop of steps: (state, batch) -> (new state, report)."""

import functools
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from stable_train import compat
from stable_train import distribute
from stable_train import errors
from stable_train import interfaces
from stable_train import numerics
from stable_train import step as step_lib



class TrainLoop:
  """The one traced step of a Trainer and the `tf.function` loop that runs it `n` times.

  The step calls the Trainer's overridable traced hooks (`loss_and_gradients`, `apply_gradients`,
  `forward_state`) and the policies' in-graph hooks; it updates the `TrainState` counters in the
  graph and returns one report per step (`step.REPORT_DTYPES`), which the loop stacks.
  """

  def __init__(self, trainer):
    """Args: trainer: the `Trainer` whose hooks, policies and state the step uses."""
    self._trainer = trainer
    self.step_fn = None
    self.loop_fn = None
    self.checks_variables = False
    # (iterator, the loop's concrete function for it, {steps: bound call}).
    self._concrete = (None, None, None)

  @property
  def built(self) -> bool:
    return self.loop_fn is not None

  def build(self) -> None:
    """Wraps the step and the loop in `tf.function`s (once; traced on the first `run`)."""
    t = self._trainer
    # Under a strategy the replica computation is traced inline in the loop: a nested tf.function
    # around code that all-reduces breaks MirroredStrategy's merge_call (TF 2.21), and so jit_compile
    # is refused there (distribute.check_jit). One device: the whole step is one function.
    # The step returns its report packed into one float64 row (`pack_report`), inside the XLA
    # cluster where it fuses; the report dict too only when a policy's `end_step` reads it.
    self.needs_report = any(type(p).end_step is not interfaces.Policy.end_step
                            for p in t.policies)
    if t._distributed_input:  # pylint: disable=protected-access
      self.step_fn = self.packed_step
    else:
      self.step_fn = tf.function(self.packed_step, jit_compile=t.jit_compile or None)
    self.checks_variables = any(p.reads_variables_finite for p in t.policies)
    self.loop_fn = tf.function(self.loop)

  def run(self, iterator, n: int) -> Dict[str, tf.Tensor]:
    """Runs one traced loop of `n` steps; turns in-graph check_numerics failures into errors."""
    t = self._trainer
    try:
      return self._loop_for(iterator, n)()
    except tf.errors.InvalidArgumentError as e:
      if 'optional does not match' in (e.message or ''):
        # A restored tf.data iterator yields elements of the checkpointed shape.
        # TF's wording: "Expected" is this run's pipeline, "Actual" the checkpointed one.
        found = re.search(r'Expected: (\[[^\]]*\])\. Actual: (\[[^\]]*\])', e.message)
        detail = (f'checkpointed batches {found.group(2)}, this pipeline {found.group(1)}'
                  if found else 'shapes differ')
        keeper = t.checkpoints
        raise errors.ConfigError(
            'the input pipeline differs from the one checkpointed in '
            f'{keeper.directory if keeper else "the checkpoint"} (batch size or element shape '
            f'changed: {detail}); use the batch size and shapes the run started with, or a new '
            '--model_dir to start afresh.') from None
      # The op's message ("non-finite gradient of <path> : Tensor had NaN values") sits among
      # the graph's traceback lines.
      lines = [l for l in (e.message or '').splitlines() if 'non-finite' in l]
      if not lines:
        raise
      message = lines[-1]
      step = int(t.global_step.numpy()) + 1
      raise errors.NumericsError(
          f"non-finite value at step {step}: {message.strip()}; CheckNumerics(mode='raise') "
          "stops here; use mode='flag' with SkipNonFinite to skip it.") from None

  def _loop_for(self, iterator, n: int):
    """A no-argument callable that runs the loop's concrete function for (`iterator`, `n`).

    Looked up once per iterator: calling the concrete function skips `tf.function`'s per-call
    signature matching. Its flat inputs (the iterator's resource and the step count) are bound
    once per (iterator, n) too and handed to the concrete function's flat call, which skips the
    structured binding of every call (together ~0.1 ms a call on this machine, about what one
    step of the quickstart MLP takes at 10 steps per loop). A new iterator (a new fit, a rebuilt
    input) is looked up again, so a pipeline with another element structure gets its own trace.
    Where this TensorFlow has no flat call (a private API), the public call is used.
    """
    cached_iterator, concrete, calls = self._concrete
    if cached_iterator is not iterator:
      concrete = self.loop_fn.get_concrete_function(iterator, tf.constant(1, tf.int64))
      calls = {}
      self._concrete = (iterator, concrete, calls)
    call = calls.get(n)
    if call is None:
      count = tf.constant(n, tf.int64)
      call = (compat.flat_caller(concrete, (iterator, count))
              or functools.partial(concrete, iterator, count))
      calls[n] = call
    return call

  # ------------------------------------------------------------------------------------------
  # Traced.
  # ------------------------------------------------------------------------------------------
  def restore_forward_state(self, snapshot):
    """Assigns a snapshot taken by `replica_compute` back (skip branch; per replica). Traced."""
    for v, value in zip(self._trainer.forward_state(), snapshot):
      v.assign(value)

  def replica_compute(self, batch):
    """Per replica: snapshot of the forward state, loss, aggregated gradients, checks and policy
    transforms, and this replica's (labels, predictions) for the metrics (() without metrics).
    Traced."""
    t = self._trainer
    # Read before the forward pass assigns: automatic control dependencies order the reads and
    # the layers' assigns of each variable in program order (under XLA too).
    snapshot = [tf.identity(v) for v in t.forward_state()]
    t._traced_predictions = None  # pylint: disable=protected-access
    loss, grads, input_ok, outputs_ok = t.loss_and_gradients(batch)
    metric_inputs = ()
    if t.metrics:
      if t._traced_predictions is None:  # pylint: disable=protected-access
        raise errors.ConfigError(
            'Trainer: metrics need the predictions, but this compute_loss does not call '
            'self.forward(features, training); call it, or drop the metrics.')
      metric_inputs = (t.split_batch(batch)[1], t._traced_predictions)  # pylint: disable=protected-access
    inputs_bad = tf.cast(tf.logical_not(input_ok), tf.float32)
    outputs_bad = tf.cast(tf.logical_not(outputs_ok), tf.float32)
    grads, loss, inputs_bad, outputs_bad = step_lib.aggregate(
        grads, loss, inputs_bad, outputs_bad, t.strategy.num_replicas_in_sync)
    grads, report = step_lib.guard(grads, loss, inputs_bad, outputs_bad, t.policies,
                                   t._variable_paths, t.jit_compile,  # pylint: disable=protected-access
                                   loss_scale=t.loss_scale)
    return grads, report, snapshot, metric_inputs

  def step(self, batch):
    """One train step: compute on every replica, then one agreed apply-or-skip. Traced."""
    with self._trainer.strategy.scope():  # Cross-replica context, also when fit() is called outside it.
      return self._step_in_scope(batch)

  def packed_step(self, batch):
    """`step`, its report packed into one row: (row, report dict or None). Traced."""
    report = self.step(batch)
    return self.pack_report(report), (report if self.needs_report else None)

  def pack_report(self, report) -> tf.Tensor:
    """One float64 vector of the report's `REPORT_FIELDS`, in `report_layout` order (float64
    holds every field exactly: int64 steps below 2**53, float32 and float64 values, flags as 0/1).
    One stack and one cast per dtype, not a cast per field (each op costs microseconds in TF's
    executor, every step). Traced."""
    dtypes = self._trainer._report_dtypes  # pylint: disable=protected-access
    parts = []
    for dtype, names in report_groups(dtypes):
      values = [report[k] if report[k].dtype == dtype else tf.cast(report[k], dtype)
                for k in names]
      parts.append(tf.cast(tf.stack(values), tf.float64))
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)

  def apply_aggregated(self, grads, metric_inputs=()):
    """Per replica, inside the agreed apply: applies the already aggregated gradients and
    updates the metrics with this replica's (labels, predictions). Traced."""
    self._trainer.apply_gradients(list(grads))
    if metric_inputs:  # Applied steps only: a skipped batch never counts.
      # Under a strategy the metric variables are sync-on-read sums (created in its scope):
      # each replica adds its own shard; reading them sums the replicas.
      self._trainer.update_metrics(*metric_inputs)

  def _step_in_scope(self, batch):
    t = self._trainer
    state = t.state
    distributed = t._distributed_input  # pylint: disable=protected-access
    random_states = t._random_states  # pylint: disable=protected-access
    # The process-wide generators (a layer drawing keras.random.* without a seed) move in the
    # forward pass too: read here, before it (cross-replica context), put back on a skip.
    random_snapshot = [tf.identity(v) for v in random_states]
    grads, report, snapshot, metric_inputs = t.strategy.run(self.replica_compute, (batch,))
    # Every field is computed from aggregated values, so all replicas agree: take the first copy.
    report = {k: t.strategy.experimental_local_results(v)[0] for k, v in report.items()}
    applied = report['applied']
    learning_rate = tf.cast(t.optimizer.learning_rate, tf.float32)

    def apply():
      if distributed:
        # The cond is taken in cross-replica context on the one agreed flag; the apply itself must
        # run in replica context (Keras's optimizer merge_calls from there), without a second
        # all-reduce of the already aggregated gradients.
        # (Switched off around strategy.run, not inside it: replicas are traced in threads.)
        with distribute.gradients_already_aggregated(t.optimizer):
          t.strategy.run(self.apply_aggregated, (grads, metric_inputs))
      else:
        self.apply_aggregated(grads, metric_inputs)
      return tf.constant(True)

    def skip():
      # The optimizer never ran; the forward pass's assigns (BatchNorm statistics, seed states)
      # are undone, so every model and optimizer variable is bit-identical after a skip.
      if snapshot:
        if distributed:
          t.strategy.run(self.restore_forward_state, (snapshot,))
        else:
          self.restore_forward_state(snapshot)
      for v, value in zip(random_states, random_snapshot):
        v.assign(value)
      return tf.constant(False)

    tf.cond(applied, apply, skip)
    for p in t.policies:
      p.update_state(report, applied)
    state.applied_steps.assign_add(tf.cast(applied, tf.int64))
    state.skipped_steps.assign_add(tf.cast(tf.logical_not(applied), tf.int64))
    if t.loss_scale is not None:  # Without loss scaling no step is an overflow: no op.
      state.overflow_steps.assign_add(tf.cast(report['overflow'], tf.int64))
    state.input_faults.assign_add(tf.cast(tf.logical_not(report['inputs_finite']), tf.int64))
    with tf.control_dependencies([applied]):
      report['step'] = state.global_step.assign_add(1)
    report['learning_rate'] = learning_rate
    return report

  def loop(self, iterator, num_steps):
    """Runs up to `num_steps` steps in one graph (stops early when the data ends). Traced.

    Returns a dict: 'reports', a float64 [steps, fields] matrix, one `pack_report` row per step
    (`unpack_reports` turns it back into typed columns), so the loop keeps one TensorArray and
    the host makes one transfer; 'data_ended'; 'skipped_steps'
    (the counter after the loop); and 'variables_finite' when a policy reads it.
    """
    t = self._trainer
    names = list(t._report_dtypes)  # pylint: disable=protected-access
    rows = tf.TensorArray(tf.float64, size=0, dynamic_size=True, element_shape=[len(names)])
    data_ended = tf.constant(False)
    for i in tf.range(num_steps):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        data_ended = tf.constant(True)
        break
      batch = optional.get_value()
      row, report = self.step_fn(batch)
      rows = rows.write(tf.cast(i, tf.int32), row)
      if report is not None:
        stop = self._end_step(batch, report)
        if stop is not None:  # Python check at trace time: no policy asks, no extra graph.
          if stop:
            break
    outputs = {'reports': rows.stack(), 'data_ended': data_ended,
               'skipped_steps': tf.identity(t.state.skipped_steps)}
    if self.checks_variables:
      outputs['variables_finite'] = tf.reduce_all(
          numerics.finite_flags(t._all_variables()))  # pylint: disable=protected-access
    return outputs

  def _end_step(self, batch, report) -> Optional[tf.Tensor]:
    """Calls every policy's `end_step` hook; returns 'end the loop now' or None. Traced."""
    local = tf.nest.map_structure(self._local_value, batch)
    stop = None
    for p in self._trainer.policies:
      verdict = p.end_step(local, report)
      if verdict is not None:
        stop = verdict if stop is None else tf.logical_or(stop, verdict)
    return stop

  def _local_value(self, value):
    """One tensor from a possibly per-replica value (replica parts concatenated on axis 0)."""
    parts = self._trainer.strategy.experimental_local_results(value)
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)


def report_groups(dtypes) -> List[Tuple[tf.DType, List[str]]]:
  """The report's fields grouped by dtype, groups in order of first appearance in `dtypes`."""
  groups: Dict[tf.DType, List[str]] = {}
  for k, d in dtypes.items():
    groups.setdefault(d, []).append(k)
  return list(groups.items())


def report_layout(dtypes) -> List[str]:
  """The fields in the order `pack_report` lays them out in a row (grouped by dtype)."""
  return [k for _, names in report_groups(dtypes) for k in names]


def report_columns(dtypes) -> Tuple[Tuple[str, int, type], ...]:
  """(field, column, numpy dtype) per field of a packed report matrix, for `unpack_reports`."""
  return tuple((k, j, dtypes[k].as_numpy_dtype) for j, k in enumerate(report_layout(dtypes)))


def unpack_reports(matrix, dtypes) -> Dict[str, np.ndarray]:
  """The typed per-field columns of a loop's packed 'reports' matrix (see `TrainLoop.loop`).

  Args:
    matrix: float64 numpy array [steps, fields], the fields in `report_layout(dtypes)` order.
    dtypes: field name -> tf.DType, as the loop packed them (`Trainer._report_dtypes`), or its
      `report_columns` (computed once by a caller that unpacks every loop).
  """
  columns = dtypes if isinstance(dtypes, tuple) else report_columns(dtypes)
  by_field = matrix.T
  return {k: by_field[j].astype(d) for k, j, d in columns}
