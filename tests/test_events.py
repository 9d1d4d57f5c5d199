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

  def test_write_atomic_honours_the_umask(self):
    # mkstemp makes 0600 files; summary.json, manifest.json and operative_config.gin must get the
    # mode any other file of the run gets (0644 under umask 022, 0640 under 027).
    for mask, mode in ((0o022, 0o644), (0o027, 0o640), (0o077, 0o600)):
      path = os.path.join(self.get_temp_dir(), f'summary_{mask:o}.json')
      old = os.umask(mask)
      try:
        events.write_json_atomic(path, {'a': 1})
      finally:
        os.umask(old)
      self.assertEqual(os.stat(path).st_mode & 0o777, mode, f'umask {mask:o}')

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
