"""Tests for stable_train.doctor.norms: which steps a reading keeps, and the one-step jump."""

import numpy as np
import tensorflow as tf

from stable_train.doctor import norms


class NormsTest(tf.test.TestCase):

  def test_after_keeps_the_steps_past_since_or_all_where_the_steps_are_unknown(self):
    history = {'steps': [4, 5, 6, 7]}
    self.assertAllEqual(norms.after(history, 5, 4), [False, False, True, True])
    self.assertAllEqual(norms.after(history, 0, 4), [True] * 4)
    self.assertAllEqual(norms.after({'steps': [1, 2]}, 5, 4), [True] * 4)  # Misaligned.
    self.assertAllEqual(norms.after(None, 5, 2), [True] * 2)

  def test_a_rise_the_norm_came_back_from_is_noise_unless_it_is_100x(self):
    self.assertEqual(norms.largest_jump(np.array([1.0, 11.0, 1.5, 1.2])), 1.0)  # Came back.
    self.assertEqual(norms.largest_jump(np.array([1.0, 11.0, 9.0, 12.0])), 11.0)  # Stayed up.
    self.assertEqual(norms.largest_jump(np.array([1.0, 150.0, 1.0])), 150.0)  # 100x or more.
    self.assertEqual(norms.largest_jump(np.array([3.0])), 1.0)

  def test_the_healthy_norm_is_read_before_the_trouble(self):
    # A window that is mostly the blow-up (the trouble from step 3): the two steps before it.
    grads, steps = np.array([532.0, 154.0, 1e4, 1.3e4, 2e5, np.nan]), np.arange(1.0, 7.0)
    self.assertEqual(norms.healthy(grads, steps, 3, np.nan), 343.0)
    self.assertEqual(norms.healthy(grads, steps, None, np.nan), 1e4)  # No trouble: the median.
    # Trouble from the window's first step: AdaptiveClip's running mean, else unknown.
    self.assertEqual(norms.healthy(grads, steps, 1, 12.5), 12.5)
    self.assertIsNone(norms.healthy(grads, steps, 1, np.nan))
    self.assertIsNone(norms.healthy(np.array([]), np.array([]), None, np.inf))


if __name__ == '__main__':
  tf.test.main()
