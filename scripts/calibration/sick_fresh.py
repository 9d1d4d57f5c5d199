"""A fresh set of sick scenarios (the 'fresh' split), written after the doctor's rules and blind
to them: each is the set-up and symptom of a public user report (an issue thread or a Q&A page,
cited in its docstring), reproduced on architectures the older scenarios of the same cause do not
use (a bidirectional LSTM, 1D convnets, a dense autoencoder, a Wide & Deep model, ResNet50 and
DenseNet121 from keras.applications, an image-to-image net with instance normalisation). Each
was checked with plain Keras `fit` (no stable_train, no XLA) to show the reported symptom, and,
where the cause is not the data itself, that the thread's remedy trains."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import archs
from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

FRESH = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
MIXED = 'mixed_float16'


def add(name, expected, arch, **fields):
  """`FRESH.add` with split='fresh'."""
  return FRESH.add(name, expected, arch, split='fresh', **fields)


# ---------------------------------------------------------------------------------------------
# Architectures of this file.


def bilstm_tokens(seed, *, classes=8, seq_len=16, vocab=64, units=32, head_activation=None):
  """Embedding -> Bidirectional(LSTM) -> Dense(classes): a text classifier over token ids."""
  keras.utils.set_random_seed(seed)
  ids = keras.Input((seq_len,), dtype='int32')
  x = keras.layers.Embedding(vocab, 32)(ids)
  x = keras.layers.Bidirectional(keras.layers.LSTM(units))(x)
  outputs = keras.layers.Dense(classes, activation=head_activation)(x)
  return keras.Model(ids, outputs, name='bilstm')


def conv1d_residual(seed, *, steps=100, width=32, blocks=16, branch_scale=0.02):
  """A deep residual 1D convnet with no normalisation: a stem, `blocks` blocks of
  conv-ReLU-conv added to their input (the block's last conv initialised small,
  VarianceScaling(branch_scale), so the untrained net's outputs are of the targets' order),
  global pooling, Dense(1)."""
  keras.utils.set_random_seed(seed)
  conv = lambda init='he_normal': keras.layers.Conv1D(width, 3, padding='same',
                                                      kernel_initializer=init)
  inputs = keras.Input((steps, 1))
  x = conv()(inputs)
  for _ in range(blocks):
    h = keras.layers.ReLU()(conv()(x))
    x = keras.layers.Add()([x, conv(keras.initializers.VarianceScaling(branch_scale))(h)])
  x = keras.layers.GlobalAveragePooling1D()(keras.layers.ReLU()(x))
  return keras.Model(inputs, keras.layers.Dense(1)(x), name='conv1d_residual')


def conv1d_plain(seed, *, steps=40, width=32, outputs=1, kernel_initializer='glorot_uniform'):
  """Conv1D-ReLU x2, max pooling, Dense(32, ReLU), Dense(outputs): a 1D convnet."""
  keras.utils.set_random_seed(seed)
  init = dict(kernel_initializer=kernel_initializer)
  return keras.Sequential([
      keras.Input((steps, 1)),
      keras.layers.Conv1D(width, 5, padding='same', activation='relu', **init),
      keras.layers.MaxPooling1D(2),
      keras.layers.Conv1D(width, 5, padding='same', activation='relu', **init),
      keras.layers.GlobalMaxPooling1D(),
      keras.layers.Dense(32, activation='relu', **init),
      keras.layers.Dense(outputs, **init)], name='conv1d')


def dense_autoencoder(seed, *, inputs=64, code=16, activation=None):
  """A dense autoencoder inputs -> 48 -> code -> 48 -> inputs (ReLU), output `activation`."""
  keras.utils.set_random_seed(seed)
  return keras.Sequential([
      keras.Input((inputs,)), keras.layers.Dense(48, activation='relu'),
      keras.layers.Dense(code, activation='relu'), keras.layers.Dense(48, activation='relu'),
      keras.layers.Dense(inputs, activation=activation)], name='autoencoder')


def wide_deep(seed, *, features=16, outputs=1, activation=None, hidden=(64, 32),
              kernel_initializer='glorot_uniform'):
  """A Wide & Deep model over one feature vector: a linear ("wide") part plus a ReLU MLP
  ("deep") part, summed, then `activation`."""
  keras.utils.set_random_seed(seed)
  inputs = keras.Input((features,))
  wide = keras.layers.Dense(outputs, kernel_initializer=kernel_initializer)(inputs)
  x = inputs
  for width in hidden:
    x = keras.layers.Dense(width, activation='relu', kernel_initializer=kernel_initializer)(x)
  deep = keras.layers.Dense(outputs, kernel_initializer=kernel_initializer)(x)
  out = keras.layers.Add()([wide, deep])
  if activation is not None:
    out = keras.layers.Activation(activation, dtype='float32')(out)
  return keras.Model(inputs, out, name='wide_deep')


def resnet50(seed, *, classes=10, activation='softmax'):
  """keras.applications.ResNet50, weights=None, 32x32 RGB."""
  keras.utils.set_random_seed(seed)
  return keras.applications.ResNet50(input_shape=archs.IMAGE, weights=None, classes=classes,
                                     classifier_activation=activation)


def densenet121(seed, *, classes=10, activation='softmax'):
  """keras.applications.DenseNet121, weights=None, 32x32 RGB."""
  keras.utils.set_random_seed(seed)
  return keras.applications.DenseNet121(input_shape=archs.IMAGE, weights=None, classes=classes,
                                        classifier_activation=activation)


class InstanceNormNaive(keras.layers.Layer):
  """Instance normalisation written by hand: the mean and the variance over the image's pixels
  computed in the layer's compute dtype (float16 under mixed_float16)."""

  def build(self, shape):
    self.gamma = self.add_weight(shape=shape[-1:], initializer='ones', name='gamma')
    self.beta = self.add_weight(shape=shape[-1:], initializer='zeros', name='beta')

  def call(self, x):
    mean = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=[1, 2], keepdims=True)
    gamma, beta = tf.cast(self.gamma, x.dtype), tf.cast(self.beta, x.dtype)
    return gamma * (x - mean) / tf.sqrt(var + tf.cast(1e-3, x.dtype)) + beta


def instancenorm_net(seed, *, size=32, channels=16):
  """An image-to-image net (a GAN generator's body): conv-IN-ReLU x2 and a 3-channel conv
  output, with `InstanceNormNaive`."""
  keras.utils.set_random_seed(seed)
  inputs = keras.Input((size, size, 3))
  x = inputs
  for _ in range(2):
    x = keras.layers.Conv2D(channels, 3, padding='same')(x)
    x = keras.layers.ReLU()(InstanceNormNaive()(x))
  out = keras.layers.Conv2D(3, 3, padding='same')(x)
  out = keras.layers.Activation('linear', dtype='float32')(out)
  return keras.Model(inputs, out, name='instancenorm_net')


# ---------------------------------------------------------------------------------------------
# Data of this file.


def digit_vectors():
  """The 8x8 digits flattened to 64 features in [0, 1] (an autoencoder's input and target)."""
  x, _ = data.digits(size=8, rgb=False)
  return x.reshape(len(x), 64)


def click_log(seed, *, rows=2048, features=16):
  """A click log: `data.binary`'s two clusters with 5 % of the clicks flipped (noisy labels),
  the features standardised (as a CTR pipeline feeds them)."""
  return data.binary(seed, rows=rows, features=features, flip=0.05)


# ---------------------------------------------------------------------------------------------
# exploding_gradients


@add('fresh_grad_deep_residual_conv1d', 'exploding_gradients', 'conv1d_residual',
     doors=('fit',), steps=100, citation='tbung/pytorch-revnet#1; keras-team/keras#949')
def _(seed):
  """A 16-block residual 1D convnet with no normalisation over series, SGD 0.01 with momentum, no
  clipping: the loss starts near 20, every block adds its gradient to the skip path's, and the
  first updates throw it to millions, then NaN (with clipnorm=1.0 it trains).
  tbung/pytorch-revnet#1 (a deep residual net: "my loss quickly goes to NAN", "the gradients of
  the revnet tend to explode a bit and gradient norm clipping is what I used"; adding clipping
  "worked beautifully"); keras-team/keras#949 ("loss : nan after training second batch size
  with convolution 1D" on time series)."""
  x, y = data.series(seed, steps=100)
  return cases.Setup(conv1d_residual(seed), keras.optimizers.SGD(0.01, momentum=0.9), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# learning_rate


@add('fresh_lr_resnet50_sgd', 'learning_rate', 'resnet50', doors=('fit',), steps=30,
     citation='leaderj1001/Stand-Alone-Self-Attention#5; '
              'zhengyang-wang/Deeplab-v2--ResNet-101--Tensorflow#12')
def _(seed):
  """ResNet50 (weights=None) on the 32x32 digits with SGD at 5.0 (momentum 0.9).
  leaderj1001/Stand-Alone-Self-Attention#5 (ResNet50: "at the first training step, my loss is
  NaN"; "Maybe, you can reduce learning_rate. example) 0.01");
  zhengyang-wang/Deeplab-v2--ResNet-101--Tensorflow#12 (a ResNet whose loss goes 6.3, 15, 52,
  940, 5e36, nan in ten steps)."""
  return cases.Setup(resnet50(seed), keras.optimizers.SGD(5.0, momentum=0.9), SCE(),
                     data.digits_stream(seed), 'classes')


@add('fresh_lr_autoencoder_sgd', 'learning_rate', 'autoencoder', doors=('trainer', 'fit'),
     steps=100, citation='koraykv/unsup#38; keras-team/keras#2530')
def _(seed):
  """A dense autoencoder of the 8x8 digits (MSE, linear output) with SGD at 30 (it trains at 1.0
  to 10). koraykv/unsup#38 (an
  autoencoder whose "average losses are equal to nan": "reduce the learning rate", and "I
  reduced the learning rate and ... the error is minimized correctly");
  keras-team/keras#2530 ("Mean Square Error Optimizer returns Nan's" for an image-to-image
  convnet trained with SGD and MSE)."""
  x = digit_vectors()
  return cases.Setup(dense_autoencoder(seed), keras.optimizers.SGD(30.0), 'mse',
                     data.stream(x, x, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# initialisation


@add('fresh_init_zeros_conv1d', 'initialisation', 'conv1d', doors=('fit',), steps=100,
     citation='keras-team/keras#16539; wagonhelm/NaNmnist#2')
def _(seed):
  """A 1D convnet whose every kernel starts at zero (kernel_initializer='zeros'): ReLU of zero
  is zero, so no kernel below the head gets a gradient and the loss stays at the labels'
  variance. keras-team/keras#16539 (kernels set to one constant: "the model is not able to
  learn: the bias still getting updated, but not the kernel weights");
  wagonhelm/NaNmnist#2 ("initializing weights as zeroes ... is highly improper": "every neuron
  in the network computes the same output")."""
  x, y = data.series(seed)
  return cases.Setup(conv1d_plain(seed, kernel_initializer='zeros'),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('fresh_init_wide_normal_wide_deep', 'initialisation', 'wide_deep', doors=('trainer',),
     steps=100, citation='sophiajw/HistAuGAN#4; kimiyoung/transformer-xl#24')
def _(seed):
  """A Wide & Deep click model (sigmoid, binary cross-entropy) whose kernels start from
  RandomNormal(stddev=2.0): the logits start in the hundreds, the sigmoid is saturated.
  sophiajw/HistAuGAN#4 ("model weights are initialised with relatively big numbers, training is
  crashing due to NaN error (+- inf)"; 0.2 should be 0.02); kimiyoung/transformer-xl#24 (NaN
  in the first forward pass: "try ... using smaller initial weights")."""
  x, y = click_log(seed)
  model = wide_deep(seed, activation='sigmoid', hidden=(256, 256),
                    kernel_initializer=keras.initializers.RandomNormal(stddev=2.0, seed=seed))
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


# ---------------------------------------------------------------------------------------------
# division_or_log


# ---------------------------------------------------------------------------------------------
# division_or_log


def msle_by_hand(y, p):
  """mean((log(p + 1) - log(y + 1))^2) written by hand on a linear output: a prediction below -1
  is the log of a negative number (NaN)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(tf.square(tf.math.log(p + 1.0) - tf.math.log(y + 1.0)))


@add('fresh_div_msle_wide_deep', 'division_or_log', 'wide_deep', doors=('trainer', 'fit'),
     seeds=(0, 1), steps=100, citation='dreamquark-ai/tabnet#438; timeseriesAI/tsai#150')
def _(seed):
  """A Wide & Deep regression of prices (positive, from about 0.1 to 20) from a table, its output
  linear, trained with a hand-written mean squared log error log(p + 1): an untrained model's
  predictions below -1 are the log of a negative number. dreamquark-ai/tabnet#438 ("Errors thrown
  when using custom loss function (rmsle)" on tabular prices: the model makes predictions with
  1 + y_pred < 0); timeseriesAI/tsai#150 ("MSLE as loss function": `torch.log(input + 1)` in a
  loss written by hand, "I end up with NaNs")."""
  x, y = data.tabular(seed)
  price = np.exp(y).astype(np.float32)
  return cases.Setup(wide_deep(seed), keras.optimizers.Adam(1e-3), msle_by_hand,
                     data.stream(x, price, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# softmax_overflow


def naive_softmax_ce(y, out):
  """Cross-entropy of exp(z) / sum(exp(z)) written by hand (no max subtracted)."""
  probs = field.naive_softmax(out)
  picked = tf.gather(probs, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked + 1e-7))


@add('fresh_exp_naive_softmax_wide_deep', 'softmax_overflow', 'wide_deep', doors=('trainer',),
     seeds=(0, 1), steps=100, citation='uTensor/uTensor#175; openai/baselines#761')
def _(seed):
  """A Wide & Deep classifier (8 classes) over count features in the tens (not standardised),
  its softmax written as exp(z) / sum(exp(z)): the wide part's logits reach the hundreds, exp
  overflows. uTensor/uTensor#175 (a simple model's logits "-249.873093 ... 378.097443, exp()
  inf ... this infinity value bubbles through to my results which yields a nan value");
  openai/baselines#761 ("tf.exp(300.0)/tf.exp(301.0)" is NaN: why the maximum is subtracted)."""
  x, y = data.classes(seed, scale=20.0)
  return cases.Setup(wide_deep(seed, outputs=8), keras.optimizers.Adam(1e-2), naive_softmax_ce,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# ---------------------------------------------------------------------------------------------
# precision


@add('fresh_fp16_instancenorm_pixels', 'precision', 'instancenorm_net', doors=('trainer',),
     steps=60, precision=MIXED, citation='tensorflow/tensorflow#47156; tensorflow/models#10426')
def _(seed):
  """An image-to-image net with a hand-written instance normalisation under mixed_float16, on
  images in pixel units [0, 255] (a colour-to-colour task, MSE on [0, 1] targets): the variance
  of the first convolution's outputs (squares of values in the hundreds) passes float16's 65504.
  tensorflow/tensorflow#47156 ("Mixed precision: Numerical instability with instance
  normalization layer": "the variance overflows quickly"; the mean and the variance should be
  computed in float32); tensorflow/models#10426 (NaN loss from a LayerNorm under
  mixed_precision)."""
  x, _ = data.digits()
  target = x[..., ::-1] * np.array([1.0, 0.5, 0.25], np.float32)
  return cases.Setup(instancenorm_net(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x * 255.0, target, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# bad_input


@add('fresh_input_log_zero_targets_wide_deep', 'bad_input', 'wide_deep', doors=('trainer', 'fit'),
     seeds=(0, 1), steps=150, citation='xuannianz/keras-ctpn#1; eragonruan/text-detection-ctpn#49')
def _(seed):
  """A Wide & Deep regression on log-transformed targets (np.log of a positive quantity), three
  of whose 2048 rows have a quantity of 0: their target is -inf. xuannianz/keras-ctpn#1
  ("RuntimeWarning: divide by zero encountered in log ... then loss got nan", from np.log in the
  data generator); eragonruan/text-detection-ctpn#49 ("loss become nan, invalid value
  encountered in log": np.log(gt_heights / ...) "occurs when gt_heights=0 ... caused by the
  annotation of your training data")."""
  x, y = data.tabular(seed)
  quantity = np.exp(y)
  rng = np.random.RandomState(seed + 3)
  quantity[rng.choice(len(y), 3, replace=False)] = 0.0
  with np.errstate(divide='ignore'):
    target = np.log(quantity).astype(np.float32)
  return cases.Setup(wide_deep(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, target, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(x, y, batch=32, seed=seed))


@add('fresh_input_zero_column_minmax_autoencoder', 'bad_input', 'autoencoder', doors=('fit',),
     steps=100, citation='evandowning/deepreflect#11')
def _(seed):
  """A dense autoencoder (as DeepReflect's) on features min-max normalised column by column, one
  column of which is 0 in every row: x / max(x) is 0 / 0, a NaN column in every batch.
  evandowning/deepreflect#11 ("loss = nan - mse = nan while training the model": "a feature with
  a maximum value of 0 ... leads to improper normalization that sets 0 as the denominator")."""
  raw = digit_vectors() * 16.0  # Pixel counts 0-16; the digits' corner pixel is 0 everywhere.
  with np.errstate(invalid='ignore', divide='ignore'):
    x = (raw / raw.max(axis=0, keepdims=True)).astype(np.float32)
  clean = np.nan_to_num(x)
  return cases.Setup(dense_autoencoder(seed, activation='sigmoid'), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, x, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, clean, batch=32, seed=seed))


# ---------------------------------------------------------------------------------------------
# transient


@add('fresh_transient_flaky_bilstm', 'transient', 'bilstm', doors=('fit',), steps=120,
     citation='NVIDIA/tensorflow#28; atriumlts/subpixel#36')
def _(seed):
  """A bidirectional LSTM text classifier whose recurrent output misfires once (NaN in one
  element at its 45th training call), then is fine: a flaky cuDNN RNN kernel.
  NVIDIA/tensorflow#28 (CuDNNLSTM on RTX cards: "loss values are nan after some training");
  atriumlts/subpixel#36 ("g_loss value is always nan for gpu, but strangely works fine on CPU";
  gone with other CUDA / cuDNN versions)."""
  x, y = data.tokens(seed)
  keras.utils.set_random_seed(seed)
  ids = keras.Input((16,), dtype='int32')
  h = keras.layers.Embedding(64, 32)(ids)
  h = field.FlakyOnce(45)(keras.layers.Bidirectional(keras.layers.LSTM(32))(h))
  model = keras.Model(ids, keras.layers.Dense(8)(h), name='bilstm_flaky')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('fresh_transient_flaky_backward_autoencoder', 'transient', 'autoencoder',
     doors=('trainer',), steps=240, citation='AlexeyAB/darknet#5547; apple/turicreate#2465')
def _(seed):
  """A dense autoencoder of the digits whose backward pass misfires once at its output (a NaN
  gradient at its 55th training call, the loss finite). AlexeyAB/darknet#5547 ("Cuda Error
  + AVG Loss Nan": "It IS indeed some sort of Hardware issue"); apple/turicreate#2465 ("Nan
  losses after the first iteration when training on GPU (works fine on CPU)"). 240 steps: the
  same autoencoder without the fault needs more than 120 to pass the "did it train" measure."""
  x = digit_vectors()
  base = dense_autoencoder(seed, activation='sigmoid')
  inputs = keras.Input((64,))
  model = keras.Model(inputs, field.FlakyGradientOnce(55)(base(inputs)), name='autoencoder_flaky')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, x, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# loss_output_mismatch


@add('fresh_mismatch_logits_bce_wide_deep', 'loss_output_mismatch', 'wide_deep',
     doors=('trainer',), steps=150, citation='keras-team/keras#4744; zzh8829/yolov3-tf2#91')
def _(seed):
  """A Wide & Deep click model whose output layer has no sigmoid, trained with
  'binary_crossentropy' (from_logits=False): Keras clips the "probabilities" to [1e-7, 1 - 1e-7],
  so every negative logit reads as 0 and every logit above 1 as 1, with no gradient beyond.
  keras-team/keras#4744 ("forgetting to add a sigmoid activation function to my final Dense
  layer and then training a model for several days without error, only to then discover that
  the model generates negative predictions"); zzh8829/yolov3-tf2#91 (binary cross-entropy on raw
  outputs "give negative loss values"; from_logits=True fixed it)."""
  x, y = click_log(seed)
  return cases.Setup(wide_deep(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('fresh_mismatch_softmax_multilabel_densenet', 'loss_output_mismatch', 'densenet121',
     doors=('fit',), steps=30, citation='tensorflow/tensorflow#19890; '
                                        'AyanKumarBhunia/Deep-One-Shot-Logo-Retrieval#7')
def _(seed):
  """DenseNet121 tagging digit images with several tags each (multi-label: "is the digit >= 5",
  "is it even", ...), a softmax output trained with BinaryCrossentropy(from_logits=True): the
  softmax's outputs sum to 1 and are read as logits. tensorflow/tensorflow#19890 ("Logits all
  reduced to very small value when training multi-label image classification");
  AyanKumarBhunia/Deep-One-Shot-Logo-Retrieval#7 ("Having softmax as the final layer does not
  show any good results. With sigmoid ... the validation accuracy is reaching 98%"; "You need to
  use sigmoid instead of softmax")."""
  x, digit = data.digits()
  tags = np.stack([digit >= 5, digit % 2 == 0, np.isin(digit, (0, 6, 8, 9)),
                   np.isin(digit, (1, 4, 7)), digit < 3], axis=-1).astype(np.float32)
  base = densenet121(seed, classes=5, activation=None)
  # The softmax as the thread's TensorFlow code applies it (tf.nn.softmax): Keras 3 reads the
  # logits back from a softmax *activation* when a loss is given from_logits=True.
  model = keras.Model(base.input, keras.layers.Lambda(tf.nn.softmax)(base.output),
                      name='densenet121_softmax')
  return cases.Setup(model, keras.optimizers.Adam(1e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     data.stream(x, tags, batch=32, seed=seed), 'binary_prob')


@add('fresh_mismatch_no_softmax_bilstm', 'loss_output_mismatch', 'bilstm', doors=('trainer', 'fit'),
     steps=150, citation='farizrahman4u/seq2seq#189')
def _(seed):
  """A bidirectional LSTM text classifier whose Dense head has no softmax, trained with
  SparseCategoricalCrossentropy() (from_logits=False): the raw outputs are read as
  probabilities. farizrahman4u/seq2seq#189 ("using categorical_crossentropy get loss result is
  nan": the model had no softmax output; the loss later reads 0.0000e+00 while the accuracy
  falls; setting a softmax output activation fixed it)."""
  x, y = data.tokens(seed)
  return cases.Setup(bilstm_tokens(seed), keras.optimizers.Adam(1e-3), SCE(),
                     data.stream(x, y, batch=32, seed=seed), 'classes')
