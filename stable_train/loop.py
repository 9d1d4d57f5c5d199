"""The traced train step and the in-graph loop of steps: (state, batch) -> (new state, report)."""

import re
from typing import Dict, Optional

import tensorflow as tf

from stable_train import distribute
from stable_train import errors
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

  @property
  def built(self) -> bool:
    return self.loop_fn is not None

  def build(self) -> None:
    """Wraps the step and the loop in `tf.function`s (once; traced on the first `run`)."""
    t = self._trainer
    # Under a strategy the replica computation is traced inline in the loop: a nested tf.function
    # around code that all-reduces breaks MirroredStrategy's merge_call (TF 2.21), and so jit_compile
    # is refused there (distribute.check_jit). One device: the whole step is one function.
    if t._distributed_input:  # pylint: disable=protected-access
      self.step_fn = self.step
    else:
      self.step_fn = tf.function(self.step, jit_compile=t.jit_compile or None)
    self.checks_variables = any(p.reads_variables_finite for p in t.policies)
    self.loop_fn = tf.function(self.loop)

  def run(self, iterator, n: int) -> Dict[str, tf.Tensor]:
    """Runs one traced loop of `n` steps; turns in-graph check_numerics failures into errors."""
    t = self._trainer
    try:
      return self.loop_fn(iterator, tf.constant(n, tf.int64))
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
    state.overflow_steps.assign_add(tf.cast(report['overflow'], tf.int64))
    state.input_faults.assign_add(tf.cast(tf.logical_not(report['inputs_finite']), tf.int64))
    with tf.control_dependencies([applied]):
      report['step'] = state.global_step.assign_add(1)
    report['learning_rate'] = learning_rate
    return report

  def loop(self, iterator, num_steps):
    """Runs up to `num_steps` steps in one graph (stops early when the data ends). Traced."""
    t = self._trainer
    dtypes = t._report_dtypes  # pylint: disable=protected-access
    arrays = {k: tf.TensorArray(d, size=0, dynamic_size=True) for k, d in dtypes.items()}
    data_ended = tf.constant(False)
    for i in tf.range(num_steps):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        data_ended = tf.constant(True)
        break
      batch = optional.get_value()
      report = self.step_fn(batch)
      index = tf.cast(i, tf.int32)
      arrays = {k: arrays[k].write(index, tf.cast(report[k], dtypes[k])) for k in arrays}
      stop = self._end_step(batch, report)
      if stop is not None:  # Python check at trace time: no policy asks, no extra graph.
        if stop:
          break
    outputs = {k: a.stack() for k, a in arrays.items()}
    outputs['data_ended'] = data_ended  # Not a policy's `end_step`: the data ran out.
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
