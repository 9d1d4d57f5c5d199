"""Tests for stable_train.step: the compiled bookkeeping (policies' state updates and counters in
one XLA function outside XLA), against the same step with them as plain graph ops."""

from unittest import mock

import keras
import numpy as np
import tensorflow as tf

import stable_train as st
from stable_train import errors
from stable_train import interfaces
from stable_train import step as step_lib


class StringState(interfaces.Policy):
  """Updates its state with an op XLA cannot compile (a string format), without saying it does."""

  def __init__(self):
    super().__init__(name='string_state')
    self.text = tf.Variable('', trainable=False)

  def update_state(self, report, applied):
    self.text.assign(tf.strings.as_string(report['loss']))
    return None


class SaysItCompiles(StringState):
  """The same, saying its update compiles with XLA (it does not)."""

  update_state_compiles = True


class Flags(interfaces.Policy):
  """Counts its updates and returns `flag(count)` as its `update_state` flag."""

  def __init__(self, flag, compiles=True):
    super().__init__(name='flags')
    self.flag = flag
    self.update_state_compiles = compiles
    self.count = tf.Variable(0, dtype=tf.int64, trainable=False)

  def update_state(self, report, applied):
    return self.flag(self.count.assign_add(1))


class BrokenUpdate(interfaces.Policy):
  """Says its update compiles; its update has a bug of its own (raised while tracing)."""

  update_state_compiles = True

  def update_state(self, report, applied):
    raise ValueError('a bug of its own')


def _data(nan_at=(7, 23)):
  x = np.random.RandomState(0).randn(40 * 16, 8).astype('float32')
  y = x[:, :1] * 2.0
  for i in nan_at:  # Whole batches of NaN features: skipped steps.
    x[i * 16:(i + 1) * 16] = np.nan
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


def _trainer(policies, jit_compile=False):
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation='tanh'),
                            keras.layers.Dense(1)])
  return st.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.MeanSquaredError(), policies=policies, model_dir=None,
                    steps_per_loop=5, jit_compile=jit_compile)


def _stack():
  return st.default_policies() + [st.OutlierSkip(warmup=4)]


def _state(trainer):
  """Every variable of the run: the model's, the optimizer's, each policy's."""
  values = {f'model/{i}': np.array(v.numpy()) for i, v in enumerate(trainer.model.variables)}
  values.update({f'optimizer/{i}': np.array(v.numpy())
                 for i, v in enumerate(trainer.optimizer.variables)})
  for p in trainer.policies:
    values.update({f'{p.name}/{v.name}': np.array(v.numpy()) for v in p.variables})
  return values


class CompiledBookkeepingTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.compiled = _trainer(_stack())
    cls.compiled.fit(_data(), num_steps=40)
    with mock.patch.object(step_lib.GuardedStep, 'compiles_bookkeeping', return_value=False):
      cls.plain = _trainer(_stack())
      cls.plain.fit(_data(), num_steps=40)

  def test_the_default_stack_compiles_its_bookkeeping_outside_xla(self):
    self.assertIsNotNone(self.compiled.controller.step.compiled_bookkeeping)
    self.assertIsNone(self.plain.controller.step.compiled_bookkeeping)

  def test_same_run_as_plain_graph_ops(self):
    # The counters and the skips exactly; every variable within float rounding (XLA may
    # contract the statistics' arithmetic differently).
    for name in ('global_step', 'applied_steps', 'skipped_steps', 'input_faults'):
      self.assertEqual(int(getattr(self.compiled, name).numpy()),
                       int(getattr(self.plain, name).numpy()), name)
    self.assertEqual(int(self.compiled.skipped_steps.numpy()), 2)
    compiled, plain = _state(self.compiled), _state(self.plain)
    self.assertEqual(sorted(compiled), sorted(plain))
    for key, value in compiled.items():
      if value.dtype.kind in 'iub':
        np.testing.assert_array_equal(value, plain[key], err_msg=key)
      else:
        np.testing.assert_allclose(value, plain[key], rtol=1e-5, atol=1e-6, err_msg=key)
    clip = [p for p in self.compiled.policies if isinstance(p, st.AdaptiveClip)][0]
    self.assertGreater(int(clip.count.numpy()), 30)  # The statistics did move.

  def test_not_compiled_where_it_must_not_be(self):
    cases = {
        'xla step (fused already)': _trainer(_stack(), jit_compile=True),
        'no policy updates state': _trainer([]),
        "an in-graph raise": _trainer([st.CheckNumerics(mode='raise'), st.SkipNonFinite()]),
        'a policy that does not compile': _trainer(st.default_policies() + [StringState()]),
    }
    for what, trainer in cases.items():
      with self.subTest(what):
        summary = trainer.fit(_data(nan_at=()), num_steps=10)
        self.assertEqual(summary['status'], 'completed')
        self.assertIsNone(trainer.controller.step.compiled_bookkeeping)

  def test_not_compiled_under_a_strategy_and_still_skips(self):
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      keras.utils.set_random_seed(1)
      model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
      optimizer = keras.optimizers.Adam(1e-2)
    trainer = st.Trainer(model=model, optimizer=optimizer, loss=keras.losses.MeanSquaredError(),
                         policies=_stack(), model_dir=None, steps_per_loop=5, strategy=strategy)
    self.assertEqual(trainer.fit(_data(), num_steps=10)['status'], 'completed')
    self.assertEqual(int(trainer.skipped_steps.numpy()), 1)
    self.assertIsNone(trainer.controller.step.compiled_bookkeeping)
    with strategy.scope():
      model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse', steps_per_execution=2)
    guard = st.guard_fit(model, policies=_stack())
    history = model.fit(_data().take(10), callbacks=[guard.callback()], verbose=0)
    self.assertEqual(history.history['skipped_steps'], [1.0])
    self.assertIsNone(guard.step.compiled_bookkeeping)

  def test_a_policy_that_does_not_compile_still_updates(self):
    trainer = _trainer(st.default_policies() + [StringState()])
    trainer.fit(_data(nan_at=()), num_steps=5)
    policy = [p for p in trainer.policies if isinstance(p, StringState)][0]
    self.assertNotEqual(policy.text.numpy(), b'')


class PolicyContractTest(tf.test.TestCase):
  """A user's policy that breaks the `update_state` contract gets a one-line error naming it."""

  def test_a_policy_that_says_it_compiles_and_does_not_is_named(self):
    for front_door in ('trainer', 'keras_fit'):
      with self.subTest(front_door):
        policies = st.default_policies() + [SaysItCompiles()]
        if front_door == 'trainer':
          trainer = _trainer(policies)
          weights = [v.numpy() for v in trainer.model.variables]
          run = lambda: trainer.fit(_data(nan_at=()), num_steps=5)
          model = trainer.model
        else:
          keras.utils.set_random_seed(1)
          model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
          model.compile(optimizer='adam', loss='mse', jit_compile=False)
          guard = st.guard_fit(model, policies=policies)
          weights = [v.numpy() for v in model.variables]
          run = lambda: model.fit(_data(nan_at=()), callbacks=[guard.callback()], verbose=0)
        with self.assertRaisesRegex(errors.ConfigError, 'update_state_compiles') as caught:
          run()
        message = errors.one_line(caught.exception)
        self.assertIn("SaysItCompiles 'string_state'", message)
        self.assertIn('AsString', message)  # The op XLA refused.
        self.assertNotIn('\n', message)
        # Refused while tracing: nothing trained.
        for before, after in zip(weights, model.variables):
          np.testing.assert_array_equal(before, after.numpy())

  def test_an_error_of_the_policy_s_own_is_raised_as_it_is(self):
    trainer = _trainer(st.default_policies() + [BrokenUpdate(name='broken')])
    with self.assertRaisesRegex(ValueError, 'a bug of its own') as caught:
      trainer.fit(_data(nan_at=()), num_steps=5)
    self.assertNotIsInstance(caught.exception, errors.ConfigError)

  def test_a_flag_that_is_not_a_scalar_bool_is_refused(self):
    for compiles in (True, False):
      for what, flag in {'float': lambda n: tf.cast(n, tf.float32),
                         'vector': lambda n: tf.stack([n > 2, n > 3])}.items():
        with self.subTest(what=what, compiles=compiles):
          trainer = _trainer([st.SkipNonFinite(), Flags(flag, compiles)])
          with self.assertRaisesRegex(errors.ConfigError,
                                      "Flags 'flags': update_state returned a .*; return None or "
                                      'a scalar bool'):
            trainer.fit(_data(nan_at=()), num_steps=5)

  def test_python_and_tensor_bool_flags_flag_the_step(self):
    for compiles in (True, False):
      for what, flag in {'python': lambda n: True, 'tensor': lambda n: n > 7}.items():
        with self.subTest(what=what, compiles=compiles):
          trainer = _trainer([st.SkipNonFinite(), Flags(flag, compiles)])
          with mock.patch.object(trainer, 'on_loop_end') as on_loop_end:
            trainer.fit(_data(nan_at=()), num_steps=10)
          flagged = np.concatenate([c.args[0].flagged for c in on_loop_end.call_args_list])
          self.assertEqual(flagged.tolist(), [True] * 10 if what == 'python' else
                           [False] * 7 + [True] * 3)
          self.assertEqual(trainer.controller.step.compiled_bookkeeping is not None, compiles)

if __name__ == '__main__':
  tf.test.main()
