#!/usr/bin/env python3
"""ms/step of the quickstart MLP: one device vs MirroredStrategy on two logical CPUs, one process.

  python scripts/bench_distributed.py [--steps=300] [--batch_size=32] [--repeats=3]

Both runs use the quickstart model, data, Adam and default policies (CheckNumerics, ClipByGlobalNorm,
SkipNonFinite), steps_per_loop=10, no model_dir; the time is the best of `repeats` timed fits after
a warm-up fit (tracing excluded).
"""

import argparse
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from stable_train.runtime import distribute  # pylint: disable=g-import-not-at-top
from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
from stable_train.zoo import models  # pylint: disable=g-import-not-at-top


def ms_per_step(strategy, steps, batch_size, repeats):
  with strategy.scope():
    trainer = trainer_lib.Trainer(
        model=models.mlp(input_dim=1000, hidden=(256, 128), outputs=1, seed=0),
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError(),
        model_dir=None, steps_per_loop=10, strategy=strategy)
  dataset = data.synthetic_regression(batch_size=batch_size)
  trainer.fit(dataset, num_steps=20)  # Warm-up: traces the loop.
  best = float('inf')
  for _ in range(repeats):
    start_step = int(trainer.global_step.numpy())
    t = time.perf_counter()
    trainer.fit(dataset, num_steps=start_step + steps)
    best = min(best, (time.perf_counter() - t) / steps * 1000)
  return best


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--steps', type=int, default=300)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args()
  mirrored = distribute.mirrored_strategy(num_logical_cpus=2)  # Before the runtime starts.
  one = ms_per_step(distribute.default_strategy(), args.steps, args.batch_size, args.repeats)
  two = ms_per_step(mirrored, args.steps, args.batch_size, args.repeats)
  print(f'global batch {args.batch_size}, {args.steps} steps, best of {args.repeats}')
  print(f'one device:                         {one:.2f} ms/step')
  print(f'MirroredStrategy, 2 logical CPUs:   {two:.2f} ms/step')
  print(f'ratio (mirrored / one device):      {two / one:.2f}x')


if __name__ == '__main__':
  main()
