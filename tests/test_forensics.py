"""Tests of stable_train.forensics.forensics: ValidateInputs, the Forensics policy and its records."""

import json
import os
from unittest import mock

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import losses
from stable_train import errors
from stable_train.forensics import activations
from stable_train.forensics import forensics
from stable_train.forensics import provenance
from stable_train.policies import basic as policies
from stable_train.runfiles import events as events_lib
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data

NUM_FEATURES = 8


class SafeLog(keras.layers.Layer):
  """log(x * scale) where positive, else 0: finite forward, NaN gradient where x * scale == 0
  (the tf.where trap: the masked branch's gradient is 0 * (1/0))."""

  def build(self, input_shape):
    self.scale = self.add_weight(shape=(input_shape[-1],), initializer='ones', name='scale')

  def call(self, x):
    z = x * self.scale
    return tf.where(z > 0, tf.math.log(z), tf.zeros_like(z))


class PlainLog(keras.layers.Layer):
  """log(x): -inf in the forward pass wherever a ReLU before it outputs 0."""

  def call(self, x):
    return tf.math.log(x)


class _Box:
  """Holds a variable out of the layer's tracking (not model state, so a skip does not undo it)."""


class FlakyOnce(keras.layers.Layer):
  """Adds NaN to its output on its first training call only (a fault that a re-run does not see).

  Its call counter lives outside the model: a skipped step puts every model variable back, so a
  counter among them would make the fault repeat forever (deterministic, not transient).
  """

  def build(self, input_shape):
    del input_shape
    self._box = _Box()
    self._box.calls = tf.Variable(0.0, trainable=False, name='calls')

  @property
  def calls(self):
    return self._box.calls

  def call(self, x, training=False):
    if training:
      self.calls.assign_add(1.0)
    nan = tf.where(tf.equal(self.calls, 1.0), float('nan'), 0.0)
    return x + nan


def _model(middle=None, outputs=1):
  keras.utils.set_random_seed(0)
  layers = [keras.Input((NUM_FEATURES,)), keras.layers.Dense(4, activation='relu', name='dense_0')]
  if middle is not None:
    layers.append(middle)
  layers.append(keras.layers.Dense(outputs, name='dense_1'))
  return keras.Sequential(layers, name='mlp')


def _regression(**kwargs):
  return data.synthetic_regression(num_examples=64, num_features=NUM_FEATURES, batch_size=8,
                                   **kwargs)


class OwnLossTrainer(trainer_lib.Trainer):
  """A compute_loss of its own (the same loss): the step does not check sparse labels."""

  def compute_loss(self, batch, training):
    return super().compute_loss(batch, training)


def _trainer(model, model_dir, extra_policies, cls=trainer_lib.Trainer, **kwargs):
  kwargs.setdefault('steps_per_loop', 4)
  return cls(
      model=model, optimizer=keras.optimizers.Adam(1e-3),
      loss=kwargs.pop('loss', keras.losses.MeanSquaredError()),
      policies=[policies.CheckNumerics(), policies.SkipNonFinite(max_consecutive=100)] +
      list(extra_policies),
      model_dir=model_dir, **kwargs)


def _events(model_dir, name):
  return [e for e in events_lib.read_events(os.path.join(model_dir, 'events.jsonl'))
          if e['event'] == name]


def _records(model_dir):
  root = os.path.join(model_dir, 'forensics')
  return sorted(os.listdir(root)) if os.path.isdir(root) else []


class ValidateInputsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      dict(kwargs={'num_classes': 0}, needle='num_classes=0'),
      dict(kwargs={'num_classes': True}, needle='num_classes=True'),
      dict(kwargs={'num_classes': 2.5}, needle='num_classes=2.5'),
      dict(kwargs={'value_range': (1.0, -1.0)}, needle='value_range=(1.0, -1.0)'),
      dict(kwargs={'value_range': (0.0, float('nan'))}, needle='value_range=(0.0, nan)'),
      dict(kwargs={'value_range': 'wide'}, needle="value_range='wide'"),
  )
  def test_rejects_bad_arguments(self, kwargs, needle):
    with self.assertRaisesRegex(errors.ConfigError, 'ValidateInputs: ' + __import__('re').escape(needle)):
      policies.ValidateInputs(**kwargs)

  def test_flags_one_per_input_tensor(self):
    check = policies.ValidateInputs(num_classes=3, value_range=(-5.0, 5.0))
    features = {'a': tf.constant([[1.0, 2.0]]), 'b': tf.constant([[9.0]])}
    flags = check.check_batch(features, tf.constant([3]))
    # Order of flatten_inputs: features/a, features/b (out of range), labels (out of range).
    self.assertAllEqual(flags, [True, False, False])
    flags = check.check_batch({'a': tf.constant([[np.inf, 0.0]]), 'b': tf.constant([[0.0]])},
                              tf.constant([2]))
    self.assertAllEqual(flags, [False, True, True])

  def test_nan_input_is_an_input_fault_not_applied_and_saved(self):
    model_dir = self.get_temp_dir()
    model = _model()
    model(tf.zeros([1, NUM_FEATURES]))
    before = [v.numpy().copy() for v in model.variables]
    trainer = _trainer(model, model_dir, [policies.ValidateInputs(), forensics.Forensics()])
    summary = trainer.fit(_regression(poison_batches=[0]), num_steps=1)

    self.assertEqual(summary['input_faults'], 1)
    self.assertEqual(summary['skipped_steps'], 1)
    self.assertEqual(summary['applied_steps'], 0)
    for b, v in zip(before, model.variables):
      self.assertAllEqual(b, v.numpy())  # Bit-identical: the bad batch was not applied.
    self.assertEqual(int(trainer.optimizer.iterations.numpy()), 0)
    skip, = _events(model_dir, 'skip')
    self.assertEqual((skip['fault'], skip['tensor']), ('input', 'input features'))
    event, = _events(model_dir, 'forensics')
    self.assertEqual(event['fault'], 'input')

    self.assertEqual(_records(model_dir), ['step_1'])
    record_dir = event['dir']
    report, batch = forensics.read_record(record_dir)
    features, labels = batch
    expected_x, expected_y = next(iter(_regression(poison_batches=[0])))
    np.testing.assert_array_equal(features, expected_x.numpy())  # NaN compares equal here.
    np.testing.assert_array_equal(labels, expected_y.numpy())
    self.assertTrue(np.isnan(features[0, 0]))
    self.assertEqual(report['fault'], 'input')
    self.assertEqual(report['inputs'][0]['path'], 'features')
    self.assertEqual(report['inputs'][0]['nan'], 1)
    self.assertEqual(report['inputs'][0]['first_non_finite_index'], [0, 0])
    self.assertFalse(report['inputs'][0]['passed_checks'])
    self.assertTrue(report['inputs'][1]['passed_checks'])
    # The op-level re-run names the first op fed by the NaN.
    self.assertTrue(report['op_level']['found'])
    self.assertEqual(report['op_level']['layer'], 'dense_0')
    with open(os.path.join(record_dir, 'report.txt')) as f:
      text = f.read()
    self.assertIn('step 1, input fault', text)
    with open(os.path.join(record_dir, forensics.RNG_JSON)) as f:
      self.assertLen(json.load(f)['tf_global_generator'], 3)
    # Written atomically: no temp folder left behind.
    self.assertEqual(os.listdir(os.path.join(model_dir, 'forensics')), ['step_1'])

  @pytest.mark.slow
  def test_out_of_range_sparse_label_is_caught(self):
    labels_ds = tf.data.Dataset.from_tensor_slices(
        (np.ones((16, NUM_FEATURES), np.float32), np.array([1] * 8 + [1, 4] + [0] * 6, np.int32)))
    ds = labels_ds.batch(8, drop_remainder=True)

    # A compute_loss of its own hides the class count from the step's label check: without
    # ValidateInputs, TF 2.21's CPU kernel raises on the out-of-range label and the run dies.
    trainer = _trainer(_model(outputs=4), None, [], loss=losses.sparse_softmax_cross_entropy,
                       cls=OwnLossTrainer)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'outside the valid range'):
      trainer.fit(ds, num_steps=2)

    model_dir = os.path.join(self.get_temp_dir(), 'checked')
    trainer = _trainer(_model(outputs=4), model_dir,
                       [policies.ValidateInputs(num_classes=4), forensics.Forensics()],
                       loss=losses.sparse_softmax_cross_entropy, cls=OwnLossTrainer)
    summary = trainer.fit(ds, num_steps=2)
    self.assertIsNone(trainer.label_classes)  # ValidateInputs caught it, not the step's check.
    self.assertEqual((summary['skipped_steps'], summary['input_faults']), (1, 1))
    skip, = _events(model_dir, 'skip')
    self.assertEqual((skip['step'], skip['fault'], skip['tensor']), (2, 'input', 'input labels'))
    report, (_, labels) = forensics.read_record(os.path.join(model_dir, 'forensics', 'step_2'))
    self.assertEqual(labels.tolist(), [1, 4, 0, 0, 0, 0, 0, 0])
    self.assertEqual(report['inputs'][1]['labels_out_of_range'], 1)

  @pytest.mark.slow
  def test_value_range(self):
    model_dir = self.get_temp_dir()
    trainer = _trainer(_model(), model_dir, [policies.ValidateInputs(value_range=(-100., 100.))])
    summary = trainer.fit(_regression(poison_batches=[1], poison_value=1e6), num_steps=3)
    self.assertEqual((summary['input_faults'], summary['applied_steps']), (1, 2))


class ForensicsTest(tf.test.TestCase, parameterized.TestCase):

  def test_rejects_bad_arguments(self):
    with self.assertRaisesRegex(errors.ConfigError, "Forensics: when='sometimes'"):
      forensics.Forensics(when='sometimes')
    with self.assertRaisesRegex(errors.ConfigError, "Forensics: recheck='yes'"):
      forensics.Forensics(recheck='yes')

  @parameterized.parameters(False, True)
  @pytest.mark.slow
  def test_log_zero_named_at_variable_and_op_level(self, jit_compile):
    model_dir = self.get_temp_dir()
    trainer = _trainer(_model(SafeLog(name='safe_log')), model_dir, [forensics.Forensics()],
                       jit_compile=jit_compile)
    summary = trainer.fit(_regression(), num_steps=2)
    self.assertEqual(summary['applied_steps'], 0)
    event = _events(model_dir, 'forensics')[0]
    self.assertEqual((event['step'], event['fault']), (1, 'gradient'))
    self.assertEqual(event['variable'], 'mlp/safe_log/scale')
    self.assertEqual(event['layer'], 'mlp/safe_log')
    self.assertEqual((event['op_type'], event['op_layer']), ('Log', 'safe_log'))
    report, _ = forensics.read_record(event['dir'])
    var = report['variable_level']
    self.assertEqual(var['origin_variable'], 'mlp/safe_log/scale')
    # Later layers stay finite: the fault was born in the backward pass of safe_log.
    self.assertNotIn('mlp/dense_1/kernel', var['bad_variables'])
    op = report['op_level']
    self.assertRegex(op['op_name'], r'^mlp(_\d+)?/safe_log(_\d+)?/Log$')
    self.assertIn('test_forensics.py', op['source'])

  def test_forward_log_zero_named_at_op_level(self):
    model_dir = self.get_temp_dir()
    trainer = _trainer(_model(PlainLog(name='plain_log')), model_dir, [forensics.Forensics()])
    trainer.fit(_regression(), num_steps=1)
    report, _ = forensics.read_record(os.path.join(model_dir, 'forensics', 'step_1'))
    self.assertFalse(report['outputs_finite'])
    self.assertIsNone(report['variable_level']['origin_variable'])
    self.assertEqual(report['op_level']['op_type'], 'Log')
    self.assertEqual(report['op_level']['layer'], 'plain_log')

  @parameterized.parameters(('first', ['step_2']), ('every', ['step_2', 'step_4']), ('never', []))
  def test_when(self, when, expected):
    model_dir = self.get_temp_dir()
    trainer = _trainer(_model(), model_dir, [policies.ValidateInputs(),
                                             forensics.Forensics(when=when)], steps_per_loop=8)
    summary = trainer.fit(_regression(poison_batches=[1, 3]), num_steps=8)
    # Ending a loop early at a fault is not mistaken for the end of the data.
    self.assertEqual((summary['status'], summary['global_step']), ('completed', 8))
    self.assertEqual(summary['input_faults'], 2)
    self.assertEqual(_records(model_dir), expected)
    self.assertLen(_events(model_dir, 'forensics'), len(expected))

  @pytest.mark.slow
  def test_only_on_events(self):
    model_dir = self.get_temp_dir()
    trainer = _trainer(_model(), model_dir, [policies.ValidateInputs(),
                                             forensics.Forensics(when='every', recheck=True)])
    with mock.patch.object(provenance, 'locate_op', wraps=provenance.locate_op) as locate, \
        mock.patch.object(provenance, 'rerun', wraps=provenance.rerun) as rerun:
      summary = trainer.fit(_regression(), num_steps=8)
      self.assertEqual((summary['applied_steps'], summary['global_step']), (8, 8))
      self.assertEqual((locate.call_count, rerun.call_count), (0, 0))
      self.assertEqual(_records(model_dir), [])
      self.assertEqual(_events(model_dir, 'forensics'), [])
      # A bad batch does run the deep path: the mocks can see it.
      other = _trainer(_model(), os.path.join(model_dir, 'bad'),
                       [policies.ValidateInputs(), forensics.Forensics(when='every', recheck=True)])
      other.fit(_regression(poison_batches=[0]), num_steps=1)
      self.assertEqual(locate.call_count, 1)
      self.assertEqual(rerun.call_count, 1)  # The recheck's re-run also serves the report.

  def test_recheck_transient_and_deterministic(self):
    model_dir = self.get_temp_dir()
    policy = forensics.Forensics(when='never', recheck=True)
    trainer = _trainer(_model(FlakyOnce(name='flaky')), model_dir,
                       [policies.ValidateInputs(), policy])
    summary = trainer.fit(_regression(poison_batches=[2]), num_steps=4)
    self.assertEqual(summary['skipped_steps'], 2)
    rechecks = [(e['step'], e['fault'], e['recheck']) for e in _events(model_dir, 'forensics')]
    self.assertEqual(rechecks, [(1, 'loss', 'transient'), (3, 'input', 'deterministic')])
    self.assertEqual(int(policy.transient_faults.numpy()), 1)
    self.assertEqual(int(policy.deterministic_faults.numpy()), 1)
    self.assertEqual(_records(model_dir), [])  # when='never': no deep record.

  @pytest.mark.slow
  def test_stash_is_not_checkpointed(self):
    model_dir = self.get_temp_dir()
    trainer = _trainer(_model(), model_dir, [forensics.Forensics()])
    trainer.fit(_regression(poison_batches=[0]), num_steps=2)
    names = [n for n, _ in tf.train.list_variables(os.path.join(model_dir, 'checkpoints'))]
    self.assertTrue(any('records_written' in n for n in names))  # Policy state is checkpointed,
    self.assertFalse([n for n in names if 'stash' in n or 'holder' in n])  # the scratch is not.
    # A fresh trainer (no stash yet) resumes from that checkpoint.
    again = _trainer(_model(), model_dir, [forensics.Forensics()])
    summary = again.fit(_regression(poison_batches=[0]), num_steps=3)
    self.assertEqual(summary['global_step'], 3)
    self.assertEqual(_events(model_dir, 'resume')[0]['step'], 2)


if __name__ == '__main__':
  tf.test.main()


class DefaultStackTest(tf.test.TestCase):
  """The default stack's Forensics (optional): a record wherever a run can use one, silence
  elsewhere, and it gives way to a Forensics of one's own."""

  def _default(self, model_dir, **kwargs):
    return trainer_lib.Trainer(model=_model(PlainLog(name='plain_log')),
                               optimizer=keras.optimizers.Adam(1e-3),
                               loss=keras.losses.MeanSquaredError(), model_dir=model_dir,
                               steps_per_loop=4, verbose=False, **kwargs)

  def test_a_run_with_a_model_dir_records_the_first_fault_s_op(self):
    model_dir = self.get_temp_dir()
    summary = self._default(model_dir).fit(_regression(), num_steps=2)
    self.assertEqual(summary['applied_steps'], 0)
    self.assertEqual(_records(model_dir), ['step_1'])  # 'first': one record.
    self.assertEqual([e['op_type'] for e in _events(model_dir, 'forensics')], ['Log'])
    report, _ = forensics.read_record(os.path.join(model_dir, 'forensics', 'step_1'))
    self.assertTrue(report['state'].startswith('before the faulty step'))  # Read at once.

  def test_the_stash_is_made_before_the_loop_is_traced_so_it_is_traced_once(self):
    # A variable made during a tf.function's first trace makes it trace the whole loop again.
    trainer = self._default(self.get_temp_dir())
    trainer.fit(_regression(), num_steps=2)
    [spare] = [p for p in trainer.policies if isinstance(p, forensics.Forensics)]
    self.assertIsNotNone(spare._stash)
    self.assertEqual(trainer.controller.loop.loop_fn.experimental_get_tracing_count(), 1)

  def test_stands_down_without_a_model_dir(self):
    trainer = self._default(None)
    [spare] = [p for p in trainer.policies if isinstance(p, forensics.Forensics)]
    self.assertTrue(spare.optional)
    self.assertFalse(spare.active)
    self.assertFalse(spare.uses_end_step)
    trainer.fit(_regression(), num_steps=2)
    self.assertIsNone(spare._stash)  # Nothing traced for it.

  def test_gives_way_to_one_of_one_s_own(self):
    own = forensics.Forensics(recheck=True)
    trainer = self._default(self.get_temp_dir(),
                            policies=trainer_lib.setup.default_policies() + [own])
    self.assertEqual([p for p in trainer.policies if isinstance(p, forensics.Forensics)], [own])
    alone = forensics.without_spares([forensics.Forensics(optional=True)])
    self.assertLen(alone, 1)  # The only one stays.

  def test_a_fit_compiled_whole_by_xla_runs_without_it(self):
    from stable_train.keras import fit as keras_fit  # pylint: disable=g-import-not-at-top
    model = _model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse', jit_compile=True)
    guard = keras_fit.guard_fit(model)
    model_dir = self.get_temp_dir()
    model.fit(_regression(poison_batches=[1]), epochs=1, steps_per_epoch=4, verbose=0,
              callbacks=[guard.callback(model_dir=model_dir)])
    [spare] = [p for p in guard.policies if isinstance(p, forensics.Forensics)]
    self.assertFalse(spare.active)
    self.assertEqual(int(guard.state.skipped_steps.numpy()), 1)
    # One of one's own still refuses XLA, as before.
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse', jit_compile=True)
    keras_fit.guard_fit(model, policies=[forensics.Forensics()])
    with self.assertRaisesRegex(errors.ConfigError, 'need a step outside XLA'):
      model.fit(_regression(), epochs=1, steps_per_epoch=1, verbose=0)

  def test_an_own_forensics_cannot_stand_down(self):
    with self.assertRaisesRegex(ValueError, 'not optional'):
      forensics.Forensics().stand_down()
    with self.assertRaisesRegex(errors.ConfigError, "Forensics: optional='yes'"):
      forensics.Forensics(optional='yes')

  def test_a_step_it_cannot_investigate_is_told_and_the_run_goes_on(self):
    model_dir = self.get_temp_dir()
    with mock.patch.object(forensics.report_lib, 'build_report',
                           side_effect=RuntimeError('odd model')):
      summary = self._default(model_dir).fit(_regression(), num_steps=2)
    self.assertEqual((summary['global_step'], summary['skipped_steps']), (2, 2))
    [event] = _events(model_dir, 'forensics')
    self.assertEqual(event['error'], 'RuntimeError: odd model')
    self.assertEqual(_records(model_dir), [])


class TwoOutputs(keras.layers.Layer):
  """Two outputs of different shapes (a TabNet step's mask and features)."""

  def call(self, x):
    return x, tf.reduce_sum(x, axis=-1, keepdims=True)


class ActivationsTest(tf.test.TestCase):

  def test_a_layer_with_two_outputs_is_left_out_not_a_crash(self):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((NUM_FEATURES,))
    wide, narrow = TwoOutputs(name='two')(inputs)
    outputs = keras.layers.Dense(1, name='head')(keras.layers.Concatenate()([wide, narrow]))
    model = keras.Model(inputs, outputs)
    scales = activations.activation_scales(model, np.ones((2, NUM_FEATURES), np.float32))
    self.assertIn('head', [s['layer'] for s in scales])
    self.assertNotIn('two', [s['layer'] for s in scales])


class DefaultStackUseTest(tf.test.TestCase):
  """What a user's run meets with the default stack's Forensics: ragged features, a model_dir
  written before it joined the stack, a second fit whose batches have another structure."""

  def _trainer(self, model_dir, policies=None, model=None):
    return trainer_lib.Trainer(model=model or _model(PlainLog(name='plain_log')),
                               optimizer=keras.optimizers.Adam(1e-3),
                               loss=keras.losses.MeanSquaredError(), model_dir=model_dir,
                               policies=policies, steps_per_loop=4, verbose=False)

  def test_ragged_features_train_and_leave_no_record(self):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), ragged=True, dtype='float32')
    dense = keras.layers.Lambda(lambda r: r.to_tensor(shape=[None, NUM_FEATURES]),
                                output_shape=(NUM_FEATURES,))(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(dense))
    rows = tf.ragged.constant([[1.0] * (1 + k % NUM_FEATURES) for k in range(32)])
    data = tf.data.Dataset.from_tensor_slices((rows, tf.ones([32, 1]))).batch(8).repeat()
    model_dir = self.get_temp_dir()
    summary = self._trainer(model_dir, model=model).fit(data, num_steps=4)
    self.assertEqual((summary['status'], summary['applied_steps']), ('completed', 4))

  def test_a_model_dir_of_the_stack_before_it_resumes(self):
    model_dir = self.get_temp_dir()
    old = trainer_lib.setup.default_policies()[:-1]
    self._trainer(model_dir, old, model=_model()).fit(_regression(), num_steps=4)
    summary = self._trainer(model_dir, model=_model()).fit(_regression(), num_steps=8)
    self.assertEqual((summary['status'], summary['global_step']), ('completed', 8))

  def test_a_second_fit_with_another_batch_structure_is_recorded(self):
    model_dir = self.get_temp_dir()
    trainer = self._trainer(model_dir, model=_model())
    weighted = _regression().map(lambda x, y: (x, y, tf.ones_like(y[:, 0])))
    trainer.fit(weighted, num_steps=4)  # Healthy: traces the stash for (x, y, w).
    trainer.fit(_regression(poison_batches=[1]), num_steps=8)
    [event] = _events(model_dir, 'forensics')
    self.assertEqual((event['step'], event['fault']), (6, 'input'))
    _, batch = forensics.read_record(event['dir'])
    self.assertLen(batch, 2)
