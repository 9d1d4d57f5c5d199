"""Tests for stable_train.runfiles.checkpointing: commit by manifest, retention of good checkpoints, fallback."""

import errno
import json
import os
import subprocess
import sys
import threading
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import state
from stable_train import errors
from stable_train.runfiles import checkpointing


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
    self.keeper.checkpoint.write(os.path.join(self.dir, "ckpt-50"))
    keeper = self._keeper()
    self.assertEqual([e.step for e in keeper.committed()], [10])
    entry = keeper.restore_latest()
    self.assertEqual(entry.step, 10)
    self.assertEqual(float(self.var), 1.0)

  def test_files_of_a_crashed_save_are_deleted_after_the_next_commit(self):
    self._save(self.keeper, 1.0, 10)
    self.keeper.checkpoint.write(os.path.join(self.dir, 'ckpt-7'))  # Written, never committed (a crash).
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

  def test_the_best_checkpoint_survives_rotation_and_reload_until_another_is_best(self):
    keeper = self._keeper(max_to_keep=2, keep_good=1)
    best = self._save(keeper, 2.0, 20)
    keeper.mark_best(best)
    for step in (30, 40, 50, 60):
      self._save(keeper, float(step), step)
    # Rotation keeps the newest two, the newest good one, and the best one.
    self.assertEqual([e.step for e in keeper.committed()], [20, 50, 60])
    reloaded = self._keeper(max_to_keep=2, keep_good=1)
    self.assertEqual(reloaded.best().step, 20)
    with open(os.path.join(self.dir, checkpointing.MANIFEST)) as f:
      marks = {e['step']: e['best'] for e in json.load(f)['checkpoints']}
    self.assertEqual(marks, {20: True, 50: False, 60: False})
    self.var.assign(-1.0)
    reloaded.restore(reloaded.best())
    self.assertEqual(float(self.var), 2.0)
    # A new best takes the mark; the old one, unprotected now, is pruned with its files.
    reloaded.mark_best(reloaded.committed()[-1])
    self.assertEqual([(e.step, e.best) for e in reloaded.committed()], [(50, False), (60, True)])
    self.assertFalse(any(f.startswith(best.path + '.') for f in os.listdir(self.dir)))
    self.assertEqual(self._keeper().best().step, 60)
    with self.assertRaisesRegex(ValueError, 'not a committed checkpoint'):
      reloaded.mark_best(best)

  def test_a_manifest_without_best_marks_still_loads(self):
    self._save(self.keeper, 1.0, 10)
    path = os.path.join(self.dir, checkpointing.MANIFEST)
    with open(path) as f:
      data = json.load(f)
    for e in data['checkpoints']:
      del e['best']  # As written before best marks existed.
    with open(path, 'w') as f:
      json.dump(data, f)
    keeper = self._keeper()
    self.assertEqual([(e.step, e.best) for e in keeper.committed()], [(10, False)])
    self.assertIsNone(keeper.best())

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


  def _snapshot(self):
    """{name: bytes} of every file in the checkpoint directory."""
    out = {}
    for name in sorted(os.listdir(self.dir)):
      path = os.path.join(self.dir, name)
      if os.path.isfile(path):
        with open(path, 'rb') as f:
          out[name] = f.read()
    return out

  def test_checkpoint_files_without_a_manifest_are_refused_and_kept(self):
    self._save(self.keeper, 1.0, 10)
    self._save(self.keeper, 2.0, 20)
    os.remove(os.path.join(self.dir, checkpointing.MANIFEST))
    before = self._snapshot()
    with self.assertRaisesRegex(errors.CheckpointError,
                                r'manifest.json is missing .*ckpt-1, ckpt-2.*restore it'):
      self._keeper()
    self.assertEqual(self._snapshot(), before)  # Nothing deleted, nothing written.

  def test_unreadable_manifest_is_refused_and_kept(self):
    self._save(self.keeper, 1.0, 10)
    path = os.path.join(self.dir, checkpointing.MANIFEST)
    for text in ('{"checkpoints": [{"number": 1,', '[]', '{"other": 1}'):
      with open(path, 'w') as f:
        f.write(text)
      before = self._snapshot()
      with self.assertRaisesRegex(errors.CheckpointError, r'manifest.json is unreadable'):
        self._keeper()
      self.assertEqual(self._snapshot(), before, text)

  def test_a_fresh_directory_gets_an_empty_manifest_at_once(self):
    # So that a crash during the first save (files, no commit) is not read as a deleted manifest.
    with open(os.path.join(self.dir, checkpointing.MANIFEST)) as f:
      self.assertEqual(json.load(f), {'checkpoints': []})
    self.keeper.checkpoint.write(os.path.join(self.dir, 'ckpt-1'))  # Written, never committed (a crash).
    keeper = self._keeper()
    self.assertEqual(keeper.committed(), [])
    self.assertEqual(self._save(keeper, 1.0, 10).number, 2)

  def test_orphan_temp_folders_are_removed_at_start(self):
    self._save(self.keeper, 1.0, 10)
    orphan = os.path.join(self.dir, 'ckpt-2_temp')
    os.makedirs(orphan)
    with open(os.path.join(orphan, 'part-00000-of-00001.data-00000-of-00001'), 'w') as f:
      f.write('half')
    unrelated = os.path.join(self.dir, 'notes_temp')
    os.makedirs(unrelated)
    self._keeper()
    self.assertFalse(os.path.exists(orphan))
    self.assertTrue(os.path.exists(unrelated))

  def test_a_failed_write_leaves_no_files_and_the_manifest_as_it_was(self):
    self._save(self.keeper, 1.0, 10)
    manifest = self._snapshot()[checkpointing.MANIFEST]
    write = self.keeper._write_files

    def full_disk(number):
      write(number)  # The files are written, then the disk fills (e.g. the merge step).
      raise OSError(errno.ENOSPC, 'No space left on device')

    with mock.patch.object(self.keeper, '_write_files', full_disk):
      with self.assertRaisesRegex(errors.CheckpointError,
                                  r'could not write a checkpoint at step 20: .*No space left on '
                                  r'device.*resumes from ckpt-1 \(step 10\)'):
        self._save(self.keeper, 2.0, 20)
    self.assertEqual(self.warnings[-1][:2], ('checkpoint_failed', 20))
    self.assertEqual(self._snapshot()[checkpointing.MANIFEST], manifest)
    self.assertEqual([e.step for e in self.keeper.entries], [10])
    self.assertFalse([n for n in os.listdir(self.dir) if n.startswith('ckpt-2')])
    with mock.patch.object(self.keeper, '_write_manifest', side_effect=OSError(errno.ENOSPC, 'x')):
      with self.assertRaisesRegex(errors.CheckpointError, 'at step 30'):
        self._save(self.keeper, 3.0, 30)
    self.assertEqual([e.step for e in self.keeper.entries], [10])
    self.assertFalse([n for n in os.listdir(self.dir) if n.startswith('ckpt-3')])
    self.assertEqual(self._save(self.keeper, 4.0, 40).step, 40)


  def test_a_full_disk_inside_the_traced_write_is_named_in_the_event_and_the_error(self):
    self._save(self.keeper, 1.0, 10)
    # How TensorFlow reports it from the traced writer (seen on a full tmpfs; test_errors.py).
    full = tf.errors.ResourceExhaustedError(None, None, (
        'Graph execution error:\n\nDetected at node SaveV2 defined at (most recent call last):'
        '\n/tmp/tiny/ckpt-1_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; No space '
        'left on device\n\t [[{{node SaveV2}}]]\n [Op:__inference_write_31]'))
    keeper = self._keeper(writer=mock.Mock(side_effect=full))
    with self.assertRaises(errors.CheckpointError) as ctx:
      self._save(keeper, 2.0, 20)
    message = str(ctx.exception)
    self.assertRegex(message, r'^could not write a checkpoint at step 20: No space left on '
                     r'device: /tmp/tiny/ckpt-1_temp/.*; free space .*resumes from ckpt-1 ')
    self.assertNotIn('Graph execution error', message)
    self.assertEqual(self.warnings[-1][:2], ('checkpoint_failed', 20))
    self.assertStartsWith(self.warnings[-1][2]['error'], 'No space left on device: /tmp/tiny/')


class AnotherModelTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_another_float32_model_is_named_as_such_after_one_try(self):
    from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
    from stable_train.runfiles import events
    from stable_train.zoo import models
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    model_dir = self.get_temp_dir()
    images = data.synthetic_images(num_examples=32, image_shape=(8, 8, 3), num_classes=4,
                                   batch_size=8)

    def trainer(model):
      return trainer_lib.Trainer(
          model=model, optimizer=keras.optimizers.Adam(1e-3), model_dir=model_dir,
          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), checkpoint_every=2,
          log_every=100)

    trainer(models.convnet_bn(image_shape=(8, 8, 3), num_classes=4, filters=(4,))).fit(
        images, num_steps=6)  # BatchNorm statistics first among its non-trainable variables.
    dropout = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                keras.layers.Dropout(0.2), keras.layers.Dense(4)])
    with self.assertRaises(errors.CheckpointError) as ctx:
      trainer(dropout).fit(images, num_steps=8)  # A seed-generator state first: int64.
    message = str(ctx.exception)
    self.assertIn('could be restored: ckpt-3 was written for another model or policy set '
                  '(tensor_name = model_state/0/.ATTRIBUTES/VARIABLE_VALUE; expected dtype int64 '
                  'does not equal original dtype float); resume with the same model and '
                  'Trainer.policies that wrote it', message)
    for raw in ('precision', 'function_node', 'RestoreV2', '\n'):
      self.assertNotIn(raw, message)
    tried = [e['checkpoint'] for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
             if e['event'] == 'checkpoint_corrupt']
    self.assertEqual(tried, ['ckpt-3'])  # The older two were written by the same program.

  def test_a_float_for_double_mismatch_is_another_precision(self):
    why = checkpointing.why_unrestorable([(
        'ckpt-2', 'tensor_name = model/.ATTRIBUTES/VARIABLE_VALUE; expected dtype double does '
        'not equal original dtype float')])
    self.assertEqual(why, 'ckpt-2 was written in another precision (float variables; this run '
                     'has double); resume with the train.precision that wrote it')
    self.assertIn('is corrupt (Truncated', checkpointing.why_unrestorable(
        [('ckpt-2', 'Truncated read of a checkpoint data file')]))

class BackgroundWriteTest(tf.test.TestCase):
  """A good checkpoint captured in memory at the save, written from there, synced and committed
  in a thread; waited for before anything else touches the checkpoints."""

  def setUp(self):
    super().setUp()
    self.dir = os.path.join(self.get_temp_dir(), 'ckpts')
    self.var = tf.Variable(0.0)
    self.warnings, self.commits, self.order = [], [], []
    checkpoint = tf.train.Checkpoint(v=self.var)
    snapshot = state.Snapshot(checkpoint)
    self.keeper = checkpointing.CheckpointKeeper(
        checkpoint, self.dir, warn=lambda event, step, **f: self.warnings.append((event, step)),
        snapshot=snapshot, writer=state.TracedWriter(checkpoint),
        snapshot_writer=state.TracedWriter(tf.train.Checkpoint(v=self.var),
                                                   object_map=snapshot.object_map()),
        before_commit=self._before_commit)

  def _before_commit(self, entry):
    self.commits.append(entry)
    self.order.append(('before_commit', entry.step, self._manifest_steps()))

  def _manifest_steps(self):
    with open(os.path.join(self.dir, checkpointing.MANIFEST)) as f:
      return [e['step'] for e in json.load(f)['checkpoints']]

  def test_the_state_of_the_save_is_written_and_committed_after_the_files_are_synced(self):
    order, release = self.order, threading.Event()
    fsync, write_manifest = checkpointing._fsync, self.keeper._write_manifest

    def slow_fsync(paths):
      release.wait(timeout=60)
      fsync(paths)
      order.append(('fsync', sorted(os.path.basename(p) for p in paths)))

    def recorded_write_manifest():
      order.append(('manifest', [e.step for e in self.keeper.entries]))
      write_manifest()

    with mock.patch.object(checkpointing, '_fsync', slow_fsync), \
         mock.patch.object(self.keeper, '_write_manifest', recorded_write_manifest):
      self.var.assign(1.0)
      entry = self.keeper.save(10, good=True, background=True)
      self.assertIs(self.keeper.pending, entry)  # Returned before anything was committed.
      self.assertEqual(self.keeper.committed(), [])
      self.assertEqual(self._manifest_steps(), [])
      self.var.assign(2.0)  # Training goes on: the checkpoint keeps the state of the save.
      release.set()
      self.assertIs(self.keeper.wait(), entry)
    self.assertIsNone(self.keeper.pending)
    self.assertEqual(self.commits, [entry])
    self.assertEqual(self._manifest_steps(), [10])
    # The commit hook (the `checkpoint` event) runs after the sync, before the manifest lists it.
    (_, synced), hook, (_, listed) = order
    self.assertEqual(hook, ('before_commit', 10, []))
    self.assertIn('ckpt-1.index', synced)
    self.assertIn('ckpt-1.data-00000-of-00001', synced)  # One data file, as an eager save.
    self.assertIn('ckpts', synced)  # The folder too: the renames into it.
    self.assertEqual(listed, [10])
    self.var.assign(-1.0)
    self.keeper.restore(entry)  # From disk.
    self.assertEqual(float(self.var), 1.0)
    self.assertEqual(self.keeper.restored_from, 'disk')

  def test_a_second_save_completes_the_first_commit_first(self):
    self.var.assign(1.0)
    first = self.keeper.save(10, good=True, background=True)
    self.var.assign(2.0)
    second = self.keeper.save(20, good=True, background=True)
    self.assertEqual(self._manifest_steps(), [10])  # The first, committed before the second.
    self.assertEqual(self.keeper.committed(), [first])
    self.keeper.wait()
    self.assertEqual(self._manifest_steps(), [10, 20])
    self.assertEqual(second.number, first.number + 1)

  def test_a_failed_commit_raises_at_the_wait_and_leaves_the_committed_ones(self):
    self.keeper.save(10, good=True)
    manifest = self._manifest_steps()
    full = OSError(errno.ENOSPC, 'No space left on device')
    with mock.patch.object(checkpointing, '_fsync', side_effect=full):
      self.keeper.save(20, good=True, background=True)
      with self.assertRaisesRegex(errors.CheckpointError,
                                  r'could not write a checkpoint at step 20: .*No space left.*'
                                  r'resumes from ckpt-1 \(step 10\)'):
        self.keeper.wait()
    self.assertEqual(self.warnings, [('checkpoint_failed', 20)])
    self.assertEqual([e.step for e in self.commits], [10])  # No `checkpoint` event for it.
    self.assertEqual(self._manifest_steps(), manifest)
    self.assertFalse([n for n in os.listdir(self.dir) if n.startswith('ckpt-2')])
    self.assertIsNone(self.keeper.wait())  # Reported once.
    self.assertEqual(self.keeper.save(30, good=True).step, 30)

  def test_a_rollback_to_the_newest_good_checkpoint_restores_from_memory(self):
    self.var.assign(1.0)
    first = self.keeper.save(10, good=True)
    self.var.assign(2.0)
    second = self.keeper.save(20, good=True, background=True)
    self.var.assign(3.0)
    self.assertEqual(self.keeper.restore_latest([first, second]), second)  # Waits, then memory.
    self.assertEqual((float(self.var), self.keeper.restored_from), (2.0, 'memory'))
    self.assertEqual(self.keeper.restore_latest([first]), first)  # Not the one in memory.
    self.assertEqual((float(self.var), self.keeper.restored_from), (1.0, 'disk'))
    self.var.assign(4.0)
    self.assertEqual(self.keeper.restore_latest([first]), first)  # Captured after the read.
    self.assertEqual((float(self.var), self.keeper.restored_from), (1.0, 'memory'))
    self.var.assign(5.0)
    third = self.keeper.save(30, good=False, background=True)  # Not good: written at once
    self.assertIsNone(self.keeper.pending)  # from the live variables, and not into the snapshot.
    self.assertIn(third, self.keeper.committed())
    self.assertEqual(self.keeper.restore_latest([first]), first)
    self.assertEqual((float(self.var), self.keeper.restored_from), (1.0, 'memory'))
    self.var.assign(-1.0)
    self.keeper.restore(third)
    self.assertEqual(float(self.var), 5.0)


if __name__ == '__main__':
  tf.test.main()
