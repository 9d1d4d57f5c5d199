"""Pure tensor functions for numerics checks and overflow-safe gradient clipping."""

from typing import List, Optional, Sequence, Tuple

import tensorflow as tf


def finite_flags(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
  """Returns a bool vector: for each tensor, whether all of its elements are finite."""
  if not tensors:
    return tf.zeros([0], tf.bool)
  return tf.stack([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


def first_false(flags: tf.Tensor) -> tf.Tensor:
  """Index of the first False in a bool vector, or -1 when all are True (int32)."""
  bad = tf.logical_not(flags)
  index = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
  return tf.where(tf.reduce_any(bad), index, tf.constant(-1, tf.int32))


def _scaled_norm(grads: Sequence[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
  """Returns (m, s) with global_norm = m * sqrt(s), computed without overflow."""
  m = tf.reduce_max(tf.stack([tf.reduce_max(tf.abs(g)) for g in grads]))
  safe_m = tf.where(m > 0, m, tf.ones_like(m))
  s = tf.add_n([tf.reduce_sum(tf.square(g / safe_m)) for g in grads])
  return safe_m, s


def global_norm(grads: Sequence[tf.Tensor]) -> tf.Tensor:
  """`tf.linalg.global_norm`, except that finite gradients whose squares overflow float32 still
  get their true (finite, if representable) norm instead of inf."""
  grads = [tf.convert_to_tensor(g) for g in grads]
  plain = tf.linalg.global_norm(grads)

  def rescaled():
    m, s = _scaled_norm(grads)
    return m * tf.sqrt(s)

  return tf.cond(tf.math.is_finite(plain), lambda: plain, rescaled)


def finite_flags_and_norm(grads: Sequence[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
  """(`finite_flags(grads)`, `global_norm(grads)`) from one reduction per tensor.

  The common case reads each gradient once: its sum of squares (`tf.nn.l2_loss`, as
  `tf.linalg.global_norm` computes it, so the norm is bit-identical to it) is finite exactly when
  every element is finite and no square overflows. Only when some sum is not finite (a NaN or
  Inf, or a finite value above ~1.8e19 whose square overflows float32) are the exact per-tensor
  flags and the overflow-safe norm computed, in the other branch of one `tf.cond`.
  """
  grads = [tf.convert_to_tensor(g) for g in grads]
  if not grads:
    return tf.zeros([0], tf.bool), tf.constant(0.0)
  halves = tf.stack([tf.nn.l2_loss(g) for g in grads])
  sums_finite = tf.math.is_finite(halves)

  def common():
    # The expression of tf.linalg.global_norm: sqrt(2 * sum(l2_loss)).
    return sums_finite, tf.sqrt(tf.reduce_sum(halves) * tf.constant(2.0, halves.dtype))

  def exact():
    return finite_flags(grads), global_norm(grads)

  return tf.cond(tf.reduce_all(sums_finite), common, exact)


def clip_by_global_norm(grads: Sequence[tf.Tensor],
                        max_norm: tf.Tensor,
                        norm: Optional[tf.Tensor] = None,
                        all_finite: Optional[tf.Tensor] = None
                        ) -> Tuple[List[tf.Tensor], tf.Tensor, tf.Tensor]:
  """Clips gradients by their global norm, safely for huge-but-finite gradients.

  On ordinary input the result equals `tf.clip_by_global_norm` (same formula). Where squaring
  overflows float32 although every gradient is finite, the true norm from `global_norm` is used,
  and past float32's range the gradients are first divided by their largest magnitude, so they are
  clipped to `max_norm` instead of turning into NaN. Non-finite gradients stay non-finite
  (skipping them is SkipNonFinite's job).

  Args:
    grads: gradients (dense tensors).
    max_norm: scalar clip norm.
    norm: their global norm from `global_norm`, if already computed.
    all_finite: scalar bool, whether every gradient is finite, if already computed.

  Returns:
    (clipped gradients, norm before clipping, norm after clipping).
  """
  grads = [tf.convert_to_tensor(g) for g in grads]
  max_norm = tf.cast(max_norm, grads[0].dtype)
  if norm is None:
    norm = global_norm(grads)
  if all_finite is None:
    all_finite = tf.reduce_all(finite_flags(grads))

  def ordinary():
    # The formula of tf.clip_by_global_norm, so results match it on ordinary input.
    scale = max_norm * tf.minimum(1.0 / norm, 1.0 / max_norm)
    return [g * scale for g in grads]

  def beyond_float_range():
    m, s = _scaled_norm(grads)
    return [(g / m) * (max_norm / tf.sqrt(s)) for g in grads]

  use_ordinary = tf.logical_or(tf.math.is_finite(norm), tf.logical_not(all_finite))
  clipped = tf.cond(use_ordinary, ordinary, beyond_float_range)
  return clipped, norm, tf.minimum(norm, max_norm)
