"""The command-line entry point: parse gin files and bindings, build the root `train`, run it.

Exit codes: 0 completed (num_steps or num_epochs reached, stopped early by EarlyStopping, or the
dataset exhausted before num_steps: a warning line on stderr); 1 a policy stopped the run
(checkpoints intact), the run diverged (status 'diverged': the last good checkpoint intact), no checkpoint could be restored (none readable, or files without a readable manifest), a checkpoint or file could not be
written (disk full), or TensorFlow failed at run time; 2 usage or configuration error (an empty
dataset, a batch size other than the checkpointed one, a model_dir in use by another live process
included); 128+N stopped cleanly by signal N (SIGTERM: 143, SIGINT: 130), during start-up or after
writing a checkpoint. Every failure is one line on stderr, without a traceback.
"""

import importlib
import logging
import os
import sys
import tempfile
import traceback
from typing import Optional

from absl import app
from absl import flags
import gin

from stable_train.app import commands
from stable_train.app import job
from stable_train import errors
from stable_train.runtime import signals

train = job.train  # The root configurable (`train.*` bindings), by its public name.

FLAGS = flags.FLAGS
flags.DEFINE_multi_string('gin_file', [], 'Gin config file(s); later files override earlier ones.')
flags.DEFINE_multi_string('gin_param', [], "Gin binding(s), e.g. 'train.num_steps=200'.")
flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, events, summaries (required).')
flags.DEFINE_multi_string(
    'gin_import', [], 'Python module(s) to import before the gin files are parsed, so that the '
    '@gin.configurable factories they define can be bound (e.g. --gin_import=my_factories; the '
    'current directory is on the import path, as it is for gin `import` lines).')

EXIT_OK, EXIT_ABORTED, EXIT_USAGE = 0, 1, 2
# The module absl files the flags above under (`python -m stable_train.app.cli` runs this as __main__).
_FLAGS_MODULE = __name__ if __name__ != '__main__' else sys.argv[0]


# The subcommands of `stable-train` (`stable-train export --model_dir=DIR`): name -> (module,
# one line for --help). The module has `main(argv) -> exit code` (argv[0] is 'stable-train
# <name>') and its own absl FlagValues (`commands.command_flags`); an optional `INTERRUPTED` says
# what a SIGTERM/SIGINT left behind (128+N). Adding a command is one entry
# here.
SUBCOMMANDS = {
    'export': ('stable_train.app.export_command',
               'export a trained model for inference (.keras or SavedModel)'),
    'replay': ('stable_train.app.replay_command',
               'replay a NaN forensics record and report where the NaN came from'),
    'doctor': ('stable_train.doctor.doctor',
               "name the likely cause of a run's trouble, the evidence and the remedy"),
}


def _fail(message: str, code: int) -> int:
  return commands.fail('stable_train', message, code)


def _log_traceback(model_dir: str) -> str:
  """Keeps the full traceback of an unexpected error in <model_dir>/error.log; returns its path."""
  path = os.path.join(model_dir, 'error.log')
  try:
    with open(path, 'a') as f:
      traceback.print_exc(file=f)
  except OSError:
    return '(could not write error.log)'
  return path


def main(argv) -> int:
  """Runs one training job from flags; returns the exit code."""
  try:
    with signals.SIGNALS.raising():
      return _main(argv)
  except signals.StartupInterrupted as e:
    return _startup_interrupted(e)
  except Exception:  # A C extension's import that the signal interrupted raises its own error.
    if signals.SIGNALS.at_start_up is None:
      raise
    return _startup_interrupted(signals.StartupInterrupted(signals.SIGNALS.at_start_up))


def _startup_interrupted(error: signals.StartupInterrupted) -> int:
  return _fail(f'interrupted by signal {error.signum} during start-up, before training began; '
               'no checkpoint was touched; rerun the same command to start.', 128 + error.signum)


def _main(argv) -> int:
  failed = _configure(argv)
  if failed is not None:
    return failed
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    summary = train(model_dir=FLAGS.model_dir)
  except errors.ConfigError as e:
    return _fail(f'configuration error: {errors.one_line(e)}', EXIT_USAGE)
  except errors.NumericsError as e:
    return _fail(f'aborted: {errors.one_line(e)}', EXIT_ABORTED)
  except errors.CheckpointError as e:
    return _fail(f'checkpoint error: {errors.one_line(e)}', EXIT_ABORTED)
  except errors.ModelDirBusyError as e:
    return _fail(f'model_dir busy: {errors.one_line(e)}', EXIT_USAGE)
  except OSError as e:
    # A full disk or a lost mount while writing a run file (checkpoint writes are CheckpointErrors).
    path = _log_traceback(FLAGS.model_dir)
    where = f': {e.filename}' if getattr(e, 'filename', None) else ''
    return _fail(f'cannot write{where}: {e.strerror or errors.one_line(e)}; free space (or fix '
                 f'the directory) and rerun the same command (traceback in {path}).', EXIT_ABORTED)
  except (TypeError, ValueError) as e:
    # Raised while building or tracing from the bindings (a wrong type, a shape that does not
    # fit the data): a configuration problem. The traceback is kept for a real bug.
    path = _log_traceback(FLAGS.model_dir)
    return _fail(f'configuration error: {errors.one_line(e)} (traceback in {path})', EXIT_USAGE)
  except tf.errors.OpError as e:
    path = _log_traceback(FLAGS.model_dir)
    return _fail(f'TensorFlow error: {errors.one_line(e)} (traceback in {path})', EXIT_ABORTED)
  return _report(summary)


def _configure(argv) -> Optional[int]:
  """Checks the flags, parses the gin files and bindings, checks the model_dir; the exit code of
  a usage error, or None."""
  if len(argv) > 1:
    return _fail(f'unexpected arguments {argv[1:]}; use --gin_file, --gin_param, --gin_import, '
                 f'--model_dir, or a command: {", ".join(SUBCOMMANDS)}.', EXIT_USAGE)
  if not FLAGS.model_dir:
    return _fail('--model_dir is required (a directory for checkpoints and results).', EXIT_USAGE)
  for path in FLAGS.gin_file:
    if not os.path.isfile(path):
      return _fail(f'gin file not found: {path!r}; check the --gin_file path.', EXIT_USAGE)
  logging.getLogger('stable_train').setLevel(logging.INFO)
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.WARNING)
  from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
  gin.clear_config()
  failed = _import_user_modules(FLAGS.gin_import)
  if failed is not None:
    return failed
  for path in FLAGS.gin_file:
    # `include 'configs/x.gin'` resolves from the repo root and from next to the including config.
    folder = os.path.dirname(os.path.abspath(path))
    gin.add_config_file_search_path(folder)
    gin.add_config_file_search_path(os.path.dirname(folder))
  try:
    gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_param, skip_unknown=False)
  except Exception as e:  # pylint: disable=broad-except
    hint = ''
    hint = commands.faults_hint(e)
    if not hint and 'No configurable matching' in str(e):
      hint = ('; a factory of your own is bindable once the module that registers it '
              '(@gin.configurable) is imported: --gin_import=your_module, or an `import '
              'your_module` line in the gin file')
    return _fail(f'bad gin configuration: {errors.one_line(e).rstrip(".")}{hint}', EXIT_USAGE)
  try:
    os.makedirs(FLAGS.model_dir, exist_ok=True)
    with tempfile.TemporaryFile(dir=FLAGS.model_dir):  # Writable? Better now than mid-run.
      pass
  except OSError as e:
    return _fail(f'cannot use --model_dir={FLAGS.model_dir!r}: {e.strerror or e}; choose a '
                 'writable directory.', EXIT_USAGE)
  return None


def _import_user_modules(names) -> Optional[int]:
  """Imports the `--gin_import` modules (the current directory on the import path, for them and
  for gin `import` lines); the exit code of a failed import, or None."""
  if os.getcwd() not in sys.path:
    sys.path.append(os.getcwd())
  for name in names:
    try:
      importlib.import_module(name)
    except Exception as e:  # pylint: disable=broad-except  (the module's own error, too)
      return _fail(f'--gin_import={name}: {_import_failure(name, e)}', EXIT_USAGE)
    gin.parse_config(f'import {name}')  # Kept in operative_config.gin: a rerun imports it too.
  return None


def _import_failure(name: str, error: Exception) -> str:
  """What went wrong importing a --gin_import module, and the fix: not found (the path), a
  dependency missing (install it), or the module's own error (its file and line)."""
  missing = getattr(error, 'name', None) if isinstance(error, ImportError) else None
  if missing is not None and (name == missing or name.startswith(missing + '.')):
    return (f'{type(error).__name__}: {errors.one_line(error)}; run from the folder that holds '
            'the module, or put its folder on PYTHONPATH.')
  if missing is not None:
    return (f"it imports '{missing}', which is not installed; install it, or put its folder on "
            'PYTHONPATH.')
  frames = traceback.extract_tb(error.__traceback__)
  where = (f' ({os.path.basename(frames[-1].filename)}, line {frames[-1].lineno})'
           if frames else '')
  return (f'importing it raised {type(error).__name__}: {errors.one_line(error)}{where}; fix the '
          'module.')


def _report(summary) -> int:
  """Prints the run's outcome; returns its exit code."""
  print(f"stable_train: {summary['status']} at step {summary['global_step']} "
        f"(applied {summary['applied_steps']}, skipped {summary['skipped_steps']}, "
        f"final loss {summary['final_loss']})", flush=True)
  last_eval = summary.get('eval')
  if last_eval:
    shown = ''.join(f', {k} {v:.4g}' for k, v in last_eval.get('metrics', {}).items())
    print(f"stable_train: eval at step {last_eval['step']}: loss {last_eval['loss']:.4g}{shown}",
          flush=True)
  if summary.get('export'):
    print(f"stable_train: exported {summary['export']} from checkpoint "
          f"{summary['export_checkpoint']}", flush=True)
  if summary['status'] == 'interrupted':
    # A clean stop on SIGTERM/SIGINT: the shell's code for that signal.
    saved = ('checkpoint written' if summary.get('checkpoint') else
             'no checkpoint written (a variable is non-finite; the last good one is kept)')
    return _fail(f"interrupted by signal {summary['signal']}; {saved}; rerun the same command "
                 'to continue.', 128 + summary['signal'])
  from stable_train.core import outcome  # pylint: disable=g-import-not-at-top
  if summary['status'] not in outcome.FINISHED:  # 'aborted' or 'diverged'.
    return _fail(f"{summary['status']}: {summary.get('reason', summary['status'])}", EXIT_ABORTED)
  if summary['status'] == 'data_exhausted':  # Ends normally (exit 0), but not where it was meant to.
    sys.stderr.write(f"stable_train: warning: {summary['reason']}; repeat the dataset (or set "
                     'train.num_epochs), or lower train.num_steps.\n')
    sys.stderr.flush()
  elif summary['status'] == 'stopped_early':
    sys.stdout.write(f"stable_train: {summary['reason']}\n")
    sys.stdout.flush()
  return EXIT_OK


def _usage() -> str:
  return ('Usage: stable-train --gin_file=CONFIG.gin [--gin_param=\'train.num_steps=200\'] '
          '[--gin_import=MODULE] --model_dir=DIR\n       stable-train COMMAND [flags]   (its '
          'flags: stable-train COMMAND --help)\n\nCommands:\n' + ''.join(
              f'  {name:8s} {summary}\n' for name, (_, summary) in SUBCOMMANDS.items()))


def _parse_flags(argv):
  if commands.print_help(argv, __doc__.split('\n\n')[0] + '\n\n' + _usage(), FLAGS,
                         _FLAGS_MODULE):
    sys.exit(EXIT_OK)
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.exit(_fail(f'usage error: {e}', EXIT_USAGE))


def _final(code: int) -> int:
  """Ignores SIGTERM/SIGINT from here to the end of the process and returns `code`: the outcome
  is decided (`signals.Signals.ignore`)."""
  signals.SIGNALS.ignore()
  return code


def run_subcommand(name: str, argv) -> int:
  """Runs `stable-train <name> ...` (`SUBCOMMANDS`); returns its exit code."""
  module = importlib.import_module(SUBCOMMANDS[name][0])
  return commands.run_module(name, module, [f'stable-train {name}'] + list(argv[2:]))


def run():
  """Console-script entry point (`stable-train`, `stable-train COMMAND`) and `scripts/train.py`:
  without a command it trains, as it always did."""
  if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
    sys.exit(run_subcommand(sys.argv[1], sys.argv))
  signals.SIGNALS.install()  # Before TensorFlow is imported: a signal in start-up is one line too.
  try:
    with signals.SIGNALS.raising():  # Flag parsing included.
      app.run(lambda argv: sys.exit(_final(main(argv))), flags_parser=_parse_flags)
  except signals.StartupInterrupted as e:  # While absl parsed the flags, before main().
    sys.exit(_startup_interrupted(e))


if __name__ == '__main__':
  run()
