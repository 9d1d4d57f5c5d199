#!/usr/bin/env python3
"""The doctor's calibration set (issue 33): healthy runs and field-derived sick scenarios, both
front doors, diagnosed offline.

    python scripts/calibrate.py [--matrix=healthy|sick|both] [--only=NAME,...]
        [--split=tune|held_out|fresh|blind|blind2|blind3|blind4|blind5|blind6|all] [--door=trainer|fit|both] [--quick]
        [--stack=default|diagnostic] [--json=FILE] [--list]

The registry (scripts/calibration/registry.py):
  healthy  models trained as people train them: four keras.applications models (weights=None,
           32x32 digits), a ResNet, the transformer, an LSTM, a GRU, a subclassed model and MLPs;
           softmax + cross-entropy, logits + from_logits=True, sigmoid + binary cross-entropy,
           MSE; Adam, AdamW, SGD with momentum, RMSprop at their usual rates; float32 and
           mixed_float16; XLA on and off (scripts/calibration/healthy.py).
  sick     scenarios of the nine causes, each the mechanism of a public report (an issue thread
           or a Q&A page, cited in its docstring), not of the doctor's rules; several seeds where
           the data order decides; each assigned once to the 'tune', the 'held_out', the
           'fresh', the 'blind' or the 'blind2' split (scripts/calibration/sick_*.py; 'fresh'
           is sick_fresh.py, 'blind' sick_blind.py and 'blind2' sick_blind2.py, each written
           later and blind to the doctor's rules).
Each run trains into a temporary run directory (the default stack, or with --stack=diagnostic
also Forensics(recheck=True)), then `doctor.load` + `diagnose` read it. "Did it train" is the
task error on fixed clean batches before and after (scripts/calibration/runner.py).

Prints one line per run and the Markdown tables: the healthy matrix (stops, rollbacks, diverged,
named causes), the sick matrix's accuracy on each split apart,
the confusion table, the confident wrong answers, the `completed` runs that did not train.
"""

import argparse
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from scripts.calibration import cases  # pylint: disable=g-import-not-at-top
from scripts.calibration import registry  # pylint: disable=g-import-not-at-top
from scripts.calibration import report  # pylint: disable=g-import-not-at-top
from scripts.calibration import runner  # pylint: disable=g-import-not-at-top


def parse(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--matrix', choices=('healthy', 'sick', 'both'), default='both')
  parser.add_argument('--only', default='', help='comma-separated case names')
  parser.add_argument('--split', choices=cases.SPLITS + ('all',), default='all')
  parser.add_argument('--door', choices=('trainer', 'fit', 'both'), default='both')
  parser.add_argument('--quick', action='store_true', help='the small subset the tests run')
  parser.add_argument('--stack', choices=('default', 'diagnostic'), default='default')
  parser.add_argument('--json', default='', help='write the results to this file')
  parser.add_argument('--list', action='store_true', help='list the registry and exit')
  parser.add_argument('--keep', default='', help='keep each run directory under this folder')
  parser.add_argument('--rediagnose', default='',
                      help="a --json file of runs made with --keep: diagnose their directories "
                           'again (no training) and print the tables')
  parser.add_argument('--verbose', action='store_true', help='print each run\'s evidence')
  return parser.parse_args(argv)


def list_registry() -> None:
  """The registry, one case a line."""
  for c in registry.ALL:
    print(f"{c.name:34} {c.expected:22} {c.arch:20} {'/'.join(c.doors):12} "
          f"seeds={','.join(map(str, c.seeds)):6} {c.split or '-':8} {c.citation}")


def main(argv=None) -> int:
  args = parse(argv)
  if args.list:
    list_registry()
    return 0
  logging.getLogger('stable_train').setLevel(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')
  if args.rediagnose:
    with open(args.rediagnose) as f:
      results = [runner.rediagnose(r) for r in json.load(f)]
    for r in results:
      print(report.line(r))
    print(report.healthy_tables(results))
    print(report.sick_tables(results))
    return 0
  chosen = registry.select(args.matrix, [n for n in args.only.split(',') if n], args.split,
                           args.quick)
  doors = None if args.door == 'both' else (args.door,)
  results = []
  started = time.perf_counter()
  print(report.HEADER, flush=True)
  for case in chosen:
    for door, seed in runner.runs_of(case, doors):
      result = runner.run(case, door, seed, args.stack, keep=args.keep or None)
      results.append(result)
      print(report.line(result), flush=True)
      if args.verbose:
        print(f"    {result['reason']} | {result['evidence']}", flush=True)
  print(report.healthy_tables(results))
  print(report.sick_tables(results))
  print(f'\n{len(results)} runs in {(time.perf_counter() - started) / 60:.1f} min '
        f'(stack {args.stack}).')
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1, default=str)
  return 0


if __name__ == '__main__':
  sys.exit(main())
