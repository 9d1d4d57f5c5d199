"""The scikit-learn digits for the examples, and a small convnet for them.

1797 grey 8x8 images of the digits 0-9, bundled with scikit-learn: nothing to download
(`pip install '.[examples]'`). The factories are registered with gin for digits.gin.
"""

import gin
import keras
import numpy as np
import tensorflow as tf

HELD_OUT = 297  # The last images: the validation split.


def arrays(*, poison: int = 0):
  """((x_train, y_train), (x_val, y_val)): images in [0, 1] of shape (8, 8, 1), class ids.

  Args:
    poison: this many training images are made NaN (a corrupt record, as real data has one):
      images 7, 68, 129, ..., each in its own batch of 32 while unshuffled.
  """
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top  (an extra)
  digits = load_digits()
  x = (digits.images / 16.0).astype(np.float32)[..., None]
  y = digits.target.astype(np.int32)
  x_train, y_train = x[:-HELD_OUT].copy(), y[:-HELD_OUT]
  x_train[7 + 61 * np.arange(poison)] = np.nan
  return (x_train, y_train), (x[-HELD_OUT:], y[-HELD_OUT:])


@gin.configurable
def digits_dataset(*, batch_size: int = 32, poison: int = 0, validation: bool = False,
                   seed: int = 0) -> tf.data.Dataset:
  """The training images (shuffled with `seed`, every epoch anew) or the validation ones, in
  batches: one pass (for num_epochs)."""
  train, held_out = arrays(poison=poison)
  x, y = held_out if validation else train
  data = tf.data.Dataset.from_tensor_slices((x, y))
  if not validation:
    data = data.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
  return data.batch(batch_size)


@gin.configurable
def digits_convnet(*, filters=(16, 32), dropout: float = 0.2, seed: int = 0) -> keras.Model:
  """[Conv2D → BatchNormalization → ReLU → MaxPool] per filter count, Dropout, softmax."""
  keras.utils.set_random_seed(seed)
  inputs = x = keras.Input((8, 8, 1))
  for f in filters:
    x = keras.layers.Conv2D(f, 3, padding='same', use_bias=False)(x)
    # momentum 0.9: the statistics settle within the few hundred steps of these runs.
    x = keras.layers.BatchNormalization(momentum=0.9)(x)
    x = keras.layers.MaxPooling2D()(keras.layers.ReLU()(x))
  x = keras.layers.Dropout(dropout)(keras.layers.GlobalAveragePooling2D()(x))
  return keras.Model(inputs, keras.layers.Dense(10, activation='softmax')(x), name='digits')
