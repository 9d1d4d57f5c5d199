#!/usr/bin/env python3
"""What stable_train costs, as ratios to baselines run in the same process (interleaved rounds).

  python scripts/benchmark.py                              # seed MLP, batch 32 (the speed issue)
  python scripts/benchmark.py --batch 256
  python scripts/benchmark.py --model convnet              # BatchNorm + Dropout convnet
  python scripts/benchmark.py --quick                      # smoke test: a few steps of everything
  python scripts/benchmark.py --section healthy            # final loss: default stack vs bare;
                                                           # guarded vs plain model.fit

Section `speed` (the default) follows the reference protocol of ../shared/bench/perf.py. Every
configuration trains its own seed-0 model (Adam 1e-3) on one shared in-memory pipeline
(`from_tensor_slices(x, y).cache().repeat().batch(B, drop_remainder=True).prefetch(2)`, tf.data
autotune off); each round, each configuration runs exactly `--steps` optimizer steps from a fresh
iterator, round-robin with a rotating start (gc off inside a round). Warm-up passes (tracing, XLA
compiles, first checkpoint) are excluded. Figures: median wall ms/step and median process-CPU
ms/step over the timed rounds.

  a.*      bare: a tf.function GradientTape step (jit_compile True|None) called from a tf.function
           loop `for _ in tf.range(n): next(iterator)`, n = 1 | 10 -- the Trainer's structure
           minus every check.
  b.*      Trainer, default stack (CheckNumerics, AdaptiveClip, SkipNonFinite), model_dir with
           checkpoints and summaries every 100 steps; steps_per_loop 1 | 10, jit False | True.
  b2.*     as b at 10 steps/loop + LossSpike(min_ratio=10) + Rollback + ValidateInputs + Forensics.
  c.*      Keras fit with Adam(global_clipnorm=1.0) + TerminateOnNaN: compile defaults, and its
           best (steps_per_execution=10, jit_compile=True).
  p.*, g.* plain Keras fit (no clipping, no callback) and the same fit guarded by stable_train
           (guard_fit: default stack + its callback, nothing on disk): compile defaults (k1), and
           steps_per_execution=10 with jit_compile=True (k10.xla).
  d.*      Trainer, default stack, 10 steps/loop, nothing on disk (model_dir=None).
  f.k10    b.k10 with checkpoint_every=10**9 (the checkpoint cost is b.k10 / f.k10).
  s.best   stable_train at its best setting with checkpoints on: default stack, steps_per_loop
           100, jit_compile=True, checkpoints and summaries every 100 steps.

After the rounds: one Trainer.save_checkpoint() (median of 5), the checkpoint's size, a zero-step
fit() call, peak RSS above the start per configuration (build + warm-up), the rollback latency
(trigger -> first applied step) of a Trainer with Rollback meeting NaN stretches, and the peak RSS
of a fresh process training with the default stack against one training the bare step, per mode.

Output lines: `CONFIG name median cpu_median ...`, `RATIO name value target verdict (notes)`,
`METRIC name value (notes)`.
"""

import argparse
import gc
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top

SEED = 0
LR = 1e-3


# ------------------------------------------------------------------------------------------------
# Memory: peak RSS (VmHWM), which Linux lets a process reset (clear_refs 5).
# ------------------------------------------------------------------------------------------------
def _status_mb(key):
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith(key + ':'):
          return int(line.split()[1]) / 1024.0
  except OSError:
    pass
  return None


def reset_peak() -> bool:
  try:
    with open('/proc/self/clear_refs', 'w') as f:
      f.write('5')
    return True
  except OSError:
    return False


# ------------------------------------------------------------------------------------------------
# Models and data.
# ------------------------------------------------------------------------------------------------
class Workload:
  """The model factory, loss and one shared in-memory pipeline of a benchmark run."""

  def __init__(self, model: str, batch: int, examples: int):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from stable_train import losses  # pylint: disable=g-import-not-at-top
    from stable_train import models  # pylint: disable=g-import-not-at-top
    rng = np.random.RandomState(SEED)
    self.name, self.batch = model, batch
    if model == 'mlp':
      x = rng.normal(size=(examples, 1000)).astype(np.float32)
      w = rng.normal(size=(1000, 1)).astype(np.float32) / np.sqrt(1000)
      y = (x @ w + 0.1 * rng.normal(size=(examples, 1))).astype(np.float32)
      self.new_model = lambda: models.mlp(seed=SEED)
      self.loss = keras.losses.MeanSquaredError()
      self.describe = 'seed MLP 1000->256->128->1, MSE'
    else:
      x = rng.normal(size=(examples, 16, 16, 3)).astype(np.float32)
      y = rng.randint(0, 10, size=(examples,)).astype(np.int32)
      self.new_model = lambda: models.convnet_bn(seed=SEED)
      self.loss = losses.sparse_softmax_cross_entropy
      self.describe = 'convnet_bn (Conv-BN-ReLU-Pool x2, Dropout), sparse softmax CE'
    self.x, self.y, self.tf = x, y, tf
    self.dataset = self.pipeline()
    for _ in self.dataset.take(len(x) // batch + 2):  # Fill the cache outside every timing.
      pass

  def pipeline(self, poison=None):
    tf = self.tf
    ds = tf.data.Dataset.from_tensor_slices((self.x, self.y)).cache().repeat()
    ds = ds.batch(self.batch, drop_remainder=True)
    if poison is not None:
      ds = ds.enumerate().map(poison)
    options = tf.data.Options()
    # Autotune's model thread makes deleting an idle iterator block (0.3-2 s seen): nothing here
    # is autotuned, so it is off for every configuration alike.
    options.autotune.enabled = False
    return ds.prefetch(2).with_options(options)


# ------------------------------------------------------------------------------------------------
# Configurations: build(), run_round(steps), check(steps) -> problems, model.
# ------------------------------------------------------------------------------------------------
class Bare:
  """A plain GradientTape step in a tf.function loop: the floor every ratio is taken against."""

  def __init__(self, name, work, k, jit):
    self.name, self.work, self.k, self.jit = name, work, k, jit
    self.desc = f'bare tf.function step, {k}/call, jit_compile={jit}'

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    tf = self.work.tf
    self.model = self.work.new_model()
    self.optimizer = keras.optimizers.Adam(LR)
    variables = list(self.model.trainable_variables)
    self.optimizer.build(variables)
    model, optimizer, loss_fn = self.model, self.optimizer, self.work.loss

    def step(x, y):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
      return loss

    step_fn = tf.function(step, jit_compile=True if self.jit else None)

    def loop(iterator, n):
      loss = tf.constant(0.0)
      for _ in tf.range(n):
        x, y = next(iterator)
        loss = step_fn(x, y)
      return loss

    self.loop = tf.function(loop)
    self.n = tf.constant(self.k, tf.int64)

  def run_round(self, steps):
    self._before = int(self.optimizer.iterations.numpy())
    iterator = iter(self.work.dataset)
    loss = None
    for _ in range(steps // self.k):
      loss = self.loop(iterator, self.n)
    self.last_loss = float(loss)

  def check(self, steps):
    done = int(self.optimizer.iterations.numpy()) - self._before
    return [] if done == steps and np.isfinite(self.last_loss) else [
        f'{done} steps (expected {steps}), loss {self.last_loss}']


def default_stack():
  import stable_train  # pylint: disable=g-import-not-at-top
  return stable_train.default_policies()


def full_stack():
  import stable_train  # pylint: disable=g-import-not-at-top
  # LossSpike at min_ratio 10 (as configs/unstable_spike.gin): at 1.5 it fires on the healthy
  # noise of this small data set once its loss nears 0, and a rollback voids a timed round.
  return stable_train.default_policies() + [
      stable_train.LossSpike(min_ratio=10.0), stable_train.Rollback(),
      stable_train.ValidateInputs(), stable_train.Forensics()]


class Stable:
  """A Trainer, one `fit` per round to the next target step."""

  def __init__(self, name, work, root, k, jit, *, stack=default_stack, model_dir=True,
               checkpoint_every=100):
    self.name, self.work, self.root, self.k, self.jit = name, work, root, k, jit
    self.stack, self.use_dir, self.checkpoint_every = stack, model_dir, checkpoint_every
    self.desc = (f'Trainer {stack.__name__}, steps_per_loop={k}, jit_compile={jit}, '
                 f'model_dir={"tmp" if model_dir else None}, checkpoint_every={checkpoint_every}')
    self.target = 0

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    import stable_train  # pylint: disable=g-import-not-at-top
    self.model_dir = tempfile.mkdtemp(prefix=self.name + '.', dir=self.root) if self.use_dir else None
    self.trainer = stable_train.Trainer(
        model=self.work.new_model(), optimizer=keras.optimizers.Adam(LR), loss=self.work.loss,
        policies=self.stack(), model_dir=self.model_dir, steps_per_loop=self.k,
        jit_compile=self.jit, checkpoint_every=self.checkpoint_every, summary_every=100,
        log_every=10**9, verbose=False)
    self.model = self.trainer.model

  def run_round(self, steps):
    t = self.trainer
    self._before = (int(t.applied_steps.numpy()), int(t.skipped_steps.numpy()))
    self.target += steps
    self.summary = t.fit(self.work.dataset, num_steps=self.target)

  def check(self, steps):
    t, s = self.trainer, self.summary
    applied = int(t.applied_steps.numpy()) - self._before[0]
    skipped = int(t.skipped_steps.numpy()) - self._before[1]
    if s.get('status') == 'completed' and applied == steps and not skipped:
      return []
    return [f"status {s.get('status')}, {applied} applied, {skipped} skipped: {s.get('reason', '')}"]


class KerasFit:
  """Keras `fit` with global_clipnorm=1.0 + TerminateOnNaN."""

  def __init__(self, name, work, steps_per_execution=None, jit=None):
    self.name, self.work, self.spe, self.jit = name, work, steps_per_execution, jit
    self.desc = ''

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    self.model = self.work.new_model()
    kwargs = {}
    if self.spe is not None:
      kwargs.update(steps_per_execution=self.spe, jit_compile=self.jit)
    self.model.compile(optimizer=keras.optimizers.Adam(LR, global_clipnorm=1.0),
                       loss=self.work.loss, **kwargs)
    self.callbacks = [keras.callbacks.TerminateOnNaN()]
    self.desc = (f'keras fit, global_clipnorm=1.0 + TerminateOnNaN, steps_per_execution='
                 f'{self.model.steps_per_execution}, jit_compile={self.model.jit_compile}')

  def run_round(self, steps):
    self._before = int(self.model.optimizer.iterations.numpy())
    history = self.model.fit(self.work.dataset, epochs=1, steps_per_epoch=steps, verbose=0,
                             shuffle=False, callbacks=self.callbacks)
    self.last_loss = float(history.history['loss'][-1])

  def check(self, steps):
    done = int(self.model.optimizer.iterations.numpy()) - self._before
    return [] if done == steps and np.isfinite(self.last_loss) else [
        f'{done} steps (expected {steps}), loss {self.last_loss}']


class GuardedFit:
  """Plain Keras `fit` (compile defaults: no clipping, no callbacks) or the same `fit` guarded
  by stable_train (`guard_fit`, the default stack, its callback with nothing on disk)."""

  def __init__(self, name, work, guarded, steps_per_execution=1, jit=False):
    self.name, self.work, self.guarded = name, work, guarded
    self.spe, self.jit = steps_per_execution, jit
    self.desc = (f'keras fit{" guarded (default stack + GuardCallback)" if guarded else ""}, '
                 f'steps_per_execution={steps_per_execution}, jit_compile={jit}')

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    import stable_train  # pylint: disable=g-import-not-at-top
    self.model = self.work.new_model()
    self.model.compile(optimizer=keras.optimizers.Adam(LR), loss=self.work.loss,
                       steps_per_execution=self.spe, jit_compile=self.jit)
    self.callbacks = []
    if self.guarded:
      self.callbacks = [stable_train.guard_fit(self.model).callback()]

  run_round = KerasFit.run_round
  check = KerasFit.check


# ------------------------------------------------------------------------------------------------
# Rollback latency.
# ------------------------------------------------------------------------------------------------
def rollback_latency(work, root, stretches):
  """Host ms from the loop whose reports trigger a rollback to the end of the first loop with an
  applied step after it (steps_per_loop=1), on a stream with NaN stretches one longer than
  SkipNonFinite's limit at positions 250, 450, ... Returns (median, all values, first event)."""
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  tf = work.tf
  length = stable_train.SkipNonFinite().max_consecutive + 1
  starts = [250 + 200 * i for i in range(stretches)]
  bad = tf.constant([s + j for s in starts for j in range(length)], tf.int64)

  def poison(index, element):
    x, y = element
    x = tf.cond(tf.reduce_any(tf.equal(bad, index)), lambda: x * float('nan'), lambda: x)
    return x, y

  class Timed(stable_train.Trainer):

    def on_loop_end(self, reports):
      marks.append(('loop', time.perf_counter(), bool(reports.applied.any())))

    def on_event(self, record):
      if record['event'] == 'rollback':
        marks.append(('rollback', time.perf_counter(), record))

  marks = []
  trainer = Timed(model=work.new_model(), optimizer=keras.optimizers.Adam(LR), loss=work.loss,
                  policies=default_stack() + [stable_train.Rollback(max_rollbacks=100,
                                                                    retry_window=0)],
                  model_dir=tempfile.mkdtemp(prefix='rollback.', dir=root), steps_per_loop=1,
                  checkpoint_every=100, summary_every=100, log_every=10**9, verbose=False)
  trainer.fit(work.pipeline(poison), num_steps=starts[-1] + length + 50)
  latencies, first = [], None
  for j, mark in enumerate(marks):
    if mark[0] != 'rollback':
      continue
    first = first or mark[2]
    trigger = max(m[1] for m in marks[:j] if m[0] == 'loop')
    after = [m for m in marks[j + 1:] if m[0] == 'loop' and m[2]]
    if after:
      latencies.append((after[0][1] - trigger) * 1e3)
  warm = latencies[1:] or latencies  # The first rollback traces what it runs.
  return (statistics.median(warm) if warm else float('nan')), latencies, first


# ------------------------------------------------------------------------------------------------
# The speed section.
# ------------------------------------------------------------------------------------------------
def checkpoint_size_mb(trainer):
  keeper = trainer.checkpoints
  if keeper is None or not keeper.entries:
    return float('nan')
  prefix = os.path.join(keeper.directory, keeper.entries[-1].path)
  return sum(os.path.getsize(p) for p in glob.glob(prefix + '.*')) / 2**20


def speed(a):
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  work = Workload(a.model, a.batch, a.examples)
  root = tempfile.mkdtemp(prefix='st_bench.')
  try:
    return _speed(a, work, root, keras, tf)
  finally:
    shutil.rmtree(root, ignore_errors=True)


def _speed(a, work, root, keras, tf):
  print(f'# stable_train benchmark: {work.describe}, batch {a.batch}; TF {tf.__version__}, Keras '
        f'{keras.__version__}, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}; '
        f'{a.rounds} timed rounds x {a.steps} steps', flush=True)
  S = lambda name, k, jit, **kw: Stable(name, work, root, k, jit, **kw)  # noqa: E731
  configs = [
      Bare('a.k1', work, 1, False), Bare('a.k1.xla', work, 1, True),
      Bare('a.k10', work, 10, False), Bare('a.k10.xla', work, 10, True),
      S('b.k1', 1, False), S('b.k1.xla', 1, True), S('b.k10', 10, False), S('b.k10.xla', 10, True),
      S('b2.k10', 10, False, stack=full_stack), S('b2.k10.xla', 10, True, stack=full_stack),
      KerasFit('c.default', work), KerasFit('c.best', work, steps_per_execution=10, jit=True),
      S('d.k1', 1, False, model_dir=False), S('d.k1.xla', 1, True, model_dir=False),
      S('d.k10', 10, False, model_dir=False), S('d.k10.xla', 10, True, model_dir=False),
      S('f.k10', 10, False, checkpoint_every=10**9),
      S('s.best', 100, True),
      GuardedFit('p.k1', work, False), GuardedFit('g.k1', work, True),
      GuardedFit('p.k10.xla', work, False, 10, True), GuardedFit('g.k10.xla', work, True, 10, True),
  ]
  if a.steps % 100:
    configs = [c for c in configs if c.name != 's.best']  # 100 steps per loop.
  # Pre-warm the runtimes (oneDNN, XLA) so that the first configuration's memory is not theirs.
  for jit in (False, True):
    warm = Bare('warm', work, 1, jit)
    warm.build()
    warm.run_round(3)
  del warm
  gc.collect()
  can_reset = reset_peak()
  wall = {c.name: [] for c in configs}
  cpu = {c.name: [] for c in configs}
  by_round = {c.name: {} for c in configs}  # Wall ms/step per round, for the paired ratios.
  peak = {}
  problems = {c.name: [] for c in configs}
  warmup = max(a.steps, 100)
  for c in configs:  # Build, trace, one round of `warmup` steps: excluded; peak RSS measured.
    gc.collect()
    reset_peak()
    start_rss = _status_mb('VmRSS')
    c.build()
    c.run_round(warmup)
    peak[c.name] = (_status_mb('VmHWM') - start_rss) if can_reset else None
    problems[c.name] += c.check(warmup)
  for c in configs:  # A second untimed pass: first calls after other configurations traced.
    c.run_round(a.steps)
  print('# warm-up done', file=sys.stderr, flush=True)
  for r in range(a.rounds):
    shift = r % len(configs)
    for c in configs[shift:] + configs[:shift]:
      gc.collect()
      gc.disable()
      try:
        c0, t0 = time.process_time(), time.perf_counter()
        c.run_round(a.steps)
        t1, c1 = time.perf_counter(), time.process_time()
      finally:
        gc.enable()
      bad = c.check(a.steps)
      if bad:
        problems[c.name] += [f'round {r + 1} excluded: {m}' for m in bad]
        continue
      wall[c.name].append((t1 - t0) / a.steps * 1e3)
      by_round[c.name][r] = wall[c.name][-1]
      cpu[c.name].append((c1 - c0) / a.steps * 1e3)
    print(f'# round {r + 1}/{a.rounds} done', file=sys.stderr, flush=True)

  nan = float('nan')
  med = {n: statistics.median(v) if v else nan for n, v in wall.items()}
  cmed = {n: statistics.median(v) if v else nan for n, v in cpu.items()}
  by_name = {c.name: c for c in configs}
  for c in configs:
    pk = 'n/a' if peak[c.name] is None else f'{peak[c.name]:.1f}'
    print(f'CONFIG {c.name:11s} {med[c.name]:7.3f} ms/step  cpu {cmed[c.name]:7.3f}  '
          f'peak+{pk} MB  | {c.desc}')

  out = []

  def ratio(name, num, den, target=None, higher_is_better=False, note=''):
    if num not in med or den not in med:
      return
    value = med[num] / med[den]
    shown = value
    if higher_is_better:
      verdict = '' if target is None else ('meets' if value >= target else 'misses')
      goal = '' if target is None else f'>= {target:.2f}'
    else:
      verdict = '' if target is None else ('meets' if value <= target else 'misses')
      goal = '' if target is None else f'<= {target:.2f}'
    # The median of per-round ratios (the two configurations ran minutes apart at most, in the
    # same round): steadier than the ratio of medians when the machine's speed drifts.
    pairs = [by_round[num][r] / by_round[den][r] for r in by_round[num] if r in by_round[den]]
    paired = f'; paired {statistics.median(pairs):.3f}' if pairs else ''
    out.append(f'RATIO {name} {shown:.3f} {goal} {verdict}  ({num} / {den}; cpu '
               f'{cmed[num] / cmed[den]:.3f}{paired}){" " + note if note else ""}')

  for mode in ('k1', 'k1.xla', 'k10', 'k10.xla'):
    ratio(f'nothing_on_disk.d_over_a.{mode}', f'd.{mode}', f'a.{mode}', 1.05)
  for mode in ('k1', 'k1.xla', 'k10', 'k10.xla'):
    ratio(f'with_disk.b_over_a.{mode}', f'b.{mode}', f'a.{mode}', 1.10)
  for mode in ('k10', 'k10.xla'):
    ratio(f'full_stack.b2_over_a.{mode}', f'b2.{mode}', f'a.{mode}')
  if 's.best' in med:
    ratio('best_vs_keras_best.c_best_over_s_best', 'c.best', 's.best', 1.10, True,
          '[throughput of stable_train at its best (checkpoints on) / Keras fit at its best]')
  ratio('same_mode_vs_keras_best.c_best_over_b.k10.xla', 'c.best', 'b.k10.xla', None, True)
  ratio('defaults_vs_keras_defaults.c_default_over_b.k1', 'c.default', 'b.k1', None, True)
  for mode in ('k1', 'k10.xla'):  # The same fit, guarded and plain, at its own settings.
    ratio(f'keras_fit_guarded.g_over_p.{mode}', f'g.{mode}', f'p.{mode}', 1.05)
  ratio('checkpoint_cost.b_over_f.k10', 'b.k10', 'f.k10', 1.02,
        note='[checkpoints every 100 steps vs none but the one at the end of each fit]')

  # After the rounds: one save, its size, a zero-step fit().
  b = by_name['b.k10'].trainer
  saves, fits = [], []
  for _ in range(5):
    gc.collect()
    t0 = time.perf_counter()
    b.save_checkpoint(reason='benchmark')
    saves.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    b.fit(work.dataset, num_steps=int(b.global_step.numpy()))
    fits.append((time.perf_counter() - t0) * 1e3)
  if hasattr(b, 'wait_for_checkpoints'):
    b.wait_for_checkpoints()
  out.append(f'METRIC checkpoint_save_ms {statistics.median(saves):.1f}  (Trainer.save_checkpoint '
             f'on b.k10, median of 5: time the loop is blocked)')
  out.append(f'METRIC checkpoint_size_mb {checkpoint_size_mb(b):.2f}  (the dataset in memory is '
             f'{work.x.nbytes / 2**20:.1f} MB; a checkpoint must not hold it)')
  out.append(f'METRIC fit_call_overhead_ms {statistics.median(fits):.1f}  (a zero-step fit() on '
             f'b.k10, median of 5)')
  if can_reset:
    for mode in ('k1', 'k1.xla', 'k10', 'k10.xla'):
      pb, pa = peak[f'd.{mode}'], peak[f'a.{mode}']
      out.append(f'METRIC peak_rss_above_bare_mb.d.{mode} {pb - pa:.1f}  (peak RSS above the '
                 f'start over build + warm-up: d {pb:.1f} MB, a {pa:.1f} MB)')
  if a.rollbacks:
    ms, values, first = rollback_latency(work, root, a.rollbacks)
    shown = ' '.join(f'{v:.1f}' for v in values)
    verdict = 'meets' if ms <= 20 else 'misses'
    out.append(f'METRIC rollback_trigger_to_first_applied_step_ms {ms:.1f} <= 20 {verdict}  '
               f'(median after the first; all: {shown})')
    if first:
      out.append(f"#   first rollback: step {first['step']} -> {first.get('to_step')}, skipped "
                 f"batches {first.get('skipped_batches')}")
  for k, jit in ([(10, True)] if a.quick else [(1, False), (10, False), (1, True), (10, True)]):
    bare, stack = (rss_of_a_process(a, kind, k, jit) for kind in ('bare', 'stack'))
    mode = f'k{k}{".xla" if jit else ""}'
    value = stack / bare
    out.append(f'RATIO peak_rss.process.d_over_a.{mode} {value:.3f} <= 1.30 '
               f'{"meets" if value <= 1.3 else "misses"}  (peak RSS of a process training '
               f'{a.steps + 100} steps: default stack, nothing on disk {stack:.0f} MB / bare step '
               f'{bare:.0f} MB)')
  out.append(f'METRIC process_peak_rss_mb {_status_mb("VmHWM") or nan:.0f}')
  for line in out:
    print(line)
  noisy = [f'{n} x{max(v) / min(v):.1f}' for n, v in wall.items() if v and max(v) / min(v) > 1.5]
  if noisy:
    print('SANITY noisy (rounds more than 1.5x apart; the machine was busy): ' + ', '.join(noisy))
  bad = {n: v for n, v in problems.items() if v}
  for n, v in bad.items():
    print(f'SANITY {n}: {"; ".join(sorted(set(v)))}')
  if not bad:
    print('SANITY ok: every configuration ran exactly the requested steps, none skipped')
  hard = [m for v in problems.values() for m in v if 'excluded' not in m]
  return 1 if hard or any(not v for v in wall.values()) else 0


def rss_of_a_process(a, kind, k, jit):
  """Peak RSS (MB) of a fresh process that builds one configuration and trains steps + 100."""
  import subprocess  # pylint: disable=g-import-not-at-top
  command = [sys.executable, os.path.abspath(__file__), f'--rss_child={kind}', f'--rss_k={k}',
             f'--model={a.model}', f'--batch={a.batch}', f'--steps={a.steps}',
             f'--examples={a.examples}'] + (['--rss_jit'] if jit else [])
  result = subprocess.run(command, capture_output=True, text=True, check=False)
  for line in result.stdout.splitlines():
    if line.startswith('RSS_PEAK '):
      return float(line.split()[1])
  raise RuntimeError(f'rss child {kind} k={k} jit={jit} failed: {result.stderr[-2000:]}')


def rss_child(a):
  work = Workload(a.model, a.batch, a.examples)
  if a.rss_child == 'bare':
    config = Bare('rss', work, a.rss_k, a.rss_jit)
  else:
    config = Stable('rss', work, None, a.rss_k, a.rss_jit, model_dir=False)
  config.build()
  config.run_round(100)
  config.run_round(a.steps)
  problems = config.check(a.steps)
  print(f'RSS_PEAK {_status_mb("VmHWM"):.1f} {"; ".join(problems)}', flush=True)
  return 1 if problems else 0


# ------------------------------------------------------------------------------------------------
# The healthy section: the default stack trains like a bare step.
# ------------------------------------------------------------------------------------------------
def healthy(a):
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train import data as data_lib  # pylint: disable=g-import-not-at-top
  from stable_train import losses  # pylint: disable=g-import-not-at-top
  from stable_train import models  # pylint: disable=g-import-not-at-top
  cases = [
      ('quickstart MLP', models.mlp, data_lib.synthetic_regression, keras.losses.MeanSquaredError()),
      ('BatchNorm convnet', models.convnet_bn, data_lib.synthetic_images,
       losses.sparse_softmax_cross_entropy),
      ('transformer', models.transformer, data_lib.synthetic_sequences,
       losses.sparse_softmax_cross_entropy),
  ]
  fixed = lambda: [stable_train.CheckNumerics(), stable_train.ClipByGlobalNorm(max_norm=1.0),
                   stable_train.SkipNonFinite()]
  steps = a.healthy_steps
  print(f'healthy runs (Adam 1e-3, batch 32, {steps} steps, seed 0): final training loss on 10 '
        'fixed batches, ratio to the bare step')
  for name, make_model, make_data, loss in cases:
    finals, clipped = [], 0
    for policies in ([], None, fixed()):
      trainer = stable_train.Trainer(
          model=make_model(seed=0), optimizer=keras.optimizers.Adam(1e-3), loss=loss,
          policies=policies, model_dir=None, steps_per_loop=10, log_every=10**9,
          summary_every=10**9, verbose=False)
      summary = trainer.fit(make_data(), num_steps=steps)
      batches = list(make_data().take(10))
      finals.append(float(np.mean([float(loss(y, trainer.model(x, training=False)))
                                   for x, y in batches])))
      if policies is None:
        clipped = summary['adaptive_clip']['clipped_steps']
    bare, default, old = finals
    print(f'  {name:18s} bare {bare:.5g}  default {default:.5g} ({default / bare:.3f}x, '
          f'{clipped} steps clipped)  fixed clip 1.0 {old:.5g} ({old / bare:.3f}x)')
  print(f'guarded model.fit vs plain fit ({steps} steps, same seed, data and settings): every '
        'model and optimizer variable at the end')
  for name, make_model, make_data, loss in cases:
    for spe, jit in ((1, False), (10, True)):
      ends = []
      for guarded in (False, True):
        model = make_model(seed=0)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, steps_per_execution=spe,
                      jit_compile=jit)
        if guarded:
          stable_train.guard_fit(model)
        model.fit(make_data(), epochs=1, steps_per_epoch=steps, verbose=0)
        ends.append([np.asarray(v.numpy()) for v in model.variables + model.optimizer.variables])
      worst = max(float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-30))
                  for a, b in zip(*ends) if a.dtype.kind == 'f' and a.size)
      sparse = any(isinstance(layer, keras.layers.Embedding) for layer in model.layers)
      note = ('; by design: Keras applies an Embedding\'s gradient as IndexedSlices (only the '
              "batch's rows move), the guard checks and applies dense gradients") if sparse else ''
      print(f'  {name:18s} steps_per_execution={spe:<2d} jit_compile={jit!s:5s} '
            + ('bit-identical' if worst == 0 else f'max relative difference {worst:.2g}') + note)
  return 0


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--section', choices=('speed', 'healthy'), default='speed')
  p.add_argument('--model', choices=('mlp', 'convnet'), default='mlp')
  p.add_argument('--batch', type=int, default=32)
  p.add_argument('--steps', type=int, default=200, help='steps per round (a multiple of 10)')
  p.add_argument('--rounds', type=int, default=7, help='timed rounds')
  p.add_argument('--examples', type=int, default=1000, help='rows of data held in memory')
  p.add_argument('--rollbacks', type=int, default=4, help='NaN stretches for the rollback latency')
  p.add_argument('--healthy_steps', type=int, default=2000)
  p.add_argument('--quick', action='store_true', help='smoke test: 1 round x 20 steps')
  p.add_argument('--rss_child', choices=('bare', 'stack'), help=argparse.SUPPRESS)
  p.add_argument('--rss_k', type=int, default=1, help=argparse.SUPPRESS)
  p.add_argument('--rss_jit', action='store_true', help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.quick:
    a.rounds, a.steps, a.rollbacks, a.healthy_steps = 1, 20, 2, 20
  if a.steps <= 0 or a.steps % 10:
    p.error('--steps must be a positive multiple of 10')
  if a.batch <= 0 or a.examples < a.batch:
    p.error('--batch must be positive and at most --examples')
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('absl').setLevel(logging.WARNING)  # TF's checkpoint writer logs every save.
  logging.getLogger('stable_train').setLevel(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel(logging.ERROR)  # One variables_finite function per Trainer: "retracing".
  if a.rss_child:
    return rss_child(a)
  return speed(a) if a.section == 'speed' else healthy(a)


if __name__ == '__main__':
  sys.exit(main())
