"""Tests for stable_train.policies.diagnostics: a bad initialisation or learning rate is named, not hidden."""

import json
import os
import types

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import errors
from stable_train.policies import basic as policies
from stable_train.policies import diagnostics
from stable_train.runfiles import events
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models


def run(model_dir, initializer, optimizer, steps=30):
  check = diagnostics.InitialisationCheck()
  t = trainer_lib.Trainer(model=models.mlp(kernel_initializer=initializer), optimizer=optimizer,
                          loss=keras.losses.MeanSquaredError(),
                          policies=trainer_lib.default_policies() + [check],
                          model_dir=model_dir, steps_per_loop=10)
  t.fit(data.synthetic_regression(), num_steps=steps)
  with open(os.path.join(model_dir, 'summary.json')) as f:
    summary = json.load(f)
  # InitialisationCheck's own (DivergenceCheck's start check names a broken start too).
  warnings = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
              if e['event'] == 'warning' and e.get('policy') == check.name]
  return summary, warnings


class InitialisationCheckTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_huge_initial_outputs_are_named_with_the_remedy(self):
    summary, warnings = run(self.get_temp_dir() + '/bad',
                            keras.initializers.RandomNormal(stddev=0.5),
                            keras.optimizers.Adam(1e-3))
    self.assertEqual([w['cause'] for w in warnings], ['initialisation'])
    self.assertEqual(warnings[0]['step'], 0)
    self.assertIn('initial weights are too large', warnings[0]['message'])
    self.assertIn('HeNormal', warnings[0]['message'])
    self.assertGreater(warnings[0]['output_rms'], 100 * warnings[0]['label_rms'])
    self.assertEqual(summary['init_check']['warnings'], ['huge_initial_outputs'])
    self.assertEqual(summary['status'], 'completed')  # A warning, not a stop.

  @pytest.mark.slow
  def test_loss_that_stays_far_above_its_start_names_the_learning_rate(self):
    # The same bad start with SGD: the loss swings between ~1e9-1e20 and ~20 for dozens of
    # steps (first value 1.6e5) while clipping and skipping keep the run alive.
    summary, warnings = run(self.get_temp_dir() + '/sgd',
                            keras.initializers.RandomNormal(stddev=0.5),
                            keras.optimizers.SGD(0.01), steps=40)
    causes = [w['cause'] for w in warnings]
    self.assertEqual(causes, ['initialisation', 'learning_rate_or_initialisation'])
    loss_warning = warnings[1]
    self.assertIn('learning rate is likely too high', loss_warning['message'])
    self.assertGreaterEqual(loss_warning['median_loss'], 100 * loss_warning['initial_loss'])
    self.assertEqual(summary['init_check']['warnings'],
                     ['huge_initial_outputs', 'loss_stays_high'])

  @pytest.mark.slow
  def test_a_resumed_run_does_not_repeat_the_warning(self):
    model_dir = self.get_temp_dir() + '/resume'
    bad = keras.initializers.RandomNormal(stddev=0.5)
    first, _ = run(model_dir, bad, keras.optimizers.Adam(1e-3), steps=20)
    summary, warnings = run(model_dir, bad, keras.optimizers.Adam(1e-3), steps=40)
    self.assertEqual([w['step'] for w in warnings], [0])  # Only the first run's.
    self.assertEqual(summary['init_check']['warnings'], ['huge_initial_outputs'])
    # Restored with the checkpoint, not re-measured on the trained model.
    self.assertEqual(summary['init_check']['initial_loss'], first['init_check']['initial_loss'])

  @pytest.mark.slow
  def test_a_healthy_start_gives_no_warning(self):
    summary, warnings = run(self.get_temp_dir() + '/good', 'glorot_uniform',
                            keras.optimizers.Adam(1e-3))
    self.assertEqual(warnings, [])
    self.assertEqual(summary['init_check']['warnings'], [])
    self.assertLess(summary['init_check']['output_rms'], 10 * summary['init_check']['label_rms'])

  def test_bad_arguments(self):
    for kwargs, text in (({'output_ratio': 1.0}, 'output_ratio=1.0'),
                         ({'loss_ratio': float('nan')}, 'loss_ratio=nan'),
                         ({'patience': 0}, 'patience=0')):
      with self.assertRaises(errors.ConfigError) as ctx:
        diagnostics.InitialisationCheck(**kwargs)
      self.assertIn(text, str(ctx.exception))



class _Linear(tf.Module):
  """A plain tf.Module model (no stateless_call) with weights x1000."""

  def __init__(self):
    super().__init__()
    self.w = tf.Variable(tf.random.stateless_normal([20, 1], seed=[0, 0]) * 1000.0)

  def __call__(self, inputs, training=False):
    return inputs @ self.w


class InitialisationCheckRegressionsTest(tf.test.TestCase):
  """Found by a break-it round: each failed before its fix."""

  def _fit(self, model, y_scale, optimizer):
    rng = np.random.RandomState(0)
    x = rng.randn(256, 20).astype('float32')
    y = (x @ rng.randn(20, 1) * y_scale).astype('float32')
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
    t = trainer_lib.Trainer(model=model, optimizer=optimizer, loss=keras.losses.MeanSquaredError(),
                            policies=[policies.SkipNonFinite(), diagnostics.InitialisationCheck()],
                            model_dir=None, log_every=10000)
    return t.fit(data, num_steps=20)['init_check']

  def test_small_labels_do_not_blame_a_healthy_initialisation(self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation='relu'),
                              keras.layers.Dense(1)])
    check = self._fit(model, 1e-3, keras.optimizers.Adam(1e-3))
    self.assertNotIn('huge_initial_outputs', check['warnings'])
    self.assertIsNotNone(check['output_rms'])

  def test_a_tf_module_model_gets_the_output_check_too(self):
    check = self._fit(_Linear(), 1.0, keras.optimizers.SGD(1e-3))
    self.assertIsNotNone(check['output_rms'])
    self.assertIn('huge_initial_outputs', check['warnings'])

if __name__ == '__main__':
  tf.test.main()


class OutputSpreadTest(tf.test.TestCase):

  def _spread(self, model, x):
    probe = types.SimpleNamespace(model=model, first_batch=lambda: (x, np.zeros([len(x), 1])),
                                  split_batch=lambda batch: batch)
    return diagnostics.output_spread(probe)

  def test_a_live_model_varies_from_row_to_row_and_a_dead_one_does_not(self):
    x = np.random.RandomState(0).normal(size=(16, 4)).astype(np.float32)
    keras.utils.set_random_seed(0)
    live = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation='relu'),
                             keras.layers.Dense(1)])
    self.assertGreater(self._spread(live, x), 0.1)
    dead = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation='relu'),
                             keras.layers.Dense(1, bias_initializer='ones')])
    dead.layers[0].bias.assign(-1e3 * np.ones(8, np.float32))  # Every unit below zero.
    self.assertEqual(self._spread(dead, x), 0.0)
    tokens = np.random.RandomState(0).randint(0, 16, size=(8, 5)).astype(np.int32)
    embed = keras.Sequential([keras.Input((5,), dtype='int32'), keras.layers.Embedding(16, 4),
                              keras.layers.Flatten(), keras.layers.Dense(3)])
    self.assertGreater(self._spread(embed, tokens), 0.1)  # Integer inputs are judged too.

  def test_nothing_to_judge(self):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    same = np.ones((8, 4), np.float32)  # Identical rows: the same output is no collapse.
    self.assertIsNone(self._spread(model, same))
    self.assertIsNone(self._spread(model, same[:1]))  # One row.
    nan = np.random.RandomState(0).normal(size=(8, 4)).astype(np.float32)
    nan[0, 0] = np.nan  # Non-finite outputs are the other checks' case.
    self.assertIsNone(self._spread(model, nan))
    probe = types.SimpleNamespace(model=model, first_batch=lambda: None, split_batch=None)
    self.assertIsNone(diagnostics.output_spread(probe))

  def test_the_probes_move_no_state_of_the_model(self):
    # A plain inference-mode call advances the LSTM's seed generator, which changed the training
    # after every probe; the probes run it through stateless_call.
    model = models.lstm(seed=0)
    x, y = next(iter(data.synthetic_sequences()))
    model(x[:4], training=True)
    before = [np.array(v.numpy()) for v in model.variables]
    probe = types.SimpleNamespace(model=model, first_batch=lambda: (x[:32], y[:32]),
                                  split_batch=lambda batch: batch)
    self.assertGreater(diagnostics.output_spread(probe), 0.01)
    self.assertIsNotNone(diagnostics.output_scale(probe)[0])
    for v, value in zip(model.variables, before):
      self.assertAllEqual(v.numpy(), value, msg=v.path)

  def test_a_first_batch_the_input_check_refused_has_no_scale(self):
    # A NoData fill in the first batch: skipped as bad input, so not the model's start either.
    model = models.mlp(input_dim=4, hidden=(8,), outputs=1, seed=0)
    x = np.random.RandomState(0).normal(size=(8, 4)).astype(np.float32)
    y = np.zeros((8, 1), np.float32)
    probe = lambda batch: types.SimpleNamespace(model=model, first_batch=lambda: batch,
                                                split_batch=lambda b: b)
    self.assertIsNotNone(diagnostics.output_scale(probe((tf.constant(x), tf.constant(y))))[0])
    x[2, 1] = -np.finfo(np.float32).max
    self.assertEqual(diagnostics.output_scale(probe((tf.constant(x), tf.constant(y)))),
                     (None, None, None, None))

  def test_sparse_features_and_a_call_without_training_get_a_scale(self):
    # A SparseTensor feature crashed the start check (np.asarray of it); a subclassed call(x)
    # without `training` made stateless_call raise, and the start went unchecked.
    x = np.random.RandomState(0).normal(size=(8, 4)).astype(np.float32)
    x[x < 0] = 0.0
    y = tf.zeros((8, 1))
    probe = lambda model, features: types.SimpleNamespace(
        model=model, first_batch=lambda: (features, y), split_batch=lambda b: b)
    inputs = keras.Input((4,), sparse=True)
    sparse_model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    rms = diagnostics.output_scale(probe(sparse_model, tf.sparse.from_dense(x)))[2]
    self.assertAllClose(rms, np.sqrt(np.mean(np.square(x[x > 0]))))  # The stored values'.
    sparse_labels = types.SimpleNamespace(model=sparse_model, split_batch=lambda b: b,
                                          first_batch=lambda: (tf.sparse.from_dense(x),
                                                               tf.sparse.from_dense(x[:, :1])))
    self.assertIsNotNone(diagnostics.output_scale(sparse_labels)[1])

    class NoTraining(keras.Model):
      def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_initializer='ones')

      def call(self, features):
        return self.dense(features)

    model = NoTraining()
    model(x)  # Built, as the Trainer builds it before the first step.
    outputs_rms = diagnostics.output_scale(probe(model, tf.constant(x)))[0]
    self.assertAllClose(outputs_rms, np.sqrt(np.mean(np.square(x.sum(1)))), rtol=1e-5)
    self.assertIsNotNone(diagnostics.output_spread(probe(model, tf.constant(x))))

  def test_a_large_offset_is_no_collapse_and_odd_models_are_left_alone(self):
    x = np.random.RandomState(0).normal(size=(16, 4)).astype(np.float32)
    offset = keras.Sequential([keras.Input((4,)), keras.layers.Dense(
        1, kernel_initializer=keras.initializers.Constant(0.3),
        bias_initializer=keras.initializers.Constant(1e6))])  # 1e6 +- 1: ~8 ulps apart.
    self.assertGreater(self._spread(offset, x), 0.0)

    class Broken(keras.Model):
      def call(self, inputs):
        raise TypeError('cannot take these')
    self.assertIsNone(self._spread(Broken(), x))  # A diagnostic never ends the run.

  def test_a_tf_module_keeps_its_generator_state(self):
    class Noisy(tf.Module):
      def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.ones([4, 2]))
        self.rng = tf.random.Generator.from_seed(0)
      def __call__(self, x):
        return tf.matmul(x + self.rng.normal(tf.shape(x)), self.w)
    model = Noisy()
    state = model.rng.state.numpy().copy()
    x = np.random.RandomState(0).normal(size=(8, 4)).astype(np.float32)
    self.assertGreater(self._spread(model, x), 0.0)
    self.assertAllEqual(model.rng.state.numpy(), state)
