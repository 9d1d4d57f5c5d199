"""Tests of scripts/replay.py and stable_train.app.replay: a recorded fault is reproduced from disk."""

import os
import subprocess
import sys

import gin
import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.app import cli
from stable_train.app import configurables  # pylint: disable=unused-import
from stable_train.app import replay
from stable_train.core import losses
from stable_train.forensics import forensics
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'scripts', 'replay.py')

# A naive -log(softmax) on inputs of scale 30: exp overflows in the loss at the first step.
CONFIG = '''
train.num_steps = 3
train.dataset_fn = @synthetic_classification
synthetic_classification.num_examples = 64
synthetic_classification.num_features = 16
synthetic_classification.num_classes = 4
synthetic_classification.batch_size = 8
synthetic_classification.scale = 30.0
mlp.input_dim = 16
mlp.hidden = (8,)
mlp.outputs = 4
Trainer.model = @mlp()
Trainer.optimizer = @keras.optimizers.SGD()
keras.optimizers.SGD.learning_rate = 0.5
Trainer.loss = @naive_softmax_cross_entropy
Trainer.policies = [@ValidateInputs(), @SkipNonFinite(), @Forensics()]
ValidateInputs.num_classes = 4
Trainer.steps_per_loop = 3
'''


def _run_replay(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        timeout=120, env=env, cwd=ROOT)


class ReplayTest(tf.test.TestCase):

  def _record(self):
    model_dir = self.get_temp_dir()
    gin.parse_config(CONFIG)
    summary = cli.train(model_dir=model_dir)
    self.assertEqual(summary['skipped_steps'], 3)
    gin.clear_config()
    return os.path.join(model_dir, 'forensics', 'step_1')

  @pytest.mark.slow
  def test_replay_reproduces_and_reports(self):
    record = self._record()
    recorded, _ = forensics.read_record(record)
    self.assertEqual((recorded['fault'], recorded['op_level']['op_type']), ('loss', 'Exp'))

    # In-process: same op, same loss as the training step saw.
    result = replay.replay(record)
    self.assertTrue(result.reproduced)
    self.assertTrue(result.same_op)
    self.assertEqual(repr(result.report['loss']), recorded['loss'])  # JSON keeps inf as 'inf'.
    self.assertEqual(result.report['op_level']['input_name'], recorded['op_level']['input_name'])
    # Training and replay describe the same fault in the same words.
    self.assertEqual(result.report['fault'], recorded['fault'])
    self.assertEqual(result.report['offending_tensor'], recorded['offending_tensor'])
    self.assertIn('gradient of', recorded['offending_tensor'])  # The loss and its first gradient.

    done = _run_replay(f'--forensics_dir={record}')
    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
    self.assertIn('op type: Exp', done.stdout)
    self.assertIn('REPRODUCED', done.stdout)
    self.assertIn('naive_softmax_cross_entropy', done.stdout)  # Where the op was created.

    # A harmless batch in the same record: the fault does not come back, exit 1.
    with np.load(os.path.join(record, forensics.BATCH_FILE)) as f:
      arrays = {k: f[k] for k in f.files}
    arrays['input_0'] = np.zeros_like(arrays['input_0'])
    np.savez(os.path.join(record, forensics.BATCH_FILE), **arrays)
    done = _run_replay(f'--forensics_dir={record}')
    self.assertEqual(done.returncode, 1, done.stderr[-2000:])
    self.assertIn('NOT REPRODUCED', done.stdout)

  @pytest.mark.slow
  def test_a_record_of_a_run_with_fault_injection_replays(self):
    # The run's operative_config.gin binds Trainer.faults: the replay builds that Trainer, and
    # the plan's loss seam stays a no-op (unbound): a replay never injects.
    model_dir = self.get_temp_dir() + '/faults'
    gin.parse_config(CONFIG + '\n'.join([
        '', 'import stable_train.testing', 'Trainer.faults = @Faults()', 'Faults.loss_nan_steps = [2]',
        'Faults.gradient_nan_steps = [3]', "Faults.gradient_variable = 'mlp/dense_0/kernel'"]))
    cli.train(model_dir=model_dir)
    gin.clear_config()
    record = os.path.join(model_dir, 'forensics', 'step_1')
    with open(os.path.join(model_dir, 'operative_config.gin')) as f:
      self.assertIn('Faults.loss_nan_steps = [2]', f.read())
    result = replay.replay(record)
    self.assertTrue(result.reproduced)
    self.assertTrue(result.same_op)
    done = _run_replay(f'--forensics_dir={record}')
    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
    self.assertIn('REPRODUCED', done.stdout)
    self.assertNotIn('Traceback', done.stderr)

  @pytest.mark.slow
  def test_a_record_in_a_form_it_did_not_write_is_one_line(self):
    record = self._record()
    with open(os.path.join(record, forensics.REPORT_JSON), 'w') as f:
      f.write('{"step": 1, "batch_structure": ')
    with self.assertRaisesRegex(replay.ReplayError, 'is not a readable forensics record'):
      replay.replay(record)
    done = _run_replay(f'--forensics_dir={record}')
    self.assertEqual(done.returncode, 2, done.stderr[-2000:])
    self.assertIn('is not a readable forensics record', done.stderr.strip().splitlines()[-1])
    self.assertNotIn('Traceback', done.stderr)

  @pytest.mark.slow
  def test_a_label_out_of_range_is_recorded_and_replayed_by_the_default_stack(self):
    model_dir = self.get_temp_dir() + '/label'
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=16, hidden=(8,), outputs=4), model_dir=model_dir,
        optimizer=keras.optimizers.SGD(0.1), loss=losses.sparse_softmax_cross_entropy,
        policies=trainer_lib.default_policies() + [forensics.Forensics()], log_every=100)
    x = np.random.RandomState(0).normal(size=(16, 16)).astype(np.float32)
    y = np.arange(16) % 4
    y[10] = 9  # The second batch.
    summary = t.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), num_steps=2)
    self.assertEqual((summary['status'], summary['input_faults']), ('completed', 1))
    record = os.path.join(model_dir, 'forensics', 'step_2')
    recorded, _ = forensics.read_record(record)
    self.assertEqual((recorded['fault'], recorded['offending_tensor']), ('input', 'input labels'))
    labels = [i for i in recorded['inputs'] if i['path'] == 'labels'][0]
    self.assertEqual(labels['labels_out_of_range'], 1)
    result = replay.replay(record, trainer=trainer_lib.Trainer(
        model=models.mlp(input_dim=16, hidden=(8,), outputs=4), model_dir=None,
        optimizer=keras.optimizers.SGD(0.1), loss=losses.sparse_softmax_cross_entropy))
    self.assertTrue(result.reproduced)  # The batch fails the labels' check again, no crash.
    self.assertEqual(result.report['offending_tensor'], 'input labels')

  @pytest.mark.slow
  def test_usage_errors_exit_2_in_one_line(self):
    missing = os.path.join(self.get_temp_dir(), 'nope')
    for args, needle in (([], '--forensics_dir is required'),
                         ([f'--forensics_dir={missing}'], 'is not a directory'),
                         ([f'--forensics_dir={self.get_temp_dir()}'], 'not a forensics record')):
      done = _run_replay(*args)
      self.assertEqual(done.returncode, 2, done.stderr)
      last = done.stderr.strip().splitlines()[-1]
      self.assertIn(needle, last)
      self.assertNotIn('Traceback', done.stderr)


if __name__ == '__main__':
  tf.test.main()
