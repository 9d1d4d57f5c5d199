"""Tests for stable_train.policies.stopping: BestCheckpoint and EarlyStopping on evaluation results."""

import json
import math
import os

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.app import export
from stable_train.core import interfaces
from stable_train import errors
from stable_train.policies import stopping
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models

FEATURES = 8


def make_data(num_batches=64, seed=0):
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(num_batches * 8, FEATURES)).astype(np.float32)
  y = (x[:, :1] * 0.5).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(8)


class ScriptedEvalTrainer(trainer_lib.Trainer):
  """A Trainer whose eval loss at global step s is `eval_losses[s]` (training is untouched)."""

  def __init__(self, eval_losses, **kwargs):
    super().__init__(**kwargs)
    table = np.full([64], 1e3, np.float32)
    for step, value in eval_losses.items():
      table[step] = value
    self._eval_table = tf.constant(table)
    self.weights_at = {}  # Global step -> the model's weights after that step.

  def compute_loss(self, batch, training):
    loss = super().compute_loss(batch, training)
    if training:
      return loss
    # The script's value whatever the model computes. Not `0 * loss + value`: that is NaN once a
    # weight is, and whether a NaN weight reaches the loss at all depends on the CPU's ReLU kernel.
    return tf.gather(self._eval_table, self.global_step)

  def on_loop_end(self, reports):
    self.weights_at[int(reports.step[-1])] = [w.numpy() for w in self.model.weights]


def make_trainer(model_dir, eval_losses, stop=None, **kwargs):
  stop = stop or stopping.EarlyStopping(patience=3)
  kwargs.setdefault('eval_divergence_factor', None)
  kwargs.setdefault('checkpoint_every', 100)
  return ScriptedEvalTrainer(
      eval_losses, model=models.mlp(input_dim=FEATURES, hidden=(4,), seed=0),
      optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
      policies=trainer_lib.default_policies() + [stop], model_dir=model_dir, **kwargs)


def context(step):
  return interfaces.PolicyContext(step=step, data_position=step, lr_scale=1.0,
                                  variables_finite=lambda: True)


# Improves at steps 2 and 4, then worsens: with patience 3 the eval at step 10 stops the run.
LOSSES = {2: 1.0, 4: 0.5, 6: 0.7, 8: 0.8, 10: 0.9, 12: 0.1}


class ValidationTest(tf.test.TestCase):

  def test_bad_arguments_are_one_line_config_errors(self):
    cases = [
        (dict(patience=0), 'patience=0'), (dict(patience=1.5), 'patience=1.5'),
        (dict(patience=True), 'patience=True'), (dict(min_delta=-0.1), 'min_delta=-0.1'),
        (dict(min_delta=float('nan')), 'min_delta=nan'),
        (dict(min_delta=float('inf')), 'min_delta=inf'), (dict(min_delta='0'), "min_delta='0'"),
        (dict(mode='up'), "mode='up'"), (dict(monitor=''), "monitor=''"),
        (dict(monitor=None), 'monitor=None'),
    ]
    for kwargs, text in cases:
      with self.assertRaises(errors.ConfigError) as ctx:
        stopping.EarlyStopping(**kwargs)
      self.assertIn(text, str(ctx.exception))
      self.assertEqual(len(str(ctx.exception).splitlines()), 1)
    with self.assertRaises(TypeError):
      stopping.EarlyStopping('eval_loss')  # pylint: disable=too-many-function-args

  def test_auto_mode(self):
    self.assertEqual(stopping.EarlyStopping().mode, 'min')
    self.assertEqual(stopping.EarlyStopping(monitor='eval_sparse_categorical_accuracy').mode,
                     'max')
    self.assertEqual(stopping.EarlyStopping(monitor='eval_accuracy', mode='min').mode, 'min')

  def test_at_most_one_best_checkpoint_policy_and_it_needs_evaluations(self):
    with self.assertRaisesRegex(errors.ConfigError, 'would each mark a best checkpoint'):
      trainer_lib.Trainer(model=models.mlp(input_dim=FEATURES, hidden=(4,)),
                          optimizer=keras.optimizers.Adam(), loss=keras.losses.MeanSquaredError(),
                          model_dir=None,
                          policies=[stopping.BestCheckpoint(), stopping.EarlyStopping()])
    t = make_trainer(None, {})
    with self.assertRaisesRegex(errors.ConfigError, 'no eval_dataset'):
      t.fit(make_data(), num_steps=2)
    t = make_trainer(None, {}, stopping.EarlyStopping(monitor='eval_acuracy'))
    with self.assertRaises(errors.ConfigError) as ctx:
      t.fit(make_data(), num_steps=2, eval_dataset=make_data(2))
    self.assertEqual(str(ctx.exception).splitlines(), [
        "EarlyStopping: monitor='eval_acuracy' is not a value the evaluation gives; available: "
        'eval_loss.'])


class DecideEvalTest(tf.test.TestCase):

  def test_patience_min_delta_and_state(self):
    p = stopping.EarlyStopping(patience=2, min_delta=0.05)
    actions = []
    for step, loss in ((1, 1.0), (2, 0.8), (3, 0.78), (4, float('nan')), (5, 0.9)):
      d = p.decide_eval({'eval_loss': loss}, context(step))
      actions.append(d.action if d else None)
    # 0.78 is better than 0.8 but not by more than 0.05; NaN never improves.
    self.assertEqual(actions, ['act', 'act', None, 'stop', 'stop'])
    self.assertEqual((float(p.best_value.numpy()), int(p.best_step.numpy())), (0.8, 2))
    self.assertEqual(int(p.evals_without_improvement.numpy()), 3)
    d = p.decide_eval({'eval_loss': 0.5}, context(6))
    self.assertEqual((d.action, d.trigger, d.details['previous']), ('act', 'best_checkpoint', 0.8))
    self.assertEqual(int(p.evals_without_improvement.numpy()), 0)

  def test_max_mode_on_a_metric_and_the_stop_reason(self):
    p = stopping.EarlyStopping(monitor='eval_accuracy', patience=1)
    values = lambda acc: {'eval_loss': 1.0, 'eval_accuracy': acc, 'accuracy': 0.0}
    self.assertEqual(p.decide_eval(values(0.5), context(10)).action, 'act')
    self.assertEqual(p.decide_eval(values(0.7), context(20)).action, 'act')
    d = p.decide_eval(values(0.7), context(30))
    self.assertEqual((d.action, d.trigger, d.step), ('stop', 'early_stop', 30))
    self.assertEqual(d.reason, 'early stopping: eval_accuracy did not improve by more than 0 for '
                               '1 evaluations; best 0.7 at step 20')

  def test_an_unknown_monitor_names_the_available_keys(self):
    p = stopping.EarlyStopping(monitor='eval_acc')
    with self.assertRaises(errors.ConfigError) as ctx:
      p.decide_eval({'eval_loss': 1.0, 'eval_accuracy': 0.5}, context(1))
    self.assertIn("monitor='eval_acc' is not a value the evaluation gives; available: "
                  'eval_loss, eval_accuracy.', str(ctx.exception))
    self.assertEqual(
        stopping.available_monitors(['accuracy']), ['eval_loss', 'eval_accuracy', 'accuracy'])


class EarlyStoppingFitTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_stops_cleanly_and_marks_the_best_checkpoint(self):
    model_dir = self.get_temp_dir() + '/stop'
    # max_checkpoints=1, keep_good=1: rotation would drop the step-4 checkpoint but for its mark.
    t = make_trainer(model_dir, LOSSES, max_checkpoints=1, keep_good_checkpoints=1)
    summary = t.fit(make_data(), num_steps=30, eval_dataset=make_data(2), eval_every=2)
    reason = ('early stopping: eval_loss did not improve by more than 0 for 3 evaluations; best '
              '0.5 at step 4')
    self.assertEqual((summary['status'], summary['global_step'], summary['reason']),
                     ('stopped_early', 10, reason))
    self.assertEqual(summary['early_stopping'],
                     {'monitor': 'eval_loss', 'mode': 'min', 'best': 0.5, 'best_step': 4,
                      'evals_without_improvement': 3})
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    [stop] = [e for e in records if e['event'] == 'early_stop']
    self.assertEqual((stop['step'], stop['best_step'], stop['reason']), (10, 4, reason))
    self.assertEqual([(e['step'], e['previous']) for e in records
                      if e['event'] == 'best_checkpoint'], [(2, None), (4, 1.0)])
    self.assertEqual(records[-1]['event'], 'done')
    self.assertEqual(records[-1]['status'], 'stopped_early')
    # The best checkpoint was written at the eval of step 4 and survived rotation; the manifest
    # (reloaded from disk) marks it, and export's 'best' is it.
    keeper = checkpointing.CheckpointKeeper(tf.train.Checkpoint(),
                                            os.path.join(model_dir, 'checkpoints'))
    self.assertEqual([(e.step, e.best) for e in keeper.committed()], [(4, True), (10, False)])
    self.assertEqual(export.checkpoint_path(model_dir, 'best'),
                     os.path.join(model_dir, 'checkpoints', keeper.best().path))
    fresh = export.load_for_inference(models.mlp(input_dim=FEATURES, hidden=(4,), seed=3),
                                      model_dir, checkpoint='best')
    for a, b in zip(fresh.weights, t.weights_at[4]):
      np.testing.assert_array_equal(a.numpy(), b)
    self.assertFalse(np.array_equal(t.weights_at[4][0], t.weights_at[10][0]))
    # A checkpoint is written once per step: the step-4 eval's save was the only one there.
    saves = [(e['step'], e['reason']) for e in records if e['event'] == 'checkpoint']
    self.assertEqual(saves, [(2, 'best'), (4, 'best'), (10, 'end')])

  @pytest.mark.slow
  def test_a_resumed_run_goes_on_counting(self):
    model_dir = self.get_temp_dir() + '/resume'
    first = make_trainer(model_dir, LOSSES)
    summary = first.fit(make_data(), num_steps=8, eval_dataset=make_data(2), eval_every=2)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['early_stopping']['evals_without_improvement'], 2)
    second = make_trainer(model_dir, LOSSES)
    summary = second.fit(make_data(), num_steps=30, eval_dataset=make_data(2), eval_every=2)
    # One more eval without improvement (step 10) makes 3: without the restored count the run
    # would go on to the step-12 improvement.
    self.assertEqual((summary['status'], summary['global_step']), ('stopped_early', 10))
    self.assertEqual(summary['early_stopping']['best_step'], 4)

  @pytest.mark.slow
  def test_the_same_run_started_again_after_an_early_stop_trains_no_more(self):
    model_dir = self.get_temp_dir() + '/again'
    first = make_trainer(model_dir, LOSSES)
    summary = first.fit(make_data(), num_steps=30, eval_dataset=make_data(2), eval_every=2)
    self.assertEqual((summary['status'], summary['global_step']), ('stopped_early', 10))
    again = make_trainer(model_dir, LOSSES)
    summary = again.fit(make_data(), num_steps=30, eval_dataset=make_data(2), eval_every=2)
    # Without the restored stop the run would train to its step-12 evaluation (an improvement).
    self.assertEqual((summary['status'], summary['global_step'], summary['steps_this_run']),
                     ('stopped_early', 10, 0))
    self.assertIn('for 3 evaluations; best 0.5 at step 4', summary['reason'])
    self.assertEqual(summary['early_stopping']['evals_without_improvement'], 3)
    keeper = checkpointing.CheckpointKeeper(tf.train.Checkpoint(),
                                            os.path.join(model_dir, 'checkpoints'))
    self.assertEqual([(e.step, e.best) for e in keeper.committed()],
                     [(2, False), (4, True), (10, False)])
    # A higher patience is how to train on.
    more = make_trainer(model_dir, LOSSES, stopping.EarlyStopping(patience=5))
    summary = more.fit(make_data(), num_steps=12, eval_dataset=make_data(2), eval_every=2)
    self.assertEqual((summary['status'], summary['global_step']), ('completed', 12))
    self.assertEqual(summary['early_stopping']['best_step'], 12)

  @pytest.mark.slow
  def test_best_checkpoint_alone_marks_and_never_stops(self):
    model_dir = self.get_temp_dir() + '/best'
    t = make_trainer(model_dir, LOSSES, stopping.BestCheckpoint(), checkpoint_every=4)
    summary = t.fit(make_data(), num_steps=12, eval_dataset=make_data(2), eval_every=2)
    self.assertEqual((summary['status'], summary['global_step']), ('completed', 12))
    self.assertEqual(summary['best_checkpoint']['best_step'], 12)
    entries = checkpointing.CheckpointKeeper(
        tf.train.Checkpoint(), os.path.join(model_dir, 'checkpoints')).committed()
    self.assertEqual([e.step for e in entries if e.best], [12])
    # The eval comes before the interval cadence: a best save at step 4 or 12 is that step's one
    # checkpoint (the cadence counts from it), and no 'end' checkpoint repeats step 12.
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    self.assertEqual([(e['step'], e['reason']) for e in records if e['event'] == 'checkpoint'],
                     [(2, 'best'), (4, 'best'), (8, 'interval'), (12, 'best')])

  def test_a_training_metric_window_of_skipped_steps_is_never_the_best(self):
    model_dir = self.get_temp_dir() + '/skipped_window'
    rng = np.random.RandomState(0)
    x = rng.normal(size=(64, FEATURES)).astype(np.float32)
    x[:16] = np.nan  # Batches 0 and 1: the first loop's two steps are both skipped.
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 0.5)).batch(8)
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=FEATURES, hidden=(4,), seed=0),
        optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
        policies=trainer_lib.default_policies() + [
            stopping.BestCheckpoint(monitor='mean_squared_error')],
        metrics=[keras.metrics.MeanSquaredError()], model_dir=model_dir, steps_per_loop=2,
        log_every=2, checkpoint_every=100, eval_divergence_factor=None)
    summary = t.fit(data, num_steps=6, eval_dataset=make_data(2), eval_every=2)
    self.assertEqual(summary['skipped_steps'], 2)
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    # The step-2 window counted no sample: its MSE is no value (it read 0.0, a best no later
    # window could beat, on the checkpoint right after the faults).
    best = [(e['step'], e['previous']) for e in records if e['event'] == 'best_checkpoint']
    self.assertEqual(best[0], (4, None))
    self.assertGreater(summary['best_checkpoint']['best'], 0.0)

  @pytest.mark.slow
  def test_a_refused_checkpoint_is_never_marked_best(self):

    class PoisonAtFour(ScriptedEvalTrainer):
      """A weight turns NaN after step 4, before its evaluation (scripted: finite, improving)."""

      def on_loop_end(self, reports):
        super().on_loop_end(reports)
        if int(reports.step[-1]) == 4:
          self.model.weights[0].assign(tf.fill(self.model.weights[0].shape, math.nan))

    model_dir = self.get_temp_dir() + '/refused'
    t = PoisonAtFour(
        {2: 1.0, 4: 0.5}, model=models.mlp(input_dim=FEATURES, hidden=(4,), seed=0),
        optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
        policies=[stopping.BestCheckpoint()], model_dir=model_dir, checkpoint_every=100,
        eval_divergence_factor=None)
    summary = t.fit(make_data(), num_steps=4, eval_dataset=make_data(2), eval_every=2)
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    best = [e for e in records if e['event'] == 'best_checkpoint']
    self.assertEqual([(e['step'], e['value'], e['checkpoint']) for e in best],
                     [(2, 1.0, 'ckpt-1'), (4, 0.5, None)])
    self.assertIn('not marked', best[1]['note'])
    self.assertIn('checkpoint_refused', [e['event'] for e in records if e['step'] == 4])
    keeper = checkpointing.CheckpointKeeper(tf.train.Checkpoint(),
                                            os.path.join(model_dir, 'checkpoints'))
    self.assertEqual([(e.step, e.best) for e in keeper.committed()], [(2, True)])
    # The final checkpoint is refused too: never 'completed' with a stale checkpoint.
    self.assertEqual(summary['status'], 'aborted')


if __name__ == '__main__':
  tf.test.main()
