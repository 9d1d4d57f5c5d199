"""Tests for stable_train.events: atomic writes and strict-JSON event records."""

import json
import os
from unittest import mock

import numpy as np
import tensorflow as tf

from stable_train import events


class EventsTest(tf.test.TestCase):

  def test_write_atomic_keeps_the_old_file_on_failure(self):
    path = os.path.join(self.get_temp_dir(), 'summary.json')
    events.write_json_atomic(path, {'a': 1})
    with mock.patch('os.replace', side_effect=OSError('disk full')):
      with self.assertRaises(OSError):
        events.write_json_atomic(path, {'a': 2})
    with open(path) as f:
      self.assertEqual(json.load(f), {'a': 1})
    self.assertEqual(os.listdir(self.get_temp_dir()), ['summary.json'])  # No temp file left.

  def test_event_records_are_strict_json(self):
    path = os.path.join(self.get_temp_dir(), 'events.jsonl')
    log = events.EventLog(path)
    log.emit('skip', np.int64(3), loss=np.float32(np.nan), flags=np.array([True, False]))
    with open(path) as f:
      line = f.readline()
    record = json.loads(line, parse_constant=lambda c: self.fail(f'non-strict JSON {c}'))
    self.assertEqual(record['event'], 'skip')
    self.assertEqual(record['step'], 3)
    self.assertEqual(record['loss'], 'nan')
    self.assertEqual(record['flags'], [True, False])


if __name__ == '__main__':
  tf.test.main()
