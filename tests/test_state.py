"""Whole-state guarantees on real architectures: a skipped step changes nothing (BatchNorm
statistics, dropout and attention seed states, optimizer slots), checkpoints stay finite, a
resume continues the random stream, a run that cannot checkpoint is not "completed"."""

import collections
import os
import signal
import tempfile
from unittest import mock

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import losses
from stable_train.core import numerics
from stable_train.core import state as state_lib
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.policies import basic as policies
from stable_train.policies import precision
from stable_train.policies import recovery
from stable_train.runfiles import checkpointing
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

BATCH = 8
SEQ, VOCAB, CLASSES = 8, 32, 4
IMAGE = (8, 8, 3)


class TestCase(parameterized.TestCase, tf.test.TestCase):
  test_session = None


class ScaledLossTrainer(trainer_lib.Trainer):
  """Batches are ((inputs, scale), labels): the loss is multiplied by `scale`, so a NaN scale
  makes a step non-finite *after* a full training-mode forward pass (every layer has assigned
  its state by then). Also exercises nested batch structures and a compute_loss override."""

  def compute_loss(self, batch, training):
    (inputs, scale), labels = batch
    logits = self.forward(inputs, training)
    return self.loss_fn(labels, logits) * scale[0, 0]


class SubclassedNet(keras.Model):
  """A subclassed model with BatchNormalization and Dropout."""

  def __init__(self):
    super().__init__(name='subclassed')
    self.flatten = keras.layers.Flatten()
    self.dense = keras.layers.Dense(16)
    self.norm = keras.layers.BatchNormalization()
    self.drop = keras.layers.Dropout(0.3)
    self.out = keras.layers.Dense(CLASSES)

  def call(self, x, training=None):
    h = self.norm(self.dense(self.flatten(x)), training=training)
    return self.out(self.drop(keras.ops.relu(h), training=training))


def _regularized():
  keras.utils.set_random_seed(0)
  return keras.Sequential([
      keras.Input(IMAGE), keras.layers.Flatten(),
      keras.layers.Dense(16, activation='relu', kernel_regularizer=keras.regularizers.L2(1e-3)),
      keras.layers.Dropout(0.2),
      keras.layers.Dense(CLASSES, kernel_regularizer=keras.regularizers.L2(1e-3))])


def _subclassed():
  keras.utils.set_random_seed(0)
  model = SubclassedNet()
  model(np.zeros((1,) + IMAGE, np.float32))  # Built here: the batch is ((image, scale), label).
  return model


ZOO = {
    'convnet_bn': lambda: models.convnet_bn(image_shape=IMAGE, num_classes=CLASSES, filters=(4, 8)),
    'transformer': lambda: models.transformer(vocab_size=VOCAB, seq_len=SEQ, dim=16, heads=2,
                                              ffn=16, num_classes=CLASSES),
    'lstm': lambda: models.lstm(vocab_size=VOCAB, seq_len=SEQ, units=8, num_classes=CLASSES),
    'subclassed': _subclassed,
    'regularized': _regularized,
}
TOKENS = ('transformer', 'lstm')


def _zoo_data(kind, num_batches=12, nan_scale=(), nan_pixels=()):
  """((inputs, scale), labels) batches; NaN scale or a NaN pixel in the listed batches."""
  rng = np.random.RandomState(3)
  n = num_batches * BATCH
  if kind in TOKENS:
    x = rng.randint(0, VOCAB, size=(n, SEQ)).astype(np.int32)
  else:
    x = rng.normal(size=(n,) + IMAGE).astype(np.float32)
    for b in nan_pixels:
      x[b * BATCH, 0, 0, 0] = np.nan
  y = rng.randint(0, CLASSES, size=n).astype(np.int32)
  scale = np.ones([n, 1], np.float32)
  for b in nan_scale:
    scale[b * BATCH:(b + 1) * BATCH] = np.nan
  return tf.data.Dataset.from_tensor_slices(((x, scale), y)).batch(BATCH)


def _make(kind, strategy=None, model_dir=None, extra_policies=(), cls=ScaledLossTrainer,
          **kwargs):
  strategy = strategy or tf.distribute.get_strategy()
  with strategy.scope():
    model = ZOO[kind]()
    return cls(model=model, optimizer=keras.optimizers.Adam(1e-3),
               loss=losses.sparse_softmax_cross_entropy,
               policies=trainer_lib.default_policies() + list(extra_policies),
               model_dir=model_dir, strategy=strategy, **kwargs)


def whole_state(trainer):
  """Every model and optimizer variable (by position: seed-generator names are per process),
  as numpy, with every replica's copy under a strategy."""
  values = []
  for v in list(trainer.model.variables) + list(trainer.optimizer.variables):
    inner = getattr(v, 'value', v)
    values.append([np.array(t.numpy()) for t in
                   trainer.strategy.experimental_local_results(inner)])
  return values


class SkippedStepChangesNothingTest(TestCase):

  def _check(self, trainer, kind, nan_batch=3, steps_per_loop=1):
    poison = dict(nan_pixels=[nan_batch]) if kind == 'convnet_bn' else dict(nan_scale=[nan_batch])
    data = _zoo_data(kind, **poison)
    trainer.fit(data.take(nan_batch), num_steps=nan_batch)
    before = whole_state(trainer)
    names = [v.path for v in trainer.model.non_trainable_variables]
    self.assertTrue(any('seed_generator' in n for n in names), names)  # Dropout state exists.
    summary = trainer.fit(data.skip(nan_batch).take(1), num_steps=nan_batch + 1)
    self.assertEqual(summary['skipped_steps'], 1)
    after = whole_state(trainer)
    self.assertLen(after, len(before))
    for i, (b, a) in enumerate(zip(before, after)):
      for rb, ra in zip(b, a):
        self.assertTrue(np.array_equal(rb, ra), f'variable {i} changed on a skipped step')
    # Training goes on, and the state a forward pass moves does move on applied steps.
    trainer.fit(data.skip(nan_batch + 1).take(2 * steps_per_loop), num_steps=nan_batch + 1 + 2 * steps_per_loop)
    moved = whole_state(trainer)
    forward = [i for i, v in enumerate(list(trainer.model.variables)) if not v.trainable]
    self.assertTrue(any(not np.array_equal(before[i][0], moved[i][0]) for i in forward))
    for values in moved:
      for value in values:
        if np.issubdtype(value.dtype, np.floating):
          self.assertTrue(np.all(np.isfinite(value)))
    if trainer.checkpoints is not None:  # Checkpoints after the NaN batch: written, so finite.
      steps = [e.step for e in trainer.checkpoints.committed()]
      self.assertIn(nan_batch + 1 + 2 * steps_per_loop, steps)

  @parameterized.named_parameters(*[(k, k) for k in ZOO])
  @pytest.mark.slow
  def test_zoo_one_device(self, kind):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    self._check(_make(kind, model_dir=model_dir, checkpoint_every=1), kind)
    # The default stack's Forensics investigated the skipped step (a re-run of its batch on the
    # state before it) and the state was still left exactly as it was.
    self.assertEqual(os.listdir(os.path.join(model_dir, 'forensics')), ['step_4'])

  @pytest.mark.slow
  def test_convnet_steps_per_loop(self):
    self._check(_make('convnet_bn', steps_per_loop=4), 'convnet_bn', steps_per_loop=4)

  @parameterized.named_parameters(('convnet_bn', 'convnet_bn'), ('transformer', 'transformer'))
  @pytest.mark.slow
  def test_xla(self, kind):
    self._check(_make(kind, jit_compile=True), kind)

  @parameterized.named_parameters(('convnet_bn', 'convnet_bn'), ('transformer', 'transformer'))
  @pytest.mark.slow
  def test_xla_with_the_tree_norm(self, kind):
    # Under XLA, gradients above 2 * TREE_WIDTH elements get their sum of squares as a tree of
    # row adds; the zoo's are smaller than the default width, so it is narrowed here to put
    # every kernel on that path (rows, an odd row out, a tail).
    with mock.patch.object(numerics, 'TREE_WIDTH', 16):
      trainer = _make(kind, jit_compile=True)
      self.assertTrue(any(v.shape.num_elements() > 32 for v in trainer.model.trainable_variables))
      self._check(trainer, kind)

  @pytest.mark.slow
  def test_convnet_mirrored(self):
    # ReductionToOneDevice: collective instance keys of the MirroredStrategy objects of earlier
    # tests in this process would collide with this one's (BUILD_NOTES, traps).
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())
    self._check(_make('convnet_bn', strategy=strategy), 'convnet_bn')

  @pytest.mark.slow
  def test_forensics_rerun_leaves_state_alone(self):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    trainer = _make('convnet_bn', model_dir=model_dir,
                    extra_policies=[forensics.Forensics(when='every', recheck=True)])
    self._check(trainer, 'convnet_bn')
    self.assertTrue(os.path.isdir(os.path.join(model_dir, 'forensics', 'step_4')))

  @pytest.mark.slow
  def test_a_check_numerics_raise_leaves_the_convnet_as_before_the_step(self):
    # Its forward pass assigned the BatchNorm statistics (NaN) and the dropout seed: the in-graph
    # raise comes after the skip that put them back.
    trainer = ScaledLossTrainer(
        model=ZOO['convnet_bn'](), optimizer=keras.optimizers.Adam(1e-3),
        loss=losses.sparse_softmax_cross_entropy,
        policies=[policies.CheckNumerics(mode='raise'), policies.SkipNonFinite()], model_dir=None)
    data = _zoo_data('convnet_bn', nan_pixels=[3])
    trainer.fit(data.take(3), num_steps=3)
    before = whole_state(trainer)
    with self.assertRaisesRegex(errors.NumericsError, 'at step 4: non-finite loss'):
      trainer.fit(data.skip(3), num_steps=6)
    for i, (b, a) in enumerate(zip(before, whole_state(trainer))):
      self.assertTrue(np.array_equal(b[0], a[0]), f'variable {i} moved in the step that raised')
    self.assertEqual(int(trainer.state.global_step.numpy()), 3)


class MixedPrecisionOverflowTest(TestCase):

  @pytest.mark.slow
  def test_an_fp16_overflow_skip_leaves_the_convnet_state_alone(self):
    """The overflow skip on a model with BatchNorm statistics and a dropout seed state."""
    precision.set_precision('mixed_float16')
    try:
      trainer = _make('convnet_bn',
                      extra_policies=[precision.DynamicLossScale(initial_scale=2.0**24)])
      data = _zoo_data('convnet_bn')
      trainer.fit(data.take(0), num_steps=1)  # Builds everything, runs nothing.
      before = whole_state(trainer)
      summary = trainer.fit(data.take(1), num_steps=1)
      self.assertEqual(summary['overflow_skips'], 1)
      self.assertEqual(float(trainer.loss_scale.scale.numpy()), 2.0**23)
      for i, (b, a) in enumerate(zip(before, whole_state(trainer))):
        self.assertTrue(np.array_equal(b[0], a[0]), f'variable {i} changed on an overflow skip')
    finally:
      precision.set_precision('float32')


class GlobalNoise(keras.layers.Layer):
  """Draws from Keras's global SeedGenerator (keras.random.* without a seed)."""

  def call(self, x, training=None):
    if training:
      return x + 0.1 * keras.random.normal(keras.ops.shape(x))
    return x


class GlobalGeneratorsTest(TestCase):

  @pytest.mark.slow
  def test_a_skip_puts_the_global_generators_back(self):
    """[ok, NaN, ok, ok] must train exactly like [ok, ok, ok] when a layer draws from the
    process-wide Keras generator."""

    def run(bad):
      keras.utils.set_random_seed(0)
      model = keras.Sequential([keras.Input((4,)), GlobalNoise(), keras.layers.Dense(3)])
      rng = np.random.RandomState(0)
      x = rng.normal(size=(32, 4)).astype(np.float32)
      y = rng.randint(0, 3, size=32).astype(np.int32)
      if bad:
        x[8, 0] = np.nan
      else:
        x, y = np.concatenate([x[:8], x[16:]]), np.concatenate([y[:8], y[16:]])
      data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
      trainer = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-2),
                                    loss=losses.sparse_softmax_cross_entropy, model_dir=None)
      summary = trainer.fit(data, num_steps=4 if bad else 3)
      self.assertEqual(summary['skipped_steps'], 1 if bad else 0)
      return [v.numpy() for v in model.trainable_variables]

    for a, b in zip(run(True), run(False)):
      np.testing.assert_array_equal(a, b)


class FiniteCheckpointsTest(TestCase):

  @pytest.mark.slow
  def test_nan_batch_mid_run_then_finite_checkpoints(self):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    trainer = _make('convnet_bn', model_dir=model_dir, checkpoint_every=2)
    summary = trainer.fit(_zoo_data('convnet_bn', nan_pixels=[3]), num_steps=10)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['skipped_steps'], 1)
    entries = trainer.checkpoints.committed()
    self.assertEqual(entries[-1].step, 10)
    self.assertTrue(any(e.step > 4 for e in entries))
    for e in entries:
      reader = tf.train.load_checkpoint(os.path.join(trainer.checkpoints.directory, e.path))
      dtypes = reader.get_variable_to_dtype_map()
      floats = [n for n, d in dtypes.items() if d.is_floating]
      model_floats = [v for v in trainer.model.variables if 'float' in str(v.dtype)]
      self.assertGreaterEqual(len(floats), len(model_floats))  # BatchNorm statistics included.
      for name in floats:
        self.assertTrue(np.all(np.isfinite(reader.get_tensor(name))), f'{e.path}: {name}')


class Accumulator(keras.layers.Layer):
  """Identity whose non-trainable `acc` is multiplied by 1e10 per training call: it overflows to
  inf at step 4 while the loss stays finite (state a checkpoint must not take)."""

  def build(self, input_shape):
    self.acc = self.add_weight(shape=(), initializer='ones', trainable=False, name='acc')

  def call(self, x, training=None):
    if training:
      self.acc.assign(self.acc * 1e10)
    return x


def _accumulating_trainer(model_dir, extra_policies=(), **kwargs):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), Accumulator(name='accumulator'),
                            keras.layers.Dense(1)])
  return trainer_lib.Trainer(model=model, optimizer=keras.optimizers.SGD(0.01),
                             loss=keras.losses.MeanSquaredError(),
                             policies=trainer_lib.default_policies() + list(extra_policies),
                             model_dir=model_dir, checkpoint_every=2, **kwargs)


def _regression(num_batches=40):
  rng = np.random.RandomState(0)
  x = rng.normal(size=(num_batches * BATCH, 4)).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)


class RefusedCheckpointsTest(TestCase):

  def test_refusals_in_a_row_abort_naming_the_variable(self):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    trainer = _accumulating_trainer(model_dir)
    summary = trainer.fit(_regression(), num_steps=20)
    self.assertEqual(summary['status'], 'aborted')
    self.assertIn('accumulator/acc', summary['reason'])
    self.assertIn('2 checkpoints in a row refused', summary['reason'])
    self.assertLess(summary['global_step'], 20)
    # The newest checkpoint on disk is finite and from before the overflow.
    entries = checkpointing.CheckpointKeeper(
        tf.train.Checkpoint(), os.path.join(model_dir, 'checkpoints')).committed()
    self.assertEqual([e.step for e in entries], [2])

  def test_refusal_before_any_checkpoint_says_so(self):
    trainer = _accumulating_trainer(tempfile.mkdtemp(dir=self.get_temp_dir()))
    trainer.checkpoint_every = 4  # The first checkpoint (step 4) is already refused.
    summary = trainer.fit(_regression(), num_steps=20)
    self.assertEqual(summary['status'], 'aborted')
    self.assertIn('no checkpoint was written before it', summary['reason'])

  def test_final_refusal_is_not_completed(self):
    trainer = _accumulating_trainer(tempfile.mkdtemp(dir=self.get_temp_dir()), max_refused_checkpoints=5)
    summary = trainer.fit(_regression(), num_steps=5)
    self.assertEqual(summary['status'], 'aborted')
    self.assertIn('final checkpoint was refused', summary['reason'])

  def test_rollback_takes_over(self):
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    trainer = _accumulating_trainer(model_dir, extra_policies=[recovery.Rollback(max_rollbacks=1)],
                                    healthy_window=0)
    summary = trainer.fit(_regression(), num_steps=20)
    self.assertEqual(summary['rollbacks'], 1)
    self.assertEqual(summary['status'], 'aborted')  # The layer overflows again every time.
    self.assertIn('rollback limit', summary['reason'])


class StopAtSix(ScaledLossTrainer):
  """Sends itself SIGTERM after step 6 (module level: autograph caches converted methods by code
  object, and a class defined inside a test can hand its id to another test's method)."""

  def on_loop_end(self, reports):
    if reports.step[-1] == 6:
      os.kill(os.getpid(), signal.SIGTERM)


class ResumeRandomnessTest(TestCase):

  @pytest.mark.slow
  def test_sigterm_and_resume_of_a_dropout_model_equals_uninterrupted(self):
    data = _zoo_data('convnet_bn', num_batches=14)
    reference = _make('convnet_bn')
    reference.fit(data, num_steps=12)
    expected = whole_state(reference)

    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    first = _make('convnet_bn', model_dir=model_dir, cls=StopAtSix)
    summary = first.fit(data, num_steps=12)
    self.assertEqual(summary['status'], 'interrupted')
    self.assertEqual(summary['global_step'], 6)
    # Another draw from the process's random streams between the runs must not matter.
    keras.random.uniform([3], seed=keras.random.SeedGenerator(7))
    tf.random.get_global_generator().normal([3])
    second = _make('convnet_bn', model_dir=model_dir)
    self.assertEqual(second.fit(data, num_steps=12)['status'], 'completed')
    for i, (e, a) in enumerate(zip(expected, whole_state(second))):
      self.assertTrue(np.array_equal(e[0], a[0]), f'variable {i} differs after resume')


def checkpointed_state(trainer):
  """Every variable the run's checkpoint holds (model, optimizer slots and iterations, counters,
  learning-rate scale, policy variables, random states), as numpy, in object-graph order."""
  values = []
  checkpoint = tf.train.Checkpoint(**trainer.controller.checkpoint_objects())  # pylint: disable=protected-access
  for node in tf.train.TrackableView(checkpoint).descendants():
    variable = getattr(node, 'value', node) if isinstance(node, keras.Variable) else node
    if isinstance(variable, tf.Variable):
      values.append(np.array(variable.numpy()))
  return values


class AfterRollback(ScaledLossTrainer):
  """Keeps the whole checkpointed state just after each rollback, and each rollback event."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.after_rollback, self.rollbacks = [], []

  def on_event(self, record):
    if record['event'] == 'rollback':
      self.after_rollback.append(checkpointed_state(self))
      self.rollbacks.append(record)


class InMemoryRollbackTest(TestCase):
  """A rollback restores from the in-memory snapshot exactly what a restore from disk gives."""

  def _run(self, kind, from_disk):
    keras.utils.set_random_seed(0)
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    stack = [policies.CheckNumerics(), policies.SkipNonFinite(max_consecutive=1),
             recovery.Rollback(retry_window=0)]
    model = ZOO['convnet_bn']()
    if kind == 'mlp':
      model = keras.Sequential([
          keras.Input(IMAGE), keras.layers.Flatten(),
          models.mlp(input_dim=int(np.prod(IMAGE)), hidden=(16, 8), outputs=CLASSES, seed=0)])
    trainer = AfterRollback(model=model, optimizer=keras.optimizers.Adam(1e-2),
                            loss=losses.sparse_softmax_cross_entropy, model_dir=model_dir,
                            policies=stack, checkpoint_every=2, healthy_window=0)
    # NaN scales at batches 5-6 (steps 6-7): the second skip in a row rolls back to step 4;
    # again at 13-14.
    data = _zoo_data('convnet_bn', num_batches=24, nan_scale=[5, 6, 13, 14])
    patch = (mock.patch.object(checkpointing.CheckpointKeeper, '_restore_from_snapshot',
                               return_value=None) if from_disk else mock.MagicMock())
    with patch:
      summary = trainer.fit(data, num_steps=16)
    self.assertEqual(summary['rollbacks'], 2)
    return trainer, summary

  @parameterized.named_parameters(('convnet_bn', 'convnet_bn'), ('mlp', 'mlp'))
  @pytest.mark.slow
  def test_a_rollback_from_memory_equals_one_from_disk(self, kind):
    memory, summary = self._run(kind, from_disk=False)
    disk, disk_summary = self._run(kind, from_disk=True)
    self.assertEqual([e['restored_from'] for e in memory.rollbacks], ['memory', 'memory'])
    self.assertEqual([e['restored_from'] for e in disk.rollbacks], ['disk', 'disk'])
    for m, d in zip(memory.rollbacks, disk.rollbacks):
      for key in ('step', 'to_step', 'checkpoint', 'skipped_batches'):
        self.assertEqual(m[key], d[key], key)
    names = [v.path for v in memory.model.variables]
    self.assertTrue(any('moving_mean' in n for n in names) or kind == 'mlp', names)
    # Every checkpointed variable, just after each rollback and at the end of the run.
    for after_memory, after_disk in zip(memory.after_rollback + [checkpointed_state(memory)],
                                        disk.after_rollback + [checkpointed_state(disk)]):
      self.assertLen(after_memory, len(after_disk))
      self.assertGreater(len(after_memory), len(memory.model.variables))
      for i, (m, d) in enumerate(zip(after_memory, after_disk)):
        self.assertTrue(np.array_equal(m, d), f'checkpointed variable {i} differs')
    self.assertEqual(summary['final_loss'], disk_summary['final_loss'])
    self.assertEqual(memory.data_position(), disk.data_position())


Features = collections.namedtuple('Features', ['image', 'weight'])
Example = collections.namedtuple('Example', ['features', 'label'])


class NamedTupleTrainer(trainer_lib.Trainer):

  def compute_loss(self, batch, training):
    features, labels = self.split_batch(batch)
    logits = self.forward(features.image, training)
    return self.loss_fn(labels, logits) * tf.reduce_mean(features.weight)


class NamedTupleBatchTest(TestCase):

  @pytest.mark.slow
  def test_namedtuple_batch_through_step_validation_and_forensics(self):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(4 * BATCH, 4)).astype(np.float32)
    x[2 * BATCH, 1] = np.nan
    y = rng.randint(0, 3, size=4 * BATCH).astype(np.int32)
    w = np.ones([4 * BATCH], np.float32)
    data = tf.data.Dataset.from_tensor_slices(
        Example(features=Features(image=x, weight=w), label=y)).batch(BATCH)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    validate = policies.ValidateInputs
    trainer = NamedTupleTrainer(
        model=model, optimizer=keras.optimizers.Adam(1e-2),
        loss=losses.sparse_softmax_cross_entropy, model_dir=model_dir,
        policies=trainer_lib.default_policies() + [
            validate(num_classes=3), forensics.Forensics(when='first')])
    summary = trainer.fit(data, num_steps=4)
    self.assertEqual(summary['input_faults'], 1)
    self.assertEqual(summary['applied_steps'], 3)
    report, batch = forensics.read_record(os.path.join(model_dir, 'forensics', 'step_3'))
    self.assertEqual(type(batch).__name__, 'Example')
    self.assertEqual(type(batch.features).__name__, 'Features')
    np.testing.assert_array_equal(batch.features.image, x[2 * BATCH:3 * BATCH])
    np.testing.assert_array_equal(batch.label, y[2 * BATCH:3 * BATCH])
    self.assertIn('features/image', report['offending_tensor'])


class TrainStateTest(tf.test.TestCase):

  def test_the_checkpoint_object_map_keeps_its_format(self):
    skip = policies.SkipNonFinite()
    state = state_lib.TrainState(policies=[skip], strategy=tf.distribute.get_strategy())
    objects = state.checkpoint_objects(model='m', optimizer='o', forward_state=(),
                                       random_states=())
    # The keys are the checkpoint format: a renamed key would orphan every saved run.
    self.assertCountEqual(objects, [
        'model', 'optimizer', 'global_step', 'applied_steps', 'skipped_steps', 'input_faults',
        'overflow_steps', 'data_offset', 'last_fault_step', 'lr_scale', 'policies',
        'model_state', 'random'])
    self.assertIs(objects['policies'].by_name['skip_non_finite'], skip)
    self.assertEqual(int(state.global_step.numpy()), 0)
    self.assertEqual(int(state.last_fault_step.numpy()), -(2**62))
    self.assertEqual(float(state.lr_scale.numpy()), 1.0)

  def test_the_trainer_reads_its_state_through_the_same_variables(self):
    trainer = trainer_lib.Trainer(model=models.mlp(hidden=(4,)), optimizer=keras.optimizers.SGD(),
                                  loss=keras.losses.MeanSquaredError(), model_dir=None)
    for name, _, _ in state_lib.COUNTERS:
      self.assertIs(getattr(trainer, name), getattr(trainer.state, name))
    self.assertIs(trainer.lr_scale, trainer.state.lr_scale)


class TracedWriterTest(tf.test.TestCase):

  def test_same_keys_and_values_as_the_manager_and_restorable(self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3),
                              keras.layers.BatchNormalization(), keras.layers.Dropout(0.5)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    optimizer.iterations.assign(7)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                     counters=[tf.Variable(3, dtype=tf.int64)])
    directory = self.get_temp_dir()
    eager = tf.train.CheckpointManager(checkpoint, os.path.join(directory, 'eager'),
                                       max_to_keep=None).save(checkpoint_number=1)
    writer = state_lib.TracedWriter(checkpoint)
    traced = writer(os.path.join(directory, 'ckpt-1'))
    self.assertLen(tf.io.gfile.glob(traced + '.data-*'), 1)
    a, b = tf.train.load_checkpoint(eager), tf.train.load_checkpoint(traced)
    keys = set(a.get_variable_to_shape_map())
    self.assertEqual(keys, set(b.get_variable_to_shape_map()))
    self.assertIn('save_counter/.ATTRIBUTES/VARIABLE_VALUE', keys)
    for key in keys - {'_CHECKPOINTABLE_OBJECT_GRAPH', 'save_counter/.ATTRIBUTES/VARIABLE_VALUE'}:
      self.assertTrue(np.array_equal(a.get_tensor(key), b.get_tensor(key)), key)
    # Later writes take the values of the moment (the trace reads the variables, not constants).
    model.layers[0].kernel.assign(tf.ones([4, 3]))
    again = writer(os.path.join(directory, 'ckpt-2'))
    model.layers[0].kernel.assign(tf.zeros([4, 3]))
    status = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                 counters=[tf.Variable(0, dtype=tf.int64)]).restore(again)
    status.assert_existing_objects_matched()
    self.assertAllEqual(model.layers[0].kernel, tf.ones([4, 3]))


# Holds the run lock of argv[1] until stdin closes (then releases it), or dies holding it.


if __name__ == '__main__':
  tf.test.main()
