"""The Keras `fit` front door: a compiled model's train step guarded by the core step.

`guard_fit(model)` replaces the model's `train_step` (on that instance) by the `step.GuardedStep`
the Trainer uses, built from the compiled model's own parts: its `compute_loss`, batches split
with `keras.utils.unpack_x_y_sample_weight`, its optimizer's `apply`, its non-trainable variables
as the forward state and the process-wide random states. A skipped step leaves every model and
optimizer variable bit-identical and `optimizer.iterations` where it was. Under `mixed_float16`
the `LossScaleOptimizer` that `compile` wrapped around the optimizer keeps its scale variables:
a `DynamicLossScale` reads and updates them, and the update goes through its inner optimizer.
The host halves of the policies run in `keras_callbacks.GuardCallback` (`guard.callback()`).
"""

import dataclasses
import functools
from typing import Any, Dict, Optional, Sequence

import keras
import tensorflow as tf

from stable_train import compat
from stable_train.core import batch_check
from stable_train.core import keras_parts
from stable_train.core import labels as labels_lib
from stable_train.core import loop as loop_lib
from stable_train.core import reports as reports_lib
from stable_train.core import ring
from stable_train.core import state as state_lib
from stable_train.core import step as step_lib
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.forensics import provenance
from stable_train.keras import callbacks as keras_callbacks
from stable_train.keras import first_batch as first_batch_lib
from stable_train.policies import precision
from stable_train.runtime import distribute
from stable_train.runtime import driven
from stable_train.runtime import handle
from stable_train.runtime import host as host_lib
from stable_train.trainer import setup as trainer_setup

# What fit's logs (progress bar, History, TensorBoard) gain from the guard.
LOG_FIELDS = ('skipped_steps', 'grad_norm', 'clipped_steps')
# The host reads the stored reports once per this many steps (the Trainer's default
# steps_per_loop), and at once after an execution with a skipped step: a read waits for the
# device and costs a transfer, which at steps_per_execution=1 was a tenth of a small model's step.
READ_EVERY_STEPS = 10


def guard_fit(model: keras.Model, *, policies: Optional[Sequence] = None) -> 'KerasGuard':
  """Guards a compiled Keras model's training step in place; returns the guard.

  Args:
    model: a compiled `keras.Model` that does not override `train_step` (override
      `compute_loss` instead: the guard calls it).
    policies: the policy list (None: `default_policies()`; `[]`: no check at all). The host
      halves (a skip-streak limit, Rollback, Forensics, ...) run in `guard.callback()`.
  """
  return KerasGuard(model, policies=policies)


class KerasGuard(driven.DrivenGuard):
  """The guard of one compiled Keras model: its policies, counters and traced train step.

  Attributes:
    model: the guarded model.
    policies: the policies, in order (a loss scale first under float16 compute).
    state: the `state.TrainState` counters (global_step, applied_steps, skipped_steps, ...).
    clipped_steps: applied steps whose gradients a transform shrank.
    loss_scale: the loss-scaling policy, or None.
  """

  def __init__(self, model, *, policies=None):
    keras_parts.check_guardable(model)
    self.model = model
    self.strategy = model.distribute_strategy
    self.optimizer, wrapper = precision.split_loss_scale_optimizer(model.optimizer)
    self.policies, self.loss_scale = trainer_setup.policy_stack(
        policies, model, self.strategy, wrapper=wrapper, owner='stable_train.guard_fit')
    # The loss scale put in for the compiled LossScaleOptimizer scales with its variables.
    self._follows_wrapper = wrapper is not None and self.loss_scale not in (policies or ())
    with self.strategy.scope():
      self.state = state_lib.TrainState(policies=self.policies, strategy=self.strategy)
      self.clipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='clipped_steps')
    self.step: Optional[step_lib.GuardedStep] = None
    self.variable_paths = []
    self.random_states = []
    self.input_paths = []
    self.rows = None  # The reports of the last executions (a `ring.ReportRing`).
    # The first batch's sample for the host checks that re-run it (None: no policy reads it).
    self.first_batch_sample = first_batch_lib.FirstBatch.for_policies(self.policies,
                                                                       self.strategy)
    self._built_for = None
    self.called = False  # Whether fit called the train function (`_before_first_call`).
    # Keras's train function, wrapped (`make_train_function`); the GuardCallback running now.
    self._train_function = self.host = None
    # Keras's own (a second guard of the same model takes over from the first).
    previous = getattr(model.make_train_function, '__self__', None)
    self.keras_make_train_function = (previous.keras_make_train_function
                                      if isinstance(previous, KerasGuard)
                                      else model.make_train_function)
    trainer_setup.claim(self.policies)
    # Data the model cannot take is refused where Keras first looks at it, before anything runs.
    self.data_check = batch_check.FitDataCheck(model)
    compat.keras_fit_data_hook(model, self.data_check.around_build)
    # On this instance only: the class, its config and its saved files stay Keras's own.
    model.train_step = self.train_step
    model.make_train_function = self.make_train_function
    compat.keras_train_on_batch_without(model, LOG_FIELDS)
    # fit caches its train function: one traced before (a plain or another guard's fit) would
    # go on running the old step.
    model.train_function = None

  def callback(self, **kwargs):
    """The Keras callback that runs the policies' host halves (`keras_callbacks.GuardCallback`,
    its arguments): pass the same one to every `fit` of this model."""
    return keras_callbacks.GuardCallback(self, **kwargs)

  # -- eager set-up, before Keras traces the train function ------------------------------------
  def make_train_function(self, force: bool = False):
    """Keras's `make_train_function`, after the guard's set-up where Keras has built the model
    and the optimizer already (under a strategy; else at the first trace, `train_step`); the
    function it makes raises an in-graph check_numerics failure as a `NumericsError`, and has
    the running callback record any TensorFlow error as an abort (`_numerics_errors`)."""
    self.prepare()
    made = self.keras_make_train_function(force=force)
    if self.model.train_function not in (None, self._train_function):
      self._train_function = functools.partial(_numerics_errors, self, self.model.train_function)
      self.called = False  # A new train function (a recompile): set up before its first call.
      self.model.train_function = self._train_function
    return made

  def _key(self):
    m = self.model
    return (id(m.optimizer), int(m.steps_per_execution), bool(m.jit_compile))

  def prepare(self, data=None) -> None:
    """Builds the guarded step from the model as compiled now (once per optimizer,
    steps_per_execution and jit_compile): the policies' `build`, the loss scale's variables, the
    report rows. Eager. A model or optimizer not built yet is built from `data` (a batch, or its
    symbolic tensors) as Keras's own first trace would; without `data` it waits."""
    m = self.model
    if self._built_for == self._key():
      return
    if not (m.built and m.optimizer.built and all(layer.built for layer in m.layers)):
      if data is None:
        return
      keras_parts.build_compiled(m, data)
    optimizer, wrapper = precision.split_loss_scale_optimizer(m.optimizer)
    if self._follows_wrapper:
      if wrapper is None:
        raise errors.ConfigError(
            'stable_train.guard_fit: the model was compiled again without its LossScaleOptimizer; '
            'guard it again after compiling.')
      self.loss_scale.follow(wrapper)
    distribute.check_optimizer(optimizer, self.strategy, 'stable_train.guard_fit')
    if m.jit_compile:
      distribute.check_jit(self.strategy, True, 'stable_train.guard_fit')
      forensics.stand_down_optional(self.policies, whole_step_xla=True)
      slow = [p.name for p in self.policies if not p.end_step_compiles]
      if slow:
        raise errors.ConfigError(
            f'stable_train.guard_fit: policies {slow} need a step outside XLA, but '
            'jit_compile=True compiles all of fit\'s step; compile with jit_compile=False, or drop '
            'them.')
    self._end_steps = [p for p in self.policies if p.uses_end_step]
    variables = list(m.trainable_variables)
    if not variables:
      raise errors.ConfigError('stable_train.guard_fit: the model has no trainable variables.')
    paths = [provenance.variable_path(v) for v in variables]
    if self._built_for is None:
      for p in self.policies:
        p.build(variables, paths)
    self.variable_paths = paths
    self.random_states = state_lib.random_state_variables()
    self.step = step_lib.GuardedStep(step_lib.StepParts(
        split_batch=keras_parts.split_batch, compute=self._compute,
        variables=lambda: list(m.trainable_variables),
        apply=lambda grads: optimizer.apply(grads, m.trainable_variables),
        forward_state=self._step_state, random_states=self.random_states,
        policies=self.policies, variable_paths=paths,
        learning_rate=lambda: optimizer.learning_rate, counters=self.state,
        strategy=self.strategy, distributed=distribute.uses_distributed_input(self.strategy),
        update_metrics=self._update_metrics, xla=bool(m.jit_compile),
        loss_scale=self.loss_scale, optimizer=optimizer))
    spe = int(m.steps_per_execution)
    self.rows = ring.ReportRing(spe * max(1, -(-READ_EVERY_STEPS // spe)), self.strategy)
    self.optimizer = optimizer
    self._built_for = self._key()

  def loss_and_gradients(self, batch):
    """One replica's loss, gradients, input flags and outputs finite, no update (what forensics
    re-runs). Traced."""
    return self.step.loss_and_gradients(batch)[:4]

  # -- what the host half reads (`driven.DrivenRun`) -------------------------------------------
  def checkpoint_objects(self):
    """The object map of the run's checkpoints."""
    m = self.model
    objects = self.state.checkpoint_objects(model=m, optimizer=m.optimizer,
                                            forward_state=self.forward_state(),
                                            random_states=self.random_states)
    objects['clipped_steps'] = self.clipped_steps
    return objects

  def float_variables(self):
    return host_lib.float_variables(self.model, self.model.optimizer)

  def probe(self) -> handle.Probe:
    """What forensics and diagnostics may run on this guard's model."""
    m = self.model
    return handle.Probe(
        model=m, policies=self.policies, split_batch=keras_parts.split_batch,
        loss_and_gradients=self.loss_and_gradients, model_checkpoint=self.model_checkpoint,
        first_batch=self.first_batch, jit_compile=bool(m.jit_compile),
        # The compiled loss, where the model's compute_loss is Keras's (which applies it).
        loss=m.loss if type(m).compute_loss is keras.Model.compute_loss else None)

  def ready_for_checkpoint(self) -> bool:
    """Whether the model is built; its optimizer is then built as Keras's first trace would, and
    the guard prepared, so that a checkpoint holds the whole state. A model Keras builds from the
    data has no start checkpoint (the first interval one is the first rollback target)."""
    m = self.model
    if not (m.built and all(layer.built for layer in m.layers)):
      return False
    if not m.optimizer.built:
      with self.strategy.scope():
        m.optimizer.build(m.trainable_variables)
    self.prepare()
    return True

  def model_checkpoint(self) -> tf.train.Checkpoint:
    """The model and optimizer state with the forward state (forensics records, replay)."""
    return tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer,
                               model_state=list(self.forward_state()))

  def forward_state(self):
    """The variables a forward pass may assign (BatchNorm statistics, seed-generator states)."""
    return [v for v in self.model.variables if not v.trainable]

  def _step_state(self):
    """What a training step assigns before its apply-or-skip, put back on a skip: the forward
    state, and the compiled loss's `Mean` of each loss (Keras updates them in `compute_loss`)."""
    return self.forward_state() + compat.keras_loss_metric_variables(self.model)

  # -- traced ----------------------------------------------------------------------------------
  def train_step(self, data) -> Dict[str, Any]:
    """The model's `train_step`: the guarded step; returns fit's logs (the model's metrics,
    which count applied steps only, and `LOG_FIELDS`). Traced, per replica."""
    if self._built_for != self._key():  # The first trace without a strategy (one thread).
      with tf.init_scope(), self.data_check.building():
        self.prepare(data)
    self.data_check.after_build()  # A model built from the data in this trace.
    # Python, at trace time.
    self.input_paths = reports_lib.input_paths(*keras_parts.split_batch(data))
    if self.first_batch_sample is not None:
      self.first_batch_sample.capture(data)
    classes = labels_lib.compiled_classes(self.model, self.policies, data)
    if classes != self.step.parts.label_classes:
      self.step = step_lib.GuardedStep(dataclasses.replace(self.step.parts, label_classes=classes))
    return self.step.in_replica(data, record=self._record)

  def _compute(self, batch):
    """(loss, what the metrics need, outputs finite) of one replica's batch, in training mode."""
    m = self.model
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
    y_pred = m(x, training=True)
    loss = compat.keras_compute_loss(m, x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
    # Keras scales its losses by 1 / num_replicas under a strategy; the step averages itself.
    loss = distribute.unscale_replica_loss(loss)
    flags = [tf.reduce_all(tf.math.is_finite(o)) for o in tf.nest.flatten(y_pred)
             if o is not None and o.dtype.is_floating]
    batch_size = tf.shape(next(t for t in tf.nest.flatten(x) if t is not None))[0]
    metric_inputs = (x, y, y_pred, sample_weight, loss, batch_size)
    return loss, metric_inputs, tf.reduce_all(flags) if flags else tf.constant(True)

  def _update_metrics(self, labels, metric_inputs) -> None:
    """The loss tracker and the compiled metrics, on an applied step only (per replica)."""
    del labels  # The batch's own labels are in metric_inputs (None for a model without).
    x, y, y_pred, sample_weight, loss, batch_size = metric_inputs
    compat.keras_loss_tracker(self.model).update_state(loss, sample_weight=batch_size)
    self.model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

  def _record(self, report, batches) -> Dict[str, tf.Tensor]:
    """In cross-replica context: the policies' `end_step` hooks (outside XLA), the step's packed
    report stored for the host, a clipped step counted; returns the step's entries of fit's
    logs. fit cannot end an execution early: an `end_step` verdict is not acted on in-graph."""
    if self._end_steps:
      strategy = tf.distribute.get_strategy()

      def local(value):  # One tensor from the replicas' parts (concatenated on axis 0).
        parts = strategy.experimental_local_results(value)
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)

      batch = tf.nest.map_structure(local, batches)
      for p in self._end_steps:
        p.end_step(batch, report)
    self.rows.store(report)
    clipped = tf.logical_and(report['applied'],
                             report['clipped_grad_norm'] < report['grad_norm'])
    # Read here, in cross-replica context, a metric is the sum over the replicas: the value
    # Keras's epoch logs read eagerly, the same on every replica.
    logs = dict(self.model.get_metrics_result())
    logs.update(skipped_steps=tf.identity(self.state.skipped_steps), grad_norm=report['grad_norm'],
                clipped_steps=self.clipped_steps.assign_add(tf.cast(clipped, tf.int64)))
    return logs


def _numerics_errors(guard: KerasGuard, keras_function, iterator):
  """Runs Keras's train function; CheckNumerics(mode='raise') failing in-graph ends the fit with
  a `NumericsError` naming the tensor, as in the Trainer; it and any other TensorFlow error at
  run time are recorded by the running callback (an abort, summary.json), then raised. The end
  of a dataset's epoch of unknown length (`OutOfRangeError`, a filter, a generator, TFRecords) is
  Keras's to catch, not an error."""
  if not guard.called:
    _before_first_call(guard, iterator)
  try:
    return keras_function(iterator)
  except tf.errors.OutOfRangeError:
    raise  # The end of an epoch of unknown length: Keras's own signal, which it catches.
  except tf.errors.OpError as e:
    error = (loop_lib.numerics_error(e, int(guard.state.global_step.numpy()) + 1)
             if isinstance(e, tf.errors.InvalidArgumentError) else None)
    if guard.host is not None:
      guard.host.fail(error or e)
    if error is None:
      raise
    raise error from None


def _before_first_call(guard: KerasGuard, iterator) -> None:
  """Builds the compiled loss and metrics, the optimizer, the guard's set-up and the first
  batch's copy (from the iterator's spec) before Keras traces the step: a variable made in that
  trace makes it trace again."""
  guard.called, m = True, guard.model
  spec = keras_parts.without_optionals(getattr(iterator, 'element_spec', None))
  if (spec is not None and m.built and all(layer.built for layer in m.layers)
      and not distribute.uses_distributed_input(guard.strategy)):
    keras_parts.build_compiled(m, spec)
  guard.ready_for_checkpoint()
  if guard.first_batch_sample is not None:
    guard.first_batch_sample.make_from_spec(spec)
