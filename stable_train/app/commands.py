"""What the `stable-train` commands share: one-line failures, each command's own absl flags,
`--help` that lists them and exits 0. Imports no TensorFlow."""

import os
import re
import sys

from absl import flags

EXIT_OK, EXIT_USAGE = 0, 2
_HELP = ('--help', '-help', '-h', '-?', '--helpshort', '--helpfull')


_UNREGISTERED_FAULTS = re.compile(r"No configurable matching[^']*'@?([\w.]+\.)?Faults\b")
FAULTS_HINT = ('; Faults is a testing tool: import it before binding it, with an `import '
               "stable_train.testing` line in the gin file, --gin_param='import "
               "stable_train.testing' first, or --gin_import=stable_train.testing")


def faults_hint(error: Exception) -> str:
  """The fix to append to a gin error that is an unregistered `Faults` (the testing tools are
  imported by a config that binds them, never by the library), else ''."""
  return FAULTS_HINT if _UNREGISTERED_FAULTS.search(str(error)) else ''


def fail(prefix: str, message: str, code: int) -> int:
  """Writes `<prefix>: <message>` as one line on stderr; returns `code`."""
  sys.stderr.write(f'{prefix}: {message}\n')
  sys.stderr.flush()
  return code


def print_help(argv, doc: str, flag_values, module_name: str) -> bool:
  """On --help (-h, -?, --helpshort, --helpfull): prints `doc` and the flags `module_name`
  defines in `flag_values`, each with its help, to stdout; returns whether it did.

  absl's own --help exits 1 and lists only the flags of the main module (a console script's
  wrapper defines none), so the commands answer it themselves, before absl parses.
  """
  if not any(arg in _HELP for arg in argv[1:]):
    return False
  sys.stdout.write((doc or '').strip() + '\n\nFlags:\n' + flag_values.module_help(module_name)
                   + '\n')
  sys.stdout.flush()
  return True


def command_flags(flag_values, argv, doc: str, module_name: str, prefix: str):
  """A subcommand's `argv` parsed into its `flag_values`: the arguments left (argv[0] first), or
  the exit code to return: 0 after --help, 2 after a usage error (one line)."""
  if print_help(argv, doc, flag_values, module_name):
    return EXIT_OK
  try:
    flag_values.unparse_flags()  # A second parse in one process must not append to lists.
    return flag_values(list(argv))
  except flags.Error as e:
    return fail(prefix, f'usage error: {e}', EXIT_USAGE)


def quiet_tensorflow() -> None:
  """TensorFlow's C++ start-up lines and absl's info lines off (a command's own output only)."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.ERROR)


def run_module(name: str, module, argv) -> int:
  """A command module's `main(argv)` under the signal handling (`run_command`), with the
  module's `INTERRUPTED` line: how `stable-train <name>` and its scripts/ copy run it."""
  return run_command(name, module.main, argv,
                     getattr(module, 'INTERRUPTED', f'rerun stable-train {name}.'))


def run_command(prefix: str, main, argv, interrupted: str) -> int:
  """`main(argv)` under the process's SIGTERM/SIGINT handling (`signals.SIGNALS`): a signal ends
  the command with one line (`interrupted`, what the signal left behind) and 128+N."""
  from stable_train.runtime import signals  # pylint: disable=g-import-not-at-top  (no TensorFlow)
  signals.SIGNALS.install()
  try:
    with signals.SIGNALS.raising():
      return main(argv)
  except signals.StartupInterrupted as e:
    return fail(prefix, f'interrupted by signal {e.signum}; {interrupted}', 128 + e.signum)
