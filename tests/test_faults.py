"""Process-level fault tests: the CLI run as a subprocess survives kill -9, SIGTERM, a corrupt
latest checkpoint, repeated divergence and a crash while a checkpoint is being written."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf
import pytest

from stable_train.runfiles import events

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'scripts', 'train.py')
QUICKSTART = os.path.join(REPO, 'configs', 'quickstart.gin')
# A tiny MLP; a step-dependent learning rate (so "same learning rate" is a real check) and a few
# NaN batches (so the skip counters are not trivially zero).
SMALL = ['mlp.hidden = (16,)', 'synthetic_regression.num_features = 32', 'mlp.input_dim = 32',
         'Trainer.checkpoint_every = 20', 'Trainer.steps_per_loop = 5', 'Trainer.log_every = 1000',
         'keras.optimizers.Adam.learning_rate = @keras.optimizers.schedules.ExponentialDecay()',
         'ExponentialDecay.initial_learning_rate = 1e-3', 'ExponentialDecay.decay_steps = 500',
         'ExponentialDecay.decay_rate = 0.5']
POISONED = SMALL + ['synthetic_regression.poison_batches = [130, 700, 701]']
TIMEOUT = 120  # seconds, for any one process (each imports TensorFlow: ~3-5 s).

# Runs the CLI in this process with a fault injected into checkpoint writing:
#   die_before_commit: the second save writes its files completely, then the process dies before
#     the manifest (the commit record) is written.
#   die_mid_write: the second save leaves its data file cut in half, then the process dies.
CRASH_RUNNER = r'''
import os, sys
mode = sys.argv.pop(1)
import tensorflow as tf
from stable_train.app import cli
from stable_train.runfiles import checkpointing
calls = []
if mode == 'die_before_commit':
  write_manifest = checkpointing.CheckpointKeeper._write_manifest
  def dying_write_manifest(self):
    if not self.entries:  # The empty manifest a fresh directory gets at start: not a save.
      return write_manifest(self)
    calls.append(None)
    if len(calls) == 2:
      os._exit(137)
    write_manifest(self)
  checkpointing.CheckpointKeeper._write_manifest = dying_write_manifest
elif mode == 'die_mid_write':
  write_files = checkpointing.CheckpointKeeper._write_files  # Where the keeper writes the files.
  def dying_write_files(self, number):
    path = write_files(self, number)
    calls.append(None)
    if len(calls) == 2:
      for name in tf.io.gfile.glob(path + '.data-*'):
        os.truncate(name, os.path.getsize(name) // 2)
      os._exit(137)
    return path
  checkpointing.CheckpointKeeper._write_files = dying_write_files
else:
  raise SystemExit('unknown mode ' + mode)
cli.run()
'''


def _read_json(path):
  with open(path) as f:
    return json.load(f)


def _manifest(model_dir):
  path = os.path.join(model_dir, 'checkpoints', 'manifest.json')
  return _read_json(path)['checkpoints'] if os.path.exists(path) else []


def _events(model_dir, kind=None):
  records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
  return [r for r in records if kind is None or r['event'] == kind]


def _checkpoint_tensors(model_dir, entry):
  """Every saved tensor of a checkpoint but its save counter and the iterator state (a variant,
  unreadable from Python), keyed by checkpoint name."""
  reader = tf.train.load_checkpoint(os.path.join(model_dir, 'checkpoints', entry['path']))
  dtypes = reader.get_variable_to_dtype_map()
  return {n: reader.get_tensor(n) for n, dtype in dtypes.items()
          if dtype != tf.variant and
          n not in ('_CHECKPOINTABLE_OBJECT_GRAPH', 'save_counter/.ATTRIBUTES/VARIABLE_VALUE')}


def _scalars(paths, tag):
  """{step: value} of one TensorBoard scalar read from the given event files."""
  values = {}
  for path in paths:
    for record in tf.compat.v1.train.summary_iterator(path):
      for value in record.summary.value:
        if value.tag == tag:
          values[record.step] = float(tf.make_ndarray(value.tensor))
  return values


def _tensorboard_files(model_dir):
  folder = os.path.join(model_dir, 'tensorboard')
  return {os.path.join(folder, n) for n in os.listdir(folder)} if os.path.isdir(folder) else set()


def _file_states(model_dir, entry):
  """{file name: (sha256, mtime_ns)} of one checkpoint's files."""
  states = {}
  for name in tf.io.gfile.glob(os.path.join(model_dir, 'checkpoints', entry['path']) + '.*'):
    with open(name, 'rb') as f:
      states[os.path.basename(name)] = (hashlib.sha256(f.read()).hexdigest(),
                                        os.stat(name).st_mtime_ns)
  return states


class FaultTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self._procs = []
    self.addCleanup(self._kill_leftovers)

  def _kill_leftovers(self):
    for proc, out, err in self._procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
      out.close()
      err.close()

  def _start(self, model_dir, params, *, runner=None):
    """Starts the CLI on `model_dir` (or the crash runner in mode `runner`); returns the Popen."""
    head = [sys.executable, SCRIPT] if runner is None else [
        sys.executable, '-c', CRASH_RUNNER, runner]
    args = head + [f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}'] + [
        f'--gin_param={p}' for p in params]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')
    logs = os.path.join(self.get_temp_dir(), f'proc{len(self._procs)}')
    out, err = open(logs + '.out', 'w+'), open(logs + '.err', 'w+')
    proc = subprocess.Popen(args, stdout=out, stderr=err, env=env, cwd=REPO)
    self._procs.append((proc, out, err))
    return proc

  def _finish(self, proc, timeout=TIMEOUT):
    """Waits for `proc`; returns (exit code, stdout, stderr)."""
    proc.wait(timeout=timeout)
    _, out, err = next(p for p in self._procs if p[0] is proc)
    out.seek(0)
    err.seek(0)
    return proc.returncode, out.read(), err.read()

  def _run(self, model_dir, params, **kwargs):
    return self._finish(self._start(model_dir, params, **kwargs))

  def _wait_for_checkpoints(self, proc, model_dir, count):
    """Polls the manifest until it lists `count` checkpoints; fails if `proc` ends first."""
    deadline = time.monotonic() + TIMEOUT
    while len(_manifest(model_dir)) < count:
      if proc.poll() is not None:
        _, out, err = self._finish(proc)
        self.fail(f'the run ended (exit {proc.returncode}) before {count} checkpoints:\n'
                  f'{err[-2000:]}')
      self.assertLess(time.monotonic(), deadline, 'no checkpoint in time')
      time.sleep(0.01)

  def _stable_train_lines(self, stderr):
    return [l for l in stderr.splitlines() if l.startswith('stable_train:')]

  def _assert_same_state(self, model_dir, reference_dir):
    """The newest checkpoints of both runs hold the same weights, optimizer slots, step counters,
    data position (iterator) and learning-rate scale."""
    ours = _checkpoint_tensors(model_dir, _manifest(model_dir)[-1])
    theirs = _checkpoint_tensors(reference_dir, _manifest(reference_dir)[-1])
    self.assertEqual(sorted(ours), sorted(theirs))
    self.assertIn('optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE', ours)
    for name, value in ours.items():
      if value.dtype.kind in 'fc':
        np.testing.assert_allclose(value, theirs[name], rtol=1e-5, atol=1e-7, err_msg=name)
      else:
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)

  @pytest.mark.slow
  def test_kill_9_resumes_with_the_same_batches_counters_and_learning_rate(self):
    num_steps = 2500  # A few seconds of training: the kill lands long before the end.
    params = POISONED + [f'train.num_steps = {num_steps}']
    model_dir = os.path.join(self.get_temp_dir(), 'killed')
    reference_dir = os.path.join(self.get_temp_dir(), 'reference')
    victim = self._start(model_dir, params)
    self._wait_for_checkpoints(victim, model_dir, 2)
    victim.send_signal(signal.SIGKILL)
    code, _, _ = self._finish(victim)
    self.assertEqual(code, -signal.SIGKILL)
    last = _manifest(model_dir)[-1]
    self.assertLess(last['step'], num_steps)
    self.assertFalse(_events(model_dir, 'done'))
    old_tensorboard = _tensorboard_files(model_dir)

    # The reference runs the same command uninterrupted, alongside the resumed run.
    reference = self._start(reference_dir, params)
    code, out, err = self._run(model_dir, params)
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn(f'completed at step {num_steps}', out)
    code, _, err = self._finish(reference)
    self.assertEqual(code, 0, err[-2000:])

    resumes = _events(model_dir, 'resume')
    self.assertLen(resumes, 1)
    self.assertEqual(resumes[0]['step'], last['step'])
    self.assertEqual(resumes[0]['checkpoint'], last['path'])
    summary = _read_json(os.path.join(model_dir, 'summary.json'))
    reference_summary = _read_json(os.path.join(reference_dir, 'summary.json'))
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['global_step'], num_steps)
    self.assertEqual(summary['steps_this_run'], num_steps - last['step'])
    self.assertEqual(summary['applied_steps'] + summary['skipped_steps'], num_steps)
    self.assertEqual(summary['skipped_steps'], 3)  # The poisoned batches, each skipped once.
    for key in ('applied_steps', 'skipped_steps', 'input_faults'):
      self.assertEqual(summary[key], reference_summary[key], key)
    self.assertAllClose(summary['final_loss'], reference_summary['final_loss'], rtol=1e-5)
    self._assert_same_state(model_dir, reference_dir)

    # Step by step after the resume: the same losses (the same batches) and learning rates.
    new_tensorboard = sorted(_tensorboard_files(model_dir) - old_tensorboard)
    reference_tensorboard = sorted(_tensorboard_files(reference_dir))
    for tag in ('loss', 'learning_rate', 'skipped_steps'):
      resumed = _scalars(new_tensorboard, tag)
      expected = {s: v for s, v in _scalars(reference_tensorboard, tag).items() if s > last['step']}
      self.assertEqual(sorted(resumed), sorted(expected), tag)
      self.assertGreater(len(resumed), 100, tag)
      np.testing.assert_allclose([resumed[s] for s in sorted(resumed)],
                                 [expected[s] for s in sorted(expected)], rtol=1e-5, err_msg=tag)
    learning_rates = _scalars(new_tensorboard, 'learning_rate')
    self.assertLess(learning_rates[num_steps], learning_rates[min(learning_rates)])  # It decays.

  @pytest.mark.slow
  def test_sigterm_writes_a_checkpoint_exits_143_and_a_rerun_continues(self):
    num_steps = 2000
    params = SMALL + [f'train.num_steps = {num_steps}']
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    victim = self._start(model_dir, params)
    self._wait_for_checkpoints(victim, model_dir, 1)
    victim.send_signal(signal.SIGTERM)
    code, _, err = self._finish(victim)
    self.assertEqual(code, 128 + signal.SIGTERM, err[-2000:])
    lines = self._stable_train_lines(err)
    self.assertLen(lines, 1, err)
    self.assertIn(f'signal {int(signal.SIGTERM)}', lines[0])
    self.assertNotIn('Traceback', err)

    interrupted = _events(model_dir, 'interrupted')
    self.assertLen(interrupted, 1)
    step = interrupted[0]['step']
    self.assertBetween(step, 1, num_steps - 1)
    last = _manifest(model_dir)[-1]
    self.assertEqual(last['step'], step)
    checkpoint = _events(model_dir, 'checkpoint')[-1]
    self.assertEqual(checkpoint['step'], step)
    self.assertEqual(checkpoint['reason'], f'signal {int(signal.SIGTERM)}')
    summary = _read_json(os.path.join(model_dir, 'summary.json'))
    self.assertEqual(summary['status'], 'interrupted')
    self.assertEqual(summary['global_step'], step)

    code, out, err = self._run(model_dir, params)
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn(f'completed at step {num_steps}', out)
    resumes = _events(model_dir, 'resume')
    self.assertLen(resumes, 1)
    self.assertEqual(resumes[0]['step'], step)
    self.assertEqual(resumes[0]['checkpoint'], last['path'])
    summary = _read_json(os.path.join(model_dir, 'summary.json'))
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['global_step'], num_steps)
    self.assertEqual(summary['applied_steps'], num_steps)
    self.assertEqual(summary['steps_this_run'], num_steps - step)

  @pytest.mark.slow
  def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(self):
    params = POISONED + ['train.num_steps = 100']
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    reference_dir = os.path.join(self.get_temp_dir(), 'reference')
    reference = self._start(reference_dir, POISONED + ['train.num_steps = 140'])
    code, _, err = self._run(model_dir, params)
    self.assertEqual(code, 0, err[-2000:])
    entries = _manifest(model_dir)
    self.assertEqual([e['step'] for e in entries], [20, 40, 60, 80, 100])
    newest, previous = entries[-1], entries[-2]
    (data,) = tf.io.gfile.glob(os.path.join(model_dir, 'checkpoints', newest['path']) + '.data-*')
    os.truncate(data, os.path.getsize(data) // 2)

    code, out, err = self._run(model_dir, POISONED + ['train.num_steps = 140'])
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn('completed at step 140', out)
    corrupt = _events(model_dir, 'checkpoint_corrupt')
    self.assertLen(corrupt, 1)
    self.assertEqual(corrupt[0]['checkpoint'], newest['path'])
    self.assertEqual(corrupt[0]['step'], newest['step'])
    resumes = _events(model_dir, 'resume')
    self.assertLen(resumes, 1)
    self.assertEqual(resumes[0]['step'], previous['step'])
    self.assertEqual(resumes[0]['checkpoint'], previous['path'])
    kinds = [r['event'] for r in _events(model_dir)]
    self.assertLess(kinds.index('checkpoint_corrupt'), kinds.index('resume'))
    summary = _read_json(os.path.join(model_dir, 'summary.json'))
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['global_step'], 140)
    self.assertEqual(summary['steps_this_run'], 140 - previous['step'])
    # Nothing of the half-read corrupt checkpoint survives: the result equals an unbroken run.
    code, _, err = self._finish(reference)
    self.assertEqual(code, 0, err[-2000:])
    self._assert_same_state(model_dir, reference_dir)

  @pytest.mark.slow
  def test_repeated_divergence_rolls_back_a_bounded_number_of_times_then_aborts(self):
    params = SMALL + [
        'Trainer.policies = [@CheckNumerics(), @ClipByGlobalNorm(), @SkipNonFinite(), @Rollback()]',
        'SkipNonFinite.max_consecutive = 2', 'Rollback.max_rollbacks = 3',
        'Rollback.skip_batches = 0']
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    code, _, err = self._run(model_dir, params + ['train.num_steps = 100'])
    self.assertEqual(code, 0, err[-2000:])
    before = _manifest(model_dir)
    self.assertEqual([e['step'] for e in before], [20, 40, 60, 80, 100])
    self.assertTrue(all(e['good'] for e in before))
    files_before = {e['path']: _file_states(model_dir, e) for e in before}

    # From batch 100 on every batch is NaN: each rollback meets NaN again.
    poison = list(range(100, 300))
    code, _, err = self._run(model_dir, params + [
        'train.num_steps = 300', f'synthetic_regression.poison_batches = {poison}'])
    self.assertEqual(code, 1, err[-2000:])
    lines = self._stable_train_lines(err)
    self.assertLen(lines, 1, err)
    self.assertIn('rollback limit reached (3 of 3)', lines[0])
    self.assertNotIn('Traceback', err)

    records = _events(model_dir)
    start = max(i for i, r in enumerate(records) if r['event'] == 'resume')
    kinds = [r['event'] for r in records[start:] if r['event'] in ('rollback', 'abort', 'done')]
    self.assertEqual(kinds, ['rollback'] * 3 + ['abort'])
    rollbacks = [r for r in records[start:] if r['event'] == 'rollback']
    self.assertEqual([r['rollback'] for r in rollbacks], [1, 2, 3])
    # Each repeat of the divergence steps further back, to an older good checkpoint.
    self.assertEqual([r['to_step'] for r in rollbacks], [100, 80, 60])
    self.assertEqual([r['lr_scale'] for r in rollbacks], [0.5, 0.25, 0.125])
    summary = _read_json(os.path.join(model_dir, 'summary.json'))
    self.assertEqual(summary['status'], 'aborted')
    self.assertEqual(summary['rollbacks'], 3)
    self.assertIn('rollback limit reached', summary['reason'])

    after = _manifest(model_dir)
    good = [e for e in after if e['good']]
    self.assertNotEmpty(good)
    for entry in good:  # Still good means untouched: same bytes, not even rewritten.
      self.assertIn(entry['path'], files_before)
      self.assertEqual(_file_states(model_dir, entry), files_before[entry['path']], entry)
    self.assertIn(60, [e['step'] for e in good])  # The last rollback's target is still a target.
    # No checkpoint was written from NaN state during the bad stretch.
    self.assertEqual([e['path'] for e in after], [e['path'] for e in before])

  def _crash_while_saving(self, mode, extra=()):
    params = POISONED + ['train.num_steps = 200'] + list(extra)
    model_dir = os.path.join(self.get_temp_dir(), mode)
    reference_dir = os.path.join(self.get_temp_dir(), mode + '_reference')
    reference = self._start(reference_dir, params)
    code, _, err = self._run(model_dir, params, runner=mode)
    self.assertEqual(code, 137, err[-2000:])
    # The first checkpoint is committed; the second one's files are on disk but not listed.
    committed = _manifest(model_dir)
    self.assertEqual([e['step'] for e in committed], [20])
    half_written = 'ckpt-2'
    self.assertNotEqual(committed[0]['path'], half_written)
    prefix = os.path.join(model_dir, 'checkpoints', half_written)
    self.assertTrue(tf.io.gfile.glob(prefix + '.data-*'))
    self.assertTrue(os.path.exists(prefix + '.index'))

    code, out, err = self._run(model_dir, params)
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn('completed at step 200', out)
    resumes = _events(model_dir, 'resume')
    self.assertLen(resumes, 1)
    self.assertEqual(resumes[0]['step'], 20)
    self.assertEqual(resumes[0]['checkpoint'], committed[0]['path'])
    self.assertFalse(_events(model_dir, 'checkpoint_corrupt'))  # Never even tried.
    self.assertNotIn(half_written, [e['path'] for e in _manifest(model_dir)])
    code, _, err = self._finish(reference)
    self.assertEqual(code, 0, err[-2000:])
    self._assert_same_state(model_dir, reference_dir)

  @pytest.mark.slow
  def test_crash_before_the_commit_leaves_no_loadable_checkpoint(self):
    self._crash_while_saving('die_before_commit')

  @pytest.mark.slow
  def test_crash_mid_write_leaves_no_loadable_checkpoint(self):
    self._crash_while_saving('die_mid_write')

  @pytest.mark.slow
  def test_crash_before_the_commit_keeps_the_only_checkpoint(self):
    # With room for one checkpoint, the old one's files must outlive the new one's commit.
    self._crash_while_saving('die_before_commit', ['Trainer.max_checkpoints = 1',
                                                   'Trainer.keep_good_checkpoints = 1'])


if __name__ == '__main__':
  tf.test.main()
