"""Tests for stable_train.policies.collapse and the collapse verdicts of DivergenceCheck: a model
is collapsed when its outputs stop depending on the example where an untrained model's did
(within a tolerance, never by bit equality), and a run whose net dies after the last probe never
ends 'completed', through either front door."""

import json
import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.keras import fit as keras_fit
from stable_train.policies import collapse
from stable_train.policies import divergence
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models

X = np.random.RandomState(0).normal(size=(16, 4)).astype(np.float32)


def probe_of(model, x=X):
  return types.SimpleNamespace(model=model, first_batch=lambda: (x, x[:, :1]),
                               split_batch=lambda batch: batch)


def dense(kernel='glorot_uniform', bias='zeros', hidden=8):
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((4,)),
                           keras.layers.Dense(hidden, 'relu', kernel_initializer=kernel,
                                              bias_initializer=bias),
                           keras.layers.Dense(1)])


def relu_head(inputs=4):
  """A ReLU output pushed below 0 for every row, its hidden units alive."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(8, 'relu'),
                            keras.layers.Dense(1, 'relu')])
  model.layers[1].bias.assign([-100.0])
  return model


def kill(model):
  """Every ReLU of the first layer dead on every input: one output for all."""
  kernel, bias = model.layers[0].weights
  kernel.assign(tf.zeros_like(kernel))
  bias.assign(-tf.ones_like(bias))



def _clean_loop(n, loss=1.0, grad_norm=1.0):
  """A loop of `n` applied steps of loss `loss`, as the host reads it."""
  return interfaces.StepReports(
      step=np.arange(1, n + 1), loss=np.full(n, loss), grad_norm=np.full(n, grad_norm),
      clipped_grad_norm=np.full(n, grad_norm), loss_finite=np.ones(n, bool), grads_finite=np.ones(n, bool),
      inputs_finite=np.ones(n, bool), outputs_finite=np.ones(n, bool),
      first_bad_grad=-np.ones(n, int), first_bad_input=-np.ones(n, int),
      applied=np.ones(n, bool), learning_rate=np.ones(n))

class CollapseProbeTest(tf.test.TestCase):

  def test_dead_units_where_an_untrained_model_varied_are_a_collapse(self):
    model = dense()
    self.assertIsNone(collapse.CollapseProbe().collapsed(probe_of(model)))  # Alive.
    kill(model)
    spread, untrained = collapse.CollapseProbe().collapsed(probe_of(model))
    self.assertEqual(spread, 0.0)
    self.assertGreater(untrained, collapse.UNTRAINED_SPREAD)  # A fresh copy's, from glorot.

  def test_an_untrained_variation_small_beside_todays_outputs_still_counts(self):
    # Dead units over a head at 1000 (a regression on unscaled targets that learnt their mean):
    # the untrained model's variation, ~1.1, is 7e-4 of today's outputs: it varied, a collapse.
    model = dense()
    kill(model)
    model.layers[1].bias.assign([1e3])
    spread, untrained = collapse.CollapseProbe().collapsed(probe_of(model))
    self.assertEqual(spread, 0.0)
    self.assertBetween(untrained, collapse.COLLAPSE_SPREAD, collapse.UNTRAINED_SPREAD)
    # At 1e6 the same variation is within the tolerance that calls outputs the same: no news.
    model.layers[1].bias.assign([1e6])
    self.assertIsNone(collapse.CollapseProbe().collapsed(probe_of(model)))

  def test_outputs_the_same_from_the_start_are_no_collapse(self):
    # Born with every unit off (as a keras.applications model's untrained outputs are the same
    # for every row in inference mode): constant outputs are no news.
    model = dense(kernel='zeros', bias=keras.initializers.Constant(-1.0))
    self.assertIsNone(collapse.CollapseProbe().collapsed(probe_of(model)))

  def test_a_subclassed_model_the_same_from_its_own_start_is_no_collapse(self):
    # Kernels made zero by an initialiser its config does not carry: a fresh copy varies, this
    # run's own initial weights did not.
    class Net(keras.Model):
      def __init__(self, kernel='glorot_uniform', **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(8, 'relu', kernel_initializer=kernel)
        self.out = keras.layers.Dense(1)

      def call(self, x):
        return self.out(self.hidden(x))

    keras.utils.set_random_seed(0)
    model = Net('zeros')
    model(X)
    initial = [v.numpy() for v in model.trainable_variables]
    probe = collapse.CollapseProbe()
    probe.measure_initial(probe_of(model), initial)
    self.assertFalse(probe.started_varied())
    self.assertIsNone(probe.collapsed(probe_of(model)))
    self.assertIsNotNone(collapse.CollapseProbe().collapsed(probe_of(model)))  # The copy's.
    # A Keras-built model's copy stays the reference: its own start may be resumed dead weights.
    model = dense()
    kill(model)
    probe = collapse.CollapseProbe()
    probe.measure_initial(probe_of(model), [v.numpy() for v in model.trainable_variables])
    self.assertIsNotNone(probe.collapsed(probe_of(model)))

  def test_outputs_constant_in_inference_mode_only_are_no_collapse(self):
    # BatchNorm whose moving statistics lag (a huge moving variance): the same output for every
    # row in inference mode, varied ones on the batch's own statistics. A dead net is constant
    # in both modes.
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(), keras.layers.Dense(1)])
    model.layers[1].moving_variance.assign(tf.fill([8], 1e12))
    model.layers[2].bias.assign([1.0])
    self.assertLess(collapse.diagnostics.output_spread(probe_of(model)), collapse.COLLAPSE_SPREAD)
    self.assertIsNone(collapse.CollapseProbe().collapsed(probe_of(model)))
    model.layers[0].kernel.assign(tf.zeros([4, 8]))  # Now constant in both modes.
    self.assertIsNotNone(collapse.CollapseProbe().collapsed(probe_of(model)))

  def test_dropout_alone_is_no_reason_to_read_training_mode(self):
    # Dead units behind dropout over a constant feature (a saturated net): its inference-mode
    # outputs are the same for every row; training mode differs only by the dropout's draws.
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, 'sigmoid'),
                              keras.layers.Dropout(0.5), keras.layers.Dense(1)])
    self.assertEqual(collapse.modes(model), (False,))
    model.layers[0].kernel.assign(tf.zeros([4, 8]))
    model.layers[0].bias.assign(tf.fill([8], 3.0))
    self.assertGreater(collapse.diagnostics.output_deviation(probe_of(model), training=True)[0],
                       0.0)  # The draws differ from row to row...
    self.assertIsNotNone(collapse.CollapseProbe().collapsed(probe_of(model)))  # ...a collapse.
    # Moving statistics (BatchNorm), or a frozen layer's weights: both modes are read.
    batch_norm = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization()])
    self.assertEqual(collapse.modes(batch_norm), (False, True))
    frozen = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, trainable=False)])
    self.assertEqual(collapse.modes(frozen), (False, True))

  def test_a_tolerance_relative_to_the_outputs_scale_not_bit_equality(self):
    model = dense()
    kernel = model.layers[0].weights[0]
    kernel.assign(kernel * 1e-9)  # Rows differ in their last bits only.
    model.layers[1].weights[1].assign([1.0])
    found = collapse.CollapseProbe().collapsed(probe_of(model))
    self.assertIsNotNone(found)
    self.assertLess(found[0], collapse.COLLAPSE_SPREAD)
    model = dense()
    model.layers[1].weights[1].assign([1e3])  # Varied outputs far from zero: alive.
    self.assertIsNone(collapse.CollapseProbe().collapsed(probe_of(model)))

  def test_a_relu_output_at_0_over_varied_features_is_no_collapse_while_gradients_flow(self):
    # A ReLU head below 0 on every row of the first batch (a regression on targets mostly 0):
    # the outputs are the same, the features it reads vary, and other rows' gradients lift it.
    model = relu_head()
    emitted = []
    run = types.SimpleNamespace(probe=probe_of(model), emit=lambda *a, **k: emitted.append(k))
    probe = collapse.CollapseProbe()
    self.assertIsNotNone(probe.collapsed(run.probe))  # Its outputs alone read as a collapse.
    self.assertTrue(probe.at_floor(run.probe))
    probe.saw(_clean_loop(10))  # Gradient norms of 1.
    self.assertFalse(probe.report(run, 50, {'smoothed': 1.0, 'best': 1.0}))
    self.assertEqual(emitted, [])
    # No gradient reached a weight since that probe: nothing lifts it; a collapse.
    probe.saw(_clean_loop(10, grad_norm=0.0))
    self.assertTrue(probe.report(run, 100, {'smoothed': 1.0, 'best': 1.0}))
    self.assertEqual(emitted[-1]['rule'], 'collapsed')
    kill(model)  # Its hidden units dead: the features the same, a collapse whatever flows.
    probe = collapse.CollapseProbe()
    probe.saw(_clean_loop(10))
    self.assertFalse(probe.at_floor(run.probe))
    self.assertTrue(probe.report(run, 150, {'smoothed': 1.0, 'best': 1.0}))
    # The same head behind BatchNorm and Dropout (state the MLP lacks): the features are read
    # in inference mode, and vary.
    keras.utils.set_random_seed(0)
    normed = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, 'relu'),
                               keras.layers.BatchNormalization(), keras.layers.Dropout(0.5),
                               keras.layers.Dense(1, 'relu')])
    normed.layers[-1].bias.assign([-100.0])
    run = types.SimpleNamespace(probe=probe_of(normed), emit=lambda *a, **k: None)
    probe = collapse.CollapseProbe()
    probe.saw(_clean_loop(10))
    self.assertTrue(probe.at_floor(run.probe))
    self.assertFalse(probe.report(run, 250, {'smoothed': 1.0, 'best': 1.0}))
    # Weight penalties keep every gradient norm above 0: there the flow tells nothing.
    keras.utils.set_random_seed(0)
    penalised = keras.Sequential([
        keras.Input((4,)), keras.layers.Dense(8, 'relu'),
        keras.layers.Dense(1, 'relu', kernel_regularizer=keras.regularizers.L2(1e-4))])
    penalised.layers[1].bias.assign([-100.0])
    run = types.SimpleNamespace(probe=probe_of(penalised), emit=lambda *a, **k: None)
    probe = collapse.CollapseProbe()
    probe.saw(_clean_loop(10))
    self.assertTrue(probe.at_floor(run.probe))
    self.assertTrue(probe.report(run, 200, {'smoothed': 1.0, 'best': 1.0}))

  def test_outputs_saturated_or_shrunk_over_varied_features_are_a_collapse(self):
    # A sigmoid saturated by huge logits (a rate that blew the head up), a linear head whose
    # kernel shrank to 0: the same answer for every row, whatever gradients flow.
    for activation, kernel, bias in (('sigmoid', 1e4, 1e4), ('linear', 0.0, 1.0)):
      keras.utils.set_random_seed(0)
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, 'relu'),
                                keras.layers.Dense(1, activation)])
      model.layers[1].kernel.assign(tf.fill([8, 1], kernel))
      model.layers[1].bias.assign([bias])
      run = types.SimpleNamespace(probe=probe_of(model), emit=lambda *a, **k: None)
      probe = collapse.CollapseProbe()
      probe.saw(_clean_loop(10))
      self.assertTrue(probe.report(run, 50, {'smoothed': 1.0, 'best': 1.0}), activation)

  def test_features_are_read_only_where_the_last_layer_makes_the_one_output(self):
    self.assertIsNotNone(collapse.feature_model(dense()))
    x = keras.Input((4,))
    two = keras.Model(x, [keras.layers.Dense(1)(x), keras.layers.Dense(2)(x)])
    self.assertIsNone(collapse.feature_model(two))

    class Net(keras.Model):
      def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.out = keras.layers.Dense(1)

      def call(self, x):
        return self.out(x)
    net = Net()
    net(X)
    self.assertIsNone(collapse.feature_model(net))  # Subclassed: unknown, the verdict as before.

  def test_a_model_that_cannot_be_copied_is_judged_by_its_initial_weights_or_not_at_all(self):
    class Plain(tf.Module):
      def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.random.RandomState(1).normal(size=(4, 1)).astype(np.float32))
        self.b = tf.Variable([0.5])
      def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w)) + self.b
    model = Plain()
    initial = [v.numpy() for v in model.trainable_variables]
    model.w.assign(tf.zeros_like(model.w))
    self.assertIsNone(collapse.CollapseProbe().collapsed(probe_of(model)))  # Unknown: silence.
    probe = collapse.CollapseProbe()
    probe.measure_initial(probe_of(model), initial)
    self.assertIsNotNone(probe.collapsed(probe_of(model)))
    self.assertTrue(collapse.moved(probe_of(model), initial))


class EndOfRunTest(tf.test.TestCase):
  """A net that dies after the last collapse probe: the end check ends the run 'diverged'."""

  def _model(self):
    return models.mlp(input_dim=8, hidden=(16,), outputs=1, seed=0)

  def _killer(self, model, at):
    class Kill(keras.callbacks.Callback):
      def on_train_batch_end(self, batch, logs=None):
        if batch == at:
          kill(model)
    return Kill()

  def _events(self, model_dir):
    with open(os.path.join(model_dir, 'events.jsonl')) as f:
      return [json.loads(line) for line in f]

  @pytest.mark.slow
  def test_the_trainer(self):
    model = self._model()

    class Dies(trainer_lib.Trainer):
      def on_loop_end(self, reports):
        if int(reports.step[-1]) == 30:
          kill(model)

    model_dir = self.get_temp_dir() + '/trainer'
    t = Dies(model=model, optimizer=keras.optimizers.Adam(1e-3),
             loss=keras.losses.MeanSquaredError(), model_dir=model_dir, steps_per_loop=10,
             verbose=False)
    summary = t.fit(data.synthetic_regression(num_features=8, num_examples=256), num_steps=40)
    self.assertEqual(summary['status'], 'diverged')
    self.assertIn('collapsed', summary['reason'])
    kinds = [e['event'] for e in self._events(model_dir)]
    self.assertIn('diverged', kinds)
    self.assertNotIn('done', kinds)

  def test_guard_fit(self):
    model = self._model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse')
    guard = keras_fit.guard_fit(model)
    model_dir = self.get_temp_dir() + '/fit'
    x = np.random.RandomState(0).normal(size=(256, 8)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    with self.assertRaisesRegex(Exception, 'collapsed'):
      model.fit(x, y, batch_size=16, epochs=1, verbose=0,
                callbacks=[guard.callback(model_dir=model_dir), self._killer(model, 12)])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['status'], 'diverged')

  def test_the_check_itself(self):
    check = divergence.DivergenceCheck(output_ratio=None, warmup=2, collapse_every=None)
    model = self._model()
    x = np.random.RandomState(0).normal(size=(16, 8)).astype(np.float32)
    run = types.SimpleNamespace(probe=probe_of(model, x), step=7,
                                emit=lambda *args, **kwargs: None)
    check.fold(_clean_loop(4))
    self.assertIsNone(check.check_at_end(run))
    self.assertIsInstance(check, interfaces.EndCheck)
    kill(model)
    self.assertIsNone(check.check_at_end(run))  # collapse_every=None: the probe is off.
    check = divergence.DivergenceCheck(output_ratio=None, warmup=2)
    check.fold(_clean_loop(4))
    decision = check.check_at_end(run)
    self.assertEqual((decision.status, decision.details['rule']), ('diverged', 'collapsed'))
    self.assertFalse(check.is_healthy())

  def test_a_relu_output_at_0_at_the_end_is_a_collapse_only_with_no_gradient(self):
    # A regression on targets mostly 0 whose first batch is all 0 (dry days first): trained, its
    # head rightly 0 there; the end check leaves it. With no gradient since the last probe, it
    # is dead.
    model = relu_head(inputs=8)
    x = np.random.RandomState(0).normal(size=(16, 8)).astype(np.float32)
    run = types.SimpleNamespace(probe=probe_of(model, x), step=7,
                                emit=lambda *args, **kwargs: None)
    check = divergence.DivergenceCheck(output_ratio=None, warmup=2)
    check.fold(_clean_loop(4))
    self.assertIsNone(check.check_at_end(run))
    check.fold(_clean_loop(4, grad_norm=0.0))
    decision = check.check_at_end(run)
    self.assertEqual((decision.status, decision.details['rule']), ('diverged', 'collapsed'))

  def test_a_dead_net_whose_loss_came_far_down_is_probed_too(self):
    # Shifted labels: a dead net that answers their mean has a loss far below its start (and
    # its last bias still wobbles, so the loss is not quite flat): still collapsed.
    model = self._model()
    x = np.random.RandomState(0).normal(size=(16, 8)).astype(np.float32)
    run = types.SimpleNamespace(probe=probe_of(model, x), step=40,
                                emit=lambda *args, **kwargs: None)
    check = divergence.DivergenceCheck(output_ratio=None, warmup=2)
    check.fold(_clean_loop(40, [100.0] + [1.0] * 39))
    self.assertIsNone(check.check_at_end(run))  # Alive.
    kill(model)
    decision = check.check_at_end(run)
    self.assertEqual((decision.status, decision.details['rule']), ('diverged', 'collapsed'))
