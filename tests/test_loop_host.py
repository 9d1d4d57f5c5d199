"""Tests for stable_train.own_loop.host: the host half of a hand-written loop with a StepGuard."""

import glob
import json
import os

import keras
import numpy as np
import tensorflow as tf

import stable_train
import pytest
from stable_train import errors
from stable_train.core import state as state_lib
from stable_train.policies import basic as policies
from stable_train.policies import recovery
from stable_train.runfiles import events
from stable_train.zoo import models
import test_state  # pylint: disable=g-bad-import-order

BATCH = 16
FEATURES = 8


def _model(seed=0, name='mlp', outputs=1):
  # Linear: a NaN feature reaches the loss on every CPU (ReLU's NaN handling is the kernel's).
  return models.mlp(input_dim=FEATURES, hidden=(8,), outputs=outputs, seed=seed,
                    activation='linear', name=name)


def _batches(num_steps, nan_steps=(), seed=0):
  """The batches of steps 1..num_steps (a list of (x, y)); those of `nan_steps` hold a NaN."""
  rng = np.random.RandomState(seed)
  w = rng.normal(size=(FEATURES, 1)).astype(np.float32)
  out = []
  for step in range(1, num_steps + 1):
    x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
    y = x @ w / 3
    if step in nan_steps:
      x[0, 0] = np.nan
    out.append((x, y))
  return out


def _mse(model, batch):
  x, y = batch
  predictions = model(x, training=True)
  return tf.reduce_mean(tf.square(predictions - y)), predictions


def _train_step(guard, model, optimizer, pass_batch=False, jit_compile=False):
  """The hand-written step: mean squared error, one model."""
  @tf.function(jit_compile=jit_compile)
  def train_step(x, y):
    with guard.step((x, y) if pass_batch else None) as step:
      with tf.GradientTape() as tape:
        loss, predictions = _mse(model, (x, y))
      step.apply(tape.gradient(loss, model.trainable_variables), loss, optimizer=optimizer,
                 outputs=predictions)
    return step.report
  return train_step


def _state(*objects):
  """{path: a copy of the value} of every variable of `objects` (models and optimizers)."""
  return {v.path: v.numpy().copy() for o in objects for v in o.variables}


def _assert_same(test, a, b, but=('learning_rate',)):
  """Every variable of state `a` is bit for bit that of `b`, but those whose path holds one of
  `but` (the learning rate a rollback then backed off)."""
  test.assertEqual(sorted(a), sorted(b))
  for path in a:
    if not any(word in path for word in but):
      np.testing.assert_array_equal(a[path], b[path], err_msg=path)


def _events(model_dir):
  return events.read_events(os.path.join(model_dir, 'events.jsonl'))


def _summary(model_dir):
  with open(os.path.join(model_dir, 'summary.json')) as f:
    return json.load(f)


class Loop:
  """A guarded one-model loop and the state it saw after each `after_step` (by global step)."""

  def __init__(self, policies_, lr=1e-2, pass_batch=False, **guard_kwargs):
    """`pass_batch`: the step hands its batch to the guard, and the guard gets the `loss_fn`
    the host checks re-run."""
    self.model = _model()
    self.optimizer = keras.optimizers.Adam(lr)
    if pass_batch:
      guard_kwargs['loss_fn'] = lambda batch: _mse(self.model, batch)[0]
    self.guard = stable_train.StepGuard(self.model, self.optimizer, policies=policies_,
                                        **guard_kwargs)
    self.step_fn = _train_step(self.guard, self.model, self.optimizer, pass_batch=pass_batch,
                               jit_compile=self.guard.jit_compile)
    self.seen = []

  @property
  def step(self):
    return int(self.guard.state.global_step.numpy())

  def run(self, host, batches, before_step=None):
    for i, (x, y) in enumerate(batches):
      if before_step is not None:
        before_step(i + 1)
      self.step_fn(x, y)
      host.after_step()
      self.seen.append((self.step, _state(self.model, self.optimizer)))

  def at(self, step):
    return [s for k, s in self.seen if k == step]



def _finite(*objects):
  return all(np.all(np.isfinite(v.numpy())) for o in objects for v in o.variables
             if tf.as_dtype(v.dtype).is_floating)


class SkipStreakTest(tf.test.TestCase):
  test_session = None

  def test_the_streak_limit_aborts_records_the_run_and_releases_the_model_dir(self):
    loop = Loop([policies.SkipNonFinite(max_consecutive=3)])
    model_dir = self.get_temp_dir()
    host = stable_train.LoopHost(loop.guard, model_dir=model_dir, read_every=2)
    limit = (r'4 consecutive non-finite steps \(limit 3\), last offending tensor: loss \(model '
             r'outputs already non-finite\)')
    with self.assertRaisesRegex(errors.RunAborted, limit):
      with host:
        loop.run(host, _batches(30, nan_steps=range(11, 30)))
    # Read every 2 steps: the streak (steps 11..14) is read at step 14; no step runs after.
    self.assertEqual(loop.step, 14)
    summary = _summary(model_dir)
    self.assertEqual(summary, host.last_summary)
    self.assertEqual((summary['status'], summary['skipped_steps']), ('aborted', 4))
    self.assertRegex(summary['reason'], limit)
    # The doctor, as at the end of a Trainer's fit: 10 healthy steps, then NaN outputs.
    self.assertEqual(summary['diagnosis']['cause'], 'bad_input')
    records = _events(model_dir)
    self.assertEqual([r['step'] for r in records if r['event'] == 'skip'], [11, 12, 13, 14])
    self.assertEqual([r['trigger'] for r in records if r['event'] == 'abort'],
                     ['consecutive_skips'])
    with open(os.path.join(model_dir, 'run.lock')) as f:
      self.assertEqual(f.read(), '')  # Released cleanly.
    # A second run on the same model_dir starts (the lock is free) and ends.
    again = Loop([policies.SkipNonFinite(max_consecutive=3)])
    with stable_train.LoopHost(again.guard, model_dir=model_dir) as second:
      again.run(second, _batches(2))
    self.assertEqual(second.last_summary['status'], 'completed')


class RollbackTest(tf.test.TestCase):
  test_session = None

  def _loop(self):
    return Loop([policies.SkipNonFinite(max_consecutive=2), recovery.Rollback()])

  def test_from_memory_with_the_learning_rate_backoff(self):
    loop = self._loop()
    with stable_train.LoopHost(loop.guard, checkpoint_every=4, healthy_window=1,
                               read_every=1) as host:
      # Three skips in a row (steps 7, 8, 9): over the limit of 2.
      loop.run(host, _batches(12, nan_steps=(7, 8, 9)))
    summary = host.last_summary
    self.assertEqual((summary['status'], summary['rollbacks']), ('completed', 1))
    self.assertEqual(host.run.restored_from, 'memory')
    self.assertAlmostEqual(host.run.lr_scale, 0.5)
    self.assertAlmostEqual(float(loop.optimizer.learning_rate.numpy()), 5e-3)
    # Back to step 4 (the last good state, kept at step 4), then the 3 batches after the trigger.
    self.assertEqual([s for s, _ in loop.seen], [1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7])
    self.assertEqual(summary['global_step'], 7)
    self.assertEqual(int(loop.optimizer.iterations.numpy()), 7)
    first, restored = loop.at(4)  # Step 4 as it was, and right after the rollback at step 9.
    _assert_same(self, first, restored)
    self.assertTrue(_finite(loop.model, loop.optimizer))

  def test_from_a_model_dir_memory_then_disk(self):
    loop = self._loop()
    model_dir = self.get_temp_dir()
    # Steps 11..13 skip: back to step 8 (the newest good one: its copy in memory). Then the
    # batches 15..17 skip steps 10..12: the same trouble again soon after, so further back,
    # before step 8: step 4, from disk (the copy in memory is step 8's).
    with stable_train.LoopHost(loop.guard, model_dir=model_dir, checkpoint_every=4,
                               healthy_window=1, read_every=1) as host:
      loop.run(host, _batches(24, nan_steps=(11, 12, 13, 15, 16, 17)))
    records = _events(model_dir)
    rollbacks = [(r['step'], r['to_step'], r['restored_from'], r['lr_scale']) for r in records
                 if r['event'] == 'rollback']
    self.assertEqual(rollbacks, [(13, 8, 'memory', 0.5), (12, 4, 'disk', 0.25)])
    steps = [s for s, _ in loop.seen]
    self.assertEqual(steps[:14], list(range(1, 13)) + [8, 9])
    self.assertEqual(steps[14:17], [10, 11, 4])
    _assert_same(self, loop.at(8)[0], loop.at(8)[1])  # Step 8, from the copy in memory.
    _assert_same(self, loop.at(4)[0], loop.at(4)[1])  # Step 4, from its files.
    summary = _summary(model_dir)
    self.assertEqual((summary['status'], summary['rollbacks']), ('completed', 2))
    self.assertAlmostEqual(float(loop.optimizer.learning_rate.numpy()), 2.5e-3)
    with open(os.path.join(model_dir, 'checkpoints', 'manifest.json')) as f:
      manifest = json.load(f)
    self.assertTrue(any(e['step'] == 4 and e['good'] for e in manifest['checkpoints']))
    self.assertTrue(_finite(loop.model, loop.optimizer))

  def test_a_poisoned_state_is_refused_as_a_checkpoint_and_rolled_back(self):
    loop = self._loop()
    model_dir = self.get_temp_dir()
    kernel = loop.model.trainable_variables[0]

    def poison(step):
      if step == 7:  # Between steps 6 and 7: a weight turns NaN (a bit flip, say).
        value = kernel.numpy()
        value[0, 0] = np.nan
        kernel.assign(value)
        # A save through the host now is refused: no checkpoint of a poisoned state.
        self.assertIsNone(host.run.checkpoint_now('manual'))

    with stable_train.LoopHost(loop.guard, model_dir=model_dir, checkpoint_every=4,
                               healthy_window=1, read_every=1) as host:
      loop.run(host, _batches(10), before_step=poison)
    records = _events(model_dir)
    refused = [r for r in records if r['event'] == 'checkpoint_refused']
    self.assertLen(refused, 1)
    self.assertEqual(refused[0]['step'], 6)
    self.assertEqual(refused[0]['variables'], ['mlp/dense_0/kernel'])
    written = [r['step'] for r in records if r['event'] == 'checkpoint']
    self.assertNotIn(6, written)
    # The next read finds the variable non-finite: back to step 4, every variable finite.
    self.assertEqual([(r['step'], r['to_step'], r['trigger']) for r in records
                      if r['event'] == 'rollback'], [(7, 4, 'non_finite_variable')])
    _assert_same(self, loop.at(4)[0], loop.at(4)[1])
    self.assertEqual(host.last_summary['status'], 'completed')
    self.assertTrue(_finite(loop.model, loop.optimizer))

  def test_without_a_rollback_refused_checkpoints_end_the_run(self):
    loop = Loop([policies.SkipNonFinite(max_consecutive=100)])
    model_dir = self.get_temp_dir()
    kernel = loop.model.trainable_variables[0]

    def poison(step):
      if step == 3:
        kernel.assign(tf.fill(kernel.shape, np.nan))

    with self.assertRaisesRegex(errors.RunAborted, '2 checkpoints in a row refused: variable '
                                'mlp/dense_0/kernel is non-finite'):
      with stable_train.LoopHost(loop.guard, model_dir=model_dir, checkpoint_every=2,
                                 read_every=1) as host:
        loop.run(host, _batches(20), before_step=poison)
    records = _events(model_dir)
    self.assertEqual([r['step'] for r in records if r['event'] == 'checkpoint_refused'], [4, 6])
    self.assertEqual([r['step'] for r in records if r['event'] == 'checkpoint'], [2])
    self.assertEqual(_summary(model_dir)['status'], 'aborted')


class ReadCadenceTest(tf.test.TestCase):
  test_session = None

  def test_a_step_function_of_several_steps_never_outruns_the_reports(self):
    model = _model()
    optimizer = keras.optimizers.Adam(1e-2)
    guard = stable_train.StepGuard(model, optimizer, policies=[policies.SkipNonFinite()],
                                   report_rows=4)

    @tf.function
    def three_steps(xs, ys):  # Three guarded steps per call: after_step(3).
      for i in range(3):
        with guard.step() as step:
          with tf.GradientTape() as tape:
            loss = _mse(model, (xs[i], ys[i]))[0]
          step.apply(tape.gradient(loss, model.trainable_variables), loss)
      return step.report

    reads = []
    read = guard.read_reports
    guard.read_reports = lambda since: reads.append(since) or read(since)
    model_dir = self.get_temp_dir()
    batches = _batches(12, nan_steps=(1,))
    with stable_train.LoopHost(guard, model_dir=model_dir, read_every=4) as host:
      for call in range(4):
        xs, ys = (np.stack(a) for a in zip(*batches[3 * call:3 * call + 3]))
        three_steps(xs, ys)
        host.after_step(3)
      with self.assertRaisesRegex(errors.ConfigError, r'after_step\(steps=5\), but the guard '
                                  r'keeps the reports of 4 steps; .*report_rows=5'):
        host.after_step(5)
    # The ring keeps 4 steps: read after every call (a second call of 3 would overwrite reports
    # not read), not every 4 steps; then at the end (nothing new).
    self.assertEqual(reads, [0, 3, 6, 9, 12])
    self.assertEqual([r['step'] for r in _events(model_dir) if r['event'] == 'skip'], [1])
    summary = host.last_summary
    self.assertEqual((summary['global_step'], summary['skipped_steps']), (12, 1))


class DivergenceTest(tf.test.TestCase):
  test_session = None

  def test_a_finite_explosion_ends_the_run_diverged(self):
    # The default policies; with the batch and loss_fn, the reference re-run of the first batch.
    loop = Loop(None, lr=1e-2, pass_batch=True)

    def explode(step):
      if step == 13:  # After the warm-up (10 steps): the smoothed loss has a best.
        loop.optimizer.learning_rate.assign(100.0)

    model_dir = self.get_temp_dir()
    with self.assertRaisesRegex(errors.RunAborted, r"the training loss diverged at step \d+: "
                                r".*the first batch's loss is [0-9.e+]+ now"):
      with stable_train.LoopHost(loop.guard, model_dir=model_dir, read_every=5,
                                 checkpoint_every=20) as host:
        loop.run(host, _batches(200), before_step=explode)
    summary = _summary(model_dir)
    self.assertEqual(summary['status'], 'diverged')
    self.assertEqual(summary['skipped_steps'], 0)  # Finite all along.
    self.assertLess(summary['global_step'], 100)
    self.assertEqual(summary['diagnosis']['cause'], 'learning_rate')
    self.assertIsNotNone(summary['divergence']['output_rms'])  # The start check ran.
    records = _events(model_dir)
    self.assertEqual([r['verdict'] for r in records if r['event'] == 'divergence_check'],
                     ['model'])
    self.assertEqual(records[-1]['event'], 'diagnosis')


class RaiseModeTest(tf.test.TestCase):
  test_session = None

  def _raises(self, jit_compile, steps, applied):
    loop = Loop([policies.CheckNumerics(mode='raise')], jit_compile=jit_compile)
    model_dir = self.get_temp_dir() + f'/xla_{jit_compile}'
    # In the graph the op names the loss; on the host the report names it too.
    message = r'non-finite value at step 5: (non-finite loss|loss \(model outputs already non-)'
    with self.assertRaisesRegex(errors.NumericsError, message):
      with stable_train.LoopHost(loop.guard, model_dir=model_dir, read_every=3) as host:
        loop.run(host, _batches(10, nan_steps=(5,)))
    self.assertTrue(_finite(loop.model, loop.optimizer))  # The faulty step applied nothing.
    summary = _summary(model_dir)
    self.assertEqual(summary, host.last_summary)
    self.assertEqual((summary['status'], summary['global_step'], summary['applied_steps']),
                     ('aborted', steps, applied))
    self.assertRegex(summary['reason'], message)
    self.assertEqual([r['trigger'] for r in _events(model_dir) if r['event'] == 'abort'],
                     ['check_numerics'])
    with open(os.path.join(model_dir, 'run.lock')) as f:
      self.assertEqual(f.read(), '')  # Released cleanly.

  def test_in_graph_the_numerics_error_leaves_the_with_block(self):
    # tf.debugging.check_numerics stops the step function at step 5: no step ran after it.
    self._raises(jit_compile=False, steps=4, applied=4)

  @pytest.mark.slow  # test_trainer's CheckNumericsRaiseTest raises under XLA in the fast set.
  def test_under_xla_the_host_raises_it_at_its_next_read(self):
    # The op does not raise under XLA: the host raises when it reads, every 3 steps (step 6).
    self._raises(jit_compile=True, steps=6, applied=5)


class ArgumentsTest(tf.test.TestCase):
  test_session = None

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.loop = Loop([policies.SkipNonFinite()], report_rows=5)

  def test_what_the_host_cannot_do_is_a_one_line_config_error(self):
    for make, message in (
        (lambda: stable_train.LoopHost(self.loop.guard, read_every=6),
         'LoopHost: read_every=6'),
        (lambda: stable_train.LoopHost(self.loop.model), 'must be a stable_train.StepGuard'),
        (lambda: stable_train.LoopHost(object()), 'must be a stable_train.StepGuard'),
        (lambda: stable_train.LoopHost(self.loop.guard, read_every=1).after_step(),
         r'LoopHost: call start\(\) first'),
    ):
      with self.assertRaisesRegex(errors.ConfigError, message) as raised:
        make()
      self.assertNotIn('\n', str(raised.exception))
    in_the_way = os.path.join(self.get_temp_dir(), 'a_file')
    open(in_the_way, 'w').close()
    with self.assertRaisesRegex(errors.ConfigError, 'is a file; remove it, or use another'):
      stable_train.LoopHost(self.loop.guard, model_dir=in_the_way, read_every=1)

  def test_a_rollback_that_skips_batches_is_refused(self):
    guard = stable_train.StepGuard(_model(), keras.optimizers.Adam(),
                                   policies=[recovery.Rollback(skip_batches=2)])
    with self.assertRaisesRegex(errors.ConfigError, r'rollback has skip_batches=2, but the loop '
                                r'that calls the step \(model.fit, or your own\) owns the data'):
      stable_train.LoopHost(guard)


class TwoModelsTest(tf.test.TestCase):
  """A GAN-like step: two models, two optimizers, one verdict; a rollback restores them all."""
  test_session = None

  @pytest.mark.slow
  def test_a_rollback_restores_both_models_and_both_optimizers(self):
    generator = models.mlp(input_dim=4, hidden=(8,), outputs=FEATURES, seed=1, activation='linear',
                           name='generator')
    critic = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8),
                               keras.layers.BatchNormalization(), keras.layers.Dense(1)],
                              name='critic')  # Its BatchNorm statistics: forward state.
    g_opt, c_opt = keras.optimizers.Adam(1e-2, name='g_adam'), keras.optimizers.Adam(1e-2,
                                                                                     name='c_adam')
    guard = stable_train.StepGuard([generator, critic], [g_opt, c_opt], policies=[
        policies.SkipNonFinite(max_consecutive=2), recovery.Rollback()])
    objects = guard.checkpoint_objects()
    self.assertEqual((objects['model'], objects['optimizer']), ([generator, critic],
                                                                [g_opt, c_opt]))

    @tf.function
    def train_step(x, z):
      with guard.step() as step:
        with tf.GradientTape(persistent=True) as tape:
          real, fake = critic(x, training=True), critic(generator(z, training=True),
                                                        training=True)
          c_loss = tf.reduce_mean(tf.nn.softplus(-real)) + tf.reduce_mean(tf.nn.softplus(fake))
          g_loss = tf.reduce_mean(tf.nn.softplus(-fake))
        step.apply(tape.gradient(c_loss, critic.trainable_variables), c_loss, optimizer=c_opt)
        step.apply(tape.gradient(g_loss, generator.trainable_variables), g_loss,
                   optimizer=g_opt)
      return step.report

    rng = np.random.RandomState(0)
    seen = []
    with stable_train.LoopHost(guard, checkpoint_every=4, healthy_window=1,
                               read_every=1) as host:
      for x, _ in _batches(12, nan_steps=(7, 8, 9)):
        train_step(x, rng.normal(size=(BATCH, 4)).astype(np.float32))
        host.after_step()
        seen.append((int(guard.state.global_step.numpy()),
                     _state(generator, critic, g_opt, c_opt)))
    self.assertEqual((host.last_summary['status'], host.last_summary['rollbacks']),
                     ('completed', 1))
    self.assertEqual([s for s, _ in seen], [1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7])
    first, restored = [state for s, state in seen if s == 4]
    moved = [p for p in first if not np.array_equal(first[p], seen[5][1][p])]
    for name in ('generator/', 'critic/', 'moving_mean', 'g_adam/', 'c_adam/'):  # All moved...
      self.assertTrue(any(name in p for p in moved), name)
    _assert_same(self, first, restored)  # ...and all of them went back.
    self.assertAlmostEqual(host.run.lr_scale, 0.5)
    for optimizer in (g_opt, c_opt):  # Both rates backed off: the verdict was the step's.
      self.assertEqual(int(optimizer.iterations.numpy()), 7)
      self.assertAlmostEqual(float(optimizer.learning_rate.numpy()), 5e-3)


class TwoModelsForensicsTest(tf.test.TestCase):
  test_session = None

  def test_the_record_names_every_model_s_variables(self):
    # The critic's log of a negative score is NaN; its gradients and the generator's behind it
    # turn NaN: the record's per-variable flags are the step's, for both models, in its order.
    generator = _model(seed=1, name='generator', outputs=FEATURES)
    critic = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, name='c_dense'),
                               keras.layers.BatchNormalization(), keras.layers.Dropout(0.3),
                               test_state.GlobalNoise(),  # Draws from Keras's global generator.
                               keras.layers.Dense(1, name='c_out')], name='critic')
    g_opt, c_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)

    def loss_fn(batch):
      x, _ = batch
      return tf.reduce_mean(tf.math.log(critic(generator(x, training=True), training=True)))

    guard = stable_train.StepGuard([generator, critic], [g_opt, c_opt], loss_fn=loss_fn)

    @tf.function
    def train_step(x, y):
      with guard.step((x, y)) as step:
        with tf.GradientTape(persistent=True) as tape:
          loss = loss_fn((x, y))
        step.apply(tape.gradient(loss, critic.trainable_variables), loss, optimizer=c_opt)
        step.apply(tape.gradient(loss, generator.trainable_variables), loss, optimizer=g_opt)
      return step.report

    model_dir = self.get_temp_dir()
    with stable_train.LoopHost(guard, model_dir=model_dir, read_every=1) as host:
      for x, y in _batches(1):
        train_step(x, y)
        skipped = _state(generator, critic, g_opt, c_opt)
        generators = [v.numpy().copy() for v in state_lib.random_state_variables()]
        host.after_step()  # Investigates: a training-mode re-run of the batch through both.
    # The re-run moved neither model's forward state (the critic's BatchNorm statistics and
    # dropout seed) nor the global generators for good.
    _assert_same(self, skipped, _state(generator, critic, g_opt, c_opt), but=())
    for before, v in zip(generators, state_lib.random_state_variables()):
      np.testing.assert_array_equal(before, v.numpy())
    with open(os.path.join(model_dir, 'forensics', 'step_1', 'report.json')) as f:
      report = json.load(f)
    paths = [v.path for v in generator.trainable_variables + critic.trainable_variables]
    self.assertEqual(report['variable_paths'], paths)
    self.assertLen(report['grad_finite_flags'], len(paths))
    self.assertEqual(report['op_level']['op_type'], 'Log')


class LateReadForensicsTest(tf.test.TestCase):
  test_session = None

  def test_a_record_read_late_says_whose_state_it_holds(self):
    loop = Loop(None, pass_batch=True)
    model_dir = self.get_temp_dir()
    with stable_train.LoopHost(loop.guard, model_dir=model_dir, read_every=4) as host:
      loop.run(host, _batches(4, nan_steps=(2,)))
    with open(os.path.join(model_dir, 'forensics', 'step_2', 'report.json')) as f:
      report = json.load(f)
    self.assertEqual(report['state'][:10], 'of step 4,')  # Not "before the faulty step".


class HealthyRunTest(tf.test.TestCase):
  test_session = None

  def test_the_default_policies_leave_a_healthy_run_alone(self):
    loop = Loop(None, pass_batch=True)
    model_dir = self.get_temp_dir()
    before = loop.model.trainable_variables[0].numpy().copy()
    with self.assertNoLogs('stable_train', level='WARNING'):
      with stable_train.LoopHost(loop.guard, model_dir=model_dir, checkpoint_every=10,
                                 read_every=5) as host:
        loop.run(host, _batches(30))
    summary = _summary(model_dir)
    self.assertEqual(summary, host.last_summary)
    self.assertEqual((summary['status'], summary['global_step'], summary['skipped_steps']),
                     ('completed', 30, 0))
    self.assertLess(summary['final_loss'], summary['divergence']['start'])  # It trained.
    self.assertFalse(np.array_equal(before, loop.model.trainable_variables[0].numpy()))
    records = _events(model_dir)
    self.assertEqual({r['event'] for r in records}, {'start', 'checkpoint', 'done'})
    # Step 10 is within DivergenceCheck's warm-up, whose mean of the first losses is above 1.5x
    # the first one here (an easy first batch): not yet marked good. The later ones are.
    self.assertEqual([(r['step'], r['good']) for r in records if r['event'] == 'checkpoint'],
                     [(10, False), (20, True), (30, True)])
    self.assertEqual(records[-1]['status'], 'completed')
    with open(os.path.join(model_dir, 'checkpoints', 'manifest.json')) as f:
      manifest = json.load(f)
    self.assertEqual([e['step'] for e in manifest['checkpoints'] if e['good']], [20, 30])
    files = glob.glob(os.path.join(model_dir, 'tensorboard', 'events.out.tfevents.*'))
    tags = {v.tag for path in files for record in tf.compat.v1.train.summary_iterator(path)
            for v in record.summary.value}
    self.assertIn('loss', tags)


if __name__ == '__main__':
  tf.test.main()
