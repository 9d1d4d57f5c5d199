"""Tests for stable_train.core.numerics: finite flags and overflow-safe clipping."""

from unittest import mock

import numpy as np
import tensorflow as tf

from stable_train.core import numerics


class FiniteFlagsTest(tf.test.TestCase):

  def test_flags_and_first_false(self):
    tensors = [tf.ones([2]), tf.constant([1.0, np.nan]), tf.constant([np.inf])]
    self.assertAllEqual(numerics.finite_flags(tensors), [True, False, False])
    self.assertEqual(int(numerics.first_false(numerics.finite_flags(tensors))), 1)
    self.assertEqual(int(numerics.first_false(tf.constant([True, True]))), -1)
    # None at all (a hand-written step that hands its guard no batch has no input flags): -1,
    # eagerly and under XLA, where an argmax over nothing fails to compile.
    empty = tf.ones([0], tf.bool)
    self.assertEqual(int(numerics.first_false(empty)), -1)
    self.assertEqual(int(tf.function(numerics.first_false, jit_compile=True)(empty)), -1)


class ClipByGlobalNormTest(tf.test.TestCase):

  def test_matches_tf_clip_by_global_norm_on_ordinary_input(self):
    rng = np.random.RandomState(0)
    grads = [tf.constant(rng.normal(size=s).astype(np.float32) * 3) for s in [(5, 4), (4,), (3,)]]
    for max_norm in (0.5, 1.0, 100.0):
      expected, expected_norm = tf.clip_by_global_norm(grads, max_norm)
      clipped, norm, after = numerics.clip_by_global_norm(grads, max_norm)
      self.assertAllClose(norm, expected_norm, rtol=1e-6)
      for c, e in zip(clipped, expected):
        self.assertAllClose(c, e, rtol=1e-6, atol=0)
      self.assertAllClose(after, min(float(expected_norm), max_norm), rtol=1e-6)

  def test_huge_finite_gradients_are_clipped_not_nan(self):
    grads = [tf.fill([10, 10], 1e20), tf.constant([-3e20, 1.0])]
    reference, reference_norm = tf.clip_by_global_norm(grads, 1.0)
    # The trap: TensorFlow's own clipping turns all of these into NaN.
    self.assertFalse(np.isfinite(float(reference_norm)))
    self.assertTrue(np.isnan(reference[0].numpy()).all())
    clipped, norm, after = numerics.clip_by_global_norm(grads, 1.0)
    true_norm = np.sqrt(100 * 1e40 + 9e40)
    self.assertAllClose(norm, true_norm, rtol=1e-5)
    self.assertAllClose(after, 1.0)
    self.assertAllClose(tf.linalg.global_norm(clipped), 1.0, rtol=1e-5)
    self.assertAllClose(clipped[0], np.full([10, 10], 1e20 / true_norm), rtol=1e-5)

  def test_beyond_float32_range_still_clipped(self):
    grads = [tf.fill([1000], 3e38)]
    clipped, norm, _ = numerics.clip_by_global_norm(grads, 2.0)
    self.assertTrue(np.isinf(float(norm)))  # The norm itself is not representable...
    self.assertAllClose(tf.linalg.global_norm(clipped), 2.0, rtol=1e-5)  # ...the clip is.

  def test_non_finite_gradients_stay_non_finite(self):
    grads = [tf.constant([1.0, np.nan]), tf.constant([2.0])]
    clipped, norm, _ = numerics.clip_by_global_norm(grads, 1.0)
    self.assertTrue(np.isnan(float(norm)))
    self.assertFalse(np.isfinite(clipped[0].numpy()).all())

  def test_global_norm_equals_tf_on_ordinary_input_and_survives_overflow(self):
    grads = [tf.constant([3.0, 4.0])]
    self.assertEqual(float(numerics.global_norm(grads)), float(tf.linalg.global_norm(grads)))
    self.assertAllClose(numerics.global_norm([tf.constant([3e20, 4e20])]), 5e20, rtol=1e-6)
    self.assertEqual(float(numerics.global_norm([tf.zeros([3])])), 0.0)

  def test_works_under_xla(self):
    fn = tf.function(lambda g: numerics.clip_by_global_norm(g, 1.0)[0], jit_compile=True)
    clipped = fn([tf.fill([4], 1e20)])
    self.assertAllClose(tf.linalg.global_norm(clipped), 1.0, rtol=1e-5)



def _compared(t):
  """input_ok's answer by float comparisons (the reference it must equal)."""
  limit = tf.cast(numerics.INPUT_LIMIT, t.dtype)
  return tf.logical_and(t < limit, t > -limit).numpy()


class InputOkTest(tf.test.TestCase):
  """input_ok reads the values' bits: the same answer as comparing the floats, on every value."""

  def test_every_half_precision_value(self):
    # All 65536 bit patterns of float16 and bfloat16 (NaNs of either sign, infs, subnormals),
    # one value per tensor, eagerly, traced and under XLA.
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    for dtype in (tf.float16, tf.bfloat16):
      values = tf.constant(bits.view(dtype.as_numpy_dtype))
      expected = _compared(values)
      self.assertTrue(expected.any() and not expected.all())
      per_value = tf.function(
          lambda v: tf.map_fn(numerics.input_ok, v, fn_output_signature=tf.bool))
      self.assertAllEqual(per_value(values), expected)
      self.assertAllEqual(tf.function(per_value, jit_compile=True)(values[::97]), expected[::97])

  def test_wide_floats_at_the_edges_and_at_random(self):
    rng = np.random.RandomState(0)
    for dtype, view in ((np.float32, np.uint32), (np.float64, np.uint64)):
      edges = [0.0, -0.0, 1e-45, -1e-45, 9.99e29, -9.99e29, 1e30, -1e30, 1.01e30, -1.01e30,
               3.4e38, -3.4e38, np.inf, -np.inf, np.nan, -np.nan, 1e300, -1e300]
      noise = rng.randint(0, 2**32, size=(2000, 2), dtype=np.uint64)
      raw = (noise[:, 0] << np.uint64(32)) | noise[:, 1] if view == np.uint64 else noise[:, 0]
      with np.errstate(over='ignore'):
        values = np.concatenate([np.asarray(edges).astype(dtype),
                                 raw.astype(view).view(dtype)])
      for value in values:
        batch = rng.randn(4, 5).astype(dtype)
        batch[rng.randint(4), rng.randint(5)] = value
        t = tf.constant(batch)
        self.assertEqual(bool(numerics.input_ok(t)), bool(_compared(t).all()), (dtype, value))
    self.assertTrue(bool(numerics.input_ok(tf.zeros([0, 3]))))  # Nothing to fail.
    self.assertTrue(bool(numerics.input_ok(tf.constant([1, 2]))))  # Not a float.

  def test_with_an_accelerator_the_floats_are_compared(self):
    values = tf.constant([[1.0, -2.0], [np.inf, 1e31], [-1e31, np.nan], [9e29, -9e29]])
    bits = [bool(numerics.input_ok(row)) for row in values]
    with mock.patch.object(numerics, 'accelerated', return_value=True):
      graph = tf.function(numerics.input_ok).get_concrete_function(values[0]).graph
      self.assertNotIn('Bitcast', {op.type for op in graph.get_operations()})
      self.assertEqual([bool(numerics.input_ok(row)) for row in values], bits)
    self.assertEqual(bits, [True, False, False, True])

if __name__ == '__main__':
  tf.test.main()


class FiniteFlagsAndNormTest(tf.test.TestCase):
  """The fused check: one reduction per gradient, exact flags and norm in every case."""

  def test_ordinary_input_matches_tf_global_norm_bit_for_bit(self):
    rng = np.random.RandomState(1)
    grads = [tf.constant(rng.normal(size=s).astype(np.float32)) for s in [(50, 20), (20,), (3, 3)]]
    flags, norm = numerics.finite_flags_and_norm(grads)
    self.assertAllEqual(flags, [True, True, True])
    self.assertEqual(float(norm), float(tf.linalg.global_norm(grads)))  # Same expression.

  def test_non_finite_and_huge_finite_values_get_the_exact_answer(self):
    ok = tf.ones([4])
    cases = {
        'nan': ([ok, tf.constant([1.0, np.nan])], [True, False]),
        'inf': ([tf.constant([-np.inf]), ok], [False, True]),
        # Finite, but the square overflows float32: the sum of squares is inf, yet every value
        # is finite; the flags must say so and the norm must be the true (finite) one.
        'huge': ([tf.fill([10], 1e20), ok], [True, True]),
    }
    for name, (grads, expected) in cases.items():
      with self.subTest(name):
        flags, norm = numerics.finite_flags_and_norm(grads)
        self.assertAllEqual(flags, expected)
        self.assertAllEqual(flags, numerics.finite_flags(grads))
        if all(expected):
          self.assertAllClose(norm, np.sqrt(10 * 1e40 + 4), rtol=1e-5)
        else:
          self.assertFalse(np.isfinite(float(norm)))

  def test_traced_and_xla_agree_with_eager(self):
    grads = [tf.fill([10], 1e20), tf.constant([1.0, 2.0])]
    eager = numerics.finite_flags_and_norm(grads)
    for jit in (None, True):
      flags, norm = tf.function(numerics.finite_flags_and_norm, jit_compile=jit)(grads)
      self.assertAllEqual(flags, eager[0])
      self.assertAllClose(norm, eager[1], rtol=1e-6)


class TreeSumOfSquaresTest(tf.test.TestCase):
  """The XLA form of the sum of squares: another order of the same sum, same finiteness."""

  def test_equals_the_plain_sum_for_every_layout(self):
    # Below two rows (plain), whole rows, an odd row out at several levels, a tail, 2-D.
    shapes = [(1,), (100,), (8192,), (8193,), (12289,), (7 * 4096 + 5,), (1000, 256), (257, 1000)]
    fn = tf.function(numerics.tree_sum_of_squares, jit_compile=True)
    for shape in shapes:
      with self.subTest(shape=shape):
        x = np.random.RandomState(len(shape) + shape[0]).normal(size=shape).astype(np.float32)
        expected = float(np.sum(np.square(x.astype(np.float64))))
        self.assertAllClose(float(numerics.tree_sum_of_squares(tf.constant(x))), expected,
                            rtol=1e-6)
        self.assertAllClose(float(fn(tf.constant(x))), expected, rtol=1e-6)

  def test_a_non_finite_value_anywhere_reaches_the_sum(self):
    fn = tf.function(numerics.tree_sum_of_squares, jit_compile=True)
    n = 7 * 4096 + 5  # Rows, an odd row out, and a tail.
    for index in (0, 3 * 4096 + 7, 6 * 4096 + 1, n - 1):  # First row, middle, odd row, tail.
      for value in (np.nan, np.inf, -np.inf, 1e20):  # 1e20: finite, its square overflows.
        with self.subTest(index=index, value=value):
          x = np.ones([n], np.float32)
          x[index] = value
          self.assertFalse(np.isfinite(float(fn(tf.constant(x)))))

  def test_fused_check_under_xla_keeps_exact_flags_and_the_norm(self):
    big = 3 * 4096 + 11  # Large enough for the tree form.
    fn = tf.function(lambda g: numerics.finite_flags_and_norm(g, xla=True), jit_compile=True)
    rng = np.random.RandomState(3)
    ordinary = [tf.constant(rng.normal(size=[big]).astype(np.float32)), tf.ones([5])]
    flags, norm = fn(ordinary)
    self.assertAllEqual(flags, [True, True])
    self.assertAllClose(norm, tf.linalg.global_norm(ordinary), rtol=1e-6)
    cases = {'nan': (np.nan, [False, True]), 'inf': (np.inf, [False, True]),
             'huge': (1e20, [True, True])}
    for name, (value, expected) in cases.items():
      with self.subTest(name):
        x = np.ones([big], np.float32)
        x[big - 3] = value
        flags, norm = fn([tf.constant(x), tf.ones([5])])
        self.assertAllEqual(flags, expected)
        if name == 'huge':  # The true norm, though the squares overflow.
          self.assertAllClose(norm, np.sqrt(1e40 + big - 1 + 5), rtol=1e-5)
        else:
          self.assertFalse(np.isfinite(float(norm)))


class ClipFactorsTest(tf.test.TestCase):
  """The factor form of the clip (XLA): no conditional around the gradients."""

  def test_ordinary_input_matches_tf_clip_by_global_norm_exactly(self):
    rng = np.random.RandomState(4)
    grads = [tf.constant(rng.normal(size=s).astype(np.float32) * 3) for s in [(5, 4), (4,)]]
    for max_norm in (0.5, 100.0):  # Clipped, and not (then a = b = 1: exactly unchanged).
      norm = numerics.global_norm(grads)
      a, b = numerics.clip_factors(grads, max_norm, norm, tf.constant(True))
      expected, _ = tf.clip_by_global_norm(grads, max_norm)
      for g, e in zip(grads, expected):
        self.assertAllEqual((g * a) * b, e)
      self.assertEqual(float(a), 1.0)

  def test_xla_clip_agrees_with_the_cond_form_beyond_float_range_and_keeps_nan(self):
    fn = tf.function(lambda g: numerics.clip_by_global_norm(g, 2.0, xla=True)[0],
                     jit_compile=True)
    for grads in ([tf.fill([4], 3e38), tf.constant([1.0])],  # The norm overflows float32.
                  [tf.fill([4], 1e20), tf.constant([1.0])],  # The squares overflow.
                  [tf.constant([3.0, 4.0])]):
      expected, _, _ = numerics.clip_by_global_norm(grads, 2.0)
      for c, e in zip(fn(grads), expected):
        self.assertAllClose(c, e, rtol=1e-5)
    nan = fn([tf.constant([np.nan, 1.0])])[0]
    self.assertTrue(np.isnan(nan.numpy()[0]))


class ClipNearTheTopOfTheFloatRangeTest(tf.test.TestCase):
  """1 / x is subnormal for x > 2**126 in float32, and TF's CPU kernels and XLA:CPU flush it to
  zero: the formula of tf.clip_by_global_norm, max_norm * min(1 / norm, 1 / max_norm), is then 0
  and would zero every gradient instead of clipping it (or leaving it alone)."""

  def _clip(self, grads, max_norm, xla):
    if xla:
      return tf.function(lambda g: numerics.clip_by_global_norm(g, max_norm, xla=True),
                         jit_compile=True)(grads)
    return numerics.clip_by_global_norm(grads, max_norm)

  def test_a_finite_norm_above_2_pow_126_is_clipped_to_max_norm_not_zeroed(self):
    for norm_value in (1e38, 3e38, 3.4e38):
      grads = [tf.constant([3.0, 4.0]), tf.constant([norm_value])]
      for xla in (False, True):
        with self.subTest(norm=norm_value, xla=xla):
          clipped, norm, after = self._clip(grads, 1.0, xla)
          self.assertTrue(np.isfinite(float(norm)))
          self.assertAllClose(after, 1.0)
          self.assertAllClose(tf.linalg.global_norm(clipped), 1.0, rtol=1e-5)
          self.assertAllClose(clipped[1], [1.0], rtol=1e-5)

  def test_a_huge_max_norm_leaves_smaller_gradients_alone(self):
    grads = [tf.constant([3.0, 4.0]), tf.constant([[1e30]])]
    for max_norm in (1e38, 3e38):
      for xla in (False, True):
        with self.subTest(max_norm=max_norm, xla=xla):
          clipped, _, after = self._clip(grads, max_norm, xla)
          self.assertAllClose(after, 1e30, rtol=1e-6)
          for c, g in zip(clipped, grads):
            self.assertAllEqual(c, g)

  def test_a_huge_max_norm_still_clips_a_larger_norm(self):
    grads = [tf.fill([4], 2e38)]  # Norm 4e38: beyond float32's range.
    for xla in (False, True):
      with self.subTest(xla=xla):
        clipped, _, _ = self._clip(grads, 1e38, xla)
        self.assertAllClose(clipped[0], np.full([4], 5e37), rtol=1e-5)


class MixedDtypesTest(tf.test.TestCase):
  """A float32 model with one float16 layer: gradients of two dtypes (plain Keras trains it)."""

  def setUp(self):
    super().setUp()
    self.grads = [tf.constant([3.0, 0.0]), tf.constant([[4.0]], tf.float16)]

  def test_the_norm_and_flags_are_those_of_the_gradients_in_float32(self):
    for xla in (False, True):
      flags, norm = numerics.finite_flags_and_norm(self.grads, xla=xla)
      self.assertAllEqual(flags, [True, True])
      self.assertEqual(norm.dtype, tf.float32)
      self.assertAllClose(norm, 5.0)
    self.assertAllClose(numerics.global_norm(self.grads), 5.0)
    bad = [self.grads[0], tf.constant([[np.nan]], tf.float16)]
    self.assertAllEqual(numerics.finite_flags_and_norm(bad)[0], [True, False])

  def test_the_clip_hands_each_gradient_back_in_its_own_dtype(self):
    for xla in (False, True):
      clipped, before, after = numerics.clip_by_global_norm(self.grads, 1.0, xla=xla)
      self.assertEqual([g.dtype for g in clipped], [tf.float32, tf.float16])
      self.assertAllClose(clipped[0], [0.6, 0.0])
      self.assertAllClose(clipped[1], [[0.8]], atol=1e-3)
      self.assertAllClose((before, after), (5.0, 1.0))
    a, b = numerics.clip_factors(self.grads, tf.constant(1.0), tf.constant(5.0),
                                 tf.constant(True))
    self.assertAllClose(a * b, 0.2)
