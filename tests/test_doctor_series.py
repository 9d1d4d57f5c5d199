"""Tests for stable_train.doctor.series: the per-step values the doctor's plot draws (the
TensorBoard scalars with the history events' windows merged in, in stretches cut at rollbacks)
and its marks."""

import os
import time

import numpy as np
import tensorflow as tf

from stable_train.doctor import series
from stable_train.runfiles import events as events_lib


def write_scalars(model_dir, rows):
  """Report scalars as the loop recorder writes them: {step: loss}, grad_norm = 2 x loss."""
  writer = events_lib.Scalars(os.path.join(model_dir, 'tensorboard'))
  for step, loss in rows:
    writer.write(step, {'loss': loss, 'grad_norm': 2 * loss, 'grad_norm_clipped': 2 * loss,
                        'learning_rate': 0.1, 'loss_scale': 1.0})
  writer.close()


def history(step, steps, losses, when):
  return {'event': 'history', 'step': step, 'time': when, 'steps': steps, 'loss': losses,
          'grad_norm': [2 * v for v in losses], 'clipped_grad_norm': [2 * v for v in losses],
          'learning_rate': [0.1] * len(steps), 'loss_scale': [1.0] * len(steps),
          'applied': [True] * len(steps)}


class StretchesTest(tf.test.TestCase):

  def test_a_rollback_starts_a_stretch_and_the_history_fills_the_one_it_came_from(self):
    model_dir = self.get_temp_dir()
    write_scalars(model_dir, [(5, 1.0), (10, 0.5), (15, 4.0), (20, 9.0)])
    written = time.time()
    time.sleep(0.01)
    write_scalars(model_dir, [(15, 0.4), (20, 0.3), (25, 0.2)])  # After the rollback to 10.
    events = [history(18, list(range(13, 19)), [2.0, 3.0, 4.0, 'nan', 6.0, 7.0], written),
              {'event': 'rollback', 'step': 20, 'to_step': 10, 'time': written}]
    source, runs = series.stretches(model_dir, events)
    self.assertEqual(source, 'tensorboard scalars + history events')
    self.assertEqual([r['step'].tolist() for r in runs],
                     [[5, 10, 13, 14, 15, 16, 17, 18, 20], [15, 20, 25]])
    self.assertEqual([r['undone_after'] for r in runs], [10, None])  # The rollback's target.
    self.assertAllClose(runs[0]['loss'], [1.0, 0.5, 2.0, 3.0, 4.0, np.nan, 6.0, 7.0, 9.0])
    self.assertAllClose(runs[1]['grad_norm'], [0.8, 0.6, 0.4])

  def test_a_window_that_matches_no_loss_goes_to_the_stretch_running_when_it_was_written(self):
    model_dir = self.get_temp_dir()
    write_scalars(model_dir, [(10, 1.0), (20, 2.0)])
    time.sleep(0.01)
    writer = events_lib.Scalars(os.path.join(model_dir, 'tensorboard'))  # Resumed from step 10.
    writer.write(11, {'loss': 1.0})
    time.sleep(0.01)
    written = time.time()
    time.sleep(0.01)
    writer.write(21, {'loss': 1.0})
    writer.close()
    # The window spans the resume: its steps before the cut belong to the stretch before.
    events = [{'event': 'resume', 'step': 10, 'time': written - 0.01},
              history(13, [18, 19, 11, 12, 13], [5.0, 6.0, 7.0, 8.0, 9.0], written)]
    _, runs = series.stretches(model_dir, events)
    self.assertEqual([r['step'].tolist() for r in runs], [[10, 18, 19, 20], [11, 12, 13, 21]])
    self.assertEqual(runs[0]['undone_after'], 10)

  def test_without_scalars_each_history_window_is_drawn_alone(self):
    events = [history(4, [1, 2, 3, 4], [1.0, 2.0, 3.0, 'inf'], 1.0),
              history(90, [88, 89, 90], [1.0, 1.0, 1.0], 2.0)]
    source, runs = series.stretches(self.get_temp_dir(), events)
    self.assertEqual(source, 'history events')
    self.assertEqual([r['step'].tolist() for r in runs], [[1, 2, 3, 4], [88, 89, 90]])
    self.assertEqual([r['undone_after'] for r in runs], [87, None])  # Nothing went back.
    self.assertEqual(series.stretches(self.get_temp_dir(), []), (None, []))


class MarksTest(tf.test.TestCase):

  def test_the_marks_of_a_run(self):
    runs = [{'step': np.array([1, 2, 3]), 'grad_norm': np.array([1.0, 50.0, np.nan]),
             'clipped_grad_norm': np.array([1.0, 5.0, np.nan])}]
    events = [{'event': 'skip', 'step': 3, 'fault': 'gradient'},
              {'event': 'skip', 'step': 3, 'fault': 'gradient'},  # The same step again.
              {'event': 'skip', 'step': 7, 'fault': 'overflow'},
              {'event': 'rollback', 'step': 8, 'to_step': 0, 'trigger': 'divergence'},
              {'event': 'diverged', 'step': 9, 'trigger': 'divergence'}]
    marks = series.marks(events, {'cause': 'learning_rate', 'label': 'l', 'confidence': 'high',
                                  'trouble_began': 2}, runs)
    self.assertEqual(marks, {
        'skips': [3, 7], 'skip_faults': {'gradient': [3], 'overflow': [7]}, 'clips': [2],
        'rollbacks': [{'from': 8, 'to': 0, 'trigger': 'divergence'}],
        'stops': [{'step': 9, 'status': 'diverged', 'trigger': 'divergence'}],
        'trouble_began': 2, 'cause': 'learning_rate', 'label': 'l', 'confidence': 'high'})


if __name__ == '__main__':
  tf.test.main()
