"""The architectures of the calibration runs: four keras.applications models (weights=None, 32x32
inputs, the narrowest widths), a ResNet-style net, the zoo's MLP, convnet, transformer and LSTM,
a GRU, a SimpleRNN, a subclassed model, a siamese encoder and a small segmentation net."""

import keras

from stable_train.zoo import models as zoo

IMAGE = (32, 32, 3)


def _seed(seed):
  keras.utils.set_random_seed(seed)


def mobilenet(seed, *, classes=10, activation='softmax'):
  """MobileNet, width 0.25, 32x32 RGB (its smallest input)."""
  _seed(seed)
  return keras.applications.MobileNet(input_shape=IMAGE, alpha=0.25, weights=None,
                                      classes=classes, classifier_activation=activation)


def mobilenet_v2(seed, *, classes=10, activation='softmax'):
  """MobileNetV2, width 0.35."""
  _seed(seed)
  return keras.applications.MobileNetV2(input_shape=IMAGE, alpha=0.35, weights=None,
                                        classes=classes, classifier_activation=activation)


def mobilenet_v3_small(seed, *, classes=10, activation='softmax'):
  """MobileNetV3Small, width 0.75, inputs in [0, 1] (its preprocessing layer left out)."""
  _seed(seed)
  return keras.applications.MobileNetV3Small(
      input_shape=IMAGE, alpha=0.75, weights=None, classes=classes,
      classifier_activation=activation, include_preprocessing=False)


def efficientnet_b0(seed, *, classes=10, activation='softmax'):
  """EfficientNetB0; it rescales its own inputs, which are pixels in [0, 255]."""
  _seed(seed)
  return keras.applications.EfficientNetB0(input_shape=IMAGE, weights=None, classes=classes,
                                           classifier_activation=activation)


def resnet_style(seed, *, classes=10, blocks=3, width=16, batch_norm=True, activation=None,
                 kernel_initializer='he_normal', input_shape=IMAGE):
  """A small ResNet: a stem conv, `blocks` residual blocks (conv-BN-ReLU-conv-BN + identity),
  global pooling, a Dense head."""
  _seed(seed)
  norm = keras.layers.BatchNormalization if batch_norm else (lambda: keras.layers.Identity())
  conv = lambda: keras.layers.Conv2D(width, 3, padding='same',
                                     kernel_initializer=kernel_initializer)
  inputs = keras.Input(input_shape)
  x = keras.layers.ReLU()(norm()(conv()(inputs)))
  for _ in range(blocks):
    h = keras.layers.ReLU()(norm()(conv()(x)))
    x = keras.layers.ReLU()(keras.layers.Add()([x, norm()(conv()(h))]))
  x = keras.layers.GlobalAveragePooling2D()(x)
  outputs = keras.layers.Dense(classes, activation=activation,
                               kernel_initializer=kernel_initializer)(x)
  return keras.Model(inputs, outputs, name='resnet_style')


def mlp(seed, *, inputs=16, outputs=1, hidden=(32, 16), activation=None, **kwargs):
  """The zoo's MLP, with an optional output activation."""
  model = zoo.mlp(input_dim=inputs, hidden=hidden, outputs=outputs, seed=seed, **kwargs)
  if activation is None:
    return model
  return keras.Sequential([model, keras.layers.Activation(activation)], name='mlp_head')


def convnet(seed, *, classes=10, activation=None, image_shape=(8, 8, 1)):
  """The zoo's BatchNorm + Dropout convnet (8x8 digits), with an optional output activation."""
  model = zoo.convnet_bn(image_shape=image_shape, num_classes=classes, filters=(16, 32),
                         dropout=0.1, seed=seed)
  if activation is None:
    return model
  return keras.Sequential([model, keras.layers.Activation(activation)], name='convnet_head')


def transformer(seed, *, classes=8, seq_len=16, vocab=64):
  """The zoo's transformer (logits)."""
  return zoo.transformer(vocab_size=vocab, seq_len=seq_len, dim=32, heads=2, ffn=64,
                         num_classes=classes, seed=seed)


def lstm(seed, *, classes=8, seq_len=16, vocab=64):
  """The zoo's LSTM classifier (logits)."""
  return zoo.lstm(vocab_size=vocab, seq_len=seq_len, units=32, num_classes=classes, seed=seed)


def recurrent(seed, *, cell='gru', units=32, steps=40, features=1, outputs=1, activation='tanh',
              recurrent_initializer='orthogonal'):
  """A GRU, LSTM or SimpleRNN over numeric sequences, then Dense(outputs)."""
  _seed(seed)
  layer = {'gru': keras.layers.GRU, 'lstm': keras.layers.LSTM,
           'simple_rnn': keras.layers.SimpleRNN}[cell]
  return keras.Sequential([
      keras.Input((steps, features)),
      layer(units, activation=activation, recurrent_initializer=recurrent_initializer),
      keras.layers.Dense(outputs)], name=cell)


def token_gru(seed, *, classes=8, seq_len=16, vocab=64):
  """Embedding -> GRU -> logits over token ids."""
  _seed(seed)
  return keras.Sequential([keras.Input((seq_len,), dtype='int32'),
                           keras.layers.Embedding(vocab, 32), keras.layers.GRU(32),
                           keras.layers.Dense(classes)], name='token_gru')


class Subclassed(keras.Model):
  """A subclassed model (its own `call`): two Dense layers with dropout between, a head."""

  def __init__(self, outputs=1, activation=None, width=32, **kwargs):
    super().__init__(**kwargs)
    self.hidden = keras.layers.Dense(width, activation='relu')
    self.dropout = keras.layers.Dropout(0.1)
    self.hidden_2 = keras.layers.Dense(width, activation='relu')
    self.head = keras.layers.Dense(outputs, activation=activation)

  def call(self, x, training=False):
    return self.head(self.hidden_2(self.dropout(self.hidden(x), training=training)))


def subclassed(seed, *, inputs=16, outputs=1, activation=None):
  """`Subclassed`, built on (None, inputs)."""
  _seed(seed)
  model = Subclassed(outputs=outputs, activation=activation)
  model.build((None, inputs))
  return model


def segmentation(seed, *, size=32):
  """A small fully-convolutional net: a per-pixel sigmoid mask of a 32x32 RGB image."""
  _seed(seed)
  inputs = keras.Input((size, size, 3))
  x = keras.layers.Conv2D(16, 3, padding='same', activation='relu')(inputs)
  x = keras.layers.Conv2D(16, 3, padding='same', activation='relu')(x)
  outputs = keras.layers.Conv2D(1, 1, activation='sigmoid')(x)
  return keras.Model(inputs, outputs, name='segmentation')
