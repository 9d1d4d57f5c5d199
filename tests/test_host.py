"""Tests for stable_train.host: decision precedence, loop records and clean stops on signals."""

import os
import signal

import numpy as np
import tensorflow as tf

from stable_train import host
from stable_train import interfaces


class _Handler(interfaces.Policy):

  def handle_escalation(self, decision, context):
    return interfaces.Decision(action=interfaces.ROLLBACK, policy=self.name,
                               trigger=decision.trigger)


def _d(action, trigger=''):
  return interfaces.Decision(action=action, trigger=trigger)


class ResolveTest(tf.test.TestCase):

  def test_precedence(self):
    handler = _Handler(name='h')
    self.assertEqual(host.resolve([], [handler], None).action, interfaces.CONTINUE)
    both = [_d(interfaces.ESCALATE, 'spike'), _d(interfaces.ABORT, 'x')]
    self.assertEqual(host.resolve(both, [handler], None).trigger, 'x')
    handled = host.resolve([_d(interfaces.ROLLBACK, 'nan'), _d(interfaces.ESCALATE, 'spike')],
                           [handler], None)
    self.assertEqual((handled.action, handled.policy, handled.trigger),
                     (interfaces.ROLLBACK, 'h', 'spike'))
    unhandled = host.resolve([_d(interfaces.ESCALATE, 'spike')], [], None)
    self.assertEqual((unhandled.action, unhandled.trigger), (interfaces.ABORT, 'spike'))


class _Scalars:

  def __init__(self):
    self.written = []

  def write(self, step, values):
    self.written.append((step, values))


class LoopRecorderTest(tf.test.TestCase):

  def test_skip_events_and_per_step_counters(self):
    events, scalars = [], _Scalars()
    recorder = host.LoopRecorder(emit=lambda e, s, **f: events.append((e, s, f)),
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


class StopSignalsTest(tf.test.TestCase):

  def test_the_first_signal_decides(self):
    stop = host.StopSignals()
    with stop.catching():
      os.kill(os.getpid(), signal.SIGTERM)
      os.kill(os.getpid(), signal.SIGINT)
    self.assertEqual(stop.received, signal.SIGTERM)

  def test_sigterm_is_held_and_the_handler_restored(self):
    before = signal.getsignal(signal.SIGTERM)
    signals = host.StopSignals()
    with signals.catching():
      os.kill(os.getpid(), signal.SIGTERM)
      self.assertEqual(signals.received, signal.SIGTERM)
    self.assertIs(signal.getsignal(signal.SIGTERM), before)


if __name__ == '__main__':
  tf.test.main()
