"""Tests for stable_train.runtime.history: the steps before trouble, written once per episode."""

import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.runtime import history


def loop(first, n, skipped=(), overflow=()):
  steps = np.arange(first, first + n)
  return interfaces.StepReports(
      step=steps, loss=steps * 1.0, grad_norm=steps * 0.1, clipped_grad_norm=steps * 0.1,
      loss_finite=np.ones(n, bool), grads_finite=np.ones(n, bool), inputs_finite=np.ones(n, bool),
      outputs_finite=np.ones(n, bool), first_bad_grad=-np.ones(n, int),
      first_bad_input=-np.ones(n, int), applied=~np.isin(steps, list(skipped) + list(overflow)),
      overflow=np.isin(steps, list(overflow)), learning_rate=np.ones(n))


class RunHistoryTest(tf.test.TestCase):

  def test_the_window_holds_the_last_steps_up_to_the_trouble(self):
    h, emitted = history.RunHistory(size=8), []
    emit = lambda event, step, **fields: emitted.append((event, step, fields))
    for first in range(1, 31, 10):
      reports = loop(first, 10, skipped=[25])
      h.add(reports)
      h.after_loop(reports, 'continue', None, emit)
    self.assertEqual(len(emitted), 1)
    event, step, fields = emitted[0]
    self.assertEqual((event, step), ('history', 25))
    self.assertEqual(fields['steps'], list(range(18, 26)))  # Ends at the trouble step.
    self.assertEqual(fields['loss'], [float(s) for s in range(18, 26)])
    self.assertEqual(fields['applied'][-1], False)

  def test_one_event_per_episode_and_none_for_overflows_or_clean_loops(self):
    h, emitted = history.RunHistory(size=8), []
    emit = lambda event, step, **fields: emitted.append(step)
    for first, kwargs in ((1, {'overflow': [3]}), (11, {}), (21, {'skipped': [22, 24]}),
                          (31, {'skipped': [31]}), (41, {}), (51, {'skipped': [55]})):
      reports = loop(first, 10, **kwargs)
      h.add(reports)
      h.after_loop(reports, 'continue', None, emit)
    self.assertEqual(emitted, [22, 55])  # Step 31 is in the same episode as 22.

  def test_a_rule_checked_and_cleared_is_trouble_ending_at_its_step(self):
    # A divergence check that blamed the batches lets the run go on: the doctor still asks.
    h, emitted = history.RunHistory(size=4), []
    reports = loop(11, 10)
    h.add(reports)
    h.after_loop(reports, 'continue', None, lambda event, step, **f: emitted.append(step),
                 cleared=15)
    h.after_loop(reports, 'continue', None, lambda event, step, **f: emitted.append(step),
                 cleared=99)  # Not a step of this loop: nothing to end the window at.
    self.assertEqual(emitted, [15])

  def test_a_rollback_or_an_end_is_trouble_too(self):
    h, emitted = history.RunHistory(size=4), []
    reports = loop(1, 6)
    h.add(reports)
    h.after_loop(reports, 'rollback', None, lambda event, step, **f: emitted.append(f['steps']))
    self.assertEqual(emitted, [[3, 4, 5, 6]])

  def test_a_stop_at_the_end_of_a_run_writes_its_last_steps(self):
    # A collapse found by the end-of-run probe: the last steps, ending at the run's last.
    h, emitted = history.RunHistory(size=4), []
    emit = lambda event, step, **f: emitted.append((step, f['steps']))
    for first in (1, 11, 21):
      reports = loop(first, 10)
      h.add(reports)
      h.after_loop(reports, 'continue', None, emit)
    h.at_end(emit)
    self.assertEqual(emitted, [(30, [27, 28, 29, 30])])
    h.at_end(emit)  # Once: the episode is open.
    self.assertLen(emitted, 1)
    # A skip within the last `size` steps wrote the episode's history already.
    h, emitted = history.RunHistory(size=4), []
    reports = loop(1, 10, skipped=[8])
    h.add(reports)
    h.after_loop(reports, 'continue', None, emit)
    h.at_end(emit)
    self.assertEqual([step for step, _ in emitted], [8])
