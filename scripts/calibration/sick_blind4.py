"""A fourth blind set of sick scenarios (the 'blind4' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind3.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (a neural-ODE-style residual MLP, a DCGAN
discriminator, a character-level CNN, a mean-variance (Gaussian NLL) regressor, a dense graph
attention network, a Conformer-lite keyword spotter on raw waveforms, a factorization machine, a
1-D U-Net denoiser, an LSTM language model with tied embeddings, a TimeDistributed CNN-LSTM
video model). Each builder takes `cured`: the same run with the thread's remedy (the registry
calls `build(seed)`, the sick run). Each was checked with plain Keras `fit`: the sick run shows
the reported symptom, the cured twin passes runner's "did it train" measure in the same number
of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data

BLIND4 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND4.add` with split='blind4'."""
  return BLIND4.add(name, expected, arch, split='blind4', **fields)


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


def ode_resnet_mlp(seed, *, features=16, width=64, blocks=16, dt=1.0):
  """A neural-ODE-style residual MLP: Dense(width) lift, `blocks` forward-Euler steps
  h <- h + dt * f(h), f = Dense(width, ReLU) -> Dense(width) (He init, no normalisation),
  Dense(1)."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = L.Dense(width)(inputs)
  for _ in range(blocks):
    f = L.Dense(width, kernel_initializer='he_normal')(
        L.Dense(width, activation='relu', kernel_initializer='he_normal')(h))
    h = L.Add()([h, L.Rescaling(dt)(f)]) if dt != 1.0 else L.Add()([h, f])
  return keras.Model(inputs, L.Dense(1)(h), name='ode_resnet_mlp')


def dcgan_discriminator(seed, *, size=16):
  """A DCGAN discriminator: strided Conv2D 32, 64 (4x4, stride 2, LeakyReLU 0.2, dropout 0.3),
  flatten, Dense(1, sigmoid): the probability that the image is real."""
  _seed(seed)
  return keras.Sequential([
      keras.Input((size, size, 1)),
      L.Conv2D(32, 4, strides=2, padding='same'), L.LeakyReLU(0.2), L.Dropout(0.3),
      L.Conv2D(64, 4, strides=2, padding='same'), L.LeakyReLU(0.2), L.Dropout(0.3),
      L.Flatten(), L.Dense(1, activation='sigmoid')], name='dcgan_discriminator')


def char_cnn(seed, *, seq_len=16, vocab=64, classes=8, init=None):
  """A character-level CNN (Zhang et al., small): Embedding(vocab, 16), Conv1D 64 (3, ReLU) x 2,
  global max pooling, Dense 64 (ReLU), Dense(classes) logits; `init`: every kernel and
  embedding initializer (None: Keras's defaults)."""
  _seed(seed)
  k = {} if init is None else dict(kernel_initializer=init)
  e = {} if init is None else dict(embeddings_initializer=init)
  return keras.Sequential([
      keras.Input((seq_len,), dtype='int32'), L.Embedding(vocab, 16, **e),
      L.Conv1D(64, 3, activation='relu', padding='same', **k),
      L.Conv1D(64, 3, activation='relu', padding='same', **k),
      L.GlobalMaxPooling1D(), L.Dense(64, activation='relu', **k), L.Dense(classes, **k)],
                          name='char_cnn')


def mean_variance_net(seed, *, features=4, variance='relu'):
  """A mean-variance network (Nix & Weigend): a shared MLP 64-64 (tanh), a mean head Dense(1)
  and a variance head Dense(1, `variance`) ('relu' as the thread, or 'softplus' + 1e-6): the
  outputs (mean, variance)."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = L.Dense(64, activation='tanh')(L.Dense(64, activation='tanh')(inputs))
  mu = L.Dense(1)(h)
  if variance == 'relu':
    var = L.Dense(1, activation='relu')(h)
  else:
    var = L.Lambda(lambda t: t + 1e-6)(L.Dense(1, activation='softplus')(h))
  return keras.Model(inputs, L.Concatenate()([mu, var]), name='mean_variance_net')


class GraphAttention(L.Layer):
  """A dense graph attention layer (Velickovic et al.), one head: e_ij = LeakyReLU(a1.Wh_i +
  a2.Wh_j), attention over each node's neighbours (the adjacency, self loops included), ELU.
  `stable`: the masked softmax by tf.nn.softmax (the max subtracted); otherwise as the thread
  wrote it, exp(e) * A / sum(exp(e) * A)."""

  def __init__(self, units, stable, **kwargs):
    super().__init__(**kwargs)
    self.units, self.stable = units, stable

  def build(self, shapes):
    self.w = self.add_weight(shape=(shapes[0][-1], self.units), initializer='glorot_uniform',
                             name='w')
    self.a1 = self.add_weight(shape=(self.units, 1), initializer='glorot_uniform', name='a1')
    self.a2 = self.add_weight(shape=(self.units, 1), initializer='glorot_uniform', name='a2')

  def call(self, inputs):
    h, adj = inputs
    wh = tf.matmul(h, self.w)
    e = tf.nn.leaky_relu(tf.matmul(wh, self.a1) + tf.transpose(tf.matmul(wh, self.a2),
                                                                 (0, 2, 1)), 0.2)
    if self.stable:
      att = tf.nn.softmax(tf.where(adj > 0, e, -1e9), axis=-1)
    else:
      num = tf.exp(e) * adj
      att = num / tf.reduce_sum(num, axis=-1, keepdims=True)
    return tf.nn.elu(tf.matmul(att, wh))


def gat_dense(seed, *, nodes=12, features=8, classes=4, stable=False):
  """A graph classifier: two `GraphAttention` layers (32, 32), mean over the nodes,
  Dense(classes) logits; inputs (node features, adjacency)."""
  _seed(seed)
  x = keras.Input((nodes, features))
  adj = keras.Input((nodes, nodes))
  h = GraphAttention(32, stable)([x, adj])
  h = GraphAttention(32, stable)([h, adj])
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model([x, adj], L.Dense(classes)(h), name='gat_dense')


def conformer_lite(seed, *, samples=1024, classes=4, dim=32, float32_frontend=False):
  """A Conformer-lite keyword spotter on raw waveforms behind a learnable filterbank frontend
  (as LEAF / TD-filterbanks): a strided Conv1D filterbank (64 taps, stride 16, no bias), the
  filters' power (square), log(1 + power), LayerNorm (the frontend in float32 if
  `float32_frontend`); one Conformer block (half FFN, 2-head self-attention, a convolution
  module: pointwise GLU, depthwise 7, BN, swish, pointwise; half FFN, each residual), global
  average, Dense(classes) logits in float32."""
  _seed(seed)
  front = dict(dtype='float32') if float32_frontend else {}
  inputs = keras.Input((samples, 1))
  x = L.Conv1D(dim, 64, strides=16, use_bias=False, **front)(inputs)
  x = L.Lambda(lambda t: tf.math.log1p(tf.square(t)), **front)(x)
  x = L.LayerNormalization(**front)(x)

  def ffn(t):
    return L.Dense(dim)(L.Dense(2 * dim, activation='swish')(L.LayerNormalization()(t)))

  x = L.Add()([x, L.Rescaling(0.5)(ffn(x))])
  a = L.LayerNormalization()(x)
  x = L.Add()([x, L.MultiHeadAttention(2, dim // 2)(a, a)])
  c = L.Conv1D(2 * dim, 1)(L.LayerNormalization()(x))
  c = L.Lambda(lambda t: t[..., :dim] * tf.sigmoid(t[..., dim:]))(c)
  c = L.Activation('swish')(L.BatchNormalization()(L.DepthwiseConv1D(7, padding='same')(c)))
  x = L.Add()([x, L.Conv1D(dim, 1)(c)])
  x = L.Add()([x, L.Rescaling(0.5)(ffn(x))])
  x = L.GlobalAveragePooling1D()(L.LayerNormalization()(x))
  return keras.Model(inputs, L.Dense(classes, dtype='float32')(x), name='conformer_lite')


class FMInteraction(L.Layer):
  """The factorization machine's second-order term 0.5 * ((sum_i v_i)^2 - sum_i v_i^2), summed
  over the factors: (batch, fields, k) -> (batch, 1)."""

  def call(self, v):
    s = tf.reduce_sum(v, axis=1)
    return 0.5 * tf.reduce_sum(tf.square(s) - tf.reduce_sum(tf.square(v), axis=1), axis=-1,
                               keepdims=True)


class NumericFactors(L.Layer):
  """A k-factor vector per numeric feature, scaled by the feature's value: (batch, n) ->
  (batch, n, k)."""

  def __init__(self, k, **kwargs):
    super().__init__(**kwargs)
    self.k = k

  def build(self, shape):
    self.v = self.add_weight(shape=(shape[-1], self.k),
                             initializer=keras.initializers.RandomNormal(stddev=0.05), name='v')

  def call(self, x):
    return x[..., None] * self.v[None]


def factorization_machine(seed, *, fields=6, vocab=20, numeric=2, k=8):
  """A factorization machine (Rendle) for click-through: one k-factor embedding and one linear
  weight per categorical value, a factor vector and a weight per numeric feature (scaled by its
  value); bias + linear terms + `FMInteraction`: the click logit. Inputs (global categorical
  ids, numeric features)."""
  _seed(seed)
  cats = keras.Input((fields,), dtype='int32')
  nums = keras.Input((numeric,))
  v_cat = L.Embedding(fields * vocab, k, embeddings_initializer=keras.initializers.RandomNormal(
      stddev=0.05))(cats)
  w_cat = L.Flatten()(L.Embedding(fields * vocab, 1, embeddings_initializer='zeros')(cats))
  v_num = NumericFactors(k)(nums)
  linear = L.Add()([L.Lambda(lambda t: tf.reduce_sum(t, -1, keepdims=True),
                              output_shape=(1,))(w_cat), L.Dense(1)(nums)])
  pair = FMInteraction()(L.Concatenate(axis=1)([v_cat, v_num]))
  return keras.Model([cats, nums], L.Add()([linear, pair]), name='factorization_machine')


class _Counter:
  """A call counter kept out of Keras's tracking (a one-off fault leaves no state behind)."""

  def __init__(self):
    with tf.init_scope():
      self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)


class OneOffNaN(L.Layer):
  """The identity, except at its `at`-th training call, where one activation comes out NaN
  (a flaky kernel or memory fault, once); never again after."""

  def __init__(self, at, **kwargs):
    super().__init__(**kwargs)
    self.at = at
    self.counter = _Counter()

  def call(self, x, training=False):
    if not training or self.at is None:
      return x
    calls = self.counter.calls.assign_add(1)
    spot = tf.reshape(tf.one_hot(3, tf.size(x), dtype=x.dtype), tf.shape(x)) > 0
    hit = tf.logical_and(spot, tf.equal(calls, self.at))
    return tf.where(hit, tf.constant(np.nan, x.dtype), x)


def unet1d(seed, *, samples=256, nan_at=None):
  """A 1-D U-Net denoiser: encoder Conv1D 16, 32 (5, ReLU) with pooling, a bottleneck Conv1D 64,
  decoder upsampling with skip concatenations, Conv1D(1) linear: the clean signal; `nan_at`: a
  `OneOffNaN` after the bottleneck."""
  _seed(seed)
  inputs = keras.Input((samples, 1))
  conv = lambda w: L.Conv1D(w, 5, padding='same', activation='relu')
  e1 = conv(16)(inputs)
  e2 = conv(32)(L.MaxPooling1D()(e1))
  b = conv(64)(L.MaxPooling1D()(e2))
  b = OneOffNaN(nan_at)(b)
  d2 = conv(32)(L.Concatenate()([L.UpSampling1D()(b), e2]))
  d1 = conv(16)(L.Concatenate()([L.UpSampling1D()(d2), e1]))
  return keras.Model(inputs, L.Conv1D(1, 1)(d1), name='unet1d')


class TiedSoftmaxHead(L.Layer):
  """The output projection of a tied-embedding language model: h @ E^T + b (Press & Wolf), the
  logits over the vocabulary."""

  def __init__(self, embedding, **kwargs):
    super().__init__(**kwargs)
    self.embedding = embedding

  def build(self, shape):
    self.b = self.add_weight(shape=(self.embedding.input_dim,), initializer='zeros', name='b')

  def call(self, h):
    return tf.matmul(h, self.embedding.embeddings, transpose_b=True) + self.b


def tied_lstm_lm(seed, *, context=12, vocab=32, dim=32):
  """An LSTM language model with tied input/output embeddings: Embedding(vocab, dim), LSTM(dim),
  `TiedSoftmaxHead`: the next token's logits."""
  _seed(seed)
  inputs = keras.Input((context,), dtype='int32')
  emb = L.Embedding(vocab, dim)
  h = L.LSTM(dim)(emb(inputs))
  return keras.Model(inputs, TiedSoftmaxHead(emb)(h), name='tied_lstm_lm')


def cnn_lstm_video(seed, *, frames=8, size=12):
  """A TimeDistributed CNN-LSTM video model: per frame Conv2D 16, 32 (3x3, ReLU, a pool between),
  global max pooling, then LSTM(32) over the frames, Dense(1): a per-clip regression."""
  _seed(seed)
  frame = keras.Sequential([
      keras.Input((size, size, 1)), L.Conv2D(16, 3, padding='same', activation='relu'),
      L.MaxPooling2D(), L.Conv2D(32, 3, padding='same', activation='relu'),
      L.GlobalMaxPooling2D()], name='frame_cnn')
  return keras.Sequential([keras.Input((frames, size, size, 1)), L.TimeDistributed(frame),
                           L.LSTM(32), L.Dense(1)], name='cnn_lstm_video')


# --- Data of this file. -----------------------------------------------------------------------


def real_or_fake(seed, *, rows=1797, size=16):
  """The digits (16x16) scaled to [-1, 1] as 'real' (1) and the same images with their pixels
  shuffled as 'fake' (0): a discriminator's task."""
  x, _ = data.digits(size=size, rgb=False)
  rng = np.random.RandomState(21000 + seed)
  real = x * 2.0 - 1.0
  flat = real.reshape(len(real), -1).copy()
  for row in flat:
    rng.shuffle(row)
  fake = flat.reshape(real.shape)
  xs = np.concatenate([real, fake]).astype(np.float32)
  ys = np.concatenate([np.ones(len(real)), np.zeros(len(fake))])[:, None].astype(np.float32)
  return xs, ys


def heteroscedastic(seed, *, rows=4096, features=4):
  """y = 2 sin(x0) + x1 + sigma(x) eps with sigma = 0.1 + 0.8 |x2|: (x, [y, sigma^2])."""
  rng = np.random.RandomState(22000 + seed)
  x = rng.uniform(-2, 2, (rows, features))
  sigma = 0.1 + 0.8 * np.abs(x[:, 2])
  y = 2 * np.sin(x[:, 0]) + x[:, 1] + sigma * rng.normal(size=rows)
  return x.astype(np.float32), np.stack([y, sigma ** 2], 1).astype(np.float32)


def gaussian_nll(y, out):
  """The Gaussian negative log-likelihood 0.5 log(var) + 0.5 (y - mu)^2 / var, as the thread
  writes it (no floor on the variance); out = (mu, var), y's first column the target."""
  out = tf.cast(out, tf.float32)
  mu, var = out[:, :1], out[:, 1:2]
  return tf.reduce_mean(0.5 * tf.math.log(var) + 0.5 * tf.square(y[:, :1] - mu) / var)


def sensor_graphs(seed, *, rows=2048, nodes=12, features=8, classes=4, level=300.0):
  """Random graphs (edge probability 0.3, self loops) of sensor nodes whose raw readings (about
  `level` +- 60, not standardised) come from one of `classes` regimes: ((readings, adjacency),
  regime)."""
  rng = np.random.RandomState(23000 + seed)
  centres = rng.normal(size=(classes, features))
  y = rng.randint(0, classes, rows).astype(np.int32)
  x = level + 60.0 * centres[y][:, None, :] + 20.0 * rng.normal(size=(rows, nodes, features))
  adj = (rng.rand(rows, nodes, nodes) < 0.3).astype(np.float32)
  adj = np.maximum(adj, adj.transpose(0, 2, 1))
  adj[:, np.arange(nodes), np.arange(nodes)] = 1.0
  return (x.astype(np.float32), adj), y


def raw_tones(seed, *, rows=1536, samples=1024, classes=4):
  """16-bit PCM clips (int16 range, as read from a WAV file, not scaled) of a tone in one of
  `classes` frequency bands, amplitude 8000-30000, plus noise: (clips, band)."""
  rng = np.random.RandomState(24000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  freq = (0.01 + 0.03 * y + 0.01 * rng.rand(rows))[:, None]
  t = np.arange(samples)[None]
  amp = rng.uniform(8000, 30000, (rows, 1))
  x = amp * np.sin(2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi, (rows, 1)))
  x = np.clip(x + 1500 * rng.normal(size=x.shape), -32768, 32767)
  return np.round(x)[..., None].astype(np.float32), y


def click_log(seed, *, rows=4096, fields=6, vocab=20, missing=0.0):
  """Click-through logs: 6 categorical fields (20 values each) and 2 standardised numeric
  features, the click from a second-order model of them; a fraction `missing` of the second
  numeric feature is missing (NaN, as pandas reads an empty CSV cell). Returns (the categorical
  values as global ids, field i's value v as i * vocab + v; nums, y, missing mask)."""
  rng = np.random.RandomState(25000 + seed)
  cats = rng.randint(0, vocab, (rows, fields)).astype(np.int32)
  nums = rng.normal(size=(rows, 2)).astype(np.float32)
  v = rng.normal(size=(fields, vocab, 3)) * 0.6
  vecs = v[np.arange(fields)[None], cats]
  s = vecs.sum(1)
  logit = 0.5 * ((s ** 2).sum(-1) - (vecs ** 2).sum((1, 2))) + 1.2 * nums[:, 0] - nums[:, 1]
  y = (logit + 0.3 * rng.normal(size=rows) > np.median(logit)).astype(np.float32)[:, None]
  gone = rng.rand(rows) < missing
  nums[gone, 1] = np.nan
  return cats + (np.arange(fields) * vocab).astype(np.int32), nums, y, gone


def noisy_signals(seed, *, rows=1024, samples=256):
  """Sums of three sinusoids (random frequencies, phases) plus noise 0.3: (noisy, clean)."""
  rng = np.random.RandomState(26000 + seed)
  t = np.arange(samples)[None]
  clean = sum(rng.uniform(0.3, 1.0, (rows, 1)) *
              np.sin(2 * np.pi * rng.uniform(0.005, 0.05, (rows, 1)) * t +
                     rng.uniform(0, 2 * np.pi, (rows, 1))) for _ in range(3))
  noisy = clean + 0.3 * rng.normal(size=clean.shape)
  return noisy[..., None].astype(np.float32), clean[..., None].astype(np.float32)


def markov_text(seed, *, rows=4096, context=12, vocab=32):
  """Token sequences of a sparse Markov chain (the next token (5 t + 3) mod vocab with
  probability 0.8, else uniform): (context, next token)."""
  rng = np.random.RandomState(27000 + seed)
  seq = np.zeros((rows, context + 1), np.int32)
  seq[:, 0] = rng.randint(0, vocab, rows)
  for t in range(1, context + 1):
    follow = (5 * seq[:, t - 1] + 3) % vocab
    seq[:, t] = np.where(rng.rand(rows) < 0.8, follow, rng.randint(0, vocab, rows))
  return seq[:, :-1], seq[:, -1]


def moving_digits(seed, *, rows=2048, frames=8, size=12, unlabelled=0.0):
  """Clips of an 8x8 digit moving across a 12x12 frame at a speed of 0-0.5 pixel per frame
  (bilinear shifts), noise 0.05, labelled with the speed; a fraction `unlabelled` of the
  clips has no speed annotation (NaN, a blank cell in the labels file). Returns (clips, speed,
  unlabelled mask)."""
  x, _ = data.digits(size=8, rgb=False)
  rng = np.random.RandomState(28000 + seed)
  speed = rng.uniform(0.0, 0.5, rows)
  clips = np.zeros((rows, frames, size, size, 1), np.float32)
  for r in range(rows):
    im = x[rng.randint(len(x))][..., 0]
    for t in range(frames):
      pos = speed[r] * t
      k, f = int(pos), pos - int(pos)
      clips[r, t, 2:10, k:k + 8, 0] += (1 - f) * im
      clips[r, t, 2:10, k + 1:k + 9, 0] += f * im
  clips += 0.05 * rng.normal(size=clips.shape).astype(np.float32)
  y = speed[:, None].astype(np.float32)
  blank = rng.rand(rows) < unlabelled
  y[blank] = np.nan
  return clips, y, blank


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind4_grad_ode_resnet_no_norm', 'exploding_gradients', 'ode_resnet_mlp',
     doors=('trainer', 'fit'), steps=150,
     citation='huangleiBuaa/ONI#1; twtygqyy/pytorch-SRDenseNet#2; keras-team/keras#5127')
def _(seed, cured=False):
  """A neural-ODE-style residual MLP (16 forward-Euler blocks with step 1, He init, no
  normalisation) regressing a tabular target with SGD + momentum: each residual branch adds its
  own variance, the output and gradients scale with 2^16, the first updates overshoot and the
  loss is inf then NaN within a few steps. huangleiBuaa/ONI#1 (a ResNet without BatchNorm: "the
  training loss always goes to NaN after a few iterations"; scale the residual branches down);
  twtygqyy/pytorch-SRDenseNet#2 ("when we use very deep network, the output often be very big,
  that make loss nan"; residual blocks and gradient clipping); keras-team/keras#5127 (NaN
  "when i don't use clipnorm": "the gradient gets really really large"). Cured: the Euler step
  1/16 (the residual branches scaled) and clipnorm=1."""
  x, y = data.tabular(seed)
  return cases.Setup(ode_resnet_mlp(seed, dt=1.0 / 16 if cured else 1.0),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind4_lr_dcgan_discriminator_sgd', 'learning_rate', 'dcgan_discriminator',
     doors=('fit',), steps=150,
     citation='facebookresearch/grid-feats-vqa#26; guillaumegenthial/sequence_tagging#47; '
              'tdeboissiere/DeepLearningImplementations#11')
def _(seed, cured=False):
  """A DCGAN discriminator told real digits from pixel-shuffled fakes, trained with SGD +
  momentum 0.9 at 0.5 (a rate fifty times the one that trains it): the LeakyReLU features and
  the weights grow each step, within a few dozen steps they overflow and the loss is NaN.
  facebookresearch/grid-feats-vqa#26 ("the learning rate of 0.02 ... produces infinite/nan loss
  values"; "works after decreasing the learning rate to 0.002"); guillaumegenthial/
  sequence_tagging#47 ("lr = 0.001 ... no problem; but lr = 0.01 or 0.1", the train loss nan);
  tdeboissiere/DeepLearningImplementations#11 (a Keras GAN's discriminator: "decreasing the
  discriminator learning rate is enough"). Cured: SGD 0.01, momentum 0.9."""
  x, y = real_or_fake(seed)
  return cases.Setup(dcgan_discriminator(seed),
                     keras.optimizers.SGD(0.01 if cured else 0.5, momentum=0.9),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed), 'binary_prob')


# --- initialisation --------------------------------------------------------------------------


@add('blind4_init_zeros_char_cnn', 'initialisation', 'char_cnn', doors=('trainer',),
     steps=150, citation='keras-team/keras#12598; wagonhelm/NaNmnist#2; fizyr/keras-retinanet#712')
def _(seed, cured=False):
  """A character-level CNN text classifier whose every kernel and the embedding are initialised
  to zeros ('zeros' initializers, "the best guess"): every activation is 0, the gradients of all
  but the head's bias are exactly 0, nothing breaks the symmetry and the loss stays at the
  class prior's entropy, the accuracy at chance. keras-team/keras#12598 (kernel_initializer=
  'zeros' on Dense layers); wagonhelm/NaNmnist#2 ("initializing weights as zeroes ... is highly
  improper": "all the same gradients ... no source of asymmetry"); fizyr/keras-retinanet#712
  (zero-initialised conv kernels). Cured: Keras's default (random) initializers."""
  x, y = data.tokens(seed)
  return cases.Setup(char_cnn(seed, init=None if cured else 'zeros'), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind4_div_gaussian_nll_relu_variance', 'division_or_log', 'mean_variance_net',
     doors=('trainer', 'fit'), steps=150,
     citation='motokimura/PyTorch_Gaussian_YOLOv3#23; keras-team/keras#12423')
def _(seed, cured=False):
  """A mean-variance network trained with the Gaussian negative log-likelihood, its variance
  head a ReLU: wherever the head outputs 0 the loss takes log(0) and divides by 0 (-inf + inf),
  the loss is NaN from the first batches. motokimura/PyTorch_Gaussian_YOLOv3#23 ("Got NaN loss
  when use the Gaussian idea to regression"; gradient clipping and a smaller rate only delayed
  it; adding a constant to the predicted variance made it stable); keras-team/keras#12423 (a
  hand-written -log N(y; mu, sigma) loss in Keras). Cured: the variance softplus + 1e-6."""
  x, y = heteroscedastic(seed)
  return cases.Setup(mean_variance_net(seed, variance='softplus' if cured else 'relu'),
                     keras.optimizers.Adam(2e-3), gaussian_nll,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind4_exp_gat_unstable_masked_softmax', 'softmax_overflow', 'gat_dense',
     doors=('trainer', 'fit'), steps=150,
     citation='pyg-team/pytorch_geometric#53; JuliaGraphs/GraphNeuralNetworks.jl#246; '
              'danielegrattarola/keras-gat#23')
def _(seed, cured=False):
  """A dense graph attention network classifying graphs of sensor nodes from their raw readings
  (about 300), its masked softmax over each node's neighbours written as exp(e) * A / sum(exp(e)
  * A): the attention logits reach the hundreds (either sign), exp overflows float32 to inf or
  underflows to 0 over a whole neighbourhood, inf / inf or 0 / 0 is NaN and the loss NaN.
  pyg-team/pytorch_geometric#53 ("scatter softmax output 'nan'": GATConv "doing exp straightly
  cause overflow"; fixed by subtracting the max); JuliaGraphs/GraphNeuralNetworks.jl#246 (GAT's
  softmax overflows "already with input values of ~100"); danielegrattarola/keras-gat#23 (a
  Keras GAT whose loss "unexpectedly goes to nan", the masking around its
  softmax). Cured: the masked softmax by tf.nn.softmax (max subtracted)."""
  x, y = sensor_graphs(seed)
  return cases.Setup(gat_dense(seed, stable=cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind4_fp16_conformer_filterbank_power', 'precision', 'conformer_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='qiuqiangkong/audioset_tagging_cnn#17; '
              'LIHANG-HONG/birdclef2023-2nd-place-solution#2; huggingface/transformers#5651')
def _(seed, cured=False):
  """A Conformer-lite keyword spotter on 16-bit PCM clips (int16 range, as read from WAV files)
  whose learnable filterbank frontend takes each filter's power before the log, under
  mixed_float16: the filter outputs reach the thousands, their squares pass float16's 65504, the
  log-power is inf, the LayerNorm after it gives inf - inf = NaN and the loss is NaN from the
  first batch; in float32 (powers about 1e8) it trains. qiuqiangkong/audioset_tagging_cnn#17 (the
  LogmelFilterBank layer under mixed precision: "nan values in the forward output of this layer
  which makes nan value in the loss"; none without mixed precision);
  LIHANG-HONG/birdclef2023-2nd-place-solution#2 (MelSpectrogram "produces some `inf` values" in
  float16); huggingface/transformers#5651 (a value "over the maximum value of 65504 in fp16"
  gives inf, then the NaN loss; fine in fp32). Cured: the frontend (filterbank, power, log,
  LayerNorm) in float32."""
  x, y = raw_tones(seed)
  return cases.Setup(conformer_lite(seed, float32_frontend=cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind4_input_missing_numeric_fm', 'bad_input', 'factorization_machine', doors=('fit',),
     seeds=(0, 1), steps=150,
     citation='radiasoft/sirepo#2983; Nixtla/neuralforecast#186; danielegrattarola/keras-gat#14')
def _(seed, cured=False):
  """A factorization machine for click-through trained on logs loaded from CSV where 1 % of one
  numeric column is empty (NaN): the first batch holding one has a NaN logit, NaN loss and NaN
  gradients, the embeddings turn NaN and the loss stays NaN. radiasoft/sirepo#2983 ("Training a
  dataset which contains missing values causes the neural network to fail without an error",
  the loss all NaN); Nixtla/neuralforecast#186 (missing values: "the loss becomes nan during
  training but it is hard to notice that the problem is in the data"); danielegrattarola/
  keras-gat#14 (NaN loss from NaN features; X[np.isnan(X)] = 0 fixed it). Cured: the missing
  values filled with 0 (the column mean)."""
  cats, nums, y, gone = click_log(seed, missing=0.01)
  if cured:
    nums = np.nan_to_num(nums)
  model = factorization_machine(seed)
  ok = ~gone
  return cases.Setup(model, keras.optimizers.Adam(1e-2), BCE(from_logits=True),
                     data.stream((cats, nums), y, batch=32, seed=seed), 'binary_logit',
                     eval_data=data.stream((cats[ok], nums[ok]), y[ok], batch=32, seed=seed))


@add('blind4_input_unlabelled_clips_cnn_lstm', 'bad_input', 'cnn_lstm_video',
     doors=('trainer', 'fit'), steps=150,
     citation='Nixtla/neuralforecast#186; keras-team/keras#1628; WenjieDu/PyPOTS#232')
def _(seed, cured=False):
  """A TimeDistributed CNN-LSTM regressing the speed of a moving digit from 8-frame clips, its
  labels read from an annotation file where 0.5 % of the clips have no speed (NaN): the first
  batch holding one has a NaN MSE and NaN gradients, the weights turn NaN and the loss stays NaN.
  Nixtla/neuralforecast#186 (missing values in the target: "The loss becomes `nan` during
  training but it is hard to notice that the problem is in the data"); keras-team/keras#1628
  (outputs with missing values need masking in the loss); WenjieDu/PyPOTS#232 (targets holding
  missing data "will cause NaN loss"). Cured: the unlabelled clips dropped."""
  clips, y, blank = moving_digits(seed, unlabelled=0.005)
  keep = ~blank
  clean = data.stream(clips[keep], y[keep], batch=32, seed=seed)
  if cured:
    clips, y = clips[keep], y[keep]
  return cases.Setup(cnn_lstm_video(seed), keras.optimizers.Adam(2e-3), 'mse',
                     data.stream(clips, y, batch=32, seed=seed), 'regression', eval_data=clean)


# --- transient -------------------------------------------------------------------------------


@add('blind4_transient_one_nan_unet1d', 'transient', 'unet1d', doors=('trainer', 'fit'),
     steps=150, citation='greatlog/DAN#8; karpathy/nanoGPT#227; yxlijun/DSFD.pytorch#17')
def _(seed, cured=False):
  """A 1-D U-Net denoising synthetic signals that trains normally until one activation comes
  out NaN at step 60 (a one-off fault, never repeated): that step's NaN gradients poison the
  weights through Adam and the loss is NaN for the rest of the run, though the data and the
  model are fine and the same run from the last good state goes on. greatlog/DAN#8 (the loss is
  NaN "at 22800 iterations (Second time: 29200) suddenly"; "resume from the last normal training
  state"); karpathy/nanoGPT#227 ("Skip step if loss is nan"); yxlijun/DSFD.pytorch#17 ("It's
  easy to get nan, start another train after getting nan"). Cured: no misfire."""
  x, clean = noisy_signals(seed)
  return cases.Setup(unet1d(seed, nan_at=None if cured else 60), keras.optimizers.Adam(2e-3),
                     'mse', data.stream(x, clean, batch=32, seed=seed), 'regression')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind4_mismatch_tied_lm_logits_as_probs', 'loss_output_mismatch', 'tied_lstm_lm',
     doors=('trainer',), steps=200, citation='xiph/LPCNet#97; keras-team/keras#15271')
def _(seed, cured=False):
  """An LSTM language model with tied embeddings (logits h @ E^T) trained with
  SparseCategoricalCrossentropy() left at from_logits=False: the logits are taken for
  probabilities, clipped to [1e-7, 1 - 1e-7] and logged, every logit outside that window gets no
  gradient and the loss stalls far above what the chain allows. xiph/LPCNet#97 ("the output of
  your model is logits, you may need to set "from_logits=True" ... or the code will clip the
  value and process it with log(*)"); keras-team/keras#15271 (from_logits must match the last
  layer's activation). Cured: from_logits=True."""
  x, y = markov_text(seed)
  return cases.Setup(tied_lstm_lm(seed), keras.optimizers.Adam(3e-3), SCE(from_logits=cured),
                     data.stream(x, y, batch=32, seed=seed), 'classes')
