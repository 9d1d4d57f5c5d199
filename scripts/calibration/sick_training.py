"""Sick scenarios of the training set-up: a learning rate too high, exploding gradients and bad
initialisation. Each builder's docstring says the symptom users reported and where."""

import keras
import numpy as np

from scripts.calibration import archs
from scripts.calibration import cases
from scripts.calibration import data

TRAINING = cases.Registry()
add = TRAINING.add
SCE = keras.losses.SparseCategoricalCrossentropy


@add('lr_sgd_resnet', 'learning_rate', 'resnet_style', doors=('fit',), split='tune', steps=100,
     citation='tensorflow/tensorflow#38796')
def _(seed):
  """A VGG-like ResNet (no BatchNorm, as VGG16 has none) on the digits, SGD at 0.1 (momentum
  0.9). tensorflow/tensorflow#38796 ("A high
  learning rate may cause a nan or an inf loss with tf.keras.optimizers.SGD"; less likely as
  the rate is decreased)."""
  return cases.Setup(archs.resnet_style(seed, batch_norm=False),
                     keras.optimizers.SGD(0.1, momentum=0.9),
                     SCE(from_logits=True), data.digits_stream(seed), 'classes')


@add('lr_linear_unscaled_sgd', 'learning_rate', 'linear', doors=('trainer', 'fit'), seeds=(0, 1),
     split='held_out', steps=100, citation='keras-team/keras#3040')
def _(seed):
  """Dense(1) fitting y = 2x on x in [0, 200) with SGD 0.001, as keras-team/keras#3040 ("Simple
  Linear Regression Nan's after a few iterations"; "realized my learning rate was too high")."""
  keras.utils.set_random_seed(seed)
  x = np.arange(200, dtype=np.float32)[:, None]
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)], name='linear')
  return cases.Setup(model, keras.optimizers.SGD(1e-3), 'mse',
                     data.stream(x, 2.0 * x, batch=8, seed=seed), 'regression')


@add('lr_adam_10_binary', 'learning_rate', 'mlp', doors=('fit',), split='tune', steps=100,
     citation='"NaN loss: learning rate or data" '
              '(https://theneuralbase.com/tensorflow/learn/beginner/'
              'nan-loss-learning-rate-or-data/)')
def _(seed):
  """A ReLU MLP with a sigmoid output and binary cross-entropy, Adam at 10.0 (the page's first
  case: "learning_rate too high causes weight updates so large that loss explodes")."""
  x, y = data.binary(seed)
  return cases.Setup(archs.mlp(seed, activation='sigmoid'), keras.optimizers.Adam(10.0),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('lr_adam_transformer', 'learning_rate', 'transformer', doors=('trainer',),
     split='held_out', steps=150, citation='keras-team/keras#21')
def _(seed):
  """The transformer with Adam at 1.0 (an SGD rate given to Adam). keras-team/keras#21 ("Model
  training diverges after some level": the loss falls, then jumps from 0.74 to 13 and 26.6 and stays
  there)."""
  x, y = data.tokens(seed)
  return cases.Setup(archs.transformer(seed), keras.optimizers.Adam(1.0), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('lr_sgdm_mobilenet_v3', 'learning_rate', 'mobilenet_v3_small', doors=('fit',),
     split='tune', steps=60, citation='keras-team/keras#18919')
def _(seed):
  """MobileNetV3Small with SGD at 2.0 (momentum 0.9). keras-team/keras#18919 ("when optimizer is
  sgd, the loss will be NaN"; fine with RMSprop)."""
  return cases.Setup(archs.mobilenet_v3_small(seed), keras.optimizers.SGD(2.0, momentum=0.9),
                     SCE(), data.digits_stream(seed), 'classes')


@add('grad_simple_rnn_relu', 'exploding_gradients', 'simple_rnn', doors=('trainer',),
     split='tune', steps=150, citation='keras-team/keras#5127; bricewalker/Hey-Jetson#7')
def _(seed):
  """A ReLU SimpleRNN over 100-step sensor series in raw units, SGD 0.01 with momentum, no
  clipping.
  keras-team/keras#5127 ("why do the loss equal nan when i don't use clipnorm?": "the gradient
  gets really really large"); bricewalker/Hey-Jetson#7 (an RNN's loss NaN mid-epoch: "exploding/
  vanishing gradients ... one of the biggest and most common issues plaguing RNN's")."""
  x, y = data.series(seed, steps=100)
  return cases.Setup(archs.recurrent(seed, cell='simple_rnn', activation='relu', steps=100),
                     keras.optimizers.SGD(0.01, momentum=0.9), 'mse',
                     data.stream(3 * x, 3 * y, batch=32, seed=seed), 'regression')


@add('grad_gru_relu_long', 'exploding_gradients', 'gru', doors=('fit',), split='held_out',
     steps=150, citation='bricewalker/Hey-Jetson#7; RaoFoundation/bittensor#229')
def _(seed):
  """A ReLU GRU over 100-step sensor series in raw units, SGD 0.01 with momentum, no clipping.
  bricewalker/Hey-Jetson#7 (RNN loss NaN: exploding gradients); RaoFoundation/bittensor#229
  (the loss "explodes after some arbitrary number of epochs. Goes from say, 6.282 to
  298760397856", fixed by gradient clipping)."""
  x, y = data.series(seed, steps=100)
  return cases.Setup(archs.recurrent(seed, cell='gru', activation='relu', steps=100),
                     keras.optimizers.SGD(0.01, momentum=0.9), 'mse',
                     data.stream(3 * x, 3 * y, batch=32, seed=seed), 'regression')


@add('grad_lstm_relu_long', 'exploding_gradients', 'lstm', doors=('trainer',), split='tune',
     steps=150, citation='keras-team/keras#6399; Marcovaldong/lstmp.pytorch#2')
def _(seed):
  """A ReLU LSTM over 200-step random walks, RMSprop 1e-3, no clipping. keras-team/keras#6399
  ("Increasing the size of data leads to 'loss: nan' for LSTM": a longer look-back gives NaN);
  Marcovaldong/lstmp.pytorch#2 (NaN after n iterations, "might be problem of exploding
  gradient?"; clipping the norm to 1.0 on long sequences fixed it)."""
  x, y = data.series(seed, steps=200)
  return cases.Setup(archs.recurrent(seed, cell='lstm', activation='relu', steps=200),
                     keras.optimizers.RMSprop(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('grad_deep_mlp', 'exploding_gradients', 'deep_mlp', doors=('fit',), split='held_out',
     steps=150, citation='RaoFoundation/bittensor#229; keras-team/keras#510')
def _(seed):
  """A 20-layer ReLU MLP with no normalisation, SGD 0.05 with momentum, no clipping.
  RaoFoundation/bittensor#229 (a small architecture whose loss explodes mid-run, fixed by
  clipping); keras-team/keras#510 (NaN without clipnorm, fine with it)."""
  x, y = data.tabular(seed)
  model = archs.mlp(seed, hidden=(64,) * 20, kernel_initializer='he_uniform')
  return cases.Setup(model, keras.optimizers.SGD(0.05, momentum=0.9), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


def _reinitialise(model, stddev, seed):
  """Every kernel drawn again from N(0, stddev) (kernel_initializer=RandomNormal(stddev=...)
  on every layer, as the threads' code passes it)."""
  rng = np.random.RandomState(seed)
  for v in model.trainable_variables:
    if 'kernel' in v.path or 'embeddings' in v.path:
      v.assign(rng.normal(0.0, stddev, size=v.shape).astype(np.float32))
  return model


@add('init_random_normal_mlp', 'initialisation', 'mlp', doors=('trainer', 'fit'), split='tune',
     steps=100, citation='openai/pixel-cnn#31; VinceShieh/spark-ffm#12')
def _(seed):
  """A regression MLP (128, 128) initialised from RandomNormal(stddev=1.0). openai/pixel-cnn#31
  ("with initialization I got 7229.39 loss at the first step"); VinceShieh/spark-ffm#12
  ("Weight Initialisation might be a cause for loss NaN": the pre-activations' spread grows with
  the fan-in)."""
  x, y = data.tabular(seed)
  model = _reinitialise(archs.mlp(seed, hidden=(128, 128)), 1.0, seed)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('init_resnet_no_bn', 'initialisation', 'resnet_style', doors=('fit',), split='held_out',
     steps=100, citation='yulunzhang/RCAN#76')
def _(seed):
  """A ResNet without BatchNorm (as RCAN has none), its convolutions from RandomNormal(0.5).
  yulunzhang/RCAN#76 ("training loss not decrease", "the loss became extremely large" with one
  initializer and converged with Kaiming)."""
  model = archs.resnet_style(seed, batch_norm=False,
                             kernel_initializer=keras.initializers.RandomNormal(stddev=0.5))
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed), 'classes')


@add('init_gru_head', 'initialisation', 'gru', doors=('trainer',), split='tune', steps=100,
     citation='mozilla/DeepSpeech#138')
def _(seed):
  """Embedding -> GRU -> logits with every kernel from RandomNormal(stddev=3.0) (a default
  stddev too wide for the layer). mozilla/DeepSpeech#138 ("Without it, the loss is constantly
  infinite and we never improve"; stddev=0.1 trained)."""
  x, y = data.tokens(seed)
  model = _reinitialise(archs.token_gru(seed), 3.0, seed)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('init_convnet_wide_normal', 'initialisation', 'convnet', doors=('fit',), split='held_out',
     steps=100, citation='yulunzhang/RCAN#76; openai/pixel-cnn#31')
def _(seed):
  """The BatchNorm convnet on the 8x8 digits with its kernels from RandomNormal(stddev=5.0):
  the logits head starts far off scale. yulunzhang/RCAN#76 (an initializer made the loss
  extremely large); openai/pixel-cnn#31 (a 7229 loss at the first step)."""
  x, y = data.digits(size=8, rgb=False)
  model = _reinitialise(archs.convnet(seed), 5.0, seed)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')
