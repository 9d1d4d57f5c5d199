#!/usr/bin/env python3
"""What checkpoints cost a run, as a ratio to the same run without them, in one process.

  python scripts/bench_checkpoint.py [--rounds=15] [--steps=1000] [--every=100] [--foreground]

The quickstart MLP (1000→256→128→1, Adam, MSE, batch 32) on 1000 cached synthetic rows, the
default policies, 10 steps per loop, a model_dir in the system temp folder. Each round runs
`steps` more steps of every variant, interleaved (the first variant rotates); two warm-up rounds
are not timed. Variants: checkpoints every `every` steps, written in the background (the
default); the same written in the loop's thread (`--foreground`); checkpoints only at the end
of each round (which every variant writes). Reported: median wall and process-CPU ms/step, the
ratio to the last variant, and the cost of one interval save.
"""

import contextlib
import gc
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np

flags.DEFINE_integer('rounds', 15, 'Timed rounds (medians reported).')
flags.DEFINE_integer('steps', 1000, 'Steps per round and variant.')
flags.DEFINE_integer('every', 100, 'checkpoint_every of the checkpointing variants.')
flags.DEFINE_bool('foreground', False, 'Also run checkpoints written in the loop\'s thread.')
FLAGS = flags.FLAGS


def _dataset():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(0)
  x = rng.normal(size=(1000, 1000)).astype(np.float32)
  y = (x @ (rng.normal(size=(1000, 1)) / np.sqrt(1000)) + 0.1 * rng.normal(size=(1000, 1)))
  ds = tf.data.Dataset.from_tensor_slices((x, y.astype(np.float32))).cache().repeat()
  options = tf.data.Options()
  options.autotune.enabled = False  # See perf.py: an autotuned iterator is slow to delete.
  ds = ds.batch(32, drop_remainder=True).prefetch(2).with_options(options)
  for _ in ds.take(40):  # Fill the cache outside the timings.
    pass
  return ds


def _trainer(root, every, foreground=False):
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
  trainer = stable_train.Trainer(
      model=models.mlp(seed=0), optimizer=keras.optimizers.Adam(1e-3),
      loss=keras.losses.MeanSquaredError(), policies=stable_train.default_policies(),
      model_dir=tempfile.mkdtemp(dir=root), steps_per_loop=10, checkpoint_every=every,
      summary_every=100, log_every=10**9)
  if foreground:  # The loop writes interval checkpoints itself, as any other save.
    trainer.controller.checkpoints.writes_in_background = contextlib.nullcontext
  return trainer


def main(argv):
  del argv
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('absl').setLevel(logging.WARNING)
  ds = _dataset()
  root = tempfile.mkdtemp(prefix='bench_checkpoint.')
  variants = {f'every {FLAGS.every}, background': _trainer(root, FLAGS.every)}
  if FLAGS.foreground:
    variants[f'every {FLAGS.every}, foreground'] = _trainer(root, FLAGS.every, foreground=True)
  variants['end of round only'] = _trainer(root, 10**9)
  names = list(variants)
  target = dict.fromkeys(names, 0)
  wall = {n: [] for n in names}
  cpu = {n: [] for n in names}
  for r in range(FLAGS.rounds + 2):
    for name in names[r % len(names):] + names[:r % len(names)]:
      target[name] += FLAGS.steps
      gc.collect()
      gc.disable()
      c0, t0 = time.process_time(), time.perf_counter()
      summary = variants[name].fit(ds, num_steps=target[name])
      w, c = time.perf_counter() - t0, time.process_time() - c0
      gc.enable()
      if summary['status'] != 'completed' or summary['skipped_steps']:
        raise SystemExit(f'{name}: {summary}')
      if r >= 2:
        wall[name].append(w * 1e3 / FLAGS.steps)
        cpu[name].append(c * 1e3 / FLAGS.steps)
  base_w, base_c = statistics.median(wall[names[-1]]), statistics.median(cpu[names[-1]])
  extra_saves = FLAGS.steps // FLAGS.every - 1
  print(f'{FLAGS.rounds} rounds x {FLAGS.steps} steps, load average {os.getloadavg()[0]:.2f}')
  for name in names:
    w, c = statistics.median(wall[name]), statistics.median(cpu[name])
    line = (f'  {name:28s} wall {w:.3f} ms/step ({w / base_w:.3f}x)  '
            f'cpu {c:.3f} ms/step ({c / base_c:.3f}x)')
    if name != names[-1] and extra_saves > 0:
      line += (f'  one save: wall {(w - base_w) * FLAGS.steps / extra_saves:.1f} ms, '
               f'cpu {(c - base_c) * FLAGS.steps / extra_saves:.1f} ms')
    print(line)


if __name__ == '__main__':
  app.run(main)
