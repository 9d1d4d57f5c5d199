"""Tests for stable_train.app.replay_command, in-process (`stable-train replay`; the replay of a real
record through it is in test_replay.py, which runs scripts/replay.py)."""

import contextlib
import io

import tensorflow as tf

from stable_train.app import replay_command


def run(*argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = replay_command.main(['stable-train replay', *argv])
  return code, out.getvalue(), err.getvalue()


class ReplayCommandTest(tf.test.TestCase):

  def test_usage_errors_are_one_line_and_exit_2(self):
    folder = self.get_temp_dir()
    for argv, text in (([], 'replay: --forensics_dir is required'),
                       (['--forensics_dir=/no/such/record'], 'is not a directory'),
                       ([f'--forensics_dir={folder}', 'extra'], 'unexpected arguments'),
                       ([f'--forensics_dir={folder}'], 'replay: ')):  # Not a record.
      code, _, err = run(*argv)
      self.assertEqual(code, 2, err)
      self.assertEqual(len(err.strip().splitlines()), 1, err)
      self.assertIn(text, err)

  def test_help_names_the_command_and_its_flags(self):
    code, out, _ = run('--help')
    self.assertEqual(code, 0)
    self.assertTrue(out.startswith('`stable-train replay'), out)
    self.assertIn('--forensics_dir', out)
