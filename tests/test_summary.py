"""Tests for stable_train.runtime.summary: summary.json's figures and what it says of the run's end."""

import types

import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import outcome as outcome_lib
from stable_train.runtime import summary as summary_lib


def loop(first, n):
  steps = np.arange(first, first + n)
  return interfaces.StepReports(
      step=steps, loss=steps * 1.0, grad_norm=np.ones(n), clipped_grad_norm=np.ones(n),
      loss_finite=np.ones(n, bool), grads_finite=np.ones(n, bool), inputs_finite=np.ones(n, bool),
      outputs_finite=np.ones(n, bool), first_bad_grad=-np.ones(n, int),
      first_bad_input=-np.ones(n, int), applied=np.ones(n, bool), learning_rate=np.ones(n))


def run_view():
  """What RunSummary reads of a run's state (a Trainer's, or a Keras fit's guard's)."""
  counters = {k: tf.Variable(0, dtype=tf.int64) for k in (
      'global_step', 'applied_steps', 'skipped_steps', 'input_faults', 'overflow_steps')}
  return types.SimpleNamespace(policies=[], output_dir=None, last_summary={}, **counters)


class RunSummaryTest(tf.test.TestCase):

  def test_a_run_that_ends_right_after_a_rollback_says_it_trained_no_further(self):
    view = run_view()
    summary = summary_lib.RunSummary(view, view.policies, start_step=0)
    summary.record(loop(1, 10))
    view.global_step.assign(10)
    completed = outcome_lib.Outcome(outcome_lib.Status.COMPLETED, reason='num_epochs reached')
    self.assertEqual(summary.build(completed)['note'], 'num_epochs reached')
    summary.record(loop(11, 10))
    view.global_step.assign(4)  # The last loop rolled back to step 4; the data then ended.
    with self.assertLogs('stable_train', 'WARNING') as logs:
      values = summary.build(completed)
    self.assertEqual(values['global_step'], 4)
    self.assertIn('num_epochs reached; the run ended right after a rollback from step 20 to '
                  'step 4', values['note'])
    self.assertIn('trained no further', logs.output[0])
    summary.record(loop(5, 6))  # Trained on after it, to step 10: nothing to say.
    view.global_step.assign(10)
    self.assertEqual(summary.build(completed)['note'], 'num_epochs reached')

  def test_a_subclassed_optimizer_is_named_with_the_keras_one_it_extends(self):
    import keras  # pylint: disable=g-import-not-at-top

    class MyAdam(keras.optimizers.Adam):
      pass

    view = run_view()
    summary = summary_lib.RunSummary(view, view.policies, start_step=0)
    done = outcome_lib.Outcome(outcome_lib.Status.COMPLETED)
    values = summary.build(done, optimizer=keras.optimizers.LossScaleOptimizer(MyAdam()))
    self.assertEqual((values['optimizer'], values['optimizer_family']), ('MyAdam', 'Adam'))
    values = summary.build(done, optimizer=keras.optimizers.SGD())
    self.assertEqual(values['optimizer'], 'SGD')
    self.assertNotIn('optimizer_family', values)  # Keras's own: the name says it.

    class MyOwn(keras.optimizers.Optimizer):  # No Keras optimizer's family: none named.
      pass

    self.assertEqual(summary_lib.optimizer_family(MyOwn(0.1)), 'MyOwn')


  def test_weights_built_in_float16_are_recorded_for_the_doctor(self):
    import keras  # pylint: disable=g-import-not-at-top
    view = run_view()
    summary = summary_lib.RunSummary(view, view.policies, start_step=0)
    done = outcome_lib.Outcome(outcome_lib.Status.COMPLETED)
    for dtype, wrap, expected in (('float16', False, 'float16'), ('float16', True, 'float16'),
                                  ('float32', False, None)):
      weights = [keras.Variable(np.zeros(3, dtype), dtype=dtype)]
      optimizer = keras.optimizers.Adam()
      optimizer = keras.optimizers.LossScaleOptimizer(optimizer) if wrap else optimizer
      optimizer.build(weights)
      values = summary.build(done, optimizer=optimizer)
      self.assertEqual(values.get('variable_dtype'), expected, (dtype, wrap))

  def test_the_optimizers_own_clip_is_recorded_for_the_doctor(self):
    import keras  # pylint: disable=g-import-not-at-top
    import stable_train  # pylint: disable=g-import-not-at-top
    view = run_view()
    summary = summary_lib.RunSummary(view, view.policies, start_step=0)
    done = outcome_lib.Outcome(outcome_lib.Status.COMPLETED)
    clipped = keras.mixed_precision.LossScaleOptimizer(
        keras.optimizers.SGD(0.1, global_clipnorm=0.25))  # The inner one's read.
    self.assertEqual(summary.build(done, optimizer=clipped)['optimizer_clip'],
                     {'global_clipnorm': 0.25})
    self.assertEqual(summary.build(done, optimizer=keras.optimizers.Adam(clipnorm=1))[
        'optimizer_clip'], {'clipnorm': 1.0})
    self.assertNotIn('optimizer_clip', summary.build(done, optimizer=keras.optimizers.Adam()))
    # A numpy float is a clip Keras applies; an infinite one ("no clip") is none (JSON has no inf).
    self.assertEqual(summary_lib.optimizer_clip(
        keras.optimizers.SGD(global_clipnorm=np.float32(0.5))), {'global_clipnorm': 0.5})
    self.assertEqual(summary_lib.optimizer_clip(keras.optimizers.SGD(clipvalue=np.inf)), {})
    # A GuardedOptimizer's own global clip, under a LossScaleOptimizer too, and its inner one's.
    guarded = stable_train.GuardedOptimizer(keras.optimizers.SGD(clipvalue=3.0), clipnorm=2.0)
    for optimizer in (guarded, keras.mixed_precision.LossScaleOptimizer(guarded)):
      self.assertEqual(summary_lib.optimizer_clip(optimizer),
                       {'global_clipnorm': 2.0, 'clipvalue': 3.0})

  def test_a_recurrent_model_is_recorded_for_the_doctor(self):
    import keras  # pylint: disable=g-import-not-at-top
    layers = keras.layers
    view = run_view()
    summary = summary_lib.RunSummary(view, view.policies, start_step=0)
    done = outcome_lib.Outcome(outcome_lib.Status.COMPLETED)

    class Subclassed(keras.Model):  # A recurrence nested in a subclassed model's own layer.

      def __init__(self):
        super().__init__()
        self.block = keras.Sequential([layers.Bidirectional(layers.GRU(3))])
        self.head = layers.Dense(1)

      def call(self, x):
        return self.head(self.block(x))

    class Listed(keras.Model):  # Recurrent layers held in a Python list.

      def __init__(self):
        super().__init__()
        self.blocks = [layers.GRU(3, return_sequences=True), layers.GRU(3)]

      def call(self, x):
        for block in self.blocks:
          x = block(x)
        return x

    nested, listed = Subclassed(), Listed()
    for built in (nested, listed):  # Built, as a model that trained is.
      built(np.zeros((2, 5, 2), 'float32'))
    frozen = keras.Sequential([keras.Input((5, 2)), layers.LSTM(3, trainable=False),
                               layers.Dense(1)])
    lstm = keras.Sequential([keras.Input((5, 2)), layers.LSTM(3), layers.Dense(1)])
    # The LSTM's 4 x (2 + 3 + 1) x 3 = 72 weights of the model's 76.
    self.assertAllClose(summary_lib.recurrent_share(lstm), 72 / 76)
    # A GRU(2) side branch (36 weights) beside a Dense(256) trunk (16 640): a sliver.
    side, trunk = keras.Input((5, 2)), keras.Input((64,))
    branch = keras.Model([side, trunk], layers.Dense(1)(layers.Concatenate()(
        [layers.GRU(2)(side), layers.Dense(256)(trunk)])))
    self.assertLess(summary_lib.recurrent_share(branch), 0.01)
    # A word model's embedding table (a lookup) is left out: its LSTM is the model.
    words = keras.Sequential([keras.Input((5,), dtype='int32'), layers.Embedding(5000, 16),
                              layers.LSTM(3), layers.Dense(1)])
    self.assertAllClose(summary_lib.recurrent_share(words), 240 / 244)
    for model, expected in (
        (keras.Sequential([keras.Input((5, 2)), layers.LSTM(3), layers.Dense(1)]), True),
        (keras.Sequential([keras.Input((5, 2)), layers.RNN(layers.SimpleRNNCell(3))]), True),
        (nested, True),
        (listed, True),
        (frozen, False),  # A frozen recurrence takes no step: no gradient of it explodes.
        (keras.Sequential([keras.Input((5, 2)), layers.Conv1D(3, 2), layers.Dense(1)]), False),
        (None, False)):
      values = summary.build(done, model=model)
      self.assertEqual(values.get('recurrent', 0) > 0, expected, model)
      self.assertEqual(summary_lib.recurrent_share(model) > 0, expected)
    # A recurrence over an Embedding table is a token model; a table without one records nothing.
    self.assertIs(summary.build(done, model=words).get('embedded'), True)
    self.assertNotIn('embedded', summary.build(done, model=lstm))
    bag = keras.Sequential([keras.Input((5,), dtype='int32'), layers.Embedding(50, 4),
                            layers.GlobalAveragePooling1D(), layers.Dense(1)])
    self.assertTrue(summary_lib.embedded(bag))
    self.assertNotIn('embedded', summary.build(done, model=bag))
    # A recurrence over measurements beside a table of one sensor ID per example (DeepAR-style,
    # a reviewer's case): no token sequence, read as any recurrent model.
    sensor, series = keras.Input((1,), dtype='int32'), keras.Input((5, 2))
    code = layers.RepeatVector(5)(layers.Flatten()(layers.Embedding(10, 2)(sensor)))
    deepar = keras.Model([sensor, series], layers.Dense(1)(layers.GRU(3)(
        layers.Concatenate()([series, code]))))
    self.assertGreater(summary.build(done, model=deepar).get('recurrent', 0), 0)
    self.assertNotIn('embedded', summary.build(done, model=deepar))


if __name__ == '__main__':
  tf.test.main()
