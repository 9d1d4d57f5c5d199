"""Tests for stable_train.inputs: the input position, skipping and restarting a dataset."""

import tensorflow as tf

from stable_train import inputs


class InputPositionTest(tf.test.TestCase):

  def _position(self):
    step = tf.Variable(0, dtype=tf.int64)
    offset = tf.Variable(0, dtype=tf.int64)
    position = inputs.InputPosition(strategy=tf.distribute.get_strategy(), global_step=step,
                                    data_offset=offset, distributed=False)
    return position, step, offset

  def test_position_is_global_step_plus_offset_and_skip_moves_the_iterator(self):
    position, step, offset = self._position()
    self.assertIsNone(position.dataset)
    position.start(tf.data.Dataset.range(10), from_start=False)
    self.assertEqual(int(next(position.iterator)), 0)
    step.assign(1)  # The loop consumed batch 0.
    self.assertEqual(position.position(), 1)
    self.assertEqual(position.skip(3), (1, 4))
    self.assertEqual((position.position(), int(offset.numpy())), (4, 3))
    self.assertEqual(int(next(position.iterator)), 4)
    self.assertEqual(position.skip(0), (4, 4))
    position.reset()  # Single-device input: the iterator stays (a checkpoint restores it).
    self.assertEqual(int(next(position.iterator)), 5)

  def test_a_later_fit_reads_its_dataset_from_the_start(self):
    position, step, _ = self._position()
    position.start(tf.data.Dataset.range(10), from_start=False)
    step.assign(7)
    position.start(tf.data.Dataset.range(100, 110), from_start=True)
    self.assertEqual(position.position(), 0)
    self.assertEqual(int(next(position.iterator)), 100)

  def test_skip_past_the_end_stops_quietly(self):
    position, _, _ = self._position()
    position.start(tf.data.Dataset.range(3), from_start=False)
    self.assertEqual(position.skip(5), (0, 5))
    self.assertIsNone(position.iterator.get_next_as_optional().has_value().numpy() or None)


if __name__ == '__main__':
  tf.test.main()
