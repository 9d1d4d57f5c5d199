"""Tests of stable_train.forensics.opgraph: what fed the op Forensics located."""

import tensorflow as tf

from stable_train.forensics import opgraph


def _fn_and_ops(body):
  """A tf.function of one vector and the names of its graph's ops, by type."""
  fn = tf.function(body)
  x = tf.constant([-1000.0, -1001.0, -1002.0])
  ops = {}
  for op in fn.get_concrete_function(x).graph.get_operations():
    ops.setdefault(op.type, []).append(op.name)
  return fn, x, ops


class OperandTest(tf.test.TestCase):

  def test_a_softmax_written_by_hand_is_a_division_over_a_sum_of_exps(self):
    # The exps of scores in the -1000s underflow to 0: 0 / 0 is the NaN Forensics locates.
    fn, x, ops = _fn_and_ops(lambda s: tf.exp(s) / tf.reduce_sum(tf.exp(s), -1, keepdims=True))
    self.assertTrue(tf.reduce_all(tf.math.is_nan(fn(x))))
    self.assertEqual(opgraph.operand(fn, x, ops['RealDiv'][0], 'RealDiv'), opgraph.SUM_OF_EXP)
    # An epsilon added to the sum, a cast on the way: still the exps' sum.
    fn, x, ops = _fn_and_ops(lambda s: tf.exp(s) / tf.cast(
        tf.reduce_sum(tf.exp(s)) + 1e-30, tf.float32))
    self.assertEqual(opgraph.operand(fn, x, ops['RealDiv'][0], 'RealDiv'), opgraph.SUM_OF_EXP)

  def test_a_logsumexp_written_by_hand_is_a_log_over_a_sum_of_exps(self):
    fn, x, ops = _fn_and_ops(lambda s: tf.math.log(tf.reduce_sum(tf.exp(s))))
    self.assertEqual(opgraph.operand(fn, x, ops['Log'][0], 'Log'), opgraph.SUM_OF_EXP)

  def test_a_cross_entropy_written_by_hand_is_a_log_over_a_softmax_by_hand(self):
    # -log p[label], p = exp(z) / sum(exp(z)): the label's probability underflows to 0 first.
    softmax = lambda s: tf.exp(s) / tf.reduce_sum(tf.exp(s), -1, keepdims=True)  # noqa: E731
    picks = [
        lambda s: tf.math.log(softmax(s)),                                  # Every column.
        lambda s: tf.math.log(tf.gather(softmax(s), 1)),                    # The label's.
        lambda s: tf.math.log(softmax(s)[2]),
    ]
    for body in picks:
      fn, x, ops = _fn_and_ops(body)
      self.assertEqual(opgraph.operand(fn, x, ops['Log'][0], 'Log'), opgraph.SUM_OF_EXP)
    # A log of a plain normalisation or of a sigmoid by hand is no softmax's; nor a softmax's
    # weighted by a factor that can be 0 (a row with no answer in its mask, a gate), whose log
    # of 0 needs no exp to underflow (a reviewer's pointer loss).
    mask = tf.constant([0.0, 0.0, 0.0])
    for body in (lambda s: tf.math.log(tf.gather(s / tf.reduce_sum(s), 1)),
                 lambda s: tf.math.log(tf.exp(s) / (1.0 + tf.exp(s))),
                 lambda s: tf.math.log(tf.reduce_sum(softmax(s) * mask)),
                 lambda s: tf.math.log(softmax(s) * mask)):
      fn, x, ops = _fn_and_ops(body)
      self.assertIsNone(opgraph.operand(fn, x, ops['Log'][0], 'Log'))

  def test_other_divisions_and_logs_are_not(self):
    cases = [
        (lambda s: s / tf.reduce_sum(s), 'RealDiv'),             # A plain normalisation.
        (lambda s: tf.exp(s) / (1.0 + tf.exp(s)), 'RealDiv'),    # A sigmoid: no sum over exps.
        (lambda s: tf.math.log(tf.exp(s)), 'Log'),               # One exp, not a sum.
        (lambda s: tf.math.log(tf.reduce_sum(tf.square(s))), 'Log'),
    ]
    for body, kind in cases:
      fn, x, ops = _fn_and_ops(body)
      self.assertIsNone(opgraph.operand(fn, x, ops[kind][0], kind), kind)

  def test_a_learned_term_added_to_the_sum_is_not_an_epsilon(self):
    b = tf.Variable(-3.0)  # A learned term can cancel the sum: the division is the cause.
    fn, x, ops = _fn_and_ops(lambda s: s / (tf.reduce_sum(tf.exp(s)) + b))
    self.assertIsNone(opgraph.operand(fn, x, ops['RealDiv'][0], 'RealDiv'))

  def test_an_op_in_another_graph_is_not_the_top_level_op_of_its_name(self):
    # check_numerics names the graph it stopped in: a nested function's `truediv` is not the
    # top level's hand-written softmax of the same name.
    fn, x, ops = _fn_and_ops(lambda s: tf.exp(s) / tf.reduce_sum(tf.exp(s)))
    name = fn.get_concrete_function(x).graph.name
    self.assertEqual(opgraph.operand(fn, x, ops['RealDiv'][0], 'RealDiv',
                                     f'  Graph name: "{name}"'), opgraph.SUM_OF_EXP)
    self.assertIsNone(opgraph.operand(fn, x, ops['RealDiv'][0], 'RealDiv',
                                      '  Graph name: "mean_over_events"'))

  def test_additions_that_share_their_inputs_are_walked_once(self):
    def body(s):
      terms = [tf.square(s)]
      for _ in range(60):  # Each sums all before it: 60 ops, 60**8 paths of the walk's depth.
        terms.append(tf.add_n(terms[::-1]))
      return s / tf.reduce_sum(terms[-1])
    fn, x, ops = _fn_and_ops(body)
    self.assertIsNone(opgraph.operand(fn, x, ops['RealDiv'][0], 'RealDiv'))  # In a moment.

  def test_an_op_it_cannot_find_or_read_is_none(self):
    fn, x, ops = _fn_and_ops(lambda s: tf.exp(s) / tf.reduce_sum(tf.exp(s)))
    self.assertIsNone(opgraph.operand(fn, x, 'no/such/op', 'RealDiv'))
    self.assertIsNone(opgraph.operand(fn, x, ops['Exp'][0], 'Exp'))  # Not a division or a log.
    self.assertIsNone(opgraph.operand(None, x, ops['RealDiv'][0], 'RealDiv'))


if __name__ == '__main__':
  tf.test.main()
