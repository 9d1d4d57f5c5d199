"""The command-line entry point: parse gin files and bindings, build the root `train`, run it.

Exit codes: 0 completed (num_steps or num_epochs reached, stopped early by EarlyStopping, or the
dataset exhausted before num_steps: a warning line on stderr); 1 a policy stopped the run
(checkpoints intact), no checkpoint could be restored (none readable, or files without a readable manifest), a checkpoint or file could not be
written (disk full), or TensorFlow failed at run time; 2 usage or configuration error (an empty
dataset, a batch size other than the checkpointed one, a model_dir in use by another live process
included); 128+N stopped cleanly by signal N (SIGTERM: 143, SIGINT: 130), during start-up or after
writing a checkpoint. Every failure is one line on stderr, without a traceback.
"""

import logging
import os
import re
import signal
import sys
import tempfile
import traceback
from typing import Callable, Optional

from absl import app
from absl import flags
import gin

FLAGS = flags.FLAGS
flags.DEFINE_multi_string('gin_file', [], 'Gin config file(s); later files override earlier ones.')
flags.DEFINE_multi_string('gin_param', [], "Gin binding(s), e.g. 'train.num_steps=200'.")
flags.DEFINE_string('model_dir', None, 'Directory for checkpoints, events, summaries (required).')

EXIT_OK, EXIT_ABORTED, EXIT_USAGE = 0, 1, 2
# The module absl files the flags above under (`python -m stable_train.cli` runs this as __main__).
_FLAGS_MODULE = __name__ if __name__ != '__main__' else sys.argv[0]


class _StartupInterrupted(BaseException):
  """SIGTERM/SIGINT before training began (a BaseException, like KeyboardInterrupt)."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


class _Signals:
  """SIGTERM/SIGINT for the whole process: during start-up the first one stops it cleanly
  (raises `_StartupInterrupted`); once training began, the Trainer's own handler takes over
  (it stops at the next loop end with a checkpoint); after that, and for any repeat, a signal is
  only recorded, so a second SIGTERM 20 ms after the first cannot kill a run mid-checkpoint."""

  def __init__(self):
    self.received = []
    self.raising = False

  def install(self) -> None:
    self.raising = True  # Start-up has begun (flag parsing included).
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGTERM last: once it is caught, both are.
      signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    del frame
    self.received.append(signum)
    if self.raising and len(self.received) == 1:
      raise _StartupInterrupted(signum)


_SIGNALS = _Signals()


@gin.configurable('train', denylist=['model_dir'])
def train(*, model_dir: str, num_steps: Optional[int] = None, num_epochs: Optional[int] = None,
          dataset_fn: Optional[Callable] = None, trainer_fn: Optional[Callable] = None,
          strategy_fn: Optional[Callable] = None, precision: str = 'float32',
          seed: Optional[int] = None, export_format: Optional[str] = None,
          export_checkpoint: str = 'last_good',
          eval_dataset_fn: Optional[Callable] = None, eval_every: Optional[int] = None,
          eval_steps: Optional[int] = None):
  """The root configurable: builds the strategy, the trainer and the dataset, then trains.

  Args:
    model_dir: where the run keeps its files (from --model_dir).
    num_steps: the global step to train to (this or num_epochs is required).
    num_epochs: instead of num_steps: passes over the finite dataset (`dataset_fn` without
      repeat); one epoch is its cardinality in batches, or counted by reading it once.
    dataset_fn: gin reference to a function returning a `tf.data.Dataset`.
    trainer_fn: gin reference to a Trainer class or factory, called as trainer_fn(model_dir=...,
      strategy=...); everything else comes from its own bindings. Default: `@Trainer`.
    strategy_fn: gin reference to a function returning a `tf.distribute.Strategy`; default: the
      default strategy (one device).
    precision: 'float32', 'mixed_float16' (dynamic loss scaling added), 'mixed_bfloat16' or
      'float64'; set before the model is built, and put back afterwards.
    seed: seeds Python's, numpy's and TensorFlow's random generators
      (`keras.utils.set_random_seed`) before anything is built, so a model factory that does not
      seed itself (`mlp.seed = None`) initialises the same way on a rerun of operative_config.gin.
      None: not seeded.
    export_format: None, 'keras' or 'saved_model': once the run has ended normally (completed,
      stopped early, or its data exhausted), the `export_checkpoint` checkpoint is exported to
      `<model_dir>/export/model.keras` or `<model_dir>/export/saved_model` (chief only),
      loadable without stable_train.
    export_checkpoint: which checkpoint the end-of-run export takes: 'last_good', 'best' (the
      best evaluation, marked by an EarlyStopping or BestCheckpoint policy; last_good, with a
      warning, when none is marked) or 'latest'.
    eval_dataset_fn: gin reference to a function returning the held-out `tf.data.Dataset`;
      None: no evaluation.
    eval_every: evaluate every this many steps (and at the end); None: only at the end.
    eval_steps: batches per evaluation; None: the whole eval dataset.

  Returns:
    The run summary.
  """
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  if num_steps is None and num_epochs is None:
    raise errors.ConfigError(
        'train.num_steps is not set; add `train.num_steps = 1000` (or `train.num_epochs = 3` for '
        "a finite dataset) to a gin file or --gin_param='train.num_steps=1000'.")
  if num_steps is not None and num_epochs is not None:
    raise errors.ConfigError(
        f'train.num_steps={num_steps!r} and train.num_epochs={num_epochs!r} are both set; keep '
        'one.')
  if num_epochs is not None:
    length = {'num_epochs': errors.check_int('train', 'num_epochs', num_epochs, minimum=1)}
  else:
    length = {'num_steps': errors.check_int('train', 'num_steps', num_steps, minimum=1)}
  if seed is not None:
    seed = errors.check_int('train', 'seed', seed, minimum=0)
  if export_format not in (None, 'keras', 'saved_model'):
    raise errors.ConfigError(f"train.export_format={export_format!r} must be None, 'keras' or "
                             "'saved_model'.")
  if export_checkpoint not in ('last_good', 'best', 'latest'):
    raise errors.ConfigError(f"train.export_checkpoint={export_checkpoint!r} must be "
                             "'last_good', 'best' or 'latest'.")
  if dataset_fn is None:
    raise errors.ConfigError(
        'train.dataset_fn is not set; bind it, e.g. `train.dataset_fn = @synthetic_regression`.')
  import keras  # pylint: disable=g-import-not-at-top
  from stable_train import precision as precision_lib  # pylint: disable=g-import-not-at-top
  previous = (keras.config.floatx(), keras.mixed_precision.global_policy())
  precision_lib.set_precision(precision)
  if seed is not None:
    keras.utils.set_random_seed(seed)  # Before the strategy, the model and the dataset.
  try:
    return _train(model_dir, length, dataset_fn, trainer_fn, strategy_fn,
                  (export_format, export_checkpoint), eval_dataset_fn, eval_every, eval_steps)
  finally:  # In-process callers (tests, notebooks) get their precision back.
    keras.config.set_floatx(previous[0])
    keras.mixed_precision.set_global_policy(previous[1])


def _train(model_dir, length, dataset_fn, trainer_fn, strategy_fn, export,
           eval_dataset_fn=None, eval_every=None, eval_steps=None):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  from stable_train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from stable_train import checkpointing  # pylint: disable=g-import-not-at-top
  from stable_train import distribute  # pylint: disable=g-import-not-at-top
  strategy = strategy_fn() if strategy_fn is not None else tf.distribute.get_strategy()
  chief = distribute.is_chief(strategy)  # Only the chief writes files (multi-worker runs).
  # Taken before the model and the data are built, so a busy model_dir is refused at once (the
  # Trainer takes it again, re-entrantly).
  lock = checkpointing.RunLock(model_dir).acquire() if chief else None
  try:
    with strategy.scope():
      trainer = (trainer_fn or trainer_lib.Trainer)(model_dir=model_dir, strategy=strategy)
    dataset = dataset_fn()
    if not isinstance(dataset, tf.data.Dataset):
      raise errors.ConfigError(
          f'train.dataset_fn returned {type(dataset).__name__}, not a tf.data.Dataset.')
    eval_dataset = eval_dataset_fn() if eval_dataset_fn is not None else None
    if eval_dataset is not None and not isinstance(eval_dataset, tf.data.Dataset):
      raise errors.ConfigError(
          f'train.eval_dataset_fn returned {type(eval_dataset).__name__}, not a tf.data.Dataset.')
    if chief:
      _write_operative_config(model_dir)
    try:
      summary = trainer.fit(dataset, **length, eval_dataset=eval_dataset,
                            eval_every=eval_every, eval_steps=eval_steps)
      _SIGNALS.raising = False  # Training ran: from here on a signal is only recorded.
    except _StartupInterrupted:
      # Raised by the first signal outside the Trainer's own handler. After fit wrote its summary
      # (the signal came as fit returned) the run is over and stands; before, nothing trained.
      _SIGNALS.raising = False
      if not trainer.last_summary:
        raise
      summary = trainer.last_summary
    if chief:
      _write_operative_config(model_dir)
    if summary.get('note') == 'dataset empty':
      raise errors.ConfigError(trainer_lib.EMPTY_DATASET)
    from stable_train import controller  # pylint: disable=g-import-not-at-top
    if chief and export[0] and summary.get('status') in controller.FINISHED:
      summary['export'], summary['export_checkpoint'] = _export(trainer, model_dir, *export)
  finally:
    if lock is not None:
      lock.release()
  return summary


def _export(trainer, model_dir: str, export_format: str, checkpoint: str):
  """Restores the run's `checkpoint` ('last_good', 'best' or 'latest') into the trainer's model
  (the run is over) and exports it to `<model_dir>/export/`; returns (the path written, which
  checkpoint it holds, e.g. 'best (step 400)')."""
  from stable_train import export  # pylint: disable=g-import-not-at-top
  _, described = export.choose_checkpoint(model_dir, checkpoint)
  export.load_for_inference(trainer.model, model_dir, checkpoint=checkpoint)
  path = os.path.join(model_dir, 'export', export.DEFAULT_NAMES[export_format])
  return export.export(trainer.model, path, format=export_format), described


def _write_operative_config(model_dir: str) -> None:
  from stable_train import events  # pylint: disable=g-import-not-at-top
  events.write_atomic(os.path.join(model_dir, 'operative_config.gin'), gin.operative_config_str())


def _fail(message: str, code: int) -> int:
  sys.stderr.write(f'stable_train: {message}\n')
  sys.stderr.flush()
  return code


def _one_line(error: BaseException) -> str:
  """The line of an error message that says what went wrong.

  gin appends "In call to configurable ..." lines; errors raised in traced code come wrapped in
  "in user code:", File/source lines and generic headers ("Exception encountered when calling
  Sequential.call().", "Graph execution error:") around the one line that matters.
  """
  text = re.sub(r'\x1b\[[0-9;]*m', '', str(error))  # Keras bolds its message with ANSI codes.
  noise = ('In call to configurable', 'in user code', 'Traceback', 'Arguments received', '•',
           '^', '[[{{node', 'Detected at node', 'Graph execution error',
           'Exception encountered when calling')
  lines, under_file = [], False
  for line in text.splitlines():
    line = line.strip()
    if under_file:  # The source line printed under a File line.
      under_file = False
      continue
    if line.startswith('File "'):
      under_file = True
      continue
    line = re.sub(r'^[A-Za-z_.]*(Error|Exception): ', '', line)
    if line and not line.startswith(noise):
      lines.append(line)
  return (lines[0] if lines else type(error).__name__)[:600]


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
  _SIGNALS.raising = True
  try:
    return _main(argv)
  except _StartupInterrupted as e:
    return _startup_interrupted(e)
  finally:
    _SIGNALS.raising = False


def _startup_interrupted(error: _StartupInterrupted) -> int:
  return _fail(f'interrupted by signal {error.signum} during start-up, before training began; '
               'no checkpoint was touched; rerun the same command to start.', 128 + error.signum)


def _main(argv) -> int:
  if len(argv) > 1:
    return _fail(f'unexpected arguments {argv[1:]}; use --gin_file, --gin_param, --model_dir.',
                 EXIT_USAGE)
  if not FLAGS.model_dir:
    return _fail('--model_dir is required (a directory for checkpoints and results).', EXIT_USAGE)
  for path in FLAGS.gin_file:
    if not os.path.isfile(path):
      return _fail(f'gin file not found: {path!r}; check the --gin_file path.', EXIT_USAGE)
  logging.getLogger('stable_train').setLevel(logging.INFO)
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.WARNING)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from stable_train import configurables  # pylint: disable=g-import-not-at-top,unused-import
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  for path in FLAGS.gin_file:
    # `include 'configs/x.gin'` resolves from the repo root and from next to the including config.
    folder = os.path.dirname(os.path.abspath(path))
    gin.add_config_file_search_path(folder)
    gin.add_config_file_search_path(os.path.dirname(folder))
  try:
    gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_param, skip_unknown=False)
  except Exception as e:  # pylint: disable=broad-except
    return _fail(f'bad gin configuration: {_one_line(e)}', EXIT_USAGE)
  try:
    os.makedirs(FLAGS.model_dir, exist_ok=True)
    with tempfile.TemporaryFile(dir=FLAGS.model_dir):  # Writable? Better now than mid-run.
      pass
  except OSError as e:
    return _fail(f'cannot use --model_dir={FLAGS.model_dir!r}: {e.strerror or e}; choose a '
                 'writable directory.', EXIT_USAGE)
  try:
    summary = train(model_dir=FLAGS.model_dir)
  except errors.ConfigError as e:
    return _fail(f'configuration error: {_one_line(e)}', EXIT_USAGE)
  except errors.NumericsError as e:
    return _fail(f'aborted: {_one_line(e)}', EXIT_ABORTED)
  except errors.CheckpointError as e:
    return _fail(f'checkpoint error: {_one_line(e)}', EXIT_ABORTED)
  except errors.ModelDirBusyError as e:
    return _fail(f'model_dir busy: {_one_line(e)}', EXIT_USAGE)
  except OSError as e:
    # A full disk or a lost mount while writing a run file (checkpoint writes are CheckpointErrors).
    path = _log_traceback(FLAGS.model_dir)
    where = f': {e.filename}' if getattr(e, 'filename', None) else ''
    return _fail(f'cannot write{where}: {e.strerror or _one_line(e)}; free space (or fix the '
                 f'directory) and rerun the same command (traceback in {path}).', EXIT_ABORTED)
  except (TypeError, ValueError) as e:
    # Raised while building or tracing from the bindings (a wrong type, a shape that does not
    # fit the data): a configuration problem. The traceback is kept for a real bug.
    path = _log_traceback(FLAGS.model_dir)
    return _fail(f'configuration error: {_one_line(e)} (traceback in {path})', EXIT_USAGE)
  except tf.errors.OpError as e:
    path = _log_traceback(FLAGS.model_dir)
    return _fail(f'TensorFlow error: {_one_line(e)} (traceback in {path})', EXIT_ABORTED)
  print(f"stable_train: {summary['status']} at step {summary['global_step']} "
        f"(applied {summary['applied_steps']}, skipped {summary['skipped_steps']}, "
        f"final loss {summary['final_loss']})", flush=True)
  if summary.get('export'):
    print(f"stable_train: exported {summary['export']} from checkpoint "
          f"{summary['export_checkpoint']}", flush=True)
  if summary['status'] == 'interrupted':
    # A clean stop on SIGTERM/SIGINT: the shell's code for that signal.
    saved = ('checkpoint written' if summary.get('checkpoint') else
             'no checkpoint written (a variable is non-finite; the last good one is kept)')
    return _fail(f"interrupted by signal {summary['signal']}; {saved}; rerun the same command "
                 'to continue.', 128 + summary['signal'])
  from stable_train import controller  # pylint: disable=g-import-not-at-top
  if summary['status'] not in controller.FINISHED:
    return _fail(f"aborted: {summary.get('reason', summary['status'])}", EXIT_ABORTED)
  if summary['status'] == 'data_exhausted':  # Ends normally (exit 0), but not where it was meant to.
    sys.stderr.write(f"stable_train: warning: {summary['reason']}; repeat the dataset (or set "
                     'train.num_epochs), or lower train.num_steps.\n')
    sys.stderr.flush()
  elif summary['status'] == 'stopped_early':
    sys.stdout.write(f"stable_train: {summary['reason']}\n")
    sys.stdout.flush()
  return EXIT_OK


_HELP = ('--help', '-help', '-h', '-?', '--helpshort', '--helpfull')


def _exit_on_help(argv, doc: str, module_name: str) -> None:
  """On --help (-h, -?, --helpshort, --helpfull): prints `doc` and the flags `module_name`
  defines, each with its help, to stdout and exits 0.

  absl's own --help exits 1 and lists only the flags of the main module (a console script's
  wrapper defines none), so the entry points answer it themselves, before absl parses.
  """
  if not any(arg in _HELP for arg in argv[1:]):
    return
  sys.stdout.write((doc or '').strip() + '\n\nFlags:\n' + FLAGS.module_help(module_name) + '\n')
  sys.stdout.flush()
  sys.exit(EXIT_OK)


def _parse_flags(argv):
  _exit_on_help(argv, __doc__.split('\n\n')[0] + '\n\nUsage: stable-train --gin_file=CONFIG.gin '
                "[--gin_param='train.num_steps=200'] --model_dir=DIR", _FLAGS_MODULE)
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.exit(_fail(f'usage error: {e}', EXIT_USAGE))


def _final(code: int) -> int:
  """Ignores SIGTERM/SIGINT from here to the end of the process and returns `code`.

  The outcome is decided; a repeated signal must not change the exit status. Python resets its
  own handlers to the default action while the interpreter shuts down (a second SIGINT 20 ms
  after the first then killed the process with -2), but leaves an ignored signal ignored.
  """
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
  return code


def run():
  """Console-script entry point (`stable-train`) and `scripts/train.py`."""
  _SIGNALS.install()  # Before TensorFlow is imported: a signal during start-up is one line too.
  try:
    app.run(lambda argv: sys.exit(_final(main(argv))), flags_parser=_parse_flags)
  except _StartupInterrupted as e:  # While absl parsed the flags, before main().
    sys.exit(_startup_interrupted(e))


if __name__ == '__main__':
  run()
