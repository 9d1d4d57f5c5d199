#!/usr/bin/env python3
"""Replays a NaN forensics record: python scripts/replay.py --forensics_dir=MODEL_DIR/forensics/step_N.

Restores the saved state and batch, re-runs the faulty step and prints the provenance report.
Exit codes: 0 the non-finite result was reproduced; 1 it was not; 2 usage or configuration error.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_string('forensics_dir', None, 'A <model_dir>/forensics/step_<N> folder (required).')
flags.DEFINE_multi_string('gin_file', [], "Gin files to rebuild the model with (default: the run's "
                          'operative_config.gin).')
flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')

EXIT_REPRODUCED, EXIT_NOT_REPRODUCED, EXIT_USAGE = 0, 1, 2


def _fail(message: str) -> int:
  sys.stderr.write(f'replay: {message}\n')
  sys.stderr.flush()
  return EXIT_USAGE


def main(argv) -> int:
  if len(argv) > 1:
    return _fail(f'unexpected arguments {argv[1:]}; use --forensics_dir, --gin_file, --gin_param.')
  if not FLAGS.forensics_dir:
    return _fail('--forensics_dir is required (a <model_dir>/forensics/step_<N> folder).')
  if not os.path.isdir(FLAGS.forensics_dir):
    return _fail(f'--forensics_dir={FLAGS.forensics_dir!r} is not a directory.')
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  absl_logging.set_verbosity(absl_logging.ERROR)
  from stable_train import replay  # pylint: disable=g-import-not-at-top
  try:
    result = replay.replay(FLAGS.forensics_dir, gin_files=FLAGS.gin_file,
                           gin_params=FLAGS.gin_param)
  except replay.ReplayError as e:
    return _fail(str(e).strip().splitlines()[0])
  sys.stdout.write(result.text())
  sys.stdout.flush()
  return EXIT_REPRODUCED if result.reproduced else EXIT_NOT_REPRODUCED


def _parse_flags(argv):
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.exit(_fail(f'usage error: {e}'))


if __name__ == '__main__':
  app.run(lambda argv: sys.exit(main(argv)), flags_parser=_parse_flags)
