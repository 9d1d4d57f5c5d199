#!/usr/bin/env python3
"""What stable_train costs, as ratios to baselines run in the same process (interleaved rounds).

  python scripts/benchmark.py                              # seed MLP, batch 32 (the speed issue)
  python scripts/benchmark.py --model transformer --batch 256 --steps 50   # a larger step
  python scripts/benchmark.py --model convnet              # BatchNorm + Dropout convnet
  python scripts/benchmark.py --quick                      # smoke test: a few steps of everything
  python scripts/benchmark.py --section cadences           # what each summary/log cadence costs
  python scripts/benchmark.py --section recorder           # its host part alone, per loop (quick)
  python scripts/benchmark.py --section healthy            # final loss: default stack vs bare;
                                                           # guarded vs plain model.fit
  python scripts/benchmark.py --section floor              # what a bit-identical skip cannot
                                                           # avoid, and each layer above it
  python scripts/benchmark.py --section own_loop           # a hand-written step: bare, StepGuard,
                                                           # LossScaleOptimizer; 3 models, XLA
                                                           # off and on (--quick: the seed MLP)
  python scripts/benchmark.py --section own_loop --model mlp --breakdown   # + the guard with
                                                           # SkipNonFinite alone, with no policy

Section `speed` (the default) follows the reference protocol of ../shared/bench/perf.py. Every
configuration trains its own seed-0 model (Adam 1e-3) on one shared in-memory pipeline
(`from_tensor_slices(x, y).cache().repeat().batch(B, drop_remainder=True).prefetch(2)`, tf.data
autotune off); each round, each configuration runs exactly its steps from a fresh iterator,
round-robin with a rotating start (gc off inside a round). Warm-up passes (tracing, XLA
compiles, first checkpoint) are excluded. Figures: median wall ms/step and median process-CPU
ms/step over the timed rounds. Trainers run with the Trainer's default cadences (checkpoints,
TensorBoard summaries, progress lines, which go to /dev/null) unless a line says otherwise.

  a.*        bare: a tf.function GradientTape step (jit_compile True|None) called from a tf.function
             loop `for _ in tf.range(n): next(iterator)`, n = 1 | 10 -- the Trainer's structure
             minus every check.
  b.*        Trainer, default stack (CheckNumerics, AdaptiveClip, SkipNonFinite), with a model_dir;
             steps_per_loop 1 | 10, jit False | True.
  b2.*       b at 10 steps/loop + LossSpike(min_ratio=10) + Rollback + ValidateInputs + Forensics.
  c.*        Keras fit with Adam(global_clipnorm=1.0) + TerminateOnNaN: compile defaults, and its
             best (steps_per_execution=10, jit_compile=True); c.best.disk: its best with files at
             the Trainer's default cadence (BackupAndRestore every checkpoint_every steps,
             TensorBoard every summary_every steps; the TensorBoard callback needs the
             `tensorboard` package: `pip install -e '.[bench]'`).
  p.*, g.*   plain Keras fit (no clipping, no callback) and the same fit guarded by stable_train
             (guard_fit: default stack + its callback, nothing on disk): compile defaults (k1), and
             steps_per_execution=10 with jit_compile=True (k10.xla); on the other models in
             their modes (k10, and k10.xla on the convnet).
  d.*        b without a model_dir (nothing on disk).
  f.k10      b.k10 with checkpoint_every=10**9 (the checkpoint cost is b.k10 / f.k10).
  s.best     stable_train at its best with a model_dir: steps_per_loop 100, jit_compile=True.
  q.cli      configs/quickstart.gin as the CLI runs it: the config parsed by gin (the CLI's search
             paths, unknown bindings rejected), the Trainer and the dataset built from its bindings
             with a model_dir, its cadences as shipped (10 steps/loop, checkpoints and progress
             lines every 500 steps, summaries at the Trainer's default); rounds of 1000 steps.
  a.q        bare on q.cli's dataset and model, 10 steps/call.
  c.q        Keras fit on q.cli's dataset, steps_per_execution=10, BackupAndRestore + TensorBoard
             at q.cli's cadence.

After the rounds: one Trainer.save_checkpoint() (median of 5), the checkpoint's size, a zero-step
fit() call, peak RSS above the start per configuration (build + warm-up), the rollback latency
(trigger -> first applied step) of a Trainer with Rollback meeting NaN stretches, and the peak RSS
of a fresh process training with the default stack against one training the bare step, per mode.

Output lines: `CONFIG name median cpu_median ...`, `RATIO name value target verdict (notes)` with
the ratio of medians first and the paired per-round ratios (mean and median) in the notes,
`METRIC name value (notes)`.
"""

import argparse
import gc
import glob
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top

SEED = 0
LR = 1e-3
QUICKSTART = os.path.join(REPO, 'configs', 'quickstart.gin')
QUICKSTART_STEPS = 1000  # Steps per round of the q configurations: two of its checkpoint intervals.


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
def no_autotune(ds):
  """Autotune's model thread makes deleting an idle iterator block (0.3-2 s seen), and every
  fit() replaces one: nothing here is autotuned, so it is off for every configuration alike."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  options = tf.data.Options()
  options.autotune.enabled = False
  return ds.with_options(options)


class Workload:
  """The model factory, loss and one shared in-memory pipeline of a benchmark run."""

  def __init__(self, model: str, batch: int, examples: int):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from stable_train.zoo import data as data_lib  # pylint: disable=g-import-not-at-top
    from stable_train.core import losses  # pylint: disable=g-import-not-at-top
    from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
    rng = np.random.RandomState(SEED)
    self.name, self.batch = model, batch
    if model == 'mlp':
      x = rng.normal(size=(examples, 1000)).astype(np.float32)
      w = rng.normal(size=(1000, 1)).astype(np.float32) / np.sqrt(1000)
      y = (x @ w + 0.1 * rng.normal(size=(examples, 1))).astype(np.float32)
      self.new_model = lambda: models.mlp(seed=SEED)
      self.loss = keras.losses.MeanSquaredError()
      self.describe = 'seed MLP 1000->256->128->1, MSE'
    elif model == 'convnet':
      x = rng.normal(size=(examples, 16, 16, 3)).astype(np.float32)
      y = rng.randint(0, 10, size=(examples,)).astype(np.int32)
      self.new_model = lambda: models.convnet_bn(seed=SEED)
      self.loss = losses.sparse_softmax_cross_entropy
      self.describe = 'convnet_bn (Conv-BN-ReLU-Pool x2, Dropout), sparse softmax CE'
    else:  # The zoo's transformer on its own token data (one batch of all the examples).
      x, y = (v.numpy() for v in next(iter(data_lib.synthetic_sequences(
          num_examples=examples, batch_size=examples, seed=SEED, repeat=False))))
      self.new_model = lambda: models.transformer(seed=SEED)
      self.loss = losses.sparse_softmax_cross_entropy
      self.describe = 'transformer (2 blocks, dim 32, attention + FFN, dropout), sparse softmax CE'
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
    return no_autotune(ds.prefetch(2))


class QuickstartData:
  """configs/quickstart.gin's dataset, models and loss, for the configurations compared with it
  (set by `Quickstart.build`, while its bindings are in force)."""

  def __init__(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.tf, self.dataset, self.loss, self.models = tf, None, None, []

  def new_model(self):
    return self.models.pop()


# ------------------------------------------------------------------------------------------------
# Configurations: build(), run_round(steps), check(steps) -> problems, model; `steps`: per round.
# ------------------------------------------------------------------------------------------------
class Bare:
  """A plain GradientTape step in a tf.function loop: the floor every ratio is taken against."""

  def __init__(self, name, work, k, jit, steps=None, guard=None):
    self.name, self.work, self.k, self.jit, self.steps = name, work, k, jit, steps
    self.guard = guard  # None; 'norm': + the global norm; 'skip': + a finite check and a cond.
    shown = {None: '', 'norm': ' + global norm', 'skip': ' + global norm, apply in a tf.cond on '
             'its finiteness (the least a bit-identical skip needs)'}[guard]
    self.desc = f'bare tf.function step{shown}, {k}/call, jit_compile={jit}'

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    tf = self.work.tf
    self.model = self.work.new_model()
    self.optimizer = keras.optimizers.Adam(LR)
    variables = list(self.model.trainable_variables)
    self.optimizer.build(variables)
    model, optimizer, loss_fn = self.model, self.optimizer, self.work.loss

    from stable_train.core import numerics  # pylint: disable=g-import-not-at-top
    guard = self.guard

    def step(x, y):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      grads = tape.gradient(loss, variables)

      def apply():
        optimizer.apply_gradients(zip(grads, variables))
        return tf.constant(True)

      if guard is None:
        apply()
        return loss
      _, norm = numerics.finite_flags_and_norm(grads, xla=self.jit)  # As the guard measures it.
      if guard == 'norm':
        apply()
      else:
        tf.cond(tf.math.is_finite(norm), apply, lambda: tf.constant(False))
      return loss + 0.0 * norm  # The norm is an output: nothing prunes it.

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


def no_policies():
  return []


def default_stack():
  import stable_train  # pylint: disable=g-import-not-at-top
  return stable_train.default_policies()


def skip_only():
  """The skeleton that skips: SkipNonFinite alone (its vote on the gradients' finiteness is what
  makes the apply wait for every gradient, as the floor's `tf.cond` does)."""
  import stable_train  # pylint: disable=g-import-not-at-top
  return [stable_train.SkipNonFinite()]


def without_input_check():
  import stable_train  # pylint: disable=g-import-not-at-top
  stack = stable_train.default_policies()
  stack[0] = stable_train.CheckNumerics(check_inputs=False)  # The input finiteness check off.
  return stack


def full_stack():
  import stable_train  # pylint: disable=g-import-not-at-top
  # LossSpike at min_ratio 10 (as configs/unstable_spike.gin): at 1.5 it fires on the healthy
  # noise of this small data set once its loss nears 0, and a rollback voids a timed round.
  return stable_train.default_policies() + [
      stable_train.LossSpike(min_ratio=10.0), stable_train.Rollback(),
      stable_train.ValidateInputs(), stable_train.Forensics()]


class Stable:
  """A Trainer, one `fit` per round to the next target step; the Trainer's default cadences
  unless given (`settings`)."""

  def __init__(self, name, work, root, k, jit, *, stack=default_stack, model_dir=True,
               **settings):
    self.name, self.work, self.root, self.k, self.jit = name, work, root, k, jit
    self.stack, self.use_dir, self.settings, self.steps = stack, model_dir, settings, None
    shown = ''.join(f', {k}={v}' for k, v in settings.items())
    self.desc = (f'Trainer {stack.__name__}, steps_per_loop={k}, jit_compile={jit}, '
                 f'model_dir={"tmp" if model_dir else None}{shown}')
    self.target = 0

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    import stable_train  # pylint: disable=g-import-not-at-top
    self.model_dir = tempfile.mkdtemp(prefix=self.name + '.', dir=self.root) if self.use_dir else None
    self.trainer = stable_train.Trainer(
        model=self.work.new_model(), optimizer=keras.optimizers.Adam(LR), loss=self.work.loss,
        policies=self.stack(), model_dir=self.model_dir, steps_per_loop=self.k,
        jit_compile=self.jit, **self.settings)
    self.model = self.trainer.model

  def run_round(self, steps):
    t = self.trainer
    self._before = (int(t.applied_steps.numpy()), int(t.skipped_steps.numpy()))
    self.target += steps
    self.summary = t.fit(self.dataset(), num_steps=self.target)

  def dataset(self):
    return self.work.dataset

  def check(self, steps):
    t, s = self.trainer, self.summary
    applied = int(t.applied_steps.numpy()) - self._before[0]
    skipped = int(t.skipped_steps.numpy()) - self._before[1]
    if s.get('status') == 'completed' and applied == steps and not skipped:
      return []
    return [f"status {s.get('status')}, {applied} applied, {skipped} skipped: {s.get('reason', '')}"]


class Quickstart(Stable):
  """configs/quickstart.gin as the CLI runs it (see the module docstring); its dataset, model
  and loss are given to `data` for the configurations compared with it."""

  def __init__(self, name, data: QuickstartData, root, comparisons: int):
    super().__init__(name, data, root, 10, False)
    self.steps, self.comparisons = QUICKSTART_STEPS, comparisons
    self.desc = 'configs/quickstart.gin through gin, as the CLI builds it; a model_dir'

  def build(self):
    import gin  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
    from stable_train.app import job  # pylint: disable=g-import-not-at-top,unused-import
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    gin.clear_config()
    folder = os.path.dirname(QUICKSTART)  # The CLI's search paths: next to the config, above.
    gin.add_config_file_search_path(folder)
    gin.add_config_file_search_path(os.path.dirname(folder))
    gin.parse_config_files_and_bindings([QUICKSTART], [], skip_unknown=False)
    try:
      self.model_dir = tempfile.mkdtemp(prefix=self.name + '.', dir=self.root)
      strategy = tf.distribute.get_strategy()
      with strategy.scope():  # As job.train builds it: every setting from the config.
        self.trainer = trainer_lib.Trainer(model_dir=self.model_dir, strategy=strategy)
      self._dataset = no_autotune(gin.query_parameter('train.dataset_fn').scoped_configurable_fn())
      make_model = gin.query_parameter('Trainer.model').scoped_configurable_fn
      self.work.models = [make_model() for _ in range(self.comparisons)]  # The same seed.
      self.work.dataset, self.work.loss = self._dataset, self.trainer.loss_fn
    finally:
      gin.clear_config()  # Nothing else built here may read the quickstart's bindings.
    t = self.trainer
    self.desc += (f' (steps_per_loop {t.steps_per_loop}, checkpoint_every {t.checkpoint_every}, '
                  f'summary_every {t.summary_every}, log_every {t.log_every}, jit_compile '
                  f'{t.jit_compile}, policies {", ".join(p.name for p in t.policies)})')
    self.model = t.model

  def dataset(self):
    return self._dataset


class KerasFit:
  """Keras `fit` with global_clipnorm=1.0 + TerminateOnNaN; with `files` (checkpoint_every,
  summary_every) in steps, BackupAndRestore and TensorBoard at that cadence."""

  def __init__(self, name, work, steps_per_execution=None, jit=None, files=None, root=None,
               steps=None):
    self.name, self.work, self.spe, self.jit = name, work, steps_per_execution, jit
    self.files, self.root, self.steps = files, root, steps
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
                 f'{self.model.steps_per_execution}, jit_compile={self.model.jit_compile}'
                 + (self._file_callbacks(keras) if self.files else ''))

  def _file_callbacks(self, keras) -> str:
    checkpoint_every, summary_every = self.files
    folder = tempfile.mkdtemp(prefix=self.name + '.', dir=self.root)
    # delete_checkpoint=False would restore "epoch 1 done" at the next fit() and train nothing.
    self.callbacks.append(keras.callbacks.BackupAndRestore(
        os.path.join(folder, 'backup'), save_freq=checkpoint_every))
    shown = f' + BackupAndRestore(save_freq={checkpoint_every})'
    try:  # Keras's TensorBoard callback needs the tensorboard package (TF 2.21 does not pull it).
      import tensorboard  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      return shown + ' (no TensorBoard callback: the tensorboard package is not installed)'
    # Its update_freq counts calls of on_train_batch_end: one per execution of spe steps.
    every = max(summary_every // (self.spe or 1), 1)
    self.callbacks.append(keras.callbacks.TensorBoard(
        os.path.join(folder, 'tb'), update_freq=every, write_graph=False, profile_batch=0))
    return shown + f' + TensorBoard(update_freq={every}: every {every * (self.spe or 1)} steps)'

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
    self.spe, self.jit, self.steps = steps_per_execution, jit, None
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


def configurations(a, work, root):
  """The configurations of this run: every mode on the seed MLP (and the quickstart through
  the CLI's parts); the bare step, the Trainer with and without a model_dir and Keras at its best
  on the other models, in the modes that suit them (no XLA on the transformer: XLA:CPU ran its
  step ~10x slower than the plain one here)."""
  S = lambda name, k, jit, **kw: Stable(name, work, root, k, jit, **kw)  # noqa: E731
  if a.model != 'mlp':
    modes = [(10, False)] + ([(10, True)] if a.model == 'convnet' else [])
    configs = []
    for k, jit in modes:
      mode = f'k{k}{".xla" if jit else ""}'
      configs += [Bare(f'a.{mode}', work, k, jit), S(f'b.{mode}', k, jit),
                  S(f'd.{mode}', k, jit, model_dir=False),
                  GuardedFit(f'p.{mode}', work, False, k, jit),
                  GuardedFit(f'g.{mode}', work, True, k, jit)]
    return configs + [KerasFit('c.best', work, steps_per_execution=10, jit=modes[-1][1])]
  from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  defaults = trainer_lib.Trainer.__init__.__kwdefaults__
  cadence = (defaults['checkpoint_every'], defaults['summary_every'])
  configs = [
      Bare('a.k1', work, 1, False), Bare('a.k1.xla', work, 1, True),
      Bare('a.k10', work, 10, False), Bare('a.k10.xla', work, 10, True),
      S('b.k1', 1, False), S('b.k1.xla', 1, True), S('b.k10', 10, False), S('b.k10.xla', 10, True),
      S('b2.k10', 10, False, stack=full_stack), S('b2.k10.xla', 10, True, stack=full_stack),
      KerasFit('c.default', work), KerasFit('c.best', work, steps_per_execution=10, jit=True),
      KerasFit('c.best.disk', work, steps_per_execution=10, jit=True, files=cadence, root=root),
      S('d.k1', 1, False, model_dir=False), S('d.k1.xla', 1, True, model_dir=False),
      S('d.k10', 10, False, model_dir=False), S('d.k10.xla', 10, True, model_dir=False),
      S('f.k10', 10, False, checkpoint_every=10**9),
      GuardedFit('p.k1', work, False), GuardedFit('g.k1', work, True),
      GuardedFit('p.k10.xla', work, False, 10, True), GuardedFit('g.k10.xla', work, True, 10, True),
  ]
  if a.steps % 100 == 0:
    configs.append(S('s.best', 100, True))  # 100 steps per loop.
  quick = QuickstartData()
  steps = min(QUICKSTART_STEPS, a.steps) if a.quick else QUICKSTART_STEPS
  q = Quickstart('q.cli', quick, root, comparisons=2)
  q.steps = steps
  configs += [q, Bare('a.q', quick, 10, False, steps=steps)]
  q_cadence = (500, defaults['summary_every'])  # The quickstart's checkpoint_every, summaries.
  configs.append(KerasFit('c.q', quick, steps_per_execution=10, jit=False, files=q_cadence,
                          root=root, steps=steps))
  return configs


def run_rounds(a, configs):
  """Warm-up, then `a.rounds` interleaved timed rounds. Returns (wall, cpu, by_round, peak,
  problems): wall and CPU ms/step per configuration, wall ms/step per round, peak RSS (MB above
  the start over build + warm-up, None where it cannot be reset), problems."""
  for jit in (False, True):  # Pre-warm the runtimes: the first configuration's memory is its own.
    warm = Bare('warm', configs[0].work, 1, jit)
    warm.build()
    warm.run_round(3)
  del warm
  gc.collect()
  can_reset = reset_peak()
  wall = {c.name: [] for c in configs}
  cpu = {c.name: [] for c in configs}
  by_round = {c.name: {} for c in configs}  # Wall ms/step per round, for the paired ratios.
  peak, problems = {}, {c.name: [] for c in configs}
  for c in configs:  # Build, trace, one round of at least 100 steps: excluded; peak RSS measured.
    gc.collect()
    reset_peak()
    start_rss = _status_mb('VmRSS')
    c.build()
    steps = max(c.steps or a.steps, 100)
    c.run_round(steps)
    peak[c.name] = (_status_mb('VmHWM') - start_rss) if can_reset else None
    problems[c.name] += c.check(steps)
  for c in configs:  # A second untimed pass: first calls after other configurations traced.
    c.run_round(c.steps or a.steps)
  print('# warm-up done', file=sys.stderr, flush=True)
  for r in range(a.rounds):
    shift = r % len(configs)
    for c in configs[shift:] + configs[:shift]:
      steps = c.steps or a.steps
      gc.collect()
      gc.disable()
      try:
        c0, t0 = time.process_time(), time.perf_counter()
        c.run_round(steps)
        t1, c1 = time.perf_counter(), time.process_time()
      finally:
        gc.enable()
      bad = c.check(steps)
      if bad:
        problems[c.name] += [f'round {r + 1} excluded: {m}' for m in bad]
        continue
      wall[c.name].append((t1 - t0) / steps * 1e3)
      by_round[c.name][r] = wall[c.name][-1]
      cpu[c.name].append((c1 - c0) / steps * 1e3)
    print(f'# round {r + 1}/{a.rounds} done', file=sys.stderr, flush=True)
  return wall, cpu, by_round, peak, problems


class Ratios:
  """The RATIO lines: the ratio of medians (the verdict's figure), then the per-round ratios of
  the two configurations run in the same round (mean and median), which stay steady when the
  machine's speed drifts between rounds."""

  def __init__(self, wall, cpu, by_round):
    nan = float('nan')
    self.med = {n: statistics.median(v) if v else nan for n, v in wall.items()}
    self.cmed = {n: statistics.median(v) if v else nan for n, v in cpu.items()}
    self.by_round = by_round
    self.lines = []

  def fastest(self, names):
    names = [n for n in names if n in self.med]
    return min(names, key=lambda n: (np.isnan(self.med[n]), self.med[n]))

  def add(self, name, num, den, target=None, higher_is_better=False, note=''):
    if num not in self.med or den not in self.med:
      return
    value = self.med[num] / self.med[den]
    if target is None:
      goal = verdict = ''
    elif np.isnan(value):
      goal, verdict = f'target {target:.2f}', 'n/a (no timed round)'
    elif higher_is_better:
      goal, verdict = f'>= {target:.2f}', 'meets' if value >= target else 'misses'
    else:
      goal, verdict = f'<= {target:.2f}', 'meets' if value <= target else 'misses'
    pairs = [self.by_round[num][r] / self.by_round[den][r] for r in self.by_round[num]
             if r in self.by_round[den]]
    paired = (f'; paired mean {statistics.mean(pairs):.3f}, median {statistics.median(pairs):.3f}'
              if pairs else '')
    self.lines.append(f'RATIO {name} {value:.3f} {goal} {verdict}  ({num} / {den}, medians; cpu '
                      f'{self.cmed[num] / self.cmed[den]:.3f}{paired}){" " + note if note else ""}')


def speed_ratios(ratios, modes):
  """Every target line of the speed section (those whose configurations ran)."""
  for mode in modes:
    ratios.add(f'nothing_on_disk.d_over_a.{mode}', f'd.{mode}', f'a.{mode}', 1.05)
  for mode in modes:
    ratios.add(f'with_disk.b_over_a.{mode}', f'b.{mode}', f'a.{mode}', 1.10)
  for mode in modes:
    ratios.add(f'disk_path.b_over_d.{mode}', f'b.{mode}', f'd.{mode}',
               1.03 if mode.startswith('k10') else None,
               note='[a model_dir (checkpoints, events, summaries) vs none]')
  for mode in ('k10', 'k10.xla'):
    ratios.add(f'full_stack.b2_over_a.{mode}', f'b2.{mode}', f'a.{mode}')
  best = ratios.fastest([f'b.{m}' for m in modes] + ['s.best'])
  ratios.add('keras_best_disk.c_best_disk_over_b_best', 'c.best.disk', best, 1.10, True,
             f'[both at their best with files at the same cadence; b_best = {best}]')
  ratios.add('best_vs_keras_best.c_best_over_s_best', 'c.best', 's.best', 1.10, True,
             '[throughput of stable_train at its best (model_dir) / Keras fit at its best]')
  ratios.add('same_mode_vs_keras_best.c_best_over_b.k10.xla', 'c.best', 'b.k10.xla', None, True)
  ratios.add('defaults_vs_keras_defaults.c_default_over_b.k1', 'c.default', 'b.k1', None, True)
  for mode in ('k1', 'k10', 'k10.xla'):  # The same fit, guarded and plain, at its settings.
    ratios.add(f'keras_fit_guarded.g_over_p.{mode}', f'g.{mode}', f'p.{mode}', 1.05)
  ratios.add('checkpoint_cost.b_over_f.k10', 'b.k10', 'f.k10', 1.02,
             note='[checkpoints every 100 steps vs none but the one at the end of each fit]')
  ratios.add('quickstart.q_over_a', 'q.cli', 'a.q', 1.10,
             note='[configs/quickstart.gin through the CLI\'s parts vs a bare step, 10 per call]')
  ratios.add('quickstart.c_over_q', 'c.q', 'q.cli', None, True,
             note='[Keras fit with BackupAndRestore + TensorBoard at the quickstart\'s cadence]')
  if 'c.best.disk' not in ratios.med:  # Another model: its step outweighs the guard's pass.
    for mode in modes:
      ratios.add(f'larger_model.b_over_a.{mode}', f'b.{mode}', f'a.{mode}', 1.03,
                 note='[the default stack with a model_dir vs bare, on a step the guard is a '
                 'small share of]')
    ratios.add(f'keras_best.c_best_over_b.{modes[-1]}', 'c.best', f'b.{modes[-1]}', None, True)


def _speed(a, work, root, keras, tf):
  print(f'# stable_train benchmark: {work.describe}, batch {a.batch}; TF {tf.__version__}, Keras '
        f'{keras.__version__}, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}; '
        f'{a.rounds} timed rounds x {a.steps} steps (the q configurations: '
        f'{QUICKSTART_STEPS if not a.quick else min(QUICKSTART_STEPS, a.steps)})', flush=True)
  configs = configurations(a, work, root)
  wall, cpu, by_round, peak, problems = run_rounds(a, configs)
  ratios = Ratios(wall, cpu, by_round)
  for c in configs:
    pk = 'n/a' if peak[c.name] is None else f'{peak[c.name]:.1f}'
    print(f'CONFIG {c.name:11s} {ratios.med[c.name]:7.3f} ms/step  cpu {ratios.cmed[c.name]:7.3f}  '
          f'peak+{pk} MB  | {c.desc}')
  modes = [m for m in ('k1', 'k1.xla', 'k10', 'k10.xla') if f'a.{m}' in ratios.med]
  speed_ratios(ratios, modes)
  by_name = {c.name: c for c in configs}
  print('\n'.join(ratios.lines), flush=True)  # Before the metrics below, which take a while.
  out = []
  b = by_name['b.k10'].trainer
  saves, fits = [], []  # After the rounds: one save, its size, a zero-step fit().
  for _ in range(5):
    gc.collect()
    t0 = time.perf_counter()
    b.save_checkpoint(reason='benchmark')
    saves.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    b.fit(work.dataset, num_steps=int(b.global_step.numpy()))
    fits.append((time.perf_counter() - t0) * 1e3)
  out.append(f'METRIC checkpoint_save_ms {statistics.median(saves):.1f}  (Trainer.save_checkpoint '
             f'on b.k10, median of 5: time the loop is blocked)')
  out.append(f'METRIC checkpoint_size_mb {checkpoint_size_mb(b):.2f}  (the dataset in memory is '
             f'{work.x.nbytes / 2**20:.1f} MB; a checkpoint must not hold it)')
  out.append(f'METRIC fit_call_overhead_ms {statistics.median(fits):.1f}  (a zero-step fit() on '
             f'b.k10, median of 5)')
  if all(peak.get(f'{k}.{m}') is not None for k in 'ad' for m in modes):
    for mode in modes:
      pb, pa = peak[f'd.{mode}'], peak[f'a.{mode}']
      out.append(f'METRIC peak_rss_above_bare_mb.d.{mode} {pb - pa:.1f}  (peak RSS above the '
                 f'start over build + warm-up: d {pb:.1f} MB, a {pa:.1f} MB)')
  if a.rollbacks and not np.issubdtype(work.x.dtype, np.floating):
    out.append('# no rollback latency: the NaN stretches poison float features, these are tokens')
  elif a.rollbacks:
    ms, values, first = rollback_latency(work, root, a.rollbacks)
    shown = ' '.join(f'{v:.1f}' for v in values)
    verdict = 'meets' if ms <= 20 else 'misses'
    out.append(f'METRIC rollback_trigger_to_first_applied_step_ms {ms:.1f} <= 20 {verdict}  '
               f'(median after the first; all: {shown})')
    if first:
      out.append(f"#   first rollback: step {first['step']} -> {first.get('to_step')}, skipped "
                 f"batches {first.get('skipped_batches')}")
  rss_modes = [(10, True)] if a.quick else [(int(m[1:].split('.')[0]), m.endswith('.xla'))
                                            for m in modes]
  for k, jit in rss_modes:
    bare, stack = (rss_of_a_process(a, kind, k, jit) for kind in ('bare', 'stack'))
    mode = f'k{k}{".xla" if jit else ""}'
    value = stack / bare
    out.append(f'RATIO peak_rss.process.d_over_a.{mode} {value:.3f} <= 1.30 '
               f'{"meets" if value <= 1.3 else "misses"}  (peak RSS of a process training '
               f'{a.steps + 100} steps: default stack, nothing on disk {stack:.0f} MB / bare step '
               f'{bare:.0f} MB)')
  out.append(f'METRIC process_peak_rss_mb {_status_mb("VmHWM") or float("nan"):.0f}')
  for line in out:
    print(line)
  print(f'# load avg at the end {os.getloadavg()[0]:.2f}')
  return sanity(wall, problems)


def sanity(wall, problems) -> int:
  """Prints the SANITY lines; returns the exit code (1: a configuration failed outside the timed
  rounds, or has no timed round)."""
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
# The floor section: what a guard cannot avoid, and what stable_train adds above it.
# ------------------------------------------------------------------------------------------------
def floor(a):
  """Interleaved rounds at 10 steps per call, without and with XLA: the bare step, the bare step
  with the global norm (n), with the apply in a tf.cond on its finiteness (m: the least a
  bit-identical skip needs, no stable_train), the Trainer's skeleton (e: `policies=[]`, which
  applies whatever the gradients), the skeleton that skips (s: SkipNonFinite alone), the default
  stack (d) and the same without its input finiteness check (i); nothing on disk."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  work = Workload(a.model, a.batch, a.examples)
  root = tempfile.mkdtemp(prefix='st_bench.')
  print(f'# stable_train benchmark, floor: {work.describe}, batch {a.batch}; TF {tf.__version__}, '
        f'load avg {os.getloadavg()[0]:.2f}; {a.rounds} rounds x {a.steps} steps', flush=True)
  modes = [(10, False)] + ([] if a.model == 'transformer' else [(10, True)])
  configs = []
  for k, jit in modes:
    m = f'k{k}{".xla" if jit else ""}'
    configs += [Bare(f'a.{m}', work, k, jit), Bare(f'n.{m}', work, k, jit, guard='norm'),
                Bare(f'm.{m}', work, k, jit, guard='skip'),
                Stable(f'e.{m}', work, root, k, jit, model_dir=False, stack=no_policies),
                Stable(f's.{m}', work, root, k, jit, model_dir=False, stack=skip_only),
                Stable(f'i.{m}', work, root, k, jit, model_dir=False, stack=without_input_check),
                Stable(f'd.{m}', work, root, k, jit, model_dir=False)]
  try:
    wall, cpu, by_round, _, problems = run_rounds(a, configs)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  ratios = Ratios(wall, cpu, by_round)
  for c in configs:
    print(f'CONFIG {c.name:9s} {ratios.med[c.name]:7.3f} ms/step  cpu {ratios.cmed[c.name]:7.3f}'
          f'  | {c.desc}')
  for k, jit in modes:
    m = f'k{k}{".xla" if jit else ""}'
    ratios.add(f'floor.norm.n_over_a.{m}', f'n.{m}', f'a.{m}', note='(the global norm pass)')
    ratios.add(f'floor.skip.m_over_a.{m}', f'm.{m}', f'a.{m}',
               note='(the floor: the least a bit-identical skip costs)')
    ratios.add(f'floor.skeleton.e_over_m.{m}', f'e.{m}', f'm.{m}',
               note="(the Trainer's step and loop above the floor)")
    ratios.add(f'floor.policies.d_over_e.{m}', f'd.{m}', f'e.{m}',
               note='(the default policies above the skeleton)')
    ratios.add(f'floor.skipping.s_over_m.{m}', f's.{m}', f'm.{m}',
               note="(the skeleton that skips, SkipNonFinite alone, above the floor)")
    ratios.add(f'floor.policies.d_over_s.{m}', f'd.{m}', f's.{m}',
               note='(the default policies above the skeleton that skips)')
    ratios.add(f'floor.inputs.d_over_i.{m}', f'd.{m}', f'i.{m}',
               note="(the default stack's input finiteness check)")
    ratios.add(f'floor.total.d_over_a.{m}', f'd.{m}', f'a.{m}')
  print('\n'.join(ratios.lines))
  return sanity(wall, problems)


# ------------------------------------------------------------------------------------------------
# The own_loop section: a hand-written step, bare, guarded by StepGuard, and under Keras's skip.
# ------------------------------------------------------------------------------------------------
OWN_VARIANTS = {  # name: what the step does between the tape and the update.
    'bare': 'tape, optimizer.apply(grads)',
    'guard': 'StepGuard (default policies), returns step.report',
    'guard_in': 'StepGuard (default policies) with guard.step((x, y)): the inputs checked too',
    'lso': 'keras LossScaleOptimizer(Adam), float32: grads of scale_loss(loss), apply',
    'gopt': 'stable_train.GuardedOptimizer(Adam): apply',
    'skip': 'StepGuard(policies=[SkipNonFinite()])',
    'none': 'StepGuard(policies=[]): the guard with no policy',
    'guard_loss': 'StepGuard (default policies), returns the loss alone (not step.report)',
}


def skip_alone():
  import stable_train  # pylint: disable=g-import-not-at-top
  return [stable_train.SkipNonFinite()]


# The StepGuard variants' policy stacks (None: StepGuard's default, stable_train.default_policies).
OWN_POLICIES = {'skip': skip_alone, 'none': no_policies}


class OwnStep:
  """A hand-written GradientTape step (`variant`: a key of OWN_VARIANTS), one tf.function call a
  step from a Python loop over the shared pipeline, as a user's loop runs it; its own seed-0 model
  and Adam."""

  def __init__(self, name, work, variant, jit, steps=None):
    self.name, self.work, self.variant, self.jit, self.steps = name, work, variant, jit, steps
    self.desc = f'{OWN_VARIANTS[variant]}, 1 step/call, jit_compile={jit}'

  def build(self):
    import keras  # pylint: disable=g-import-not-at-top
    import stable_train  # pylint: disable=g-import-not-at-top
    tf, loss_fn, variant = self.work.tf, self.work.loss, self.variant
    model = self.model = self.work.new_model()
    self.optimizer = keras.optimizers.Adam(LR)  # The one whose `iterations` counts the updates.
    variables = list(model.trainable_variables)

    def loss_and_grads(x, y, scale=None):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        target = loss if scale is None else scale(loss)
      return loss, tape.gradient(target, variables)

    if variant in ('bare', 'lso', 'gopt'):
      outer = {'bare': lambda o: o, 'lso': keras.optimizers.LossScaleOptimizer,
               'gopt': lambda o: stable_train.GuardedOptimizer(o)}[variant](self.optimizer)
      outer.build(variables)
      scale = outer.scale_loss if variant == 'lso' else None

      def step(x, y):
        loss, grads = loss_and_grads(x, y, scale)
        outer.apply(grads, variables)
        return loss
    else:
      policies = OWN_POLICIES.get(variant, lambda: None)()
      guard = stable_train.StepGuard(model, self.optimizer, policies=policies, jit_compile=self.jit)
      checked = variant == 'guard_in'

      def step(x, y):
        with guard.step((x, y) if checked else None) as scope:
          loss, grads = loss_and_grads(x, y)
          scope.apply(grads, loss)
        return scope.report['loss'] if variant == 'guard_loss' else scope.report

    self.step_fn = tf.function(step, jit_compile=self.jit)
    self.failure = None
    try:  # Traced and compiled here: a step that cannot run is reported, the others still run.
      self.step_fn(*next(iter(self.work.dataset)))
    except tf.errors.OpError as e:
      self.failure = f'the step fails: {type(e).__name__}: {e.message.splitlines()[0]}'

  def run_round(self, steps):
    self._before = int(self.optimizer.iterations.numpy())
    if self.failure:
      return
    iterator = iter(self.work.dataset)
    out = None
    for _ in range(steps):
      x, y = next(iterator)
      out = self.step_fn(x, y)
    self.last_loss = float(out['loss'] if isinstance(out, dict) else out)

  def check(self, steps):
    return [self.failure] if self.failure else Bare.check(self, steps)


def own_loop_variants(breakdown: bool):
  """The variants each model and mode runs: a, b, c, GuardedOptimizer (d) where this checkout has
  it, the guard with the input check (b'); with `breakdown`, the guard with SkipNonFinite alone,
  with no policy, and returning the loss alone."""
  import stable_train  # pylint: disable=g-import-not-at-top
  gopt = ['gopt'] if hasattr(stable_train, 'GuardedOptimizer') else []
  return ['bare', 'guard', 'lso'] + gopt + ['guard_in'] + (['skip', 'none', 'guard_loss'] if breakdown else [])


def own_loop(a):
  """Per model and XLA mode, interleaved rounds of the hand-written step, one step per call: bare
  (a), guarded by StepGuard (b), under Keras's LossScaleOptimizer (c), and the other variants of
  `own_loop_variants`; every figure a ratio to a configuration of the same rounds. `--quick`: the
  seed MLP alone unless --model names one (every variant and mode: the same code paths)."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = [a.model] if a.model else ['mlp'] if a.quick else ['mlp', 'convnet', 'transformer']
  variants = own_loop_variants(a.breakdown)
  code, summary = 0, []
  for model in names:
    work = Workload(model, a.batch, a.examples)
    steps = a.transformer_steps if model == 'transformer' and a.transformer_steps else a.steps
    print(f'# stable_train benchmark, own_loop: {work.describe}, batch {a.batch}; TF '
          f'{tf.__version__}, Keras {keras.__version__}, load avg {os.getloadavg()[0]:.2f}; '
          f'{a.rounds} rounds x {steps} steps', flush=True)
    modes = ('k1', 'k1.xla')
    configs = [OwnStep(f'{v}.{m}', work, v, m.endswith('.xla'), steps)
               for m in modes for v in variants]
    wall, cpu, by_round, _, problems = run_rounds(a, configs)
    ratios = Ratios(wall, cpu, by_round)
    for c in configs:
      print(f'CONFIG {c.name:15s} {ratios.med[c.name]:7.3f} ms/step  cpu '
            f'{ratios.cmed[c.name]:7.3f}  | {c.desc}')
    for m in modes:
      summary += own_loop_ratios(ratios, f'{model}.{m}', m, variants)
    print('\n'.join(ratios.lines))
    code = max(code, sanity(wall, problems))
  print('# the targets (b: StepGuard, default policies; a: bare; c: LossScaleOptimizer; wall: ratio '
        'of medians, paired median of the per-round ratios; cpu: ratio of the process-CPU medians, '
        'steadier when other jobs share the machine)')
  print('\n'.join(summary))
  print(f'# load avg at the end {os.getloadavg()[0]:.2f}')
  return code


def own_loop_ratios(ratios, prefix, m, variants):
  """The RATIO lines of one model and mode; returns its METRIC and TARGET lines."""
  bare_ms = ratios.med[f'bare.{m}']
  big = bare_ms >= 5.0
  r = lambda v: f'{v}.{m}'  # noqa: E731
  guards = {g: shown for g, shown in (('guard', 'b'), ('guard_in', "b' (inputs checked)"))
            if g in variants}
  for guard, shown in guards.items():
    ratios.add(f'own_loop.{prefix}.{guard}_over_bare', r(guard), r('bare'), 1.05 if big else None,
               note=f'[{shown}/a; target <= 1.05 where the bare step is >= 5 ms: it is '
               f'{bare_ms:.2f} ms]')
    ratios.add(f'own_loop.{prefix}.{guard}_over_lso', r(guard), r('lso'), 1.0,
               note=f'[{shown}/c: the guard no slower than LossScaleOptimizer]')
  for v, what in (('lso', 'c/a'), ('gopt', 'd/a: GuardedOptimizer'),
                  ('skip', 'StepGuard, SkipNonFinite alone'), ('none', 'StepGuard, no policy'),
                  ('guard_loss', 'StepGuard returning the loss alone')):
    if v in variants:
      ratios.add(f'own_loop.{prefix}.{v}_over_bare', r(v), r('bare'), note=f'[{what}]')
  for v, what in (('skip', 'the default policies above SkipNonFinite'),
                  ('none', 'the default policies above none'), ('guard_loss', 'step.report')):
    if v in variants:
      ratios.add(f'own_loop.{prefix}.guard_over_{v}', r('guard'), r(v), note=f'[{what}]')
  lines = [f'METRIC own_loop.{prefix}.bare_ms {bare_ms:.3f}  (a: the bare step, median ms/step)']
  for guard, den, target, text in (
      ('guard', 'lso', 1.0, 'guard no slower than LossScaleOptimizer (b/c <= 1.0)'),
      ('guard', 'bare', 1.05, '<= 1.05x bare where the bare step is >= 5 ms (b/a)'),
      ('guard_in', 'lso', 1.0, "guard.step((x, y)) no slower than LossScaleOptimizer (b'/c)"),
      ('guard_in', 'bare', 1.05, "guard.step((x, y)) <= 1.05x bare where it is >= 5 ms (b'/a)")):
    if guard not in guards:
      continue
    value = ratios.med[r(guard)] / ratios.med[r(den)]
    pairs = [ratios.by_round[r(guard)][i] / ratios.by_round[r(den)][i]
             for i in ratios.by_round[r(guard)] if i in ratios.by_round[r(den)]]
    paired = statistics.median(pairs) if pairs else float('nan')
    if np.isnan(value):
      verdict = f'FAILED ({r(guard)} did not run: see its SANITY line)'
    elif den == 'lso' or big:
      verdict = 'meets' if value <= target else 'misses'
    else:
      verdict = f'n/a (bare {bare_ms:.2f} ms < 5 ms)'
    cpu = ratios.cmed[r(guard)] / ratios.cmed[r(den)]
    lines.append(f'TARGET {prefix:22s} {text}: {value:.3f} (paired median {paired:.3f}, cpu '
                 f'{cpu:.3f}) {verdict}')
  return lines


# ------------------------------------------------------------------------------------------------
# The healthy section: the default stack trains like a bare step.
# ------------------------------------------------------------------------------------------------
def healthy(a):
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import data as data_lib  # pylint: disable=g-import-not-at-top
  from stable_train.core import losses  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
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


# ------------------------------------------------------------------------------------------------
# The cadences section: what each summary and progress cadence costs a run with a model_dir.
# ------------------------------------------------------------------------------------------------
CADENCES = ([('summary_every', v) for v in (1, 10, 100)]
            + [('log_every', v) for v in (10, 100, 1000)])


def cadences(a):
  """The default stack with a model_dir at 10 steps/loop (no XLA and XLA), once per cadence,
  against the same run that writes no summary and no progress line (checkpoints every 100 in
  every one of them); then the cost of one events.jsonl record, appended alone or in a batch."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  work = Workload('mlp', a.batch, a.examples)
  root = tempfile.mkdtemp(prefix='st_cadences.')
  print(f'# stable_train cadences: {work.describe}, batch {a.batch}; TF {tf.__version__}, Keras '
        f'{keras.__version__}, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}; '
        f'{a.rounds} timed rounds x {a.steps} steps', flush=True)
  try:
    quiet = dict(summary_every=10**9, log_every=10**9)
    configs = []
    for jit in (False, True):
      mode = 'k10.xla' if jit else 'k10'
      configs.append(Stable(f'quiet.{mode}', work, root, 10, jit, **quiet))
      configs += [Stable(f'{name}_{value}.{mode}', work, root, 10, jit,
                         **dict(quiet, **{name: value})) for name, value in CADENCES]
    wall, cpu, by_round, _, problems = run_rounds(a, configs)
    ratios = Ratios(wall, cpu, by_round)
    for c in configs:
      print(f'CONFIG {c.name:20s} {ratios.med[c.name]:7.3f} ms/step  cpu '
            f'{ratios.cmed[c.name]:7.3f}  | {c.desc}')
    for mode in ('k10', 'k10.xla'):
      for name, value in CADENCES:
        ratios.add(f'cadence.{mode}.{name}_{value}', f'{name}_{value}.{mode}', f'quiet.{mode}',
                   note='[vs no summaries and no progress lines]')
    for line in ratios.lines:
      print(line)
    for line in event_record_costs(root) + recorder_costs(root):
      print(line)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  print(f'# load avg at the end {os.getloadavg()[0]:.2f}')
  return sanity(wall, problems)


def recorder(a):  # pylint: disable=unused-argument
  """The cadences section's host costs alone (no step, no wall-clock noise of a training run)."""
  root = tempfile.mkdtemp(prefix='st_recorder.')
  try:
    print(f'# stable_train recorder costs; load avg {os.getloadavg()[0]:.2f}', flush=True)
    for line in event_record_costs(root) + recorder_costs(root):
      print(line)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  print(f'# load avg at the end {os.getloadavg()[0]:.2f}')
  return 0


def recorder_costs(root, loops=2000, repeats=5):
  """METRIC lines: host us per clean loop of 10 steps (the recorder with a real TensorBoard file,
  events.jsonl and a progress logger to /dev/null, the loop's flush_due) at each cadence and at
  the defaults, min of `repeats` interleaved runs: what a cadence costs without the step's noise."""
  from stable_train.runfiles import events  # pylint: disable=g-import-not-at-top
  from stable_train.core import reports
  from stable_train.runtime import recorder as recorder_lib  # pylint: disable=g-import-not-at-top
  from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  defaults = trainer_lib.Trainer.__init__.__kwdefaults__
  n, ones = 10, np.ones(10, np.float32)
  loops_of = [reports.StepReports(
      step=np.arange(1 + i * n, 1 + (i + 1) * n), loss=ones, grad_norm=ones,
      clipped_grad_norm=ones, loss_finite=ones > 0, grads_finite=ones > 0, inputs_finite=ones > 0,
      outputs_finite=ones > 0, first_bad_grad=-np.ones(n, int), first_bad_input=-np.ones(n, int),
      applied=ones > 0, learning_rate=ones, variable_paths=['w']) for i in range(loops)]
  never = 10**9
  cases = [('none', never, never)] + [
      (f'{name}_{value}', value if name == 'summary_every' else never,
       value if name == 'log_every' else never) for name, value in CADENCES] + [
           ('defaults', defaults['summary_every'], defaults['log_every'])]
  best = {}
  for r in range(repeats):
    for name, summary_every, log_every in cases:
      scalars = events.Scalars(os.path.join(root, f'tb_{name}_{r}'))
      log = events.EventLog(os.path.join(root, f'rec_{name}_{r}.jsonl'))
      recorder = recorder_lib.LoopRecorder(emit=log.emit, scalars=scalars, num_steps=never,
                                           summary_every=summary_every, log_every=log_every)
      t0 = time.perf_counter()
      for reps in loops_of:
        with log.batched():
          recorder.record(reps, 0)
        scalars.flush_due()
      best[name] = min(best.get(name, float('inf')), (time.perf_counter() - t0) / loops * 1e6)
      scalars.close()
  return [f'METRIC recorder_us_per_loop.{name} {value:.1f}  (+{value - best["none"]:.1f} over '
          f'none; one clean loop of {n} steps, min of {repeats} x {loops}'
          f'{"; summary_every, log_every = " + str(cases[-1][1:]) if name == "defaults" else ""})'
          for name, value in best.items()]


def event_record_costs(root, records=1000, per_loop=10, repeats=5):
  """METRIC lines: us per `skip` record appended on its own and in batches of `per_loop` (a
  loop's skip events), min of `repeats` interleaved runs."""
  from stable_train.runfiles import events  # pylint: disable=g-import-not-at-top
  fields = dict(fault='gradient', tensor='gradient of mlp/dense_0/kernel', loss=float('nan'),
                grad_norm=float('nan'))
  best = {'alone': float('inf'), 'batched': float('inf')}
  for r in range(repeats):
    for kind in best:
      log = events.EventLog(os.path.join(root, f'events_{kind}_{r}.jsonl'))
      t0 = time.perf_counter()
      for start in range(0, records, per_loop):
        if kind == 'batched':
          with log.batched():
            for step in range(start, start + per_loop):
              log.emit('skip', step, **fields)
        else:
          for step in range(start, start + per_loop):
            log.emit('skip', step, **fields)
      best[kind] = min(best[kind], (time.perf_counter() - t0) / records * 1e6)
  return [f'METRIC events_jsonl_record_us.{kind} {value:.1f}  (one skip record, '
          f'{"appended alone" if kind == "alone" else f"in one append per {per_loop}"}; min of '
          f'{repeats} x {records})' for kind, value in best.items()]


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--section', choices=('speed', 'cadences', 'recorder', 'healthy', 'floor',
                                        'own_loop'), default='speed')
  p.add_argument('--model', choices=('mlp', 'convnet', 'transformer'),
                 help='the model (default: mlp; own_loop: all three)')
  p.add_argument('--batch', type=int, default=32)
  p.add_argument('--steps', type=int, default=200, help='steps per round (a multiple of 10)')
  p.add_argument('--rounds', type=int, default=7, help='timed rounds')
  p.add_argument('--examples', type=int, default=1000, help='rows of data held in memory')
  p.add_argument('--rollbacks', type=int, default=4, help='NaN stretches for the rollback latency')
  p.add_argument('--healthy_steps', type=int, default=2000)
  p.add_argument('--quick', action='store_true', help='smoke test: 1 round x 20 steps')
  p.add_argument('--transformer_steps', type=int,
                 help='own_loop: steps per round on the transformer (default: --steps)')
  p.add_argument('--breakdown', action='store_true',
                 help='own_loop: also the guard with SkipNonFinite alone, with no policy, and '
                 'returning the loss alone')
  p.add_argument('--rss_child', choices=('bare', 'stack'), help=argparse.SUPPRESS)
  p.add_argument('--rss_k', type=int, default=1, help=argparse.SUPPRESS)
  p.add_argument('--rss_jit', action='store_true', help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.section != 'own_loop':
    a.model = a.model or 'mlp'
  if a.quick:
    a.rounds, a.steps, a.rollbacks, a.healthy_steps = 1, 20, 2, 20
  if a.quick:
    a.transformer_steps = None
  if any(n is not None and (n <= 0 or n % 10) for n in (a.steps, a.transformer_steps)):
    p.error('--steps and --transformer_steps must be positive multiples of 10')
  if a.batch <= 0 or a.examples < a.batch:
    p.error('--batch must be positive and at most --examples')
  logging.getLogger('absl').setLevel(logging.WARNING)  # TF's checkpoint writer logs every save.
  # Progress lines are formatted and written, as a user's are, to /dev/null.
  log = logging.getLogger('stable_train')
  log.setLevel(logging.INFO)
  log.propagate = False
  handler = logging.StreamHandler(open(os.devnull, 'w'))  # pylint: disable=consider-using-with
  handler.setFormatter(logging.Formatter('%(message)s'))
  log.addHandler(handler)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel(logging.ERROR)  # One variables_finite function per Trainer: "retracing".
  if a.rss_child:
    return rss_child(a)
  sections = {'speed': speed, 'cadences': cadences, 'recorder': recorder, 'healthy': healthy,
              'floor': floor, 'own_loop': own_loop}
  return sections[a.section](a)


if __name__ == '__main__':
  sys.exit(main())
