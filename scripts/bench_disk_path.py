#!/usr/bin/env python3
"""Where the disk path's time goes: a cProfile of `fit` with a model_dir and without, per piece.

  python scripts/bench_disk_path.py [--steps 1000] [--jit]

The seed MLP (1000->256->128->1, Adam 1e-3, MSE, batch 32), the default stack, 10 steps per
loop, the Trainer's default cadences (checkpoints every 100, summaries and progress lines every
10; progress lines go to /dev/null). Two Trainers, one with a model_dir and one without, are
warmed up (200 steps), timed unprofiled for three rounds of `--steps` each (interleaved), then
profiled for one round each. Printed: the unprofiled ms/step of each round, and per piece the
profiled us/step of both runs (cProfile inflates Python-heavy pieces: read shares, not absolutes).
"""

import argparse
import cProfile
import logging
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top

PIECES = [  # (label, module file, function names): cumulative time of the matching functions.
    ('the loop of steps (traced)', 'loop.py', ('run',)),
    ('TensorBoard scalars: write', 'events.py', ('write',)),
    ('TensorBoard scalars: flush', 'events.py', ('flush', 'flush_due')),
    ('events.jsonl: emit and append', 'events.py', ('emit',)),
    ('recorder, all of it (incl. scalars, skips)', 'recorder.py', ('record',)),
    ('progress lines (both runs write them)', 'recorder.py', ('_progress_line',)),
    ('summary bookkeeping per loop', 'summary.py', ('record',)),
    ('summary.json at the end', 'summary.py', ('build', 'write')),
    ('checkpoint save on the loop thread', 'checkpoint_action.py', ('save',)),
    ('waiting for the background write', 'host.py', ('complete_writes',)),
    ('reading the loop outputs', 'controller.py', ('_read_reports',)),
    ('fit, all of it', 'controller.py', ('fit',)),
]


def pieces(stats: pstats.Stats, steps: int):
  """{label: us/step} of `PIECES` in a profile of `steps` steps."""
  return {label: sum(v[3] for (path, _, fn), v in stats.stats.items()
                     if 'stable_train' in path and path.endswith(module) and fn in names)
          / steps * 1e6 for label, module, names in PIECES}


def main():
  p = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
  p.add_argument('--steps', type=int, default=1000)
  p.add_argument('--jit', action='store_true', help='jit_compile=True')
  a = p.parse_args()
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
  logging.getLogger('absl').setLevel(logging.WARNING)
  log = logging.getLogger('stable_train')
  log.setLevel(logging.INFO)
  log.propagate = False
  devnull = open(os.devnull, 'w')  # pylint: disable=consider-using-with
  log.addHandler(logging.StreamHandler(devnull))
  tf.get_logger().setLevel(logging.ERROR)
  rng = np.random.RandomState(0)
  x = rng.normal(size=(4096, 1000)).astype(np.float32)
  y = rng.normal(size=(4096, 1)).astype(np.float32)
  options = tf.data.Options()
  options.autotune.enabled = False
  data = tf.data.Dataset.from_tensor_slices((x, y)).cache().repeat().batch(32, drop_remainder=True)
  data = data.prefetch(2).with_options(options)
  root = tempfile.mkdtemp(prefix='st_disk_path.')
  runs = {name: stable_train.Trainer(
      model=models.mlp(seed=0), optimizer=keras.optimizers.Adam(1e-3),
      loss=keras.losses.MeanSquaredError(), model_dir=model_dir, steps_per_loop=10,
      jit_compile=a.jit) for name, model_dir in (('model_dir', root), ('none', None))}
  target = 200
  for t in runs.values():
    t.fit(data, num_steps=target)
  wall = {name: [] for name in runs}
  for _ in range(3):
    target += a.steps
    for name, t in runs.items():
      t0 = time.perf_counter()
      t.fit(data, num_steps=target)
      wall[name].append((time.perf_counter() - t0) / a.steps * 1e3)
  print(f'# TF {tf.__version__}, jit_compile={a.jit}, load avg {os.getloadavg()[0]:.2f}; '
        f'unprofiled ms/step: ' + '; '.join(
            f'{n} {", ".join(f"{v:.3f}" for v in w)}' for n, w in wall.items()))
  target += a.steps
  profiled = {}
  for name, t in runs.items():
    profile = cProfile.Profile()
    profile.enable()
    t.fit(data, num_steps=target)
    profile.disable()
    profiled[name] = pieces(pstats.Stats(profile), a.steps)
  print(f'{"piece (profiled us/step)":46s} {"model_dir":>10s} {"none":>10s}')
  for label, _, _ in PIECES:
    print(f'{label:46s} {profiled["model_dir"][label]:10.1f} {profiled["none"][label]:10.1f}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
