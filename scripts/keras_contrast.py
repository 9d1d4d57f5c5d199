#!/usr/bin/env python3
"""Trains a config's model, data and optimizer with plain Keras `fit` (+ TerminateOnNaN), for contrast.

  python scripts/keras_contrast.py --gin_file=configs/unstable_lr.gin --epochs=2

Prints the per-epoch loss Keras reports; on configs/unstable_lr.gin it is NaN in epoch 1, while
`scripts/train.py` on the same config completes with finite weights.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import gin
import numpy as np

from stable_train.app import cli  # pylint: disable=g-import-not-at-top,unused-import  (--gin_file, --gin_param)

flags.DEFINE_integer('epochs', 1, 'Epochs over the config\'s dataset (1000 rows / batch size).')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  import keras  # pylint: disable=g-import-not-at-top
  from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
  gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_param, skip_unknown=True)
  trainer_bindings = {k: gin.query_parameter(f'Trainer.{k}') for k in ('model', 'optimizer', 'loss')}
  model = trainer_bindings['model'].scoped_configurable_fn()
  optimizer = trainer_bindings['optimizer'].scoped_configurable_fn()
  loss = trainer_bindings['loss'].scoped_configurable_fn()
  dataset_fn = gin.query_parameter('train.dataset_fn').scoped_configurable_fn
  steps = 1000 // gin.query_parameter('synthetic_regression.batch_size')
  model.compile(optimizer=optimizer, loss=loss)
  history = model.fit(dataset_fn(), epochs=FLAGS.epochs, steps_per_epoch=steps, verbose=0,
                      callbacks=[keras.callbacks.TerminateOnNaN()])
  losses = history.history['loss']
  weights_finite = all(np.isfinite(w).all() for w in model.get_weights())
  print(f'keras fit: epoch losses {losses}; weights finite: {weights_finite}')


if __name__ == '__main__':
  app.run(main)
