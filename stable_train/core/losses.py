"""Numerically stable loss functions for use from gin or Python."""

import tensorflow as tf


def _widen(logits):
  """float16/bfloat16 logits (mixed precision) as float32, as Keras losses compute: the softmax
  of half-precision logits loses the small probabilities."""
  logits = tf.convert_to_tensor(logits)
  return tf.cast(logits, tf.float32) if logits.dtype in (tf.float16, tf.bfloat16) else logits


def sparse_softmax_cross_entropy(labels, logits):
  """Mean sparse softmax cross-entropy computed from logits (stable for large logits).

  Args:
    labels: int class indices, shape [batch] (or [batch, 1]).
    logits: unnormalised scores, shape [batch, num_classes].
  """
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  logits = _widen(logits)
  return tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def naive_softmax_cross_entropy(labels, logits):
  """-log(softmax(logits)) computed the naive way: overflows to NaN/Inf on large logits.

  Shipped only to demonstrate what stable_train survives (configs/unstable_softmax.gin); use
  `sparse_softmax_cross_entropy` in real runs.
  """
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  exp = tf.exp(logits)
  probs = exp / tf.reduce_sum(exp, axis=-1, keepdims=True)
  picked = tf.gather(probs, labels, batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked))
