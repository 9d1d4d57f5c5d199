"""Tests for stable_train.core.guard: the pure guard and the cross-replica aggregation."""

from unittest import mock

import numpy as np
import tensorflow as tf

from stable_train.core import guard
from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train.core import reports
from stable_train.policies import basic as policies


class Scale(interfaces.Policy):
  """Multiplies every gradient by `factor` and leaves the stats to the guard."""

  def __init__(self, factor, name='scale'):
    super().__init__(name=name)
    self.factor = factor

  def transform_gradients(self, grads, stats):
    return [g * self.factor for g in grads]


class Spy(interfaces.Policy):
  """Records the stats it is shown, in transform_gradients and allow_update."""

  def __init__(self, name='spy'):
    super().__init__(name=name)
    self.seen = {}

  def transform_gradients(self, grads, stats):
    self.seen['transform'] = {k: stats[k] for k in guard.MEASURED_STATS}
    return grads

  def allow_update(self, stats):
    self.seen['allow'] = {k: stats[k] for k in guard.MEASURED_STATS}
    return None


def _guard(grads, loss=1.0, inputs_bad=(0.0, 0.0), outputs_bad=0.0, policies_=()):
  return guard.guard([tf.constant(g, tf.float32) for g in grads], tf.constant(loss),
                    tf.constant(inputs_bad), tf.constant(outputs_bad), list(policies_),
                    ['a', 'b'], xla=False)


class GuardTest(tf.test.TestCase):

  def test_each_policys_ops_are_in_its_scope_whatever_its_name(self):
    # A name TensorFlow refuses as a root scope ('_probe', a private class's default) is no
    # root here: every policy's ops are under 'policy/<its name>'.
    clip, probe = policies.ClipByGlobalNorm(max_norm=1.0), Spy(name='_probe')
    fn = tf.function(lambda: _guard([[3.0], [4.0]], policies_=[clip, probe]))
    names = [op.name for op in fn.get_concrete_function().graph.get_operations()]
    self.assertTrue(any(n.startswith('policy/clip_by_global_norm/') for n in names), names)
    self.assertAllClose(fn()[0], [[0.6], [0.8]])
    self.assertIn('allow', probe.seen)

  def test_healthy_step_is_applied_and_clipped(self):
    grads, report = _guard([[3.0], [4.0]], policies_=[policies.ClipByGlobalNorm(max_norm=1.0),
                                                      policies.SkipNonFinite()])
    self.assertTrue(bool(report['applied']))
    self.assertAllClose(report['grad_norm'], 5.0)
    self.assertAllClose(report['clipped_grad_norm'], 1.0)
    self.assertAllClose(grads, [[0.6], [0.8]])
    self.assertEqual(int(report['first_bad_grad']), -1)
    self.assertEqual(set(report) - {'grad_finite_flags'}, set(reports.REPORT_DTYPES) - {
        'step', 'learning_rate', 'flagged'})  # The step's own fields, after the guard.

  def test_non_finite_gradient_vetoed_by_skip_policy_only(self):
    _, report = _guard([[1.0], [np.nan]], policies_=[policies.SkipNonFinite()])
    self.assertFalse(bool(report['applied']))
    self.assertEqual(int(report['first_bad_grad']), 1)
    self.assertAllEqual(report['grad_finite_flags'], [True, False])
    _, report = _guard([[1.0], [np.nan]])  # No policy: nothing vetoes it.
    self.assertTrue(bool(report['applied']))
    # The clip spreads the NaN to every gradient; the report still names the raw offender.
    grads, report = _guard([[1.0], [np.nan]], policies_=[policies.ClipByGlobalNorm(),
                                                         policies.SkipNonFinite()])
    self.assertFalse(bool(report['applied']))
    self.assertTrue(np.isnan(grads[0].numpy()).all())
    self.assertAllEqual(report['grad_finite_flags'], [True, False])
    self.assertEqual(int(report['first_bad_grad']), 1)

  def test_bad_input_is_never_applied(self):
    _, report = _guard([[1.0], [1.0]], inputs_bad=(0.0, 1.0))
    self.assertFalse(bool(report['applied']))
    self.assertFalse(bool(report['inputs_finite']))
    self.assertEqual(int(report['first_bad_input']), 1)

  def test_a_transform_that_makes_gradients_non_finite_is_vetoed(self):
    # Scaling by inf before SkipNonFinite: the verdict must see the gradients it would apply.
    grads, report = _guard([[1.0], [2.0]], policies_=[Scale(np.inf), policies.SkipNonFinite()])
    self.assertFalse(bool(report['applied']))
    self.assertFalse(bool(report['grads_finite']))
    self.assertAllEqual(report['grad_finite_flags'], [False, False])
    self.assertEqual(int(report['first_bad_grad']), 0)
    self.assertAllClose(report['grad_norm'], np.sqrt(5.0))  # Before any transform.

  def test_clip_sees_the_current_norm_and_reports_the_final_one(self):
    grads, report = _guard([[0.6], [0.8]], policies_=[Scale(10.0),
                                                      policies.ClipByGlobalNorm(max_norm=1.0)])
    self.assertAllClose(report['grad_norm'], 1.0)  # Before any transform.
    self.assertAllClose(grads, [[0.6], [0.8]])  # Norm 10 clipped back to 1.
    self.assertAllClose(report['clipped_grad_norm'], 1.0)
    # A transform after the clip: the final norm is measured, not min(norm, max_norm).
    grads, report = _guard([[0.6], [0.8]], policies_=[policies.ClipByGlobalNorm(max_norm=1.0),
                                                      Scale(10.0)])
    self.assertAllClose(report['clipped_grad_norm'], 10.0)
    self.assertAllClose(tf.linalg.global_norm(grads), 10.0)

  def test_stats_describe_the_gradients_currently_passed(self):
    first, last = Spy('first'), Spy('last')
    _guard([[3.0], [4.0]], policies_=[first, Scale(2.0), last])
    self.assertAllClose(first.seen['transform']['grad_norm'], 5.0)
    self.assertAllClose(last.seen['transform']['grad_norm'], 10.0)
    self.assertAllClose(first.seen['allow']['grad_norm'], 10.0)  # Verdicts see the final stats.
    _guard([[3.0], [np.nan]], policies_=[first, Scale(0.0), last])
    self.assertAllEqual(first.seen['transform']['grad_finite_flags'], [True, False])
    self.assertAllEqual(last.seen['transform']['grad_finite_flags'], [True, False])  # nan * 0.
    self.assertFalse(bool(last.seen['allow']['grads_finite']))

  def test_values_a_transform_sets_are_used_as_they_are(self):

    class SetsStats(interfaces.Policy):

      def transform_gradients(self, grads, stats):
        stats['grad_norm'] = tf.constant(123.0)
        return [tf.identity(g) for g in grads]

    spy = Spy()
    _, report = _guard([[3.0], [4.0]], policies_=[SetsStats(name='sets'), spy])
    self.assertAllClose(spy.seen['transform']['grad_norm'], 123.0)  # Not re-measured.
    self.assertAllClose(report['clipped_grad_norm'], 123.0)
    self.assertTrue(bool(spy.seen['transform']['grads_finite']))  # Not set: measured.

  def test_default_stack_measures_norm_and_flags_once(self):
    calls = []

    def counting(real):
      def wrapper(grads):
        calls.append(real.__name__)
        return real(grads)
      return wrapper

    stack = [policies.CheckNumerics(), policies.ClipByGlobalNorm(), policies.SkipNonFinite()]
    with mock.patch.object(numerics, 'global_norm', counting(numerics.global_norm)), \
         mock.patch.object(numerics, 'finite_flags', counting(numerics.finite_flags)):
      tf.function(lambda: _guard([[3.0], [4.0]], policies_=stack))()
    self.assertCountEqual(calls, ['global_norm', 'finite_flags'])

  def test_aggregate_leaves_one_replica_alone(self):
    grads = [tf.constant([1.0, 2.0])]
    out = guard.aggregate(grads, tf.constant(3.0), tf.constant([0.0, 1.0]), tf.constant(2.0), 1)
    self.assertIs(out[0], grads)
    self.assertAllClose(out[1], 3.0)  # Not divided by a replica count, not reduced.
    self.assertAllClose(out[2], [0.0, 1.0])
    self.assertAllClose(out[3], 2.0)
    # Under a one-replica strategy the same holds inside strategy.run (no collective needed).
    strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
    result = strategy.run(lambda: guard.aggregate(
        [tf.constant([4.0])], tf.constant(3.0), tf.constant([1.0]), tf.constant(0.0),
        strategy.num_replicas_in_sync))
    self.assertAllClose(result[0][0], [4.0])
    self.assertAllClose(result[2], [1.0])

  def test_aggregate_averages_over_replicas(self):
    # ReductionToOneDevice: no collective instance keys that could collide with the collectives
    # of other MirroredStrategy objects earlier in this test process.
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())

    def replica():
      r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
      return guard.aggregate([tf.fill([2], r)], r * 10.0, tf.stack([r, 0.0]), r, 2)

    grads, loss, inputs_bad, outputs_bad = strategy.run(replica)
    for value in strategy.experimental_local_results(grads[0]):
      self.assertAllClose(value, [0.5, 0.5])
    self.assertAllClose(strategy.experimental_local_results(loss)[0], 5.0)
    self.assertAllClose(strategy.experimental_local_results(inputs_bad)[0], [1.0, 0.0])
    self.assertAllClose(strategy.experimental_local_results(outputs_bad)[0], 1.0)


if __name__ == '__main__':
  tf.test.main()
