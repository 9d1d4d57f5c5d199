"""Tests for stable_train.policies.answers: how a model's answers on the first batch spread from
example to example (a regression's, a classifier's probabilities)."""

import types

import keras
import numpy as np
import tensorflow as tf

from stable_train.policies import answers

RNG = np.random.RandomState(0)
X = RNG.normal(size=(64, 6)).astype(np.float32)
CLASSES = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 0).astype(np.int32)  # 0, 1 or 2.


def probe_of(model, labels, loss, weights=None):
  batch = (X, labels) if weights is None else (X, labels, weights)
  return types.SimpleNamespace(model=model, loss=loss, first_batch=lambda: batch,
                               split_batch=lambda b: (b[0], b[1]))


def dense(units, scale, activation=None):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(units, activation)])
  model.layers[0].kernel.assign(model.layers[0].kernel * scale)
  return model


class ClassifierFlatnessTest(tf.test.TestCase):

  def test_probabilities_that_follow_the_input_or_do_not(self):
    sce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Logits read through a softmax: near-constant logits are flat, varied ones are not.
    self.assertLess(answers.classifier_flatness(probe_of(dense(3, 1e-4), CLASSES, sce)), 1e-3)
    self.assertGreater(answers.classifier_flatness(probe_of(dense(3, 3.0), CLASSES, sce)), 0.3)
    # Probabilities (a softmax head, from_logits=False) against one-hot labels, and a sigmoid
    # read from logits under a binary loss: the same measure.
    onehot = np.eye(3, dtype=np.float32)[CLASSES]
    cce = keras.losses.CategoricalCrossentropy()
    self.assertLess(answers.classifier_flatness(
        probe_of(dense(3, 1e-4, 'softmax'), onehot, cce)), 1e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    binary = (X[:, :1] > 0).astype(np.float32)
    self.assertGreater(answers.classifier_flatness(probe_of(dense(1, 3.0), binary, bce)), 0.3)

  def test_what_it_cannot_read_is_none(self):
    model = dense(3, 1.0)
    self.assertIsNone(answers.classifier_flatness(probe_of(model, CLASSES, 'mse')))
    self.assertIsNone(answers.classifier_flatness(
        probe_of(model, np.zeros(64, np.int32), keras.losses.SparseCategoricalCrossentropy())))
    broken = probe_of(model, CLASSES, keras.losses.SparseCategoricalCrossentropy())
    broken.split_batch = lambda b: 1 / 0
    self.assertIsNone(answers.classifier_flatness(broken))


if __name__ == '__main__':
  tf.test.main()
