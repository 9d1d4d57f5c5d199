"""A twenty-second blind set of sick scenarios (the 'blind22' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind21.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (an SRCNN-lite, a LightGCN-lite, a GGNN-lite, an
EEGNet-lite, an Autoformer-lite, a SimCLR-lite, an FFM-lite, a DnCNN-lite, a CBAM-lite and a
SampleCNN-lite). Each builder takes `cured`: the same run with the thread's remedy (the registry
calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the
sick run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it
train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND22 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND22.add` with split='blind22'."""
  return BLIND22.add(name, expected, arch, split='blind22', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def low_res_digits(*, size=16):
  """The digits as a super-resolution task: each grey `size` x `size` digit (pixels in [0, 1])
  the high-resolution target, its 2x average-pooled copy brought back to `size` x `size`
  bilinearly (as SRCNN's bicubic pre-upsampling does) the input. (x, y), both (1500, size,
  size, 1)."""
  hr, _ = data.digits(size=size, rgb=False)
  lr = tf.nn.avg_pool2d(hr, 2, 2, 'VALID')
  x = tf.image.resize(lr, (size, size), method='bilinear').numpy()
  return x.astype(np.float32), hr.astype(np.float32)


def srcnn_lite(seed):
  """An SRCNN-lite (Dong et al., 2014): patch extraction (a 9x9 convolution of 32, ReLU),
  non-linear mapping (1x1 of 16, ReLU), reconstruction (5x5 of 1, linear): the high-resolution
  image."""
  _seed(seed)
  x = keras.Input((16, 16, 1))
  h = L.Conv2D(32, 9, padding='same', activation='relu')(x)
  h = L.Conv2D(16, 1, activation='relu')(h)
  return keras.Model(x, L.Conv2D(1, 5, padding='same')(h), name='srcnn_lite')


def implicit_feedback(seed, *, users=200, items=300, factors=4, liked=30, rows=4096):
  """Implicit feedback in miniature: users and items with hidden taste vectors, each user's
  `liked` best-matching items (with noise) the positives; BPR triples (user, item a, item b),
  one item a positive and the other a sampled non-positive, in random order, the label 1 if a is
  the positive. Also the user-item interaction matrix. (([u, a, b]), labels (rows, 1)),
  interactions (users, items)."""
  rng = np.random.RandomState(seed)
  pu, qi = rng.randn(users, factors), rng.randn(items, factors)
  scores = pu @ qi.T + 0.5 * rng.randn(users, items)
  top = np.argsort(-scores, axis=1)[:, :liked]
  r = np.zeros((users, items), np.float32)
  r[np.arange(users)[:, None], top] = 1.0
  u = rng.randint(0, users, rows)
  pos = top[u, rng.randint(0, liked, rows)]
  neg = rng.randint(0, items, rows)
  clash = r[u, neg] > 0
  while clash.any():
    neg[clash] = rng.randint(0, items, clash.sum())
    clash = r[u, neg] > 0
  first = rng.rand(rows) < 0.5
  a, b = np.where(first, pos, neg), np.where(first, neg, pos)
  x = (u.astype(np.int32), a.astype(np.int32), b.astype(np.int32))
  return x, first[:, None].astype(np.float32), r


class LightGCNScores(L.Layer):
  """LightGCN (He et al., 2020): user and item embeddings propagated `hops` times over the
  symmetrically normalised user-item graph with no weights and no non-linearity, the layers
  averaged; the score of a (user, item) pair the dot product; output the score of item a minus
  that of item b (the BPR logit)."""

  def __init__(self, interactions, dim=32, hops=2, **kwargs):
    super().__init__(**kwargs)
    users, items = interactions.shape
    adj = np.zeros((users + items, users + items), np.float32)
    adj[:users, users:] = interactions
    adj[users:, :users] = interactions.T
    deg = np.maximum(adj.sum(1), 1.0)
    self.norm_adj = (adj / np.sqrt(deg[:, None] * deg[None, :])).astype(np.float32)
    self.users, self.dim, self.hops = users, dim, hops

  def build(self, shape):
    self.table = self.add_weight(shape=(self.norm_adj.shape[0], self.dim), name='table',
                                 initializer=keras.initializers.RandomNormal(stddev=0.1))

  def call(self, u, a, b):
    adj = tf.constant(self.norm_adj)
    e, layers = self.table, [self.table]
    for _ in range(self.hops):
      e = tf.matmul(adj, e)
      layers.append(e)
    e = tf.add_n(layers) / (self.hops + 1)
    eu = tf.gather(e, u)
    ea, eb = tf.gather(e, self.users + a), tf.gather(e, self.users + b)
    return tf.reduce_sum(eu * (ea - eb), axis=-1, keepdims=True)


def lightgcn_lite(seed, interactions):
  """A LightGCN-lite: `LightGCNScores` over 32-d embeddings, two hops: the BPR logit."""
  _seed(seed)
  u, a, b = (keras.Input((), dtype='int32') for _ in range(3))
  return keras.Model([u, a, b], LightGCNScores(interactions)(u, a, b), name='lightgcn_lite')


def molecule_graphs(seed, *, rows=2048, nodes=12, features=8):
  """Small random molecular-style graphs: `nodes` atoms with one-hot-ish `features` (an atom type
  and two continuous descriptors), bonds a random ring plus chords (symmetric, no self loops);
  the label a property summed over atoms and bonds (an energy in its raw units, tens to
  hundreds, as the dataset gives it). (([x (rows, nodes, features), adj (rows, nodes, nodes)]),
  y (rows, 1))."""
  rng = np.random.RandomState(seed)
  kinds = rng.randint(0, features - 2, (rows, nodes))
  x = np.zeros((rows, nodes, features), np.float32)
  x[np.arange(rows)[:, None], np.arange(nodes)[None, :], kinds] = 1.0
  x[..., -2:] = rng.randn(rows, nodes, 2)
  adj = np.zeros((rows, nodes, nodes), np.float32)
  ring = np.arange(nodes)
  adj[:, ring, (ring + 1) % nodes] = 1.0
  chords = rng.rand(rows, nodes, nodes) < 0.12
  adj = np.maximum(adj, chords)
  adj = np.maximum(adj, adj.transpose(0, 2, 1))
  adj[:, ring, ring] = 0.0
  atom_energy = rng.uniform(-20, 20, features - 2)
  bond_energy = rng.uniform(-10, 10, (features - 2, features - 2))
  bond_energy = bond_energy + bond_energy.T
  e = atom_energy[kinds].sum(1) + 8.0 * (x[..., -2] * x[..., -1]).sum(1)
  pair = bond_energy[kinds[:, :, None], kinds[:, None, :]]
  e = e + 0.5 * (adj * pair).sum((1, 2))
  return (x, adj), e[:, None].astype(np.float32)


class GatedPropagation(L.Layer):
  """GGNN's propagation (Li et al., 2016): `steps` rounds of messages (a Dense of the node
  states, summed over the neighbours) fed to a GRU cell shared by the rounds and the nodes."""

  def __init__(self, dim, steps, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.steps = dim, steps
    self.message = L.Dense(dim)
    self.cell = L.GRUCell(dim)

  def call(self, h, adj):
    nodes = tf.shape(h)[1]
    for _ in range(self.steps):
      m = tf.matmul(adj, self.message(h))
      flat, _ = self.cell(tf.reshape(m, [-1, self.dim]), [tf.reshape(h, [-1, self.dim])])
      h = tf.reshape(flat, [-1, nodes, self.dim])
    return h


class GatedReadout(L.Layer):
  """GGNN's graph-level readout: sum over nodes of sigmoid(gate(h, x)) * tanh(proj(h, x))."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.gate = L.Dense(dim, activation='sigmoid')
    self.proj = L.Dense(dim, activation='tanh')

  def call(self, h, x):
    hx = tf.concat([h, x], axis=-1)
    return tf.reduce_sum(self.gate(hx) * self.proj(hx), axis=1)


def ggnn_lite(seed, *, nodes=12, features=8, dim=32, steps=4):
  """A GGNN-lite: the atoms embedded to `dim`, `GatedPropagation` of `steps` rounds,
  `GatedReadout`, Dense(1): the graph's property."""
  _seed(seed)
  x = keras.Input((nodes, features))
  adj = keras.Input((nodes, nodes))
  h = GatedPropagation(dim, steps)(L.Dense(dim)(x), adj)
  return keras.Model([x, adj], L.Dense(1)(GatedReadout(dim)(h, x)), name='ggnn_lite')


def motor_imagery(seed, *, trials=1024, channels=8, samples=128, rate=128, classes=4,
                  dropouts=0):
  """Motor-imagery EEG trials in miniature: `channels` electrodes of background noise (1/f-ish,
  a random walk high-passed) plus a 10 Hz mu rhythm whose power drops over the electrode group
  of the imagined limb (the class) and a 20 Hz beta rhythm; per-channel standardised. `dropouts`
  trials carry an amplifier dropout: a stretch of samples on one channel stored as NaN, as the
  recording software writes lost samples. (x (trials, channels, samples, 1), labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, trials)
  t = np.arange(samples) / rate
  walk = np.cumsum(rng.randn(trials, channels, samples), axis=-1)
  noise = walk - np.mean(walk, axis=-1, keepdims=True)
  noise = 0.15 * noise / noise.std() + 0.5 * rng.randn(trials, channels, samples)
  group = np.arange(channels) * classes // channels
  mu_amp = np.where(group[None, :] == y[:, None], 0.3, 1.2)
  phase = rng.uniform(0, 2 * np.pi, (trials, channels, 1))
  mu = mu_amp[..., None] * np.sin(2 * np.pi * 10 * t + phase)
  beta = 0.4 * np.sin(2 * np.pi * 20 * t + 2 * phase)
  x = noise + mu + beta
  x = (x - x.mean(axis=(0, 2), keepdims=True)) / x.std(axis=(0, 2), keepdims=True)
  for i in rng.choice(trials, dropouts, replace=False):
    start = rng.randint(0, samples - 16)
    x[i, rng.randint(channels), start:start + 16] = np.nan
  return x[..., None].astype(np.float32), y.astype(np.int32)


def eegnet_lite(seed, *, channels=8, samples=128, classes=4, f1=8, d=2, f2=16):
  """An EEGNet-lite (Lawhern et al., 2018): a temporal convolution (1 x 32, `f1` filters), BN,
  a depthwise spatial convolution over the electrodes (depth multiplier `d`), BN, ELU, average
  pooling by 4, a separable convolution (1 x 16, `f2`), BN, ELU, average pooling by 8, Dense
  (`classes`): the logits."""
  _seed(seed)
  x = keras.Input((channels, samples, 1))
  h = L.BatchNormalization()(L.Conv2D(f1, (1, 32), padding='same', use_bias=False)(x))
  h = L.DepthwiseConv2D((channels, 1), depth_multiplier=d, use_bias=False)(h)
  h = L.AveragePooling2D((1, 4))(L.Activation('elu')(L.BatchNormalization()(h)))
  h = L.SeparableConv2D(f2, (1, 16), padding='same', use_bias=False)(h)
  h = L.AveragePooling2D((1, 8))(L.Activation('elu')(L.BatchNormalization()(h)))
  return keras.Model(x, L.Dense(classes)(L.Flatten()(h)), name='eegnet_lite')


def store_sales(seed, *, rows=4096, history=28, horizon=7):
  """Daily unit sales of shop items in miniature: each series a level (0.3 to 40 units a day,
  log-uniform: many slow movers), a weekly pattern and a slow trend, the day's count Poisson:
  slow movers sell nothing on many days. A window of `history` days (divided by 10), the next
  `horizon` days' counts the target (raw units). (x (rows, history, 1), y (rows, horizon))."""
  rng = np.random.RandomState(seed)
  level = np.exp(rng.uniform(np.log(0.3), np.log(40.0), (rows, 1)))
  t = np.arange(history + horizon)[None, :] + rng.randint(0, 7, (rows, 1))
  weekly = 1.0 + 0.4 * np.sin(2 * np.pi * t / 7 + rng.uniform(0, 0.5, (rows, 1)))
  trend = 1.0 + rng.uniform(-0.01, 0.01, (rows, 1)) * (t - t[:, :1])
  counts = rng.poisson(level * weekly * trend).astype(np.float32)
  return counts[:, :history, None] / 10.0, counts[:, history:]


class SeriesDecomposition(L.Layer):
  """Autoformer's series decomposition: the trend a moving average of `kernel` steps (the ends
  padded by repetition), the seasonal part the rest. Returns (seasonal, trend)."""

  def __init__(self, kernel=7, **kwargs):
    super().__init__(**kwargs)
    self.kernel = kernel

  def call(self, x):
    front = tf.repeat(x[:, :1], (self.kernel - 1) // 2, axis=1)
    back = tf.repeat(x[:, -1:], self.kernel // 2, axis=1)
    padded = tf.concat([front, x, back], axis=1)
    trend = tf.nn.avg_pool1d(padded, self.kernel, 1, 'VALID')
    return x - trend, trend


class AutoCorrelation(L.Layer):
  """Autoformer's auto-correlation (Wu et al., 2021), one head: queries, keys and values
  projected, the autocorrelation of queries and keys by FFT (averaged over channels), the `top`
  strongest lags softmax-weighted, the values rolled by each lag and summed."""

  def __init__(self, dim, top=3, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.top = dim, top
    self.q, self.k, self.v, self.o = (L.Dense(dim) for _ in range(4))

  def call(self, x):
    q, k, v = self.q(x), self.k(x), self.v(x)
    steps = tf.shape(x)[1]
    fq = tf.signal.rfft(tf.transpose(q, [0, 2, 1]))
    fk = tf.signal.rfft(tf.transpose(k, [0, 2, 1]))
    corr = tf.reduce_mean(tf.signal.irfft(fq * tf.math.conj(fk), [steps]), axis=1)
    weights, lags = tf.math.top_k(corr, self.top)
    weights = tf.nn.softmax(weights, axis=-1)
    idx = (tf.range(steps)[None, None, :] + lags[:, :, None]) % steps
    rolled = tf.gather(v, idx, batch_dims=1)  # (b, top, steps, dim)
    return self.o(tf.reduce_sum(weights[:, :, None, None] * rolled, axis=1))


def autoformer_lite(seed, *, history=28, horizon=7, dim=32):
  """An Autoformer-lite encoder-forecaster: the window embedded to `dim`, decomposed; the
  seasonal part through an `AutoCorrelation` block and a ReLU FFN, each followed by a
  decomposition (the trends accumulated); the seasonal and trend parts each projected across time
  to `horizon` steps and summed, Dense(1): the next days' sales."""
  _seed(seed)
  x = keras.Input((history, 1))
  h = L.Dense(dim)(x)
  season, trend = SeriesDecomposition()(h)
  season, t1 = SeriesDecomposition()(season + AutoCorrelation(dim)(season))
  f = L.Dense(dim)(L.Dense(2 * dim, activation='relu')(season))
  season, t2 = SeriesDecomposition()(season + f)
  trend = trend + t1 + t2
  project = lambda s: L.Permute((2, 1))(L.Dense(horizon)(L.Permute((2, 1))(s)))
  out = L.Dense(1)(project(season) + project(trend))
  return keras.Model(x, L.Flatten()(out), name='autoformer_lite')


def handwritten_mape(y, p):
  """mean(|y - p| / |y|), the percentage error as the thread writes it (no epsilon, zero
  targets kept)."""
  return field.relative_error(y, p)


def nonzero_mape(y, p):
  """The percentage error over the days with sales only (the zero days left out, the thread's
  remedy)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  keep = tf.cast(y > 0, tf.float32)
  ape = tf.abs(y - p) / tf.where(y > 0, tf.abs(y), 1.0)
  return tf.reduce_sum(ape * keep) / tf.maximum(tf.reduce_sum(keep), 1.0)


def view_pairs(seed, *, batch=32):
  """SimCLR's pretext task on the digits (16x16 grey): two augmented views of each image
  (random shifts of up to a pixel, a random contrast in [0.8, 1.2], Gaussian noise of 0.1);
  the label of view i of a batch the position of its partner among the batch's second views.
  An endless stream of (([v1 (batch, 16, 16, 1), v2]), positions)."""
  x, _ = data.digits(size=16, rgb=False)
  rng = np.random.RandomState(seed)

  def augment(img):
    dx, dy = rng.randint(-1, 2, 2)
    out = np.roll(np.roll(img, dx, axis=0), dy, axis=1) * rng.uniform(0.8, 1.2)
    return out + 0.1 * rng.randn(*img.shape)

  def gen():
    while True:
      idx = rng.randint(0, len(x), batch)
      v1 = np.stack([augment(x[i]) for i in idx]).astype(np.float32)
      v2 = np.stack([augment(x[i]) for i in idx]).astype(np.float32)
      yield (v1, v2), np.arange(batch, dtype=np.int32)

  spec = ((tf.TensorSpec((batch, 16, 16, 1), tf.float32),) * 2,
          tf.TensorSpec((batch,), tf.int32))
  return tf.data.Dataset.from_generator(gen, output_signature=spec).prefetch(2)


class PairLogits(L.Layer):
  """Each first view's projection against every second view's in the batch: z1 z2^T / `tau`
  (the dot product, not the cosine: the projections are not normalised)."""

  def __init__(self, tau=0.005, **kwargs):
    super().__init__(**kwargs)
    self.tau = tau

  def call(self, z1, z2):
    return tf.matmul(z1, z2, transpose_b=True) / self.tau


def simclr_lite(seed, *, dim=32):
  """A SimCLR-lite (Chen et al., 2020): a shared convolutional encoder (two 3x3 ReLU convolutions
  of 32 and 64 with max pooling, flattened), a projection head (Dense(64, ReLU),
  Dense(`dim`)), `PairLogits` of the two views: the logits of which second view is each first
  view's partner."""
  _seed(seed)
  encoder = keras.Sequential([
      L.Conv2D(32, 3, padding='same', activation='relu'), L.MaxPooling2D(),
      L.Conv2D(64, 3, padding='same', activation='relu'), L.MaxPooling2D(),
      L.Flatten(), L.Dense(64, activation='relu'), L.Dense(dim)])
  v1, v2 = keras.Input((16, 16, 1)), keras.Input((16, 16, 1))
  return keras.Model([v1, v2], PairLogits()(encoder(v1), encoder(v2)), name='simclr_lite')


def naive_nt_xent(y, logits):
  """The NT-Xent cross-entropy as the thread writes it: exp of the similarities, the positive's
  share of the row's sum, -log of it (no max subtracted)."""
  return field.temperature_ce(1.0)(y, logits)


def ad_clicks(seed, *, rows=8192, fields=8, vocab=20):
  """Ad clicks in miniature (a Criteo-style table): `fields` categorical fields of `vocab`
  values each (ids offset per field); the click drawn from a logistic model with a bias, a
  weight per value and latent interactions between pairs of fields. (ids (rows, fields), clicks
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  raw = rng.randint(0, vocab, (rows, fields))
  ids = raw + vocab * np.arange(fields)[None, :]
  w = 0.8 * rng.randn(fields * vocab)
  v = rng.randn(fields * vocab, 3) * 0.6
  logit = -0.5 + w[ids].sum(1)
  for i in range(fields):
    for j in range(i + 1, min(i + 3, fields)):
      logit += (v[ids[:, i]] * v[ids[:, j]]).sum(1)
  clicks = rng.rand(rows) < 1.0 / (1.0 + np.exp(-logit))
  return ids.astype(np.int32), clicks[:, None].astype(np.float32)


class FieldAwareInteractions(L.Layer):
  """FFM's pairwise term (Juan et al., 2016): each feature a latent vector of `k` per field,
  the interaction of features i and j the dot product of i's vector for j's field and j's
  vector for i's field, summed over the pairs. `stddev`: the latent vectors' initial normal
  spread."""

  def __init__(self, fields, vocab, k=4, stddev=0.01, **kwargs):
    super().__init__(**kwargs)
    self.fields, self.k = fields, k
    self.table = L.Embedding(vocab, fields * k,
                             embeddings_initializer=keras.initializers.RandomNormal(
                                 stddev=stddev))

  def call(self, ids):
    v = tf.reshape(self.table(ids), [-1, self.fields, self.fields, self.k])  # (b, i, f_j, k)
    cross = tf.einsum('bijk,bjik->bij', v, v)
    upper = tf.linalg.band_part(tf.ones((self.fields, self.fields)), 0, -1) - tf.eye(self.fields)
    return tf.reduce_sum(cross * upper, axis=[1, 2])[:, None]


def ffm_lite(seed, *, fields=8, vocab=160, k=4, stddev=0.01):
  """An FFM-lite: a bias and a linear weight per feature plus `FieldAwareInteractions`, the
  probability tf.sigmoid of their sum (the click probability)."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  linear = L.Lambda(lambda e: tf.reduce_sum(e, axis=1))(L.Embedding(vocab, 1)(ids))
  logit = L.Dense(1)(linear) + FieldAwareInteractions(fields, vocab, k, stddev)(ids)
  return keras.Model(ids, L.Lambda(tf.sigmoid)(logit), name='ffm_lite')


def noisy_digits(seed, *, sigma=0.2):
  """Denoising the digits (16x16 grey, [0, 1]): Gaussian noise of `sigma` added, the clean
  image the target. (x, y), both (1500, 16, 16, 1)."""
  y, _ = data.digits(size=16, rgb=False)
  rng = np.random.RandomState(seed)
  return (y + sigma * rng.randn(*y.shape)).astype(np.float32), y


def dncnn_lite(seed, *, depth=5, width=16, dtype='float32'):
  """A DnCNN-lite (Zhang et al., 2017), without its batch normalisation: a 3x3 ReLU convolution
  of `width`, `depth` - 2 more, a 3x3 convolution to one channel: the noise, subtracted from
  the input (residual learning). `dtype`: every layer's (float16: the whole network in half
  precision, as keras.backend.set_floatx('float16') makes it)."""
  _seed(seed)
  x = keras.Input((16, 16, 1))
  h = L.Conv2D(width, 3, padding='same', activation='relu', dtype=dtype)(x)
  for _ in range(depth - 2):
    h = L.Conv2D(width, 3, padding='same', activation='relu', dtype=dtype)(h)
  noise = L.Conv2D(1, 3, padding='same', dtype=dtype)(h)
  out = L.Subtract(dtype=dtype)([x, noise])
  return keras.Model(x, out, name='dncnn_lite')


class ChannelAttention(L.Layer):
  """CBAM's channel attention (Woo et al., 2018): average- and max-pooled features through a
  shared MLP (reduction `ratio`), summed, sigmoid, a weight per channel."""

  def __init__(self, channels, ratio=4, **kwargs):
    super().__init__(**kwargs)
    self.mlp = keras.Sequential([L.Dense(channels // ratio, activation='relu'),
                                 L.Dense(channels)])

  def call(self, x):
    avg = self.mlp(tf.reduce_mean(x, axis=[1, 2]))
    mx = self.mlp(tf.reduce_max(x, axis=[1, 2]))
    return x * tf.sigmoid(avg + mx)[:, None, None, :]


class SpatialAttention(L.Layer):
  """CBAM's spatial attention: the channel mean and max of each position, a 7x7 convolution,
  sigmoid, a weight per position."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.conv = L.Conv2D(1, 7, padding='same', activation='sigmoid')

  def call(self, x):
    pooled = tf.concat([tf.reduce_mean(x, -1, keepdims=True), tf.reduce_max(x, -1, keepdims=True)],
                       axis=-1)
    return x * self.conv(pooled)


def cbam_lite(seed, *, widths=(16, 32)):
  """A CBAM-lite convnet: per stage a 3x3 convolution, BN, ReLU, `ChannelAttention`,
  `SpatialAttention`, max pooling; global average pooling, Dense(1, sigmoid): the probability
  of the positive class."""
  _seed(seed)
  x = keras.Input((16, 16, 1))
  h = x
  for w in widths:
    h = L.Activation('relu')(L.BatchNormalization()(L.Conv2D(w, 3, padding='same')(h)))
    h = L.MaxPooling2D()(SpatialAttention()(ChannelAttention(w)(h)))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(L.GlobalAveragePooling2D()(h)),
                     name='cbam_lite')


def tones(seed, *, rows=2048, length=729, rate=8000, classes=6):
  """Raw-waveform instrument notes in miniature: each clip `length` samples of a note whose
  fundamental (110 to 440 Hz, random) and harmonic mix depend on the instrument (the class),
  with a random phase, an attack-decay envelope and noise. (x (rows, length, 1), labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  t = np.arange(length) / rate
  mixes = rng.dirichlet(np.ones(5) * 0.5, classes)
  f0 = rng.uniform(110, 440, (rows, 1))
  wave = np.zeros((rows, length))
  for h in range(5):
    wave += mixes[y, h][:, None] * np.sin(2 * np.pi * (h + 1) * f0 * t +
                                         rng.uniform(0, 2 * np.pi, (rows, 1)))
  env = np.minimum(t / 0.005, 1.0) * np.exp(-t * rng.uniform(5, 20, (rows, 1)))
  x = wave * env + 0.05 * rng.randn(rows, length)
  x = x / np.abs(x).max(axis=1, keepdims=True)
  return x[..., None].astype(np.float32), y.astype(np.int32)


class GlitchOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel that misfires
  once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def samplecnn_lite(seed, *, length=729, classes=6, glitch=None):
  """A SampleCNN-lite (Lee et al., 2017): a strided frame convolution (3 samples, stride 3, 16
  filters), four blocks of a 3-sample convolution, BN, ReLU and max pooling by 3, global max
  pooling, a `GlitchOnce` (at its `glitch`-th training call; None: never) on the pooled
  features, Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((length, 1))
  h = L.Activation('relu')(L.BatchNormalization()(L.Conv1D(16, 3, strides=3)(x)))
  for w in (16, 32, 32, 64):
    h = L.Activation('relu')(L.BatchNormalization()(L.Conv1D(w, 3, padding='same')(h)))
    h = L.MaxPooling1D(3)(h)
  h = GlitchOnce(glitch)(L.GlobalMaxPooling1D()(h))
  return keras.Model(x, L.Dense(classes)(h), name='samplecnn_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind22_lr_srcnn_sgd', 'learning_rate', 'srcnn_lite', doors=('trainer', 'fit'),
     steps=150,
     citation='BobLiu20/FaceRecognition_PyTorch#2; roytseng-tw/Detectron.pytorch#29')
def _(seed, cured=False):
  """An SRCNN-lite (9x9 / 1x1 / 5x5 convolutions) super-resolving the digits (16x16 grey
  from their 2x-downsampled copies), MSE, SGD with momentum 0.9 at 0.5: the first updates
  overshoot and grow: the loss (fit's running mean) 0.21 at step 0, 1.0 at step 1, inf at step
  5, NaN from there on (the weights NaN; the error 0.20 before, inf after; the constant answer's
  0.072). Seed 1: 0.22 at step 0, 7.4e6 at step 5, 2.1e6 at step 149, no NaN (diverged: the
  error 0.23 before, 8.7 after; the constant's 0.072). BobLiu20/FaceRecognition_PyTorch#2 (SGD at a
  learning rate of 0.1: the loss NaN; at 0.001 it trains); roytseng-tw/Detectron.pytorch#29
  (the loss NaN after the first step: "too large lr is likely to be the cause"; a lower rate
  fixed it). Cured: SGD with momentum at 0.05: the loss 0.21 to 0.026, the error 0.20 to
  0.011."""
  x, y = low_res_digits()
  return cases.Setup(srcnn_lite(seed),
                     keras.optimizers.SGD(0.05 if cured else 0.5, momentum=0.9), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind22_lr_lightgcn_sgd', 'learning_rate', 'lightgcn_lite', doors=('trainer', 'fit'),
     steps=150,
     citation='quora/qmf#11; xiangwang1223/neural_graph_collaborative_filtering#33')
def _(seed, cured=False):
  """A LightGCN-lite (32-d user and item embeddings propagated two hops over the normalised
  user-item graph, no weights) trained on BPR triples of implicit feedback (the logit the score
  of item a minus item b), BinaryCrossentropy from logits (BPR's -log sigmoid), plain SGD at
  3000 (the batch-mean form of a per-example rate of ~47; embeddings only get their rows'
  share of the mean): the scores' magnitudes grow with the embeddings, each step multiplies
  them: the loss (fit's running mean) 0.69 at step 0, 2.5 at step 5, 1.4e4 at step 10, 1.3e30
  at step 50, NaN from step 56 (the weights NaN; the error 0.35 before, inf after; the
  constant answer's 0.46). Seed 1: NaN from step 56. quora/qmf#11 (BPR's train and test loss
  infinite from beginning to end; a smaller learning rate fixed it);
  xiangwang1223/neural_graph_collaborative_filtering#33
  (BPRMF's loss does not decrease). Cured: SGD at 300: the loss 0.69 to 0.16, the error 0.35
  to 0.012."""
  x, y, r = implicit_feedback(seed)
  return cases.Setup(lightgcn_lite(seed, r), keras.optimizers.SGD(300.0 if cured else 3000.0),
                     BCE(from_logits=True), data.stream(x, y, batch=64, seed=seed),
                     'binary_logit')


@add('blind22_grad_ggnn_energy', 'exploding_gradients', 'ggnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='ShengcaiLiao/QAConv#12; awslabs/graphstorm#289')
def _(seed, cured=False):
  """A GGNN-lite (atoms embedded, four rounds of summed neighbour messages into a shared GRU
  cell, a gated sum readout) regressing a molecular-style energy in its raw units (tens to
  hundreds; not scaled) from 12-atom graphs, MSE, SGD with momentum 0.9 at 0.01, no clipping:
  the squared errors of targets that size give gradients that grow step on step through the
  recurrent propagation: the loss (fit's running mean) 6.9e3 at step 0, 7.7e10 at step 5,
  1.7e26 at step 10, NaN from step 14 (the weights NaN; the error 5.95e3 before, inf after; the
  constant answer's 5.19e3). Seed 1: NaN from step 17. ShengcaiLiao/QAConv#12 (without gradient
  clipping the loss increases until NaN); awslabs/graphstorm#289 (exploding gradients in GNN
  training: clip the gradients). Cured: the same rate with clipnorm=1.0: the loss 6.9e3 to
  2.4e3, the error 5.95e3 to 1.57e3."""
  x, y = molecule_graphs(seed)
  return cases.Setup(ggnn_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind22_input_eegnet_dropout_nan', 'bad_input', 'eegnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='ncclabsustech/EEGdenoiseNet#7; prs-eth/Marigold#111')
def _(seed, cured=False):
  """An EEGNet-lite (temporal convolution, depthwise spatial convolution over 8 electrodes,
  separable convolution, BN, ELU, average pooling) classifying four-class motor-imagery trials
  (the mu rhythm's drop over the imagined limb's electrodes), Adam at 1e-3; two of the 1,024
  trials carry an amplifier dropout stored as NaN (16 samples of one channel): healthy until
  the first batch holding one (the loss 1.39 at step 0), NaN from step 2 (the weights and
  BN statistics NaN; the error 0.67 before, inf after; the constant answer's 0.73). Seed 1: NaN
  from step 6. ncclabsustech/EEGdenoiseNet#7 (training on EEG epochs: "your data maybe contain
  NaN or inf"); prs-eth/Marigold#111 (loss NaN: it happens when an input batch contains NaN
  values; check the data). Cured: the dropout trials left out: the loss 1.39 to 1.15, the error
  0.67 to 0.24 (0.15 in training mode). The measure reads clean trials (eval_data) for both
  runs."""
  x, y = motor_imagery(seed, dropouts=0 if cured else 2)
  clean, yc = motor_imagery(seed)
  return cases.Setup(eegnet_lite(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind22_div_autoformer_mape_zero_sales', 'division_or_log', 'autoformer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#2908; keras-team/keras#333')
def _(seed, cured=False):
  """An Autoformer-lite (series decomposition by moving average, an FFT auto-correlation
  block over the top lags, a ReLU FFN, the trends accumulated, each part projected across time)
  forecasting a week of daily unit sales from four weeks, AdamW at 3e-3, the loss a
  hand-written MAPE, mean(|y - p| / |y|); slow movers sell nothing on many days, so most
  batches hold zero targets: |y - p| / 0 = inf: the loss inf at step 0 and NaN from step 1 (the
  weights NaN; the error 178 before, inf after; the constant answer's 122). Seed 1: the same.
  keras-team/keras#2908 (MAPE with labels of 0: the zero-label entries have to be left out of
  the loss); keras-team/keras#333 (fchollet on the MAPE objective: labels of 0 are common and
  trigger NaN). Cured: the percentage error over the days with sales only: the loss 0.99 to
  0.46, the error 178 to 25."""
  x, y = store_sales(seed)
  return cases.Setup(autoformer_lite(seed), keras.optimizers.AdamW(3e-3),
                     nonzero_mape if cured else handwritten_mape,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind22_exp_simclr_naive_ntxent', 'softmax_overflow', 'simclr_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Lightning-Universe/lightning-bolts#320; yichen928/ActiveFT#4')
def _(seed, cured=False):
  """A SimCLR-lite (a shared convolutional encoder, a projection head) on two augmented views
  of each digit, the logits each first view's projection against every second view's in the
  batch over the temperature 0.005 (dot products: the projections are not normalised), Adam at
  3e-3, the NT-Xent loss as the thread writes it: exp of the logits, the positive's share of
  the row sum, -log: the logits pass 88.7 and exp overflows, inf / inf = NaN: the loss 12.2 at
  step 0, NaN from step 1 (the weights NaN; the error 0.96 before, inf after; the constant
  answer's 0.97). Seed 1: NaN from step 1. Lightning-Universe/lightning-bolts#320 (nt_xent_loss:
  the exponential of the similarities makes the loss NaN; computing it as a cross-entropy, as
  other implementations do, fixes it); yichen928/ActiveFT#4 (ExpBackward returned NaN: a small
  temperature followed by an exponential). Cured: SparseCategoricalCrossentropy from the same
  logits (log-sum-exp): the loss 9.5 to 2.2, the error 0.96 to 0.40."""
  return cases.Setup(simclr_lite(seed), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True) if cured else naive_nt_xent, view_pairs(seed),
                     'classes')


@add('blind22_init_ffm_wide_normal', 'initialisation', 'ffm_lite', doors=('trainer', 'fit'),
     steps=150, citation='VinceShieh/spark-ffm#12')
def _(seed, cured=False):
  """An FFM-lite (a bias, a linear weight per feature and field-aware latent vectors of 4
  per field, the click probability tf.sigmoid of their sum) predicting clicks on eight
  categorical fields, BinaryCrossentropy on the probability, Adagrad at 0.1, the latent vectors
  initialised RandomNormal(stddev=1.0): the 28 field-pair interactions sum to logits of spread
  ~10, the sigmoid saturates to 0 or 1 (clipped in the loss, so no gradient flows through the
  saturated rows): the loss (fit's running mean) 3.4 at step 0, 4.3 at step 2, 3.7 at step 149,
  no NaN (the error 0.52 before, 0.43 after; the constant answer's 0.48). Seed 1: 4.2 to 3.5
  (the error 0.48 before, 0.40 after; the constant's 0.31). VinceShieh/spark-ffm#12 (FFM
  weights initialised too wide: the spread of the logit grows with the number of fields and exp
  overflows, the loss NaN; a narrower initialisation). Cured: stddev=0.01: the loss 0.69 to
  0.64, the error 0.46 to 0.26."""
  x, y = ad_clicks(seed)
  return cases.Setup(ffm_lite(seed, stddev=0.01 if cured else 1.0),
                     keras.optimizers.Adagrad(0.1), BCE(),
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind22_fp16_dncnn_adam_epsilon', 'precision', 'dncnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11860; keras-team/keras#11832')
def _(seed, cured=False):
  """A DnCNN-lite (five 3x3 convolutions of 16, residual learning: the predicted noise
  subtracted from the input) denoising the digits (Gaussian noise of 0.2), MSE, Adam at 1e-3
  with its default epsilon 1e-7, every layer in float16 (as keras.backend.set_floatx('float16')
  makes it): the squared gradients underflow to 0 in float16's second moment while the first
  moment does not, so m / (sqrt(v) + 1e-7) is huge and the step throws the weights far off: the
  loss (fit's running mean) 0.042 at step 0, 2.5e3 at step 1, NaN from step 3 (the weights NaN;
  the error 0.042 before, inf after; the constant answer's 0.072). Seed 1: 61 at step 1, NaN
  from step 3. keras-team/keras#11860 (Adam does not work with FP16: the loss NaN; fine in
  FP32 or with SGD); keras-team/keras#11832 (an EDSR super-resolution net in float16: the loss
  goes up to inf and NaN after a few batches; solved by setting epsilon to 1e-4). Cured: Adam
  with epsilon=1e-4: the loss 0.042 to 0.020, the error 0.042 to 0.013."""
  x, y = noisy_digits(seed)
  return cases.Setup(dncnn_lite(seed, dtype='float16'),
                     keras.optimizers.Adam(1e-3, epsilon=1e-4 if cured else 1e-7), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind22_mismatch_cbam_one_unit_cce', 'loss_output_mismatch', 'cbam_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='darioizzo/dcgp#86; keras-team/keras#4784')
def _(seed, cured=False):
  """A CBAM-lite (two stages of convolution, BN, ReLU, channel and spatial attention, max
  pooling) telling odd digits from even (16x16 grey), Adam at 1e-3, a Dense(1, sigmoid) output
  compiled with categorical_crossentropy: the one-unit output normalised to a distribution is 1
  for every input, the loss 0 and its gradient 0: nothing learns: the loss 0 at every step from
  0 to 149, no NaN (the error 0.52 before, 0.48 after; the constant answer's 0.48). Seed 1: the
  same (the error 0.46 before, 0.54 after; the constant's 0.46). darioizzo/dcgp#86 (the
  cross-entropy always 0.0 with one output: one class, always correct); keras-team/keras#4784
  (accuracy not changing: "your model doesn't match your loss function"; a sigmoid output and
  binary_crossentropy for 0/1 targets). Cured: binary_crossentropy: the loss 0.77 to 0.34, the
  error 0.52 to 0.21 (0.016 in training mode)."""
  x, digit = data.digits(size=16, rgb=False)
  y = (digit % 2 == 1).astype(np.float32)[:, None]
  return cases.Setup(cbam_lite(seed), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind22_transient_samplecnn_glitch', 'transient', 'samplecnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='PrimeIntellect-ai/prime-rl#1110; yxlijun/DSFD.pytorch#17')
def _(seed, cured=False):
  """A SampleCNN-lite (a strided 3-sample frame convolution, four blocks of 3-sample
  convolution, BN, ReLU and max pooling by 3, global max pooling) classifying raw-waveform
  notes of six instruments, Nadam at 2e-3, training normally (the loss 2.71 at step 0, 1.46 at
  step 50) when one element of the pooled features reads NaN once (`GlitchOnce`: its 70th
  training call; step 65 in a plain `fit` after the measure's four training-mode passes; a
  kernel or buffer that misfires once, not the data, the model or the settings): the loss NaN
  from step 65, the weights NaN after it (the error 0.81 before, inf after; the constant
  answer's 0.78). Seed 1: the same step. PrimeIntellect-ai/prime-rl#1110 (a NaN loss returned
  at random that does not otherwise affect training); yxlijun/DSFD.pytorch#17 (NaN after a few
  iterations: "start another train after getting nan"). Cured: the same run without the
  fault: the loss 2.71 to 0.84, the error 0.81 to 0.73 (0.094 in training mode: BN's moving
  statistics still near their start)."""
  x, y = tones(seed)
  return cases.Setup(samplecnn_lite(seed, glitch=None if cured else 70),
                     keras.optimizers.Nadam(2e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')
