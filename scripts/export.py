#!/usr/bin/env python3
"""Exports a trained model for inference: python scripts/export.py --model_dir=DIR [--format=keras].

The same command as `stable-train export` (stable_train/app/export_command.py), for a source checkout.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stable_train.app import commands  # pylint: disable=g-import-not-at-top
from stable_train.app import export_command  # pylint: disable=g-import-not-at-top

if __name__ == '__main__':
  sys.exit(commands.run_module('export', export_command, sys.argv))
