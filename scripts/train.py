#!/usr/bin/env python3
"""Trains a model from gin configs: python scripts/train.py --gin_file=configs/quickstart.gin --model_dir=DIR."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stable_train.app import cli  # pylint: disable=g-import-not-at-top

if __name__ == '__main__':
  cli.run()
