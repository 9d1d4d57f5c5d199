#!/usr/bin/env python3
"""Guarded `model.fit` of an architecture nobody here wrote: `keras.applications.MobileNet`
(weights=None, width 0.25: depthwise-separable convolutions, BatchNormalization, dropout) on the
scikit-learn digits, upsampled to 32x32 RGB.

    pip install '.[examples]' && python examples/applications_fit.py

Two training images are NaN; the guard skips their batches. Prints the validation accuracy, the
steps skipped and where the model was saved.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import stable_train  # pylint: disable=g-import-not-at-top

import digits_data  # pylint: disable=g-import-not-at-top


def rgb32(images):
  """8x8x1 images as 32x32x3 (MobileNet's smallest input): each pixel a 4x4 block."""
  return np.repeat(np.repeat(np.repeat(images, 4, axis=1), 4, axis=2), 3, axis=-1)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--epochs', type=int, default=5)
  parser.add_argument('--steps_per_epoch', type=int, default=None, help='default: all images')
  parser.add_argument('--model_dir', default=None, help='default: a new temporary folder')
  parser.add_argument('--no_shuffle', action='store_true', help='keep the images in order')
  args = parser.parse_args(argv)
  model_dir = args.model_dir or tempfile.mkdtemp(prefix='applications_fit.')

  (x, y), (x_val, y_val) = digits_data.arrays(poison=2)
  keras.utils.set_random_seed(0)
  model = keras.applications.MobileNet(input_shape=(32, 32, 3), alpha=0.25, weights=None,
                                       classes=10)
  model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
  guard = stable_train.guard_fit(model)
  history = model.fit(rgb32(x), y, batch_size=32, epochs=args.epochs,
                      steps_per_epoch=args.steps_per_epoch, shuffle=not args.no_shuffle,
                      validation_data=(rgb32(x_val), y_val), verbose=2,
                      callbacks=[guard.callback(model_dir=model_dir)])

  path = os.path.join(model_dir, 'mobilenet.keras')
  model.save(path)
  result = {'val_accuracy': history.history['val_accuracy'][-1], 'export': path,
            'skipped_steps': int(history.history['skipped_steps'][-1])}
  print(f"MobileNet: validation accuracy {result['val_accuracy']:.3f}; {result['skipped_steps']} "
        f'steps skipped (batches with a NaN image); model saved to {path}')
  return result


if __name__ == '__main__':
  main()
