"""A blind set of sick scenarios (the 'blind' split), written without reading the doctor, its
policies or its notes: each is the set-up and symptom of a public user report (an issue thread or
a Q&A page, cited in its docstring), reproduced on architectures the other sick files do not use
(a small U-Net, a TextCNN, a temporal convnet, a VGG-style net without normalisation, a
ViT-like patch transformer, a relu LSTM sequence-to-sequence net, a dense VAE and a multi-task
two-head net). Each builder takes `cured`: the same run with the thread's remedy (used only to
check that the remedy trains; the registry calls `build(seed)`, the sick run). Each was checked
with plain Keras `fit` (no stable_train, no XLA) to show the reported symptom and that its
cured twin passes runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
MIXED = 'mixed_float16'


def add(name, expected, arch, **fields):
  """`BLIND.add` with split='blind'."""
  return BLIND.add(name, expected, arch, split='blind', **fields)


# ---------------------------------------------------------------------------------------------
# Layers of this file (as the cited threads write them).


class SeriesStandardize(keras.layers.Layer):
  """Per-series standardisation inside the model ((x - mean) / std over time, RevIN-style):
  with `epsilon` 0 a flat series is 0 / 0."""

  def __init__(self, epsilon=0.0, **kwargs):
    super().__init__(**kwargs)
    self.epsilon = epsilon

  def call(self, x):
    mean = tf.reduce_mean(x, axis=1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=1, keepdims=True)
    return (x - mean) / tf.sqrt(var + self.epsilon)


class LastStep(keras.layers.Layer):
  """The last time step of a sequence (a causal net's summary)."""

  def call(self, x):
    return x[:, -1]


class RMSNormNaive(keras.layers.Layer):
  """x / sqrt(mean(x^2) + epsilon) over the features, in the layer's compute dtype (float16 under
  mixed_float16, where an epsilon of 1e-10 is 0)."""

  def __init__(self, epsilon=1e-10, **kwargs):
    super().__init__(**kwargs)
    self.epsilon = epsilon

  def build(self, shape):
    self.scale = self.add_weight(shape=shape[-1:], initializer='ones', name='scale')

  def call(self, x):
    ms = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
    return x / tf.sqrt(ms + tf.cast(self.epsilon, x.dtype)) * tf.cast(self.scale, x.dtype)


class PositionEmbedding(keras.layers.Layer):
  """A learned position embedding added to the tokens."""

  def build(self, shape):
    self.pos = self.add_weight(shape=shape[1:], initializer=keras.initializers.RandomNormal(
        stddev=0.02), name='pos')

  def call(self, x):
    return x + tf.cast(self.pos, x.dtype)


class HandAttention(keras.layers.Layer):
  """Single-head self-attention written by hand: scores q.k (scaled by 1/sqrt(d) if `scaled`),
  weights exp(s) / sum(exp(s)) (`naive`) or tf.nn.softmax (max subtracted)."""

  def __init__(self, dim, naive=True, scaled=False, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.naive, self.scaled = dim, naive, scaled
    self.qkv = keras.layers.Dense(3 * dim)
    self.out = keras.layers.Dense(dim)

  def call(self, x):
    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
    scores = tf.matmul(q, k, transpose_b=True)
    if self.scaled:
      scores = scores / (self.dim ** 0.5)
    if self.naive:
      e = tf.exp(scores)
      weights = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    else:
      weights = tf.nn.softmax(scores, axis=-1)
    return self.out(tf.matmul(weights, v))


class VAESampler(keras.layers.Layer):
  """The reparameterisation z = mu + sigma * eps (mu at inference) and the KL term (add_loss,
  weight `beta`). With `relu_sigma` the encoder's second head is sigma itself (a ReLU, "sigma must
  be positive") and the KL takes log(sigma^2); otherwise it is log(sigma^2) (linear)."""

  def __init__(self, relu_sigma, beta=0.01, **kwargs):
    super().__init__(**kwargs)
    self.relu_sigma, self.beta = relu_sigma, beta

  def call(self, inputs, training=False):
    mu, s = inputs
    if self.relu_sigma:
      sigma = s
      log_var = tf.math.log(tf.square(sigma))
    else:
      log_var = s
      sigma = tf.exp(0.5 * s)
    kl = -0.5 * tf.reduce_mean(1.0 + log_var - tf.square(mu) - tf.square(sigma))
    self.add_loss(self.beta * kl)
    if training:
      return mu + sigma * tf.random.normal(tf.shape(mu))
    return mu


# ---------------------------------------------------------------------------------------------
# Architectures of this file.


def _seed(seed):
  keras.utils.set_random_seed(seed)


def unet_small(seed, *, size=16, base=16, kernel_initializer='glorot_uniform'):
  """A two-level U-Net: conv-conv, pool, conv-conv, upsample, skip concat, conv-conv, a per-pixel
  sigmoid mask."""
  _seed(seed)
  conv = lambda n: keras.layers.Conv2D(n, 3, padding='same', activation='relu',
                                       kernel_initializer=kernel_initializer)
  inputs = keras.Input((size, size, 1))
  c1 = conv(base)(conv(base)(inputs))
  c2 = conv(2 * base)(conv(2 * base)(keras.layers.MaxPooling2D()(c1)))
  u = keras.layers.Concatenate()([keras.layers.UpSampling2D()(c2), c1])
  c3 = conv(base)(conv(base)(u))
  out = keras.layers.Conv2D(1, 1, activation='sigmoid', kernel_initializer=kernel_initializer,
                            dtype='float32')(c3)
  return keras.Model(inputs, out, name='unet_small')


def textcnn(seed, *, seq_len=16, vocab=64, outputs=1, activation=None, widths=(3, 4, 5),
            filters=32):
  """Kim's TextCNN: an embedding, parallel Conv1D of several widths with max-over-time pooling,
  concatenated, Dense(outputs, activation)."""
  _seed(seed)
  ids = keras.Input((seq_len,), dtype='int32')
  e = keras.layers.Embedding(vocab, 32)(ids)
  pooled = [keras.layers.GlobalMaxPooling1D()(
      keras.layers.Conv1D(filters, w, activation='relu')(e)) for w in widths]
  x = keras.layers.Dropout(0.1)(keras.layers.Concatenate()(pooled))
  return keras.Model(ids, keras.layers.Dense(outputs, activation=activation)(x), name='textcnn')


def tcn(seed, *, steps=40, width=24, dilations=(1, 2, 4, 8), standardize=None, flaky_at=None):
  """A temporal convnet: (optional per-series standardisation), a 1x1 stem, residual blocks of two
  dilated causal convs, the last step, Dense(1) (a logit). `flaky_at`: a `field.FlakyOnce` after
  the first block."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  x = inputs if standardize is None else SeriesStandardize(standardize)(inputs)
  x = keras.layers.Conv1D(width, 1)(x)
  for i, d in enumerate(dilations):
    h = keras.layers.Conv1D(width, 3, padding='causal', dilation_rate=d, activation='relu')(x)
    h = keras.layers.Conv1D(width, 3, padding='causal', dilation_rate=d)(h)
    x = keras.layers.ReLU()(keras.layers.Add()([x, h]))
    if i == 0 and flaky_at is not None:
      x = field.FlakyOnce(flaky_at)(x)
  return keras.Model(inputs, keras.layers.Dense(1)(LastStep()(x)), name='tcn')


def vgg_small(seed, *, classes=10, size=16, head_activation=None):
  """A VGG-style net without normalisation: conv-conv-pool x2, conv, global pooling, Dense(64),
  Dense(classes, head_activation)."""
  _seed(seed)
  conv = lambda n: keras.layers.Conv2D(n, 3, padding='same', activation='relu')
  return keras.Sequential([
      keras.Input((size, size, 1)), conv(16), conv(16), keras.layers.MaxPooling2D(),
      conv(32), conv(32), keras.layers.MaxPooling2D(), conv(64),
      keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(64, activation='relu'),
      keras.layers.Dense(classes, activation=head_activation)], name='vgg_small')


def patch_transformer(seed, *, size=16, patch=4, dim=32, classes=10, naive=False, scaled=True,
                      rms_epsilon=None):
  """A ViT-like net: a patch embedding (strided conv, no bias), (an optional `RMSNormNaive` of the
  patch tokens), a position embedding, one block of `HandAttention` + MLP (pre-LayerNorm on the
  MLP), mean over tokens, Dense(classes) logits."""
  _seed(seed)
  n = (size // patch) ** 2
  inputs = keras.Input((size, size, 1))
  x = keras.layers.Conv2D(dim, patch, strides=patch, use_bias=False)(inputs)
  x = keras.layers.Reshape((n, dim))(x)
  if rms_epsilon is not None:
    x = RMSNormNaive(rms_epsilon)(x)
  x = PositionEmbedding()(x)
  x = keras.layers.Add()([x, HandAttention(dim, naive=naive, scaled=scaled)(x)])
  h = keras.layers.Dense(2 * dim, activation='gelu')(keras.layers.LayerNormalization()(x))
  x = keras.layers.Add()([x, keras.layers.Dense(dim)(h)])
  x = keras.layers.GlobalAveragePooling1D()(x)
  out = keras.layers.Dense(classes, dtype='float32')(x)
  return keras.Model(inputs, out, name='patch_transformer')


def relu_lstm_seq2seq(seed, *, steps=60, units=32, activation='relu'):
  """Sequence to sequence: two stacked LSTMs (return_sequences) with `activation`, a
  TimeDistributed Dense(1) per step."""
  _seed(seed)
  return keras.Sequential([
      keras.Input((steps, 1)),
      keras.layers.LSTM(units, activation=activation, return_sequences=True),
      keras.layers.LSTM(units, activation=activation, return_sequences=True),
      keras.layers.TimeDistributed(keras.layers.Dense(1))], name='relu_lstm_seq2seq')


def vae_dense(seed, *, inputs=64, latent=8, relu_sigma=True):
  """A dense VAE of the 8x8 digits: 64 -> 64 (ReLU) -> (mu, sigma head) -> `VAESampler` ->
  64 (ReLU) -> 64 sigmoid."""
  _seed(seed)
  x_in = keras.Input((inputs,))
  h = keras.layers.Dense(64, activation='relu')(x_in)
  mu = keras.layers.Dense(latent)(h)
  s = keras.layers.Dense(latent, activation='relu' if relu_sigma else None)(h)
  z = VAESampler(relu_sigma)([mu, s])
  h = keras.layers.Dense(64, activation='relu')(z)
  return keras.Model(x_in, keras.layers.Dense(inputs, activation='sigmoid')(h), name='vae')


def two_head(seed, *, features=16, kernel_initializer='glorot_uniform'):
  """A multi-task net: a shared trunk Dense(64)-Dense(32) (ReLU), two heads Dense(16)-Dense(1),
  their outputs concatenated (one column per task)."""
  _seed(seed)
  dense = lambda n, act='relu': keras.layers.Dense(n, activation=act,
                                                   kernel_initializer=kernel_initializer)
  inputs = keras.Input((features,))
  trunk = dense(32)(dense(64)(inputs))
  heads = [dense(1, None)(dense(16)(trunk)) for _ in range(2)]
  return keras.Model(inputs, keras.layers.Concatenate()(heads), name='two_head')


# ---------------------------------------------------------------------------------------------
# Data of this file.


def digit_masks(seed, *, size=16):
  """Noisy 16x16 digits (noise 0.3, seeded) and their stroke masks (pixel > 0.5): a binary
  segmentation."""
  x, _ = data.digits(size=size, rgb=False)
  rng = np.random.RandomState(1000 + seed)
  noisy = (x + 0.3 * rng.normal(size=x.shape)).astype(np.float32)
  return noisy, (x > 0.5).astype(np.float32)


def trend_series(seed, *, rows=1024, steps=40, flat=0.0):
  """Random walks (rows, steps, 1) labelled 1 when they end above their start; a fraction `flat`
  of them flat (a sensor that held its value over the window: label 0)."""
  x, _ = data.series(seed, rows=rows, steps=steps)
  rng = np.random.RandomState(2000 + seed)
  n_flat = int(round(flat * rows))
  if n_flat:
    rows_flat = rng.choice(rows, n_flat, replace=False)
    x[rows_flat] = x[rows_flat, :1]
  y = (x[:, -1, 0] > x[:, 0, 0]).astype(np.float32)[:, None]
  return x, y


def binary_tokens(seed):
  """`data.tokens` with the 8 classes folded into two (class < 4)."""
  x, y = data.tokens(seed)
  return x, (y < 4).astype(np.float32).reshape(-1, 1)


def two_tasks(seed, *, rows=2048, features=16):
  """Two regression targets of one table (two linear-plus-noise tasks)."""
  x, y_a = data.tabular(seed, rows=rows, features=features)
  rng = np.random.RandomState(3000 + seed)
  w = rng.normal(size=(features, 1)).astype(np.float32) / np.sqrt(features)
  y_b = (np.tanh(x @ w) * 2 + 0.1 * rng.normal(size=(rows, 1))).astype(np.float32)
  return x, np.concatenate([y_a, y_b], axis=1)


def running_mean(seed, *, steps=60):
  """Random walks and their running mean at every step (a sequence-to-sequence regression)."""
  x, _ = data.series(seed, steps=steps)
  return x, (np.cumsum(x, axis=1) / np.arange(1, steps + 1)[None, :, None]).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# exploding_gradients


@add('blind_grad_relu_lstm_seq2seq', 'exploding_gradients', 'relu_lstm_seq2seq',
     doors=('fit',), seeds=(0,), steps=100,
     citation='keras-team/keras#13221; AlexanderVNikitin/tsgm#59')
def _(seed, cured=False):
  """Two stacked LSTMs with activation='relu' (return_sequences) mapping random walks to their
  running mean, SGD 0.01 with momentum 0.9 and no clipping: the relu cell state is unbounded and the
  backward pass through 60 steps overflows. keras-team/keras#13221 ("'relu' in LSTM yields
  NaNs": stacked, return_sequences, "NaNs occur within a few batches - the more layers, the
  sooner"); AlexanderVNikitin/tsgm#59 (an LSTM with "relu": "sometimes the loss just explode
  suddenly to very high numbers"; "with linear activation of the ReLU it can explode").
  Cured: clipnorm=1.0. Seed 0 only: with seed 1 the same net happened not to explode in 100
  steps (checked in plain Keras)."""
  x, y = running_mean(seed)
  opt = keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(relu_lstm_seq2seq(seed), opt, 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# learning_rate


@add('blind_lr_vgg_sgd', 'learning_rate', 'vgg_small', doors=('trainer',), steps=300,
     citation='geifmany/cifar-vgg#1; geifmany/cifar-vgg#7')
def _(seed, cured=False):
  """A VGG-style net without normalisation on the 16x16 digits, SGD with momentum 0.9 at 0.5:
  the first updates throw the ReLUs off (dead units), the loss sits at chance (about 2.3) and
  the accuracy at about 0.1.
  geifmany/cifar-vgg#1 ("Loss is NaN and the acc = ~0.10": "I have changed the learning rate to
  be 0.01 and then it works well"); geifmany/cifar-vgg#7 ("loss: nan - acc: 0.0999" every
  epoch; "Change the learning rage go 0.01"). Cured: SGD 0.02, momentum 0.9."""
  opt = keras.optimizers.SGD(0.02 if cured else 0.5, momentum=0.9)
  return cases.Setup(vgg_small(seed), opt, SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


# ---------------------------------------------------------------------------------------------
# initialisation


@add('blind_init_wide_normal_unet', 'initialisation', 'unet_small', doors=('trainer',),
     seeds=(0, 1), steps=100, citation='LeelaChessZero/lczero-training#43; VinceShieh/spark-ffm#12')
def _(seed, cured=False):
  """A small U-Net segmenting the strokes of noisy digits (sigmoid mask, binary cross-entropy)
  whose every kernel starts from RandomNormal(stddev=3.0): the activations grow by tens at each
  layer and the mask logits start in the millions. LeelaChessZero/lczero-training#43 (a
  convolution init "initialising values too large": "the long time that a new net needs to be
  trained before the mse loss drops ... during this period the value head output is always 1");
  VinceShieh/spark-ffm#12 ("Weight Initialisation might be a cause for loss NaN": with the
  initial weights' spread "exp(z) becomes NaN"). Cured: glorot_uniform."""
  x, y = digit_masks(seed)
  init = 'glorot_uniform' if cured else keras.initializers.RandomNormal(stddev=3.0, seed=seed)
  return cases.Setup(unet_small(seed, kernel_initializer=init), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('blind_init_zeros_two_head', 'initialisation', 'two_head', doors=('fit',), steps=150,
     citation='tensorflow/models#1529; BVLC/caffe#2937')
def _(seed, cured=False):
  """A multi-task two-head regression net whose kernels all start at zero
  (kernel_initializer='zeros'): every ReLU is 0, no kernel gets a gradient, only the heads' biases
  move and the predictions stay constant. tensorflow/models#1529 (a `weight_variable` helper
  "initializing weights to zero instead of random", the random init commented out);
  BVLC/caffe#2937 ("The CNN seems to not learn anything at all. Getting all zeroes as output").
  Cured: glorot_uniform."""
  x, y = two_tasks(seed)
  init = 'glorot_uniform' if cured else 'zeros'
  return cases.Setup(two_head(seed, kernel_initializer=init), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# ---------------------------------------------------------------------------------------------
# division_or_log


@add('blind_div_vae_relu_sigma_log', 'division_or_log', 'vae', doors=('trainer', 'fit'),
     steps=150, citation='pkmital/tensorflow_tutorials#23; shekkizh/TensorflowProjects#1')
def _(seed, cured=False):
  """A dense VAE of the digits whose encoder gives sigma through a ReLU ("a standard deviation is
  positive") and whose KL term takes log(sigma^2): a unit the ReLU zeroes is log(0) = -inf, the
  KL is inf. pkmital/tensorflow_tutorials#23 ("VAE costs are nan": an activation that can give
  values "later fed into log"); shekkizh/TensorflowProjects#1 ("Remove relu to allow mu and
  log_var to go negative": "it was a mistake to relu the activations on mu, log var").
  Cured: a linear log-variance head, sigma = exp(log_var / 2)."""
  x, _ = data.digits(size=8, rgb=False)
  x = x.reshape(len(x), 64)
  return cases.Setup(vae_dense(seed, relu_sigma=not cured), keras.optimizers.Adam(2e-3), 'mse',
                     data.stream(x, x, batch=32, seed=seed), 'regression')


@add('blind_div_flat_series_standardize_tcn', 'division_or_log', 'tcn', doors=('fit',),
     seeds=(0, 1), steps=150, citation='WenjieDu/PyPOTS#265; tslearn-team/tslearn#52')
def _(seed, cured=False):
  """A temporal convnet classifying the trend of sensor windows, which standardises each window
  inside the model ((x - mean) / std, no epsilon); 2 % of the windows are flat (a sensor that held
  its value): 0 / 0. WenjieDu/PyPOTS#265 ("Current non-stationary normalization may result in
  NaN values ... We need to add a small number to avoid dividing by 0"); tslearn-team/tslearn#52
  (`TimeSeriesScalerMeanVariance` on a series of zeros: "invalid value encountered in
  true_divide", an all-NaN row). Cured: std = sqrt(var + 1e-5)."""
  x, y = trend_series(seed, flat=0.02)
  x_eval, y_eval = trend_series(seed)  # The same windows, none flat: the "did it train" batches.
  return cases.Setup(tcn(seed, standardize=1e-5 if cured else 0.0), keras.optimizers.Adam(2e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit',
                     eval_data=data.stream(x_eval, y_eval, batch=32, seed=seed))


# ---------------------------------------------------------------------------------------------
# softmax_overflow


@add('blind_exp_naive_attention_patch_transformer', 'softmax_overflow', 'patch_transformer',
     doors=('trainer',), steps=150,
     citation='mila-iqia/blocks#727; NVIDIA/FasterTransformer#43')
def _(seed, cured=False):
  """A ViT-like patch transformer on the digits in raw sensor counts (0-32, not rescaled), its attention written by
  hand: unscaled q.k scores and exp(s) / sum(exp(s)) without subtracting the maximum: the scores
  reach the hundreds and exp overflows (inf / inf). mila-iqia/blocks#727 ("Stabilize attention
  energies": "enough energies to make exp overflow ... resulting NaN propagation");
  NVIDIA/FasterTransformer#43 (NaN from a transformer layer: "the softmax input is not protected
  (substract the max value)"). Cured: tf.nn.softmax (max subtracted), the same unscaled scores."""
  x, y = data.digits(size=16, rgb=False, scale=32.0)
  return cases.Setup(patch_transformer(seed, naive=not cured, scaled=False),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# ---------------------------------------------------------------------------------------------
# precision


@add('blind_fp16_rmsnorm_epsilon_patch_transformer', 'precision', 'patch_transformer',
     doors=('trainer', 'fit'), steps=150, precision=MIXED,
     citation='pytorch/pytorch#41527; deepspeedai/DeepSpeed#581; tensorflow/tensorflow#24979')
def _(seed, cured=False):
  """A ViT-like patch transformer under mixed_float16 whose patch tokens go through an RMSNorm
  written by hand with epsilon 1e-10, computed in float16: 1e-10 is 0 in float16, and a blank
  patch (the digits' empty corners; a patch embedding without bias) is 0 / sqrt(0) = NaN.
  pytorch/pytorch#41527 ("layer_norm returns nan for fp16 all 0 tensor", eps=1e-12);
  deepspeedai/DeepSpeed#581 ("after converting to float16 it would become 0 and the inverse
  square root ... would lead to NaNs. This causes issues when padding with zeros");
  tensorflow/tensorflow#24979 ("The original epsilon value (1e-12) is too small for float16").
  Cured: epsilon 1e-3 (what tensorflow/tensorflow#24979 chose for float16)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(patch_transformer(seed, rms_epsilon=1e-3 if cured else 1e-10),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# ---------------------------------------------------------------------------------------------
# bad_input


@add('blind_input_nan_missing_labels_two_head', 'bad_input', 'two_head', doors=('trainer', 'fit'),
     seeds=(0, 1), steps=150, citation='keras-team/keras#1628; openvax/pepnet#7')
def _(seed, cured=False):
  """A multi-task two-head regression net whose second task's labels are missing (NaN) for 3 % of
  the rows (a table joined from two sources), trained with plain MSE. keras-team/keras#1628
  ("Using outputs with missing values": a multi-task regression with incomplete outputs, "using
  keras' mean squared error objective, the cost comes out as `nan`, as the nans will
  propagate"); openvax/pepnet#7 ("If an output value for a data point is NaN, the corresponding
  output shouldn't impact the loss"). Cured: the rows with a missing label dropped."""
  x, y = two_tasks(seed)
  rng = np.random.RandomState(4000 + seed)
  missing = rng.rand(len(y)) < 0.03
  clean = data.stream(x, y, batch=32, seed=seed)
  if cured:
    return cases.Setup(two_head(seed), keras.optimizers.Adam(1e-3), 'mse',
                       data.stream(x[~missing], y[~missing], batch=32, seed=seed), 'regression',
                       eval_data=clean)
  y_seen = y.copy()
  y_seen[missing, 1] = np.nan
  return cases.Setup(two_head(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y_seen, batch=32, seed=seed), 'regression', eval_data=clean)


@add('blind_input_nodata_fill_unet', 'bad_input', 'unet_small', doors=('fit',), seeds=(0, 1),
     steps=120, citation='LayerManager/layman#667; DynaSlum/satsense#10')
def _(seed, cured=False):
  """A small U-Net segmenting image tiles, 1 % of which carry a block of the GeoTIFF float32
  NoData fill (-3.4028235e38) that the loader did not mask: the first convolution overflows to
  -inf and inf - inf is NaN. LayerManager/layman#667 (a raster with "nodata set to big numbers,
  e.g. ... nodata=3.402823466e+38 ... returns `nan` and `inf`"); DynaSlum/satsense#10 (satellite
  tiles whose "nodata value is about 10e+37", set to 0 to fix it). Cured: the fill replaced by 0
  (masked)."""
  x, y = digit_masks(seed)
  clean = data.stream(x, y, batch=32, seed=seed)
  if cured:
    return cases.Setup(unet_small(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                       clean, 'binary_prob')
  rng = np.random.RandomState(5000 + seed)
  tiles = rng.choice(len(x), int(0.01 * len(x)), replace=False)
  x_seen = x.copy()
  x_seen[tiles, :4, :4] = -3.4028235e38
  return cases.Setup(unet_small(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x_seen, y, batch=32, seed=seed), 'binary_prob',
                     eval_data=clean)


# ---------------------------------------------------------------------------------------------
# transient


@add('blind_transient_flaky_tcn', 'transient', 'tcn', doors=('fit',), steps=150,
     citation='modelscope/FunCodec#47; google-research/l2p#24')
def _(seed, cured=False):
  """A temporal convnet classifying the trend of sensor windows whose first residual block's
  output misfires once (NaN in one element at its 40th training call: about step 36, the "did it
  train" measure's training-mode pass counting too), then is fine (a Conv1d kernel that misfires
  once). modelscope/FunCodec#47 ("Model sometimes stops training due to nan
  inputs ... nan values occurring rarely, in the Conv1d layers"); google-research/l2p#24 ("Loss
  become NaN. Results mismatch between different convolution algorithms": "solved by
  re-installing cudnn"). Cured: no misfire."""
  x, y = trend_series(seed)
  return cases.Setup(tcn(seed, flaky_at=None if cured else 40), keras.optimizers.Adam(2e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


# ---------------------------------------------------------------------------------------------
# loss_output_mismatch


@add('blind_mismatch_one_unit_softmax_textcnn', 'loss_output_mismatch', 'textcnn',
     doors=('trainer', 'fit'), steps=150,
     citation='FluxML/Flux.jl#1546; "Keras binary classification softmax always 1" '
              'https://geek-tips.imtqy.com/articles/557592/index.html')
def _(seed, cured=False):
  """A TextCNN for a binary label with one output unit and a softmax, binary cross-entropy: the
  softmax of one number is always 1.0. FluxML/Flux.jl#1546 ("Softmax stucks the network": a
  one-output softmax, the loss printed identical every epoch); the Q&A page ("if you have only 1
  node output, it will always be 1.0 (100%), so you have close to random prediction"; "changing
  it to ... sigmoid"). The softmax as tf.nn.softmax (Keras 3 reads the logits back from a
  softmax *activation*). Cured: a sigmoid output."""
  x, y = binary_tokens(seed)
  base = textcnn(seed)
  head = keras.layers.Activation('sigmoid') if cured else keras.layers.Lambda(
      lambda t: tf.nn.softmax(t, axis=-1))
  model = keras.Model(base.input, head(base.output), name='textcnn_head')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind_mismatch_relu_head_ce_vgg', 'loss_output_mismatch', 'vgg_small', doors=('fit',),
     steps=150, citation='keras-team/keras#12096; martinwicke/tf-dev-summit-tensorboard-tutorial#3')
def _(seed, cured=False):
  """A VGG-style classifier of the digits whose output layer is Dense(10, activation='relu'),
  trained with sparse categorical cross-entropy (from_logits=False): the ReLU outputs are read as
  probabilities. keras-team/keras#12096 ("Simple CNN not learning at all": a `Dense(2,
  activation='relu')` output with categorical_crossentropy, the same loss and accuracy every
  epoch); martinwicke/tf-dev-summit-tensorboard-tutorial#3 (ReLU after the last fully connected
  layer: "the accuracy could not overcome 65%"; removing it, "over 99%"). Cured: softmax."""
  return cases.Setup(vgg_small(seed, head_activation='softmax' if cured else 'relu'),
                     keras.optimizers.Adam(1e-3), SCE(),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')
