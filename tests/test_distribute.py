"""Tests for stable_train.runtime.distribute and the Trainer under tf.distribute strategies."""

import json
import os
import socket
import subprocess
import sys
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import errors
from stable_train.keras import fit as keras_fit
from stable_train.policies import basic as policies
from stable_train.runtime import distribute
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BATCH = 8  # Global batch: 4 rows per replica on two replicas.


def _data(num_batches=6, poison=None):
  """(x, y) arrays; poison=(batch, row) puts a NaN in that row of that global batch."""
  rng = np.random.RandomState(1)
  x = rng.normal(size=(num_batches * _BATCH, 8)).astype(np.float32)
  y = rng.normal(size=(num_batches * _BATCH, 1)).astype(np.float32)
  if poison is not None:
    x[poison[0] * _BATCH + poison[1], 2] = np.nan
  return x, y


def _dataset(x, y, repeat=False):
  ds = tf.data.Dataset.from_tensor_slices((x, y))
  return (ds.repeat() if repeat else ds).batch(_BATCH, drop_remainder=True)


def _policies(max_norm=1.0):
  return [policies.CheckNumerics(), policies.ClipByGlobalNorm(max_norm=max_norm), policies.SkipNonFinite()]


class RecordingTrainer(trainer_lib.Trainer):
  """Keeps every loop's reports."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.reports = []

  def on_loop_end(self, reports):
    self.reports.append(reports)

  def column(self, name):
    return np.concatenate([getattr(r, name) for r in self.reports])


def _make(strategy, model_dir=None, optimizer_fn=None, max_norm=1.0, **kwargs):
  with strategy.scope():
    model = models.mlp(input_dim=8, hidden=(4,), outputs=1, seed=0)
    optimizer = optimizer_fn() if optimizer_fn else keras.optimizers.SGD(0.1)
    return RecordingTrainer(model=model, optimizer=optimizer,
                            loss=keras.losses.MeanSquaredError(), policies=_policies(max_norm),
                            model_dir=model_dir, strategy=strategy, **kwargs)


class TestCase(tf.test.TestCase):
  """tf.test.TestCase without its deprecated `test_session`, which pytest would collect and skip."""
  test_session = None


def _mirrored():
  return tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])


def _replica_values(strategy, variables):
  """For each variable, its value on each replica (numpy)."""
  return [[t.numpy() for t in strategy.experimental_local_results(getattr(v, 'value', v))]
          for v in variables]


class MirroredStepTest(TestCase):

  @pytest.mark.slow
  def test_nan_in_one_replica_shard_skips_on_every_replica(self):
    strategy = _mirrored()
    x, y = _data(poison=(1, 5))  # Row 5 of global batch 1: replica 1's half only.
    shards = list(iter(strategy.experimental_distribute_dataset(_dataset(x, y))))[1][0]
    replica0, replica1 = [t.numpy() for t in strategy.experimental_local_results(shards)]
    self.assertTrue(np.isfinite(replica0).all())
    self.assertTrue(np.isnan(replica1).any())

    trainer = _make(strategy, optimizer_fn=lambda: keras.optimizers.Adam(0.01))
    trainer.fit(_dataset(x, y), num_steps=1)
    before = _replica_values(strategy, trainer.model.variables + trainer.optimizer.variables)
    trainer.fit(_dataset(x, y).skip(1), num_steps=2)  # A later fit() reads its dataset from the start.
    after = _replica_values(strategy, trainer.model.variables + trainer.optimizer.variables)

    self.assertEqual(trainer.column('applied').tolist(), [True, False])
    self.assertFalse(trainer.column('grads_finite')[1])
    self.assertEqual(trainer.optimizer.iterations.numpy(), 1)
    self.assertEqual(trainer.skipped_steps.numpy(), 1)
    for b, a in zip(before, after):
      for replica in range(2):
        np.testing.assert_array_equal(a[replica], b[replica])  # Bit-identical to before...
      np.testing.assert_array_equal(a[0], a[1])  # ...and across replicas.

  @pytest.mark.slow
  def test_healthy_steps_equal_the_single_device_update_on_the_full_batch(self):
    x, y = _data()
    # SGD and no clipping in effect: a gradient summed twice would double the update (Adam's
    # update would hide a scale error).
    mirrored = _make(_mirrored(), max_norm=1e6)
    mirrored.fit(_dataset(x, y), num_steps=3)
    single = _make(tf.distribute.get_strategy(), max_norm=1e6)
    single.fit(_dataset(x, y), num_steps=3)

    for replicas, v in zip(_replica_values(mirrored.strategy, mirrored.model.trainable_variables),
                           single.model.trainable_variables):
      np.testing.assert_array_equal(replicas[0], replicas[1])
      self.assertAllClose(replicas[0], v.numpy(), rtol=1e-5, atol=1e-6)
    self.assertAllClose(mirrored.column('loss'), single.column('loss'), rtol=1e-5)
    self.assertAllClose(mirrored.column('grad_norm'), single.column('grad_norm'), rtol=1e-5)
    self.assertEqual(mirrored.optimizer.iterations.numpy(), 3)

  def test_reported_grad_norm_is_the_norm_of_the_aggregated_gradient(self):
    x, y = _data()
    trainer = _make(_mirrored())
    model = models.mlp(input_dim=8, hidden=(4,), outputs=1, seed=0)  # Same initial weights.
    with tf.GradientTape() as tape:
      loss = keras.losses.MeanSquaredError()(y[:_BATCH], model(x[:_BATCH]))
    full = tape.gradient(loss, model.trainable_variables)
    half = [tf.GradientTape() for _ in range(2)]
    per_replica_norms = []
    for i, t in enumerate(half):
      with t:
        rows = slice(i * 4, (i + 1) * 4)
        part = keras.losses.MeanSquaredError()(y[rows], model(x[rows]))
      per_replica_norms.append(tf.linalg.global_norm(t.gradient(part, model.trainable_variables)))
    trainer.fit(_dataset(x, y), num_steps=1)
    reported = trainer.column('grad_norm')[0]
    self.assertAllClose(reported, tf.linalg.global_norm(full).numpy(), rtol=1e-5)
    for n in per_replica_norms:  # Not either replica's own norm.
      self.assertGreater(abs(reported - n.numpy()), 1e-3)

  @pytest.mark.slow
  def test_one_packed_all_reduce_beyond_the_gradients(self):
    calls = []
    original = tf.distribute.ReplicaContext.all_reduce

    def counting(ctx, reduce_op, value, options=None):
      calls.append((str(ctx.devices), len(tf.nest.flatten(value)),
                    sum(int(np.prod(t.shape)) for t in tf.nest.flatten(value))))
      return original(ctx, reduce_op, value, options)

    x, y = _data()
    trainer = _make(_mirrored())
    with mock.patch.object(tf.distribute.ReplicaContext, 'all_reduce', counting):
      trainer.fit(_dataset(x, y), num_steps=1)  # Traces the step (the apply branch included).
    num_params = sum(int(np.prod(v.shape)) for v in trainer.model.trainable_variables)
    num_vars = len(trainer.model.trainable_variables)
    self.assertLen(set(c[0] for c in calls), 2)
    for device in set(c[0] for c in calls):
      mine = sorted(c[1:] for c in calls if c[0] == device)
      # The gradients (one batched call), then loss + output faults + one flag per input tensor.
      self.assertEqual(mine, [(1, 2 + 2), (num_vars, num_params)])


class MirroredFitTest(TestCase):

  @pytest.mark.slow
  def test_checkpoint_and_resume_continue_at_the_same_step_and_batch(self):
    x, y = _data(num_batches=12)
    root = self.get_temp_dir()
    whole = _make(_mirrored(), model_dir=os.path.join(root, 'whole'), checkpoint_every=4)
    whole.fit(_dataset(x, y, repeat=True), num_steps=10)

    resumed_dir = os.path.join(root, 'resumed')
    first = _make(_mirrored(), model_dir=resumed_dir, checkpoint_every=4, steps_per_loop=2)
    summary = first.fit(_dataset(x, y, repeat=True), num_steps=6)
    self.assertEqual(summary['global_step'], 6)
    manifest = json.load(open(os.path.join(resumed_dir, 'checkpoints', 'manifest.json')))
    self.assertEqual([e['step'] for e in manifest['checkpoints']], [4, 6])

    second = _make(_mirrored(), model_dir=resumed_dir, checkpoint_every=4)
    self.assertEqual(second.global_step.numpy(), 0)
    second.fit(_dataset(x, y, repeat=True), num_steps=10)
    self.assertEqual(second.column('step').tolist(), [7, 8, 9, 10])
    # The same batches as the uninterrupted run (data position restored): same losses.
    self.assertAllClose(second.column('loss'), whole.column('loss')[6:], rtol=1e-6)
    self.assertEqual(second.data_position(), 10)
    for replicas, v in zip(_replica_values(second.strategy, second.model.trainable_variables),
                           whole.model.trainable_variables):
      np.testing.assert_array_equal(replicas[0], replicas[1])
      self.assertAllClose(replicas[0], v.numpy(), rtol=1e-6, atol=1e-7)
    events = [json.loads(l) for l in open(os.path.join(resumed_dir, 'events.jsonl'))]
    self.assertEqual([e['step'] for e in events if e['event'] == 'resume'], [6])


def _classes(num_examples, seed=0):
  """(x, y): 4 classes from the signs of the first two features."""
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(num_examples, 8)).astype(np.float32)
  y = ((x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)).astype(np.int64)
  return x, y


def _classifier(strategy, **kwargs):
  with strategy.scope():
    return RecordingTrainer(
        model=models.mlp(input_dim=8, hidden=(8,), outputs=4, seed=0),
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        policies=_policies(max_norm=1e6), strategy=strategy, model_dir=None, log_every=100,
        metrics=[keras.metrics.SparseCategoricalAccuracy(name='accuracy')], **kwargs)


class MirroredMetricsAndEvalTest(TestCase):

  @pytest.mark.slow
  def test_training_metrics_and_eval_equal_the_single_device_values(self):
    x, y = _classes(6 * _BATCH)
    x[2 * _BATCH + 5, 3] = np.nan  # Replica 1's half of batch 2: a skipped step on both.
    train = lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(_BATCH, drop_remainder=True)
    # 33 rows in batches of 8: the last global batch has 1 row, so one replica's shard is empty.
    ex, ey = _classes(33, seed=1)
    held_out = lambda: tf.data.Dataset.from_tensor_slices((ex, ey)).batch(_BATCH)
    results = {}
    # ReductionToOneDevice: the default collectives of this strategy would meet the stale collective
    # instances of the earlier tests' strategies, whose model has another shape (BUILD_NOTES).
    mirrored = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())
    for kind, strategy in (('single', tf.distribute.get_strategy()), ('mirrored', mirrored)):
      trainer = _classifier(strategy)
      summary = trainer.fit(train(), num_steps=6, eval_dataset=held_out(), eval_every=3)
      self.assertEqual(summary['skipped_steps'], 1, kind)
      [metric] = trainer.metrics
      results[kind] = (summary, float(metric.count.numpy()))
    # What the mirrored evaluation must be: the mean batch loss and the accuracy over all 33 rows.
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logits = [trainer.model(bx, training=False).numpy() for bx, _ in held_out()]
    expected_loss = np.mean([float(loss_fn(by, l)) for (_, by), l in zip(held_out(), logits)])
    expected_accuracy = np.mean(np.argmax(np.concatenate(logits), -1) == ey)
    (single, single_count), (mirrored, mirrored_count) = results['single'], results['mirrored']
    # The metric counted the 5 applied batches' 40 rows, summed over both replicas.
    self.assertEqual((single_count, mirrored_count), (40.0, 40.0))
    self.assertAllClose(mirrored['metrics']['accuracy'], single['metrics']['accuracy'],
                        atol=1e-5, rtol=0)
    self.assertEqual((mirrored['eval']['step'], mirrored['eval']['batches']), (6, 5))
    self.assertAllClose(mirrored['eval']['loss'], single['eval']['loss'], atol=1e-5, rtol=0)
    self.assertAllClose(mirrored['eval']['metrics']['accuracy'],
                        single['eval']['metrics']['accuracy'], atol=1e-5, rtol=0)
    self.assertAllClose(mirrored['eval']['loss'], expected_loss, atol=1e-5, rtol=0)
    self.assertAllClose(mirrored['eval']['metrics']['accuracy'], expected_accuracy, atol=1e-6)
    # The model itself trained identically (the comparison above is of like with like).
    self.assertAllClose(mirrored['final_loss'], single['final_loss'], rtol=1e-5)

  def test_metrics_created_outside_the_scope_are_refused(self):
    strategy = _mirrored()
    with strategy.scope():
      model = models.mlp(input_dim=8, hidden=(4,), outputs=4)
      optimizer = keras.optimizers.SGD(0.1)
    with self.assertRaisesRegex(errors.ConfigError,
                                "metric 'acc' was created outside MirroredStrategy.scope"):
      trainer_lib.Trainer(model=model, optimizer=optimizer,
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          model_dir=None, strategy=strategy,
                          metrics=[keras.metrics.SparseCategoricalAccuracy(name='acc')])


class FactoryTest(TestCase):

  def test_mirrored_strategy_on_logical_cpus(self):
    tf.config.list_logical_devices('CPU')  # The runtime is up (with the session's 2 CPUs).
    self.assertEqual(distribute.mirrored_strategy(num_logical_cpus=2).num_replicas_in_sync, 2)
    self.assertEqual(
        distribute.mirrored_strategy(devices=['/cpu:0', '/cpu:1']).num_replicas_in_sync, 2)
    with self.assertRaisesRegex(errors.ConfigError, 'already started with 2'):
      distribute.mirrored_strategy(num_logical_cpus=3)
    with self.assertRaisesRegex(errors.ConfigError, "device '/cpu:7' does not exist"):
      distribute.mirrored_strategy(devices=['/cpu:7'])
    with self.assertRaisesRegex(errors.ConfigError, 'num_logical_cpus=0'):
      distribute.mirrored_strategy(num_logical_cpus=0)

  def test_multi_worker_needs_a_valid_tf_config(self):
    cases = {None: 'TF_CONFIG is not set', '{oops': 'not JSON',
             '{"task": {"type": "worker", "index": 0}}': 'no "cluster"',
             '{"cluster": {"worker": ["127.0.0.1:1"]}}': 'needs "task"',
             '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}':
                 'is not in cluster'}
    for value, message in cases.items():
      env = {k: v for k, v in os.environ.items() if k != 'TF_CONFIG'}
      if value is not None:
        env['TF_CONFIG'] = value
      with mock.patch.dict(os.environ, env, clear=True):
        with self.assertRaisesRegex(errors.ConfigError, message):
          distribute.multi_worker_mirrored_strategy()

  def test_chief_rule_and_default_strategy(self):
    self.assertTrue(distribute.is_chief(distribute.default_strategy()))
    self.assertTrue(distribute.is_chief(_mirrored()))
    self.assertEqual(distribute.task_of(_mirrored()), (None, None))

  def test_chief_rule_on_a_cluster(self):
    workers = {'worker': ['host0:1', 'host1:1']}
    with_chief = dict(workers, chief=['host2:1'])
    cases = [(workers, 'worker', 0, True), (workers, 'worker', 1, False),
             (with_chief, 'chief', 0, True), (with_chief, 'worker', 0, False),
             (with_chief, 'worker', 1, False), (dict(workers, evaluator=['h:1']), 'evaluator', 0,
                                                False)]
    for cluster, task_type, task_id, expected in cases:
      with self.subTest(cluster=sorted(cluster), task=(task_type, task_id)):
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id)
        strategy = mock.Mock(cluster_resolver=resolver)
        # task_of only reads a MultiWorkerMirroredStrategy's resolver; that strategy needs a
        # live cluster to construct, so the rule is checked on the resolver alone.
        with mock.patch.object(distribute, 'task_of', return_value=(task_type, task_id)):
          self.assertEqual(distribute.is_chief(strategy), expected)
    self.assertFalse(distribute.uses_distributed_input(distribute.default_strategy()))

  def test_settings_that_cannot_work_under_a_strategy_are_refused(self):
    with self.assertRaisesRegex(errors.ConfigError, 'jit_compile=True under MirroredStrategy'):
      _make(_mirrored(), jit_compile=True)
    x, y = _data()
    trainer = _make(_mirrored(),
                    optimizer_fn=lambda: keras.optimizers.SGD(0.1, global_clipnorm=1.0))
    with self.assertRaisesRegex(errors.ConfigError, 'global_clipnorm=1.0 .*ClipByGlobalNorm'):
      trainer.fit(_dataset(x, y), num_steps=1)
    strategy = _mirrored()
    with strategy.scope():
      model = models.mlp(input_dim=8, hidden=(4,), outputs=1)
    outside = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.SGD(0.1),
                                  loss=keras.losses.MeanSquaredError(), model_dir=None,
                                  strategy=strategy)
    with self.assertRaisesRegex(errors.ConfigError, 'optimizer was created outside'):
      outside.fit(_dataset(x, y), num_steps=1)


def _free_ports(n):
  sockets = [socket.socket() for _ in range(n)]
  try:
    for s in sockets:
      s.bind(('127.0.0.1', 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


class MultiWorkerTest(TestCase):

  @pytest.mark.slow
  def test_two_workers_skip_together_and_end_identical(self):
    root = self.get_temp_dir()
    model_dir = os.path.join(root, 'run')
    cluster = {'worker': [f'127.0.0.1:{p}' for p in _free_ports(2)]}
    procs = []
    try:
      for i in range(2):
        env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL='2',
                   TF_CONFIG=json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': i}}))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(_ROOT, 'tests', 'mwms_worker.py'), model_dir,
             os.path.join(root, f'worker{i}.npz')],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
      for p in procs:
        out, _ = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, out[-3000:])
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
          p.wait()

    results = [np.load(os.path.join(root, f'worker{i}.npz')) for i in range(2)]
    facts = [json.loads(str(r['facts'])) for r in results]
    self.assertEqual([f['is_chief'] for f in facts], [True, False])
    self.assertEqual([f['tf_should_checkpoint'] for f in facts], [True, False])
    # Only worker 1's shard of the poisoned batch held the NaN; both workers skipped that step.
    self.assertEqual([f['local_shard_has_nan'] for f in facts], [False, True])
    for f in facts:
      self.assertEqual((f['summary']['global_step'], f['summary']['skipped_steps']), (4, 1))
      self.assertEqual((f['resumed']['global_step'], f['resumed']['steps_this_run']), (6, 2))
      self.assertEqual((f['data_position'], f['iterations']), (6, 5))
      # Per step: one all-reduce of the gradients (TF packs them) + one of the packed scalars.
      self.assertEqual(f['collective_ops'], 2)
    weights = [[r[k] for k in r.files if k != 'facts'] for r in results]
    self.assertLen(weights[0], facts[0]['num_trainable_variables'])
    for a, b in zip(*weights):
      np.testing.assert_array_equal(a, b)
    # The chief alone wrote files: one event log with one start, checkpoints at steps 2, 4, 6.
    self.assertCountEqual(os.listdir(model_dir),
                          ['checkpoints', 'events.jsonl', 'summary.json', 'tensorboard', 'run.lock'])
    events = [json.loads(l) for l in open(os.path.join(model_dir, 'events.jsonl'))]
    self.assertEqual([e['event'] for e in events].count('start'), 1)
    self.assertEqual([e['event'] for e in events].count('skip'), 1)
    manifest = json.load(open(os.path.join(model_dir, 'checkpoints', 'manifest.json')))
    self.assertEqual([e['step'] for e in manifest['checkpoints']], [2, 4, 6])
    self.assertCountEqual(
        [f for f in os.listdir(os.path.join(model_dir, 'checkpoints')) if f.endswith('.index')],
        ['ckpt-1.index', 'ckpt-2.index', 'ckpt-3.index'])


if __name__ == '__main__':
  tf.test.main()


class MirroredRollbackTest(TestCase):

  @pytest.mark.slow
  def test_rollback_under_the_strategy(self):
    from stable_train.policies import recovery  # pylint: disable=g-import-not-at-top
    strategy = _mirrored()
    x, y = _data(num_batches=40)
    for b in (12, 13, 14):  # Three NaN batches in a row (one row each): escalation at step 15.
      x[b * _BATCH + 5, 2] = np.nan  # Row 5: replica 1's half of the global batch only.
    model_dir = self.get_temp_dir()
    with strategy.scope():
      model = models.mlp(input_dim=8, hidden=(4,), outputs=1, seed=0)
      trainer = RecordingTrainer(
          model=model, optimizer=keras.optimizers.Adam(0.01), loss=keras.losses.MeanSquaredError(),
          policies=[policies.ClipByGlobalNorm(), policies.SkipNonFinite(max_consecutive=2), recovery.Rollback()],
          model_dir=model_dir, strategy=strategy, checkpoint_every=5, healthy_window=0)
    summary = trainer.fit(_dataset(x, y), num_steps=25)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['rollbacks'], 1)
    events = [json.loads(l) for l in open(os.path.join(model_dir, 'events.jsonl'))]
    [rollback] = [e for e in events if e['event'] == 'rollback']
    self.assertEqual((rollback['step'], rollback['to_step']), (15, 10))
    self.assertEqual(rollback['skipped_batches'], [10, 15])
    # After the restore the data resumed at stream batch 15 on both replicas: no poisoned batch
    # was replayed, so nothing was skipped after the rollback.
    self.assertEqual(summary['skipped_steps'], 0)
    self.assertEqual(trainer.data_position(), 30)
    for replicas in _replica_values(strategy, trainer.model.variables + trainer.optimizer.variables):
      np.testing.assert_array_equal(replicas[0], replicas[1])
      self.assertTrue(np.isfinite(replicas[0]).all())


class OneDeviceTest(tf.test.TestCase):
  """OneDeviceStrategy: the input is not split, but Keras's optimizer still merges, so the apply
  (and a skip's restore) runs in a replica context. Through both front doors, on a model with
  BatchNorm and Dropout, a NaN batch skipped leaves the whole state as a run that never saw it."""

  def _model(self, strategy):
    with strategy.scope():
      keras.utils.set_random_seed(0)
      model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, 'relu'),
                                keras.layers.BatchNormalization(), keras.layers.Dropout(0.3),
                                keras.layers.Dense(1)])
      return model, keras.optimizers.Adam(1e-2)

  def _data(self, poisoned):
    x = np.random.RandomState(0).normal(size=(32, 6)).astype(np.float32)
    y = x.sum(1, keepdims=True)
    if not poisoned:  # Batch 2 of 4 left out.
      return np.concatenate([x[:16], x[24:]]), np.concatenate([y[:16], y[24:]])
    x[20] = np.nan
    return x, y

  @staticmethod
  def _state(model, optimizer):
    return [v.numpy() for v in model.variables + optimizer.variables]

  def _trainer(self, poisoned):
    strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
    model, optimizer = self._model(strategy)
    trainer = trainer_lib.Trainer(model=model, optimizer=optimizer, loss='mse', model_dir=None,
                                  verbose=False, strategy=strategy)
    summary = trainer.fit(tf.data.Dataset.from_tensor_slices(self._data(poisoned)).batch(8),
                          num_steps=4 if poisoned else 3)
    return summary['skipped_steps'], self._state(model, optimizer)

  def _fit(self, poisoned):
    strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
    model, optimizer = self._model(strategy)
    with strategy.scope():
      model.compile(optimizer=optimizer, loss='mse')
    guard = keras_fit.guard_fit(model)
    model.fit(*self._data(poisoned), batch_size=8, epochs=1, shuffle=False, verbose=0)
    return int(guard.state.skipped_steps.numpy()), self._state(model, optimizer)

  @pytest.mark.slow  # Four runs under a strategy, as the Mirrored runs of the slow set.
  def test_both_doors_skip_a_nan_batch_as_if_never_seen(self):
    for door in (self._trainer, self._fit):
      (skipped, state), (clean_skips, clean) = door(True), door(False)
      self.assertEqual((skipped, clean_skips), (1, 0), door)
      self.assertLen(state, len(clean))
      for a, b in zip(state, clean):
        self.assertAllEqual(a, b)
