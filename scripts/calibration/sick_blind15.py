"""A fifteenth blind set of sick scenarios (the 'blind15' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind14.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a Light GRU, a DeepONet, a MADE, a Network in
Network, a ChebNet, a SASRec, a ShallowConvNet, a seq2point NILM net, a RegNetX-lite, a Neural
Additive Model). Each builder takes `cured`: the same run with the thread's remedy (the registry
calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the
sick run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it
train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND15 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND15.add` with split='blind15'."""
  return BLIND15.add(name, expected, arch, split='blind15', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def keyword_frames(seed, *, rows=2048, frames=40, bands=13, words=6):
  """Keyword spotting in miniature: log-mel-style frames (rows, frames, bands) of `words` spoken
  keywords, each a smooth spectral trajectory of its own, shifted by up to 4 frames, scaled by a
  speaker gain and noisy; raw log energies (around 4 to 12, not standardised). (x, labels)."""
  rng = np.random.RandomState(seed)
  t = np.linspace(0, 1, frames + 8)
  templates = np.stack([
      sum(rng.randn(bands)[None, :] * np.sin((k + 1) * np.pi * t + rng.rand() * 6)[:, None]
          for k in range(3)) for _ in range(words)])
  y = rng.randint(0, words, size=rows)
  shift = rng.randint(0, 9, size=rows)
  x = np.stack([templates[y[r], shift[r]:shift[r] + frames] for r in range(rows)])
  x = 60.0 + 8.0 * x * rng.uniform(0.8, 1.2, size=(rows, 1, 1)) + 3.0 * rng.randn(rows, frames,
                                                                                 bands)
  return x.astype(np.float32), y.astype(np.int32)


class LiGRU(L.Layer):
  """A Light GRU (Ravanelli et al., 2018): no reset gate, a ReLU candidate, h = z h + (1 - z) c
  with z = sigmoid(W_z x + U_z h) and c = ReLU(W_h x + U_h h) (the recurrent kernels orthogonal);
  returns the last state."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units

  def build(self, shape):
    d, u = shape[-1], self.units
    self.w = self.add_weight(shape=(d, 2 * u), initializer='glorot_uniform', name='w')
    self.u_z = self.add_weight(shape=(u, u), initializer='orthogonal', name='u_z')
    self.u_h = self.add_weight(shape=(u, u), initializer='orthogonal', name='u_h')
    self.b = self.add_weight(shape=(2 * u,), initializer='zeros', name='b')

  def call(self, x):
    h = tf.zeros((tf.shape(x)[0], self.units), x.dtype)
    wx = tf.einsum('btd,de->bte', x, self.w) + self.b
    for t in range(x.shape[1]):
      z = tf.sigmoid(wx[:, t, :self.units] + tf.matmul(h, self.u_z))
      c = tf.nn.relu(wx[:, t, self.units:] + tf.matmul(h, self.u_h))
      h = z * h + (1 - z) * c
    return h


def ligru_lite(seed, *, frames=40, bands=13, words=6):
  """A Light-GRU keyword spotter: `LiGRU(64)` over the frames, Dropout(0.1), Dense(words): the
  logits."""
  _seed(seed)
  inputs = keras.Input((frames, bands))
  h = L.Dropout(0.1)(LiGRU(64)(inputs))
  return keras.Model(inputs, L.Dense(words)(h), name='ligru_lite')


def antiderivatives(seed, *, rows=4096, sensors=32):
  """Operator learning in miniature: an input function u (a random sum of four sines, sampled at
  `sensors` points of [0, 1]), a query point y in [0, 1], the target the antiderivative of u at
  y. (((u (rows, sensors), y (rows, 1)), G(u)(y) (rows, 1))."""
  rng = np.random.RandomState(seed)
  grid = np.linspace(0, 1, sensors)
  a, f, p = 5 * rng.randn(rows, 4), rng.uniform(0.5, 3, (rows, 4)), rng.uniform(0, 6, (rows, 4))
  u = np.einsum('rk,rkg->rg', a, np.sin(2 * np.pi * f[:, :, None] * grid + p[:, :, None]))
  y = rng.rand(rows, 1)
  w = 2 * np.pi * f
  g = np.sum(a / w * (np.cos(p) - np.cos(w * y + p)), axis=1, keepdims=True)
  return (u.astype(np.float32), y.astype(np.float32)), g.astype(np.float32)


def deeponet_lite(seed, *, sensors=32, width=64):
  """A DeepONet (Lu et al., 2021): a branch MLP (64, 64, ReLU) on the sensor values of u, a trunk
  MLP (64, 64, ReLU) on the query point, their dot product plus a bias: G(u)(y)."""
  _seed(seed)
  u, y = keras.Input((sensors,)), keras.Input((1,))
  b = L.Dense(width)(L.Dense(width, activation='relu')(u))
  t = L.Dense(width, activation='relu')(L.Dense(width, activation='relu')(y))
  out = L.Dense(1)(L.Multiply()([b, t]))
  return keras.Model([u, y], out, name='deeponet_lite')


def binary_digits():
  """The digits at 8x8, binarised at half intensity: (bits (n, 64), bits (n, 64)), the input its
  own target (density estimation)."""
  x, _ = data.digits(size=8, rgb=False)
  bits = (x.reshape(len(x), 64) > 0.5).astype(np.float32)
  return bits, bits


class MaskedDense(L.Dense):
  """A Dense layer whose kernel is multiplied by a fixed 0/1 connectivity mask (MADE)."""

  def __init__(self, units, mask, **kwargs):
    super().__init__(units, **kwargs)
    self.mask = np.asarray(mask, np.float32)

  def call(self, x):
    out = tf.matmul(x, self.kernel * self.mask) + self.bias
    return self.activation(out)


def made_lite(seed, *, dim=64, hidden=(128, 128)):
  """A MADE (Germain et al., 2015): two masked ReLU layers (128) and a masked Dense(dim) +
  sigmoid, the masks from random degrees so that output i sees only inputs before it in the
  natural order: p(x_i = 1 | x_<i)."""
  _seed(seed)
  rng = np.random.RandomState(seed)
  degrees = [np.arange(1, dim + 1)]
  for h in hidden:
    degrees.append(rng.randint(1, dim, size=h))
  inputs = keras.Input((dim,))
  h = inputs
  for d_in, d_out in zip(degrees[:-1], degrees[1:]):
    h = MaskedDense(len(d_out), (d_out[None, :] >= d_in[:, None]), activation='relu')(h)
  out_mask = degrees[0][None, :] > degrees[-1][:, None]
  out = MaskedDense(dim, out_mask, activation='sigmoid')(h)
  return keras.Model(inputs, out, name='made_lite')


def nin_lite(seed, *, size=16, classes=10, kernel_initializer='glorot_uniform'):
  """A Network-in-Network-lite (Lin et al., 2014): three mlpconv blocks (a 3x3 Conv and two 1x1
  Convs, ReLU; 32, 64 and 64 wide, 2x2 max-pooling and Dropout(0.2) after the first two), the
  last block's final 1x1 Conv with `classes` maps, global average pooling: the logits; every
  kernel from `kernel_initializer`."""
  _seed(seed)
  conv = lambda f, k: L.Conv2D(f, k, padding='same', activation='relu',
                               kernel_initializer=kernel_initializer)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for width, pool in ((32, True), (64, True)):
    h = conv(width, 1)(conv(width, 1)(conv(width, 3)(h)))
    h = L.Dropout(0.2)(L.MaxPooling2D()(h))
  h = conv(64, 1)(conv(64, 3)(h))
  h = L.Conv2D(classes, 1, kernel_initializer=kernel_initializer)(h)
  return keras.Model(inputs, L.GlobalAveragePooling2D()(h), name='nin_lite')


def graph_families(seed, *, rows=2048, nodes=16, isolated=0):
  """Graph classification in miniature: adjacency matrices of 16-node graphs of three families
  (a ring lattice with 2 to 3 neighbours a side, an Erdos-Renyi graph of edge probability 0.4, a
  preferential-attachment graph), the label the family; `isolated` graphs (drawn at random) have
  one node whose edges were all lost (a disconnected atom, a sensor with no links). (adjacency
  (rows, nodes, nodes), labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 3, size=rows)
  adj = np.zeros((rows, nodes, nodes), np.float32)
  for r in range(rows):
    a = np.zeros((nodes, nodes))
    if y[r] == 0:
      for k in range(1, rng.randint(2, 4) + 1):
        for i in range(nodes):
          a[i, (i + k) % nodes] = a[(i + k) % nodes, i] = 1
    elif y[r] == 1:
      a = np.triu(rng.rand(nodes, nodes) < 0.4, 1).astype(float)
      a = a + a.T
      for i in np.where(a.sum(1) == 0)[0]:  # The generator links every node at least once.
        j = (i + 1 + rng.randint(nodes - 1)) % nodes
        a[i, j] = a[j, i] = 1
    else:
      a[0, 1] = a[1, 0] = 1
      for i in range(2, nodes):
        deg = a[:i, :i].sum(1)
        for j in rng.choice(i, size=2, replace=False, p=deg / deg.sum()):
          a[i, j] = a[j, i] = 1
    perm = rng.permutation(nodes)
    adj[r] = a[perm][:, perm]
  for r in rng.choice(rows, isolated, replace=False):
    i = rng.randint(nodes)
    adj[r, i, :] = adj[r, :, i] = 0
  return adj, y.astype(np.int32)


class ChebConv(L.Layer):
  """A Chebyshev spectral graph convolution (Defferrard et al., 2016) of order `k`: the scaled
  Laplacian L~ = -D^-1/2 A D^-1/2 (lambda_max taken as 2), T_0 = X, T_1 = L~ X, T_j = 2 L~
  T_(j-1) - T_(j-2), and sum_j T_j W_j; D^-1/2 written as 1 / sqrt(degree) (`epsilon` added to
  the degree first)."""

  def __init__(self, units, k=3, epsilon=0.0, **kwargs):
    super().__init__(**kwargs)
    self.units, self.k, self.epsilon = units, k, epsilon
    self.dense = [L.Dense(units, use_bias=(j == 0)) for j in range(k)]

  def call(self, x, adj):
    d = 1.0 / tf.sqrt(tf.reduce_sum(adj, axis=-1) + self.epsilon)
    lap = -d[:, :, None] * adj * d[:, None, :]
    terms = [x, tf.matmul(lap, x)]
    for _ in range(2, self.k):
      terms.append(2 * tf.matmul(lap, terms[-1]) - terms[-2])
    return sum(dense(t) for dense, t in zip(self.dense, terms))


class NodeFeatures(L.Layer):
  """Each node's features from the adjacency: [1, degree / nodes]."""

  def call(self, adj):
    deg = tf.reduce_sum(adj, axis=-1, keepdims=True)
    return tf.concat([tf.ones_like(deg), deg / adj.shape[-1]], axis=-1)


def chebnet_lite(seed, *, nodes=16, epsilon=0.0, classes=3):
  """A ChebNet-lite graph classifier: node features [1, degree / nodes], two `ChebConv(32, k=3)`
  + ReLU, mean and max pooling over the nodes, Dense(32) + ReLU, Dense(classes): the logits."""
  _seed(seed)
  adj = keras.Input((nodes, nodes))
  x = NodeFeatures()(adj)
  h = L.ReLU()(ChebConv(32, epsilon=epsilon)(x, adj))
  h = L.ReLU()(ChebConv(32, epsilon=epsilon)(h, adj))
  g = L.Concatenate()([L.GlobalAveragePooling1D()(h), L.GlobalMaxPooling1D()(h)])
  out = L.Dense(classes)(L.Dense(32, activation='relu')(g))
  return keras.Model(adj, out, name='chebnet_lite')


def sessions(seed, *, rows=4096, length=12, items=100, short=0):
  """Session-based recommendation in miniature: sessions of `length` item ids (1 to `items`; 0
  pads) from a Markov chain in which each item has three likely successors (probabilities 0.5,
  0.25, 0.15; anything else 0.1); the label the next item (0-based). `short` sessions (drawn at
  random) hold only 3 items, left-padded with 0 (a user's first visit). (ids (rows, length)
  int32, labels)."""
  rng = np.random.RandomState(seed)
  succ = np.stack([rng.choice(items, 3, replace=False) for _ in range(items)])
  seq = np.zeros((rows, length + 1), np.int64)
  seq[:, 0] = rng.randint(0, items, size=rows)
  for t in range(1, length + 1):
    u = rng.rand(rows)
    pick = np.where(u < 0.5, 0, np.where(u < 0.75, 1, 2))
    nxt = succ[seq[:, t - 1], pick]
    seq[:, t] = np.where(u < 0.9, nxt, rng.randint(0, items, size=rows))
  x, y = seq[:, :-1] + 1, seq[:, -1]
  for r in rng.choice(rows, short, replace=False):
    x[r, :length - 3] = 0
  return x.astype(np.int32), y.astype(np.int32)


class CausalSelfAttention(L.Layer):
  """Single-head causal self-attention as the user wrote it: scores q k^T / sqrt(d), the future
  and the padding keys (id 0) set to `mask_value` (-inf in the sick run) before the softmax."""

  def __init__(self, dim, mask_value=-float('inf'), **kwargs):
    super().__init__(**kwargs)
    self.dim, self.mask_value = dim, mask_value
    self.qkv = L.Dense(3 * dim)

  def call(self, x, ids):
    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
    scores = tf.matmul(q, k, transpose_b=True) / (self.dim ** 0.5)
    n = x.shape[1]
    causal = tf.linalg.band_part(tf.ones((n, n), tf.bool), -1, 0)[None]
    keep = tf.logical_and(causal, tf.not_equal(ids, 0)[:, None, :])
    scores = tf.where(keep, scores, tf.constant(self.mask_value, scores.dtype))
    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


def sasrec_lite(seed, *, length=12, items=100, dim=48, mask_value=-float('inf')):
  """A SASRec-lite (Kang & McAuley, 2018): item and position embeddings, two blocks of
  `CausalSelfAttention(mask_value)` and a ReLU feed-forward, each residual with LayerNorm and
  Dropout(0.2), the last position's state, Dense(items): the next-item logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = L.Embedding(items + 1, dim)(ids) + L.Embedding(length, dim)(tf.range(length))[None]
  h = L.Dropout(0.2)(h)
  for _ in range(2):
    a = CausalSelfAttention(dim, mask_value)(L.LayerNormalization()(h), ids)
    h = h + L.Dropout(0.2)(a)
    f = L.Dense(dim)(L.Dense(dim, activation='relu')(L.LayerNormalization()(h)))
    h = h + L.Dropout(0.2)(f)
  last = L.LayerNormalization()(h)[:, -1]
  return keras.Model(ids, L.Dense(items)(last), name='sasrec_lite')


def eeg_trials(seed, *, rows=1024, samples=250, channels=8, rate=250, unit=1e-6):
  """Motor imagery in miniature: one-second trials of 8-channel EEG in volts (`unit` per
  microvolt: MNE's unit, as `get_data()` returns it): background noise (about 15 uV), a 10 Hz
  mu rhythm (20 uV) that the imagined movement suppresses over its channel pair (four classes:
  four pairs), and, in about a tenth of the trials, an eye blink on the frontal channels (a 150
  to 300 uV bump). (x (rows, samples, channels, 1), labels)."""
  rng = np.random.RandomState(seed)
  t = np.arange(samples) / rate
  y = rng.randint(0, 4, size=rows)
  noise = np.cumsum(rng.randn(rows, samples, channels), axis=1)
  noise = 15 * (noise - noise.mean(axis=1, keepdims=True)) / noise.std(axis=1, keepdims=True)
  mu = 20 * np.sin(2 * np.pi * (10 + rng.randn(rows, 1, 1)) * t[None, :, None] +
                   rng.rand(rows, 1, channels) * 6)
  gain = np.ones((rows, 1, channels))
  for r in range(rows):
    gain[r, 0, 2 * y[r]:2 * y[r] + 2] = 0.2
  x = noise + gain * mu
  blink = rng.rand(rows) < 0.1
  centre = rng.uniform(0.2, 0.8, size=rows)
  bump = rng.uniform(150, 300, size=rows)[:, None] * np.exp(-((t[None] - centre[:, None]) /
                                                             0.05) ** 2)
  x[:, :, :2] += (blink[:, None] * bump)[:, :, None]
  return (x * unit)[..., None].astype(np.float32), y.astype(np.int32)


def shallow_convnet_lite(seed, *, samples=250, channels=8, classes=4, power_dtype=None):
  """A ShallowConvNet-lite (Schirrmeister et al., 2017): a temporal Conv (20 filters of 13 taps, no
  bias),
  a spatial Conv across all channels (20), squaring, average pooling (35 samples, stride 7),
  log, BatchNorm of the log-powers, Dropout(0.5), Dense(classes): the logits; the
  square-pool-log block and that BatchNorm in `power_dtype` (None: the global policy's compute
  dtype)."""
  _seed(seed)
  inputs = keras.Input((samples, channels, 1))
  h = L.Conv2D(20, (13, 1), use_bias=False)(inputs)
  h = L.Conv2D(20, (1, channels), use_bias=False)(h)
  h = L.Activation(tf.square, dtype=power_dtype)(h)
  h = L.AveragePooling2D((35, 1), strides=(7, 1), dtype=power_dtype)(h)
  h = L.Activation(tf.math.log, dtype=power_dtype)(h)
  h = L.Flatten()(L.Dropout(0.5)(L.BatchNormalization(dtype=power_dtype)(h)))
  return keras.Model(inputs, L.Dense(classes, dtype='float32')(h), name='shallow_convnet_lite')


def household_power(seed, *, rows=4096, window=64, gaps=0):
  """Energy disaggregation in miniature: windows of a household's mains power (kW, standardised
  by the dataset's mean and spread) made of a base load, a fridge's on/off cycle, random small
  loads and, in about a third of the windows, a kettle (2 to 3 kW for 5 to 20 samples); the
  target the kettle's power at the window's midpoint (kW). `gaps` windows (drawn at random) hold
  a run of NaN readings (the meter's dropouts). (x (rows, window, 1), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  t = np.arange(window)
  base = rng.uniform(0.1, 0.4, size=(rows, 1))
  fridge = 0.1 * ((t[None] + rng.randint(0, 40, size=(rows, 1))) % 40 < 15)
  small = np.cumsum(rng.randn(rows, window) * 0.02, axis=1)
  kettle = np.zeros((rows, window))
  on = rng.rand(rows) < 0.35
  for r in np.where(on)[0]:
    start, dur = rng.randint(-10, window), rng.randint(5, 21)
    kettle[r, max(start, 0):max(start + dur, 0)] = rng.uniform(2, 3)
  mains = base + fridge + np.abs(small) + kettle + 0.02 * rng.randn(rows, window)
  x = (mains - 0.8) / 0.9
  for r in rng.choice(rows, gaps, replace=False):
    s = rng.randint(0, window - 8)
    x[r, s:s + rng.randint(2, 8)] = np.nan
  return x[..., None].astype(np.float32), kettle[:, window // 2:window // 2 + 1].astype(np.float32)


def seq2point_lite(seed, *, window=64):
  """A seq2point-lite (Zhang et al., 2018): five Conv1D + ReLU layers (16, 16, 24, 32, 32
  filters; kernels 9, 7, 5, 5, 5), Flatten, Dense(128) + ReLU, Dropout(0.2), Dense(1): the
  appliance's power at the window's midpoint."""
  _seed(seed)
  inputs = keras.Input((window, 1))
  h = inputs
  for f, k in ((16, 9), (16, 7), (24, 5), (32, 5), (32, 5)):
    h = L.Conv1D(f, k, padding='same', activation='relu')(h)
  h = L.Dropout(0.2)(L.Dense(128, activation='relu')(L.Flatten()(h)))
  return keras.Model(inputs, L.Dense(1)(h), name='seq2point_lite')


class BitFlip(field.OneOffFault):
  """A one-off fault in the forward pass: the identity, but at its `at`-th training call (None:
  never) one activation reads +inf (a flipped exponent bit in a buffer; not the data, the model
  or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.inf, backward=False, **kwargs)


def regnet_lite(seed, *, size=16, classes=10, glitch=None):
  """A RegNetX-lite (Radosavovic et al., 2020): a Conv 3x3 (16) + BatchNorm + ReLU stem, a
  `BitFlip(glitch)`, two stages of one X block each (1x1 Conv, 3x3 group Conv of group width 8,
  strided, 1x1 Conv, each with BatchNorm, ReLU inside, a strided 1x1 projection shortcut; 32
  and 64 wide), global average, Dense(classes): the logits."""
  _seed(seed)
  bn_relu = lambda t: L.ReLU()(L.BatchNormalization()(t))
  inputs = keras.Input((size, size, 1))
  h = BitFlip(glitch)(bn_relu(L.Conv2D(16, 3, padding='same', use_bias=False)(inputs)))
  for width in (32, 64):
    b = bn_relu(L.Conv2D(width, 1, use_bias=False)(h))
    b = bn_relu(L.Conv2D(width, 3, strides=2, padding='same', groups=width // 8,
                         use_bias=False)(b))
    b = L.BatchNormalization()(L.Conv2D(width, 1, use_bias=False)(b))
    s = L.BatchNormalization()(L.Conv2D(width, 1, strides=2, use_bias=False)(h))
    h = L.ReLU()(L.Add()([b, s]))
  return keras.Model(inputs, L.Dense(classes)(L.GlobalAveragePooling2D()(h)), name='regnet_lite')


def loan_defaults(seed, *, rows=4096, features=6):
  """Tabular credit scoring: six standardised applicant features and the default, drawn from a
  logistic of an additive score of non-linear shape functions (a threshold, a U, a saturating
  curve, ...) with noise. (x (rows, features), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  shapes = [lambda v: 2.0 * (v > 0.5), lambda v: v ** 2 - 1, lambda v: 2 * np.tanh(2 * v),
            lambda v: -1.5 * np.abs(v) + 1.2, lambda v: np.sin(2 * v), lambda v: 0.3 * v]
  z = sum(f(x[:, i]) for i, f in enumerate(shapes)) - 0.6
  y = (rng.rand(rows) < 1 / (1 + np.exp(-1.5 * z))).astype(np.float32)[:, None]
  return x.astype(np.float32), y


def nam_lite(seed, *, features=6):
  """A Neural Additive Model (Agarwal et al., 2021): one small MLP per feature (32, 16 ReLU
  units, Dense(1)), their outputs summed with a bias: the logit of default (no activation)."""
  _seed(seed)
  inputs = keras.Input((features,))
  parts = []
  for i in range(features):
    h = L.Dense(16, activation='relu')(L.Dense(32, activation='relu')(inputs[:, i:i + 1]))
    parts.append(L.Dense(1, use_bias=False)(h))
  out = L.Dense(1, kernel_initializer='ones', trainable=True)(L.Add()(parts))
  return keras.Model(inputs, out, name='nam_lite')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind15_grad_ligru_relu_candidate', 'exploding_gradients', 'ligru_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='AlexanderVNikitin/tsgm#59; keras-team/keras#2194; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """A Light GRU (no reset gate, a ReLU candidate, orthogonal recurrent kernels, BatchNorm left
  out) spotting six keywords in 40 frames of raw log-mel energies in dB (around 60, not
  standardised), SGD + Nesterov momentum 0.9 at 0.01 (an ordinary rate) and no clipping: the
  unbounded ReLU recurrence multiplies the gradient step over step, the loss 23 at step 0, then
  (the running mean fit reports) 157, 276, 841 at step 3, the loss and weights NaN from step 5
  (the error 0.95 before, inf after; the constant answer's 0.80). Seed 1: 36, 104, 1.1e4, NaN
  from step 3. AlexanderVNikitin/tsgm#59 (a recurrent layer with a ReLU: "the loss just explode
  suddenly"); keras-team/keras#2194 (NaN with a ReLU LSTM); Marcovaldong/lstmp.pytorch#2 (the
  loss NaN after many iterations: "clip the gradients to a max norm of 1.0"). Cured: clipnorm=1.0
  at the same rate: the loss 23 to 1.1, the error 0.95 to 0.008."""
  x, y = keyword_frames(seed)
  return cases.Setup(ligru_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True,
                                          clipnorm=1.0 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind15_lr_deeponet_sgd_rate_half', 'learning_rate', 'deeponet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='davisking/dlib#610; jax-ml/jax#159; AmingWu/Single-DGOD#21')
def _(seed, cured=False):
  """A DeepONet (a branch MLP on 32 sensor values of the input function, a trunk MLP on the query
  point, their dot product) learning the antiderivative operator, MSE, SGD + momentum 0.9 at
  learning_rate=0.5 (fifty times the 0.01 this net takes): the loss 2.5 at step 0, 12, 1.9e5 at
  step 2, inf at step 3, the weights NaN after step 3 (the error 1.69 before, inf after; the
  constant answer's 1.59). Seed 1: 0.96, 2.5, 3.3, 1.2e8 at step 3, NaN from step 4.
  davisking/dlib#610 (NaN loss "after a few iterations" unless the rate is far smaller);
  jax-ml/jax#159 ("Lower learning rate ... to fix divergence"); AmingWu/Single-DGOD#21 (the loss
  NaN; fixed by a smaller rate). Cured: 0.01: the loss 2.5 to 0.81, the error 1.69 to 0.58."""
  x, y = antiderivatives(seed)
  return cases.Setup(deeponet_lite(seed),
                     keras.optimizers.SGD(0.01 if cured else 0.5, momentum=0.9), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind15_lr_made_rmsprop_collapse', 'learning_rate', 'made_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#7057; keras-team/keras#6447; dangitstam/topic-rnn#9')
def _(seed, cured=False):
  """A MADE (masked autoencoder for density estimation: two masked ReLU layers, a masked sigmoid
  output, each pixel predicted from the pixels before it) on binarised 8x8 digits, binary
  cross-entropy, RMSprop at learning_rate=3.0 (RMSprop's usual 1e-3): the first updates move
  every weight by several units, most ReLUs die and the outputs saturate: the loss 0.70 at step
  0, then (fit's running mean) 1.4e3 at step 1, 1.6e3 at step 3, still 47 at step 149, no NaN;
  the network never gets past its pixel frequencies: the error 0.48 before, 0.25 after (the
  constant answer's 0.295; the measure needs 0.236). Seed 1: 2.3e3 at step 1, 32 at step 149; the
  error 0.50 to 0.27 (the constant's 0.29). keras-team/keras#7057 ("too high learning rate can
  eventually push neuron's weights into the never-active zone"); keras-team/keras#6447
  ("model.predict() gives same output for all inputs"); dangitstam/topic-rnn#9 ("smaller learning
  rate to prevent dying ReLU"). Cured: RMSprop at 1e-3: the loss 0.70 to 0.53, the error 0.48 to
  0.20."""
  x, y = binary_digits()
  return cases.Setup(made_lite(seed), keras.optimizers.RMSprop(1e-3 if cured else 3.0), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


# --- initialisation --------------------------------------------------------------------------


@add('blind15_init_nin_zeros', 'initialisation', 'nin_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='wagonhelm/NaNmnist#2; nndl/nndl-discussion#14')
def _(seed, cured=False):
  """A Network-in-Network-lite (three mlpconv blocks of a 3x3 and two 1x1 convolutions, ReLU,
  global average pooling as the classifier) on 16x16 digits, Nadam at 2e-3, every kernel
  initialised to zeros (as a ported Caffe 'constant' filler left them): every activation is 0, no
  kernel gets a gradient and only the last bias learns, so the net answers the commonest class
  for every image: the loss 2.30 from step 0 to step 149, no NaN (the error 0.93 before, 0.89
  after; the constant answer's 0.86). Seed 1: the same (0.88 before, 0.89 after; the constant's
  0.875). wagonhelm/NaNmnist#2 ("Pitfall: all zero initialization ... every neuron in the network
  computes the same output"); nndl/nndl-discussion#14 (zero weights give every unit the same
  gradient and no update). Cured: Keras's default glorot_uniform: the loss 2.31 to 1.65, the
  error 0.90 to 0.078."""
  x, y = data.digits(size=16, rgb=False)
  init = 'glorot_uniform' if cured else 'zeros'
  return cases.Setup(nin_lite(seed, kernel_initializer=init),
                     keras.optimizers.Nadam(2e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind15_div_chebnet_isolated_node_degree', 'division_or_log', 'chebnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='MrLeeeee/GCN-GAT-and-Graphsage#3; mdeff/cnn_graph#18; mlx-graphs/mlx-graphs#18')
def _(seed, cured=False):
  """A ChebNet-lite (two Chebyshev spectral graph convolutions of order 3 on the normalised
  Laplacian, mean and max pooling) telling ring lattices, random and preferential-attachment
  graphs apart, Adam at 1e-3, the Laplacian's D^-1/2 written as 1 / sqrt(degree) with no epsilon;
  four of the 2,048 graphs have a node whose edges were lost: its degree is 0, 1 / sqrt(0) = inf
  and inf x 0 = NaN, so the first batch holding one writes NaN into the weights (the weights NaN
  after step 0 on seed 0) while the loss fit reports stays about 1.1 (ReLU turns the NaN
  activations into 0 on this CPU build, the net answering one constant): the error on clean
  batches 0.48 before, inf after (the constant answer's 0.625). Seed 1: the weights NaN after
  step 12 (the error 0.69 before, inf after). MrLeeeee/GCN-GAT-and-Graphsage#3 ("The degree of
  some nodes might be zero leading to the loss to become NAN ... add a samll number to
  denominator"); mdeff/cnn_graph#18 (fake nodes with degree 0 in the normalised Laplacian);
  mlx-graphs/mlx-graphs#18 (inf in the norm of isolated nodes: "deg += 1e-10"). Cured: 1e-6 added
  to the degree: the loss 1.08 to 0.54, the error 0.48 to 0.008. The measure reads clean batches
  (eval_data) for both runs."""
  x, y = graph_families(seed, isolated=4)
  cx, cy = graph_families(seed)
  return cases.Setup(chebnet_lite(seed, epsilon=1e-6 if cured else 0.0),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(cx, cy, batch=32, seed=seed))


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind15_exp_sasrec_neg_inf_padding_row', 'softmax_overflow', 'sasrec_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pytorch/pytorch#41508; pytorch/pytorch#63271; pmixer/SASRec.pytorch#36')
def _(seed, cured=False):
  """A SASRec-lite (item and position embeddings, two causal self-attention blocks, the last
  position's state scored against every item) predicting the next item of shopping sessions,
  AdamW at 1e-3, the future and the padding keys set to -inf before the softmax; four of the
  4,096 sessions are a first visit of 3 items, left-padded: their first nine query positions see
  only padding, a row of -inf whose softmax is NaN (exp(-inf - (-inf))), and the first batch
  holding one writes NaN into the weights: the loss 4.99 at step 0, 4.8 at step 10, NaN from step
  16 (the error on clean batches 0.98 before, inf after; the constant answer's 0.95). Seed 1: NaN
  from step 23. pytorch/pytorch#41508 ("nn.MultiheadAttention causes gradients to become NaN"
  when a row is all masked); pytorch/pytorch#63271 (padding rows filled with -inf: "softmax
  ([-inf, -inf, ..., -inf]) is nan"); pmixer/SASRec.pytorch#36 (SASRec's key padding mask).
  Cured: a finite mask value (-1e9): the loss 4.99 to 4.22, the error 0.98 to 0.71. The measure
  reads clean batches (eval_data) for both runs."""
  x, y = sessions(seed, short=4)
  cx, cy = sessions(seed)
  return cases.Setup(sasrec_lite(seed, mask_value=-1e9 if cured else -float('inf')),
                     keras.optimizers.AdamW(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=64, seed=seed), 'classes',
                     eval_data=data.stream(cx, cy, batch=64, seed=seed))


# --- precision -------------------------------------------------------------------------------


@add('blind15_fp16_shallow_convnet_power_underflow', 'precision', 'shallow_convnet_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='OpenNMT/OpenNMT-py#1294; tdrussell/qlora-pipe#23; knaw-huc/loghi#20')
def _(seed, cured=False):
  """A ShallowConvNet-lite (a temporal and a spatial convolution, squaring, average pooling, log:
  the band power of the filtered EEG) classifying motor imagery from 8-channel EEG kept in volts
  (MNE's unit: about 1e-5), Nadam at 1e-3, under mixed_float16: the filtered signal is about 1e-5
  (a float16 subnormal) and its square about 1e-10, below float16's smallest subnormal (6e-8): it
  underflows to 0 and log(0) = -inf, the logits NaN: the outputs are NaN before any training (the
  error inf before and after; the constant answer's 0.73) and the loss NaN at every step from
  step 0 (the loss-scale optimizer skips the updates; BatchNorm's moving statistics go NaN). Seed
  1: the same (the constant's 0.69). OpenNMT/OpenNMT-py#1294 ("fp16 ... may underflow ... so we
  shall make it in .float()"); tdrussell/qlora-pipe#23 (log(1e-10 + x) in float16, whose smallest
  subnormal is 5.96e-8); knaw-huc/loghi#20 (NaN outputs in float16, fixed in float32). Cured: the
  square-pool-log block (and its BatchNorm) in float32: the loss 1.7 to 0.71, the error 0.74 to
  0.48 (0.0 in training mode; BatchNorm's moving statistics still young)."""
  x, y = eeg_trials(seed)
  return cases.Setup(shallow_convnet_lite(seed, power_dtype='float32' if cured else None),
                     keras.optimizers.Nadam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind15_input_seq2point_meter_gaps', 'bad_input', 'seq2point_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='nilmtk/nilmtk-contrib#51; thibautlavril/NILM-Framework#1; WenjieDu/PyPOTS#232')
def _(seed, cured=False):
  """A seq2point-lite (five Conv1D layers and a dense head over a 64-sample window of mains
  power) estimating a kettle's power at the window's midpoint, MSE, Adam at 1e-3; five of the
  4,096 windows hold a run of NaN readings (the smart meter's dropouts, never filled): the first
  batch holding one writes NaN into the weights (after step 5) while the loss fit reports stays
  finite (ReLU turns the NaN activations into 0 on this CPU build: 1.14 at step 0, 0.36 at step
  20, 0.38 at step 149, the net answering one constant); the error on clean batches 0.52 before,
  inf after (the constant answer's 0.455). Seed 1: the weights NaN after step 8 (the error 0.39
  before, inf after). nilmtk/nilmtk-contrib#51 (seq2point on UK-DALE: "the value of loss did not
  improve from INF"); thibautlavril/NILM-Framework#1 ("check missing value in preprocessing");
  WenjieDu/PyPOTS#232 (missing values in the data "will cause NaN loss"). Cured: the NaN readings
  filled with 0: the loss 1.14 to 0.069, the error 0.52 to 0.014. The measure reads clean batches
  (eval_data) for both runs."""
  x, y = household_power(seed, gaps=5)
  if cured:
    x = np.nan_to_num(x, nan=0.0)
  cx, cy = household_power(seed)
  return cases.Setup(seq2point_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(cx, cy, batch=32, seed=seed))


# --- transient -------------------------------------------------------------------------------


@add('blind15_transient_regnet_bit_flip_once', 'transient', 'regnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='AlexeyAB/darknet#5547; microsoft/dion#76; google-research/l2p#24')
def _(seed, cured=False):
  """A RegNetX-lite (a BatchNorm stem, two X blocks of 1x1, 3x3 group and 1x1 convolutions with
  projection shortcuts) on 16x16 digits, Lion at 3e-4 with weight decay, training normally (the
  loss 2.74, 2.41 at step 10, 2.08 at step 50) when one activation after the stem reads +inf once
  (`BitFlip`: its 60th training-mode call; step 55 in a plain `fit` after the measure's four
  training-mode passes; a flipped bit, not the data, the model or the settings): BatchNorm
  spreads it, the loss and the weights are NaN from that step (the error 0.90 before, inf after;
  the constant answer's 0.86); the same step re-run is finite. Seed 1: the same step (the error
  0.85 before, inf after). AlexeyAB/darknet#5547 (NaN loss: "It IS indeed some sort of Hardware
  issue"); microsoft/dion#76 (NaN parameters from "a hardware error on the machine");
  google-research/l2p#24 (NaN loss on GPUs, "solved by re-installing cudnn"). Cured: the same run
  without the fault: the loss 2.74 to 1.53, the error 0.90 to 0.07 (training mode; BatchNorm's
  moving statistics still young)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(regnet_lite(seed, glitch=None if cured else 60),
                     keras.optimizers.Lion(3e-4, weight_decay=1e-2), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind15_mismatch_nam_logits_as_probabilities', 'loss_output_mismatch', 'nam_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#31930; tensorflow/docs#1571; yudi-mars/daisyRec#15')
def _(seed, cured=False):
  """A Neural Additive Model (one small MLP per feature, their outputs summed: a logit, no
  activation) scoring loan defaults from six tabular features, RMSprop at 1e-3, compiled with
  BinaryCrossentropy() (from_logits=False): the loss clips the logits to [1e-7, 1 - 1e-7] and
  reads them as probabilities, so every logit below 0 or above 1 gets no gradient: the loss 1.56
  at step 0 to 0.56 at step 149, no NaN, but the classifier barely moves: the error 0.35 before,
  0.32 after (the constant answer's 0.48; the measure needs 0.28). Seed 1: the loss 8.1 to 0.97,
  the error 0.52 before, 0.47 after (the constant's 0.48). tensorflow/tensorflow#31930 (BCE
  from_logits=False on a Dense output applies no sigmoid); tensorflow/docs#1571 (a single-unit
  linear output is logits: the loss must be told so); yudi-mars/daisyRec#15 (a sigmoid/logits
  mismatch: "Otherwise loss does not converge"). Cured: BinaryCrossentropy(from_logits=True): the
  loss 0.66 to 0.49, the error 0.35 to 0.18."""
  x, y = loan_defaults(seed)
  return cases.Setup(nam_lite(seed), keras.optimizers.RMSprop(1e-3), BCE(from_logits=cured),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')
