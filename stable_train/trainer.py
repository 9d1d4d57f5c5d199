"""The Trainer: one traced train step, an in-graph loop of steps, and the eager host loop."""

import logging
import os
import time
from typing import Any, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from stable_train import checkpointing
from stable_train import clipping
from stable_train import distribute
from stable_train import errors
from stable_train import events as events_lib
from stable_train import faults as faults_lib
from stable_train import host
from stable_train import interfaces
from stable_train import lr as lr_lib
from stable_train import numerics
from stable_train import policies as policies_lib
from stable_train import precision as precision_lib
from stable_train import provenance
from stable_train import step as step_lib

log = logging.getLogger('stable_train')

EMPTY_DATASET = ('the dataset is empty (not one batch): check train.dataset_fn, its files, and a '
                  'batch_size larger than the data with drop_remainder=True.')


def _tf_global_generator() -> tf.random.Generator:
  """TensorFlow's global generator; created from the global seed when one is set (TF would seed
  it from the OS otherwise, and two runs of one seeded config would then checkpoint different
  random states)."""
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  from tensorflow.python.ops import stateful_random_ops  # pylint: disable=g-import-not-at-top
  seed = context.global_seed()
  if getattr(stateful_random_ops, 'global_generator', None) is None and seed is not None:
    tf.random.set_global_generator(tf.random.Generator.from_seed(seed))
  return tf.random.get_global_generator()


def random_state_variables() -> List[tf.Variable]:
  """The process-wide random states a run draws from: TensorFlow's global generator and Keras's
  global SeedGenerator (created here if they do not exist yet, so every run checkpoints the same
  structure)."""
  states = [_tf_global_generator().state]
  try:  # Keras keeps its global SeedGenerator in private state.
    from keras.src.random import seed_generator  # pylint: disable=g-import-not-at-top
    states.append(seed_generator.global_seed_generator().state)
  except (ImportError, AttributeError):
    pass
  return states


def default_policies() -> List[interfaces.Policy]:
  """The default stack: CheckNumerics('flag'), AdaptiveClip(), SkipNonFinite(max_consecutive=10).

  AdaptiveClip clips only spikes above the run's own grad-norm statistics, so a healthy run trains
  as it would bare; `ClipByGlobalNorm` remains for a fixed norm.
  """
  return [policies_lib.CheckNumerics(), clipping.AdaptiveClip(), policies_lib.SkipNonFinite()]


class Trainer:
  """Trains a model with a traced GradientTape step guarded by policies; keeps going past NaN.

  Meant to be overridden (all optional):
    - `compute_loss(batch, training)` — traced: the scalar loss of one (per-replica) batch.
    - `forward(features, training)` — traced: the model's outputs.
    - `split_batch(batch)` — traced: (features, labels) from one dataset element.
    - `apply_gradients(grads)` — traced: applies the (aggregated, clipped) gradients.
    - `on_loop_end(reports)` — eager: called after each loop with its `StepReports`.
    - `on_event(record)` — eager: called with each record written to events.jsonl.
  Everything else (checkpoints, summaries, decisions) is the host loop's job.
  """

  def __init__(self, *, model, optimizer, loss, policies: Optional[Sequence] = None,
               model_dir: Optional[str], steps_per_loop: int = 1, jit_compile: bool = False,
               checkpoint_every: int = 100, max_checkpoints: int = 5, keep_good_checkpoints: int = 3,
               healthy_window: int = 50, log_every: int = 10, summary_every: int = 10,
               max_refused_checkpoints: int = 2, strategy=None,
               faults: Optional[faults_lib.Faults] = None):
    """Initialises the Trainer.

    Args:
      model: a Keras 3 model, or any callable `tf.Module` with `trainable_variables`.
      optimizer: a Keras 3 optimizer.
      loss: callable `(labels, predictions) -> scalar` (Keras losses included).
      policies: list of `Policy` objects; None means `default_policies()` (CheckNumerics,
        AdaptiveClip, SkipNonFinite). `[]` means none (a bare train step).
      model_dir: directory for checkpoints, events.jsonl, summary.json and TensorBoard files;
        None keeps nothing on disk (library use, tests).
      steps_per_loop: train steps run inside one `tf.function` call; the host reads reports once
        per loop.
      jit_compile: compile the step with XLA.
      checkpoint_every: write a checkpoint every this many global steps (rounded to loop ends).
      max_checkpoints: how many of the newest checkpoints to keep.
      keep_good_checkpoints: how many known-good checkpoints to keep besides the newest.
      healthy_window: a checkpoint is marked good (a rollback target) only if no fault (skip,
        spike, rollback) happened in this many steps before it and every variable is finite.
      log_every: write a progress line every this many steps.
      summary_every: write TensorBoard scalars every this many steps (and on every fault).
      max_refused_checkpoints: a checkpoint is refused while a variable is non-finite; this
        many refusals in a row are a fault (a Rollback policy takes over, otherwise the run
        aborts naming the variable), so a run never ends "completed" with a stale checkpoint.
      strategy: a `tf.distribute.Strategy`; None means the current one (the default strategy).
      faults: a `faults.Faults` plan to rehearse failure (put before the policies); None: none.
    """
    for name, value, example in (('model', model, 'models.mlp()'),
                                 ('optimizer', optimizer, 'keras.optimizers.Adam()'),
                                 ('loss', loss, 'keras.losses.MeanSquaredError()')):
      if isinstance(value, type):  # gin `@keras.optimizers.Adam` without `()` passes the class.
        raise errors.ConfigError(
            f'Trainer: {name}={value.__name__} is a class; pass an instance, e.g. {example} '
            f'(in gin: add "()" after the reference).')
    if model is None or not callable(model) or not hasattr(model, 'trainable_variables'):
      raise errors.ConfigError(
          f'Trainer: model={model!r} must be a Keras model or a callable tf.Module with '
          'trainable_variables.')
    if optimizer is None or not hasattr(optimizer, 'apply_gradients'):
      raise errors.ConfigError(
          f'Trainer: optimizer={optimizer!r} must be a Keras 3 optimizer (e.g. keras.optimizers.Adam()).')
    if loss is None or not callable(loss):
      raise errors.ConfigError(f'Trainer: loss={loss!r} must be callable (labels, predictions) -> scalar.')
    precision_lib.check_optimizer(optimizer)
    if policies is None:
      policies = default_policies()
    if isinstance(policies, (interfaces.Policy, str)) or not hasattr(policies, '__iter__'):
      raise errors.ConfigError(
          f'Trainer: policies={policies!r} must be a list of policies, e.g. [SkipNonFinite()].')
    policies = list(policies)
    if faults is not None:
      if not isinstance(faults, faults_lib.Faults):
        raise errors.ConfigError(f'Trainer: faults={faults!r} must be a stable_train Faults plan.')
      policies = [faults] + policies  # First: its loss hook and host faults come before the rest.
    for p in policies:
      if not isinstance(p, interfaces.Policy):
        raise errors.ConfigError(
            f'Trainer: policies contains {p!r}, which is not a stable_train Policy.')
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
      raise errors.ConfigError(f'Trainer: policy names must be unique, got {names}; pass name=... .')
    for p in policies:
      # A policy's variables are one run's state (skip counters, detector windows, rollbacks): a
      # second Trainer would start with the first one's counts.
      if getattr(p, '_stable_train_owned', False):
        raise errors.ConfigError(
            f'Trainer: policy {p.name!r} ({type(p).__name__}) already belongs to another '
            'Trainer; its counters are that run\'s state: create a new policy for each Trainer.')
    if model_dir is not None and (not isinstance(model_dir, (str, os.PathLike)) or not str(model_dir)):
      raise errors.ConfigError(f'Trainer: model_dir={model_dir!r} must be a directory path or None.')
    if not isinstance(jit_compile, bool):
      raise errors.ConfigError(f'Trainer: jit_compile={jit_compile!r} must be True or False.')
    positive = lambda name, value: errors.check_int('Trainer', name, value, minimum=1)
    self.steps_per_loop = positive('steps_per_loop', steps_per_loop)
    self.checkpoint_every = positive('checkpoint_every', checkpoint_every)
    self.max_checkpoints = positive('max_checkpoints', max_checkpoints)
    self.keep_good_checkpoints = positive('keep_good_checkpoints', keep_good_checkpoints)
    self.log_every = positive('log_every', log_every)
    self.summary_every = positive('summary_every', summary_every)
    self.healthy_window = errors.check_int('Trainer', 'healthy_window', healthy_window)
    self.max_refused_checkpoints = positive('max_refused_checkpoints', max_refused_checkpoints)
    if (precision_lib.compute_dtype(model) == 'float16' and
        not any(isinstance(p, precision_lib.DynamicLossScale) for p in policies)):
      # float16 gradients underflow without loss scaling: never train fp16 unscaled.
      with (strategy or tf.distribute.get_strategy()).scope():
        policies.insert(0, precision_lib.default_loss_scale())
    scales = [p for p in policies if isinstance(p, precision_lib.DynamicLossScale)]
    if len(scales) > 1:
      raise errors.ConfigError('Trainer: policies hold more than one DynamicLossScale; keep one.')
    self.loss_scale = scales[0] if scales else None

    self.model = model
    self.optimizer = optimizer
    self.loss_fn = loss
    self.policies = policies
    self.faults = next((p for p in policies if isinstance(p, faults_lib.Faults)), None)
    self.model_dir = str(model_dir) if model_dir is not None else None
    self.jit_compile = jit_compile
    self.strategy = strategy or tf.distribute.get_strategy()
    # Where this process writes files: model_dir on the chief (TF's convention), None on other
    # workers. Under a multi-worker strategy only the chief writes files; the others keep
    # nothing on disk but take part in every save (see distribute.WorkerCheckpointKeeper).
    self.is_chief = distribute.is_chief(self.strategy)
    self.output_dir = self.model_dir if self.is_chief else None
    self._distributed_input = distribute.uses_distributed_input(self.strategy)
    distribute.check_jit(self.strategy, jit_compile)

    with self.strategy.scope():
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
      self.applied_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='applied_steps')
      self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='skipped_steps')
      self.input_faults = tf.Variable(0, dtype=tf.int64, trainable=False, name='input_faults')
      # Skips caused by an fp16 loss-scale overflow (counted in skipped_steps too).
      self.overflow_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='overflow_steps')
      # Batches skipped by rollbacks: the data position is global_step + data_offset.
      self.data_offset = tf.Variable(0, dtype=tf.int64, trainable=False, name='data_offset')
      self.last_fault_step = tf.Variable(-(2**62), dtype=tf.int64, trainable=False,
                                         name='last_fault_step')
      self.lr_scale = tf.Variable(1.0, dtype=tf.float32, trainable=False, name='lr_scale')
    self.lr_control = lr_lib.LearningRateControl(optimizer, self.lr_scale)
    self._policy_state = tf.Module(name='policies')
    self._policy_state.by_name = {p.name: p for p in policies}

    self.events = events_lib.EventLog(
        os.path.join(self.output_dir, 'events.jsonl') if self.output_dir else None)
    self._loop_fn = None
    self._step_fn = None
    self._variables_finite_fn = None
    self._skip_fn = None
    self._scalars = events_lib.Scalars(None)
    self._iterator = None
    self._keeper = None
    self._variable_paths: List[str] = []
    self._input_paths: List[str] = []
    self._traced_output_flags: List[tf.Tensor] = []
    self._report_dtypes = step_lib.report_dtypes()
    self._random_states: List[tf.Variable] = []  # The global generators' states (`_build`).
    self._refused_checkpoints = 0  # Refusals in a row (host-side).
    self._fitted = False
    self._lock: Optional[checkpointing.RunLock] = None
    self.last_summary: Dict[str, Any] = {}
    for p in policies:  # Claimed last: a Trainer that failed validation claims nothing.
      p._stable_train_owned = True  # pylint: disable=protected-access

  # ------------------------------------------------------------------------------------------
  # Overridable, traced parts of the step.
  # ------------------------------------------------------------------------------------------
  def split_batch(self, batch):
    """Returns (features, labels) from one dataset element: a pair, or a dict with 'labels'."""
    if isinstance(batch, dict):
      features = dict(batch)
      for key in ('labels', 'label'):
        if key in features:
          labels = features.pop(key)
          return features, labels
      raise errors.ConfigError(
          f"Trainer: a dict batch needs a 'labels' key; got keys {sorted(batch)}.")
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
      return batch[0], batch[1]
    raise errors.ConfigError(
        'Trainer: each dataset element must be (features, labels) or a dict with a "labels" key.')

  def forward(self, features, training):
    """Runs the model. Traced. Keras models get `training`; plain tf.Modules are just called."""
    if isinstance(self.model, keras.layers.Layer):
      outputs = self.model(features, training=training)
    else:
      outputs = self.model(features)
    # Recorded for the report (were the outputs already non-finite?).
    self._traced_output_flags.append(
        tf.reduce_all([tf.reduce_all(tf.math.is_finite(o)) for o in tf.nest.flatten(outputs)
                       if o.dtype.is_floating]))
    return outputs

  def compute_loss(self, batch, training):
    """Returns the scalar loss of a batch (per replica). Traced. Override for custom losses."""
    features, labels = self.split_batch(batch)
    predictions = self.forward(features, training)
    loss = precision_lib.widen(
        distribute.unscale_keras_loss(self.loss_fn, self.loss_fn(labels, predictions)))
    regularization = getattr(self.model, 'losses', None)
    if regularization:  # float32 terms under mixed precision; float64 ones under float64.
      loss = loss + tf.add_n([tf.cast(r, loss.dtype) for r in regularization])
    return loss

  def apply_gradients(self, grads):
    """Applies aggregated, transformed gradients with the optimizer. Traced."""
    self.optimizer.apply_gradients(zip(grads, self._trainable_variables()))

  # ------------------------------------------------------------------------------------------
  # Host-side hooks.
  # ------------------------------------------------------------------------------------------
  def on_loop_end(self, reports: interfaces.StepReports) -> None:
    """Called eagerly after each loop of steps."""

  def on_event(self, record: Dict[str, Any]) -> None:
    """Called eagerly with each event record."""

  # ------------------------------------------------------------------------------------------
  # The traced step.
  # ------------------------------------------------------------------------------------------
  def _trainable_variables(self):
    return list(self.model.trainable_variables)

  def _input_checks(self, batch):
    features, labels = self.split_batch(batch)
    ok = tf.ones([len(interfaces.flatten_inputs(features, labels))], tf.bool)
    for p in self.policies:
      flags = p.check_batch(features, labels)
      if flags is not None:
        ok = tf.logical_and(ok, flags)
    return ok

  def sanitize_batch(self, batch):
    """The batch with labels made safe for the loss by the policies (`sanitize_labels`). Traced."""
    _, labels = self.split_batch(batch)
    safe = labels
    for p in self.policies:
      safe = p.sanitize_labels(safe)
    if safe is labels:
      return batch
    # split_batch hands out the batch's own label tensors: swap those leaves for the safe ones.
    swap = {id(t): u for t, u in zip(tf.nest.flatten(labels), tf.nest.flatten(safe))}
    return tf.nest.map_structure(lambda t: swap.get(id(t), t), batch)

  def loss_and_gradients(self, batch):
    """One replica's loss, gradients (None → zeros), input-check flags and whether the model
    outputs were finite, before any aggregation. Traced; also what forensics re-runs."""
    variables = self._trainable_variables()
    input_ok = self._input_checks(batch)
    batch = self.sanitize_batch(batch)
    self._traced_output_flags = []
    with tf.GradientTape() as tape:
      loss = precision_lib.widen(self.compute_loss(batch, training=True))
      loss = self._transform_loss(loss)
      target = loss if self.loss_scale is None else self.loss_scale.scale_loss(loss)
    grads = tape.gradient(target, variables)
    grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
             for g, v in zip(grads, variables)]
    if self.loss_scale is not None:
      # Every check, clip and policy sees the true (unscaled) gradients.
      grads = self.loss_scale.unscale_gradients(grads)
    outputs_ok = (tf.reduce_all(self._traced_output_flags) if self._traced_output_flags
                  else tf.constant(True))
    return loss, grads, input_ok, outputs_ok

  def _transform_loss(self, loss):
    """The loss after every policy's `transform_loss` (fault injection). Traced, under the tape."""
    for p in self.policies:
      loss = p.transform_loss(loss)
    return loss

  def forward_state(self) -> List[tf.Variable]:
    """Variables a forward pass may assign: the model's non-trainable variables (BatchNorm
    moving statistics, dropout/attention seed-generator states, any state a layer assigns in
    `call`). A skipped step puts them back as they were."""
    return [v for v in self.model.variables if not v.trainable]

  def _restore_forward_state(self, snapshot):
    """Assigns a snapshot taken by `_replica_compute` back (skip branch; per replica). Traced."""
    for v, value in zip(self.forward_state(), snapshot):
      v.assign(value)

  def _replica_compute(self, batch):
    """Per replica: snapshot of the forward state, loss, aggregated gradients, checks and policy
    transforms. Traced."""
    # Read before the forward pass assigns: automatic control dependencies order the reads and
    # the layers' assigns of each variable in program order (under XLA too).
    snapshot = [tf.identity(v) for v in self.forward_state()]
    loss, grads, input_ok, outputs_ok = self.loss_and_gradients(batch)
    inputs_bad = tf.cast(tf.logical_not(input_ok), tf.float32)
    outputs_bad = tf.cast(tf.logical_not(outputs_ok), tf.float32)
    grads, loss, inputs_bad, outputs_bad = step_lib.aggregate(
        grads, loss, inputs_bad, outputs_bad, self.strategy.num_replicas_in_sync)
    grads, report = step_lib.guard(grads, loss, inputs_bad, outputs_bad, self.policies,
                                   self._variable_paths, self.jit_compile,
                                   loss_scale=self.loss_scale)
    return grads, report, snapshot

  def _step(self, batch):
    """One train step: compute on every replica, then one agreed apply-or-skip. Traced."""
    with self.strategy.scope():  # Cross-replica context, also when fit() is called outside it.
      return self._step_in_scope(batch)

  def _apply_aggregated(self, grads):
    """Per replica, inside the agreed apply: applies the already aggregated gradients. Traced."""
    self.apply_gradients(list(grads))

  def _step_in_scope(self, batch):
    # The process-wide generators (a layer drawing keras.random.* without a seed) move in the
    # forward pass too: read here, before it (cross-replica context), put back on a skip.
    random_snapshot = [tf.identity(v) for v in self._random_states]
    grads, report, snapshot = self.strategy.run(self._replica_compute, (batch,))
    # Every field is computed from aggregated values, so all replicas agree: take the first copy.
    report = {k: self.strategy.experimental_local_results(v)[0] for k, v in report.items()}
    applied = report['applied']
    learning_rate = tf.cast(self.optimizer.learning_rate, tf.float32)

    def apply():
      if self._distributed_input:
        # The cond is taken in cross-replica context on the one agreed flag; the apply itself must
        # run in replica context (Keras's optimizer merge_calls from there), without a second
        # all-reduce of the already aggregated gradients.
        # (Switched off around strategy.run, not inside it: replicas are traced in threads.)
        with distribute.gradients_already_aggregated(self.optimizer):
          self.strategy.run(self._apply_aggregated, (grads,))
      else:
        self.apply_gradients(grads)
      return tf.constant(True)

    def skip():
      # The optimizer never ran; the forward pass's assigns (BatchNorm statistics, seed states)
      # are undone, so every model and optimizer variable is bit-identical after a skip.
      if snapshot:
        if self._distributed_input:
          self.strategy.run(self._restore_forward_state, (snapshot,))
        else:
          self._restore_forward_state(snapshot)
      for v, value in zip(self._random_states, random_snapshot):
        v.assign(value)
      return tf.constant(False)

    tf.cond(applied, apply, skip)
    for p in self.policies:
      p.update_state(report, applied)
    self.applied_steps.assign_add(tf.cast(applied, tf.int64))
    self.skipped_steps.assign_add(tf.cast(tf.logical_not(applied), tf.int64))
    self.overflow_steps.assign_add(tf.cast(report['overflow'], tf.int64))
    self.input_faults.assign_add(tf.cast(tf.logical_not(report['inputs_finite']), tf.int64))
    with tf.control_dependencies([applied]):
      report['step'] = self.global_step.assign_add(1)
    report['learning_rate'] = learning_rate
    return report

  def _loop(self, iterator, num_steps):
    """Runs up to `num_steps` steps in one graph (stops early when the data ends). Traced."""
    dtypes = self._report_dtypes
    arrays = {k: tf.TensorArray(d, size=0, dynamic_size=True) for k, d in dtypes.items()}
    data_ended = tf.constant(False)
    for i in tf.range(num_steps):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        data_ended = tf.constant(True)
        break
      batch = optional.get_value()
      report = self._step_fn(batch)
      index = tf.cast(i, tf.int32)
      arrays = {k: arrays[k].write(index, tf.cast(report[k], dtypes[k])) for k in arrays}
      stop = self._end_step(batch, report)
      if stop is not None:  # Python check at trace time: no policy asks, no extra graph.
        if stop:
          break
    outputs = {k: a.stack() for k, a in arrays.items()}
    outputs['data_ended'] = data_ended  # Not a policy's `end_step`: the data ran out.
    if self._loop_checks_variables:
      outputs['variables_finite'] = tf.reduce_all(numerics.finite_flags(self._all_variables()))
    return outputs

  def _end_step(self, batch, report) -> Optional[tf.Tensor]:
    """Calls every policy's `end_step` hook; returns 'end the loop now' or None. Traced."""
    local = tf.nest.map_structure(self._local_value, batch)
    stop = None
    for p in self.policies:
      verdict = p.end_step(local, report)
      if verdict is not None:
        stop = verdict if stop is None else tf.logical_or(stop, verdict)
    return stop

  def _local_value(self, value):
    """One tensor from a possibly per-replica value (replica parts concatenated on axis 0)."""
    parts = self.strategy.experimental_local_results(value)
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)

  def _build_functions(self):
    # Under a strategy the replica computation is traced inline in the loop: a nested tf.function
    # around code that all-reduces breaks MirroredStrategy's merge_call (TF 2.21), and so jit_compile
    # is refused there (distribute.check_jit). One device: the whole step is one function.
    if self._distributed_input:
      self._step_fn = self._step
    else:
      self._step_fn = tf.function(self._step, jit_compile=self.jit_compile or None)
    self._loop_checks_variables = any(p.reads_variables_finite for p in self.policies)
    self._loop_fn = tf.function(self._loop)

  @property
  def checkpoints(self) -> Optional[checkpointing.CheckpointKeeper]:
    """The run's checkpoint keeper (None without a model_dir or before `fit`)."""
    return self._keeper

  @property
  def scalars(self) -> events_lib.Scalars:
    return self._scalars

  def data_position(self) -> int:
    """Index (in the dataset's stream) of the next batch the iterator will yield."""
    return int(self.global_step.numpy()) + int(self.data_offset.numpy())

  def skip_batches(self, count: int):
    """Drops `count` batches from the iterator; returns the [start, end) stream indices dropped."""
    start = self.data_position()
    if count > 0 and self._distributed_input:
      self.data_offset.assign_add(count)
      self.reset_input()
    elif count > 0:
      if self._skip_fn is None:
        def skip(iterator, n):
          for _ in tf.range(n):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
              break
        self._skip_fn = tf.function(skip)
      self._skip_fn(self._iterator, tf.constant(count, tf.int64))
      self.data_offset.assign_add(count)
    return start, start + count

  @property
  def dataset(self) -> Optional[tf.data.Dataset]:
    """The dataset of the current (or last) `fit` call (None before `fit`)."""
    return getattr(self, '_dataset', None)

  @property
  def iterator(self):
    """The iterator of the current (or last) `fit` call; restored with each checkpoint."""
    return self._iterator

  # ------------------------------------------------------------------------------------------
  # Set-up: build, checkpoint, resume.
  # ------------------------------------------------------------------------------------------
  def _build(self, dataset):
    """Builds the model and optimizer variables from the dataset's element spec."""
    if isinstance(self.model, keras.Model) and not self.model.built:
      first = next(iter(dataset.take(1)), None)
      if first is None:
        raise errors.ConfigError(EMPTY_DATASET)
      features, _ = self.split_batch(first)
      with self.strategy.scope():
        self.model(features, training=False)
    variables = self._trainable_variables()
    if not variables:
      raise errors.ConfigError('Trainer: the model has no trainable variables to train.')
    distribute.check_optimizer(self.optimizer, self.strategy)
    with self.strategy.scope():
      self.optimizer.build(variables)
    self._variable_paths = [provenance.variable_path(v) for v in variables]
    self._random_states = random_state_variables()
    float64 = any(tf.as_dtype(v.dtype) == tf.float64 for v in variables)
    self._report_dtypes = step_lib.report_dtypes(tf.float64 if float64 else tf.float32)
    for p in self.policies:
      p.build(variables, self._variable_paths)
    self._input_paths = interfaces.input_paths(*self.split_batch(dataset.element_spec))
    if self.faults is not None:
      self.faults.bind(self)

  def _all_variables(self):
    vs = list(self.model.variables) + list(self.optimizer.variables)
    return [v for v in vs if tf.as_dtype(v.dtype).is_floating]  # Keras 3 dtypes are strings.

  def variables_finite(self) -> bool:
    """Whether every model and optimizer variable is finite (checked before any checkpoint)."""
    if self._variables_finite_fn is None:
      self._variables_finite_fn = tf.function(
          lambda: tf.reduce_all(numerics.finite_flags(self._all_variables())))
    return bool(self._variables_finite_fn().numpy())

  def non_finite_variables(self) -> List[str]:
    """Paths of the model and optimizer variables that hold NaN or Inf (host side, for messages)."""
    return [provenance.variable_path(v) for v in self._all_variables()
            if not np.all(np.isfinite(v.numpy()))]

  def _stale_checkpoint_note(self) -> str:
    committed = self._keeper.committed() if self._keeper is not None else []
    if not committed:
      return 'no checkpoint was written before it'
    return f'the newest checkpoint on disk is from step {committed[-1].step}, before it'

  def _refusal_decision(self, step: int) -> Optional[interfaces.Decision]:
    """A fault once `max_refused_checkpoints` checkpoints in a row were refused, else None."""
    if self._refused_checkpoints < self.max_refused_checkpoints:
      return None
    bad = self.non_finite_variables()
    return interfaces.Decision(
        action=interfaces.ESCALATE, trigger='checkpoint_refused', step=step,
        reason=(f'{self._refused_checkpoints} checkpoints in a row refused: variable '
                f'{bad[0] if bad else "?"} is non-finite'
                + (f' (and {len(bad) - 1} more)' if len(bad) > 1 else '')
                + '; ' + self._stale_checkpoint_note()))

  def model_checkpoint(self) -> tf.train.Checkpoint:
    """The model and optimizer state alone (forensics records, replay, inference): the model, the
    optimizer and the model's forward state, which includes the seed-generator states that a
    Keras model's own checkpoint leaves out."""
    return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                               model_state=list(self.forward_state()))

  def _checkpoint_objects(self) -> Dict[str, Any]:
    return dict(model=self.model, optimizer=self.optimizer, global_step=self.global_step,
                applied_steps=self.applied_steps, skipped_steps=self.skipped_steps,
                input_faults=self.input_faults, overflow_steps=self.overflow_steps,
                data_offset=self.data_offset, last_fault_step=self.last_fault_step,
                lr_scale=self.lr_scale, policies=self._policy_state,
                # Keras seed generators are not trackable objects, so a model checkpoint leaves
                # their states (dropout masks to come) out: saved here by position, with the
                # global generators, so a resume or rollback continues the same random stream.
                model_state=list(self.forward_state()), random=list(self._random_states))

  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    """Writes one record to events.jsonl (and passes it to `on_event`)."""
    step = int(self.global_step.numpy()) if step is None else step
    record = self.events.emit(event, step, **fields)
    self.on_event(record)
    return record

  def _healthy(self) -> bool:
    step = int(self.global_step.numpy())
    recent_fault = step - int(self.last_fault_step.numpy()) <= self.healthy_window
    return not recent_fault and all(p.is_healthy() for p in self.policies)

  def save_checkpoint(self, reason: str = 'interval') -> Optional[checkpointing.Entry]:
    """Writes a checkpoint if every variable is finite; otherwise refuses and records why."""
    if self._keeper is None:
      return None
    step = int(self.global_step.numpy())
    if not self.variables_finite():
      self._refused_checkpoints += 1
      bad = self.non_finite_variables()
      self.emit('checkpoint_refused', step, reason='non-finite variable', variables=bad[:10],
                in_a_row=self._refused_checkpoints)
      log.warning('step %d: checkpoint refused, non-finite variable %s', step,
                  bad[0] if bad else '?')
      return None
    self._refused_checkpoints = 0
    try:
      entry = self._keeper.save(step, good=self._healthy())
    except (OSError, tf.errors.OpError) as e:
      # A full disk, a lost mount: the keeper removed what it wrote; the committed checkpoints
      # stand. Training on without checkpoints would lose work, so the run stops here.
      error = str(e).splitlines()[0][:200]
      self.emit('checkpoint_failed', step, error=error)
      last = self._keeper.committed()
      resume = f'from {last[-1].path} (step {last[-1].step})' if last else 'from step 0'
      raise errors.CheckpointError(
          f'could not write a checkpoint at step {step}: {error}; free space (or fix the '
          f'directory) and rerun the same command: it resumes {resume}.') from None
    self.emit('checkpoint', step, checkpoint=entry.path, good=entry.good, reason=reason)
    return entry

  def _setup(self, dataset):
    self._build(dataset)
    if self._fitted:
      # A later fit() reads its dataset from the start: keep data_position() true to that.
      self.data_offset.assign(-self.global_step.numpy())
    if self._loop_fn is None:
      self._build_functions()
    self._dataset = dataset
    if not self._distributed_input:
      self._iterator = iter(dataset)
    if self.model_dir is None:
      self.reset_input()
      return None
    if self.output_dir is not None and self._lock is None:
      # Before the keeper reads or cleans the directory: one live process per model_dir.
      self._lock = checkpointing.RunLock(self.output_dir).acquire()
    objects = self._checkpoint_objects()
    if not self._distributed_input:
      objects['iterator'] = self._iterator  # A tf.data iterator is checkpointable; a distributed one is not.
    ckpt = tf.train.Checkpoint(**objects)
    self._keeper = distribute.make_keeper(
        self.strategy, ckpt, os.path.join(self.model_dir, 'checkpoints'),
        max_to_keep=self.max_checkpoints, keep_good=self.keep_good_checkpoints,
        warn=lambda event, step, **f: self.emit(event, step, **f))
    committed = self._keeper.committed()
    if self._keeper.entries and not committed and not self._fitted:
      raise errors.CheckpointError(
          f'{self._keeper.directory}/manifest.json lists {len(self._keeper.entries)} '
          'checkpoint(s) but none of their files is there; restore them, or use a new '
          '--model_dir to start afresh.')
    entry = None
    if committed and not self._fitted:
      # Only a fresh Trainer resumes from disk; a later fit() in the same process continues from
      # the in-memory state (which the last fit() saved) with the new dataset from its start.
      entry = self.restore_latest(committed)
      if entry is None:
        raise errors.CheckpointError(
            f'no checkpoint in {self._keeper.directory} could be restored (corrupt, or written '
            'for another model or policy set: see the checkpoint_corrupt events); use a new '
            '--model_dir or move that one away to start afresh.')
    else:
      self.reset_input()
    return entry

  def restore_latest(self, candidates) -> Optional[checkpointing.Entry]:
    """Restores the newest restorable checkpoint of `candidates` (a corrupt one is reported and
    the next older tried), then repositions the input. Returns the entry, or None."""
    entry = self._keeper.restore_latest(candidates)
    if entry is not None:
      self._refused_checkpoints = 0
      # The optimizer's learning-rate variable came back from the checkpoint; the rate is the
      # configured base times the restored scale, so a changed config takes effect on resume.
      self.lr_control.set_scale(float(self.lr_scale.numpy()))
      self.reset_input()
    return entry

  def reset_input(self) -> None:
    """(Re)builds the distributed iterator at `data_position()`; called after every restore.

    A no-op for single-device input, whose iterator is restored with the checkpoint itself (a
    distributed iterator cannot be checkpointed, so the position is saved instead).
    """
    if self._distributed_input:
      self._iterator = distribute.distributed_iterator(
          self.strategy, self._dataset, self.data_position())

  # ------------------------------------------------------------------------------------------
  # The host loop.
  # ------------------------------------------------------------------------------------------
  def _read_reports(self, tensors) -> interfaces.StepReports:
    values = {k: v.numpy() for k, v in tensors.items()}
    if 'variables_finite' in values:
      values['variables_finite'] = bool(values['variables_finite'])
    return interfaces.StepReports(variable_paths=self._variable_paths,
                                  input_paths=self._input_paths, **values)

  def _execute(self, decision: interfaces.Decision) -> Optional[str]:
    """Carries out a non-abort decision through the policy that made it; returns an abort reason
    or None to go on."""
    if decision.action == interfaces.CONTINUE:
      return None
    mark = max(decision.step, int(self.global_step.numpy()))
    stop = self._policy_state.by_name[decision.policy].execute(decision, self)
    # Marked after executing: a rollback restores last_fault_step with the checkpoint (from
    # before the fault), which would otherwise let the next checkpoints be marked good.
    self.last_fault_step.assign(max(mark, int(self.last_fault_step.numpy())))
    return stop

  def fit(self, dataset: tf.data.Dataset, *, num_steps: int) -> Dict[str, Any]:
    """Trains until the global step reaches `num_steps` (a total, so a resumed run stops at the same
    step) or the dataset ends.

    Args:
      dataset: a `tf.data.Dataset` of (features, labels) pairs or dicts with a 'labels' key.
      num_steps: the global step to stop at.

    Returns:
      The run summary (also written to `<model_dir>/summary.json`).
    """
    if not isinstance(dataset, tf.data.Dataset):
      raise errors.ConfigError(f'Trainer.fit: dataset={dataset!r} must be a tf.data.Dataset.')
    num_steps = errors.check_int('Trainer', 'num_steps', num_steps, minimum=1)
    start_time = time.perf_counter()
    if self.faults is not None:
      dataset = self.faults.wrap_dataset(dataset)
    try:
      restored = self._setup(dataset)
      self._fitted = True
      self._scalars = events_lib.Scalars(
          os.path.join(self.output_dir, 'tensorboard') if self.output_dir else None)
      step = int(self.global_step.numpy())
      if restored is not None:
        self.emit('resume', step, checkpoint=restored.path, num_steps=num_steps)
      else:
        self.emit('start', step, num_steps=num_steps)
      stale = self._lock.taken_over if self._lock is not None else None
      if stale:
        self.emit('lock_taken_over', step, pid=stale.get('pid'), host=stale.get('host'))
      recorder = host.LoopRecorder(emit=self.emit, scalars=self._scalars,
                                   summary_every=self.summary_every, log_every=self.log_every)
      signals = host.StopSignals()
      with signals.catching():
        return self._host_loop(num_steps, step, start_time, recorder, signals)
    finally:
      if self._lock is not None:
        self._lock.release()
        self._lock = None

  def _host_loop(self, num_steps, start_step, start_time, recorder, signals):
    """The eager outer loop of `fit`: run a loop of steps, record, decide, act, checkpoint."""
    step = start_step
    status, reason = 'completed', ''
    interrupted_by = stop_checkpoint = None
    last_loss = None
    last_checkpoint_step = step
    try:
      while step < num_steps:
        n = min(self.steps_per_loop, num_steps - step)
        outputs = self._run_loop(n)
        data_ended = bool(outputs.pop('data_ended').numpy())
        reports = self._read_reports(outputs)
        if reports.num_steps == 0:
          # `fit(dataset.take(0))` builds everything and trains nothing (tests use it); the CLI
          # turns 'dataset empty' into a configuration error.
          empty = step == start_step and self.data_position() == 0
          reason = 'dataset empty' if empty else 'dataset exhausted'
          if empty:
            log.warning('the dataset is empty: no step was run')
          break
        step = int(reports.step[-1])
        applied_losses = reports.loss[reports.applied.astype(bool)]
        if applied_losses.size:
          last_loss = float(applied_losses[-1])
        # An fp16 overflow skip is the loss scale's business, not a fault of the run.
        faulty_steps = reports.step[~(reports.applied | reports.overflow).astype(bool)]
        if faulty_steps.size:
          self.last_fault_step.assign(int(faulty_steps[-1]))
        recorder.record(reports, int(self.skipped_steps.numpy()))
        self.on_loop_end(reports)
        decisions = [d for d in (p.decide(reports, self) for p in self.policies) if d is not None]
        decision = host.resolve(decisions, self.policies, self)
        if decision.action == interfaces.ABORT:
          status, reason = 'aborted', decision.reason
          self.emit('abort', step, reason=reason, trigger=decision.trigger)
          break
        stop_reason = self._execute(decision)
        if stop_reason is not None:
          status, reason = 'aborted', stop_reason
          self.emit('abort', step, reason=reason, trigger=decision.trigger)
          break
        step = int(self.global_step.numpy())
        last_checkpoint_step = min(last_checkpoint_step, step)  # A rollback moved the step back.
        if signals.received is not None:
          interrupted_by = signals.received
          saved = self.save_checkpoint(reason=f'signal {interrupted_by}')
          stop_checkpoint = saved.path if saved else None
          last_checkpoint_step = step
          status, reason = 'interrupted', f'stopped by signal {interrupted_by}'
          self.emit('interrupted', step, signal=interrupted_by)
          break
        if step - last_checkpoint_step >= self.checkpoint_every:
          self.save_checkpoint()
          last_checkpoint_step = step
          refused = self._refusal_decision(step)
          if refused is not None:
            decision = host.resolve([refused], self.policies, self)
            stop_reason = (decision.reason if decision.action == interfaces.ABORT
                           else self._execute(decision))
            if stop_reason is not None:
              status, reason = 'aborted', stop_reason
              self.emit('abort', step, reason=reason, trigger=refused.trigger)
              break
            step = last_checkpoint_step = int(self.global_step.numpy())
        if data_ended:
          reason = 'dataset exhausted'
          break
    except (errors.NumericsError, errors.CheckpointError) as e:
      # CheckNumerics(mode='raise'), or a checkpoint that could not be written: record the abort
      # (committed checkpoints stay as they were), re-raise.
      status, reason = 'aborted', str(e)
      trigger = 'check_numerics' if isinstance(e, errors.NumericsError) else 'checkpoint_failed'
      self.emit('abort', int(self.global_step.numpy()), reason=reason, trigger=trigger)
      try:
        self._finish(status, reason, last_loss, start_step, start_time)
      except OSError:
        pass  # The disk that refused the checkpoint may refuse summary.json too.
      raise
    step = int(self.global_step.numpy())
    if status == 'completed' and step != last_checkpoint_step:
      self.save_checkpoint(reason='end')
    if status == 'completed' and self._refused_checkpoints:
      # Never "completed" while the newest checkpoint is stale.
      bad = self.non_finite_variables()
      status = 'aborted'
      reason = (f'the final checkpoint was refused: variable {bad[0] if bad else "?"} is '
                'non-finite; ' + self._stale_checkpoint_note())
      self.emit('abort', step, reason=reason, trigger='checkpoint_refused')
    if status == 'completed':
      self.emit('done', step, reason=reason or 'num_steps reached')
    extra = ({'signal': interrupted_by, 'checkpoint': stop_checkpoint}
             if interrupted_by is not None else {})
    return self._finish(status, reason, last_loss, start_step, start_time, **extra)

  def _run_loop(self, n: int):
    """Runs one traced loop of `n` steps; turns in-graph check_numerics failures into errors."""
    try:
      return self._loop_fn(self._iterator, tf.constant(n, tf.int64))
    except tf.errors.InvalidArgumentError as e:
      if 'optional does not match' in (e.message or ''):
        # A restored tf.data iterator yields elements of the checkpointed shape.
        detail = next((l.strip() for l in e.message.splitlines() if 'Expected' in l), '')
        raise errors.ConfigError(
            'the input pipeline differs from the one checkpointed in '
            f'{self._keeper.directory if self._keeper else "the checkpoint"} (batch size or '
            f'element shape changed: {detail[:160]}); use the batch size and shapes the run '
            'started with, or a new --model_dir to start afresh.') from None
      # The op's message ("non-finite gradient of <path> : Tensor had NaN values") sits among
      # the graph's traceback lines.
      lines = [l for l in (e.message or '').splitlines() if 'non-finite' in l]
      if not lines:
        raise
      message = lines[-1]
      step = int(self.global_step.numpy()) + 1
      raise errors.NumericsError(
          f"non-finite value at step {step}: {message.strip()}; CheckNumerics(mode='raise') "
          "stops here; use mode='flag' with SkipNonFinite to skip it.") from None

  def _finish(self, status, reason, last_loss, start_step, start_time, **extra) -> Dict[str, Any]:
    """Writes summary.json and flushes the summaries."""
    elapsed = time.perf_counter() - start_time
    step = int(self.global_step.numpy())
    summary = self._summary(status, reason, last_loss, step - start_step, elapsed)
    summary.update(extra)
    self._scalars.close()
    if self.output_dir:
      events_lib.write_json_atomic(os.path.join(self.output_dir, 'summary.json'), summary)
    self.last_summary = summary
    return summary

  def _summary(self, status, reason, last_loss, steps_run, elapsed) -> Dict[str, Any]:
    summary = {
        'status': status,
        'global_step': int(self.global_step.numpy()),
        'applied_steps': int(self.applied_steps.numpy()),
        'skipped_steps': int(self.skipped_steps.numpy()),
        'input_faults': int(self.input_faults.numpy()),
        'overflow_skips': int(self.overflow_steps.numpy()),
        'final_loss': last_loss,
        'steps_this_run': steps_run,
        'seconds': round(elapsed, 3),
    }
    for p in self.policies:
      summary.update(p.summary())
    if reason and status != 'completed':
      summary['reason'] = reason
    elif reason:
      summary['note'] = reason
    return summary
