"""Small Keras model factories for the shipped configs."""

from typing import Optional, Sequence

import keras

from stable_train import errors


def mlp(*, input_dim: int = 1000, hidden: Sequence[int] = (256, 128), outputs: int = 1,
        activation: str = 'relu', kernel_initializer='glorot_uniform',
        kernel_regularizer=None, seed: Optional[int] = 0, name: str = 'mlp') -> keras.Model:
  """A multi-layer perceptron: Dense(h, activation) for each h in `hidden`, then Dense(outputs).

  Args:
    input_dim: number of input features.
    hidden: widths of the hidden layers.
    outputs: width of the output layer (1 for regression, the class count for logits).
    activation: hidden activation.
    kernel_initializer: a Keras initializer (object or name).
    kernel_regularizer: an optional Keras regularizer.
    seed: seeds Keras's random initialisation, so the same config gives the same weights.
    name: model name.
  """
  input_dim = errors.check_int('mlp', 'input_dim', input_dim, minimum=1)
  outputs = errors.check_int('mlp', 'outputs', outputs, minimum=1)
  hidden = [errors.check_int('mlp', 'hidden', h, minimum=1) for h in hidden]
  _seed(seed)
  layers = [keras.Input((input_dim,))]
  for i, width in enumerate(hidden):
    layers.append(keras.layers.Dense(width, activation=activation, name=f'dense_{i}',
                                     kernel_initializer=kernel_initializer,
                                     kernel_regularizer=kernel_regularizer))
  layers.append(keras.layers.Dense(outputs, name=f'dense_{len(hidden)}',
                                   kernel_initializer=kernel_initializer,
                                   kernel_regularizer=kernel_regularizer))
  return keras.Sequential(layers, name=name)


def _seed(seed: Optional[int]) -> None:
  if seed is not None:
    keras.utils.set_random_seed(seed)


def convnet_bn(*, image_shape: Sequence[int] = (16, 16, 3), num_classes: int = 10,
               filters: Sequence[int] = (16, 32), dropout: float = 0.25, seed: Optional[int] = 0,
               name: str = 'convnet_bn') -> keras.Model:
  """A small convnet: [Conv2D → BatchNormalization → ReLU → MaxPool] per filter count, then
  global average pooling, Dropout and a Dense layer of logits.

  BatchNormalization's moving statistics and Dropout's seed-generator state are updated in the
  forward pass: the state a skipped step must leave untouched.

  Args:
    image_shape: (height, width, channels) of the inputs.
    num_classes: number of logits.
    filters: channels of each convolution block.
    dropout: dropout rate before the classifier.
    seed: seeds the initialisation (and the dropout generator's starting state).
    name: model name.
  """
  _seed(seed)
  x = inputs = keras.Input(tuple(image_shape))
  for i, f in enumerate(filters):
    x = keras.layers.Conv2D(f, 3, padding='same', use_bias=False, name=f'conv_{i}')(x)
    x = keras.layers.BatchNormalization(name=f'bn_{i}')(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D()(x)
  x = keras.layers.GlobalAveragePooling2D()(x)
  x = keras.layers.Dropout(dropout, name='dropout')(x)
  outputs = keras.layers.Dense(num_classes, name='logits')(x)
  return keras.Model(inputs, outputs, name=name)


class _TransformerBlock(keras.layers.Layer):
  """Pre-norm transformer encoder block: LayerNorm → MultiHeadAttention (with dropout) → residual,
  LayerNorm → Dense(ffn) → Dropout → Dense → residual."""

  def __init__(self, *, dim, heads, ffn, dropout, **kwargs):
    super().__init__(**kwargs)
    self.norm_1 = keras.layers.LayerNormalization(name='norm_1')
    self.attention = keras.layers.MultiHeadAttention(heads, dim // heads, dropout=dropout,
                                                     name='attention')
    self.norm_2 = keras.layers.LayerNormalization(name='norm_2')
    self.ffn_1 = keras.layers.Dense(ffn, activation='gelu', name='ffn_1')
    self.ffn_dropout = keras.layers.Dropout(dropout, name='ffn_dropout')
    self.ffn_2 = keras.layers.Dense(dim, name='ffn_2')

  def call(self, x, training=None):
    h = self.norm_1(x)
    x = x + self.attention(h, h, training=training)
    h = self.ffn_dropout(self.ffn_1(self.norm_2(x)), training=training)
    return x + self.ffn_2(h)


def transformer(*, vocab_size: int = 64, seq_len: int = 16, dim: int = 32, heads: int = 2,
                ffn: int = 64, num_layers: int = 1, num_classes: int = 10, dropout: float = 0.1,
                seed: Optional[int] = 0, name: str = 'transformer') -> keras.Model:
  """A small transformer classifier over token ids: Embedding + learned positions, encoder
  blocks (MultiHeadAttention with attention dropout, LayerNormalization), mean pooling, logits.

  Args:
    vocab_size: number of token ids.
    seq_len: sequence length.
    dim: model width (a multiple of `heads`).
    heads: attention heads.
    ffn: width of the feed-forward layer.
    num_layers: encoder blocks.
    num_classes: number of logits.
    dropout: attention and feed-forward dropout rate.
    seed: seeds the initialisation.
    name: model name.
  """
  _seed(seed)
  tokens = keras.Input((seq_len,), dtype='int32')
  x = keras.layers.Embedding(vocab_size, dim, name='embedding')(tokens)
  positions = keras.layers.Embedding(seq_len, dim, name='positions')(
      keras.ops.arange(seq_len)[None, :])
  x = x + positions
  for i in range(num_layers):
    x = _TransformerBlock(dim=dim, heads=heads, ffn=ffn, dropout=dropout, name=f'block_{i}')(x)
  x = keras.layers.LayerNormalization(name='final_norm')(x)
  x = keras.layers.GlobalAveragePooling1D()(x)
  outputs = keras.layers.Dense(num_classes, name='logits')(x)
  return keras.Model(tokens, outputs, name=name)


def lstm(*, vocab_size: int = 64, seq_len: int = 16, units: int = 32, num_classes: int = 10,
         dropout: float = 0.1, seed: Optional[int] = 0, name: str = 'lstm') -> keras.Model:
  """An LSTM classifier over token ids: Embedding → LSTM (input dropout) → logits.

  Args:
    vocab_size: number of token ids.
    seq_len: sequence length.
    units: LSTM width.
    num_classes: number of logits.
    dropout: the LSTM's input dropout rate.
    seed: seeds the initialisation.
    name: model name.
  """
  _seed(seed)
  return keras.Sequential([
      keras.Input((seq_len,), dtype='int32'),
      keras.layers.Embedding(vocab_size, units, name='embedding'),
      keras.layers.LSTM(units, dropout=dropout, name='lstm'),
      keras.layers.Dense(num_classes, name='logits'),
  ], name=name)
