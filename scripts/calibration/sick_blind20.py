"""A twentieth blind set of sick scenarios (the 'blind20' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind19.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (an LSTMP-lite, an FNO-lite, a PNN-lite, an
ArcFace-lite, an MQ-RNN-lite, a PointNet++-lite, an SSD-lite, a DeepFilterNet-lite, a
tabular-ResNet-lite and a GhostVLAD-lite). Each builder takes `cured`: the same run with
the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with
plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the
cured twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND20 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND20.add` with split='blind20'."""
  return BLIND20.add(name, expected, arch, split='blind20', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def long_walks(seed, *, rows=2048, steps=160, scale=0.5):
  """Long sensor drifts in miniature: random walks of `steps` steps (increments N(0, `scale`),
  no normalisation, as logged), the label the walk's mean over the window. (x (rows, steps,
  1), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = np.cumsum(scale * rng.randn(rows, steps, 1), axis=1)
  return x.astype(np.float32), x.mean(axis=1).astype(np.float32)


class LSTMPCell(L.Layer):
  """An LSTM cell with a recurrent projection (Sak et al., 2014): the gates read the input and
  the projected output r_{t-1} (the forget gate's bias +1); c_t = f c_{t-1} + i g, r_t = (o
  tanh(c_t)) P: the state (r, c), the output r (`proj` wide)."""

  def __init__(self, units, proj, **kwargs):
    super().__init__(**kwargs)
    self.units, self.proj = units, proj
    self.state_size = [proj, units]
    self.output_size = proj

  def build(self, shape):
    self.kernel = self.add_weight(shape=(shape[-1], 4 * self.units), name='kernel',
                                  initializer='glorot_uniform')
    self.recurrent = self.add_weight(shape=(self.proj, 4 * self.units), name='recurrent',
                                     initializer='orthogonal')
    self.bias = self.add_weight(shape=(4 * self.units,), name='bias', initializer='zeros')
    self.projection = self.add_weight(shape=(self.units, self.proj), name='projection',
                                      initializer='glorot_uniform')

  def call(self, x, states):
    r, c = states
    i, f, g, o = tf.split(tf.matmul(x, self.kernel) + tf.matmul(r, self.recurrent) + self.bias,
                          4, axis=-1)
    c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(g)
    r = tf.matmul(tf.sigmoid(o) * tf.tanh(c), self.projection)
    return r, [r, c]


def lstmp_lite(seed, *, steps=160, units=64, proj=16):
  """An LSTMP-lite: two `LSTMPCell` layers (`units` cells, projected to `proj`), the last
  projected output, Dense(1): the mean."""
  _seed(seed)
  x = keras.Input((steps, 1))
  h = L.RNN(LSTMPCell(units, proj), return_sequences=True)(x)
  h = L.RNN(LSTMPCell(units, proj))(h)
  return keras.Model(x, L.Dense(1)(h), name='lstmp_lite')


def heat_operator(seed, *, rows=2048, grid=64, modes=8, nu_t=0.004):
  """The heat equation's solution operator in miniature (a neural-operator benchmark): an
  initial temperature profile u0 on a periodic grid of `grid` points (a random Fourier series
  of `modes` modes, amplitude 1/k), the profile after time t (each mode damped by
  exp(-nu t (2 pi k)^2)). (x (rows, grid, 2): u0 and the coordinate, y (rows, grid, 1))."""
  rng = np.random.RandomState(seed)
  s = np.arange(grid) / grid
  k = np.arange(1, modes + 1)
  a = rng.randn(rows, modes) / k
  phase = rng.uniform(0, 2 * np.pi, (rows, modes))
  waves = np.sin(2 * np.pi * k[None, :, None] * s[None, None, :] + phase[..., None])
  u0 = np.einsum('rk,rkg->rg', a, waves)
  ut = np.einsum('rk,rkg->rg', a * np.exp(-nu_t * (2 * np.pi * k) ** 2), waves)
  x = np.stack([u0, np.broadcast_to(s, u0.shape)], -1)
  return x.astype(np.float32), ut[..., None].astype(np.float32)


class SpectralConv1D(L.Layer):
  """The Fourier layer's global convolution (Li et al., 2021): the real FFT of each channel
  along the grid, the lowest `modes` modes mixed by learned complex weights (channels x
  channels per mode), the rest dropped, the inverse FFT."""

  def __init__(self, width, modes, **kwargs):
    super().__init__(**kwargs)
    self.width, self.modes = width, modes

  def build(self, shape):
    scale = 1.0 / (self.width * self.width)
    init = keras.initializers.RandomUniform(0.0, scale)
    self.w_re = self.add_weight(shape=(self.width, self.width, self.modes), initializer=init,
                                name='w_re')
    self.w_im = self.add_weight(shape=(self.width, self.width, self.modes), initializer=init,
                                name='w_im')

  def call(self, x):
    n = tf.shape(x)[1]
    f = tf.signal.rfft(tf.transpose(x, [0, 2, 1]))[..., :self.modes]  # (b, c, modes)
    w = tf.complex(self.w_re, self.w_im)
    g = tf.einsum('bim,iom->bom', f, w)
    g = tf.pad(g, [[0, 0], [0, 0], [0, n // 2 + 1 - self.modes]])
    return tf.transpose(tf.signal.irfft(g, fft_length=[n]), [0, 2, 1])


def fno_lite(seed, *, grid=64, width=32, modes=12, layers=3):
  """An FNO-lite (1-D): a pointwise lift to `width` channels, `layers` Fourier layers (a
  `SpectralConv1D` plus a pointwise Dense, GELU), a pointwise Dense(64) + GELU, Dense(1): the
  profile at time t."""
  _seed(seed)
  x = keras.Input((grid, 2))
  h = L.Dense(width)(x)
  for i in range(layers):
    h = SpectralConv1D(width, modes)(h) + L.Dense(width)(h)
    if i < layers - 1:
      h = L.Activation('gelu')(h)
  h = L.Dense(64, activation='gelu')(h)
  return keras.Model(x, L.Dense(1)(h), name='fno_lite')


def ad_clicks(seed, *, rows=8192, fields=8, values=20, latent=4, rate=0.3, noise=0.05):
  """Ad clicks in miniature (a CTR log): `fields` categorical fields of `values` values each
  (ids offset per field into one vocabulary), each value a hidden latent vector; the click
  decided by the sum of the fields' pairwise latent interactions (weighted per field pair) and
  a bias per value, the top `rate` of the scores clicked, a fraction `noise` of the labels
  flipped. (ids (rows, fields), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  lat = rng.randn(fields, values, latent)
  bias = 1.5 * rng.randn(fields, values)
  pair = 0.5 * rng.randn(fields, fields) * (rng.rand(fields, fields) < 0.5)
  ids = rng.randint(0, values, (rows, fields))
  v = lat[np.arange(fields), ids]  # (rows, fields, latent)
  score = np.einsum('rfl,rgl,fg->r', v, v, np.triu(pair, 1)) + bias[np.arange(fields),
                                                                     ids].sum(1)
  y = score > np.quantile(score, 1 - rate)
  y ^= rng.rand(rows) < noise
  return (ids + values * np.arange(fields)).astype(np.int32), y[:, None].astype(np.float32)


class InnerProducts(L.Layer):
  """The PNN's inner-product layer (Qu et al., 2016): the inner products of every pair of field
  embeddings (the upper triangle), flattened."""

  def call(self, e):
    fields = e.shape[1]
    p = tf.einsum('bfd,bgd->bfg', e, e)
    rows, cols = np.triu_indices(fields, 1)
    return tf.gather(tf.reshape(p, [-1, fields * fields]), rows * fields + cols, axis=1)


def pnn_lite(seed, *, fields=8, vocab=160, dim=8, uniform01=True):
  """A PNN-lite (inner-product PNN): one embedding (`dim`, Keras's default initialiser) per
  field, the flattened embeddings beside their pairwise inner products, Dense(128) + ReLU,
  Dense(64) + ReLU, Dense(1, sigmoid): the click probability. `uniform01`: every Dense kernel
  initialised 'uniform' as tf.keras 1.10 resolved the string, U[0, 1) (else Keras's default,
  Glorot-uniform)."""
  _seed(seed)
  ini = keras.initializers.RandomUniform(0.0, 1.0) if uniform01 else 'glorot_uniform'
  ids = keras.Input((fields,), dtype='int32')
  e = L.Embedding(vocab, dim)(ids)
  h = L.Concatenate()([L.Flatten()(e), InnerProducts()(e)])
  h = L.Dense(128, activation='relu', kernel_initializer=ini)(h)
  h = L.Dense(64, activation='relu', kernel_initializer=ini)(h)
  return keras.Model(ids, L.Dense(1, activation='sigmoid', kernel_initializer=ini)(h),
                     name='pnn_lite')


class ArcMargin(L.Layer):
  """ArcFace's additive angular margin (Deng et al., 2019): cos(theta) between the normalised
  embedding and each class's normalised weight; for the true class cos(theta + m) = cos(theta)
  cos(m) - sin(theta) sin(m), sin(theta) = sqrt(1 - cos^2(theta)) as the Keras port writes it
  (`clip`: 1 - cos^2 clipped below at 1e-7, the thread's fix); all scaled by `s`: the logits."""

  def __init__(self, classes, s=30.0, m=0.5, clip=False, **kwargs):
    super().__init__(**kwargs)
    self.classes, self.s, self.m, self.clip = classes, s, m, clip

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[-1], self.classes), name='w',
                             initializer='glorot_uniform')

  def call(self, emb, labels):
    cos = tf.matmul(tf.math.l2_normalize(emb, axis=1), tf.math.l2_normalize(self.w, axis=0))
    sin2 = 1.0 - tf.square(cos)
    if self.clip:
      sin2 = tf.clip_by_value(sin2, 1e-7, 1.0)
    phi = cos * np.cos(self.m) - tf.sqrt(sin2) * np.sin(self.m)
    onehot = tf.one_hot(tf.reshape(tf.cast(labels, tf.int32), [-1]), self.classes)
    return self.s * (onehot * phi + (1.0 - onehot) * cos)


def five_faces(*, size=16, identities=5):
  """Face identification in miniature: the digits 0 to 4 as five identities (16x16 grey).
  (x (rows, 16, 16, 1), identities)."""
  x, y = data.digits(size=size, rgb=False)
  keep = y < identities
  return x[keep], y[keep]


def arcface_lite(seed, *, size=16, dim=2, classes=5, s=30.0, clip=False):
  """An ArcFace-lite: a small face-recognition-style CNN (two 3x3 convolutions of 32 and 64 with
  PReLU and max-pooling, global average pooling, a BatchNorm'd Dense(`dim`) embedding: 2-D, the
  LeNet++-style features users plot) and `ArcMargin(s, m=0.5, clip)`, which reads the label as
  a second input: the class logits."""
  _seed(seed)
  images, labels = keras.Input((size, size, 1)), keras.Input((), dtype='int32')
  h = images
  for width in (32, 64):
    h = L.MaxPooling2D()(L.PReLU(shared_axes=[1, 2])(L.Conv2D(width, 3, padding='same')(h)))
  emb = L.BatchNormalization()(L.Dense(dim)(L.GlobalAveragePooling2D()(h)))
  return keras.Model([images, labels], ArcMargin(classes, s=s, clip=clip)(emb, labels),
                     name='arcface_lite')


def page_views(seed, *, rows=4096, history=56, horizon=14, dead=0.01):
  """Wikipedia page views in miniature (the web-traffic forecasting competition's data), as
  log1p of the daily views: most pages a level (log-uniform, 10 to 5,000 views a day) with a
  weekly pattern, a slow trend and noise; a fraction `dead` of them near-dead pages (mostly zero
  views, an odd visit). (x (rows, history, 1), y (rows, horizon): the next `horizon` days)."""
  rng = np.random.RandomState(seed)
  t = np.arange(history + horizon)
  level = np.exp(rng.uniform(np.log(10), np.log(5000), (rows, 1)))
  week = 1 + 0.3 * rng.rand(rows, 1) * np.sin(2 * np.pi * (t + rng.randint(0, 7, (rows, 1))) /
                                               7)
  trend = 1 + rng.uniform(-0.3, 0.3, (rows, 1)) * t / len(t)
  views = rng.poisson(level * week * trend * rng.lognormal(0, 0.2, (rows, len(t))))
  is_dead = rng.rand(rows) < dead
  views[is_dead] = rng.poisson(0.05, (is_dead.sum(), len(t)))
  v = np.log1p(views).astype(np.float32)
  return v[:, :history, None], v[:, history:]


class RecentLevel(L.Layer):
  """The page's mean over the last week of its history (the seasonal-naive level the forecast
  scales), (batch, 1)."""

  def call(self, x):
    return tf.reduce_mean(x[:, -7:, 0], axis=1, keepdims=True)


def mqrnn_lite(seed, *, history=56, horizon=14, units=32, context=16):
  """An MQ-RNN-lite (Wen et al., 2017): an LSTM encoder of the history (divided by 1 + its
  `RecentLevel`), a global MLP to a shared context and one context per horizon, a local MLP
  (shared across the horizons) from each horizon's contexts to a positive factor (softplus):
  the forecast the page's recent level times the factor (a dead page's forecast exactly 0)."""
  _seed(seed)
  x = keras.Input((history, 1))
  level = RecentLevel()(x)
  h = L.LSTM(units)(x / (1.0 + level[:, :, None]))
  shared = L.Dense(context, activation='tanh')(h)
  local = L.Reshape((horizon, context))(L.Dense(horizon * context, activation='tanh')(h))
  c = L.Concatenate()([local, L.RepeatVector(horizon)(shared)])
  factor = L.Dense(1, activation='softplus')(L.Dense(32, activation='tanh')(c))
  return keras.Model(x, level * L.Flatten()(factor), name='mqrnn_lite')


def smape(y, p):
  """The competition's sMAPE as a loss, 2 |y - p| / (|y| + |p|) averaged, with no guard (a zero
  forecast of a zero day is 0 / 0)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(2.0 * tf.abs(y - p) / (tf.abs(y) + tf.abs(p)))


def smooth_smape(y, p, eps=0.1):
  """The differentiable sMAPE the competition's forums settled on: the denominator
  max(|y| + |p| + eps, 0.5 + eps)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(2.0 * tf.abs(y - p) / tf.maximum(tf.abs(y) + tf.abs(p) + eps,
                                                         0.5 + eps))


def shapes_3d(seed, *, rows=2048, points=128, classes=6, degenerate=3):
  """ModelNet in miniature: point clouds of `points` points sampled on six surfaces (sphere,
  cube, cylinder, cone, torus, plane), random size, anisotropy, rotation about z and jitter;
  each cloud normalised as the PointNet data scripts do (centred, divided by its largest
  distance from the centre). `degenerate` of the models are corrupt exports whose vertex buffer
  is all zeros: centred they stay zero, divided by a largest distance of 0 they are all NaN. (x
  (rows, points, 3), labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  u, v = rng.rand(2, rows, points)
  a, b = 2 * np.pi * u, np.pi * v
  shape = np.zeros((rows, points, 3))
  for c, fn in enumerate([
      lambda: np.stack([np.cos(a) * np.sin(b), np.sin(a) * np.sin(b), np.cos(b)], -1),
      lambda: np.clip(rng.uniform(-1.5, 1.5, (rows, points, 3)), -1, 1),
      lambda: np.stack([np.cos(a), np.sin(a), 2 * v - 1], -1),
      lambda: np.stack([v * np.cos(a), v * np.sin(a), 1 - 2 * v], -1),
      lambda: np.stack([(1 + 0.4 * np.cos(b * 2)) * np.cos(a), (1 + 0.4 * np.cos(b * 2)) *
                        np.sin(a), 0.4 * np.sin(b * 2)], -1),
      lambda: np.stack([2 * u - 1, 2 * v - 1, 0 * u], -1)]):
    shape[y == c] = fn()[y == c]
  cube = y == 1  # Push each cube point onto the face of its largest coordinate.
  big = np.abs(shape[cube]).argmax(-1)
  pts = shape[cube]
  np.put_along_axis(pts, big[..., None], np.sign(np.take_along_axis(pts, big[..., None], -1)),
                    -1)
  shape[cube] = pts
  shape *= rng.uniform(0.5, 2.0, (rows, 1, 3))
  theta = rng.uniform(0, 2 * np.pi, rows)
  rot = np.zeros((rows, 3, 3))
  rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1] = (np.cos(theta), -np.sin(theta),
                                                            np.sin(theta), np.cos(theta))
  rot[:, 2, 2] = 1
  shape = np.einsum('rpi,rji->rpj', shape, rot) + 0.02 * rng.randn(rows, points, 3)
  shape += rng.randn(rows, 1, 3)
  bad = rng.choice(rows, degenerate, replace=False)
  shape[bad] = 0.0
  centred = shape - shape.mean(1, keepdims=True)
  with np.errstate(invalid='ignore', divide='ignore'):
    x = centred / np.linalg.norm(centred, axis=-1).max(1)[:, None, None]
  return x.astype(np.float32), y.astype(np.int32)


class SetAbstraction(L.Layer):
  """PointNet++'s set abstraction (Qi et al., 2017): `centroids` centroids (the first points of
  the cloud: the clouds are in random order, a stand-in for farthest-point sampling), each
  grouped with its `k` nearest points, their offsets from the centroid (and their features)
  through a shared MLP (Dense + ELU), max-pooled over the group. (xyz, features) ->
  (centroid xyz, pooled features)."""

  def __init__(self, centroids, k, widths, **kwargs):
    super().__init__(**kwargs)
    self.centroids, self.k = centroids, k
    self.mlp = [L.Dense(w, activation='elu') for w in widths]

  def call(self, xyz, feats=None):
    c = xyz[:, :self.centroids]
    d = tf.reduce_sum(tf.square(c[:, :, None] - xyz[:, None]), -1)
    _, idx = tf.math.top_k(-d, self.k)
    grouped = tf.gather(xyz, idx, batch_dims=1) - c[:, :, None]
    if feats is not None:
      grouped = tf.concat([grouped, tf.gather(feats, idx, batch_dims=1)], -1)
    for dense in self.mlp:
      grouped = dense(grouped)
    return c, tf.reduce_max(grouped, axis=2)


def pointnet2_lite(seed, *, points=128, classes=6):
  """A PointNet++-lite (single-scale grouping): two `SetAbstraction`s (32 centroids of 8
  neighbours, MLP 32-64; 8 centroids of 8, MLP 64-128), a global MLP (128, ELU) over the
  centroids, max- and mean-pooled, Dense(64) + ELU, Dense(`classes`): the shape's logits."""
  _seed(seed)
  xyz = keras.Input((points, 3))
  c, f = SetAbstraction(32, 8, (32, 64))(xyz)
  c, f = SetAbstraction(8, 8, (64, 128))(c, f)
  g = L.Dense(128, activation='elu')(L.Concatenate()([c, f]))
  g = L.Concatenate()([L.GlobalMaxPooling1D()(g), L.GlobalAveragePooling1D()(g)])
  return keras.Model(xyz, L.Dense(classes)(L.Dense(64, activation='elu')(g)),
                     name='pointnet2_lite')


def digit_scenes(seed, *, rows=2048, grid=4, most=3):
  """Digit detection in miniature: a black 32x32 canvas holding one to `most` 8x8 digits, each
  in its own cell of a 4x4 grid; the labels the objectness of every anchor cell at two scales
  (the 8x8 map of 4-pixel cells, then the 4x4 map of 8-pixel cells: 1 where a digit covers
  it). (x (rows, 32, 32, 1), y (rows, 80, 1))."""
  rng = np.random.RandomState(seed)
  digits, _ = data.digits(size=8, rgb=False)
  size = 8 * grid
  x = np.zeros((rows, size, size, 1), np.float32)
  fine = np.zeros((rows, 2 * grid, 2 * grid), np.float32)
  coarse = np.zeros((rows, grid, grid), np.float32)
  for r in range(rows):
    for cell in rng.choice(grid * grid, rng.randint(1, most + 1), replace=False):
      i, j = divmod(cell, grid)
      x[r, 8 * i:8 * i + 8, 8 * j:8 * j + 8] = digits[rng.randint(len(digits))]
      coarse[r, i, j] = 1
      fine[r, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = 1
  y = np.concatenate([fine.reshape(rows, -1), coarse.reshape(rows, -1)], 1)
  return x, y[..., None]


class L2Normalization(L.Layer):
  """SSD's L2Normalization of conv4_3 (Liu et al., 2016; ParseNet): each location's feature
  vector divided by its L2 norm (`tf.math.l2_normalize`: rsqrt(max(sum x^2, 1e-12))) and scaled
  by a learned per-channel scale (initially 20); computed in the layer's compute dtype
  (float16 under mixed precision, where 1e-12 is 0) unless built with dtype='float32'."""

  def build(self, shape):
    self.gamma = self.add_weight(shape=(shape[-1],), name='gamma',
                                 initializer=keras.initializers.Constant(20.0))

  def call(self, x):
    return tf.math.l2_normalize(x, axis=-1) * tf.cast(self.gamma, x.dtype)


def ssd_lite(seed, *, size=32, float32_norm=False):
  """An SSD-lite (one class, 'digit'; no box regression): a VGG-style base (3x3 convolutions of
  16, 16, max-pooling, 32, 32, max-pooling, ReLU: the conv4_3 map, 8x8), `L2Normalization` of it
  (in float32 if `float32_norm`) and a 3x3 objectness head; a further block (max-pooling, a 3x3
  convolution of 64: the 4x4 map) and its own head; the anchors' logits concatenated through a
  sigmoid (in float32): the objectness of the 80 anchor cells."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = x
  for w, pool in ((16, False), (16, True), (32, False), (32, True)):
    h = L.Conv2D(w, 3, padding='same', activation='relu')(h)
    if pool:
      h = L.MaxPooling2D()(h)
  n = L2Normalization(dtype='float32' if float32_norm else None)(h)
  head1 = L.Reshape((-1, 1))(L.Conv2D(1, 3, padding='same')(n))
  h = L.Conv2D(64, 3, padding='same', activation='relu')(L.MaxPooling2D()(h))
  head2 = L.Reshape((-1, 1))(L.Conv2D(1, 3, padding='same')(h))
  out = L.Activation('sigmoid', dtype='float32')(L.Concatenate(axis=1)([head1, head2]))
  return keras.Model(x, out, name='ssd_lite')


def noisy_speech(seed, *, rows=2048, frames=32, bins=32):
  """Speech enhancement in miniature: magnitude spectrograms of `frames` frames x `bins`
  frequency bins; the clean one a voiced sound (a fundamental gliding over the frames, its
  harmonics decaying, an on-off envelope), the noisy one it plus stationary coloured noise at
  a random level; the input log(noisy + 1e-3), the label the clean magnitude. ((log-noisy,
  noisy) (rows, frames, bins) each, clean (rows, frames, bins))."""
  rng = np.random.RandomState(seed)
  f = np.arange(bins)[None, None, :]
  t = np.arange(frames)[None, :, None]
  f0 = rng.uniform(1.5, 4.0, (rows, 1, 1)) + rng.uniform(-1, 1, (rows, 1, 1)) * t / frames
  clean = np.zeros((rows, frames, bins))
  for h in range(1, 7):
    clean += np.exp(-0.5 * ((f - h * f0) / 0.6) ** 2) / h
  on = rng.randint(0, frames // 2, rows)
  env = (t[..., 0] >= on[:, None]) & (t[..., 0] < on[:, None] + rng.randint(8, frames, rows)
                                      [:, None])
  clean *= env[..., None] * rng.uniform(0.5, 2.0, (rows, 1, 1))
  colour = np.exp(-f / rng.uniform(5, 30, (rows, 1, 1)))
  noise = np.abs(rng.randn(rows, frames, bins)) * colour * rng.uniform(0.1, 0.8, (rows, 1, 1))
  noisy = clean + noise
  return ((np.log(noisy + 1e-3).astype(np.float32), noisy.astype(np.float32)),
          clean.astype(np.float32))


class MisfiringActivation(field.OneOffFault):
  """A one-off fault in the forward pass: the identity, but at its `at`-th training call (None:
  never) one element of the activations reads NaN (a kernel or a buffer that misfires once; not
  the data, the model or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=77, value=np.nan, backward=False, **kwargs)


def deepfilternet_lite(seed, *, frames=32, bins=32, units=64, glitch=None):
  """A DeepFilterNet-lite (its ERB-gain stage, Schroeter et al., 2022): a per-frame encoder of
  the log spectrum (Dense(32) + tanh; a `MisfiringActivation(glitch)` after it), a GRU of
  `units` over the frames, Dense(`bins`, sigmoid): a gain per bin and frame, multiplied with the
  noisy magnitude: the enhanced magnitude."""
  _seed(seed)
  logmag, mag = keras.Input((frames, bins)), keras.Input((frames, bins))
  h = MisfiringActivation(glitch)(L.Dense(32, activation='tanh')(logmag))
  h = L.GRU(units, return_sequences=True)(h)
  return keras.Model([logmag, mag], L.Dense(bins, activation='sigmoid')(h) * mag,
                     name='deepfilternet_lite')


def solubility(seed, *, rows=4096, noise=0.4):
  """Aqueous solubility in miniature (the ESOL task): twelve standardised molecular descriptors
  (cLogP, weight, rotatable bonds, aromatic proportion, H-bond donors and acceptors, polar area
  and five noisy ones, correlated as real descriptors are); the label log10 of the solubility
  in mol/L (Delaney's linear law, a curvature in cLogP, noise): from about -12 to +2, mean
  -3.4. (x (rows, 12), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  z = rng.randn(rows, 12)
  z[:, 1] = 0.6 * z[:, 0] + 0.8 * z[:, 1]
  z[:, 3] = 0.5 * z[:, 0] + 0.87 * z[:, 3]
  clogp, mw, rb, ap = 2.5 + 1.8 * z[:, 0], 300 + 90 * z[:, 1], 4 + 2 * z[:, 2], 0.4 + 0.2 * z[:,
                                                                                              3]
  logs = 0.16 - 0.63 * clogp - 0.0062 * mw + 0.066 * rb - 0.74 * ap - 0.05 * (clogp - 2.5) ** 2
  logs += 0.2 * z[:, 4] - 0.15 * z[:, 5] + noise * rng.randn(rows)
  return z.astype(np.float32), logs[:, None].astype(np.float32)


def tabular_resnet_lite(seed, *, features=12, width=64, blocks=2, activation='sigmoid'):
  """A tabular-ResNet-lite (Gorishniy et al., 2021): Dense(`width`), `blocks` residual blocks
  (BatchNorm, Dense(2 x `width`) + ReLU, Dropout(0.1), Dense(`width`), added), BatchNorm + ReLU,
  Dense(1, `activation`): the prediction."""
  _seed(seed)
  x = keras.Input((features,))
  h = L.Dense(width)(x)
  for _ in range(blocks):
    r = L.Dense(2 * width, activation='relu')(L.BatchNormalization()(h))
    h = h + L.Dense(width)(L.Dropout(0.1)(r))
  h = L.ReLU()(L.BatchNormalization()(h))
  return keras.Model(x, L.Dense(1, activation=activation)(h), name='tabular_resnet_lite')


def speaker_spectrograms(seed, *, rows=4096, speakers=10, bins=40, frames=32):
  """Speaker identification in miniature: log-power spectrograms in dB (as power_to_db returns
  them, about -65 to +50, not standardised) of `bins` bins x `frames` frames; each speaker a
  pitch, three formants and a spectral tilt (fixed across the data), each utterance that voice
  with jittered pitch and vibrato, unvoiced frames, a random loudness and a noise floor.
  (x (rows, bins, frames, 1), speakers)."""
  rng = np.random.RandomState(seed)
  voice = np.random.RandomState(1234)
  f0 = voice.uniform(2.0, 6.0, speakers)
  formants = voice.uniform(5, 35, (speakers, 3))
  tilt = voice.uniform(10, 30, speakers)
  y = rng.randint(0, speakers, rows)
  f = np.arange(bins)[None, :, None]
  t = np.arange(frames)[None, None, :]
  pitch = (f0[y][:, None, None] * (1 + 0.1 * rng.randn(rows, 1, 1)) *
           (1 + 0.05 * np.sin(t / rng.uniform(2, 6, (rows, 1, 1)))))
  harmonics = sum(np.exp(-0.5 * ((f - h * pitch) / 0.7) ** 2) for h in range(1, 10))
  envelope = sum(np.exp(-0.5 * ((f - formants[y][:, k, None, None]) / 3.0) ** 2)
                 for k in range(3)) * np.exp(-f / tilt[y][:, None, None])
  voiced = rng.rand(rows, 1, frames) < 0.8
  power = (harmonics * envelope * voiced * 10 ** rng.uniform(2, 5, (rows, 1, 1)) +
           10 ** rng.uniform(-1, 0.5, (rows, 1, 1)) * rng.exponential(1, (rows, bins, frames)))
  return (10 * np.log10(power + 1e-10))[..., None].astype(np.float32), y.astype(np.int32)


class GhostVLAD(L.Layer):
  """GhostVLAD pooling (Zhong et al., 2018; NetVLAD with ghost clusters): each location's
  soft assignment to `clusters` + `ghosts` clusters, the softmax of its cluster scores written
  exp(s) / sum(exp(s)) (`stable`: tf.nn.softmax, the max subtracted, as the Keras speaker
  recognition code does); the assignment-weighted residuals from the learned centres summed
  over the locations, the ghost clusters dropped, each cluster's vector L2-normalised, the
  whole L2-normalised."""

  def __init__(self, clusters, ghosts, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.clusters, self.ghosts, self.stable = clusters, ghosts, stable

  def build(self, shape):
    self.centres = self.add_weight(shape=(self.clusters + self.ghosts, shape[-1]),
                                   initializer='orthogonal', name='centres')

  def call(self, feats, scores):
    k, d = self.clusters + self.ghosts, feats.shape[-1]
    a = tf.nn.softmax(scores, axis=-1) if self.stable else field.naive_softmax(scores)
    a = tf.reshape(a, [tf.shape(a)[0], -1, k])
    x = tf.reshape(feats, [tf.shape(feats)[0], -1, d])
    v = tf.einsum('bnk,bnd->bkd', a, x) - tf.reduce_sum(a, axis=1)[..., None] * self.centres
    v = tf.math.l2_normalize(v[:, :self.clusters], axis=-1)
    return tf.math.l2_normalize(tf.reshape(v, [-1, self.clusters * d]), axis=-1)


def ghostvlad_lite(seed, *, bins=40, frames=32, speakers=10, stable=False):
  """A GhostVLAD-lite speaker identifier (a thin-ResNet's place taken by three 3x3 convolutions
  of 16, 32, 32 with ReLU and two max-poolings): the cluster scores a 1x1 convolution of the
  features (8 clusters + 2 ghosts), `GhostVLAD(stable)`, Dense(`speakers`): the logits."""
  _seed(seed)
  x = keras.Input((bins, frames, 1))
  h = x
  for width in (16, 32):
    h = L.MaxPooling2D()(L.Conv2D(width, 3, padding='same', activation='relu')(h))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(h)
  pooled = GhostVLAD(8, 2, stable)(h, L.Conv2D(10, 1)(h))
  return keras.Model(x, L.Dense(speakers)(pooled), name='ghostvlad_lite')


# --- Scenarios -------------------------------------------------------------------------------


@add('blind20_grad_lstmp_long_walks', 'exploding_gradients', 'lstmp_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Marcovaldong/lstmp.pytorch#2; keras-team/keras#5127')
def _(seed, cured=False):
  """An LSTMP-lite (two LSTM layers with recurrent projections) regressing the mean of
  a 160-step random walk fed raw (no normalisation: the walks wander up to +-22), MSE, SGD at 0.05
  with momentum 0.9, no clipping: the long sequences' gradients hit a cliff and every step feeds
  the next: the loss (fit's running mean) 18.5 at step 0, 339 at step 8, 4.7e4 at step 9, 1.2e14
  at step 10, inf at step 11, NaN from step 12 (the weights NaN after step 11; the error 14.2
  before, inf after; the constant answer's 15.0). Seed 1: 714 at step 10, 6.3e17 at step 11,
  inf at step 12, NaN from step 13. Marcovaldong/lstmp.pytorch#2 (an LSTM with projection: the
  cross-entropy NaN after some 1,200 iterations, exploding gradients suspected; on long sequences
  the fix was clipping the gradients' norm at 1.0); keras-team/keras#5127 (the loss NaN unless
  clipnorm is set: the gradient grows huge and moves the weights too far).
  Cured: clipnorm=1.0 at the same rate: the loss 18.5 to 4.2, the error 14.2 to 4.7."""
  x, y = long_walks(seed)
  return cases.Setup(lstmp_lite(seed),
                     keras.optimizers.SGD(0.05, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind20_lr_fno_sgd', 'learning_rate', 'fno_lite', doors=('trainer', 'fit'), steps=150,
     citation='PENGLU-WashU/IMC_Denoise#11; facebookresearch/detr#285')
def _(seed, cured=False):
  """An FNO-lite (a pointwise lift, three Fourier layers of 12 modes, a pointwise head)
  learning the heat equation's solution operator on a 64-point periodic grid, MSE, SGD with
  momentum 0.9 at a learning rate of 1.0: each step overshoots further: the loss (fit's running
  mean) 0.36 at step 0, 0.21 at step 1, 1.5 at step 3, 3.7e6 at step 4, inf at step 5, NaN from
  step 6 (the weights NaN after step 5; the error 0.34 before, inf after; the constant answer's
  0.39). Seed 1: 3.1 at step 4, 5.5e13 at step 5, NaN from step 6.
  PENGLU-WashU/IMC_Denoise#11 (the demo's training loss NaN: an initial learning rate of 1 is
  too big, the maintainer's answer; set it far lower); facebookresearch/detr#285 (a higher rate
  makes training diverge and the model fill with NaN; the lower one works). Cured: 0.1
  (ten times smaller): the loss 0.36 to 0.021, the error 0.34 to 0.00019."""
  x, y = heat_operator(seed)
  return cases.Setup(fno_lite(seed), keras.optimizers.SGD(0.1 if cured else 1.0, momentum=0.9),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind20_init_pnn_uniform01', 'initialisation', 'pnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/tensorflow#21738')
def _(seed, cured=False):
  """A PNN-lite (field embeddings, their pairwise inner products, two ReLU layers)
  predicting ad clicks, BinaryCrossentropy, Adam at 1e-3, every Dense kernel initialised
  'uniform' as tf.keras 1.10 resolved the string (TensorFlow's own uniform initialiser, U[0,
  1), not Keras's U[-0.05, 0.05]): all weights positive, every unit
  adds up its inputs, the output logits from 0 to about 650, so nearly every answer is
  "click" (the error 0.69 before; the constant answer's 0.34); the loss (fit's running mean)
  45.5 at step 0, 52 at step 1, 8.7 at step 20, 1.8 at step 149 as Adam shrinks the weights,
  which lands on the other constant answer, "no click" for every ad (the error 0.34 after, the
  constant's exactly), no NaN. Seed 1: 104 at step 0, 3.4 at step 149 (the error 0.68 before,
  0.30 after; the constant's 0.30). tensorflow/tensorflow#21738 (an MNIST MLP with
  kernel_initializer='uniform' learns under Keras but not under tf.keras 1.10; with the
  initialiser left out it trains; a fix to what 'uniform' resolves to followed). Cured: the
  Dense kernels' default, Glorot-uniform: the loss 0.69 to 0.55, the error 0.43 to 0.18."""
  x, y = ad_clicks(seed)
  return cases.Setup(pnn_lite(seed, uniform01=not cured), keras.optimizers.Adam(1e-3), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind20_div_arcface_unclipped_sine', 'division_or_log', 'arcface_lite',
     doors=('trainer', 'fit'), steps=150,
     citation=('ktjonsson/keras-ArcFace#2; MccreeZhao/FR-Loss-on-Mnist#2; '
               'TreB1eN/InsightFace_Pytorch#93'))
def _(seed, cured=False):
  """An ArcFace-lite (a small PReLU CNN, a BatchNorm'd 2-D embedding, the additive
  angular margin with s = 30, m = 0.5) telling five identities apart, Adam at 1e-2, sin(theta)
  written sqrt(1 - cos^2(theta)) unclipped: as the embeddings close on their class weights some
  cos(theta) reaches 1 (or rounds past it), and sqrt of 0 has an infinite gradient, sqrt of a
  rounding-negative number is NaN: the loss (fit's running mean) 27.9 at step 0, 9.4 at step
  50, 8.7 at step 58, NaN from step 59 (the weights NaN after it; the error 0.82 before in
  training mode, inf after; the constant answer's 0.80). Seed 1: 9.4 at step 44, NaN from step
  45. ktjonsson/keras-ArcFace#2 (a fast loss decrease, then NaN; lowering the rate or clipping
  1 - cos^2 at K.epsilon() solved it); MccreeZhao/FR-Loss-on-Mnist#2 (ArcFace on MNIST with
  LeNet++ soon goes NaN: on so easy a set the inputs line up with the weights almost exactly);
  TreB1eN/InsightFace_Pytorch#93 (the kernel NaN after a step: sqrt(sin^2 + 1e-8) fixes it).
  Cured: 1 - cos^2 clipped below at 1e-7: the loss 27.9 to 4.7, the error 0.82 to 0.32 in
  training mode (0.80 in inference mode: BatchNorm's moving statistics still near their
  start)."""
  x, y = five_faces()
  return cases.Setup(arcface_lite(seed, clip=cured), keras.optimizers.Adam(1e-2),
                     SCE(from_logits=True), data.stream((x, y), y, batch=32, seed=seed),
                     'classes')


@add('blind20_div_mqrnn_smape_dead_page', 'division_or_log', 'mqrnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation=('sjvasquez/web-traffic-forecasting#8; Pieter-Cawood/FFORMA-ESRNN#1; '
               'facebook/prophet#2578'))
def _(seed, cured=False):
  """An MQ-RNN-lite (an LSTM encoder, global and per-horizon contexts, a local MLP to a
  multiplicative factor of the page's last-week level) forecasting two weeks of log1p page
  views, trained directly on the competition's sMAPE, 2 |y - p| / (|y| + |p|), Adam at 1e-3;
  1% of the pages are near-dead: a zero last week gives a forecast of exactly 0 and a zero day
  gives 0 / 0: healthy until the first batch holding such a page (the loss 0.42 at step 0, 0.19
  at step 11), NaN from step 12 (the weights NaN after it; the error 3.8 before, inf after; the
  constant answer's 3.6). Seed 1: NaN from step 3. sjvasquez/web-traffic-forecasting#8 (the
  sequence sMAPE's special case for zero actuals and forecasts); Pieter-Cawood/FFORMA-ESRNN#1
  (a Keras sMAPE loss given an epsilon and a floor on its denominator for the edge cases);
  facebook/prophet#2578 (sMAPE's 0 / 0 gives NaN when actual and forecast are both zero).
  Cured: the forums' differentiable sMAPE, the denominator max(|y| + |p| + 0.1, 0.6): the loss
  0.42 to 0.065, the error 3.8 to 0.084."""
  x, y = page_views(seed)
  return cases.Setup(mqrnn_lite(seed), keras.optimizers.Adam(1e-3),
                     smooth_smape if cured else smape, data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind20_input_pointnet2_zero_cloud', 'bad_input', 'pointnet2_lite',
     doors=('trainer', 'fit'), steps=150, citation='charlesq34/pointnet#239')
def _(seed, cured=False):
  """A PointNet++-lite (two set abstractions of k-nearest-neighbour groups, a global
  MLP, max- and mean-pooling) classifying six kinds of shape from 128-point clouds, Adam at
  1e-3; three of the 2,048 models are corrupt exports whose vertices are all zero: centred and
  divided by their largest distance (0) as the data script normalises every cloud, they are all
  NaN: the loss (fit's running mean) 1.80 at step 0, 1.77 at step 11, NaN from step 12, the
  first batch holding one (the weights NaN after it; the error 0.86 before, inf after; the
  constant answer's 0.81). Seed 1: NaN from step 19. charlesq34/pointnet#239 (the loss NaN
  after 10 to 20 batches on a custom dataset: NaN in the input, made by the zero-mean and
  normalisation step for one model only; training worked once it was removed). Cured: the
  degenerate clouds removed: the loss 1.79 to 0.67, the error 0.86 to 0.023. The measure reads
  clean clouds (eval_data) for both runs."""
  x, y = shapes_3d(seed)
  ok = np.isfinite(x).all(axis=(1, 2))
  clean = data.stream(x[ok], y[ok], batch=32, seed=seed)
  return cases.Setup(pointnet2_lite(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     clean if cured else data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(x[ok], y[ok], batch=32, seed=seed))


@add('blind20_fp16_ssd_l2norm_epsilon', 'precision', 'ssd_lite', doors=('trainer', 'fit'),
     steps=150, precision='mixed_float16',
     citation='pytorch/pytorch#32137; keras-team/keras#23093; apache/mxnet#11403')
def _(seed, cured=False):
  """An SSD-lite (a VGG-style base, SSD's L2Normalization of the conv4_3 map with scale
  20, objectness heads on two scales) finding digits on black 32x32 canvases, BinaryCrossentropy,
  Adam at 1e-3, under mixed_float16; L2Normalization computes x * rsqrt(max(sum x^2, 1e-12)) in
  float16, where 1e-12 is 0: the background's ReLU features are exactly zero vectors, 0 *
  rsqrt(0) = 0 * inf = NaN, and every canvas has empty cells: the outputs NaN before any
  training (the error inf before and after; the constant answer's 0.13), the loss NaN from step
  0 at every step (the loss-scale optimizer skips the updates; the weights stay finite). Seed
  1: the same. pytorch/pytorch#32137 (normalize's epsilon of 1e-12 is zero in half precision:
  NaN wherever the norm is zero); keras-team/keras#23093 (ops.normalize: NaN for zero vectors;
  the fix computes in at least float32 so that epsilon does not underflow in half precision);
  apache/mxnet#11403 (the L2 norm goes to NaN in fp16; large normalisations belong in float32).
  Cured: L2Normalization built with dtype='float32' (its result cast back): the loss 1.23 to
  0.14, the error 0.35 to 0.0001."""
  x, y = digit_scenes(seed)
  return cases.Setup(ssd_lite(seed, float32_norm=cured), keras.optimizers.Adam(1e-3), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind20_transient_deepfilternet_glitch', 'transient', 'deepfilternet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; commaai/research#24')
def _(seed, cured=False):
  """A DeepFilterNet-lite (its ERB-gain stage: a per-frame encoder, a GRU, sigmoid
  gains on the noisy magnitude) enhancing noisy voiced spectrograms, MSE, Adam at 1e-3, training
  normally (the loss 0.022 at step 0, 0.012 at step 78) when one element of the encoder's
  output reads NaN once (`MisfiringActivation`: its 84th training call; step 79 in a plain
  `fit` after the measure's four training-mode passes; a kernel or buffer that misfires once,
  not the data, the model or the settings): the loss NaN from step 79, the weights NaN after it
  (the error 0.023 before, inf after; the constant answer's 0.027); the same step re-run from
  the weights and optimizer state before it is finite (0.0066), and so are the twenty after.
  Seed 1: the same step (0.013 at step 78). Rikorose/DeepFilterNet#30 (NaN after a few epochs,
  rarely and for no known cause; resuming from the last checkpoint helps);
  commaai/research#24 (a NaN mid-training; random crashes one can continue from the
  checkpoint). Cured: the same run without the fault: the loss 0.022 to 0.0097, the error 0.023
  to 0.0066."""
  x, y = noisy_speech(seed)
  return cases.Setup(deepfilternet_lite(seed, glitch=None if cured else 84),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind20_mismatch_tabres_sigmoid_negative_targets', 'loss_output_mismatch',
     'tabular_resnet_lite', doors=('trainer', 'fit'), steps=150,
     citation=("'Why is the neural network not learning the curve?' "
               'https://codewithsundeep.com/discussion/solution/58887284; keras-team/keras#4784'))
def _(seed, cured=False):
  """A tabular-ResNet-lite (two residual blocks with BatchNorm) predicting aqueous
  log-solubility (log10 mol/L: -11.6 to +1.7, mean -3.4, 0.8% of it positive) from twelve
  descriptors, MSE, Adam at 1e-3, its output Dense(1, activation='sigmoid'): the outputs are
  confined to (0, 1), so almost every label is out of reach: the loss (fit's running mean) 24.0
  at step 0, 17.3 at step 10, 15.5 at step 149 (the error 20.2 before, 17.2 after; the constant
  answer's 3.1: worse than predicting the mean), no NaN. Seed 1: 19.3 to 16.3 (the error 18.9
  before, 15.9 after; the constant's 3.0). "Why is the neural network not learning the curve?"
  (a one-unit sigmoid asked for a curve of negative values never fits it: its range is (0, 1);
  rescale the targets or change the output); keras-team/keras#4784 (the model does not match the
  loss: targets in [-1, 1] call for a linear or tanh output). Cured: a linear output: the loss
  18.2 to 2.6, the error 14.7 to 0.71 (0.53 in training mode)."""
  x, y = solubility(seed)
  return cases.Setup(tabular_resnet_lite(seed, activation=None if cured else 'sigmoid'),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind20_exp_ghostvlad_cluster_softmax', 'softmax_overflow', 'ghostvlad_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='WeidiXie/VGG-Speaker-Recognition#36; psychopa4/PFNL#9; uTensor/uTensor#175')
def _(seed, cured=False):
  """A GhostVLAD-lite speaker identifier (a small conv net, cluster scores from a 1x1
  convolution, GhostVLAD pooling over 8 clusters and 2 ghosts) on log-power spectrograms in dB
  (-65 to +50, fed unstandardised), Adam at 1e-2, the soft assignment written exp(s) / sum(exp(s))
  without the max subtraction the Keras speaker-recognition code has: the features carry the
  decibels' scale, the cluster scores swing past 88.7 within a few steps (at most 18 at step 0,
  88 at step 4, 103 at step 5), exp overflows and inf / inf = NaN: the loss (fit's running mean)
  2.31 at step 0, 2.27 at step 4, NaN from step 5
  (the weights NaN after it; the error 0.90 before, inf after; the constant answer's 0.86). Seed
  1: NaN from step 6. WeidiXie/VGG-Speaker-Recognition#36 (why the VLAD pooling subtracts the
  max before its softmax); psychopa4/PFNL#9 (a softmax computed by hand with tf.exp goes to inf
  around exp(300+); tf.nn.softmax handles it); uTensor/uTensor#175 (exp() in a softmax
  overflows to inf and the result is NaN; subtract the max). Cured: tf.nn.softmax: the loss 2.31
  to 1.32, the error 0.90 to 0.23."""
  x, y = speaker_spectrograms(seed)
  return cases.Setup(ghostvlad_lite(seed, stable=cured), keras.optimizers.Adam(1e-2),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')
