"""Tests for stable_train.own_loop: StepGuard guarding the hand-written steps of a model zoo."""

import dataclasses
import os
from typing import Callable, List, Optional

from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf

import stable_train
from stable_train import compat

_BATCH = 16  # The global batch: 8 rows per replica on two.
_CLASSES = 3
_CPUS = ['/cpu:0', '/cpu:1']
_NAN_ROW = 11  # In the second replica's half: one replica's NaN must skip both.


@dataclasses.dataclass
class _Spec:
  """One model of the zoo.

  Attributes:
    models: the models (built).
    features: the shape of one example's features.
    losses: (models, x, y) -> the per-example loss of each model (one per optimizer), in training
      mode.
    batch: (x, y) -> what the step hands to `guard.step` (None: no batch, the NaN reaches the guard
      through the loss and gradients only).
  """
  models: list
  features: tuple
  losses: Callable[..., List[tf.Tensor]]
  batch: Callable[..., Optional[object]]


def _classifier_losses(models, x, y):
  logits = models[0](x, training=True)
  return [keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)]


def _head(h):
  return keras.layers.Dense(_CLASSES, dtype='float32')(h)  # float32 logits under mixed_float16.


def _convnet() -> _Spec:
  """Conv, BatchNorm, Dropout; the batch handed in whole (its inputs checked too)."""
  inputs = keras.Input((6, 6, 1))
  h = keras.layers.Conv2D(4, 3)(inputs)
  h = keras.layers.BatchNormalization()(h)
  h = keras.layers.Activation('tanh')(h)
  h = keras.layers.Dropout(0.25)(h)
  model = keras.Model(inputs, _head(keras.layers.Flatten()(h)))
  return _Spec([model], (6, 6, 1), _classifier_losses, lambda x, y: (x, y))


def _transformer() -> _Spec:
  """A transformer block with attention dropout; no batch handed in."""
  inputs = keras.Input((4, 8))
  attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.25)(inputs, inputs)
  h = keras.layers.LayerNormalization()(keras.layers.Add()([inputs, attended]))
  ff = keras.layers.Dense(8)(keras.layers.Dense(16, activation='gelu')(h))
  h = keras.layers.LayerNormalization()(keras.layers.Add()([h, keras.layers.Dropout(0.25)(ff)]))
  model = keras.Model(inputs, _head(keras.layers.GlobalAveragePooling1D()(h)))
  return _Spec([model], (4, 8), _classifier_losses, lambda x, y: None)


def _lstm() -> _Spec:
  """An LSTM with input dropout; the features handed in alone."""
  inputs = keras.Input((4, 3))
  model = keras.Model(inputs, _head(keras.layers.LSTM(6, dropout=0.25)(inputs)))
  return _Spec([model], (4, 3), _classifier_losses, lambda x, y: x)


def _gan_losses(models, real, y):
  del y
  generator, discriminator = models
  # The noise comes from the process-wide generators, which the guard reads before the step and
  # puts back on a skip: the latent noise from Keras's global SeedGenerator (keras.random.* without
  # a seed), the instance noise on the real data from TensorFlow's global generator. A stateful op
  # without a generator (tf.random.normal) keeps its state in the kernel, where nothing can put it
  # back: a skipped step would still move its stream. Under MirroredStrategy the latent noise comes
  # from TensorFlow's generator too: Keras keeps its global SeedGenerator per thread, so a replica
  # thread would create a new one inside the tf.function (which TensorFlow refuses).
  tf_generator = tf.random.get_global_generator()
  shape = (real.shape[0], 4)
  noise = (tf_generator.normal(shape) if tf.distribute.has_strategy()
           else keras.random.normal(shape))
  real = real + 0.1 * tf_generator.normal(real.shape)
  fake_logits = discriminator(generator(noise, training=True), training=True)
  real_logits = discriminator(real, training=True)
  bce = lambda label, logits: keras.losses.binary_crossentropy(
      tf.fill(tf.shape(logits), label), logits, from_logits=True)
  return [bce(1.0, fake_logits), bce(1.0, real_logits) + bce(0.0, fake_logits)]


def _gan() -> _Spec:
  """A generator with BatchNorm and a discriminator with Dropout, two optimizers; no batch handed
  in (a NaN in the real data reaches only the discriminator's gradients)."""
  generator = keras.Sequential([
      keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization(),
      keras.layers.Activation('tanh'), keras.layers.Dense(5)], name='generator')
  discriminator = keras.Sequential([
      keras.Input((5,)), keras.layers.Dense(8, activation='tanh'), keras.layers.Dropout(0.25),
      keras.layers.Dense(1, dtype='float32')], name='discriminator')
  return _Spec([generator, discriminator], (5,), _gan_losses, lambda x, y: None)


_ZOO = {'convnet': _convnet, 'transformer': _transformer, 'lstm': _lstm, 'gan': _gan}
_MODES = ('function', 'jit', 'mirrored', 'mixed_float16')


def _data(features, seed):
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(_BATCH,) + features).astype(np.float32)
  return x, rng.randint(0, _CLASSES, size=(_BATCH,)).astype(np.int32)


def _poisoned(batch):
  x, y = batch
  x = x.copy()
  x[_NAN_ROW].flat[0] = np.nan
  return x, y


def _distinct(variables):
  seen, out = set(), []
  for v in variables:
    if id(v) not in seen:
      seen.add(id(v))
      out.append(v)
  return out


class _Run:
  """One model of the zoo in one mode: its models, optimizers, guard, and steps.

  Attributes:
    compared: the variables a skipped step must leave bit-identical: every model variable
      (BatchNorm statistics and seed-generator states included), every optimizer variable (slots,
      `iterations`, a LossScaleOptimizer's), the process-wide random states.
    state: `compared` and the guard's own state (counters, policy statistics): what a fresh run
      starts from.

  Args:
    model: a key of `_ZOO`.
    mode: one of `_MODES`.
    optimizer: makes one model's optimizer (under mixed_float16 the first is wrapped in a
      LossScaleOptimizer).
  """

  def __init__(self, model: str, mode: str, optimizer: Callable[[], keras.optimizers.Optimizer]):
    self.mode = mode
    # ReductionToOneDevice: the default collectives would meet the stale collective instances of
    # earlier tests' strategies, whose models have other shapes (BUILD_NOTES, traps).
    self.strategy = (tf.distribute.MirroredStrategy(
        _CPUS, cross_device_ops=tf.distribute.ReductionToOneDevice()) if mode == 'mirrored'
                     else tf.distribute.get_strategy())
    keras.utils.set_random_seed(0)
    # TensorFlow's global generator is process-wide: made here, outside any strategy's scope (made
    # first inside one, e.g. by StepGuard, its state is that strategy's MirroredVariable, and a
    # later strategy's step cannot assign it back).
    tf.random.set_global_generator(tf.random.Generator.from_seed(0))
    policy = 'mixed_float16' if mode == 'mixed_float16' else 'float32'
    keras.mixed_precision.set_global_policy(policy)
    try:
      with self.strategy.scope():
        self.spec = _ZOO[model]()
        self.optimizers = [optimizer() for _ in self.spec.models]
        if mode == 'mixed_float16':  # One loss scale serves the step: wrap one optimizer.
          self.optimizers[0] = keras.optimizers.LossScaleOptimizer(self.optimizers[0])
        self.guard = stable_train.StepGuard(self.spec.models, self.optimizers,
                                            jit_compile=mode == 'jit')
    finally:
      keras.mixed_precision.set_global_policy('float32')
    self.models = self.spec.models
    self.compared = _distinct(
        [v for m in self.models for v in m.variables] +
        [v for o in self.optimizers for v in o.variables] +
        [v for o in self.guard.inner_optimizers for v in o.variables] +
        list(self.guard.random_states))
    self.state = _distinct(self.compared + list(self.guard.state.variables) +
                           [self.guard.clipped_steps])

  # -- the steps -----------------------------------------------------------------------------------
  def _losses(self, x, y):
    return [tf.nn.compute_average_loss(per_example, global_batch_size=_BATCH)
            for per_example in self.spec.losses(self.models, x, y)]

  def _compiled(self, replica_step):
    if self.mode != 'mirrored':
      return tf.function(replica_step, jit_compile=self.mode == 'jit')
    strategy = self.strategy
    return tf.function(lambda x, y: strategy.run(replica_step, (x, y)))

  def guarded_step(self):
    """The traced guarded step: (x, y) -> the report."""
    several = len(self.models) > 1

    def replica_step(x, y):
      with self.guard.step(self.spec.batch(x, y)) as step:
        with tf.GradientTape(persistent=True) as tape:
          losses = self._losses(x, y)
          if self.mode != 'mixed_float16':
            targets = losses
          elif several:  # The one loss scale scales every model's loss.
            targets = [step.scale_loss(loss) for loss in losses]
          else:
            targets = [self.optimizers[0].scale_loss(losses[0])]
        for model, optimizer, loss, target in zip(self.models, self.optimizers, losses, targets):
          step.apply(tape.gradient(target, model.trainable_variables), loss,
                     optimizer=optimizer if several else None)
      return step.report

    return self._compiled(replica_step)

  def bare_step(self):
    """The same step without a guard, through `optimizer.apply_gradients` (which sums the
    replicas' gradients under a strategy, and unscales and applies under a LossScaleOptimizer):
    (x, y) -> None."""
    wrapper = self.optimizers[0]

    def replica_step(x, y):
      with tf.GradientTape(persistent=True) as tape:
        losses = self._losses(x, y)
        targets = ([wrapper.scale_loss(loss) for loss in losses] if self.mode == 'mixed_float16'
                   else losses)
      for model, optimizer, target in zip(self.models, self.optimizers, targets):
        grads = tape.gradient(target, model.trainable_variables)
        if self.mode == 'mixed_float16' and optimizer is not wrapper:  # Scaled by the wrapper's.
          grads = [g / wrapper.dynamic_scale for g in grads]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    return self._compiled(replica_step)

  def call(self, step, batch):
    """Runs `step` on a global batch (split over the replicas); returns its report as numpy."""
    x, y = batch
    if self.mode == 'mirrored':
      half = _BATCH // 2
      x, y = self.strategy.experimental_distribute_values_from_function(
          lambda ctx: (x[ctx.replica_id_in_sync_group * half:][:half],
                       y[ctx.replica_id_in_sync_group * half:][:half]))
    report = step(x, y)
    if report is None:
      return None
    first = lambda v: self.strategy.experimental_local_results(v)[0].numpy()
    return {k: first(v) for k, v in report.items()}

  # -- the state -----------------------------------------------------------------------------------
  def _local(self, v):
    """Every replica's copy of `v`."""
    value = v.value if isinstance(v, keras.Variable) else v
    return self.strategy.experimental_local_results(value)

  def read(self, variables):
    """{name: [each replica's value]} of `variables`."""
    return {_name(v, i): [np.array(t.numpy()) for t in self._local(v)]
            for i, v in enumerate(variables)}

  def write(self, values, variables):
    """Assigns `read`'s values back (each replica's copies are equal at the snapshots taken)."""
    with self.strategy.scope():
      for i, v in enumerate(variables):
        copies = values[_name(v, i)]
        assert all(np.array_equal(copies[0], c) for c in copies[1:]), _name(v, i)
        v.assign(copies[0])


def _name(v, index):
  return f'{index}:{getattr(v, "path", None) or v.name}'


class _ZooCase(parameterized.TestCase, tf.test.TestCase):
  """The checks, parameterized by the subclasses' model × mode lists."""

  def assert_skip_is_as_if_never_seen(self, model, mode):
    run = _Run(model, mode, lambda: keras.optimizers.Adam(1e-2))  # Slots and `iterations`.
    b1, b3 = (_data(run.spec.features, seed) for seed in (1, 3))
    b2 = _poisoned(_data(run.spec.features, 2))
    step = run.guarded_step()
    start = run.read(run.state)

    reports = [run.call(step, b) for b in (b1, b2, b3)]  # A: sees the NaN batch.
    self.assertEqual([bool(r['applied']) for r in reports], [True, False, True])
    self.assertEqual([int(r['skipped_steps']) for r in reports], [0, 1, 1])
    self.assertEqual([int(r['step']) for r in reports], [1, 2, 3])
    self.assertFalse(np.isfinite(reports[1]['loss']))
    if run.spec.batch(*b2) is None:  # No batch handed in: the gradients tell.
      self.assertFalse(reports[1]['grads_finite'])
    else:
      self.assertFalse(reports[1]['inputs_finite'])
    seen = run.read(run.compared)

    run.write(start, run.state)  # B: the same start, never sees it.
    reports = [run.call(step, b) for b in (b1, b3)]
    self.assertEqual([bool(r['applied']) for r in reports], [True, True])
    self.assertEqual([int(r['step']) for r in reports], [1, 2])
    never_seen = run.read(run.compared)

    differ = [name for name in seen
              if not all(np.array_equal(a, b) for a, b in zip(seen[name], never_seen[name]))]
    self.assertEqual(differ, [], 'these differ from a run that never saw the NaN batch')
    changed = [name for name in seen
               if not all(np.array_equal(a, b) for a, b in zip(seen[name], start[name]))]
    self.assertNotEqual(changed, [])  # The two healthy steps did train.

  def assert_guarded_step_is_bare_step(self, model, mode):
    # The default stack: AdaptiveClip's first step has no statistics yet, only its max_norm
    # ceiling (1e6) applies, so a healthy first step passes the gradients untouched. SGD, not
    # Adam: its update is linear in the gradients, so replicas averaged instead of summed would
    # halve it (Adam's would barely move), and Adam's division by sqrt(v) would blow a gradient
    # that is zero up to round-off (an attention key bias's) into a different last-digit step.
    run = _Run(model, mode, lambda: keras.optimizers.SGD(0.1, momentum=0.9))
    batch = _data(run.spec.features, 1)
    start = run.read(run.state)
    report = run.call(run.guarded_step(), batch)
    self.assertTrue(report['applied'])
    self.assertEqual(report['clipped_grad_norm'], report['grad_norm'])  # Not clipped.
    guarded = run.read(run.compared)
    run.write(start, run.state)
    run.call(run.bare_step(), batch)
    bare = run.read(run.compared)
    for name in guarded:
      self.assertAllClose(guarded[name], bare[name], rtol=1e-6, atol=1e-6, msg=name)


# The fast set: a skip under mixed_float16 and in a tf.function, and the guarded step against the
# bare one on two replicas (the replicas are summed, as `optimizer.apply_gradients` sums them);
# the rest of the matrix is slow (the GAN's two optimizers under one loss scale among it; a skip
# on two replicas is test_guarded_optimizer's too).
_FAST_SKIPS = (('transformer', 'mixed_float16'), ('gan', 'function'))
_FAST_BARE = (('convnet', 'mirrored'),)


def _named(pairs):
  return [(f'{model}_{mode}', model, mode) for model, mode in pairs]


class ZooTest(_ZooCase):

  @parameterized.named_parameters(*_named(_FAST_SKIPS))
  def test_skipped_step_is_as_if_never_seen(self, model, mode):
    self.assert_skip_is_as_if_never_seen(model, mode)

  @parameterized.named_parameters(*_named(_FAST_BARE))
  def test_healthy_guarded_step_is_the_bare_step(self, model, mode):
    self.assert_guarded_step_is_bare_step(model, mode)


# The whole matrix: every model in every mode. jit_compile under MirroredStrategy is no mode:
# StepGuard refuses it by design (an XLA function that all-reduces inside strategy.run fails in
# TF 2.21; ErrorsTest pins the refusal).
_ALL = [(model, mode) for model in _ZOO for mode in _MODES]


@pytest.mark.slow
class ZooMatrixTest(_ZooCase):

  @parameterized.named_parameters(*_named(p for p in _ALL if p not in _FAST_SKIPS))
  def test_skipped_step_is_as_if_never_seen(self, model, mode):
    self.assert_skip_is_as_if_never_seen(model, mode)

  @parameterized.named_parameters(*_named(p for p in _ALL if p not in _FAST_BARE))
  def test_healthy_guarded_step_is_the_bare_step(self, model, mode):
    self.assert_guarded_step_is_bare_step(model, mode)



def _dense(features=3, name=None):
  return keras.Sequential([keras.Input((features,)), keras.layers.Dense(2)], name=name)


class ErrorsTest(tf.test.TestCase):
  """What a guard or a step cannot use: one-line ConfigErrors, at creation or at trace time."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model, cls.other = _dense(name='one'), _dense(name='two')
    cls.x = tf.ones([4, 3])

  def assert_one_line_error(self, pattern, fn):
    with self.assertRaisesRegex(stable_train.ConfigError, pattern) as caught:
      fn()
    self.assertNotIn('\n', str(caught.exception))

  def _step(self, guard, body):
    """Runs `body(step, grads, loss)` in a guarded step of `guard`'s first model, eagerly."""
    with guard.step() as step:
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(self.model(self.x))
      body(step, tape.gradient(loss, self.model.trainable_variables), loss)

  def test_unbuilt_model(self):
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
    self.assert_one_line_error('no trainable variables yet; build it first',
                               lambda: stable_train.StepGuard(unbuilt, keras.optimizers.SGD()))

  def test_model_and_optimizer_counts_differ(self):
    self.assert_one_line_error('2 models but 1 optimizers', lambda: stable_train.StepGuard(
        [self.model, self.other], [keras.optimizers.SGD()]))

  def test_same_optimizer_for_two_models(self):
    shared = keras.optimizers.SGD()
    self.assert_one_line_error('the same optimizer is given for two models', lambda: (
        stable_train.StepGuard([self.model, self.other], [shared, shared])))

  def test_jit_compile_under_mirrored_strategy(self):
    strategy = tf.distribute.MirroredStrategy(_CPUS)
    with strategy.scope():
      model = _dense()
      self.assert_one_line_error('jit_compile=True under MirroredStrategy is not supported',
                                 lambda: stable_train.StepGuard(model, keras.optimizers.SGD(),
                                                                jit_compile=True))

  def test_wrong_gradient_count(self):
    guard = stable_train.StepGuard(self.model, keras.optimizers.SGD())
    self.assert_one_line_error('1 gradients for the 2 trainable variables', lambda: self._step(
        guard, lambda step, grads, loss: step.apply(grads[:1], loss)))

  def test_loss_not_scalar(self):
    guard = stable_train.StepGuard(self.model, keras.optimizers.SGD())
    self.assert_one_line_error(r'a loss of shape \(4, 2\); pass the scalar loss', lambda: (
        self._step(guard, lambda step, grads, loss: step.apply(grads, self.model(self.x)))))

  def test_two_optimizers_without_naming_one(self):
    guard = stable_train.StepGuard([self.model, self.other],
                                   [keras.optimizers.SGD(), keras.optimizers.SGD()])
    self.assert_one_line_error(r'several optimizers; pass step.apply\(grads, loss, optimizer=',
                               lambda: self._step(guard, lambda step, grads, loss: (
                                   step.apply(grads, loss))))

  def test_nothing_applied(self):
    guard = stable_train.StepGuard(self.model, keras.optimizers.SGD())
    self.assert_one_line_error('nothing to apply', lambda: self._step(
        guard, lambda step, grads, loss: None))

  def test_float16_compute_with_an_unscaled_loss(self):
    keras.mixed_precision.set_global_policy('mixed_float16')
    try:
      model = _dense()
    finally:
      keras.mixed_precision.set_global_policy('float32')
    guard = stable_train.StepGuard(model, keras.optimizers.SGD())  # No LossScaleOptimizer.

    def unscaled():
      with guard.step() as step:
        with tf.GradientTape() as tape:
          loss = tf.reduce_mean(tf.cast(model(self.x), tf.float32))
        step.apply(tape.gradient(loss, model.trainable_variables), loss)

    self.assert_one_line_error(r'differentiate step.scale_loss\(loss\), or pass a '
                               'keras.optimizers.LossScaleOptimizer', unscaled)

    def scaled():  # The same step through step.scale_loss is accepted.
      with guard.step() as step:
        with tf.GradientTape() as tape:
          loss = tf.reduce_mean(tf.cast(model(self.x), tf.float32))
          target = step.scale_loss(loss)
        step.apply(tape.gradient(target, model.trainable_variables), loss)
      return step.report

    self.assertTrue(bool(scaled()['applied']))


if __name__ == '__main__':
  tf.test.main()


class GlobalGeneratorsTest(tf.test.TestCase):
  """The process-wide generators under strategies the guard is created in."""

  def _mirrored(self):
    return tf.distribute.MirroredStrategy(
        _CPUS, cross_device_ops=tf.distribute.ReductionToOneDevice())

  def _guard(self):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    return stable_train.StepGuard(model, keras.optimizers.SGD(0.1))

  def test_a_keras_generator_of_another_strategy_is_a_one_line_error(self):
    keras.utils.set_random_seed(0)
    with self._mirrored().scope():
      compat.keras_global_seed_generator()  # Made in this scope: that strategy's variable.
    with self._mirrored().scope():
      with self.assertRaisesRegex(stable_train.ConfigError,
                                  r'^StepGuard: Keras\'s global seed generator .* '
                                  r'keras.utils.set_random_seed\(seed\) outside'):
        self._guard()
    keras.utils.set_random_seed(0)  # The remedy the message names.
    with self._mirrored().scope():
      guard = self._guard()
    self.assertTrue(all(compat.variable_strategy(v) in (None, guard.strategy)
                        for v in guard.random_states))


class UsageTest(tf.test.TestCase):
  """How a step hands things in: an eager numpy batch, outputs or none, the strategy's scope."""

  def _parts(self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    return model, keras.optimizers.SGD(0.1)

  def test_an_eager_step_takes_a_numpy_batch_and_checks_it(self):
    model, opt = self._parts()
    guard = stable_train.StepGuard(model, opt, policies=[
        stable_train.CheckNumerics(check_inputs=True), stable_train.SkipNonFinite()])
    x = np.ones([4, 3], np.float32)
    x[1, 2] = np.nan
    y = np.zeros([4, 2], np.float32)
    before = [v.numpy() for v in model.variables + opt.variables]
    with guard.step((x, y)) as step:  # Eager: numpy arrays as they come.
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
      step.apply(tape.gradient(loss, model.trainable_variables), loss)
    self.assertFalse(bool(step.report['applied']))
    self.assertFalse(bool(step.report['inputs_finite']))
    self.assertEqual(guard.input_paths, ['features', 'labels'])
    for b, v in zip(before, model.variables + opt.variables):
      self.assertAllEqual(b, v.numpy())

  def test_the_summary_says_whether_the_step_saw_the_outputs(self):
    for outputs in (False, True):
      model, opt = self._parts()
      guard = stable_train.StepGuard(model, opt, policies=[stable_train.SkipNonFinite()])
      with stable_train.LoopHost(guard, read_every=1) as host:
        with guard.step() as step:
          with tf.GradientTape() as tape:
            predictions = model(tf.ones([4, 3]))
            loss = tf.reduce_mean(tf.square(predictions))
          step.apply(tape.gradient(loss, model.trainable_variables), loss,
                     outputs=predictions if outputs else None)
        host.after_step()
      self.assertIs(host.last_summary['outputs_checked'], outputs)

  def test_a_guard_outside_the_optimizers_strategy_is_a_one_line_error(self):
    strategy = tf.distribute.MirroredStrategy(
        _CPUS, cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      model, opt = self._parts()
      opt.build(model.trainable_variables)
    with self.assertRaisesRegex(stable_train.ConfigError,
                                r'^StepGuard: the optimizer belongs to another distribution '
                                r'strategy.*inside the same `with strategy.scope\(\):`'):
      stable_train.StepGuard(model, opt)

  def test_the_loop_sets_the_epoch_its_events_carry(self):
    model, opt = self._parts()
    guard = stable_train.StepGuard(model, opt, policies=[stable_train.SkipNonFinite()])
    model_dir = self.get_temp_dir()
    with stable_train.LoopHost(guard, model_dir=model_dir, read_every=1) as host:
      host.epoch = 2  # 0-based, as the loop counts.
      with guard.step() as step:
        with tf.GradientTape() as tape:
          loss = tf.reduce_mean(tf.square(model(tf.ones([4, 3]))))
        step.apply(tape.gradient(loss, model.trainable_variables), loss)
      host.after_step()
    records = stable_train.events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertEqual([r['epoch'] for r in records if r['event'] == 'done'], [3])
    with self.assertRaisesRegex(stable_train.ConfigError, 'LoopHost: epoch=-1'):
      host.epoch = -1

  def test_misplaced_calls_are_one_line_errors(self):
    model, opt = self._parts()
    guard = stable_train.StepGuard(model, opt, policies=[stable_train.SkipNonFinite()])
    x = tf.ones([4, 3])

    def grads_and_loss():
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
      return tape.gradient(loss, model.trainable_variables), loss

    with guard.step() as step:
      grads, loss = grads_and_loss()
      step.apply(grads, loss)
      with self.assertRaisesRegex(stable_train.ConfigError, r'^StepGuard: step.report is set '):
        step.report  # pylint: disable=pointless-statement
    with self.assertRaisesRegex(stable_train.ConfigError, r'^StepGuard: step.apply outside'):
      step.apply(grads, loss)
    with self.assertRaisesRegex(stable_train.ConfigError, r'^StepGuard: guard.step\(\) inside '):
      with guard.step():
        with guard.step():
          pass
    with self.assertRaisesRegex(stable_train.ConfigError, r'gradient 0 has shape \(2,\).*order'):
      with guard.step() as step:
        step.apply(list(reversed(grads)), loss)
    with self.assertRaisesRegex(stable_train.ConfigError, r'no gradient for any variable'):
      with guard.step() as step:
        step.apply([None, None], loss)

  def test_a_none_gradient_leaves_its_variable_alone_as_keras_does(self):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, [keras.layers.Dense(2)(inputs), keras.layers.Dense(1)(inputs)])
    opt = keras.optimizers.SGD(0.1, momentum=0.9, weight_decay=0.1)
    guard = stable_train.StepGuard(model, opt, policies=[stable_train.SkipNonFinite()])
    unused = [v.numpy() for v in model.layers[2].trainable_variables]
    for _ in range(2):
      with guard.step() as step:
        with tf.GradientTape() as tape:
          loss = tf.reduce_mean(tf.square(model(tf.ones([4, 3]))[0]))  # The second head unused.
        step.apply(tape.gradient(loss, model.trainable_variables), loss)
      self.assertTrue(bool(step.report['applied']))
    for before, v in zip(unused, model.layers[2].trainable_variables):
      self.assertAllEqual(before, v.numpy())
    self.assertEqual(int(opt.iterations.numpy()), 2)

  def test_trainable_changed_after_the_guard_is_named(self):
    model, opt = self._parts()
    guard = stable_train.StepGuard(model, opt, policies=[stable_train.SkipNonFinite()])
    model.layers[0].trainable = False
    with self.assertRaisesRegex(stable_train.ConfigError,
                                r'trainable variables changed since the guard was made'):
      with guard.step() as step:
        step.apply([], tf.constant(0.0))
