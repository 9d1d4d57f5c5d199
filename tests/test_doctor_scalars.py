"""Tests for stable_train.doctor.scalars: a run's TensorBoard scalars read without TensorFlow
agree with TensorFlow's own reader, for the run's writer and for tf.summary's."""

import math
import os

import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tensorflow.core.util import event_pb2

from stable_train.doctor import scalars
from stable_train.runfiles import events as events_lib


def tf_read(model_dir):
  """The same records through tf.compat.v1.train.summary_iterator."""
  out = []
  folder = os.path.join(model_dir, 'tensorboard')
  for name in os.listdir(folder):
    if name.startswith('events.out.tfevents.'):
      for e in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
        values = {v.tag: float(tf.make_ndarray(v.tensor)) if v.HasField('tensor') else
                  v.simple_value for v in e.summary.value}
        if values:
          out.append({'step': e.step, 'time': e.wall_time, **values})
  return sorted(out, key=lambda r: r['time'])


class ScalarsTest(tf.test.TestCase):

  def assert_same(self, mine, theirs):
    self.assertEqual(len(mine), len(theirs))
    for a, b in zip(mine, theirs):
      self.assertEqual(sorted(a), sorted(b))
      for key in a:
        self.assertTrue(a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])),
                        f'{key}: {a[key]} != {b[key]}')

  def test_the_run_s_scalars_read_as_tensorflow_reads_them(self):
    model_dir = self.get_temp_dir()
    writer = events_lib.Scalars(os.path.join(model_dir, 'tensorboard'))
    writer.write(1, {'loss': 2.5, 'grad_norm': float('nan'), 'loss_scale': 1.0})
    writer.write(2, {'loss': 1.25, 'grad_norm': float('inf'), 'loss_scale': 0.5})
    writer.write(2, {'rollbacks': 1.0})
    writer.close()
    mine = scalars.read(model_dir)
    self.assertEqual([r['step'] for r in mine], [1, 2, 2])
    self.assertEqual(mine[1]['grad_norm'], float('inf'))
    self.assert_same(mine, tf_read(model_dir))

  def test_tf_summary_and_simple_values_read_too(self):
    model_dir = self.get_temp_dir()
    folder = os.path.join(model_dir, 'tensorboard')
    writer = tf.summary.create_file_writer(folder)
    with writer.as_default():
      for step in range(3):
        tf.summary.scalar('loss', 1.5 * step, step=step)
        tf.summary.scalar('wide', tf.constant(0.5, tf.float64), step=step)
    writer.close()
    old = tf.io.TFRecordWriter(os.path.join(folder, 'events.out.tfevents.9999999999.old.v2'))
    old.write(event_pb2.Event(wall_time=9999999999.0, step=7, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag='loss', simple_value=0.25)])).SerializeToString())
    old.close()
    mine = scalars.read(model_dir)
    self.assertEqual(mine[-1], {'step': 7, 'time': 9999999999.0, 'loss': 0.25})
    self.assertEqual([(r['step'], r.get('loss'), r.get('wide')) for r in mine[:4]],
                     [(0, 0.0, None), (0, None, 0.5), (1, 1.5, None), (1, None, 0.5)])
    self.assert_same(mine, tf_read(model_dir))

  def test_a_record_cut_off_ends_its_file_and_nothing_is_an_empty_list(self):
    model_dir = self.get_temp_dir()
    self.assertEqual(scalars.read(model_dir), [])
    writer = events_lib.Scalars(os.path.join(model_dir, 'tensorboard'))
    for step in range(1, 4):
      writer.write(step, {'loss': float(step)})
    writer.close()
    (name,) = os.listdir(os.path.join(model_dir, 'tensorboard'))
    path = os.path.join(model_dir, 'tensorboard', name)
    with open(path, 'rb+') as f:
      f.truncate(os.path.getsize(path) - 3)  # The last record's write cut off by a crash.
    self.assertEqual([r['loss'] for r in scalars.read(model_dir)], [1.0, 2.0])


if __name__ == '__main__':
  tf.test.main()
