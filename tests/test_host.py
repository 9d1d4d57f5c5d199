"""Tests for runtime/host.py: the one host side both front doors drive."""

import os

import keras
import numpy as np
import tensorflow as tf

import stable_train
from stable_train.core import state as state_lib
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events as events_lib
from stable_train.runtime import host as host_lib
from stable_train.runtime import options as options_lib


class _Keeper:
  """A keeper that keeps every entry in a list."""

  directory = None
  restored_from = None

  def __init__(self):
    self.entries = []

  def save(self, step, good, **unused):
    entry = checkpointing.Entry(number=len(self.entries) + 1, step=int(step), good=bool(good),
                                path=f'ckpt-{len(self.entries) + 1}')
    self.entries.append(entry)
    return entry

  def wait(self):
    return None

  def committed(self):
    return list(self.entries)

  def last_good(self, before_step=None):
    return next((e for e in reversed(self.entries) if e.good), None)


class _Door:
  """The model's side: a TrainState and one variable."""

  bad_batch_is_fault = False
  probe = None

  def __init__(self):
    self.state = state_lib.TrainState(policies=[], strategy=tf.distribute.get_strategy())
    self.policies = []
    self.saves = []

  def epoch_of(self, step):
    return None

  def save(self, reason):
    self.saves.append(reason)
    return None


def _host(healthy_window=5, max_refused=2):
  records = []
  door = _Door()
  variable = tf.Variable([1.0, 2.0], name='w')
  host = host_lib.RunHost(
      door, options_lib.RunOptions(healthy_window=healthy_window,
                                   max_refused_checkpoints=max_refused),
      variables=lambda: [variable], events=events_lib.EventLog(None, deliver=records.append))
  host.keeper = _Keeper()
  return host, door, variable, records


class RunHostTest(tf.test.TestCase):

  def test_the_fault_mark_blocks_good_marks_for_healthy_window_steps(self):
    host, door, _, records = _host(healthy_window=5)
    door.state.global_step.assign(10)
    host.mark_fault(10)
    host.mark_fault(4)  # An older fault moves the mark nowhere.
    goods = []
    for step in range(11, 17):
      door.state.global_step.assign(step)
      goods.append(host.save('interval').good)
    self.assertEqual(goods, [False] * 5 + [True])  # Steps 11-15 are within the window.
    self.assertEqual(int(door.state.last_fault_step.numpy()), 10)
    self.assertEqual(host.context().last_good_checkpoint().step, 16)
    self.assertEmpty([r for r in records if r['event'] == 'checkpoint_refused'])

  def test_a_non_finite_variable_refuses_the_save_and_counts_to_a_fault(self):
    host, door, variable, records = _host(max_refused=2)
    door.state.global_step.assign(3)
    variable.assign([1.0, np.nan])
    self.assertIsNone(host.save('interval'))
    self.assertIsNone(host.refusal_fault(3))  # One refusal is not a fault yet.
    self.assertIsNone(host.save('interval'))
    self.assertEmpty(host.keeper.entries)  # Nothing was kept.
    refused = [r for r in records if r['event'] == 'checkpoint_refused']
    self.assertEqual([(r['variables'], r['in_a_row']) for r in refused], [(['w'], 1), (['w'], 2)])
    self.assertFalse(host.context().variables_finite())
    fault = host.refusal_fault(3)
    self.assertEqual((fault.action, fault.trigger), ('escalate', 'checkpoint_refused'))
    self.assertEqual(fault.reason, '2 checkpoints in a row refused: variable w is non-finite; '
                                   'no checkpoint was written before it')
    variable.assign([1.0, 2.0])
    self.assertIsNotNone(host.save('interval'))
    self.assertEqual(host.refused, 0)

  def test_checkpoint_now_reuses_the_checkpoint_of_this_step(self):
    host, door, _, _ = _host()
    door.state.global_step.assign(7)
    entry = host.save('interval')
    self.assertIs(host.checkpoint_now('best'), entry)
    door.state.global_step.assign(8)
    host.checkpoint_now('best')
    self.assertEqual(door.saves, ['best'])  # The door's save hook, for a step with none.

  def test_batch_index_and_data_position_count_the_skipped_batches(self):
    host, door, _, _ = _host()
    door.state.global_step.assign(6)
    door.state.data_offset.assign(3)
    self.assertEqual(host.data_position(), 9)
    self.assertEqual([host.run.batch_index(s) for s in (0, 1, 6)], [3, 3, 8])

  def test_the_context_reads_step_position_and_rate_scale_when_read_and_once(self):
    host, door, _, _ = _host()
    door.state.global_step.assign(6)
    door.state.data_offset.assign(3)
    door.state.lr_scale.assign(0.5)
    reads = []
    for name in ('step', 'data_position', 'lr_scale'):  # Count the host's reads.
      original = getattr(host, name)
      setattr(host, name, lambda original=original, name=name: reads.append(name) or original())
    context = host.context()
    self.assertEmpty(reads)  # A decision that reads none of the three costs no variable read.
    door.state.global_step.assign(7)  # Read at the first access...
    self.assertEqual((context.step, context.data_position, context.lr_scale), (7, 10, 0.5))
    self.assertEqual(set(reads), {'step', 'data_position', 'lr_scale'})
    first = len(reads)
    door.state.global_step.assign(8)  # ...and kept: one view, one value.
    self.assertEqual((context.step, context.data_position, context.lr_scale), (7, 10, 0.5))
    self.assertLen(reads, first)
    values = stable_train.PolicyContext(step=3, data_position=4, lr_scale=0.25,
                                        variables_finite=lambda: True)
    self.assertEqual((values.step, values.data_position, values.lr_scale), (3, 4, 0.25))

  def test_a_failing_read_of_the_context_names_itself(self):
    def broken():
      raise AttributeError("'NoneType' object has no attribute 'numpy'")
    context = stable_train.PolicyContext(step=broken, data_position=0, lr_scale=1.0,
                                         variables_finite=lambda: True)
    with self.assertRaisesRegex(RuntimeError, "reading step failed: 'NoneType' object"):
      context.step  # pylint: disable=pointless-statement


def _model():
  inputs = keras.Input((3,), name='x')
  outputs = keras.layers.Dense(1, name='out')(inputs)
  model = keras.Model(inputs, outputs, name='m')
  model.compile(optimizer=keras.optimizers.SGD(0.01), loss='mse')
  return model


def _arrays():
  rng = np.random.default_rng(0)
  return rng.normal(size=(16, 3)).astype('float32'), rng.normal(size=(16, 1)).astype('float32')


class BothDoorsTest(tf.test.TestCase):
  """The Trainer and a guarded fit act through one host: the same handle, the same refusal."""

  def _doors(self):
    x, y = _arrays()
    trainer_dir = os.path.join(self.get_temp_dir(), 'trainer')
    fit_dir = os.path.join(self.get_temp_dir(), 'fit')
    trainer = stable_train.Trainer(model=_model(), policies=[], model_dir=trainer_dir,
                                   checkpoint_every=2, verbose=False)
    trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat(), num_steps=4)
    model = _model()
    callback = stable_train.guard_fit(model, policies=[]).callback(model_dir=fit_dir,
                                                                   checkpoint_every=2)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    return (trainer, trainer_dir, trainer.controller.host), (model, fit_dir, callback.host)

  def test_both_handles_agree_and_both_refuse_a_non_finite_save_alike(self):
    (trainer, trainer_dir, trainer_host), (model, fit_dir, fit_host) = self._doors()
    for host in (trainer_host, fit_host):
      host.model.state.data_offset.assign(2)
    self.assertEqual(trainer.controller.run.step, 4)
    self.assertEqual(fit_host.run.step, 4)
    self.assertEqual([trainer.controller.run.batch_index(s) for s in (1, 4, 9)],
                     [fit_host.run.batch_index(s) for s in (1, 4, 9)])
    self.assertEqual(trainer.controller.run.data_position, fit_host.run.data_position)

    refusals = []
    for m, model_dir, save in ((trainer.model, trainer_dir, trainer.save_checkpoint),
                               (model, fit_dir, fit_host.model.save)):
      checkpoints = os.path.join(model_dir, 'checkpoints')
      before = sorted(os.listdir(checkpoints))
      self.assertNotEmpty([f for f in before if f.startswith('ckpt-')])
      with open(os.path.join(checkpoints, 'manifest.json')) as f:
        manifest = f.read()
      kernel = m.get_layer('out').kernel
      kernel.assign(tf.fill(kernel.shape, np.nan))
      self.assertIsNone(save('interval'))
      self.assertEqual(sorted(os.listdir(checkpoints)), before)  # Nothing written.
      with open(os.path.join(checkpoints, 'manifest.json')) as f:
        self.assertEqual(f.read(), manifest)
      record = events_lib.read_events(os.path.join(model_dir, 'events.jsonl'))[-1]
      refusals.append({k: record[k] for k in ('event', 'step', 'reason', 'variables',
                                              'in_a_row')})
    self.assertEqual(refusals[0], refusals[1])
    self.assertEqual(refusals[0]['event'], 'checkpoint_refused')
    self.assertIn('out/kernel', refusals[0]['variables'][0])
    self.assertEqual(trainer_host.refused_reason('refused'), fit_host.refused_reason('refused'))


if __name__ == '__main__':
  tf.test.main()
