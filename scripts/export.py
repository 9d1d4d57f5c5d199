#!/usr/bin/env python3
"""Exports a trained model for inference: python scripts/export.py --model_dir=DIR [--format=keras].

Rebuilds the model from the run's operative_config.gin (or --gin_file), restores a known-good
checkpoint's weights into it and writes a `.keras` file or a SavedModel (default:
DIR/export/model.keras or DIR/export/saved_model) that loads without stable_train.
Exit codes: 0 exported; 1 no usable checkpoint (missing directory, manifest or good checkpoint, or
one that does not fit the model); 2 usage or configuration error, or an --output that cannot be
written (a full disk); 128+N stopped by signal N (the export is atomic). Failures are one line on
stderr.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from stable_train import signals  # pylint: disable=g-import-not-at-top  (no TensorFlow)

FLAGS = flags.FLAGS
flags.DEFINE_string('model_dir', None, 'The training run to export from (required).')
flags.DEFINE_string('checkpoint', 'last_good', "'last_good', 'latest', 'best' (the best eval of "
                    "an EarlyStopping or BestCheckpoint run; last_good, with a note, when none is "
                    "marked) or a checkpoint prefix path.")
flags.DEFINE_string('format', 'keras', "'keras' (a .keras file) or 'saved_model' (a folder).")
flags.DEFINE_string('output', None, 'Where to write (default: <model_dir>/export/model.keras or '
                    '<model_dir>/export/saved_model).')
flags.DEFINE_multi_string('gin_file', [], "Gin files to rebuild the model with (default: the "
                          "run's operative_config.gin).")
flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')

EXIT_OK, EXIT_NO_CHECKPOINT, EXIT_USAGE = 0, 1, 2
_FORMATS = ('keras', 'saved_model')


def _fail(message: str, code: int) -> int:
  sys.stderr.write(f'export: {message}\n')
  sys.stderr.flush()
  return code


def main(argv) -> int:
  if len(argv) > 1:
    return _fail(f'unexpected arguments {argv[1:]}; use --model_dir, --checkpoint, --format, '
                 '--output, --gin_file, --gin_param.', EXIT_USAGE)
  if not FLAGS.model_dir:
    return _fail('--model_dir is required (the directory of a training run).', EXIT_USAGE)
  if FLAGS.format not in _FORMATS:
    return _fail(f'--format={FLAGS.format!r} must be one of {", ".join(_FORMATS)}.', EXIT_USAGE)
  if not os.path.isdir(FLAGS.model_dir):
    return _fail(f'--model_dir={FLAGS.model_dir!r} does not exist; pass the directory of a '
                 'training run.', EXIT_NO_CHECKPOINT)
  gin_files = list(FLAGS.gin_file)
  if not gin_files:
    operative = os.path.join(FLAGS.model_dir, 'operative_config.gin')
    if not os.path.isfile(operative):
      return _fail(f'{operative} not found; pass the run\'s --gin_file.', EXIT_USAGE)
    gin_files = [operative]
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  from stable_train import export  # pylint: disable=g-import-not-at-top
  output = FLAGS.output or os.path.join(FLAGS.model_dir, 'export',
                                        export.DEFAULT_NAMES[FLAGS.format])
  try:
    chosen, described = _export(export, gin_files, output)
  except errors.CheckpointError as e:
    return _fail(f'no usable checkpoint: {errors.one_line(e)}', EXIT_NO_CHECKPOINT)
  except errors.ConfigError as e:
    return _fail(f'configuration error: {errors.one_line(e)}', EXIT_USAGE)
  except (OSError, tf.errors.OpError) as e:  # A full disk in a SavedModel write is an OpError.
    return _fail(f'cannot write {output}: {errors.one_line(e)}; free space or choose a writable '
                 '--output (an earlier export there is as it was).', EXIT_USAGE)
  print(f'export: wrote {output} ({FLAGS.format}) from checkpoint {chosen} ({described})',
        flush=True)
  return EXIT_OK


def _export(export, gin_files, output):
  """Chooses the checkpoint, rebuilds the model, restores and writes it; (checkpoint, what)."""
  chosen, described = FLAGS.checkpoint, 'given path'
  if FLAGS.checkpoint in export.CHECKPOINT_CHOICES:  # Before building anything.
    chosen, described = export.choose_checkpoint(FLAGS.model_dir, FLAGS.checkpoint,
                                                 option='--checkpoint={}')
    if FLAGS.checkpoint == 'best' and not described.startswith('best'):
      sys.stderr.write(f'export: note: {described}; exporting that one.\n')
  model = export.model_from_config(gin_files, FLAGS.gin_param)
  export.load_for_inference(model, checkpoint=chosen)
  export.export(model, output, format=FLAGS.format)
  return chosen, described


def _parse_flags(argv):
  if any(arg in ('--help', '-help', '-h', '-?', '--helpshort', '--helpfull') for arg in argv[1:]):
    # absl's --help exits 1; this lists the flags (filed under argv[0]: this is __main__).
    sys.stdout.write(__doc__.strip() + '\n\nFlags:\n' + FLAGS.module_help(sys.argv[0]) + '\n')
    sys.exit(EXIT_OK)
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.exit(_fail(f'usage error: {e}', EXIT_USAGE))


def run():
  """Runs the script; SIGTERM/SIGINT end it with one line and 128+N, the export atomic."""
  signals.SIGNALS.install()  # Before TensorFlow is imported.
  try:
    with signals.SIGNALS.raising():
      app.run(lambda argv: sys.exit(main(argv)), flags_parser=_parse_flags)
  except signals.StartupInterrupted as e:
    sys.exit(_fail(f'interrupted by signal {e.signum}; an export is written atomically: its path '
                   'holds what it held before, or the complete new export; rerun to export.',
                   128 + e.signum))


if __name__ == '__main__':
  run()
