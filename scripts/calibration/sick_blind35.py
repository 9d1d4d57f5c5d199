"""A thirty-fifth blind set of sick scenarios (the 'blind35' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind30.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an industrial or applied architecture no other registry entry uses (a CNN-RUL-lite, a
DeepAnT-lite, a TD3-actor-lite, a Conv-TasNet-lite, a TS-TCC-lite, a Demucs-lite, a
Telemanom-lite, a BST-lite, an AttentiveFP-lite and a PhysNet-lite). Each builder takes
`cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick run).
Each was checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom
(seeds 0 and 1), the cured twin passes runner's "did it train" measure in the same number of
steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND35 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND35.add` with split='blind35'."""
  return BLIND35.add(name, expected, arch, split='blind35', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def telemetry(seed, *, rows=1024, window=120, channels=4):
  """Spacecraft-style telemetry in miniature: `channels` scaled sensor channels (a slow drift,
  two periodic modes, commands switching on and off, noise); the label: channel 0 at the next
  step (the forecast Telemanom thresholds). (x (rows, window, channels), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  t = np.arange(window + 1)[None, :, None]
  phase = rng.uniform(0, 2 * np.pi, (rows, 1, channels))
  freq = rng.uniform(0.05, 0.3, (rows, 1, channels))
  drift = np.cumsum(0.05 * rng.normal(size=(rows, window + 1, 1)), axis=1)
  cmd = (rng.rand(rows, window + 1, 1) < 0.05).cumsum(1) % 2
  s = np.sin(freq * t + phase) + 0.5 * np.sin(2.3 * freq * t) + drift + 0.8 * cmd
  s = s + 0.1 * rng.normal(size=s.shape)
  return s[:, :-1].astype(np.float32), s[:, -1, :1].astype(np.float32)


def telemanom_lite(seed, *, window=120, channels=4, activation='tanh'):
  """A Telemanom-lite (Hundman et al., 2018, NASA's LSTM telemetry anomaly detector): two
  stacked LSTMs of 64 (the first returning sequences; `activation` their cell activation),
  Dense(1): the next value of the channel, whose errors are thresholded into anomalies."""
  _seed(seed)
  x = keras.Input((window, channels))
  h = L.LSTM(64, activation=activation, return_sequences=True)(x)
  h = L.LSTM(64, activation=activation)(h)
  return keras.Model(x, L.Dense(1)(h), name='telemanom_lite')


def with_gaps(x, seed, *, fraction=0.01):
  """`x` with telemetry dropouts: a `fraction` of the rows each with a run of 5 to 20 NaN
  readings on one channel (a downlink gap written into the CSV as NaN)."""
  rng = np.random.RandomState(seed + 1)
  x = x.copy()
  for i in rng.choice(len(x), int(fraction * len(x)), replace=False):
    start, n = rng.randint(0, x.shape[1] - 20), rng.randint(5, 21)
    x[i, start:start + n, rng.randint(x.shape[2])] = np.nan
  return x


def forward_fill(x):
  """The threads' cure: each NaN reading replaced by the last valid one (0 at a row's start)."""
  x = x.copy()
  for t in range(x.shape[1]):
    prev = x[:, t - 1] if t else np.zeros_like(x[:, 0])
    x[:, t] = np.where(np.isnan(x[:, t]), prev, x[:, t])
  return x


def turbofan(seed, *, rows=2048, window=30, sensors=14):
  """C-MAPSS-style turbofan windows: `sensors` standardised sensor traces drifting with the
  engine's wear (each its own sign and curvature) plus noise; the label: the remaining useful
  life in cycles, capped at 125 as the RUL papers do (unscaled: 0 to 125). (x (rows, window,
  sensors), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  life = rng.randint(150, 350, rows)
  rul = rng.randint(0, 200, rows)
  t = (life - rul)[:, None] - np.arange(window)[None, ::-1]
  wear = np.clip(t / life[:, None], 0, 1)[..., None]
  gain = rng.uniform(0.5, 2.0, sensors) * rng.choice([-1, 1], sensors)
  x = gain * wear ** rng.uniform(1.5, 3.0, sensors) * 3 + 0.3 * rng.normal(size=(rows, window,
                                                                               sensors))
  return x.astype(np.float32), np.minimum(rul, 125)[:, None].astype(np.float32)


def cnn_rul_lite(seed, *, window=30, sensors=14):
  """A CNN-RUL-lite (Li, Ding and Sun, 2018, a deep CNN for remaining-useful-life estimation):
  four convolutions along time of 10 filters, kernel 10 (tanh), a convolution of 1 filter,
  kernel 3 (tanh), flattened, dropout 0.5, Dense(100, tanh), Dense(1): the RUL."""
  _seed(seed)
  x = keras.Input((window, sensors))
  h = x
  for _ in range(4):
    h = L.Conv1D(10, 10, padding='same', activation='tanh')(h)
  h = L.Conv1D(1, 3, padding='same', activation='tanh')(h)
  h = L.Dense(100, activation='tanh')(L.Dropout(0.5)(L.Flatten()(h)))
  return keras.Model(x, L.Dense(1)(h), name='cnn_rul_lite')


def machine_series(seed, *, rows=2048, window=45):
  """A machine-temperature-style univariate series (daily cycle, load steps, noise),
  standardised; the label: the next value (DeepAnT's forecast, whose error is the anomaly
  score). (x (rows, window, 1), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  t = np.arange(window + 1)[None, :] + rng.randint(0, 1000, (rows, 1))
  load = np.repeat(rng.normal(size=(rows, (window + 1) // 8 + 1)), 8, axis=1)[:, :window + 1]
  s = np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 7) + 0.5 * load
  s = s + 0.1 * rng.normal(size=s.shape)
  return s[:, :-1, None].astype(np.float32), s[:, -1:].astype(np.float32)


def deepant_lite(seed, *, window=45):
  """A DeepAnT-lite (Munir et al., 2019, a CNN time-series forecaster for anomaly detection):
  two blocks of Conv1D(32, kernel 3, ReLU) and max pooling 2, flattened, Dense(40, ReLU),
  Dense(1): the next value."""
  _seed(seed)
  x = keras.Input((window, 1))
  h = L.MaxPooling1D()(L.Conv1D(32, 3, activation='relu')(x))
  h = L.MaxPooling1D()(L.Conv1D(32, 3, activation='relu')(h))
  h = L.Dense(40, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(1)(h), name='deepant_lite')


def expert_demos(seed, *, rows=4096, state=17, action=6):
  """Behaviour-cloning demonstrations of a HalfCheetah-sized task: standardised states and an
  expert's actions (a fixed two-layer tanh policy of the state), in [-1, 1]. (states, actions)."""
  rng = np.random.RandomState(seed)
  s = rng.normal(size=(rows, state))
  w1 = rng.normal(size=(state, 32)) / np.sqrt(state)
  w2 = rng.normal(size=(32, action)) * 1.5 / np.sqrt(32)
  a = np.tanh(np.tanh(s @ w1) @ w2)
  return s.astype(np.float32), a.astype(np.float32)


def td3_actor_lite(seed, *, state=17, action=6, init='glorot_uniform'):
  """A TD3-actor-lite (Fujimoto et al., 2018, the deterministic policy of TD3): Dense(256,
  ReLU), Dense(256, ReLU), Dense(`action`, tanh); every kernel initialised with `init`."""
  _seed(seed)
  x = keras.Input((state,))
  h = L.Dense(256, activation='relu', kernel_initializer=init)(x)
  h = L.Dense(256, activation='relu', kernel_initializer=init)(h)
  out = L.Dense(action, activation='tanh', kernel_initializer=init)(h)
  return keras.Model(x, out, name='td3_actor_lite')


def speech_mixtures(seed, *, rows=1024, length=1024, silent=0.1):
  """Speech-enhancement pairs in miniature: a 'voiced' clean signal (harmonics of a random
  pitch under a syllable envelope, peak about 0.3) plus white noise (SNR 0 to 10 dB); a fraction
  `silent` of the clean segments are pauses (all zeros: the noise alone), as cut from real
  recordings. (noisy (rows, length, 1), clean (rows, length, 1))."""
  rng = np.random.RandomState(seed)
  t = np.arange(length)[None, :] / 8000.0
  f0 = rng.uniform(100, 250, (rows, 1))
  clean = sum(np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 6.3, (rows, 1))) / k
              for k in range(1, 5))
  env = np.sin(np.pi * np.clip((np.arange(length)[None, :] - rng.randint(0, 300, (rows, 1)))
                               / rng.randint(500, 900, (rows, 1)), 0, 1))
  clean = 0.15 * clean * env
  clean[rng.rand(rows) < silent] = 0.0
  noise = rng.normal(size=(rows, length)) * 0.15 * 10 ** (-rng.uniform(0, 10, (rows, 1)) / 20)
  return ((clean + noise)[..., None].astype(np.float32), clean[..., None].astype(np.float32))


def conv_tasnet_lite(seed, *, filters=64, kernel=16, blocks=4, hidden=64):
  """A Conv-TasNet-lite (Luo and Mesgarani, 2019), one source: a learned encoder (Conv1D of
  `filters`, kernel `kernel`, stride kernel / 2, ReLU), a temporal convolutional separator
  (layer norm, a 1x1 bottleneck, `blocks` residual blocks of 1x1 convolution, PReLU, layer
  norm, dilated depthwise convolution (dilation 1, 2, 4, 8), PReLU, 1x1 back), a sigmoid mask
  on the encoding, and a transposed-convolution decoder back to the waveform."""
  _seed(seed)
  x = keras.Input((None, 1))
  enc = L.Conv1D(filters, kernel, strides=kernel // 2, padding='same', activation='relu')(x)
  h = L.Conv1D(hidden, 1)(L.LayerNormalization()(enc))
  for b in range(blocks):
    r = L.PReLU(shared_axes=[1])(L.Conv1D(hidden, 1)(h))
    r = L.LayerNormalization()(r)
    r = L.DepthwiseConv1D(3, dilation_rate=2 ** b, padding='same')(r)
    r = L.PReLU(shared_axes=[1])(r)
    h = L.Add()([h, L.Conv1D(hidden, 1)(r)])
  mask = L.Conv1D(filters, 1, activation='sigmoid')(h)
  out = L.Conv1DTranspose(1, kernel, strides=kernel // 2, padding='same')(
      L.Multiply()([enc, mask]))
  return keras.Model(x, out, name='conv_tasnet_lite')


def si_snr_loss(eps=0.0):
  """The negative scale-invariant SNR of Conv-TasNet (zero-mean signals, the estimate projected
  on the target), written as the threads' code: with `eps` 0 a silent target is 0 / 0 in the
  projection and log10(0 / x) in the ratio."""

  def loss(y, p):
    y, p = tf.cast(y, tf.float32)[..., 0], tf.cast(p, tf.float32)[..., 0]
    y = y - tf.reduce_mean(y, -1, keepdims=True)
    p = p - tf.reduce_mean(p, -1, keepdims=True)
    dot = tf.reduce_sum(y * p, -1, keepdims=True)
    target = dot * y / (tf.reduce_sum(y * y, -1, keepdims=True) + eps)
    noise = p - target
    ratio = tf.reduce_sum(target ** 2, -1) / (tf.reduce_sum(noise ** 2, -1) + eps)
    return -tf.reduce_mean(10.0 * tf.math.log(ratio + eps) / np.log(10.0))

  return loss


def sensor_views(seed, *, rows=2048, length=128, channels=3, batch=32):
  """Two augmented views of each window of a machine-vibration record (three accelerometer
  axes: a few bearing harmonics of a random shaft speed, an impulse train of a random period,
  noise), as TS-TCC makes them: a weak view (scaled by 0.8 to 1.2 per channel, jittered) and a
  strong view (cut into 4 to 8 segments, permuted, jittered). The label of each pair: its
  place in the batch (the contrastive task: find each window's other view among the batch's).
  A `tf.data` stream of ((weak, strong), place) batches."""
  rng = np.random.RandomState(seed)
  t = np.arange(length)[None, :, None] / 128.0
  speed = rng.uniform(2, 12, (rows, 1, 1))
  x = sum(rng.uniform(0.2, 1, (rows, 1, channels)) * np.sin(2 * np.pi * k * speed * t +
          rng.uniform(0, 6.3, (rows, 1, channels))) for k in (1, 2, 3))
  period = rng.randint(8, 40, rows)
  for i in range(rows):
    x[i, ::period[i]] += rng.uniform(1, 3, channels)
  weak = x * rng.uniform(0.8, 1.2, (rows, 1, channels)) + 0.1 * rng.normal(size=x.shape)
  strong = np.empty_like(x)
  for i in range(rows):
    parts = np.array_split(x[i], rng.randint(4, 9))
    strong[i] = np.concatenate([parts[j] for j in rng.permutation(len(parts))])
  strong += 0.3 * rng.normal(size=x.shape)
  ds = data.stream((weak.astype(np.float32), strong.astype(np.float32)),
                   np.zeros(rows, np.int32), batch=batch, seed=seed)
  return ds.map(lambda v, _: (v, tf.range(batch)))


class Similarity(L.Layer):
  """The contrastive logits: every weak view's projection against every strong view's, the dot
  product over the temperature (no L2 normalisation)."""

  def __init__(self, temperature, **kwargs):
    super().__init__(**kwargs)
    self.temperature = temperature

  def call(self, inputs):
    a, b = inputs
    return tf.matmul(a, b, transpose_b=True) / self.temperature


def ts_tcc_lite(seed, *, length=128, channels=3, temperature=0.07):
  """A TS-TCC-lite (Eldele et al., 2021, time-series representation learning by temporal and
  contextual contrasting; the contextual-contrast part): a shared encoder of three blocks of
  Conv1D (32, 64, 64 filters, kernel 8), batch normalisation, ReLU and max pooling 2, global
  average pooling, a projection head Dense(64, ReLU), Dense(32); the logits: the two views'
  projections' similarities over `temperature` (batch x batch)."""
  _seed(seed)
  enc_in = keras.Input((length, channels))
  h = enc_in
  for n in (32, 64, 64):
    h = L.MaxPooling1D()(L.ReLU()(L.BatchNormalization()(L.Conv1D(n, 8, padding='same')(h))))
  h = L.GlobalAveragePooling1D()(h)
  encoder = keras.Model(enc_in, L.Dense(32)(L.Dense(64, activation='relu')(h)))
  a, b = keras.Input((length, channels)), keras.Input((length, channels))
  return keras.Model([a, b], Similarity(temperature)([encoder(a), encoder(b)]),
                     name='ts_tcc_lite')


def contrastive_ce(stable):
  """The NT-Xent-style cross-entropy of each weak view against its own strong view. Naive (the
  threads' loss): exp(logits) / sum(exp(logits)) without subtracting the row's max, then the
  log: a logit above 88.7 is inf and inf / inf NaN. Stable: the softmax cross-entropy from the
  logits (the max subtracted)."""

  def loss(y, logits):
    y, logits = tf.cast(tf.reshape(y, [-1]), tf.int32), tf.cast(logits, tf.float32)
    if stable:
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    e = tf.exp(logits)
    p = tf.gather(e / tf.reduce_sum(e, -1, keepdims=True), y, batch_dims=1)
    return -tf.reduce_mean(tf.math.log(p))

  return loss


def demucs_lite(seed, *, channels=(16, 32, 64), dtype='float32'):
  """A Demucs-lite (Defossez et al., 2020, the real-time speech denoiser): the noisy waveform
  divided by its standard deviation, an encoder of three blocks (Conv1D kernel 8 stride 4,
  ReLU, a 1x1 convolution to twice the channels, GLU), an LSTM of 64 over the bottleneck, a
  decoder of three mirrored blocks (1x1 convolution, GLU, transposed convolution kernel 8
  stride 4, ReLU but the last) with U-Net skips, times the standard deviation back. Every
  layer in `dtype`."""
  _seed(seed)
  glu = lambda t: t[..., :t.shape[-1] // 2] * tf.sigmoid(t[..., t.shape[-1] // 2:])
  x = keras.Input((None, 1))
  std = L.Lambda(lambda t: tf.math.reduce_std(t, axis=1, keepdims=True) + 1e-3,
                 dtype=dtype)(x)
  h = L.Lambda(lambda a: a[0] / a[1], dtype=dtype)([x, std])
  skips = []
  for c in channels:
    h = L.Conv1D(c, 8, strides=4, padding='same', activation='relu', dtype=dtype)(h)
    h = L.Lambda(glu, dtype=dtype)(L.Conv1D(2 * c, 1, dtype=dtype)(h))
    skips.append(h)
  h = L.LSTM(channels[-1], return_sequences=True, dtype=dtype)(h)
  for i, c in reversed(list(enumerate(channels))):
    h = L.Add(dtype=dtype)([h, skips[i]])
    h = L.Lambda(glu, dtype=dtype)(L.Conv1D(2 * c, 1, dtype=dtype)(h))
    out = channels[i - 1] if i else 1
    h = L.Conv1DTranspose(out, 8, strides=4, padding='same', dtype=dtype,
                          activation='relu' if i else None)(h)
  out = L.Lambda(lambda a: a[0] * a[1], dtype=dtype)([h, std])
  return keras.Model(x, out, name='demucs_lite')


def molecules(seed, *, rows=2048, atoms=16, types=6, tasks=6):
  """Tox21-style molecular graphs in miniature: 8 to `atoms` atoms of `types` elements (C most
  often), a random spanning tree plus a few ring closures as bonds; atom features: the element
  (one-hot) and the degree / 4; the labels: `tasks` assays, each active (1) when its motif (a
  bond between two given elements, or a given element with three or more bonds) is present:
  multi-label (a molecule active in none, one or several assays), the assays `tasks` of the
  motifs active in 4 to 20 per cent of the molecules (Tox21's sparse actives), at random.
  ((features (rows, atoms, types + 1), adjacency (rows, atoms, atoms)), labels (rows,
  tasks))."""
  rng = np.random.RandomState(seed)
  feats = np.zeros((rows, atoms, types + 1), np.float32)
  adj = np.zeros((rows, atoms, atoms), np.float32)
  motifs = sorted({(k, p, q) for k in (0, 1) for p in range(types) for q in range(types)
                   if k == 0 and p <= q or k == 1 and q == 0})
  hits = np.zeros((rows, len(motifs)), np.float32)
  for i in range(rows):
    n = rng.randint(8, atoms + 1)
    el = rng.choice(types, n, p=[0.45, 0.15, 0.15, 0.1, 0.1, 0.05])
    for a in range(1, n):
      b = rng.randint(a)
      adj[i, a, b] = adj[i, b, a] = 1
    for _ in range(rng.randint(0, 3)):
      a, b = rng.choice(n, 2, replace=False)
      adj[i, a, b] = adj[i, b, a] = 1
    deg = adj[i].sum(1)
    feats[i, np.arange(n), el] = 1
    feats[i, :n, types] = deg[:n] / 4
    for k, (kind, p, q) in enumerate(motifs):
      if kind:
        hits[i, k] = np.any((el == p) & (deg[:n] >= 3))
      else:
        hits[i, k] = np.sum(adj[i, :n, :n] * (el == p)[:, None] * (el == q)[None, :]) > 0
  rate = hits.mean(0)
  keep = [k for k in rng.permutation(len(motifs)) if 0.04 <= rate[k] <= 0.2][:tasks]
  lab = hits[:, keep]
  return (feats, adj), lab


class GraphAttention(L.Layer):
  """AttentiveFP's atom embedding step: each atom attends over its bonded neighbours (score:
  LeakyReLU of a Dense of the pair, softmax over the neighbours, non-bonds masked), the
  context is the weighted sum of the neighbours' Dense-transformed states (ELU), and a GRU
  update (one gate pair of Dense layers) mixes it into the atom's state."""

  def build(self, shapes):
    d = shapes[0][-1]
    self.score_a, self.score_b = L.Dense(1), L.Dense(1, use_bias=False)
    self.msg = L.Dense(d)
    self.z, self.r, self.c = L.Dense(d, activation='sigmoid'), L.Dense(
        d, activation='sigmoid'), L.Dense(d, activation='tanh')

  def call(self, inputs):
    h, adj = inputs
    scores = tf.nn.leaky_relu(self.score_a(h) + tf.transpose(self.score_b(h), [0, 2, 1]))
    scores = scores + (adj - 1.0) * 1e9
    att = tf.nn.softmax(scores, -1) * tf.cast(tf.reduce_sum(adj, -1, keepdims=True) > 0,
                                              h.dtype)
    ctx = tf.nn.elu(tf.matmul(att, self.msg(h)))
    both = tf.concat([h, ctx], -1)
    z, r = self.z(both), self.r(both)
    cand = self.c(tf.concat([r * h, ctx], -1))
    return (1 - z) * h + z * cand


def attentivefp_lite(seed, *, atoms=16, feats=7, tasks=6, dim=64, head='sigmoid'):
  """An AttentiveFP-lite (Xiong et al., 2020, graph attention for molecular property
  prediction): an atom Dense(`dim`, LeakyReLU), two graph-attention layers with GRU updates, a
  molecule readout (the atoms' sum, attention pooling of the atoms against it, a GRU-style
  update), Dense(`tasks`, `head`): one output per assay."""
  _seed(seed)
  x, adj = keras.Input((atoms, feats)), keras.Input((atoms, atoms))
  h = L.Dense(dim, activation='leaky_relu')(x)
  for _ in range(2):
    h = GraphAttention()([h, adj])
  mol = L.Lambda(lambda t: tf.reduce_sum(t, 1))(h)
  w = L.Softmax(axis=1)(L.Dense(1)(L.Concatenate()([h, L.RepeatVector(atoms)(mol)])))
  ctx = L.Lambda(lambda a: tf.reduce_sum(a[0] * a[1], 1))([w, h])
  mol = L.Dense(dim, activation='relu')(L.Concatenate()([mol, ctx]))
  return keras.Model([x, adj], L.Dense(tasks, activation=head)(mol), name='attentivefp_lite')


def behaviour_clicks(seed, *, rows=4096, history=10, items=500, categories=20):
  """Taobao-style click logs in miniature: each user's last `history` clicked item ids (drawn
  mostly from two favourite categories; an item's category is its id modulo `categories`), a
  candidate item and its price bucket; the label: clicked (1) when the candidate is from a
  favourite category and the price suits the user (with 5 per cent of the labels flipped).
  ((history ids, candidate id, price bucket), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  fav = rng.randint(0, categories, (rows, 2))
  pick = np.where(rng.rand(rows, history) < 0.8, fav[np.arange(rows)[:, None],
                                                       rng.randint(0, 2, (rows, history))],
                  rng.randint(0, categories, (rows, history)))
  hist = pick + categories * rng.randint(0, items // categories, (rows, history))
  cat = np.where(rng.rand(rows) < 0.5, fav[:, 0], rng.randint(0, categories, rows))
  cand = cat + categories * rng.randint(0, items // categories, rows)
  price, budget = rng.randint(0, 10, rows), rng.randint(0, 10, rows)
  click = ((cat == fav[:, 0]) | (cat == fav[:, 1])) & (np.abs(price - budget) < 6)
  click = np.where(rng.rand(rows) < 0.05, ~click, click)
  x = (hist.astype(np.int32), cand[:, None].astype(np.int32), price[:, None].astype(np.int32))
  return x, click[:, None].astype(np.float32)


class InfOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one activation of the transformer's output reads
  +inf at the `at`-th training call (a flipped exponent bit in the accelerator's memory)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=3, value=np.inf, **kwargs)


def bst_lite(seed, *, history=10, items=500, dim=32, fault=None):
  """A BST-lite (Chen et al., 2019, Alibaba's Behavior Sequence Transformer for click-through
  prediction): item embeddings (`dim`) plus learned position embeddings for the behaviour
  sequence and the candidate, one transformer block (two heads, LeakyReLU feed-forward,
  residuals, layer norm; the fault layer on its output), flattened and concatenated with the
  price embedding, an MLP of 64 and 32 (LeakyReLU), Dense(1, sigmoid): the click
  probability."""
  _seed(seed)
  hist, cand = keras.Input((history,), dtype='int32'), keras.Input((1,), dtype='int32')
  price = keras.Input((1,), dtype='int32')
  emb = L.Embedding(items, dim)
  seq = L.Concatenate(axis=1)([emb(hist), emb(cand)])
  pos = L.Embedding(history + 1, dim)(tf.range(history + 1)[None])
  seq = L.Add()([seq, pos])
  att = L.MultiHeadAttention(2, dim // 2)(seq, seq)
  seq = L.LayerNormalization()(L.Add()([seq, att]))
  ff = L.Dense(dim)(L.Dense(2 * dim, activation='leaky_relu')(seq))
  seq = L.LayerNormalization()(L.Add()([seq, ff]))
  seq = InfOnce(fault)(seq)
  h = L.Concatenate()([L.Flatten()(seq), L.Flatten()(L.Embedding(10, 8)(price))])
  h = L.Dense(32, activation='leaky_relu')(L.Dense(64, activation='leaky_relu')(h))
  return keras.Model([hist, cand, price], L.Dense(1, activation='sigmoid')(h), name='bst_lite')



def morse_clusters(seed, *, rows=2048, atoms=10, species=3):
  """Energies and forces of small clusters under a Morse pair potential (a DFT stand-in):
  6 to `atoms` atoms of `species` kinds (the well depth set by the pair's kinds) at random
  positions at least 0.9 apart, padded to `atoms` with zero coordinates and kind 0 (no atom),
  as a batch of molecules of unequal size is; energies and forces divided by the energies'
  standard deviation, the mean energy removed. ((kinds (rows, atoms), positions (rows, atoms,
  3)), labels (rows, 1 + 3 x atoms): the energy, then the forces)."""
  rng = np.random.RandomState(seed)
  depth = rng.uniform(0.5, 1.5, (species + 1, species + 1))
  depth = (depth + depth.T) / 2
  kinds = np.zeros((rows, atoms), np.int32)
  pos = np.zeros((rows, atoms, 3))
  energy, forces = np.zeros(rows), np.zeros((rows, atoms, 3))
  for i in range(rows):
    n = rng.randint(6, atoms + 1)
    pts = []
    while len(pts) < n:
      p = rng.uniform(0, 2.5, 3)
      if all(np.linalg.norm(p - q) > 0.9 for q in pts):
        pts.append(p)
    pos[i, :n], kinds[i, :n] = pts, rng.randint(1, species + 1, n)
    diff = pos[i, :n, None] - pos[i, None, :n]
    r = np.linalg.norm(diff, axis=-1) + np.eye(n)
    d = depth[kinds[i, :n, None], kinds[i, None, :n]]
    e = np.exp(-1.5 * (r - 1.2))
    pair = d * ((1 - e) ** 2 - 1) * (1 - np.eye(n))
    energy[i] = pair.sum() / 2
    de_dr = d * 2 * 1.5 * (1 - e) * e * (1 - np.eye(n))
    forces[i, :n] = -np.sum((de_dr / r)[..., None] * diff, axis=1)
  scale = energy.std()
  lab = np.concatenate([((energy - energy.mean()) / scale)[:, None],
                        (forces / scale).reshape(rows, -1)], 1)
  return (kinds, pos.astype(np.float32)), lab.astype(np.float32)


class EnergyAndForces(L.Layer):
  """PhysNet's core with the forces: the pair distances of all atoms (sqrt of the squared
  differences), radial basis functions exp(-10 (d - mu_k)^2) of them under a cosine cutoff,
  masked to the real neighbour pairs, `blocks` interaction blocks (each atom's message: the
  sum over its neighbours of Dense(rbf) x Dense(state), a residual ReLU update), atomic
  energies Dense(1) summed; the forces minus the energy's gradient with respect to the
  positions. `masked_sqrt` (the cure): the square root taken only on real pairs (1 elsewhere):
  otherwise the padding and self pairs are sqrt(0), whose gradient is inf, and the mask's 0 x
  inf is NaN in the forces."""

  def __init__(self, species=3, dim=64, basis=16, blocks=2, masked_sqrt=False, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.basis, self.blocks, self.masked_sqrt = dim, basis, blocks, masked_sqrt
    self.embed = L.Embedding(species + 1, dim)
    self.filters = [L.Dense(dim, use_bias=False) for _ in range(blocks)]
    self.states = [L.Dense(dim) for _ in range(blocks)]
    self.updates = [L.Dense(dim, activation='relu') for _ in range(blocks)]
    self.atomic = L.Dense(1)

  def call(self, inputs):
    kinds, pos = inputs
    pos = tf.convert_to_tensor(pos, tf.float32)
    real = tf.cast(kinds > 0, tf.float32)
    n = tf.shape(pos)[1]
    pairs = real[:, :, None] * real[:, None, :] * (1.0 - tf.eye(n))[None]
    with tf.GradientTape() as tape:
      tape.watch(pos)
      sq = tf.reduce_sum(tf.square(pos[:, :, None] - pos[:, None, :]), -1)
      if self.masked_sqrt:
        sq = tf.where(pairs > 0, sq, tf.ones_like(sq))
      d = tf.sqrt(sq)
      mu = tf.linspace(0.0, 4.0, self.basis)
      cutoff = 0.5 * (tf.cos(np.pi * tf.minimum(d, 4.0) / 4.0) + 1.0)
      rbf = tf.exp(-10.0 * tf.square(d[..., None] - mu)) * (cutoff * pairs)[..., None]
      h = self.embed(kinds)
      for f, s, u in zip(self.filters, self.states, self.updates):
        msg = tf.reduce_sum(f(rbf) * s(h)[:, None, :, :], axis=2)
        h = h + u(tf.concat([h, msg], -1))
      energy = tf.reduce_sum(self.atomic(h)[..., 0] * real, -1, keepdims=True)
    forces = -tape.gradient(energy, pos)
    return tf.concat([energy, tf.reshape(forces, (-1, 3 * pos.shape[1]))], -1)


def physnet_lite(seed, *, atoms=10, masked_sqrt=False):
  """A PhysNet-lite (Unke and Meuwly, 2019, a message-passing energy-and-forces surrogate for
  molecular dynamics): atom-kind embeddings of 64, two interaction blocks over 16 radial basis
  functions; the output: the energy and the 3 x `atoms` forces, concatenated."""
  _seed(seed)
  kinds, pos = keras.Input((atoms,), dtype='int32'), keras.Input((atoms, 3))
  out = EnergyAndForces(masked_sqrt=masked_sqrt)([kinds, pos])
  return keras.Model([kinds, pos], out, name='physnet_lite')


# --- The scenarios. ---------------------------------------------------------------------------


def _first_batches(x, y, batch=32, n=4):
  """The first `n` batches of clean (x, y): the "did it train" measure's batches where the
  training stream is corrupt."""
  return tf.data.Dataset.from_tensor_slices((x[:n * batch], y[:n * batch])).batch(batch)


@add('blind35_explode_cnn_rul_sgd_cycles', 'exploding_gradients', 'cnn_rul_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#4563; keras-team/keras#5127')
def _(seed, cured=False):
  """A CNN-RUL-lite (four tanh convolutions along time, a one-filter convolution, Dense(100,
  tanh)) regressing the remaining useful life of C-MAPSS-style turbofan windows (30 cycles x
  14 standardised sensors), the target in cycles (capped at 125, as the RUL papers give it),
  SGD at 0.01 with Nesterov momentum 0.9 and no clipping: the squared errors of a hundred
  cycles give gradients in the thousands, each step overshoots further: the loss 9.2e3 at step
  0, 1.7e6 at step 5, 5.3e9 at step 10, NaN from step 48, the weights NaN (the error 7484
  before, inf after; the constant answer's 2161). Seed 1: 1.2e4, 2.1e6, 1.0e8, 2.7e27 at step
  50, NaN from step 73 (10181 before; the constant's 1493). keras-team/keras#4563 (an LSTM
  regression on very high targets with SGD, momentum 0.9, Nesterov: losses very high or NaN;
  long sequences overflow while the error is large); keras-team/keras#5127 (the loss is NaN
  without clipnorm: the gradients get very large; clipnorm fixes it). Cured: the gradients
  clipped to a global norm of 1 at the same rate: the loss 9.2e3 to 1.2e3, the error 7484 to
  738."""
  x, y = turbofan(seed)
  return cases.Setup(cnn_rul_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True,
                                          global_clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind35_lr_deepant_rmsprop_high', 'learning_rate', 'deepant_lite', doors=('trainer', 'fit'),
     steps=150, citation='guillaumegenthial/sequence_tagging#47; pytorch/examples#247')
def _(seed, cured=False):
  """A DeepAnT-lite (two Conv1D-ReLU-pooling blocks, Dense(40, ReLU)) forecasting the next
  value of a standardised machine-temperature series from 45 steps, RMSprop at 0.1: the first
  steps throw the weights far off (the loss 1.05 at step 0, 1.8e5 at step 1, 4.1e5 at step 2),
  the ReLUs die and the net settles near a constant: 17.4 at step 10, 1.6 at step 50, 2.05 at
  step 149, no NaN, no training (the error 1.00 before, 1.13 after; the constant answer's
  0.83). Seed 1: 0.64, 1.4e5, 2.3e5, 7.3, 0.47, 0.69 (0.78 before, 0.76 after; the constant's
  0.76). guillaumegenthial/sequence_tagging#47 (at 0.01 or 0.1 the loss falls then rises, then
  NaN; at 0.001 no problem); pytorch/examples#247 (the time-sequence example's loss jumps up
  and stays high: the learning rate is way too high, 0.001 fixes it). Cured: RMSprop at 1e-3:
  the loss 1.05 to 0.26, the error 1.00 to 0.16."""
  x, y = machine_series(seed)
  return cases.Setup(deepant_lite(seed), keras.optimizers.RMSprop(1e-3 if cured else 0.1), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind35_init_td3_actor_ones', 'initialisation', 'td3_actor_lite', doors=('trainer', 'fit'),
     steps=150,
     citation='llSourcell/tensorflow_neural_net_live_demo#2; BitTiger-MP/DS502-AI-Engineer#27')
def _(seed, cured=False):
  """A TD3-actor-lite (Dense 256, 256 ReLU, Dense(6, tanh)) behaviour-cloning an expert's
  actions from 17-dimensional states (HalfCheetah-sized), Adam at 3e-4 (TD3's rate), every
  kernel initialised to ones (kernel_initializer='ones'): every hidden unit computes the same
  sum and gets the same update (the layers act as one unit each), the sums of 17 and 256 ones
  saturate the tanh outputs: the loss 0.98 at step 0, 0.84 at step 5, 0.76 at step 50, 0.93 at
  step 149, no NaN, no training (the error 0.89 before, 0.89 after; the constant answer's
  0.40). Seed 1: 0.93, 0.93, 0.87, 0.84 (0.89 before, 0.89 after; the constant's 0.35).
  llSourcell/tensorflow_neural_net_live_demo#2 (if all weights are equal, all neurons in the
  layer act the same way); BitTiger-MP/DS502-AI-Engineer#27 (why weights must be initialised at
  random: with the same weights every hidden unit is the same). Cured: Glorot-uniform kernels:
  the loss 0.42 to 0.038, the error 0.43 to 0.031."""
  x, y = expert_demos(seed)
  return cases.Setup(td3_actor_lite(seed, init='glorot_uniform' if cured else 'ones'),
                     keras.optimizers.Adam(3e-4), 'mse', data.stream(x, y, batch=64, seed=seed),
                     'regression')


@add('blind35_log_conv_tasnet_si_snr_silent', 'division_or_log', 'conv_tasnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='csteinmetz1/auraloss#25; yxlu-0102/MP-SENet#33')
def _(seed, cured=False):
  """A Conv-TasNet-lite (a learned encoder, a four-block dilated temporal convolutional
  separator, a sigmoid mask, a transposed-convolution decoder) enhancing noisy 'voiced'
  segments (1024 samples at 8 kHz), trained on the negative SI-SNR written without epsilons,
  Adam at 1e-3; a tenth of the clean targets are pauses (all zeros): the projection is 0 / 0
  and the ratio's log log(0 / x): the loss NaN from step 0, the weights NaN (the error 0.0049
  before, inf after; the constant answer's 0.0050). Seed 1: the same (0.0050 before).
  csteinmetz1/auraloss#25 (the SI-SDR loss is NaN when the target is all zeros; fixed by an
  epsilon); yxlu-0102/MP-SENet#33 (silent audio in training gives a division by zero and a NaN
  loss). Cured: an epsilon of 1e-8 in both denominators and the log: the loss 32 (dB) at step
  0 to about -5 by step 50, the error 0.0049 to 0.0032."""
  x, y = speech_mixtures(seed)
  return cases.Setup(conv_tasnet_lite(seed), keras.optimizers.Adam(1e-3),
                     si_snr_loss(1e-8 if cured else 0.0), data.stream(x, y, batch=16, seed=seed),
                     'regression')


@add('blind35_exp_ts_tcc_naive_contrastive', 'softmax_overflow', 'ts_tcc_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='HobbitLong/SupContrast#104; tfzhou/ContrastiveSeg#20')
def _(seed, cured=False):
  """A TS-TCC-lite (a shared three-block Conv1D-BN-ReLU encoder and a projection head)
  learning machine-vibration representations by contrasting a weak and a strong view of each
  window against the batch's other windows, the logits the projections' dot products over a
  temperature of 0.07 (no L2 normalisation), the softmax written as exp(logits) / sum(exp):
  the largest logit is 289 at the start (232 at seed 1; the matching pairs' mean 145), exp
  overflows to inf and inf / inf is NaN: the loss NaN from step 0, the weights NaN (the error
  0.97 before, inf after; the constant answer's 0.97). Seed 1: the same (0.96 before).
  HobbitLong/SupContrast#104 (the contrastive loss returns NaN: unnormalised features at
  temperature 0.07 give logits in the thousands, exp and log of 0); tfzhou/ContrastiveSeg#20
  (the row's max is subtracted from the logits to avoid the softmax's overflow). Cured: the
  softmax cross-entropy from the logits (the max subtracted): the loss 29 to 0.29, the error
  0.97 to 0.34 (0.15 in training mode)."""
  return cases.Setup(ts_tcc_lite(seed), keras.optimizers.Adam(3e-4), contrastive_ce(cured),
                     sensor_views(seed), 'classes')


@add('blind35_fp16_demucs_float16_adam', 'precision', 'demucs_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11860; pytorch/pytorch#8860')
def _(seed, cured=False):
  """A Demucs-lite (a three-block strided-convolution GLU encoder, an LSTM bottleneck, a
  mirrored transposed-convolution decoder with U-Net skips) denoising 'voiced' segments with
  the L1 loss, every layer in float16 (weights and Adam's slots too), Adam at its default 1e-3:
  Adam's epsilon and the squares of small gradients underflow in half precision, the update
  m / (sqrt(v) + eps) blows up: the loss 0.047 at step 0, 0.077 at step 1, 365 at step 5, NaN
  from step 6, the weights NaN (the error 0.0056 before, inf after; the constant answer's
  0.0050). Seed 1: 0.047, 0.061, 0.107, NaN from step 5 (0.0056 before). keras-team/keras#11860
  (a model in FP16 with mse and Adam: the loss NaN; fine in FP32 or with another optimizer);
  pytorch/pytorch#8860 (NaN loss in half precision: Adam's epsilon too small for float16, 1e-4
  helps). Cured: the same net in float32: the loss 0.047 to 0.025, the error 0.0055 to
  0.0010."""
  x, y = speech_mixtures(seed, silent=0.0)
  return cases.Setup(demucs_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), 'mae', data.stream(x, y, batch=16, seed=seed),
                     'regression')


@add('blind35_input_telemanom_nan_gaps', 'bad_input', 'telemanom_lite', doors=('trainer', 'fit'),
     steps=150, citation='hfawaz/InceptionTime#50; unit8co/darts#1954')
def _(seed, cured=False):
  """A Telemanom-lite (two stacked LSTMs of 64, Dense(1)) forecasting the next value of a
  spacecraft-style telemetry channel from 120 steps of four scaled channels, Adam at 1e-3;
  one window in a hundred carries a downlink gap (5 to 20 readings of one channel NaN, as the
  CSV has them): the first batch holding one makes the loss and the gradients NaN: the loss
  1.38 at step 0, NaN from step 2, the weights NaN (the error on clean windows 1.37 before,
  inf after; the constant answer's 1.16). Seed 1: 0.81, NaN from step 1 (1.04 before; the
  constant's 0.88). hfawaz/InceptionTime#50 (missing values in some UCR series make every
  value in the model and its outputs NaN; zero imputation reproduces the results);
  unit8co/darts#1954 (broken sensors' NaN values induce NaN in the weights and forecasts: fill
  the missing values first). Cured: each gap forward-filled with the last valid reading: the
  loss 1.38 to 0.13, the error 1.37 to 0.13."""
  x, y = telemetry(seed)
  clean = _first_batches(x, y)
  x = with_gaps(x, seed)
  if cured:
    x = forward_fill(x)
  return cases.Setup(telemanom_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression', eval_data=clean)


@add('blind35_transient_bst_inf_once', 'transient', 'bst_lite', doors=('trainer', 'fit'),
     steps=150, citation='Wu0409/DuPL#12; commaai/research#24')
def _(seed, cured=False):
  """A BST-lite (item and position embeddings of a ten-click behaviour sequence and the
  candidate, one transformer block, an MLP of 64 and 32) predicting Taobao-style clicks, Adam
  at 1e-3, healthy but for one fault: at its 60th training call one activation of the
  transformer's output reads +inf (a flipped exponent bit): the loss of that step is NaN and
  so are the gradients and then the weights: the loss 0.94 at step 0, 0.66 at step 50, NaN
  from step 55 in plain fit (the measure's four training-mode calls and the trace come first),
  the weights NaN (the error 0.55 before, inf after; the constant answer's 0.44). Seed 1: 0.83,
  0.70, NaN from step 55 (0.43 before; the constant's 0.43). Wu0409/DuPL#12 (a NaN appears at
  random during training; reloaded from the checkpoint and continued, it does not recur:
  suspected GPU memory); commaai/research#24 (random NaN crashes; continuing from the
  checkpoint works). Cured: the same run without the fault: the loss 0.94 to 0.48, the error
  0.55 to 0.21."""
  x, y = behaviour_clicks(seed)
  return cases.Setup(bst_lite(seed, fault=None if cured else 60), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=64, seed=seed),
                     'binary_prob')


@add('blind35_mismatch_attentivefp_softmax_multilabel', 'loss_output_mismatch',
     'attentivefp_lite', doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#741; keras-team/keras#2166')
def _(seed, cured=False):
  """An AttentiveFP-lite (atom embeddings, two graph-attention layers with GRU updates, an
  attentive molecule readout) predicting six Tox21-style assays of small molecular graphs
  (multi-label: a molecule active in none, one or several; 10 to 20 per cent actives each),
  the head a softmax over the six with categorical cross-entropy, Adam at 1e-3: the softmax
  makes the assays compete for one unit of probability, so at most one can read active and
  the loss rewards pushing all the mass to one of the active ones: the loss 1.17 at step 0,
  1.55 at step 50, 3.71 at step 149, no NaN, no training (the error per assay 0.142 before,
  0.167 after; the constant answer's 0.142). Seed 1: 1.56, 1.5, 3.07 (0.167 before, 0.184
  after; the constant's 0.167). keras-team/keras#741 (a multi-label softmax classifier does not
  converge: use sigmoid outputs and binary cross-entropy); keras-team/keras#2166 (the loss for
  multi-label: binary_crossentropy for 0/1 labels, categorical_crossentropy for one-hot).
  Cured: a sigmoid head with binary cross-entropy: the loss 0.76 to 0.16, the error 0.47 to
  0.082."""
  x, y = molecules(seed)
  return cases.Setup(attentivefp_lite(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind35_sqrt_physnet_padded_forces', 'division_or_log', 'physnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='atomistic-machine-learning/schnetpack#6; deepmodeling/deepmd-kit#5119')
def _(seed, cured=False):
  """A PhysNet-lite (atom-kind embeddings, two interaction blocks over radial basis functions
  of the pair distances, atomic energies summed; the forces the energy's gradient with respect
  to the positions) trained on the energies and forces of Morse clusters of 6 to 10 atoms
  padded to 10 (the padding at the origin), Adam at 1e-3, the distances sqrt(sum of squared
  differences) over all pairs and only then masked to real neighbours: the self and padding
  pairs are sqrt(0), and training on forces differentiates through sqrt twice at 0: the loss
  0.073 at step 0, NaN from step 1, the weights NaN (the error 0.072 before, inf after; the
  constant answer's 0.067). Seed 1: 0.074, NaN from step 1 (0.073 before; the constant's
  0.069). atomistic-machine-learning/schnetpack#6 (force training fails on the 0-padded
  distances of molecules of unequal size: a zero division through the square root; a neighbour
  mask applied in the distance computation fixes it); deepmodeling/deepmd-kit#5119 (NaN
  gradients of pairwise distances for zero differences and padded entries, made stable). Cured:
  the square root taken only on real pairs: the loss 0.073 to 0.00087, the error 0.072 to
  0.00085."""
  x, y = morse_clusters(seed)
  return cases.Setup(physnet_lite(seed, masked_sqrt=cured), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')
