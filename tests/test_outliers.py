"""Tests for stable_train.policies.outliers: OutlierSkip skips outlier steps in the graph, keeps them (and
non-finite ones) out of its window, escalates a lasting change, and resumes bit-exactly."""

import os

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import errors
from stable_train.policies import outliers
from stable_train.policies import recovery
from stable_train.runfiles import events
from stable_train.testing import faults as faults_lib
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models

FEATURES = 16


def step(policy, loss, norm):
  """One step's verdict and state update, as the guard and the step call them."""
  loss, norm = tf.constant(loss, tf.float32), tf.constant(norm, tf.float32)
  allow = policy.allow_update({'loss': loss, 'raw_grad_norm': norm})
  policy.update_state({'loss': loss, 'grad_norm': norm}, allow)
  return bool(allow.numpy())


def fit(model_dir, policies, *, steps, dataset=None, model=None, **kwargs):
  model = model or models.mlp(input_dim=FEATURES, hidden=(16,), outputs=1)
  t = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-3),
                          loss=keras.losses.MeanSquaredError(), policies=policies,
                          model_dir=model_dir, steps_per_loop=5, checkpoint_every=20,
                          healthy_window=5, verbose=False, **kwargs)
  return t, t.fit(dataset or regression(), num_steps=steps)


def whole_state(t):
  """Every model, optimizer and run-state variable (counters and policies' windows), by
  position (seed-generator names are per process)."""
  return [np.array(v.numpy()) for v in
          list(t.model.variables) + list(t.optimizer.variables) + list(t.state.variables)]


def regression(**kwargs):
  return data.synthetic_regression(num_features=FEATURES, num_examples=512, **kwargs)


class OutlierSkipUnitTest(tf.test.TestCase):

  def test_an_outlier_is_skipped_and_kept_out_of_the_window(self):
    p = outliers.OutlierSkip(window=8, warmup=4, num_stds=3.0, min_ratio=2.0)
    rng = np.random.RandomState(0)
    for _ in range(8):
      self.assertTrue(step(p, 1.0 + 0.1 * rng.rand(), 2.0 + 0.1 * rng.rand()))
    history = p.history.numpy().copy()
    self.assertFalse(step(p, 50.0, 2.0))  # The loss is an outlier.
    self.assertFalse(step(p, 1.0, 80.0))  # The gradient norm is.
    self.assertAllEqual(p.history.numpy(), history)  # Neither entered the window.
    self.assertEqual(int(p.skipped_steps.numpy()), 2)
    self.assertEqual(int(p.consecutive.numpy()), 2)
    self.assertTrue(step(p, 1.05, 2.05))
    self.assertEqual(int(p.consecutive.numpy()), 0)
    self.assertEqual(int(p.peak_consecutive.numpy()), 2)

  def test_non_finite_values_are_left_to_skip_non_finite(self):
    p = outliers.OutlierSkip(window=8, warmup=4)
    for _ in range(6):
      step(p, 1.0, 1.0)
    before = [v.numpy().copy() for v in (p.history, p.count, p.skipped_steps)]
    for value in (np.nan, np.inf):
      self.assertTrue(step(p, value, 1.0))  # Not vetoed here...
      self.assertTrue(step(p, 1.0, value))
    after = [v.numpy() for v in (p.history, p.count, p.skipped_steps)]
    for a, b in zip(before, after):  # ... and never in the window (nor counted as outliers).
      self.assertAllEqual(a, b)

  def test_nothing_is_skipped_during_the_warm_up_and_the_floors_hold(self):
    p = outliers.OutlierSkip(window=16, warmup=8, min_ratio=10.0, start_fraction=0.5,
                             metrics=('loss',))
    self.assertTrue(all(step(p, v, 1.0) for v in [1.0, 100.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]))
    # Converged far below the start: tiny noise has a tiny std, yet 5x its mean is no outlier.
    for _ in range(16):
      step(p, 1e-3, 1.0)
    self.assertTrue(step(p, 5e-3, 1.0))
    self.assertFalse(step(p, 1e3, 1.0))

  def test_a_streak_longer_than_max_consecutive_escalates(self):
    p = outliers.OutlierSkip(window=8, warmup=4, max_consecutive=2, metrics=('loss',))
    for _ in range(4):
      step(p, 1.0, 1.0)
    for _ in range(3):
      self.assertFalse(step(p, 1e4, 1.0))

    class Reports:
      step = np.array([7])

    decision = p.decide(Reports(), None)
    self.assertEqual((decision.action, decision.trigger), ('escalate', 'outlier_streak'))
    self.assertFalse(p.is_healthy())

  def test_bad_arguments(self):
    for kwargs, text in (({'window': 1}, 'window=1'), ({'warmup': 200}, 'warmup=200'),
                         ({'num_stds': 0}, 'num_stds=0'), ({'metrics': ('loss', 'x')}, 'metrics'),
                         ({'min_ratio': 0.5}, 'min_ratio=0.5'),
                         ({'max_consecutive': 0}, 'max_consecutive=0')):
      with self.assertRaisesRegex(errors.ConfigError, text):
        outliers.OutlierSkip(**kwargs)


class OutlierSkipRunTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_a_corrupt_stretch_is_skipped_and_quarantined(self):
    model_dir = self.get_temp_dir() + '/stretch'
    corrupt = list(range(60, 80))
    _, summary = fit(model_dir, trainer_lib.default_policies() + [outliers.OutlierSkip()],
                     steps=150, dataset=regression(poison_batches=corrupt, poison_value=1e4))
    _, clean = fit(None, trainer_lib.default_policies(), steps=150)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['outlier_skip']['skipped_steps'], len(corrupt))
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    quarantined = [b for r in records if r['event'] == 'outliers' for b in r['batches']]
    self.assertEqual(quarantined, corrupt)
    self.assertEqual(summary['skipped_steps'], len(corrupt))
    self.assertLess(summary['final_loss'], 3 * clean['final_loss'] + 0.05)
    self.assertEqual(summary['diagnosis']['cause'], 'bad_input')

  @pytest.mark.slow
  def test_resume_is_bit_exact_over_the_whole_state(self):
    # Straight through, and stopped at step 60 then resumed by a fresh Trainer: every model,
    # optimizer and policy variable (the window included) ends bit-identical, on a BatchNorm +
    # Dropout convnet whose outlier steps (losses x1e4; BatchNorm makes the convnet deaf to an
    # input's scale) come before and after the stop.
    images = lambda: data.synthetic_images(image_shape=(8, 8, 3), num_classes=4,
                                           num_examples=128)
    convnet = lambda: models.convnet_bn(image_shape=(8, 8, 3), num_classes=4, filters=(4, 8))

    def run(model_dir, stops):
      for steps in stops:
        t = trainer_lib.Trainer(
            model=convnet(), optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            policies=trainer_lib.default_policies() + [outliers.OutlierSkip(warmup=16)],
            model_dir=model_dir, steps_per_loop=5, checkpoint_every=30, verbose=False,
            faults=faults_lib.Faults(loss_spike_steps=[40, 45, 58, 62, 63, 80],
                                     loss_spike_factor=1e4))
        summary = t.fit(images(), num_steps=steps)
      return t, summary

    straight, s1 = run(self.get_temp_dir() + '/straight', [100])
    resumed, s2 = run(self.get_temp_dir() + '/resumed', [60, 100])
    self.assertEqual(s1['outlier_skip']['skipped_steps'], 6)
    self.assertEqual(s1['outlier_skip'], s2['outlier_skip'])
    for a, b in zip(whole_state(straight), whole_state(resumed)):
      self.assertAllEqual(a, b)
