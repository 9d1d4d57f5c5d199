"""A seventh blind set of sick scenarios (the 'blind7' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind6.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (a ConvNeXt-lite without its LayerNorms, a reversible
residual network (RevNet-lite), a ShuffleNet-lite, a dense mixture-of-experts MLP, a
SqueezeNet-lite, a NormFace cosine classifier over bag-of-words vectors, a Set Transformer, an
sLSTM-style xLSTM-lite with exponential gating, a two-tower recommender, a Performer-lite with
linear (random-feature) attention, a KAN-lite with radial-basis edges). Each builder takes
`cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick
run). Each was checked with plain Keras `compile` + `fit`: the sick run shows the reported
symptom, the cured twin passes runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data

BLIND7 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND7.add` with split='blind7'."""
  return BLIND7.add(name, expected, arch, split='blind7', **fields)


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


class ConvNeXtBlock(L.Layer):
  """A ConvNeXt block (Liu et al.): depthwise Conv 7x7, (LayerNorm), pointwise Dense(4 x dim,
  GELU), pointwise Dense(dim), added to the input; He init. `norm`: the LayerNorm the paper
  has; without it the raw block output is added."""

  def __init__(self, dim, norm, **kwargs):
    super().__init__(**kwargs)
    self.dw = L.DepthwiseConv2D(7, padding='same', depthwise_initializer='he_normal')
    self.pw1 = L.Dense(4 * dim, activation='gelu', kernel_initializer='he_normal')
    self.pw2 = L.Dense(dim, kernel_initializer='he_normal')
    self.norm = L.LayerNormalization(epsilon=1e-6) if norm else None

  def call(self, x):
    h = self.dw(x)
    if self.norm is not None:
      h = self.norm(h)
    return x + self.pw2(self.pw1(h))


def convnext_lite(seed, *, size=16, classes=10, dim=32, blocks=16, norm=False):
  """A ConvNeXt-lite: a patchify stem Conv2D(dim, 2x2, stride 2), `blocks` `ConvNeXtBlock`s,
  global average, (LayerNorm), Dense(classes) logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(dim, 2, strides=2, kernel_initializer='he_normal')(inputs)
  if norm:
    h = L.LayerNormalization(epsilon=1e-6)(h)
  for _ in range(blocks):
    h = ConvNeXtBlock(dim, norm)(h)
  h = L.GlobalAveragePooling2D()(h)
  if norm:
    h = L.LayerNormalization(epsilon=1e-6)(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='convnext_lite')


class ReversibleBlock(L.Layer):
  """A reversible residual block (Gomez et al.): the channels split in halves (x1, x2),
  y1 = x1 + F(x2), y2 = x2 + G(y1), F and G each ReLU, Conv 3x3, ReLU, Conv 3x3 (He init, no
  normalisation); the halves concatenated again."""

  def __init__(self, channels, norm=False, **kwargs):
    super().__init__(**kwargs)
    half = channels // 2
    conv = lambda: L.Conv2D(half, 3, padding='same', kernel_initializer='he_normal')
    self.f = [conv(), conv()]
    self.g = [conv(), conv()]
    self.fn = [L.BatchNormalization() for _ in range(2)] if norm else [None, None]
    self.gn = [L.BatchNormalization() for _ in range(2)] if norm else [None, None]
    self.half = half

  def _branch(self, convs, norms, t, training):
    for c, n in zip(convs, norms):
      if n is not None:
        t = n(t, training=training)
      t = c(tf.nn.relu(t))
    return t

  def call(self, x, training=False):
    x1, x2 = x[..., :self.half], x[..., self.half:]
    y1 = x1 + self._branch(self.f, self.fn, x2, training)
    y2 = x2 + self._branch(self.g, self.gn, y1, training)
    return tf.concat([y1, y2], axis=-1)


def revnet_lite(seed, *, size=16, classes=10, channels=32, blocks=4, norm=False):
  """A RevNet-lite: a stem Conv2D(channels, 3x3), `blocks` `ReversibleBlock`s (a 2x2 max pool
  after the half), global average of the ReLU'd features, Dense(classes) logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(channels, 3, padding='same', kernel_initializer='he_normal')(inputs)
  for i in range(blocks):
    h = ReversibleBlock(channels, norm)(h)
    if i == blocks // 2 - 1:
      h = L.MaxPooling2D()(h)
  h = L.GlobalAveragePooling2D()(L.ReLU()(h))
  return keras.Model(inputs, L.Dense(classes)(h), name='revnet_lite')


class ChannelShuffle(L.Layer):
  """ShuffleNet's channel shuffle: (.., groups x k) -> (.., k x groups)."""

  def __init__(self, groups, **kwargs):
    super().__init__(**kwargs)
    self.groups = groups

  def call(self, x):
    s = tf.shape(x)
    c = x.shape[-1]
    x = tf.reshape(x, [s[0], s[1], s[2], self.groups, c // self.groups])
    x = tf.transpose(x, [0, 1, 2, 4, 3])
    return tf.reshape(x, [s[0], s[1], s[2], c])


def shufflenet_lite(seed, *, size=16, classes=10, groups=3, width=48, units=(2, 2)):
  """A ShuffleNet-lite (Zhang et al., v1 units): a stem Conv2D(24, 3x3) + BN + ReLU, then per
  stage a stride-2 unit (grouped 1x1 conv, BN, ReLU, channel shuffle, depthwise 3x3 stride 2,
  BN, grouped 1x1 conv, BN, concatenated with a 3x3 average-pooled shortcut, ReLU) and stride-1
  units of the same form with an identity shortcut (added); global average, Dense(classes)."""
  _seed(seed)
  bn = L.BatchNormalization

  def unit(h, out, stride):
    c_in = h.shape[-1]
    mid = max(groups, (out // 4) // groups * groups)
    b = L.ReLU()(bn()(L.Conv2D(mid, 1, groups=groups if c_in % groups == 0 else 1)(h)))
    b = ChannelShuffle(groups)(b)
    b = bn()(L.DepthwiseConv2D(3, strides=stride, padding='same')(b))
    if stride == 2:
      b = bn()(L.Conv2D(out - c_in, 1, groups=groups)(b))
      return L.ReLU()(L.Concatenate()([L.AveragePooling2D(3, 2, padding='same')(h), b]))
    b = bn()(L.Conv2D(out, 1, groups=groups)(b))
    return L.ReLU()(L.Add()([h, b]))

  inputs = keras.Input((size, size, 1))
  h = L.ReLU()(bn()(L.Conv2D(24, 3, padding='same')(inputs)))
  out = width
  for n in units:
    h = unit(h, out, 2)
    for _ in range(n - 1):
      h = unit(h, out, 1)
    out *= 2
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='shufflenet_lite')


class DenseMoE(L.Layer):
  """A dense mixture-of-experts layer (Jacobs et al.; Shazeer et al. without sparsity): a
  softmax gating network over `experts` two-layer ReLU MLPs; the output is the gate-weighted sum
  of the experts' outputs."""

  def __init__(self, experts, hidden, units, **kwargs):
    super().__init__(**kwargs)
    self.gate = L.Dense(experts, activation='softmax')
    self.hidden = [L.Dense(hidden, activation='relu') for _ in range(experts)]
    self.out = [L.Dense(units) for _ in range(experts)]

  def call(self, x):
    g = self.gate(x)
    outs = tf.stack([o(h(x)) for h, o in zip(self.hidden, self.out)], axis=1)
    return tf.reduce_sum(g[..., None] * outs, axis=1)


def moe_mlp(seed, *, features=16, classes=8, experts=4, hidden=64):
  """A mixture-of-experts classifier: Dense(64, ReLU), a `DenseMoE` (4 experts of 64 hidden
  units) emitting the class logits."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = L.Dense(64, activation='relu')(inputs)
  return keras.Model(inputs, DenseMoE(experts, hidden, classes)(h), name='moe_mlp')


def squeezenet_lite(seed, *, size=16, classes=10, init_std=None):
  """A SqueezeNet-lite (Iandola et al.): a stem Conv2D(32, 3x3, ReLU), four fire modules
  (squeeze 1x1 (s), ReLU, expand 1x1 (e) and 3x3 (e) concatenated, ReLU; (s, e) = (8, 16),
  (8, 16), (16, 32), (16, 32)) with a 2x2 max pool after the stem and after the second, a 1x1
  classifier convolution (classes) and global average: the logits. Every kernel he_normal, or
  RandomNormal(stddev=`init_std`) when that is given."""
  _seed(seed)
  init = 'he_normal' if init_std is None else keras.initializers.RandomNormal(stddev=init_std)
  conv = lambda c, k: L.Conv2D(c, k, padding='same', activation='relu', kernel_initializer=init)

  def fire(h, s, e):
    q = conv(s, 1)(h)
    return L.Concatenate()([conv(e, 1)(q), conv(e, 3)(q)])

  inputs = keras.Input((size, size, 1))
  h = L.MaxPooling2D()(conv(32, 3)(inputs))
  h = fire(fire(h, 8, 16), 8, 16)
  h = L.MaxPooling2D()(h)
  h = fire(fire(h, 16, 32), 16, 32)
  h = L.Conv2D(classes, 1, kernel_initializer=init)(h)
  return keras.Model(inputs, L.GlobalAveragePooling2D()(h), name='squeezenet_lite')


class L2Normalize(L.Layer):
  """x / ||x|| along the last axis: written out by hand, x / sqrt(sum(x^2)) (`safe` False), or
  tf.math.l2_normalize (x * rsqrt(max(sum(x^2), 1e-12)), `safe` True)."""

  def __init__(self, safe, **kwargs):
    super().__init__(**kwargs)
    self.safe = safe

  def call(self, x):
    if self.safe:
      return tf.math.l2_normalize(x, axis=-1)
    return x / tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1, keepdims=True))


class CosineHead(L.Layer):
  """NormFace / CosFace's cosine classifier: logits = scale x cos(feature, class weight), the
  class weights L2-normalised the same way as the features."""

  def __init__(self, classes, scale, safe, **kwargs):
    super().__init__(**kwargs)
    self.classes, self.scale, self.safe = classes, scale, safe

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[-1], self.classes), initializer='glorot_uniform',
                             name='class_weights')

  def call(self, x):
    if self.safe:
      w = tf.math.l2_normalize(self.w, axis=0)
    else:
      w = self.w / tf.sqrt(tf.reduce_sum(tf.square(self.w), axis=0, keepdims=True))
    return self.scale * tf.matmul(x, w)


def normface_bow(seed, *, vocab=200, classes=6, hidden=64, safe=False):
  """A NormFace-style cosine classifier over bag-of-words count vectors: the count vector
  L2-normalised (cosine / tf-idf style), Dense(64, tanh), the feature L2-normalised, a
  `CosineHead` (scale 10): the logits. `safe`: tf.math.l2_normalize instead of the hand-written
  division."""
  _seed(seed)
  counts = keras.Input((vocab,))
  h = L.Dense(hidden, activation='tanh')(L2Normalize(safe)(counts))
  h = L2Normalize(safe)(h)
  return keras.Model(counts, CosineHead(classes, 10.0, safe)(h), name='normface_bow')


class SetAttention(L.Layer):
  """Multi-head attention of a Set Transformer block (Lee et al.) with its softmax written out:
  exp(s) / sum(exp(s)) over the keys (`stable` False) or tf.nn.softmax (max subtracted first,
  `stable` True); scores s = q k^T / sqrt(d)."""

  def __init__(self, dim, heads, stable, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.heads, self.stable = dim, heads, stable
    self.q, self.k, self.v, self.o = (L.Dense(dim) for _ in range(4))

  def _split(self, t):
    s = tf.shape(t)
    t = tf.reshape(t, [s[0], s[1], self.heads, self.dim // self.heads])
    return tf.transpose(t, [0, 2, 1, 3])

  def call(self, queries, keys):
    q, k, v = self._split(self.q(queries)), self._split(self.k(keys)), self._split(self.v(keys))
    s = tf.matmul(q, k, transpose_b=True) / np.sqrt(self.dim // self.heads)
    if self.stable:
      a = tf.nn.softmax(s, axis=-1)
    else:
      e = tf.exp(s)
      a = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    out = tf.transpose(tf.matmul(a, v), [0, 2, 1, 3])
    sq = tf.shape(queries)
    return self.o(tf.reshape(out, [sq[0], sq[1], self.dim]))


class SAB(L.Layer):
  """A set attention block: H = LN(X + MHA(X, X)), out = LN(H + FF(H)) (post-norm)."""

  def __init__(self, dim, heads, stable, **kwargs):
    super().__init__(**kwargs)
    self.att = SetAttention(dim, heads, stable)
    self.ff = L.Dense(dim, activation='relu')
    self.n1, self.n2 = L.LayerNormalization(), L.LayerNormalization()

  def call(self, x):
    h = self.n1(x + self.att(x, x))
    return self.n2(h + self.ff(h))


class PMA(L.Layer):
  """Pooling by multi-head attention: one learned seed vector attends over the set."""

  def __init__(self, dim, heads, stable, **kwargs):
    super().__init__(**kwargs)
    self.att = SetAttention(dim, heads, stable)
    self.dim = dim

  def build(self, shape):
    self.seed_vec = self.add_weight(shape=(1, 1, self.dim), initializer='glorot_uniform',
                                    name='seed_vector')

  def call(self, x):
    s = tf.tile(self.seed_vec, [tf.shape(x)[0], 1, 1])
    return self.att(s, x)[:, 0]


def set_transformer(seed, *, points=32, coords=2, classes=4, dim=32, heads=4, stable=False):
  """A Set Transformer (Lee et al.): the points embedded by Dense(dim), two `SAB`s, `PMA`
  pooling, Dense(classes) logits; the attention softmax of every block written out by hand
  unless `stable`."""
  _seed(seed)
  inputs = keras.Input((points, coords))
  h = L.Dense(dim)(inputs)
  h = SAB(dim, heads, stable)(SAB(dim, heads, stable)(h))
  return keras.Model(inputs, L.Dense(classes)(PMA(dim, heads, stable)(h)),
                     name='set_transformer')


class SLSTMCell(L.Layer):
  """An sLSTM cell (Beck et al., xLSTM) with exponential input gating and no stabiliser state:
  i = exp(i~), f = sigmoid(f~), z = tanh(z~), o = sigmoid(o~); c = f c + i z, n = f n + i,
  h = o c / n (the normaliser n keeps h bounded)."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = [units, units, units]
    self.output_size = units

  def build(self, shape):
    self.kernel = self.add_weight(shape=(shape[-1], 4 * self.units), name='kernel',
                                  initializer='glorot_uniform')
    self.recurrent = self.add_weight(shape=(self.units, 4 * self.units), name='recurrent',
                                     initializer='orthogonal')
    self.bias = self.add_weight(shape=(4 * self.units,), name='bias', initializer='zeros')

  def call(self, x, states):
    h, c, n = states
    pre = tf.matmul(x, self.kernel) + tf.matmul(h, self.recurrent) + self.bias
    i_, f_, z_, o_ = tf.split(pre, 4, axis=-1)
    i = tf.exp(i_)
    f = tf.sigmoid(f_)
    c = f * c + i * tf.tanh(z_)
    n = f * n + i
    h = tf.sigmoid(o_) * c / n
    return h, [h, c, n]


def xlstm_lite(seed, *, steps=48, units=16, classes=3, cell_dtype=None):
  """An xLSTM-lite series classifier: an RNN of one `SLSTMCell` (16 units) over the raw readings,
  the last h, Dense(classes) logits. `cell_dtype`: the cell's dtype policy (None: the global
  policy; 'float32' keeps the cell, its exponential gate included, in float32)."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  cell = SLSTMCell(units, dtype=cell_dtype)
  h = L.RNN(cell, dtype=cell_dtype)(inputs)
  return keras.Model(inputs, L.Dense(classes)(h), name='xlstm_lite')


def two_tower(seed, *, users=60, items=80, dim=16):
  """A two-tower recommender (YouTube / TFRS style): the user tower embeds the user id (16) and
  concatenates the user's numeric features (age, activity), the item tower embeds the item id
  and concatenates the item's numeric features (price, popularity); each tower Dense(32, ReLU),
  Dense(16); the dot product of the two towers is the click logit."""
  _seed(seed)
  uid = keras.Input((), dtype='int32')
  ufeat = keras.Input((2,))
  iid = keras.Input((), dtype='int32')
  ifeat = keras.Input((2,))

  def tower(ids, feats, count):
    e = L.Embedding(count, dim)(ids)
    h = L.Dense(32, activation='relu')(L.Concatenate()([e, feats]))
    return L.Dense(dim)(h)

  score = L.Dot(axes=1)([tower(uid, ufeat, users), tower(iid, ifeat, items)])
  return keras.Model([uid, ufeat, iid, ifeat], score, name='two_tower')


class _StepCount:
  """A counter of training calls held outside Keras's tracking (so no weight of the model carries
  the fault)."""

  def __init__(self):
    with tf.init_scope():
      self.value = tf.Variable(0, dtype=tf.int32, trainable=False)


class OneOffUpset(L.Layer):
  """The identity, except that at its `at`-th training call one activation of the first example
  comes back +inf (a single upset, as a flipped exponent bit); never again."""

  def __init__(self, at, **kwargs):
    super().__init__(**kwargs)
    self.at = at
    self.count = _StepCount()

  def call(self, x, training=False):
    if not training or self.at is None:
      return x
    n = self.count.value.assign_add(1)
    s = tf.shape(x)
    hit = tf.scatter_nd([[0, 0, 0]], [True], s)
    hit = tf.logical_and(hit, tf.equal(n, self.at))
    return tf.where(hit, tf.constant(np.inf, x.dtype), x)


class LinearAttention(L.Layer):
  """Performer-style linear attention (Choromanski et al.; FAVOR with ReLU random features):
  phi(x) = ReLU(x W / d^0.25) + 1e-3 with a fixed Gaussian projection W (m features);
  out = phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1): cost linear in the sequence length."""

  def __init__(self, dim, features=32, **kwargs):
    super().__init__(**kwargs)
    self.q, self.k, self.v, self.o = (L.Dense(dim) for _ in range(4))
    self.dim, self.features = dim, features

  def build(self, shape):
    self.proj = self.add_weight(shape=(self.dim, self.features), trainable=False,
                                initializer=keras.initializers.RandomNormal(), name='features')

  def _phi(self, t):
    return tf.nn.relu(tf.matmul(t, self.proj) / self.dim ** 0.25) + 1e-3

  def call(self, x):
    q, k, v = self._phi(self.q(x)), self._phi(self.k(x)), self.v(x)
    kv = tf.einsum('bnm,bnd->bmd', k, v)
    norm = tf.einsum('bnm,bm->bn', q, tf.reduce_sum(k, axis=1))[..., None]
    return self.o(tf.einsum('bnm,bmd->bnd', q, kv) / norm)


def performer_lite(seed, *, seq_len=16, vocab=64, classes=8, dim=32, blocks=2, upset_at=None):
  """A Performer-lite encoder: token (64 -> 32) and position embeddings, `blocks` pre-norm blocks
  (LayerNorm, `LinearAttention`, residual; LayerNorm, MLP 64 (GELU) -> 32, residual), an
  `OneOffUpset` on the first block's attention output (`upset_at`: the training call it fires
  at; None: never), mean pooling, Dense(classes) logits."""
  _seed(seed)
  tokens = keras.Input((seq_len,), dtype='int32')
  h = L.Embedding(vocab, dim)(tokens)
  h = h + L.Embedding(seq_len, dim)(tf.range(seq_len))[None]
  for b in range(blocks):
    a = LinearAttention(dim)(L.LayerNormalization()(h))
    if b == 0:
      a = OneOffUpset(upset_at)(a)
    h = L.Add()([h, a])
    m = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(L.LayerNormalization()(h)))
    h = L.Add()([h, m])
  h = L.GlobalAveragePooling1D()(L.LayerNormalization()(h))
  return keras.Model(tokens, L.Dense(classes)(h), name='performer_lite')


class RBFKANLayer(L.Layer):
  """A Kolmogorov-Arnold layer with radial-basis edges (FastKAN, Li 2024): each input feature
  LayerNorm'd and expanded on `grid` Gaussian bumps exp(-((x - g) / h)^2) over [-2, 2], each
  edge a learned combination of its bumps, plus a SiLU base branch; summed into `units` outputs."""

  def __init__(self, units, grid=8, **kwargs):
    super().__init__(**kwargs)
    self.units, self.grid = units, grid
    self.norm = L.LayerNormalization()
    self.spline = L.Dense(units, use_bias=False)
    self.base = L.Dense(units)
    self.centers = np.linspace(-2.0, 2.0, grid).astype(np.float32)
    self.width = 4.0 / (grid - 1)

  def call(self, x):
    z = self.norm(x)
    basis = tf.exp(-tf.square((z[..., None] - self.centers) / self.width))
    basis = tf.reshape(basis, [-1, x.shape[-1] * self.grid])
    return self.spline(basis) + self.base(tf.nn.silu(x))


def kan_lite(seed, *, features=8, head=None):
  """A KAN-lite regressor: two `RBFKANLayer`s (8 -> 16 -> 1); `head`: the output activation (None:
  linear)."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = RBFKANLayer(16)(inputs)
  out = RBFKANLayer(1)(h)
  if head is not None:
    out = L.Activation(head)(out)
  return keras.Model(inputs, out, name='kan_lite')


# --- Data of this file. ----------------------------------------------------------------------


def bag_of_words(seed, *, rows=3072, vocab=200, classes=6, empty=0.06):
  """Topic documents as word-count vectors: each document 8-30 words, 60 % from its topic's 25
  words and the rest from the whole vocabulary; a fraction `empty` of documents has no
  in-vocabulary word (its count vector all zeros: a short message whose words were all
  filtered out). (counts, topic)."""
  rng = np.random.RandomState(71000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  x = np.zeros((rows, vocab), np.float32)
  topic_words = rng.permutation(vocab)[:classes * 25].reshape(classes, 25)
  for r in range(rows):
    if rng.rand() < empty:
      continue
    n = rng.randint(8, 31)
    own = rng.rand(n) < 0.6
    words = np.where(own, topic_words[y[r], rng.randint(0, 25, n)], rng.randint(0, vocab, n))
    np.add.at(x[r], words, 1.0)
  return x, y


def point_sets(seed, *, rows=2048, points=32, classes=4, unit=60.0):
  """Point sets in screen coordinates (pixels): each a circle, a square outline, a segment or a
  Gaussian blob of radius 1-3 (x `unit` pixels) at a random place, its points jittered:
  (points (rows, 32, 2), shape class)."""
  rng = np.random.RandomState(72000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  t = rng.rand(rows, points)
  out = np.zeros((rows, points, 2))
  ang = 2 * np.pi * t
  circle = np.stack([np.cos(ang), np.sin(ang)], -1)
  side = (4 * t).astype(int)
  u = 4 * t - side
  sq = np.stack([np.select([side == 0, side == 1, side == 2], [2 * u - 1, np.ones_like(u),
                                                               1 - 2 * u], -np.ones_like(u)),
                 np.select([side == 0, side == 1, side == 2], [-np.ones_like(u), 2 * u - 1,
                                                               np.ones_like(u)], 1 - 2 * u)], -1)
  theta = rng.rand(rows, 1) * np.pi
  seg = np.stack([(2 * t - 1) * np.cos(theta), (2 * t - 1) * np.sin(theta)], -1)
  blob = rng.normal(size=(rows, points, 2)) * 0.5
  for c, shape in enumerate((circle, sq, seg, blob)):
    out[y == c] = shape[y == c]
  radius = rng.uniform(1, 3, (rows, 1, 1))
  centre = rng.uniform(-4, 4, (rows, 1, 2))
  out = (out * radius + centre + 0.05 * rng.normal(size=out.shape)) * unit
  return out.astype(np.float32), y


def temperature_series(seed, *, rows=2048, steps=48, classes=3):
  """Two days of hourly outdoor temperatures in degrees Fahrenheit (a base of 45-85 F, a daily
  cycle of +-8 F, noise) classed by their trend: a warm front (+0.4 F per hour), a cold front
  (-0.4 F per hour) or steady: (readings (rows, 48, 1), trend class)."""
  rng = np.random.RandomState(73000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  hours = np.arange(steps)[None]
  slope = np.array([0.0, 0.4, -0.4])[y][:, None]
  base = rng.uniform(45, 85, (rows, 1))
  phase = rng.uniform(0, 2 * np.pi, (rows, 1))
  x = base + slope * hours + 8 * np.sin(2 * np.pi * hours / 24 + phase)
  x += rng.normal(size=x.shape)
  return x[..., None].astype(np.float32), y


def interactions(seed, *, rows=4096, users=60, items=80, missing=0.0, fill=False):
  """User-item impressions: ids, user features (age in decades, activity), item features
  (log price, popularity) and a click drawn from a logistic model of a latent user-item
  affinity plus the features; a fraction `missing` of the items has no price, exported as NaN
  (`fill`: NaN replaced by the mean, 0). ((uid, ufeat, iid, ifeat), clicks (rows, 1)) and the
  rows whose item price is missing."""
  rng = np.random.RandomState(74000 + seed)
  u_lat, i_lat = rng.normal(size=(users, 4)), rng.normal(size=(items, 4))
  u_feat = rng.normal(size=(users, 2)).astype(np.float32)
  i_feat = rng.normal(size=(items, 2)).astype(np.float32)
  uid = rng.randint(0, users, rows).astype(np.int32)
  iid = rng.randint(0, items, rows).astype(np.int32)
  z = (u_lat[uid] * i_lat[iid]).sum(1) + 1.5 * u_feat[uid, 0] * i_feat[iid, 1] - i_feat[iid, 0]
  z = z / z.std() * 3.0
  y = (rng.rand(rows) < 1 / (1 + np.exp(-z))).astype(np.float32)[:, None]
  no_price = rng.rand(items) < missing
  i_feat[no_price, 0] = 0.0 if fill else np.nan
  return (uid, u_feat[uid], iid, i_feat[iid]), y, no_price[iid]


def claim_counts(seed, *, rows=4096, features=8):
  """Insurance-style claim counts: features, and counts drawn from a Poisson whose log-rate is
  a smooth nonlinear function of them (rates about 0.3-20): (x, counts (rows, 1))."""
  rng = np.random.RandomState(75000 + seed)
  x = rng.normal(size=(rows, features)).astype(np.float32)
  w = rng.normal(size=features) / np.sqrt(features)
  log_rate = 1.2 + 0.9 * (x @ w) + 0.5 * np.sin(2 * x[:, 0])
  y = rng.poisson(np.exp(log_rate)).astype(np.float32)[:, None]
  return x, y


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind7_grad_convnext_without_norm', 'exploding_gradients', 'convnext_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='twtygqyy/pytorch-SRDenseNet#2; AlexeyAB/darknet#979')
def _(seed, cured=False):
  """A ConvNeXt-lite (a patchify stem, sixteen blocks of a depthwise 7x7 convolution and an
  inverted-bottleneck MLP (32 -> 128 GELU -> 32), He init, each block's output added to its
  input) built without its LayerNorms, trained on digits with SGD + momentum 0.9 at 0.02: every
  residual sum adds its branch's variance, the logits and the gradients grow through the
  sixteen sums, the loss climbs and is NaN from about step 50 (the weights NaN). The same
  architecture with a LayerNorm in each block and clipnorm=1 trains at the same rate.
  twtygqyy/pytorch-SRDenseNet#2 ("when we use very deep network, the output often be very big,
  that make loss nan"; the answer: residual blocks and gradient clipping; the asker: "Do you use
  Batch Normalization?"); AlexeyAB/darknet#979 (a network built without batch normalisation:
  the loss "suddenly shoots up and becomes 'nan'"; "with Batch Normalization = 1, then it trains
  fine"). Cured: LayerNorm in every block (and after the pooling) and clipnorm=1."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(convnext_lite(seed, norm=cured),
                     keras.optimizers.SGD(0.02, momentum=0.9, clipnorm=1.0 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind7_grad_revnet_unclipped', 'exploding_gradients', 'revnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tbung/pytorch-revnet#1; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """A RevNet-lite (a stem convolution and four reversible residual blocks, y1 = x1 + F(x2),
  y2 = x2 + G(y1), F and G two He-init 3x3 convolutions each, no normalisation) on digits with
  the CIFAR recipe's SGD + momentum 0.9 at 0.1: each coupling adds a branch's output to the
  half it carries, the first loss is already about 9, the updates blow up (the running loss 84
  by step 3) and it is NaN from step 5; the model never trains. tbung/pytorch-revnet#1 (revnet38
  / revnet110: "my loss quickly goes to NAN and the accuracy never surpasses 10%"; the author:
  "the gradients of the revnet tend to explode a bit and gradient norm clipping is what I used",
  "--clip 0.25"; the asker: "Adding clipping worked beautifully!"); Marcovaldong/lstmp.pytorch#2
  (loss NaN after a number of iterations from exploding gradients; "clip the gradients to a max
  norm of 1.0"). Cured: clipnorm=0.25 (same rate, same architecture)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(revnet_lite(seed),
                     keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.25 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind7_lr_shufflenet_sgd_too_high', 'learning_rate', 'shufflenet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='megvii-model/ShuffleNet-Series#24; potterhsu/SVHNClassifier-PyTorch#12; '
              'tensorflow/tensorflow#38796')
def _(seed, cured=False):
  """A ShuffleNet-lite (v1 units: grouped 1x1 convolutions, channel shuffle, depthwise 3x3,
  BatchNorm; two stages) on digits with SGD + momentum 0.9 at 5.0: the second step's loss jumps
  from 2.5 to about 27 (the running mean 14.7), the loss stays far above its start and the
  model ends no better than the best constant answer (error 0.89 against 0.86).
  megvii-model/ShuffleNet-Series#24 (ShuffleNetV2+ at lr 0.5: the loss 2.6, 4.1, 48.4, then
  nan); potterhsu/SVHNClassifier-PyTorch#12 ("when i traning by using the Learning Rate 0.16,
  the loss will increase to nan"; the title: "may be Learning Rate should be 0.016?");
  tensorflow/tensorflow#38796 ("A high learning rate may cause a nan or an inf loss with
  tf.keras.optimizers.SGD"; "When I decrease the learning rate, it is of less probability to
  happen"). Cured: SGD + momentum at 0.05."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(shufflenet_lite(seed),
                     keras.optimizers.SGD(0.05 if cured else 5.0, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind7_lr_moe_rmsprop_too_high', 'learning_rate', 'moe_mlp',
     doors=('trainer', 'fit'), steps=150,
     citation='davidmrau/mixture-of-experts#16; tensorflow/ranking#232; '
              'guillaumegenthial/sequence_tagging#47')
def _(seed, cured=False):
  """A dense mixture-of-experts classifier (a softmax gate over four two-layer ReLU experts) on
  Gaussian class clusters with RMSprop at 1.0: RMSprop's normalised first step moves every
  weight by about 1 x sqrt(1/(1-rho)) (3.2), the gate and the experts' logits jump, the loss
  goes from 2.3 to about 24000 at step 2 (the running mean 12150) and the model ends far from
  trained (error 0.78 against a constant 0.84). davidmrau/mixture-of-experts#16 (an MoE's gate
  weights "self.w_gate showed Nan after 5 epochs"); tensorflow/ranking#232 ("Can you try with a
  lower learning rate? Sometimes a larger learning rate can cause NaN loss");
  guillaumegenthial/sequence_tagging#47 ("when I use lr = 0.001 in my model, there is no
  problem; but lr = 0.01 or 0.1, the train loss decrease first and then increase", then nan).
  Cured: RMSprop at 1e-3."""
  x, y = data.classes(seed)
  return cases.Setup(moe_mlp(seed), keras.optimizers.RMSprop(1e-3 if cured else 1.0),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- initialisation --------------------------------------------------------------------------


@add('blind7_init_squeezenet_random_normal_std2', 'initialisation', 'squeezenet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='VinceShieh/spark-ffm#12; forresti/SqueezeNet#4; tensorflow/tensorflow#53432')
def _(seed, cured=False):
  """A SqueezeNet-lite (a stem convolution, four fire modules, a 1x1 classifier convolution and
  global average: the logits) whose kernels are all initialised RandomNormal(stddev=2) instead
  of He, on digits with Adam at 1e-3: each of the nine ReLU convolutions multiplies the
  activations by far more than one, the first loss is about 1.2e10; Adam's bounded steps bring
  the running loss only to about 3e9 in 150 steps and the error stays near the constant
  answer's (0.79 against 0.86). VinceShieh/spark-ffm#12 ("Weight Initialisation might be a cause
  for loss NaN": with the given initialisation the pre-activations' standard deviation is so
  large that exp overflows; "Proper initialization of weight should make the Guassion
  distribution more narrowed"); forresti/SqueezeNet#4 (SqueezeNet trained from scratch: "my
  training loss from scratch has not decreased"; a reply: "Try LSUV init");
  tensorflow/tensorflow#53432 (a Keras Dense layer's outputs go NaN with
  kernel_initializer='random_normal' before fitting). Cured: he_normal kernels."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(squeezenet_lite(seed, init_std=None if cured else 2.0),
                     keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind7_div_normface_handwritten_l2_norm', 'division_or_log', 'normface_bow',
     doors=('trainer', 'fit'), steps=150,
     citation='jina-ai/finetuner#34; tensorflow/tensorflow#12071')
def _(seed, cured=False):
  """A NormFace-style cosine classifier over bag-of-words count vectors whose L2 normalisations
  are written out by hand, x / sqrt(sum(x^2)), trained with Adam at 3e-3 on topic documents of
  which 6 % have no in-vocabulary word (an all-zero count vector, legitimate data): such a
  document's normalisation is 0 / 0 = NaN, its logits are NaN, the loss is NaN from the first
  batch and the weights NaN after the first update. jina-ai/finetuner#34 ("fix nan problem in
  keras": "tf.norm suffers from numeric instability", pointing to tensorflow/tensorflow#12071,
  the NaN of the norm at a zero vector). Cured: tf.math.l2_normalize (x * rsqrt(max(sum(x^2),
  1e-12))) for both normalisations."""
  x, y = bag_of_words(seed)
  return cases.Setup(normface_bow(seed, safe=cured), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind7_exp_set_transformer_handwritten_softmax', 'softmax_overflow', 'set_transformer',
     doors=('trainer', 'fit'), steps=150,
     citation='psychopa4/PFNL#9; mila-iqia/blocks#727; pyg-team/pytorch_geometric#53')
def _(seed, cured=False):
  """A Set Transformer (two set-attention blocks, attention pooling) classifying point sets
  given in screen pixels (coordinates up to about +-400) whose attention softmax is written out
  by hand, exp(s) / sum(exp(s)), trained with AdamW at 1e-3: the attention scores of points this
  far apart reach the hundreds, exp overflows to inf, inf / inf = NaN and the loss is NaN from
  the first step. psychopa4/PFNL#9 (a hand-computed softmax, f = tf.exp(f); f / reduce_sum(f),
  in a non-local block: "f going to inf due to exponent of a pretty large number ... while
  tf.nn.softmax will handle this properly"); mila-iqia/blocks#727 ("enough energies to make exp
  overflow ... resulting NaN propagation", the attention energies stabilised "as its done in
  regular softmax"); pyg-team/pytorch_geometric#53 (GAT's scatter softmax "produce 'nan'
  frequently"; the exp taken without subtracting the max). Cured: tf.nn.softmax (the maximum
  subtracted first)."""
  x, y = point_sets(seed)
  return cases.Setup(set_transformer(seed, stable=cured),
                     keras.optimizers.AdamW(1e-3, weight_decay=1e-4),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind7_fp16_xlstm_exponential_gate_overflow', 'precision', 'xlstm_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='muditbhargava66/PyxLSTM#27; pytorch/pytorch#40497; '
              'tensorflow/tensorflow#47156')
def _(seed, cured=False):
  """An xLSTM-lite (one sLSTM cell: exponential input gate i = exp(i~), sigmoid forget gate,
  normaliser state, no stabiliser) classifying two days of hourly outdoor temperatures read in
  degrees Fahrenheit (about 20-110) by their trend, under mixed_float16 with Adam at 3e-3: the
  input gate's pre-activation on readings this large passes 11.1, exp overflows float16's 65504 to
  inf, c / n = inf / inf is NaN and the loss is NaN at every step from the first (the loss-scale
  optimizer skips every update, the model never moves); the same cell in float32 (exp safe up to
  88) trains. muditbhargava66/PyxLSTM#27 ("I am getting nan values in the mlstm output"; the
  sLSTM code there "doesn't implement any of the stabalization techniques"); pytorch/pytorch#40497
  ("Mixed precision causes NaN loss"; "work fine without torch.cuda.amp or disable autocast");
  tensorflow/tensorflow#47156 (mixed precision: an op overflowing in float16, to be computed in
  float32). Cured: the cell and its gates kept in float32 (dtype='float32' on the RNN)."""
  x, y = temperature_series(seed)
  return cases.Setup(xlstm_lite(seed, cell_dtype='float32' if cured else None),
                     keras.optimizers.Adam(3e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind7_input_missing_item_price_nan_two_tower', 'bad_input', 'two_tower',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/recommenders#655; tensorflow/recommenders#502')
def _(seed, cured=False):
  """A two-tower recommender (user and item towers over id embeddings and numeric features, the
  dot product: the click logit) trained with Adagrad at 0.3 on impressions where 3 % of the
  items have no price and it was exported as NaN: the first batch holding such an item (step 1
  here) gives a NaN logit and NaN gradients, Adagrad writes NaN into the weights and every
  output is NaN from then on (Keras's running loss display stays finite, the model does not).
  tensorflow/recommenders#655 ("loss becomes nan"; the answer: "I ran into these when I have
  some NAN values in the input or improperly scaled values"); tensorflow/recommenders#502
  ("Retrieval Model NaN Training Loss" once several item features were added). Cured: the
  missing prices filled with the mean (0)."""
  x, y, missing = interactions(seed, missing=0.03, fill=cured)
  clean = data.stream(tuple(a[~missing] for a in x), y[~missing], batch=32, seed=seed)
  return cases.Setup(two_tower(seed), keras.optimizers.Adagrad(0.3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit', eval_data=clean)


# --- transient -------------------------------------------------------------------------------


@add('blind7_transient_upset_performer', 'transient', 'performer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='JiahuiYu/wdsr_ntire2018#36; Rikorose/DeepFilterNet#30; karpathy/nanoGPT#227')
def _(seed, cured=False):
  """A Performer-lite encoder (linear attention with ReLU random features) classifying token
  sequences, Adam at 3e-3, that trains normally (the running loss 3.5 to 0.4 by step 50) until
  one activation of its first attention block, at that layer's 80th training call (step 76 here),
  comes back +inf once (a single upset, as a flipped exponent bit) and never again: that step's
  loss and gradients are NaN, Adam writes NaN into the weights and the loss is NaN for the rest
  of the run, though data, model and settings are sound. JiahuiYu/wdsr_ntire2018#36 (the loss
  normal for about 15,000 steps, then "suddenly turned into nan, my data was clean");
  Rikorose/DeepFilterNet#30 ("in some rare circumstances NaNs may occur ... Starting again from
  the last checkpoint should work"; "resuming the training from previous check point helps");
  karpathy/nanoGPT#227 ("Skip step if loss is nan"). Cured: no upset."""
  x, y = data.tokens(seed)
  return cases.Setup(performer_lite(seed, upset_at=None if cured else 80),
                     keras.optimizers.Adam(3e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind7_mismatch_kan_linear_head_into_poisson', 'loss_output_mismatch', 'kan_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#590; keras-team/keras#479; keras-team/keras#18886')
def _(seed, cured=False):
  """A KAN-lite regressor (two Kolmogorov-Arnold layers with radial-basis edges) of insurance
  claim counts whose head is linear while the loss is Keras's 'poisson', y_pred - y log(y_pred +
  eps), which needs positive predictions: about half the initial predictions are negative,
  their log is NaN and the loss is NaN from the first step (the weights stay finite, the model
  never learns). keras-team/keras#590 ("nan loss with poisson objective function" from the
  first epoch, a Dense(1) linear head); keras-team/keras#479 (the Poisson loss "assumes that
  y_pred > 0 ... Should be used after a softplus activation"); keras-team/keras#18886 ("when
  loss function is poisson, the loss of model is NaN", other losses fine). Cured: an
  exponential output activation (a log link)."""
  x, y = claim_counts(seed)
  return cases.Setup(kan_lite(seed, head='exponential' if cured else None),
                     keras.optimizers.Nadam(3e-3), 'poisson',
                     data.stream(x, y, batch=32, seed=seed), 'regression')
