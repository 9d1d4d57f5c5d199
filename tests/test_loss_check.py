"""Tests for stable_train.runtime.loss_check: both front doors name a loss/output mismatch once, at
the start, as a `warning` event the doctor reads, and train on to the end; a loss that fits its
outputs, a run that keeps no first batch, or a loss the step does not apply, gets none."""

import dataclasses
import json
import os
import types

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import errors
from stable_train.core import keras_parts
from stable_train.doctor import doctor
from stable_train.keras import fit as keras_fit
from stable_train.policies import divergence
from stable_train.runfiles import events as events_lib
from stable_train.runtime import handle
from stable_train.runtime import loss_check
from stable_train.trainer import trainer as trainer_lib

FEATURES, CLASSES, ROWS, BATCH = 6, 3, 64, 16


def _data():
  rng = np.random.RandomState(0)
  x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
  y = np.argmax(x[:, :CLASSES], axis=1).astype(np.int32)
  return x, y


def _model(activation):
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation='relu'),
                           keras.layers.Dense(CLASSES, activation=activation)])


def _loss(from_logits):
  return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def _guarded_fit(model_dir, activation, from_logits):
  model = _model(activation)
  model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=_loss(from_logits))
  guard = keras_fit.guard_fit(model)
  x, y = _data()
  model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
            callbacks=[guard.callback(model_dir=model_dir)])


def _trainer_fit(model_dir, activation, from_logits):
  trainer = trainer_lib.Trainer(model=_model(activation), optimizer=keras.optimizers.Adam(1e-2),
                                loss=_loss(from_logits), model_dir=model_dir, verbose=False)
  trainer.fit(tf.data.Dataset.from_tensor_slices(_data()).batch(BATCH), num_steps=ROWS // BATCH)


def _records(model_dir):
  events = events_lib.read_events(os.path.join(model_dir, 'events.jsonl'))
  with open(os.path.join(model_dir, 'summary.json')) as f:
    summary = json.load(f)
  return [e for e in events if e['event'] == 'warning'], summary


class _FittedOnce(tf.test.TestCase):
  """A run fitted once per class (`fit(model_dir, activation, from_logits)`) in `cls.model_dir`."""
  test_session = None
  fit = activation = from_logits = None

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model_dir = os.path.join(cls.get_temp_dir(cls()), cls.__name__)
    cls.fit(cls.model_dir, cls.activation, cls.from_logits)

  def assert_warned_once_and_trained_to_the_end(self):
    warnings, summary = _records(self.model_dir)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['global_step'], ROWS // BATCH)
    self.assertLen(warnings, 1)
    w = warnings[0]
    self.assertEqual((w['cause'], w['kind']),
                     ('loss_output_mismatch', 'probabilities_to_logits_loss'))
    self.assertIn('SparseCategoricalCrossentropy(from_logits=False)', w['fix'])
    self.assertIn('keras.losses.SparseCategoricalCrossentropy.from_logits = False', w['gin'])
    self.assertIn('softmax', w['message'])

  def assert_the_doctor_names_it_with_the_fix(self):
    _, summary = _records(self.model_dir)
    self.assertEqual(summary['diagnosis']['cause'], 'loss_output_mismatch')
    events, summary, forensics, names = doctor.load(self.model_dir)
    d = doctor.diagnose(events, summary, forensics, names=names)  # Offline: the same.
    self.assertEqual((d['cause'], d['confidence']), ('loss_output_mismatch', 'high'))
    gin = ('Trainer.loss = @keras.losses.SparseCategoricalCrossentropy(); '
           'keras.losses.SparseCategoricalCrossentropy.from_logits = False')
    if summary.get('front_door') == 'guard_fit':  # A fit user gets the code alone.
      self.assertNotIn('Trainer.loss', d['remedy'])
    else:
      self.assertIn(gin, d['remedy'])
    self.assertIn('drop the softmax', d['remedy'])


@pytest.mark.slow
class GuardFitTest(_FittedOnce):
  """A softmax model compiled with from_logits=True, through guard_fit."""
  fit, activation, from_logits = staticmethod(_guarded_fit), 'softmax', True

  def test_the_mismatch_is_named_once_with_the_fix_and_the_run_trains_on(self):
    self.assert_warned_once_and_trained_to_the_end()

  def test_the_doctor_names_it(self):
    self.assert_the_doctor_names_it_with_the_fix()


class TrainerTest(_FittedOnce):
  """The same model and loss through the Trainer."""
  fit, activation, from_logits = staticmethod(_trainer_fit), 'softmax', True

  def test_the_mismatch_is_named_once_with_the_fix_and_the_run_trains_on(self):
    self.assert_warned_once_and_trained_to_the_end()

  def test_the_doctor_names_it(self):
    self.assert_the_doctor_names_it_with_the_fix()


class FittingLossTest(_FittedOnce):
  """Logits into from_logits=True: as it should be."""
  fit, activation, from_logits = staticmethod(_trainer_fit), None, True

  def test_no_warning_and_no_diagnosis(self):
    warnings, summary = _records(self.model_dir)
    self.assertEqual(warnings, [])
    self.assertEqual(summary['status'], 'completed')
    self.assertNotIn('diagnosis', summary)


class _Run:
  """A run handle with a probe and a list of emitted events."""

  def __init__(self, probe):
    self.probe, self.emitted = probe, []

  def emit(self, event, step=None, **fields):
    self.emitted.append(dict(fields, event=event, step=step))


def _probe(model, *, loss, policies):
  x, y = _data()
  return handle.Probe(model=model, policies=policies, split_batch=lambda b: (b[0], b[1]),
                      loss_and_gradients=None, model_checkpoint=None,
                      first_batch=lambda: (tf.constant(x[:BATCH]), tf.constant(y[:BATCH])),
                      loss=loss)


class LossOutputCheckTest(tf.test.TestCase):
  test_session = None

  def test_once_and_only_where_the_run_keeps_its_first_batch_and_applies_its_loss(self):
    model = _model('softmax')
    reads_first_batch = [divergence.DivergenceCheck()]
    run = _Run(_probe(model, loss=_loss(True), policies=reads_first_batch))
    check = loss_check.LossOutputCheck()
    weights = [v.numpy() for v in model.variables]
    self.assertEqual(check.after_loop(run, 3).kind, 'probabilities_to_logits_loss')
    self.assertIsNone(check.after_loop(run, 6))  # Once.
    self.assertEqual([(e['event'], e['step'], e['cause']) for e in run.emitted],
                     [('warning', 3, 'loss_output_mismatch')])
    for before, v in zip(weights, model.variables):  # The probe moved no variable.
      self.assertAllEqual(before, v.numpy())
    for probe in (_probe(model, loss=_loss(True), policies=[]),  # No first batch kept.
                  _probe(model, loss=None, policies=reads_first_batch)):  # Its own loss.
      run = _Run(probe)
      self.assertIsNone(loss_check.LossOutputCheck().after_loop(run, 3))
      self.assertEqual(run.emitted, [])
    self.assertIsNone(loss_check.LossOutputCheck().after_loop(types.SimpleNamespace(), 3))

  def test_a_softmax_over_one_unit_is_named_under_any_loss(self):
    # A one-channel segmentation head given the multi-class softmax, under a hand-written Dice
    # loss: 1 for every input, no gradient, whatever the loss.
    dice = lambda y, p: 1.0 - (2.0 * tf.reduce_sum(y * p) + 1.0) / (
        tf.reduce_sum(y) + tf.reduce_sum(p) + 1.0)
    keras.utils.set_random_seed(0)
    found = {}
    for activation in ('softmax', 'sigmoid'):
      model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1, activation)])
      run = _Run(_probe(model, loss=dice, policies=[divergence.DivergenceCheck()]))
      found[activation] = loss_check.LossOutputCheck().after_loop(run, 1)
    self.assertEqual(found['softmax'].kind, 'softmax_over_one_unit')
    self.assertIn("activation='sigmoid'", found['softmax'].fix)
    self.assertIsNone(found['sigmoid'])

  def test_outputs_at_one_on_labels_all_one_are_no_softmax_over_one_unit(self):
    # Three sigmoid towers side by side (the head's activation unreadable), trained and resumed
    # on a first batch whose labels are all 1: its outputs round to exactly 1 on every row. A
    # fresh model's ones over labels that are not all 1 are the softmax's.
    inputs = keras.Input((FEATURES,))
    towers = [keras.layers.Dense(1, 'sigmoid', bias_initializer=keras.initializers.Constant(
        40.0))(inputs) for _ in range(3)]
    model = keras.Model(inputs, keras.layers.Concatenate()(towers))
    x, _ = _data()
    def found(labels):
      probe = handle.Probe(
          model=model, policies=[divergence.DivergenceCheck()],
          split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None, model_checkpoint=None,
          first_batch=lambda: (tf.constant(x[:BATCH]), tf.constant(labels)),
          loss=keras.losses.BinaryCrossentropy())
      return loss_check.LossOutputCheck().after_loop(_Run(probe), 1)
    self.assertIsNone(found(np.ones((BATCH, 3), np.float32)))
    mixed = np.ones((BATCH, 3), np.float32)
    mixed[::2] = 0.0
    self.assertEqual(found(mixed).kind, 'softmax_over_one_unit')

  def test_a_softmax_over_multi_label_targets_is_named_and_stays_stuck(self):
    # Multi-label targets (several 1s a row) under a binary cross-entropy, given a softmax.
    keras.utils.set_random_seed(0)
    x = tf.random.normal([BATCH, FEATURES])
    multi = tf.cast(tf.random.uniform([BATCH, 5]) < 0.5, tf.float32)
    one_hot = tf.one_hot(tf.range(BATCH) % 5, 5)
    found = {}
    for name, labels in (('multi', multi), ('one_hot', one_hot)):
      for activation in ('softmax', 'sigmoid'):
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(5, activation)])
        probe = handle.Probe(model=model, policies=[divergence.DivergenceCheck()],
                             split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None,
                             model_checkpoint=None, first_batch=lambda l=labels: (x, l),
                             loss=keras.losses.BinaryCrossentropy())
        check, run = loss_check.LossOutputCheck(), _Run(probe)
        found[name, activation] = check.after_loop(run, 1, [0.7] * 60)
        if found[name, activation] is not None:  # Still a softmax at the end: stuck.
          self.assertIn('one label a row at most', check.at_end(run))
    self.assertEqual(found['multi', 'softmax'].kind, 'softmax_over_multi_labels')
    self.assertIn("activation='sigmoid'", found['multi', 'softmax'].fix)
    for key in (('multi', 'sigmoid'), ('one_hot', 'softmax'), ('one_hot', 'sigmoid')):
      self.assertIsNone(found[key], key)  # A one-hot label a row is a legitimate use.
    # Under a categorical cross-entropy too (blind35's AttentiveFP): named, with the binary loss
    # as the fix; its one-hot labels, or soft ones (a distribution a row), are not.
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(5, 'softmax')])
    soft = tf.nn.softmax(tf.random.normal([BATCH, 5]))
    for labels, named in ((multi, True), (one_hot, False), (soft, False)):
      probe = handle.Probe(model=model, policies=[divergence.DivergenceCheck()],
                           split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None,
                           model_checkpoint=None, first_batch=lambda l=labels: (x, l),
                           loss=keras.losses.CategoricalCrossentropy())
      check, run = loss_check.LossOutputCheck(), _Run(probe)
      got = check.after_loop(run, 1, [0.7] * 60)
      self.assertEqual(got is not None, named)
      if named:
        self.assertEqual(got.kind, 'softmax_over_multi_labels')
        self.assertIn('BinaryCrossentropy', got.fix)
        self.assertIn('one label a row at most', check.at_end(run))

  def test_logits_into_a_kl_divergence_are_named(self):
    # A distilled student's raw logits under keras.losses.KLDivergence (no from_logits form):
    # named, with a softmax as the fix; its softmax, the 'kld' name's function on probabilities,
    # or a subclass with its own call, not.
    keras.utils.set_random_seed(0)
    x = tf.random.normal([BATCH, FEATURES])
    soft = tf.nn.softmax(tf.random.normal([BATCH, 5]))

    class Own(keras.losses.KLDivergence):
      def call(self, y_true, y_pred):
        return keras.losses.kl_divergence(y_true, tf.nn.softmax(y_pred))

    def found(activation, loss, init='glorot_uniform'):
      model = keras.Sequential([keras.Input((FEATURES,)),
                                keras.layers.Dense(5, activation, kernel_initializer=init)])
      probe = handle.Probe(model=model, policies=[divergence.DivergenceCheck()],
                           split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None,
                           model_checkpoint=None, first_batch=lambda: (x, soft), loss=loss)
      return loss_check.LossOutputCheck().after_loop(_Run(probe), 1)
    # ...and the Trainer's loss given by name (keras_parts.as_loss's wrapper).
    for loss in (keras.losses.KLDivergence(), 'kld', keras_parts.as_loss('kld')):
      logits = found(None, loss)
      self.assertEqual(logits.kind, 'logits_to_probability_loss')
      self.assertIn('KLDivergence', logits.message)
      self.assertIn("activation='softmax'", logits.fix)
      self.assertIsNone(found('softmax', loss))
    self.assertIsNone(found(None, Own()))
    # Values in [0, 1] from an activation that may normalise over other axes (a heatmap's spatial
    # softmax, a review's): not named; from a ReLU, rows not summing to 1, named.
    def spatial_softmax(t):  # Each column a distribution over the rows.
      return tf.nn.softmax(t, axis=0)
    self.assertIsNone(found(spatial_softmax, 'kld'))
    small = keras.initializers.RandomUniform(0.0, 0.01)  # ReLU values well inside [0, 1].
    self.assertIsNotNone(found('relu', 'kld', small))
    self.assertIsNone(found(None, keras.losses.CategoricalCrossentropy(from_logits=True)))

  def test_a_loss_that_never_came_down_after_a_finding_is_no_completed_run(self):
    model = _model('softmax')
    probe = _probe(model, loss=_loss(True), policies=[divergence.DivergenceCheck()])
    rng = np.random.RandomState(0)
    flat = lambda n: 1.1 + 0.05 * rng.normal(size=n)  # Noisy, never lower.
    check = loss_check.LossOutputCheck()
    check.after_loop(_Run(probe), 10, flat(10))
    self.assertIsNone(check.at_end())  # Too few steps to judge.
    for step in range(20, 70, 10):
      check.after_loop(_Run(probe), step, np.append(flat(9), np.nan))  # NaN: not read.
    reason = check.at_end()
    self.assertIn('the loss did not come down in 55 steps', reason)
    self.assertIn('fix: drop the softmax', reason)
    # A loss that halves: it trained despite the mismatch.
    check = loss_check.LossOutputCheck()
    check.after_loop(_Run(probe), 10, flat(10))
    for step in range(20, 110, 10):
      check.after_loop(_Run(probe), step, flat(10) * 0.97**step)
    self.assertIsNone(check.at_end())
    # Up to twice its start in the second quarter, then back to it: no progress either.
    check = loss_check.LossOutputCheck()
    check.after_loop(_Run(probe), 10, flat(10))
    for step, level in zip(range(20, 160, 10), (2.0, 2.2, 2.2) + (1.1,) * 11):
      check.after_loop(_Run(probe), step, np.full(10, level))
    self.assertIn('the loss did not come down', check.at_end())
    # Down by less than a fifth, but still on its way down (a low learning rate's short run).
    check = loss_check.LossOutputCheck()
    check.after_loop(_Run(probe), 10, flat(10))
    for step in range(20, 70, 10):
      check.after_loop(_Run(probe), step, np.full(10, 1.1 - 0.004 * step))
    self.assertIsNone(check.at_end())
    # From far above a uniform guess's loss down only to it (a ReLU head into a probability
    # loss): with the model at hand the guess is its start, and it did not come down from there.
    guess, run = np.log(CLASSES), _Run(probe)
    check = loss_check.LossOutputCheck()
    check.after_loop(run, 10, np.full(10, 4.5 * guess))
    for step, level in zip(range(20, 160, 10), np.geomspace(3.0, 1.01, 6).tolist() + [0.985] * 8):
      check.after_loop(run, step, np.full(10, level * guess))
    self.assertIn('the loss did not come down', check.at_end(run))
    self.assertIsNone(check.at_end())  # Read from its start alone, it came down.
    check = loss_check.LossOutputCheck()  # Well below the guess: it trained.
    check.after_loop(run, 10, np.full(10, 4.5 * guess))
    for step, level in zip(range(20, 160, 10), np.geomspace(3.0, 0.5, 14).tolist()):
      check.after_loop(run, step, np.full(10, level * guess))
    self.assertIsNone(check.at_end(run))
    # No finding: nothing to judge, whatever the loss did.
    check = loss_check.LossOutputCheck()
    check.after_loop(_Run(_probe(_model(None), loss=_loss(True), policies=[
        divergence.DivergenceCheck()])), 10, flat(10))
    for step in range(20, 110, 10):
      check.after_loop(None, step, flat(10))
    self.assertIsNone(check.at_end())


class GuessAsStartTest(tf.test.TestCase):
  """The uniform guess is the start a mismatched classifier is judged from only where its
  answers on the first batch are no better than the commonest class, in either mode."""

  def test_a_batch_norm_net_that_learned_in_training_mode_is_not_judged_from_the_guess(self):
    x, y = _data()
    x = x * 5 + 50.0  # Far off centre: BatchNorm's moving statistics lag after a short fit.
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.BatchNormalization(
        momentum=0.999), keras.layers.Dense(16, activation='relu'), keras.layers.Dense(CLASSES)])
    probe = _probe(model, loss=_loss(False), policies=[])
    probe = dataclasses.replace(probe, first_batch=lambda: (tf.constant(x[:BATCH * 4]),
                                                            tf.constant(y[:BATCH * 4])))
    self.assertAlmostEqual(loss_check._guess(_Run(probe)), np.log(CLASSES),  # pylint: disable=protected-access
                           places=5)  # Untrained: no better than the commonest class.
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=_loss(True), metrics=['accuracy'])
    model.fit(x, y, batch_size=BATCH, epochs=20, verbose=0)
    inference = np.mean(np.argmax(model.predict(x[:BATCH * 4], verbose=0), -1) == y[:BATCH * 4])
    self.assertLess(inference, 0.6)  # The lagging statistics: inference mode still guesses.
    self.assertIsNone(loss_check._guess(_Run(probe)))  # pylint: disable=protected-access


class OutputsThatCannotTellExamplesApartTest(tf.test.TestCase):
  """A named mismatch whose outputs, read as the loss reads them, give every example the same
  answer at the end is no completed run, even where Keras trained the layers below (a falling
  loss): a sigmoid (in a Lambda) into a binary from_logits=True loss, every output above 0."""

  def _check(self, head):
    keras.utils.set_random_seed(0)
    x, _ = _data()
    y = (x[:, :1] > 0).astype(np.float32)  # Both classes.
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation='relu'),
                              keras.layers.Dense(1)] + ([head] if head else []))
    probe = handle.Probe(model=model, policies=[divergence.DivergenceCheck()],
                         split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None,
                         model_checkpoint=None, loss=keras.losses.BinaryCrossentropy(
                             from_logits=True),
                         first_batch=lambda: (tf.constant(x[:BATCH]), tf.constant(y[:BATCH])))
    check, run = loss_check.LossOutputCheck(), _Run(probe)
    for step in range(10, 110, 10):  # A loss that falls all along.
      check.after_loop(run, step, np.full(10, 0.69 * 0.99**step))
    return check, run

  def test_a_sigmoid_into_a_logits_loss(self):
    check, run = self._check(keras.layers.Lambda(tf.sigmoid))
    self.assertEqual(check.found.kind, 'probabilities_to_logits_loss')
    self.assertIsNone(check.at_end())  # Without the model: the loss came down.
    self.assertIn('every example is the positive class', check.at_end(run))
    check, run = self._check(None)  # Logits: nothing named, nothing judged.
    self.assertIsNone(check.found)
    self.assertIsNone(check.at_end(run))


class OneColumnCategoricalTest(tf.test.TestCase):
  """One sigmoid unit under categorical cross-entropy (its loss is 0, its gradient 0): named at
  the start, trained to the end, and the run ends 'diverged', not 'completed', through both
  doors."""

  def _fit(self, door):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation='relu'),
                              keras.layers.Dense(1, activation='sigmoid')])
    x, y = _data()
    data = tf.data.Dataset.from_tensor_slices(
        (x, (y[:, None] > 0).astype(np.float32))).repeat().batch(BATCH)
    model_dir = os.path.join(self.get_temp_dir(), door)
    if door == 'trainer':
      trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-2),
                          loss='categorical_crossentropy', model_dir=model_dir, steps_per_loop=10,
                          verbose=False).fit(data, num_steps=80)
    else:
      model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='categorical_crossentropy')
      with self.assertRaisesRegex(errors.RunAborted, 'the loss did not come down'):
        model.fit(data, steps_per_epoch=80, epochs=1, verbose=0,
                  callbacks=[keras_fit.guard_fit(model).callback(model_dir=model_dir)])
    return _records(model_dir), model_dir

  @pytest.mark.slow
  def test_both_doors(self):
    for door in ('trainer', 'fit'):
      (warnings, summary), model_dir = self._fit(door)
      self.assertEqual([w['kind'] for w in warnings], ['sigmoid_to_categorical_loss'], door)
      self.assertEqual((summary['status'], summary['global_step']), ('diverged', 80), door)
      self.assertIn('the loss did not come down', summary['reason'])
      events, summary, forensics, names = doctor.load(model_dir)
      d = doctor.diagnose(events, summary, forensics, names=names)
      self.assertEqual((d['cause'], d['confidence']), ('loss_output_mismatch', 'high'), door)


class SignedRatesTest(tf.test.TestCase):
  """A linear head under a Poisson loss (its log of a negative rate is NaN): named at the start
  through the Trainer, and the doctor names the mismatch, not the division it makes."""

  def test_named_at_the_start_and_diagnosed(self):
    keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).normal(size=(ROWS, FEATURES)).astype(np.float32)
    counts = np.random.RandomState(1).poisson(np.exp(0.5 * x[:, :1])).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation='relu'),
                              keras.layers.Dense(1)])
    model_dir = os.path.join(self.get_temp_dir(), 'poisson')
    trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-2), loss='poisson',
                        model_dir=model_dir, verbose=False).fit(
                            tf.data.Dataset.from_tensor_slices((x, counts)).batch(BATCH),
                            num_steps=ROWS // BATCH)
    warnings, _ = _records(model_dir)
    self.assertEqual([w['kind'] for w in warnings], ['signed_outputs_under_a_rate_loss'])
    self.assertIn("activation='softplus'", warnings[0]['fix'])
    events, summary, forensics, names = doctor.load(model_dir)
    d = doctor.diagnose(events, summary, forensics, names=names)
    self.assertEqual(d['cause'], 'loss_output_mismatch')



class MissingCodeLabelsTest(tf.test.TestCase):
  """A regression whose labels hold -999 (a missing-value code) on a few rows: bad input, named
  at the start as a warning the doctor reads; a model that masks steps is left alone."""

  def test_the_trainer_warns_with_the_fix(self):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    y = x[:, :1].copy()
    y[[2, 9, 30]] = -999.0  # Two in the first batch.
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation='relu'),
                              keras.layers.Dense(1)])
    model_dir = self.get_temp_dir()
    trainer = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-2), loss='mse',
                                  model_dir=model_dir, verbose=False)
    trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat(), num_steps=60)
    warnings, summary = _records(model_dir)
    self.assertEqual([(w['cause'], w['kind'], w['code'], w['rows']) for w in warnings],
                     [('bad_input', 'missing_value_code_labels', -999.0, 2)])
    self.assertIn('sample weight of 0', warnings[0]['fix'])
    # Its loss came down on the batches without the code: completed, the warning alone (a run
    # that ends well is not diagnosed from it; one whose loss never came down is, below).
    self.assertEqual(summary['status'], 'completed')
    self.assertNotIn('diagnosis', summary)

  def test_a_loss_that_never_came_down_after_it_is_no_completed_run(self):
    x, _ = _data()
    y = x[:, :1].copy()
    y[[2, 9]] = -999.0
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    probe = handle.Probe(model=model, policies=[divergence.DivergenceCheck()],
                         split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None,
                         model_checkpoint=None, loss=keras.losses.MeanSquaredError(),
                         first_batch=lambda: (tf.constant(x[:BATCH]), tf.constant(y[:BATCH])))
    run, check = _Run(probe), loss_check.LossOutputCheck()
    self.assertEqual(check.after_loop(run, 10, np.full(10, 1.2e5)).code, -999.0)
    self.assertEqual([e['cause'] for e in run.emitted], ['bad_input'])
    for step in range(20, 80, 10):  # Pulled toward the code, never down.
      check.after_loop(run, step, np.full(10, 1.2e5))
    self.assertIn('the loss did not come down', check.at_end(run))
    self.assertIn('missing-value code', check.at_end(run))

  def test_a_loss_that_leaves_the_code_out_is_not_judged(self):
    # -999 pads a sequence's labels past its end, and a Masking layer leaves those steps out of
    # the loss (Keras's losses apply the outputs' mask); a loss of one's own may do the same.
    rng = np.random.RandomState(0)
    x, y = rng.normal(size=(BATCH, 5, 2)).astype(np.float32), rng.normal(size=(BATCH, 5, 1))
    x[:, 3:], y[:, 3:] = -999.0, -999.0
    y = y.astype(np.float32)
    keras.utils.set_random_seed(0)
    masked = keras.Sequential([keras.Input((5, 2)), keras.layers.Masking(-999.0),
                               keras.layers.LSTM(4, return_sequences=True), keras.layers.Dense(1)])

    class LeavesCodesOut(keras.losses.MeanSquaredError):
      def __call__(self, y_true, y_pred, sample_weight=None):
        return super().__call__(y_true, y_pred, tf.cast(y_true > -900.0, y_pred.dtype))

    flat = keras.Sequential([keras.Input((5, 2)), keras.layers.Dense(1)])
    for model, loss, named in ((masked, 'mse', False), (flat, LeavesCodesOut(), False),
                               (flat, 'mse', True)):
      probe = handle.Probe(model=model, policies=[divergence.DivergenceCheck()],
                           split_batch=lambda b: (b[0], b[1]), loss_and_gradients=None,
                           model_checkpoint=None, loss=loss,
                           first_batch=lambda: (tf.constant(x), tf.constant(y)))
      run = _Run(probe)
      loss_check.LossOutputCheck().after_loop(run, 10, np.ones(10))
      self.assertEqual([e['cause'] for e in run.emitted], ['bad_input'] if named else [], loss)
