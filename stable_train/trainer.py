"""The Trainer: one traced train step, an in-graph loop of steps, and the eager host loop."""

import logging
import os
import signal
import time
from typing import Any, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from stable_train import checkpointing
from stable_train import errors
from stable_train import events as events_lib
from stable_train import interfaces
from stable_train import numerics
from stable_train import policies as policies_lib

log = logging.getLogger('stable_train')

# Report fields produced by the traced step, with their dtypes.
_REPORT_DTYPES = {
    'step': tf.int64,
    'loss': tf.float32,
    'grad_norm': tf.float32,
    'clipped_grad_norm': tf.float32,
    'loss_finite': tf.bool,
    'grads_finite': tf.bool,
    'inputs_finite': tf.bool,
    'outputs_finite': tf.bool,
    'first_bad_grad': tf.int32,
    'first_bad_input': tf.int32,
    'applied': tf.bool,
    'learning_rate': tf.float32,
}


def default_policies() -> List[interfaces.Policy]:
  """The default stack: CheckNumerics('flag'), ClipByGlobalNorm(1.0), SkipNonFinite(10)."""
  return [policies_lib.CheckNumerics(), policies_lib.ClipByGlobalNorm(1.0),
          policies_lib.SkipNonFinite()]


def _check_positive_int(name: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise errors.ConfigError(f'Trainer: {name}={value!r} must be a positive integer.')
  return int(value)


def _variable_path(v) -> str:
  path = getattr(v, 'path', None) or v.name
  return path[:-2] if path.endswith(':0') else path


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
               log_every: int = 10, summary_every: int = 10, strategy=None):
    """Initialises the Trainer.

    Args:
      model: a Keras 3 model, or any callable `tf.Module` with `trainable_variables`.
      optimizer: a Keras 3 optimizer.
      loss: callable `(labels, predictions) -> scalar` (Keras losses included).
      policies: list of `Policy` objects; None means CheckNumerics, ClipByGlobalNorm(1.0),
        SkipNonFinite. `[]` means none (a bare train step).
      model_dir: directory for checkpoints, events.jsonl, summary.json and TensorBoard files;
        None keeps nothing on disk (library use, tests).
      steps_per_loop: train steps run inside one `tf.function` call; the host reads reports once
        per loop.
      jit_compile: compile the step with XLA.
      checkpoint_every: write a checkpoint every this many global steps (rounded to loop ends).
      max_checkpoints: how many of the newest checkpoints to keep.
      keep_good_checkpoints: how many known-good checkpoints to keep besides the newest.
      log_every: write a progress line every this many steps.
      summary_every: write TensorBoard scalars every this many steps (and on every fault).
      strategy: a `tf.distribute.Strategy`; None means the current one (the default strategy).
    """
    if model is None or not callable(model) or not hasattr(model, 'trainable_variables'):
      raise errors.ConfigError(
          f'Trainer: model={model!r} must be a Keras model or a callable tf.Module with '
          'trainable_variables.')
    if optimizer is None or not hasattr(optimizer, 'apply_gradients'):
      raise errors.ConfigError(
          f'Trainer: optimizer={optimizer!r} must be a Keras 3 optimizer (e.g. keras.optimizers.Adam()).')
    if loss is None or not callable(loss):
      raise errors.ConfigError(f'Trainer: loss={loss!r} must be callable (labels, predictions) -> scalar.')
    if policies is None:
      policies = default_policies()
    policies = list(policies)
    for p in policies:
      if not isinstance(p, interfaces.Policy):
        raise errors.ConfigError(
            f'Trainer: policies contains {p!r}, which is not a stable_train Policy.')
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
      raise errors.ConfigError(f'Trainer: policy names must be unique, got {names}; pass name=... .')
    if model_dir is not None and (not isinstance(model_dir, (str, os.PathLike)) or not str(model_dir)):
      raise errors.ConfigError(f'Trainer: model_dir={model_dir!r} must be a directory path or None.')
    if not isinstance(jit_compile, bool):
      raise errors.ConfigError(f'Trainer: jit_compile={jit_compile!r} must be True or False.')
    self.steps_per_loop = _check_positive_int('steps_per_loop', steps_per_loop)
    self.checkpoint_every = _check_positive_int('checkpoint_every', checkpoint_every)
    self.max_checkpoints = _check_positive_int('max_checkpoints', max_checkpoints)
    self.keep_good_checkpoints = _check_positive_int('keep_good_checkpoints', keep_good_checkpoints)
    self.log_every = _check_positive_int('log_every', log_every)
    self.summary_every = _check_positive_int('summary_every', summary_every)

    self.model = model
    self.optimizer = optimizer
    self.loss_fn = loss
    self.policies = policies
    self.model_dir = str(model_dir) if model_dir is not None else None
    self.jit_compile = jit_compile
    self.strategy = strategy or tf.distribute.get_strategy()

    with self.strategy.scope():
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
      self.applied_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='applied_steps')
      self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='skipped_steps')
      self.input_faults = tf.Variable(0, dtype=tf.int64, trainable=False, name='input_faults')
    self._policy_state = tf.Module(name='policies')
    self._policy_state.by_name = {p.name: p for p in policies}

    self.events = events_lib.EventLog(
        os.path.join(self.model_dir, 'events.jsonl') if self.model_dir else None)
    self._loop_fn = None
    self._step_fn = None
    self._variables_finite_fn = None
    self._iterator = None
    self._keeper = None
    self._variable_paths: List[str] = []
    self._input_paths: List[str] = []
    self._traced_output_flags: List[tf.Tensor] = []
    self._stop_signal: Optional[int] = None
    # Set by the loop when a policy's `end_step` ended it early (not a sign the data ran out).
    self._loop_stopped = tf.Variable(False, trainable=False, name='loop_stopped')
    self.last_summary: Dict[str, Any] = {}

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
    loss = self.loss_fn(labels, predictions)
    regularization = getattr(self.model, 'losses', None)
    if regularization:
      loss = loss + tf.add_n(regularization)
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

  def _replica_compute(self, batch):
    """Per replica: loss, aggregated gradients, checks and policy transforms. Traced."""
    variables = self._trainable_variables()
    input_ok = self._input_checks(batch)
    batch = self.sanitize_batch(batch)
    self._traced_output_flags = []
    with tf.GradientTape() as tape:
      loss = tf.cast(self.compute_loss(batch, training=True), tf.float32)
    grads = tape.gradient(loss, variables)
    grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
             for g, v in zip(grads, variables)]
    outputs_ok = (tf.reduce_all(self._traced_output_flags) if self._traced_output_flags
                  else tf.constant(True))
    inputs_bad = tf.cast(tf.logical_not(input_ok), tf.float32)
    outputs_bad = tf.cast(tf.logical_not(outputs_ok), tf.float32)

    n = self.strategy.num_replicas_in_sync
    if n > 1:
      # Aggregate before any check: every replica then sees the same gradients, norm and flags.
      ctx = tf.distribute.get_replica_context()
      grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [g / n for g in grads])
      # The one scalar all-reduce beyond the gradients: loss, input and output fault counts.
      packed = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                              tf.concat([[loss / n, outputs_bad], inputs_bad], axis=0))
      loss, outputs_bad, inputs_bad = packed[0], packed[1], packed[2:]
    inputs_finite_flags = tf.equal(inputs_bad, 0.0)
    grad_flags = numerics.finite_flags(grads)
    stats = {
        'loss': loss,
        'loss_finite': tf.math.is_finite(loss),
        'grads_finite': tf.reduce_all(grad_flags),
        'grad_finite_flags': grad_flags,
        'inputs_finite': tf.reduce_all(inputs_finite_flags),
        'outputs_finite': tf.equal(outputs_bad, 0.0),
        'grad_norm': numerics.global_norm(grads),
        'variable_paths': self._variable_paths,
        'xla': self.jit_compile,
    }
    stats['clipped_grad_norm'] = stats['grad_norm']
    for p in self.policies:
      grads = p.transform_gradients(grads, stats)
    allow = stats['inputs_finite']
    for p in self.policies:
      verdict = p.allow_update(stats)
      if verdict is not None:
        allow = tf.logical_and(allow, verdict)
    report = {
        'loss': stats['loss'],
        'grad_norm': stats['grad_norm'],
        'clipped_grad_norm': stats['clipped_grad_norm'],
        'loss_finite': stats['loss_finite'],
        'grads_finite': stats['grads_finite'],
        'inputs_finite': stats['inputs_finite'],
        'outputs_finite': stats['outputs_finite'],
        'first_bad_grad': numerics.first_false(grad_flags),
        'first_bad_input': numerics.first_false(inputs_finite_flags),
        'applied': allow,
        # Not stored per step by the loop; read by `update_state` and `end_step` hooks.
        'grad_finite_flags': grad_flags,
    }
    return grads, report

  def _step(self, batch):
    """One train step: compute on every replica, then one agreed apply-or-skip. Traced."""
    grads, report = self.strategy.run(self._replica_compute_fn, (batch,))
    # Every field is computed from aggregated values, so all replicas agree: take the first copy.
    report = {k: self.strategy.experimental_local_results(v)[0] for k, v in report.items()}
    applied = report['applied']
    learning_rate = tf.cast(self.optimizer.learning_rate, tf.float32)

    def apply():
      self.apply_gradients(grads)
      return tf.constant(True)

    # Both branches leave every variable untouched but for the apply; the skip branch is a no-op,
    # so model and optimizer state (slots, iterations) stay bit-identical on a skip.
    tf.cond(applied, apply, lambda: tf.constant(False))
    for p in self.policies:
      p.update_state(report, applied)
    self.global_step.assign_add(1)
    self.applied_steps.assign_add(tf.cast(applied, tf.int64))
    self.skipped_steps.assign_add(tf.cast(tf.logical_not(applied), tf.int64))
    self.input_faults.assign_add(tf.cast(tf.logical_not(report['inputs_finite']), tf.int64))
    report['step'] = self.global_step.read_value()
    report['learning_rate'] = learning_rate
    return report

  def _loop(self, iterator, num_steps):
    """Runs up to `num_steps` steps in one graph (stops early when the data ends). Traced."""
    arrays = {k: tf.TensorArray(d, size=0, dynamic_size=True) for k, d in _REPORT_DTYPES.items()}
    self._loop_stopped.assign(False)
    for i in tf.range(num_steps):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        break
      batch = optional.get_value()
      report = self._step_fn(batch)
      index = tf.cast(i, tf.int32)
      arrays = {k: arrays[k].write(index, tf.cast(report[k], _REPORT_DTYPES[k])) for k in arrays}
      stop = self._end_step(batch, report)
      if stop is not None:  # Python check at trace time: no policy asks, no extra graph.
        if stop:
          self._loop_stopped.assign(True)
          break
    return {k: a.stack() for k, a in arrays.items()}

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
    single = self.strategy.num_replicas_in_sync == 1 and not isinstance(
        self.strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy))
    if single:
      # One device: the whole step (apply included) is one function, compiled with XLA if asked.
      self._replica_compute_fn = self._replica_compute
      self._step_fn = tf.function(self._step, jit_compile=self.jit_compile or None)
    else:
      # Under a strategy, XLA covers the per-replica computation; the agreed apply stays outside.
      self._replica_compute_fn = tf.function(self._replica_compute,
                                             jit_compile=self.jit_compile or None)
      self._step_fn = self._step
    self._loop_fn = tf.function(self._loop)

  # ------------------------------------------------------------------------------------------
  # Set-up: build, checkpoint, resume.
  # ------------------------------------------------------------------------------------------
  def _build(self, dataset):
    """Builds the model and optimizer variables from the dataset's element spec."""
    if isinstance(self.model, keras.Model) and not self.model.built:
      features, _ = self.split_batch(next(iter(dataset.take(1))))
      with self.strategy.scope():
        self.model(features, training=False)
    variables = self._trainable_variables()
    if not variables:
      raise errors.ConfigError('Trainer: the model has no trainable variables to train.')
    with self.strategy.scope():
      self.optimizer.build(variables)
    self._variable_paths = [_variable_path(v) for v in variables]
    self._input_paths = interfaces.input_paths(*self.split_batch(dataset.element_spec))

  def _all_variables(self):
    vs = list(self.model.variables) + list(self.optimizer.variables)
    return [v for v in vs if tf.as_dtype(v.dtype).is_floating]  # Keras 3 dtypes are strings.

  def variables_finite(self) -> bool:
    """Whether every model and optimizer variable is finite (checked before any checkpoint)."""
    if self._variables_finite_fn is None:
      self._variables_finite_fn = tf.function(
          lambda: tf.reduce_all(numerics.finite_flags(self._all_variables())))
    return bool(self._variables_finite_fn().numpy())

  def _checkpoint_objects(self) -> Dict[str, Any]:
    return dict(model=self.model, optimizer=self.optimizer, global_step=self.global_step,
                applied_steps=self.applied_steps, skipped_steps=self.skipped_steps,
                input_faults=self.input_faults, policies=self._policy_state)

  def _emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    step = int(self.global_step.numpy()) if step is None else step
    record = self.events.emit(event, step, **fields)
    self.on_event(record)
    return record

  def _healthy(self) -> bool:
    return all(p.is_healthy() for p in self.policies)

  def save_checkpoint(self, reason: str = 'interval') -> Optional[checkpointing.Entry]:
    """Writes a checkpoint if every variable is finite; otherwise refuses and records why."""
    if self._keeper is None:
      return None
    step = int(self.global_step.numpy())
    if not self.variables_finite():
      self._emit('checkpoint_refused', step, reason='non-finite variable')
      log.warning('step %d: checkpoint refused, a variable is non-finite', step)
      return None
    entry = self._keeper.save(step, good=self._healthy())
    self._emit('checkpoint', step, checkpoint=entry.path, good=entry.good, reason=reason)
    return entry

  def _setup(self, dataset):
    self._build(dataset)
    if self._loop_fn is None:
      self._build_functions()
    with self.strategy.scope():
      if isinstance(self.strategy, (tf.distribute.MirroredStrategy,
                                    tf.distribute.MultiWorkerMirroredStrategy)):
        self._iterator = iter(self.strategy.experimental_distribute_dataset(dataset))
      else:
        self._iterator = iter(dataset)
    if self.model_dir is None:
      return None
    ckpt = tf.train.Checkpoint(iterator=self._iterator, **self._checkpoint_objects())
    self._keeper = checkpointing.CheckpointKeeper(
        ckpt, os.path.join(self.model_dir, 'checkpoints'), max_to_keep=self.max_checkpoints,
        keep_good=self.keep_good_checkpoints,
        warn=lambda event, step, **f: self._emit(event, step, **f))
    committed = self._keeper.committed()
    if not committed:
      return None
    entry = self._keeper.restore_latest(committed)
    if entry is None:
      raise errors.CheckpointError(
          f'no checkpoint in {self._keeper.directory} could be restored (all corrupt); '
          'move that directory away to start afresh.')
    return entry

  # ------------------------------------------------------------------------------------------
  # The host loop.
  # ------------------------------------------------------------------------------------------
  def _read_reports(self, tensors) -> interfaces.StepReports:
    values = {k: v.numpy() for k, v in tensors.items()}
    return interfaces.StepReports(variable_paths=self._variable_paths,
                                  input_paths=self._input_paths, **values)

  def _record(self, reports: interfaces.StepReports, timer: Dict[str, float]) -> None:
    """Writes events, TensorBoard scalars and progress lines for one loop of reports."""
    for i in range(reports.num_steps):
      step = int(reports.step[i])
      fault = reports.fault(i)
      if not reports.applied[i]:
        self._emit('skip', step, fault=fault or 'policy', tensor=reports.offending_tensor(i),
                   loss=reports.loss[i], grad_norm=reports.grad_norm[i])
      if fault or step % self.summary_every == 0:
        self._scalars.write(step, {
            'loss': reports.loss[i], 'grad_norm': reports.grad_norm[i],
            'grad_norm_clipped': reports.clipped_grad_norm[i],
            'learning_rate': reports.learning_rate[i],
            'skipped_steps': float(self.skipped_steps.numpy()),
            'skipped': float(not reports.applied[i])})
      if step % self.log_every == 0:
        now = time.perf_counter()
        rate = (step - timer['step']) / max(now - timer['time'], 1e-9)
        timer.update(step=step, time=now)
        log.info('step %d  loss %.5g  grad_norm %.4g  %.1f steps/s  skips %d', step,
                 reports.loss[i], reports.grad_norm[i], rate, int(self.skipped_steps.numpy()))

  def _decide(self, reports: interfaces.StepReports) -> interfaces.Decision:
    decisions = [d for d in (p.decide(reports, self) for p in self.policies) if d is not None]
    for d in decisions:
      if d.action == interfaces.ABORT:
        return d
    for d in decisions:
      if d.action == interfaces.ESCALATE:
        for p in self.policies:
          handled = p.handle_escalation(d, self)
          if handled is not None:
            return handled
        return interfaces.Decision(action=interfaces.ABORT, reason=d.reason, trigger=d.trigger,
                                   step=d.step)
    for d in decisions:
      if d.action == interfaces.ROLLBACK:
        return d
    return interfaces.Decision()

  def _execute(self, decision: interfaces.Decision) -> bool:
    """Carries out a non-abort decision through the policy that made it; True to go on."""
    if decision.action == interfaces.CONTINUE:
      return True
    return self._policy_state.by_name[decision.policy].execute(decision, self)

  def _install_signal_handlers(self):
    previous = {}

    def handler(signum, frame):
      del frame
      self._stop_signal = signum

    for sig in (signal.SIGTERM, signal.SIGINT):
      try:
        previous[sig] = signal.signal(sig, handler)
      except ValueError:  # Not the main thread: leave signals alone.
        pass
    return previous

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
    num_steps = _check_positive_int('num_steps', num_steps)
    start_time = time.perf_counter()
    restored = self._setup(dataset)
    self._scalars = events_lib.Scalars(
        os.path.join(self.model_dir, 'tensorboard') if self.model_dir else None)
    step = int(self.global_step.numpy())
    if restored is not None:
      self._emit('resume', step, checkpoint=restored.path, num_steps=num_steps)
    else:
      self._emit('start', step, num_steps=num_steps)
    start_step = step
    status, reason = 'completed', ''
    last_loss = None
    last_checkpoint_step = step
    timer = {'step': step, 'time': time.perf_counter()}
    previous_handlers = self._install_signal_handlers()
    try:
      while step < num_steps:
        n = min(self.steps_per_loop, num_steps - step)
        reports = self._read_reports(self._loop_fn(self._iterator, tf.constant(n, tf.int64)))
        if reports.num_steps == 0:
          reason = 'dataset exhausted'
          break
        step = int(reports.step[-1])
        applied_losses = reports.loss[reports.applied.astype(bool)]
        if applied_losses.size:
          last_loss = float(applied_losses[-1])
        self._record(reports, timer)
        self.on_loop_end(reports)
        decision = self._decide(reports)
        if decision.action == interfaces.ABORT:
          status, reason = 'aborted', decision.reason
          self._emit('abort', step, reason=reason, trigger=decision.trigger)
          break
        if not self._execute(decision):
          status, reason = 'aborted', decision.reason
          break
        step = int(self.global_step.numpy())
        if self._stop_signal is not None:
          self.save_checkpoint(reason=f'signal {self._stop_signal}')
          last_checkpoint_step = step
          status, reason = 'interrupted', f'stopped by signal {self._stop_signal}'
          self._emit('interrupted', step, signal=self._stop_signal)
          break
        if step - last_checkpoint_step >= self.checkpoint_every:
          self.save_checkpoint()
          last_checkpoint_step = step
        if reports.num_steps < n and not self._loop_stopped.numpy():
          reason = 'dataset exhausted'
          break
    finally:
      for sig, h in previous_handlers.items():
        signal.signal(sig, h)
      self._stop_signal = None
    step = int(self.global_step.numpy())
    if status == 'completed' and step != last_checkpoint_step:
      self.save_checkpoint(reason='end')
    elapsed = time.perf_counter() - start_time
    summary = self._summary(status, reason, last_loss, step - start_step, elapsed)
    if status == 'completed':
      self._emit('done', step, reason=reason or 'num_steps reached')
    self._scalars.close()
    if self.model_dir:
      events_lib.write_json_atomic(os.path.join(self.model_dir, 'summary.json'), summary)
    self.last_summary = summary
    return summary

  def _summary(self, status, reason, last_loss, steps_run, elapsed) -> Dict[str, Any]:
    summary = {
        'status': status,
        'global_step': int(self.global_step.numpy()),
        'applied_steps': int(self.applied_steps.numpy()),
        'skipped_steps': int(self.skipped_steps.numpy()),
        'input_faults': int(self.input_faults.numpy()),
        'final_loss': last_loss,
        'steps_this_run': steps_run,
        'seconds': round(elapsed, 3),
    }
    if reason and status != 'completed':
      summary['reason'] = reason
    elif reason:
      summary['note'] = reason
    return summary
