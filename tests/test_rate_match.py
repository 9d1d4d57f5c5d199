"""Tests for stable_train.core.rate_match: a Poisson loss on outputs that can be negative."""

import gin
import keras
import numpy as np
import tensorflow as tf

from stable_train.core import rate_match


def _kind(loss, outputs, activation=None):
  found = rate_match.find_signed_rates(loss, outputs, activation)
  return None if found is None else found.kind


class SignedRatesTest(tf.test.TestCase):

  def test_a_signed_output_under_a_poisson_loss(self):
    signed = np.random.RandomState(0).normal(size=(16, 1)).astype(np.float32)
    positive = np.abs(signed) + 0.1
    for loss in ('poisson', keras.losses.Poisson(), keras.losses.poisson):
      self.assertEqual(_kind(loss, signed), rate_match.NEGATIVE_RATES, loss)
      self.assertEqual(_kind(loss, signed, 'linear'), rate_match.NEGATIVE_RATES, loss)
      # A linear head whose rates are all positive may be an identity link: nothing said.
      self.assertIsNone(_kind(loss, positive, 'linear'), loss)
    found = rate_match.find_signed_rates('poisson', signed, 'linear')
    self.assertIn('softplus', found.fix)
    self.assertIn('NaN', found.message)
    gin.parse_config(found.gin)  # A comment: it parses.

  def test_a_batch_normalised_model_with_a_signed_head_is_named_whatever_its_first_outputs(self):
    # An untrained BatchNorm net's inference outputs (moving statistics at their start) can all
    # be positive while the rates the loss sees in training are not (a ConvMixer's: 59 % < 0).
    positive = np.abs(np.random.RandomState(0).normal(size=(16, 1))).astype(np.float32) + 1e-4
    found = rate_match.find_signed_rates('poisson', positive, 'linear', batch_statistics=True)
    self.assertEqual(found.kind, rate_match.NEGATIVE_RATES)
    self.assertIn('inference mode', found.message)
    self.assertIsNone(_kind('poisson', positive, 'linear'))  # No batch statistics: as before.
    # Unknown, never negative, or a name not known to be signed (a log link written as tf.exp).
    for activation in (None, 'softplus', 'exponential', 'exp', 'relu6', '<lambda>'):
      self.assertIsNone(rate_match.find_signed_rates('poisson', positive, activation,
                                                     batch_statistics=True), activation)

  def test_batch_statistics_are_a_trainable_batch_normalization(self):
    inputs = keras.Input((4,))
    plain = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(8)(inputs)))
    normed = keras.Model(inputs, keras.layers.Dense(1)(
        keras.layers.BatchNormalization()(keras.layers.Dense(8)(inputs))))
    nested = keras.Sequential([keras.Input((4,)), normed])
    layer_normed = keras.Model(inputs, keras.layers.Dense(1)(
        keras.layers.LayerNormalization()(keras.layers.Dense(8)(inputs))))
    frozen = keras.Model(inputs, keras.layers.Dense(1)(
        keras.layers.BatchNormalization(trainable=False)(keras.layers.Dense(8)(inputs))))
    self.assertEqual([rate_match.uses_batch_statistics(m) for m in (plain, normed, nested,
                                                                   layer_normed, frozen)],
                     [False, True, True, False, False])  # A frozen one: moving statistics.

  def test_positive_activations_unknown_positive_outputs_and_other_losses_say_nothing(self):
    signed = np.random.RandomState(0).normal(size=(16, 1)).astype(np.float32)
    self.assertIsNone(_kind('poisson', np.abs(signed) + 0.1))  # Unknown, all positive.
    for activation in ('softplus', 'exponential', 'relu'):
      self.assertIsNone(_kind('poisson', signed, activation))
    self.assertIsNone(_kind('mse', signed, 'linear'))
    self.assertIsNone(_kind(keras.losses.KLDivergence(), signed, 'linear'))
    self.assertIsNone(_kind('poisson', signed * np.nan))  # Nothing to judge.


if __name__ == '__main__':
  tf.test.main()
