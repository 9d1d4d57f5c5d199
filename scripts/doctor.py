#!/usr/bin/env python3
"""The doctor on a run directory: python scripts/doctor.py --model_dir=DIR [--json]
[--plot FILE.png] (the same as `stable-train doctor DIR`).

Names the most likely cause of the run's trouble, the evidence and the remedy, from what the run
recorded (events.jsonl, summary.json, forensics records); works on old run directories too, with
the evidence they have. --plot also draws the run (needs matplotlib). Exit codes: 0 a diagnosis
was printed; 2 DIR holds no run records, or --plot could not draw (no matplotlib, unwritable).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stable_train.app import commands  # pylint: disable=g-import-not-at-top
from stable_train.doctor import doctor  # pylint: disable=g-import-not-at-top  (no TensorFlow import)

if __name__ == '__main__':
  sys.exit(commands.run_module('doctor', doctor, sys.argv))
