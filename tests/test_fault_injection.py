"""Tests for stable_train.faults: each injected fault happens where configured, is logged, and the
Trainer's guards handle it; an unconfigured plan adds nothing."""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from stable_train import errors
from stable_train.forensics import forensics
from stable_train.policies import basic as policies
from stable_train.runfiles import events
from stable_train.testing import faults
from stable_train.trainer import trainer as trainer_lib

FEATURES = 8


def make_data(num_batches=40, batch_size=4):
  rng = np.random.RandomState(0)
  x = rng.normal(size=(num_batches * batch_size, FEATURES)).astype(np.float32)
  y = (x[:, :1] * 0.5).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)


def make_trainer(model_dir=None, plan=None, extra=(), **kwargs):
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4, name='dense_0'),
                            keras.layers.Dense(1, name='dense_1')], name='net')
  return trainer_lib.Trainer(
      model=model, optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
      policies=[policies.ClipByGlobalNorm(), policies.SkipNonFinite(max_consecutive=100),
                *extra], model_dir=model_dir, faults=plan, **kwargs)


def read_events(model_dir, kind):
  return [r for r in events.read_events(os.path.join(model_dir, 'events.jsonl'))
          if r['event'] == kind]


class FaultsTest(tf.test.TestCase):

  def test_unconfigured_plan_adds_nothing(self):
    plan = faults.Faults()
    data = make_data()
    self.assertIs(plan.wrap_dataset(data), data)
    loss = tf.constant(1.0)
    self.assertIs(plan.transform_loss(loss), loss)
    self.assertEqual(plan.data_faults(3), [])

  def test_bad_configuration_is_a_config_error(self):
    for kwargs, text in ((dict(loss_nan_steps=[0]), 'loss_nan_steps'),
                         (dict(loss_nan_steps=5), 'list of integers'),
                         (dict(feature_nan_probability=2.0), 'probability'),
                         (dict(loss_spike_factor=0.5), 'loss_spike_factor'),
                         (dict(gradient_nan_steps=[3]), 'gradient_variable'),
                         (dict(exit_step=-1), 'exit_step')):
      with self.assertRaisesRegex(errors.ConfigError, text):
        faults.Faults(**kwargs)
    with self.assertRaisesRegex(errors.ConfigError, "gradient_variable='nope'.*net/dense_0/kernel"):
      make_trainer(plan=faults.Faults(gradient_nan_steps=[2], gradient_variable='nope')).fit(
          make_data(), num_steps=2)

  def test_data_faults_hit_exactly_the_configured_batches(self):
    plan = faults.Faults(feature_nan_batches=[2], feature_inf_batches=[5], label_nan_batches=[5],
                         label_inf_batches=[7], feature_nan_probability=0.2, seed=3)
    bad = {}
    for i, (x, y) in enumerate(plan.wrap_dataset(make_data())):
      kinds = set()
      if np.isnan(x.numpy()).any():
        kinds.add('feature_nan')
      if np.isinf(x.numpy()).any():
        kinds.add('feature_inf')
      if np.isnan(y.numpy()).any():
        kinds.add('label_nan')
      if np.isinf(y.numpy()).any():
        kinds.add('label_inf')
      self.assertLessEqual(int((~np.isfinite(x.numpy())).sum()), 1)
      if kinds:
        bad[i] = kinds
      # The host computes the same decision (for the event log) as the pipeline stage.
      self.assertEqual({f['kind'] for f in plan.data_faults(i)}, kinds, i)
    self.assertEqual(bad[2], {'feature_nan'})
    self.assertEqual(bad[5], {'feature_inf', 'label_nan'})
    self.assertEqual(bad[7], {'label_inf'})
    random = sorted(set(i for i, k in bad.items() if 'feature_nan' in k) - {2})
    self.assertBetween(len(random), 2, 16)  # About 0.2 of 40 batches.
    again = faults.Faults(feature_nan_probability=0.2, seed=3)  # Seeded: the same batches.
    self.assertEqual([i for i in range(40) if again.data_faults(i)], random)

  def test_step_faults_are_skipped_spiked_logged_and_never_checkpointed(self):
    model_dir = self.get_temp_dir()
    plan = faults.Faults(loss_nan_steps=[3], loss_inf_steps=[4], loss_spike_steps=[6],
                         loss_spike_factor=1e6, gradient_nan_steps=[8],
                         gradient_variable='net/dense_1/kernel', feature_nan_batches=[9])
    trainer = make_trainer(model_dir, plan, extra=[policies.ValidateInputs()], steps_per_loop=3,
                           checkpoint_every=3)
    grad_norms = {}
    trainer.on_loop_end = lambda r: grad_norms.update(zip(r.step.tolist(), r.grad_norm.tolist()))
    summary = trainer.fit(make_data(), num_steps=12)
    self.assertEqual(summary['skipped_steps'], 4)  # Steps 3, 4, 8 and 10 (batch 9).
    self.assertEqual(summary['input_faults'], 1)
    skips = {r['step']: r for r in read_events(model_dir, 'skip')}
    self.assertEqual(sorted(skips), [3, 4, 8, 10])
    self.assertEqual(skips[3]['fault'], 'loss')
    self.assertEqual(skips[8]['fault'], 'gradient')
    self.assertIn('gradient of net/dense_1/kernel', skips[8]['tensor'])
    self.assertEqual(skips[10]['fault'], 'input')
    injected = [(r['step'], r['kind']) for r in read_events(model_dir, 'fault_injected')]
    self.assertEqual(sorted(injected), [(3, 'loss_nan'), (4, 'loss_inf'), (6, 'loss_spike'),
                                        (8, 'gradient_nan'), (10, 'feature_nan')])
    # The spike is finite and ×1e6 (applied, clipped); its neighbours are ordinary.
    self.assertGreater(grad_norms[6], 1e4 * max(grad_norms[5], grad_norms[7]))
    for entry in trainer.checkpoints.committed():
      reader = tf.train.load_checkpoint(os.path.join(trainer.checkpoints.directory, entry.path))
      for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:
          self.assertTrue(np.isfinite(reader.get_tensor(name)).all(), name)

  def test_disk_full_stops_the_run_and_keeps_the_committed_checkpoints(self):
    model_dir = self.get_temp_dir()
    trainer = make_trainer(model_dir, faults.Faults(disk_full_step=5), steps_per_loop=2,
                           checkpoint_every=2)
    with self.assertRaisesRegex(errors.CheckpointError,
                                r'could not write a checkpoint at step 6: .*No space left on '
                                r'device.*resumes from ckpt-2 \(step 4\)'):
      trainer.fit(make_data(), num_steps=10)
    directory = os.path.join(model_dir, 'checkpoints')
    with open(os.path.join(directory, 'manifest.json')) as f:
      self.assertEqual([e['step'] for e in json.load(f)['checkpoints']], [2, 4])
    self.assertFalse([n for n in os.listdir(directory) if n.startswith('ckpt-3')])
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
    self.assertEqual(summary['status'], 'aborted')
    self.assertEqual([r['step'] for r in read_events(model_dir, 'checkpoint_failed')], [6])
    self.assertEqual(read_events(model_dir, 'fault_injected')[0]['kind'], 'disk_full')

  def test_checkpoint_and_manifest_faults_break_what_they_name(self):
    model_dir = self.get_temp_dir()
    directory = os.path.join(model_dir, 'checkpoints')
    plan = faults.Faults(corrupt_checkpoint_step=5, delete_checkpoint_step=9,
                         corrupt_manifest_step=11, sigterm_step=11)
    trainer = make_trainer(model_dir, plan, steps_per_loop=2, checkpoint_every=2)
    summary = trainer.fit(make_data(), num_steps=20)
    self.assertEqual(summary['status'], 'interrupted')  # The SIGTERM at step 11 (loop end 12).
    self.assertEqual(summary['global_step'], 12)
    kinds = {r['kind']: r for r in read_events(model_dir, 'fault_injected')}
    self.assertEqual(sorted(kinds), ['corrupt_checkpoint', 'corrupt_manifest',
                                     'delete_checkpoint', 'sigterm'])
    self.assertEqual(kinds['corrupt_checkpoint']['checkpoint'], 'ckpt-2')
    self.assertEqual(kinds['delete_checkpoint']['checkpoint'], 'ckpt-4')
    self.assertFalse([n for n in os.listdir(directory) if n.startswith('ckpt-4.')])
    data = tf.io.gfile.glob(os.path.join(directory, 'ckpt-2.data-*'))[0]
    self.assertLess(os.path.getsize(data),
                    os.path.getsize(tf.io.gfile.glob(os.path.join(directory, 'ckpt-3.data-*'))[0]))
    # The manifest was cut at step 11 and rewritten whole by the SIGTERM checkpoint at step 12.
    with open(os.path.join(directory, 'manifest.json')) as f:
      self.assertEqual(json.load(f)['checkpoints'][-1]['step'], 12)



class FaultPlanChecksTest(tf.test.TestCase):

  def test_label_fault_on_integer_labels_is_a_config_error(self):
    x = np.random.RandomState(0).randn(64, 4).astype('float32')
    y = np.random.RandomState(1).randint(0, 3, 64).astype('int32')
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    t = trainer_lib.Trainer(
        model=model, optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), model_dir=None,
        faults=faults.Faults(label_nan_batches=[0]))
    with self.assertRaisesRegex(errors.ConfigError, 'label_nan_batches needs a floating-point'):
      t.fit(data, num_steps=3)

if __name__ == '__main__':
  tf.test.main()
