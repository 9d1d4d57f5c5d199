"""Tests for stable_train.app.export_command, in-process (`stable-train export`; the exports of a real
run through it are in test_export.py, which runs scripts/export.py)."""

import contextlib
import io
import os

import gin
import keras
import tensorflow as tf
import pytest

from stable_train.app import export_command
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models


def run(*argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = export_command.main(['stable-train export', *argv])
  return code, out.getvalue(), err.getvalue()


class ExportCommandTest(tf.test.TestCase):

  def test_usage_and_missing_runs_are_one_line_with_their_exit_codes(self):
    empty = self.get_temp_dir()
    for argv, code, text in (([], 2, 'export: --model_dir is required'),
                             (['--model_dir=/no/such/run'], 1, 'does not exist'),
                             ([f'--model_dir={empty}', '--format=onnx'], 2, "--format='onnx'"),
                             ([f'--model_dir={empty}'], 2, 'operative_config.gin not found'),
                             ([f'--model_dir={empty}', 'extra'], 2, 'unexpected arguments')):
      got, _, err = run(*argv)
      self.assertEqual(got, code, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertIn(text, err)

  def test_no_committed_checkpoint_exits_1(self):
    model_dir = self.get_temp_dir()
    with open(os.path.join(model_dir, 'operative_config.gin'), 'w') as f:
      f.write('mlp.input_dim = 4\n')
    code, _, err = run(f'--model_dir={model_dir}')
    self.assertEqual(code, 1, err)
    self.assertIn('export: no usable checkpoint', err)

  @pytest.mark.slow
  def test_a_checkpoint_named_as_the_export_line_names_it_is_the_runs(self):
    """`--checkpoint=ckpt-1` (the name the export line prints) means the run's checkpoints/ckpt-1,
    not a path in the current directory."""
    model_dir = self.get_temp_dir()
    trainer_lib.Trainer(model=models.mlp(input_dim=4, hidden=(3,), seed=0), optimizer='adam',
                        loss='mse', model_dir=model_dir, checkpoint_every=2, log_every=100,
                        verbose=False).fit(data.synthetic_regression(
                            num_features=4, num_examples=16, batch_size=4), num_steps=4)
    with open(os.path.join(model_dir, 'operative_config.gin'), 'w') as f:
      f.write('Trainer.model = @mlp()\nmlp.input_dim = 4\nmlp.hidden = (3,)\n'
              "Trainer.optimizer = 'adam'\nTrainer.loss = 'mse'\n")
    output = os.path.join(model_dir, 'first.keras')
    try:
      code, out, err = run(f'--model_dir={model_dir}', '--checkpoint=ckpt-1', f'--output={output}')
    finally:
      gin.clear_config()
    self.assertEqual(code, 0, err)
    self.assertIn(os.path.join(model_dir, 'checkpoints', 'ckpt-1'), out)
    self.assertTrue(os.path.isfile(output))
    keras.saving.load_model(output)
    code, _, err = run(f'--model_dir={model_dir}', '--checkpoint=ckpt-7')
    self.assertEqual(code, 1, err)
    self.assertIn("export: no usable checkpoint: checkpoint 'ckpt-7' not found", err)

  def test_help_names_the_command_and_its_flags(self):
    code, out, _ = run('--help')
    self.assertEqual(code, 0)
    self.assertTrue(out.startswith('`stable-train export'), out)
    for flag in ('--model_dir', '--checkpoint', '--format', '--output', '--gin_file'):
      self.assertIn(flag, out)
