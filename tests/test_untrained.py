"""Tests for stable_train.policies.untrained and DivergenceCheck's end-of-run verdict: a run about
to end 'completed' whose model did not train at all (outputs still the same for every example, a
classifier no better than a uniform guess) ends 'diverged' instead, through both front doors;
a model that trained, a short run, weighted batches and `judge_end=False` keep 'completed'."""

import json
import math
import os
import tempfile
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from stable_train import errors
from stable_train.keras import fit as keras_fit
from stable_train.policies import divergence
from stable_train.policies import untrained
from stable_train.trainer import trainer as trainer_lib

CLASSES = 4
RNG = np.random.RandomState(0)
X = RNG.normal(size=(512, 8)).astype(np.float32)
W = RNG.normal(size=(8, CLASSES)).astype(np.float32)
LEARNABLE = np.argmax(X @ W, axis=1).astype(np.int32)  # A linear rule: learnt in a few steps.
RANDOM = RNG.randint(0, CLASSES, size=512).astype(np.int32)  # Nothing to learn.
SCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def classifier(last_scale=1.0, kernel='glorot_uniform'):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((8,)),
                            keras.layers.Dense(16, 'tanh', kernel_initializer=kernel),
                            keras.layers.Dense(CLASSES, kernel_initializer=kernel)])
  last = model.layers[-1].kernel
  last.assign(last * last_scale)
  return model


def probe_of(model, labels, loss=SCE, weights=None):
  batch = (X[:64], labels[:64]) if weights is None else (X[:64], labels[:64], weights)
  return types.SimpleNamespace(model=model, loss=loss, first_batch=lambda: batch,
                               split_batch=lambda b: (b[0], b[1]))


def fit_classifier(model, labels, steps=150):
  model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=SCE)
  model.fit(X, labels, batch_size=64, epochs=steps * 64 // len(X), verbose=0)
  return model


class VerdictTest(tf.test.TestCase):

  def test_outputs_the_same_for_every_example_did_not_train(self):
    model = classifier(kernel='zeros')  # Every unit alike, whatever the input.
    rule, reason = untrained.verdict(probe_of(model, LEARNABLE), smoothed=1.3, steps=100)
    self.assertEqual(rule, untrained.CONSTANT)
    self.assertIn('same for every example', reason)
    self.assertIn('HeNormal', reason)

  def test_a_uniform_guess_did_not_train_whatever_the_labels(self):
    model = classifier(last_scale=1e-3)  # Outputs that vary, but are a uniform guess.
    guess = math.log(CLASSES)
    for labels in (RANDOM, LEARNABLE):
      rule, reason = untrained.verdict(probe_of(model, labels), smoothed=guess, steps=100)
      self.assertEqual(rule, untrained.CHANCE)
      self.assertIn(f'{guess:.4g}', reason)
    _, reason = untrained.verdict(probe_of(model, RANDOM), smoothed=guess, steps=100,
                                  broken_start='the loss is 90, far above')
    self.assertIn('the initial weights are too large', reason)

  def test_a_model_that_learnt_the_rule_is_not_judged(self):
    model = fit_classifier(classifier(), LEARNABLE)
    probe = probe_of(model, LEARNABLE)
    self.assertLess(untrained.first_batch_loss(probe), 0.5 * math.log(CLASSES))
    # Its training loss high (a large weight decay, class weights): the first batch decides.
    self.assertIsNone(untrained.verdict(probe, smoothed=10.0, steps=100))

  def test_a_training_loss_below_a_uniform_guess_is_not_judged(self):
    model = classifier(last_scale=1e-3)
    self.assertIsNone(untrained.verdict(probe_of(model, RANDOM), smoothed=1.0, steps=100))

  def test_weighted_batches_and_other_losses_are_not_judged_on_the_guess(self):
    model = classifier(last_scale=1e-3)
    weighted = probe_of(model, RANDOM, weights=np.ones(64, np.float32))
    self.assertIsNone(untrained.uniform_guess(weighted))
    self.assertIsNone(untrained.verdict(weighted, smoothed=5.0, steps=100))
    mse = probe_of(model, RANDOM, loss=keras.losses.MeanSquaredError())
    self.assertIsNone(untrained.verdict(mse, smoothed=5.0, steps=100))

  def test_the_loss_on_the_first_batch_moves_no_state(self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                              keras.layers.BatchNormalization(), keras.layers.Dropout(0.5),
                              keras.layers.Dense(CLASSES)])
    before = [v.numpy().copy() for v in model.variables]
    self.assertTrue(math.isfinite(untrained.first_batch_loss(probe_of(model, RANDOM))))
    for b, v in zip(before, model.variables):
      np.testing.assert_array_equal(b, v.numpy())


def _dataset(labels):
  return tf.data.Dataset.from_tensor_slices((X, labels)).repeat().batch(64)


def _summary(model_dir):
  with open(os.path.join(model_dir, 'summary.json')) as f:
    return json.load(f)


def _triggers(model_dir):
  """The triggers of the run's `diverged` events (a run that ended 'completed' has a `done`)."""
  with open(os.path.join(model_dir, 'events.jsonl')) as f:
    events = [json.loads(line) for line in f]
  assert not [e for e in events if e['event'] == 'done'], events
  return [e['trigger'] for e in events if e['event'] == 'diverged']


class EndOfRunTest(tf.test.TestCase):
  """Through both front doors: 100 steps at a rate too low to move (lr 1e-7) leave a uniform
  guess ('diverged', trigger chance_level); the same at a sound rate is 'completed'."""

  def _trainer(self, lr, labels, num_steps=100, **check):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    policies = trainer_lib.default_policies()
    if check:
      policies = [p for p in policies if not isinstance(p, divergence.DivergenceCheck)]
      policies.append(divergence.DivergenceCheck(**check))
    t = trainer_lib.Trainer(model=classifier(), optimizer=keras.optimizers.Adam(lr), loss=SCE,
                            model_dir=model_dir, steps_per_loop=25, verbose=False,
                            policies=policies)
    return t.fit(_dataset(labels), num_steps=num_steps), model_dir

  def test_the_trainer(self):
    summary, model_dir = self._trainer(1e-7, LEARNABLE)
    self.assertEqual(summary['status'], 'diverged')
    self.assertIn('uniform guess', summary['reason'])
    self.assertEqual(_triggers(model_dir), [untrained.CHANCE])
    self.assertEqual(_summary(model_dir)['diagnosis']['cause'], 'learning_rate')
    self.assertEqual(self._trainer(1e-2, LEARNABLE)[0]['status'], 'completed')

  def test_a_short_run_or_judge_end_off_is_not_judged(self):
    self.assertEqual(self._trainer(1e-7, LEARNABLE, num_steps=75)[0]['status'], 'completed')
    self.assertEqual(self._trainer(1e-7, LEARNABLE, judge_end=False)[0]['status'], 'completed')

  @pytest.mark.slow
  def test_guard_fit(self):
    for kernel, trigger in (('zeros', untrained.CONSTANT), ('glorot_uniform', None)):
      model = classifier(kernel=kernel)
      model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=SCE)
      guard = keras_fit.guard_fit(model)
      model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
      fit = lambda: model.fit(_dataset(LEARNABLE), steps_per_epoch=100, epochs=1, verbose=0,
                              callbacks=[guard.callback(model_dir=model_dir)])
      if trigger is None:
        fit()
        self.assertEqual(_summary(model_dir)['status'], 'completed')
        continue
      with self.assertRaisesRegex(errors.StableTrainError, 'did not train'):
        fit()
      self.assertEqual(_summary(model_dir)['status'], 'diverged')
      self.assertEqual(_summary(model_dir)['diagnosis']['cause'], 'initialisation')
      self.assertEqual(_triggers(model_dir), [trigger])


def test_divergence_check_validates_judge_end():
  with pytest.raises(errors.ConfigError, match='judge_end'):
    divergence.DivergenceCheck(judge_end='yes')
