"""Tests for stable_train.policies.weight_scale: the initial kernels' scale against LeCun's."""

import keras
import numpy as np
import tensorflow as tf

from stable_train.policies import weight_scale


def _model(kernel_initializer='glorot_uniform', seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([
      keras.Input((6,), dtype='int32'), keras.layers.Embedding(5000, 32),
      keras.layers.Conv1D(16, 3, kernel_initializer=kernel_initializer),
      keras.layers.GlobalAveragePooling1D(),
      keras.layers.Dense(64, activation='relu', kernel_initializer=kernel_initializer),
      keras.layers.Dense(3, kernel_initializer=kernel_initializer)])


class KernelRatioTest(tf.test.TestCase):

  def test_standard_initialisers_are_on_scale_and_a_wide_one_is_not(self):
    for init in ('glorot_uniform', 'he_normal', 'lecun_normal', 'orthogonal'):
      ratio = weight_scale.kernel_ratio(_model(init).trainable_variables)
      self.assertBetween(ratio, 0.3, 1.6, init)
    # A standard deviation of 1 (a mean taken for it, say): RMS 1 x sqrt(fan_in), 8 to 10.
    wide = weight_scale.kernel_ratio(_model(keras.initializers.RandomNormal(stddev=1.0))
                                     .trainable_variables)
    self.assertGreater(wide, 7.0)

  def test_attention_projections_count_the_width_they_sum_over(self):
    # BERT-base's shapes: a (768, 12, 64) query kernel sums over 768 inputs, not 768 x 12; the
    # plain rule read sqrt(12) = 3.5 x, off scale, for Keras's own initialiser.
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4, 768))
    attention = keras.layers.MultiHeadAttention(12, 64, name='mha')
    model = keras.Model(inputs, attention(inputs, inputs))
    variables = model.trainable_variables
    fan_ins = weight_scale.einsum_fan_ins(model)
    self.assertEqual(fan_ins['mha/query/kernel'], 768)
    self.assertEqual(fan_ins['mha/attention_output/kernel'], 12 * 64)
    self.assertGreater(weight_scale.kernel_ratio(variables), 3.0)  # Without the equations.
    self.assertBetween(weight_scale.fields(variables, model=model)['kernel_ratio'], 0.3, 1.6)
    wide = [v.numpy() * (10.0 if v.path.endswith('query/kernel') else 1.0) for v in variables]
    self.assertGreater(weight_scale.fields(variables, wide, model)['kernel_ratio'], 7.0)
    self.assertEqual(weight_scale.einsum_fan_ins(_model()), {})  # No EinsumDense.

  def test_a_depthwise_kernel_counts_its_window_only(self):
    # Each output channel of a depthwise convolution reads one input channel: its fan-in is the
    # window's size. The plain rule read EfficientNetV2's own initialiser as 48x off scale.
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 256))
    he = keras.initializers.VarianceScaling(2.0, 'fan_out', 'truncated_normal')  # EfficientNet's.
    depthwise = keras.layers.DepthwiseConv2D(3, depthwise_initializer=he, name='dw')
    separable = keras.layers.SeparableConv2D(8, 3, depthwise_initializer=he, name='sep')
    model = keras.Model(inputs, separable(depthwise(inputs)))
    fan_ins = weight_scale.depthwise_fan_ins(model)
    self.assertEqual(fan_ins, {'dw/kernel': 9, 'sep/depthwise_kernel': 9})
    variables = model.trainable_variables
    self.assertGreater(weight_scale.kernel_ratio(variables), 3.0)  # Without the windows.
    self.assertLess(weight_scale.fields(variables, model=model)['kernel_ratio'], 3.0)
    wide = [v.numpy() * (10.0 if v.path == 'dw/kernel' else 1.0) for v in variables]
    self.assertGreater(weight_scale.fields(variables, wide, model)['kernel_ratio'], 3.0)
    self.assertEqual(weight_scale.depthwise_fan_ins(_model()), {})

  def test_a_custom_layers_weight_matrix_is_a_kernel(self):
    class Custom(keras.layers.Layer):  # Its weight named 'w', as user layers often name it.

      def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 8), initializer='glorot_uniform', name='w')

      def call(self, x):
        return x @ self.w

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((256,)), Custom(), keras.layers.Dense(1)])
    variables = model.trainable_variables
    self.assertBetween(weight_scale.kernel_ratio(variables), 0.3, 1.6)
    wide = [v.numpy() * (20.0 if v.path.endswith('/w') else 1.0) for v in variables]
    self.assertGreater(weight_scale.kernel_ratio(variables, wide), 10.0)  # Read by its fan-in.

  def test_other_weights_count_by_their_rms_and_given_values_are_read(self):
    model = _model()
    variables = model.trainable_variables
    values = [v.numpy() for v in variables]
    values[0] = values[0] * 10.0  # The embedding: rows read alone, no fan-in; RMS 0.3.
    self.assertAllClose(weight_scale.kernel_ratio(variables, values),
                        weight_scale.kernel_ratio(variables))
    huge = list(values)
    huge[0] = values[0] * 1000.0  # An embedding of standard deviation 30: off scale.
    self.assertGreater(weight_scale.kernel_ratio(variables, huge), 20.0)
    values[-2] = values[-2] * 100.0  # The last Dense's kernel.
    self.assertGreater(weight_scale.kernel_ratio(variables, values), 50.0)
    self.assertEqual(weight_scale.fields(variables, values).keys(), {'kernel_ratio'})
    values[-1] = values[-1] + 300.0  # The last bias: a plain RMS, off scale too.
    self.assertGreater(weight_scale.kernel_ratio(variables, values), 299.0)
    values[-2][0, 0] = np.nan
    self.assertIsNone(weight_scale.kernel_ratio(variables, values))
    self.assertEqual(weight_scale.fields(variables[:1]), {})  # No kernel at all.

  def test_by_design_needs_kernels_on_scale_and_inputs_normalised(self):
    self.assertTrue(weight_scale.by_design({'kernel_ratio': 1.2}, 1.0))
    self.assertFalse(weight_scale.by_design({'kernel_ratio': 8.0}, 1.0))  # A wide initialiser.
    self.assertFalse(weight_scale.by_design({'kernel_ratio': 1.2}, 300.0))  # Raw inputs.
    self.assertFalse(weight_scale.by_design({}, 1.0))  # Not measured: judged as before.
    self.assertFalse(weight_scale.by_design({'kernel_ratio': 1.2}, -2.0))  # No input scale.


if __name__ == '__main__':
  tf.test.main()
