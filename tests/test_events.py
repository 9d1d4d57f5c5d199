"""Tests for stable_train.runfiles.events: atomic writes, the events.jsonl log (strict JSON, batched per
loop, complete after a kill -9 up to the last committed checkpoint) and TensorBoard scalars (on
disk up to it too)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

import keras
import numpy as np
import tensorflow as tf

import stable_train
import pytest
from stable_train.runfiles import events
from stable_train.testing import faults as faults_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _lines(path):
  with open(path) as f:
    return f.read().splitlines()


class EventLogTest(tf.test.TestCase):

  def test_a_batch_is_held_and_appended_in_one_write_at_its_end(self):
    path = os.path.join(self.get_temp_dir(), 'events.jsonl')
    log = events.EventLog(path)
    log.emit('start', 0)
    writes = []
    real_open = open

    def counting_open(file, mode='r', *args, **kwargs):
      if 'a' in mode:
        writes.append(file)
      return real_open(file, mode, *args, **kwargs)

    with mock.patch('builtins.open', counting_open):
      with log.batched():
        for step in (3, 4, 5):
          log.emit('skip', step, fault='loss')
        self.assertLen(_lines(path), 1)  # Held until the batch ends.
      self.assertLen(writes, 1)
    self.assertEqual([json.loads(l)['step'] for l in _lines(path)], [0, 3, 4, 5])
    log.emit('done', 6)  # Outside a batch: at once.
    self.assertEqual(json.loads(_lines(path)[-1])['event'], 'done')

  def test_a_record_from_another_thread_is_written_at_once_after_the_held_ones(self):
    path = os.path.join(self.get_temp_dir(), 'events.jsonl')
    log = events.EventLog(path)
    with log.batched():
      log.emit('skip', 7)
      thread = threading.Thread(target=lambda: log.emit('checkpoint', 5, checkpoint='ckpt-1'))
      thread.start()
      thread.join()
      # On disk while the batch is still open: the checkpoint and everything emitted before it.
      self.assertEqual([json.loads(l)['event'] for l in _lines(path)], ['skip', 'checkpoint'])
      log.emit('skip', 8)
    self.assertEqual([json.loads(l)['step'] for l in _lines(path)], [7, 5, 8])

  def test_records_are_delivered_on_the_owning_thread_in_order(self):
    seen = []
    log = events.EventLog(None, deliver=lambda r: seen.append((r['event'],
                                                               threading.get_ident())))
    me = threading.get_ident()
    with log.owned():
      log.emit('start', 0)
      thread = threading.Thread(target=lambda: log.emit('checkpoint', 5))
      thread.start()
      thread.join()
      self.assertEqual(seen, [('start', me)])  # Not on the writing thread.
      log.deliver()
      self.assertEqual(seen, [('start', me), ('checkpoint', me)])
      thread = threading.Thread(target=lambda: log.emit('checkpoint', 10))
      thread.start()
      thread.join()
    self.assertEqual(seen[-1], ('checkpoint', me))  # Delivered on the way out.
    thread = threading.Thread(target=lambda: log.emit('note', 11))
    thread.start()
    thread.join()
    self.assertEqual(seen[-1], ('note', thread.ident))  # Unowned: on the emitting thread.


def _scalar_records(logdir, killed=False):
  """[(file, step, {tag: value})] of every scalar event under `logdir`, in file order; `killed`:
  a file may end in a record cut short (a process killed while its writer's buffer filled)."""
  out = []
  for name in sorted(os.listdir(logdir)):
    try:
      for event in tf.compat.v1.train.summary_iterator(os.path.join(logdir, name)):
        if event.summary.value:
          values = {}
          for v in event.summary.value:
            assert v.metadata.plugin_data.plugin_name == 'scalars', v
            values[v.tag] = float(tf.make_ndarray(v.tensor))
          out.append((name, event.step, values))
    except tf.errors.DataLossError:
      if not killed:
        raise
  return out


class ScalarsTest(tf.test.TestCase):

  def test_scalars_are_tensorboard_scalar_events_readable_once_flushed(self):
    logdir = os.path.join(self.get_temp_dir(), 'tb')
    scalars = events.Scalars(logdir)
    self.assertTrue(scalars.writing)
    scalars.write(10, {'loss': 0.5, 'grad_norm': float('nan')})
    scalars.write(20, {'loss': 0.25, 'grad_norm': 1e39})  # Above float32: inf, as TF writes it.
    scalars.write(20, {'metrics/mae': 3.0})
    scalars.flush()  # Readable before the writer closes (a run still training).
    records = _scalar_records(logdir)
    self.assertEqual([(s, sorted(v)) for _, s, v in records],
                     [(10, ['grad_norm', 'loss']), (20, ['grad_norm', 'loss']),
                      (20, ['metrics/mae'])])
    self.assertEqual(records[0][2]['loss'], 0.5)
    self.assertTrue(np.isnan(records[0][2]['grad_norm']))
    self.assertEqual(records[1][2], {'loss': 0.25, 'grad_norm': float('inf')})
    (name,) = os.listdir(logdir)
    self.assertRegex(name, r'^events\.out\.tfevents\.\d+\..+\.v2$')
    first = next(iter(tf.compat.v1.train.summary_iterator(os.path.join(logdir, name))))
    self.assertEqual(first.file_version, 'brain.Event:2')
    scalars.close()
    scalars.write(30, {'loss': 1.0})  # After the run: dropped.
    self.assertFalse(scalars.writing)
    self.assertLen(_scalar_records(logdir), 3)
    second = events.Scalars(logdir)  # A second writer within the same second: its own file.
    second.close()
    self.assertLen(os.listdir(logdir), 2)

  def test_flush_due_writes_only_once_its_interval_has_passed(self):
    logdir = os.path.join(self.get_temp_dir(), 'tb')
    scalars = events.Scalars(logdir, flush_seconds=3600)
    scalars.write(10, {'loss': 0.5})
    scalars.flush_due()  # Within the interval: held in the writer.
    self.assertEqual(_scalar_records(logdir), [])
    scalars.flush()  # A checkpoint's flush: whatever the interval.
    self.assertLen(_scalar_records(logdir), 1)
    due = events.Scalars(os.path.join(self.get_temp_dir(), 'due'), flush_seconds=0)
    due.write(20, {'loss': 0.25})
    due.flush_due()
    self.assertEqual([s for _, s, _ in _scalar_records(os.path.join(self.get_temp_dir(), 'due'))],
                     [20])
    scalars.close()
    due.close()

  def test_no_logdir_writes_nothing(self):
    scalars = events.Scalars(None)
    self.assertFalse(scalars.writing)
    scalars.write(1, {'loss': 1.0})
    scalars.flush()
    scalars.close()


# A run killed with SIGKILL (as kill -9) after it committed checkpoints: events.jsonl must hold
# every record up to the last committed checkpoint's `checkpoint` event, one JSON object a line.
KILLED_RUN = r"""
import sys
import keras, numpy as np, tensorflow as tf
import stable_train
from stable_train.testing import faults
model_dir, poisoned = sys.argv[1], eval(sys.argv[2])
rng = np.random.RandomState(0)
x = rng.normal(size=(64, 8)).astype(np.float32)
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 0.5)).repeat().batch(8)
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
trainer = stable_train.Trainer(
    model=model, optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.MeanSquaredError(),
    model_dir=model_dir, steps_per_loop=5, checkpoint_every=10, summary_every=5, verbose=False,
    faults=faults.Faults(feature_nan_batches=poisoned))
trainer.fit(data, num_steps=10**7)
"""
POISONED = list(range(2, 5000, 7))  # Batch b poisoned: step b + 1 skipped.


def _manifest(model_dir):
  path = os.path.join(model_dir, 'checkpoints', 'manifest.json')
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return json.load(f)['checkpoints']


class DurabilityTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_after_kill_9_the_log_is_complete_up_to_the_last_committed_checkpoint(self):
    model_dir = os.path.join(self.get_temp_dir(), 'killed')
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3', CUDA_VISIBLE_DEVICES='')
    err_path = os.path.join(self.get_temp_dir(), 'killed.stderr')
    with open(err_path, 'w') as err:
      proc = subprocess.Popen([sys.executable, '-c', KILLED_RUN, model_dir, repr(POISONED)],
                              env=env, stdout=subprocess.DEVNULL, stderr=err)
    self.addCleanup(lambda: proc.poll() is None and proc.kill())
    deadline = time.monotonic() + 120
    while len(_manifest(model_dir)) < 4:  # Killed right after a commit: the hardest moment.
      if proc.poll() is not None:
        with open(err_path) as f:
          self.fail(f'the run ended (exit {proc.returncode}): {f.read()[-2000:]}')
      self.assertLess(time.monotonic(), deadline, 'no checkpoints in time')
      time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    self.assertEqual(proc.returncode, -signal.SIGKILL)

    lines = _lines(os.path.join(model_dir, 'events.jsonl'))
    records = [json.loads(l, parse_constant=lambda c: self.fail(f'non-strict JSON {c}'))
               for l in lines]  # Every line one whole record.
    last = _manifest(model_dir)[-1]
    checkpoints = {(r['checkpoint'], r['step']) for r in records if r['event'] == 'checkpoint'}
    self.assertIn((last['path'], last['step']), checkpoints)
    self.assertEqual(records[0]['event'], 'start')
    # Every step up to the checkpoint that read a poisoned batch has its skip event.
    expected = [b + 1 for b in POISONED if b + 1 <= last['step']]
    self.assertGreaterEqual(len(expected), 3)
    skips = {r['step'] for r in records if r['event'] == 'skip'}
    self.assertEqual(sorted(skips & set(range(last['step'] + 1))), expected)
    # The TensorBoard scalars too: every summary step up to the checkpoint (flushed before it).
    steps = {s for _, s, _ in _scalar_records(os.path.join(model_dir, 'tensorboard'), killed=True)}
    self.assertEmpty(set(range(5, last['step'] + 1, 5)) - steps)

  def test_a_clean_end_flushes_every_record(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    rng = np.random.RandomState(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 0.5)).repeat().batch(8)
    keras.utils.set_random_seed(0)
    delivered = []

    class Recording(stable_train.Trainer):

      def on_event(self, record):
        delivered.append((record, threading.get_ident()))

    trainer = Recording(
        model=keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)]),
        optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.MeanSquaredError(),
        model_dir=model_dir, steps_per_loop=5, checkpoint_every=10, summary_every=5,
        verbose=False, faults=faults_lib.Faults(feature_nan_batches=[3, 21, 36]))
    summary = trainer.fit(data, num_steps=40)
    self.assertEqual(summary['status'], 'completed')
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    # The run skipped: the doctor's diagnosis follows `done`, the last record.
    self.assertEqual([r['event'] for r in records[-2:]], ['done', 'diagnosis'])
    self.assertEqual([r['step'] for r in records if r['event'] == 'skip'], [4, 22, 37])
    self.assertEqual([r['step'] for r in records if r['event'] == 'checkpoint'],
                     [10, 20, 30, 40])
    # on_event saw every record of the file, in its order, on the thread that ran fit.
    self.assertEqual([r for r, _ in delivered], records)
    self.assertEqual({ident for _, ident in delivered}, {threading.get_ident()})
    # Every summary step's scalars are in the TensorBoard file, the last one included.
    scalars = _scalar_records(os.path.join(model_dir, 'tensorboard'))
    steps = [s for _, s, v in scalars if 'loss' in v]
    self.assertEqual(sorted(set(steps)), [4, 5, 10, 15, 20, 22, 25, 30, 35, 37, 40])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['global_step'], 40)


if __name__ == '__main__':
  tf.test.main()
