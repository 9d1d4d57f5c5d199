"""Tests for stable_train.runtime.recorder: skip events, scalars and progress lines of a loop of reports."""

import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.runtime import recorder as recorder_lib


class _Scalars:
  writing = True

  def __init__(self):
    self.written = []

  def write(self, step, values):
    self.written.append((step, values))


class LoopRecorderTest(tf.test.TestCase):

  def test_skip_events_and_per_step_counters(self):
    events, scalars = [], _Scalars()
    recorder = recorder_lib.LoopRecorder(emit=lambda e, s, **f: events.append((e, s, f)),
                                 scalars=scalars, summary_every=1, log_every=100)
    applied = np.array([True, False, True, False])
    n = 4
    reports = interfaces.StepReports(
        step=np.arange(11, 15), loss=np.ones(n), grad_norm=np.ones(n),
        clipped_grad_norm=np.ones(n), loss_finite=np.ones(n, bool), grads_finite=applied,
        inputs_finite=np.ones(n, bool), outputs_finite=np.ones(n, bool),
        first_bad_grad=np.where(applied, -1, 0), first_bad_input=-np.ones(n, int),
        applied=applied, learning_rate=np.ones(n), variable_paths=['w'])
    recorder.record(reports, skipped_total=7)  # 5 skips before this loop, 2 in it.
    self.assertEqual([(e, s) for e, s, _ in events], [('skip', 12), ('skip', 14)])
    self.assertEqual(events[0][2]['tensor'], 'gradient of w')
    by_step = {s: v['skipped_steps'] for s, v in scalars.written}
    self.assertEqual(by_step, {11: 5.0, 12: 6.0, 13: 6.0, 14: 7.0})

  def test_progress_lines_show_the_window_mean_percent_eta_and_rate_without_tracing(self):
    recorder = recorder_lib.LoopRecorder(emit=lambda *a, **f: None, scalars=_Scalars(), summary_every=100,
                                 log_every=4, num_steps=16)

    def loop(first_step, losses, applied):
      n = len(losses)
      applied = np.array(applied)
      return interfaces.StepReports(
          step=np.arange(first_step, first_step + n), loss=np.array(losses),
          grad_norm=np.ones(n), clipped_grad_norm=np.ones(n), loss_finite=np.isfinite(losses),
          grads_finite=applied, inputs_finite=np.ones(n, bool), outputs_finite=np.ones(n, bool),
          first_bad_grad=-np.ones(n, int), first_bad_input=-np.ones(n, int), applied=applied,
          learning_rate=np.ones(n), variable_paths=['w'])

    with self.assertLogs('stable_train', level='INFO') as logs:
      recorder.record(loop(1, [1.0, 2.0, float('nan'), 3.0], [True, True, False, True]), 1)
      recorder.record(loop(5, [4.0, 4.0, 4.0, 8.0], [True] * 4), 1)
    first, second = logs.output
    # The mean of the window's applied losses (the skipped NaN left out), not the last batch.
    self.assertIn('step 4/16 (25%)  loss 2 ', first)
    self.assertIn('- steps/s (tracing)', first)  # The first loop traced: no rate, no ETA.
    self.assertIn('step 8/16 (50%, ETA ', second)
    self.assertIn('loss 5 ', second)
    self.assertRegex(second, r'[0-9.]+ steps/s')


  def test_clean_loops_between_cadence_steps_still_count_into_the_window(self):
    # Loops of 3 steps, summaries and progress every 10: loops 1-3, 4-6 and 7-9 are clean and
    # hold no cadence step (the fast path: nothing written); 10-12 holds one.
    scalars = _Scalars()
    recorder = recorder_lib.LoopRecorder(emit=lambda *a, **f: None, scalars=scalars, summary_every=10,
                                 log_every=10)

    def loop(first_step):
      n = 3
      ok = np.ones(n, bool)
      return interfaces.StepReports(
          step=np.arange(first_step, first_step + n), loss=np.arange(first_step, first_step + n,
                                                                     dtype=np.float32),
          grad_norm=np.ones(n), clipped_grad_norm=np.ones(n), loss_finite=ok, grads_finite=ok,
          inputs_finite=ok, outputs_finite=ok, first_bad_grad=-np.ones(n, int),
          first_bad_input=-np.ones(n, int), applied=ok, learning_rate=np.ones(n),
          variable_paths=['w'])

    for first in (1, 4, 7):
      recorder.record(loop(first), 0)
    self.assertEqual(scalars.written, [])
    with self.assertLogs('stable_train', level='INFO') as logs:
      recorder.record(loop(10), 0)
    self.assertEqual([s for s, _ in scalars.written], [10])
    self.assertEqual(scalars.written[0][1]['loss'], 10.0)
    self.assertIn('step 10  loss 5.5 ', logs.output[0])  # The mean of losses 1..10.
    self.assertIn('steps/s', logs.output[0])
    self.assertEqual(recorder._loops, 4)  # pylint: disable=protected-access

if __name__ == '__main__':
  tf.test.main()
