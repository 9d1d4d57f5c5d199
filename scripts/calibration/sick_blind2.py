"""A second blind set of sick scenarios (the 'blind2' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other sick file uses (a graph conv net, Deep & Cross, an MLP-Mixer, a highway
net, a triplet net, a DeepSurv Cox model, a SimCLR encoder, attention MIL, a WaveNet, NeuMF, a
quantile net, a squeeze-excite convnet, a Poisson net, an Inception-style convnet). Each builder
takes `cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick
run). Each was checked with plain Keras `fit`: the sick run shows the reported symptom, the
cured twin passes runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND2 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers


def add(name, expected, arch, **fields):
  """`BLIND2.add` with split='blind2'."""
  return BLIND2.add(name, expected, arch, split='blind2', **fields)


def _seq(seed, name, inputs, *layers):
  """A seeded Sequential model."""
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input(inputs), *layers], name=name)


_seed = keras.utils.set_random_seed


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


class GraphConv(L.Layer):
  """A graph convolution on a dense adjacency: Dense(units, ReLU)(A' H), A' = A + I (a sum over
  the neighbours) or, with `normalize`, D^-1/2 (A + I) D^-1/2 (Kipf and Welling)."""

  def __init__(self, units, normalize, **kwargs):
    super().__init__(**kwargs)
    self.normalize = normalize
    self.dense = L.Dense(units, activation='relu')

  def call(self, inputs):
    a, h = inputs
    a = a + tf.eye(a.shape[-1], dtype=a.dtype)
    if self.normalize:
      d = tf.math.rsqrt(tf.reduce_sum(a, -1))
      a = a * d[:, :, None] * d[:, None, :]
    return self.dense(tf.matmul(a, h))


def gcn_dense(seed, *, nodes=16, features=8, layers=4, width=32, normalize=False):
  """A graph classifier: a node's input row is its adjacency row then its features; `layers`
  `GraphConv`s, a sum over the nodes, Dense(1) logit."""
  _seed(seed)
  inputs = keras.Input((nodes, nodes + features))
  a, h = L.Lambda(lambda t: (t[..., :nodes], t[..., nodes:]))(inputs)
  for _ in range(layers):
    h = GraphConv(width, normalize)([a, h])
  out = L.Dense(1)(L.Lambda(lambda t: tf.reduce_sum(t, 1))(h))
  return keras.Model(inputs, out, name='gcn_dense')


class Cross(L.Layer):
  """A Deep & Cross network cross layer: x_{l+1} = x_0 (x_l . w) + b + x_l."""

  def build(self, shapes):
    d = shapes[0][-1]
    self.w = self.add_weight(shape=(d, 1), initializer='glorot_uniform', name='w')
    self.b = self.add_weight(shape=(d,), initializer='zeros', name='b')

  def call(self, inputs):
    x0, x = inputs
    return x0 * tf.matmul(x, self.w) + self.b + x


def deep_cross(seed, *, features=16, crosses=3):
  """Deep & Cross: `crosses` cross layers beside a deep branch Dense 64-32 (ReLU), Dense(1)."""
  _seed(seed)
  x = x0 = keras.Input((features,))
  for _ in range(crosses):
    x = Cross()([x0, x])
  deep = L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(x0))
  return keras.Model(x0, L.Dense(1)(L.Concatenate()([x, deep])), name='deep_cross')


def mlp_mixer(seed, *, size=16, patch=4, dim=32, blocks=2, classes=10):
  """An MLP-Mixer: a strided-conv patch embedding, `blocks` mixer blocks (pre-LayerNorm token-
  and channel-mixing MLPs, residual), LayerNorm, global average, Dense(classes) logits."""
  _seed(seed)
  n = (size // patch) ** 2
  inputs = keras.Input((size, size, 1))
  x = L.Reshape((n, dim))(L.Conv2D(dim, patch, strides=patch)(inputs))
  for _ in range(blocks):
    t = L.Permute((2, 1))(L.LayerNormalization()(x))
    t = L.Dense(n)(L.Dense(2 * n, activation='gelu')(t))
    x = L.Add()([x, L.Permute((2, 1))(t)])
    c = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(L.LayerNormalization()(x)))
    x = L.Add()([x, c])
  x = L.GlobalAveragePooling1D()(L.LayerNormalization()(x))
  return keras.Model(inputs, L.Dense(classes)(x), name='mlp_mixer')


def highway_net(seed, *, features=16, width=32, depth=12, classes=8,
                kernel_initializer='glorot_uniform'):
  """A highway network: Dense(width) in, `depth` highway layers y = T * H(x) + (1 - T) * x
  (H: Dense ReLU, T: Dense sigmoid, gate bias -2), Dense(classes) logits."""
  _seed(seed)
  dense = lambda n, act, **k: L.Dense(n, activation=act, kernel_initializer=kernel_initializer, **k)
  inputs = keras.Input((features,))
  x = dense(width, 'relu')(inputs)
  for _ in range(depth):
    h = dense(width, 'relu')(x)
    t = dense(width, 'sigmoid', bias_initializer=keras.initializers.Constant(-2.0))(x)
    x = L.Add()([L.Multiply()([t, h]), L.Multiply()([L.Lambda(lambda g: 1.0 - g)(t), x])])
  return keras.Model(inputs, dense(classes, None)(x), name='highway_net')


def triplet_embedding(seed, *, size=8, dim=16, epsilon=0.0):
  """A triplet network: (anchor, positive, negative) on axis 1, one conv encoder (L2-normalised),
  the distances [d(a, p), d(a, n)] as the thread writes them: sqrt(sum((a - b)^2) + epsilon)."""
  _seed(seed)
  encoder = keras.Sequential([
      keras.Input((size, size, 1)), L.Conv2D(16, 3, padding='same', activation='relu'),
      L.Conv2D(32, 3, padding='same', activation='relu'), L.GlobalAveragePooling2D(),
      L.Dense(dim), L.UnitNormalization()], name='encoder')
  inputs = keras.Input((3, size, size, 1))
  a, p, n = (encoder(inputs[:, i]) for i in range(3))
  dist = lambda u, v: tf.sqrt(tf.reduce_sum(tf.square(u - v), -1, keepdims=True) + epsilon)
  out = L.Lambda(lambda t: tf.concat([dist(t[0], t[1]), dist(t[0], t[2])], -1))([a, p, n])
  return keras.Model(inputs, out, name='triplet_embedding')


def cox_survival(seed, *, features=16):
  """DeepSurv: an MLP 16 -> 32 -> 16 (tanh, dropout) -> Dense(1, no bias): the log hazard."""
  return _seq(seed, 'cox_survival', (features,), L.Dense(32, activation='tanh'), L.Dropout(0.1),
              L.Dense(16, activation='tanh'), L.Dense(1, use_bias=False))


def contrastive_encoder(seed, *, size=16, dim=32, temperature=0.01):
  """SimCLR-style: two views (axis 1) through one conv encoder and projection head (L2-normalised),
  the batch's similarity logits z1 . z2^T / temperature, (batch, batch)."""
  _seed(seed)
  encoder = keras.Sequential([
      keras.Input((size, size, 1)), L.Conv2D(16, 3, padding='same', activation='relu'),
      L.Conv2D(32, 3, strides=2, padding='same', activation='relu'),
      L.Conv2D(64, 3, strides=2, padding='same', activation='relu'),
      L.GlobalAveragePooling2D(), L.Dense(64, activation='relu'), L.Dense(dim),
      L.UnitNormalization()], name='encoder')
  inputs = keras.Input((2, size, size, 1))
  z1, z2 = encoder(inputs[:, 0]), encoder(inputs[:, 1])
  out = L.Lambda(lambda z: tf.matmul(z[0], z[1], transpose_b=True) / temperature)([z1, z2])
  return keras.Model(inputs, out, name='contrastive_encoder')


class MaskedAttentionPool(L.Layer):
  """Attention-MIL pooling (Ilse et al.): scores Dense(16, tanh) -> Dense(1) per instance, the
  padding instances (all zeros) given the score `fill` before the softmax, the weighted sum."""

  def __init__(self, fill, **kwargs):
    super().__init__(**kwargs)
    self.fill = fill
    self.v = L.Dense(16, activation='tanh')
    self.w = L.Dense(1)

  def call(self, inputs):
    h, x = inputs
    keep = tf.reduce_any(tf.not_equal(x, 0), axis=-1)
    scores = tf.squeeze(self.w(self.v(h)), -1)
    scores = tf.where(keep, scores, tf.constant(self.fill, scores.dtype))
    return tf.reduce_sum(tf.nn.softmax(scores, axis=-1)[..., None] * h, axis=1)


def mil_attention(seed, *, bag=12, features=64, fill=-np.inf):
  """Attention-based deep MIL: instances through Dense 64-32 (ReLU), pooled, Dense(1) logit."""
  _seed(seed)
  inputs = keras.Input((bag, features))
  h = L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(inputs))
  return keras.Model(inputs, L.Dense(1)(MaskedAttentionPool(fill)([h, inputs])),
                     name='mil_attention')


class InstanceNormOnePass(L.Layer):
  """Per-series standardisation over time in one pass: var = E[x^2] - E[x]^2, in the layer's
  compute dtype (float16 under mixed_float16) or, with `float32_stats`, in float32."""

  def __init__(self, float32_stats=False, **kwargs):
    super().__init__(**kwargs)
    self.float32_stats = float32_stats

  def call(self, x):
    dtype, x = x.dtype, tf.cast(x, tf.float32) if self.float32_stats else x
    mean = tf.reduce_mean(x, axis=1, keepdims=True)
    var = tf.reduce_mean(tf.square(x), axis=1, keepdims=True) - tf.square(mean)
    return tf.cast((x - mean) / tf.sqrt(tf.maximum(var, 0.0) + 1e-3), dtype)


def wavenet(seed, *, steps=40, width=16, dilations=(1, 2, 4, 8), float32_stats=False):
  """A WaveNet-style net: `InstanceNormOnePass` of the raw series, a 1x1 stem, gated dilated
  causal conv blocks (tanh x sigmoid) with residual and skip 1x1 convs, ReLU of the skips' sum,
  1x1 conv, the last step, Dense(1) logit (float32)."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  x = L.Conv1D(width, 1)(InstanceNormOnePass(float32_stats)(inputs))
  skips = []
  for d in dilations:
    conv = lambda act: L.Conv1D(width, 2, padding='causal', dilation_rate=d, activation=act)
    z = L.Multiply()([conv('tanh')(x), conv('sigmoid')(x)])
    x = L.Add()([x, L.Conv1D(width, 1)(z)])
    skips.append(L.Conv1D(width, 1)(z))
  h = L.Conv1D(width, 1, activation='relu')(L.ReLU()(L.Add()(skips)))
  out = L.Dense(1, dtype='float32')(L.Lambda(lambda t: t[:, -1])(h))
  return keras.Model(inputs, out, name='wavenet')


def ncf(seed, *, users=300, items=400, dim=8):
  """NeuMF: a GMF branch (user x item embeddings) and an MLP branch (their concatenation, Dense
  32-16 ReLU), Dense(1) on both (a rating)."""
  _seed(seed)
  ids = keras.Input((2,), dtype='int32')
  u, i = ids[:, 0], ids[:, 1]
  gmf = L.Multiply()([L.Embedding(users, dim)(u), L.Embedding(items, dim)(i)])
  mlp = L.Concatenate()([L.Embedding(users, dim)(u), L.Embedding(items, dim)(i)])
  mlp = L.Dense(16, activation='relu')(L.Dense(32, activation='relu')(mlp))
  return keras.Model(ids, L.Dense(1)(L.Concatenate()([gmf, mlp])), name='ncf')


def quantile_net(seed, *, features=13, quantiles=3):
  """A quantile regression MLP: 13 -> 64 -> 32 (ELU) -> Dense(quantiles) (0.1, 0.5, 0.9)."""
  return _seq(seed, 'quantile_net', (features,), L.Dense(64, activation='elu'),
              L.Dense(32, activation='elu'), L.Dense(quantiles))


def squeeze_excite(x, ratio=4):
  """A squeeze-and-excitation gate: channel weights from the global average, x * weights."""
  c = x.shape[-1]
  s = L.Dense(c, activation='sigmoid')(L.Dense(c // ratio, activation='relu')(
      L.GlobalAveragePooling2D(keepdims=True)(x)))
  return L.Multiply()([x, s])


def se_convnet(seed, *, size=16, classes=10, flaky_at=None):
  """A squeeze-excite convnet: conv-SE-pool, conv-SE-pool, flatten, Dense(classes) logits;
  `flaky_at`: a `field.FlakyOnce` on the flattened features."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  x = squeeze_excite(L.Conv2D(16, 3, padding='same', activation='relu')(inputs))
  x = squeeze_excite(L.Conv2D(32, 3, padding='same', activation='relu')(L.MaxPooling2D()(x)))
  x = L.Flatten()(L.MaxPooling2D()(x))
  if flaky_at is not None:
    x = field.FlakyOnce(flaky_at)(x)
  return keras.Model(inputs, L.Dense(classes)(x), name='se_convnet')


def poisson_net(seed, *, features=16, activation=None):
  """A count regression MLP: 16 -> 32 -> 16 (ReLU) -> Dense(1, activation) (the rate)."""
  return _seq(seed, 'poisson_net', (features,), L.Dense(32, activation='relu'),
              L.Dense(16, activation='relu'), L.Dense(1, activation=activation))


def inception_small(seed, *, size=16, classes=10):
  """An Inception-style convnet: a stem conv, two blocks of parallel 1x1 / 3x3 / 5x5 / pool
  branches concatenated (a pool between), global pooling, Dense(classes) logits."""
  _seed(seed)

  def block(x, n):
    conv = lambda k: L.Conv2D(n, k, padding='same', activation='relu')
    return L.Concatenate()([conv(1)(x), conv(3)(conv(1)(x)), conv(5)(conv(1)(x)),
                            conv(1)(L.MaxPooling2D(3, 1, padding='same')(x))])

  inputs = keras.Input((size, size, 1))
  x = L.Conv2D(16, 3, padding='same', activation='relu')(inputs)
  x = block(L.MaxPooling2D()(block(x, 8)), 16)
  out = L.Dense(classes)(L.GlobalAveragePooling2D()(x))
  return keras.Model(inputs, out, name='inception_small')


# --- Data of this file. ----------------------------------------------------------------------


def random_graphs(seed, *, rows=2048, nodes=16, features=8):
  """Random graphs (edge probability 0.2-0.6), nodes with 8 features: rows (adjacency row, features)
  per node, labelled 1 when the graph has more edges between "red" nodes than the median."""
  rng = np.random.RandomState(12000 + seed)
  a = (rng.rand(rows, nodes, nodes) < rng.uniform(0.2, 0.6, (rows, 1, 1))).astype(np.float32)
  a = np.triu(a, 1) + np.triu(a, 1).transpose(0, 2, 1)
  x = rng.normal(size=(rows, nodes, features)).astype(np.float32)
  red = (x[..., 0] > 0).astype(np.float32)
  score = np.einsum('bi,bij,bj->b', red, a, red)
  y = (score > np.median(score)).astype(np.float32)[:, None]
  return np.concatenate([a, x], -1), y


def triplets(seed, *, rows=2048, same=0.002):
  """(anchor, positive, negative) 8x8 digits (positive: the anchor's class, negative: another);
  a fraction `same` of the positives is the anchor image itself. Labels [1, 0] (same, not)."""
  x, y = data.digits(size=8, rgb=False)
  rng = np.random.RandomState(6000 + seed)
  by_class = [np.flatnonzero(y == c) for c in range(10)]
  anchor = rng.randint(0, len(x), rows)
  pos = np.array([rng.choice(by_class[y[a]]) for a in anchor])
  while (pos == anchor).any():  # Positives other than the anchor, but for the chosen few.
    pos[pos == anchor] = [rng.choice(by_class[y[a]]) for a in anchor[pos == anchor]]
  dup = rng.choice(rows, int(round(same * rows)), replace=False)
  pos[dup] = anchor[dup]
  neg = np.array([rng.choice(np.flatnonzero(y != y[a])) for a in anchor])
  return np.stack([x[anchor], x[pos], x[neg]], 1), np.tile(np.float32([[1, 0]]), (rows, 1))


def _linear(seed, rows, features):
  """A table of normal features and a linear score of them with unit spread, and the rng."""
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(rows, features)).astype(np.float32)
  z = x @ rng.normal(size=(features, 1))
  return x, z / np.std(z), rng


def survival(seed, *, rows=2048, features=16, censor_rate=4.0):
  """Proportional-hazards data: log hazard h = x.w (unit spread), event times Exponential(e^h),
  censoring times Exponential(censor_rate): (x, [[time, event]]) and the true centred h."""
  x, h, rng = _linear(seed, rows, features)
  t_event = rng.exponential(1.0 / np.exp(h))
  t_censor = rng.exponential(1.0 / censor_rate, size=(rows, 1))
  y = np.concatenate([np.minimum(t_event, t_censor), (t_event <= t_censor)], 1)
  return x, y.astype(np.float32), (h - h.mean()).astype(np.float32)


def two_views(seed, *, size=16):
  """Two views of each 16x16 digit (shifted up to 2 pixels, contrast x0.6-1.4, noise 0.2)."""
  x, _ = data.digits(size=size, rgb=False)
  rng = np.random.RandomState(7000 + seed)

  def view():
    shifted = np.stack([np.roll(im, tuple(rng.randint(-2, 3, 2)), axis=(0, 1)) for im in x])
    return shifted * rng.uniform(0.6, 1.4, (len(x), 1, 1, 1)) + 0.2 * rng.normal(size=x.shape)

  return np.stack([view(), view()], axis=1).astype(np.float32)


def pair_stream(x, seed, *, batch=32):
  """A stream of view pairs labelled with their row in the batch (the match to find)."""
  ds = data.stream(x, np.zeros(len(x), np.float32), batch=batch, seed=seed)
  return ds.map(lambda v, _: (v, tf.range(batch)))


def bags(seed, *, rows=2048, bag=12, empty=0.0):
  """Bags of 1-12 flattened 8x8 digits (zero-padded to 12), labelled 1 when one of them is a 9;
  a fraction `empty` of the bags has no instance at all (label 0)."""
  x, y = data.digits(size=8, rgb=False)
  x = x.reshape(len(x), 64)
  rng = np.random.RandomState(8000 + seed)
  sizes = rng.randint(1, bag + 1, rows)
  sizes[rng.rand(rows) < empty] = 0
  out, labels = np.zeros((rows, bag, 64), np.float32), np.zeros((rows, 1), np.float32)
  for r, n in enumerate(sizes):
    pick = rng.randint(0, len(x), n)
    out[r, :n] = x[pick]
    labels[r] = float((y[pick] == 9).any())
  return out, labels


def pressure_series(seed, *, rows=1024, steps=40):
  """Barometer windows in hPa (stations at 950-1050, walks of about 1 hPa a step), labelled 1
  when the pressure ends higher than it started."""
  x, _ = data.series(seed, rows=rows, steps=steps)
  rng = np.random.RandomState(9000 + seed)
  y = (x[:, -1, 0] > x[:, 0, 0]).astype(np.float32)[:, None]
  return (rng.uniform(950, 1050, (rows, 1, 1)) + 3.0 * x).astype(np.float32), y


def ratings(seed, *, users=300, items=400, rows=12000, missing=0.0):
  """Explicit ratings (about 1-5): 3 + user bias + item bias + a rank-3 taste term + noise, as
  ((user, item) ids, rating); a fraction `missing` of the ratings NaN (an empty cell)."""
  rng = np.random.RandomState(10000 + seed)
  bu, bi = rng.normal(0, 0.7, users), rng.normal(0, 0.7, items)
  pu, qi = rng.normal(0, 0.6, (users, 3)), rng.normal(0, 0.6, (items, 3))
  u, i = rng.randint(0, users, rows), rng.randint(0, items, rows)
  r = 3 + bu[u] + bi[i] + np.sum(pu[u] * qi[i], 1) + 0.3 * rng.normal(size=rows)
  r[rng.rand(rows) < missing] = np.nan
  return np.stack([u, i], 1).astype(np.int32), r.astype(np.float32)[:, None]


def store_visits(seed, *, rows=2048, zero=0.0):
  """(12 normal features, visit counts of 5-60 but a fraction `zero` of 0, sales): the sales
  linear in the features and log1p(visits), with noise growing with the first feature."""
  rng = np.random.RandomState(11000 + seed)
  x = rng.normal(size=(rows, 12)).astype(np.float32)
  visits = rng.poisson(rng.uniform(5, 60, rows)).astype(np.float32)
  visits[rng.rand(rows) < zero] = 0.0
  w = rng.normal(size=(12, 1)) / np.sqrt(12)
  y = x @ w + 0.5 * np.log1p(visits)[:, None] + 0.3 * (1 + np.abs(x[:, :1])) * rng.normal(
      size=(rows, 1))
  return x, visits, y.astype(np.float32)


def counts(seed, *, rows=2048, features=16):
  """Poisson counts whose log rate is linear in the features (log rate 1 + 0.8 z)."""
  x, z, rng = _linear(seed, rows, features)
  return x, rng.poisson(np.exp(1.0 + 0.8 * z)).astype(np.float32)


# --- Losses as the threads write them. -------------------------------------------------------


def triplet_loss(y, d, margin=1.0):
  """mean(max(d(a, p) - d(a, n) + margin, 0)) (the labels are the layout, unused)."""
  d = tf.cast(d, tf.float32)
  return tf.reduce_mean(tf.nn.relu(d[:, 0] - d[:, 1] + margin))


def cox_loss(guarded):
  """DeepSurv's loss: the negative Cox partial log-likelihood of a batch (risk sets by sorting on
  time) over its number of events; unguarded, a batch without an event is 0 / 0."""

  def loss(y, risk):
    y, risk = tf.cast(y, tf.float32), tf.cast(risk, tf.float32)[:, 0]
    order = tf.argsort(y[:, 0], direction='DESCENDING')
    risk, event = tf.gather(risk, order), tf.gather(y[:, 1], order)
    log_risk_set = tf.math.log(tf.cumsum(tf.exp(risk)))
    events = tf.maximum(tf.reduce_sum(event), 1.0) if guarded else tf.reduce_sum(event)
    return -tf.reduce_sum((risk - log_risk_set) * event) / events

  return loss


def naive_nt_xent(y, logits):
  """SimCLR's NT-Xent as the thread writes it: exp(s) / sum(exp(s)) of the similarity logits,
  then -log of the matching pair's share (no max subtracted)."""
  probs = field.naive_softmax(logits)
  picked = tf.gather(probs, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked))


def pinball(y, q, taus=(0.1, 0.5, 0.9)):
  """The quantile (pinball) loss of the three quantile outputs."""
  err = tf.cast(y, tf.float32) - tf.cast(q, tf.float32)
  taus = tf.constant(taus, tf.float32)
  return tf.reduce_mean(tf.maximum(taus * err, (taus - 1.0) * err))


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind2_grad_unnormalised_adjacency_gcn', 'exploding_gradients', 'gcn_dense',
     doors=('trainer', 'fit'), steps=150,
     citation='cvignac/SMP#3; snap-stanford/ogb#38; benedekrozemberczki/AttentionWalk#9')
def _(seed, cured=False):
  """A four-layer graph conv net classifying random graphs that propagates over the raw adjacency
  with self-loops (neighbours summed, not averaged), SGD 0.01 with momentum 0.9: each layer
  multiplies the activations by the degree (6 on average), logits and gradients blow up, the loss is
  NaN within a few steps. cvignac/SMP#3 ("NaNs usually arise when the activations explode ...
  too many layers and no normalization"); snap-stanford/ogb#38 ("Potential exploding gradient
  issue" training a GCN); benedekrozemberczki/AttentionWalk#9 (an adjacency "simply multiple by
  degree of nodes", not normalised: the loss "extreme big"). Cured: D^-1/2 (A + I) D^-1/2."""
  x, y = random_graphs(seed)
  return cases.Setup(gcn_dense(seed, normalize=cured), keras.optimizers.SGD(0.01, momentum=0.9),
                     BCE(from_logits=True), data.stream(x, y, batch=32, seed=seed),
                     'binary_logit')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind2_lr_sgd_deep_cross', 'learning_rate', 'deep_cross', doors=('trainer', 'fit'),
     seeds=(0, 1), steps=150,
     citation='guillaumegenthial/sequence_tagging#47; roytseng-tw/Detectron.pytorch#29')
def _(seed, cured=False):
  """A Deep & Cross net regressing a table with plain SGD at 0.05: the cross layers' products
  amplify every step and the loss is NaN within about ten. guillaumegenthial/sequence_tagging#47
  ("when I use lr = 0.001 ... no problem; but lr = 0.01 or 0.1, the train loss decrease first
  and then increase", then "train loss:nan"); roytseng-tw/Detectron.pytorch#29 ("too large lr is
  likely to be the cause of NaN loss"; "Your suggestions worked!"). Cured: SGD 0.01."""
  x, y = data.tabular(seed)
  return cases.Setup(deep_cross(seed), keras.optimizers.SGD(0.01 if cured else 0.05), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind2_lr_adam_one_mlp_mixer', 'learning_rate', 'mlp_mixer', doors=('trainer',),
     steps=150, citation='OpenNMT/OpenNMT-py#805; rajveermalviya/language-modeling#3')
def _(seed, cured=False):
  """An MLP-Mixer of the 16x16 digits with Adam at 1.0 (a config written for SGD): the
  LayerNorms keep it finite, but the loss stays high and the accuracy near chance.
  OpenNMT/OpenNMT-py#805 ("Adam seems to be broken": "the ppl stays a high constant value"; "you
  need to set the learning_rate to 0.001, by default it's 1 because default optim is sgd");
  rajveermalviya/language-modeling#3 ("the loss ... didn't really went down ... because you use
  learning rate of 1.0"; with Adam's 0.001 "the training get much better"). Cured: Adam 1e-3."""
  return cases.Setup(mlp_mixer(seed), keras.optimizers.Adam(1e-3 if cured else 1.0),
                     SCE(from_logits=True), data.digits_stream(seed, size=16, rgb=False),
                     'classes')


# --- initialisation --------------------------------------------------------------------------


@add('blind2_init_mean_for_stddev_highway', 'initialisation', 'highway_net',
     doors=('trainer', 'fit'), steps=150,
     citation='aiUIUC/pyAIUtils#25; AUTOMATIC1111/stable-diffusion-webui#4350')
def _(seed, cured=False):
  """A 12-layer highway net classifying Gaussian clusters, its kernels from a TF1-style
  `random_normal_initializer(0.05)`: the intended stddev went in as the mean and the stddev is
  the default 1.0; the logits start in the thousands, the loss in the millions, and it does not
  learn. aiUIUC/pyAIUtils#25 ("random_normal_initializer is wrong for both conv and dense": "the
  first argument should be mean"); AUTOMATIC1111/stable-diffusion-webui#4350 (a badly scaled
  init without normalisation: "the network is ruined before it even starts learning", whatever
  the learning rate). Cured: mean 0, stddev 0.05."""
  x, y = data.classes(seed)
  init = {'class_name': 'RandomNormal',  # A config: each layer gets its own draw.
          'config': {'mean': 0.0 if cured else 0.05, 'stddev': 0.05 if cured else 1.0}}
  return cases.Setup(highway_net(seed, kernel_initializer=init), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind2_div_triplet_sqrt_identical_pair', 'division_or_log', 'triplet_embedding',
     doors=('trainer', 'fit'), seeds=(0, 1), steps=150,
     citation='tensorflow/tensorflow#30199; tensorflow/tensorflow#4914')
def _(seed, cured=False):
  """A triplet embedding net of 8x8 digits whose distance is tf.sqrt(sum of squares); the sampler
  sometimes hands the anchor itself as the positive (0.2 % of the triplets): sqrt(0) has an
  infinite gradient and 0 * inf makes the gradient NaN. tensorflow/tensorflow#30199 ("Gradient
  returns "Nan" values when using triplet loss with similar batches": "generating positives that
  are similar to my anchor. This causes the whole gradient to become "Nan""),
  tensorflow/tensorflow#4914 (the gradient of sqrt at 0: "0 * inf = NaN").
  Cured: sqrt(sum + 1e-12)."""
  x, y = triplets(seed)
  return cases.Setup(triplet_embedding(seed, epsilon=1e-12 if cured else 0.0),
                     keras.optimizers.Adam(1e-3), triplet_loss,
                     data.stream(x, y, batch=32, seed=seed), 'pairs')


@add('blind2_div_cox_batch_without_events', 'division_or_log', 'cox_survival',
     doors=('trainer', 'fit'), seeds=(0, 1), steps=200,
     citation='liupei101/TFDeepSurv#15; havakv/pycox#124')
def _(seed, cured=False):
  """A DeepSurv-style Cox model in mini-batches of 16 of follow-up about 80 % censored, its loss
  the partial log-likelihood divided by the batch's number of events: a batch without an event
  (a few, by the data order) is 0 / 0. liupei101/TFDeepSurv#15 ("loss diverges to NaN": divided
  by "the count of events in a batch, which is likely to be 0"); havakv/pycox#124 ("zero positive
  event when batch size is small ... dividing the number of positive events can explode the
  loss"). Cured: the divisor at least 1."""
  x, y, h = survival(seed)
  return cases.Setup(cox_survival(seed), keras.optimizers.Adam(3e-3), cox_loss(cured),
                     data.stream(x, y, batch=16, seed=seed), 'regression',
                     eval_data=data.stream(x, h, batch=64, seed=seed))


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind2_exp_simclr_low_temperature', 'softmax_overflow', 'contrastive_encoder',
     doors=('trainer', 'fit'), steps=150,
     citation='Lightning-Universe/lightning-bolts#811; Lightning-Universe/lightning-bolts#320')
def _(seed, cured=False):
  """A SimCLR-style encoder of digit view pairs at temperature 0.01 whose NT-Xent is written as
  exp(sim / T) / sum(exp(sim / T)): a pair's cosine above 0.89 is exp(> 88.7) = inf, inf / inf
  is NaN from the first batch. Lightning-Universe/lightning-bolts#811 ("float overflow on low
  temperature values because of `e ** (1 / temperature)`"); Lightning-Universe/lightning-bolts#320
  ("exponential operation ... may induce numerical instability i.e. loss becomes nan"; "Uses
  torch.nn.CrossEntropyLoss"). Cured: the cross-entropy from the logits, the same temperature."""
  return cases.Setup(contrastive_encoder(seed), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True) if cured else naive_nt_xent,
                     pair_stream(two_views(seed), seed), 'classes')


@add('blind2_exp_mil_empty_bag_neg_inf_mask', 'softmax_overflow', 'mil_attention',
     doors=('trainer', 'fit'), seeds=(0, 1), steps=150,
     citation='pytorch/pytorch#24816; allenai/allennlp#890; pytorch/pytorch#41508')
def _(seed, cured=False):
  """An attention-MIL net over bags of digits whose padding instances are scored -inf before the
  softmax; 0.5 % of the bags are empty: a row of -inf, whose softmax is NaN, on the few batches
  holding one. pytorch/pytorch#24816 ("If I have all padded sequence with padding mask, this
  makes NaN output"); allenai/allennlp#890 (a mask row all 0: the masked softmax "has nans");
  pytorch/pytorch#41508 (fully masked rows: NaN gradients). Cured: the padding scored -1e9."""
  x, y = bags(seed, empty=0.005)
  x_eval, y_eval = bags(seed)
  return cases.Setup(mil_attention(seed, fill=-1e9 if cured else -np.inf),
                     keras.optimizers.Adam(1e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit',
                     eval_data=data.stream(x_eval, y_eval, batch=32, seed=seed))


# --- precision -------------------------------------------------------------------------------


@add('blind2_fp16_one_pass_variance_wavenet', 'precision', 'wavenet', doors=('trainer', 'fit'),
     steps=150, precision='mixed_float16',
     citation='tensorflow/tensorflow#47156; idiap/fast-transformers#32')
def _(seed, cured=False):
  """A WaveNet-style gated net under mixed_float16 on barometer windows in hPa (about 1000),
  standardised per window inside the model with a one-pass variance E[x^2] - E[x]^2 in float16:
  1000^2 is past float16's 65504 and inf - inf is NaN from the first batch (float32 trains).
  tensorflow/tensorflow#47156 ("Mixed precision : Numerical instability with instance
  normalization layer": the variance overflows; "better to do mean in float32");
  idiap/fast-transformers#32 ("fp16 covers a much smaller range of values than fp32").
  Cured: the statistics in float32."""
  x, y = pressure_series(seed)
  return cases.Setup(wavenet(seed, float32_stats=cured), keras.optimizers.Adam(2e-3),
                     BCE(from_logits=True), data.stream(x, y, batch=32, seed=seed),
                     'binary_logit')


# --- bad_input -------------------------------------------------------------------------------


@add('blind2_input_missing_ratings_ncf', 'bad_input', 'ncf', doors=('trainer', 'fit'),
     seeds=(0, 1), steps=200,
     citation='chinchi-hsu/KerasCollaborativeFiltering#3; havakv/pycox#48; RUCAIBox/RecBole#1084')
def _(seed, cured=False):
  """A NeuMF recommender on explicit ratings read from a sparse table, 0.15 % of them empty cells
  (NaN), trained with MSE: the batches that hold one have a NaN loss.
  chinchi-hsu/KerasCollaborativeFiltering#3 ("get nan results": MovieLens "after processing",
  "the loss, the rmse and also the embedding matrix are all nan"); havakv/pycox#48 ("solved the
  problem by filling the null values in the data"); RUCAIBox/RecBole#1084 (missing values are
  filtered out before training). Cured: the empty ratings dropped."""
  ids, r = ratings(seed, missing=0.002)
  model, keep = ncf(seed), np.isfinite(r[:, 0])  # The model first: it seeds the streams' shuffle.
  clean = data.stream(ids[keep], r[keep], batch=64, seed=seed)
  train = clean if cured else data.stream(ids, r, batch=64, seed=seed)
  return cases.Setup(model, keras.optimizers.Adam(5e-3), 'mse', train, 'regression',
                     eval_data=clean)


@add('blind2_input_log_zero_count_quantile', 'bad_input', 'quantile_net',
     doors=('trainer', 'fit'), seeds=(0, 1), steps=150,
     citation='xuannianz/keras-ctpn#1; danielegrattarola/keras-gat#14')
def _(seed, cured=False):
  """A quantile regression net (pinball loss) of daily sales whose features include
  np.log(visits) from preprocessing; a few days in a thousand had no visit: log(0) = -inf in the
  inputs, a NaN loss on the batches holding one. xuannianz/keras-ctpn#1 ("divide by zero
  encountered in log" in the data generator, "then loss got nan"); danielegrattarola/keras-gat#14
  (NaN in the loaded features: "X[np.isnan(X)] = 0. then it works"). Cured: np.log1p(visits)."""
  x, visits, y = store_visits(seed, zero=0.003)
  with np.errstate(divide='ignore'):
    feature = np.log1p(visits) if cured else np.log(visits)
  x = np.concatenate([x, feature[:, None]], 1).astype(np.float32)
  ok = visits > 0
  return cases.Setup(quantile_net(seed), keras.optimizers.Adam(2e-3), pinball,
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(x[ok], y[ok], batch=32, seed=seed))


# --- transient -------------------------------------------------------------------------------


@add('blind2_transient_flaky_se_convnet', 'transient', 'se_convnet', doors=('trainer', 'fit'),
     steps=150, citation='greatlog/DAN#8; PKU-YuanGroup/Open-Sora-Plan#333')
def _(seed, cured=False):
  """A squeeze-excite convnet of the 16x16 digits whose pooled features misfire once (NaN in one
  element at the 70th training call, about step 66 with the "did it train" measure's
  training-mode pass), then never again. greatlog/DAN#8 ("loss value is NAN at 22800 iterations
  suddenly"; "A workaround method is to resume from the last normal training state"; "it occurs
  twice during 400000 iterations"); PKU-YuanGroup/Open-Sora-Plan#333 ("Nan loss after 20k+ steps
  of training": "just resume the training process"). Cured: no misfire."""
  return cases.Setup(se_convnet(seed, flaky_at=None if cured else 70),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind2_mismatch_linear_poisson', 'loss_output_mismatch', 'poisson_net',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#590; keras-team/keras#479')
def _(seed, cured=False):
  """A count regression MLP whose last layer is a linear Dense(1), trained with loss='poisson'
  (y_pred - y_true * log(y_pred)): the rate comes out negative and its log is NaN at once.
  keras-team/keras#590 ("nan loss with poisson objective function": a linear Dense on top,
  "I get `nan` from the first epoch"; an epsilon added, "I still have the nan");
  keras-team/keras#479 (the Poisson loss "assumes that y_pred > 0 ... Should be used after a
  softplus activation"). Cured: an exponential output (a log link)."""
  x, y = counts(seed)
  return cases.Setup(poisson_net(seed, activation='exponential' if cured else None),
                     keras.optimizers.Adam(1e-3), 'poisson',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind2_mismatch_logits_default_ce_inception', 'loss_output_mismatch', 'inception_small',
     doors=('fit',), steps=150, citation='tensorflow/docs#2102; bonlime/keras-deeplab-v3-plus#129')
def _(seed, cured=False):
  """An Inception-style convnet of the 16x16 digits whose head is a linear Dense(10), trained with
  loss='sparse_categorical_crossentropy' (from_logits=False: logits read as probabilities): the
  loss stays high and the accuracy near chance. tensorflow/docs#2102 (the tutorial exercise
  without a softmax: "the accuracy would be around 0.3, not far away from the random-guess
  0.25"; the maintainer: use `SparseCategoricalCrossentropy(from_logits=True)`);
  bonlime/keras-deeplab-v3-plus#129 (a last layer without activation gives "unbounded numbers
  out which will throw a loss function like `categorical_crossentropy`"). Cured: from_logits."""
  return cases.Setup(inception_small(seed), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True) if cured else 'sparse_categorical_crossentropy',
                     data.digits_stream(seed, size=16, rgb=False), 'classes')
