"""Tests for stable_train.checkpointing: commit by manifest, retention of good checkpoints, fallback."""

import json
import os

import tensorflow as tf

from stable_train import checkpointing


class KeeperTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = os.path.join(self.get_temp_dir(), 'ckpts')
    self.var = tf.Variable(0.0)
    self.warnings = []
    self.keeper = self._keeper()

  def _keeper(self, **kwargs):
    ckpt = tf.train.Checkpoint(v=self.var)
    return checkpointing.CheckpointKeeper(
        ckpt, self.dir, warn=lambda event, step, **f: self.warnings.append((event, step, f)),
        **kwargs)

  def _save(self, keeper, value, step, good=True):
    self.var.assign(value)
    return keeper.save(step, good)

  def test_save_restore_and_numbers_never_reused(self):
    a = self._save(self.keeper, 1.0, 10)
    b = self._save(self.keeper, 2.0, 20)
    self.assertEqual((a.number, b.number), (1, 2))
    self.keeper.restore(a)
    self.assertEqual(float(self.var), 1.0)
    # A new keeper on the same directory (a restarted run) continues numbering.
    keeper = self._keeper()
    c = self._save(keeper, 3.0, 30)
    self.assertEqual(c.number, 3)
    self.assertEqual([e.step for e in keeper.committed()], [10, 20, 30])

  def test_uncommitted_files_are_never_loaded(self):
    self._save(self.keeper, 1.0, 10)
    # Simulate a crash after the files were written but before the manifest commit.
    self.var.assign(99.0)
    self.keeper.manager.save(checkpoint_number=50)
    keeper = self._keeper()
    self.assertEqual([e.step for e in keeper.committed()], [10])
    entry = keeper.restore_latest()
    self.assertEqual(entry.step, 10)
    self.assertEqual(float(self.var), 1.0)

  def test_files_of_a_crashed_save_are_deleted_after_the_next_commit(self):
    self._save(self.keeper, 1.0, 10)
    self.keeper.manager.save(checkpoint_number=7)  # Written, never committed (a crash).
    self.assertTrue(any(f.startswith('ckpt-7.') for f in os.listdir(self.dir)))
    keeper = self._keeper()
    self._save(keeper, 2.0, 20)
    names = os.listdir(self.dir)
    self.assertFalse(any(f.startswith('ckpt-7.') for f in names), names)
    self.assertEqual([e.step for e in keeper.committed()], [10, 20])

  def test_retention_keeps_good_checkpoints_for_rollback(self):
    keeper = self._keeper(max_to_keep=2, keep_good=2)
    self._save(keeper, 1.0, 10, good=True)
    self._save(keeper, 2.0, 20, good=True)
    for step in (30, 40, 50):
      self._save(keeper, float(step), step, good=False)
    self.assertEqual([e.step for e in keeper.committed()], [10, 20, 40, 50])
    self.assertEqual(keeper.last_good().step, 20)
    self.assertEqual(keeper.last_good(before_step=20).step, 10)
    files = os.listdir(self.dir)
    self.assertFalse(any(f.startswith('ckpt-3.') for f in files), files)

  def test_mark_bad_persists(self):
    self._save(self.keeper, 1.0, 10)
    self._save(self.keeper, 2.0, 20)
    changed = self.keeper.mark_bad(after_step=15)
    self.assertEqual([e.step for e in changed], [20])
    self.assertEqual([e.step for e in self._keeper().good()], [10])

  def test_corrupt_latest_falls_back_with_a_warning(self):
    self._save(self.keeper, 1.0, 10)
    bad = self._save(self.keeper, 2.0, 20)
    data = tf.io.gfile.glob(os.path.join(self.dir, bad.path) + '.data-*')[0]
    with open(data, 'r+b') as f:
      f.truncate(3)
    self.var.assign(-1.0)
    entry = self._keeper().restore_latest()
    self.assertEqual(entry.step, 10)
    self.assertEqual(float(self.var), 1.0)
    self.assertEqual(self.warnings[0][0], 'checkpoint_corrupt')
    self.assertEqual(self.warnings[0][1], 20)

  def test_tf_state_file_lists_only_kept_checkpoints(self):
    keeper = self._keeper(max_to_keep=2, keep_good=1)
    for step in range(1, 9):
      self._save(keeper, float(step), step)
    state = tf.train.get_checkpoint_state(self.dir)
    kept = [os.path.join(self.dir, e.path) for e in keeper.committed()]
    self.assertEqual(list(state.all_model_checkpoint_paths)[-2:], kept[-2:])
    self.assertLessEqual(len(state.all_model_checkpoint_paths), 3)
    self.assertEqual(tf.train.latest_checkpoint(self.dir), kept[-1])

  def test_manifest_is_strict_json(self):
    self._save(self.keeper, 1.0, 10)
    with open(os.path.join(self.dir, checkpointing.MANIFEST)) as f:
      text = f.read()
    # json.load accepts NaN/Infinity; strict JSON must not contain them.
    data = json.loads(text, parse_constant=lambda c: self.fail(f'non-strict JSON constant {c}'))
    self.assertEqual(data['checkpoints'][0]['path'], 'ckpt-1')


if __name__ == '__main__':
  tf.test.main()
