#!/usr/bin/env python3
"""Keras `model.fit` on the scikit-learn digits, guarded by stable_train: two lines added.

    pip install '.[examples]' && python examples/fit_digits.py

Three training images are corrupt (NaN). Plain `fit` turns the first batch that holds one into
NaN weights for good; the guard skips those batches (every weight, BatchNorm statistic and
optimizer slot stays as it was) and the run trains on. Prints the validation accuracy, the steps
skipped and where the model was saved.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stable_train  # pylint: disable=g-import-not-at-top

import digits_data  # pylint: disable=g-import-not-at-top


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--epochs', type=int, default=10)
  parser.add_argument('--model_dir', default=None, help='default: a new temporary folder')
  parser.add_argument('--no_shuffle', action='store_true', help='keep the images in order')
  args = parser.parse_args(argv)
  model_dir = args.model_dir or tempfile.mkdtemp(prefix='fit_digits.')

  (x, y), validation = digits_data.arrays(poison=3)
  model = digits_data.digits_convnet()
  model.compile(optimizer='adam', loss='sparse_categorical_crossentropy', metrics=['accuracy'])
  guard = stable_train.guard_fit(model)                                    # stable_train, 1 of 2
  history = model.fit(x, y, batch_size=32, epochs=args.epochs, validation_data=validation,
                      shuffle=not args.no_shuffle, verbose=2,
                      callbacks=[guard.callback(model_dir=model_dir)])     # stable_train, 2 of 2

  path = os.path.join(model_dir, 'model.keras')
  model.save(path)  # A plain Keras file: keras.models.load_model reads it without stable_train.
  result = {'val_accuracy': history.history['val_accuracy'][-1], 'export': path,
            'skipped_steps': int(history.history['skipped_steps'][-1])}
  print(f"validation accuracy {result['val_accuracy']:.3f}; {result['skipped_steps']} steps "
        f"skipped (batches with a NaN image); model saved to {path}; the run's events and "
        f'summary in {model_dir}')
  return result


if __name__ == '__main__':
  main()
