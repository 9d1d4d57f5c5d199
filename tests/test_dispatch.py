"""Tests for stable_train.dispatch: decision precedence (the run-level behaviour is in
test_controller.py)."""

import tensorflow as tf

from stable_train import dispatch
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
    self.assertEqual(dispatch.resolve([], [handler], None).action, interfaces.CONTINUE)
    both = [_d(interfaces.ESCALATE, 'spike'), _d(interfaces.ABORT, 'x')]
    self.assertEqual(dispatch.resolve(both, [handler], None).trigger, 'x')
    handled = dispatch.resolve([_d(interfaces.ROLLBACK, 'nan'), _d(interfaces.ESCALATE, 'spike')],
                           [handler], None)
    self.assertEqual((handled.action, handled.policy, handled.trigger),
                     (interfaces.ROLLBACK, 'h', 'spike'))
    unhandled = dispatch.resolve([_d(interfaces.ESCALATE, 'spike')], [], None)
    self.assertEqual((unhandled.action, unhandled.trigger), (interfaces.ABORT, 'spike'))

if __name__ == '__main__':
  tf.test.main()
