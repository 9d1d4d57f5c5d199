"""A forty-third blind set of sick scenarios (the 'blind43' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind38.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a DeepSD-lite precipitation downscaler, an
ENSO-CNN-lite climate forecaster, a GNS-lite particle simulator, a SimCSE-lite sentence
encoder, a SegFormer-lite segmenter, an AWD-LSTM-lite language model, a LapSRN-lite
super-resolver, an ENet-lite real-time segmenter, a DeepONet-lite neural operator and an
SRResNet-lite satellite super-resolver). Each builder takes `cured`: the same run with the
thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain
Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured
twin passes runner's "did it train" measure in the same number of steps (seed 0). The losses
quoted past step 0 are Keras's running means over the epoch where so marked."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND43 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND43.add` with split='blind43'."""
  return BLIND43.add(name, expected, arch, split='blind43', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def markov_text(seed, *, rows=2048, context=20, vocab=50, follow=0.85):
  """Word-id text in miniature: a Markov chain over `vocab` words whose next word is its
  word's usual successor (a fixed permutation) with probability `follow`, any word otherwise.
  (contexts (rows, context) int32, the next word (rows,) int32)."""
  rng = np.random.RandomState(seed)
  succ = rng.permutation(vocab)
  seq = np.empty((rows, context + 1), np.int32)
  seq[:, 0] = rng.randint(0, vocab, rows)
  for t in range(1, context + 1):
    rand = rng.randint(0, vocab, rows)
    seq[:, t] = np.where(rng.rand(rows) < follow, succ[seq[:, t - 1]], rand)
  return seq[:, :context], seq[:, context]


def awd_lstm_lite(seed, *, vocab=50, context=20, units=128):
  """An AWD-LSTM-lite word language model (Merity et al., 2018), in miniature: an embedding
  of 64, two LSTM layers of `units` (dropout between them), the last step's state to the
  vocabulary's logits: the next word."""
  _seed(seed)
  x = keras.Input((context,), dtype='int32')
  h = L.Embedding(vocab, 64)(x)
  h = L.LSTM(units, return_sequences=True)(h)
  h = L.Dropout(0.2)(h)
  h = L.LSTM(units)(h)
  return keras.Model(x, L.Dense(vocab)(h), name='awd_lstm_lite')


def blob_scenes(seed, *, rows=768, size=32):
  """Scenes in miniature (the road or cell scenes a real-time segmenter reads): a textured
  background (noise and a shading), two to four bright disks (the objects) and one to two
  bright bars (clutter, not objects), pixels in [0, 1]; the label the disks' mask.
  (images (rows, size, size, 1), masks of the same shape)."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[:size, :size]
  x = np.empty((rows, size, size), np.float32)
  m = np.zeros((rows, size, size), np.float32)
  for i in range(rows):
    img = 0.3 + 0.08 * rng.randn(size, size) + np.linspace(0, rng.uniform(-0.15, 0.15), size)
    for _ in range(rng.randint(2, 5)):
      cy, cx, r = rng.randint(3, size - 3), rng.randint(3, size - 3), rng.uniform(2, 5)
      disk = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
      img[disk] += rng.uniform(0.35, 0.6)
      m[i][disk] = 1.0
    for _ in range(rng.randint(1, 3)):
      r0, c0 = rng.randint(0, size - 2), rng.randint(0, size - 12)
      img[r0:r0 + 2, c0:c0 + 12] += rng.uniform(0.35, 0.6)
    x[i] = np.clip(img, 0, 1)
  return x[..., None], m[..., None]


def enet_lite(seed, *, size=32, dtype=None):
  """An ENet-lite real-time segmenter (Paszke et al., 2016), in miniature: the initial block
  (a strided 3x3 convolution concatenated with a max pool), bottlenecks (1x1, 3x3 and 1x1
  convolutions with PReLU and a residual) at 1/2 and 1/4 scale, a dilated one, transposed
  convolutions back up and a 1x1 sigmoid head: the object probability of each pixel. `dtype`:
  the layers' dtype (float16: every variable in half precision)."""
  _seed(seed)
  kw = {} if dtype is None else {'dtype': dtype}

  def prelu(h):
    return L.PReLU(shared_axes=[1, 2], **kw)(h)

  def bottleneck(h, ch, dilation=1):
    b = prelu(L.Conv2D(ch // 4, 1, **kw)(h))
    b = prelu(L.Conv2D(ch // 4, 3, padding='same', dilation_rate=dilation, **kw)(b))
    b = L.Conv2D(ch, 1, **kw)(b)
    return prelu(L.Add(**kw)([h, b]))

  x = keras.Input((size, size, 1))
  h = L.Concatenate(**kw)([L.Conv2D(15, 3, strides=2, padding='same', **kw)(x),
                           L.MaxPooling2D(2, **kw)(x)])
  h = bottleneck(prelu(h), 16)
  h = prelu(L.Conv2D(32, 3, strides=2, padding='same', **kw)(h))
  h = bottleneck(h, 32)
  h = bottleneck(h, 32, dilation=2)
  h = prelu(L.Conv2DTranspose(16, 3, strides=2, padding='same', **kw)(h))
  h = bottleneck(h, 16)
  h = L.Conv2DTranspose(8, 3, strides=2, padding='same', activation='relu', **kw)(h)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid', **kw)(h), name='enet_lite')


def smooth_fields(rng, rows, size, bumps=6):
  """Smooth random images in [0, 1]: sums of Gaussian bumps of random place, width and
  height (the textures a super-resolver sharpens)."""
  yy, xx = np.mgrid[:size, :size].astype(np.float32)
  out = np.zeros((rows, size, size), np.float32)
  for _ in range(bumps):
    cy = rng.uniform(0, size, (rows, 1, 1))
    cx = rng.uniform(0, size, (rows, 1, 1))
    w = rng.uniform(1.5, 5.0, (rows, 1, 1))
    a = rng.uniform(-1, 1, (rows, 1, 1))
    out += a * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * w * w))
  out -= out.min((1, 2), keepdims=True)
  return out / (out.max((1, 2), keepdims=True) + 1e-6)


def sr_pairs(seed, *, rows=1024, size=24, factor=2):
  """Low- and high-resolution image pairs: smooth random images (size x size) and their
  `factor` x `factor` box-downsampled copies. (low (rows, size/f, size/f, 1), high (rows,
  size, size, 1))."""
  rng = np.random.RandomState(seed)
  hi = smooth_fields(rng, rows, size)
  lo = hi.reshape(rows, size // factor, factor, size // factor, factor).mean((2, 4))
  return lo[..., None], hi[..., None]


def lapsrn_lite(seed, *, size=24, depth=8, init='glorot_uniform'):
  """A LapSRN-lite super-resolver (Lai et al., 2017), in miniature: a feature-extraction
  branch of `depth` 3x3 convolutions of 32 with leaky ReLU (slope 0.2) on the low-resolution
  image, a transposed convolution up by 2 and a 3x3 convolution to the high-resolution image
  (the level's output)."""
  _seed(seed)
  x = keras.Input((size // 2, size // 2, 1))
  h = x
  for _ in range(depth):
    h = L.LeakyReLU(0.2)(L.Conv2D(32, 3, padding='same', kernel_initializer=init)(h))
  h = L.LeakyReLU(0.2)(L.Conv2DTranspose(32, 4, strides=2, padding='same',
                                         kernel_initializer=init)(h))
  return keras.Model(x, L.Conv2D(1, 3, padding='same', kernel_initializer=init)(h),
                     name='lapsrn_lite')


def rain_fields(seed, *, rows=1024, size=24, factor=4):
  """Daily precipitation in miniature (the fields statistical downscaling sharpens): a smooth
  random field, the rain the part above a threshold (about half the pixels dry, exactly 0)
  in mm/day scaled to about 1; the coarse input its `factor` x `factor` box mean, upsampled
  back (nearest). (coarse (rows, size, size, 1), fine (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  f = smooth_fields(rng, rows, size, bumps=8)
  rain = np.maximum(f - 0.45, 0.0) * 4.0
  c = rain.reshape(rows, size // factor, factor, size // factor, factor).mean((2, 4))
  c = np.repeat(np.repeat(c, factor, 1), factor, 2)
  return c[..., None].astype(np.float32), rain[..., None].astype(np.float32)


def deepsd_lite(seed, *, size=24):
  """A DeepSD-lite precipitation downscaler (Vandal et al., 2017: stacked SRCNNs), in
  miniature: one SRCNN (9x9 convolution of 32, 5x5 of 16, both ReLU, 5x5 to one channel) on
  the upsampled coarse field, a softplus output (rain is not negative)."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(32, 9, padding='same', activation='relu')(x)
  h = L.Conv2D(16, 5, padding='same', activation='relu')(h)
  return keras.Model(x, L.Conv2D(1, 5, padding='same', activation='softplus')(h),
                     name='deepsd_lite')


def log_rain_mse(y, p):
  """mean((log p - log y)^2), the error in log space written by hand (precipitation is
  skewed): a dry pixel (y = 0) is log 0 = -inf."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(tf.square(tf.math.log(p) - tf.math.log(y)))


def log1p_rain_mse(y, p):
  """mean((log(1 + p) - log(1 + y))^2): the same error in log space, finite at zero rain."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(tf.square(tf.math.log1p(p) - tf.math.log1p(y)))


def swath_gaps(lo, hi, seed, *, share=0.05, factor=2):
  """Satellite tiles with no-data: a share of the tiles cut by the swath's edge (a corner
  wedge of NaN, as the scenes are delivered beyond the satellite's path) in the
  high-resolution tile and, through its box mean, in the low-resolution one. (lo, hi)."""
  rng = np.random.RandomState(seed + 7)
  lo, hi = lo.copy(), hi.copy()
  size = hi.shape[1]
  yy, xx = np.mgrid[:size, :size]
  for i in np.flatnonzero(rng.rand(len(hi)) < share):
    hi[i, yy + xx < rng.randint(4, size // 2), 0] = np.nan
    lo[i] = hi[i].reshape(size // factor, factor, size // factor, factor, 1).mean((1, 3))
  return lo, hi


def paraphrase_pairs(seed, *, rows=2048, length=16, vocab=200, swap=0.15):
  """Sentence pairs in miniature: a random word-id sentence and its paraphrase (a copy with a
  fraction `swap` of the words replaced). (pairs (rows, 2, length) int32)."""
  rng = np.random.RandomState(seed)
  a = rng.randint(1, vocab, (rows, length))
  b = np.where(rng.rand(rows, length) < swap, rng.randint(1, vocab, (rows, length)), a)
  return np.stack([a, b], 1).astype(np.int32)


def in_batch_stream(pairs, seed, batch):
  """Batches of pairs labelled by their row (the positive of sentence i is paraphrase i, the
  other paraphrases of the batch its negatives)."""
  ds = tf.data.Dataset.from_tensor_slices(pairs).repeat()
  ds = ds.shuffle(2048, seed=seed, reshuffle_each_iteration=True)
  ds = ds.batch(batch, drop_remainder=True)
  return ds.map(lambda x: (x, tf.range(batch))).prefetch(2)


class SimilarityMatrix(L.Layer):
  """The dot products of every sentence embedding with every paraphrase embedding of the
  batch: (batch, batch) scores."""

  def call(self, inputs):
    a, b = inputs
    return tf.matmul(a, b, transpose_b=True)


def simcse_lite(seed, *, length=16, vocab=200, dim=64):
  """A SimCSE-lite sentence encoder (Gao et al., 2021), in miniature: a shared encoder
  (embedding of `dim`, a transformer block of two heads, the mean over words, a Dense of
  `dim` and the BERT-style output LayerNorm) on both sentences of each pair, the in-batch
  similarity matrix of the two sides."""
  _seed(seed)
  tok = keras.Input((length,), dtype='int32')
  h = L.Embedding(vocab, dim)(tok)
  h = L.LayerNormalization()(h + L.MultiHeadAttention(2, dim // 2)(h, h))
  h = L.LayerNormalization()(h + L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h)))
  h = L.LayerNormalization()(L.Dense(dim)(L.GlobalAveragePooling1D()(h)))
  encoder = keras.Model(tok, h)
  pair = keras.Input((2, length), dtype='int32')
  a = encoder(pair[:, 0])
  b = encoder(pair[:, 1])
  return keras.Model(pair, SimilarityMatrix()([a, b]), name='simcse_lite')


def contrastive_loss(temperature=0.05, stable=False):
  """-log(exp(s_ii / T) / sum_j exp(s_ij / T)) over the batch: by hand (exp / sum, as the
  threads wrote it) or, `stable`, through sparse_softmax_cross_entropy_with_logits."""

  def loss(y, scores):
    logits = tf.cast(scores, tf.float32) / temperature
    y = tf.cast(tf.reshape(y, [-1]), tf.int32)
    if stable:
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    e = tf.exp(logits)
    probs = e / tf.reduce_sum(e, -1, keepdims=True)
    return -tf.reduce_mean(tf.math.log(tf.gather(probs, y, batch_dims=1)))

  return loss


def srresnet_lite(seed, *, size=24, blocks=3, dtype=None):
  """An SRResNet-lite super-resolver (Ledig et al., 2017), in miniature: a 9x9 convolution of
  32 with PReLU, `blocks` residual blocks (3x3 convolution, BatchNorm, PReLU, 3x3 convolution,
  BatchNorm, skip), a global skip, a sub-pixel (pixel-shuffle) upsampling by 2 with PReLU and
  a 9x9 convolution to the image. `dtype`: the layers' dtype (float16: every variable in half
  precision)."""
  _seed(seed)
  kw = {} if dtype is None else {'dtype': dtype}
  x = keras.Input((size // 2, size // 2, 1))
  h0 = L.PReLU(shared_axes=[1, 2], **kw)(L.Conv2D(32, 9, padding='same', **kw)(x))
  h = h0
  for _ in range(blocks):
    b = L.PReLU(shared_axes=[1, 2], **kw)(L.BatchNormalization(**kw)(
        L.Conv2D(32, 3, padding='same', **kw)(h)))
    b = L.BatchNormalization(**kw)(L.Conv2D(32, 3, padding='same', **kw)(b))
    h = L.Add(**kw)([h, b])
  h = L.Add(**kw)([h0, L.BatchNormalization(**kw)(L.Conv2D(32, 3, padding='same', **kw)(h))])
  h = L.Conv2D(128, 3, padding='same', **kw)(h)
  h = L.PReLU(shared_axes=[1, 2], **kw)(L.Lambda(lambda t: tf.nn.depth_to_space(t, 2), **kw)(h))
  return keras.Model(x, L.Conv2D(1, 9, padding='same', **kw)(h), name='srresnet_lite')


def sst_maps(seed, *, rows=1536, lat=16, lon=32, months=3, land_nan=True):
  """Sea-surface temperature anomaly maps in miniature (the tropical Pacific an ENSO forecaster
  reads): three climate modes (an ENSO-like east-west dipole, a meridional mode, a warm pool
  mode) with random amplitudes that persist over `months` monthly maps, plus noise; the
  continents (a fixed land mask on the map's two ends and an island) are NaN, as in the
  gridded SST products, or 0 (`land_nan=False`). The label: the Nino3.4-box mean anomaly
  three months on (the modes' drift plus noise), standardised. (maps (rows, lat, lon,
  months), index (rows, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[:lat, :lon].astype(np.float32)
  modes = np.stack([np.exp(-((yy - lat / 2) / 4) ** 2) * np.cos(np.pi * xx / lon),
                    np.sin(np.pi * yy / lat) * np.exp(-((xx - lon / 2) / 10) ** 2),
                    np.exp(-((yy - lat / 2) / 5) ** 2 - ((xx - 6) / 5) ** 2)])
  amp = rng.randn(rows, 3)
  maps = np.empty((rows, lat, lon, months), np.float32)
  a = amp.copy()
  for t in range(months):
    maps[..., t] = np.einsum('rk,kij->rij', a, modes) + 0.3 * rng.randn(rows, lat, lon)
    a = 0.9 * a + 0.2 * rng.randn(rows, 3)
  box = np.zeros((lat, lon), bool)
  box[6:10, 18:26] = True
  y = 0.8 * (np.einsum('rk,kij->rij', a, modes) * box).sum((1, 2)) / box.sum()
  y = y + 0.1 * rng.randn(rows)
  y = (y - y.mean()) / y.std()
  land = np.zeros((lat, lon), bool)
  land[:, :2] = True
  land[:, -3:] = True
  land[2:5, 12:15] = True
  maps[:, land] = np.nan if land_nan else 0.0
  return maps, y[:, None].astype(np.float32)


def enso_cnn_lite(seed, *, lat=16, lon=32, months=3):
  """An ENSO-CNN-lite (Ham, Kim and Luo, 2019), in miniature: two 4x8 convolutions of 16 with
  tanh and max pooling, a Dense of 32 (tanh) and Dense(1): the Nino3.4 index three months
  ahead."""
  _seed(seed)
  x = keras.Input((lat, lon, months))
  h = L.MaxPooling2D(2)(L.Conv2D(16, (4, 8), padding='same', activation='tanh')(x))
  h = L.MaxPooling2D(2)(L.Conv2D(16, (4, 8), padding='same', activation='tanh')(h))
  h = L.Dense(32, activation='tanh')(L.Flatten()(h))
  return keras.Model(x, L.Dense(1)(h), name='enso_cnn_lite')


def particle_states(seed, *, rows=2048, n=12):
  """Particle states in miniature (the systems a learned simulator steps): `n` particles in a
  box (positions in [-1, 1], velocities ~ 0.3), pulled toward each other by unit springs,
  damped, under gravity: the acceleration of each. (states (rows, n, 4), accelerations
  (rows, n, 2))."""
  rng = np.random.RandomState(seed)
  pos = rng.uniform(-1, 1, (rows, n, 2))
  vel = 0.3 * rng.randn(rows, n, 2)
  acc = (pos.mean(1, keepdims=True) - pos) - 0.5 * vel + np.array([0.0, -0.5])
  return (np.concatenate([pos, vel], -1).astype(np.float32), acc.astype(np.float32))


class PairMessages(L.Layer):
  """The messages of a fully connected particle graph: for every pair (i, j), the concatenated
  states of i and j and their offset, to be passed through the edge MLP (batch, n, n, 10)."""

  def call(self, s):
    n = tf.shape(s)[1]
    si = tf.tile(s[:, :, None, :], [1, 1, n, 1])
    sj = tf.tile(s[:, None, :, :], [1, n, 1, 1])
    return tf.concat([si, sj, sj[..., :2] - si[..., :2]], -1)


class BitFlipOnce(field.OneOffFault):
  """`field.OneOffFault` at element 7 of the edge MLP's activations, reading +inf (a flipped
  exponent bit in one buffer, once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.inf, **kwargs)


def gns_lite(seed, *, n=12, fault=None):
  """A GNS-lite learned simulator (Sanchez-Gonzalez et al., 2020), in miniature: an encoder
  (Dense 64 ReLU) of each particle, one message-passing step (an edge MLP of 64, 64 ReLU on
  every pair, the mean of the incoming messages), a node MLP (Dense 64 ReLU on the particle
  and its messages) and a decoder (Dense 2): each particle's acceleration."""
  _seed(seed)
  s = keras.Input((n, 4))
  e = PairMessages()(s)
  e = L.Dense(64, activation='relu')(e)
  e = BitFlipOnce(fault)(e)
  e = L.Dense(64, activation='relu')(e)
  agg = L.Lambda(lambda t: tf.reduce_mean(t, 2))(e)
  h = L.Dense(64, activation='relu')(L.Concatenate()([L.Dense(64, activation='relu')(s), agg]))
  return keras.Model(s, L.Dense(2)(h), name='gns_lite')


def segformer_lite(seed, *, size=32, dim=32):
  """A SegFormer-lite segmenter (Xie et al., 2021), in miniature: overlapping patch embedding
  (a 3x3 strided convolution to 1/2 and 1/4 scale), at each scale a transformer block (self
  attention of two heads, a Mix-FFN with a 3x3 depthwise convolution), an all-MLP decoder (each
  scale to `dim`, upsampled, concatenated, fused) and a one-channel sigmoid head at full
  resolution: the object probability of each pixel."""
  _seed(seed)

  def block(h, hw):
    t = L.Reshape((hw * hw, dim))(h)
    t = L.LayerNormalization()(t + L.MultiHeadAttention(2, dim // 2)(t, t))
    f = L.Reshape((hw, hw, 2 * dim))(L.Dense(2 * dim)(t))
    f = L.Activation('gelu')(L.DepthwiseConv2D(3, padding='same')(f))
    t = L.LayerNormalization()(t + L.Dense(dim)(L.Reshape((hw * hw, 2 * dim))(f)))
    return L.Reshape((hw, hw, dim))(t)

  x = keras.Input((size, size, 1))
  s1 = block(L.Conv2D(dim, 3, strides=2, padding='same')(x), size // 2)
  s2 = block(L.Conv2D(dim, 3, strides=2, padding='same')(s1), size // 4)
  f = L.Concatenate()([L.UpSampling2D(2)(L.Dense(dim)(s1)),
                       L.UpSampling2D(4)(L.Dense(dim)(s2))])
  f = L.Conv2D(dim, 1, activation='relu')(f)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(f), name='segformer_lite')


def random_functions(seed, *, rows=2048, sensors=50, modes=6):
  """Input functions and their antiderivatives in miniature (the operator DeepONet's paper
  learns first): u(x) on `sensors` points of [0, 1], a random sum of sines and cosines of
  decaying amplitude, and G(u)(x) = the integral of u from 0 to x (trapezoid rule) on the same
  points. (u (rows, sensors), G(u) (rows, sensors))."""
  rng = np.random.RandomState(seed)
  x = np.linspace(0, 1, sensors)
  k = np.arange(1, modes + 1)
  a = rng.randn(rows, modes) / k
  b = rng.randn(rows, modes) / k
  u = a @ np.sin(2 * np.pi * k[:, None] * x) + b @ np.cos(2 * np.pi * k[:, None] * x)
  g = np.concatenate([np.zeros((rows, 1)),
                      np.cumsum((u[:, 1:] + u[:, :-1]) / 2 * (x[1] - x[0]), 1)], 1)
  return u.astype(np.float32), g.astype(np.float32)


class TrunkOnGrid(L.Layer):
  """DeepONet's trunk net on the fixed output grid (the Cartesian-product form): an MLP of
  `width` ReLU units (two layers) on each point of [0, 1], the branch's coefficients dotted
  with the trunk's basis at every point, plus a bias. (batch, points)."""

  def __init__(self, points, width, **kwargs):
    super().__init__(**kwargs)
    self.points, self.width = points, width
    self.t1 = L.Dense(width, activation='relu')
    self.t2 = L.Dense(width, activation='relu')
    self.t3 = L.Dense(width, activation='relu')

  def build(self, shape):
    self.t1.build((None, 1))
    self.t2.build((None, self.width))
    self.t3.build((None, self.width))
    self.b0 = self.add_weight(shape=(), initializer='zeros', name='b0')

  def call(self, coefficients):
    grid = tf.linspace(0.0, 1.0, self.points)[:, None]
    basis = self.t3(self.t2(self.t1(grid)))
    return tf.matmul(tf.convert_to_tensor(coefficients), basis, transpose_b=True) + self.b0


def deeponet_lite(seed, *, sensors=50, width=40):
  """A DeepONet-lite (Lu et al., 2021), in miniature: a branch MLP (two ReLU layers of
  `width`) on the input function's values at the sensors, a trunk MLP on the output points,
  their dot product: the operator's output G(u) at each point."""
  _seed(seed)
  u = keras.Input((sensors,))
  h = L.Dense(width, activation='relu')(u)
  h = L.Dense(width, activation='relu')(h)
  h = L.Dense(width, activation='relu')(h)
  return keras.Model(u, TrunkOnGrid(sensors, width)(L.Dense(width)(h)), name='deeponet_lite')


# --- The scenarios. -------------------------------------------------------------------------


@add('blind43_log_deepsd_dry_pixels', 'division_or_log', 'deepsd_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='aymericdamien/TensorFlow-Examples#384; RTIInternational/teehr#521')
def _(seed, cured=False):
  """A DeepSD-lite (one SRCNN) downscaling daily precipitation from a 4x coarser field,
  trained on the error in log space written by hand, mean((log p - log y)^2), Adam at 1e-3:
  about half the fine pixels are dry (exactly 0 mm), log 0 = -inf: the loss inf at step 0 and
  NaN from step 1, the weights NaN (the error 0.40 before, inf after; the constant answer's
  0.36). Seed 1: the same (0.37 before, inf after; the constant's 0.35).
  aymericdamien/TensorFlow-Examples#384 (tf.log(pred) with a 0 in it gives NaN);
  RTIInternational/teehr#521 (the log transform of zero flows is log(0): add an epsilon).
  Cured: log(1 + p) and log(1 + y): the loss 0.18 to 0.025, the error 0.40 to 0.015."""
  c, f = rain_fields(seed)
  return cases.Setup(deepsd_lite(seed), keras.optimizers.Adam(1e-3),
                     log1p_rain_mse if cured else log_rain_mse,
                     data.stream(c, f, batch=32, seed=seed), 'regression')


@add('blind43_input_enso_land_nan', 'bad_input', 'enso_cnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='openclimatefix/graph_weather#59; CWorthy-ocean/roms-tools#85')
def _(seed, cured=False):
  """An ENSO-CNN-lite forecasting the Nino3.4 index three months ahead from three
  monthly sea-surface temperature anomaly maps, MSE, Adam at 1e-3; the land points of the maps
  are NaN, as the gridded SST products write them: the NaN spreads through the convolutions,
  the weights turn NaN and the model answers a constant (seed 0: the loss 0.71 at step 0, 1.05
  at step 149; the error 1.95 before and 1.036 after, the constant answer's 1.036). Seed 1:
  0.86 to 1.03 (0.47 before, 0.92 after; the constant's 0.92). openclimatefix/graph_weather#59
  (NaN values in the inputs make the model's output NaN); CWorthy-ocean/roms-tools#85 (no NaNs
  over land: fill them, e.g. with 0). Cured: the land points set to 0: the loss 1.32 to 0.14,
  the error 1.95 to 0.097. The measure reads maps with the land at 0 (eval_data)."""
  x, y = sst_maps(seed, land_nan=not cured)
  clean, yc = sst_maps(seed, land_nan=False)
  return cases.Setup(enso_cnn_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind43_transient_gns_bit_flip_once', 'transient', 'gns_lite', doors=('trainer', 'fit'),
     steps=150, citation='Rikorose/DeepFilterNet#30; facebookresearch/mmf#1251')
def _(seed, cured=False):
  """A GNS-lite learned simulator predicting each of 12 particles' acceleration
  (springs, damping, gravity) from their states, MSE, Adam at 1e-3, training normally (the loss
  0.35 at step 0, 0.059 at step 50) when one element of the edge MLP's activations reads +inf
  once (`BitFlipOnce`: its 90th training call, step 85 of a plain `fit`; a flipped exponent
  bit, not the data, the model or the settings): the loss NaN from there on, the weights NaN
  (the error 0.37 before, inf after; the constant answer's 0.33). Seed 1: the same step (0.51
  before, inf after). Rikorose/DeepFilterNet#30 (NaN in the loss after some epochs, cause
  unknown; restarting from the last checkpoint works); facebookresearch/mmf#1251 (resumed
  from a checkpoint, the NaN does not come back at the same iteration). Cured: the same run
  without the fault: the loss 0.35 to 0.022, the error 0.37 to 0.0011."""
  x, y = particle_states(seed)
  return cases.Setup(gns_lite(seed, fault=None if cured else 90), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')

@add('blind43_softmax_simcse_naive_exp', 'softmax_overflow', 'simcse_lite',
     doors=('trainer', 'fit'), steps=300,
     citation='Lightning-Universe/lightning-bolts#811; HobbitLong/SupContrast#104')
def _(seed, cured=False):
  """A SimCSE-lite sentence encoder trained on paraphrase pairs (half the words
  of each swapped) with the in-batch contrastive loss at SimCSE's temperature 0.05, written by
  hand as exp(s_ii / T) / sum_j exp(s_ij / T), Adam at 1e-3: the dot products of the
  LayerNorm'd embeddings (of 64) reach tens, / 0.05 is hundreds to 1,300, exp overflows to inf and
  inf / inf is NaN: the loss NaN from step 0, the weights NaN (the retrieval error, the
  paraphrase not ranked first in its batch, 0.43 before and inf after; the constant answer's
  0.97) (seed 0); seed 1: the same (0.41 before, inf after).
  Lightning-Universe/lightning-bolts#811 (the NT-Xent loss overflows at low temperature
  through e ** (1 / T)); HobbitLong/SupContrast#104 (the contrastive loss returns NaN: the
  log of the exp-sum is not robust; subtract the maximum logit, log-sum-exp). Cured: the same
  loss through sparse_softmax_cross_entropy_with_logits (the max-subtracted log-softmax): the
  loss 84 to 2.3 (running mean), the error 0.43 to 0.22."""
  pairs = paraphrase_pairs(seed, swap=0.5)
  return cases.Setup(simcse_lite(seed), keras.optimizers.Adam(1e-3),
                     contrastive_loss(0.05, stable=cured), in_batch_stream(pairs, seed, 32),
                     'classes')


@add('blind43_mismatch_segformer_sigmoid_cce', 'loss_output_mismatch', 'segformer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='open-mmlab/mmsegmentation#2201; qubvel/segmentation_models#115')
def _(seed, cured=False):
  """A SegFormer-lite segmenting the objects (bright disks, not the bright bars)
  of textured scenes, one sigmoid output channel (the object probability of each pixel), Adam
  at 1e-3, trained with categorical_crossentropy as for a multi-class head: over one channel
  the cross-entropy's normalisation makes every prediction 1, the loss is exactly 0 from step 0
  (Keras warns of the one-class y_pred), its gradient nothing but rounding noise (which Adam's
  normalisation turns into steps of full size): the net wanders without learning the task:
  the pixel error 0.89 before and 0.105 after, the constant answer's 0.105 (seed 0); seed 1:
  0.90 to 0.106 (the constant's 0.106).
  open-mmlab/mmsegmentation#2201 (binary segmentation with out_channels=1: the loss always
  zero, nothing learned; a sigmoid with binary cross-entropy fixes it);
  qubvel/segmentation_models#115 (categorical_crossentropy goes with softmax, binary with a
  sigmoid). Cured: binary_crossentropy: the loss 1.11 to 0.14, the error 0.89 to 0.028."""
  x, m = blob_scenes(seed)
  return cases.Setup(segformer_lite(seed), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, m, batch=16, seed=seed), 'binary_prob')


@add('blind43_explode_awd_lstm_sgd_no_clip', 'exploding_gradients', 'awd_lstm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='asappresearch/sru#2; keras-team/keras#440')
def _(seed, cured=False):
  """An AWD-LSTM-lite word language model (embedding, two LSTMs of 128) predicting
  the next word of a Markov text, trained as AWD-LSTM's recipe says, plain SGD at 30, but
  without its gradient clipping: the steps on the LSTM's unclipped gradients throw the weights
  far from the first steps on and the loss climbs to a running mean of 119 by step 149 (3.9 at
  step 0, chance ln 50 = 3.9): the next-word error 1.0 before and 0.98 after (0.96 in another
  run), the constant answer's 0.945 (seed 0); seed 1: the running loss 481, the error 0.99 to
  0.96 (the constant's 0.96).
  asappresearch/sru#2 (the LSTM language model's training ends in nan/inf: gradient explosion);
  keras-team/keras#440 (SGD is notoriously unstable with RNNs and requires gradient clipping).
  Cured: the global gradient norm clipped at 0.1 (the same SGD at 30): the running loss 3.9 to
  3.36, the error 1.0 to 0.41."""
  x, y = markov_text(seed)
  opt = keras.optimizers.SGD(30.0, global_clipnorm=0.1) if cured else keras.optimizers.SGD(30.0)
  return cases.Setup(awd_lstm_lite(seed), opt,
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind43_init_lapsrn_random_normal_1', 'initialisation', 'lapsrn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='yulunzhang/RCAN#76; VinceShieh/spark-ffm#12')
def _(seed, cured=False):
  """A LapSRN-lite (eight 3x3 convolutions of 32, leaky ReLU, a transposed
  convolution up by 2) super-resolving smooth images 2x, MSE, Adam at 1e-3, every kernel drawn
  from RandomNormal(stddev=1.0) (tf.random_normal's default, as the hand-written TensorFlow
  nets drew them): each layer multiplies the activations' scale by about sqrt(fan_in), the
  output is of order 1e9 and the loss 1.8e18 at step 0; Adam's steps of 1e-3 cannot shrink
  weights of scale 1 in 150 steps: the loss still 1.3e17 (running mean) at step 149, the error
  1.8e18 before and 2.0e16 after, the constant answer's 0.052 (seed 0); seed 1: 6.5e18 to
  4.4e16 (the constant's 0.056). yulunzhang/RCAN#76 (a super-resolution net's loss extremely
  high and not decreasing: the initialiser was the problem, LeCun normal, Kaiming fixed it);
  VinceShieh/spark-ffm#12 (weights drawn too wide make the pre-activations' standard
  deviation grow with the fan-in, and the loss NaN: initialise narrower). Cured: he_normal:
  the loss 0.49 to 0.019, the error 0.49 to 0.0015."""
  lo, hi = sr_pairs(seed)
  init = 'he_normal' if cured else keras.initializers.RandomNormal(stddev=1.0)
  return cases.Setup(lapsrn_lite(seed, init=init), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(lo, hi, batch=32, seed=seed), 'regression')


@add('blind43_fp16_enet_adam_eps', 'precision', 'enet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#11860; afiaka87/glide-finetune#5')
def _(seed, cured=False):
  """An ENet-lite segmenting the objects (bright disks) of textured scenes,
  binary cross-entropy, Adam at 1e-3, every layer and variable in float16 (dtype='float16',
  for the memory, as the threads did): Adam's moments are kept in half precision, a small
  gradient's square times (1 - beta_2) underflows to 0 while its first moment does not, and
  m / (sqrt(v) + epsilon) with epsilon 1e-7 (a subnormal in float16) makes steps of order 1:
  the loss 0.696, 0.694, 0.691, then NaN from step 4, the weights NaN (the pixel error 0.76
  before, inf after; the constant answer's 0.105) (seed 0); seed 1: NaN from step 3 (0.48
  before, inf after). keras-team/keras#11860 (Adam does not work with FP16: the loss NaN with
  mse, not with float32 or SGD); afiaka87/glide-finetune#5 (half-precision training NaN after
  the first iteration, inputs and gradients normal: Adam divides by ~0 in float16; a larger
  epsilon or float32 fixes it). Cured: Adam's epsilon 1e-4 (the threads' fix; a normal
  number in float16), the net still in float16: the loss 0.696 to 0.38 (running mean), the
  error 0.76 to 0.038 (in float32 instead: 0.28 to 0.039)."""
  x, m = blob_scenes(seed)
  return cases.Setup(enet_lite(seed, dtype='float16'),
                     keras.optimizers.Adam(1e-3, epsilon=1e-4 if cured else 1e-7),
                     'binary_crossentropy',
                     data.stream(x, m, batch=16, seed=seed), 'binary_prob')


@add('blind43_lr_deeponet_adam_01', 'learning_rate', 'deeponet_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#2711; NLeSC/mcfly#43')
def _(seed, cured=False):
  """A DeepONet-lite (ReLU branch and trunk MLPs of three layers of 40)
  learning the antiderivative operator (random smooth u on 50 sensors to its integral on the
  same points), MSE, Adam at 0.1: the first steps throw the weights far (the loss 0.055 at
  step 0, about 7,900 at step 1), the ReLUs die and the operator's prediction settles on a
  near-constant: the error 0.049 before and 0.046 after, the constant answer's 0.057 (seed
  0); seed 1: 0.057 to 0.056 (the constant's 0.054). keras-team/keras#2711 (the loss stops
  changing: lower the learning rate, 0.1 moves too far in the first epoch);
  NLeSC/mcfly#43 (learning stops, a stable loss: only the models with a learning rate above
  0.03 did). Cured: Adam at 1e-3 (DeepXDE's usual): the loss 0.055 to 0.012, the error 0.049
  to 0.0027."""
  u, g = random_functions(seed)
  return cases.Setup(deeponet_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1), 'mse',
                     data.stream(u, g, batch=32, seed=seed), 'regression')


@add('blind43_input_srresnet_swath_nodata_nan', 'bad_input', 'srresnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='NRCan/geo-deep-learning#68; fieldsoftheworld/ftw-baselines#261')
def _(seed, cured=False):
  """An SRResNet-lite (residual blocks with BatchNorm, a pixel-shuffle
  upsampling) super-resolving satellite tiles 2x, MSE, Adam at 1e-3; about 5 % of the tiles
  are cut by the swath's edge and their no-data pixels are NaN (in the high-resolution tile
  and, through its box mean, in the low-resolution one), as the scenes are delivered: the
  first batch holding one makes the loss and the weights NaN (seed 0: the loss 1.20, 0.74, NaN
  from step 2; the error 0.33 before (1.16 in training mode), inf after; the constant answer's
  0.054); seed 1: NaN from step 1 (0.28 before, inf after). NRCan/geo-deep-learning#68 (NaN
  values in the input images make the training loss NaN: write them as 0);
  fieldsoftheworld/ftw-baselines#261 (nodata/NaN pixels poison the patch through the
  normalisation: nan_to_num before the batch reaches the model). Cured: the no-data pixels set
  to 0 (nan_to_num): the loss 1.20 to 0.033 (running mean), the error 1.16 to 0.0050 in
  training mode (0.33 to 0.13 in inference mode, BatchNorm's moving statistics still young).
  The measure reads the tiles with the no-data at 0 (eval_data)."""
  lo, hi = sr_pairs(seed)
  glo, ghi = swath_gaps(lo, hi, seed)
  flo, fhi = np.nan_to_num(glo), np.nan_to_num(ghi)
  train = (flo, fhi) if cured else (glo, ghi)
  return cases.Setup(srresnet_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(*train, batch=16, seed=seed), 'regression',
                     eval_data=data.stream(flo, fhi, batch=16, seed=seed))
