"""Tests for stable_train.policies.precision: the precision setting, dynamic loss scaling tied into the skip,
float64 kept float64, and a LossScaleOptimizer applied through its inner optimizer."""

import gin
import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import losses
from stable_train import errors
from stable_train.policies import basic as policies
from stable_train.policies import precision
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models


class RecordingTrainer(trainer_lib.Trainer):

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.reports = []

  def on_loop_end(self, reports):
    self.reports.append(reports)

  def column(self, name):
    return np.concatenate([getattr(r, name) for r in self.reports])


def _dataset(batch_size=32):
  return data.synthetic_regression(num_examples=512, num_features=32, batch_size=batch_size, seed=0)


def _trainer(extra=(), base=None, model_dir=None, optimizer=None, **kwargs):
  model = models.mlp(input_dim=32, hidden=(32, 16), outputs=1, seed=0)
  stack = trainer_lib.default_policies() if base is None else base
  return RecordingTrainer(model=model, optimizer=optimizer or keras.optimizers.Adam(1e-3),
                          loss=keras.losses.MeanSquaredError(), policies=stack + list(extra),
                          model_dir=model_dir, **kwargs)


def whole_state(trainer):
  return [np.array(v.numpy()) for v in
          list(trainer.model.variables) + list(trainer.optimizer.variables) +
          list(trainer.loss_scale.variables if trainer.loss_scale else [])]


class PrecisionTestCase(tf.test.TestCase):
  test_session = None

  def tearDown(self):
    precision.set_precision('float32')
    super().tearDown()


class SetPrecisionTest(PrecisionTestCase):

  def test_rejects_unknown(self):
    with self.assertRaisesRegex(errors.ConfigError, "precision='fp16' is not one of"):
      precision.set_precision('fp16')

  def test_sets_policy_and_floatx(self):
    precision.set_precision('float64')
    self.assertEqual(keras.config.floatx(), 'float64')
    self.assertEqual(keras.mixed_precision.global_policy().name, 'float64')
    precision.set_precision('mixed_bfloat16')
    self.assertEqual(keras.mixed_precision.global_policy().compute_dtype, 'bfloat16')

  def test_using_sets_it_for_the_block_and_float32_after_it_even_on_an_error(self):
    with self.assertRaises(RuntimeError):
      with precision.using('mixed_float16'):
        self.assertEqual(keras.mixed_precision.global_policy().compute_dtype, 'float16')
        raise RuntimeError('a failed run')
    self.assertEqual(keras.mixed_precision.global_policy().name, 'float32')

  def test_loss_scale_arguments_validated(self):
    for kwargs, needle in (({'growth_interval': 0}, 'growth_interval=0'),
                           ({'initial_scale': -1.0}, 'initial_scale=-1.0'),
                           ({'min_scale': 2.0, 'initial_scale': 1.0}, 'min_scale <= initial_scale')):
      with self.assertRaisesRegex(errors.ConfigError, needle):
        precision.DynamicLossScale(**kwargs)


class MixedFloat16Test(PrecisionTestCase):

  def test_a_loss_scale_optimizer_applies_through_its_inner_one_with_its_settings(self):
    precision.set_precision('mixed_float16')
    inner = keras.optimizers.Adam(1e-3)
    wrapper = keras.optimizers.LossScaleOptimizer(inner, initial_scale=2.0**10,
                                                  dynamic_growth_steps=7)
    trainer = trainer_lib.Trainer(model=models.mlp(input_dim=32, hidden=(8,), seed=0),
                                  optimizer=wrapper, loss='mse', model_dir=None)
    self.assertIs(trainer.optimizer, inner)  # Its own apply would check and unscale again.
    self.assertEqual(float(trainer.loss_scale.scale.numpy()), 2.0**10)
    self.assertEqual(trainer.loss_scale.growth_interval, 7)
    summary = trainer.fit(_dataset(), num_steps=14)
    self.assertEqual(summary['applied_steps'], 14)
    self.assertEqual(int(inner.iterations.numpy()), 14)
    self.assertEqual(float(trainer.loss_scale.scale.numpy()), 2.0**12)  # Grown twice.

  def test_a_skip_that_is_no_overflow_leaves_the_growth_count(self):
    precision.set_precision('mixed_float16')
    trainer = _trainer(extra=[precision.DynamicLossScale(growth_interval=3)])
    nan_second = _dataset().take(4).enumerate().map(
        lambda i, b: (tf.where(tf.equal(i, 1), b[0] * np.nan, b[0]), b[1]))
    trainer.fit(nan_second, num_steps=4)  # applied, NaN skip, applied, applied: 3 applied.
    self.assertEqual(list(trainer.column('applied')), [True, False, True, True])
    self.assertEqual(float(trainer.loss_scale.scale.numpy()), 2.0**16)  # Grown once.
    self.assertEqual(int(trainer.loss_scale.good_steps.numpy()), 0)

  @pytest.mark.slow
  def test_loss_scale_added_and_trains_like_float32(self):
    # Plain SGD: an update is as large as the gradient (Adam would hide a wrong gradient scale).
    reference = _trainer(optimizer=keras.optimizers.SGD(0.02))
    self.assertIsNone(reference.loss_scale)
    reference.fit(_dataset(), num_steps=300)
    precision.set_precision('mixed_float16')
    mixed = _trainer(optimizer=keras.optimizers.SGD(0.02), steps_per_loop=10)
    self.assertIsInstance(mixed.loss_scale, precision.DynamicLossScale)
    self.assertEqual(mixed.model.layers[0].compute_dtype, 'float16')
    summary = mixed.fit(_dataset(), num_steps=300)
    self.assertEqual(summary['status'], 'completed')
    # Loss scaling is what makes the update the right size: the scaled gradient is divided back.
    self.assertEqual(float(mixed.column('loss_scale')[0]), 2.0**15)
    want = reference.column('loss')[-50:].mean()
    got = mixed.column('loss')[-50:].mean()
    self.assertAllClose(got, want, rtol=0.10)

  def test_overflow_skips_halve_the_scale_and_change_nothing(self):
    precision.set_precision('mixed_float16')
    trainer = _trainer(extra=[precision.DynamicLossScale(initial_scale=2.0**24, growth_interval=5)])
    trainer.fit(_dataset().take(0), num_steps=1)  # Builds everything, runs nothing.
    before = whole_state(trainer)
    trainer.fit(_dataset().take(1), num_steps=1)
    self.assertTrue(trainer.reports[-1].overflow[0])
    self.assertFalse(trainer.reports[-1].applied[0])
    self.assertEqual(trainer.reports[-1].fault(0), 'overflow')
    after = whole_state(trainer)
    scale = trainer.loss_scale.scale
    self.assertEqual(float(scale.numpy()), 2.0**23)
    for i, (b, a) in enumerate(zip(before[:-3], after[:-3])):
      self.assertTrue(np.array_equal(b, a), f'variable {i} changed on an overflow skip')
    summary = trainer.fit(_dataset(), num_steps=60)
    overflows = int(trainer.column('overflow').sum())
    self.assertGreater(overflows, 3)  # Halved until the gradients fit in float16.
    self.assertEqual(summary['overflow_skips'], overflows)
    self.assertEqual(summary['skipped_steps'], overflows)
    skip_policy = [p for p in trainer.policies if isinstance(p, policies.SkipNonFinite)][0]
    self.assertEqual(int(skip_policy.total_skips.numpy()), 0)  # No instability counted.
    self.assertEqual(summary['status'], 'completed')
    # After 5 applied steps in a row the scale grows again.
    scales = trainer.column('loss_scale')
    self.assertGreater(scales[-1], scales[overflows])

  def test_overflow_at_the_floor_escalates(self):
    precision.set_precision('mixed_float16')
    trainer = _trainer(base=[policies.SkipNonFinite(max_consecutive=3)],
                       extra=[precision.DynamicLossScale(initial_scale=2.0**24, min_scale=2.0**24)])
    summary = trainer.fit(_dataset(), num_steps=20)
    self.assertEqual(summary['status'], 'aborted')
    self.assertIn('consecutive non-finite steps', summary['reason'])
    self.assertEqual(summary['overflow_skips'], 0)

  def test_gradients_that_overflow_at_scale_one_train_on_below_it_as_keras_does(self):
    # Unscaled inputs (x ~ 1e3) under mixed_float16: the backward overflows float16 even at scale
    # 1. Keras's LossScaleOptimizer halves without a floor and trains; the guard follows it
    # (a floor of 1 aborted this fit after 10 skips, blamed on exploding gradients).
    from stable_train.keras import fit as keras_fit  # pylint: disable=g-import-not-at-top
    precision.set_precision('mixed_float16')
    rs = np.random.RandomState(0)
    x = (rs.rand(512, 64) * 1e3).astype('float32')
    y = (x / 1e3 @ rs.normal(size=(64, 1))).astype('float32')
    def fit(guarded):
      keras.utils.set_random_seed(0)
      model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, 'relu'),
                                keras.layers.Dense(64, 'relu'), keras.layers.Dense(1, dtype='float32')])
      model.compile(optimizer='adam', loss='mse')
      callbacks = [keras_fit.guard_fit(model).callback()] if guarded else []
      history = model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=callbacks)
      return history.history, float(model.optimizer.dynamic_scale.numpy())
    halvings = lambda final: round(15 - np.log2(final))  # From 2**15.
    plain, plain_scale = fit(False)
    guarded, scale = fit(True)
    self.assertLess(plain_scale, 1.0)  # The case: Keras went below 1.
    self.assertLess(scale, 1.0)
    self.assertTrue(np.isfinite(guarded['loss'][-1]))
    self.assertLess(guarded['loss'][-1], 10 * plain['loss'][-1])
    # Every skip an overflow that halved the scale (no growth within an epoch), past 1.
    self.assertEqual(guarded['skipped_steps'][-1], halvings(scale))
    self.assertGreater(halvings(scale), 15)

  @pytest.mark.slow
  def test_scale_is_checkpointed(self):
    precision.set_precision('mixed_float16')
    model_dir = self.get_temp_dir()
    first = _trainer(extra=[precision.DynamicLossScale(initial_scale=2.0**24)], model_dir=model_dir)
    first.fit(_dataset(), num_steps=20)
    scale = float(first.loss_scale.scale.numpy())
    self.assertLess(scale, 2.0**24)
    second = _trainer(extra=[precision.DynamicLossScale(initial_scale=2.0**24)], model_dir=model_dir)
    second.fit(_dataset(), num_steps=21)
    self.assertEqual(float(second.reports[0].loss_scale[0]), scale)


class MixedRegularizedTest(PrecisionTestCase):

  @pytest.mark.slow
  def test_regularized_model_trains_under_mixed_precision(self):
    for policy in ('mixed_float16', 'mixed_bfloat16'):
      precision.set_precision(policy)
      keras.utils.set_random_seed(0)
      model = keras.Sequential([
          keras.Input((4,)), keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(1e-4))])
      x = np.random.RandomState(0).normal(size=(16, 4)).astype(np.float32)
      data = tf.data.Dataset.from_tensor_slices((x, np.zeros(16, np.int32))).batch(8)
      trainer = RecordingTrainer(model=model, optimizer=keras.optimizers.Adam(1e-3),
                                 loss=losses.sparse_softmax_cross_entropy, model_dir=None)
      summary = trainer.fit(data, num_steps=2)
      self.assertEqual(summary['applied_steps'], 2, policy)
      self.assertEqual(trainer.column('loss').dtype, np.float32)

  def test_auto_added_loss_scale_honours_gin_bindings(self):
    gin.parse_config('DynamicLossScale.initial_scale = 1024.0\n'
                     'DynamicLossScale.growth_interval = 5')
    precision.set_precision('mixed_float16')
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    trainer = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-3),
                                  loss=losses.sparse_softmax_cross_entropy, model_dir=None)
    self.assertEqual(float(trainer.loss_scale.scale.numpy()), 1024.0)
    self.assertEqual(trainer.loss_scale.growth_interval, 5)


class Float64Test(PrecisionTestCase):

  def test_loss_beyond_float32_range_stays_finite(self):
    precision.set_precision('float64')
    model = models.mlp(input_dim=32, hidden=(8,), outputs=1, seed=0)
    mse = keras.losses.MeanSquaredError()
    trainer = RecordingTrainer(model=model, optimizer=keras.optimizers.Adam(1e-3),
                               loss=lambda y, p: mse(y, p) * 3e40, model_dir=None)
    summary = trainer.fit(_dataset(), num_steps=5)
    self.assertEqual(summary['applied_steps'], 5)
    self.assertEqual(trainer.column('loss').dtype, np.float64)
    self.assertGreater(summary['final_loss'], 1e39)
    self.assertTrue(np.isfinite(summary['final_loss']))
    self.assertEqual(model.trainable_variables[0].dtype, 'float64')


if __name__ == '__main__':
  tf.test.main()
