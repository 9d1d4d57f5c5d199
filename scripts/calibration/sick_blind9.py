"""A ninth blind set of sick scenarios (the 'blind9' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind8.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (a normaliser-free ResNet-lite, a ResNet-18-lite with
BatchNorm, a SIREN, a GraphSAGE-lite, a BERT-lite with padding masks, a DeepAR-lite forecaster, a
Time2Vec demand model, a Swin-lite window transformer, a ConvMixer-lite, a NeRF-style
positional-encoding MLP). Each builder takes `cured`: the same run with the thread's remedy (the
registry calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit`:
the sick run shows the reported symptom, the cured twin passes runner's "did it train" measure
in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND9 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND9.add` with split='blind9'."""
  return BLIND9.add(name, expected, arch, split='blind9', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def gray_digits(size=16):
  """The digits as (n, size, size, 1) grey images in [0, 1] and their labels."""
  return data.digits(size=size, rgb=False)


def nf_resnet_lite(seed, *, size=16, blocks=8, width=32, classes=10):
  """A normaliser-free ResNet-lite: a stem Conv2D(width, 3x3, ReLU), `blocks` residual blocks
  (Conv2D 3x3, ReLU, Conv2D 3x3, added to the block input), He-normal kernels and no
  normalisation (the residual sums double the activations' variance at every block), global
  average, Dense(classes): the logits."""
  _seed(seed)
  kw = dict(padding='same', kernel_initializer='he_normal')
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(width, 3, activation='relu', **kw)(inputs)
  for _ in range(blocks):
    r = L.Conv2D(width, 3, activation='relu', **kw)(h)
    h = L.Add()([h, L.Conv2D(width, 3, **kw)(r)])
  h = L.GlobalAveragePooling2D()(L.ReLU()(h))
  return keras.Model(inputs, L.Dense(classes)(h), name='nf_resnet_lite')


def resnet18_lite(seed, *, size=16, classes=10, widths=(16, 32, 64, 64)):
  """A ResNet-18-lite: a stem Conv2D + BatchNorm + ReLU, four stages of two basic blocks (Conv2D
  3x3 + BN + ReLU, Conv2D 3x3 + BN, added to the shortcut: identity, or a strided 1x1 Conv2D +
  BN where the shape changes; ReLU), the later stages strided, global average, Dense(classes):
  the logits."""
  _seed(seed)

  def conv_bn(h, f, k, s):
    return L.BatchNormalization()(L.Conv2D(f, k, strides=s, padding='same', use_bias=False)(h))

  inputs = keras.Input((size, size, 1))
  h = L.ReLU()(conv_bn(inputs, widths[0], 3, 1))
  for stage, f in enumerate(widths):
    for block in range(2):
      s = 2 if stage and not block else 1
      r = conv_bn(L.ReLU()(conv_bn(h, f, 3, s)), f, 3, 1)
      short = h if s == 1 and h.shape[-1] == f else conv_bn(h, f, 1, s)
      h = L.ReLU()(L.Add()([short, r]))
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='resnet18_lite')


def image_pixels(size=32):
  """A 32x32 grey image (four digits tiled 2 x 2) as coordinate regression data: ((x, y) in
  [-1, 1], (size^2, 2)) and the pixel intensities ((size^2, 1), in [0, 1])."""
  x, _ = data.digits(size=size // 2, rgb=False)
  img = np.concatenate([np.concatenate([x[0], x[1]], axis=1),
                        np.concatenate([x[2], x[3]], axis=1)], axis=0)[:, :, 0]
  grid = np.linspace(-1, 1, size)
  xx, yy = np.meshgrid(grid, grid)
  coords = np.stack([xx.ravel(), yy.ravel()], axis=1)
  return coords.astype(np.float32), img.reshape(-1, 1).astype(np.float32)


class SineDense(L.Layer):
  """A SIREN layer (Sitzmann et al., 2020): sin(w0 * (x W + b)). `init` 'siren': W uniform in
  +-1/fan_in (first layer) or +-sqrt(6/fan_in)/w0 (the others), the paper's scheme; anything
  else: a Keras initialiser for W."""

  def __init__(self, units, w0=30.0, first=False, init='siren', **kwargs):
    super().__init__(**kwargs)
    self.units, self.w0, self.first, self.init = units, w0, first, init

  def build(self, shape):
    n = shape[-1]
    if self.init == 'siren':
      bound = 1.0 / n if self.first else np.sqrt(6.0 / n) / self.w0
      init = keras.initializers.RandomUniform(-bound, bound)
    else:
      init = self.init
    self.w = self.add_weight(shape=(n, self.units), initializer=init, name='w')
    self.b = self.add_weight(shape=(self.units,), initializer='zeros', name='b')

  def call(self, x):
    return tf.sin(self.w0 * (tf.matmul(x, self.w) + self.b))


def siren(seed, *, hidden=64, depth=3, init='siren'):
  """A SIREN image fit: (x, y) through `depth` SineDense(hidden, w0=30) layers, a linear
  Dense(1) head: the pixel intensity."""
  _seed(seed)
  inputs = keras.Input((2,))
  h = SineDense(hidden, first=True, init=init)(inputs)
  for _ in range(depth - 1):
    h = SineDense(hidden, init=init)(h)
  return keras.Model(inputs, L.Dense(1)(h), name='siren')


def small_graphs(seed, *, rows=2048, nodes=12, p=0.35):
  """Small random graphs, two node types (one-hot features plus noise): class 1 graphs link
  nodes of the same type more often (p x 1.6 against p x 0.4 across types), class 0 the other
  way round. Some nodes have no edge (isolated: about 0.8 % of the nodes, in 9 % of the graphs,
  a genuine property of sparse graphs). ((adjacency (rows, nodes, nodes), features (rows, nodes,
  4)), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  types = rng.randint(0, 2, size=(rows, nodes))
  y = rng.randint(0, 2, size=rows)
  same = types[:, :, None] == types[:, None, :]
  prob = np.where(same == y[:, None, None].astype(bool), 1.6 * p, 0.4 * p)
  upper = np.triu(rng.rand(rows, nodes, nodes) < prob, k=1)
  adj = (upper | upper.transpose(0, 2, 1)).astype(np.float32)
  feats = np.concatenate([np.eye(2)[types], 0.5 * rng.randn(rows, nodes, 2)], axis=-1)
  return (adj, feats.astype(np.float32)), y[:, None].astype(np.float32)


class SageMean(L.Layer):
  """A GraphSAGE layer with the mean aggregator (Hamilton et al., 2017) on dense adjacency:
  the neighbours' mean, (A h) / deg, written out by hand (`safe`: deg floored at 1), then
  ReLU(h W_self + mean W_neigh + b)."""

  def __init__(self, units, safe=False, **kwargs):
    super().__init__(**kwargs)
    self.self_dense = L.Dense(units)
    self.neigh_dense = L.Dense(units, use_bias=False)
    self.safe = safe

  def call(self, adj, h):
    deg = tf.reduce_sum(adj, axis=-1, keepdims=True)
    if self.safe:
      deg = tf.maximum(deg, 1.0)
    mean = tf.matmul(adj, h) / deg
    return tf.nn.relu(self.self_dense(h) + self.neigh_dense(mean))


def graphsage_lite(seed, *, nodes=12, features=4, units=32, safe=False):
  """A GraphSAGE-lite graph classifier: two `SageMean` layers, the nodes' mean, Dense(1): the
  logit."""
  _seed(seed)
  adj = keras.Input((nodes, nodes))
  feats = keras.Input((nodes, features))
  h = SageMean(units, safe)(adj, feats)
  h = SageMean(units, safe)(adj, h)
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model([adj, feats], L.Dense(1)(h), name='graphsage_lite')


def reviews(seed, *, rows=2048, length=16, vocab=64):
  """Short product reviews as token ids, padded with 0 to `length` after a [CLS] token (id 1):
  4 to 15 words, ids 2-11 positive, 12-21 negative, the rest neutral; the label whether the
  positive words outnumber the negative (ties dropped to positive). (ids (rows, length) int32,
  labels (rows,))."""
  rng = np.random.RandomState(seed)
  ids = np.zeros((rows, length), np.int32)
  y = np.zeros(rows, np.int32)
  for r in range(rows):
    n = rng.randint(4, length)
    words = rng.randint(2, vocab, size=n)
    ids[r, 0], ids[r, 1:n + 1] = 1, words
    pos, neg = np.sum((words >= 2) & (words < 12)), np.sum((words >= 12) & (words < 22))
    y[r] = int(pos >= neg)
  return ids, y


class MaskedSelfAttention(L.Layer):
  """Multi-head self-attention with a padding mask built as the outer product of the tokens'
  mask (a query and a key both real), the masked scores set to `fill` before tf.nn.softmax:
  -inf (a padded query's row is all -inf, its softmax 0/0 = NaN) or a finite -1e9."""

  def __init__(self, dim, heads, fill, **kwargs):
    super().__init__(**kwargs)
    self.qkv = L.Dense(3 * dim)
    self.out = L.Dense(dim)
    self.dim, self.heads, self.fill = dim, heads, fill

  def call(self, x, ids):
    mask = tf.not_equal(ids, 0)  # [CLS] and the words; 0 is the padding.
    b, t = tf.shape(x)[0], tf.shape(x)[1]
    dh = self.dim // self.heads
    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
    split = lambda z: tf.transpose(tf.reshape(z, [b, t, self.heads, dh]), [0, 2, 1, 3])
    q, k, v = split(q), split(k), split(v)
    scores = tf.matmul(q, k, transpose_b=True) / np.sqrt(dh)
    pair = tf.logical_and(mask[:, None, :, None], mask[:, None, None, :])
    scores = tf.where(pair, scores, tf.cast(self.fill, scores.dtype))
    o = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    return self.out(tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [b, t, self.dim]))


def bert_lite(seed, *, length=16, vocab=64, dim=32, heads=4, fill=-np.inf):
  """A BERT-lite: token and position embeddings, one post-norm encoder block (a
  `MaskedSelfAttention`, LayerNorm, a GELU feed-forward, LayerNorm), the [CLS] token's state,
  Dense(2): the logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  pos = L.Embedding(length, dim)(tf.range(length)[None, :])
  h = L.Embedding(vocab, dim)(ids) + pos
  h = L.LayerNormalization()(h + MaskedSelfAttention(dim, heads, fill)(h, ids))
  f = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h))
  h = L.LayerNormalization()(h + f)
  return keras.Model(ids, L.Dense(2)(h[:, 0]), name='bert_lite')


def page_views(seed, *, rows=2048, window=28):
  """Daily page views of many web pages (DeepAR's kind of data): a per-page level e^U(6, 10.5)
  (about 400 to 36,000 a day), a weekly cycle, a slow trend and Poisson-like noise; windows of
  `window` days and the next day's count. (x (rows, window, 1), y (rows, 1)). Every reading is
  below float16's largest value (65504); a window's sum is not for about 60 % of the pages."""
  rng = np.random.RandomState(seed)
  t = np.arange(window + 1)[None, :]
  level = np.exp(rng.uniform(6, 10.5, size=(rows, 1)))
  weekly = 1 + 0.2 * np.sin(2 * np.pi * (t / 7 + rng.rand(rows, 1)))
  trend = 1 + rng.uniform(-0.005, 0.005, size=(rows, 1)) * t
  series = level * weekly * trend * np.exp(0.05 * rng.randn(rows, window + 1))
  return series[:, :window, None].astype(np.float32), series[:, window:].astype(np.float32)


class MeanScaler(L.Layer):
  """DeepAR's scaling: the window's mean level, 1 + sum(x) / window (the sum written out, in the
  layer's compute dtype), and the window divided by it. Returns (x / scale, scale)."""

  def call(self, x):
    scale = 1.0 + tf.reduce_sum(x, axis=1) / tf.cast(tf.shape(x)[1], x.dtype)
    return x / scale[:, None, :], scale


class Rescale(L.Layer):
  """The forecast back on the series' scale: rate x scale."""

  def call(self, rate, scale):
    return tf.cast(rate, self.compute_dtype) * tf.cast(scale, self.compute_dtype)


def deepar_lite(seed, *, window=28, scaler_dtype=None):
  """A DeepAR-lite (Salinas et al.): the window scaled by its mean (`MeanScaler`, dtype
  `scaler_dtype`, None: the global policy), an LSTM(32) over it, Dense(1, softplus): the
  Poisson rate relative to the scale, `Rescale`d (float32) to a count."""
  _seed(seed)
  inputs = keras.Input((window, 1))
  z, scale = MeanScaler(dtype=scaler_dtype)(inputs)
  rate = L.Dense(1, activation='softplus')(L.LSTM(32)(z))
  return keras.Model(inputs, Rescale(dtype='float32')(rate, scale), name='deepar_lite')


def bike_demand(seed, *, rows=2048, raw_time=True):
  """Hourly bike-share rentals over 90 days: (time, temperature (C), humidity (%/100), holiday
  flag) and the rentals (hundreds: a daily commute cycle, warmer hours busier, rain less). The
  time is the record's Unix timestamp in seconds (about 1.69e9, `raw_time`) or days since the
  first record. (x (rows, 4), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  hours = np.sort(rng.choice(90 * 24, size=rows, replace=False)).astype(np.float64)
  hod = hours % 24
  temp = 15 + 8 * np.sin(2 * np.pi * (hod - 9) / 24) + 4 * rng.randn(rows)
  hum = np.clip(0.6 + 0.2 * rng.randn(rows), 0, 1)
  holiday = (rng.rand(rows) < 0.05).astype(np.float64)
  y = (3 + 1.5 * np.exp(-((hod - 8) ** 2) / 4) + 2 * np.exp(-((hod - 17.5) ** 2) / 4)
       + 0.12 * (temp - 15) - 2 * (hum - 0.6) - holiday + 0.3 * rng.randn(rows))
  time = 1.6934e9 + 3600 * hours if raw_time else hours / 24
  x = np.stack([time, temp, hum, holiday], axis=1)
  return x.astype(np.float32), y[:, None].astype(np.float32)


class Time2Vec(L.Layer):
  """Time2Vec (Kazemi et al., 2019) of the first feature, t: [w0 t + b0, sin(t W + B)]
  (`periodic` sine terms), concatenated with the other features."""

  def __init__(self, periodic=8, **kwargs):
    super().__init__(**kwargs)
    self.periodic = periodic

  def build(self, shape):
    self.w = self.add_weight(shape=(1, self.periodic + 1), initializer='glorot_uniform',
                             name='w')
    self.b = self.add_weight(shape=(self.periodic + 1,), initializer='zeros', name='b')

  def call(self, x):
    z = x[:, :1] * self.w + self.b
    return tf.concat([z[:, :1], tf.sin(z[:, 1:]), x[:, 1:]], axis=-1)


def time2vec_net(seed):
  """A Time2Vec demand model: `Time2Vec` of the timestamp next to the weather features,
  Dense(64, ReLU), Dense(32, ReLU), Dense(1): the rentals."""
  _seed(seed)
  inputs = keras.Input((4,))
  h = L.Dense(64, activation='relu')(Time2Vec()(inputs))
  h = L.Dense(32, activation='relu')(h)
  return keras.Model(inputs, L.Dense(1)(h), name='time2vec_net')



class GlitchAt(field.OneOffFault):
  """A one-off fault on the activations: the layer counts the training calls and, at call `at`
  only, one activation reads NaN (a flipped exponent bit in one value of a buffer, as a failing
  memory or a racy kernel gives); identity everywhere else (`at` None: never). The count lives
  outside the model's variables (`field.OneOffFault`), as a hardware fault's timing does: a guard
  that puts the model's state back after a skipped step does not replay it (written first with
  the count in a model variable, which every skip put back: the fault fired on every step)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.nan, backward=False, **kwargs)


class WindowAttention(L.Layer):
  """Swin's window attention (Liu et al., 2021): the token grid cut into `window` x `window`
  windows (cyclically shifted by `shift` first, as the shifted-window blocks do; no attention
  mask across the wrap, a simplification), multi-head self-attention inside each window, the
  grid restored."""

  def __init__(self, dim, heads, window, shift, **kwargs):
    super().__init__(**kwargs)
    self.mha = L.MultiHeadAttention(heads, dim // heads)
    self.dim, self.window, self.shift = dim, window, shift

  def call(self, x):
    b, g, w = tf.shape(x)[0], x.shape[1], self.window
    if self.shift:
      x = tf.roll(x, [-self.shift, -self.shift], axis=[1, 2])
    n = g // w
    win = tf.reshape(tf.transpose(tf.reshape(x, [b, n, w, n, w, self.dim]), [0, 1, 3, 2, 4, 5]),
                     [b * n * n, w * w, self.dim])
    win = self.mha(win, win)
    x = tf.reshape(tf.transpose(tf.reshape(win, [b, n, n, w, w, self.dim]), [0, 1, 3, 2, 4, 5]),
                   [b, g, g, self.dim])
    if self.shift:
      x = tf.roll(x, [self.shift, self.shift], axis=[1, 2])
    return x


def swin_lite(seed, *, size=16, patch=4, dim=32, heads=4, window=2, classes=10, glitch=None):
  """A Swin-lite: 4x4 patches embedded (Conv2D, stride 4) into a 4x4 grid, two Swin blocks
  (pre-norm attention in 2x2 windows, plain then shifted by 1, and a GELU MLP, both residual), a
  `GlitchAt(glitch)` on the second block's output, patch merging (2x2 neighbours concatenated,
  LayerNorm, Dense) to 2x2, one more block (one window), global average, Dense(classes): the
  logits."""
  _seed(seed)

  def block(h, shift):
    d = h.shape[-1]
    h = h + WindowAttention(d, heads, window, shift)(L.LayerNormalization()(h))
    m = L.Dense(2 * d, activation='gelu')(L.LayerNormalization()(h))
    return h + L.Dense(d)(m)

  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(dim, patch, strides=patch)(inputs)
  h = block(block(h, 0), window // 2)
  h = GlitchAt(glitch)(h)
  h = L.Dense(2 * dim)(L.LayerNormalization()(L.Lambda(
      lambda z: tf.concat([z[:, 0::2, 0::2], z[:, 1::2, 0::2], z[:, 0::2, 1::2],
                           z[:, 1::2, 1::2]], axis=-1))(h)))
  h = block(h, 0)
  h = L.GlobalAveragePooling2D()(L.LayerNormalization()(h))
  return keras.Model(inputs, L.Dense(classes)(h), name='swin_lite')


def dot_images(seed, *, rows=2048, size=16):
  """Dot-counting images (a cell or crowd count in miniature): a faint noisy background and k
  bright 2x2 dots, k ~ Poisson(4), at random places (some overlapping). (x (rows, size, size,
  1), counts (rows, 1))."""
  rng = np.random.RandomState(seed)
  k = rng.poisson(4, size=rows)
  x = 0.1 * rng.rand(rows, size, size, 1)
  for r in range(rows):
    for _ in range(k[r]):
      i, j = rng.randint(0, size - 1, size=2)
      x[r, i:i + 2, j:j + 2, 0] = 1.0
  return x.astype(np.float32), k[:, None].astype(np.float32)


def convmixer_lite(seed, *, size=16, dim=64, depth=4, kernel=5, patch=2, head=None):
  """A ConvMixer-lite (Trockman & Kolter) counter: a patch embedding (Conv2D, stride `patch`) +
  GELU + BatchNorm, `depth` mixer layers (a depthwise Conv2D + GELU + BN added to its input, then
  a pointwise Conv2D + GELU + BN), global average, Dense(1, activation=`head`): the count."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.BatchNormalization()(L.Conv2D(dim, patch, strides=patch, activation='gelu')(inputs))
  for _ in range(depth):
    r = L.BatchNormalization()(L.DepthwiseConv2D(kernel, padding='same',
                                                 activation='gelu')(h))
    h = L.BatchNormalization()(L.Conv2D(dim, 1, activation='gelu')(L.Add()([h, r])))
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(inputs, L.Dense(1, activation=head)(h), name='convmixer_lite')


class FourierFeatures(L.Layer):
  """NeRF's positional encoding: each coordinate p mapped to (p, sin(2^k pi p), cos(2^k pi p))
  for k < `bands`."""

  def __init__(self, bands=6, **kwargs):
    super().__init__(**kwargs)
    self.freqs = np.pi * 2.0 ** np.arange(bands)

  def call(self, x):
    z = x[..., None] * self.freqs.astype(np.float32)
    z = tf.reshape(z, [-1, x.shape[-1] * len(self.freqs)])
    return tf.concat([x, tf.sin(z), tf.cos(z)], axis=-1)


def nerf_mlp(seed, *, width=128, depth=4, bands=6):
  """A NeRF-style MLP on 2-D points: `FourierFeatures`, `depth` Dense(width, ReLU) layers with
  the encoding concatenated back in at the middle (NeRF's skip), Dense(1, sigmoid): the
  intensity."""
  _seed(seed)
  inputs = keras.Input((2,))
  enc = FourierFeatures(bands)(inputs)
  h = enc
  for i in range(depth):
    if i == depth // 2:
      h = L.Concatenate()([h, enc])
    h = L.Dense(width, activation='relu')(h)
  return keras.Model(inputs, L.Dense(1, activation='sigmoid')(h), name='nerf_mlp')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind9_grad_nf_resnet_residual_sums_unclipped', 'exploding_gradients', 'nf_resnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='huangleiBuaa/ONI#1; tbung/pytorch-revnet#1; ROCm/AMDMIGraphX#849')
def _(seed, cured=False):
  """A normaliser-free ResNet-lite (eight residual blocks of two He-initialised 3x3
  convolutions, no BatchNorm) on 16x16 digits with SGD + momentum 0.9 at 0.02 and no clipping:
  every residual sum adds a branch of the same scale to its input, the activations and the
  back-propagated gradients grow block by block (the first batch's gradient norm about 540),
  the first update overshoots, the loss goes from 41.7 at step 0 to the thousands (7e3 to 1.3e4
  over runs) at step 1 and is NaN from step 2 (the weights NaN); the model never trains.
  huangleiBuaa/ONI#1 (ResNet18 "(Without BatchNorm) ... the training loss always goes to NaN
  after a few iterations");
  tbung/pytorch-revnet#1 (residual revnets: "my loss quickly goes to NAN"; "the gradients of the
  revnet tend to explode a bit and gradient norm clipping is what I used"; "Adding clipping
  worked beautifully!"); ROCm/AMDMIGraphX#849 (NFNets train "without batch normalization
  layers" using "a gradient clipping algorithm" for training stability). Cured: clipnorm=1
  (same rate, same architecture): the error on the measure's batches 0.95 to 0.10."""
  x, y = gray_digits()
  return cases.Setup(nf_resnet_lite(seed),
                     keras.optimizers.SGD(0.02, momentum=0.9, clipnorm=1.0 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind9_lr_resnet18_sgd_too_high', 'learning_rate', 'resnet18_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='facebookarchive/fb.resnet.torch#125; gcr/torch-residual-networks#10; '
              'keras-team/keras#12408')
def _(seed, cured=False):
  """A ResNet-18-lite (basic blocks with BatchNorm) on 16x16 digits with SGD + momentum 0.9 at
  3.0: each step throws the unnormalised classifier and the BN scales far off, the loss jumps
  from 2.9 to 17 at step 1 and keeps swinging (2.2 to 5, 74 at the last step), never NaN, and
  the model ends no better than the constant answer (error 0.95 in inference mode, 0.90 in
  training mode, against 0.86). facebookarchive/fb.resnet.torch#125 ("the error value keeps
  increasing until getting value inf or nan"; "Sounds like you might have a learning rate
  issue"; decreasing it "worked"); gcr/torch-residual-networks#10 ("the loss function explodes
  during the first few iterations ... maybe the initial learning rate 0.1 is too large?");
  keras-team/keras#12408 (ResNet with SGD momentum: "after first several batches, the training
  loss suddenly explode. Then the total training ruined"). Cured: SGD + momentum at 0.05 (error
  0.31 in inference mode, 0.02 in training mode)."""
  x, y = gray_digits()
  return cases.Setup(resnet18_lite(seed), keras.optimizers.SGD(0.05 if cured else 3.0,
                                                               momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind9_lr_nerf_mlp_adam_too_high', 'learning_rate', 'nerf_mlp',
     doors=('trainer', 'fit'), steps=150,
     citation='sxyu/pixel-nerf#45; sxyu/pixel-nerf#15; google/nerfactor#32')
def _(seed, cured=False):
  """A NeRF-style MLP (positional encoding, four ReLU layers with a skip, a sigmoid output)
  fitting a 32x32 grey image from pixel coordinates, MSE, Adam at 5e-2 (NeRF uses 5e-4): the
  first large steps push the ReLU units dead and the sigmoid into saturation, the loss goes
  from 0.17 to 0.23-0.30 and stays, never NaN, and the model renders 0 at every pixel (a black
  image; error 0.20 against 0.16 untrained and 0.125 for the constant answer). sxyu/pixel-nerf#45
  (outputs "becomes black images during early epochs ... I solved this problem by reducing the
  learning rate"); sxyu/pixel-nerf#15 ("stuck where the model used to produce all black results.
  I resolved this by reducing the learning rate"); google/nerfactor#32 ("Rendering results are
  all white"; "Solved by setting a smaller learning rate"). Cured: Adam at 5e-4 (error 0.02)."""
  x, y = image_pixels()
  return cases.Setup(nerf_mlp(seed), keras.optimizers.Adam(5e-4 if cured else 5e-2), 'mse',
                     data.stream(x, y, batch=64, seed=seed), 'regression')


# --- initialisation --------------------------------------------------------------------------


@add('blind9_init_siren_default_glorot', 'initialisation', 'siren',
     doors=('trainer', 'fit'), steps=150,
     citation='lucidrains/siren-pytorch#1; NVlabs/tiny-cuda-nn#216; deepinv/deepinv#748')
def _(seed, cured=False):
  """A SIREN (three sine layers, w0 = 30) fitting a 32x32 grey image from pixel coordinates,
  MSE, Adam at 1e-4, its kernels left at Keras's default glorot_uniform instead of SIREN's
  scheme: the pre-activations of the hidden layers are w0 = 30 times too large, each sine
  layer scrambles its input into high-frequency noise, the untrained output is noise (error
  1.0, eight times the image's variance) and the fit stays noise (the loss about 1.0 to 0.85,
  the error 0.81 after 150 steps, never near the constant answer's 0.125; no NaN).
  lucidrains/siren-pytorch#1 (SIREN "converges much slower and less accurate" until the
  paper's initialisation was restored: "it also solved the problem"); NVlabs/tiny-cuda-nn#216
  ("Siren uses a special network initialization scheme", the results differ without it);
  deepinv/deepinv#748 ("the weight initialization was missing in the SineMLP. I thus corrected
  it"). Cured: SIREN's initialisation (uniform +-1/fan_in in the first layer, +-sqrt(6/fan_in)
  / w0 after): the error 0.96 to 0.02."""
  x, y = image_pixels()
  return cases.Setup(siren(seed, init='siren' if cured else 'glorot_uniform'),
                     keras.optimizers.Adam(1e-4), 'mse',
                     data.stream(x, y, batch=64, seed=seed), 'regression')


# --- division_or_log -------------------------------------------------------------------------


@add('blind9_div_graphsage_isolated_node_degree', 'division_or_log', 'graphsage_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='MrLeeeee/GCN-GAT-and-Graphsage#3; dmlc/dgl#2777; neo4j/graph-data-science#94')
def _(seed, cured=False):
  """A GraphSAGE-lite (two mean-aggregator layers on dense adjacency, mean readout) classing
  small random graphs by whether their edges join nodes of the same type, Adam at 3e-3, its
  neighbour mean written out by hand as (A h) / deg: 0.8 % of the nodes have no edge (in 9 % of
  the graphs), their 0 / 0 is NaN, so the untrained model already answers NaN for those graphs;
  the first batch happens to hold none (loss 0.67), the second does, its gradients are NaN,
  Adam writes NaN into the weights and the loss is NaN from step 1 on. MrLeeeee/GCN-GAT-and-
  Graphsage#3 ("h1 = h1 / degree ... The degree of some nodes might be zero leading to the loss
  to become NAN. It's recommended to add a samll number to denominator"); dmlc/dgl#2777
  ("SAGEConv produces NANs on a graph with no edges"); neo4j/graph-data-science#94 (GraphSAGE
  NaN embeddings, "caused by l2 normalization leading to division by zero"). Cured: the degree
  floored at 1 (an isolated node's mean is 0): the error 0.47 to 0.00."""
  x, y = small_graphs(seed)
  return cases.Setup(graphsage_lite(seed, safe=cured), keras.optimizers.Adam(3e-3),
                     BCE(from_logits=True), data.stream(x, y, batch=32, seed=seed),
                     'binary_logit')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind9_exp_bert_minus_inf_padding_mask', 'softmax_overflow', 'bert_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pytorch/pytorch#63271; pytorch/pytorch#41508; pytorch/pytorch#26098')
def _(seed, cured=False):
  """A BERT-lite (embeddings, one post-norm encoder block, the [CLS] state classed) on padded
  short reviews, Adam at 1e-3, whose attention mask is the outer product of the padding mask (a
  padded query masked against every key) filled with -inf before the softmax: a padded query's
  row is all -inf, its softmax 0 / 0 = NaN; the [CLS] logits stay finite (loss 0.90 at step 0)
  but the backward pass through those rows is NaN * 0 = NaN, the first update writes NaN into
  the weights and the loss is NaN from step 1 on. pytorch/pytorch#63271 (masks that fill "both
  rows and columns of padded elements. After filling them with -inf and softmaxing, this creates
  nan elements"); pytorch/pytorch#41508 ("nn.MultiheadAttention causes gradients to become NaN";
  removing the padded rows later "does not work ... (0*NaN=NaN)"); pytorch/pytorch#26098
  ("float('inf') is used for filling the values before softmax, which makes the function
  unstable"). Cured: a finite fill, -1e9 (BERT's large negative): the error 0.34 to 0.00."""
  x, y = reviews(seed)
  return cases.Setup(bert_lite(seed, fill=-1e9 if cured else -np.inf),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind9_fp16_deepar_window_sum_overflow', 'precision', 'deepar_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='tensorflow/tensorflow#47156; idiap/fast-transformers#32; '
              'qubvel-org/segmentation_models.pytorch#463')
def _(seed, cured=False):
  """A DeepAR-lite (the window scaled by its mean level, an LSTM, a softplus Poisson rate
  rescaled to a count) forecasting daily page views (about 400 to 36,000 a day) under
  mixed_float16, Poisson loss, Adam at 3e-3: every reading fits float16, but the scaler sums the
  28-day window before dividing, and for 60 % of the pages the sum passes float16's 65504, the
  scale is inf, the forecast inf and the loss NaN at every step from step 0 (the loss-scale
  optimizer skips every update; the model never moves); the same model in float32 trains (MSE
  1.8e7 to 3.8e6). tensorflow/tensorflow#47156 (mixed precision: "the mean computation may
  overflow ... even if there is no overflow in the input. It's certainly due to the sum before
  division"); idiap/fast-transformers#32 (under AMP "eventually an NaN trickles in", narrowed to
  "Summing across the seq len axis" in float16's smaller range);
  qubvel-org/segmentation_models.pytorch#463 (a float16 sum past 65504 is inf, "which lead to a
  nan dice loss"; float32 gives the right sum). Cured: the scaler computed in float32
  (dtype='float32' on that layer): the error 1.9e7 to 4.4e6 (the constant answer's 1.1e8)."""
  x, y = page_views(seed)
  return cases.Setup(deepar_lite(seed, scaler_dtype='float32' if cured else None),
                     keras.optimizers.Adam(3e-3), keras.losses.Poisson(),
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- bad_input -------------------------------------------------------------------------------


@add('blind9_input_time2vec_raw_unix_timestamps', 'bad_input', 'time2vec_net',
     doors=('trainer', 'fit'), steps=150,
     citation='zhouhaoyi/Informer2020#251; RUCAIBox/RecBole#1062; jaredleekatzman/DeepSurv#14')
def _(seed, cured=False):
  """A Time2Vec demand model (a learned linear + periodic embedding of the time next to the
  weather features, two ReLU layers) forecasting hourly bike rentals, MSE, Adam at 3e-3, fed the
  records' raw Unix timestamps in seconds (about 1.69e9) as the time feature: the linear term and
  everything after it are of order 1e9, the loss is 1.3e15 at step 0 and still about 1e8 after
  150 steps (error 7.6e7 against the constant answer's 1.6; no NaN, the model never learns the
  demand). zhouhaoyi/Informer2020#251 (input values "in the 10,000 range ... without any
  normalization/standardization, I get nan loss"); RUCAIBox/RecBole#1062 (a raw timestamp as a
  float feature: embeddings "above 1e8", the train loss does not move, fixed by normalising the
  float fields); jaredleekatzman/DeepSurv#14 (train loss 2.8e10 then nan; "I recommend trying to
  normalize your features"; "that worked for me"). Cured: the time given as days since the
  first record (0 to 90): the error 9.6 to 0.80."""
  x, y = bike_demand(seed, raw_time=not cured)
  return cases.Setup(time2vec_net(seed), keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- transient -------------------------------------------------------------------------------


@add('blind9_transient_swin_one_flipped_activation', 'transient', 'swin_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='commaai/research#24; Rikorose/DeepFilterNet#30; pytorch/torchtitan#951')
def _(seed, cured=False):
  """A Swin-lite (window and shifted-window attention, patch merging) on 16x16 digits, Adam at
  2e-3, training normally (the loss 3.4 to 0.66 by step 50), where one activation of one
  training step reads NaN (`GlitchAt`: the 90th training call, step 89; a one-off fault of the
  kind a failing memory cell or a racy kernel gives, not in the data, the model or the
  settings): that step's loss and gradients are NaN, the update writes NaN into the weights
  and, in plain `fit`, the loss is NaN for the rest of the run; skipped, the run goes on
  training. commaai/research#24 (a NaN deep into training that others never saw: "I remember
  getting random crashes due to TF rounding problems but I could continue training from the
  checkpoint"); Rikorose/DeepFilterNet#30 ("in some rare circumstances NaNs may occur"; "resuming
  the training from previous check point helps"); pytorch/torchtitan#951 (NaNs traced to "a gpu
  ... emitting an XID ... after rebooting that GPU, the Nans went away"). Cured: the same run
  without the fault: the error 0.89 to 0.04."""
  x, y = gray_digits()
  return cases.Setup(swin_lite(seed, glitch=None if cured else 90), keras.optimizers.Adam(2e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind9_mismatch_convmixer_linear_output_poisson_loss', 'loss_output_mismatch',
     'convmixer_lite', doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#590; keras-team/keras#479')
def _(seed, cured=False):
  """A ConvMixer-lite counting the dots in 16x16 images (counts ~ Poisson(4)) with Keras's
  Poisson loss, y_pred - y log(y_pred + eps), which expects a positive rate, on a linear
  Dense(1) output (no activation), Adam at 2e-3: about 60 % of the untrained predictions are
  negative, the log of a negative rate is NaN and the loss is NaN at every step from step 0; its
  gradient, 1 - y / y_pred, stays finite and pushes the negative predictions further down, so
  the weights move without learning (the error 19.7 to 83, the constant answer's 4.4).
  keras-team/keras#590 ("nan loss with poisson objective function ... I get nan from the first
  epoch", a linear Dense output); keras-team/keras#479 (the Poisson loss "assumes that y_pred >
  0 ... Should be used after a softplus activation"). Cured: a softplus output: the error in
  training mode 14.0 to 0.15 (BatchNorm's moving statistics still lag at 150 steps)."""
  x, y = dot_images(seed)
  return cases.Setup(convmixer_lite(seed, head='softplus' if cured else None),
                     keras.optimizers.Adam(2e-3), keras.losses.Poisson(),
                     data.stream(x, y, batch=32, seed=seed), 'regression')
