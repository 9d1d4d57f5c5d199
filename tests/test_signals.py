"""Tests for stable_train.runtime.signals: the one SIGTERM/SIGINT system of the process."""

import os
import signal

import tensorflow as tf

from stable_train.runtime import signals


class SignalsTest(tf.test.TestCase):

  def test_the_first_signal_decides(self):
    with signals.Signals().training() as stop:
      os.kill(os.getpid(), signal.SIGTERM)
      os.kill(os.getpid(), signal.SIGINT)
    self.assertEqual(stop.received, signal.SIGTERM)

  def test_sigterm_is_held_and_the_handler_restored(self):
    before = signal.getsignal(signal.SIGTERM)
    with signals.Signals().training() as training:
      os.kill(os.getpid(), signal.SIGTERM)
      self.assertEqual(training.received, signal.SIGTERM)
    self.assertIs(signal.getsignal(signal.SIGTERM), before)

  def test_installed_the_first_signal_in_start_up_raises_and_later_ones_are_recorded(self):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    process = signals.Signals()
    try:
      process.install()
      with self.assertRaises(signals.StartupInterrupted) as ctx:
        with process.raising():
          os.kill(os.getpid(), signal.SIGTERM)
      self.assertEqual(ctx.exception.signum, signal.SIGTERM)
      self.assertEqual(process.at_start_up, signal.SIGTERM)  # Kept for an error it turned into.
      with process.raising():
        os.kill(os.getpid(), signal.SIGINT)  # Not the first: recorded only.
      with process.training() as training:
        os.kill(os.getpid(), signal.SIGTERM)
      self.assertEqual(training.received, signal.SIGTERM)
      self.assertEqual(process.received, [signal.SIGTERM, signal.SIGINT, signal.SIGTERM])
    finally:
      for s, handler in before.items():
        signal.signal(s, handler)

if __name__ == '__main__':
  tf.test.main()
