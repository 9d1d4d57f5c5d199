"""A fourteenth blind set of sick scenarios (the 'blind14' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind13.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a Clockwork RNN, an FNet-lite, a PoolFormer-lite,
an ESPCN-lite super-resolution net, a DLRM-lite, a CLIP-lite dual encoder, an HRNet-lite, an
xDeepFM-lite with a CIN, a SincNet-lite, an APPNP graph classifier). Each builder takes `cured`:
the same run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was
checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0
and 1), the cured twin passes runner's "did it train" measure in the same number of steps (seed
0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND14 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND14.add` with split='blind14'."""
  return BLIND14.add(name, expected, arch, split='blind14', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def walk_means(seed, *, rows=2048, steps=24):
  """A sequence regression over long inputs: random walks (steps of N(0, 0.3)) and, the target,
  the walk's mean. (x (rows, steps, 1), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = np.cumsum(0.3 * rng.randn(rows, steps, 1), axis=1)
  return x.astype(np.float32), x.mean(axis=1).astype(np.float32)


class ClockworkRNN(L.Layer):
  """A Clockwork RNN (Koutnik et al., 2014): the hidden state in `len(periods)` modules of
  `module` units, module i updated only at the steps t with t % periods[i] == 0 (kept as it was
  otherwise), each module fed by itself and the slower modules (a block upper-triangular
  recurrent matrix, started at `rec_init`), `activation` (ReLU here, as the user chose); returns
  the last state."""

  def __init__(self, module=8, periods=(1, 2, 4, 8), activation='relu', rec_init='identity',
               **kwargs):
    super().__init__(**kwargs)
    self.module, self.periods = module, tuple(periods)
    self.activation = keras.activations.get(activation)
    self.rec_init = rec_init

  def build(self, shape):
    n, units = len(self.periods), self.module * len(self.periods)
    self.w_in = self.add_weight(shape=(shape[-1], units), initializer='glorot_uniform',
                                name='w_in')
    self.w_rec = self.add_weight(shape=(units, units), initializer=self.rec_init, name='w_rec')
    self.bias = self.add_weight(shape=(units,), initializer='zeros', name='bias')
    block = np.triu(np.ones((n, n), np.float32))  # From module j (row) into module i: j >= i.
    self.rec_mask = np.kron(block.T, np.ones((self.module, self.module), np.float32)).T
    self.units = units

  def call(self, x):
    h = tf.zeros((tf.shape(x)[0], self.units), x.dtype)
    w_rec = self.w_rec * self.rec_mask
    for t in range(x.shape[1]):
      active = np.repeat([t % p == 0 for p in self.periods], self.module)
      new = self.activation(tf.matmul(x[:, t], self.w_in) + tf.matmul(h, w_rec) + self.bias)
      h = tf.where(active[None, :], new, h)
    return h


def clockwork_rnn(seed, *, steps=24):
  """A Clockwork-RNN regressor: `ClockworkRNN` (four modules of 8 units, periods 1, 2, 4, 8,
  ReLU) over the sequence, Dense(1) on its last state."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  return keras.Model(inputs, L.Dense(1)(ClockworkRNN()(inputs)), name='clockwork_rnn')


def topic_tokens(seed, *, rows=4096, length=32, vocab=64, topics=4):
  """Topic classification of token sequences: each of `topics` topics owns 8 token ids (after
  the 32 filler ids); a sequence is filler with 6 to 10 tokens of its topic and 2 to 5 of each
  other one; the label its topic. (ids (rows, length) int32, labels)."""
  rng = np.random.RandomState(seed)
  x = rng.randint(1, 32, size=(rows, length))
  y = rng.randint(0, topics, size=rows)
  for r in range(rows):
    slots = rng.permutation(length)
    used = 0
    for t in range(topics):
      k = rng.randint(6, 11) if t == y[r] else rng.randint(2, 6)
      x[r, slots[used:used + k]] = 32 + 8 * t + rng.randint(0, 8, size=k)
      used += k
  return x.astype(np.int32), y.astype(np.int32)


class FourierMix(L.Layer):
  """FNet's token mixing (Lee-Thorp et al., 2022): the real part of the 2-D discrete Fourier
  transform over the sequence and hidden dimensions (no parameters)."""

  def call(self, x):
    return tf.math.real(tf.signal.fft2d(tf.cast(x, tf.complex64)))


def fnet_lite(seed, *, length=32, vocab=64, dim=64, classes=4):
  """An FNet-lite encoder: token and position embeddings, two blocks of Fourier mixing and a GELU
  feed-forward (x2), each residual and post-LayerNorm, global average, Dense(classes): the
  logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = L.Embedding(vocab, dim)(ids) + L.Embedding(length, dim)(tf.range(length))[None]
  for _ in range(2):
    h = L.LayerNormalization()(L.Add()([h, FourierMix()(h)]))
    f = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h))
    h = L.LayerNormalization()(L.Add()([h, f]))
  return keras.Model(ids, L.Dense(classes)(L.GlobalAveragePooling1D()(h)), name='fnet_lite')


def poolformer_block(h, dim):
  """A PoolFormer block (Yu et al., 2022): GroupNorm(1), 3x3 average pooling minus its input as
  the token mixer, residual; GroupNorm(1), a 1x1-conv GELU MLP (x4), residual."""
  n = L.GroupNormalization(groups=1)(h)
  h = L.Add()([h, L.Subtract()([L.AveragePooling2D(3, 1, padding='same')(n), n])])
  m = L.Conv2D(4 * dim, 1, activation='gelu')(L.GroupNormalization(groups=1)(h))
  return L.Add()([h, L.Conv2D(dim, 1)(m)])


def poolformer_lite(seed, *, size=16, classes=10):
  """A PoolFormer-lite (a MetaFormer with pooling as its token mixer): a strided Conv 3x3 (32)
  stem to 8x8, two `poolformer_block`s, a strided Conv 3x3 (64) to 4x4, two more, GroupNorm,
  global average, Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(32, 3, strides=2, padding='same')(inputs)
  for dim in (32, 64):
    if dim == 64:
      h = L.Conv2D(64, 3, strides=2, padding='same')(h)
    for _ in range(2):
      h = poolformer_block(h, dim)
  h = L.GlobalAveragePooling2D()(L.GroupNormalization(groups=1)(h))
  return keras.Model(inputs, L.Dense(classes)(h), name='poolformer_lite')


def low_res_digits():
  """Super-resolution in miniature: the digits at 8x8 (their native size) as the input, the same
  digits upsampled and lightly blurred to 16x16 as the target. (x (n, 8, 8, 1), y (n, 16, 16,
  1))."""
  hi, _ = data.digits(size=16, rgb=False)
  k = np.array([0.25, 0.5, 0.25], np.float32)
  pad = np.pad(hi[..., 0], ((0, 0), (1, 1), (1, 1)), mode='edge')
  rows = k[0] * pad[:, :-2] + k[1] * pad[:, 1:-1] + k[2] * pad[:, 2:]
  hi = (k[0] * rows[:, :, :-2] + k[1] * rows[:, :, 1:-1] + k[2] * rows[:, :, 2:])[..., None]
  lo = hi.reshape(-1, 8, 2, 8, 2, 1).mean(axis=(2, 4))
  return lo.astype(np.float32), hi.astype(np.float32)


def espcn_lite(seed, *, kernel_initializer='glorot_uniform', scale=2):
  """ESPCN (Shi et al., 2016) in miniature: Conv 5x5 (64) + tanh, Conv 3x3 (32) + tanh (the
  paper's activations), a linear Conv 3x3 (32), Conv 3x3 (scale^2), the sub-pixel shuffle
  (depth_to_space) to the high-resolution image; every kernel from `kernel_initializer`."""
  _seed(seed)
  inputs = keras.Input((8, 8, 1))
  conv = lambda f, k, act=None: L.Conv2D(f, k, padding='same', activation=act,
                                         kernel_initializer=kernel_initializer)
  h = conv(32, 3)(conv(32, 3, 'tanh')(conv(64, 5, 'tanh')(inputs)))
  h = conv(scale ** 2, 3)(h)
  out = L.Lambda(lambda t: tf.nn.depth_to_space(t, scale))(h)
  return keras.Model(inputs, out, name='espcn_lite')


def ad_clicks(seed, *, rows=4096, zero_counts=0):
  """Click-through prediction in miniature (Criteo-style): four integer count features (the
  impressions, views, ... of the ad and the user: 1 + Poisson of a log-normal rate), three
  categorical ones (40, 20 and 10 values); the click drawn from a logistic of the log-counts and
  the categories' effects. `zero_counts` rows get a count of 0 (a new ad with no impressions
  yet). (((counts (rows, 4), categories (rows, 3) int32), clicks (rows, 1))."""
  rng = np.random.RandomState(seed)
  counts = 1 + rng.poisson(np.exp(rng.randn(rows, 4) + 1.5))
  cats = np.stack([rng.randint(0, v, size=rows) for v in (40, 20, 10)], axis=1)
  effects = [rng.randn(v) for v in (40, 20, 10)]
  z = (np.log1p(counts) - 2.0) @ np.array([1.0, -0.8, 0.6, 0.0]) + sum(
      e[cats[:, i]] for i, e in enumerate(effects))
  y = (rng.rand(rows) < 1 / (1 + np.exp(-1.5 * z))).astype(np.float32)[:, None]
  counts = counts.astype(np.float32)
  counts[rng.choice(rows, zero_counts, replace=False), rng.randint(0, 4, size=zero_counts)] = 0
  return (counts, cats.astype(np.int32)), y


class CountLog(L.Layer):
  """The in-model transform of the raw counts: log(x) as the user wrote it, or, `plus_one`,
  DLRM's log(x + 1)."""

  def __init__(self, plus_one=False, **kwargs):
    super().__init__(**kwargs)
    self.plus_one = plus_one

  def call(self, x):
    return tf.math.log1p(x) if self.plus_one else tf.math.log(x)


def dlrm_lite(seed, *, plus_one=False, dim=8, vocab=(40, 20, 10)):
  """A DLRM-lite (Naumov et al., 2019): the counts through `CountLog(plus_one)` and a bottom MLP
  (16, dim), an embedding (dim) per categorical feature, the pairwise dot products of the four
  vectors with the bottom output, a top MLP (32, 16), Dense(1) + sigmoid: the click
  probability."""
  _seed(seed)
  counts, cats = keras.Input((4,)), keras.Input((3,), dtype='int32')
  bottom = L.Dense(dim, activation='relu')(L.Dense(16, activation='relu')(
      CountLog(plus_one)(counts)))
  vecs = [bottom] + [L.Embedding(v, dim)(cats[:, i]) for i, v in enumerate(vocab)]
  stack = keras.ops.stack(vecs, axis=1)
  dots = keras.ops.matmul(stack, keras.ops.transpose(stack, (0, 2, 1)))
  iu = np.triu_indices(len(vecs), k=1)
  pairs = keras.ops.take(keras.ops.reshape(dots, (-1, len(vecs) ** 2)), iu[0] * len(vecs) + iu[1],
                         axis=1)
  h = L.Dense(16, activation='relu')(L.Dense(32, activation='relu')(
      L.Concatenate()([bottom, pairs])))
  return keras.Model([counts, cats], L.Dense(1, activation='sigmoid')(h), name='dlrm_lite')


PROMPTS = np.array([[1, 2, 3, 4, 5 + k] for k in range(10)], np.int32)  # 'a photo of digit k'.


class ClipLite(keras.Model):
  """A CLIP-lite dual encoder used as a zero-shot-style classifier (as CLIP fine-tuning against
  the class prompts does): an image tower (Conv 3x3 (32) + ReLU + 2x2 max-pool, Conv 3x3 (64)
  + ReLU, global average, Dense(dim)), a text tower over the ten class prompts (token embeddings
  summed, Dense(dim)), the logits the image-prompt dot products over `temperature`;
  `normalise`: the two embeddings L2-normalised first (CLIP's cosine similarity)."""

  def __init__(self, *, dim=64, normalise=False, temperature=0.01, **kwargs):
    super().__init__(**kwargs)
    self.normalise, self.temperature = normalise, temperature
    self.c1, self.c2 = L.Conv2D(32, 3, activation='relu'), L.Conv2D(64, 3, activation='relu')
    self.pool, self.gap = L.MaxPooling2D(), L.GlobalAveragePooling2D()
    self.img_proj = L.Dense(dim)
    self.tok = L.Embedding(16, dim, embeddings_initializer=keras.initializers.RandomNormal(
        stddev=1.0))  # nn.Embedding's N(0, 1), as ported.
    self.txt_proj = L.Dense(dim)

  def call(self, x, training=False):
    img = self.img_proj(self.gap(self.c2(self.pool(self.c1(x)))))
    txt = self.txt_proj(tf.reduce_sum(self.tok(tf.constant(PROMPTS)), axis=1))
    if self.normalise:
      img, txt = tf.math.l2_normalize(img, -1), tf.math.l2_normalize(txt, -1)
    return tf.matmul(img, txt, transpose_b=True) / self.temperature


def clip_lite(seed, **kwargs):
  """`ClipLite(**kwargs)`, built on a batch of zeros."""
  _seed(seed)
  model = ClipLite(name='clip_lite', **kwargs)
  model(tf.zeros((1, 16, 16, 1)))
  return model


def clip_nll(labels, logits):
  """The contrastive cross-entropy as the user wrote it: p = exp(s) / sum exp(s) over the class
  prompts, -log p of the true one (no maximum subtracted)."""
  e = tf.exp(logits)
  p = e / tf.reduce_sum(e, axis=-1, keepdims=True)
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  return -tf.reduce_mean(tf.math.log(tf.gather(p, labels, batch_dims=1)))


def cell_masks(seed, *, rows=1024, size=32):
  """Cell segmentation in miniature: a background-subtracted 32x32 fluorescence frame (the
  background exactly 0) of three to six bright round cells (radius 2 to 5) with shot noise inside
  them; the target the cell mask. (x (rows, size, size, 1), mask (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  ii, jj = np.mgrid[:size, :size]
  x = np.zeros((rows, size, size))
  y = np.zeros((rows, size, size))
  for r in range(rows):
    for _ in range(rng.randint(3, 7)):
      ci, cj, rad = rng.uniform(3, size - 3, size=2).tolist() + [rng.uniform(2, 5)]
      m = (ii - ci) ** 2 + (jj - cj) ** 2 < rad ** 2
      y[r] = np.maximum(y[r], m)
      x[r] += m * np.abs(rng.uniform(0.5, 1.0) + 0.2 * rng.randn(size, size))
  return x[..., None].astype(np.float32), y[..., None].astype(np.float32)


class PixelNorm(L.Layer):
  """ProGAN's pixelwise feature normalisation (Karras et al., 2018), x / sqrt(mean_c(x^2) +
  epsilon), computed in the layer's compute dtype (float16 under mixed_float16)."""

  def __init__(self, epsilon=1e-8, **kwargs):
    super().__init__(**kwargs)
    self.epsilon = epsilon

  def call(self, x):
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) +
                             tf.cast(self.epsilon, x.dtype))


def hrnet_lite(seed, *, size=32, epsilon=1e-8):
  """An HRNet-lite (Wang et al., 2020): a ProGAN-style stem (Conv 3x3 (16) + LeakyReLU(0.2) +
  `PixelNorm(epsilon)`), two parallel branches (16 channels at full resolution, 32 at half) of
  Conv + BatchNorm + ReLU units, two exchange units between them (the high branch into the low by
  a strided Conv, the low into the high by a 1x1 Conv and upsampling, summed), the low branch
  upsampled and concatenated with the high, a 1x1 Conv (16) + ReLU, a 1x1 Conv (1) and a sigmoid
  (float32): the mask probability."""
  _seed(seed)
  cbr = lambda f, s=1: (lambda t: L.ReLU()(L.BatchNormalization()(
      L.Conv2D(f, 3, strides=s, padding='same', use_bias=False)(t))))
  inputs = keras.Input((size, size, 1))
  hi = PixelNorm(epsilon)(L.LeakyReLU(0.2)(L.Conv2D(16, 3, padding='same')(inputs)))
  lo = cbr(32, 2)(hi)
  for _ in range(2):
    hi, lo = cbr(16)(hi), cbr(32)(lo)
    to_lo = L.BatchNormalization()(L.Conv2D(32, 3, strides=2, padding='same')(hi))
    to_hi = L.UpSampling2D(2)(L.BatchNormalization()(L.Conv2D(16, 1)(lo)))
    hi, lo = L.ReLU()(L.Add()([hi, to_hi])), L.ReLU()(L.Add()([lo, to_lo]))
  h = L.Concatenate()([hi, L.UpSampling2D(2, interpolation='bilinear')(lo)])
  h = L.Conv2D(16, 1, activation='relu')(h)
  out = L.Activation('sigmoid', dtype='float32')(L.Conv2D(1, 1)(h))
  return keras.Model(inputs, out, name='hrnet_lite')


def app_installs(seed, *, rows=4096, missing=0):
  """App-install prediction in miniature (a CTR table): six categorical fields (50, 30, 20, 10, 8
  and 5 values) and four numeric ones (standardised); the install drawn from a logistic of
  pairwise field interactions (a hidden factorisation) and the numeric features. `missing` rows
  have one numeric value NaN (a blank CSV cell read as NaN). (((numeric (rows, 4), fields (rows,
  6) int32), installs (rows, 1))."""
  rng = np.random.RandomState(seed)
  vocab = (50, 30, 20, 10, 8, 5)
  fields = np.stack([rng.randint(0, v, size=rows) for v in vocab], axis=1)
  factors = [rng.randn(v, 3) / np.sqrt(3) for v in vocab]
  f = np.stack([factors[i][fields[:, i]] for i in range(6)], axis=1)  # (rows, 6, 3)
  pair = np.einsum('rik,rjk->rij', f, f)
  num = rng.randn(rows, 4)
  z = pair[:, np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]].sum(1) + num @ [0.8, -0.5,
                                                                                   0.3, 0.0]
  y = (rng.rand(rows) < 1 / (1 + np.exp(-1.5 * z))).astype(np.float32)[:, None]
  num = num.astype(np.float32)
  num[rng.choice(rows, missing, replace=False), rng.randint(0, 4, size=missing)] = np.nan
  return (num, fields.astype(np.int32)), y


class CIN(L.Layer):
  """xDeepFM's Compressed Interaction Network (Lian et al., 2018): layer k the outer products of
  layer k - 1's feature maps with the field embeddings, compressed by a 1x1 filter to
  `width` maps; each layer's maps sum-pooled over the embedding dimension, concatenated."""

  def __init__(self, widths=(16, 16), **kwargs):
    super().__init__(**kwargs)
    self.widths = widths

  def build(self, shape):
    m, prev = shape[1], shape[1]
    self.filters = []
    for i, w in enumerate(self.widths):
      self.filters.append(self.add_weight(shape=(prev * m, w), initializer='glorot_uniform',
                                          name=f'filter{i}'))
      prev = w

  def call(self, x0):
    x, pooled = x0, []
    for w in self.filters:
      z = tf.einsum('bhd,bmd->bhmd', x, x0)
      z = tf.reshape(z, (tf.shape(x0)[0], -1, x0.shape[-1]))
      x = tf.einsum('bpd,pq->bqd', z, w)
      pooled.append(tf.reduce_sum(x, axis=-1))
    return tf.concat(pooled, axis=-1)


def xdeepfm_lite(seed, *, dim=8, vocab=(50, 30, 20, 10, 8, 5)):
  """An xDeepFM-lite: an embedding (dim) per field, a linear part (a 1-dim embedding per field and
  a Dense over the numeric features), a `CIN` over the field embeddings and a DNN (64, 32) over
  the flattened embeddings and the numeric features, the three logits summed, a sigmoid: the
  install probability."""
  _seed(seed)
  num, cats = keras.Input((4,)), keras.Input((6,), dtype='int32')
  emb = keras.ops.stack([L.Embedding(v, dim)(cats[:, i]) for i, v in enumerate(vocab)], axis=1)
  linear = L.Add()([L.Embedding(v, 1)(cats[:, i]) for i, v in enumerate(vocab)] + [L.Dense(1)(
      num)])
  cin = L.Dense(1)(CIN()(emb))
  dnn = L.Dense(1)(L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(
      L.Concatenate()([L.Flatten()(emb), num]))))
  out = L.Activation('sigmoid')(L.Add()([linear, cin, dnn]))
  return keras.Model([num, cats], out, name='xdeepfm_lite')


def tone_clips(seed, *, rows=2048, length=512, rate=8000, classes=4):
  """Audio classification in miniature: 64 ms clips at 8 kHz, a tone whose fundamental lies in
  one of `classes` frequency bands (300-500, 700-1000, 1300-1800, 2200-3000 Hz; the label), with
  two weaker harmonics, random phase and loudness, and background noise. (x (rows, length, 1),
  labels)."""
  rng = np.random.RandomState(seed)
  bands = [(300, 500), (700, 1000), (1300, 1800), (2200, 3000)][:classes]
  t = np.arange(length) / rate
  y = rng.randint(0, classes, size=rows)
  x = 0.3 * rng.randn(rows, length)
  for r in range(rows):
    f = rng.uniform(*bands[y[r]])
    for h, a in ((1, 1.0), (2, 0.4), (3, 0.2)):
      x[r] += rng.uniform(0.5, 1.0) * a * np.sin(2 * np.pi * h * f * t + rng.uniform(0, 6.3))
  return x[..., None].astype(np.float32), y.astype(np.int32)


class SincConv(L.Layer):
  """SincNet's first layer (Ravanelli and Bengio, 2018): `filters` band-pass filters of
  `length` taps, each the difference of two windowed sinc low-passes, parametrised only by its
  learned low cut-off and band width (initialised on the mel scale), convolved with the wave."""

  def __init__(self, filters=16, length=31, rate=8000, **kwargs):
    super().__init__(**kwargs)
    self.filters, self.length, self.rate = filters, length, rate

  def build(self, shape):
    mel = np.linspace(2595 * np.log10(1 + 50 / 700), 2595 * np.log10(1 + 3800 / 700),
                      self.filters + 1)
    hz = 700 * (10 ** (mel / 2595) - 1)
    self.low = self.add_weight(shape=(self.filters,), name='low',
                               initializer=keras.initializers.Constant(hz[:-1] / self.rate))
    self.band = self.add_weight(shape=(self.filters,), name='band',
                                initializer=keras.initializers.Constant(np.diff(hz) / self.rate))
    n = np.arange(self.length) - (self.length - 1) / 2
    self.n = n.astype(np.float32)
    self.window = np.hamming(self.length).astype(np.float32)

  def call(self, x):
    low = tf.abs(self.low) + 50.0 / self.rate
    high = tf.clip_by_value(low + tf.abs(self.band), 0.0, 0.5)
    n = self.n[:, None]
    safe_n = np.where(n == 0, 1.0, n).astype(np.float32)
    band = (tf.sin(2 * np.pi * high[None] * safe_n) - tf.sin(2 * np.pi * low[None] * safe_n)) / (
        np.pi * safe_n)
    kernels = tf.where(n == 0, 2 * (high - low)[None], band) * self.window[:, None]
    return tf.nn.conv1d(x, kernels[:, None, :], stride=1, padding='SAME')


class FlakyGradient(field.OneOffFault):
  """A one-off fault in the backward pass: identity forward, but at its `at`-th training call
  (None: never) one element of the gradient flowing back through it reads NaN (a backward kernel
  that misfires once; not the data, the model or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.nan, backward=True, **kwargs)


def sincnet_lite(seed, *, length=512, classes=4, glitch=None):
  """A SincNet-lite: `SincConv` (16 filters of 31 taps), its magnitude, 4x max-pooling and
  LayerNorm, a `FlakyGradient(glitch)`, Conv1D 5 (32) + BatchNorm + LeakyReLU + 4x max-pooling,
  Conv1D 5 (32) + BatchNorm + LeakyReLU, global average, Dense(32) + LeakyReLU, Dense(classes):
  the logits."""
  _seed(seed)
  inputs = keras.Input((length, 1))
  h = L.LayerNormalization()(L.MaxPooling1D(4)(L.Lambda(tf.abs)(SincConv()(inputs))))
  h = FlakyGradient(glitch)(h)
  for pool in (True, False):
    h = L.LeakyReLU(0.2)(L.BatchNormalization()(L.Conv1D(32, 5, padding='same')(h)))
    if pool:
      h = L.MaxPooling1D(4)(h)
  h = L.LeakyReLU(0.2)(L.Dense(32)(L.GlobalAveragePooling1D()(h)))
  return keras.Model(inputs, L.Dense(classes)(h), name='sincnet_lite')


def opinion_graphs(seed, *, rows=2048, nodes=16, features=4):
  """Graph classification in miniature: two communities of eight nodes (edges inside with
  probability 0.5, across with 0.05, self-loops added); the first node feature an opinion of
  +-1 (plus noise), the rest noise; in a homophilous graph (label 1) each community shares one
  opinion, in the other (label 0) each node draws its own. (((features (rows, nodes, features),
  normalised adjacency (rows, nodes, nodes)), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  block = np.repeat(np.arange(2), nodes // 2)
  same = block[:, None] == block[None, :]
  a = rng.rand(rows, nodes, nodes) < np.where(same, 0.5, 0.05)[None]
  a = np.triu(a, 1)
  a = (a | a.transpose(0, 2, 1)) + np.eye(nodes)[None]
  d = 1 / np.sqrt(a.sum(-1))
  a_hat = a * d[:, :, None] * d[:, None, :]
  y = rng.randint(0, 2, size=rows)
  opinion = np.where(y[:, None] == 1, rng.choice([-1, 1], size=(rows, 2))[:, block],
                     rng.choice([-1, 1], size=(rows, nodes)))
  x = 0.5 * rng.randn(rows, nodes, features)
  x[:, :, 0] += opinion
  return (x.astype(np.float32), a_hat.astype(np.float32)), y[:, None].astype(np.float32)


class APPNPPropagate(L.Layer):
  """APPNP's propagation (Klicpera et al., 2019): personalised PageRank by power iteration,
  Z <- (1 - alpha) A_hat Z + alpha H, `k` times, from Z = H."""

  def __init__(self, k=6, alpha=0.1, **kwargs):
    super().__init__(**kwargs)
    self.k, self.alpha = k, alpha

  def call(self, h, a_hat):
    z = h
    for _ in range(self.k):
      z = (1 - self.alpha) * tf.matmul(a_hat, z) + self.alpha * h
    return z


def appnp_lite(seed, *, nodes=16, features=4, head='softmax'):
  """An APPNP graph classifier: a per-node MLP (32 + ReLU, 16), `APPNPPropagate`, Dense(16) +
  ReLU per node, mean and max pooling over the nodes, Dense(16) + ReLU, Dense(1) with activation
  `head` (the user's 'softmax'): the probability that the graph is homophilous."""
  _seed(seed)
  x, a_hat = keras.Input((nodes, features)), keras.Input((nodes, nodes))
  h = L.Dense(16)(L.Dense(32, activation='relu')(x))
  z = L.Dense(16, activation='relu')(APPNPPropagate()(h, a_hat))
  g = L.Concatenate()([L.GlobalAveragePooling1D()(z), L.GlobalMaxPooling1D()(z)])
  out = L.Dense(1, activation=head)(L.Dense(16, activation='relu')(g))
  return keras.Model([x, a_hat], out, name='appnp_lite')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind14_grad_clockwork_rnn_relu_sgd', 'exploding_gradients', 'clockwork_rnn',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#510; chenxie95/deeplearning_course_sjtu#31; '
              'austineaero/Remaining-Useful-Life-RUL-Estimation#19')
def _(seed, cured=False):
  """A Clockwork RNN (four modules of 8 units ticking every 1, 2, 4 and 8 steps, ReLU, the
  recurrent kernels started at the identity as the IRNN recipe for ReLU recurrences has it)
  regressing the mean of 24-step random walks, MSE, SGD + momentum 0.9 at 0.01 (Keras's default
  rate) and no gradient clipping: the gradient norm 38 at step 0, 1.7e3 at step 1, then swinging
  between 1e2 and 2e3 while the loss jumps (78, 28, 254, 169, ..., 155 at step 10), 2e5 at step
  13, 1.2e9 at step 14, the loss and weights NaN from step 15 (the error 0.37 before, inf after;
  the constant answer's 0.80). Seed 1: the norm 456 at step 0, the loss 4.5e15 at step 1, NaN
  from step 2. keras-team/keras#510 ("I got nan loss without setting clipnorm ... using clipnorm
  is one solution"); chenxie95/deeplearning_course_sjtu#31 (an RNN_RELU language model: the loss
  explodes to NaN; "relu may make the gradients too large"); austineaero/
  Remaining-Useful-Life-RUL-Estimation#19 (the loss NaN after the first epoch: "This usually means
  exploding gradients ... Add clipvalue=1.0"). Cured: clipnorm=1.0 at the same rate: the loss
  0.49 to 0.005, the error 0.37 to 0.0033."""
  x, y = walk_means(seed)
  return cases.Setup(clockwork_rnn(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind14_lr_fnet_sgd_rate_ten', 'learning_rate', 'fnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='wkentaro/pytorch-fcn#17; JihongJu/keras-fcn#6; gurkirt/FPN.pytorch1.0#7')
def _(seed, cured=False):
  """An FNet-lite encoder (token and position embeddings, two blocks of parameter-free 2-D
  Fourier mixing and a GELU feed-forward, post-LayerNorm) classifying the topic of 32-token
  sequences, SGD + momentum 0.9 at learning_rate=10 (the rate of a normalised-loss recipe, far
  above SGD's usual 0.01 to 0.1): every update overshoots, the loss 1.45 at step 0, 7.8, 335,
  6e4 at step 3, 2.7e8 at step 5, 4.6e20 at step 10, the weights NaN after step 12 and the loss
  NaN from step 13 (the error 0.80 before, inf after; the constant answer's 0.73). Seed 1: 13,
  617, 8.2e4 at steps 1 to 3, NaN from step 12. wkentaro/pytorch-fcn#17 (NaN loss after setting
  the paper's rate; fine with the script's: "You need to tune the learning rate");
  JihongJu/keras-fcn#6 (NaN weights and loss: "caused by improper configuration of
  hyperparameters, for example, the learning rate is to0 large"); gurkirt/FPN.pytorch1.0#7 (NaN
  loss at every iteration: "Reduce the learning rate"). Cured: SGD + momentum at 0.05: the loss
  1.45 to 0.02, the error 0.80 to 0.070."""
  x, y = topic_tokens(seed)
  return cases.Setup(fnet_lite(seed), keras.optimizers.SGD(0.05 if cured else 10.0, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind14_lr_poolformer_adamw_collapse', 'learning_rate', 'poolformer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='OpenNMT/OpenNMT-py#805; keras-team/keras#4066; FluxML/model-zoo#220')
def _(seed, cured=False):
  """A PoolFormer-lite (a MetaFormer: GroupNorm, 3x3 average pooling minus its input as the token
  mixer, 1x1-conv GELU MLPs; two stages) classifying 16x16 digits, AdamW at learning_rate=1.0
  (the value left from an SGD default when the optimizer was switched; Adam's usual range is
  1e-4 to 1e-3): each update throws the weights by about 1, the loss 2.48 at step 0 jumps to 23,
  85, 96, 109 at step 5 and stays in the tens to hundreds for 50 steps, then sinks back towards
  a uniform guess (2.6 at step 149), no NaN; the network never learns: the error 0.90 before,
  0.84 after (the constant answer's 0.86). Seed 1: 25, 115, ..., 153 at step 10, 2.0 at step
  149; the error 0.91 before, 0.73 after (the constant answer's 0.88; the measure needs 0.70).
  OpenNMT/OpenNMT-py#805 (Adam with the SGD default rate: "the ppl stays a high constant value";
  "you need to set the learning_rate to 0.001, by default it's 1 because default optim is
  sgd"); keras-team/keras#4066 (the model "only predicts a single class and accuracy fixes at
  0.1"; fixed by Adam's default, smaller rate); FluxML/model-zoo#220 (accuracy stuck at 0.087:
  "the problem is with the learning rate. It should be smaller"). Cured: AdamW at 1e-3: the
  loss 2.48 to 0.06, the error 0.90 to 0.063."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(poolformer_lite(seed), keras.optimizers.AdamW(1e-3 if cured else 1.0),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- initialisation --------------------------------------------------------------------------


@add('blind14_init_espcn_random_normal_stddev_one', 'initialisation', 'espcn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='yulunzhang/RCAN#76; vlfeat/matconvnet#69; aiUIUC/pyAIUtils#25')
def _(seed, cured=False):
  """An ESPCN-lite (Conv 5x5 (64) + tanh, Conv 3x3 (32) + tanh, Conv 3x3 (32), Conv 3x3 (4), the
  sub-pixel shuffle) upscaling 8x8 digits to 16x16, MSE, Adam at 1e-3, every kernel initialised
  RandomNormal(stddev=1.0) (the TF1 port's tf.random_normal_initializer defaults, not a fan-in
  scaled initializer): the tanh layers saturate and the two linear convolutions multiply the
  scale by about 17 each, the outputs are in the hundreds: the loss 4.7e4 at step 0, 3.0e4 at
  step 10, 1.5e4 at step 50, still 6.1e3 at step 149, no NaN; the error 4.7e4 before, 5.9e3
  after (the constant answer's 0.043). Seed 1: 5.6e4 to 7.8e3; the error 5.6e4 to 7.2e3.
  yulunzhang/RCAN#76 (a super-resolution net whose "training loss is extremely high": "In my case,
  the initializer was the problem ... KaimingUniform initializer, the loss converged properly");
  vlfeat/matconvnet#69 (an SRCNN whose loss does not decrease: "the filters only become larger
  and larger"); aiUIUC/pyAIUtils#25 ("random_normal_initializer is wrong for both conv and dense":
  the stddev passed as the mean). Cured: Keras's default glorot_uniform: the loss 0.21 to
  0.0014, the error 0.20 to 0.0015."""
  x, y = low_res_digits()
  init = 'glorot_uniform' if cured else keras.initializers.RandomNormal(stddev=1.0)
  return cases.Setup(espcn_lite(seed, kernel_initializer=init), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- division_or_log -------------------------------------------------------------------------


@add('blind14_div_dlrm_log_of_zero_count', 'division_or_log', 'dlrm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='facebookresearch/dlrm#363; ialhashim/DenseDepth#65')
def _(seed, cured=False):
  """A DLRM-lite (a bottom MLP over the count features, an embedding per categorical feature,
  pairwise dot-product interactions, a top MLP, a sigmoid) predicting ad clicks, binary
  cross-entropy, Adam at 1e-3, the raw counts log-transformed inside the model as log(x) (DLRM's
  preprocessing takes log(x + 1)); three of the 4,096 rows hold a count of 0 (a new ad with no
  impressions yet): log(0) = -inf, the bottom MLP turns it into inf - inf = NaN, and the first
  batch holding such a row (step 12) writes NaN into every weight. Keras clips the NaN
  probabilities before the log, so the loss fit reports stays finite (0.71 at step 0, about
  0.69 throughout) while the model's outputs are NaN for every input from step 13: the error
  0.52 before, inf after (the constant answer's 0.49). Seed 1: a zero count in the first batch:
  the weights NaN after step 0 (the reported loss 0.70 to 0.57). facebookresearch/dlrm#363 (NaN
  results on Criteo: "RuntimeWarning: divide by zero encountered in log"); ialhashim/DenseDepth#65
  (NaN loss: "Check if your data has any 'zero' values" before the depth normalisation divides by
  them). Cured: log(x + 1): the loss 0.71 to 0.47, the error 0.49 to 0.18."""
  x, y = ad_clicks(seed, zero_counts=3)
  return cases.Setup(dlrm_lite(seed, plus_one=cured), keras.optimizers.Adam(1e-3), BCE(),
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind14_exp_clip_unnormalised_manual_softmax', 'softmax_overflow', 'clip_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='openai/CLIP#530; tfzhou/ContrastiveSeg#20; huggingface/transformers#13217')
def _(seed, cured=False):
  """A CLIP-lite dual encoder (a small conv image tower, a bag-of-tokens text tower over the ten
  class prompts, token embeddings N(0, 1) as nn.Embedding ports them) trained on 16x16 digits
  against their class prompts, Adam at 1e-3, the logits the dot products of the un-normalised
  embeddings over a temperature of 0.01 (CLIP's floor; CLIP divides cosine similarities, in
  [-1, 1]), and the cross-entropy written out as exp(s) / sum exp(s): with logits above 88.7
  exp overflows to inf and inf / inf = NaN: the loss NaN at step 0 and the first update writes
  NaN into the weights (the error 0.92 before, inf after; the constant answer's 0.86). Seed 1:
  the loss inf at step 0, NaN from step 1. openai/CLIP#530 (the logit scale unclamped:
  "logit_scale.exp() overflows, producing Inf/NaN in the cosine similarity logits");
  tfzhou/ContrastiveSeg#20 (a contrastive loss subtracts the row maximum "to avoid the numerical
  overflow of softmax function"); huggingface/transformers#13217 (CLIP's loss moved to
  cross_entropy on the logits). Cured: SparseCategoricalCrossentropy(from_logits=True) on the
  same logits: the loss 57 to 0.26, the error 0.92 to 0.17."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(clip_lite(seed), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True) if cured else clip_nll,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind14_fp16_hrnet_pixelnorm_epsilon_underflow', 'precision', 'hrnet_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='pytorch/pytorch#32137; tensorflow/tensorflow#24979; '
              'lisa-lab/DeepLearningTutorials#86')
def _(seed, cured=False):
  """An HRNet-lite (a ProGAN-style stem of Conv + LeakyReLU + pixel norm, two parallel
  resolution branches with two exchange units, a sigmoid head in float32) segmenting cells in
  background-subtracted 32x32 fluorescence frames, binary cross-entropy, Adam at 1e-3, under
  mixed_float16; the pixel norm x / sqrt(mean(x^2) + 1e-8) runs in float16, where 1e-8 is 0
  (below the smallest subnormal, 6e-8): at every background pixel the stem's features are
  exactly 0 and 0 x rsqrt(0) = 0 x inf = NaN: the outputs are NaN before any training (the error
  inf before and after; the constant answer's 0.17) and the loss is NaN at every step from step
  0 (the loss-scale optimizer skips each update, the weights stay finite). Seed 1: the same.
  pytorch/pytorch#32137 ("normalize epsilon too small for half precision": 1e-12 "gets evaluated
  as zero ... This causes nans in half precision when the norm is evaluated as zero");
  tensorflow/tensorflow#24979 (layer norm's epsilon "too small for float16 and can cause NaNs");
  lisa-lab/DeepLearningTutorials#86 ("Use bigger epsilon for float16 so that it does not become
  0"). Cured: epsilon 1e-4 (a float16 normal): the loss 0.74 to 0.0046, the error 0.23 to
  0.0025."""
  x, y = cell_masks(seed)
  return cases.Setup(hrnet_lite(seed, epsilon=1e-4 if cured else 1e-8),
                     keras.optimizers.Adam(1e-3), BCE(),
                     data.stream(x, y, batch=16, seed=seed), 'binary_prob')


# --- bad_input -------------------------------------------------------------------------------


@add('blind14_input_xdeepfm_nan_numeric_cells', 'bad_input', 'xdeepfm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Nixtla/neuralforecast#186; prs-eth/Marigold#111')
def _(seed, cured=False):
  """An xDeepFM-lite (field embeddings, a linear part, a Compressed Interaction Network and a DNN,
  summed into a sigmoid) predicting app installs from six categorical and four numeric fields,
  binary cross-entropy, Adam at 1e-3; six of the 4,096 rows hold a blank numeric cell read from
  the CSV as NaN (no fillna): the first batch holding one makes the loss NaN and the update
  writes NaN into the weights: the loss NaN from step 0 (the error on clean batches 0.43 before,
  inf after; the constant answer's 0.45). Seed 1: the loss 0.79 to 0.95 for twelve steps, NaN
  from step 12. Nixtla/neuralforecast#186 ("when missing values are passed ... The loss becomes
  nan during training but it is hard to notice that the problem is in the data");
  prs-eth/Marigold#111 (NaN loss: "this happens when input batch contains NaN values"; "check
  your data"). Cured: the NaN cells filled with 0: the loss 0.92 to 0.54, the error 0.43 to 0.32.
  The measure reads clean batches (eval_data) for both runs."""
  (num, cats), y = app_installs(seed, missing=6)
  if cured:
    num = np.nan_to_num(num, nan=0.0)
  (clean_num, clean_cats), clean_y = app_installs(seed)
  return cases.Setup(xdeepfm_lite(seed), keras.optimizers.Adam(1e-3), BCE(),
                     data.stream((num, cats), y, batch=64, seed=seed), 'binary_prob',
                     eval_data=data.stream((clean_num, clean_cats), clean_y, batch=64,
                                           seed=seed))


# --- transient -------------------------------------------------------------------------------


@add('blind14_transient_sincnet_nan_gradient_once', 'transient', 'sincnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; facebookresearch/mmf#1251')
def _(seed, cured=False):
  """A SincNet-lite (learned band-pass sinc filters on the raw wave, LayerNorm, two Conv1D +
  BatchNorm stages) classifying 64 ms tone clips into four frequency bands, Adam at 1e-3,
  training normally (the loss 1.6, 0.46 at step 10, 0.05 at step 50), where the backward pass
  after the sinc front end returns NaN in one element once (`FlakyGradient`: its 70th
  training-mode call; step 65 in a plain `fit` after the measure's four training-mode passes; a
  backward kernel that misfires once, not the data, the model or the settings): that step's loss
  is finite, its gradient NaN, the update writes NaN into the weights and, in plain `fit`, the
  loss is NaN from step 66 on (the error 0.79 before, inf after; the constant answer's 0.71);
  the same step re-run gives finite gradients. Seed 1: the same step. Rikorose/DeepFilterNet#30
  (NaN "in some rare circumstances ... Starting again from the last checkpoint should work");
  facebookresearch/mmf#1251 (resumed from a checkpoint, "the NaN doesn't seem to appear in the
  same iteration"). Cured: the same run without the fault: the loss 1.6 to 0.015, the error 0.79
  to 0.0."""
  x, y = tone_clips(seed)
  return cases.Setup(sincnet_lite(seed, glitch=None if cured else 70),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind14_mismatch_appnp_softmax_one_unit', 'loss_output_mismatch', 'appnp_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#126; keras-team/keras#2975; tensorflow/tensorflow#39223')
def _(seed, cured=False):
  """An APPNP graph classifier (a per-node MLP, personalised-PageRank propagation over the
  normalised adjacency, mean and max pooling) telling homophilous two-community graphs from
  mixed ones, binary cross-entropy, Adam at 1e-3, its head Dense(1, activation='softmax'): a
  softmax over one unit is 1.0 for every graph, whatever the network computes. Keras takes the
  softmax's logits for the loss, so the loss falls (0.69 at step 0, 0.64 at step 50, 0.16 at
  step 149) while every prediction stays 1.0: the error 0.46 before and after (the constant
  answer's 0.46). Seed 1: the loss 0.69 to 0.30, the error 0.52 before and after.
  keras-team/keras#126 (an MLP ending in Dense(64, 1, activation='softmax'): "y-hat is always
  just all zeros. predict_proba gives all ones"); keras-team/keras#2975 ("Keras model always
  predicts same output class", fixed with a sigmoid); tensorflow/tensorflow#39223 (a binary
  classifier whose "acc is always 0.5"). Cured: activation='sigmoid': the loss 0.69 to 0.16, the
  error 0.52 to 0.094."""
  x, y = opinion_graphs(seed)
  return cases.Setup(appnp_lite(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), BCE(), data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')
