"""The Trainer: validation, the overridable step hooks, and the public face of a run."""

import logging
import os
import weakref
from typing import Any, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from stable_train import checkpointing
from stable_train import clipping
from stable_train import compat
from stable_train import controller as controller_lib
from stable_train import distribute
from stable_train import errors
from stable_train import evaluation
from stable_train import events as events_lib
from stable_train import faults as faults_lib
from stable_train import inputs as inputs_lib
from stable_train import interfaces
from stable_train import loop as loop_lib
from stable_train import lr as lr_lib
from stable_train import numerics
from stable_train import policies as policies_lib
from stable_train import precision as precision_lib
from stable_train import provenance
from stable_train import state as state_lib
from stable_train import step as step_lib
from stable_train import stopping

log = logging.getLogger('stable_train')

# The policies some Trainer has claimed: a policy's variables are one run's state.
_OWNED_POLICIES = weakref.WeakSet()

EMPTY_DATASET = ('the dataset is empty (not one batch): check train.dataset_fn, its files, and a '
                  'batch_size larger than the data with drop_remainder=True.')


def random_state_variables() -> List[tf.Variable]:
  """The process-wide random states a run draws from: TensorFlow's global generator and Keras's
  global SeedGenerator (created here if they do not exist yet, so every run checkpoints the same
  structure)."""
  states = [compat.tf_global_generator().state]
  keras_generator = compat.keras_global_seed_generator()
  if keras_generator is not None:
    states.append(keras_generator.state)
  return states


def default_policies() -> List[interfaces.Policy]:
  """The default stack: CheckNumerics('flag'), AdaptiveClip(), SkipNonFinite(max_consecutive=10).

  AdaptiveClip clips only spikes above the run's own grad-norm statistics, so a healthy run trains
  as it would bare; `ClipByGlobalNorm` remains for a fixed norm.
  """
  return [policies_lib.CheckNumerics(), clipping.AdaptiveClip(), policies_lib.SkipNonFinite()]


def show_progress(logger: logging.Logger) -> None:
  """Makes `logger`'s INFO progress lines visible when nothing else would show them: with no
  handler on it or on the root logger (a plain library caller), a stderr handler at INFO."""
  if logger.handlers or logging.getLogger().handlers:
    return  # Configured by the caller (absl in the CLI, logging.basicConfig, pytest).
  handler = logging.StreamHandler()
  handler.setFormatter(logging.Formatter('%(message)s'))
  logger.addHandler(handler)
  if logger.level == logging.NOTSET or logger.level > logging.INFO:
    logger.setLevel(logging.INFO)


def _check_metrics(metrics, strategy) -> List[keras.metrics.Metric]:
  """The validated `Trainer(metrics=...)` list (ConfigError naming the bad value)."""
  if metrics is None:
    return []
  if isinstance(metrics, (keras.metrics.Metric, str)) or not hasattr(metrics, '__iter__'):
    raise errors.ConfigError(
        f'Trainer: metrics={metrics!r} must be a list of Keras metrics, e.g. '
        '[keras.metrics.SparseCategoricalAccuracy()].')
  metrics = list(metrics)
  for m in metrics:
    if isinstance(m, type):
      raise errors.ConfigError(
          f'Trainer: metrics contains the class {m.__name__}; pass an instance (in gin: add "()").')
    if not isinstance(m, keras.metrics.Metric):
      raise errors.ConfigError(f'Trainer: metrics contains {m!r}, which is not a Keras metric.')
  names = [m.name for m in metrics]
  if len(set(names)) != len(names):
    raise errors.ConfigError(f'Trainer: metric names must be unique, got {names}; pass name=... .')
  if distribute.uses_distributed_input(strategy):
    for m in metrics:
      # Each replica updates its own copy of a sync-on-read variable, which only the strategy's
      # scope creates; a plain variable would be assigned by every replica at once.
      if not all(strategy.extended.variable_created_in_scope(getattr(v, 'value', v))
                 for v in m.variables):
        raise errors.ConfigError(
            f'Trainer: metric {m.name!r} was created outside {type(strategy).__name__}.scope(); '
            'create the metrics inside `with strategy.scope():`, with the model and optimizer.')
  return metrics


def _state_variable(name: str) -> property:
  """A read-only Trainer attribute for one `TrainState` variable (e.g. `trainer.global_step`)."""
  return property(lambda self: getattr(self.state, name),
                  doc=f'`TrainState.{name}`: the run\'s checkpointed `{name}` variable.')


class Trainer:
  """Trains a model with a traced GradientTape step guarded by policies; keeps going past NaN.

  Meant to be overridden (all optional):
    - `compute_loss(batch, training)` — traced: the scalar loss of one (per-replica) batch.
    - `forward(features, training)` — traced: the model's outputs.
    - `split_batch(batch)` — traced: (features, labels) from one dataset element.
    - `apply_gradients(grads)` — traced: applies the (aggregated, clipped) gradients.
    - `on_loop_end(reports)` — eager: called after each loop with its `StepReports`.
    - `on_event(record)` — eager: called with each record written to events.jsonl.
  Everything else has its own module: the checkpointed counters are `trainer.state`
  (`state.TrainState`), the traced step and loop `loop.TrainLoop`, the input position
  `inputs.InputPosition`, and the host loop (checkpoints, summaries, decisions and their actions)
  `controller.Controller`; the Trainer keeps the public face of each.
  """

  def __init__(self, *, model, optimizer, loss, policies: Optional[Sequence] = None,
               model_dir: Optional[str], steps_per_loop: int = 1, jit_compile: bool = False,
               checkpoint_every: int = 100, max_checkpoints: int = 5, keep_good_checkpoints: int = 3,
               healthy_window: int = 50, log_every: int = 10, summary_every: int = 10,
               max_refused_checkpoints: int = 2, strategy=None,
               faults: Optional[faults_lib.Faults] = None, metrics: Optional[Sequence] = None,
               eval_divergence_factor: Optional[float] = 10.0, verbose: bool = True):
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
      metrics: Keras metrics (e.g. `[keras.metrics.SparseCategoricalAccuracy()]`) updated with
        (labels, predictions) by applied steps only (a skipped batch never counts), reset after
        each progress line; not checkpointed. Under a distributed strategy, create them inside
        its scope: each replica counts its shard of the batch.
      eval_divergence_factor: an evaluation (fit's `eval_dataset`) whose loss is non-finite or
        above this factor times the best eval loss of the run so far is a fault (trigger
        `eval_divergence`: a Rollback policy rolls back, otherwise the run aborts); None: only a
        non-finite eval loss is.
      verbose: write progress lines (every `log_every` steps and each evaluation) to the
        'stable_train' logger at INFO; a library caller with no logging configured gets a
        stderr handler on that logger. False: no progress lines (warnings still show).
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
    stopping.check_policies(policies)
    for p in policies:
      # A policy's variables are one run's state (skip counters, detector windows, rollbacks): a
      # second Trainer would start with the first one's counts.
      if p in _OWNED_POLICIES:
        raise errors.ConfigError(
            f'Trainer: policy {p.name!r} ({type(p).__name__}) already belongs to another '
            'Trainer; its counters are that run\'s state: create a new policy for each Trainer.')
    if model_dir is not None and (not isinstance(model_dir, (str, os.PathLike)) or not str(model_dir)):
      raise errors.ConfigError(f'Trainer: model_dir={model_dir!r} must be a directory path or None.')
    errors.check_bool('Trainer', 'jit_compile', jit_compile)
    positive = lambda name, value: errors.check_int('Trainer', name, value, minimum=1)
    self.steps_per_loop = positive('steps_per_loop', steps_per_loop)
    self.checkpoint_every = positive('checkpoint_every', checkpoint_every)
    self.max_checkpoints = positive('max_checkpoints', max_checkpoints)
    self.keep_good_checkpoints = positive('keep_good_checkpoints', keep_good_checkpoints)
    self.log_every = positive('log_every', log_every)
    self.summary_every = positive('summary_every', summary_every)
    self.healthy_window = errors.check_int('Trainer', 'healthy_window', healthy_window)
    self.eval_divergence_factor = errors.check_number(
        'Trainer', 'eval_divergence_factor', eval_divergence_factor, low=1.0, low_open=True,
        finite=False, allow_none=True, what='a number > 1, or None')
    self.verbose = errors.check_bool('Trainer', 'verbose', verbose)
    if verbose:
      show_progress(log)
    self.metrics = _check_metrics(metrics, strategy or tf.distribute.get_strategy())
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

    # Everything a checkpoint holds besides the model and optimizer (`state.TrainState`).
    self.state = state_lib.TrainState(policies=policies, strategy=self.strategy)
    self.lr_control = lr_lib.LearningRateControl(optimizer, self.lr_scale)

    self.events = events_lib.EventLog(
        os.path.join(self.output_dir, 'events.jsonl') if self.output_dir else None)
    self._variables_finite_fn = None
    self._variable_paths: List[str] = []
    self._input_paths: List[str] = []
    self._traced_output_flags: List[tf.Tensor] = []
    self._traced_predictions = None  # The last traced forward pass's outputs (for the metrics).
    self._report_dtypes = step_lib.report_dtypes()
    self._random_states: List[tf.Variable] = []  # The global generators' states (`_build`).
    self._input = inputs_lib.InputPosition(
        strategy=self.strategy, global_step=self.global_step, data_offset=self.data_offset,
        distributed=self._distributed_input)
    self._train_loop = loop_lib.TrainLoop(self)
    self._controller = controller_lib.Controller(self)
    self.last_summary: Dict[str, Any] = {}
    for p in policies:  # Claimed last: a Trainer that failed validation claims nothing.
      _OWNED_POLICIES.add(p)

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
    self._traced_predictions = outputs  # The metrics' predictions (the last forward pass).
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

  def update_metrics(self, labels, predictions) -> None:
    """Updates every metric with one applied batch. Traced (the step's apply branch only)."""
    for m in self.metrics:
      m.update_state(labels, predictions)

  def metric_results(self) -> Dict[str, float]:
    """The metrics' values since their last reset (eager)."""
    return {m.name: float(m.result()) for m in self.metrics}

  def reset_metrics(self) -> None:
    """Starts a new metric window (eager)."""
    for m in self.metrics:
      m.reset_state()

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
  # Traced pieces the step (`loop.TrainLoop`) calls.
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

  # ------------------------------------------------------------------------------------------
  # The run's state, input and checkpoints, as policies and tests read them.
  # ------------------------------------------------------------------------------------------
  global_step = _state_variable('global_step')
  applied_steps = _state_variable('applied_steps')
  skipped_steps = _state_variable('skipped_steps')
  input_faults = _state_variable('input_faults')
  overflow_steps = _state_variable('overflow_steps')
  data_offset = _state_variable('data_offset')
  last_fault_step = _state_variable('last_fault_step')
  lr_scale = _state_variable('lr_scale')

  @property
  def checkpoints(self) -> Optional[checkpointing.CheckpointKeeper]:
    """The run's checkpoint keeper (None without a model_dir or before `fit`)."""
    return self._controller.keeper

  @property
  def scalars(self) -> events_lib.Scalars:
    """The TensorBoard scalar writer of the current (or last) `fit`."""
    return self._controller.scalars

  def data_position(self) -> int:
    """Index (in the dataset's stream) of the next batch the iterator will yield."""
    return self._input.position()

  def skip_batches(self, count: int):
    """Drops `count` batches from the iterator; returns the [start, end) stream indices dropped."""
    return self._input.skip(count)

  def reset_input(self) -> None:
    """(Re)builds the iterator at `data_position()` after the counters were changed by hand (a
    restore through `restore_latest` repositions it itself): distributed input at once, a
    single-device iterator when next read. Checkpoints hold the position, not the iterator.
    """
    self._input.reset()

  @property
  def dataset(self) -> Optional[tf.data.Dataset]:
    """The dataset of the current (or last) `fit` call (None before `fit`)."""
    return self._input.dataset

  @property
  def iterator(self):
    """The iterator of the current (or last) `fit` call, at `data_position()`."""
    return self._input.iterator

  def save_checkpoint(self, reason: str = 'interval') -> Optional[checkpointing.Entry]:
    """Writes a checkpoint if every variable is finite; otherwise refuses and records why."""
    return self._controller.save_checkpoint(reason)

  def checkpoint_now(self, reason: str = 'best') -> Optional[checkpointing.Entry]:
    """The checkpoint of the current state: the one written at this step since the last restore,
    else a new one (`save_checkpoint`); None when refused or without a model_dir."""
    return self._controller.checkpoint_now(reason)

  def restore_latest(self, candidates) -> Optional[checkpointing.Entry]:
    """Restores the newest restorable checkpoint of `candidates` (a corrupt one is reported and
    the next older tried), then repositions the input. Returns the entry, or None."""
    return self._controller.restore_latest(candidates)

  # ------------------------------------------------------------------------------------------
  # Set-up (the controller calls `_build` at the start of each `fit`).
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
    built_for = compat.built_for(self.optimizer)
    if built_for is not None and (
        {id(v) for v in built_for} != {id(v) for v in variables}):
      # Keras keeps an optimizer's slots for the variables it was built for: another model's
      # update would fail deep in apply_gradients.
      raise errors.ConfigError(
          'Trainer: the optimizer was already built for another model\'s variables; give each '
          'model its own optimizer (e.g. keras.optimizers.Adam()).')
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

  def model_checkpoint(self) -> tf.train.Checkpoint:
    """The model and optimizer state alone (forensics records, replay, inference): the model, the
    optimizer and the model's forward state, which includes the seed-generator states that a
    Keras model's own checkpoint leaves out."""
    return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                               model_state=list(self.forward_state()))

  def _checkpoint_objects(self) -> Dict[str, Any]:
    return self.state.checkpoint_objects(model=self.model, optimizer=self.optimizer,
                                         forward_state=self.forward_state(),
                                         random_states=self._random_states)

  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    """Writes one record to events.jsonl (and passes it to `on_event`); under `fit(num_epochs=)`
    it carries the (1-based) epoch of the step's batch."""
    step = int(self.global_step.numpy()) if step is None else step
    epoch = self._controller.epoch_of(step)
    if epoch is not None:
      fields.setdefault('epoch', epoch)
    record = self.events.emit(event, step, **fields)
    self.on_event(record)
    return record

  # ------------------------------------------------------------------------------------------
  # fit.
  # ------------------------------------------------------------------------------------------
  def fit(self, dataset: tf.data.Dataset, *, num_steps: Optional[int] = None,
          num_epochs: Optional[int] = None,
          eval_dataset: Optional[tf.data.Dataset] = None, eval_every: Optional[int] = None,
          eval_steps: Optional[int] = None) -> Dict[str, Any]:
    """Trains until the global step reaches `num_steps` (a total, so a resumed run stops at the same
    step), or for `num_epochs` passes over a finite dataset, or until the dataset ends.

    Args:
      dataset: a `tf.data.Dataset` of (features, labels) pairs or dicts with a 'labels' key.
      num_steps: the global step to stop at.
      num_epochs: instead of num_steps: pass over `dataset` (finite, not repeated) this many
        times (`dataset.repeat(num_epochs)`). An epoch is its cardinality in batches when
        tf.data knows it, else counted once by reading the dataset to its end before training.
        Counted from the dataset's start: a run resumed from its model_dir goes on at the same
        position and stops at the end of the last epoch; a later `fit` of the same Trainer does
        `num_epochs` more. Events and progress lines carry the (1-based) epoch.
      eval_dataset: held-out data: loss and metrics on it (inference mode, no state change)
        every `eval_every` steps and at the end of a completed run; None: no evaluation.
      eval_every: evaluate when the global step reaches a multiple of this (rounded to loop
        ends); None: only at the end.
      eval_steps: batches per evaluation, from the eval data's start; None: all of it.

    Returns:
      The run summary (also written to `<model_dir>/summary.json`).
    """
    if not isinstance(dataset, tf.data.Dataset):
      raise errors.ConfigError(f'Trainer.fit: dataset={dataset!r} must be a tf.data.Dataset.')
    if (num_steps is None) == (num_epochs is None):
      raise errors.ConfigError(
          f'Trainer.fit: pass num_steps= (the global step to stop at) or num_epochs= (passes over '
          f'a finite dataset), not {"both" if num_steps is not None else "neither"}.')
    epochs = None
    if num_epochs is not None:
      num_epochs = errors.check_int('Trainer.fit', 'num_epochs', num_epochs, minimum=1)
      epochs = (num_epochs, steps_per_epoch(dataset))
      dataset = dataset.repeat(num_epochs)
      num_steps = num_epochs * epochs[1]  # Until the controller knows the resumed position.
    else:
      num_steps = errors.check_int('Trainer', 'num_steps', num_steps, minimum=1)
    eval_every, eval_steps = evaluation.check_eval_args(eval_dataset, eval_every, eval_steps)
    stopping.check_fit(self.policies, [m.name for m in self.metrics], eval_dataset is not None)
    if self.faults is not None:
      dataset = self.faults.wrap_dataset(dataset)
    return self._controller.fit(dataset, num_steps, eval_dataset=eval_dataset,
                                eval_every=eval_every, eval_steps=eval_steps, epochs=epochs)


def steps_per_epoch(dataset: tf.data.Dataset) -> int:
  """Batches in one pass over a finite `dataset`: its cardinality when tf.data knows it, else
  counted by reading it to its end once (a pipeline with a filter, say). ConfigError for one that
  repeats forever or holds no batch."""
  cardinality = int(dataset.cardinality())
  if cardinality == int(tf.data.INFINITE_CARDINALITY):
    raise errors.ConfigError(
        'Trainer.fit: num_epochs needs a finite dataset, but this one repeats forever; drop its '
        '.repeat() (e.g. synthetic_*.repeat = False), or use num_steps.')
  if cardinality == int(tf.data.UNKNOWN_CARDINALITY):
    log.info('num_epochs: counting the batches of one epoch (the dataset does not say)')
    cardinality = int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
  if cardinality == 0:
    raise errors.ConfigError(EMPTY_DATASET)
  return cardinality
