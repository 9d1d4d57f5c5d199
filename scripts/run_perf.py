"""Runs the reference protocol ../shared/bench/perf.py against this checkout.

  python3 scripts/run_perf.py --rounds 7 --steps 200 --rollbacks 0

Puts this checkout first on sys.path (perf.py imports `stable_train`, and an installed copy
may be another checkout's) and runs perf.py with the remaining arguments.
"""

import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PERF = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'shared', 'bench', 'perf.py')


def main():
  sys.path.insert(0, os.path.dirname(HERE))
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  path = os.environ.get('STABLE_TRAIN_PERF', PERF)
  sys.argv = [path] + sys.argv[1:]
  runpy.run_path(path, run_name='__main__')


if __name__ == '__main__':
  main()
