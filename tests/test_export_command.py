"""Tests for stable_train.export_command, in-process (`stable-train export`; the exports of a real
run through it are in test_export.py, which runs scripts/export.py)."""

import contextlib
import io
import os

import tensorflow as tf

from stable_train import export_command


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

  def test_help_names_the_command_and_its_flags(self):
    code, out, _ = run('--help')
    self.assertEqual(code, 0)
    self.assertTrue(out.startswith('`stable-train export'), out)
    for flag in ('--model_dir', '--checkpoint', '--format', '--output', '--gin_file'):
      self.assertIn(flag, out)
