"""Tests for stable_train.core.labels and the step's label check: the default stack survives a sparse
label out of range on the zoo's models, and labels that would broadcast are refused at once."""

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import labels
from stable_train.core import losses
from stable_train import errors
from stable_train.policies import precision
from stable_train.runfiles import events
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

SPARSE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _spec(*shape, dtype=tf.int32):
  return tf.TensorSpec(shape, dtype)


class InferenceTest(tf.test.TestCase):

  def test_the_class_count_only_where_the_labels_are_class_indices(self):
    logits = _spec(None, 4, dtype=tf.float32)
    for label_spec, output_spec, loss, expected in (
        (_spec(None), logits, SPARSE, 4),
        (_spec(None, 1, dtype=tf.int64), logits, SPARSE, 4),
        (_spec(8, dtype=tf.float32), logits, SPARSE, 4),  # Float class indices, as Keras takes.
        (_spec(None), logits, losses.sparse_softmax_cross_entropy, 4),
        (_spec(None), logits, losses.naive_softmax_cross_entropy, 4),
        (_spec(None), logits, keras.losses.sparse_categorical_crossentropy, 4),
        (_spec(None, 4, dtype=tf.float32), logits, keras.losses.CategoricalCrossentropy(), None),
        (_spec(None, 1, dtype=tf.float32), _spec(None, 1, dtype=tf.float32),
         keras.losses.MeanSquaredError(), None),  # Regression.
        (_spec(None), _spec(None, 1, dtype=tf.float32), SPARSE, None),  # One output.
        (_spec(None), _spec(None, None, dtype=tf.float32), SPARSE, None),  # Unknown classes.
        (_spec(None), _spec(None, 4, 2, dtype=tf.float32), SPARSE, None),  # Not (B, C).
        (_spec(None, 2), logits, SPARSE, None),  # Not one index per example.
        (_spec(None), logits, lambda y, p: tf.reduce_mean(p), None),  # A loss it cannot read.
        ((_spec(None), _spec(None)), logits, SPARSE, None),  # Several label tensors.
        (_spec(None), None, SPARSE, None)):
      self.assertEqual(labels.sparse_classes(label_spec, output_spec, loss), expected,
                       (label_spec, output_spec, loss))

  def test_a_gin_reference_to_the_loss_is_recognised(self):
    import gin  # pylint: disable=g-import-not-at-top
    from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
    for binding in ('@sparse_softmax_cross_entropy',
                    '@keras.losses.SparseCategoricalCrossentropy()'):
      gin.clear_config()
      gin.parse_config([f'Trainer.loss = {binding}'])
      t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(4,), outputs=3),
                              optimizer=keras.optimizers.SGD(), model_dir=None)
      self.assertEqual(labels.sparse_classes(_spec(None), _spec(None, 3, dtype=tf.float32),
                                             t.loss_fn), 3, binding)

  def test_labels_a_known_loss_cannot_read_against_the_output_are_named(self):
    f32 = lambda *shape: _spec(*shape, dtype=tf.float32)
    mse = keras.losses.MeanSquaredError()
    for label_spec, output_spec, loss, words in (
        (f32(None, 1), f32(None, 3), mse, 'labels of shape (None, 1) and model outputs of shape '
         '(None, 3) would broadcast under MeanSquaredError (each label compared with all 3 '
         "outputs); give the labels the outputs' shape (None, 3), or the model 1 output"),
        (f32(None), f32(None, 3), keras.losses.mean_absolute_error,
         'would broadcast under mean_absolute_error (each label compared with all 3 outputs)'),
        (f32(None, 1), f32(None, 3), keras.losses.BinaryCrossentropy(),
         'would broadcast under BinaryCrossentropy'),
        (f32(None, 3), f32(None, 1), 'mse', 'labels of shape (None, 3) and model outputs of shape '
         '(None, 1) would broadcast under mse (each output compared with all 3 labels); give the '
         "labels the outputs' shape (None, 1), or the model 3 outputs"),
        (f32(None, 2), f32(None, 3), keras.losses.CategoricalCrossentropy(),
         'under CategoricalCrossentropy, which reads one label per output'),
        (_spec(None, 2), f32(None, 3), SPARSE, 'under SparseCategoricalCrossentropy, which reads '
         'one class index per output row; give labels of shape (None,) or (None, 1)'),
        (f32(None, 3), f32(None, 3), SPARSE, 'one-hot labels: use categorical_crossentropy'),
        (_spec(None, dtype=tf.string), f32(None, 3), SPARSE, 'has string labels')):
      problem = labels.shape_problem(label_spec, output_spec, loss)
      self.assertIsNotNone(problem, (label_spec, output_spec, loss))
      self.assertIn(words, '; '.join(problem))
    for label_spec, output_spec, loss in (
        (f32(None, 3), f32(None, 3), mse),
        (f32(None, 1), f32(None, 1), mse),
        (f32(None), f32(None, 1), mse),  # Keras squeezes the last axis of 1.
        (f32(None, 1), f32(None), mse),
        (f32(8, 3), f32(16, 3), mse),  # Batch axes are not compared (a model built by a call).
        (f32(None, 3), f32(None, None), keras.losses.CategoricalCrossentropy()),
        (_spec(None), f32(None, 3), SPARSE),  # Class indices: no broadcast.
        (_spec(None, 1), f32(None, 3), SPARSE),
        (_spec(None, 16), f32(None, 16, 64), SPARSE),  # A sequence's tokens.
        (f32(None, 1), f32(None, 3), lambda y, p: tf.reduce_mean(y - p)),  # A loss of its own.
        (_spec(None, 2), _spec(None, 3), mse),  # An integer output: not a prediction it knows.
        ((f32(None, 1), f32(None, 1)), f32(None, 3), mse)):  # Several label tensors.
      self.assertIsNone(labels.shape_problem(label_spec, output_spec, loss),
                        (label_spec, output_spec, loss))

  def test_in_range_and_safe_are_exact(self):
    y = tf.constant([0, 3, 2])
    self.assertTrue(bool(labels.in_range(y, 4)))
    self.assertAllEqual(labels.safe(y, 4), y)
    for bad in ([0, 4, 2], [-1, 1, 2]):
      self.assertFalse(bool(labels.in_range(tf.constant(bad), 4)))
      self.assertAllEqual(labels.safe(tf.constant(bad), 4), [0, 0, 2] if bad[0] == 0 else
                          [0, 1, 2])
    self.assertFalse(bool(labels.in_range(tf.constant([1.0, np.nan]), 4)))
    self.assertAllEqual(labels.safe(tf.constant([1.0, np.nan, 3.0]), 4), [1.0, 0.0, 3.0])


def _sequences(seed=0):
  rng = np.random.RandomState(seed)
  return rng.randint(0, 64, size=(48, 16)).astype(np.int32), rng.randint(0, 4, size=48)


def _images(seed=0):
  rng = np.random.RandomState(seed)
  return rng.normal(size=(48, 8, 8, 3)).astype(np.float32), rng.randint(0, 4, size=48)


def _features(seed=0):
  rng = np.random.RandomState(seed)
  return rng.normal(size=(48, 8)).astype(np.float32), rng.randint(0, 4, size=48)


ZOO = (
    ('convnet_bn', lambda: models.convnet_bn(image_shape=(8, 8, 3), num_classes=4, filters=(4,),
                                             dropout=0.5), _images),
    ('transformer', lambda: models.transformer(dim=8, ffn=8, num_classes=4, dropout=0.5),
     _sequences),
    ('lstm', lambda: models.lstm(units=8, num_classes=4, dropout=0.5), _sequences),
    ('mlp_mixed_float16', lambda: models.mlp(input_dim=8, hidden=(8,), outputs=4), _features),
)


class DefaultStackTest(tf.test.TestCase):
  """One bad row (a label out of range) is skipped as an input fault, state bit-identical."""

  def _trainer(self, make_model, model_dir=None):
    return trainer_lib.Trainer(model=make_model(), optimizer=keras.optimizers.Adam(1e-2),
                               loss=SPARSE, model_dir=model_dir, log_every=100)

  @pytest.mark.slow
  def test_the_zoo_survives_one_bad_label_with_its_state_bit_identical(self):
    for name, make_model, make_data in ZOO:
      with self.subTest(model=name):
        previous = keras.mixed_precision.global_policy()
        precision.set_precision('mixed_float16' if 'mixed' in name else 'float32')
        try:
          self._one_bad_row(name, make_model, make_data)
        finally:
          keras.mixed_precision.set_global_policy(previous)

  def _one_bad_row(self, name, make_model, make_data):
    x, y = make_data()
    model_dir = self.get_temp_dir() + '/' + name
    t = self._trainer(make_model, model_dir)
    clean = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    self.assertEqual(t.fit(clean.take(2), num_steps=2)['applied_steps'], 2)
    self.assertEqual(t.label_classes, 4)
    before = [v.numpy().copy() for v in t.model.variables + t.optimizer.variables]
    y = y.copy()
    y[3] = 4  # Finite, one past the last class: TensorFlow's CPU kernel raises on it.
    bad = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    summary = t.fit(bad.take(1), num_steps=3)
    self.assertEqual((summary['status'], summary['input_faults'], summary['skipped_steps']),
                     ('completed', 1, 1))
    for v, value in zip(t.model.variables + t.optimizer.variables, before):
      self.assertAllEqual(v.numpy(), value, msg=f'{name}: {v.path} changed')
    skips = [e for e in events.read_events(model_dir + '/events.jsonl') if e['event'] == 'skip']
    self.assertEqual([(e['step'], e['fault'], e['tensor']) for e in skips],
                     [(3, 'input', 'input labels')])
    summary = t.fit(bad.skip(1).take(2), num_steps=5)  # Good batches train again.
    self.assertEqual((summary['applied_steps'], summary['skipped_steps']), (4, 1))

  @pytest.mark.slow
  def test_a_healthy_run_is_bit_identical_with_the_check_and_without(self):
    class Unchecked(trainer_lib.Trainer):
      def forward(self, features, training):  # Its own forward: the labels are not checked.
        return super().forward(features, training)

    x, y = _features()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    runs = []
    for cls in (trainer_lib.Trainer, Unchecked):
      t = cls(model=models.mlp(input_dim=8, hidden=(8,), outputs=4, seed=0), loss=SPARSE,
              optimizer=keras.optimizers.Adam(1e-2), model_dir=None, log_every=100)
      t.fit(dataset, num_steps=6)
      runs.append((t.label_classes, [v.numpy() for v in t.model.variables]))
    self.assertEqual([classes for classes, _ in runs], [4, None])
    for checked, unchecked in zip(runs[0][1], runs[1][1]):
      self.assertAllEqual(checked, unchecked)

  @pytest.mark.slow
  def test_one_hot_labels_and_regression_are_not_checked(self):
    x, y = _features()
    one_hot = tf.data.Dataset.from_tensor_slices((x, np.eye(4, dtype=np.float32)[y])).batch(8)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(8,), outputs=4),
                            optimizer=keras.optimizers.Adam(1e-2), model_dir=None, log_every=100,
                            loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    summary = t.fit(one_hot, num_steps=6)
    self.assertEqual((t.label_classes, summary['input_faults'], summary['applied_steps']),
                     (None, 0, 6))
    integers = tf.data.Dataset.from_tensor_slices((x, y[:, None].astype(np.float32) * 10)).batch(8)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(8,)), model_dir=None,
                            optimizer=keras.optimizers.Adam(1e-2), log_every=100,
                            loss=keras.losses.MeanSquaredError())
    summary = t.fit(integers, num_steps=6)  # Targets up to 30, one output: regression.
    self.assertEqual((t.label_classes, summary['input_faults'], summary['applied_steps']),
                     (None, 0, 6))

  def test_labels_that_would_broadcast_stop_the_run_before_its_first_step(self):
    x, _ = _features()
    targets = tf.data.Dataset.from_tensor_slices((x, np.ones((48, 1), np.float32))).batch(8)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(8,), outputs=3),
                            optimizer=keras.optimizers.Adam(1e-2), model_dir=None,
                            loss=keras.losses.MeanSquaredError())
    with self.assertRaises(errors.ConfigError) as ctx:
      t.fit(targets, num_steps=3)
    self.assertEqual(str(ctx.exception), (
        'the training dataset (elements float32[None, 8], float32[None, 1]) does not fit the '
        'model: labels of shape (None, 1) and model outputs of shape (None, 3) would broadcast '
        'under MeanSquaredError (each label compared with all 3 outputs); give the labels the '
        "outputs' shape (None, 3), or the model 1 output; check train.dataset_fn / fit(dataset)."))
    self.assertEqual(int(t.global_step.numpy()), 0)

  def test_a_loss_given_by_name_is_named_as_given(self):
    x, _ = _features()
    targets = tf.data.Dataset.from_tensor_slices((x, np.ones((48, 1), np.float32))).batch(8)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(8,), outputs=3),
                            optimizer='adam', loss='mse', model_dir=None)
    with self.assertRaisesRegex(errors.ConfigError, r'would broadcast under mse \(each label'):
      t.fit(targets, num_steps=3)


if __name__ == '__main__':
  tf.test.main()
