"""Runs the reference protocol ../shared/bench/perf.py against this checkout.

  python3 scripts/run_perf.py --rounds 7 --steps 200 --rollbacks 0

perf.py imports `stable_train.events` and `stable_train.models`, which are now
`stable_train.runfiles.events` and `stable_train.zoo.models`: this maps the old names, puts this
checkout first on sys.path and runs perf.py with the remaining arguments.
"""

import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PERF = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'shared', 'bench', 'perf.py')


def main():
  sys.path.insert(0, os.path.dirname(HERE))
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.runfiles import events  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
  for name, module in (('events', events), ('models', models)):
    sys.modules[f'stable_train.{name}'] = module
    setattr(stable_train, name, module)
  path = os.environ.get('STABLE_TRAIN_PERF', PERF)
  sys.argv = [path] + sys.argv[1:]
  runpy.run_path(path, run_name='__main__')


if __name__ == '__main__':
  main()
