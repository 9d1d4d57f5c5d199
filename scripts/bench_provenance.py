#!/usr/bin/env python3
"""Measures what NaN forensics costs on healthy steps, as ratios to the core step in the same process.

  python scripts/bench_provenance.py [--steps=300] [--repeats=3] [--steps_per_loop=10]

Model: the quickstart MLP (1000→256→128→1, Adam, MSE, batch 32), synthetic data. Figures are the
best (min) ms/step over `repeats` timed runs after a warm-up (tracing excluded).
  core           loss, gradients, global norm, one finite flag, tf.cond apply-or-skip
  + provenance   + per-variable gradient finite flags, first-bad index, ValidateInputs checks
                 (input finite flags ANDed into the apply decision, first-bad-input index)
  Trainer        the real Trainer with the default policies without their Forensics, with it
                 active (the in-loop stash `tf.cond` and early-exit check on every step: what a
                 run with a model_dir has), then + ValidateInputs
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

flags.DEFINE_integer('steps', 1000, 'Timed steps per run.')
flags.DEFINE_integer('repeats', 5, 'Timed runs per variant (the minimum is reported).')
flags.DEFINE_integer('steps_per_loop', 10, 'Steps per in-graph loop.')
FLAGS = flags.FLAGS


def _data():
  from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
  return data.synthetic_regression(num_examples=1000, num_features=1000, batch_size=32)


def bare_loop(with_provenance: bool):
  """A hand-built loop of the core step, with or without the cheap provenance; returns run(steps)."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
  from stable_train.core import numerics
  from stable_train.policies import basic as policies
  model = models.mlp()
  optimizer = keras.optimizers.Adam(1e-3)
  loss_fn = keras.losses.MeanSquaredError()
  model(tf.zeros([1, 1000]))
  optimizer.build(model.trainable_variables)
  check = policies.ValidateInputs()

  def step(x, y):
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, variables)
    norm = numerics.global_norm(grads)
    ok = tf.logical_and(tf.math.is_finite(norm), tf.math.is_finite(loss))
    report = [loss, norm]
    if with_provenance:
      grad_flags = numerics.finite_flags(grads)
      input_flags = check.check_batch(x, y)
      ok = tf.logical_and(tf.logical_and(ok, tf.reduce_all(grad_flags)),
                          tf.reduce_all(input_flags))
      report += [tf.cast(numerics.first_false(grad_flags), tf.float32),
                 tf.cast(numerics.first_false(input_flags), tf.float32)]

    def apply():
      optimizer.apply_gradients(zip(grads, variables))
      return tf.constant(True)

    tf.cond(ok, apply, lambda: tf.constant(False))
    return tf.stack(report)

  @tf.function
  def loop(iterator, n):
    out = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for i in tf.range(n):
      x, y = next(iterator)
      out = out.write(tf.cast(i, tf.int32), step(x, y))
    return out.stack()

  iterator = iter(_data())
  n = tf.constant(FLAGS.steps_per_loop, tf.int64)

  def run(steps):
    for _ in range(max(1, steps // FLAGS.steps_per_loop)):
      loop(iterator, n).numpy()

  return run


def trainer_loop(kind: str):
  """The real Trainer (nothing on disk), returns run(steps). `kind`: 'without' (the default
  policies without their Forensics: the stack before it joined), 'default' (with it active, as
  a run with a model_dir has it), 'full' (+ ValidateInputs)."""
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
  policies = stable_train.default_policies()[:-1]  # The optional Forensics is last.
  if kind != 'without':  # Not optional: active without a model_dir too.
    policies += [stable_train.Forensics()]
  if kind == 'full':
    policies += [stable_train.ValidateInputs()]
  trainer = stable_train.Trainer(model=models.mlp(), optimizer=keras.optimizers.Adam(1e-3),
                                 loss=keras.losses.MeanSquaredError(), policies=policies,
                                 model_dir=None, steps_per_loop=FLAGS.steps_per_loop,
                                 log_every=10**9, summary_every=10**9)
  data = _data()

  def run(steps):
    trainer.fit(data, num_steps=int(trainer.global_step.numpy()) + steps)

  return run


def best_ms_per_step(runs):
  """Warms every variant up, then times them in interleaved rounds (load on a shared machine
  drifts over seconds). Returns each variant's best (wall ms/step, process-CPU ms/step); CPU time
  counts all of TensorFlow's threads and is less disturbed by other processes than wall time."""
  for run in runs:
    run(3 * FLAGS.steps_per_loop)
  wall = [float('inf')] * len(runs)
  cpu = [float('inf')] * len(runs)
  for _ in range(FLAGS.repeats):
    for i, run in enumerate(runs):
      start, start_cpu = time.perf_counter(), time.process_time()
      run(FLAGS.steps)
      wall[i] = min(wall[i], (time.perf_counter() - start) / FLAGS.steps * 1e3)
      cpu[i] = min(cpu[i], (time.process_time() - start_cpu) / FLAGS.steps * 1e3)
  return list(zip(wall, cpu))


def _line(name, value, base):
  return (f'{name:30s} wall {value[0]:6.3f} ms/step {value[0] / base[0]:5.2f}x   '
          f'cpu {value[1]:6.3f} ms/step {value[1] / base[1]:5.2f}x')


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  print(f'TF {tf.__version__}, steps_per_loop {FLAGS.steps_per_loop}, {FLAGS.steps} steps x '
        f'{FLAGS.repeats} interleaved repeats, min per variant; load average {os.getloadavg()}')
  core, prov = best_ms_per_step([bare_loop(False), bare_loop(True)])
  print(_line('core step', core, core))
  print(_line('core step + provenance', prov, core))
  base, default, full = best_ms_per_step([trainer_loop('without'), trainer_loop('default'),
                                          trainer_loop('full')])
  print(_line('Trainer, default w/o Forensics', base, base))
  print(_line('  default (Forensics active)', default, base))
  print(_line('  + ValidateInputs', full, base))


if __name__ == '__main__':
  app.run(main)
