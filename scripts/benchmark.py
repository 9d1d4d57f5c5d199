#!/usr/bin/env python3
"""Measures what stable_train's guards cost, as ratios to a baseline run in the same process.

  python scripts/benchmark.py [--steps=400] [--repeats=3] [--batch_size=32] [--section=all]
  python scripts/benchmark.py --section=healthy [--healthy_steps=2000]

Every variant trains the quickstart MLP (1000→256→128→1, Adam, MSE) on the same synthetic data;
the figure is the best (min) ms/step over `repeats` timed runs after a warm-up (tracing excluded).
The baseline is the Trainer with no policies at one step per loop; Keras `fit` with
`global_clipnorm` + TerminateOnNaN is shown for comparison.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np

flags.DEFINE_integer('steps', 400, 'Timed steps per run.')
flags.DEFINE_integer('repeats', 3, 'Timed runs per variant (the minimum is reported).')
flags.DEFINE_integer('batch_size', 32, 'Batch size.')
flags.DEFINE_enum('section', 'all', ['all', 'guards', 'recovery', 'healthy', 'convnet'],
                  'guards: step overhead; recovery: checkpoint and rollback costs; healthy: '
                  'final loss of the default stack vs a bare step on healthy runs; convnet: the '
                  'guards on the BatchNorm + Dropout convnet against a bare tf.function step.')
flags.DEFINE_integer('healthy_steps', 2000, 'Steps of each healthy run (section healthy).')
flags.DEFINE_integer('rounds', 5, 'convnet section: interleaved timed rounds (median reported).')
FLAGS = flags.FLAGS


def _trainer(policies, steps_per_loop=1, jit=False):
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train import models  # pylint: disable=g-import-not-at-top
  return stable_train.Trainer(model=models.mlp(), optimizer=keras.optimizers.Adam(1e-3),
                              loss=keras.losses.MeanSquaredError(), policies=policies,
                              model_dir=None, steps_per_loop=steps_per_loop, jit_compile=jit,
                              log_every=10**9, summary_every=10**9)


def time_trainer(make, data):
  trainer = make()
  trainer.fit(data, num_steps=20)  # Warm-up: tracing and first-call costs.
  best = float('inf')
  for _ in range(FLAGS.repeats):
    done = int(trainer.global_step.numpy())
    start = time.perf_counter()
    trainer.fit(data, num_steps=done + FLAGS.steps)
    best = min(best, (time.perf_counter() - start) / FLAGS.steps)
  return best * 1e3


def time_keras_fit(data, steps_per_execution=1, jit=False):
  import keras  # pylint: disable=g-import-not-at-top
  from stable_train import models  # pylint: disable=g-import-not-at-top
  model = models.mlp()
  model.compile(optimizer=keras.optimizers.Adam(1e-3, global_clipnorm=1.0), loss='mse',
                steps_per_execution=steps_per_execution, jit_compile=jit)
  callbacks = [keras.callbacks.TerminateOnNaN()]
  model.fit(data, steps_per_epoch=20, epochs=1, verbose=0, callbacks=callbacks)
  best = float('inf')
  for _ in range(FLAGS.repeats):
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=FLAGS.steps, epochs=1, verbose=0, callbacks=callbacks)
    best = min(best, (time.perf_counter() - start) / FLAGS.steps)
  return best * 1e3


def recovery_costs(data):
  """Checkpoint write cost (per save, and per step at every 100 steps) and rollback latency."""
  import tempfile  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train import interfaces  # pylint: disable=g-import-not-at-top
  from stable_train import models  # pylint: disable=g-import-not-at-top
  from stable_train import recovery  # pylint: disable=g-import-not-at-top
  from stable_train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  def make(model_dir, checkpoint_every, rollback=None):
    policies = trainer_lib.default_policies() + ([rollback] if rollback else [])
    return stable_train.Trainer(
        model=models.mlp(), optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.MeanSquaredError(), policies=policies, model_dir=model_dir,
        steps_per_loop=10, checkpoint_every=checkpoint_every, healthy_window=0,
        log_every=10**9, summary_every=10**9)

  steps = max(FLAGS.steps, 1000)
  per_step = {}
  for every in (10**9, 100):
    best = float('inf')
    for _ in range(FLAGS.repeats):
      trainer = make(tempfile.mkdtemp(), every)
      trainer.fit(data, num_steps=20)
      start = time.perf_counter()
      trainer.fit(data, num_steps=20 + steps)
      best = min(best, (time.perf_counter() - start) / steps)
    per_step[every] = best * 1e3
  trainer = make(tempfile.mkdtemp(), 10**9)
  trainer.fit(data, num_steps=20)
  saves = []
  for _ in range(5):
    start = time.perf_counter()
    trainer.save_checkpoint()
    saves.append(time.perf_counter() - start)
  rollback = recovery.Rollback(max_rollbacks=100)
  trainer = make(tempfile.mkdtemp(), 100, rollback)
  trainer.fit(data, num_steps=200)
  latencies = []
  for _ in range(5):
    decision = interfaces.Decision(action=interfaces.ROLLBACK, policy=rollback.name,
                                   trigger='benchmark', step=int(trainer.global_step.numpy()))
    start = time.perf_counter()
    rollback.execute(decision, trainer)
    trainer._train_loop.run(trainer.iterator, 1)  # pylint: disable=protected-access  (the first step after the restore)
    latencies.append(time.perf_counter() - start)
  print('recovery (quickstart MLP, 289k parameters, 10 steps/loop):')
  print(f'  checkpoint save: {min(saves) * 1e3:.1f} ms (min of 5), {np.median(saves) * 1e3:.1f} ms median')
  print(f'  training without checkpoints      {per_step[10**9]:7.3f} ms/step  1.00x')
  print(f'  checkpoint every 100 steps        {per_step[100]:7.3f} ms/step  '
        f'{per_step[100] / per_step[10**9]:5.2f}x')
  print(f'  rollback, trigger to first step done: {min(latencies) * 1e3:.1f} ms (min of 5), '
        f'{np.median(latencies) * 1e3:.1f} ms median')


class _BareConvnetStep:
  """A plain GradientTape step on the convnet, no checks, no state snapshot: the floor."""

  def __init__(self, k, jit, data):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from stable_train import losses  # pylint: disable=g-import-not-at-top
    from stable_train import models  # pylint: disable=g-import-not-at-top
    self.model = models.convnet_bn()
    self.optimizer = keras.optimizers.Adam(1e-3)
    self.k, self.data = k, data
    self.model.build((None, 16, 16, 3))
    self.optimizer.build(self.model.trainable_variables)

    @tf.function(jit_compile=jit or None)
    def step(x, y):
      with tf.GradientTape() as tape:
        loss = losses.sparse_softmax_cross_entropy(y, self.model(x, training=True))
      grads = tape.gradient(loss, self.model.trainable_variables)
      self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    @tf.function
    def loop(iterator, n):
      for _ in tf.range(n):
        x, y = next(iterator)
        step(x, y)

    self.loop = loop
    self.iterator = iter(data)

  def run(self, steps):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    for _ in range(steps // self.k):
      self.loop(self.iterator, tf.constant(self.k))


def convnet_costs():
  """The guards' cost on the BatchNorm + Dropout convnet (16x16x3, 16/32 filters, batch 32), in
  interleaved rounds (median ms/step): a bare tf.function step, the Trainer with no policies
  (the forward-state snapshot a skip needs is always there) and the default stack, per mode."""
  import gc  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train import data as data_lib  # pylint: disable=g-import-not-at-top
  from stable_train import losses  # pylint: disable=g-import-not-at-top
  from stable_train import models  # pylint: disable=g-import-not-at-top
  from stable_train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  data = data_lib.synthetic_images(batch_size=32)

  class TrainerRun:

    def __init__(self, policies, k, jit):
      self.trainer = stable_train.Trainer(
          model=models.convnet_bn(), optimizer=keras.optimizers.Adam(1e-3),
          loss=losses.sparse_softmax_cross_entropy, policies=policies, model_dir=None,
          steps_per_loop=k, jit_compile=jit, log_every=10**9, summary_every=10**9)

    def run(self, steps):
      done = int(self.trainer.global_step.numpy())
      self.trainer.fit(data, num_steps=done + steps)

  modes = [(1, False), (10, False), (1, True), (10, True)]
  configs = {}
  for k, jit in modes:
    mode = f'{k:2d} step/loop{", XLA" if jit else ""}'
    configs[f'bare tf.function step, {mode}'] = _BareConvnetStep(k, jit, data)
    configs[f'Trainer, no policies, {mode}'] = TrainerRun([], k, jit)
    configs[f'Trainer, default policies, {mode}'] = TrainerRun(trainer_lib.default_policies(), k, jit)
  for c in configs.values():  # Warm-up: tracing and XLA compiles.
    c.run(20)
  times = {name: [] for name in configs}
  names = list(configs)
  for r in range(FLAGS.rounds):
    for name in names[r % len(names):] + names[:r % len(names)]:
      gc.collect()
      start = time.perf_counter()
      configs[name].run(FLAGS.steps)
      times[name].append((time.perf_counter() - start) / FLAGS.steps * 1e3)
  print(f'convnet_bn (BatchNorm + Dropout), batch 32, {FLAGS.rounds} interleaved rounds x '
        f'{FLAGS.steps} steps, median ms/step, ratio to the bare step in the same mode:')
  for i, name in enumerate(names):
    base = np.median(times[names[i - i % 3]])
    ms = np.median(times[name])
    print(f'  {name:48s} {ms:7.3f} ms/step  {ms / base:5.2f}x')


def healthy_runs():
  """Final training loss, default stack / bare step, same seed and steps, on three models."""
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train import data as data_lib  # pylint: disable=g-import-not-at-top
  from stable_train import losses  # pylint: disable=g-import-not-at-top
  from stable_train import models  # pylint: disable=g-import-not-at-top
  from stable_train import policies as policies_lib  # pylint: disable=g-import-not-at-top
  cases = [
      ('quickstart MLP', models.mlp, data_lib.synthetic_regression, keras.losses.MeanSquaredError()),
      ('BatchNorm convnet', models.convnet_bn, data_lib.synthetic_images,
       losses.sparse_softmax_cross_entropy),
      ('transformer', models.transformer, data_lib.synthetic_sequences,
       losses.sparse_softmax_cross_entropy),
  ]
  fixed = lambda: [policies_lib.CheckNumerics(), policies_lib.ClipByGlobalNorm(max_norm=1.0),
                   policies_lib.SkipNonFinite()]
  steps = FLAGS.healthy_steps
  print(f'healthy runs (Adam 1e-3, batch 32, {steps} steps, seed 0): final training loss on 10 '
        'fixed batches, ratio to the bare step')
  for name, make_model, make_data, loss in cases:
    finals = []
    for policies in ([], None, fixed()):
      trainer = stable_train.Trainer(model=make_model(seed=0), optimizer=keras.optimizers.Adam(1e-3),
                                     loss=loss, policies=policies, model_dir=None,
                                     steps_per_loop=10, log_every=10**9, summary_every=10**9)
      summary = trainer.fit(make_data(), num_steps=steps)
      batches = list(make_data().take(10))
      finals.append(float(np.mean([float(loss(y, trainer.model(x, training=False)))
                                   for x, y in batches])))
      if policies is None:
        clipped = summary['adaptive_clip']['clipped_steps']
    bare, default, old = finals
    print(f'  {name:18s} bare {bare:.5g}  default {default:.5g} ({default / bare:.3f}x, '
          f'{clipped} steps clipped)  fixed clip 1.0 {old:.5g} ({old / bare:.3f}x)')


def main(argv):
  del argv
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.WARNING)  # TF's checkpoint writer logs at INFO on every save.
  from stable_train import data as data_lib  # pylint: disable=g-import-not-at-top
  from stable_train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  data = data_lib.synthetic_regression(batch_size=FLAGS.batch_size)
  if FLAGS.section == 'convnet':
    convnet_costs()
    return
  if FLAGS.section in ('all', 'healthy'):
    healthy_runs()
  if FLAGS.section == 'healthy':
    return
  if FLAGS.section in ('all', 'recovery'):
    recovery_costs(data)
  if FLAGS.section == 'recovery':
    return
  guards = trainer_lib.default_policies
  variants = [
      ('bare step (no policies), 1 step/loop', lambda: _trainer([])),
      ('default policies, 1 step/loop', lambda: _trainer(guards())),
      ('bare step, 10 steps/loop', lambda: _trainer([], 10)),
      ('default policies, 10 steps/loop', lambda: _trainer(guards(), 10)),
      ('default policies, XLA, 1 step/loop', lambda: _trainer(guards(), 1, True)),
      ('default policies, XLA, 10 steps/loop', lambda: _trainer(guards(), 10, True)),
  ]
  results = [(name, time_trainer(make, data)) for name, make in variants]
  results.append(('keras fit, global_clipnorm + TerminateOnNaN', time_keras_fit(data)))
  results.append(('keras fit, same, steps_per_execution=10', time_keras_fit(data, 10)))
  base = results[0][1]
  print(f'batch {FLAGS.batch_size}, {FLAGS.steps} steps x {FLAGS.repeats} runs (min):')
  for name, ms in results:
    print(f'  {name:48s} {ms:7.3f} ms/step  {ms / base:5.2f}x')


if __name__ == '__main__':
  app.run(main)
