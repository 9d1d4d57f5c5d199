"""`stable-train export --model_dir=DIR [--format=keras]`: exports a trained model for inference.

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

from absl import flags

from stable_train.app import commands

FLAGS = flags.FlagValues()  # Its own flags: the training command's --model_dir is another flag.
flags.DEFINE_string('model_dir', None, 'The training run to export from (required).',
                    flag_values=FLAGS)
flags.DEFINE_string('checkpoint', 'last_good', "'last_good', 'latest', 'best' (the best eval of "
                    "an EarlyStopping or BestCheckpoint run; last_good, with a note, when none is "
                    "marked) or a checkpoint prefix path.", flag_values=FLAGS)
flags.DEFINE_string('format', 'keras', "'keras' (a .keras file) or 'saved_model' (a folder).",
                    flag_values=FLAGS)
flags.DEFINE_string('output', None, 'Where to write (default: <model_dir>/export/model.keras or '
                    '<model_dir>/export/saved_model).', flag_values=FLAGS)
flags.DEFINE_multi_string('gin_file', [], "Gin files to rebuild the model with (default: the "
                          "run's operative_config.gin).", flag_values=FLAGS)
flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.', flag_values=FLAGS)

EXIT_OK, EXIT_NO_CHECKPOINT, EXIT_USAGE = 0, 1, 2
_FORMATS = ('keras', 'saved_model')
INTERRUPTED = ('an export is written atomically: its path holds what it held before, or the '
                'complete new export; rerun to export.')



def main(argv) -> int:
  """Runs `stable-train export` (argv[0] is the command's name); returns the exit code."""
  argv = commands.command_flags(FLAGS, argv, __doc__, __name__, 'export')
  if isinstance(argv, int):  # --help, or a flag error.
    return argv
  if len(argv) > 1:
    return commands.fail('export', f'unexpected arguments {argv[1:]}; use --model_dir, '
                        '--checkpoint, --format, --output, --gin_file, --gin_param.', EXIT_USAGE)
  if not FLAGS.model_dir:
    return commands.fail('export', '--model_dir is required (the directory of a training run).',
                        EXIT_USAGE)
  if FLAGS.format not in _FORMATS:
    return commands.fail('export', f'--format={FLAGS.format!r} must be one of '
                        f'{", ".join(_FORMATS)}.', EXIT_USAGE)
  if not os.path.isdir(FLAGS.model_dir):
    return commands.fail('export', f'--model_dir={FLAGS.model_dir!r} does not exist; pass the '
                        'directory of a training run.', EXIT_NO_CHECKPOINT)
  gin_files = list(FLAGS.gin_file)
  if not gin_files:
    operative = os.path.join(FLAGS.model_dir, 'operative_config.gin')
    if not os.path.isfile(operative):
      return commands.fail('export', f'{operative} not found; pass the run\'s --gin_file.',
                          EXIT_USAGE)
    gin_files = [operative]
  missing = [f for f in gin_files if not os.path.isfile(f)]
  if missing:  # A usage error, before any checkpoint is looked at.
    return commands.fail('export', f'gin file not found: {missing[0]!r}; check the --gin_file '
                         'path.', EXIT_USAGE)
  commands.quiet_tensorflow()
  return _export(gin_files)


def _export(gin_files) -> int:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  from stable_train.app import export  # pylint: disable=g-import-not-at-top
  output = FLAGS.output or os.path.join(FLAGS.model_dir, 'export',
                                        export.DEFAULT_NAMES[FLAGS.format])
  try:
    chosen, described = _write(export, gin_files, output)
  except errors.CheckpointError as e:
    return commands.fail('export', f'no usable checkpoint: {errors.one_line(e)}',
                         EXIT_NO_CHECKPOINT)
  except errors.ConfigError as e:
    return commands.fail('export', f'configuration error: {errors.one_line(e)}', EXIT_USAGE)
  except (OSError, tf.errors.OpError) as e:  # A full disk in a SavedModel write is an OpError.
    return commands.fail('export', f'cannot write {output}: {errors.one_line(e)}; free space or '
                         'choose a writable --output (an earlier export there is as it was).',
                         EXIT_USAGE)
  print(f'export: wrote {output} ({FLAGS.format}) from checkpoint {chosen} ({described})',
        flush=True)
  return EXIT_OK


def _write(export, gin_files, output):
  """Chooses the checkpoint, rebuilds the model, restores and writes it; (checkpoint, what)."""
  chosen, described = FLAGS.checkpoint, 'given path'
  if FLAGS.checkpoint not in export.CHECKPOINT_CHOICES:  # A path, or a name in the run's.
    chosen = export.checkpoint_prefix(FLAGS.model_dir, FLAGS.checkpoint)
  else:  # Before building anything.
    chosen, described = export.choose_checkpoint(FLAGS.model_dir, FLAGS.checkpoint,
                                                 option='--checkpoint={}')
    if FLAGS.checkpoint == 'best' and not described.startswith('best'):
      sys.stderr.write(f'export: note: {described}; exporting that one.\n')
  model = export.model_from_config(gin_files, FLAGS.gin_param)
  export.load_for_inference(model, checkpoint=chosen)
  export.export(model, output, format=FLAGS.format)
  return chosen, described
