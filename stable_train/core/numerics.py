"""Pure tensor functions for numerics checks and overflow-safe gradient clipping."""

import functools
from typing import List, Optional, Sequence, Tuple

import ml_dtypes
import numpy as np
import tensorflow as tf


def finite_flags(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
  """Returns a bool vector: for each tensor, whether all of its elements are finite."""
  if not tensors:
    return tf.zeros([0], tf.bool)
  return tf.stack([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


def first_false(flags: tf.Tensor) -> tf.Tensor:
  """Index of the first False in a bool vector, or -1 when all are True (int32)."""
  if flags.shape.rank == 1 and flags.shape[0] == 0:  # No flags (a step without a batch): none bad.
    return tf.constant(-1, tf.int32)  # (tf.argmax of an empty vector fails at run time.)
  bad = tf.logical_not(flags)
  index = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
  return tf.where(tf.reduce_any(bad), index, tf.constant(-1, tf.int32))


def one_dtype(grads: Sequence[tf.Tensor]) -> List[tf.Tensor]:
  """`grads` as tensors of one float dtype: as they are where they share one, else widened to
  float32 (float64 where one is): a float32 model with one float16 layer has both."""
  grads = [tf.convert_to_tensor(g) for g in grads]
  dtypes = {g.dtype for g in grads}
  if len(dtypes) <= 1:
    return grads
  wide = tf.float64 if tf.float64 in dtypes else tf.float32
  return [tf.cast(g, wide) for g in grads]


def _scaled_norm(grads: Sequence[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
  """Returns (m, s) with global_norm = m * sqrt(s), computed without overflow."""
  m = tf.reduce_max(tf.stack([tf.reduce_max(tf.abs(g)) for g in grads]))
  safe_m = tf.where(m > 0, m, tf.ones_like(m))
  s = tf.add_n([tf.reduce_sum(tf.square(g / safe_m)) for g in grads])
  return safe_m, s


def global_norm(grads: Sequence[tf.Tensor]) -> tf.Tensor:
  """`tf.linalg.global_norm`, except that finite gradients whose squares overflow float32 still
  get their true (finite, if representable) norm instead of inf."""
  grads = one_dtype(grads)
  plain = tf.linalg.global_norm(grads)

  def rescaled():
    m, s = _scaled_norm(grads)
    return m * tf.sqrt(s)

  return tf.cond(tf.math.is_finite(plain), lambda: plain, rescaled)


# Row width of `tree_sum_of_squares`: 16 KiB of float32 per row, vectorised across the row.
TREE_WIDTH = 4096


def tree_sum_of_squares(x: tf.Tensor, width: Optional[int] = None) -> tf.Tensor:
  """sum(x**2) as a tree of elementwise adds, for XLA:CPU.

  XLA:CPU emits a plain float reduction as one serial chain of adds (it keeps the order), which
  costs ~1 ns per element: over the quickstart MLP's 290k gradients, that was the whole cost of
  the guard under XLA. Here the squares are laid out as rows of `width` and the rows are added
  pairwise, halving their number each time: elementwise adds that XLA fuses into one loop and
  vectorises across the row; only the last row (and the tail that fills no row) is reduced
  plainly. Another summation order than `tf.nn.l2_loss`: equal within float rounding, and
  finite exactly when every element is finite and no partial sum overflows (the squares are
  non-negative, so an Inf or NaN anywhere reaches the result).

  Args:
    x: a tensor.
    width: the row width; None: `TREE_WIDTH`, read when traced.
  """
  width = width or TREE_WIDTH
  flat = tf.reshape(x, [-1])
  n = flat.shape[0]
  if n is None or n <= 2 * width:
    return tf.reduce_sum(tf.square(flat))
  rows = n // width
  body = tf.reshape(tf.square(flat[:rows * width]), [rows, width])
  total = tf.reduce_sum(tf.square(flat[rows * width:])) if rows * width < n else None
  while rows > 1:
    half = rows // 2
    folded = body[:half] + body[half:2 * half]
    if rows % 2:  # The odd row out joins the first row.
      folded = tf.concat([folded[:1] + body[2 * half:], folded[1:]], axis=0)
    body, rows = folded, half
  result = tf.reduce_sum(body[0])
  return result if total is None else result + total


def finite_flags_and_norm(grads: Sequence[tf.Tensor],
                          xla: bool = False) -> Tuple[tf.Tensor, tf.Tensor]:
  """(`finite_flags(grads)`, `global_norm(grads)`) from one reduction per tensor.

  The common case reads each gradient once: its sum of squares (`tf.nn.l2_loss`, as
  `tf.linalg.global_norm` computes it, so the norm is bit-identical to it) is finite exactly when
  every element is finite and no square overflows. Only when some sum is not finite (a NaN or
  Inf, or a finite value above ~1.8e19 whose square overflows float32) are the exact per-tensor
  flags and the overflow-safe norm computed, in the other branch of one `tf.cond`.

  Args:
    grads: gradients (dense tensors).
    xla: the caller is compiled with XLA: the sums of squares are `tree_sum_of_squares` (same
      flags; the norm equal to `tf.linalg.global_norm`'s within float rounding), which XLA:CPU
      computes ~4x faster than a plain reduction.
  """
  grads = one_dtype(grads)
  if not grads:
    return tf.zeros([0], tf.bool), tf.constant(0.0)
  if xla:
    sums = tf.stack([tree_sum_of_squares(g) for g in grads])
    scale = tf.constant(1.0, sums.dtype)
  else:
    sums = tf.stack([tf.nn.l2_loss(g) for g in grads])
    scale = tf.constant(2.0, sums.dtype)  # l2_loss is half the sum of squares.
  sums_finite = tf.math.is_finite(sums)

  def common():
    # Without XLA the expression of tf.linalg.global_norm: sqrt(2 * sum(l2_loss)).
    return sums_finite, tf.sqrt(tf.reduce_sum(sums) * scale)

  def exact():
    return finite_flags(grads), global_norm(grads)

  return tf.cond(tf.reduce_all(sums_finite), common, exact)


def clip_factors(grads: Sequence[tf.Tensor], max_norm: tf.Tensor, norm: tf.Tensor,
                 all_finite: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Scalars (a, b) such that `(g * a) * b` for every g clips `grads` to `max_norm`.

  The factor form of `clip_by_global_norm`, for XLA: no conditional takes or returns the
  gradients, so the products fuse into the optimizer's update. On ordinary input a is 1 and b is
  `tf.clip_by_global_norm`'s scale (`(g * 1) * b == g * b` exactly); past float32's range a is
  2**-64 and b the clip over the norm of the scaled-down gradients. Non-finite gradients stay
  non-finite.

  Args:
    grads: gradients (dense tensors).
    max_norm: scalar clip norm.
    norm: their global norm from `global_norm` (or `finite_flags_and_norm`).
    all_finite: scalar bool, whether every gradient is finite.
  """
  grads = one_dtype(grads)
  max_norm = tf.cast(max_norm, norm.dtype)
  scale = max_norm * tf.minimum(1.0 / norm, 1.0 / max_norm)
  use_ordinary = _use_ordinary_clip(norm, max_norm, all_finite)

  def ordinary():
    return tf.ones_like(norm), scale

  def beyond_float_range():
    # 1 / (largest magnitude) would be subnormal, which XLA:CPU flushes to zero: a power of two
    # first (exact), then the clip over the norm of the scaled-down gradients. A norm within a
    # max_norm this large needs no clip: factors of exactly 1.
    m, s = _scaled_norm(grads)
    down = tf.constant(2.0 ** -64, norm.dtype)
    one = tf.ones_like(norm)
    unclipped = norm <= max_norm
    return (tf.where(unclipped, one, down),
            tf.where(unclipped, one, max_norm / ((m * down) * tf.sqrt(s))))

  return tf.cond(use_ordinary, ordinary, beyond_float_range)


def _use_ordinary_clip(norm: tf.Tensor, max_norm: tf.Tensor, all_finite: tf.Tensor) -> tf.Tensor:
  """Whether `tf.clip_by_global_norm`'s formula, max_norm * min(1 / norm, 1 / max_norm), clips
  right: when both reciprocals are normal numbers (norm and max_norm at most 1 / the smallest
  normal, 2**126 in float32: TF's CPU kernels and XLA:CPU flush a subnormal 1 / x to zero, which
  made the scale 0 and zeroed every gradient), or when some gradient is non-finite (the formula
  keeps it non-finite). Otherwise the rescaled form applies."""
  # ml_dtypes.finfo: numpy's finfo refuses bfloat16.
  limit = tf.constant(1.0 / float(ml_dtypes.finfo(norm.dtype.as_numpy_dtype).tiny), norm.dtype)
  representable = tf.logical_and(norm <= limit, max_norm <= limit)  # False for inf / NaN.
  return tf.logical_or(representable, tf.logical_not(all_finite))


def clip_by_global_norm(grads: Sequence[tf.Tensor],
                        max_norm: tf.Tensor,
                        norm: Optional[tf.Tensor] = None,
                        all_finite: Optional[tf.Tensor] = None,
                        xla: bool = False
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
    xla: the caller is compiled with XLA: the gradients are scaled by `clip_factors` (no
      conditional around them; equal on ordinary input, within rounding beyond float32's range).

  Returns:
    (clipped gradients, norm before clipping, norm after clipping).
  """
  grads = [tf.convert_to_tensor(g) for g in grads]
  dtypes = [g.dtype for g in grads]
  if len(set(dtypes)) > 1:  # Clipped in one dtype, each handed back in its own.
    clipped, before, after = clip_by_global_norm(one_dtype(grads), max_norm, norm=norm,
                                                 all_finite=all_finite, xla=xla)
    return [tf.cast(g, d) for g, d in zip(clipped, dtypes)], before, after
  max_norm = tf.cast(max_norm, grads[0].dtype)
  if norm is None:
    norm = global_norm(grads)
  if all_finite is None:
    all_finite = tf.reduce_all(finite_flags(grads))
  if xla:
    a, b = clip_factors(grads, max_norm, norm, all_finite)
    return [(g * a) * b for g in grads], norm, tf.minimum(norm, max_norm)

  def ordinary():
    # The formula of tf.clip_by_global_norm, so results match it on ordinary input.
    scale = max_norm * tf.minimum(1.0 / norm, 1.0 / max_norm)
    return [g * scale for g in grads]

  def beyond_float_range():
    m, s = _scaled_norm(grads)
    return [(g / m) * (max_norm / tf.sqrt(s)) for g in grads]

  def rescaled():
    # Reached with a norm or a max_norm above 2**126 (float32): a norm within max_norm is left
    # alone, a larger one is clipped without any reciprocal of the norm.
    return tf.cond(norm <= max_norm, lambda: list(grads), beyond_float_range)

  use_ordinary = _use_ordinary_clip(norm, max_norm, all_finite)
  clipped = tf.cond(use_ordinary, ordinary, rescaled)
  return clipped, norm, tf.minimum(norm, max_norm)


def widen(loss) -> tf.Tensor:
  """A loss as float32 (float16/bfloat16 widened; float64 kept): scaling, checks and reports
  never work in a half-precision loss."""
  loss = tf.convert_to_tensor(loss)
  return loss if loss.dtype == tf.float64 else tf.cast(loss, tf.float32)


def dense_values(t):
  """A dense tensor's values: a SparseTensor's `values`, a RaggedTensor's `flat_values`."""
  if isinstance(t, tf.SparseTensor):
    return t.values
  return t.flat_values if isinstance(t, tf.RaggedTensor) else t


# An input value this large is a fill, not a measurement: float32's largest (-3.4e38, GDAL's
# NoData), NetCDF's default fill (9.97e36). Its square overflows float32; nothing trains on it.
INPUT_LIMIT = 1e30


# A float dtype's signed and unsigned integer views of the same width (`input_ok`).
_VIEWS = {tf.float16: (tf.int16, tf.uint16), tf.bfloat16: (tf.int16, tf.uint16),
          tf.float32: (tf.int32, tf.uint32), tf.float64: (tf.int64, tf.uint64)}


def input_ok(t) -> tf.Tensor:
  """Whether every value of a floating input tensor is finite and below INPUT_LIMIT in magnitude
  (True for other dtypes): in a dtype whose range ends below the limit (float16) the limit is inf
  and only inf and NaN fail.

  Read on the values' bits, as integers: a float's magnitude orders as its bits do, and NaN's bits
  lie above inf's. The signed view's largest is the largest positive value's magnitude (negative
  values are negative integers), the unsigned view's the largest negative value's (its sign bit
  set). Two integer reductions, a sixth of the float comparisons' cost on CPU, the same answer
  for every value on any kernel (integer max is exact). Where a GPU or TPU is visible, and for a
  float dtype with no integer view here (a float8), the float comparisons give it. No op here
  makes a NaN or Inf of its own for an op-level check (`Forensics`) to find before the model's."""
  t = dense_values(t)
  if not t.dtype.is_floating:
    return tf.constant(True)
  if t.dtype not in _VIEWS or accelerated():  # No integer view; a GPU's int32 Max in host memory.
    limit = tf.cast(INPUT_LIMIT, t.dtype)
    return tf.reduce_all(tf.logical_and(t < limit, t > -limit))  # The same answer.
  signed, unsigned = _VIEWS[t.dtype]
  limit = _limit_bits(t.dtype)
  sign = 1 << (signed.size * 8 - 1)
  largest = tf.reduce_max(tf.bitcast(t, signed))
  negative = tf.reduce_max(tf.bitcast(t, unsigned))
  return tf.logical_and(largest < tf.constant(limit, signed),
                        negative < tf.constant(sign + limit, unsigned))


@functools.lru_cache(maxsize=None)
def accelerated() -> bool:
  """Whether a GPU or TPU is visible: there `input_ok` compares the floats (TensorFlow's GPU
  kernel for an int32 max keeps its tensors in host memory, which would copy every batch)."""
  return bool(tf.config.list_logical_devices('GPU') or tf.config.list_logical_devices('TPU'))


@functools.lru_cache(maxsize=None)
def _limit_bits(dtype) -> int:
  """The bits of INPUT_LIMIT in `dtype`, as an integer: rounded to float32 first, as a Python
  float becomes a tensor (inf in float16)."""
  with np.errstate(over='ignore'):
    value = np.asarray(INPUT_LIMIT, np.float32).astype(dtype.as_numpy_dtype)
  return int(value.view(_VIEWS[dtype][0].as_numpy_dtype))
