"""Tests for stable_train.core.batch_check: training data the model cannot take (not batched,
string features, labels its loss cannot read against its outputs) is refused before the first
step with one line naming the elements, through `Trainer.fit` and a guarded Keras `fit`, with
nothing written; valid data passes, and a loss of the caller's own reads labels freely."""

import os

import keras
import numpy as np
import tensorflow as tf
import pytest

import stable_train
from stable_train.core import batch_check
from stable_train import errors
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

ROWS = np.random.RandomState(0).normal(size=(32, 4)).astype(np.float32)
CLASSES = np.random.RandomState(1).randint(0, 3, size=32)


def _batched(*arrays):
  return tf.data.Dataset.from_tensor_slices(arrays).batch(8)


# name: (outputs, loss, dataset, what the line says).
BAD = {
    'unbatched': (1, 'mse', lambda: tf.data.Dataset.from_tensor_slices((ROWS, ROWS[:, :1])),
                  '(elements float32[4], float32[1]) is not batched: the model takes inputs of '
                  'shape (None, 4) and gets one example, (4,); batch it, e.g. dataset.batch(32)'),
    'strings': (1, 'mse', lambda: _batched(np.array(['a', 'b'] * 16), ROWS[:, :1]),
                "(elements string[None], float32[None, 1]) has string features, which the "
                "model's input (float32 (None, 4)) cannot take; map them to numbers"),
    'one_hot_of_2_for_3': (
        3, 'categorical_crossentropy', lambda: _batched(ROWS, np.eye(2, dtype=np.float32)[
            CLASSES % 2]),
        'does not fit the model: labels of shape (None, 2) and model outputs of shape (None, 3) '
        "under categorical_crossentropy, which reads one label per output; give the labels the "
        "outputs' shape (None, 3), or the model 2 outputs"),
    'three_targets_for_1': (
        1, 'mse', lambda: _batched(ROWS, ROWS[:, :3]),
        'does not fit the model: labels of shape (None, 3) and model outputs of shape (None, 1) '
        'would broadcast under mse (each output compared with all 3 labels)'),
}


def _mlp(outputs):
  return models.mlp(input_dim=4, hidden=(4,), outputs=outputs, seed=0)


class TrainerRefusesTest(tf.test.TestCase):

  def test_each_bad_dataset_is_one_line_before_anything_is_written(self):
    for name, (outputs, loss, dataset, words) in BAD.items():
      model_dir = os.path.join(self.get_temp_dir(), name)
      t = trainer_lib.Trainer(model=_mlp(outputs), optimizer='adam', loss=loss,
                              model_dir=model_dir, verbose=False)
      with self.assertRaises(errors.ConfigError) as ctx:
        t.fit(dataset().repeat(), num_steps=3)
      text = str(ctx.exception)
      self.assertStartsWith(text, 'the training dataset (elements ', name)
      self.assertIn(words, text, name)
      self.assertEndsWith(text, '; check train.dataset_fn / fit(dataset).')
      self.assertNotIn('\n', text)
      self.assertEqual(int(t.global_step.numpy()), 0)
      self.assertEqual(sorted(os.listdir(model_dir)), ['run.lock'], name)  # The lock, released.

  def test_an_unbuilt_model_is_checked_when_built_from_the_first_batch(self):
    class Net(keras.Model):
      def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

      def call(self, x):
        return self.dense(x)

    for name, dataset, words in (
        ('unbatched', tf.data.Dataset.from_tensor_slices((ROWS, ROWS[:, :1])),
         "is not batched: its tensors' first dimensions differ ([1, 4])"),
        ('strings', _batched(np.array(['a', 'b'] * 16), ROWS[:, :1]),
         'has string features, which the model cannot take ('),
        ('targets', _batched(ROWS, ROWS[:, :3]), 'would broadcast under mse')):
      t = trainer_lib.Trainer(model=Net(), optimizer='adam', loss='mse', model_dir=None,
                              verbose=False)
      with self.assertRaisesRegex(errors.ConfigError, '^the training dataset .*' + (
          words.replace('(', r'\(').replace(')', r'\)').replace('[', r'\[').replace(']', r'\]'))):
        t.fit(dataset.repeat(), num_steps=3)

  def test_valid_labels_and_a_loss_of_its_own_pass(self):
    one_hot = np.eye(3, dtype=np.float32)[CLASSES]
    inputs = keras.Input((4,))
    two = keras.Model(inputs, {'scores': keras.layers.Dense(3)(inputs),
                               'value': keras.layers.Dense(1)(inputs)})
    for model, loss, dataset in (
        (_mlp(3), 'sparse_categorical_crossentropy', _batched(ROWS, CLASSES)),
        (_mlp(3), 'sparse_categorical_crossentropy', _batched(ROWS, CLASSES[:, None])),
        (_mlp(3), 'categorical_crossentropy', _batched(ROWS, one_hot)),
        (_mlp(1), 'mse', _batched(ROWS, ROWS[:, 0])),  # (B,) against (B, 1): Keras squeezes.
        (two, 'mse', _batched(ROWS, ROWS[:, :1]))):  # Two outputs: the loss's own business.
      t = trainer_lib.Trainer(model=model, optimizer='adam', loss=loss, model_dir=None)
      batch_check.for_trainer(t, dataset.element_spec).check(model, batch_check.trainer_loss(t))

    class OwnLoss(trainer_lib.Trainer):
      def compute_loss(self, batch, training):
        x, y = batch  # (B, 3) targets against one output: this loss reads them as it means to.
        return tf.reduce_mean((self.forward(x, training) - tf.reduce_mean(y, -1, True)) ** 2)

    t = OwnLoss(model=_mlp(1), optimizer='adam', loss='mse', model_dir=None)
    self.assertIsNone(batch_check.trainer_loss(t))
    batch_check.for_trainer(t, _batched(ROWS, ROWS[:, :3]).element_spec).check(t.model, None)


class GuardedFitRefusesTest(tf.test.TestCase):

  def test_each_bad_dataset_is_one_line_before_anything_is_written(self):
    for name, (outputs, loss, dataset, words) in BAD.items():
      model_dir = os.path.join(self.get_temp_dir(), name)
      model = _mlp(outputs)
      model.compile(optimizer='adam', loss=loss)
      guard = stable_train.guard_fit(model)
      with self.assertRaises(errors.ConfigError) as ctx:
        model.fit(dataset(), epochs=1, verbose=0, callbacks=[guard.callback(model_dir=model_dir)])
      text = str(ctx.exception)
      self.assertStartsWith(text, 'the data (elements ', name)
      self.assertIn(words, text, name)
      self.assertNotIn('\n', text)
      self.assertEqual(int(guard.state.global_step.numpy()), 0)
      self.assertFalse(os.path.exists(model_dir) and os.listdir(model_dir), name)

  def test_valid_data_passes_and_a_compute_loss_override_reads_labels_freely(self):
    one_hot = np.eye(3, dtype=np.float32)[CLASSES]
    inputs = keras.Input((4,))
    two = keras.Model(inputs, [keras.layers.Dense(3)(inputs), keras.layers.Dense(1)(inputs)])
    two.compile(optimizer='adam', loss=['sparse_categorical_crossentropy', 'mse'])

    class OwnLoss(keras.Model):
      def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return tf.reduce_mean((y_pred - tf.reduce_mean(y, -1, True)) ** 2)

    own = OwnLoss(inputs, keras.layers.Dense(1)(inputs))
    own.compile(optimizer='adam', loss='mse')
    for model, loss, dataset in (
        (_mlp(3), 'sparse_categorical_crossentropy', _batched(ROWS, CLASSES)),
        (_mlp(3), 'sparse_categorical_crossentropy', _batched(ROWS, CLASSES[:, None])),
        (_mlp(3), 'categorical_crossentropy', _batched(ROWS, one_hot)),
        (two, None, _batched(ROWS, (CLASSES, ROWS[:, :1]))),
        (own, None, _batched(ROWS, ROWS[:, :3]))):
      if loss is not None:
        model.compile(optimizer='adam', loss=loss)
      with batch_check.FitDataCheck(model).around_build(dataset.element_spec):
        pass


@pytest.mark.slow
class ValidDataTrainsTest(tf.test.TestCase):
  """Sparse (B,) and (B, 1), one-hot and dict-output data train through both front doors."""

  def test_both_front_doors_train_on_valid_data(self):
    one_hot = np.eye(3, dtype=np.float32)[CLASSES]
    for loss, dataset, outputs in (
        ('sparse_categorical_crossentropy', _batched(ROWS, CLASSES), 3),
        ('sparse_categorical_crossentropy', _batched(ROWS, CLASSES[:, None]), 3),
        ('categorical_crossentropy', _batched(ROWS, one_hot), 3),
        ('mse', _batched(ROWS, ROWS[:, :1]), 'dict')):
      make = (lambda: _mlp(outputs)) if outputs != 'dict' else _dict_model
      t = trainer_lib.Trainer(model=make(), optimizer='adam', model_dir=None, verbose=False,
                              loss=loss if outputs != 'dict' else _value_loss)
      self.assertEqual(t.fit(dataset.repeat(), num_steps=2)['applied_steps'], 2)
      model = make()
      model.compile(optimizer='adam', loss=loss if outputs != 'dict' else {'value': loss})
      guard = stable_train.guard_fit(model)
      model.fit(dataset.take(2), epochs=1, verbose=0, callbacks=[guard.callback()])
      self.assertEqual(int(guard.state.applied_steps.numpy()), 2)


def _dict_model():
  inputs = keras.Input((4,))
  return keras.Model(inputs, {'value': keras.layers.Dense(1, name='value')(inputs)})


def _value_loss(labels, outputs):
  return tf.reduce_mean(keras.losses.mean_squared_error(labels, outputs['value']))


if __name__ == '__main__':
  tf.test.main()
