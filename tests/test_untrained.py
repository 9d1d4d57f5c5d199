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
from stable_train.policies import answers
from stable_train.policies import divergence
from stable_train.policies import moved
from stable_train.policies import precision
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


STALLED = 0.0  # `progress`: the smoothed loss no lower than at the run's midpoint.


def verdict(model, labels, smoothed, progress=STALLED, **kwargs):
  return untrained.verdict(probe_of(model, labels, **kwargs), smoothed=smoothed, steps=100,
                           progress=progress)


class VerdictTest(tf.test.TestCase):

  def test_outputs_the_same_for_every_example_did_not_train(self):
    model = classifier(kernel='zeros')  # Every unit alike, whatever the input.
    rule, reason = verdict(model, LEARNABLE, smoothed=1.3)
    self.assertEqual(rule, untrained.CONSTANT)
    self.assertIn('same for every example', reason)
    self.assertIn('HeNormal', reason)
    # Still coming down: through a bias alone, towards the labels' mean; the run is over.
    self.assertEqual(verdict(model, LEARNABLE, smoothed=1.3, progress=0.3)[0], untrained.CONSTANT)
    self.assertIsNone(verdict(model, LEARNABLE, smoothed=1.3, progress=None))  # Unknown.

  def test_a_constant_output_for_constant_labels_is_the_right_answer(self):
    model = classifier(kernel='zeros')
    self.assertIsNone(verdict(model, np.zeros(512, np.int32), smoothed=1.3))  # One class.
    regression = keras.losses.MeanSquaredError()
    offset = (5.0 + 1e-7 * X[:, 0]).astype(np.float32)  # A target that is itself constant.
    self.assertIsNone(verdict(model, offset, smoothed=1e-9, loss=regression))

  def test_a_uniform_guess_did_not_train_whatever_the_labels(self):
    model = classifier(last_scale=1e-3)  # Outputs that vary, but are a uniform guess.
    guess = math.log(CLASSES)
    for labels in (RANDOM, LEARNABLE):
      rule, reason = verdict(model, labels, smoothed=guess)
      self.assertEqual(rule, untrained.CHANCE)
      self.assertIn(f'{guess:.4g}', reason)
    _, reason = untrained.verdict(probe_of(model, RANDOM), smoothed=guess, steps=100,
                                  progress=STALLED, broken_start='the loss is 90, far above')
    self.assertIn('initial weights too large', reason)

  def test_a_loss_that_never_went_below_the_guess_made_no_progress(self):
    model = classifier(last_scale=3.0)  # Varied per-example losses, their mean above the guess.
    guess = math.log(CLASSES)
    probe = probe_of(model, RANDOM)
    judge = lambda never_below: untrained.verdict(probe, smoothed=1.07 * guess, steps=150,
                                                  progress=0.15, never_below=never_below)
    self.assertIsNone(judge(False))  # Still coming down: left alone.
    rule, reason = judge(True)  # Coming down, but never below a uniform guess: not trained.
    self.assertEqual(rule, untrained.CHANCE)
    self.assertIn('never got below it', reason)
    trained = fit_classifier(classifier(), LEARNABLE)  # First-batch losses below the guess.
    self.assertIsNone(untrained.verdict(probe_of(trained, LEARNABLE), smoothed=1.07 * guess,
                                        steps=150, progress=0.15, never_below=True))

  def test_at_a_uniform_guess_but_still_coming_down_is_not_judged_unless_far_above(self):
    model = classifier(last_scale=30.0)  # Large logits: far worse than a uniform guess.
    guess = math.log(CLASSES)
    self.assertGreater(np.mean(untrained.first_batch_losses(probe_of(model, RANDOM))), 2 * guess)
    self.assertIsNone(verdict(model, RANDOM, smoothed=1.5 * guess, progress=0.1))
    rule, reason = verdict(model, RANDOM, smoothed=2.5 * guess, progress=0.1)
    self.assertEqual(rule, untrained.CHANCE)
    self.assertIn('2.5 x it at the end, far above', reason)  # Not "stopped coming down".
    # A loss that came down to the guess itself and no further (from far above: its last half
    # still shows the fall) is judged; one still above it by more than 1 % is not.
    uniform = classifier(last_scale=1e-3)
    self.assertEqual(verdict(uniform, RANDOM, smoothed=1.0005 * guess, progress=0.3)[0],
                     untrained.CHANCE)
    self.assertIsNone(verdict(uniform, RANDOM, smoothed=1.05 * guess, progress=0.3))

  def test_under_mixed_float16(self):
    with precision.using('mixed_float16'):
      guess_model, zero_model = classifier(last_scale=1e-3), classifier(kernel='zeros')
    self.assertEqual(guess_model.layers[-1].compute_dtype, 'float16')
    guess = math.log(CLASSES)
    self.assertEqual(verdict(guess_model, RANDOM, smoothed=guess)[0], untrained.CHANCE)
    self.assertEqual(verdict(zero_model, LEARNABLE, smoothed=1.3)[0], untrained.CONSTANT)
    self.assertIsNone(verdict(classifier(), LEARNABLE, smoothed=1.3))  # float32, varied: alive.

  def test_a_weak_but_real_signal_is_not_a_uniform_guess(self):
    # Labels that follow x0 55 % of the time: the best model's loss is 0.993 x log(2), but its
    # predictions vary with the input, and a guess's do not.
    flip = np.random.RandomState(1).rand(512) < 0.45
    labels = ((X[:, 0] > 0) ^ flip).astype(np.float32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.layers[0].kernel.assign(np.eye(8, 1, dtype=np.float32) * 0.4)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    self.assertIsNone(verdict(model, labels, smoothed=math.log(2), loss=bce))
    model.layers[0].kernel.assign(np.zeros((8, 1), np.float32) + 1e-4)  # Now a guess.
    self.assertEqual(verdict(model, labels, smoothed=math.log(2), loss=bce)[0], untrained.CHANCE)

  def test_the_same_answer_for_every_example_at_the_guess_did_not_train(self):
    # The first batch's class frequencies for every example (ELECTRA at Adam 2e-2, blind44): its
    # per-example losses differ by class, so it is no uniform guess, but its answers do not
    # depend on the input.
    model = classifier(last_scale=1e-3)
    counts = np.bincount(RANDOM[:64], minlength=CLASSES)
    model.layers[-1].bias.assign(np.log(counts / 64.0).astype(np.float32))
    guess = math.log(CLASSES)
    probe = probe_of(model, RANDOM)
    self.assertFalse(untrained.at_chance(untrained.first_batch_losses(probe), guess))
    self.assertLess(answers.classifier_flatness(probe), 0.01)
    rule, reason = verdict(model, RANDOM, smoothed=guess)
    self.assertEqual(rule, untrained.CHANCE)
    self.assertIn('its answers barely vary from example to example', reason)
    self.assertIsNone(verdict(model, RANDOM, smoothed=guess, progress=0.2))  # Still moving.
    # Below the guess's loss, however little (a weak real edge, its probabilities following the
    # input at a few per cent of the labels' spread: a reviewer's logistic model at 45/55 %).
    self.assertIsNone(verdict(model, RANDOM, smoothed=0.995 * guess))
    # Answers that follow the input (a model that learnt the rule a little): not flat.
    model.layers[-1].kernel.assign(classifier().layers[-1].kernel * 0.5)
    self.assertGreater(answers.classifier_flatness(probe), 0.1)
    self.assertIsNone(verdict(model, RANDOM, smoothed=guess))

  def test_at_chance(self):
    guess, rng = 2.0, np.random.RandomState(0)
    self.assertTrue(untrained.at_chance(guess + 1e-4 * rng.normal(size=64), guess))
    self.assertTrue(untrained.at_chance(1.5 * guess + 0.5 * rng.normal(size=64), guess))
    self.assertFalse(untrained.at_chance(guess + 0.5 * rng.normal(size=64), guess))  # Varied.
    self.assertFalse(untrained.at_chance(0.9 * guess + 1e-4 * rng.normal(size=64), guess))
    # Lenient (a loss that never got below the guess): a batch 2 % below it, within its noise,
    # is at it; one clearly below (by more than twice its standard error) is not.
    noisy = rng.normal(size=32)
    noisy = 0.2 * (noisy - noisy.mean()) / noisy.std()  # A standard error of 0.036.
    self.assertFalse(untrained.at_chance(0.98 * guess + noisy, guess))
    self.assertTrue(untrained.at_chance(0.98 * guess + noisy, guess, lenient=True))
    self.assertFalse(untrained.at_chance(0.94 * guess + noisy, guess, lenient=True))

  def test_after_a_broken_start_a_mean_at_the_guess_is_enough(self):
    # Random logits against random labels: worse than a guess on average, but not beyond the
    # batch's noise, and varied from row to row.
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.layers[0].kernel.assign(np.random.RandomState(0).normal(size=(8, 1)) * 0.15)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    labels = (RANDOM % 2).astype(np.float32)
    losses = untrained.first_batch_losses(probe_of(model, labels, loss=bce))
    self.assertGreater(np.mean(losses), math.log(2))
    self.assertFalse(untrained.at_chance(losses, math.log(2)))
    self.assertTrue(untrained.at_chance(losses, math.log(2), lenient=True))
    self.assertIsNone(verdict(model, labels, smoothed=math.log(2), loss=bce))
    judge = lambda start, chance: untrained.verdict(
        probe_of(model, labels, loss=bce), smoothed=math.log(2), steps=100, progress=STALLED,
        broken_start=start, chance_start=chance)
    rule, reason = judge('the loss is 1768, far above', True)
    self.assertEqual(rule, untrained.CHANCE)
    self.assertIn('the loss is 1768', reason)
    # Outputs far off the labels' scale at the start are not a loss far above the guess.
    self.assertIsNone(judge('the outputs were 40x the labels', False))

  def test_a_model_that_learnt_the_rule_is_not_judged(self):
    model = fit_classifier(classifier(), LEARNABLE)
    probe = probe_of(model, LEARNABLE)
    self.assertLess(np.mean(untrained.first_batch_losses(probe)), 0.5 * math.log(CLASSES))
    # Its training loss high (a large weight decay, class weights): the first batch decides.
    self.assertIsNone(verdict(model, LEARNABLE, smoothed=10.0))

  def test_a_training_loss_below_a_uniform_guess_is_not_judged(self):
    model = classifier(last_scale=1e-3)
    self.assertIsNone(verdict(model, RANDOM, smoothed=0.98 * math.log(CLASSES)))

  def test_weighted_batches_summed_losses_and_other_losses_are_not_judged_on_the_guess(self):
    model = classifier(last_scale=1e-3)
    weighted = probe_of(model, RANDOM, weights=np.ones(64, np.float32))
    self.assertIsNone(untrained.uniform_guess(weighted))
    self.assertIsNone(untrained.verdict(weighted, smoothed=5.0, steps=100, progress=STALLED))
    summed = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction='sum')
    self.assertIsNone(untrained.uniform_guess(probe_of(model, RANDOM, loss=summed)))
    self.assertIsNone(verdict(model, RANDOM, smoothed=50.0, loss=summed))
    self.assertIsNone(verdict(model, RANDOM, smoothed=5.0, loss=keras.losses.MeanSquaredError()))

  def test_a_model_it_cannot_judge_gives_no_verdict_and_no_error(self):
    inputs = keras.Input((8,))
    model = keras.Model(inputs, {'cls': keras.layers.Dense(CLASSES)(inputs)})
    probe = types.SimpleNamespace(model=model, loss=SCE, split_batch=lambda b: b,
                                  first_batch=lambda: (X[:64], {'cls': RANDOM[:64]}))
    self.assertIsNone(untrained.verdict(probe, smoothed=5.0, steps=100, progress=STALLED))

  def test_the_loss_on_the_first_batch_moves_no_state(self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                              keras.layers.BatchNormalization(), keras.layers.Dropout(0.5),
                              keras.layers.Dense(CLASSES)])
    before = [v.numpy().copy() for v in model.variables]
    self.assertEqual(untrained.first_batch_losses(probe_of(model, RANDOM)).shape, (64,))
    for b, v in zip(before, model.variables):
      np.testing.assert_array_equal(b, v.numpy())


TARGET = (X @ RNG.normal(size=(8, 1)) + 0.1 * RNG.normal(size=(512, 1))).astype(np.float32)


def regressor(last_scale=1.0, activation='tanh'):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation),
                            keras.layers.Dense(1)])
  last = model.layers[-1].kernel
  last.assign(last * last_scale)
  return model


class RegressionVerdictTest(tf.test.TestCase):
  """A regression at MEAN_FAR x the loss of predicting its labels' mean (median under MAE), on
  its training loss and on the first batch, did not train (`mean_level`)."""

  def _probe(self, model, loss='mse', labels=TARGET, weights=None):
    batch = (X[:64], labels[:64]) if weights is None else (X[:64], labels[:64], weights)
    return types.SimpleNamespace(model=model, loss=loss, first_batch=lambda: batch,
                                 split_batch=lambda b: (b[0], b[1]))

  def test_far_above_the_mean_on_both_did_not_train(self):
    probe = self._probe(regressor(last_scale=30.0))  # Outputs far off the labels.
    level, first = untrained.mean_level(probe)
    self.assertAllClose(level, np.var(TARGET[:64]), rtol=1e-5)  # The mean's MSE: the variance.
    self.assertGreater(first, untrained.MEAN_FAR * level)
    rule, reason = untrained.verdict(probe, smoothed=1.5 * first, steps=150, progress=0.5)
    self.assertEqual(rule, untrained.MEAN)  # Judged even while it comes down.
    self.assertIn("labels' mean", reason)
    # A loss falling fast from far off scale (raw Unix timestamps): its smoothed average lags
    # far above its loss on the first batch now; judged all the same.
    self.assertEqual(untrained.verdict(probe, smoothed=50 * first, steps=150, progress=0.99)[0],
                     untrained.MEAN)
    near = self._probe(regressor(last_scale=10.0))  # 8x on its first batch: under MEAN_FAR.
    level, first = untrained.mean_level(near)
    self.assertBetween(first / level, 6, untrained.MEAN_FAR)
    self.assertIsNone(untrained.verdict(near, smoothed=first, steps=150, progress=0.5))

  def test_answers_that_no_longer_depend_on_the_input_at_the_mean_did_not_train(self):
    # Its hidden units near saturation (tanh near 1 whatever the input) over a head at the
    # labels' mean: answers that vary at 3e-4 of the labels' spread, but at 2.5e-3 of their own
    # scale, above the collapse probe's 1e-5, and a loss at the mean's.
    model = regressor()
    model.layers[0].kernel.assign(model.layers[0].kernel * 1e-2)
    model.layers[0].bias.assign(tf.fill([16], 2.0))
    model.layers[1].bias.assign(model.layers[1].bias + np.mean(TARGET[:64]) - model(X[:1])[0])
    probe = self._probe(model)
    self.assertLess(answers.flatness(probe), 1e-3)
    level, first = untrained.mean_level(probe)
    self.assertAllClose(first / level, 1.0, atol=1e-3)
    rule, reason = untrained.verdict(probe, smoothed=first, steps=150, progress=STALLED)
    self.assertEqual(rule, untrained.FLAT)
    self.assertIn('they no longer depend on the input', reason)
    self.assertIsNone(untrained.verdict(probe, smoothed=first, steps=150, progress=0.2))  # Moving.
    # Answers that vary by 30 % of the labels' spread, at a loss above the mean's (here they miss
    # the labels altogether): they still depend on the input, so not judged.
    outputs = regressor()(X).numpy()
    noise = np.random.RandomState(1).normal(size=outputs.shape)
    labels = outputs.mean() + noise * outputs[:64].std() / noise[:64].std() / 0.3
    probe = self._probe(regressor(), labels=labels.astype(np.float32))
    self.assertAllClose(answers.flatness(probe), 0.3, rtol=1e-3)
    level, first = untrained.mean_level(probe)
    self.assertGreater(first / level, untrained.MEAN_FLAT_LEVEL)
    self.assertIsNone(untrained.verdict(probe, smoothed=first, steps=150, progress=STALLED))
    # Two outputs: one learnt, beside one of unstandardised noise that dominates the pooled loss
    # and spread (a reviewer's case): each output is judged on its own, so not flat.
    model = regressor()
    two = keras.Sequential([model, keras.layers.Lambda(
        lambda h: tf.concat([h, 0.0 * h + 1e-3 * h], -1))])
    noise = 30 * np.random.RandomState(2).normal(size=(512, 1))
    probe = self._probe(two, labels=np.concatenate([model(X).numpy(), noise], -1).astype(
        np.float32))
    self.assertGreater(answers.flatness(probe), 0.9)

  @staticmethod
  def _rain_series():
    """(x, y): rain on wet days, its amount from the humidity; the first 64 days dry but one
    drizzle, then wet seasons and dry ones."""
    rng = np.random.RandomState(0)
    wet = (np.sin((np.arange(2048) - 64) / 40.0) > 0).astype(np.float32)
    humid = rng.normal(size=2048)
    x = np.stack([wet + 0.1 * rng.normal(size=2048), humid], 1).astype(np.float32)
    y = wet * np.maximum(0.0, 4.0 + 2.0 * humid + 0.5 * rng.normal(size=2048))
    y[5] = 0.5
    return x, y.astype(np.float32)[:, None]

  @staticmethod
  def _rain_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, 'relu'),
                             keras.layers.Dense(1)])

  def _rain(self, loss):
    """The rain series fitted unshuffled under `loss` for 640 steps; returns the guard and the
    model's MSE over a constant's."""
    x, y = self._rain_series()
    model = self._rain_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    guard = keras_fit.guard_fit(model)
    model.fit(x, y, batch_size=64, epochs=20, shuffle=False, verbose=0,
              callbacks=[guard.callback()])
    return guard, np.mean(np.square(model.predict(x, verbose=0) - y)) / np.var(y)

  def test_an_unshuffled_series_that_starts_dry_trains_and_completes_under_mae(self):
    # The first batch's median is 0: a trained model read 42x "that of predicting the labels'
    # median" on it, its smoothed loss within 3x of its loss there.
    guard, error = self._rain('mae')
    self.assertLess(error, 0.5)  # It trained: half a constant's error or less.
    self.assertEqual(guard.state.global_step.numpy(), 640)  # And was not stopped.

  @pytest.mark.slow  # As under MAE above, whose first batch's median (0) is the harder case.
  def test_an_unshuffled_series_that_starts_dry_trains_and_completes_under_mse(self):
    guard, error = self._rain('mse')
    self.assertLess(error, 0.5)
    self.assertEqual(guard.state.global_step.numpy(), 640)

  def test_a_resumed_unshuffled_series_completes(self):
    # Resumed from its checkpoint by another Trainer (a preempted job): its first losses, which
    # showed its first batch far easier than the run's, were the first process's, so that batch
    # cannot be shown a baseline, and the second Trainer's first batch is mid-series.
    x, y = self._rain_series()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True).repeat()
    with tempfile.TemporaryDirectory() as model_dir:
      for steps in (60, 120):
        trainer = trainer_lib.Trainer(model=self._rain_model(), optimizer=keras.optimizers.Adam(
            1e-3), loss='mse', model_dir=model_dir, steps_per_loop=10, verbose=False)
        trainer.fit(data, num_steps=steps)
        with open(os.path.join(model_dir, 'summary.json')) as f:
          summary = json.load(f)
        self.assertEqual((summary['status'], summary['global_step']), ('completed', steps),
                         summary.get('reason'))

  def test_the_first_batch_is_a_baseline_unless_far_easier_for_the_untrained_model(self):
    # Sales of a growing shop in dollars, never standardised, in order: the first batch no
    # easier for the untrained model than the next ones, so still a baseline: stopped.
    rng = np.random.RandomState(0)
    t = np.arange(2048) / 2048
    x = np.stack([np.sin(2 * np.pi * np.arange(2048) / 7), (t - 0.5) * 3.46], 1)
    y = 1e4 * (1 + 3 * t) * np.exp(0.1 * rng.normal(size=2048))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, 'relu'),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse')
    guard = keras_fit.guard_fit(model)
    with self.assertRaisesRegex(errors.RunAborted, "x that of predicting the labels' mean"):
      model.fit(x.astype(np.float32), y.astype(np.float32)[:, None], batch_size=64, epochs=5,
                shuffle=False, verbose=0, callbacks=[guard.callback()])
    # The same batch's loss at the end, beside the run's first losses: the untrained model's
    # first loss far below their mean says the first batch is no baseline.
    probe = self._probe(regressor(last_scale=30.0))
    level, first = untrained.mean_level(probe)
    judge = lambda warm: untrained.verdict(probe, smoothed=first, steps=640, progress=0.0,
                                           start=first, warm=warm)
    self.assertEqual(judge(None)[0], untrained.MEAN)
    self.assertEqual(judge(2.0 * first)[0], untrained.MEAN)
    self.assertIsNone(judge(4.0 * first))
    self.assertIsNone(judge(math.nan))  # Unknown (a resumed run's first losses): no baseline.

  def test_nearer_the_mean_a_loss_too_slow_to_get_there_from_near_its_start_did_not_train(self):
    probe = self._probe(regressor(last_scale=8.0))  # 6x the mean's loss on the first batch.
    level, first = untrained.mean_level(probe)
    self.assertBetween(first / level, 4.5, untrained.MEAN_FAR)
    judge = lambda progress, start, smoothed=first: untrained.verdict(
        probe, smoothed=smoothed, steps=150, progress=progress, start=start)
    # Down 2 % over the second half from 6x: 44 runs' steps more to reach the mean's loss.
    rule, reason = judge(0.02, 1.1 * first)
    self.assertEqual(rule, untrained.MEAN)
    self.assertIn(f'{first / level:.3g} x that of predicting', reason)
    self.assertIn('more than 10 x its steps again', reason)
    self.assertEqual(judge(-0.1, 1.1 * first)[0], untrained.MEAN)  # Rising: never.
    self.assertIsNone(judge(0.1, 1.1 * first))  # 10 % a half-run: there in 8.5 runs' time.
    self.assertIsNone(judge(0.02, 2.5 * first))  # Came down more than half from its start.
    self.assertIsNone(judge(0.02, None))  # No start known: the far margin only.
    # A first batch far easier than the run's batches (smoothed 4x its loss) is no baseline.
    self.assertIsNone(judge(0.02, 4.4 * first, smoothed=4 * first))
    easy = self._probe(regressor(last_scale=4.0))  # 2.3x: under MEAN_NEAR.
    level, first = untrained.mean_level(easy)
    self.assertIsNone(untrained.verdict(easy, smoothed=first, steps=150, progress=0.0,
                                        start=first))

  def test_a_model_that_learnt_is_not_judged_whatever_its_training_loss(self):
    model = regressor()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse')
    model.fit(X, TARGET, batch_size=64, epochs=20, verbose=0)
    probe = self._probe(model)
    level, first = untrained.mean_level(probe)
    self.assertLess(first, 0.5 * level)
    self.assertIsNone(untrained.verdict(probe, smoothed=10 * level, steps=150, progress=0.0,
                                        start=11 * level))

  def test_under_mae_the_median_and_other_losses_or_weights_are_not_judged(self):
    skewed = np.exp(TARGET).astype(np.float32)
    level, _ = untrained.mean_level(self._probe(regressor(), 'mae', skewed))
    y = skewed[:64]
    self.assertAllClose(level, np.mean(np.abs(y - np.median(y))), rtol=1e-5)
    self.assertLess(level, np.mean(np.abs(y - np.mean(y))))
    model = regressor(last_scale=30.0)
    short = self._probe(model)
    short.first_batch = lambda: (X[:16], TARGET[:16])  # One batch's spread: too noisy a baseline.
    for probe in (short, self._probe(model, keras.losses.Huber()), self._probe(model, 'poisson'),
                  self._probe(model, keras.losses.MeanSquaredError(reduction='sum')),
                  self._probe(model, weights=np.ones(64, np.float32))):
      self.assertIsNone(untrained.mean_level(probe))
      self.assertIsNone(untrained.verdict(probe, smoothed=1e6, steps=150, progress=0.0))

  def test_a_batch_norm_net_whose_moving_statistics_lag_is_read_in_training_mode_too(self):
    # Inputs far off centre: after 80 steps BatchNorm's moving statistics still lag, so the
    # inference outputs miss by 15x the labels' variance while training mode fits them.
    keras.utils.set_random_seed(0)
    x = X * 5 + 50.0
    model = keras.Sequential([keras.Input((8,)), keras.layers.BatchNormalization(),
                              keras.layers.Dense(16), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse')
    model.fit(x, TARGET, batch_size=64, epochs=10, verbose=0)
    probe = self._probe(model)
    probe.first_batch = lambda: (x[:64], TARGET[:64])
    level, first = untrained.mean_level(probe)
    inference = np.mean(np.square(model.predict(x[:64], verbose=0) - TARGET[:64]))
    self.assertGreater(inference, untrained.MEAN_FAR * level)
    self.assertLess(first, 0.1 * level)
    self.assertIsNone(untrained.verdict(probe, smoothed=100 * level, steps=150, progress=0.0))

  def test_several_heads_are_not_judged(self):
    # Two heads whose labels move together: the spread between them is no baseline (and Keras
    # sums their losses): a healthy two-head model was stopped when they were read as one.
    inputs = keras.Input((8,))
    two = keras.Model(inputs, [keras.layers.Dense(1)(inputs), keras.layers.Dense(1)(inputs)])
    probe = self._probe(two)
    probe.first_batch = lambda: (X[:64], (TARGET[:64], TARGET[:64] + 0.1))
    self.assertIsNone(untrained.mean_level(probe))
    self.assertIsNone(untrained.verdict(probe, smoothed=1e6, steps=150, progress=0.0))

  def test_through_the_trainer_unscaled_inputs_end_diverged_and_scaled_ones_completed(self):
    # Raw Unix-timestamp-like inputs into a linear net: its loss falls but stays 1000 x the
    # labels' variance; the same inputs standardised train.
    for scale, status in ((1e4, 'diverged'), (1.0, 'completed')):
      model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
      data = tf.data.Dataset.from_tensor_slices((X * scale, TARGET)).repeat().batch(64)
      t = trainer_lib.Trainer(model=regressor(activation=None),
                              optimizer=keras.optimizers.Adam(1e-2), loss='mse',
                              model_dir=model_dir, steps_per_loop=25, verbose=False)
      summary = t.fit(data, num_steps=150)
      self.assertEqual(summary['status'], status, summary.get('reason'))
      if status == 'diverged':
        self.assertEqual(_triggers(model_dir), [untrained.MEAN])


class TrailTest(tf.test.TestCase):

  def test_progress_from_the_second_quarter_to_the_last(self):
    trail = untrained.Trail()
    self.assertIsNone(trail.progress())
    trail.record(100.0, 2.0)
    self.assertIsNone(trail.progress())  # No point in the second quarter yet.
    for count, smoothed in ((200.0, 1.0), (300.0, 0.9), (400.0, 0.9), (500.0, 1.1),
                            (600.0, 0.9), (700.0, 0.7)):
      trail.record(count, smoothed)
    # Second quarter (175-350): 1.0, 0.9; last (from 525): 0.9, 0.7 (now counted once more).
    self.assertAllClose(trail.progress(), 1 - np.mean([0.9, 0.7, 0.7]) / 0.95)
    trail.record(450.0, 1.0)  # A restore took the count back: what came after it is gone.
    # Second quarter (112-225): 1.0; last (from 337): 0.9, 1.0 (now counted once more).
    self.assertAllClose(trail.progress(), 1 - np.mean([0.9, 1.0, 1.0]) / 1.0)

  def test_a_fall_to_the_ceiling_is_no_progress(self):
    trail = untrained.Trail()
    for count in range(1, 201):  # From 50 x a guess of 2.3 down to it by the midpoint.
      trail.record(float(count), max(2.3, 115.0 - 2 * count))
    self.assertGreater(trail.progress(), 0.2)  # Uncapped: the fall counts.
    self.assertAllClose(trail.progress(ceiling=2.3), 0.0)
    slow = untrained.Trail()
    for count in range(1, 201):  # From 4 x the guess, still on its way down to 2 x.
      slow.record(float(count), 2.3 * (4.0 - count / 100.0))
    self.assertGreater(slow.progress(ceiling=2.3), 0.05)  # Its last half: not stalled.
    for count in range(201, 261):  # Below the guess now: that is progress.
      trail.record(float(count), 1.15)
    self.assertGreater(trail.progress(ceiling=2.3), 0.05)

  def test_never_below_a_guess_since_the_first_quarter(self):
    trail = untrained.Trail()
    self.assertFalse(trail.never_below(2.3))  # Nothing seen.
    trail.record(1.0, 2.29)  # The untrained model's own loss, a little under the guess.
    for count in range(2, 151):  # Knocked above it, coming down but never below it.
      trail.record(float(count), 2.3 + 0.5 * (150 - count) / 150 + 0.01)
    self.assertTrue(trail.never_below(2.3))
    self.assertFalse(trail.never_below(None))  # Not a classifier.
    trail.record(151.0, 2.2)
    self.assertFalse(trail.never_below(2.3))

  def test_bounded(self):
    trail = untrained.Trail()
    for count in range(1, 100001):
      trail.record(float(count), 1.0 / count)
    self.assertLessEqual(len(trail._points), untrained.TRAIL_LENGTH)
    # 1/count: the last quarter's mean about 1.15/N, the second quarter's about 2.8/N.
    self.assertAllClose(trail.progress(), 1 - np.log(4 / 3) / np.log(2), atol=0.02)


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


def _history_ends(model_dir):
  """The last step of each `history` event of a run."""
  with open(os.path.join(model_dir, 'events.jsonl')) as f:
    return [e['steps'][-1] for e in map(json.loads, f) if e['event'] == 'history']


class EndOfRunTest(tf.test.TestCase):
  """Through both front doors: 100 steps at a rate too low to move (lr 1e-7) leave a model
  that starts as a uniform guess one ('diverged', trigger chance_level); the same at a sound
  rate is 'completed'; a zero-initialised one ends 'diverged' (constant_outputs)."""

  def _trainer(self, lr, labels, num_steps=100, last_scale=1e-3, **check):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    policies = trainer_lib.default_policies()
    if check:
      policies = [p for p in policies if not isinstance(p, divergence.DivergenceCheck)]
      policies.append(divergence.DivergenceCheck(**check))
    t = trainer_lib.Trainer(model=classifier(last_scale), optimizer=keras.optimizers.Adam(lr),
                            loss=SCE, model_dir=model_dir, steps_per_loop=num_steps // 4,
                            verbose=False, policies=policies)
    self.trainer = t
    return t.fit(_dataset(labels), num_steps=num_steps), model_dir

  def test_the_trainer(self):
    summary, model_dir = self._trainer(1e-7, LEARNABLE)
    self.assertEqual(summary['status'], 'diverged')
    self.assertIn('uniform guess', summary['reason'])
    self.assertEqual(_triggers(model_dir), [untrained.CHANCE])
    self.assertEqual(_history_ends(model_dir), [100])  # The doctor reads the steps before it.
    self.assertEqual(_summary(model_dir)['diagnosis']['cause'], 'learning_rate')
    self.assertEqual(self._trainer(1e-2, LEARNABLE)[0]['status'], 'completed')

  def test_a_run_that_moved_no_weight_did_not_train(self):
    # A learning rate of 0: the same loss every epoch, every weight as it started, and the
    # chance rule cannot tell (the untrained model's losses vary from row to row).
    # Judged over the applied steps after the first loop: 30 here, 2 x rise_patience or more.
    summary, model_dir = self._trainer(0.0, LEARNABLE, num_steps=40, last_scale=1.0,
                                       rise_patience=10)
    self.assertEqual(summary['status'], 'diverged')
    self.assertIn('not one of its weights moved', summary['reason'])
    self.assertEqual(_triggers(model_dir), [moved.UNMOVED])
    # No numeric cause to name (not a rate too high): the reason says what to check.
    self.assertIsNone(_summary(model_dir)['diagnosis']['cause'])
    self.assertIn("check the optimizer's learning_rate", summary['reason'])
    # A second fit of a finished run trains no step: no verdict on its unchanged weights.
    self.assertEqual(self._trainer(1e-2, LEARNABLE, num_steps=40, rise_patience=10)[0]['status'],
                     'completed')
    again = self.trainer.fit(_dataset(LEARNABLE), num_steps=40)
    self.assertEqual((again['status'], again['steps_this_run']), ('completed', 0))

  def test_kernels_that_start_alike_stay_alike_and_did_not_train(self):
    # Every kernel one constant: each hidden unit gets the same gradient as the others, at any
    # rate, so the layer stays one unit wide; the loss still moves (the head's biases learn).
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    keras.utils.set_random_seed(0)
    constant = keras.initializers.Constant(0.05)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, 'tanh', kernel_initializer=
                              constant), keras.layers.Dense(16, 'tanh', kernel_initializer=constant),
                              keras.layers.Dense(CLASSES, kernel_initializer=constant)])
    t = trainer_lib.Trainer(model=model,
                            optimizer=keras.optimizers.Adam(1e-2), loss=SCE, model_dir=model_dir,
                            steps_per_loop=10, verbose=False)
    summary = t.fit(_dataset(LEARNABLE), num_steps=200)
    self.assertEqual(summary['status'], 'diverged')
    self.assertEqual(_triggers(model_dir), [moved.ALIKE])
    self.assertRegex(summary['reason'], r'2 of its 3 kernels \(\S*dense\S*/kernel')
    self.assertEqual(_summary(model_dir)['diagnosis']['cause'], 'initialisation')

  @pytest.mark.slow
  def test_a_short_run_or_judge_end_off_is_not_judged(self):
    # Judged from 2 x rise_patience steps on: 20 here (100 by default, test_the_trainer).
    self.assertEqual(self._trainer(1e-7, LEARNABLE, num_steps=16, rise_patience=10)[0]['status'],
                     'completed')
    self.assertEqual(self._trainer(1e-7, LEARNABLE, num_steps=20, rise_patience=10,
                                   judge_end=False)[0]['status'], 'completed')

  def test_a_net_that_died_in_training_is_a_collapse_not_a_constant_start(self):
    # Alive at the start; after step 1 its kernels and hidden biases are zeroed (a saddle plain SGD
    # never leaves): outputs the same for every example at the end, as a zero start leaves them,
    # but its own start varied: a collapse (units died), not `constant_outputs` (the initialiser).
    model = classifier(last_scale=30.0)  # A start loss far above the end's: no mid-run alarm.
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=SCE)
    guard = keras_fit.guard_fit(model)
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    dense = model.layers
    kill = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batch == 0 and [
        v.assign(tf.zeros_like(v)) for v in (dense[0].kernel, dense[0].bias, dense[1].kernel)])
    with self.assertRaisesRegex(errors.StableTrainError, 'collapsed'):
      model.fit(_dataset(LEARNABLE), steps_per_epoch=200, epochs=1, verbose=0,
                callbacks=[guard.callback(model_dir=model_dir), kill])
    self.assertEqual(_triggers(model_dir), ['divergence'])  # A collapse's, not constant_outputs.
    with open(os.path.join(model_dir, 'events.jsonl')) as f:
      checks = [e.get('rule') for e in map(json.loads, f) if e['event'] == 'divergence_check']
    self.assertEqual(checks, ['collapsed'])
    self.assertEqual(_history_ends(model_dir), [200])
    # Not read as a constant start (its start's logits, 30x off scale from its last kernel,
    # are the initialiser's all the same: the start check's warning says so).
    diagnosis = _summary(model_dir)['diagnosis']
    self.assertFalse(any('nothing of the input reached them' in e
                         for e in diagnosis['evidence']), diagnosis)

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
