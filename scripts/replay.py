#!/usr/bin/env python3
"""Replays a NaN forensics record: python scripts/replay.py --forensics_dir=MODEL_DIR/forensics/step_N.

The same command as `stable-train replay` (stable_train/app/replay_command.py), for a source checkout.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stable_train.app import commands  # pylint: disable=g-import-not-at-top
from stable_train.app import replay_command  # pylint: disable=g-import-not-at-top

if __name__ == '__main__':
  sys.exit(commands.run_module('replay', replay_command, sys.argv))
