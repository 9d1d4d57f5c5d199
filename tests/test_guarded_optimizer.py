"""GuardedOptimizer: the skip leaves the update undone bit for bit, a finite step is the inner
optimizer's, the clip, distribution, saving, and the argument errors."""

import os

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

import stable_train
from stable_train import errors

NAN = float('nan')
X = tf.random.stateless_normal([8, 3], [1, 2])
Y = tf.random.stateless_normal([8, 1], [3, 4])


def _model():
  """A small MLP (no BatchNorm, no Dropout: a skip leaves all of it alone)."""
  return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation='tanh'),
                           keras.layers.Dense(1)])


def _step(model, opt, mode='function', strategy=None):
  """A train step `(x, y, bad) -> None`; `bad` multiplies the loss (1.0, or NaN to poison every
  gradient). Under `strategy`, the replica `bad_replica` (default 0) gets `bad`, the others 1."""

  def replica_step(x, y, bad, bad_replica=0):
    n = 1
    if strategy is not None:
      n = strategy.num_replicas_in_sync
      rid = tf.distribute.get_replica_context().replica_id_in_sync_group
      bad = tf.where(tf.equal(rid, bad_replica), bad, 1.0)
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x, training=True) - y)) * bad / n
    opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)

  def step(x, y, bad, bad_replica=0):
    if strategy is None:
      replica_step(x, y, bad)
    else:
      strategy.run(replica_step, (x, y, bad, bad_replica))

  if mode == 'eager':
    return step
  return tf.function(step, jit_compile=(mode == 'xla') or None)


def _values(variables):
  return [v.numpy().copy() for v in variables]


class GuardedOptimizerTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    keras.utils.set_random_seed(1)
    cls.model = _model()
    cls.initial = cls.model.get_weights()

  def setUp(self):
    super().setUp()
    self.model.set_weights(self.initial)

  def assertUnchanged(self, before, variables):
    for old, v in zip(before, variables):
      np.testing.assert_array_equal(old, v.numpy(), err_msg=getattr(v, 'path', v.name))

  @parameterized.named_parameters(('eager', 'eager'), ('function', 'function'), ('xla', 'xla'))
  def test_nan_step_changes_nothing_finite_steps_are_the_inner_optimizers(self, mode):
    m = self.model
    opt = stable_train.GuardedOptimizer(keras.optimizers.Adam(1e-2))
    step = _step(m, opt, mode)
    step(X, Y, tf.constant(1.0))
    before = _values(m.variables + opt.inner_optimizer.variables)
    step(X, Y, tf.constant(NAN))
    self.assertUnchanged(before, m.variables + opt.inner_optimizer.variables)
    self.assertEqual(int(opt.iterations.numpy()), 1)
    self.assertEqual((int(opt.skipped_steps.numpy()), int(opt.consecutive_skips.numpy())), (1, 1))
    self.assertTrue(np.isnan(opt.last_grad_norm.numpy()))
    step(X, Y, tf.constant(1.0))
    self.assertEqual((int(opt.skipped_steps.numpy()), int(opt.consecutive_skips.numpy())), (1, 0))
    guarded = _values(m.variables + opt.inner_optimizer.variables)

    m.set_weights(self.initial)
    bare = keras.optimizers.Adam(1e-2)
    step = _step(m, bare, mode)
    step(X, Y, tf.constant(1.0))
    step(X, Y, tf.constant(1.0))
    self.assertEqual(len(guarded), len(m.variables + bare.variables))
    for got, v in zip(guarded, m.variables + bare.variables):
      self.assertAllClose(got, v.numpy(), rtol=1e-6, atol=1e-7, msg=v.path)

  @parameterized.named_parameters(('function', 'function'), ('xla', 'xla'))
  def test_huge_finite_gradient_is_clipped_to_clipnorm(self, mode):
    a, b = tf.Variable([1.0, -2.0, 0.5]), tf.Variable([[3.0, 4.0]])
    ca, cb = np.array([1.0, 2.0, -2.0], np.float32), np.array([[4.0, 0.0]], np.float32)
    opt = stable_train.GuardedOptimizer(keras.optimizers.SGD(0.1), clipnorm=2.0)

    def step(factor):
      with tf.GradientTape() as tape:
        loss = factor * (tf.reduce_sum(a * ca) + tf.reduce_sum(b * cb))
      opt.apply(tape.gradient(loss, [a, b]), [a, b])

    step = tf.function(step, jit_compile=(mode == 'xla') or None)
    # The gradients are 1e30 * (ca, cb): their squares overflow float32, their norm is 3e30.
    a0, b0 = a.numpy(), b.numpy()
    step(tf.constant(1e30))
    self.assertAllClose(a.numpy(), a0 - 0.1 * 2.0 * ca / 5.0, rtol=1e-6)
    self.assertAllClose(b.numpy(), b0 - 0.1 * 2.0 * cb / 5.0, rtol=1e-6)
    self.assertAllClose(opt.last_grad_norm.numpy(), 5e30, rtol=1e-5)
    self.assertEqual(int(opt.skipped_steps.numpy()), 0)
    a0, b0 = a.numpy(), b.numpy()
    step(tf.constant(0.1))  # Norm 0.5, within the clip: the plain SGD update.
    self.assertAllClose(a.numpy(), a0 - 0.1 * 0.1 * ca, rtol=1e-6)
    self.assertAllClose(b.numpy(), b0 - 0.1 * 0.1 * cb, rtol=1e-6)

  def test_inf_in_one_gradient_skips_the_whole_update(self):
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    opt = stable_train.GuardedOptimizer(keras.optimizers.Adam(0.1), clipnorm=1.0)
    opt.build([a, b])
    apply = tf.function(lambda ga, gb: opt.apply([ga, gb], [a, b]))
    before = _values([a, b] + opt.inner_optimizer.variables)  # Its slots and iterations too.
    applied = apply(tf.constant([0.5, -0.5]), tf.constant([np.inf]))
    self.assertFalse(applied.numpy())
    self.assertUnchanged(before, [a, b] + opt.inner_optimizer.variables)
    self.assertEqual(int(opt.skipped_steps.numpy()), 1)
    self.assertFalse(np.isfinite(opt.last_grad_norm.numpy()))
    self.assertTrue(apply(tf.constant([0.5, -0.5]), tf.constant([1.0])).numpy())
    self.assertEqual(int(opt.iterations.numpy()), 1)

  def test_none_gradients_and_apply_gradients_pairs(self):
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    opt = stable_train.GuardedOptimizer(keras.optimizers.SGD(0.5))
    iterations = opt.apply_gradients(zip([None, tf.constant([2.0])], [a, b]))
    self.assertEqual(int(iterations.numpy()), 1)
    self.assertAllEqual(a.numpy(), [1.0, 2.0])
    self.assertAllEqual(b.numpy(), [2.0])
    opt.apply_gradients([(tf.constant([NAN, 0.0]), a), (tf.constant([1.0]), b)])
    self.assertAllEqual(b.numpy(), [2.0])
    self.assertEqual((int(opt.skipped_steps.numpy()), int(opt.iterations.numpy())), (1, 1))
    with self.assertRaisesRegex(errors.ConfigError, 'every gradient is None'):
      opt.apply([None, None], [a, b])

  def test_outside_a_loss_scale_optimizer(self):
    m = self.model
    opt = keras.optimizers.LossScaleOptimizer(
        stable_train.GuardedOptimizer(keras.optimizers.SGD(0.1), clipnorm=100.0))

    @tf.function
    def step(bad):
      with tf.GradientTape() as tape:
        loss = opt.scale_loss(tf.reduce_mean(tf.square(m(X, training=True) - Y)) * bad)
      grads = tape.gradient(loss, m.trainable_variables)
      opt.apply(grads, m.trainable_variables)

    step(tf.constant(1.0))
    guard = opt.inner_optimizer
    before = _values(m.variables + guard.variables)
    step(tf.constant(NAN))  # The loss scale's own skip (it halves its scale): nothing reaches us.
    self.assertUnchanged(before, m.variables + guard.variables)
    self.assertEqual(float(opt.dynamic_scale.numpy()), 2.0**14)
    self.assertEqual(int(opt.iterations.numpy()), 1)
    guarded = _values(m.variables)
    m.set_weights(self.initial)
    _step(m, keras.optimizers.SGD(0.1))(X, Y, tf.constant(1.0))
    for got, v in zip(guarded, m.variables):  # Scaled by 2**15 and back: exact.
      self.assertAllClose(got, v.numpy(), rtol=1e-6, atol=1e-7)

  def test_checkpoint_restores_the_inner_slots_and_the_counters(self):
    m = self.model
    opt = stable_train.GuardedOptimizer(keras.optimizers.Adam(1e-2), clipnorm=0.5)
    step = _step(m, opt, 'eager')
    for bad in (1.0, NAN, 1.0, NAN):
      step(X, Y, tf.constant(bad))
    path = tf.train.Checkpoint(optimizer=opt).write(os.path.join(self.get_temp_dir(), 'ckpt'))
    restored = stable_train.GuardedOptimizer(keras.optimizers.Adam(1e-2), clipnorm=0.5)
    restored.build(m.trainable_variables)
    tf.train.Checkpoint(optimizer=restored).read(path).assert_consumed()
    self.assertEqual(len(restored.variables), len(opt.variables))
    for want, got in zip(opt.variables, restored.variables):
      np.testing.assert_array_equal(want.numpy(), got.numpy(), err_msg=want.path)
    self.assertEqual((int(restored.skipped_steps.numpy()), int(restored.iterations.numpy())),
                     (2, 2))

  def test_config_round_trip(self):
    opt = stable_train.GuardedOptimizer(keras.optimizers.Adam(3e-3, beta_1=0.8), clipnorm=2.5,
                                        name='guarded')
    for again in (stable_train.GuardedOptimizer.from_config(opt.get_config()),
                  keras.optimizers.deserialize(keras.optimizers.serialize(opt))):
      self.assertIsInstance(again, stable_train.GuardedOptimizer)
      self.assertEqual((again.name, again.clipnorm), ('guarded', 2.5))
      self.assertIsInstance(again.inner_optimizer, keras.optimizers.Adam)
      self.assertEqual(again.inner_optimizer.get_config(), opt.inner_optimizer.get_config())
    self.assertEqual(keras.optimizers.serialize(opt)['registered_name'],
                     'stable_train>GuardedOptimizer')
    plain = stable_train.GuardedOptimizer.from_config(
        stable_train.GuardedOptimizer(keras.optimizers.SGD()).get_config())
    self.assertIsNone(plain.clipnorm)

  def test_bad_arguments_are_one_line_config_errors(self):
    cases = [
        ((keras.optimizers.Adam,), {}, r'optimizer=Adam is a class; .*Adam\(\)'),
        (('adam',), {}, 'optimizer=.* must be a keras.optimizers.Optimizer instance'),
        ((tf.Variable(1.0),), {}, 'must be a keras.optimizers.Optimizer instance'),
        ((keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()),), {},
         r'LossScaleOptimizer\(GuardedOptimizer\(inner\)\)'),
        ((keras.optimizers.SGD(loss_scale_factor=128.0),), {}, 'loss_scale_factor=128.0'),
        ((stable_train.GuardedOptimizer(keras.optimizers.SGD()),), {}, 'already a Guarded'),
    ] + [((keras.optimizers.SGD(),), {'clipnorm': bad}, f'clipnorm={bad!r} must be None or a '
          'positive finite number') for bad in (0.0, -1.0, np.inf, NAN, True, '1.0')]
    for args, kwargs, message in cases:
      with self.subTest(message=message), self.assertRaisesRegex(errors.ConfigError, message) as e:
        stable_train.GuardedOptimizer(*args, **kwargs)
      self.assertNotIn('\n', str(e.exception))
      self.assertTrue(str(e.exception).startswith('GuardedOptimizer: '))
    with self.assertRaises(TypeError):  # Keyword-only after the optimizer.
      stable_train.GuardedOptimizer(keras.optimizers.SGD(), 1.0)  # pylint: disable=too-many-function-args
    with self.assertRaisesRegex(errors.ConfigError, r'before the optimizer is built; call build.*or pass the variables'):
      stable_train.GuardedOptimizer(keras.optimizers.SGD()).apply([tf.constant(1.0)])


class GuardedOptimizerMirroredTest(tf.test.TestCase, parameterized.TestCase):
  """Under MirroredStrategy, on one device and on the session's two logical CPUs."""

  def _run(self, devices, guarded, bads, bad_replica=0, mode='function'):
    # ReductionToOneDevice: the default collectives' instance keys would meet those of other
    # tests' strategies in this process (BUILD_NOTES).
    strategy = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      keras.utils.set_random_seed(1)
      model = _model()
      opt = keras.optimizers.Adam(1e-2)
      opt = stable_train.GuardedOptimizer(opt, clipnorm=10.0) if guarded else opt
      opt.build(model.trainable_variables)
    step = _step(model, opt, mode, strategy)
    inner = opt.inner_optimizer if guarded else opt
    snapshots = []
    for bad in bads:
      step(X, Y, tf.constant(bad), bad_replica)
      snapshots.append(_values(model.variables + inner.variables))
    return snapshots, opt, strategy

  @parameterized.named_parameters(('one_device_eager', ['/cpu:0'], 'eager'),
                                  ('one_device', ['/cpu:0'], 'function'),
                                  ('two_replicas', ['/cpu:0', '/cpu:1'], 'function'))
  def test_skip_is_agreed_and_finite_steps_match_the_inner_optimizer(self, devices, mode):
    # Under two replicas only the second one's gradients are NaN: both skip.
    guarded, opt, strategy = self._run(devices, True, [1.0, NAN, 1.0], len(devices) - 1, mode)
    for want, got in zip(guarded[0], guarded[1]):
      np.testing.assert_array_equal(want, got)
    self.assertEqual((int(opt.skipped_steps.numpy()), int(opt.iterations.numpy())), (1, 2))
    bare, _, _ = self._run(devices, False, [1.0, 1.0], mode=mode)
    self.assertEqual(len(guarded[-1]), len(bare[-1]))
    for got, want in zip(guarded[-1], bare[-1]):
      self.assertAllClose(got, want, rtol=1e-6, atol=1e-7)
    with strategy.scope(), self.assertRaisesRegex(errors.ConfigError, 'replica context'):
      opt.apply([tf.zeros([3, 4])])

  def test_unbuilt_under_two_replicas_asks_for_build(self):
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      model = _model()
      opt = stable_train.GuardedOptimizer(keras.optimizers.SGD())
    with self.assertRaisesRegex(errors.ConfigError, r'call build\(model.trainable_variables\)'):
      _step(model, opt, 'function', strategy)(X, Y, tf.constant(1.0))
