"""The healthy matrix: models trained the way people train them (the optimizers they use at their
usual rates, the usual heads and losses, float32 and mixed_float16, XLA on and off), through both
front doors. The doctor must name no cause, and the run must not stop or roll back."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import archs
from scripts.calibration import cases
from scripts.calibration import data

HEALTHY = cases.Registry()
add = HEALTHY.add
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy


def _adam():
  return keras.optimizers.Adam(1e-3)


def _adamw():
  return keras.optimizers.AdamW(1e-3, weight_decay=1e-4)


def _sgdm(rate=0.01):
  return keras.optimizers.SGD(rate, momentum=0.9)


def _rmsprop():
  return keras.optimizers.RMSprop(1e-3)


def _digits_setup(model, optimizer, loss, seed, scale=1.0):
  return cases.Setup(model, optimizer, loss, data.digits_stream(seed, scale=scale), 'classes')


@add('h_mobilenet_adam_softmax', 'healthy', 'mobilenet', doors=('fit',), steps=120)
def _(seed):
  """MobileNet (softmax head) on the digits, Adam 1e-3, sparse cross-entropy by name."""
  return _digits_setup(archs.mobilenet(seed), _adam(), 'sparse_categorical_crossentropy', seed)


@add('h_mobilenet_sgdm_logits', 'healthy', 'mobilenet', doors=('trainer',), steps=120,
     quick=True)
def _(seed):
  """MobileNet with a logits head and from_logits=True, SGD 0.01 with momentum 0.9."""
  return _digits_setup(archs.mobilenet(seed, activation=None), _sgdm(),
                       SCE(from_logits=True), seed)


@add('h_mobilenet_v2_adamw', 'healthy', 'mobilenet_v2', doors=('fit',), steps=120)
def _(seed):
  """MobileNetV2 (softmax head), AdamW 1e-3 with weight decay 1e-4."""
  return _digits_setup(archs.mobilenet_v2(seed), _adamw(), SCE(), seed)


@add('h_mobilenet_v3_small_rmsprop', 'healthy', 'mobilenet_v3_small', doors=('fit',),
     steps=120)
def _(seed):
  """MobileNetV3Small (softmax head), RMSprop 1e-3."""
  return _digits_setup(archs.mobilenet_v3_small(seed), _rmsprop(), SCE(), seed)


@add('h_mobilenet_v3_small_adam_logits', 'healthy', 'mobilenet_v3_small', doors=('trainer',),
     steps=120)
def _(seed):
  """MobileNetV3Small, logits head, from_logits=True, Adam 1e-3."""
  return _digits_setup(archs.mobilenet_v3_small(seed, activation=None), _adam(),
                       SCE(from_logits=True), seed)


@add('h_efficientnet_b0_adam', 'healthy', 'efficientnet_b0', doors=('fit',), steps=100)
def _(seed):
  """EfficientNetB0 (its own rescaling: pixels in [0, 255]), Adam 1e-3."""
  return _digits_setup(archs.efficientnet_b0(seed), _adam(), SCE(), seed, scale=255.0)


@add('h_resnet_sgdm', 'healthy', 'resnet_style', doors=('trainer', 'fit'), steps=120)
def _(seed):
  """A small ResNet (BatchNorm), logits, SGD 0.05 with momentum 0.9."""
  return _digits_setup(archs.resnet_style(seed), _sgdm(0.05), SCE(from_logits=True), seed)


@add('h_resnet_adam_xla', 'healthy', 'resnet_style', doors=('fit',), steps=120, jit=True)
def _(seed):
  """The small ResNet under XLA, Adam 1e-3."""
  return _digits_setup(archs.resnet_style(seed), _adam(), SCE(from_logits=True), seed)


def _tokens_setup(model, optimizer, seed):
  x, y = data.tokens(seed)
  return cases.Setup(model, optimizer, SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('h_transformer_adamw', 'healthy', 'transformer', doors=('trainer', 'fit'), steps=150,
     quick=True)
def _(seed):
  """The zoo transformer on token sequences, AdamW 1e-3."""
  return _tokens_setup(archs.transformer(seed), _adamw(), seed)


@add('h_transformer_adam_xla', 'healthy', 'transformer', doors=('trainer',), steps=150,
     jit=True)
def _(seed):
  """The transformer under XLA, Adam 1e-3."""
  return _tokens_setup(archs.transformer(seed), _adam(), seed)


@add('h_transformer_mixed', 'healthy', 'transformer', doors=('fit',), steps=150,
     precision='mixed_float16')
def _(seed):
  """The transformer under mixed_float16 (Keras's LossScaleOptimizer), Adam 1e-3."""
  return _tokens_setup(archs.transformer(seed), _adam(), seed)


@add('h_lstm_adam', 'healthy', 'lstm', doors=('trainer', 'fit'), steps=150)
def _(seed):
  """The zoo LSTM on token sequences, Adam 1e-3."""
  return _tokens_setup(archs.lstm(seed), _adam(), seed)


@add('h_lstm_mixed', 'healthy', 'lstm', doors=('trainer',), steps=150,
     precision='mixed_float16')
def _(seed):
  """The LSTM under mixed_float16, RMSprop 1e-3."""
  return _tokens_setup(archs.lstm(seed), _rmsprop(), seed)


@add('h_gru_rmsprop', 'healthy', 'gru', doors=('fit', 'trainer'), steps=150)
def _(seed):
  """A GRU regressing the mean of random walks, MSE, RMSprop 1e-3."""
  x, y = data.series(seed)
  return cases.Setup(archs.recurrent(seed, cell='gru'), _rmsprop(), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('h_subclassed_binary_sigmoid', 'healthy', 'subclassed', doors=('trainer', 'fit'),
     steps=150)
def _(seed):
  """A subclassed model, sigmoid output + binary cross-entropy, Adam 1e-3."""
  x, y = data.binary(seed)
  return cases.Setup(archs.subclassed(seed, activation='sigmoid'), _adam(), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('h_mlp_binary_logits_sgdm', 'healthy', 'mlp', doors=('fit',), steps=150)
def _(seed):
  """The MLP with a logit output, BinaryCrossentropy(from_logits=True), SGD 0.01 momentum."""
  x, y = data.binary(seed)
  return cases.Setup(archs.mlp(seed), _sgdm(), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('h_mlp_regression_adam', 'healthy', 'mlp', doors=('trainer',), steps=150, quick=True)
def _(seed):
  """The MLP regressing a linear target, MSE, Adam 1e-3."""
  x, y = data.tabular(seed)
  return cases.Setup(archs.mlp(seed), _adam(), keras.losses.MeanSquaredError(),
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('h_mlp_regression_sgdm_xla', 'healthy', 'mlp', doors=('fit',), steps=150, jit=True)
def _(seed):
  """The MLP regression under XLA, SGD 0.01 with momentum 0.9."""
  x, y = data.tabular(seed)
  return cases.Setup(archs.mlp(seed), _sgdm(), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('h_mlp_regression_mixed', 'healthy', 'mlp', doors=('trainer',), steps=150,
     precision='mixed_float16')
def _(seed):
  """The MLP regression under mixed_float16, AdamW 1e-3."""
  x, y = data.tabular(seed)
  return cases.Setup(archs.mlp(seed), _adamw(), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('h_convnet_softmax_mixed', 'healthy', 'convnet', doors=('trainer', 'fit'), steps=150,
     precision='mixed_float16')
def _(seed):
  """The BatchNorm + Dropout convnet on the 8x8 digits, softmax + cross-entropy, mixed_float16,
  Adam 1e-3."""
  x, y = data.digits(size=8, rgb=False)
  return cases.Setup(archs.convnet(seed, activation='softmax'), _adam(), SCE(),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


def _rain(seed, *, rows=2048, batch=64):
  """Daily rain in miniature, unshuffled as a series is logged: the first 64 days dry (one
  drizzle), then wet seasons and dry ones (about 4 batches each); the features a noisy season
  flag and the humidity that sets the amount on a wet day. A first batch far easier than the
  run's: no baseline for the end verdict; and the loss rises 10x above its dry best each wet
  season while the model does as well as ever on the first batch."""
  rng = np.random.RandomState(seed)
  wet = (np.sin((np.arange(rows) - 64) / 40.0) > 0).astype(np.float32)
  humid = rng.normal(size=rows)
  x = np.stack([wet + 0.1 * rng.normal(size=rows), humid], 1).astype(np.float32)
  y = wet * np.maximum(0.0, 4.0 + 2.0 * humid + 0.5 * rng.normal(size=rows))
  y[5] = 0.5
  ds = tf.data.Dataset.from_tensor_slices((x, y.astype(np.float32)[:, None])).repeat()
  return ds.batch(batch, drop_remainder=True).prefetch(2)


def _rain_model(seed):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation='relu'),
                           keras.layers.Dense(1)])


@add('h_rain_unshuffled_mae', 'healthy', 'mlp', doors=('trainer', 'fit'), steps=640)
def _(seed):
  """An unshuffled rain series starting with a dry spell, MAE, Adam 1e-3."""
  return cases.Setup(_rain_model(seed), keras.optimizers.Adam(1e-3), 'mae', _rain(seed),
                     'regression')


@add('h_rain_unshuffled_mse', 'healthy', 'mlp', doors=('trainer', 'fit'), steps=320)
def _(seed):
  """The same series under MSE, Adam 1e-3."""
  return cases.Setup(_rain_model(seed), keras.optimizers.Adam(1e-3), 'mse', _rain(seed),
                     'regression')
