"""Tests for stable_train.runtime.inputs: the input position, skipping and restarting a dataset."""

import tensorflow as tf

from stable_train.runtime import inputs


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
    step.assign(2)  # The loop consumed batch 4 (so the position is 5).
    position.reset()  # The counters changed where it cannot tell: rebuilt at the position.
    self.assertEqual(int(next(position.iterator)), 5)

  def test_a_resume_starts_the_iterator_at_the_restored_position(self):
    position, step, offset = self._position()
    position.start(tf.data.Dataset.range(100).cache(), from_start=False)
    with position.restoring():  # What a resume does: no iterator yet, counters from disk.
      step.assign(30)
      offset.assign(12)
    self.assertEqual(int(next(position.iterator)), 42)

  def test_a_rollback_moves_the_live_iterator_forward_without_rebuilding_it(self):
    position, step, offset = self._position()
    position.start(tf.data.Dataset.range(100), from_start=False)
    live = position.iterator
    for _ in range(20):  # The loop ran 20 steps; batch 19 triggered a rollback.
      next(live)
    step.assign(20)
    with position.restoring():  # Back to the checkpoint of step 5.
      step.assign(5)
    self.assertEqual(position.position(), 5)
    # Rollback skips from the restored position through the triggering batch, and 3 more.
    self.assertEqual(position.skip(20 + 3 - 5), (5, 23))
    self.assertIs(position.iterator, live)  # Read ahead 3 batches in place: no O(position) rebuild.
    self.assertEqual(int(next(position.iterator)), 23)

  def test_a_restore_behind_the_live_iterator_rebuilds_it_at_the_position(self):
    position, step, _ = self._position()
    position.start(tf.data.Dataset.range(100), from_start=False)
    live = position.iterator
    for _ in range(20):
      next(live)
    step.assign(20)
    with position.restoring():
      step.assign(5)
    self.assertIsNot(position.iterator, live)
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


class BatchSignatureTest(tf.test.TestCase):

  def test_static_shapes_and_dtypes_in_flatten_order(self):
    data = tf.data.Dataset.from_tensor_slices(
        ({'b': tf.zeros([10, 3]), 'a': tf.zeros([10], tf.int32)}, tf.zeros([10, 1]))).batch(
            4, drop_remainder=True)
    self.assertEqual(inputs.batch_signature(data), 'int32[4] float32[4,3] float32[4,1]')

  def test_an_unknown_batch_dimension_is_read_from_the_first_batch(self):
    def data(batch_size):
      return tf.data.Dataset.from_tensor_slices(tf.zeros([10, 3])).batch(batch_size)

    self.assertEqual(data(4).element_spec.shape.as_list(), [None, 3])
    self.assertEqual(inputs.batch_signature(data(4)), 'float32[4,3]')
    self.assertNotEqual(inputs.batch_signature(data(4)), inputs.batch_signature(data(5)))


if __name__ == '__main__':
  tf.test.main()
