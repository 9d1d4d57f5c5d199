"""Tests for stable_train.app.export and scripts/export.py: checkpoint → fresh model → files that load
without stable_train."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.app import export
from stable_train import errors
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='3')
CONVNET = os.path.join(REPO, 'configs', 'convnet_bn.gin')
# A short, healthy convnet run (BatchNorm + Dropout) that exports itself at the end.
CONVNET_PARAMS = ['train.num_steps = 20', 'synthetic_images.poison_batches = []',
                  'synthetic_images.num_examples = 128', 'Trainer.checkpoint_every = 10',
                  "train.export_format = 'keras'"]

# Runs with only keras/tensorflow/numpy: loads each export and prints its predictions.
PLAIN_LOADER = textwrap.dedent('''
    import json, sys
    import numpy as np
    import keras
    import tensorflow as tf
    x = np.load(sys.argv[1])
    out = {}
    for kind, path in json.loads(sys.argv[2]).items():
      if kind.startswith('keras'):
        out[kind] = keras.saving.load_model(path)(x, training=False).numpy().tolist()
      else:
        loaded = tf.saved_model.load(path)  # Kept: `serve` needs its variables alive.
        out[kind] = loaded.serve(tf.constant(x)).numpy().tolist()
    assert 'stable_train' not in sys.modules, 'stable_train was imported'
    print(json.dumps(out))
''')


def _images(n=4, seed=7):
  return np.random.default_rng(seed).normal(size=(n, 16, 16, 3)).astype(np.float32)


def _train_mlp(model_dir, num_steps=6, checkpoint_every=3):
  t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(4,), seed=0),
                          optimizer=keras.optimizers.Adam(0.01),
                          loss=keras.losses.MeanSquaredError(), model_dir=model_dir,
                          checkpoint_every=checkpoint_every, log_every=100)
  t.fit(data.synthetic_regression(num_features=8, num_examples=64, batch_size=8),
        num_steps=num_steps)
  return t


def _run(script, *args):
  """Runs a script; returns (exit code, stdout, its own stderr lines without TF's C++ logging)."""
  proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', script), *args],
                        capture_output=True, text=True, timeout=300, env=ENV, cwd=REPO)
  tf_logging = r'(WARNING: All log|[IWE]\d{4} |To enable the following)'
  own = [l for l in proc.stderr.splitlines() if not re.match(tf_logging, l)]
  return proc.returncode, proc.stdout, '\n'.join(own)


def _set_manifest(model_dir, **marks):
  """Rewrites checkpoints/manifest.json with fields set per step: marks={'step_3': {...}}."""
  path = os.path.join(model_dir, 'checkpoints', 'manifest.json')
  with open(path) as f:
    manifest = json.load(f)
  for entry in manifest['checkpoints']:
    entry.update(marks.get(f"step_{entry['step']}", {}))
  with open(path, 'w') as f:
    json.dump(manifest, f)


class LoadForInferenceTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_fresh_mlp_predicts_exactly_like_the_trained_one(self):
    model_dir = self.get_temp_dir()
    trained = _train_mlp(model_dir).model
    fresh = models.mlp(input_dim=8, hidden=(4,), seed=1)  # Other initial weights.
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(3, 8)
    self.assertNotAllClose(fresh(x), trained(x))
    self.assertIs(export.load_for_inference(fresh, model_dir), fresh)
    self.assertAllEqual(fresh(x), trained(x))

  @pytest.mark.slow
  def test_batchnorm_statistics_are_restored(self):
    model_dir = self.get_temp_dir()
    t = trainer_lib.Trainer(model=models.convnet_bn(seed=0), optimizer=keras.optimizers.Adam(),
                            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                            model_dir=model_dir, checkpoint_every=4, log_every=100)
    t.fit(data.synthetic_images(num_examples=64, batch_size=16), num_steps=4)
    fresh = models.convnet_bn(seed=1)
    export.load_for_inference(fresh, model_dir)
    trained_bn, fresh_bn = t.model.get_layer('bn_0'), fresh.get_layer('bn_0')
    self.assertNotAllClose(trained_bn.moving_mean, np.zeros(16))  # Training moved them.
    self.assertAllEqual(fresh_bn.moving_mean, trained_bn.moving_mean)
    self.assertAllEqual(fresh_bn.moving_variance, trained_bn.moving_variance)
    x = _images()
    self.assertAllEqual(fresh(x, training=False), t.model(x, training=False))

  @pytest.mark.slow
  def test_checkpoint_choice(self):
    model_dir = self.get_temp_dir()
    trained = _train_mlp(model_dir, num_steps=9)  # Checkpoints at steps 3, 6, 9.
    prefix = lambda step: os.path.join(model_dir, 'checkpoints', f'ckpt-{step // 3}')
    self.assertEqual(export.checkpoint_path(model_dir, 'last_good'), prefix(9))
    # No checkpoint marked best: 'best' falls back to last_good, and says so.
    self.assertEqual(export.choose_checkpoint(model_dir, 'best'), (prefix(9), (
        'last_good (step 9): no checkpoint is marked best (the run had no EarlyStopping or '
        'BestCheckpoint policy, or no evaluation)')))
    with self.assertLogs('stable_train', level='WARNING') as logs:
      export.load_for_inference(models.mlp(input_dim=8, hidden=(4,), seed=1), model_dir,
                                checkpoint='best')
    self.assertIn('no checkpoint is marked best', logs.output[0])
    _set_manifest(model_dir, step_9={'good': False}, step_3={'best': True})
    self.assertEqual(export.checkpoint_path(model_dir, 'latest'), prefix(9))
    self.assertEqual(export.checkpoint_path(model_dir, 'last_good'), prefix(6))
    self.assertEqual(export.choose_checkpoint(model_dir, 'best'), (prefix(3), 'best (step 3)'))
    # An explicit prefix; the step-3 weights differ from the final ones.
    fresh = models.mlp(input_dim=8, hidden=(4,), seed=1)
    export.load_for_inference(fresh, checkpoint=prefix(3))
    x = np.ones((2, 8), np.float32)
    self.assertNotAllClose(fresh(x), trained.model(x))
    export.load_for_inference(fresh, model_dir, checkpoint='latest')
    self.assertAllEqual(fresh(x), trained.model(x))
    _set_manifest(model_dir, step_3={'good': False}, step_6={'good': False})
    with self.assertRaisesRegex(errors.CheckpointError, "no checkpoint marked good.*'latest'"):
      export.checkpoint_path(model_dir, 'last_good')
    # The best checkpoint's files are gone: said so, not "none is marked best".
    for name in os.listdir(os.path.join(model_dir, 'checkpoints')):
      if name.startswith('ckpt-1.'):
        os.remove(os.path.join(model_dir, 'checkpoints', name))
    with self.assertRaises(errors.CheckpointError) as ctx:
      export.choose_checkpoint(model_dir, 'best', option='--checkpoint={}')
    self.assertEqual(str(ctx.exception), (
        f"the best checkpoint of {model_dir!r} (ckpt-1, step 3) is marked in its manifest but its "
        f"files are gone from {model_dir}/checkpoints; restore them, or use "
        '--checkpoint=last_good or --checkpoint=latest.'))

  @pytest.mark.slow
  def test_a_checkpoint_named_as_the_export_line_names_it_is_found_in_the_run(self):
    """The export line says 'from checkpoint .../checkpoints/ckpt-2': `ckpt-2` with the run's
    model_dir means that one (not a path relative to the current directory)."""
    model_dir = self.get_temp_dir()
    trained = _train_mlp(model_dir, num_steps=6)  # Checkpoints at steps 3, 6.
    fresh = models.mlp(input_dim=8, hidden=(4,), seed=1)
    export.load_for_inference(fresh, model_dir, checkpoint='ckpt-2')
    x = np.ones((2, 8), np.float32)
    self.assertAllEqual(fresh(x), trained.model(x))
    with self.assertRaisesRegex(errors.CheckpointError, "checkpoint 'ckpt-9' not found"):
      export.load_for_inference(fresh, model_dir, checkpoint='ckpt-9')

  @pytest.mark.slow
  def test_unbuilt_model_is_built_from_a_shape_or_a_sample(self):
    model_dir = self.get_temp_dir()
    trained = _train_mlp(model_dir).model

    def unbuilt():
      return keras.Sequential([keras.layers.Dense(4, activation='relu', name='dense_0'),
                               keras.layers.Dense(1, name='dense_1')])

    x = np.full((2, 8), 0.5, np.float32)
    by_shape = export.load_for_inference(unbuilt(), model_dir, input_shape=(None, 8))
    by_sample = export.load_for_inference(unbuilt(), model_dir, sample_input=x)
    self.assertAllEqual(by_shape(x), trained(x))
    self.assertAllEqual(by_sample(x), trained(x))
    with self.assertRaisesRegex(errors.ConfigError, 'not built; pass sample_input'):
      export.load_for_inference(unbuilt(), model_dir)

  @pytest.mark.slow
  def test_errors_are_one_line_and_name_the_fix(self):
    missing = os.path.join(self.get_temp_dir(), 'nothing_here')
    empty = tempfile.mkdtemp(dir=self.get_temp_dir())
    model = models.mlp(input_dim=8, hidden=(4,))
    cases = ((missing, 'last_good', errors.CheckpointError, 'does not exist'),
             (empty, 'last_good', errors.CheckpointError, 'holds no committed checkpoint'),
             (empty, 'newest', errors.CheckpointError, 'not found'),
             (None, 'latest', errors.ConfigError, 'needs model_dir'))
    for model_dir, checkpoint, error, text in cases:
      with self.assertRaises(error) as ctx:
        export.load_for_inference(model, model_dir, checkpoint=checkpoint)
      self.assertIn(text, str(ctx.exception))
      self.assertNotIn('\n', str(ctx.exception))
    run = self.get_temp_dir()
    _train_mlp(run)
    with self.assertRaises(errors.CheckpointError) as ctx:  # Another architecture.
      export.load_for_inference(models.mlp(input_dim=8, hidden=(5,)), run)
    self.assertIn('does not fit model', str(ctx.exception))
    self.assertNotIn('\n', str(ctx.exception))


class ExportTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_compiled_model_is_saved_without_its_training_optimizer(self):
    t = _train_mlp(self.get_temp_dir())
    t.model.compile(optimizer=t.optimizer, loss='mse')
    path = export.export(t.model, os.path.join(self.get_temp_dir(), 'out', 'm.keras'))
    loaded = keras.saving.load_model(path)
    self.assertIsNone(getattr(loaded, 'optimizer', None))
    x = np.ones((2, 8), np.float32)
    self.assertAllEqual(loaded(x), t.model(x))

  def test_a_failed_save_leaves_nothing_behind(self):
    model = models.mlp(input_dim=8, hidden=(4,))
    folder = tempfile.mkdtemp(dir=self.get_temp_dir())
    target = os.path.join(folder, 'm.keras')
    export.export(model, target)
    with open(target, 'rb') as f:
      before = f.read()

    def half_write(self, path, *args, **kwargs):
      del self, args, kwargs
      with open(path, 'wb') as f:
        f.write(b'half')
      raise OSError(28, 'No space left on device')

    with mock.patch.object(keras.Model, 'save', half_write):
      with self.assertRaises(OSError):
        export.export(model, target)
    self.assertEqual(os.listdir(folder), ['m.keras'])  # No temporary file left.
    with open(target, 'rb') as f:
      self.assertEqual(f.read(), before)  # The previous export is intact.
    with mock.patch.object(keras.Model, 'export', side_effect=OSError(28, 'full')):
      with self.assertRaises(OSError):
        export.export(model, os.path.join(folder, 'sm'), format='saved_model')
    self.assertEqual(os.listdir(folder), ['m.keras'])

  def test_an_interrupted_replacement_keeps_the_previous_saved_model(self):
    model = models.mlp(input_dim=8, hidden=(4,), seed=0)
    folder = tempfile.mkdtemp(dir=self.get_temp_dir())
    target = os.path.join(folder, 'sm')
    export.export(model, target, format='saved_model')
    before = sorted(os.listdir(target))
    rename, calls = os.rename, []

    def rename_then_a_signal(src, dst):  # SIGINT between moving the old one aside and the new in.
      calls.append(dst)
      if len(calls) == 2:
        raise KeyboardInterrupt
      rename(src, dst)

    with mock.patch.object(os, 'rename', rename_then_a_signal):
      with self.assertRaises(KeyboardInterrupt):
        export.export(models.mlp(input_dim=8, hidden=(4,), seed=1), target, format='saved_model')
    self.assertEqual(os.listdir(folder), ['sm'])  # Neither the new folder nor the old one aside.
    self.assertEqual(sorted(os.listdir(target)), before)
    x, loaded = tf.ones((2, 8)), tf.saved_model.load(target)  # Kept: `serve` needs it alive.
    self.assertAllClose(loaded.serve(x), model(x, training=False))

  def test_bad_arguments(self):
    model = models.mlp(input_dim=8, hidden=(4,))
    with self.assertRaisesRegex(errors.ConfigError, "format='onnx'"):
      export.export(model, '/tmp/x.keras', format='onnx')
    with self.assertRaisesRegex(errors.ConfigError, 'must end in .keras'):
      export.export(model, '/tmp/x.h5')
    with self.assertRaisesRegex(errors.ConfigError, 'not a keras.Model'):
      export.export(tf.Module(), '/tmp/x.keras')


class ExportScriptTest(tf.test.TestCase):
  """A CLI run (convnet_bn, exporting itself), then scripts/export.py, then plain Keras/TF."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = os.path.join(os.environ.get('TEST_TMPDIR', '/tmp'), f'test_export_{os.getpid()}')
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.model_dir = os.path.join(cls.root, 'run')
    code, out, err = _run('train.py', f'--gin_file={CONVNET}', f'--model_dir={cls.model_dir}',
                          *[f'--gin_param={p}' for p in CONVNET_PARAMS])
    assert code == 0, err[-2000:]
    assert 'exported' in out, out

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  @pytest.mark.slow
  def test_exports_load_and_predict_without_stable_train(self):
    paths = {'keras_at_end_of_run': os.path.join(self.model_dir, 'export', 'model.keras')}
    for fmt in ('keras', 'saved_model'):
      output = os.path.join(self.root, f'out_{fmt}', 'model.keras' if fmt == 'keras' else 'sm')
      code, out, err = _run('export.py', f'--model_dir={self.model_dir}', f'--format={fmt}',
                            f'--output={output}')
      self.assertEqual(code, 0, err[-2000:])
      self.assertIn(f'wrote {output}', out)
      paths[fmt] = output
    code, out, err = _run('export.py', f'--model_dir={self.model_dir}',  # The default output.
                          '--format=saved_model', '--checkpoint=best')
    self.assertEqual(code, 0, err[-2000:])
    # The run had no EarlyStopping: 'best' is the last good checkpoint, and the script says so.
    self.assertIn('export: note: last_good (step 20): no checkpoint is marked best', err)
    self.assertIn('(last_good (step 20): no checkpoint is marked best', out)
    paths['saved_model_default'] = os.path.join(self.model_dir, 'export', 'saved_model')
    x = _images()
    np.save(os.path.join(self.root, 'x.npy'), x)
    proc = subprocess.run(
        [sys.executable, '-c', PLAIN_LOADER, os.path.join(self.root, 'x.npy'), json.dumps(paths)],
        capture_output=True, text=True, timeout=300, cwd=self.root,
        env=dict(os.environ, PYTHONPATH='', TF_CPP_MIN_LOG_LEVEL='3'))
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    predictions = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = export.load_for_inference(models.convnet_bn(seed=5), self.model_dir)(
        x, training=False)
    self.assertEqual(set(predictions), set(paths))
    for kind, values in predictions.items():
      self.assertAllClose(values, expected, atol=1e-6, rtol=0, msg=kind)

  @pytest.mark.slow
  def test_no_usable_checkpoint_exits_1_with_one_line(self):
    no_run = os.path.join(self.root, 'no_such_run')
    empty = os.path.join(self.root, 'empty_run')
    os.makedirs(empty, exist_ok=True)
    shutil.copy(os.path.join(self.model_dir, 'operative_config.gin'), empty)
    for model_dir, text in ((no_run, 'does not exist'), (empty, 'no committed checkpoint')):
      code, _, err = _run('export.py', f'--model_dir={model_dir}')
      self.assertEqual(code, 1, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertIn(text, err)

  @pytest.mark.slow
  def test_a_missing_best_or_no_good_checkpoint_is_named_with_the_flag_to_use(self):
    model_dir = os.path.join(self.root, 'marked')
    shutil.copytree(self.model_dir, model_dir)
    _set_manifest(model_dir, step_10={'best': True, 'good': False}, step_20={'good': False})
    code, _, err = _run('export.py', f'--model_dir={model_dir}')
    self.assertEqual((code, err.strip().splitlines()), (1, [
        f"export: no usable checkpoint: '{model_dir}' has no checkpoint marked good (newest: step "
        "20); use --checkpoint=latest to take it anyway."]))
    for name in os.listdir(os.path.join(model_dir, 'checkpoints')):
      if name.startswith('ckpt-1.'):
        os.remove(os.path.join(model_dir, 'checkpoints', name))
    code, _, err = _run('export.py', f'--model_dir={model_dir}', '--checkpoint=best')
    self.assertEqual(code, 1, err)
    self.assertEqual(len(err.strip().splitlines()), 1, err)
    self.assertIn('the best checkpoint', err)
    self.assertIn('(ckpt-1, step 10) is marked in its manifest but its files are gone', err)

  @pytest.mark.slow
  def test_a_full_disk_or_a_signal_during_the_export_is_one_line(self):
    model_dir = os.path.join(self.root, 'broken')
    shutil.copytree(self.model_dir, model_dir)
    with open(os.path.join(model_dir, 'export', 'model.keras'), 'rb') as f:
      before = f.read()
    full = ('tf.errors.ResourceExhaustedError(None, None, "Graph execution error:\\n'
            '/x/variables/variables_temp/part-0; No space left on device\\n [Op:SaveV2]")')
    for fmt, patch, code, words in (
        ('keras', 'keras.Model.save = lambda *a, **k: (_ for _ in ()).throw(OSError(28, '
         '"No space left on device"))', 2, 'No space left on device; free space or choose'),
        ('saved_model', f'keras.Model.export = lambda *a, **k: (_ for _ in ()).throw({full})', 2,
         'No space left on device: /x/variables/variables_temp/part-0; free space'),
        ('keras', 'save = keras.Model.save\nkeras.Model.save = lambda *a, **k: (os.kill('
         'os.getpid(), signal.SIGTERM), time.sleep(5), save(*a, **k))', 143,
         'interrupted by signal 15; an export is written atomically')):
      script = os.path.join(REPO, 'scripts', 'export.py')
      wrapper = ('import os, runpy, signal, sys, time, keras, tensorflow as tf\n'
                 f'{patch}\nsys.argv = [{script!r}, {"--model_dir=" + model_dir!r}, '
                 f'{"--format=" + fmt!r}]\nrunpy.run_path({script!r}, run_name="__main__")\n')
      proc = subprocess.run([sys.executable, '-c', wrapper], capture_output=True, text=True,
                            timeout=300, env=ENV, cwd=REPO)
      lines = [l for l in proc.stderr.splitlines() if l.startswith('export:')]
      self.assertEqual(proc.returncode, code, proc.stderr[-2000:])
      self.assertLen(lines, 1, proc.stderr[-2000:])
      self.assertIn(words, lines[0])
      self.assertNotIn('Traceback', proc.stderr)
      self.assertEqual(sorted(os.listdir(os.path.join(model_dir, 'export'))), ['model.keras'])
      with open(os.path.join(model_dir, 'export', 'model.keras'), 'rb') as f:
        self.assertEqual(f.read(), before)

  @pytest.mark.slow
  def test_usage_errors_exit_2_with_one_line(self):
    for args, text in ((['--format=onnx'], "--format='onnx' must be one of"),
                       (['--checkpoint=newest', f'--gin_file={self.root}/nope.gin'],
                        'gin file not found'),
                       ([], None)):
      flags = [f'--model_dir={self.model_dir}'] if text else []
      code, _, err = _run('export.py', *flags, *args)
      self.assertEqual(code, 2, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertIn(text or '--model_dir is required', err)

  @pytest.mark.slow
  def test_help_lists_the_flags_and_exits_0(self):
    code, out, _ = _run('export.py', '--help')
    self.assertEqual(code, 0)
    for flag in ('--model_dir', '--checkpoint', '--format', '--output', '--gin_file'):
      self.assertIn(flag, out)


if __name__ == '__main__':
  tf.test.main()
