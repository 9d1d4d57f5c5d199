"""Tests for stable_train.app.commands: what the `stable-train` commands share."""

import contextlib
import io

from absl import flags
import tensorflow as tf

from stable_train.app import commands

VALUES = flags.FlagValues()
flags.DEFINE_string('where', None, 'Where to look.', flag_values=VALUES)
flags.DEFINE_multi_string('item', [], 'Items.', flag_values=VALUES)


class CommandFlagsTest(tf.test.TestCase):

  def _parse(self, *argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      result = commands.command_flags(VALUES, ['tool', *argv], 'The tool.\n\nDetails.', __name__,
                                      'tool')
    return result, out.getvalue(), err.getvalue()

  def test_parses_its_own_flags_again_without_appending(self):
    for _ in range(2):
      rest, _, _ = self._parse('--where=here', '--item=a', '--item=b', 'extra')
      self.assertEqual(rest, ['tool', 'extra'])
      self.assertEqual(VALUES.where, 'here')
      self.assertEqual(VALUES.item, ['a', 'b'])

  def test_help_prints_the_doc_and_the_flags_and_returns_0(self):
    code, out, _ = self._parse('--help')
    self.assertEqual(code, 0)
    self.assertTrue(out.startswith('The tool.\n\nDetails.\n\nFlags:'), out)
    self.assertIn('--where: Where to look.', out)

  def test_a_usage_error_is_one_line_and_exit_2(self):
    code, _, err = self._parse('--no_such=1')
    self.assertEqual(code, 2)
    self.assertEqual(err, "tool: usage error: Unknown command line flag 'no_such'\n")
