"""Tests for stable_train.runfiles.manifest: the commit record read back field by field."""

import json
import os

import tensorflow as tf

from stable_train.app import export
from stable_train import errors
from stable_train.runfiles import manifest


def _entry(**changes):
  entry = {'number': 1, 'step': 10, 'good': True, 'path': 'ckpt-1'}
  entry.update(changes)
  return entry


class ReadTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.model_dir = self.get_temp_dir()
    self.dir = os.path.join(self.model_dir, 'checkpoints')
    os.makedirs(self.dir, exist_ok=True)
    self.path = os.path.join(self.dir, manifest.MANIFEST)

  def _write(self, content):
    with open(self.path, 'wb') as f:
      f.write(content if isinstance(content, bytes) else json.dumps(content).encode())

  def test_what_it_writes_reads_back(self):
    self._write({'checkpoints': [_entry(), _entry(number=2, step=20, good=False, best=True,
                                                  path='ckpt-2', input_signature='float32[8]')]})
    entries = manifest.Manifest(self.dir, max_to_keep=5, keep_good=3).entries
    self.assertEqual([(e.number, e.step, e.good, e.best) for e in entries],
                     [(1, 10, True, False), (2, 20, False, True)])

  def test_a_form_it_does_not_write_is_one_line_and_changes_nothing(self):
    cases = (
        (b'\xff\xfe not utf-8', 'is unreadable ('),
        ({'checkpoints': None}, 'no "checkpoints" list'),
        ({'checkpoints': [5]}, 'an entry is 5, not an object'),
        ({'checkpoints': [_entry(number='1')]}, 'number="1"'),
        ({'checkpoints': [_entry(good=1)]}, 'good=1'),
        ({'checkpoints': [_entry(number=True)]}, 'number=true'),
        ({'checkpoints': [_entry(path='../../elsewhere/ckpt-1')]}, 'not a checkpoint of this'),
        ({'checkpoints': [_entry(step=-3)]}, 'not a checkpoint of this'),
        ({'checkpoints': [_entry(extra=1)]}, "unexpected keyword argument 'extra'"),
        ({'checkpoints': [{'number': 1}]}, 'missing'),
    )
    for content, words in cases:
      self._write(content)
      with open(self.path, 'rb') as f:
        before = f.read()
      for read in (lambda: manifest.Manifest(self.dir, max_to_keep=5, keep_good=3),
                   lambda: export.choose_checkpoint(self.model_dir, 'latest')):
        with self.assertRaises(errors.CheckpointError, msg=content) as ctx:
          read()
        message = str(ctx.exception)
        self.assertStartsWith(message, f'{self.path} is unreadable (')
        self.assertIn(words, message)
        self.assertNotIn('\n', message)
      with open(self.path, 'rb') as f:
        self.assertEqual(f.read(), before)
    os.remove(self.path)
    os.mkdir(self.path)  # A folder where the file belongs.
    with self.assertRaisesRegex(errors.CheckpointError, 'is unreadable .*Is a directory'):
      manifest.Manifest(self.dir, max_to_keep=5, keep_good=3)


if __name__ == '__main__':
  tf.test.main()
