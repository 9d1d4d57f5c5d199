"""Seeded synthetic datasets (no download) for the shipped configs, tests and benchmarks."""

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from stable_train import errors


def _validate(num_examples, num_features, batch_size):
  for name, value in (('num_examples', num_examples), ('num_features', num_features),
                      ('batch_size', batch_size)):
    errors.check_int('dataset', name, value, minimum=1)


def _batched(features, labels, batch_size, repeat, poison_batches, poison_value):
  """Batches (features, labels); batches listed in `poison_batches` get a non-finite feature.

  The pipeline has the same structure with or without poison, so a checkpointed iterator of a
  clean run restores into a poisoned one (and back).
  """
  ds = tf.data.Dataset.from_tensor_slices((features, labels))
  if repeat:
    ds = ds.repeat()
  ds = ds.batch(batch_size, drop_remainder=True)
  bad = tf.constant(sorted(int(b) for b in poison_batches), tf.int64, shape=[len(poison_batches)])
  value = tf.constant(poison_value, tf.float32)

  def poison(index, batch):
    x, y = batch

    def poisoned():
      corner = tf.zeros([1, len(x.shape)], tf.int32)  # The first element of the batch.
      return tf.tensor_scatter_nd_update(x, corner, tf.cast(value, x.dtype)[tf.newaxis])

    x = tf.cond(tf.reduce_any(tf.equal(bad, index)), poisoned, lambda: x)
    return x, y

  return ds.enumerate().map(poison).prefetch(2)


def synthetic_regression(*, num_examples: int = 1000, num_features: int = 1000,
                         batch_size: int = 32, noise: float = 0.1, seed: int = 0,
                         repeat: bool = True, poison_batches: Sequence[int] = (),
                         poison_value: float = float('nan')) -> tf.data.Dataset:
  """A linear-plus-noise regression problem: y = x·w + noise, x ~ N(0, 1).

  Args:
    num_examples: rows generated (the dataset cycles over them when `repeat`).
    num_features: features per row.
    batch_size: rows per batch.
    noise: standard deviation of the label noise.
    seed: seed of the generator; the same seed gives the same data.
    repeat: cycle forever (the trainer's num_steps bounds the run).
    poison_batches: batch indices (0-based, in stream order) whose first feature is replaced by
      `poison_value` — to demonstrate and test bad input.
    poison_value: the value injected (NaN by default).
  """
  _validate(num_examples, num_features, batch_size)
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(num_examples, num_features)).astype(np.float32)
  w = rng.normal(size=(num_features, 1)).astype(np.float32) / np.sqrt(num_features)
  y = (x @ w + noise * rng.normal(size=(num_examples, 1))).astype(np.float32)
  return _batched(x, y, batch_size, repeat, poison_batches, poison_value)


def synthetic_classification(*, num_examples: int = 1000, num_features: int = 64,
                             num_classes: int = 10, batch_size: int = 32, scale: float = 1.0,
                             seed: int = 0, repeat: bool = True,
                             poison_batches: Sequence[int] = (),
                             poison_value: float = float('nan'),
                             sample_seed: Optional[int] = None) -> tf.data.Dataset:
  """Gaussian clusters, one per class; labels are int32 class indices (for sparse CE from logits).

  Args:
    num_examples: rows generated.
    num_features: features per row.
    num_classes: number of classes.
    batch_size: rows per batch.
    scale: multiplies the features (large scales overflow naive softmax losses).
    seed: generator seed.
    repeat: cycle forever.
    poison_batches: batch indices whose first feature becomes `poison_value`.
    poison_value: the value injected (NaN by default).
    sample_seed: draws the examples (not the class centers) from this seed: a held-out set of the
      same problem (e.g. an eval set); None: from `seed`, after the centers.
  """
  _validate(num_examples, num_features, batch_size)
  errors.check_int('dataset', 'num_classes', num_classes, minimum=2)
  rng = np.random.RandomState(seed)
  centers = rng.normal(size=(num_classes, num_features)).astype(np.float32)
  if sample_seed is not None:
    rng = np.random.RandomState(errors.check_int('dataset', 'sample_seed', sample_seed))
  labels = rng.randint(0, num_classes, size=num_examples).astype(np.int32)
  x = (centers[labels] + rng.normal(size=(num_examples, num_features))) * scale
  return _batched(x.astype(np.float32), labels, batch_size, repeat, poison_batches, poison_value)


def synthetic_images(*, num_examples: int = 512, image_shape: Sequence[int] = (16, 16, 3),
                     num_classes: int = 10, batch_size: int = 32, seed: int = 0,
                     repeat: bool = True, poison_batches: Sequence[int] = (),
                     poison_value: float = float('nan')) -> tf.data.Dataset:
  """Images of class-dependent patterns plus noise; int32 labels (for a convnet on logits).

  Args:
    num_examples: images generated.
    image_shape: (height, width, channels).
    num_classes: number of classes.
    batch_size: images per batch.
    seed: generator seed.
    repeat: cycle forever.
    poison_batches: batch indices whose first pixel becomes `poison_value`.
    poison_value: the value injected (NaN by default).
  """
  _validate(num_examples, int(np.prod(image_shape)), batch_size)
  rng = np.random.RandomState(seed)
  patterns = rng.normal(size=(num_classes,) + tuple(image_shape)).astype(np.float32)
  labels = rng.randint(0, num_classes, size=num_examples).astype(np.int32)
  x = patterns[labels] + rng.normal(size=(num_examples,) + tuple(image_shape))
  return _batched(x.astype(np.float32), labels, batch_size, repeat, poison_batches, poison_value)


def synthetic_sequences(*, num_examples: int = 512, seq_len: int = 16, vocab_size: int = 64,
                        num_classes: int = 10, batch_size: int = 32, seed: int = 0,
                        repeat: bool = True) -> tf.data.Dataset:
  """Token-id sequences whose class is the most frequent token bucket; int32 ids and labels.

  Args:
    num_examples: sequences generated.
    seq_len: tokens per sequence.
    vocab_size: number of token ids (at least `num_classes`).
    num_classes: number of classes.
    batch_size: sequences per batch.
    seed: generator seed.
    repeat: cycle forever.
  """
  _validate(num_examples, seq_len, batch_size)
  rng = np.random.RandomState(seed)
  labels = rng.randint(0, num_classes, size=num_examples).astype(np.int32)
  tokens = rng.randint(0, vocab_size, size=(num_examples, seq_len))
  # Half the tokens come from the label's bucket, so the class is learnable.
  bucket = vocab_size // num_classes
  marked = rng.rand(num_examples, seq_len) < 0.5
  tokens = np.where(marked, labels[:, None] * bucket + rng.randint(0, bucket, tokens.shape), tokens)
  ds = tf.data.Dataset.from_tensor_slices((tokens.astype(np.int32), labels))
  if repeat:
    ds = ds.repeat()
  return ds.batch(batch_size, drop_remainder=True).prefetch(2)
