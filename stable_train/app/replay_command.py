"""`stable-train replay --forensics_dir=MODEL_DIR/forensics/step_N`: replays a NaN forensics record.

Restores the saved state and batch, re-runs the faulty step and prints the provenance report.
Exit codes: 0 the non-finite result was reproduced; 1 it was not; 2 usage or configuration error;
128+N stopped by signal N.
"""

import os
import sys

from absl import flags

from stable_train.app import commands

FLAGS = flags.FlagValues()  # Its own flags, apart from the training command's.
flags.DEFINE_string('forensics_dir', None, 'A <model_dir>/forensics/step_<N> folder (required).',
                    flag_values=FLAGS)
flags.DEFINE_multi_string('gin_file', [], "Gin files to rebuild the model with (default: the run's "
                          'operative_config.gin).', flag_values=FLAGS)
flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.', flag_values=FLAGS)

EXIT_REPRODUCED, EXIT_NOT_REPRODUCED, EXIT_USAGE = 0, 1, 2
INTERRUPTED = 'a replay writes nothing; rerun to replay.'  # After a SIGTERM/SIGINT.



def main(argv) -> int:
  """Runs `stable-train replay` (argv[0] is the command's name); returns the exit code."""
  argv = commands.command_flags(FLAGS, argv, __doc__, __name__, 'replay')
  if isinstance(argv, int):  # --help, or a flag error.
    return argv
  if len(argv) > 1:
    return commands.fail('replay', f'unexpected arguments {argv[1:]}; use --forensics_dir, '
                    '--gin_file, --gin_param.', EXIT_USAGE)
  if not FLAGS.forensics_dir:
    return commands.fail('replay', '--forensics_dir is required (a <model_dir>/forensics/step_<N> '
                    'folder).', EXIT_USAGE)
  if not os.path.isdir(FLAGS.forensics_dir):
    return commands.fail('replay', f'--forensics_dir={FLAGS.forensics_dir!r} is not a directory.',
                    EXIT_USAGE)
  commands.quiet_tensorflow()
  from stable_train.app import replay  # pylint: disable=g-import-not-at-top
  try:
    result = replay.replay(FLAGS.forensics_dir, gin_files=FLAGS.gin_file,
                           gin_params=FLAGS.gin_param)
  except replay.ReplayError as e:
    return commands.fail('replay', str(e).strip().splitlines()[0], EXIT_USAGE)
  sys.stdout.write(result.text())
  sys.stdout.flush()
  return EXIT_REPRODUCED if result.reproduced else EXIT_NOT_REPRODUCED
