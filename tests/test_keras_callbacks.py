"""Tests for stable_train.keras.callbacks: the host half of a guarded `model.fit` (a skip-streak
limit, rollback with the learning-rate backoff from memory and from a model_dir, forensics of the
offending batch, events.jsonl and summary.json), and Keras's own callbacks beside the guard."""

import glob
import json
import os

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

from stable_train import errors
from stable_train.forensics import forensics
from stable_train.keras import fit as keras_fit
from stable_train.policies import basic as policies
from stable_train.policies import precision
from stable_train.policies import recovery
from stable_train.policies import stopping
from stable_train.runfiles import events
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models
import test_controller  # pylint: disable=g-bad-import-order
import test_keras_fit  # pylint: disable=g-bad-import-order
import pytest

BATCH = 8
FEATURES = 6


def _arrays(num_batches=12, nan_batches=(), seed=0):
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(num_batches * BATCH, FEATURES)).astype(np.float32)
  y = (x @ rng.normal(size=(FEATURES, 1)) / 3).astype(np.float32)
  for b in nan_batches:
    x[b * BATCH:(b + 1) * BATCH] = np.nan
  return x, y


def _model(strategy=None, lr=1e-2, activation='relu', **compile_kwargs):
  with (strategy or tf.distribute.get_strategy()).scope():
    model = models.mlp(input_dim=FEATURES, hidden=(8,), outputs=1, seed=0, activation=activation)
    model.compile(optimizer=keras.optimizers.Adam(lr), loss='mse', **compile_kwargs)
  return model


def _stack(**rollback):
  return [policies.CheckNumerics(), policies.SkipNonFinite(max_consecutive=2),
          recovery.Rollback(**rollback)]


def _weights(model):
  return [v.numpy().copy() for v in model.trainable_variables]


class WeightsAt(keras.callbacks.Callback):
  """Keeps (global step, weights) after each execution, once the guard's callback has acted."""

  def __init__(self, guard):
    super().__init__()
    self.guard = guard
    self.seen = []

  def on_train_batch_end(self, batch, logs=None):
    self.seen.append((int(self.guard.state.global_step.numpy()), _weights(self.guard.model)))

  def at(self, step):
    return [w for s, w in self.seen if s == step]


class RollbackTest(parameterized.TestCase, tf.test.TestCase):
  test_session = None

  def tearDown(self):
    precision.set_precision('float32')
    super().tearDown()

  def test_from_memory_with_the_learning_rate_backoff(self):
    model = _model()
    guard = keras_fit.guard_fit(model, policies=_stack())
    callback = guard.callback(checkpoint_every=4, healthy_window=1)
    seen = WeightsAt(guard)
    x, y = _arrays(nan_batches=(6, 7, 8))  # Three skips in a row: over the limit of 2.
    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback, seen])
    summary = callback.last_summary
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['rollbacks'], 1)
    self.assertEqual(callback.run.restored_from, 'memory')
    self.assertAlmostEqual(float(model.optimizer.learning_rate.numpy()), 5e-3)
    self.assertAlmostEqual(callback.run.lr_scale, 0.5)
    # Back to step 4 (the last good state, kept at step 4), then the 3 batches after the trigger.
    self.assertEqual(summary['global_step'], 4 + 3)
    self.assertEqual(int(model.optimizer.iterations.numpy()), 4 + 3)
    self.assertEqual([s for s, _ in seen.seen], [1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7])
    first, restored = seen.at(4)  # Step 4 as it was, and right after the rollback at step 9.
    for a, b in zip(first, restored):
      np.testing.assert_array_equal(a, b)

  @pytest.mark.slow
  def test_from_a_model_dir_under_mirrored_strategy(self):
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())
    model = _model(strategy)
    guard = keras_fit.guard_fit(model, policies=_stack())
    model_dir = self.get_temp_dir()
    callback = guard.callback(model_dir=model_dir, checkpoint_every=4, healthy_window=1)
    x, y = _arrays(nan_batches=(6, 7, 8))
    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback])
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    rollback = [r for r in records if r['event'] == 'rollback']
    self.assertLen(rollback, 1)
    self.assertEqual(rollback[0]['restored_from'], 'disk')  # No memory copy under a strategy.
    self.assertEqual(rollback[0]['to_step'], 4)
    self.assertEqual(rollback[0]['lr_scale'], 0.5)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['rollbacks'], 1)
    with open(os.path.join(model_dir, 'checkpoints', 'manifest.json')) as f:
      manifest = json.load(f)
    self.assertTrue(any(e['step'] == 4 and e['good'] for e in manifest['checkpoints']))
    # The run rolled back: the doctor's diagnosis follows the end, as after a Trainer's fit.
    self.assertEqual([r['event'] for r in records][-2:], ['done', 'diagnosis'])


  def test_to_the_start_before_any_interval_checkpoint(self):
    model = _model()
    initial = _weights(model)
    guard = keras_fit.guard_fit(model, policies=_stack())
    model_dir = self.get_temp_dir()
    callback = guard.callback(model_dir=model_dir)  # checkpoint_every=100: none before step 4.
    seen = WeightsAt(guard)
    x, y = _arrays(nan_batches=(1, 2, 3))  # The third skip in a row, at step 4, rolls back.
    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback, seen])
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    start = [r for r in records if r['event'] == 'checkpoint' and r['reason'] == 'start']
    self.assertEqual([(r['step'], r['good']) for r in start], [(0, True)])
    rollback = [r for r in records if r['event'] == 'rollback']
    self.assertEqual([r['to_step'] for r in rollback], [0])
    self.assertEqual(callback.last_summary['status'], 'completed')
    self.assertEqual([s for s, _ in seen.seen][:4], [1, 2, 3, 0])  # Step 4 went back to 0.
    for a, b in zip(initial, seen.at(0)[0]):  # The untrained weights, bit for bit.
      np.testing.assert_array_equal(a, b)
    # The start checkpoint holds the whole state: the process-wide random states too.
    held = {id(v) for v in callback.keeper.snapshot.variables()}
    self.assertTrue(guard.random_states)
    tf_variable = lambda v: v.value if isinstance(v, keras.Variable) else v
    self.assertTrue(all(id(tf_variable(v)) in held for v in guard.random_states))

  @parameterized.named_parameters(('memory', 'memory'), ('mirrored_disk', 'mirrored'),
                                  ('mixed_float16', 'mixed_float16'))
  @pytest.mark.slow
  def test_to_the_start_restores_the_whole_untrained_convnet(self, mode):
    """3 steps train the BatchNorm + Dropout convnet, then a NaN streak: its 11th skip rolls back
    to the start checkpoint, every variable as it was before the first update."""
    if mode == 'mixed_float16':
      precision.set_precision('mixed_float16')
    strategy = test_keras_fit.mirrored() if mode == 'mirrored' else None
    model = test_keras_fit.compiled('convnet_bn', strategy=strategy)
    guard = keras_fit.guard_fit(model, policies=trainer_lib.default_policies() + [
        recovery.Rollback()])
    callback = guard.callback(model_dir=None if mode == 'memory' else self.get_temp_dir())
    whole_state = lambda: test_keras_fit.whole_state(model) + [
        [v.numpy()] for v in guard.random_states]

    class Snapshots(keras.callbacks.Callback):  # After the guard's callback has acted.
      def on_train_begin(self, logs=None):
        self.at = {'untrained': whole_state()}  # The optimizer built, as at the start.

      def on_train_batch_end(self, batch, logs=None):
        self.at.setdefault(int(guard.state.global_step.numpy()), whole_state())

    snapshots = Snapshots()
    x, y, _ = test_keras_fit.arrays('convnet_bn', num_batches=20)
    x = x.copy()
    x[3 * BATCH:15 * BATCH] = np.nan  # Batches 3..14: the rollback at step 14, then 1 skip.
    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback, snapshots])
    self.assertEqual((callback.last_summary['status'], callback.last_summary['rollbacks']),
                     ('completed', 1))
    untrained, trained, restored = (snapshots.at[k] for k in ('untrained', 3, 0))
    variables = list(model.variables) + list(model.optimizer.variables)
    # Three steps moved the weights, BatchNorm statistics, seed generators, slots, iterations...
    moved = {variables[i].path for i, (a, b) in enumerate(zip(untrained, trained))
             if not np.array_equal(a[0], b[0])}
    for name in ('conv_0/kernel', 'bn_0/moving_mean', 'seed_generator_state', 'iteration'):
      self.assertTrue(any(name in m for m in moved), (name, moved))
    # ...and the rollback put every one back, on every replica (the rate it then backed off).
    for i, (a, b) in enumerate(zip(untrained, restored)):
      if i >= len(variables) or 'learning_rate' not in variables[i].path:
        for u, r in zip(a, b):
          self.assertTrue(np.array_equal(u, r), f'variable {i} is not the untrained one')
    self.assertEqual(int(model.optimizer.iterations.numpy()), 5)  # Trained on: batches 15..19.
    self.assertTrue(all(np.all(np.isfinite(v)) for vs in whole_state() for v in vs))


class AbortTest(tf.test.TestCase):
  test_session = None

  @pytest.mark.slow
  def test_the_skip_streak_limit_raises_and_backup_and_restore_keeps_its_backup(self):
    # Linear: whether ReLU passes a NaN feature on to the loss depends on the CPU's kernel, and
    # with it the doctor's evidence; pinned, the NaN reaches the loss on every CPU.
    model = _model(activation='linear')
    guard = keras_fit.guard_fit(model, policies=[policies.SkipNonFinite(max_consecutive=2)])
    model_dir, backup = (os.path.join(self.get_temp_dir(), d) for d in ('run', 'backup'))
    callback = guard.callback(model_dir=model_dir)
    backup_and_restore = keras.callbacks.BackupAndRestore(backup)
    x, y = _arrays()
    bad_x, _ = _arrays(nan_batches=range(12))

    class Poison(keras.callbacks.Callback):  # Epoch 2 reads NaN from its first batch on.
      def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
          x[:] = bad_x

    data = tf.data.Dataset.from_generator(lambda: iter(zip(x, y)), output_signature=(
        tf.TensorSpec([FEATURES], tf.float32), tf.TensorSpec([1], tf.float32))).batch(BATCH)
    with self.assertRaisesRegex(errors.RunAborted, '3 consecutive non-finite steps'):
      model.fit(data, epochs=3, verbose=0, callbacks=[backup_and_restore, callback, Poison()])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual(summary['status'], 'aborted')
    # The doctor, as at the end of a Trainer's fit: NaN in every batch's features.
    self.assertEqual(summary['diagnosis']['cause'], 'bad_input')
    self.assertTrue(os.path.exists(os.path.join(backup, 'latest.weights.h5')))  # Kept.
    x[:] = _arrays()[0]
    history = model.fit(data, epochs=3, verbose=0, callbacks=[backup_and_restore, callback])
    self.assertLen(history.history['loss'], 2)  # Resumed after epoch 1.
    self.assertTrue(all(np.all(np.isfinite(w)) for w in _weights(model)))


class ReadCadenceTest(tf.test.TestCase):
  test_session = None

  def test_clean_steps_are_read_in_batches_and_a_skip_at_once(self):
    model = _model()
    guard = keras_fit.guard_fit(model, policies=[policies.SkipNonFinite()])
    callback = guard.callback(model_dir=self.get_temp_dir())
    reads = []
    read = guard.read_reports
    guard.read_reports = lambda since: reads.append(since) or read(since)
    x, y = _arrays(num_batches=30, nan_batches=(16,))
    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback])
    # One execution per step: read after the first, every READ_EVERY_STEPS after it, at once
    # after the skip at step 17 (its logs show the count), at the end of the epoch and of the
    # fit (nothing new then): not after each of the 30 steps.
    self.assertEqual(keras_fit.READ_EVERY_STEPS, 10)
    self.assertEqual(reads, [0, 1, 11, 17, 27, 30])
    records = events.read_events(os.path.join(callback.model_dir, 'events.jsonl'))
    self.assertEqual([r['step'] for r in records if r['event'] == 'skip'], [17])
    summary = callback.last_summary
    self.assertEqual((summary['global_step'], summary['skipped_steps']), (30, 1))
    self.assertTrue(np.isfinite(summary['final_loss']))


class SummaryTest(tf.test.TestCase):

  def test_the_summary_names_the_optimizer_inside_a_loss_scale_optimizer(self):
    # The doctor reads whether the rate was a usual one for the optimizer that applied it.
    model = _model()
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.RMSprop(1e-3)),
                  loss='mse')
    guard = keras_fit.guard_fit(model)
    model_dir = self.get_temp_dir()
    x, y = _arrays(num_batches=2)
    model.fit(x, y, batch_size=BATCH, verbose=0, callbacks=[guard.callback(model_dir=model_dir)])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['optimizer']), ('completed', 'RMSprop'))


class EndedByAnErrorTest(tf.test.TestCase):
  test_session = None

  @pytest.mark.slow
  def test_raise_mode_ends_the_fit_with_a_numerics_error_a_summary_and_the_lock_released(self):
    # In-graph (check_numerics aborts the train function) and on the host (XLA, where the op
    # does not raise): the same NumericsError, recorded as the Trainer records it.
    for jit_compile in (False, True):
      model = _model(jit_compile=jit_compile, steps_per_execution=3)
      guard = keras_fit.guard_fit(model, policies=[policies.CheckNumerics(mode='raise')])
      model_dir = os.path.join(self.get_temp_dir(), f'xla_{jit_compile}')
      callback = guard.callback(model_dir=model_dir)
      x, y = _arrays(nan_batches=(7,))
      with self.assertRaisesRegex(errors.NumericsError, 'non-finite value at step 8: '):
        model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback])
      with open(os.path.join(model_dir, 'summary.json')) as f:
        summary = json.load(f)
      self.assertEqual(summary['status'], 'aborted')
      self.assertRegex(summary['reason'], 'non-finite value at step 8: ')
      records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
      self.assertIn('abort', [r['event'] for r in records])
      with open(os.path.join(model_dir, 'run.lock')) as f:
        self.assertEqual(f.read(), '')  # Released cleanly: another process may train here.
      self.assertTrue(all(np.all(np.isfinite(w)) for w in _weights(model)))

  @pytest.mark.slow
  def test_raise_mode_under_mirrored_strategy_leaves_the_convnet_as_before_the_step(self):
    # The faulty step's forward pass assigned the BatchNorm statistics (NaN here) and the seed
    # generators on both replicas: the raise comes after the skip put them back.
    model = test_keras_fit.compiled('convnet_bn', strategy=test_keras_fit.mirrored())
    guard = keras_fit.guard_fit(model, policies=[policies.CheckNumerics(mode='raise')])
    model_dir = self.get_temp_dir()
    seen = []

    class WholeState(keras.callbacks.Callback):
      def on_train_batch_end(self, batch, logs=None):
        seen.append(test_keras_fit.whole_state(model))

    x, y, _ = test_keras_fit.arrays('convnet_bn')
    x = x.copy()
    x[3 * BATCH + 5, 0, 0, 0] = np.nan  # Step 4, in the second replica's half of its batch.
    with self.assertRaisesRegex(errors.NumericsError,
                                r'^non-finite value at step 4: non-finite loss : Tensor had NaN'):
      model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0,
                callbacks=[guard.callback(model_dir=model_dir), WholeState()])
    self.assertLen(seen, 3)
    for i, (a, b) in enumerate(zip(seen[-1], test_keras_fit.whole_state(model))):
      for u, v in zip(a, b):
        self.assertTrue(np.array_equal(u, v), f'variable {i} moved in the step that raised')
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['status'], 'aborted')
    with open(os.path.join(model_dir, 'run.lock')) as f:
      self.assertEqual(f.read(), '')
    callback = guard.callback(model_dir=model_dir)  # The next fit trains there.
    model.fit(x[:2 * BATCH], y[:2 * BATCH], batch_size=BATCH, verbose=0, callbacks=[callback])
    self.assertEqual(callback.last_summary['status'], 'completed')
    self.assertEqual(int(model.optimizer.iterations.numpy()), 5)

  def test_a_tensorflow_error_is_an_abort_with_a_summary_then_raised(self):
    """An Embedding id out of range at step 3 ends the fit as it ends the Trainer's run."""
    model = test_controller.embedding_model()
    model.compile(optimizer='adam', loss='mse')
    guard = keras_fit.guard_fit(model, policies=[policies.SkipNonFinite()])
    model_dir = self.get_temp_dir()
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r'= 12 is not in \[0, 10\)'):
      model.fit(test_controller.embedding_data(), verbose=0,
                callbacks=[guard.callback(model_dir=model_dir, checkpoint_every=1)])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual((summary['status'], summary['global_step']), ('aborted', 2))
    self.assertRegex(summary['reason'], r'^TensorFlow InvalidArgumentError after step 2: indices\['
                     r'.*= 12 is not in \[0, 10\)$')
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertEqual([(r['trigger'], r['reason']) for r in records if r['event'] == 'abort'],
                     [('runtime_error', summary['reason'])])
    with open(os.path.join(model_dir, 'checkpoints', 'manifest.json')) as f:
      self.assertEqual([e['step'] for e in json.load(f)['checkpoints']], [1, 2])
    with open(os.path.join(model_dir, 'run.lock')) as f:
      self.assertEqual(f.read(), '')  # Released cleanly.

  @pytest.mark.slow
  def test_a_fit_an_exception_ends_leaves_the_model_dir_free_after_the_next(self):
    model = _model()
    guard = keras_fit.guard_fit(model)
    model_dir = self.get_temp_dir()
    lock = os.path.join(model_dir, 'run.lock')

    class Interrupt(keras.callbacks.Callback):  # Ctrl-C in a notebook, say: no on_train_end.
      def on_train_batch_end(self, batch, logs=None):
        if batch == 3:
          raise KeyboardInterrupt

    x, y = _arrays()
    first, second = guard.callback(model_dir=model_dir), guard.callback(model_dir=model_dir)
    # Interrupted, then the same callback again; interrupted, then another callback.
    for interrupted, then in ((first, first), (first, second)):
      with self.assertRaises(KeyboardInterrupt):
        model.fit(x, y, batch_size=BATCH, verbose=0, callbacks=[interrupted, Interrupt()])
      model.fit(x, y, batch_size=BATCH, verbose=0, callbacks=[then])
      self.assertEqual(then.last_summary['status'], 'completed')
      with open(lock) as f:
        self.assertEqual(f.read(), '')  # Released cleanly: another process may train here.


class ForensicsTest(tf.test.TestCase):
  test_session = None

  @pytest.mark.slow
  def test_the_offending_batch_and_the_state_before_it_are_recorded(self):
    model = _model(activation='linear')  # The NaN feature reaches the loss on every CPU (no ReLU).
    stack = trainer_lib.default_policies()
    stack[0] = policies.CheckNumerics(check_inputs=False)  # The NaN reaches the model.
    guard = keras_fit.guard_fit(model, policies=stack + [forensics.Forensics()])
    model_dir = self.get_temp_dir()
    x, y = _arrays(num_batches=6)
    x[3 * BATCH + 2, 1] = np.nan  # Step 4.
    seen = WeightsAt(guard)
    model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0,
              callbacks=[guard.callback(model_dir=model_dir), seen])
    record, batch = forensics.read_record(os.path.join(model_dir, 'forensics', 'step_4'))
    np.testing.assert_array_equal(batch[0], x[3 * BATCH:4 * BATCH])
    np.testing.assert_array_equal(batch[1], y[3 * BATCH:4 * BATCH])
    self.assertEqual(record['fault'], 'loss')
    self.assertIn('MatMul', record['op_level']['op_type'])
    fresh = models.mlp(input_dim=FEATURES, hidden=(8,), outputs=1, seed=1)
    tf.train.Checkpoint(model=fresh).read(
        os.path.join(model_dir, 'forensics', 'step_4', forensics.CHECKPOINT_PREFIX)
    ).expect_partial()
    for a, b in zip(_weights(fresh), seen.at(3)[0]):  # The state before the faulty step.
      np.testing.assert_array_equal(a, b)
    names = [r['event'] for r in events.read_events(os.path.join(model_dir, 'events.jsonl'))]
    self.assertEqual((names[0], names[-2:]), ('start', ['done', 'diagnosis']))
    self.assertIn('forensics', names)
    self.assertIn('skip', names)


class KerasCallbacksTest(tf.test.TestCase):
  test_session = None

  @pytest.mark.slow
  def test_model_checkpoint_early_stopping_tensorboard_and_reduce_lr_beside_the_guard(self):
    model = _model(lr=0.05)
    guard = keras_fit.guard_fit(model)
    root = self.get_temp_dir()
    x, y = _arrays(nan_batches=(2,))
    xv, yv = _arrays(num_batches=2, seed=1)
    keras_callbacks = [
        keras.callbacks.ModelCheckpoint(os.path.join(root, 'best.keras'), monitor='val_loss',
                                        save_best_only=True),
        keras.callbacks.EarlyStopping(monitor='val_loss', patience=1, min_delta=1e9),
        keras.callbacks.TensorBoard(os.path.join(root, 'tb')),
        keras.callbacks.ReduceLROnPlateau(monitor='loss', factor=0.5, patience=0, min_delta=1e9),
    ]
    callback = guard.callback(model_dir=os.path.join(root, 'run'))
    history = model.fit(x, y, batch_size=BATCH, epochs=5, shuffle=False, verbose=0,
                        validation_data=(xv, yv), callbacks=[callback] + keras_callbacks)
    # EarlyStopping: min_delta 1e9 makes no epoch an improvement: epochs 1 and 2, then stop.
    self.assertLen(history.history['loss'], 2)
    self.assertEqual(callback.last_summary['status'], 'stopped_early')
    self.assertEqual(history.history['skipped_steps'], [1.0, 2.0])
    self.assertTrue(np.all(np.isfinite(history.history['val_loss'])))
    # ModelCheckpoint: a finite model that loads and predicts as the one it saved.
    saved = keras.models.load_model(os.path.join(root, 'best.keras'))
    self.assertTrue(all(np.all(np.isfinite(v.numpy())) for v in saved.variables))
    # ReduceLROnPlateau: halved after epoch 2 (epoch 1 improved on nothing), the rate the guard's
    # step applies.
    self.assertAlmostEqual(float(model.optimizer.learning_rate.numpy()), 0.05 / 2, places=6)
    # TensorBoard: the guard's log fields are scalars of every epoch.
    files = glob.glob(os.path.join(root, 'tb', 'train', 'events.out.tfevents.*'))
    tags = {v.tag for path in files for record in tf.compat.v1.train.summary_iterator(path)
            for v in record.summary.value}
    for tag in ('epoch_loss', 'epoch_skipped_steps', 'epoch_grad_norm', 'epoch_clipped_steps'):
      self.assertIn(tag, tags)


class FirstBatchChecksTest(tf.test.TestCase):
  """DivergenceCheck's start check and reference re-run in fit, on the guard's first-batch
  sample (as test_divergence's Trainer runs)."""
  test_session = None

  def _fit(self, optimizer, *, steps, scale=1.0, **poison):
    model = models.mlp(input_dim=16, hidden=(16,), outputs=1)
    for v in model.trainable_variables:
      v.assign(v * scale)
    model.compile(optimizer=optimizer, loss='mse')
    guard = keras_fit.guard_fit(model)
    model_dir = self.get_temp_dir() + f'/{self.id()}'
    callback = guard.callback(model_dir=model_dir, checkpoint_every=20, healthy_window=10)
    dataset = data.synthetic_regression(num_features=16, num_examples=512, **poison)
    try:
      model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[callback])
    except errors.RunAborted:
      pass
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    return guard, callback.last_summary, records

  def test_a_huge_start_stops_the_fit_naming_the_initialisation(self):
    guard, summary, records = self._fit(keras.optimizers.Adam(1e-3), steps=300, scale=100.0)
    self.assertEqual(summary['status'], 'diverged')
    self.assertLess(summary['global_step'], 100)  # rise_patience (50) steps, not the 300.
    self.assertEqual([r['trigger'] for r in records if r['event'] == 'diverged'],
                     ['untrainable_start'])
    self.assertIn('initial weights are too large', summary['reason'])
    self.assertEqual(summary['diagnosis']['cause'], 'initialisation')
    self.assertGreater(summary['divergence']['output_rms'],
                       100 * summary['divergence']['label_rms'])
    self.assertLen(guard.first_batch()[0], 32)  # The run's first batch, all its 32 rows.

  @pytest.mark.slow
  def test_bad_batches_are_not_a_divergence_and_the_fit_goes_on(self):
    _, summary, records = self._fit(keras.optimizers.Adam(1e-3), steps=200,
                                    poison_batches=list(range(100, 140)), poison_value=1e4)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['global_step'], 200)
    checks = [r for r in records if r['event'] == 'divergence_check']
    self.assertEqual([r['verdict'] for r in checks], ['data'])
    self.assertLess(checks[0]['reference_loss'], checks[0]['smoothed_loss'])
    # The doctor, asked about the data verdict, reads the steps before it.
    [window] = [r for r in records if r['event'] == 'history']
    self.assertEqual(window['steps'][-1], checks[0]['step'])
    self.assertEqual(len(window['loss']), 64)
    # Whose spikes, read with the check's verdict, are the batches' (no gradient-norm cliff).
    self.assertEqual(summary['diagnosis']['cause'], 'bad_input')

  def test_a_diverged_model_is_told_from_bad_batches(self):
    _, summary, records = self._fit(keras.optimizers.SGD(1.0), steps=200)
    self.assertEqual(summary['status'], 'diverged')
    # Checked after every execution, a streak's first check may still find the model fine; the
    # one that stops the fit found it worse on the first batch, a finite loss there.
    verdicts = [r['verdict'] for r in records if r['event'] == 'divergence_check']
    self.assertEqual(verdicts[-1], 'model')
    self.assertRegex(summary['reason'], r"the first batch's loss is [0-9.e+]+ now")


  def _collapse(self, extra=(), callbacks=()):
    """Adam 0.316 kills every ReLU of this MLP within ~20 steps (test_divergence's run); its
    3 epochs of 10 steps end with the read (step 30) whose probe finds the collapse."""
    keras.utils.set_random_seed(0)
    model = models.mlp(input_dim=32, hidden=(64, 32), outputs=1)
    model.compile(optimizer=keras.optimizers.Adam(0.316), loss='mse')
    guard = keras_fit.guard_fit(model, policies=trainer_lib.default_policies() + list(extra))
    model_dir = self.get_temp_dir() + f'/collapse{len(extra)}'
    callback = guard.callback(model_dir=model_dir, checkpoint_every=50, healthy_window=20)
    dataset = data.synthetic_regression(num_features=32, num_examples=1024)
    fit = lambda: model.fit(dataset, epochs=3, steps_per_epoch=10, verbose=0,
                            callbacks=[callback, *callbacks])
    return model, callback, fit, os.path.join(model_dir, 'events.jsonl')

  @pytest.mark.slow
  def test_a_collapse_found_by_the_last_read_ends_the_fit(self):
    backup = os.path.join(self.get_temp_dir(), 'backup')
    model, callback, fit, records = self._collapse(
        callbacks=[keras.callbacks.BackupAndRestore(backup)])
    with self.assertRaisesRegex(errors.RunAborted, 'the model collapsed'):
      fit()
    summary = callback.last_summary
    self.assertEqual((summary['status'], summary['global_step']), ('diverged', 30))
    self.assertEqual(summary['diagnosis']['cause'], 'learning_rate')
    records = events.read_events(records)
    self.assertEqual([(r['event'], r['step']) for r in records
                      if r['event'] in ('divergence_check', 'diverged', 'done')][-1],
                     ('diverged', 30))
    self.assertLen(model.history.history['loss'], 2)  # The epoch it ended in is not logged.
    self.assertTrue(os.path.exists(os.path.join(backup, 'latest.weights.h5')))  # Kept.
    # The same script again resumes the backup, epoch 2's dead weights, for its last epoch:
    # the start check (the guard's state is new) finds them dead, not 'completed' 10 steps on.
    model, callback, fit, _ = self._collapse(
        callbacks=[keras.callbacks.BackupAndRestore(backup)])
    with self.assertRaisesRegex(errors.RunAborted, 'the model collapsed'):
      fit()
    self.assertEqual(callback.last_summary['status'], 'diverged')
    self.assertLessEqual(callback.last_summary['global_step'], 10)

  @pytest.mark.slow
  def test_a_rollback_by_the_last_read_is_reported_not_called_a_rescue(self):
    _, callback, fit, records = self._collapse(extra=[recovery.Rollback()])
    fit()
    summary = callback.last_summary
    rollback = [r for r in events.read_events(records) if r['event'] == 'rollback']
    self.assertEqual([(r['step'], r['to_step']) for r in rollback], [(30, 0)])
    # fit ends with the start checkpoint restored: completed, but it says so.
    self.assertEqual((summary['status'], summary['global_step']), ('completed', 0))
    self.assertIn('right after a rollback from step 30 to step 0', summary['note'])
    self.assertEqual(summary['diagnosis']['cause'], 'learning_rate')
    self.assertFalse(any('the run trained once' in e for e in summary['diagnosis']['evidence']))


class ArgumentsTest(tf.test.TestCase):
  test_session = None

  def test_what_fit_cannot_do_is_a_one_line_config_error(self):
    with self.assertRaisesRegex(errors.ConfigError,
                                r'skip_batches=3, but the loop that calls the step \(model.fit'):
      keras_fit.guard_fit(_model(), policies=[recovery.Rollback(skip_batches=3)]).callback()
    with self.assertRaisesRegex(errors.ConfigError, 'checkpoint_every=0'):
      keras_fit.guard_fit(_model()).callback(checkpoint_every=0)
    in_the_way = os.path.join(self.get_temp_dir(), 'a_file')
    open(in_the_way, 'w').close()
    with self.assertRaisesRegex(errors.ConfigError, 'is a file; remove it, or use another'):
      keras_fit.guard_fit(_model()).callback(model_dir=in_the_way)
    model = _model()
    callback = keras_fit.guard_fit(model, policies=[stopping.EarlyStopping()]).callback()
    with self.assertRaises(errors.ConfigError):  # It needs the Trainer's evaluations.
      model.fit(*_arrays(num_batches=1), verbose=0, callbacks=[callback])

  def test_a_callback_on_a_fit_its_guard_does_not_run_is_refused(self):
    """The callback of one guard on another model's fit, or after a second guard took the model
    over, would read no reports: a fit that looks guarded and is not."""
    x, y = _arrays(num_batches=1)
    guarded = _model()
    first = keras_fit.guard_fit(guarded)
    callback = first.callback()
    with self.assertRaisesRegex(errors.ConfigError, 'GuardCallback: .* not the model its guard '
                                'guards'):
      _model().fit(x, y, verbose=0, callbacks=[callback])
    keras_fit.guard_fit(guarded)
    with self.assertRaisesRegex(errors.ConfigError, 'another guard took the model over'):
      guarded.fit(x, y, verbose=0, callbacks=[callback])

  def test_a_learning_rate_schedule_is_scaled_not_replaced(self):
    model = models.mlp(input_dim=FEATURES, hidden=(8,), outputs=1, seed=0)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss='mse')
    callback = keras_fit.guard_fit(model).callback()
    callback.run.set_lr_scale(0.25)
    self.assertAlmostEqual(callback.run.learning_rate, 0.1 * 0.25, places=6)
    callback.run.set_lr_scale(0.5)
    self.assertAlmostEqual(callback.run.learning_rate, 0.1 * 0.5, places=6)


if __name__ == '__main__':
  tf.test.main()
