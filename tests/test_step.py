"""Tests for stable_train.step: the pure guard and the cross-replica aggregation."""

import numpy as np
import tensorflow as tf

from stable_train import policies
from stable_train import step


def _guard(grads, loss=1.0, inputs_bad=(0.0, 0.0), outputs_bad=0.0, policies_=()):
  return step.guard([tf.constant(g, tf.float32) for g in grads], tf.constant(loss),
                    tf.constant(inputs_bad), tf.constant(outputs_bad), list(policies_),
                    ['a', 'b'], xla=False)


class GuardTest(tf.test.TestCase):

  def test_healthy_step_is_applied_and_clipped(self):
    grads, report = _guard([[3.0], [4.0]], policies_=[policies.ClipByGlobalNorm(max_norm=1.0),
                                                      policies.SkipNonFinite()])
    self.assertTrue(bool(report['applied']))
    self.assertAllClose(report['grad_norm'], 5.0)
    self.assertAllClose(report['clipped_grad_norm'], 1.0)
    self.assertAllClose(grads, [[0.6], [0.8]])
    self.assertEqual(int(report['first_bad_grad']), -1)
    self.assertEqual(set(report) - {'grad_finite_flags'}, set(step.REPORT_DTYPES) - {
        'step', 'learning_rate'})

  def test_non_finite_gradient_vetoed_by_skip_policy_only(self):
    _, report = _guard([[1.0], [np.nan]], policies_=[policies.SkipNonFinite()])
    self.assertFalse(bool(report['applied']))
    self.assertEqual(int(report['first_bad_grad']), 1)
    self.assertAllEqual(report['grad_finite_flags'], [True, False])
    _, report = _guard([[1.0], [np.nan]])  # No policy: nothing vetoes it.
    self.assertTrue(bool(report['applied']))

  def test_bad_input_is_never_applied(self):
    _, report = _guard([[1.0], [1.0]], inputs_bad=(0.0, 1.0))
    self.assertFalse(bool(report['applied']))
    self.assertFalse(bool(report['inputs_finite']))
    self.assertEqual(int(report['first_bad_input']), 1)

  def test_aggregate_is_the_identity_on_one_replica(self):
    grads = [tf.constant([1.0, 2.0])]
    out = step.aggregate(grads, tf.constant(3.0), tf.constant([0.0]), tf.constant(0.0), 1)
    self.assertIs(out[0], grads)

  def test_aggregate_averages_over_replicas(self):
    # ReductionToOneDevice: no collective instance keys that could collide with the collectives
    # of other MirroredStrategy objects earlier in this test process.
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())

    def replica():
      r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
      return step.aggregate([tf.fill([2], r)], r * 10.0, tf.stack([r, 0.0]), r, 2)

    grads, loss, inputs_bad, outputs_bad = strategy.run(replica)
    for value in strategy.experimental_local_results(grads[0]):
      self.assertAllClose(value, [0.5, 0.5])
    self.assertAllClose(strategy.experimental_local_results(loss)[0], 5.0)
    self.assertAllClose(strategy.experimental_local_results(inputs_bad)[0], [1.0, 0.0])
    self.assertAllClose(strategy.experimental_local_results(outputs_bad)[0], 1.0)


if __name__ == '__main__':
  tf.test.main()
