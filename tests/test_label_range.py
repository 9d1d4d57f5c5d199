"""Tests for stable_train.core.label_range: labels a loss or the model's head cannot fit."""

import gin
import keras
import numpy as np
import tensorflow as tf

from stable_train.app import configurables  # pylint: disable=unused-import  (gin names)
from stable_train.core import keras_parts
from stable_train.core import label_range
from stable_train.core import loss_match

SCCE = keras.losses.SparseCategoricalCrossentropy


class UnreachableLabelsTest(tf.test.TestCase):
  """A bounded last activation under a regression loss whose labels lie outside its range."""

  def _kind(self, loss, labels, activation, columns=1):
    found = label_range.find_unreachable_labels(loss, np.asarray(labels, np.float32), activation,
                                               columns)
    return None if found is None else found.kind

  def test_labels_out_of_the_activation_s_range(self):
    digits = np.arange(10.0)  # A digit's value regressed through a sigmoid: never above 1.
    self.assertEqual(self._kind('mse', digits, 'sigmoid'), loss_match.BOUNDED_OUTPUTS)
    self.assertEqual(self._kind(keras.losses.MeanAbsoluteError(), digits, 'tanh'),
                     loss_match.BOUNDED_OUTPUTS)
    found = label_range.find_unreachable_labels('mse', np.array([0.2, 0.7]), 'softmax', 1)
    self.assertIn('one unit, 1 for every input', found.message)  # Always 1: 0.2 out of reach.

  def test_no_finding_where_the_labels_fit_or_the_loss_is_no_regression(self):
    self.assertIsNone(self._kind('mse', [0.0, 0.3, 1.0], 'sigmoid'))
    self.assertIsNone(self._kind('mse', [-0.9, 0.5], 'tanh'))
    self.assertIsNone(self._kind('mse', np.arange(10.0), None))  # A linear head.
    self.assertIsNone(self._kind('mse', np.arange(10.0), 'linear'))
    self.assertIsNone(self._kind(SCCE(), np.arange(10.0), 'softmax', 10))  # Class ids.
    self.assertIsNone(self._kind(lambda y, p: y - p, np.arange(10.0), 'sigmoid'))
    self.assertIsNone(self._kind('mse', [0.0, np.nan], 'sigmoid'))


class BinaryLabelsOutsideTest(tf.test.TestCase):
  """A binary cross-entropy given labels outside [0, 1] (its loss has no minimum there)."""

  def _kind(self, loss, labels):
    found = label_range.find_binary_labels_outside(loss, np.asarray(labels, np.float32))
    return None if found is None else found.kind

  def test_ratings_and_signed_targets_under_a_binary_cross_entropy(self):
    stars = np.array([1.0, 3.0, 5.0, 4.0])  # Ratings, a regression written as a classifier's.
    # The Trainer's loss given by name is keras_parts.as_loss's wrapper (blind54's Legal-BERT,
    # class ids 0 to 5, went unnamed through the Trainer and was named through fit).
    for loss in ('binary_crossentropy', keras.losses.BinaryCrossentropy(from_logits=True),
                 keras.losses.BinaryFocalCrossentropy(),
                 keras_parts.as_loss('binary_crossentropy')):
      self.assertEqual(self._kind(loss, stars), loss_match.BINARY_LABELS_OUTSIDE, loss)
    self.assertEqual(self._kind('binary_crossentropy', [-1.0, 1.0, 1.0]),
                     loss_match.BINARY_LABELS_OUTSIDE)
    found = label_range.find_binary_labels_outside('binary_crossentropy', stars)
    self.assertIn('run from 1 to 5', found.message)
    gin.clear_config()
    gin.parse_config(found.gin)  # The fix binds the Trainer's loss.
    self.assertIn('Trainer.loss', gin.config_str())
    gin.clear_config()

  def test_labels_in_range_or_other_losses_give_no_finding(self):
    self.assertIsNone(self._kind('binary_crossentropy', [0.0, 1.0, 1.0, 0.0]))
    self.assertIsNone(self._kind('binary_crossentropy', [0.05, 0.95, 0.5]))  # Soft labels.
    self.assertIsNone(self._kind('binary_crossentropy', [0.0, 1.005]))  # Rounding.
    self.assertIsNone(self._kind('mse', [1.0, 5.0]))
    self.assertIsNone(self._kind(SCCE(), [1.0, 5.0]))  # Class ids.
    self.assertIsNone(self._kind('binary_crossentropy', [0.0, np.nan, 3.0]))
    self.assertIsNone(label_range.find_binary_labels_outside('binary_crossentropy', None))
    # -1 marking rows of a 0/1 task (an "ignore" label a zero weight or a mask keeps out of the
    # loss): no finding; -1/+1 targets (no 0 among them) are one.
    self.assertIsNone(self._kind('binary_crossentropy', [0.0, 1.0, -1.0, 1.0, -1.0]))
    self.assertEqual(self._kind('binary_crossentropy', [-1.0, 1.0]),
                     loss_match.BINARY_LABELS_OUTSIDE)

    class Rescaled(keras.losses.BinaryCrossentropy):  # Its own call: it may map the labels.

      def call(self, y_true, y_pred):
        return super().call((y_true - 1.0) / 4.0, y_pred)

    self.assertIsNone(self._kind(Rescaled(), [1.0, 5.0]))
