"""The chaos suite: the CLI run as a subprocess under injected faults (stable_train.faults) and
process-level mishaps. Each run completes, or stops cleanly with its documented exit code and one
line on stderr; counts match the injected faults; a rerun resumes at the right step with the same
next batch; no checkpoint on disk holds a non-finite value; nothing committed before a fault is
lost. Bounded: 15 CLI processes (each ~5 s of TensorFlow start-up), about 70 s on two shared
cores.
"""

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

pytestmark = pytest.mark.slow  # The whole file: CLI processes, kill -9 and reference runs.

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, 'scripts', 'train.py')
QUICKSTART = os.path.join(REPO, 'configs', 'quickstart.gin')
SMALL = ['mlp.hidden = (16,)', 'synthetic_regression.num_features = 32', 'mlp.input_dim = 32',
         'Trainer.checkpoint_every = 20', 'Trainer.steps_per_loop = 5', 'Trainer.log_every = 1000',
         'Trainer.summary_every = 1000']
# Bad data at batches 44 and 50 (stream indices: steps 45 and 51), a NaN loss at step 63, a NaN
# gradient at 70: the same plan in every run of a test, so the input pipeline matches on resume.
DATA_FAULTS = ['import stable_train.testing', 'Trainer.faults = @Faults()',
               'Faults.feature_nan_batches = [44]',
               'Faults.label_nan_batches = [50]', 'Faults.loss_nan_steps = [63]',
               'Faults.gradient_nan_steps = [70]',
               "Faults.gradient_variable = 'mlp/dense_0/kernel'"]
TIMEOUT = 300  # seconds, for any one process (one took over 120 on a loaded 2-core machine).


def _read_json(path):
  with open(path) as f:
    return json.load(f)


def _manifest(model_dir):
  path = os.path.join(model_dir, 'checkpoints', 'manifest.json')
  return _read_json(path)['checkpoints'] if os.path.exists(path) else []


def _events(model_dir, kind=None):
  records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
  return [r for r in records if kind is None or r['event'] == kind]


def _checkpoint_files(model_dir):
  """{name: sha256} of every file in checkpoints/ (manifest and TF's state file included)."""
  folder = os.path.join(model_dir, 'checkpoints')
  out = {}
  for name in sorted(os.listdir(folder)):
    path = os.path.join(folder, name)
    if os.path.isfile(path):
      with open(path, 'rb') as f:
        out[name] = hashlib.sha256(f.read()).hexdigest()
  return out


def _tensors(model_dir, entry):
  reader = tf.train.load_checkpoint(os.path.join(model_dir, 'checkpoints', entry['path']))
  return {n: reader.get_tensor(n) for n, d in reader.get_variable_to_dtype_map().items()
          if d != tf.variant and n != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def _catches_sigterm(pid):
  """Whether process `pid` has a handler for SIGTERM (Linux: SigCgt in /proc/<pid>/status)."""
  with open(f'/proc/{pid}/status') as f:
    caught = next(l for l in f if l.startswith('SigCgt:')).split()[1]
  return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


class ChaosTest(tf.test.TestCase):

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

  def _start(self, model_dir, params, gin_file=QUICKSTART):
    args = [sys.executable, SCRIPT, f'--gin_file={gin_file}', f'--model_dir={model_dir}'] + [
        f'--gin_param={p}' for p in params]
    # This checkout's package, whatever is installed; umask 027 so that file modes are checked.
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')
    logs = os.path.join(self.get_temp_dir(), f'proc{len(self._procs)}')
    out, err = open(logs + '.out', 'w+'), open(logs + '.err', 'w+')
    proc = subprocess.Popen(args, stdout=out, stderr=err, env=env, cwd=REPO,
                            preexec_fn=lambda: os.umask(0o027))
    self._procs.append((proc, out, err))
    return proc

  def _finish(self, proc, timeout=TIMEOUT):
    proc.wait(timeout=timeout)
    _, out, err = next(p for p in self._procs if p[0] is proc)
    out.seek(0)
    err.seek(0)
    return proc.returncode, out.read(), err.read()

  def _run(self, model_dir, params):
    return self._finish(self._start(model_dir, params))

  def _wait_for(self, proc, condition, what):
    deadline = time.monotonic() + TIMEOUT
    while not condition():
      if proc.poll() is not None:
        _, _, err = self._finish(proc)
        self.fail(f'the run ended (exit {proc.returncode}) before {what}:\n{err[-2000:]}')
      self.assertLess(time.monotonic(), deadline, f'no {what} in time')
      time.sleep(0.01)

  def _signal_twice_and_once_more(self, proc, sig):
    """Two signals 20 ms apart, and one more once the run has printed its outcome (it is then
    shutting down, when Python's own handlers are gone)."""
    proc.send_signal(sig)
    time.sleep(0.02)
    proc.send_signal(sig)
    _, _, err = next(p for p in self._procs if p[0] is proc)

    def printed():
      with open(err.name) as f:
        return 'stable_train:' in f.read()

    self._wait_for(proc, printed, 'its one line')
    if proc.poll() is None:
      proc.send_signal(sig)

  def _assert_one_line(self, code, err, expected_code, *texts):
    self.assertEqual(code, expected_code, err[-2000:])
    lines = [l for l in err.splitlines() if l.startswith('stable_train:')]
    self.assertLen(lines, 1, err[-2000:])
    for text in texts:
      self.assertIn(text, lines[0])
    self.assertNotIn('Traceback', err)
    return lines[0]

  def _assert_all_checkpoints_finite(self, model_dir):
    entries = _manifest(model_dir)
    self.assertNotEmpty(entries)
    for entry in entries:
      for name, value in _tensors(model_dir, entry).items():
        if value.dtype.kind == 'f':
          self.assertTrue(np.isfinite(value).all(), f'{entry["path"]}: {name}')

  def test_data_loss_and_gradient_faults_complete_with_matching_counts(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    params = SMALL + DATA_FAULTS + [
        'train.num_steps = 100', 'Faults.loss_spike_steps = [80]', 'Faults.loss_spike_factor = 1e6',
        'Trainer.policies = [@CheckNumerics(), @ValidateInputs(), @ClipByGlobalNorm(), '
        '@SkipNonFinite()]']
    code, out, err = self._run(model_dir, params)
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn('completed at step 100', out)
    summary = _read_json(os.path.join(model_dir, 'summary.json'))
    self.assertEqual(summary['skipped_steps'], 4)  # Steps 45, 51 (data), 63 (loss), 70 (gradient).
    self.assertEqual(summary['input_faults'], 2)
    self.assertEqual(summary['applied_steps'], 96)  # The finite spike at 80 is clipped, applied.
    injected = sorted((r['step'], r['kind']) for r in _events(model_dir, 'fault_injected'))
    self.assertEqual(injected, [(45, 'feature_nan'), (51, 'label_nan'), (63, 'loss_nan'),
                                (70, 'gradient_nan'), (80, 'loss_spike')])
    skips = {r['step']: r['fault'] for r in _events(model_dir, 'skip')}
    self.assertEqual(skips, {45: 'input', 51: 'input', 63: 'loss', 70: 'gradient'})
    self._assert_all_checkpoints_finite(model_dir)
    # Atomically written files get the mode the umask gives, like every other file (0640 here).
    for name in ('summary.json', 'operative_config.gin', 'checkpoints/manifest.json',
                 'events.jsonl'):
      self.assertEqual(os.stat(os.path.join(model_dir, name)).st_mode & 0o777, 0o640, name)

  def test_hard_exit_then_a_rerun_resumes_with_the_same_batches(self):
    model_dir = os.path.join(self.get_temp_dir(), 'crashed')
    reference_dir = os.path.join(self.get_temp_dir(), 'reference')
    params = SMALL + DATA_FAULTS + ['train.num_steps = 100']
    reference = self._start(reference_dir, params)
    code, _, err = self._run(model_dir, params + ['Faults.exit_step = 57'])
    self.assertEqual(code, 137, err[-2000:])
    self.assertEqual([e['step'] for e in _manifest(model_dir)], [20, 40])
    committed = _checkpoint_files(model_dir)
    self.assertEqual(_events(model_dir, 'fault_injected')[-1]['kind'], 'exit')
    # What a kill during a save leaves: TensorFlow's temp folder, never committed.
    orphan = os.path.join(model_dir, 'checkpoints', 'ckpt-3_temp')
    os.makedirs(orphan)
    with open(os.path.join(orphan, 'part-00000-of-00001.index'), 'w') as f:
      f.write('half')

    code, out, err = self._run(model_dir, params)  # The same command, without the exit.
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn('completed at step 100', out)
    self.assertFalse(os.path.exists(orphan))
    (resume,) = _events(model_dir, 'resume')
    self.assertEqual(resume['step'], 40)
    # The killed process's lock was found and taken over.
    (stale,) = _events(model_dir, 'lock_taken_over')
    self.assertIsInstance(stale['pid'], int)
    # The same batches after the resume: the bad ones at the same steps, skipped again.
    skips = [r['step'] for r in _events(model_dir, 'skip')]
    self.assertEqual(skips, [45, 51, 45, 51, 63, 70])  # First run to 57, then the rerun from 40.
    for name in ('ckpt-1.index', 'ckpt-2.index'):  # Committed before the crash: untouched.
      self.assertEqual(_checkpoint_files(model_dir)[name], committed[name])
    code, _, err = self._finish(reference)
    self.assertEqual(code, 0, err[-2000:])
    ours = _tensors(model_dir, _manifest(model_dir)[-1])
    theirs = _tensors(reference_dir, _manifest(reference_dir)[-1])
    self.assertEqual(sorted(ours), sorted(theirs))
    for name, value in ours.items():
      if name != 'save_counter/.ATTRIBUTES/VARIABLE_VALUE':
        np.testing.assert_allclose(value, theirs[name], rtol=1e-5, atol=1e-7, err_msg=name)
    self.assertEqual(_read_json(os.path.join(model_dir, 'summary.json'))['skipped_steps'], 4)
    self._assert_all_checkpoints_finite(model_dir)

  def test_busy_model_dir_double_signals_and_a_changed_batch_size(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    params = SMALL + ['train.num_steps = 100000']
    first = self._start(model_dir, params)
    self._wait_for(first, lambda: len(_manifest(model_dir)) >= 1, 'a checkpoint')
    # A second process on the same model_dir refuses at once, naming the first.
    code, _, err = self._run(model_dir, params)
    self._assert_one_line(code, err, 2, 'model_dir busy', f'pid {first.pid} on host')
    # Two SIGTERMs 20 ms apart (and a third while it exits): one clean stop, a checkpoint, 143.
    self._signal_twice_and_once_more(first, signal.SIGTERM)
    code, _, err = self._finish(first)
    self._assert_one_line(code, err, 143, 'interrupted by signal 15', 'checkpoint written')
    (stopped,) = _events(model_dir, 'interrupted')
    self.assertEqual(_manifest(model_dir)[-1]['step'], stopped['step'])
    stop_checkpoint = _manifest(model_dir)[-1]['path'] + '.index'
    before = _checkpoint_files(model_dir)

    # The rerun resumes there; two SIGINTs 20 ms apart: exit 130, the same clean way.
    saved = len(_events(model_dir, 'checkpoint'))
    second = self._start(model_dir, params)
    self._wait_for(second, lambda: len(_events(model_dir, 'checkpoint')) > saved,
                   'a checkpoint after the resume')
    self._signal_twice_and_once_more(second, signal.SIGINT)
    code, _, err = self._finish(second)
    self._assert_one_line(code, err, 130, 'interrupted by signal 2', 'checkpoint written')
    (resume,) = _events(model_dir, 'resume')
    self.assertEqual(resume['step'], stopped['step'])
    after = _checkpoint_files(model_dir)
    for name, digest in before.items():  # Nothing committed before was rewritten (retention
      if name.startswith('ckpt-') and name in after:  # may prune the oldest).
        self.assertEqual(after[name], digest, name)
    self.assertIn(stop_checkpoint, after)

    # A changed batch size: the checkpointed input pipeline differs; named, exit 2, nothing touched.
    before = _checkpoint_files(model_dir)
    code, _, err = self._run(model_dir, params + ['synthetic_regression.batch_size = 16'])
    self._assert_one_line(code, err, 2, 'input pipeline differs', 'batch size')
    self.assertEqual(_checkpoint_files(model_dir), before)

  def test_signals_during_start_up_and_a_class_for_an_instance(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    params = SMALL + ['train.num_steps = 100']
    for sig, delay in ((signal.SIGTERM, 0.0), (signal.SIGINT, 1.0)):
      proc = self._start(model_dir, params)
      # The CLI catches SIGTERM once its handlers are in (before TensorFlow is imported; before
      # that, nothing can catch it); the signal then lands in flag parsing or the TF import.
      self._wait_for(proc, lambda p=proc: _catches_sigterm(p.pid), 'signal handlers')
      time.sleep(delay)
      proc.send_signal(sig)
      code, _, err = self._finish(proc)
      self._assert_one_line(code, err, 128 + sig, f'signal {int(sig)} during start-up')
      self.assertEqual(_manifest(model_dir), [])
    code, _, err = self._run(model_dir, params + ['Trainer.optimizer = @keras.optimizers.Adam'])
    self._assert_one_line(code, err, 2, 'optimizer=Adam is a class; pass an instance')

  def test_full_disk_and_a_lost_manifest_never_cost_a_committed_checkpoint(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    params = SMALL + ['train.num_steps = 100', 'import stable_train.testing',
                      'Trainer.faults = @Faults()']
    code, _, err = self._run(model_dir, params + ['Faults.disk_full_step = 25'])
    self._assert_one_line(code, err, 1, 'could not write a checkpoint at step 40',
                          'No space left on device', 'resumes from ckpt-1 (step 20)')
    self.assertEqual([e['step'] for e in _manifest(model_dir)], [20])
    self.assertFalse([n for n in os.listdir(os.path.join(model_dir, 'checkpoints'))
                      if n.startswith('ckpt-2')])
    self.assertEqual(_read_json(os.path.join(model_dir, 'summary.json'))['status'], 'aborted')

    # The rerun resumes from step 20; at step 45 the manifest is deleted and the process dies.
    code, _, err = self._run(model_dir, params + ['Faults.delete_manifest_step = 45',
                                                  'Faults.exit_step = 45'])
    self.assertEqual(code, 137, err[-2000:])
    self.assertEqual(_events(model_dir, 'resume')[-1]['step'], 20)
    self.assertFalse(os.path.exists(os.path.join(model_dir, 'checkpoints', 'manifest.json')))
    before = _checkpoint_files(model_dir)
    # Step 40, committed before the manifest was lost (number 2 again: the failed write left none).
    self.assertIn('ckpt-2.index', before)
    code, _, err = self._run(model_dir, params)
    self._assert_one_line(code, err, 1, 'manifest.json is missing', 'ckpt-1, ckpt-2',
                          'restore it')
    self.assertEqual(_checkpoint_files(model_dir), before)  # Nothing deleted, nothing written.

    with open(os.path.join(model_dir, 'checkpoints', 'manifest.json'), 'w') as f:
      f.write('{"checkpoints": [{"number": 1, "step": 20')  # Truncated.
    before = _checkpoint_files(model_dir)
    code, _, err = self._run(model_dir, params)
    self._assert_one_line(code, err, 1, 'manifest.json is unreadable', 'restore it')
    self.assertEqual(_checkpoint_files(model_dir), before)



def _small_run(model_dir, *params, umask=None):
  """One small quickstart CLI run (the SMALL sizes) with extra gin params."""
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='2')
  args = [sys.executable, SCRIPT, f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}']
  args += [f'--gin_param={p}' for p in list(SMALL) + list(params)]
  pre = (lambda: os.umask(umask)) if umask is not None else None
  return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=REPO,
                        preexec_fn=pre)


class ChaosRegressionsTest(tf.test.TestCase):
  """Found by a break-it round: each failed before its fix."""

  def test_label_fault_on_integer_labels_is_one_line_exit_2(self):
    r = _small_run(os.path.join(self.get_temp_dir(), 'labels'), 'train.num_steps=5',
                   'import stable_train.testing', 'Trainer.faults=@Faults()', 'Faults.label_nan_batches=[0]',
                   'train.dataset_fn=@synthetic_classification',
                   'Trainer.loss=@sparse_softmax_cross_entropy', 'mlp.input_dim=64',
                   'mlp.outputs=10', 'synthetic_classification.num_features=64')
    self.assertNotIn('Traceback', r.stderr)
    self.assertEqual(r.returncode, 2, r.stderr[-500:])
    self.assertIn('label_nan_batches needs a floating-point label', r.stderr)

  def test_forensics_folder_honours_the_umask(self):
    model_dir = os.path.join(self.get_temp_dir(), 'umask')
    r = _small_run(model_dir, 'train.num_steps=10', 'import stable_train.testing',
                   'Trainer.faults=@Faults()', 'Faults.gradient_nan_steps=[5]', "Faults.gradient_variable='mlp/dense_0/kernel'",
                   'Trainer.policies=[@CheckNumerics(),@AdaptiveClip(),@SkipNonFinite(),@Forensics()]',
                   umask=0o022)
    self.assertEqual(r.returncode, 0, r.stderr[-500:])
    folder = os.path.join(model_dir, 'forensics', 'step_5')
    self.assertEqual(oct(os.stat(folder).st_mode & 0o777), oct(0o755))

  def test_rollback_gets_past_an_injected_loss_nan_burst(self):
    # A step fault fires once per process: the steps a rollback repeats do not fault again.
    model_dir = os.path.join(self.get_temp_dir(), 'burst')
    r = _small_run(model_dir, 'train.num_steps=120', 'import stable_train.testing',
                   'Trainer.faults=@Faults()',
                   'Faults.loss_nan_steps=[50,51,52,53]', 'SkipNonFinite.max_consecutive=2',
                   'Trainer.steps_per_loop=1',
                   'Trainer.policies=[@CheckNumerics(),@AdaptiveClip(),@SkipNonFinite(),@Rollback()]')
    self.assertEqual(r.returncode, 0, r.stderr[-500:])
    self.assertEqual(_read_json(os.path.join(model_dir, 'summary.json'))['rollbacks'], 1)
    # 50-52 escalate (3 in a row) and roll back; 53 had not run yet, so it fires once, later.
    injected = [e['step'] for e in _events(model_dir, 'fault_injected') if e['kind'] == 'loss_nan']
    self.assertEqual(injected, [50, 51, 52, 53])

if __name__ == '__main__':
  tf.test.main()
