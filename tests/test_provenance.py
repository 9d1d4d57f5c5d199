"""Tests of stable_train.forensics.provenance: variable-level rules, op-name parsing, layer resolution."""

import numpy as np
import tensorflow as tf

from stable_train.forensics import provenance

PATHS = ['mlp/dense_0/kernel', 'mlp/dense_0/bias', 'mlp/dense_1/kernel', 'mlp/dense_1/bias']

# Shape of TF 2.21's check_numerics error in a tf.function (trimmed).
GRAPH_ERROR = '''Graph execution error:

Detected at node mlp_1/dense_1_1/Log/CheckNumericsV2 defined at (most recent call last):
  File "/x/train.py", line 32, in <module>

  File "/x/model.py", line 8, in call

!!! Detected Infinity or NaN in output 0 of graph op "Log" (# of outputs: 1) !!!
  dtype: <dtype: 'float32'>
  Input tensor: Tensor("mlp_1/dense_1_1/mul:0", shape=(8, 3), dtype=float32)
'''


class ProvenanceTest(tf.test.TestCase):

  def test_backward_fault_origin_is_last_bad_variable(self):
    result = provenance.variable_provenance([False, False, False, True], PATHS, loss_finite=True,
                                            outputs_finite=True)
    self.assertEqual(result['origin_variable'], 'mlp/dense_1/kernel')
    self.assertEqual(result['origin_layer'], 'mlp/dense_1')
    self.assertEqual(result['first_bad_variable'], 'mlp/dense_0/kernel')

  def test_forward_and_loss_faults_have_no_variable_origin(self):
    for loss_finite, outputs_finite, word in ((False, False, 'forward'), (False, True, 'loss')):
      result = provenance.variable_provenance([False] * 4, PATHS, loss_finite=loss_finite,
                                              outputs_finite=outputs_finite)
      self.assertIsNone(result['origin_variable'])
      self.assertIn(word, result['rule'])
      self.assertLen(result['bad_variables'], 4)

  def test_layer_of_op_strips_graph_uniquifiers_only_when_needed(self):
    known = ['mlp', 'dense_0', 'dense_1']
    self.assertEqual(provenance.layer_of_op('mlp_1/dense_1_1/MatMul', known), 'dense_1')
    self.assertEqual(provenance.layer_of_op('mlp/dense_1/MatMul', known), 'dense_1')
    self.assertEqual(provenance.layer_of_op('gradient_tape/mlp_2/dense_0_3/Relu/ReluGrad', known),
                     'dense_0')
    self.assertEqual(provenance.layer_of_op('mlp_1/Exp', known), 'mlp')
    self.assertIsNone(provenance.layer_of_op('Exp', known))
    # Keras's default names: in the re-run's 'sequential_1', 'dense_1' is layer 'dense' again.
    default = ['sequential', 'dense', 'dense_1', 'dense_2']
    self.assertEqual(provenance.layer_of_op('sequential_1/dense_1/MatMul', default), 'dense')
    self.assertEqual(provenance.layer_of_op('sequential/dense_1/MatMul', default), 'dense_1')
    # A policy's op (guard.scope), even one whose policy is named like a layer: no layer's.
    self.assertIsNone(provenance.layer_of_op('while/policy/dense_1/Log', default))
    self.assertIsNone(provenance.layer_of_op('sequential/policy/dense/Log', default))

  def test_parse_graph_error(self):
    found = provenance.parse_check_numerics_error(GRAPH_ERROR, ['mlp', 'dense_1'])
    self.assertEqual(found.op_type, 'Log')
    self.assertEqual(found.op_name, 'mlp_1/dense_1_1/Log')
    self.assertEqual(found.layer, 'dense_1')
    self.assertEqual(found.input_name, 'mlp_1/dense_1_1/mul:0')
    self.assertEqual(found.source, '/x/model.py:8 in call')
    self.assertEqual(found.dtype, 'float32')  # The op output's, not its input's.
    half = GRAPH_ERROR.replace("<dtype: 'float32'>", "<dtype: 'float16'>")
    self.assertEqual(provenance.parse_check_numerics_error(half, ['mlp']).dtype, 'float16')
    self.assertIsNone(provenance.parse_check_numerics_error('some other error', ['mlp']))

  def _trainer(self, forward):
    class Model(tf.Module):
      def __init__(self):
        super().__init__(name='m')
        self.w = tf.Variable([1.0, 0.0], name='w')

      def __call__(self, x):
        return forward(x, self.w)

    class FakeTrainer:
      model = Model()
      policies = []

      def split_batch(self, batch):
        return batch

      def sanitize_batch(self, batch):
        return batch

      def compute_loss(self, batch, training):
        del training
        return tf.reduce_sum(self.model(batch[0]))

      def loss_and_gradients(self, batch):
        with tf.GradientTape() as tape:
          loss = self.compute_loss(batch, training=True)
        grads = tape.gradient(loss, self.model.trainable_variables)
        return loss, grads, tf.ones([2], tf.bool), tf.constant(True)

    return FakeTrainer()

  def test_locate_op_leaves_check_numerics_off(self):
    trainer = self._trainer(lambda x, w: tf.math.log(x * w))
    found = provenance.locate_op(trainer, (tf.ones([2]), tf.zeros([2])))
    self.assertTrue(found['found'])
    self.assertEqual(found['op_type'], 'Log')
    # Check numerics was switched off again: a NaN in eager code passes silently.
    self.assertTrue(tf.math.is_nan(tf.math.log(tf.constant(-1.0))))

  def test_a_constant_is_no_op_found_but_what_it_holds_and_where_are_kept(self):
    # A -inf mask fill: check_numerics stops at the constant, before any op's arithmetic.
    masked = lambda x, w: tf.nn.softmax(tf.where(w > 0, x * w, tf.cast(-np.inf, tf.float32)))
    found = provenance.locate_op(self._trainer(masked), (tf.ones([2]), tf.zeros([2])))
    self.assertFalse(found['found'])
    self.assertEqual((found['constant'], found['dtype']), ('-Inf', 'float32'))
    self.assertIn('test_provenance.py', found['source'])
    # A -1e30 penalty written into a float16 computation: the constant is -inf in float16.
    penalty = lambda x, w: tf.nn.softmax(
        tf.cast(x * w, tf.float16) + tf.constant(-1e30, tf.float16))
    found = provenance.locate_op(self._trainer(penalty), (tf.ones([2]), tf.zeros([2])))
    self.assertEqual((found['constant'], found['dtype']), ('-Inf', 'float16'))
    nan = lambda x, w: x * w + tf.constant(np.nan)  # A fault injected on purpose.
    self.assertEqual(provenance.locate_op(self._trainer(nan), (tf.ones([2]), tf.zeros([2])))[
        'constant'], 'NaN')

  def test_a_division_over_a_sum_of_exps_says_so(self):
    # A softmax by hand over scores whose exps underflow: 0 / 0 at the division.
    softmax = lambda x, w: tf.exp(-1000.0 * x - w) / tf.reduce_sum(tf.exp(-1000.0 * x - w))
    found = provenance.locate_op(self._trainer(softmax), (tf.ones([2]), tf.zeros([2])))
    self.assertEqual((found['op_type'], found.get('operand')), ('RealDiv', 'a sum of exp()'))
    plain = lambda x, w: x / tf.reduce_sum(x * w - w)  # 1 / 0
    found = provenance.locate_op(self._trainer(plain), (tf.ones([2]), tf.zeros([2])))
    self.assertEqual((found['op_type'], found.get('operand')), ('RealDiv', None))


if __name__ == '__main__':
  tf.test.main()
