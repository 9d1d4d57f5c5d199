"""A nineteenth blind set of sick scenarios (the 'blind19' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind18.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a CondConv-lite, a SegRNN-lite, a maxout network,
a Poincare-embedding-lite, an MPNN-lite, an AdaIN style-transfer-lite, an SRU-lite, a
Res2Net-lite, a Hopfield-pooling-lite and a CREPE-lite). Each builder takes `cured`: the same
run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked
with plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and
1), the cured twin passes runner's "did it train" measure in the same number of steps (seed
0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND19 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND19.add` with split='blind19'."""
  return BLIND19.add(name, expected, arch, split='blind19', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def condconv_denoise(seed, *, rows=2048, noise=0.3):
  """Denoising in miniature: the digits as 16x16 grey images (each pixel a 2x2 block), with
  Gaussian noise (`noise`) as the input, the clean image the label. (x, y) both (rows, 16, 16,
  1)."""
  rng = np.random.RandomState(seed)
  x, _ = data.digits(size=16, rgb=False)
  y = x[rng.randint(0, len(x), rows)]
  return (y + noise * rng.randn(*y.shape)).astype(np.float32), y.astype(np.float32)


class CondConv(L.Layer):
  """A CondConv layer (Yang et al., 2019): `experts` 3x3 kernels mixed per example by a routing
  function (sigmoid of a Dense over the global average of the input): sum_k r_k(x) (W_k * x),
  the same as convolving with the mixed kernel."""

  def __init__(self, filters, experts=4, **kwargs):
    super().__init__(**kwargs)
    self.filters, self.experts = filters, experts
    self.route = L.Dense(experts, activation='sigmoid')
    self.convs = [L.Conv2D(filters, 3, padding='same') for _ in range(experts)]

  def call(self, x):
    r = self.route(keras.ops.mean(x, axis=(1, 2)))
    return sum(r[:, k, None, None, None] * conv(x) for k, conv in enumerate(self.convs))


def condconv_lite(seed, *, size=16, width=32, blocks=3):
  """A CondConv-lite restoration net: a 3x3 convolution (`width`), `blocks` residual blocks of
  a `CondConv` + ReLU, a 3x3 convolution to one channel added to the input (residual learning):
  the clean image."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(width, 3, padding='same', activation='relu')(inputs)
  for _ in range(blocks):
    h = h + L.ReLU()(CondConv(width)(h))
  return keras.Model(inputs, inputs + L.Conv2D(1, 3, padding='same')(h), name='condconv_lite')


def summed_mse(y, p):
  """The squared error summed over the pixels and the batch (`reduction='sum'`, as restoration
  code ports PyTorch's `size_average=False`)."""
  return tf.reduce_sum(tf.square(tf.cast(p, tf.float32) - tf.cast(y, tf.float32)))


def sensor_series(seed, *, rows=4096, lookback=48, horizon=8, channels=7):
  """Multivariate sensor series in miniature: seven channels, each a sum of a daily and a
  half-daily sinusoid (random phases and amplitudes) with noise, the channels sharing a slow
  trend; the window of 48 steps the input, the next 8 steps of every channel the label.
  (x (rows, lookback, channels), y (rows, horizon, channels))."""
  rng = np.random.RandomState(seed)
  t = np.arange(lookback + horizon)[None, :, None] + rng.randint(0, 24, (rows, 1, 1))
  amp = rng.uniform(0.5, 1.5, (rows, 1, channels))
  phase = rng.uniform(0, 2 * np.pi, (1, 1, channels))
  s = amp * np.sin(2 * np.pi * t / 24 + phase) + 0.5 * np.sin(2 * np.pi * t / 12 + 2 * phase)
  s += rng.randn(rows, 1, 1) * 0.02 * t / 10 + 0.1 * rng.randn(*s.shape)
  return s[:, :lookback].astype(np.float32), s[:, lookback:].astype(np.float32)


def segrnn_lite(seed, *, lookback=48, horizon=8, channels=7, segment=8, units=64):
  """A SegRNN-lite (Lin et al., 2023): the window cut into segments of `segment` steps, each
  segment of all channels embedded by Dense(`units`) + ReLU, a GRU over the segments, its last
  state to the horizon of every channel (Dense): the forecast."""
  _seed(seed)
  inputs = keras.Input((lookback, channels))
  h = L.Reshape((lookback // segment, segment * channels))(inputs)
  h = L.GRU(units)(L.Dense(units, activation='relu')(h))
  return keras.Model(inputs, L.Reshape((horizon, channels))(L.Dense(horizon * channels)(h)),
                     name='segrnn_lite')


def maxout_net(seed, *, inputs=64, units=64, pieces=4, layers=2, zeros=False):
  """A maxout network (Goodfellow et al., 2013): `layers` maxout layers (`units` units of
  `pieces` linear pieces each), Dense(10): the logits. `zeros`: every kernel initialised to
  zero (as the TensorFlow beginners' MNIST tutorial initialises W), else Glorot."""
  _seed(seed)
  init = 'zeros' if zeros else 'glorot_uniform'
  x = keras.Input((inputs,))
  h = x
  for _ in range(layers):
    h = L.Dense(units * pieces, kernel_initializer=init)(h)
    h = keras.ops.max(L.Reshape((units, pieces))(h), axis=-1)
  return keras.Model(x, L.Dense(10, kernel_initializer=init)(h), name='maxout_net')


def taxonomy(seed, *, branching=4, depth=4, rows=8192):
  """A taxonomy in miniature (a WordNet noun hierarchy's shape): a tree of `depth` levels below
  one root, `branching` children each (341 nodes); its transitive closure, the (ancestor,
  descendant) pairs below the root, each with a corrupted descendant (a random node that is not
  one), in random order. ((ancestor, candidate a, candidate b) ids (rows, 3), labels (rows,
  1): 1 if the first candidate is the descendant)."""
  rng = np.random.RandomState(seed)
  parent = [-1]
  frontier = [0]
  for _ in range(depth):
    nxt = []
    for p in frontier:
      for _ in range(branching):
        parent.append(p)
        nxt.append(len(parent) - 1)
    frontier = nxt
  n = len(parent)
  anc = np.zeros((n, n), bool)
  for v in range(n):
    p = parent[v]
    while p >= 0:
      anc[p, v] = True
      p = parent[p]
  pairs = np.argwhere(anc[1:]) + [1, 0]  # The root has no corrupted candidate.
  pick = pairs[rng.randint(0, len(pairs), rows)]
  bad = rng.randint(0, n, rows)
  for r in range(rows):
    while anc[pick[r, 0], bad[r]] or bad[r] == pick[r, 0]:
      bad[r] = rng.randint(0, n)
  first = rng.rand(rows) < 0.5
  a, b = np.where(first, pick[:, 1], bad), np.where(first, bad, pick[:, 1])
  return np.stack([pick[:, 0], a, b], 1).astype(np.int32), first.astype(np.float32)[:, None]


class BallProjection(keras.constraints.Constraint):
  """The Poincare embeddings' projection (Nickel & Kiela, 2017) after each update: a row whose
  norm reaches 1 is pulled back to norm 1 - `eps`."""

  def __init__(self, eps=1e-5):
    self.eps = eps

  def __call__(self, w):
    n = tf.norm(w, axis=-1, keepdims=True)
    return tf.where(n >= 1.0, w / n * (1.0 - self.eps), w)


class PoincareDistance(L.Layer):
  """The Poincare ball's distance as the paper writes it, arcosh(1 + 2 |u - v|^2 / ((1 - |u|^2)
  (1 - |v|^2))), with no guard on the denominators (a point on or beyond the boundary divides by
  zero or by a negative number)."""

  def call(self, u, v):
    uu = tf.reduce_sum(tf.square(u), -1)
    vv = tf.reduce_sum(tf.square(v), -1)
    duv = tf.reduce_sum(tf.square(u - v), -1)
    return tf.math.acosh(1.0 + 2.0 * duv / ((1.0 - uu) * (1.0 - vv)))[:, None]


def poincare_lite(seed, *, nodes=341, dim=5, project=False):
  """A Poincare-embedding-lite: one embedding of `dim` per node (uniform in +-1e-3, the paper's
  initialisation; `project`: `BallProjection` after each update), the `PoincareDistance` of the
  ancestor to each candidate; the output d(anc, b) - d(anc, a) (positive: the first candidate is
  the nearer)."""
  _seed(seed)
  ids = keras.Input((3,), dtype='int32')
  emb = L.Embedding(nodes, dim, embeddings_initializer=keras.initializers.RandomUniform(
      -1e-3, 1e-3), embeddings_constraint=BallProjection() if project else None)
  dist = PoincareDistance()
  u = emb(ids[:, 0])
  return keras.Model(ids, dist(u, emb(ids[:, 2])) - dist(u, emb(ids[:, 1])),
                     name='poincare_lite')


def ranking_softplus(y, out):
  """The paper's softmax over the true and the corrupted candidate: softplus(-s out), s = +1 or
  -1 by the candidates' order (the mean over the batch)."""
  s = 2.0 * tf.cast(y, tf.float32) - 1.0
  return tf.reduce_mean(tf.nn.softplus(-s * tf.cast(out, tf.float32)))


def molecules(seed, *, rows=4096, atoms=12, phosphorus=1e-3):
  """Small molecules in miniature: 5 to 12 heavy atoms (C, N, O, S; a fraction `phosphorus` of
  the molecules hold one P) bonded as a chain with ring closures; each atom's features its
  element (one-hot of five) and its Gasteiger partial charge (the electronegativity pull of its
  neighbours), which RDKit returns as NaN for every atom of a molecule it has no parameters for
  (the P ones); the label a logP-like property (element contributions, polar charges, ring
  bonds), standardised. ((atoms (rows, atoms, 6), bonds (rows, atoms, atoms)), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  neg = np.array([2.55, 3.04, 3.44, 2.58, 2.19])  # C, N, O, S, P electronegativity.
  contrib = np.array([0.4, -0.6, -0.8, 0.5, -0.3])
  x = np.zeros((rows, atoms, 6), np.float32)
  adj = np.zeros((rows, atoms, atoms), np.float32)
  y = np.zeros(rows)
  for r in range(rows):
    n = rng.randint(5, atoms + 1)
    el = rng.choice(4, n, p=[0.65, 0.15, 0.15, 0.05])
    has_p = rng.rand() < phosphorus
    if has_p:
      el[rng.randint(n)] = 4
    a = np.zeros((atoms, atoms))
    for i in range(1, n):
      a[i, i - 1] = a[i - 1, i] = 1
    rings = rng.randint(0, 3)
    for _ in range(rings):
      i, j = rng.choice(n, 2, replace=False)
      a[i, j] = a[j, i] = 1
    deg = np.maximum(a[:n, :n].sum(1), 1)
    charge = 0.15 * (neg[el] - a[:n, :n] @ neg[el] / deg)
    x[r, np.arange(n), el] = 1
    x[r, :n, 5] = np.nan if has_p else charge
    adj[r] = a
    y[r] = contrib[el].sum() - 6 * np.abs(charge).sum() + 0.3 * rings
  y = (y - y.mean()) / y.std()
  return (x, adj), y[:, None].astype(np.float32)


def mpnn_lite(seed, *, atoms=12, features=6, dim=32, rounds=3):
  """An MPNN-lite (Gilmer et al., 2017): a linear atom embedding (`dim`), `rounds` rounds of
  messages (a Dense of the neighbours' states summed over the bonds) and a GRU-style update
  (update and reset gates), a sum readout over the atoms present, Dense(64) + SiLU, Dense(1):
  the property."""
  _seed(seed)
  x, adj = keras.Input((atoms, features)), keras.Input((atoms, atoms))
  present = keras.ops.expand_dims(keras.ops.cast(keras.ops.sum(x[..., :5], -1) > 0, 'float32'),
                                  -1)
  h = L.Dense(dim)(x) * present
  msg, gate_z, gate_r, cand = L.Dense(dim), L.Dense(dim), L.Dense(dim), L.Dense(dim)
  for _ in range(rounds):
    m = keras.ops.matmul(adj, msg(h))
    z = keras.ops.sigmoid(gate_z(L.Concatenate()([m, h])))
    r = keras.ops.sigmoid(gate_r(L.Concatenate()([m, h])))
    c = keras.ops.tanh(cand(L.Concatenate()([m, r * h])))
    h = ((1 - z) * h + z * c) * present
  out = L.Dense(64, activation='silu')(keras.ops.sum(h, axis=1))
  return keras.Model([x, adj], L.Dense(1)(out), name='mpnn_lite')


def style_pairs(seed, *, rows=2048, size=16):
  """Style transfer in miniature, in the pixel range VGG-based style transfer code feeds its
  encoder (0 to 255, the ImageNet channel means subtracted): a content image (a digit, 16x16,
  grey made RGB, dark strokes on a light ground) and a style image (a colour texture: smooth
  noise with its own per-channel mean and spread); the label the content re-coloured to the
  style's channel statistics (AdaIN at the pixel level), in [0, 1]. ((content, style) (rows,
  size, size, 3) each, y (rows, size, size, 3))."""
  rng = np.random.RandomState(seed)
  digits, _ = data.digits(size=size, rgb=True)
  c = 255.0 * (1.0 - digits[rng.randint(0, len(digits), rows)])
  noise = rng.randn(rows, size // 4, size // 4, 3).repeat(4, 1).repeat(4, 2)
  noise += 0.5 * rng.randn(rows, size, size, 3)
  noise = (noise - noise.mean((1, 2), keepdims=True)) / noise.std((1, 2), keepdims=True)
  m, s = rng.uniform(40, 215, (rows, 1, 1, 3)), rng.uniform(10, 60, (rows, 1, 1, 3))
  style = np.clip(m + s * noise, 0, 255)
  cm, cs = c.mean((1, 2), keepdims=True), c.std((1, 2), keepdims=True) + 1e-3
  y = np.clip(((c - cm) / cs * style.std((1, 2), keepdims=True) +
               style.mean((1, 2), keepdims=True)) / 255.0, 0, 1)
  means = np.array([123.7, 116.8, 103.9])
  return ((c - means).astype(np.float32), (style - means).astype(np.float32)), y.astype(
      np.float32)


class AdaIN(L.Layer):
  """Adaptive instance normalisation (Huang & Belongie, 2017): the content features
  re-normalised to the style features' per-channel mean and standard deviation over the image,
  the statistics written as the user wrote them, sum / count over the pixels, in the layer's
  compute dtype (`float32_stats`: computed in float32, the result cast back)."""

  def __init__(self, float32_stats=False, eps=1e-5, **kwargs):
    super().__init__(**kwargs)
    self.float32_stats, self.eps = float32_stats, eps

  def call(self, content, style):
    dtype = content.dtype
    if self.float32_stats:
      content, style = tf.cast(content, tf.float32), tf.cast(style, tf.float32)
    n = tf.cast(tf.shape(content)[1] * tf.shape(content)[2], content.dtype)

    def stats(t):
      mean = tf.reduce_sum(t, axis=(1, 2), keepdims=True) / n
      var = tf.reduce_sum(tf.square(t - mean), axis=(1, 2), keepdims=True) / n
      return mean, tf.sqrt(var + self.eps)

    (cm, cs), (sm, ss) = stats(content), stats(style)
    return tf.cast((content - cm) / cs * ss + sm, dtype)


def adain_lite(seed, *, size=16, width=32, float32_stats=False):
  """An AdaIN style-transfer-lite: a shared encoder (two 3x3 convolutions of `width`, ReLU) of
  the content and the style image, `AdaIN(float32_stats)`, a decoder (a 3x3 convolution of
  `width` + ReLU, a 3x3 convolution to RGB, sigmoid, in float32): the stylised image."""
  _seed(seed)
  content, style = keras.Input((size, size, 3)), keras.Input((size, size, 3))
  enc = [L.Conv2D(width, 3, padding='same', activation='relu') for _ in range(2)]

  def encode(t):
    for conv in enc:
      t = conv(t)
    return t

  h = AdaIN(float32_stats)(encode(content), encode(style))
  h = L.Conv2D(width, 3, padding='same', activation='relu')(h)
  out = L.Conv2D(3, 3, padding='same', activation='sigmoid', dtype='float32')(h)
  return keras.Model([content, style], out, name='adain_lite')


def support_tickets(seed, *, rows=8192, length=20, vocab=160, topics=4, keywords=6):
  """Support tickets routed by topic in miniature: 20 word ids, two or three keywords of the
  ticket's topic (six per topic) among filler words, and one keyword of another topic in 30% of
  the tickets (a distractor); the label the topic. (ids (rows, length), labels)."""
  rng = np.random.RandomState(seed)
  keys = 2 + np.arange(topics * keywords).reshape(topics, keywords)
  x = rng.randint(2 + topics * keywords, vocab, size=(rows, length))
  y = rng.randint(0, topics, rows)
  for r in range(rows):
    k = rng.randint(2, 4)
    x[r, rng.choice(length, k, replace=False)] = rng.choice(keys[y[r]], k)
    if rng.rand() < 0.3:
      other = (y[r] + rng.randint(1, topics)) % topics
      x[r, rng.randint(length)] = rng.choice(keys[other])
  return x.astype(np.int32), y.astype(np.int32)


class FlippedActivation(field.OneOffFault):
  """A one-off fault in the forward pass: the identity, but at its `at`-th training call (None:
  never) one element of the activations reads +inf (a flipped exponent bit in a buffer, a
  kernel that misfires once; not the data, the model or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=101, value=np.inf, backward=False, **kwargs)


class SRUCell(L.Layer):
  """The SRU's recurrence (Lei et al., 2018) as an RNN cell over the projected input x~ and the
  gate pre-activations (f, r) computed for every step at once: c_t = f_t c_{t-1} + (1 - f_t)
  x~_t, h_t = r_t tanh(c_t) + (1 - r_t) x~_t (a highway connection)."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = units

  def call(self, inputs, states):
    xt, f, r = tf.split(inputs, 3, axis=-1)
    f, r = tf.sigmoid(f), tf.sigmoid(r)
    c = f * states[0] + (1 - f) * xt
    return r * tf.tanh(c) + (1 - r) * xt, [c]


def sru_lite(seed, *, length=20, vocab=160, dim=32, units=64, topics=4, glitch=None):
  """An SRU-lite: word embeddings (`dim`; a `FlippedActivation(glitch)` after them), two SRU
  layers (`units`: a Dense to 3 x `units`, `SRUCell` over time), global max pooling, Dense(
  `topics`): the topic logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = FlippedActivation(glitch)(L.Embedding(vocab, dim)(ids))
  for _ in range(2):
    h = L.RNN(SRUCell(units), return_sequences=True)(L.Dense(3 * units)(h))
  return keras.Model(ids, L.Dense(topics)(L.GlobalMaxPooling1D()(h)), name='sru_lite')


def res2net_block(x, width, scales=4):
  """A Res2Net block (Gao et al., 2019): a 1x1 convolution, its channels split into `scales`
  groups, each group after the first a 3x3 convolution of itself plus the previous group's
  output (a hierarchy of receptive fields), concatenated, a 1x1 convolution, BatchNorm, the
  residual, ReLU."""
  h = L.Conv2D(width, 1, activation='relu')(x)
  groups = keras.ops.split(h, scales, axis=-1)
  outs, prev = [groups[0]], None
  for g in groups[1:]:
    prev = L.Conv2D(width // scales, 3, padding='same', activation='relu')(
        g if prev is None else g + prev)
    outs.append(prev)
  h = L.BatchNormalization()(L.Conv2D(width, 1)(L.Concatenate()(outs)))
  return L.ReLU()(h + x)


def res2net_lite(seed, *, size=16, width=32, activation='softmax'):
  """A Res2Net-lite: a 3x3 stem convolution (`width`), two `res2net_block`s with max-pooling
  after each, global average pooling, Dense(1, `activation`): the probability of the class."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(width, 3, padding='same', activation='relu')(inputs)
  for _ in range(2):
    h = L.MaxPooling2D()(res2net_block(h, width))
  return keras.Model(inputs, L.Dense(1, activation=activation)(L.GlobalAveragePooling2D()(h)),
                     name='res2net_lite')


def bags(seed, *, rows=8192, size=16, dim=16):
  """Multiple-instance bags in miniature (a slide of 16 patch descriptors, a basket of 16
  items): each instance a Gaussian vector; a positive bag holds one or two witness instances
  (near a hidden prototype, among decoys near a second one); the label whether the bag holds a
  witness. (x (rows, size, dim), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  proto, decoy = rng.randn(2, dim) * 1.2
  x = rng.randn(rows, size, dim)
  y = rng.rand(rows) < 0.5
  for r in range(rows):
    k = rng.randint(0, 3)
    x[r, rng.choice(size, k, replace=False)] += decoy
    if y[r]:
      x[r, rng.choice(size, rng.randint(1, 3), replace=False)] += proto
  return x.astype(np.float32), y[:, None].astype(np.float32)


class HopfieldPooling(L.Layer):
  """Hopfield pooling (Ramsauer et al., 2021): a learned state pattern (the query) retrieves from
  the stored patterns (the instances, projected to keys and values) by one update, the
  attention softmax(beta q . k_i); the softmax written exp(z) / sum(exp(z)) (`stable`:
  tf.nn.softmax); `beta` the inverse temperature (large: sharp retrieval of one pattern)."""

  def __init__(self, dim, beta, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.beta, self.stable = dim, beta, stable
    self.key, self.value = L.Dense(dim), L.Dense(dim)

  def build(self, shape):
    self.query = self.add_weight(shape=(self.dim,), initializer='glorot_uniform', name='query')

  def call(self, x):
    z = self.beta * tf.einsum('bnd,d->bn', self.key(x), self.query)
    a = tf.nn.softmax(z, axis=-1) if self.stable else field.naive_softmax(z)
    return tf.einsum('bn,bnd->bd', tf.cast(a, x.dtype), self.value(x))


def hopfield_lite(seed, *, size=16, dim=16, width=32, beta=8.0, stable=False):
  """A Hopfield-pooling-lite classifier of bags: an instance encoder (Dense(`width`) + GELU),
  `HopfieldPooling(width, beta, stable)`, Dense(1): the bag's logit."""
  _seed(seed)
  x = keras.Input((size, dim))
  h = L.Dense(width, activation='gelu')(x)
  return keras.Model(x, L.Dense(1)(HopfieldPooling(width, beta, stable)(h)),
                     name='hopfield_lite')


def pitch_frames(seed, *, rows=8192, length=256, classes=12, silence=1e-3, rate=8000.0):
  """Pitch estimation in miniature (CREPE's task): 256-sample audio frames at 8 kHz of a voice-
  like tone (a fundamental among 12 semitone bins from 110 Hz, three harmonics of random
  strength, random gain from -40 to 0 dB, faint noise); a fraction `silence` of the frames are
  digital silence (all zeros: the pauses between notes, labelled bin 0). (frames (rows,
  length), bins)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  f0 = 110.0 * 2 ** ((y + rng.uniform(-0.3, 0.3, rows)) / 12)
  t = np.arange(length) / rate
  phase = rng.uniform(0, 2 * np.pi, (rows, 1))
  x = sum(rng.uniform(0.2, 1.0, (rows, 1)) / k * np.sin(2 * np.pi * k * f0[:, None] * t + k *
                                                         phase) for k in (1, 2, 3))
  x = x * 10 ** rng.uniform(-2, 0, (rows, 1)) + 1e-3 * rng.randn(rows, length)
  quiet = rng.rand(rows) < silence
  x[quiet], y[quiet] = 0.0, 0
  return x.astype(np.float32), y.astype(np.int32)


class FrameNorm(L.Layer):
  """CREPE's per-frame normalisation: (x - mean) / std over the frame's samples (`floor`: the std
  clipped below at it, the remedy; 0: no floor, a silent frame gives 0 / 0)."""

  def __init__(self, floor=0.0, **kwargs):
    super().__init__(**kwargs)
    self.floor = floor

  def call(self, x):
    x = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    std = tf.math.reduce_std(x, axis=-1, keepdims=True)
    return x / (tf.maximum(std, self.floor) if self.floor else std)


def crepe_lite(seed, *, length=256, classes=12, floor=0.0):
  """A CREPE-lite (Kim et al., 2018): `FrameNorm(floor)`, four 1-D convolutions (32 of width 64
  stride 4, then 32, 64, 64 of width 8), each ReLU + BatchNorm + max-pooling by 2, Flatten,
  Dense(`classes`): the pitch-bin logits."""
  _seed(seed)
  frames = keras.Input((length,))
  h = L.Reshape((length, 1))(FrameNorm(floor)(frames))
  for f, w, s in ((32, 64, 4), (32, 8, 1), (64, 8, 1), (64, 8, 1)):
    h = L.MaxPooling1D(2, padding='same')(L.BatchNormalization()(
        L.Conv1D(f, w, strides=s, padding='same', activation='relu')(h)))
  return keras.Model(frames, L.Dense(classes)(L.Flatten()(h)), name='crepe_lite')


# --- Scenarios -------------------------------------------------------------------------------


@add('blind19_grad_condconv_summed_loss', 'exploding_gradients', 'condconv_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='xuboming8/DSTNet#6; open-mmlab/mmdetection#8659; liyunsheng13/dcd#3')
def _(seed, cured=False):
  """A CondConv-lite (three residual blocks of per-example mixtures of four 3x3
  kernels) denoising digits, the squared error summed over the pixels and the batch, SGD at
  1e-4 with momentum 0.9, no clipping: the routing weights and the expert kernels multiply, the
  summed gradients are large and every step feeds the next: the loss (fit's running mean) 1,410
  at step 0, 1.1e7 at step 3, 6.0e10 at step 4, 7.8e24 at step 5, NaN from step 6 (the weights
  NaN after it; the error 0.17 before, inf after; the constant answer's 0.071). Seed 1: 1.6e5
  at step 1, 4.1e10 at step 3, inf at step 4, NaN from step 5. xuboming8/DSTNet#6 (a NaN loss
  training a video deblurring net with dynamic convolutions: their instability; first remedy
  gradient clipping, clip_grad_norm_); open-mmlab/mmdetection#8659 (grad_clip avoids NaN in the
  loss very well); liyunsheng13/dcd#3 (a NaN loss with dynamic convolution decomposition: big
  numbers in the dynamic part). Cured: clipnorm=1.0 at the same rate: the loss 1,410 to 598, the
  error 0.17 to 0.033."""
  x, y = condconv_denoise(seed)
  return cases.Setup(condconv_lite(seed),
                     keras.optimizers.SGD(1e-4, momentum=0.9, clipnorm=1.0 if cured else None),
                     summed_mse, data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind19_lr_segrnn_sgd', 'learning_rate', 'segrnn_lite', doors=('trainer', 'fit'),
     steps=150, citation=('sjvasquez/web-traffic-forecasting#4; '
                          'abduallahmohamed/Social-STGCNN#20; sadeepj/crfasrnn_keras#14'))
def _(seed, cured=False):
  """A SegRNN-lite (segments of 8 steps embedded, a GRU over the segments)
  forecasting the next 8 steps of seven sensor channels from 48, MSE, plain SGD at 10 (the
  rate of word-level RNN recipes, 1, taken ten times larger): each step overshoots and the
  overshoots grow: the loss (fit's running mean) 0.70 at step 0, 1.2e13 at step 10, 3.6e32 at
  step 20, inf from step 22 (the weights NaN; the error 0.72 before, inf after; the constant
  answer's 0.68). Seed 1: 7.2e16 at step 10, inf from step 18.
  sjvasquez/web-traffic-forecasting#4 (a forecasting net: the train and validation losses NaN
  after step 50; a learning rate ten times smaller works); abduallahmohamed/Social-STGCNN#20
  (the loss NaN after a few epochs; reducing the learning rate fixed it);
  sadeepj/crfasrnn_keras#14 (a NaN loss: usually the learning rate too high). Cured: 1.0 (ten
  times smaller): the loss 0.70 to 0.12, the error 0.72 to 0.054."""
  x, y = sensor_series(seed)
  return cases.Setup(segrnn_lite(seed), keras.optimizers.SGD(1.0 if cured else 10.0), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind19_init_maxout_zeros', 'initialisation', 'maxout_net', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/tensorflow#13935; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A maxout network (two maxout layers of 64 units of four pieces, Dense(10))
  classifying the 8x8 digits, Adam at 1e-3, every kernel initialised to zero as the beginners'
  MNIST tutorial initialises W: every unit computes the same output (0) and the same gradient
  (0: the layers above are zero too), only the output bias moves: the loss 2.303 at every step
  from step 0 to 149, no NaN (the error 0.93 before, 0.89 after; the constant answer's 0.86).
  Seed 1: 2.303 throughout (the error 0.88 before, 0.89 after; the constant's 0.875).
  tensorflow/tensorflow#13935 (the MNIST tutorial's W initialised as zeros gives a symmetric
  network: W should be randomly initialised); wagonhelm/NaNmnist#2 (zero initialisation: every
  neuron computes the same output and gets the same update, there is no source of asymmetry;
  deep nets need random initialisations). Cured: Glorot-uniform kernels (Keras's default): the
  loss 2.37 to 0.98, the error 0.86 to 0.039."""
  x, y = data.digits(size=8, rgb=False)
  return cases.Setup(maxout_net(seed, zeros=not cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True),
                     data.stream(x.reshape(len(x), -1), y, batch=32, seed=seed), 'classes')


@add('blind19_div_poincare_boundary', 'division_or_log', 'poincare_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='facebookresearch/poincare-embeddings#8; geoopt/geoopt#79')
def _(seed, cured=False):
  """A Poincare-embedding-lite (a 5-d embedding per node of a 341-node taxonomy in
  the unit ball, the hyperbolic distance) ranking a node's true descendant above a corrupted
  one, Adam at 0.05 with plain (Euclidean) updates and no projection: the corrupted candidates
  are pushed apart, which the ball rewards near its boundary; the first embedding whose norm
  reaches 1 makes 1 - |u|^2 zero or negative: a division by zero or the arcosh of a number below
  1: the loss 0.693 at step 0, 0.657 at step 14, NaN from step 15 (the weights NaN after it; the
  error 0.46 before, inf after; the constant answer's 0.49). Seed 1: 0.623 at step 17, NaN from
  step 18. facebookresearch/poincare-embeddings#8 (NaNs when training with the provided
  hyper-parameters); geoopt/geoopt#79 (NaN gradients through the manifold's distance, fixed by
  a tighter clamp: "exactly the way we adjusted eps for PoincareBall"). Cured: the paper's
  projection after each update (a norm reaching 1 pulled back to 1 - 1e-5): the loss 0.693 to
  0.63, the error 0.46 to 0.15."""
  x, y = taxonomy(seed)
  return cases.Setup(poincare_lite(seed, project=cured), keras.optimizers.Adam(0.05),
                     ranking_softplus, data.stream(x, y, batch=64, seed=seed), 'binary_logit')


@add('blind19_input_mpnn_gasteiger_nan', 'bad_input', 'mpnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='akensert/molgraph#18')
def _(seed, cured=False):
  """An MPNN-lite (three rounds of messages over the bonds, GRU-style updates, a
  sum readout) predicting a logP-like property of small molecules, MSE, Adam at 1e-3; one atom
  feature is the Gasteiger partial charge, which RDKit returns as NaN for every atom of the
  molecules holding a phosphorus (0.1% of them, left in): the first batch holding one gives a
  NaN output and NaN gradients: the loss (fit's running mean) 1.47 at step 0, 0.95 at step 3,
  NaN from step 4 (the weights NaN after it; the error 1.36 before, inf after; the constant
  answer's 1.17). Seed 1: NaN from step 6. akensert/molgraph#18 (NaN in the loss with some
  molecules: the GasteigerCharge feature is NaN for molecules with P atoms; asked to replace
  the NaN features by 0.0). Cured: the NaN charges replaced by 0.0: the loss 1.47 to 0.14, the
  error 1.36 to 0.045. The measure reads clean batches (eval_data) for both runs."""
  (x, adj), y = molecules(seed)
  clean = np.nan_to_num(x, nan=0.0)
  return cases.Setup(mpnn_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream((clean if cured else x, adj), y, batch=32, seed=seed),
                     'regression', eval_data=data.stream((clean, adj), y, batch=32, seed=seed))


@add('blind19_fp16_adain_stats_overflow', 'precision', 'adain_lite', doors=('trainer', 'fit'),
     steps=150, precision='mixed_float16',
     citation='tensorflow/tensorflow#47156; openvla/openvla#30')
def _(seed, cured=False):
  """An AdaIN style-transfer-lite (a shared convolutional encoder, adaptive instance
  normalisation, a decoder) re-colouring digits to a style image's statistics, images in VGG's
  0-255 range, MSE, Adam at 1e-3, under mixed_float16; AdaIN's statistics written sum / count in
  the layer's compute dtype: the sum of the squared deviations over the 256 pixels passes
  65,504, the variance is inf in float16, the style's std inf times a zero gives NaN: every
  output NaN before any training (the error inf before and after; the constant answer's
  0.048), the loss NaN from step 0 (the loss-scale optimizer skips the updates; the weights stay
  finite). Seed 1: the same (the constant's 0.045). tensorflow/tensorflow#47156 (mixed
  precision: an instance normalisation layer's variance overflows in float16, even its mean's
  sum; the mean and the variance belong in float32); openvla/openvla#30 (a NaN loss in float16:
  its smaller range overflows). Cured: the statistics computed in float32 (cast back after):
  the loss 0.28 to 0.038, the error 0.30 to 0.0058."""
  x, y = style_pairs(seed)
  return cases.Setup(adain_lite(seed, float32_stats=cured), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind19_transient_sru_activation_glitch', 'transient', 'sru_lite',
     doors=('trainer', 'fit'), steps=150, citation='greatlog/DAN#8')
def _(seed, cured=False):
  """An SRU-lite (two SRU layers: gates computed for every step at once, a light
  recurrence, highway connections) routing support tickets by topic, Adam at 3e-3, training
  normally (the loss 1.39 at step 0, 0.51 at step 88) when one element of the word embeddings'
  output reads +inf once (`FlippedActivation`: its 94th training call; step 89 in a plain `fit`
  after the measure's four training-mode passes; a flipped bit or a kernel that misfires once,
  not the data, the model or the settings): the loss NaN from step 89, the weights NaN after it
  (the error 0.83 before, inf after; the constant answer's 0.72); the same step re-run is
  finite. Seed 1: the same step (0.54 at step 88). greatlog/DAN#8 (the loss NaN suddenly at
  22,800 iterations, at 29,200 the second time: "this situation occurs sometimes"; the
  workaround, resuming from the last normal training state, is how the user solved it). Cured:
  the same run without the fault: the loss 1.39 to 0.34, the error 0.83 to 0.016."""
  x, y = support_tickets(seed)
  return cases.Setup(sru_lite(seed, glitch=None if cured else 94), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind19_mismatch_res2net_one_unit_softmax', 'loss_output_mismatch', 'res2net_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#2711')
def _(seed, cured=False):
  """A Res2Net-lite (two Res2Net blocks) telling the digits 5 to 9 from 0 to 4,
  BinaryCrossentropy, Adam at 1e-3, its output Dense(1, activation='softmax'): a softmax over a
  single unit is 1.0 whatever the input, so every answer is "yes" and the accuracy is the share
  of the positive class from the first step to the last (the error 0.44 before and after, in
  inference and in training mode; the constant answer's 0.44), no NaN. Plain Keras's `fit`
  reads the pre-softmax value it attaches to the output as a sigmoid logit, so its loss falls
  (0.99 at step 0, 0.38 at step 149) while the outputs stay 1.0. Seed 1: the error 0.45 before
  and after (the loss 0.72 to 0.33). keras-team/keras#2711 (loss and accuracy not changing; the
  output activation wrong for the task: a binary task wants a sigmoid, not a softmax; "try
  removing the Activation('softmax') layer"). Cured: Dense(1, activation='sigmoid'): the error
  0.44 to 0.023 in training mode (0.56 in inference mode: BatchNorm's moving statistics still
  near their start after 150 steps)."""
  x, labels = data.digits(size=16, rgb=False)
  y = (labels >= 5).astype(np.float32)[:, None]
  return cases.Setup(res2net_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), BCE(), data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('blind19_exp_hopfield_pooling_softmax', 'softmax_overflow', 'hopfield_lite',
     doors=('trainer', 'fit'), steps=150,
     citation=('hexiangnan/attentional_factorization_machine#9; '
               'numenta/nupic-legacy#3174; prescient-design/e3tools#3'))
def _(seed, cured=False):
  """A Hopfield-pooling-lite (an instance encoder, a learned state pattern
  retrieving from the bag's instances at inverse temperature 8) classifying multiple-instance
  bags, BinaryCrossentropy on logits, Adam at 1e-2, the attention softmax written exp(z) /
  sum(exp(z)): as the state pattern aligns with the witnesses' keys the scores rise, and once
  one passes 88.7 exp overflows and inf / inf = NaN: the loss 0.76 at step 0, 0.30 at step 20,
  0.28 at step 24, NaN from step 25 (the weights NaN after it; the error 0.52 before, inf after;
  the constant answer's 0.48). Seed 1: 0.23 at step 18, NaN from step 19.
  hexiangnan/attentional_factorization_machine#9 (AFM's attention goes NaN easily: its softmax
  is implemented with exp by hand and overflows; TensorFlow's softmax does not);
  numenta/nupic-legacy#3174 (a softmax computed with a bare exp overflows at high learning
  rates: offset the activations by their maximum); prescient-design/e3tools#3 (a fix of the
  overflow in an attention softmax). Cured: tf.nn.softmax (the max subtracted): the loss 0.76 to
  0.13, the error 0.52 to 0.035."""
  x, y = bags(seed)
  return cases.Setup(hopfield_lite(seed, stable=cured), keras.optimizers.Adam(1e-2),
                     BCE(from_logits=True), data.stream(x, y, batch=64, seed=seed),
                     'binary_logit')


@add('blind19_div_crepe_silent_frame', 'division_or_log', 'crepe_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='maxrmorrison/torchcrepe#5; vanvalenlab/deepcell-toolbox#72')
def _(seed, cured=False):
  """A CREPE-lite (per-frame normalisation, four 1-D convolutions with BatchNorm and
  pooling) estimating the pitch bin of 256-sample audio frames, Adam at 1e-3; each frame
  normalised as CREPE does, (x - mean) / std with no floor, and 0.1% of the frames are digital
  silence (all zeros): 0 / 0 = NaN: healthy until the first batch holding one (the loss 3.86 at
  step 0, 1.37 at step 20, 1.15 at step 27), NaN from step 28 (the weights NaN after it; the
  error 0.91 before, inf after; the constant answer's 0.89). Seed 1: 0.74 at step 58, NaN from
  step 59. maxrmorrison/torchcrepe#5 (the normalisation gives NaN values in silent regions;
  fixed by clipping the standard deviation); vanvalenlab/deepcell-toolbox#72 (normalising by the
  standard deviation: an epsilon prevents NaN when it is 0). Cured: the std clipped below at
  1e-10: the loss 3.86 to 0.35, the error 0.91 to 0.0078 in training mode (0.31 in inference
  mode). The measure reads frames without silence (eval_data) for both runs."""
  x, y = pitch_frames(seed)
  clean = pitch_frames(seed, silence=0.0)
  return cases.Setup(crepe_lite(seed, floor=1e-10 if cured else 0.0),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(*clean, batch=32, seed=seed))
