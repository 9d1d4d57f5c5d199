"""Tests for stable_train.app.cli: the gin entry point end to end, exit codes and one-line errors."""

import contextlib
import errno
import io
import json
import os
import signal
import subprocess
import sys
from unittest import mock

from absl import flags
from absl.testing import flagsaver
import tensorflow as tf
import pytest

from stable_train.app import cli
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events
from stable_train.runtime import signals

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(REPO, 'configs', 'quickstart.gin')
SMALL = ["mlp.hidden = (16,)", 'synthetic_regression.num_features = 32', 'mlp.input_dim = 32',
         'train.num_steps = 30', 'Trainer.log_every = 10', 'Trainer.checkpoint_every = 10']
# Evaluation data for SMALL (another seed's rows), one batch per evaluation.
EVAL = ['train.eval_dataset_fn = @eval/synthetic_regression', 'train.eval_every = 10',
        'train.eval_steps = 1', 'eval/synthetic_regression.seed = 7']


def run_main(*argv):
  """Runs cli.main in-process with the given flags; returns (exit code, stderr)."""
  err = io.StringIO()
  with flagsaver.flagsaver(), contextlib.redirect_stderr(err):
    flags.FLAGS.unparse_flags()
    remaining = flags.FLAGS(['train.py', *argv])
    code = cli.main(remaining)
  return code, err.getvalue()


class CliTest(tf.test.TestCase):

  def test_help_lists_the_flags_and_exits_0(self):
    for command in ([os.path.join(REPO, 'scripts', 'train.py')], ['-m', 'stable_train.app.cli']):
      proc = subprocess.run([sys.executable, *command, '--help'], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO)
      self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
      for flag in ('--gin_file: Gin config file(s)', '--gin_param: Gin binding(s)',
                   '--model_dir: Directory for checkpoints'):
        self.assertIn(flag, proc.stdout)

  @pytest.mark.slow
  def test_train_seed_makes_a_rerun_of_the_operative_config_reproduce_the_summary(self):
    unseeded = SMALL + ['mlp.seed = None']  # The model factory does not seed itself.

    def final_loss(model_dir, *args):
      code, err = run_main(f'--model_dir={model_dir}', *args)
      self.assertEqual(code, 0, err)
      with open(os.path.join(model_dir, 'summary.json')) as f:
        return json.load(f)['final_loss']

    first_dir = os.path.join(self.get_temp_dir(), 'first')
    first = final_loss(first_dir, f'--gin_file={QUICKSTART}',
                       *[f'--gin_param={p}' for p in unseeded + ['train.seed = 3']])
    operative = os.path.join(first_dir, 'operative_config.gin')
    with open(operative) as f:
      self.assertIn('train.seed = 3', f.read())
    rerun = final_loss(os.path.join(self.get_temp_dir(), 'rerun'), f'--gin_file={operative}')
    self.assertEqual(rerun, first)
    other = final_loss(os.path.join(self.get_temp_dir(), 'other'), f'--gin_file={QUICKSTART}',
                       *[f'--gin_param={p}' for p in unseeded + ['train.seed = 4']])
    self.assertNotEqual(other, first)  # The seed, not the model factory, decided the weights.

  def test_bad_export_format_or_seed_exits_2(self):
    for param, text in (("train.export_format = 'onnx'", "export_format='onnx'"),
                        ("train.export_checkpoint = 'worst'", "export_checkpoint='worst'"),
                        (['Trainer.policies = [@SkipNonFinite(), @EarlyStopping()]',
                          'EarlyStopping.patience = 0'], 'EarlyStopping: patience=0'),
                        (['Trainer.policies = [@SkipNonFinite(), @EarlyStopping()]'],
                         'EarlyStopping(\'eval_loss\') acts on evaluations, but fit has no '
                         'eval_dataset'),
                        ('train.seed = -1', 'seed')):
      params = param if isinstance(param, list) else [param]
      code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={self.get_temp_dir()}',
                           *[f'--gin_param={p}' for p in SMALL + params])
      self.assertEqual(code, 2, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertIn(text, err)

  @pytest.mark.slow
  def test_quickstart_end_to_end_in_a_subprocess(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    args = [sys.executable, os.path.join(REPO, 'scripts', 'train.py'), f'--gin_file={QUICKSTART}',
            f'--model_dir={model_dir}'] + [f'--gin_param={p}' for p in SMALL]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn('completed at step 30', proc.stdout)
    self.assertIn('steps/s', proc.stderr)  # Progress lines.
    for name in ('operative_config.gin', 'events.jsonl', 'summary.json'):
      self.assertTrue(os.path.exists(os.path.join(model_dir, name)), name)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['global_step'], 30)
    kinds = [e['event'] for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))]
    self.assertEqual(kinds[0], 'start')
    self.assertEqual(kinds[-1], 'done')
    self.assertEqual(kinds.count('checkpoint'), 3)
    tb = os.listdir(os.path.join(model_dir, 'tensorboard'))
    self.assertTrue(any(n.startswith('events.out.tfevents') for n in tb))
    with open(os.path.join(model_dir, 'operative_config.gin')) as f:
      operative = f.read()
    self.assertIn('train.num_steps = 30', operative)
    self.assertIn('AdaptiveClip.z_threshold = 4.0', operative)

  @pytest.mark.slow
  def test_scalars_are_readable(self):
    model_dir = self.get_temp_dir()
    code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
                         *[f'--gin_param={p}' for p in SMALL])
    self.assertEqual(code, 0, err)
    names = set()
    tb = os.path.join(model_dir, 'tensorboard')
    for name in os.listdir(tb):
      for record in tf.compat.v1.train.summary_iterator(os.path.join(tb, name)):
        for value in record.summary.value:
          names.add(value.tag)
    self.assertTrue({'loss', 'grad_norm', 'grad_norm_clipped', 'learning_rate',
                     'skipped_steps'} <= names, names)

  @pytest.mark.slow
  def test_bad_input_exits_2_with_one_line(self):
    model_dir = self.get_temp_dir()
    bad_gin = os.path.join(self.get_temp_dir(), 'bad.gin')
    with open(bad_gin, 'w') as f:
      f.write('train.num_steps = = 3\n')
    cases = [
        (['--gin_file=/nonexistent/x.gin'], 'gin file not found'),
        ([f'--gin_file={bad_gin}'], 'bad gin configuration'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=NoSuchThing.x = 1'], 'NoSuchThing'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=Trainer.no_such_arg = 1'], 'no_such_arg'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=AdaptiveClip.max_norm = -1.0'],
         'max_norm=-1.0'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=Trainer.steps_per_loop = 0'], 'steps_per_loop'),
        (['--gin_param=train.num_steps = 3'], 'dataset_fn'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=train.num_steps = 0'], 'train: num_steps=0'),
        # A model that does not fit the data: Keras raises while the step is traced.
        ([f'--gin_file={QUICKSTART}', '--gin_param=mlp.input_dim = 10'], 'incompatible'),
        # gin passes the class when `()` is left out.
        ([f'--gin_file={QUICKSTART}', '--gin_param=Trainer.optimizer = @keras.optimizers.Adam'],
         'optimizer=Adam is a class; pass an instance'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=Trainer.policies = @SkipNonFinite()'],
         'must be a list'),
        ([f'--gin_file={QUICKSTART}', '--gin_param=train.num_steps = 5',
          '--gin_param=synthetic_regression.num_examples = 10',
          '--gin_param=synthetic_regression.repeat = False'], 'dataset is empty'),
    ]
    for argv, text in cases:
      code, err = run_main(*argv, f'--model_dir={model_dir}')
      self.assertEqual(code, 2, (argv, err))
      self.assertIn(text, err, argv)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertNotIn('Traceback', err)

  @pytest.mark.slow
  def test_early_stopping_exits_0_and_exports_the_best_checkpoint(self):
    model_dir = self.get_temp_dir() + '/early'
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      code, err = run_main(
          f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
          *[f'--gin_param={p}' for p in SMALL + EVAL + [
              'Trainer.policies = [@CheckNumerics(), @AdaptiveClip(), @SkipNonFinite(), '
              '@EarlyStopping()]',
              'EarlyStopping.patience = 1',
              'EarlyStopping.min_delta = 1e9',  # Nothing improves after the first evaluation.
              "train.export_format = 'keras'", "train.export_checkpoint = 'best'"]])
    self.assertEqual(code, 0, err)
    reason = ('early stopping: eval_loss did not improve by more than 1e+09 for 1 evaluations; '
              'best')
    self.assertIn(f'stable_train: {reason}', out.getvalue())
    self.assertIn('stable_train: exported ' + os.path.join(model_dir, 'export', 'model.keras')
                  + ' from checkpoint best (step 10)', out.getvalue())
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['global_step']), ('stopped_early', 20))
    self.assertTrue(summary['reason'].startswith(reason))
    self.assertTrue(summary['reason'].endswith('at step 10'))
    with open(os.path.join(model_dir, 'checkpoints', 'manifest.json')) as f:
      marks = [(e['step'], e['best']) for e in json.load(f)['checkpoints']]
    self.assertEqual(marks, [(10, True), (20, False)])

  @pytest.mark.slow
  def test_num_epochs(self):
    model_dir = self.get_temp_dir() + '/epochs'
    code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
                         *[f'--gin_param={p}' for p in SMALL + [
                             'train.num_steps = None', 'train.num_epochs = 2',
                             'synthetic_regression.num_examples = 96',  # 3 batches of 32.
                             'synthetic_regression.repeat = False']])
    self.assertEqual(code, 0, err)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['global_step'], summary['epoch'],
                      summary['steps_per_epoch']), ('completed', 6, 2, 3))
    code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}-both',
                         *[f'--gin_param={p}' for p in SMALL + ['train.num_epochs = 2']])
    self.assertEqual(code, 2, err)
    self.assertEqual(err.strip().splitlines(), [
        'stable_train: configuration error: train.num_steps=30 and train.num_epochs=2 are both '
        'set; keep one.'])

  @pytest.mark.slow
  def test_exhausted_dataset_exits_0_with_a_warning_line(self):
    model_dir = self.get_temp_dir() + '/exhausted'
    code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
                         *[f'--gin_param={p}' for p in SMALL],
                         '--gin_param=synthetic_regression.num_examples = 160',
                         '--gin_param=synthetic_regression.repeat = False')
    self.assertEqual(code, 0, err)
    warnings = [l for l in err.splitlines() if l.startswith('stable_train: warning:')]
    self.assertEqual(warnings, ['stable_train: warning: dataset exhausted at step 5 of 30; '
                                'repeat the dataset (or set train.num_epochs), or lower '
                                'train.num_steps.'])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['global_step'], summary['reason']),
                     ('data_exhausted', 5, 'dataset exhausted at step 5 of 30'))
    kinds = [e['event'] for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))]
    self.assertEqual(kinds[-2:], ['checkpoint', 'done'])  # The end checkpoint, as on completion.

  def test_model_dir_that_is_a_file(self):
    path = os.path.join(self.get_temp_dir(), 'a_file')
    with open(path, 'w') as f:
      f.write('x')
    code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={path}')
    self.assertEqual(code, 2, err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)
    self.assertIn('cannot use --model_dir', err)

  def test_unwritable_model_dir_exits_2_with_one_line(self):
    for path in ('/proc/sys', '/proc/no_such_dir'):  # Not writable even by root.
      code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={path}')
      self.assertEqual(code, 2, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertIn(f"cannot use --model_dir='{path}'", err)

  def test_full_disk_at_start_exits_1_with_one_line(self):
    model_dir = self.get_temp_dir()
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                   os.path.join(model_dir, 'operative_config.gin'))
    with mock.patch.object(events, 'write_atomic', side_effect=full):
      code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
                           *[f'--gin_param={p}' for p in SMALL])
    self.assertEqual(code, 1, err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)
    self.assertIn('No space left on device', err)
    self.assertIn('operative_config.gin', err)
    self.assertNotIn('Traceback', err)

  @pytest.mark.slow
  def test_a_full_disk_inside_a_checkpoint_write_is_named_in_the_stop_line(self):
    model_dir = self.get_temp_dir() + '/full'
    full = tf.errors.ResourceExhaustedError(None, None, (  # TensorFlow's words (test_errors.py).
        'Graph execution error:\n\nDetected at node SaveV2 defined at (most recent call last):'
        f'\n{model_dir}/checkpoints/ckpt-1_temp/part-00000-of-00001.data-00000-of-00001.t1; '
        'No space left on device\n\t [[{{node SaveV2}}]]\n [Op:__inference_write_31]'))
    with mock.patch.object(checkpointing.CheckpointKeeper, '_write_files', side_effect=full):
      code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
                           *[f'--gin_param={p}' for p in SMALL])
    self.assertEqual(code, 1, err)
    self.assertEqual(err.strip().splitlines(), [
        'stable_train: checkpoint error: could not write a checkpoint at step 10: No space left '
        f'on device: {model_dir}/checkpoints/ckpt-1_temp/part-00000-of-00001.data-00000-of-00001'
        '.t1; free space (or fix the directory) and rerun the same command: it resumes from '
        'step 0.'])
    failed = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
              if e['event'] in ('checkpoint_failed', 'abort')]
    self.assertEqual([e['event'] for e in failed], ['checkpoint_failed', 'abort'])
    self.assertStartsWith(failed[0]['error'], 'No space left on device: ')
    self.assertIn('No space left on device', failed[1]['reason'])

  def test_missing_model_dir_and_unknown_flag_in_a_subprocess(self):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')
    script = os.path.join(REPO, 'scripts', 'train.py')
    for argv, text in (([f'--gin_file={QUICKSTART}'], '--model_dir'),
                       (['--no_such_flag=1'], 'no_such_flag')):
      proc = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True,
                            timeout=120, env=env)
      self.assertEqual(proc.returncode, 2, proc.stderr)
      lines = [l for l in proc.stderr.strip().splitlines() if l.startswith('stable_train:')]
      self.assertEqual(len(lines), 1, proc.stderr)
      self.assertIn(text, lines[0])

  @pytest.mark.slow
  def test_a_diverged_run_exits_1_naming_the_last_good_checkpoint_and_the_cause(self):
    # 30 healthy steps (checkpoint ckpt-3 at step 30), then the same run resumed at a rate far
    # too high: its own checkpoints, written while the loss is diverging, are not good.
    model_dir = self.get_temp_dir()
    common = [f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}'] + [
        f'--gin_param={p}' for p in SMALL]
    code, err = run_main(*common)
    self.assertEqual(code, 0, err)
    code, err = run_main(*common, '--gin_param=train.num_steps = 150',
                         '--gin_param=keras.optimizers.Adam.learning_rate = 10.0')
    self.assertEqual(code, 1, err)
    line, = [l for l in err.splitlines() if l.startswith('stable_train: diverged:')]
    self.assertIn('the last good checkpoint, ckpt-3 (step 30), is intact', line)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual(summary['status'], 'diverged')
    self.assertEqual(summary['last_good_checkpoint'], {'checkpoint': 'ckpt-3', 'step': 30})
    self.assertEqual(summary['diagnosis']['cause'], 'learning_rate')

  @pytest.mark.slow
  def test_abort_exits_1_and_keeps_checkpoints(self):
    model_dir = self.get_temp_dir()
    common = [f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}'] + [
        f'--gin_param={p}' for p in SMALL]
    code, err = run_main(*common)
    self.assertEqual(code, 0, err)
    manifest = os.path.join(model_dir, 'checkpoints', 'manifest.json')
    with open(manifest) as f:
      before = f.read()
    code, err = run_main(*common, '--gin_param=train.num_steps = 60',
                         f'--gin_param=synthetic_regression.poison_batches = {list(range(30, 60))}',
                         '--gin_param=SkipNonFinite.max_consecutive = 3')
    self.assertEqual(code, 1, err)
    self.assertIn('aborted', err)
    self.assertIn('consecutive', err)
    with open(manifest) as f:
      self.assertEqual(f.read(), before)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['status'], 'aborted')


  @pytest.mark.slow
  def test_frequent_bad_batches_still_export_and_the_advice_names_the_binding(self):
    model_dir = self.get_temp_dir() + '/bad_batches'
    common = [f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}'] + [
        f'--gin_param={p}' for p in SMALL + [
            'Trainer.policies = [@ValidateInputs(), @CheckNumerics(), @AdaptiveClip(), '
            '@SkipNonFinite()]', 'synthetic_regression.poison_batches = [2, 9, 19, 29]',
            "train.export_format = 'keras'"]]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      code, err = run_main(*common)
    self.assertEqual(code, 0, err)  # The bad batches were skipped; every checkpoint is good.
    self.assertIn('from checkpoint last_good (step 30)', out.getvalue())
    # A non-finite step within healthy_window of every checkpoint: none is good, and the advice
    # is the binding a CLI user sets.
    faulty = model_dir + '_nan'
    code, err = run_main(*common, f'--model_dir={faulty}',
                         '--gin_param=Trainer.healthy_window = 1000',
                         '--gin_param=import stable_train.testing',
                         '--gin_param=Trainer.faults = @Faults()',
                         '--gin_param=Faults.loss_nan_steps = [5]')
    self.assertEqual(code, 1, err)
    self.assertEqual(err.strip().splitlines(), [
        f"stable_train: checkpoint error: '{faulty}' has no checkpoint marked good (newest: "
        "step 30); use train.export_checkpoint = 'latest' to take it anyway."])

  def test_eval_data_the_model_cannot_take_exits_2_before_training(self):
    model_dir = self.get_temp_dir() + '/bad_eval'
    code, err = run_main(f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
                         *[f'--gin_param={p}' for p in SMALL + EVAL],
                         '--gin_param=eval/synthetic_regression.num_features = 5')
    self.assertEqual(code, 2, err)
    lines = err.strip().splitlines()
    self.assertLen(lines, 1, err)
    self.assertStartsWith(lines[0], 'stable_train: configuration error: the eval dataset (elements '
                          'float32[32, 5], float32[32, 1]) does not fit the model: ')
    self.assertEndsWith(lines[0], '; check train.eval_dataset_fn / fit(eval_dataset=...).')
    # No step, no checkpoint, no event: the lock and the configuration only.
    self.assertEqual(sorted(os.listdir(model_dir)), ['operative_config.gin', 'run.lock'])

  @pytest.mark.slow
  def test_training_data_the_model_cannot_take_and_a_tensorflow_error_in_a_subprocess(self):
    """Labels that would broadcast: exit 2 and one line before anything trains; token ids
    outside the model's vocabulary: TensorFlow fails in the first step, exit 1 and one line,
    summary.json says so."""
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')

    def run(name, *params):
      model_dir = os.path.join(self.get_temp_dir(), name)
      proc = subprocess.run(
          [sys.executable, os.path.join(REPO, 'scripts', 'train.py'), f'--gin_file={QUICKSTART}',
           f'--model_dir={model_dir}'] + [f'--gin_param={p}' for p in SMALL + list(params)],
          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
      lines = [l for l in proc.stderr.splitlines() if l.startswith('stable_train: ')]
      self.assertLen(lines, 1, proc.stderr[-3000:])
      self.assertNotIn('Traceback', proc.stderr)
      return proc.returncode, lines[0], model_dir

    code, line, model_dir = run('targets', 'mlp.outputs = 3')
    self.assertEqual(code, 2, line)
    self.assertEqual(line, (
        'stable_train: configuration error: the training dataset (elements float32[32, 32], '
        'float32[32, 1]) does not fit the model: labels of shape (32, 1) and model outputs of '
        'shape (None, 3) would broadcast under MeanSquaredError (each label compared with all 3 '
        "outputs); give the labels the outputs' shape (None, 3), or the model 1 output; check "
        'train.dataset_fn / fit(dataset).'))
    self.assertEqual(sorted(os.listdir(model_dir)), ['operative_config.gin', 'run.lock'])

    code, line, model_dir = run(
        'tokens', 'train.dataset_fn = @synthetic_sequences', 'synthetic_sequences.vocab_size = 640',
        'Trainer.model = @transformer()',
        'Trainer.loss = @keras.losses.SparseCategoricalCrossentropy()')
    self.assertEqual(code, 1, line)
    self.assertStartsWith(line, 'stable_train: TensorFlow error: ')
    self.assertIn('is not in [0, 64)', line)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['global_step']), ('aborted', 0))
    self.assertStartsWith(summary['reason'], 'TensorFlow InvalidArgumentError after step 0: ')
    aborts = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
              if e['event'] == 'abort']
    self.assertEqual([(e['trigger'], e['reason']) for e in aborts],
                     [('runtime_error', summary['reason'])])

  @pytest.mark.slow
  def test_a_changed_precision_or_policy_set_on_resume_is_named(self):
    model_dir = self.get_temp_dir()
    common = [f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}'] + [
        f'--gin_param={p}' for p in SMALL]
    code, err = run_main(*common)
    self.assertEqual(code, 0, err)
    code, err = run_main(*common, '--gin_param=train.num_steps = 40',
                         "--gin_param=train.precision = 'float64'")
    self.assertEqual(code, 1, err)
    self.assertIn('written in another precision', err)
    self.assertIn('train.precision', err)
    self.assertNotIn('corrupt', err)
    # A run of the fixed-clip stack resumed with the default one (AdaptiveClip has state).
    fixed = os.path.join(model_dir, 'fixed')
    common = [f'--gin_file={QUICKSTART}', f'--model_dir={fixed}'] + [
        f'--gin_param={p}' for p in SMALL]
    code, err = run_main(*common, '--gin_param=Trainer.policies = [@CheckNumerics(), '
                         '@ClipByGlobalNorm(), @SkipNonFinite()]')
    self.assertEqual(code, 0, err)
    code, err = run_main(*common, '--gin_param=train.num_steps = 40')
    self.assertEqual(code, 1, err)
    self.assertIn('another model or policy set', err)
    self.assertIn('Trainer.policies', err)

class StartupSignalTest(tf.test.TestCase):

  def test_a_signal_that_an_import_turned_into_another_error_still_exits_cleanly(self):
    # numpy's C extension, interrupted by SIGTERM mid-import, raises an ImportError of its own:
    # the start-up signal decides the exit, one line and 143, not a traceback and 1.
    def interrupted_import(argv):
      del argv
      try:
        os.kill(os.getpid(), signal.SIGTERM)
      except BaseException as e:  # pylint: disable=broad-except
        raise ImportError('PyCapsule_Import could not import module "datetime"') from e
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    process = signals.Signals()
    try:
      process.install()
      err = io.StringIO()
      with mock.patch.object(signals, 'SIGNALS', process), \
           mock.patch.object(cli, '_main', interrupted_import), \
           contextlib.redirect_stderr(err):
        self.assertEqual(cli.main([]), 128 + signal.SIGTERM)
      self.assertIn('interrupted by signal 15 during start-up', err.getvalue())
      with mock.patch.object(signals, 'SIGNALS', signals.Signals()), \
           mock.patch.object(cli, '_main', mock.Mock(side_effect=ImportError('x'))):
        with self.assertRaises(ImportError):  # No signal: the error is the error.
          cli.main([])
    finally:
      for s, handler in before.items():
        signal.signal(s, handler)


class UserModulesTest(tf.test.TestCase):
  """A user's own factories: `--gin_import=module` or a gin `import` line, from the cwd."""

  def setUp(self):
    super().setUp()
    self.folder = os.path.join(self.get_temp_dir(), f'user_{self.id().rsplit(".", 1)[-1]}')
    os.makedirs(self.folder, exist_ok=True)
    self._cwd = os.getcwd()
    os.chdir(self.folder)

  def tearDown(self):
    os.chdir(self._cwd)
    super().tearDown()

  def _module(self, name, factory):
    with open(os.path.join(self.folder, f'{name}.py'), 'w') as f:
      f.write('import gin\nfrom stable_train.zoo import data\n\n\n@gin.configurable\n'
              f'def {factory}(num_examples=64):\n'
              '  return data.synthetic_regression(num_examples=num_examples, num_features=32,\n'
              '                                   batch_size=8)\n')
    config = os.path.join(self.folder, f'{name}.gin')
    with open(config, 'w') as f:
      f.write(f'train.dataset_fn = @{factory}\n')
    return config

  def _run(self, *argv):
    params = [f'--gin_param={p}' for p in SMALL + ['train.num_steps = 3']]
    return run_main(f'--gin_file={QUICKSTART}', *argv, *params,
                    f'--model_dir={os.path.join(self.folder, "run")}')

  @pytest.mark.slow
  def test_gin_import_makes_a_users_factory_bindable(self):
    config = self._module('user_factories_flag', 'user_regression_flag')
    code, err = self._run(f'--gin_file={config}')  # Not imported: named, with the fix.
    self.assertEqual(code, 2, err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)
    self.assertIn("No configurable matching reference '@user_regression_flag'", err)
    self.assertIn('--gin_import=your_module', err)
    code, err = self._run('--gin_import=user_factories_flag', f'--gin_file={config}')
    self.assertEqual(code, 0, err)
    # Kept in the run's operative config, so rerunning or exporting that file imports it too.
    with open(os.path.join(self.folder, 'run', 'operative_config.gin')) as f:
      self.assertIn('import user_factories_flag', f.read().splitlines())

  @pytest.mark.slow
  def test_a_gin_import_line_sees_the_current_directory(self):
    config = self._module('user_factories_line', 'user_regression_line')
    with open(config) as f:
      text = f.read()
    with open(config, 'w') as f:
      f.write('import user_factories_line\n' + text)
    code, err = self._run(f'--gin_file={config}')
    self.assertEqual(code, 0, err)

  def test_a_module_that_cannot_be_imported_is_one_line(self):
    code, err = self._run('--gin_import=no_such_user_module')
    self.assertEqual(code, 2, err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)
    self.assertIn("--gin_import=no_such_user_module: ModuleNotFoundError", err)
    self.assertIn('run from the folder that holds the module', err)

  def test_a_module_that_raises_or_lacks_a_dependency_is_named_with_its_own_fix(self):
    """Found but failing: the fix is in the module (its line) or its dependency, not the path."""
    with open(os.path.join(self.folder, 'user_raises.py'), 'w') as f:
      f.write('import os\n\nraise RuntimeError("no config for this host")\n')
    with open(os.path.join(self.folder, 'user_needs.py'), 'w') as f:
      f.write('import no_such_dependency_xyz\n')
    code, err = self._run('--gin_import=user_raises')
    self.assertEqual(code, 2, err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)
    self.assertIn('--gin_import=user_raises: importing it raised RuntimeError: no config for this '
                  'host (user_raises.py, line 3); fix the module.', err)
    code, err = self._run('--gin_import=user_needs')
    self.assertEqual(code, 2, err)
    self.assertIn("--gin_import=user_needs: it imports 'no_such_dependency_xyz', which is not "
                  'installed', err)


class TestingToolsTest(tf.test.TestCase):
  """The library never imports its testing tools: a config that binds `Faults` imports them."""

  @pytest.mark.slow
  def test_faults_without_its_import_is_named_with_the_fix(self):
    model_dir = os.path.join(self.get_temp_dir(), 'run')
    argv = [f'--gin_file={QUICKSTART}', f'--model_dir={model_dir}',
            *[f'--gin_param={p}' for p in SMALL + ['train.num_steps = 3']],
            '--gin_param=Trainer.faults = @Faults()', '--gin_param=Faults.loss_nan_steps = [2]']
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')
    proc = subprocess.run([sys.executable, '-m', 'stable_train.app.cli', *argv], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env)
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    lines = [l for l in proc.stderr.splitlines() if l.startswith('stable_train:')]
    self.assertLen(lines, 1, proc.stderr[-2000:])
    self.assertIn('Faults is a testing tool: import it before binding it, with an `import '
                  'stable_train.testing` line', lines[0])
    proc = subprocess.run([sys.executable, '-m', 'stable_train.app.cli',
                           '--gin_param=import stable_train.testing', *argv], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    with open(os.path.join(model_dir, 'operative_config.gin')) as f:
      self.assertIn('import stable_train.testing', f.read())  # A replay imports it too.


class CommandsTest(tf.test.TestCase):
  """`stable-train COMMAND`: the subcommands of the installed command."""

  def _cli(self, *argv):
    return subprocess.run([sys.executable, '-m', 'stable_train.app.cli', *argv], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3'))

  def test_help_lists_the_commands_and_each_command_its_flags(self):
    for argv, words in ((['--help'], ['Commands:', '  export ', '  replay ', '  doctor ',
                                      '--gin_import']),
                        (['doctor', '--help'], ['stable-train doctor', '--model_dir', '--json',
                                                '--plot FILE.png']),
                        (['export', '--help'], ['stable-train export', '--checkpoint', '--format',
                                                '--output', '--model_dir']),
                        (['replay', '--help'], ['stable-train replay', '--forensics_dir'])):
      proc = self._cli(*argv)
      self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
      for word in words:
        self.assertIn(word, proc.stdout, argv)

  def test_commands_fail_with_one_line_and_their_exit_codes(self):
    for argv, code, text in ((['export', '--model_dir=/no/such/run'], 1, 'export: --model_dir='),
                             (['export', '--no_such_flag=1'], 2, 'export: usage error'),
                             (['replay'], 2, 'replay: --forensics_dir is required'),
                             (['doctor', '/no/such/run'], 2, 'doctor: /no/such/run holds no '),
                             (['doctor', '--deep'], 2, 'doctor: usage error: unrecognized'),
                             (['expor'], 2, 'a command: export, replay')):
      proc = self._cli(*argv)
      self.assertEqual(proc.returncode, code, proc.stderr)
      lines = [l for l in proc.stderr.strip().splitlines() if ': ' in l and 'I0000' not in l]
      self.assertEqual(len(lines), 1, proc.stderr)
      self.assertIn(text, lines[0])

  def test_doctor_diagnoses_a_run_directory(self):
    # An old run's records: every step's loss non-finite from finite outputs, then the abort.
    model_dir = os.path.join(self.get_temp_dir(), 'old_run')
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, 'events.jsonl'), 'w') as f:
      for k in range(1, 12):
        f.write(json.dumps({'event': 'skip', 'step': k, 'fault': 'loss', 'loss': 'nan',
                            'tensor': 'loss; first non-finite gradient of mlp/dense_0/kernel'})
                + '\n')
      f.write(json.dumps({'event': 'abort', 'step': 11, 'trigger': 'consecutive_skips'}) + '\n')
    events.write_json_atomic(os.path.join(model_dir, 'summary.json'),
                             {'status': 'aborted', 'skipped_steps': 11})
    proc = self._cli('doctor', model_dir, '--json')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(json.loads(proc.stdout)['cause'], 'division_or_log')

  def test_a_command_is_one_entry_of_the_registry(self):
    calls = []
    module = type(sys)('doctor_for_the_test')
    module.main = lambda argv: calls.append(argv) or 7
    with mock.patch.dict(sys.modules, {'doctor_for_the_test': module}), \
         mock.patch.dict(cli.SUBCOMMANDS, {'doctor': ('doctor_for_the_test', 'check it')}), \
         mock.patch.object(sys, 'argv', ['stable-train', 'doctor', '--deep']):
      with self.assertRaises(SystemExit) as ctx:
        cli.run()
      out = io.StringIO()
      with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
        cli._parse_flags(['stable-train', '--help'])  # pylint: disable=protected-access
    self.assertEqual(ctx.exception.code, 7)
    self.assertEqual(calls, [['stable-train doctor', '--deep']])
    self.assertIn('  doctor   check it', out.getvalue())


if __name__ == '__main__':
  tf.test.main()
