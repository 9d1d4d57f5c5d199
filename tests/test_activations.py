"""Tests for stable_train.forensics.activations: each layer's output scale on a batch, in inference mode."""

import keras
import numpy as np
import tensorflow as tf

from stable_train.forensics import activations
from stable_train.zoo import models


class ActivationScalesTest(tf.test.TestCase):

  def test_per_layer_scales_without_changing_any_variable(self):
    model = models.convnet_bn(image_shape=(8, 8, 3), num_classes=4, filters=(4,))
    x = np.random.RandomState(0).normal(size=(4, 8, 8, 3)).astype(np.float32) * 10
    before = [v.numpy().copy() for v in model.variables]
    scales = activations.activation_scales(model, x)
    self.assertEqual([s['layer'] for s in scales][-1], 'logits')
    self.assertIn('bn_0', [s['layer'] for s in scales])
    self.assertTrue(all(s['finite'] and s['dtype'] == 'float32' for s in scales))
    self.assertGreater(scales[0]['max_abs'], scales[0]['rms'])
    for a, b in zip(before, model.variables):
      self.assertAllEqual(a, b.numpy())  # BatchNorm statistics and dropout state untouched.

  def test_the_lstm_seed_state_is_untouched_too(self):
    # A plain inference-mode call advances the LSTM's seed generator (Keras 3).
    model = models.lstm(seed=0)
    x = np.random.RandomState(0).randint(0, 32, size=(4, 16)).astype(np.int32)
    model(x, training=True)
    before = {v.path: v.numpy().copy() for v in model.variables}
    self.assertTrue(activations.activation_scales(model, x))
    for v in model.variables:
      self.assertAllEqual(before[v.path], v.numpy(), msg=v.path)

  def test_a_float16_overflow_shows(self):
    keras.mixed_precision.set_global_policy('mixed_float16')
    try:
      model = models.mlp(input_dim=4, hidden=(8,), outputs=1)
    finally:
      keras.mixed_precision.set_global_policy('float32')
    scales = activations.activation_scales(model, np.full((2, 4), 6e4, np.float32))
    self.assertEqual(scales[0]['dtype'], 'float16')
    self.assertFalse(all(s['finite'] for s in scales))

  def test_a_model_that_is_no_graph_of_layers_has_none(self):
    class Plain(tf.Module):
      def __call__(self, x):
        return x

    self.assertEqual(activations.activation_scales(Plain(), np.ones((1, 2))), [])
