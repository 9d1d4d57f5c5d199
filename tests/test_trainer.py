"""Tests for stable_train.trainer.trainer: the guarded step, the in-graph loop, checkpoints and resume."""

import json
import os
import signal

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import errors
from stable_train.policies import basic as policies
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events
from stable_train.trainer import trainer as trainer_lib

FEATURES = 16


def make_data(num_batches=64, batch_size=8, poison=(), seed=0, scale=1.0):
  """A finite dataset of `num_batches` batches; batches in `poison` get one NaN feature."""
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(num_batches * batch_size, FEATURES)).astype(np.float32) * scale
  y = (x[:, :1] * 0.5 + 0.1).astype(np.float32)
  for b in poison:
    x[b * batch_size, 0] = np.nan
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def make_model(seed=1, name='net'):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([
      keras.Input((FEATURES,)),
      keras.layers.Dense(8, activation='relu', name='dense_0'),
      keras.layers.Dense(1, name='dense_1'),
  ], name=name)


def make_trainer(model_dir=None, policies_=None, steps_per_loop=1, jit=False, lr=1e-2, loss=None,
                 cls=trainer_lib.Trainer, model=None, **kwargs):
  return cls(model=model or make_model(), optimizer=keras.optimizers.Adam(lr),
             loss=loss or keras.losses.MeanSquaredError(), policies=policies_,
             model_dir=model_dir, steps_per_loop=steps_per_loop, jit_compile=jit, **kwargs)


def state(trainer):
  """Every model and optimizer variable, by path (the optimizer's own name prefix dropped, since
  Keras numbers optimizers per process)."""
  values = {v.path: np.array(v.numpy()) for v in trainer.model.variables}
  values.update({'optimizer/' + v.path.split('/', 1)[1]: np.array(v.numpy())
                 for v in trainer.optimizer.variables})
  return values


def assert_bit_identical(test, before, after):
  test.assertEqual(sorted(before), sorted(after))
  for k in before:
    test.assertTrue(np.array_equal(before[k], after[k]), f'{k} changed')


class SqrtScale(keras.layers.Layer):
  """Multiplies its input by sqrt(scale); with scale = 0 only d/d(scale) is infinite."""

  def build(self, input_shape):
    self.scale = self.add_weight(shape=(), initializer='zeros', name='scale')

  def call(self, x):
    return x * tf.sqrt(self.scale)


class ZeroNaN(keras.layers.Layer):
  """Maps NaN to 0. Whether ReLU does that depends on the CPU's kernels (oneDNN picks them per
  instruction set: on an AMD EPYC with AVX2, relu(NaN) is NaN); this layer does it on any CPU."""

  def call(self, x):
    return tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)


def make_nan_model(*, swallow, seed=1):
  """make_model's shape with what a NaN input does pinned. dense_0 is linear; with `swallow` then
  ZeroNaN and a ReLU: the NaN stops there, the loss stays finite, and dense_0's kernel gradient
  (the input times a zero delta: NaN * 0) is the only NaN gradient. Without: the NaN reaches the
  loss."""
  keras.utils.set_random_seed(seed)
  middle = [ZeroNaN(name='zero_nan'), keras.layers.ReLU(name='relu')] if swallow else []
  return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, name='dense_0'),
                           *middle, keras.layers.Dense(1, name='dense_1')], name='net')


class ValidationTest(tf.test.TestCase):

  def test_bad_arguments(self):
    good = dict(model=make_model(), optimizer=keras.optimizers.Adam(), loss=keras.losses.MeanSquaredError(),
                model_dir=None)
    cases = [
        ('steps_per_loop', 0), ('steps_per_loop', 2.5), ('checkpoint_every', -1),
        ('model', None), ('optimizer', 'adamm'), ('optimizer', 3), ('loss', 3), ('loss', 'msee'),
        ('policies', ['clip']),
        ('jit_compile', 'yes'), ('log_every', 0),
    ]
    for name, value in cases:
      with self.assertRaises(errors.ConfigError) as ctx:
        trainer_lib.Trainer(**dict(good, **{name: value}))
      self.assertIn(name, str(ctx.exception))
    with self.assertRaises(TypeError):
      trainer_lib.Trainer(make_model(), keras.optimizers.Adam(), 'mse')  # Keyword-only.

  def test_duplicate_policy_names(self):
    with self.assertRaisesRegex(errors.ConfigError, 'unique'):
      make_trainer(policies_=[policies.SkipNonFinite(), policies.SkipNonFinite()])

  def test_library_misuse_is_a_one_line_config_error(self):
    good = dict(model=make_model(), optimizer=keras.optimizers.Adam(),
                loss=keras.losses.MeanSquaredError(), model_dir=None)
    cases = [('policies', policies.SkipNonFinite(), 'must be a list'),
             ('policies', 'skip', 'must be a list'),
             ('optimizer', keras.optimizers.Adam, r'is a class; pass an instance'),
             ('loss', keras.losses.MeanSquaredError, r'is a class; pass an instance'),
             ('model', keras.Sequential, r'is a class; pass an instance')]
    for name, value, text in cases:
      with self.assertRaisesRegex(errors.ConfigError, f'{name}=.*{text}'):
        trainer_lib.Trainer(**dict(good, **{name: value}))

  def test_an_optimizer_built_for_another_model_is_refused(self):
    optimizer = keras.optimizers.Adam()
    trainer_lib.Trainer(model=make_model(), optimizer=optimizer, policies=[],
                        loss=keras.losses.MeanSquaredError(), model_dir=None).fit(
                            make_data(num_batches=1), num_steps=1)
    second = trainer_lib.Trainer(model=make_model(), optimizer=optimizer, policies=[],
                                 loss=keras.losses.MeanSquaredError(), model_dir=None)
    with self.assertRaisesRegex(errors.ConfigError, 'already built for another model'):
      second.fit(make_data(num_batches=1), num_steps=1)

  def test_a_policy_of_another_trainer_is_refused(self):
    skip = policies.SkipNonFinite(max_consecutive=100)
    first = make_trainer(policies_=[skip])
    first.fit(make_data(num_batches=4, poison=[1, 2]), num_steps=4)
    self.assertEqual(int(skip.total_skips.numpy()), 2)
    with self.assertRaisesRegex(errors.ConfigError,
                                "policy 'skip_non_finite' .*already belongs to another run"):
      make_trainer(policies_=[policies.ClipByGlobalNorm(), skip])
    # A Trainer that failed validation claims nothing: its fresh policies stay usable.
    clip = policies.ClipByGlobalNorm()
    with self.assertRaises(errors.ConfigError):
      make_trainer(policies_=[clip, policies.SkipNonFinite(), policies.SkipNonFinite()])
    make_trainer(policies_=[clip])

  @pytest.mark.slow
  def test_an_empty_dataset_is_named(self):
    # The library trains nothing and says so (the CLI makes it exit 2); `fit(ds.take(0))` is
    # also how tests build everything without a step.
    empty = make_data(num_batches=1, batch_size=8).unbatch().batch(16, drop_remainder=True)
    summary = make_trainer(model_dir=self.get_temp_dir()).fit(empty, num_steps=5)
    self.assertEqual((summary['global_step'], summary['note']), (0, 'dataset empty'))
    summary = make_trainer().fit(make_data(num_batches=3), num_steps=5)  # Ends, not empty.
    self.assertEqual((summary['status'], summary['global_step'], summary['reason']),
                     ('data_exhausted', 3, 'dataset exhausted at step 3 of 5'))
    unbuilt = keras.Sequential([keras.layers.Dense(1)])
    with self.assertRaisesRegex(errors.ConfigError, 'dataset is empty'):
      trainer_lib.Trainer(model=unbuilt, optimizer=keras.optimizers.Adam(),
                          loss=keras.losses.MeanSquaredError(), model_dir=None).fit(
                              empty, num_steps=5)

  @pytest.mark.slow
  def test_a_changed_batch_size_is_named(self):
    model_dir = self.get_temp_dir()
    batched = lambda size: make_data().unbatch().batch(size, drop_remainder=True)  # Static shapes.
    make_trainer(model_dir=model_dir, checkpoint_every=2).fit(batched(8), num_steps=4)
    with self.assertRaisesRegex(errors.ConfigError,
                                r'input pipeline differs .*checkpointed batches \[8,16\], this pipeline \[4,16\]'):
      make_trainer(model_dir=model_dir).fit(batched(4), num_steps=8)

  def test_fit_arguments(self):
    t = make_trainer()
    with self.assertRaisesRegex(errors.ConfigError, 'num_steps'):
      t.fit(make_data(), num_steps=0)
    with self.assertRaisesRegex(errors.ConfigError, 'dataset'):
      t.fit([1, 2], num_steps=3)

  def test_a_numpy_dataset_is_described_not_dumped(self):
    x = np.arange(1000 * 64, dtype=np.float32).reshape(1000, 64)
    for data, what in ((x, r'a numpy array of shape \(1000, 64\) \(float32\)'),
                       ((x, x[:, 0]), r'a tuple of 2 \(a numpy array of shape \(1000, 64\)')):
      with self.assertRaisesRegex(errors.ConfigError, f'must be a tf.data.Dataset, got {what}.*'
                                  r'from_tensor_slices\(\(x, y\)\)') as ctx:
        make_trainer().fit(data, num_steps=3)
      message = str(ctx.exception)
      self.assertLess(len(message), 400, message)
      self.assertNotIn('63999', message)  # None of the array's values.
    with self.assertRaisesRegex(errors.ConfigError, 'eval_dataset must be a tf.data.Dataset, got '
                                r'a numpy array of shape \(1000, 64\)'):
      make_trainer().fit(make_data(), num_steps=3, eval_dataset=x)

  def test_a_second_fit_to_a_step_reached_says_so_and_trains_nothing(self):
    t = make_trainer()
    t.fit(make_data(), num_steps=4)
    with self.assertLogs('stable_train', level='WARNING') as logs:
      summary = t.fit(make_data(), num_steps=4)
    self.assertEqual(summary['steps_this_run'], 0)
    self.assertIn('fit(num_steps=4) trains nothing: the run is at step 4 already (num_steps is '
                  'the global step to stop at); pass num_steps=8 to train 4 more', logs.output[0])
    summary = t.fit(make_data(), num_steps=8)  # As the warning says: 4 more.
    self.assertEqual((summary['steps_this_run'], summary['global_step']), (4, 8))


class SkipTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('graph', False), ('xla', True))
  @pytest.mark.slow
  def test_skipped_step_leaves_model_and_optimizer_bit_identical(self, jit):
    t = make_trainer(jit=jit)
    t.fit(make_data(num_batches=3), num_steps=3)  # Adam slots and iterations now non-zero.
    before = state(t)
    self.assertEqual(int(t.optimizer.iterations.numpy()), 3)
    summary = t.fit(make_data(num_batches=1, poison=[0]), num_steps=4)
    assert_bit_identical(self, before, state(t))
    self.assertEqual(summary['global_step'], 4)
    self.assertEqual(summary['applied_steps'], 3)
    self.assertEqual(summary['skipped_steps'], 1)
    skip = t.policies[2]
    self.assertEqual(int(skip.total_skips.numpy()), 1)
    self.assertEqual(int(skip.consecutive_skips.numpy()), 1)
    # And a healthy step afterwards does apply.
    t.fit(make_data(num_batches=1, seed=5), num_steps=5)
    self.assertFalse(np.array_equal(before['net/dense_1/kernel'], state(t)['net/dense_1/kernel']))
    self.assertEqual(int(skip.consecutive_skips.numpy()), 0)

  def test_first_offending_variable_is_named(self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4, name='dense_0'),
                              SqrtScale(name='sqrt_scale'), keras.layers.Dense(1, name='dense_1')],
                             name='net')
    model_dir = self.get_temp_dir()
    t = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.SGD(0.1),
                            loss=keras.losses.MeanSquaredError(), model_dir=model_dir)
    with self.assertLogs('stable_train', level='WARNING') as logs:
      summary = t.fit(make_data(num_batches=2), num_steps=2)
    self.assertEqual(summary['skipped_steps'], 2)
    skips = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
             if e['event'] == 'skip']
    self.assertEqual(len(skips), 2)
    # dense_0's gradient is finite (0 * finite); the first non-finite one is sqrt_scale's.
    self.assertEqual(skips[0]['tensor'], 'gradient of net/sqrt_scale/scale')
    self.assertEqual(skips[0]['fault'], 'gradient')
    self.assertTrue(any('net/sqrt_scale/scale' in line for line in logs.output))

  def _unchecked_inputs(self):
    """The default stack with the input finiteness check off: the NaN reaches the model."""
    stack = trainer_lib.default_policies()
    stack[0] = policies.CheckNumerics(check_inputs=False)
    return stack

  def test_nan_input_is_an_input_fault_with_the_default_stack(self):
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, model=make_nan_model(swallow=True))
    summary = t.fit(make_data(num_batches=3, poison=[1]), num_steps=3)
    self.assertEqual(summary['skipped_steps'], 1)
    skip = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
            if e['event'] == 'skip'][0]
    self.assertEqual((skip['step'], skip['fault'], skip['tensor']), (2, 'input', 'input features'))

  def test_nan_batches_one_in_ten_are_the_data_s_fault_not_the_model_s(self):
    # With the defaults: skipped as input faults, good checkpoints all along, bad input named.
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, steps_per_loop=10, checkpoint_every=20,
                     healthy_window=5)
    summary = t.fit(make_data(num_batches=60, poison=range(5, 60, 10)), num_steps=60)
    self.assertEqual((summary['status'], summary['skipped_steps']), ('completed', 6))
    marks = [(e['step'], e['good']) for e in events.read_events(os.path.join(
        model_dir, 'events.jsonl')) if e['event'] == 'checkpoint']
    self.assertEqual(marks, [(20, True), (40, True), (60, True)])
    self.assertEqual((summary['diagnosis']['cause'], summary['diagnosis']['confidence']),
                     ('bad_input', 'high'))

  @pytest.mark.slow
  def test_nan_input_names_the_gradient_when_the_loss_stays_finite(self):
    # The NaN stops at ZeroNaN: the loss is finite, dense_0's kernel gradient is NaN.
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, model=make_nan_model(swallow=True),
                     policies_=self._unchecked_inputs())
    summary = t.fit(make_data(num_batches=3, poison=[1]), num_steps=3)
    self.assertEqual(summary['skipped_steps'], 1)
    skip = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
            if e['event'] == 'skip'][0]
    self.assertEqual(skip['step'], 2)
    self.assertEqual(skip['fault'], 'gradient')
    self.assertEqual(skip['tensor'], 'gradient of net/dense_0/kernel')

  def test_nan_input_that_reaches_the_loss_names_the_loss_then_the_gradient(self):
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, model=make_nan_model(swallow=False),
                     policies_=self._unchecked_inputs())
    summary = t.fit(make_data(num_batches=3, poison=[1]), num_steps=3)
    self.assertEqual(summary['skipped_steps'], 1)
    skip = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
            if e['event'] == 'skip'][0]
    self.assertEqual(skip['step'], 2)
    self.assertEqual(skip['fault'], 'loss')
    self.assertEqual(skip['tensor'], 'loss (model outputs already non-finite); '
                                     'first non-finite gradient of net/dense_0/kernel')

  @parameterized.named_parameters(('graph', False), ('xla', True))
  @pytest.mark.slow
  def test_huge_but_finite_gradients_are_clipped_not_skipped(self, jit):
    huge = lambda y, p: 1e25 * tf.reduce_mean(tf.square(y - p))
    t = make_trainer(loss=huge, jit=jit, lr=1e-3)
    summary = t.fit(make_data(num_batches=3), num_steps=3)
    self.assertEqual(summary['applied_steps'], 3)
    self.assertEqual(summary['skipped_steps'], 0)
    self.assertTrue(all(np.isfinite(v).all() for v in state(t).values()))

  def test_consecutive_skips_escalate_to_abort(self):
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, steps_per_loop=2,
                     policies_=[policies.ClipByGlobalNorm(max_norm=1.0), policies.SkipNonFinite(max_consecutive=3)])
    summary = t.fit(make_data(num_batches=10, poison=range(10)), num_steps=10)
    self.assertEqual(summary['status'], 'aborted')
    self.assertIn('4 consecutive non-finite steps (limit 3)', summary['reason'])
    self.assertEqual(summary['global_step'], 4)
    self.assertEqual(summary['applied_steps'], 0)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      written = json.load(f)
    self.assertEqual((written['status'], written['optimizer']), ('aborted', 'Adam'))
    kinds = [e['event'] for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))]
    # The first loop's skips start an episode (its `history`); a troubled run ends diagnosed.
    self.assertEqual(kinds, ['start', 'skip', 'skip', 'history', 'skip', 'skip', 'abort',
                             'diagnosis'])

  def test_without_skip_policy_a_nan_update_is_applied(self):
    # The control: what SkipNonFinite prevents.
    t = make_trainer(policies_=[])
    t.fit(make_data(num_batches=1, poison=[0]), num_steps=1)
    self.assertFalse(np.isfinite(state(t)['net/dense_0/kernel']).all())


class CheckNumericsRaiseTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('graph', False), ('xla', True))
  @pytest.mark.slow
  def test_raise_mode_stops_with_named_tensor(self, jit):
    # The loss stays finite (ZeroNaN): the one non-finite tensor is dense_0's kernel gradient.
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, jit=jit, steps_per_loop=2,
                     model=make_nan_model(swallow=True),  # The NaN reaches the model:
                     policies_=[policies.CheckNumerics(mode='raise', check_inputs=False),
                                policies.SkipNonFinite()])
    t.fit(make_data(num_batches=2), num_steps=2)
    before = state(t)
    with self.assertRaises(errors.NumericsError) as ctx:
      t.fit(make_data(num_batches=2, poison=[0]), num_steps=4)
    message = str(ctx.exception)
    self.assertIn('gradient of net/dense_0/kernel', message)
    self.assertIn('step 3', message)
    self.assertEqual(len(message.splitlines()), 1)
    assert_bit_identical(self, before, state(t))  # The faulty update was never applied.
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['status'], 'aborted')


class LoopTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_steps_per_loop_gives_the_same_result(self):
    results = []
    for k in (1, 4):
      t = make_trainer(steps_per_loop=k)
      summary = t.fit(make_data(num_batches=20, poison=[5, 6]), num_steps=10)
      results.append((summary, state(t)))
    (s1, v1), (s4, v4) = results
    for key in ('global_step', 'applied_steps', 'skipped_steps'):
      self.assertEqual(s1[key], s4[key])
    self.assertEqual(s1['skipped_steps'], 2)
    for k in v1:
      self.assertAllClose(v1[k], v4[k], rtol=1e-6, atol=1e-7)

  def test_no_retracing_per_step_or_loop(self):
    t = make_trainer(steps_per_loop=3)
    t.fit(make_data(num_batches=20), num_steps=10)  # Loops of 3, 3, 3 and 1 steps.
    t.fit(make_data(num_batches=20, seed=3), num_steps=17)
    self.assertEqual(t.controller.loop.loop_fn.experimental_get_tracing_count(), 1)  # pylint: disable=protected-access

  def test_dataset_end_stops_the_run(self):
    t = make_trainer(steps_per_loop=4)
    with self.assertLogs('stable_train', level='WARNING') as logs:
      summary = t.fit(make_data(num_batches=6), num_steps=100)
    self.assertEqual(summary['status'], 'data_exhausted')
    self.assertEqual(summary['global_step'], 6)
    self.assertEqual(summary['reason'], 'dataset exhausted at step 6 of 100')
    self.assertNotIn('note', summary)
    self.assertTrue(any('dataset exhausted at step 6 of 100' in l for l in logs.output))

  def test_dict_batches_and_plain_module_model(self):

    class Linear(tf.Module):

      def __init__(self):
        super().__init__(name='linear')
        self.w = tf.Variable(tf.zeros([FEATURES, 1]), name='w')

      def __call__(self, x):
        return tf.matmul(x['x'], self.w)

    ds = make_data(num_batches=4).map(lambda x, y: {'x': x, 'labels': y})
    t = trainer_lib.Trainer(model=Linear(), optimizer=keras.optimizers.SGD(0.1),
                            loss=keras.losses.MeanSquaredError(), model_dir=None)
    summary = t.fit(ds, num_steps=4)
    self.assertEqual(summary['applied_steps'], 4)
    self.assertGreater(float(tf.reduce_sum(tf.abs(t.model.w))), 0.0)


class ScaledLossTrainer(trainer_lib.Trainer):
  """A subclass with its own loss: the default loss times `scale`."""

  def __init__(self, *, scale=1.0, **kwargs):
    super().__init__(**kwargs)
    self.scale = scale

  def compute_loss(self, batch, training):
    return self.scale * super().compute_loss(batch, training)


class SubclassTest(tf.test.TestCase):

  def test_custom_compute_loss_is_used(self):
    t = make_trainer(cls=ScaledLossTrainer, scale=0.0)
    before = state(t) if t.model.built else None
    summary = t.fit(make_data(num_batches=3), num_steps=3)
    self.assertEqual(summary['final_loss'], 0.0)
    # Zero loss: zero gradients, Adam moves nothing.
    after = state(t)
    reference = make_model()
    for v in reference.trainable_variables:
      self.assertAllEqual(after[v.path], v.numpy())
    del before

  def test_a_plain_function_of_per_example_losses_is_averaged_as_compile_does(self):
    # A (B, 1) loss made the default stack's clip counter fail to trace (rank 0 against 2).
    per_example = lambda y, p: tf.square(y - p)
    plain = make_trainer(loss=per_example)
    summary = plain.fit(make_data(num_batches=5), num_steps=5)
    keras_mse = make_trainer()
    reference = keras_mse.fit(make_data(num_batches=5), num_steps=5)
    self.assertEqual(summary['status'], 'completed')
    self.assertAllClose(summary['final_loss'], reference['final_loss'], rtol=1e-5)
    after, expected = state(plain), state(keras_mse)
    for k in expected:
      self.assertAllClose(after[k], expected[k], rtol=1e-5, atol=1e-6, msg=k)


class CheckpointTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_resume_continues_at_the_right_step_with_the_right_batch(self):
    data = make_data(num_batches=40)
    straight = make_trainer(steps_per_loop=2)
    straight.fit(data, num_steps=15)

    model_dir = self.get_temp_dir()
    first = make_trainer(model_dir=model_dir, steps_per_loop=2, checkpoint_every=4)
    first.fit(data, num_steps=10)
    second = make_trainer(model_dir=model_dir, steps_per_loop=2, checkpoint_every=4)
    summary = second.fit(data, num_steps=15)
    self.assertEqual(summary['global_step'], 15)
    self.assertEqual(summary['steps_this_run'], 5)
    expected_next = list(data.skip(15).take(1))[0][0]
    self.assertAllEqual(next(second.iterator)[0], expected_next)
    for k, v in state(straight).items():
      self.assertAllClose(v, state(second)[k], rtol=1e-5, atol=1e-6)
    log = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    resume = [e for e in log if e['event'] == 'resume']
    self.assertEqual(len(resume), 1)
    self.assertEqual(resume[0]['step'], 10)
    # Running again with the same total does nothing more.
    third = make_trainer(model_dir=model_dir)
    self.assertEqual(third.fit(data, num_steps=15)['steps_this_run'], 0)

  @pytest.mark.slow
  def test_checkpoints_hold_the_data_position_not_the_iterator(self):
    data = make_data(num_batches=40).cache()
    straight = make_trainer(steps_per_loop=2)
    straight.fit(data, num_steps=15)
    model_dir = self.get_temp_dir()
    first = make_trainer(model_dir=model_dir, steps_per_loop=2, checkpoint_every=4)
    first.fit(data, num_steps=10)
    newest = first.checkpoints.committed()[-1]
    prefix = os.path.join(first.checkpoints.directory, newest.path)
    keys = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
    self.assertNotIn(tf.variant, keys.values())  # No iterator state (a .cache() would be whole).
    self.assertIn('data_offset/.ATTRIBUTES/VARIABLE_VALUE', keys)
    # A checkpoint of the older format, which held the tf.data iterator too, still resumes.
    iterator = iter(data)
    for _ in range(10):
      next(iterator)
    old = tf.train.Checkpoint(iterator=iterator, **first.controller.checkpoint_objects())  # pylint: disable=protected-access
    old.save_counter  # pylint: disable=pointless-statement  (a manager's save creates it)
    for name in tf.io.gfile.glob(prefix + '.*'):
      os.remove(name)
    old.write(prefix)
    self.assertIn(tf.variant, tf.train.load_checkpoint(prefix).get_variable_to_dtype_map().values())
    second = make_trainer(model_dir=model_dir, steps_per_loop=2, checkpoint_every=4)
    summary = second.fit(data, num_steps=15)
    self.assertEqual((summary['global_step'], summary['steps_this_run']), (15, 5))
    log = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertEqual([e['checkpoint'] for e in log if e['event'] == 'resume'], [newest.path])
    self.assertAllEqual(next(second.iterator)[0], list(data.skip(15).take(1))[0][0])
    for k, v in state(straight).items():
      self.assertAllClose(v, state(second)[k], rtol=1e-5, atol=1e-6)

  def test_no_checkpoint_with_a_non_finite_variable(self):
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir, policies_=[], checkpoint_every=2)
    t.fit(make_data(num_batches=4), num_steps=4)
    keeper_dir = os.path.join(model_dir, 'checkpoints')
    with open(os.path.join(keeper_dir, checkpointing.MANIFEST)) as f:
      steps = [e['step'] for e in json.load(f)['checkpoints']]
    self.assertEqual(steps, [2, 4])
    files_before = sorted(os.listdir(keeper_dir))
    # No skip policy: the NaN update is applied and poisons the weights.
    t.fit(make_data(num_batches=2, poison=[0]), num_steps=6)
    self.assertFalse(np.isfinite(state(t)['net/dense_0/kernel']).all())
    self.assertEqual(sorted(os.listdir(keeper_dir)), files_before)
    log = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertIn('checkpoint_refused', [e['event'] for e in log])
    # What is on disk is still the finite step-4 state.
    fresh = make_trainer(model_dir=model_dir, policies_=[])
    summary = fresh.fit(make_data(num_batches=4), num_steps=4)
    self.assertEqual(summary['steps_this_run'], 0)
    self.assertTrue(all(np.isfinite(v).all() for v in state(fresh).values()))

  @pytest.mark.slow
  def test_a_checkpoint_of_another_model_is_refused_clearly(self):
    model_dir = self.get_temp_dir()
    make_trainer(model_dir=model_dir).fit(make_data(num_batches=2), num_steps=2)
    keras.utils.set_random_seed(0)
    other = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(3, name='dense_0'),
                              keras.layers.Dense(1, name='dense_1')], name='net')
    t = trainer_lib.Trainer(model=other, optimizer=keras.optimizers.Adam(),
                            loss=keras.losses.MeanSquaredError(), model_dir=model_dir)
    with self.assertRaisesRegex(errors.CheckpointError, 'another model'):
      t.fit(make_data(num_batches=2), num_steps=4)
    log = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertEqual(log[-1]['event'], 'checkpoint_corrupt')

  @pytest.mark.slow
  def test_a_manifest_without_its_files_is_an_error_not_a_fresh_start(self):
    model_dir = self.get_temp_dir()
    make_trainer(model_dir=model_dir).fit(make_data(num_batches=2), num_steps=2)
    ckpt_dir = os.path.join(model_dir, 'checkpoints')
    for name in os.listdir(ckpt_dir):
      if name.startswith('ckpt-'):
        os.remove(os.path.join(ckpt_dir, name))
    with self.assertRaisesRegex(errors.CheckpointError, 'none of their files'):
      make_trainer(model_dir=model_dir).fit(make_data(num_batches=2), num_steps=4)

  @pytest.mark.slow
  def test_a_resume_takes_changed_clip_norm_and_learning_rate(self):
    model_dir = self.get_temp_dir()
    first = trainer_lib.Trainer(
        model=make_model(), optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.MeanSquaredError(), model_dir=model_dir,
        policies=[policies.ClipByGlobalNorm(max_norm=100.0), policies.SkipNonFinite()])
    first.fit(make_data(num_batches=8, scale=10.0), num_steps=3)
    norms = []
    second = trainer_lib.Trainer(
        model=make_model(), optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.MeanSquaredError(), model_dir=model_dir,
        policies=[policies.ClipByGlobalNorm(max_norm=0.5), policies.SkipNonFinite()])
    second.on_loop_end = lambda r: norms.extend(zip(r.grad_norm, r.clipped_grad_norm,
                                                    r.learning_rate))
    summary = second.fit(make_data(num_batches=8, scale=10.0), num_steps=6)
    self.assertEqual(summary['steps_this_run'], 3)
    self.assertLen(norms, 3)  # The hook saw every step of the resumed run.
    for before, after, rate in norms:
      self.assertGreater(before, 0.5)  # The new, tighter norm is in effect...
      self.assertAllClose(after, 0.5)
      self.assertAllClose(rate, 0.01)  # ...and the new learning rate.

  @pytest.mark.slow
  def test_policy_state_is_checkpointed(self):
    model_dir = self.get_temp_dir()
    t = make_trainer(model_dir=model_dir)
    t.fit(make_data(num_batches=4, poison=[1, 3]), num_steps=4)
    fresh = make_trainer(model_dir=model_dir)
    fresh.fit(make_data(num_batches=4), num_steps=4)
    self.assertEqual(int(fresh.policies[2].total_skips.numpy()), 2)
    self.assertEqual(int(fresh.skipped_steps.numpy()), 2)
    self.assertEqual(int(fresh.optimizer.iterations.numpy()), 2)


if __name__ == '__main__':
  tf.test.main()


class StopAtSeven(trainer_lib.Trainer):
  """Sends itself SIGTERM after step 7 (module level: see test_state.StopAtSix)."""

  def on_loop_end(self, reports):
    if reports.step[-1] == 7:
      os.kill(os.getpid(), signal.SIGTERM)


class EpochsTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_num_epochs_passes_over_the_finite_dataset_and_names_the_epoch(self):
    data = make_data(num_batches=5)
    reference = make_trainer()
    reference.fit(data.repeat(3), num_steps=15)
    model_dir = self.get_temp_dir() + '/epochs'
    t = make_trainer(model_dir, checkpoint_every=5, log_every=5)
    with self.assertLogs('stable_train', level='INFO') as logs:
      summary = t.fit(data, num_epochs=3)
    self.assertEqual((summary['status'], summary['global_step'], summary['epoch'],
                      summary['num_epochs'], summary['steps_per_epoch']),
                     ('completed', 15, 3, 3, 5))
    for k, v in state(reference).items():  # The same batches in the same order.
      self.assertAllClose(v, state(t)[k], rtol=1e-6, atol=1e-7)
    progress = [l for l in logs.output if 'loss' in l and 'step ' in l]
    self.assertLen(progress, 3)
    self.assertRegex(progress[0], r'step 5/15 \(33%, ETA [^)]*\)  epoch 1/3  loss')
    self.assertRegex(progress[1], r'step 10/15 \(67%, ETA [^)]*\)  epoch 2/3  loss')
    self.assertRegex(progress[2], r'step 15/15 \(100%, ETA [^)]*\)  epoch 3/3  loss')
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertEqual((records[0]['event'], records[0]['epoch'], records[0]['num_epochs'],
                      records[0]['steps_per_epoch']), ('start', 1, 3, 5))
    self.assertEqual([(e['step'], e['epoch']) for e in records if e['event'] == 'checkpoint'],
                     [(5, 1), (10, 2), (15, 3)])
    self.assertEqual((records[-1]['event'], records[-1]['epoch'], records[-1]['reason']),
                     ('done', 3, 'num_epochs reached'))

  def test_an_unknown_cardinality_is_counted(self):
    data = make_data(num_batches=6).filter(lambda x, y: True)
    self.assertEqual(int(data.cardinality()), int(tf.data.UNKNOWN_CARDINALITY))
    summary = make_trainer().fit(data, num_epochs=2)
    self.assertEqual((summary['status'], summary['global_step'], summary['steps_per_epoch']),
                     ('completed', 12, 6))

  @pytest.mark.slow
  def test_a_resume_mid_epoch_goes_on_at_the_same_position(self):
    data = make_data(num_batches=5)
    reference = make_trainer()
    reference.fit(data, num_epochs=3)
    model_dir = self.get_temp_dir() + '/resume'
    first = make_trainer(model_dir, cls=StopAtSeven, checkpoint_every=100)
    summary = first.fit(data, num_epochs=3)
    self.assertEqual((summary['status'], summary['global_step'], summary['epoch']),
                     ('interrupted', 7, 2))
    second = make_trainer(model_dir, checkpoint_every=100)
    summary = second.fit(data, num_epochs=3)
    self.assertEqual((summary['status'], summary['global_step'], summary['steps_this_run']),
                     ('completed', 15, 8))
    for k, v in state(reference).items():
      self.assertAllClose(v, state(second)[k], rtol=1e-6, atol=1e-7)
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    [resume] = [e for e in records if e['event'] == 'resume']
    self.assertEqual((resume['step'], resume['epoch'], resume['num_steps']), (7, 2, 15))
    # A later fit of the same Trainer does num_epochs more, from the dataset's start.
    summary = second.fit(data, num_epochs=1)
    self.assertEqual((summary['global_step'], summary['epoch']), (20, 1))

  def test_bad_lengths_are_one_line_config_errors(self):
    t = make_trainer()
    for kwargs, text in ((dict(num_steps=5, num_epochs=2), 'not both'),
                         (dict(), 'not neither'),
                         (dict(num_epochs=0), 'num_epochs=0'),
                         (dict(num_epochs=1.5), 'num_epochs=1.5')):
      with self.assertRaises(errors.ConfigError) as ctx:
        t.fit(make_data(num_batches=2), **kwargs)
      self.assertIn(text, str(ctx.exception))
      self.assertEqual(len(str(ctx.exception).splitlines()), 1)
    with self.assertRaisesRegex(errors.ConfigError, 'repeats forever'):
      t.fit(make_data(num_batches=2).repeat(), num_epochs=1)
    with self.assertRaisesRegex(errors.ConfigError, 'dataset is empty'):
      t.fit(make_data(num_batches=2).take(0), num_epochs=1)


class CountSamples(keras.metrics.Metric):
  """A tiny metric: the number of samples it was updated with (proves which batches counted)."""

  def __init__(self, name='samples'):
    super().__init__(name=name)
    self.samples = self.add_variable(shape=(), initializer='zeros', name='samples')

  def update_state(self, y_true, y_pred, sample_weight=None):
    del y_pred, sample_weight
    self.samples.assign_add(tf.cast(tf.shape(y_true)[0], self.dtype))

  def result(self):
    return self.samples


class MetricsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(1, 2)
  def test_only_applied_steps_count_and_windows_reset(self, steps_per_loop):
    model_dir = self.get_temp_dir() + f'/m{steps_per_loop}'
    t = make_trainer(model_dir, steps_per_loop=steps_per_loop, log_every=2,
                     metrics=[CountSamples(), keras.metrics.MeanAbsoluteError(name='mae')])
    with self.assertLogs('stable_train', level='INFO') as logs:
      summary = t.fit(make_data(num_batches=6, batch_size=4, poison=(2,)), num_steps=6)
    self.assertEqual(summary['skipped_steps'], 1)
    # Windows (steps 1-2, 3-4, 5-6): step 3's NaN batch was skipped and never counted.
    lines = [l for l in logs.output if 'samples' in l]
    self.assertLen(lines, 3)
    self.assertIn('samples 8', lines[0])
    self.assertIn('samples 4', lines[1])
    self.assertIn('samples 8', lines[2])
    self.assertEqual(summary['metrics']['samples'], 8.0)
    self.assertTrue(np.isfinite(summary['metrics']['mae']))
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['metrics']['samples'], 8.0)
    # Written as TensorBoard scalars too.
    tags = set()
    for name in os.listdir(os.path.join(model_dir, 'tensorboard')):
      for event in tf.compat.v1.train.summary_iterator(
          os.path.join(model_dir, 'tensorboard', name)):
        tags.update(v.tag for v in event.summary.value)
    self.assertIn('metrics/samples', tags)

  @pytest.mark.slow
  def test_the_open_window_is_the_summary_and_resume_is_unaffected(self):
    model_dir = self.get_temp_dir() + '/resume'
    t = make_trainer(model_dir, log_every=4, checkpoint_every=2, metrics=[CountSamples()])
    summary = t.fit(make_data(num_batches=10, batch_size=4), num_steps=6)
    self.assertEqual(summary['metrics']['samples'], 8.0)  # Steps 5-6, no progress line yet.
    # A fresh Trainer resumes from the checkpoint (metric variables are not in it) and counts anew.
    t2 = make_trainer(model_dir, log_every=4, metrics=[CountSamples()])
    summary = t2.fit(make_data(num_batches=10, batch_size=4), num_steps=9)
    self.assertEqual(summary['steps_this_run'], 3)
    self.assertEqual(summary['metrics']['samples'], 4.0)  # Step 9 (steps 7-8 had a line at 8).

  def test_bad_metrics_are_config_errors(self):
    for bad, words in ((keras.metrics.Accuracy(), 'must be a list'),
                       ([keras.metrics.Accuracy], 'pass an instance'),
                       (['acuracy'], 'not a Keras metric'), ([3], 'not a Keras metric'),
                       ([CountSamples(), CountSamples()], 'unique')):
      with self.assertRaisesRegex(errors.ConfigError, words):
        make_trainer(metrics=bad)

  def test_gin_binds_keras_metrics(self):
    import gin  # pylint: disable=g-import-not-at-top
    from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
    gin.parse_config('m = [@keras.metrics.SparseCategoricalAccuracy()]')
    metric = gin.query_parameter('%m')
    self.assertLen(metric, 1)


class MixedDtypeModelTest(tf.test.TestCase):
  """A float32 model with one float16 layer (plain Keras `fit` trains it): the default stack
  trains it and skips a NaN batch."""

  def test_trains_and_skips(self):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(8, activation='tanh', name='dense_0'),
        keras.layers.Dense(8, activation='tanh', dtype='float16', name='half'),
        keras.layers.Dense(1, name='dense_1')])
    trainer = make_trainer(model=model)
    trainer.fit(make_data(num_batches=8, poison=(3,)), num_steps=8)
    self.assertEqual((int(trainer.applied_steps), int(trainer.skipped_steps)), (7, 1))
    self.assertTrue(all(np.isfinite(v.numpy()).all() for v in model.variables))
