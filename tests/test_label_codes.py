"""Tests for stable_train.core.label_codes: a missing-value code among a regression loss's labels
is found where it lies far outside the others, and only there."""

import keras
import numpy as np
import tensorflow as tf

from stable_train.core import label_codes


def _labels(code=None, rows=(3, 17, 40), scale=1.0, offset=0.0):
  y = offset + scale * np.random.RandomState(0).normal(size=(64, 1))
  if code is not None:
    y[list(rows)] = code
  return y.astype(np.float32)


class FindMissingCodesTest(tf.test.TestCase):

  def test_a_code_far_outside_standardised_labels_is_found(self):
    for loss in ('mse', 'mae', keras.losses.Huber(), keras.losses.MeanSquaredError()):
      found = label_codes.find_missing_codes(loss, _labels(-999.0))
      self.assertIsNotNone(found, loss)
      self.assertEqual((found.code, found.rows, found.total), (-999.0, 3, 64))
      self.assertIn('missing-value code', found.message)
      self.assertIn('-999', found.fix)
      self.assertEqual(found.fields()['kind'], label_codes.KIND)
    # A raster's float32 nodata, and a code written as an int16's.
    for code in (float(np.finfo(np.float32).min), -32768.0, 9999.0):
      self.assertEqual(label_codes.find_missing_codes('mse', _labels(code)).code,
                       float(np.float32(code)))

  def test_a_code_as_a_narrower_type_stores_it(self):
    # float16 holds -9999 as -10000, bfloat16 as -9984: the code is read as the labels hold it.
    for dtype, stored in ((np.float16, -10000.0), (tf.bfloat16.as_numpy_dtype, -9984.0)):
      found = label_codes.find_missing_codes('mse', _labels(-9999.0).astype(dtype))
      self.assertEqual((found.code, found.rows), (stored, 3), dtype)
    # A uint16 raster's nodata among counts.
    counts = np.random.RandomState(1).randint(0, 90, size=(64, 1)).astype(np.uint16)
    counts[[2, 9]] = 65535
    found = label_codes.find_missing_codes('mae', counts)
    self.assertEqual((found.code, found.rows), (65535.0, 2))
    self.assertIsNone(label_codes.find_missing_codes('mae', counts[[0, 1, 3, 4, 5, 6, 7, 8, 10]]))

  def test_labels_without_a_code_or_a_code_the_data_could_hold_are_left_alone(self):
    self.assertIsNone(label_codes.find_missing_codes('mse', _labels()))
    # Raw targets in dollars (1e4 to 4e4): -999 lies within 10x their range of them.
    self.assertIsNone(label_codes.find_missing_codes(
        'mse', _labels(-999.0, scale=5e3, offset=2.5e4)))
    # A -99 dB floor beside levels from -60 to 0.
    levels = np.linspace(-60.0, 0.0, 64)[:, None]
    levels[:4] = -99.0
    self.assertIsNone(label_codes.find_missing_codes('mse', levels))
    # A value near a code that is not one.
    self.assertIsNone(label_codes.find_missing_codes('mse', _labels(-998.5)))

  def test_other_losses_subclasses_and_too_few_other_labels_are_not_judged(self):
    y = _labels(-999.0)
    self.assertIsNone(label_codes.find_missing_codes('binary_crossentropy', y))
    self.assertIsNone(label_codes.find_missing_codes(lambda t, p: (t - p) ** 2, y))

    class MaskedMSE(keras.losses.MeanSquaredError):  # A loss that leaves the code out itself.
      def call(self, y_true, y_pred):
        keep = tf.cast(y_true > -900.0, y_pred.dtype)
        return keep * super().call(y_true, y_pred)

    self.assertIsNone(label_codes.find_missing_codes(MaskedMSE(), y))
    few = np.array([[-999.0]] * 4 + [[0.1], [0.2], [0.3]], np.float32)  # 3 others.
    self.assertIsNone(label_codes.find_missing_codes('mse', few))
    with_nan = y.copy()
    with_nan[5] = np.nan  # The input check's to name.
    self.assertIsNone(label_codes.find_missing_codes('mse', with_nan))
    self.assertIsNone(label_codes.find_missing_codes('mse', None))


if __name__ == '__main__':
  tf.test.main()
