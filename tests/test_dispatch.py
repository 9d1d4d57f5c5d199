"""Tests for stable_train.runtime.dispatch: decision precedence (the run-level behaviour is in
test_controller.py)."""

import tensorflow as tf

from stable_train.core import interfaces
from stable_train.runtime import dispatch


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


class _Checker(interfaces.Policy):
  """Asks for a check (ACT); once its execute found trouble, escalates."""

  def __init__(self, *, name='checker'):
    super().__init__(name=name)
    self.found = False
    self.asked = 0

  def decide(self, reports, context):
    self.asked += 1
    if self.found:
      return interfaces.Decision(action=interfaces.ESCALATE, trigger='found', step=1)
    return interfaces.Decision(action=interfaces.ACT, trigger='check', step=1)

  def execute(self, decision, run):
    if decision.action == interfaces.ACT:
      self.found = True
    return None


class _Rechecker(_Checker):
  """A `_Checker` asked again after its ACT (the `Rechecker` protocol)."""

  def decide_after_act(self, reports, context):
    return self.decide(reports, context)


class _Reports:

  def clean(self):
    return False


class RedecideTest(tf.test.TestCase):

  def _dispatcher(self, policies):
    return dispatch.Dispatcher(policies=policies, run=None, context=lambda: None,
                               mark_fault=lambda step: None)

  def test_a_finding_escalates_in_the_loop_of_its_check(self):
    checker, handler = _Rechecker(), _Handler(name='h')
    d = self._dispatcher([checker, handler])
    acts, decision = d.decide(_Reports())
    self.assertEqual(decision.action, interfaces.CONTINUE)
    d._by_name['checker'].execute(acts[0], None)
    again = d.redecide(_Reports(), acts, decision)
    self.assertEqual((again.action, again.policy, again.trigger),
                     (interfaces.ROLLBACK, 'h', 'found'))
    self.assertEqual(checker.asked, 2)

  def test_a_policy_that_does_not_opt_in_is_not_asked_again(self):
    checker = _Checker()
    d = self._dispatcher([checker])
    acts, decision = d.decide(_Reports())
    checker.execute(acts[0], None)
    self.assertIs(d.redecide(_Reports(), acts, decision), decision)
    self.assertEqual(checker.asked, 1)

  def test_new_acts_are_dropped_and_an_abort_stands(self):
    checker = _Rechecker()
    d = self._dispatcher([checker])
    acts, decision = d.decide(_Reports())
    # Nothing found yet: asked again, it only asks for its check again, which is dropped.
    self.assertIs(d.redecide(_Reports(), acts, decision), decision)
    checker.found = True
    abort = interfaces.Decision(action=interfaces.ABORT, trigger='x')
    self.assertIs(d.redecide(_Reports(), acts, abort), abort)

  def test_a_policy_that_misbehaves_when_asked_again_gets_a_clear_error(self):
    class Stops(_Rechecker):
      def decide(self, reports, context):
        if self.found:
          return interfaces.Decision(action=interfaces.STOP, trigger='found')
        return super().decide(reports, context)

    class Counts(_Rechecker):  # A state transition in decide: asked again, it would count twice.
      def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.flagged_loops = tf.Variable(0)

      def decide(self, reports, context):
        self.flagged_loops.assign_add(1)
        return super().decide(reports, context)

    for policy, text in ((Stops(), r"checker.decide_after_act returned action='stop'"),
                         (Counts(), r'checker.decide_after_act changed its variables when '
                                    r'asked again after its ACT')):
      d = self._dispatcher([policy])
      acts, decision = d.decide(_Reports())
      policy.execute(acts[0], None)
      with self.assertRaisesRegex(ValueError, text):
        d.redecide(_Reports(), acts, decision)
    self.assertEqual(int(policy.flagged_loops.numpy()), 1)  # The second count is undone.


class _Observer(interfaces.Policy):
  """Counts the loops it observed; notices the ones `notice` says."""
  decides_on_clean_loops = False

  def __init__(self, notice, name='observer'):
    super().__init__(name=name)
    self.notice, self.observed, self.asked = notice, 0, 0

  def observe(self, reports):
    self.observed += 1
    return self.notice

  def decide(self, reports, context):
    self.asked += 1
    return None


class _CleanReports:

  def clean(self):
    return True


class ObserveTest(tf.test.TestCase):

  def test_observers_see_every_loop_and_a_noticed_clean_loop_is_decided_on(self):
    quiet, noticing = _Observer(False, name='quiet'), _Observer(True, name='noticing')
    d = dispatch.Dispatcher(policies=[quiet], run=None, context=lambda: None,
                            mark_fault=lambda step: None)
    self.assertIsInstance(quiet, interfaces.LoopObserver)
    d.observe(_CleanReports())
    self.assertEqual((quiet.observed, d._noticed), (1, False))
    d.decide(_CleanReports(), noticed=False)
    self.assertEqual(quiet.asked, 0)  # Clean and not noticed: not asked.
    d.decide(_CleanReports(), noticed=True)
    self.assertEqual(quiet.asked, 1)
    d = dispatch.Dispatcher(policies=[quiet, noticing], run=None, context=lambda: None,
                            mark_fault=lambda step: None)
    d.observe(_CleanReports())  # One observer that noticed is enough; both folded the loop.
    self.assertEqual((quiet.observed, noticing.observed, d._noticed), (2, 1, True))
    self.assertNotIsInstance(_Handler(name='h'), interfaces.LoopObserver)


if __name__ == '__main__':
  tf.test.main()
