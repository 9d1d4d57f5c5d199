#!/usr/bin/env python3
"""A subclassed stable_train Trainer on the scikit-learn digits: a compiled Keras model handed to
it, label smoothing in its own `compute_loss`, evaluation, and an export of the last good
checkpoint.

    pip install '.[examples]' && python examples/trainer_digits.py

Prints the evaluation accuracy, the steps skipped (batches with a NaN image) and the export.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import stable_train  # pylint: disable=g-import-not-at-top
from stable_train.app import export  # pylint: disable=g-import-not-at-top

import digits_data  # pylint: disable=g-import-not-at-top


class SmoothedTrainer(stable_train.Trainer):
  """Cross-entropy against labels smoothed towards the uniform distribution."""

  def __init__(self, *, smoothing: float = 0.1, **kwargs):
    super().__init__(**kwargs)
    self.smoothing = smoothing

  def compute_loss(self, batch, training):  # Traced, per replica.
    features, labels = self.split_batch(batch)
    probabilities = self.forward(features, training)
    targets = tf.one_hot(labels, 10) * (1.0 - self.smoothing) + self.smoothing / 10
    return tf.reduce_mean(keras.losses.categorical_crossentropy(targets, probabilities))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--epochs', type=int, default=10)
  parser.add_argument('--model_dir', default=None, help='default: a new temporary folder')
  args = parser.parse_args(argv)
  model_dir = args.model_dir or tempfile.mkdtemp(prefix='trainer_digits.')

  model = digits_data.digits_convnet()
  model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
  # The compiled optimizer and metrics are the Trainer's; the loss is this subclass's own. The
  # corrupt images come back every epoch, and a skip leaves the state as it was: any finite
  # checkpoint between them is good (healthy_window=0), so the export has one to take.
  trainer = SmoothedTrainer(model=model, model_dir=model_dir, smoothing=0.1, log_every=50,
                            healthy_window=0)
  summary = trainer.fit(digits_data.digits_dataset(poison=3), num_epochs=args.epochs,
                        eval_dataset=digits_data.digits_dataset(validation=True))

  export.load_for_inference(trainer.model, model_dir)  # The last good checkpoint.
  path = export.export(trainer.model, os.path.join(model_dir, 'export', 'model.keras'))
  result = {'eval_accuracy': summary['eval']['metrics']['accuracy'], 'export': path,
            'skipped_steps': summary['skipped_steps'], 'status': summary['status']}
  print(f"{summary['status']}: eval accuracy {result['eval_accuracy']:.3f}; "
        f"{result['skipped_steps']} steps skipped (batches with a NaN image); exported {path}")
  return result


if __name__ == '__main__':
  main()
