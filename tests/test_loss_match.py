"""Tests for stable_train.core.loss_match: which loss/output pairs are a mismatch, judged from the
numbers and the last activation, never from the last bits; the fix parses as gin."""

import gin
import keras
import numpy as np
import tensorflow as tf

from stable_train.app import configurables  # pylint: disable=unused-import  (gin names)
from stable_train.core import keras_parts
from stable_train.core import loss_match
from stable_train.core import losses

SCCE = keras.losses.SparseCategoricalCrossentropy


def _logits(rows=32, classes=5, scale=2.0, seed=0):
  return (np.random.RandomState(seed).normal(size=(rows, classes)) * scale).astype(np.float32)


def _softmax(z):
  e = np.exp(z - z.max(axis=-1, keepdims=True))
  return (e / e.sum(axis=-1, keepdims=True)).astype(z.dtype)


def _sigmoid(z):
  return (1 / (1 + np.exp(-z))).astype(z.dtype)


def _kind(loss, outputs, activation=None):
  found = loss_match.find_mismatch(loss, outputs, activation)
  return None if found is None else found.kind


class FindMismatchTest(tf.test.TestCase):

  def test_each_kind_from_the_numbers(self):
    z = _logits()
    self.assertEqual(_kind(SCCE(from_logits=True), _softmax(z)),
                     loss_match.PROBABILITIES_TO_LOGITS)
    self.assertEqual(_kind(SCCE(), z), loss_match.LOGITS_TO_PROBABILITIES)
    self.assertEqual(_kind('categorical_crossentropy', _sigmoid(z)),
                     loss_match.SIGMOID_TO_CATEGORICAL)
    self.assertEqual(_kind(keras.losses.BinaryCrossentropy(), z[:, :1]),
                     loss_match.LOGITS_TO_PROBABILITIES)

  def test_the_activation_decides_where_the_numbers_alone_cannot(self):
    z = _logits(classes=1)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    self.assertIsNone(_kind(bce, _sigmoid(z)))  # One column in [0, 1]: could be logits.
    self.assertEqual(_kind(bce, _sigmoid(z), 'sigmoid'), loss_match.PROBABILITIES_TO_LOGITS)
    z = _logits()
    self.assertEqual(_kind(SCCE(from_logits=True), _sigmoid(z), 'sigmoid'),
                     loss_match.SIGMOID_TO_CATEGORICAL)
    self.assertIsNone(_kind(SCCE(from_logits=True), _sigmoid(z)))  # Unknown: unsure.
    # A known activation that contradicts the numbers: no finding.
    self.assertIsNone(_kind(SCCE(), z, 'softmax'))
    self.assertIsNone(_kind(SCCE(from_logits=True), _softmax(z), 'linear'))

  def test_a_softmax_over_one_unit_is_a_mismatch_under_any_cross_entropy(self):
    ones = np.ones((32, 1), np.float32)  # What a softmax over one unit outputs, every time.
    for loss in (keras.losses.BinaryCrossentropy(), SCCE(), 'categorical_crossentropy',
                 keras.losses.BinaryCrossentropy(from_logits=True)):
      found = loss_match.find_mismatch(loss, ones, 'softmax')
      self.assertEqual(found.kind, loss_match.ONE_UNIT_SOFTMAX, loss)
      self.assertIn('sigmoid', found.fix)
      gin.parse_config(found.gin)
      gin.clear_config()
    self.assertIsNone(_kind(keras.losses.BinaryCrossentropy(), ones * 0.5, 'sigmoid'))
    # A hard sigmoid makes probabilities too: no mismatch under a probability loss, one under a
    # logits loss.
    z = _logits(classes=1)
    hard = np.clip(0.2 * z + 0.5, 0.0, 1.0)
    self.assertIsNone(_kind(keras.losses.BinaryCrossentropy(), hard, 'hard_sigmoid'))
    self.assertEqual(_kind(keras.losses.BinaryCrossentropy(from_logits=True), hard,
                           'hard_sigmoid'), loss_match.PROBABILITIES_TO_LOGITS)
    hard = np.clip(0.2 * _logits() + 0.5, 0.0, 1.0)  # ...one unit per class: independent units.
    self.assertEqual(_kind('categorical_crossentropy', hard, 'hard_sigmoid'),
                     loss_match.SIGMOID_TO_CATEGORICAL)

  def test_one_unit_at_one_on_every_row_reads_as_a_softmax_when_the_activation_is_unknown(self):
    bce = keras.losses.BinaryCrossentropy()
    ones = np.ones((16, 1), np.float32)  # A Lambda(tf.nn.softmax) over one unit, untrained.
    found = loss_match.find_mismatch(bce, ones)
    self.assertEqual(found.kind, loss_match.ONE_UNIT_SOFTMAX)
    self.assertIn('Lambda', found.message)
    # A known sigmoid at 1 is a saturated sigmoid, not this; one row off 1, too few rows to
    # tell, or a sigmoid's spread: no finding.
    self.assertIsNone(_kind(bce, ones, 'sigmoid'))
    near = ones.copy()
    near[3] = 0.999
    self.assertIsNone(_kind(bce, near))
    self.assertIsNone(_kind(bce, ones[:4]))
    self.assertIsNone(_kind(bce, ones.astype(np.float16)))  # A float16 sigmoid rounds to 1 at 8.3.
    self.assertIsNone(_kind(bce, tf.cast(ones, tf.bfloat16).numpy()))  # A bfloat16 one at 5.5.
    self.assertIsNone(loss_match.find_mismatch(bce, ones, read_ones=False))  # Raw inputs.
    self.assertIsNone(_kind(bce, _sigmoid(_logits()[:, :1])))

  def test_towers_side_by_side_each_at_one_on_every_row_read_as_one_unit_softmaxes(self):
    # An MMoE's two towers, each Dense(1, softmax), concatenated: the head's activation is
    # unknown (a Concatenate); both columns are 1 on every row of the untrained model.
    bce = keras.losses.BinaryCrossentropy()
    ones = np.ones((32, 2), np.float32)
    found = loss_match.find_mismatch(bce, ones)
    self.assertEqual(found.kind, loss_match.ONE_UNIT_SOFTMAX)
    self.assertIn('2 outputs', found.message)
    near = ones.copy()
    near[3, 1] = 0.999  # One tower's sigmoid spread: no finding.
    self.assertIsNone(_kind(bce, near))
    self.assertIsNone(_kind(bce, ones, 'sigmoid'))  # A known saturated sigmoid.
    self.assertIsNone(loss_match.find_mismatch(bce, ones, read_ones=False))  # Raw inputs.
    self.assertNotEqual(_kind(SCCE(), ones), loss_match.ONE_UNIT_SOFTMAX)  # Not one unit each.

  def test_an_activation_that_makes_no_probabilities_under_a_probability_loss(self):
    # A relu head's outputs may start inside [0, 1]; what it is, not where it starts, decides.
    relu = np.abs(_logits(scale=0.1))
    found = loss_match.find_mismatch(SCCE(), relu, 'relu')
    self.assertEqual(found.kind, loss_match.LOGITS_TO_PROBABILITIES)
    self.assertIn('no probabilities', found.message)
    self.assertIsNone(_kind(SCCE(from_logits=True), relu, 'relu'))  # Logits: as it should be.
    self.assertIsNone(_kind(SCCE(), _softmax(_logits()), 'softmax'))

  def test_agreeing_pairs_and_other_losses_give_no_finding(self):
    z = _logits()
    for loss, outputs, activation in (
        (SCCE(from_logits=True), z, 'linear'),
        (SCCE(from_logits=True), z, None),
        (SCCE(), _softmax(z), 'softmax'),
        ('sparse_categorical_crossentropy', _softmax(z), None),
        (losses.sparse_softmax_cross_entropy, z, None),
        (keras.losses.BinaryCrossentropy(), _sigmoid(z[:, :1]), None),  # One column.
        (keras.losses.BinaryCrossentropy(from_logits=True), z[:, :1], None),
        (keras.losses.MeanSquaredError(), _softmax(z), 'softmax'),  # Regression losses.
        ('mse', z, None),
        (lambda y, p: tf.reduce_mean(p), _softmax(z), 'softmax'),  # A custom callable.
        ([SCCE()], z, None)):  # One loss per output.
      self.assertIsNone(_kind(loss, outputs, activation), (loss, activation))

  def test_a_categorical_loss_over_one_column_is_a_mismatch_whatever_the_outputs(self):
    z = _logits(classes=1)
    cce = keras.losses.CategoricalCrossentropy
    for loss, outputs, activation in (('categorical_crossentropy', _sigmoid(z), 'sigmoid'),
                                      (cce(), _sigmoid(z), None),
                                      (cce(from_logits=True), z, 'linear')):
      found = loss_match.find_mismatch(loss, outputs, activation)
      self.assertEqual(found.kind, loss_match.SIGMOID_TO_CATEGORICAL, (loss, activation))
      self.assertIn('0 whatever the model outputs', found.message)
      self.assertIn('BinaryCrossentropy', found.fix)
    # The loss is indeed 0, its gradient 0: the finding is no guess.
    y = tf.ones([4, 1])
    p = tf.Variable(_sigmoid(z[:4]))
    with tf.GradientTape() as tape:
      loss = keras.losses.categorical_crossentropy(y, p)
    self.assertAllClose(loss, tf.zeros([4]))
    self.assertAllClose(tape.gradient(loss, p), tf.zeros([4, 1]))

  def test_unsure_outputs_give_no_finding(self):
    z = _logits()
    self.assertIsNone(_kind(SCCE(), z * 1e-4))  # Tiny logits: within the margin of [0, 1].
    # ...unless the head is known to make no probabilities (blind46's VQA through fit: a linear
    # Dense's logits within +-0.002 under SparseCategoricalCrossentropy()).
    self.assertEqual(_kind(SCCE(), z * 1e-4, 'linear'), loss_match.LOGITS_TO_PROBABILITIES)
    self.assertEqual(_kind(keras.losses.BinaryCrossentropy(), z[:, :1] * 1e-4, 'relu'),
                     loss_match.LOGITS_TO_PROBABILITIES)
    self.assertIsNone(_kind(SCCE(), _softmax(z * 1e-4), 'softmax'))
    # Every other Keras activation makes no probabilities either.
    for name in ('sparse_plus', 'tanh_shrink', 'glu', 'squareplus'):
      self.assertEqual(_kind(SCCE(), z * 1e-4, name), loss_match.LOGITS_TO_PROBABILITIES, name)
    # A function of one's own is no known activation: a softmax by hand is read by its numbers.
    self.assertIsNone(_kind(SCCE(), _softmax(z), 'naive_softmax'))
    self.assertEqual(_kind(SCCE(), z, 'naive_softmax'), loss_match.LOGITS_TO_PROBABILITIES)
    self.assertIsNone(_kind(SCCE(), _logits(classes=1)))  # One class: no categorical reading.
    nan = _softmax(z)
    nan[0, 0] = np.nan
    self.assertIsNone(_kind(SCCE(from_logits=True), nan))
    self.assertIsNone(_kind(SCCE(), np.arange(10)))  # Integer outputs.
    # Rows summing to 1.03: neither a softmax's rows nor clearly a sigmoid's.
    self.assertIsNone(_kind('categorical_crossentropy', np.full((8, 3), 1.03 / 3, np.float32)))

  def test_the_verdict_does_not_hang_on_the_last_bits(self):
    z = _logits(rows=64, classes=10)
    cases = ((SCCE(from_logits=True), _softmax(z)), (SCCE(), z),
             ('categorical_crossentropy', _sigmoid(z)), (SCCE(from_logits=True), z))
    rng = np.random.RandomState(1)
    for loss, outputs in cases:
      want = _kind(loss, outputs)
      for _ in range(5):  # One ulp either way, or none, as another kernel would round.
        ulps = rng.randint(-1, 2, size=outputs.shape)
        noisy = np.nextafter(outputs, np.where(ulps > 0, np.inf, -np.inf)).astype(np.float32)
        noisy = np.where(ulps == 0, outputs, noisy)
        self.assertEqual(_kind(loss, noisy), want)
    # float16 softmax rows (rounded to 11 bits) still read as a softmax's, and bfloat16 ones (8
    # bits, mixed_bfloat16's outputs: a type numpy does not count as floating) too.
    self.assertEqual(_kind(SCCE(from_logits=True), _softmax(z).astype(np.float16)),
                     loss_match.PROBABILITIES_TO_LOGITS)
    bf16 = lambda a: tf.cast(a, tf.bfloat16).numpy()
    self.assertEqual(_kind(SCCE(from_logits=True), bf16(_softmax(z))),
                     loss_match.PROBABILITIES_TO_LOGITS)
    self.assertEqual(_kind(SCCE(), bf16(z)), loss_match.LOGITS_TO_PROBABILITIES)
    self.assertIsNone(_kind(SCCE(from_logits=True), bf16(z)))

  def test_the_message_and_fix_name_the_loss(self):
    found = loss_match.find_mismatch(SCCE(from_logits=True), _softmax(_logits()), 'softmax')
    self.assertIn('SparseCategoricalCrossentropy(from_logits=True)', found.message)
    self.assertIn('keras.losses.SparseCategoricalCrossentropy(from_logits=False)', found.fix)
    self.assertIn('drop the softmax', found.fix)
    self.assertEqual(set(found.fields()), {'kind', 'message', 'fix', 'gin'})
    self.assertNotIn('\n', loss_match.describe(found))
    found = loss_match.find_mismatch(losses.sparse_softmax_cross_entropy, _softmax(_logits()))
    self.assertIn('sparse_softmax_cross_entropy', found.message)


class LossTermsTest(tf.test.TestCase):

  def test_losses_as_the_trainer_and_compile_take_them(self):
    terms = loss_match.loss_terms
    self.assertEqual(terms(SCCE(from_logits=True)),
                     loss_match.LossTerms('sparse', True, 'SparseCategoricalCrossentropy',
                                          'SparseCategoricalCrossentropy(from_logits=True)'))
    self.assertEqual(terms('categorical_crossentropy').family, 'categorical')
    self.assertFalse(terms('binary_crossentropy').from_logits)
    self.assertEqual(terms(keras.losses.CategoricalFocalCrossentropy(from_logits=True)).name,
                     'CategoricalFocalCrossentropy')
    # A name as the Trainer resolves it (a function wrapped as a loss): the function's terms.
    wrapped = keras_parts.as_loss('sparse_categorical_crossentropy')
    self.assertEqual(terms(wrapped).family, 'sparse')
    self.assertTrue(terms(losses.naive_softmax_cross_entropy).from_logits)
    for other in ('mse', keras.losses.Huber(), 'not a loss', None, print):
      self.assertIsNone(terms(other), other)

  def test_each_gin_fix_parses_and_binds_the_trainer_s_loss(self):
    z = _logits()
    for loss, outputs in ((SCCE(from_logits=True), _softmax(z)), (SCCE(), z),
                          ('categorical_crossentropy', _sigmoid(z))):
      found = loss_match.find_mismatch(loss, outputs)
      gin.clear_config()
      gin.parse_config(found.gin)
      self.assertIn('Trainer.loss', gin.config_str(), found.gin)
    gin.clear_config()
