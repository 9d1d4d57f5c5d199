"""Tests for stable_train.keras.fit: a guarded `model.fit` trains bit-identically to plain `fit`
when nothing goes wrong, and a NaN batch changes no model or optimizer state (BatchNorm statistics,
seed generators, the global generators, `optimizer.iterations`) on the zoo, at several steps per
execution, under XLA, MirroredStrategy and mixed_float16, with sample and class weights."""

import os
import tempfile

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

from stable_train import errors
from stable_train.core import interfaces
from stable_train.forensics import forensics
from stable_train.keras import fit as keras_fit
from stable_train.policies import basic as policies
from stable_train.policies import clipping
from stable_train.policies import precision
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models
import test_state  # pylint: disable=g-bad-import-order
import pytest

# The zoo of real models is test_state's (one place); its subclassed model is left unbuilt here,
# so that fit builds it (the guard's set-up waits for the first trace).
BATCH = test_state.BATCH


def _subclassed():
  keras.utils.set_random_seed(0)
  return test_state.SubclassedNet()


ZOO = dict({k: test_state.ZOO[k] for k in ('convnet_bn', 'transformer', 'lstm')},
           subclassed=_subclassed)


def arrays(kind, num_batches=6, nan_weights=(), nan_pixels=(), nan_row=0):
  """test_state's zoo data as (x, y, sample_weight) arrays; a NaN sample weight (a NaN loss after
  a whole training-mode forward pass; in row `nan_row` of the batch) or a NaN pixel in the listed
  batches."""
  (x, _), y = next(iter(test_state._zoo_data(  # pylint: disable=protected-access
      kind, num_batches, nan_pixels=nan_pixels).unbatch().batch(num_batches * BATCH)))
  w = np.random.RandomState(3).uniform(0.5, 1.5, size=len(y)).astype(np.float32)
  w[[b * BATCH + nan_row for b in nan_weights]] = np.nan
  return x.numpy(), y.numpy(), w


def dataset(kind, **kwargs):
  return tf.data.Dataset.from_tensor_slices(arrays(kind, **kwargs)).batch(BATCH)


def compiled(kind, *, strategy=None, steps_per_execution=1, jit_compile=False, lr=1e-3):
  strategy = strategy or tf.distribute.get_strategy()
  with strategy.scope():
    model = ZOO[kind]() if kind in ZOO else models.mlp(input_dim=6, hidden=(8,), outputs=1)
    loss = (keras.losses.MeanSquaredError() if kind == 'mlp' else
            keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.compile(optimizer=keras.optimizers.Adam(lr), loss=loss,
                  metrics=[] if kind == 'mlp' else ['accuracy'],
                  steps_per_execution=steps_per_execution, jit_compile=jit_compile)
  return model


def whole_state(model):
  """Every model and optimizer variable, every replica's copy, as numpy (by position)."""
  strategy = model.distribute_strategy
  return [[np.array(t.numpy()) for t in
           strategy.experimental_local_results(getattr(v, 'value', v))]
          for v in list(model.variables) + list(model.optimizer.variables)]


class TestCase(parameterized.TestCase, tf.test.TestCase):
  test_session = None

  def tearDown(self):
    precision.set_precision('float32')
    super().tearDown()

  def assertSameState(self, a, b, what):
    self.assertLen(a, len(b))
    for i, (xs, ys) in enumerate(zip(a, b)):
      for x, y in zip(xs, ys):
        self.assertTrue(np.array_equal(x, y), f'variable {i} differs: {what}')


def mirrored():
  # ReductionToOneDevice: no collective instance keys that could meet other tests' (BUILD_NOTES).
  return tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'],
                                        cross_device_ops=tf.distribute.ReductionToOneDevice())


class HealthyRunTest(TestCase):
  """With nothing to skip or clip, guarded fit ends bit-identical to plain fit."""

  @parameterized.named_parameters(
      ('one_device', {}),
      ('steps_per_execution_xla', dict(steps_per_execution=4, jit_compile=True)),
      ('mirrored', dict(strategy='mirrored')), ('mixed_float16', dict(precision='mixed_float16')))
  @pytest.mark.slow
  def test_convnet_bit_identical_to_plain_fit(self, mode):
    mode = dict(mode)
    fp16 = mode.pop('precision', None) == 'mixed_float16'
    if fp16:
      precision.set_precision('mixed_float16')
    if mode.get('strategy') == 'mirrored':
      mode['strategy'] = mirrored()
    runs = []
    for guarded in (False, True):
      model = compiled('convnet_bn', **mode)
      guard = keras_fit.guard_fit(model) if guarded else None
      history = model.fit(*arrays('convnet_bn')[:2], batch_size=BATCH, epochs=2, shuffle=False,
                          validation_data=arrays('convnet_bn', num_batches=2)[:2], verbose=0)
      runs.append((whole_state(model), history.history, guard))
    (plain, plain_logs, _), (state, logs, guard) = runs
    if mode.get('jit_compile'):
      # XLA fuses the guarded step's update differently: within float rounding (here an ulp or
      # two in the Adam slots of the BatchNorm scales; the weights stayed bit-identical).
      for a, b in zip(plain, state):
        self.assertAllClose(a[0], b[0], rtol=1e-6, atol=1e-9)
      for key in ('loss', 'accuracy', 'val_loss', 'val_accuracy'):
        self.assertAllClose(plain_logs[key], logs[key], rtol=1e-6)
    else:
      self.assertSameState(plain, state, 'guarded fit vs plain fit')
      for key in ('loss', 'accuracy', 'val_loss', 'val_accuracy'):
        self.assertEqual(plain_logs[key], logs[key], key)
    self.assertEqual(logs['skipped_steps'], [0.0, 0.0])
    self.assertEqual(int(guard.state.applied_steps.numpy()), 12)
    self.assertEqual(guard.loss_scale is not None, fp16)
    # ...with the first batch's sample kept (DivergenceCheck reads it), except under a strategy.
    kept = guard.first_batch()
    if mode.get('strategy'):
      self.assertIsNone(kept)
    else:
      x, y = (a[:BATCH] for a in arrays('convnet_bn')[:2])
      self.assertAllEqual(kept[0], x)
      self.assertAllEqual(kept[1], y)

  def test_the_default_stack_s_step_is_traced_once_and_keeps_its_first_batch(self):
    # Whatever the step makes in its first trace (the optimizer's slots, the compiled metrics'
    # variables, the first batch's copy) makes Keras trace it again: the guard makes them before.
    traces = []

    class Counting(interfaces.Policy):
      def transform_loss(self, loss):
        traces.append(1)  # Python: once per trace.
        return loss

    model = compiled('mlp')
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse', metrics=['mae'])
    guard = keras_fit.guard_fit(model, policies=trainer_lib.default_policies() + [
        Counting(name='counting')])
    x = np.random.RandomState(0).normal(size=(6 * BATCH, 6)).astype(np.float32)
    y = x.sum(1, keepdims=True)
    model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
              validation_data=(x[:BATCH], y[:BATCH]), callbacks=[guard.callback()])
    self.assertLen(traces, 1)
    self.assertAllEqual(guard.first_batch_sample.value()[1], y[:BATCH])  # Unshuffled: the first.
    # Compiled again with another optimizer, the same guard: one more trace.
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss='mse', metrics=['mae'])
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[guard.callback()])
    self.assertLen(traces, 2)

  def test_a_none_in_the_data_keeps_the_first_batch(self):
    # Keras turns a None (no sample weight) into an empty Optional in its dataset and back into
    # None for the step: the first batch's copy is made from the spec as the step sees it.
    model = compiled('mlp')
    guard = keras_fit.guard_fit(model)
    x = np.random.RandomState(0).normal(size=(4 * BATCH, 6)).astype(np.float32)
    y = x.sum(1, keepdims=True)
    batches = lambda: ((x[i:i + BATCH], y[i:i + BATCH], None) for i in range(0, len(x), BATCH))
    model.fit(batches(), steps_per_epoch=4, epochs=1, verbose=0, callbacks=[guard.callback()])
    self.assertIsNone(guard.first_batch_sample.unavailable)
    self.assertAllEqual(guard.first_batch_sample.value()[1], y[:BATCH])

  def test_a_dataset_of_unknown_length_ends_its_epochs_as_keras_does(self):
    # A filter (as TFRecords, a generator): Keras learns each epoch's end from an
    # OutOfRangeError, which the guard recorded as a runtime error and an abort.
    rng = np.random.RandomState(0)
    x, y = (rng.normal(size=(5 * BATCH, n)).astype(np.float32) for n in (6, 1))
    data = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(BATCH)
    self.assertEqual(int(data.cardinality()), tf.data.UNKNOWN_CARDINALITY)
    model = compiled('mlp', steps_per_execution=3)  # 5 batches: a last execution of 2.
    guard = keras_fit.guard_fit(model)
    callback = guard.callback(model_dir=os.path.join(self.get_temp_dir(), 'run'))
    history = model.fit(data, epochs=3, verbose=0, callbacks=[callback])
    self.assertLen(history.history['loss'], 3)
    self.assertEqual(callback.last_summary['status'], 'completed')
    self.assertEqual(int(guard.state.applied_steps.numpy()), 15)

  def test_train_on_batch_returns_what_the_plain_model_returns(self):
    rng = np.random.RandomState(0)
    x, y = (rng.normal(size=(BATCH, n)).astype(np.float32) for n in (6, 1))
    for metrics in (['mae'], None):
      model = compiled('mlp')
      model.compile(optimizer='adam', loss='mse', metrics=metrics)
      plain = model.train_on_batch(x, y)
      keras_fit.guard_fit(model)
      guarded = model.train_on_batch(x, y)
      self.assertEqual(np.shape(guarded), np.shape(plain))  # `loss, mae = ...` still unpacks.
      logs = model.train_on_batch(x, y, return_dict=True)
      self.assertEqual(logs['skipped_steps'], 0.0)  # The dict keeps the guard's logs.
      self.assertIn('skipped_steps', model.train_on_batch(x, y, None, None, True))  # Positional.

  def test_the_logs_show_skips_grad_norm_and_clipped_steps(self):
    model = compiled('mlp', lr=1e-2)
    keras_fit.guard_fit(model, policies=[policies.ClipByGlobalNorm(max_norm=1e-3),
                                     policies.SkipNonFinite()])
    rng = np.random.RandomState(0)
    x, y = rng.normal(size=(32, 6)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32)
    x[9] = np.nan  # Batch 2 of 4.
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    self.assertEqual(history.history['skipped_steps'], [1.0, 2.0])  # The run's total so far.
    self.assertEqual(history.history['clipped_steps'], [3.0, 6.0])  # Every applied step.
    self.assertTrue(np.all(np.isfinite(history.history['grad_norm'])))
    self.assertGreater(history.history['grad_norm'][-1], 1e-3)  # Before the clip.
    self.assertEqual(int(model.optimizer.iterations.numpy()), 6)
    self.assertTrue(np.isfinite(history.history['loss']).all())  # The NaN batch never counted.


class SkippedStepChangesNothingTest(TestCase):

  def _check(self, model, kind, callbacks=(), **poison):
    poison = poison or dict(nan_weights=[0])
    model.fit(dataset(kind).take(2), shuffle=False, verbose=0, callbacks=list(callbacks))
    before = whole_state(model)
    steps = int(model.optimizer.iterations.numpy())
    names = [v.path for v in model.non_trainable_variables]
    self.assertTrue(any('seed_generator' in n for n in names), names)  # Dropout state exists.
    history = model.fit(dataset(kind, **poison).take(1), shuffle=False, verbose=0,
                        callbacks=list(callbacks))
    self.assertEqual(history.history['skipped_steps'], [1.0])
    self.assertSameState(before, whole_state(model), 'a skipped step')
    # The first batch's sample (the default stack's DivergenceCheck) is no state the skip keeps.
    guard = model.train_step.__self__
    self.assertEqual(guard.first_batch() is None, guard.strategy.num_replicas_in_sync > 1)
    self.assertEqual(int(model.optimizer.iterations.numpy()), steps)
    model.fit(dataset(kind).skip(2).take(2), shuffle=False, verbose=0,  # The state moves on.
              callbacks=list(callbacks))
    moved = whole_state(model)
    forward = [i for i, v in enumerate(model.variables) if not v.trainable]
    self.assertTrue(any(not np.array_equal(before[i][0], moved[i][0]) for i in forward))

  @parameterized.named_parameters(*[(k, k) for k in ZOO])
  @pytest.mark.slow
  def test_zoo_at_three_steps_per_execution(self, kind):
    model = compiled(kind, steps_per_execution=3)
    keras_fit.guard_fit(model)
    self._check(model, kind)

  @parameterized.named_parameters(('convnet_bn', 'convnet_bn'), ('transformer', 'transformer'))
  @pytest.mark.slow
  def test_xla(self, kind):
    model = compiled(kind, jit_compile=True)
    keras_fit.guard_fit(model)
    self._check(model, kind)

  @pytest.mark.slow
  def test_convnet_mirrored_with_a_nan_input(self):
    model = compiled('convnet_bn', strategy=mirrored())
    keras_fit.guard_fit(model,
                        policies=trainer_lib.default_policies() + [policies.ValidateInputs()])
    self._check(model, 'convnet_bn', nan_pixels=[0])

  @pytest.mark.slow
  def test_convnet_mirrored_with_a_nan_loss_on_the_second_replica_only(self):
    # The first replica's own loss and gradients are finite: the aggregated verdict skips both,
    # and both put back what their forward pass assigned.
    model = compiled('convnet_bn', strategy=mirrored())
    keras_fit.guard_fit(model)
    self._check(model, 'convnet_bn', nan_weights=[0], nan_row=BATCH - 1)

  @pytest.mark.slow
  def test_convnet_mixed_float16_through_the_loss_scale_optimizer(self):
    precision.set_precision('mixed_float16')
    model = compiled('convnet_bn', steps_per_execution=2)
    self.assertIsInstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    guard = keras_fit.guard_fit(model)
    self._check(model, 'convnet_bn')
    # The guard scales with the wrapper's own variables and applies through its inner optimizer.
    self.assertIs(guard.loss_scale.scale, model.optimizer.dynamic_scale)
    self.assertEqual(int(model.optimizer.step_counter.numpy()), 4)  # Applied steps, as Keras.

  @parameterized.named_parameters(('convnet_bn_mixed_float16', 'convnet_bn', 'mixed_float16'),
                                  ('transformer', 'transformer', 'float32'))
  @pytest.mark.slow
  def test_the_default_forensics_investigates_and_the_skip_still_changes_nothing(self, kind,
                                                                                 policy):
    precision.set_precision(policy)
    model = compiled(kind)
    guard = keras_fit.guard_fit(model)
    [spare] = [p for p in guard.policies if isinstance(p, forensics.Forensics)]
    model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
    self._check(model, kind, callbacks=[guard.callback(model_dir=model_dir)])
    self.assertTrue(spare.active)  # It re-ran the skipped step's batch on the state before it.
    self.assertEqual(os.listdir(os.path.join(model_dir, 'forensics')), ['step_3'])

  def test_an_fp16_overflow_halves_the_wrappers_scale_and_changes_nothing_else(self):
    precision.set_precision('mixed_float16')
    model = models.mlp(input_dim=6, hidden=(8,), outputs=1)
    model.compile(loss='mse', optimizer=keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam(1e-3), initial_scale=2.0**24))  # Overflows float16 at once.
    guard = keras_fit.guard_fit(model)
    model.optimizer.build(model.trainable_variables)
    before = whole_state(model)
    x, y = np.ones([8, 6], np.float32), np.ones([8, 1], np.float32)
    history = model.fit(x, y, batch_size=BATCH, verbose=0)
    self.assertEqual(history.history['skipped_steps'], [1.0])
    self.assertEqual(float(model.optimizer.dynamic_scale.numpy()), 2.0**23)
    after = whole_state(model)
    scale_index = [i for i, v in enumerate(list(model.variables) + list(model.optimizer.variables))
                   if v is model.optimizer.dynamic_scale]
    self.assertSameState([s for i, s in enumerate(before) if i not in scale_index],
                         [s for i, s in enumerate(after) if i not in scale_index], 'an overflow')
    self.assertEqual(int(guard.state.overflow_steps.numpy()), 1)

  @pytest.mark.slow
  def test_a_nan_batch_mid_execution_trains_like_no_such_batch(self):
    """[0, 1, 2, NaN, 3, 4] at 3 steps per execution ends exactly like [0, 1, 2, 3, 4]: the
    dropout seeds and BatchNorm statistics of the skipped step are put back, and class weights
    are applied as fit applies them."""
    x, y, _ = arrays('convnet_bn')
    states = []
    for bad in (True, False):
      xs, ys = (x, y) if bad else (np.delete(x, range(24, 32), 0), np.delete(y, range(24, 32), 0))
      if bad:
        xs = xs.copy()
        xs[24:32] = np.nan
      model = compiled('convnet_bn', steps_per_execution=3)
      keras_fit.guard_fit(model)
      history = model.fit(xs, ys, batch_size=BATCH, shuffle=False, verbose=0,
                          class_weight={0: 1.0, 1: 2.0, 2: 0.5, 3: 1.0})
      self.assertEqual(history.history['skipped_steps'], [1.0 if bad else 0.0])
      states.append(whole_state(model))
    self.assertSameState(states[0], states[1], 'a run with a skipped batch vs one without it')

  @pytest.mark.slow
  def test_a_skip_puts_the_global_generators_back(self):
    """[ok, NaN, ok, ok] trains exactly like [ok, ok, ok] with a layer that draws from Keras's
    global generator (keras.random.* without a seed)."""

    def run(bad):
      keras.utils.set_random_seed(0)
      model = keras.Sequential([keras.Input(test_state.IMAGE), keras.layers.Flatten(),
                                test_state.GlobalNoise(), keras.layers.Dense(3)])
      model.compile(optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
      keras_fit.guard_fit(model)
      x, y, _ = arrays('convnet_bn', num_batches=4, nan_pixels=[1] if bad else [])
      if not bad:
        x, y = np.delete(x, range(BATCH, 2 * BATCH), 0), np.delete(y, range(BATCH, 2 * BATCH), 0)
      model.fit(x, y % 3, batch_size=BATCH, shuffle=False, verbose=0)
      return [v.numpy() for v in model.trainable_variables]

    for a, b in zip(run(True), run(False)):
      np.testing.assert_array_equal(a, b)


class TwoOutputsTest(TestCase):

  @pytest.mark.slow
  def test_a_skipped_batch_enters_neither_output_loss(self):
    """A model with two outputs and two weighted losses: Keras updates each loss's mean in
    `compute_loss`, before the verdict. [0, 1, NaN, 2, 3] guarded ends as plain fit of
    [0, 1, 2, 3]: the state, and `loss`, `cls_loss` and `reg_loss` in the logs."""
    x, y, _ = arrays('convnet_bn', num_batches=5)
    reg = np.random.RandomState(1).normal(size=(len(y), 1)).astype(np.float32)
    runs = []
    for guarded in (False, True):
      keras.utils.set_random_seed(0)
      inputs = keras.Input(test_state.IMAGE)
      h = keras.layers.Dense(8, activation='relu')(keras.layers.Flatten()(inputs))
      h = keras.layers.Dropout(0.2)(keras.layers.BatchNormalization()(h))
      model = keras.Model(inputs, {'cls': keras.layers.Dense(test_state.CLASSES, name='cls')(h),
                                   'reg': keras.layers.Dense(1, name='reg')(h)})
      model.compile(optimizer=keras.optimizers.Adam(1e-2), steps_per_execution=2,
                    loss={'cls': keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          'reg': 'mse'}, loss_weights={'cls': 1.0, 'reg': 0.5})
      xs, ys = x.copy(), {'cls': y, 'reg': reg}
      if guarded:
        keras_fit.guard_fit(model)
        xs[2 * BATCH:3 * BATCH] = np.nan
      else:
        drop = lambda a: np.delete(a, range(2 * BATCH, 3 * BATCH), 0)
        xs, ys = drop(xs), {'cls': drop(y), 'reg': drop(reg)}
      history = model.fit(xs, ys, batch_size=BATCH, shuffle=False, verbose=0).history
      runs.append((whole_state(model), history))
    (plain, plain_logs), (state, logs) = runs
    self.assertEqual(logs['skipped_steps'], [1.0])
    for key in ('loss', 'cls_loss', 'reg_loss'):
      self.assertTrue(np.isfinite(logs[key][0]), key)
      self.assertEqual(plain_logs[key], logs[key], key)
    self.assertSameState(plain, state, 'guarded with a NaN batch vs plain fit without it')


class SampleWeightsTest(TestCase):

  @pytest.mark.slow
  def test_sample_weights_train_as_plain_fit_and_a_nan_weight_is_skipped(self):
    x, y, w = arrays('convnet_bn', num_batches=4)
    states = []
    for guarded in (False, True):
      model = compiled('convnet_bn')
      if guarded:
        keras_fit.guard_fit(model)
      model.fit(x, y, sample_weight=w, batch_size=BATCH, shuffle=False, verbose=0)
      states.append(whole_state(model))
    self.assertSameState(states[0], states[1], 'sample weights: guarded vs plain fit')
    bad = w.copy()
    bad[0] = np.nan
    history = model.fit(x[:BATCH], y[:BATCH], sample_weight=bad[:BATCH], batch_size=BATCH,
                        verbose=0)
    self.assertEqual(history.history['skipped_steps'], [1.0])
    self.assertSameState(states[1], whole_state(model), 'a NaN sample weight')


class SparseLabelsTest(TestCase):
  """A sparse label outside the model's classes fails its batch's input check, as in the Trainer:
  the batch is skipped (on CPU the loss would raise and end fit)."""

  @parameterized.named_parameters(('name', 'sparse_categorical_crossentropy'),
                                  ('object', 'object'), ('sequential_spe', 'spe'))
  def test_a_label_out_of_range_skips_its_batch(self, loss):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    loss_fn = (keras.losses.SparseCategoricalCrossentropy(from_logits=True)
               if loss != 'sparse_categorical_crossentropy' else loss)
    model.compile(optimizer='adam', loss=loss_fn, metrics=['accuracy'],
                  steps_per_execution=3 if loss == 'spe' else 1)
    guard = keras_fit.guard_fit(model)
    x = np.random.RandomState(0).normal(size=(24, 6)).astype(np.float32)
    y = np.arange(24, dtype=np.int32) % 3
    y[9] = 3  # Batch 2 of 3.
    logs = model.fit(x, y, batch_size=8, shuffle=False, verbose=0,
                     callbacks=[guard.callback()]).history
    self.assertEqual(logs['skipped_steps'], [1.0])
    self.assertEqual(int(guard.state.input_faults.numpy()), 1)
    self.assertEqual(int(model.optimizer.iterations.numpy()), 2)
    self.assertTrue(all(np.all(np.isfinite(w)) for w in model.get_weights()))


class EnergyNet(keras.Model):
  """Forces as the negative gradient of a learnt energy, taken inside `call`: Keras cannot run
  it on symbolic tensors (the inner gradient is None there), so plain `fit`, with no strategy,
  builds it in its first trace; the guard must too."""

  def __init__(self, negate=lambda g: -g, head=False, **kwargs):
    super().__init__(**kwargs)
    self.hidden, self.energy = keras.layers.Dense(8, activation='tanh'), keras.layers.Dense(1)
    self.negate, self.head = negate, keras.layers.Dense(3) if head else None

  def call(self, positions, training=False):
    positions = tf.convert_to_tensor(positions)
    with tf.GradientTape() as tape:
      tape.watch(positions)
      energy = tf.reduce_sum(self.energy(self.hidden(positions)))
    # Symbolically the gradient is None: Keras reports -None as a RuntimeError, tf.negative(None)
    # as a ValueError.
    forces = self.negate(tape.gradient(energy, positions))
    return self.head(forces) if self.head else forces


class SymbolicBuildTest(TestCase):

  @parameterized.named_parameters(('minus', lambda g: -g), ('tf_negative', tf.negative))
  def test_a_model_keras_cannot_run_symbolically_trains_as_plain_fit_does(self, negate):
    x = np.random.RandomState(0).normal(size=(24, 3)).astype(np.float32)
    y = -0.5 * x
    weights = []
    for guarded in (False, True):
      keras.utils.set_random_seed(0)
      model = EnergyNet(negate)
      model(x[:1])  # Built, as Keras's message asks; its optimizer is not.
      model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse')
      callbacks = [keras_fit.guard_fit(model).callback()] if guarded else []
      model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=callbacks)
      self.assertEqual(int(model.optimizer.iterations.numpy()), 6)
      weights.append(model.get_weights())
    for plain, guarded in zip(*weights):
      self.assertAllClose(plain, guarded, rtol=1e-5, atol=1e-6)

  def test_such_a_model_not_built_first_is_a_one_line_error_naming_the_fix(self):
    model = EnergyNet(head=True)  # The head is built only where the forces are not None.
    model.compile(optimizer='adam', loss='mse')
    x = np.zeros((8, 3), np.float32)
    with self.assertRaisesRegex(errors.ConfigError, r'^[^\n]*model\(x\[:1\]\)$'):
      model.fit(x, x, verbose=0, callbacks=[keras_fit.guard_fit(model).callback()])


class GuardArgumentsTest(TestCase):

  def test_what_cannot_be_guarded_is_a_one_line_config_error(self):
    with self.assertRaisesRegex(errors.ConfigError, 'compile the model first'):
      keras_fit.guard_fit(models.mlp(input_dim=4, hidden=(4,)))
    with self.assertRaisesRegex(errors.ConfigError, 'must be a keras.Model'):
      keras_fit.guard_fit(lambda x: x)

    class OwnStep(keras.Model):
      def train_step(self, data):
        return {}

    model = OwnStep()
    model.compile(optimizer='sgd', loss='mse')
    with self.assertRaisesRegex(errors.ConfigError, 'overrides train_step.*compute_loss'):
      keras_fit.guard_fit(model)
    model = compiled('mlp', jit_compile=True)
    keras_fit.guard_fit(model, policies=[forensics.Forensics()])
    with self.assertRaisesRegex(errors.ConfigError, r"\['forensics'\] need a step outside XLA"):
      model.fit(np.ones([8, 6], np.float32), np.ones([8, 1], np.float32), verbose=0)

  def test_a_second_guard_takes_over_and_policies_belong_to_one_guard(self):
    model = compiled('mlp')
    clip = clipping.AdaptiveClip()
    keras_fit.guard_fit(model, policies=[clip])
    with self.assertRaisesRegex(errors.ConfigError, 'already belongs to another'):
      keras_fit.guard_fit(compiled('mlp'), policies=[clip])
    second = keras_fit.guard_fit(model, policies=[policies.SkipNonFinite()])
    model.fit(np.ones([8, 6], np.float32), np.ones([8, 1], np.float32), verbose=0)
    self.assertEqual(int(second.state.applied_steps.numpy()), 1)
    self.assertEqual(int(clip.count.numpy()), 0)  # The first guard's step is gone.


  @pytest.mark.slow
  def test_a_guard_after_a_fit_guards_the_next_fit(self):
    """fit caches its train function: a guard after a plain fit, or a second guard after a
    guarded fit, would otherwise leave the old step running and its own reports empty."""
    model = compiled('mlp')
    x, y = np.ones([8, 6], np.float32), np.ones([8, 1], np.float32)
    model.fit(x, y, verbose=0)
    first = keras_fit.guard_fit(model)
    logs = model.fit(x, y, verbose=0).history
    self.assertIn('skipped_steps', logs)
    self.assertEqual(int(first.state.applied_steps.numpy()), 1)
    second = keras_fit.guard_fit(model)
    model.fit(x, y, verbose=0)
    self.assertEqual(int(second.state.applied_steps.numpy()), 1)
    self.assertEqual(int(first.state.applied_steps.numpy()), 1)

if __name__ == '__main__':
  tf.test.main()
