"""Tests for stable_train.errors: the shared integer validation."""

import numpy as np
import tensorflow as tf

from stable_train import errors


class CheckIntTest(tf.test.TestCase):

  def test_accepts_python_and_numpy_integers(self):
    self.assertEqual(errors.check_int('T', 'n', 3), 3)
    self.assertEqual(errors.check_int('T', 'n', np.int64(4), minimum=1), 4)
    self.assertIsInstance(errors.check_int('T', 'n', np.int32(2)), int)

  def test_refuses_with_one_line_naming_owner_argument_and_value(self):
    for value, kwargs in [(True, {}), (2.0, {}), ('3', {}), (-1, {}), (0, {'minimum': 1}),
                          (9, {'minimum': 2, 'maximum': 8})]:
      with self.assertRaises(errors.ConfigError) as ctx:
        errors.check_int('Owner', 'count', value, **kwargs)
      message = str(ctx.exception)
      self.assertIn(f'Owner: count={value!r}', message)
      self.assertEqual(len(message.splitlines()), 1)
    self.assertIsInstance(errors.ConfigError('x'), ValueError)


if __name__ == '__main__':
  tf.test.main()
