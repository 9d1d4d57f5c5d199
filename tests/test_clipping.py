"""Tests for stable_train.policies.clipping: AdaptiveClip (the default clip), ClipByValue, ClipByNorm and
AdaptiveGradClip, against numpy references, under XLA, through checkpoints, and in whole runs."""

import math
from unittest import mock

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import compat
from stable_train.core import losses
from stable_train.core import numerics
from stable_train import errors
from stable_train.policies import basic as policies
from stable_train.policies import clipping
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models


def stats_for(grads, xla=False):
  """The stats dict the guard hands to transforms (`xla`: as in a step compiled with XLA)."""
  flags = numerics.finite_flags(grads)
  return {'grad_norm': numerics.global_norm(grads), 'grads_finite': tf.reduce_all(flags),
          'grad_finite_flags': flags, 'loss': tf.constant(1.0), 'loss_finite': tf.constant(True),
          'variable_paths': [f'net/v{i}' for i in range(len(grads))], 'xla': xla}


class ReferenceAdaptiveClip:
  """The statistics of AdaptiveClip in plain numpy (float64), for comparison."""

  def __init__(self, z, alpha, warmup, ratio, ceiling):
    self.z, self.alpha, self.warmup, self.ratio, self.ceiling = z, alpha, warmup, ratio, ceiling
    self.mean, self.var, self.count, self.clipped = 0.0, 0.0, 0, 0

  def threshold(self):
    if self.count >= self.warmup:
      t = self.mean + self.z * math.sqrt(self.var)
    elif self.count > 0:
      t = self.ratio * self.mean
    else:
      t = math.inf
    return min(t, self.ceiling)

  def update(self, norm, applied):
    if not applied or not math.isfinite(norm) or norm == 0.0:  # A zero norm sets no scale.
      return
    if norm >= self.threshold():
      self.clipped += 1  # A clipped spike never enters the statistics.
      return
    w = 1.0 / (self.count + 1) if self.count < self.warmup else 1.0 - self.alpha
    delta = norm - self.mean
    self.mean += w * delta
    self.var = (1 - w) * (self.var + w * delta * delta)
    self.count += 1


class AdaptiveClipTest(parameterized.TestCase, tf.test.TestCase):

  def test_statistics_match_a_numpy_reference(self):
    rng = np.random.RandomState(0)
    norms = list(np.abs(rng.normal(3.0, 0.5, size=60)))
    norms[30] = 50.0       # A spike after warm-up: clipped, never enters.
    norms[40] = np.inf     # Non-finite: never enters.
    norms[2] = 100.0       # Above warmup_ratio x the mean so far: clipped during warm-up too.
    applied = [True] * 60
    applied[45] = False    # A skipped step never enters.
    p = clipping.AdaptiveClip(z_threshold=3.0, alpha=0.9, warmup_steps=10, warmup_ratio=4.0,
                              max_norm=1e3)
    ref = ReferenceAdaptiveClip(3.0, 0.9, 10, 4.0, 1e3)
    update = tf.function(p.update_state)
    for norm, a in zip(norms, applied):
      self.assertAllClose(p.threshold(), ref.threshold(), rtol=1e-5)
      update({'grad_norm': tf.constant(norm, tf.float32)}, tf.constant(a))
      ref.update(float(np.float32(norm)), a)
    self.assertEqual(int(p.count.numpy()), ref.count)
    self.assertEqual(ref.count, 60 - 4)
    self.assertEqual(int(p.clipped_steps.numpy()), ref.clipped)
    self.assertEqual(ref.clipped, 2)
    self.assertAllClose(p.mean.numpy(), ref.mean, rtol=1e-5)
    self.assertAllClose(p.var.numpy(), ref.var, rtol=1e-4)
    summary = p.summary()['adaptive_clip']
    self.assertEqual(summary['clipped_steps'], 2)
    self.assertAllClose(summary['threshold'], ref.threshold(), rtol=1e-5)

  def test_values_carried_from_the_transform_update_like_fresh_reads(self):
    # The guard hands the transform's reads and threshold on to update_state through the report
    # (one read per step); the state must be the bits a fresh read would give.
    rng = np.random.RandomState(1)
    carried, fresh = (clipping.AdaptiveClip(warmup_steps=5) for _ in range(2))
    for i in range(40):
      grads = [tf.constant(rng.normal(size=(3, 2)) * (30.0 if i == 25 else 1.0), tf.float32)]
      applied = tf.constant(i != 10)
      stats = stats_for(grads)
      carried.transform_gradients(grads, stats)
      keys = [k for k in stats if k.startswith('adaptive_clip/')]
      self.assertLen(keys, 4)
      carried.update_state({'grad_norm': stats_for(grads)['grad_norm'],
                            **{k: stats[k] for k in keys}}, applied)
      fresh.update_state({'grad_norm': stats_for(grads)['grad_norm']}, applied)
    for a, b in zip(carried.variables, fresh.variables):
      self.assertEqual(a.numpy().tobytes(), b.numpy().tobytes(), a.name)
    self.assertEqual(int(carried.clipped_steps.numpy()), 1)

  def _warmed_up(self, norm=2.0, n=30):
    p = clipping.AdaptiveClip(z_threshold=4.0, warmup_steps=5)
    for i in range(n):
      p.update_state({'grad_norm': tf.constant(norm * (1 + 0.1 * (i % 3)))}, tf.constant(True))
    return p

  @parameterized.named_parameters(('eager', False), ('xla', True))
  def test_spike_is_clipped_to_the_threshold_and_ordinary_steps_untouched(self, xla):
    p = self._warmed_up()
    threshold = float(p.threshold().numpy())
    self.assertGreater(threshold, 2.2)
    self.assertLess(threshold, 4.0)

    def transform(grads):
      stats = stats_for(grads, xla=xla)  # Under XLA the clip is the factor form (no cond).
      out = p.transform_gradients(grads, stats)
      return out, stats['grad_norm'], stats['clipped_grad_norm']

    fn = tf.function(transform, jit_compile=True) if xla else transform
    spike = [tf.constant([30.0, 40.0]), tf.constant([[0.0, 0.0]])]  # norm 50
    out, norm, clipped_norm = fn(spike)
    self.assertAllClose(out[0], np.array([30.0, 40.0]) * threshold / 50.0, rtol=1e-5)
    self.assertAllClose(norm, threshold, rtol=1e-6)
    self.assertAllClose(clipped_norm, threshold, rtol=1e-6)
    ordinary = [tf.constant([1.2, 1.6]), tf.constant([[0.0, 0.0]])]  # norm 2: below the threshold
    out, norm, _ = fn(ordinary)
    self.assertAllEqual(out[0], ordinary[0])  # Exactly unchanged, not multiplied by ~1.0.
    self.assertAllClose(norm, 2.0)

  @parameterized.named_parameters(('eager', False), ('xla', True))
  @pytest.mark.slow
  def test_non_finite_stays_non_finite_and_huge_finite_is_clipped(self, xla):
    p = self._warmed_up()
    threshold = float(p.threshold().numpy())

    def transform(grads):
      return p.transform_gradients(grads, stats_for(grads, xla=xla))

    fn = tf.function(transform, jit_compile=True) if xla else transform
    nan = [tf.constant([np.nan, 1.0]), tf.constant([2.0])]
    out = fn(nan)
    self.assertTrue(np.isnan(out[0].numpy()[0]))
    huge = [tf.constant([3e38, 3e38, 3e38], tf.float32)]  # Finite; the norm overflows float32.
    self.assertFalse(np.isfinite(stats_for(huge)['grad_norm'].numpy()))
    out = fn(huge)
    self.assertAllClose(out[0], np.full(3, threshold / math.sqrt(3.0)), rtol=1e-5)

  def test_first_step_only_the_ceiling_applies(self):
    p = clipping.AdaptiveClip(max_norm=10.0)
    grads = [tf.constant([300.0, 400.0])]
    out = p.transform_gradients(grads, stats_for(grads))
    self.assertAllClose(out[0], [6.0, 8.0])
    q = clipping.AdaptiveClip(max_norm=None)
    out = q.transform_gradients(grads, stats_for(grads))
    self.assertAllEqual(out[0], grads[0])

  def test_norms_of_zero_set_no_scale(self):
    # Steps where no gradient reached a weight (a ReLU output below 0 on every row of the
    # batch): accepted, a first norm of 0 made the threshold 0 and every later step clipped to 0.
    p = clipping.AdaptiveClip()
    ceiling = float(p.threshold().numpy())
    for _ in range(3):
      p.update_state({'grad_norm': tf.constant(0.0)}, tf.constant(True))
    self.assertEqual((int(p.count.numpy()), int(p.clipped_steps.numpy())), (0, 0))
    self.assertEqual(float(p.threshold().numpy()), ceiling)
    grads = [tf.constant([0.3, 0.4])]
    self.assertAllEqual(p.transform_gradients(grads, stats_for(grads))[0], grads[0])

  def test_a_relu_head_with_no_gradient_on_its_first_batch_still_trains(self):
    # The first batch's features are 0 and the head's bias below 0: its first step has a
    # gradient norm of exactly 0; the rows after it lift the head, as in plain fit.
    rng = np.random.RandomState(0)
    x = rng.normal(size=(512, 4)).astype('float32')
    x[:32] = 0.0
    y = np.maximum(0.0, x @ np.array([1.0, -1.0, 0.5, 0.0], 'float32'))[:, None]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, 'relu'),
                              keras.layers.Dense(1, 'relu', bias_initializer=keras.initializers.Constant(-0.5))])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse')
    from stable_train.keras import fit as keras_fit  # pylint: disable=g-import-not-at-top
    guard = keras_fit.guard_fit(model, policies=[clipping.AdaptiveClip()])
    before = float(model.evaluate(x[32:], y[32:], verbose=0))
    model.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)
    self.assertLess(float(model.evaluate(x[32:], y[32:], verbose=0)), 0.5 * before)
    self.assertEqual(int(guard.policies[0].clipped_steps.numpy()), 0)

  def test_state_survives_checkpoint_bit_identically(self):
    p = self._warmed_up()
    path = tf.train.Checkpoint(policy=p).write(self.get_temp_dir() + '/ckpt')
    q = clipping.AdaptiveClip(z_threshold=4.0, warmup_steps=5)
    tf.train.Checkpoint(policy=q).read(path).assert_consumed()
    for a, b in ((p.mean, q.mean), (p.var, q.var), (p.count, q.count),
                 (p.clipped_steps, q.clipped_steps)):
      self.assertEqual(a.numpy().tobytes(), b.numpy().tobytes())

  @pytest.mark.slow
  def test_resumed_run_continues_the_statistics(self):
    # 40 steps straight, or 20 + resume + 20: the same statistics, bit for bit.
    def run(model_dir, steps):
      t = trainer_lib.Trainer(model=models.mlp(input_dim=16, hidden=(8,)),
                              optimizer=keras.optimizers.Adam(1e-3),
                              loss=keras.losses.MeanSquaredError(), model_dir=model_dir,
                              steps_per_loop=5, checkpoint_every=10)
      t.fit(data.synthetic_regression(num_features=16, num_examples=256), num_steps=steps)
      return t.policies[1]

    straight = run(self.get_temp_dir() + '/a', 40)
    run(self.get_temp_dir() + '/b', 20)
    resumed = run(self.get_temp_dir() + '/b', 40)
    self.assertIsInstance(resumed, clipping.AdaptiveClip)
    self.assertEqual(int(resumed.count.numpy()), 40)
    for name in ('mean', 'var', 'count'):
      self.assertEqual(getattr(straight, name).numpy().tobytes(),
                       getattr(resumed, name).numpy().tobytes(), name)

  def test_bad_arguments_name_the_argument(self):
    cases = [
        (lambda: clipping.AdaptiveClip(z_threshold=0), 'z_threshold=0'),
        (lambda: clipping.AdaptiveClip(alpha=1.0), 'alpha=1.0'),
        (lambda: clipping.AdaptiveClip(warmup_steps=1), 'warmup_steps=1'),
        (lambda: clipping.AdaptiveClip(warmup_ratio=0.5), 'warmup_ratio=0.5'),
        (lambda: clipping.AdaptiveClip(max_norm=float('inf')), 'max_norm=inf'),
        (lambda: clipping.ClipByValue(clip_value=-1), 'clip_value=-1'),
        (lambda: clipping.ClipByValue(clip_value='1'), "clip_value='1'"),
        (lambda: clipping.ClipByNorm(max_norm=0.0), 'max_norm=0.0'),
        (lambda: clipping.AdaptiveGradClip(clipping=0), 'clipping=0'),
        (lambda: clipping.AdaptiveGradClip(eps=-1.0), 'eps=-1.0'),
        (lambda: clipping.AdaptiveGradClip(exclude='logits'), "exclude='logits'"),
    ]
    for make, text in cases:
      with self.assertRaises(errors.ConfigError) as ctx:
        make()
      self.assertIn(text, str(ctx.exception))
      self.assertEqual(len(str(ctx.exception).splitlines()), 1)
    with self.assertRaises(TypeError):
      clipping.AdaptiveClip(2.5)  # pylint: disable=too-many-function-args


class ElementwiseClipsTest(parameterized.TestCase, tf.test.TestCase):

  GRADS = [np.array([[3.0, -4.0], [0.5, 12.0]], np.float32), np.array([-0.2, 2.0], np.float32)]

  @parameterized.named_parameters(('eager', False), ('xla', True))
  @pytest.mark.slow
  def test_clip_by_value_matches_numpy(self, xla):
    p = clipping.ClipByValue(clip_value=1.0)

    def transform(grads):
      stats = stats_for(grads)
      return p.transform_gradients(grads, stats), stats['grad_norm']

    fn = tf.function(transform, jit_compile=True) if xla else transform
    out, norm = fn([tf.constant(g) for g in self.GRADS])
    expected = [np.clip(g, -1.0, 1.0) for g in self.GRADS]
    for o, e in zip(out, expected):
      self.assertAllClose(o, e)
    self.assertAllClose(norm, np.sqrt(sum((e ** 2).sum() for e in expected)))

  def test_clip_by_value_keeps_non_finite(self):
    p = clipping.ClipByValue(clip_value=1.0)
    grads = [tf.constant([np.inf, np.nan, 5.0])]
    out = p.transform_gradients(grads, stats_for(grads))[0].numpy()
    self.assertTrue(np.isposinf(out[0]))
    self.assertTrue(np.isnan(out[1]))
    self.assertEqual(out[2], 1.0)

  @parameterized.named_parameters(('eager', False), ('xla', True))
  def test_clip_by_norm_matches_numpy_per_variable(self, xla):
    p = clipping.ClipByNorm(max_norm=2.0)

    def transform(grads):
      stats = stats_for(grads)
      return p.transform_gradients(grads, stats), stats['grad_norm']

    fn = tf.function(transform, jit_compile=True) if xla else transform
    out, norm = fn([tf.constant(g) for g in self.GRADS])
    expected = [g * min(1.0, 2.0 / np.linalg.norm(g)) for g in self.GRADS]
    for o, e in zip(out, expected):
      self.assertAllClose(o, e, rtol=1e-6)
    self.assertAllClose(norm, np.sqrt(sum((e ** 2).sum() for e in expected)), rtol=1e-6)

  def test_clip_by_norm_huge_and_non_finite(self):
    p = clipping.ClipByNorm(max_norm=1.0)
    grads = [tf.constant([3e38, 3e38]), tf.constant([np.nan, 1.0])]
    out = p.transform_gradients(grads, stats_for(grads))
    self.assertAllClose(out[0], [math.sqrt(0.5)] * 2, rtol=1e-5)
    self.assertTrue(np.isnan(out[1].numpy()[0]))


class AdaptiveGradClipTest(parameterized.TestCase, tf.test.TestCase):

  @staticmethod
  def reference(g, w, clipping_, eps):
    """AGC in numpy: per output unit (last axis), ‖G‖ <= clipping · max(‖W‖, eps)."""
    axes = None if g.ndim <= 1 else tuple(range(g.ndim - 1))
    g_norm = np.sqrt((g.astype(np.float64) ** 2).sum(axis=axes, keepdims=True))
    w_norm = np.sqrt((w.astype(np.float64) ** 2).sum(axis=axes, keepdims=True))
    limit = np.maximum(w_norm, eps) * clipping_
    return np.where(g_norm > limit, g * limit / np.maximum(g_norm, 1e-6), g)

  @parameterized.named_parameters(('eager', False), ('xla', True))
  def test_matches_numpy_unitwise_and_excludes_by_path(self, xla):
    rng = np.random.RandomState(0)
    weights = [rng.normal(size=(3, 3, 2, 4)).astype(np.float32),  # conv kernel HWIO
               rng.normal(size=(5, 3)).astype(np.float32),        # dense kernel
               np.zeros(3, np.float32),                           # bias: eps floor
               rng.normal(size=(3, 2)).astype(np.float32)]        # final layer: excluded
    grads = [rng.normal(size=w.shape).astype(np.float32) * s
             for w, s in zip(weights, (0.05, 1.0, 0.5, 9.0))]
    variables = [tf.Variable(w) for w in weights]
    paths = ['net/conv/kernel', 'net/dense/kernel', 'net/dense/bias', 'net/logits/kernel']
    p = clipping.AdaptiveGradClip(clipping=0.1, eps=1e-3, exclude=('logits',))
    p.build(variables, paths)

    def transform(gs):
      stats = stats_for(gs)
      stats['variable_paths'] = paths
      return p.transform_gradients(gs, stats), stats['grad_norm']

    fn = tf.function(transform, jit_compile=True) if xla else transform
    out, norm = fn([tf.constant(g) for g in grads])
    expected = [self.reference(g, w, 0.1, 1e-3) for g, w in zip(grads[:3], weights[:3])]
    expected.append(grads[3])  # Excluded: untouched.
    for o, e in zip(out, expected):
      self.assertAllClose(o, e, rtol=1e-5, atol=1e-7)
    self.assertAllEqual(out[3], grads[3])
    self.assertFalse(np.allclose(expected[1], grads[1]))  # The dense kernel was clipped.
    self.assertAllClose(norm, np.sqrt(sum((e.astype(np.float64) ** 2).sum() for e in expected)),
                        rtol=1e-5)

  def test_in_a_trainer_with_a_non_finite_gradient(self):
    # Built by the Trainer (Policy.build), and a NaN batch is still skipped, not made finite.
    keras.utils.set_random_seed(0)
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=16, hidden=(8,)), optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.MeanSquaredError(), model_dir=None,
        policies=[clipping.AdaptiveGradClip(clipping=0.01, exclude=('dense_1',)),
                  policies.SkipNonFinite()])
    summary = t.fit(data.synthetic_regression(num_features=16, num_examples=64,
                                              poison_batches=[1]), num_steps=4)
    self.assertEqual(summary['skipped_steps'], 1)
    self.assertEqual(summary['applied_steps'], 3)


class MirroredTest(tf.test.TestCase):
  """Transforms see the gradients already aggregated over replicas: two replicas give the same
  clipping, statistics and weights as one device on the full batch."""

  test_session = None

  @pytest.mark.slow
  def test_two_replicas_equal_one_device(self):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(16 * 8, 8)).astype(np.float32)
    y = (x[:, :1] * 2.0).astype(np.float32)
    x[16 * 6:16 * 7] *= 30.0  # A spike batch that AdaptiveClip clips.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16, drop_remainder=True)

    def run(strategy):
      with strategy.scope():
        t = trainer_lib.Trainer(
            model=models.mlp(input_dim=8, hidden=(4,), seed=0),
            optimizer=keras.optimizers.SGD(0.05), loss=keras.losses.MeanSquaredError(),
            policies=[clipping.AdaptiveGradClip(clipping=0.05, exclude=('dense_1',)),
                      clipping.AdaptiveClip(warmup_steps=3, warmup_ratio=2.0),
                      policies.SkipNonFinite()],
            model_dir=None, strategy=strategy)
      t.fit(dataset, num_steps=8)
      return t

    one = run(tf.distribute.get_strategy())
    two = run(tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1']))
    clip_one, clip_two = one.policies[1], two.policies[1]
    self.assertEqual(int(clip_one.clipped_steps.numpy()), 1)
    self.assertEqual(int(clip_two.clipped_steps.numpy()), 1)
    self.assertEqual(int(clip_two.count.numpy()), 7)
    self.assertAllClose(clip_two.mean.numpy(), clip_one.mean.numpy(), rtol=1e-5)
    self.assertAllClose(clip_two.var.numpy(), clip_one.var.numpy(), rtol=1e-4)
    for a, b in zip(one.model.get_weights(), two.model.get_weights()):
      self.assertAllClose(a, b, rtol=1e-5, atol=1e-6)


class CalledConditionalTest(tf.test.TestCase):
  """AdaptiveClip's conditional runs as a call of the branch taken (`compat.taken_branch_only`):
  traced, it gives the lowered conditional's bits, on a clipped step and an unclipped one."""

  def test_the_clip_traced_equals_the_lowered_one(self):
    def traced():
      p = clipping.AdaptiveClip(warmup_steps=5)
      for i in range(30):  # Statistics of norms around 2: a threshold between 2.2 and 4.
        p.update_state({'grad_norm': tf.constant(2.0 * (1 + 0.1 * (i % 3)))}, tf.constant(True))
      return tf.function(lambda grads: p.transform_gradients(grads, stats_for(grads)))

    spike = [tf.constant([30.0, 40.0]), tf.constant([[0.5, -0.25]])]
    ordinary = [tf.constant([1.2, 1.6]), tf.constant([[0.0, 0.25]])]
    called = traced()
    ops = called.get_concrete_function(spike).graph.get_operations()
    self.assertTrue(any(op.type in ('If', 'StatelessIf')  # Called, not lowered.
                        and not op.get_attr('_lower_using_switch_merge') for op in ops))
    with mock.patch.object(compat, 'taken_branch_only', lambda outputs: outputs):
      lowered = traced()
      for grads in (spike, ordinary):
        for a, b in zip(called(grads), lowered(grads)):
          self.assertAllEqual(a.numpy().view(np.uint32), b.numpy().view(np.uint32))

  def test_a_clipping_convnet_with_batchnorm_and_dropout_trains_to_the_same_bits(self):
    def run():
      t, summary = train(models.convnet_bn(seed=0), keras.optimizers.Adam(1e-3),
                         losses.sparse_softmax_cross_entropy, data.synthetic_images(), 20,
                         [policies.CheckNumerics(), clipping.AdaptiveClip(max_norm=0.05),
                          policies.SkipNonFinite()])
      self.assertEqual(summary['applied_steps'], 20)
      self.assertEqual(int(t.policies[1].clipped_steps.numpy()), 20)  # Every step clipped.
      return [v.numpy() for v in list(t.model.variables) + list(t.optimizer.variables)]

    called = run()
    with mock.patch.object(compat, 'taken_branch_only', lambda outputs: outputs):
      lowered = run()
    for a, b in zip(called, lowered):  # Weights, BatchNorm statistics, seeds, Adam's slots.
      self.assertAllEqual(a, b)


def all_finite(trainer):
  return all(np.isfinite(v.numpy()).all()
             for v in list(trainer.model.variables) + list(trainer.optimizer.variables)
             if tf.as_dtype(v.dtype).is_floating)


def train(model, optimizer, loss, dataset, steps, policies_=None, model_dir=None):
  t = trainer_lib.Trainer(model=model, optimizer=optimizer, loss=loss, policies=policies_,
                          model_dir=model_dir, steps_per_loop=10, log_every=10**9,
                          summary_every=10**9)
  return t, t.fit(dataset, num_steps=steps)


class HealthyRunTest(parameterized.TestCase, tf.test.TestCase):
  """The default stack is invisible on a healthy run: the same final loss as a bare step."""

  CASES = {
      'mlp': (models.mlp, data.synthetic_regression, keras.losses.MeanSquaredError),
      'convnet_bn': (models.convnet_bn, data.synthetic_images,
                     lambda: losses.sparse_softmax_cross_entropy),
      'transformer': (models.transformer, data.synthetic_sequences,
                      lambda: losses.sparse_softmax_cross_entropy),
  }

  def final_loss(self, case, policies_, steps):
    """Training loss after `steps` Adam steps, measured on 10 fixed batches (inference mode)."""
    make_model, make_data, make_loss = self.CASES[case]
    loss = make_loss()
    t, summary = train(make_model(seed=0), keras.optimizers.Adam(1e-3), loss, make_data(),
                       steps, policies_)
    self.assertEqual(summary['applied_steps'], steps)
    batches = list(make_data().take(10))
    return float(np.mean([float(loss(y, t.model(x, training=False))) for x, y in batches])), t

  @parameterized.named_parameters(('mlp', 'mlp', 300), ('convnet_bn', 'convnet_bn', 200),
                                  ('transformer', 'transformer', 120))
  @pytest.mark.slow
  def test_default_stack_matches_the_bare_run(self, case, steps):
    bare, _ = self.final_loss(case, [], steps)
    default, t = self.final_loss(case, None, steps)
    self.assertIsInstance(t.policies[1], clipping.AdaptiveClip)
    self.assertAllClose(default, bare, rtol=0.02)
    if case == 'mlp':
      # The test can see a clip that is not invisible: the old default (a fixed clip at 1.0).
      old, _ = self.final_loss(case, [policies.CheckNumerics(), policies.ClipByGlobalNorm(),
                                      policies.SkipNonFinite()], steps)
      self.assertGreater(old / bare, 2.0)


class RescueTest(tf.test.TestCase):
  """Every case the old default (fixed clip at 1.0) rescued, the new default rescues too."""

  @pytest.mark.slow
  def test_sgd_learning_rate_too_high_on_the_quickstart(self):
    # SGD at 0.2: Keras fit reaches NaN in epoch 1 (TF_FACTS); bare steps too (the control).
    bare, _ = train(models.mlp(), keras.optimizers.SGD(0.2), keras.losses.MeanSquaredError(),
                    data.synthetic_regression(), 100, [])
    self.assertFalse(all_finite(bare))
    t, summary = train(models.mlp(), keras.optimizers.SGD(0.2), keras.losses.MeanSquaredError(),
                       data.synthetic_regression(), 400)
    self.assertEqual(summary['status'], 'completed')
    self.assertTrue(all_finite(t))
    self.assertLess(summary['final_loss'], 0.5)  # It trains (the label variance is ~1).
    self.assertGreater(summary['adaptive_clip']['clipped_steps'], 0)

  def test_nan_batches_are_skipped_and_never_enter_the_statistics(self):
    t, summary = train(models.mlp(input_dim=16, hidden=(8,)), keras.optimizers.Adam(1e-3),
                       keras.losses.MeanSquaredError(),
                       data.synthetic_regression(num_features=16, poison_batches=[3, 4, 17]), 30)
    self.assertEqual(summary['skipped_steps'], 3)
    self.assertTrue(all_finite(t))
    clip = t.policies[1]
    self.assertEqual(int(clip.count.numpy()) + int(clip.clipped_steps.numpy()), 27)
    self.assertTrue(np.isfinite(clip.mean.numpy()) and np.isfinite(clip.var.numpy()))

  @pytest.mark.slow
  def test_loss_scaled_by_1e25_is_clipped_not_overflowed(self):
    # Finite gradients of ~1e25: unclipped, Adam's second moment (g**2) overflows float32.
    mse = keras.losses.MeanSquaredError()
    huge = lambda y, p: 1e25 * mse(y, p)
    dataset = data.synthetic_regression(num_features=16, num_examples=256)
    model = models.mlp(input_dim=16, hidden=(8,))
    x, y = next(iter(dataset))
    initial = float(mse(y, model(x)))
    t, summary = train(model, keras.optimizers.Adam(1e-2), huge, dataset, 60)
    self.assertEqual(summary['applied_steps'], 60)
    self.assertTrue(all_finite(t))
    self.assertLess(summary['final_loss'] / 1e25, initial)  # It trains.
    bare, _ = train(models.mlp(input_dim=16, hidden=(8,)), keras.optimizers.Adam(1e-2), huge,
                    dataset, 60, [])
    self.assertFalse(all_finite(bare))  # The control: the bare run's optimizer state overflows.

  @pytest.mark.slow
  def test_naive_softmax_on_large_inputs_is_skipped_and_stops_cleanly(self):
    # -log(softmax) of logits from inputs of scale 30 is NaN at every step: every update is
    # skipped, the weights stay as initialised, and the run stops after max_consecutive skips.
    def run(policies_):
      model = models.mlp(input_dim=64, hidden=(128, 64), outputs=10)
      initial = [w.copy() for w in model.get_weights()]
      t, summary = train(model, keras.optimizers.SGD(0.5), losses.naive_softmax_cross_entropy,
                         data.synthetic_classification(scale=30.0), 40, policies_)
      return t, summary, initial

    t, summary, initial = run(None)
    self.assertEqual(summary['status'], 'aborted')
    self.assertEqual(summary['applied_steps'], 0)
    for before, after in zip(initial, t.model.get_weights()):
      self.assertTrue(np.array_equal(before, after))
    bare, _, _ = run([])
    self.assertFalse(all_finite(bare))  # The control: bare steps apply the NaN.


if __name__ == '__main__':
  tf.test.main()
