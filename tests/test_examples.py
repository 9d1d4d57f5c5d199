"""The examples in examples/ run, each on the real scikit-learn digits (bundled, no download), and
do what they say: a guarded `model.fit`, the Trainer from a gin file through the CLI, a subclassed
Trainer, a `keras.applications` model, and a GAN in a hand-written loop. Short runs (a few epochs
or steps), in this one process."""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf
import pytest

from test_cli import run_main  # pylint: disable=g-import-not-at-top

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'examples')
sys.path.insert(0, EXAMPLES)

import applications_fit  # pylint: disable=g-import-not-at-top,wrong-import-position
import digits_data  # pylint: disable=g-import-not-at-top,wrong-import-position
import fit_digits  # pylint: disable=g-import-not-at-top,wrong-import-position
import own_loop_gan  # pylint: disable=g-import-not-at-top,wrong-import-position
import trainer_digits  # pylint: disable=g-import-not-at-top,wrong-import-position


def _accuracy(model, images, labels):
  return float(np.mean(np.argmax(model.predict(images, verbose=0), axis=-1) == labels))


class ExamplesTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_guarded_model_fit(self):
    result = fit_digits.main(['--epochs=2', '--no_shuffle', f'--model_dir={self.get_temp_dir()}'])
    self.assertEqual(result['skipped_steps'], 6)  # 3 NaN images, each in its batch, 2 epochs.
    self.assertGreater(result['val_accuracy'], 0.5)  # Chance is 0.1.
    _, (x_val, y_val) = digits_data.arrays()
    loaded = keras.models.load_model(result['export'])  # Plain Keras.
    self.assertAlmostEqual(_accuracy(loaded, x_val, y_val), result['val_accuracy'], places=6)

  @pytest.mark.slow
  def test_the_trainer_from_a_gin_file_with_the_users_factories(self):
    model_dir = self.get_temp_dir()
    code, err = run_main('--gin_import=digits_data',
                         f'--gin_file={os.path.join(EXAMPLES, "digits.gin")}',
                         '--gin_param=train.num_epochs = 2', f'--model_dir={model_dir}')
    self.assertEqual(code, 0, err)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual(summary['status'], 'completed')
    self.assertGreater(summary['skipped_steps'], 0)
    self.assertGreater(summary['eval']['metrics']['accuracy'], 0.5)
    loaded = keras.models.load_model(os.path.join(model_dir, 'export', 'model.keras'))
    self.assertTrue(all(np.all(np.isfinite(v.numpy())) for v in loaded.variables))

  @pytest.mark.slow
  def test_a_subclassed_trainer(self):
    result = trainer_digits.main(['--epochs=2', f'--model_dir={self.get_temp_dir()}'])
    self.assertEqual(result['status'], 'completed')
    self.assertGreater(result['skipped_steps'], 0)
    self.assertGreater(result['eval_accuracy'], 0.5)
    _, (x_val, y_val) = digits_data.arrays()
    loaded = keras.models.load_model(result['export'])
    self.assertGreater(_accuracy(loaded, x_val, y_val), 0.5)

  @pytest.mark.slow
  def test_a_keras_applications_model(self):
    result = applications_fit.main(['--epochs=1', '--steps_per_epoch=6', '--no_shuffle',
                                    f'--model_dir={self.get_temp_dir()}'])
    self.assertEqual(result['skipped_steps'], 2)  # Images 7 and 68: batches 1 and 3 of 6.
    self.assertBetween(result['val_accuracy'], 0.0, 1.0)
    loaded = keras.models.load_model(result['export'])
    self.assertTrue(all(np.all(np.isfinite(v.numpy())) for v in loaded.variables))

  @pytest.mark.slow
  def test_a_gan_in_a_hand_written_loop(self):
    model_dir = self.get_temp_dir()
    result = own_loop_gan.main(['--epochs=2', '--steps_per_epoch=6', '--no_shuffle',
                                f'--model_dir={model_dir}'])
    self.assertEqual(result['status'], 'completed')
    self.assertEqual(result['skipped_steps'], 6)  # Images 7, 68, 129: batches 1, 3, 5 of 6.
    self.assertTrue(np.isfinite(result['d_loss']) and np.isfinite(result['g_loss']))
    initial = own_loop_gan.make_models()  # Seeded: the weights the run started from.
    for trained, untrained in zip((result['generator'], result['discriminator']), initial):
      weights = [v.numpy() for v in trained.trainable_variables]
      self.assertTrue(all(np.all(np.isfinite(w)) for w in weights))
      self.assertFalse(all(np.array_equal(w, v.numpy())
                           for w, v in zip(weights, untrained.trainable_variables)), trained.name)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['skipped_steps'], summary['applied_steps']),
                     ('completed', 6, 6))
    self.assertTrue(os.path.exists(os.path.join(model_dir, 'checkpoints', 'manifest.json')))


if __name__ == '__main__':
  tf.test.main()
