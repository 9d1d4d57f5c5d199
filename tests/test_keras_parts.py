"""Tests for stable_train.core.keras_parts: the Trainer takes what Keras's compile and fit take where the
meaning is the same (a compiled model's parts, string identifiers, sample and class weights)."""

import keras
import numpy as np
import tensorflow as tf

from stable_train.core import keras_parts
from stable_train import errors
from stable_train.policies import precision
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

CLASSES = 3


def _classifier(softmax=True):
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation='relu'),
                           keras.layers.Dense(CLASSES, activation='softmax' if softmax else None)])


def _arrays(n=48, seed=0):
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(n, 6)).astype(np.float32)
  y = rng.randint(0, CLASSES, size=n).astype(np.int32)
  w = rng.uniform(0.0, 2.0, size=n).astype(np.float32)
  return x, y, w


def _trainer(model, **kwargs):
  kwargs.setdefault('policies', [])
  return trainer_lib.Trainer(model=model, model_dir=None, verbose=False, **kwargs)


class CompiledModelTest(tf.test.TestCase):
  test_session = None

  def tearDown(self):
    precision.set_precision('float32')
    super().tearDown()

  def test_the_compiled_optimizer_loss_and_metrics_are_taken(self):
    model = _classifier()
    model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
    trainer = _trainer(model)
    self.assertIs(trainer.optimizer, model.optimizer)
    self.assertIsInstance(trainer.loss_fn, keras.losses.Loss)
    self.assertEqual([m.name for m in trainer.metrics], ['accuracy'])
    x, y, _ = _arrays()
    summary = trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), num_steps=6)
    self.assertEqual(summary['applied_steps'], 6)
    self.assertEqual(int(model.optimizer.iterations.numpy()), 6)
    # 'accuracy' on class-id labels is the sparse categorical accuracy, as in compile.
    reference = keras.metrics.SparseCategoricalAccuracy()
    reference.update_state(y, model(x, training=False))
    check = keras_parts.as_metric('accuracy')
    check.update_state(y, model(x, training=False))
    self.assertEqual(float(check.result()), float(reference.result()))

  def test_given_parts_win_over_the_compiled_ones(self):
    model = _classifier()
    model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')
    sgd = keras.optimizers.SGD(0.1)
    trainer = _trainer(model, optimizer=sgd, metrics=[])
    self.assertIs(trainer.optimizer, sgd)
    self.assertEqual(trainer.metrics, [])

  def test_under_mixed_float16_the_wrapper_is_taken_apart(self):
    precision.set_precision('mixed_float16')
    model = models.mlp(input_dim=6, hidden=(8,), seed=0)
    model.compile(optimizer='adam', loss='mse')
    self.assertIsInstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    trainer = _trainer(model)
    self.assertIs(trainer.optimizer, model.optimizer.inner_optimizer)
    self.assertEqual(float(trainer.loss_scale.scale.numpy()), 2.0**15)

  def test_what_cannot_be_taken_is_a_one_line_config_error(self):
    with self.assertRaisesRegex(errors.ConfigError, r'optimizer=None; pass one .*model.compile'):
      _trainer(_classifier(), loss='mse')
    with self.assertRaisesRegex(errors.ConfigError, "optimizer='adamm' is not a Keras optimizer"):
      _trainer(_classifier(), optimizer='adamm', loss='mse')
    with self.assertRaisesRegex(errors.ConfigError, "loss='msee' is not a Keras loss"):
      _trainer(_classifier(), optimizer='adam', loss='msee')
    with self.assertRaisesRegex(errors.ConfigError, "metric='acuracy' is not a Keras metric"):
      _trainer(_classifier(), optimizer='adam', loss='mse', metrics=['acuracy'])
    with self.assertRaisesRegex(errors.ConfigError, 'one loss per output'):
      _trainer(_classifier(), optimizer='adam', loss={'out': 'mse'})


class IdentifiersTest(tf.test.TestCase):
  test_session = None

  def test_strings_resolve_as_compile_resolves_them(self):
    trainer = _trainer(models.mlp(input_dim=6, hidden=(8,), seed=0), optimizer='sgd', loss='mse',
                       metrics=['mae'])
    self.assertIsInstance(trainer.optimizer, keras.optimizers.SGD)
    y, p = tf.constant([[1.0], [2.0]]), tf.constant([[0.0], [4.0]])
    self.assertAllClose(trainer.loss_fn(y, p), keras.losses.MeanSquaredError()(y, p))
    self.assertEqual(trainer.metrics[0].name, 'mae')

  def test_labels_of_rank_one_meet_outputs_of_one_column_as_under_compile(self):
    # Keras's binary cross-entropy refuses (B,) labels against (B, 1) outputs; compile's wrapper
    # gives them the outputs' rank first, and so do a loss name and a plain function here.
    y, p = tf.constant([1.0, 0.0, 1.0]), tf.constant([[0.9], [0.2], [0.4]])
    expected = keras.losses.BinaryCrossentropy()(y[:, None], p)
    self.assertAllClose(keras_parts.as_loss('binary_crossentropy')(y, p), expected)
    plain = keras.losses.binary_crossentropy
    self.assertAllClose(tf.reduce_mean(keras_parts.call_loss(plain, y, p, (None, y))), expected)
    self.assertAllClose(keras_parts.call_loss(plain, y[:, None], p[:, 0], (None, y)),
                        plain(y[:, None], p))  # The other way round: the outputs gain one.
    ragged = tf.ragged.constant([[1.0], [0.0, 1.0], [2.0]])  # Composite labels pass as they are.
    mean_of = lambda y, p: tf.reduce_mean(y, axis=1) - p[:, 0]
    self.assertAllClose(keras_parts.call_loss(mean_of, ragged, p, (None, ragged)),
                        [0.1, 0.3, 1.6])
    y3 = tf.zeros([3, 3])
    with self.assertRaises(ValueError):  # (B, 3) against (B, 1): left as they are.
      keras_parts.call_loss(plain, y3, p, (None, y3))

  def test_accuracy_is_binary_sparse_or_categorical_by_shape(self):
    cases = (
        (np.array([[1.0], [0.0]]), np.array([[0.8], [0.7]]), keras.metrics.BinaryAccuracy()),
        (np.array([2, 0]), np.array([[0.1, 0.2, 0.7], [0.2, 0.7, 0.1]]),
         keras.metrics.SparseCategoricalAccuracy()),
        (np.array([[0, 0, 1], [1, 0, 0]]), np.array([[0.1, 0.2, 0.7], [0.7, 0.2, 0.1]]),
         keras.metrics.CategoricalAccuracy()))
    for y, p, reference in cases:
      metric = keras_parts.as_metric('acc')
      metric.update_state(y, p)
      reference.update_state(y, p)
      self.assertEqual(float(metric.result()), float(reference.result()), type(reference))
    self.assertEqual(keras_parts.as_metric('accuracy').name, 'accuracy')


class WeightsTest(tf.test.TestCase):
  test_session = None

  def _fit(self, batches, **fit_kwargs):
    trainer = _trainer(_classifier(softmax=False), optimizer=keras.optimizers.SGD(0.1),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    trainer.fit(batches, num_steps=6, **fit_kwargs)
    return [v.numpy() for v in trainer.model.trainable_variables]

  def test_sample_weights_weigh_the_loss_as_keras_does(self):
    x, y, w = _arrays()
    weighted = self._fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8))
    ones = self._fit(tf.data.Dataset.from_tensor_slices((x, y, np.ones_like(w))).batch(8))
    plain = self._fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
    for a, b in zip(ones, plain):
      np.testing.assert_array_equal(a, b)
    self.assertFalse(all(np.array_equal(a, b) for a, b in zip(weighted, plain)))
    # The same updates as Keras's fit with these sample weights.
    model = _classifier(softmax=False)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, sample_weight=w, batch_size=8, shuffle=False, verbose=0)
    for a, b in zip(weighted, model.trainable_variables):
      self.assertAllClose(a, b.numpy(), rtol=1e-5, atol=1e-6)

  def test_class_weights_are_sample_weights_of_the_labels_classes(self):
    x, y, _ = _arrays()
    class_weight = {0: 0.5, 2: 3.0}  # Class 1 not listed: weight 1.
    by_class = self._fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
                         class_weight=class_weight)
    w = np.array([class_weight.get(int(c), 1.0) for c in y], np.float32)
    by_hand = self._fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8))
    for a, b in zip(by_class, by_hand):
      np.testing.assert_array_equal(a, b)
    with self.assertRaisesRegex(errors.ConfigError, 'class_weight=.* must map class ids'):
      self._fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), class_weight={'a': 1.0})

  def test_a_class_not_listed_weighs_one_above_the_highest_listed_and_out_of_range(self):
    x, y, _ = _arrays()
    class_weight = {0: 0.5, 1: 3.0}  # Class 2, above the highest listed: weight 1.
    by_class = self._fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
                         class_weight=class_weight)
    w = np.array([class_weight.get(int(c), 1.0) for c in y], np.float32)
    by_hand = self._fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8))
    for a, b in zip(by_class, by_hand):
      np.testing.assert_array_equal(a, b)
    # A label out of range is the step's label check's to fail, not a gather error in the data.
    labels = tf.data.Dataset.from_tensor_slices((x[:4], np.array([-1, 0, 7, 1], np.int32)))
    _, _, weights = next(iter(keras_parts.with_class_weight(labels.batch(4), class_weight)))
    self.assertAllEqual(weights, [1.0, 0.5, 1.0, 3.0])

  def test_class_weights_beside_sample_weights_are_a_config_error(self):
    x, y, w = _arrays()
    with self.assertRaisesRegex(errors.ConfigError, 'class_weight needs \\(features, labels\\)'):
      self._fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8), class_weight={0: 2.0})

  def test_a_loss_without_sample_weights_is_named(self):
    x, y, w = _arrays()
    trainer = _trainer(_classifier(), optimizer='sgd',
                       loss=lambda labels, p: tf.reduce_mean(tf.square(p)))
    with self.assertRaisesRegex(errors.ConfigError, 'need a Keras loss.*takes no sample_weight'):
      trainer.fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8), num_steps=1)


if __name__ == '__main__':
  tf.test.main()
