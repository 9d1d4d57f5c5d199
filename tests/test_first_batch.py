"""Tests for stable_train.keras.first_batch: the guarded fit's sample of its first batch is bounded,
kept from the first step of the first fit (dict inputs and sample weights as batched, under XLA
too), no model, optimizer or checkpoint holds it, and it is made only for a stack that reads it."""

import glob
import os

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.keras import first_batch
from stable_train.keras import fit as keras_fit
from stable_train.policies import basic as policies
from stable_train.policies import diagnostics
from stable_train.policies import divergence
from stable_train.zoo import models

FEATURES = 6


def _arrays(rows, seed=0):
  rng = np.random.RandomState(seed)
  return (rng.normal(size=(rows, FEATURES)).astype(np.float32),
          rng.normal(size=(rows, 1)).astype(np.float32))


def _model(**compile_kwargs):
  model = models.mlp(input_dim=FEATURES, hidden=(8,), outputs=1, seed=0)
  model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse', **compile_kwargs)
  return model


class FirstBatchTest(tf.test.TestCase):
  test_session = None

  @pytest.mark.slow
  def test_the_first_32_rows_are_kept_under_xla_too(self):
    x, y = _arrays(3 * 48)
    for kwargs in ({}, dict(jit_compile=True, steps_per_execution=2)):
      model = _model(**kwargs)
      guard = keras_fit.guard_fit(model)
      model.fit(x, y, batch_size=48, shuffle=False, verbose=0)
      kept_x, kept_y = guard.first_batch()
      self.assertAllEqual(kept_x, x[:first_batch.MAX_ROWS])
      self.assertAllEqual(kept_y, y[:first_batch.MAX_ROWS])
      for v in guard.first_batch_sample.variables[:-1]:
        self.assertEqual(v.shape[0], first_batch.MAX_ROWS)

  @pytest.mark.slow
  def test_a_small_batch_is_kept_whole_and_a_second_fit_keeps_the_first(self):
    model = _model()
    guard = keras_fit.guard_fit(model)
    self.assertIsNone(guard.first_batch())  # No step yet.
    x, y = _arrays(16)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    self.assertAllEqual(guard.first_batch()[0], x[:8])
    other, _ = _arrays(40, seed=1)
    model.fit(other, other[:, :1], batch_size=20, shuffle=False, verbose=0)  # A retrace.
    self.assertAllEqual(guard.first_batch()[0], x[:8])
    second = keras_fit.guard_fit(model)  # Takes over: its run's first batch is its own.
    model.fit(other, other[:, :1], batch_size=20, shuffle=False, verbose=0)
    self.assertAllEqual(second.first_batch()[0], other[:20])
    self.assertAllEqual(guard.first_batch()[0], x[:8])

  def test_dict_inputs_and_sample_weights_keep_their_structure(self):
    a, b = keras.Input((FEATURES,), name='a'), keras.Input((2,), name='b', dtype='int32')
    out = keras.layers.Dense(1)(keras.layers.Concatenate()(
        [a, keras.layers.Lambda(lambda t: tf.cast(t, tf.float32))(b)]))
    model = keras.Model({'a': a, 'b': b}, out)
    model.compile(optimizer='adam', loss='mse')
    guard = keras_fit.guard_fit(model)
    x, y = _arrays(16)
    ints = np.arange(32, dtype=np.int32).reshape(16, 2)
    w = np.linspace(0.5, 1.5, 16).astype(np.float32)
    model.fit({'a': x, 'b': ints}, y, sample_weight=w, batch_size=8, shuffle=False, verbose=0)
    kept_x, kept_y, kept_w = keras.utils.unpack_x_y_sample_weight(guard.first_batch())
    self.assertAllEqual(kept_x['a'], x[:8])
    self.assertAllEqual(kept_x['b'], ints[:8])
    self.assertEqual(kept_x['b'].dtype, tf.int32)
    self.assertAllEqual(kept_y, y[:8])
    self.assertAllEqual(kept_w, w[:8])

  def test_a_skipped_nan_first_batch_is_kept_and_changes_no_state(self):
    model = _model()
    guard = keras_fit.guard_fit(model)
    model.optimizer.build(model.trainable_variables)
    before = [v.numpy().copy() for v in model.variables + model.optimizer.variables]
    x, y = _arrays(8)
    x[0, 0] = np.nan
    history = model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    self.assertEqual(history.history['skipped_steps'], [1.0])
    after = [v.numpy() for v in model.variables + model.optimizer.variables]
    for a, b in zip(before, after):
      self.assertAllEqual(a, b)
    # The Trainer's meaning: the run's first batch, whatever its step did.
    self.assertTrue(np.isnan(guard.first_batch()[0].numpy()[0, 0]))

  @pytest.mark.slow
  def test_no_model_optimizer_or_checkpoint_holds_the_sample(self):
    model = _model()
    guard = keras_fit.guard_fit(model)
    model_dir = self.get_temp_dir() + '/ckpt'
    x, y = _arrays(16)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0,
              callbacks=[guard.callback(model_dir=model_dir, checkpoint_every=1)])
    sample = guard.first_batch_sample.variables
    self.assertLen(sample, 3)  # x, y and the row count.
    ids = {id(v) for v in sample}
    self.assertFalse(ids & {id(v) for v in model.variables + model.optimizer.variables})
    self.assertFalse(ids & {id(v) for p in guard.policies for v in p.variables})
    checkpoint = sorted(glob.glob(os.path.join(model_dir, 'checkpoints', '**', '*.index'),
                                  recursive=True))[-1][:-len('.index')]
    names = [n for n, _ in tf.train.list_variables(checkpoint)]
    self.assertTrue(names)
    for name in names:  # No stored tensor is a kept x or y.
      value = tf.train.load_variable(checkpoint, name)
      for kept in (x[:8], y[:8]):
        self.assertFalse(np.shape(value) == kept.shape and np.array_equal(value, kept), name)

  @pytest.mark.slow
  def test_only_a_stack_that_reads_the_first_batch_makes_a_sample(self):
    x, y = _arrays(8)
    for stack, wanted in (([policies.SkipNonFinite()], False),
                          ([divergence.DivergenceCheck()], True),
                          ([diagnostics.InitialisationCheck()], True)):
      model = _model()
      guard = keras_fit.guard_fit(model, policies=stack)
      model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
      self.assertEqual(guard.first_batch_sample is not None, wanted)
      self.assertEqual(guard.first_batch() is not None, wanted)

  def test_under_a_strategy_there_is_no_sample_and_it_says_why(self):
    sample = first_batch.FirstBatch(strategy=tf.distribute.MirroredStrategy(['/cpu:0']))
    sample.capture((tf.ones([4, 2]), tf.ones([4, 1])))
    self.assertIsNone(sample.value())
    self.assertEqual(sample.unavailable, 'under a distribution strategy')
    self.assertEqual(sample.variables, [])

  def test_a_batch_it_cannot_keep_says_why(self):
    for batch, why in (((tf.ragged.constant([[1.0], [2.0, 3.0]]),), 'not dense'),
                       ((tf.constant([['a'], ['b']]),), 'string')):
      sample = first_batch.FirstBatch(strategy=tf.distribute.get_strategy())
      sample.capture(batch)
      self.assertIsNone(sample.value())
      self.assertIn(why, sample.unavailable)


if __name__ == '__main__':
  tf.test.main()
