"""Seeded datasets of the calibration runs: the scikit-learn digits (bundled), tabular, binary,
token and long numeric sequences; each an endless `tf.data` stream of (features, labels) batches,
shuffled by its seed (the data order several sick scenarios depend on)."""

import os
import sys

import numpy as np
import tensorflow as tf

from stable_train.zoo import data as zoo_data

_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'examples')


def stream(x, y, *, batch: int, seed: int) -> tf.data.Dataset:
  """An endless stream of batches of (x, y), shuffled anew each epoch from `seed`."""
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  ds = ds.shuffle(min(len(x), 2048), seed=seed, reshuffle_each_iteration=True)
  return ds.batch(batch, drop_remainder=True).prefetch(2)


def digits(*, size: int = 32, rgb: bool = True, scale: float = 1.0):
  """The digits (1500 training images in [0, 1] x `scale`, labels 0-9), upsampled to
  size x size (each pixel a block) and made RGB for keras.applications."""
  if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)
  import digits_data  # pylint: disable=g-import-not-at-top  (examples/, scikit-learn's digits)
  (x, y), _ = digits_data.arrays()
  factor = size // 8
  x = np.repeat(np.repeat(x, factor, axis=1), factor, axis=2)
  if rgb:
    x = np.repeat(x, 3, axis=-1)
  return (x * scale).astype(np.float32), y.astype(np.int32)


def digits_stream(seed: int, *, batch: int = 32, size: int = 32, rgb: bool = True,
                  scale: float = 1.0, nan_images=()) -> tf.data.Dataset:
  """`digits` as a stream; the images listed in `nan_images` are NaN (a corrupt record)."""
  x, y = digits(size=size, rgb=rgb, scale=scale)
  x = x.copy()
  x[list(nan_images)] = np.nan
  return stream(x, y, batch=batch, seed=seed)


def tabular(seed: int, *, rows: int = 2048, features: int = 16, noise: float = 0.1):
  """A linear-plus-noise regression table: (x, y) with y of shape (rows, 1)."""
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(rows, features)).astype(np.float32)
  w = rng.normal(size=(features, 1)).astype(np.float32) / np.sqrt(features)
  y = (x @ w + noise * rng.normal(size=(rows, 1))).astype(np.float32)
  return x, y


def binary(seed: int, *, rows: int = 2048, features: int = 16, flip: float = 0.0,
           scale: float = 1.0):
  """Two Gaussian clusters: (x, y) with float labels of shape (rows, 1); a fraction `flip` of
  the labels flipped (label noise, as real annotations have)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 2, size=(rows, 1)).astype(np.float32)
  x = rng.normal(size=(rows, features)) + (2 * y - 1) * 1.5 / np.sqrt(features) * 2
  flipped = rng.rand(rows, 1) < flip
  y = np.where(flipped, 1 - y, y).astype(np.float32)
  return (x * scale).astype(np.float32), y


def classes(seed: int, *, rows: int = 2048, features: int = 16, num_classes: int = 8,
            scale: float = 1.0):
  """Gaussian clusters, one per class: (x, int32 labels)."""
  rng = np.random.RandomState(seed)
  centers = rng.normal(size=(num_classes, features))
  y = rng.randint(0, num_classes, size=rows).astype(np.int32)
  x = (centers[y] + rng.normal(size=(rows, features))) * scale
  return x.astype(np.float32), y


def tokens(seed: int, *, seq_len: int = 16, vocab: int = 64, num_classes: int = 8,
           rows: int = 1024):
  """Token-id sequences classed by their most frequent token bucket (the zoo's task)."""
  ds = zoo_data.synthetic_sequences(num_examples=rows, seq_len=seq_len, vocab_size=vocab,
                                    num_classes=num_classes, seed=seed, batch_size=rows,
                                    repeat=False)
  x, y = next(iter(ds))
  return x.numpy(), y.numpy()


def series(seed: int, *, rows: int = 1024, steps: int = 40):
  """Random walks (rows, steps, 1) and their mean (rows, 1): a sequence regression."""
  rng = np.random.RandomState(seed)
  x = np.cumsum(rng.normal(size=(rows, steps, 1)) * 0.3, axis=1).astype(np.float32)
  return x, x.mean(axis=1).astype(np.float32)
