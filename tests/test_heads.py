"""Tests for stable_train.core.heads: the layer or operation that makes a model's one output, and
its activation."""

import keras
import tensorflow as tf

from stable_train.core import heads


class LastActivationTest(tf.test.TestCase):

  def test_the_activation_of_the_layer_that_makes_the_output(self):
    dense = lambda act=None: keras.layers.Dense(3, activation=act)
    seq = lambda *layers: keras.Sequential([keras.Input((4,)), *layers])
    self.assertEqual(heads.last_activation(seq(dense('softmax'))), 'softmax')
    self.assertEqual(heads.last_activation(seq(dense())), 'linear')
    self.assertEqual(heads.last_activation(seq(dense(), keras.layers.Softmax())), 'softmax')
    self.assertEqual(heads.last_activation(
        seq(dense(), keras.layers.Activation('sigmoid'))), 'sigmoid')
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(5, activation='relu')(inputs)
    functional = keras.Model(inputs, dense('softmax')(hidden))
    self.assertEqual(heads.last_activation(functional), 'softmax')
    self.assertEqual(heads.last_activation(seq(functional)), 'softmax')  # Nested.
    self.assertIsNone(heads.last_activation(seq(dense(), keras.layers.Dropout(0.1))))
    # A Lambda of a named activation reads as it; any other Lambda cannot be told.
    self.assertEqual(heads.last_activation(seq(dense(), keras.layers.Lambda(tf.sigmoid))),
                     'sigmoid')
    self.assertEqual(heads.last_activation(seq(dense(), keras.layers.Lambda(
        tf.nn.softmax))), 'softmax')
    self.assertIsNone(heads.last_activation(seq(dense(), keras.layers.Lambda(
        lambda t: 2.0 * t))))
    two = keras.Model(inputs, [dense('softmax')(hidden), dense()(hidden)])
    self.assertIsNone(heads.last_activation(two))

    class Subclassed(keras.Model):

      def __init__(self):
        super().__init__()
        self.out = keras.layers.Dense(3, activation='softmax')

      def call(self, x):
        return self.out(x)

    self.assertIsNone(heads.last_activation(Subclassed()))
    self.assertIsNone(heads.last_activation(tf.Module()))

  def test_a_relu_layer_or_op_as_the_output_reads_as_relu(self):
    seq = lambda *layers: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1), *layers])
    self.assertEqual(heads.last_activation(seq(keras.layers.ReLU())), 'relu')
    self.assertIsNone(heads.last_activation(seq(keras.layers.ReLU(max_value=6.0))))
    self.assertIsNone(heads.last_activation(seq(keras.layers.ReLU(negative_slope=0.1))))
    inputs = keras.Input((4,))
    dense = keras.layers.Dense(1)(inputs)
    for op, name in ((keras.ops.relu, 'relu'), (keras.ops.sigmoid, 'sigmoid')):
      model = keras.Model(inputs, op(dense))
      self.assertEqual(heads.last_activation(model), name)
      self.assertIs(heads.output_layer(model).output, model.outputs[0])
    self.assertIsNone(heads.last_activation(keras.Model(inputs, dense * 2.0)))

  def test_layers_that_only_move_values_are_looked_through(self):
    # A count-regression head: Dense(1, 'relu') then Flatten (or a Reshape).
    for after in (keras.layers.Flatten(), keras.layers.Reshape((1, 1))):
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, 'relu'), after])
      self.assertEqual(heads.last_activation(model), 'relu')
      self.assertIs(heads.output_layer(model), model.layers[0])
    inputs = keras.Input((4,))
    head = keras.layers.Dense(3, activation='softmax')
    model = keras.Model(inputs, keras.layers.Reshape((3, 1))(head(inputs)))
    self.assertIs(heads.output_layer(model), head)
    self.assertEqual(heads.last_activation(model), 'softmax')
    # Mixed precision's float32 cast after the head (Activation('linear', dtype='float32')), or an
    # Identity, only moves values: the softmax before it is the head.
    for after in (keras.layers.Activation('linear', dtype='float32'), keras.layers.Identity()):
      head = keras.layers.Dense(3, activation='softmax')
      model = keras.Model(inputs, after(head(inputs)))
      self.assertIs(heads.output_layer(model), head)
      self.assertEqual(heads.last_activation(model), 'softmax')
    cast = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation='sigmoid'),
                             keras.layers.Activation('linear', dtype='float32')])
    self.assertEqual(heads.last_activation(cast), 'sigmoid')

  def test_a_call_of_the_user_s_own_is_not_read(self):
    inputs = keras.Input((4,))

    class SigmoidInCall(keras.Model):  # A Functional subclass whose call adds a sigmoid.

      def __init__(self):
        super().__init__(inputs, keras.layers.Dense(1)(inputs))

      def call(self, x, training=None):
        return tf.sigmoid(super().call(x, training=training))

    class SoftmaxDense(keras.layers.Dense):  # A Dense whose call applies a softmax.

      def call(self, x):
        return tf.nn.softmax(super().call(x))

    class WideDense(keras.layers.Dense):  # Its own constructor only: the attribute holds.

      def __init__(self, **kwargs):
        super().__init__(8, **kwargs)

    self.assertIsNone(heads.last_activation(SigmoidInCall()))
    self.assertIsNone(heads.last_activation(keras.Sequential([inputs, SoftmaxDense(3)])))
    self.assertEqual(heads.last_activation(
        keras.Sequential([inputs, WideDense(activation='relu')])), 'relu')

  def test_tensorflow_functions_given_as_an_activation_read_by_their_keras_names(self):
    for fn, name in ((tf.nn.softmax, 'softmax'), (tf.nn.log_softmax, 'log_softmax'),
                     (tf.nn.relu, 'relu'), (tf.sigmoid, 'sigmoid'), (tf.identity, 'linear'),
                     (tf.exp, 'exponential')):
      model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation=fn)])
      self.assertEqual(heads.last_activation(model), name, fn)


if __name__ == '__main__':
  tf.test.main()
