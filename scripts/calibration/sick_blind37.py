"""A thirty-seventh blind set of sick scenarios (the 'blind37' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind32.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a TD3 critic, a BST-lite click model, a
Behler-Parrinello atomic network, a DiffPool-lite molecule model, an MTAD-GAT-lite anomaly
detector, a Conv-TasNet-lite speech enhancer, a SCINet-lite load forecaster, a SAC actor cloned
from an expert, an MCDNN-lite character recogniser and an ESMM-lite click-and-purchase model).
Each builder takes `cured`: the same run with the thread's remedy (the registry calls
`build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the sick
run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it train"
measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import field

BLIND37 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND37.add` with split='blind37'."""
  return BLIND37.add(name, expected, arch, split='blind37', **fields)


def stream(x, y, *, batch, seed):
  """An endless stream of batches of (x, y), shuffled anew each epoch from `seed` (as
  data.stream)."""
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  ds = ds.shuffle(2048, seed=seed, reshuffle_each_iteration=True)
  return ds.batch(batch, drop_remainder=True).prefetch(2)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def critic_returns(seed, *, rows=4096, state=12, action=3):
  """A TD3 critic's regression set in miniature (a continuous-control task): states of `state`
  features, actions in [-1, 1]^`action`, the target Q(s, a) a state value around 40 (returns
  of an episode, as the environment gives them) minus a quadratic action cost around a
  state-dependent best action, plus noise. ((state, action), Q (rows, 1))."""
  rng = np.random.RandomState(seed)
  s = rng.randn(rows, state)
  a = rng.uniform(-1, 1, (rows, action))
  best = np.tanh(s @ (rng.randn(state, action) / np.sqrt(state)))
  v = rng.randn(state) / np.sqrt(state)
  q = 40 + 12 * np.tanh(s @ v) - 8 * np.sum(np.square(a - best), -1) + 0.5 * rng.randn(rows)
  return (s.astype(np.float32), a.astype(np.float32)), q[:, None].astype(np.float32)


def td3_critic_lite(seed, *, state=12, action=3):
  """A TD3 critic (Fujimoto et al., 2018): the state and the action joined, two Dense(256, ReLU),
  Dense(1): Q(s, a)."""
  _seed(seed)
  s = keras.Input((state,))
  a = keras.Input((action,))
  h = L.Dense(256, activation='relu')(L.Concatenate()([s, a]))
  h = L.Dense(256, activation='relu')(h)
  return keras.Model([s, a], L.Dense(1)(h), name='td3_critic_lite')


def click_sessions(seed, *, rows=4096, items=100, categories=10, history=8):
  """A click log in miniature (a Taobao-like behaviour sequence): each row the ids of the last
  `history` items a user viewed (id 0 kept for padding) and a candidate item; the click label 1
  when the candidate's category (id mod `categories`) is that of the most recent view (half the
  rows are drawn so). ((history ids (rows, history), candidate id (rows, 1)), click (rows, 1))."""
  rng = np.random.RandomState(seed)
  hist = rng.randint(1, items, (rows, history))
  last_cat = hist[:, -1] % categories
  click = rng.rand(rows) < 0.5
  other = (last_cat + rng.randint(1, categories, rows)) % categories
  cat = np.where(click, last_cat, other)
  cand = cat + categories * rng.randint(0, items // categories, rows)
  cand = np.where(cand == 0, categories, cand)
  y = (cand % categories == last_cat).astype(np.float32)[:, None]
  return (hist.astype(np.int32), cand[:, None].astype(np.int32)), y


def bst_lite(seed, *, items=100, history=8, dim=16):
  """A Behavior Sequence Transformer (Chen et al., 2019, Alibaba) in miniature: the item
  embeddings of the history and the candidate plus position embeddings, one transformer block
  (two-head self-attention, residual and LayerNorm, a feed-forward of 32), flattened, Dense(64,
  LeakyReLU), Dense(32, LeakyReLU), Dense(1, sigmoid): the click probability."""
  _seed(seed)
  h_ids = keras.Input((history,), dtype='int32')
  c_ids = keras.Input((1,), dtype='int32')
  emb = L.Embedding(items, dim)
  seq = L.Concatenate(axis=1)([emb(h_ids), emb(c_ids)])
  pos = L.Embedding(history + 1, dim)(tf.range(history + 1)[None])
  x = seq + pos
  x = L.LayerNormalization()(x + L.MultiHeadAttention(2, dim)(x, x))
  f = L.Dense(dim)(L.Dense(32, activation='relu')(x))
  x = L.LayerNormalization()(x + f)
  h = L.Dense(64, activation='leaky_relu')(L.Flatten()(x))
  h = L.Dense(32, activation='leaky_relu')(h)
  return keras.Model([h_ids, c_ids], L.Dense(1, activation='sigmoid')(h), name='bst_lite')


def atomic_environments(seed, *, rows=2048, atoms=8, features=10):
  """Atomic energies in miniature (a Behler-Parrinello training set): for each structure of
  `atoms` atoms the `features` radial symmetry functions of each atom's neighbourhood (sums of
  Gaussians of random neighbour distances, in [0, ~3]), the total energy the sum of a smooth
  atomic energy of each atom's descriptor, plus noise. (descriptors (rows, atoms, features),
  energy (rows, 1))."""
  rng = np.random.RandomState(seed)
  dist = rng.uniform(0.8, 4.0, (rows, atoms, 6))
  centres = np.linspace(1.0, 4.0, features)
  g = np.exp(-2.0 * np.square(dist[..., None] - centres)).sum(2)
  w1 = rng.randn(features, 8)
  w2 = rng.randn(8)
  e_atom = np.tanh((g - g.mean((0, 1))) @ w1) @ w2 / np.sqrt(8)
  e = e_atom.sum(1) + 0.05 * rng.randn(rows)
  return g.astype(np.float32), e[:, None].astype(np.float32)


class AtomSum(L.Layer):
  """The total of the atomic energies: the sum over atoms."""

  def call(self, x):
    return tf.reduce_sum(x, axis=1)


def bpnn_lite(seed, *, atoms=8, features=10, init='glorot_uniform'):
  """A Behler-Parrinello neural network potential (Behler & Parrinello, 2007) in miniature: one
  atomic network shared by every atom (two Dense(32, tanh), Dense(1)) on its symmetry functions,
  the energies summed over atoms. Every kernel initialised with `init`."""
  _seed(seed)
  g = keras.Input((atoms, features))
  h = L.Dense(32, activation='tanh', kernel_initializer=init)(g)
  h = L.Dense(32, activation='tanh', kernel_initializer=init)(h)
  e = L.Dense(1, kernel_initializer=init)(h)
  return keras.Model(g, AtomSum()(e), name='bpnn_lite')


def padded_graphs(seed, *, rows=2048, atoms=9, types=4):
  """Molecular graphs in miniature, padded to `atoms` (as a batch of unequal molecules is): 3 to
  `atoms` atoms of `types` elements (one-hot), a chain of bonds plus a few ring closures, the
  padding atoms all-zero with no bonds; the property a sum of per-element contributions
  weighted by each atom's degree, plus noise. ((features (rows, atoms, types), adjacency (rows,
  atoms, atoms)), property (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, atoms, types), np.float32)
  a = np.zeros((rows, atoms, atoms), np.float32)
  w = rng.uniform(-1, 1, types)
  y = np.zeros((rows, 1), np.float32)
  for i in range(rows):
    n = rng.randint(3, atoms + 1)
    t = rng.randint(0, types, n)
    x[i, np.arange(n), t] = 1
    for j in range(n - 1):
      a[i, j, j + 1] = a[i, j + 1, j] = 1
    for _ in range(rng.randint(0, 2)):
      j, k = rng.choice(n, 2, replace=False)
      a[i, j, k] = a[i, k, j] = 1
    deg = a[i, :n, :n].sum(1)
    y[i, 0] = np.sum(w[t] * deg) / 2 + 0.05 * rng.randn()
  return (x, a), y


class GraphConv(L.Layer):
  """A graph convolution D^-1/2 A D^-1/2 X W (Kipf & Welling). `guard`: as Kipf's code, self-loops
  added and the inverse square roots of zero degrees set to 0; without it, the threads' hand-
  written normalisation: deg ** -0.5 of the raw adjacency (a padding atom's degree 0 gives inf,
  and inf x 0 = NaN)."""

  def __init__(self, units, activation=None, guard=True, **kwargs):
    super().__init__(**kwargs)
    self.dense = L.Dense(units, activation=activation)
    self.guard = guard

  def call(self, inputs):
    x, a = inputs
    if self.guard:
      a = a + tf.eye(tf.shape(a)[-1])
    deg = tf.reduce_sum(a, axis=-1)
    d = tf.pow(deg, -0.5)
    if self.guard:
      d = tf.where(tf.math.is_inf(d), tf.zeros_like(d), d)
    a_hat = d[:, :, None] * a * d[:, None, :]
    return self.dense(tf.matmul(a_hat, x))


class DiffPool(L.Layer):
  """DiffPool's soft assignment (Ying et al., 2018): S = softmax(pool GNN) over `clusters`, the
  pooled features S^T Z."""

  def call(self, inputs):
    z, s = inputs
    return tf.matmul(tf.nn.softmax(s, axis=-1), z, transpose_a=True)


def diffpool_lite(seed, *, atoms=9, types=4, guard=True):
  """A DiffPool-lite molecule property model: two graph convolutions of 32 (tanh) embed the
  atoms, a third gives a soft assignment to 4 clusters, the pooled clusters flattened, Dense(32,
  tanh), Dense(1)."""
  _seed(seed)
  x = keras.Input((atoms, types))
  a = keras.Input((atoms, atoms))
  z = GraphConv(32, 'tanh', guard)([x, a])
  z = GraphConv(32, 'tanh', guard)([z, a])
  s = GraphConv(4, None, guard)([x, a])
  h = L.Flatten()(DiffPool()([z, s]))
  h = L.Dense(32, activation='tanh')(h)
  return keras.Model([x, a], L.Dense(1)(h), name='diffpool_lite')


def plant_sensor_windows(seed, *, rows=2048, steps=16, sensors=6):
  """Windows of a plant's sensors in miniature (an SMD-like multivariate series), left in their
  engineering units as the threads feed them: each sensor a level of 50 to 400 (pressures,
  temperatures, flows) with a slow oscillation of 3% and 1% noise; half the windows carry an
  anomaly, one sensor dropping to half its level for four steps (a stuck valve, a leak).
  (windows (rows, steps, sensors), anomaly (rows, 1))."""
  rng = np.random.RandomState(seed)
  level = rng.uniform(50, 400, sensors)
  t = np.arange(steps)
  phase = rng.uniform(0, 2 * np.pi, (rows, 1, sensors))
  x = level * (1 + 0.03 * np.sin(0.4 * t[None, :, None] + phase)
               + 0.01 * rng.randn(rows, steps, sensors))
  y = (rng.rand(rows) < 0.5).astype(np.float32)
  for i in np.nonzero(y)[0]:
    j = rng.randint(sensors)
    s = rng.randint(0, steps - 4)
    x[i, s:s + 4, j] *= 0.5
  return x.astype(np.float32), y[:, None]


class FeatureGAT(L.Layer):
  """MTAD-GAT's feature-oriented graph attention (Zhao et al., 2020): each sensor's window a node,
  e_ij = LeakyReLU(w . [v_i, v_j]), alpha = softmax_j(e), h_i = sigmoid(sum_j alpha_ij v_j).
  `stable`: tf.nn.softmax; without it, the hand-written exp(e) / sum(exp(e)) (no max subtracted)
  of the threads."""

  def __init__(self, stable=True, **kwargs):
    super().__init__(**kwargs)
    self.stable = stable
    self.score = L.Dense(1)

  def call(self, x):
    v = tf.transpose(tf.convert_to_tensor(x), [0, 2, 1])  # (batch, sensors, steps)
    k = tf.shape(v)[1]
    vi = tf.repeat(v[:, :, None, :], k, axis=2)
    vj = tf.repeat(v[:, None, :, :], k, axis=1)
    e = tf.nn.leaky_relu(tf.squeeze(self.score(tf.concat([vi, vj], -1)), -1), 0.2)
    if self.stable:
      alpha = tf.nn.softmax(e, axis=-1)
    else:
      ex = tf.exp(e)
      alpha = ex / tf.reduce_sum(ex, axis=-1, keepdims=True)
    return tf.transpose(tf.sigmoid(tf.matmul(alpha, v)), [0, 2, 1])


def mtad_gat_lite(seed, *, steps=16, sensors=6, stable=True):
  """An MTAD-GAT-lite anomaly detector: a Conv1D(32, 5, ReLU) over the window, the feature-
  oriented graph attention's output joined to it, a GRU of 32, Dense(1): the anomaly logit."""
  _seed(seed)
  x = keras.Input((steps, sensors))
  c = L.Conv1D(32, 5, padding='same', activation='relu')(x)
  g = FeatureGAT(stable)(x)
  h = L.GRU(32)(L.Concatenate()([c, g]))
  return keras.Model(x, L.Dense(1)(h), name='mtad_gat_lite')


def noisy_speech(seed, *, rows=1024, length=256, silent=0.15):
  """Speech enhancement in miniature: clean 'voiced' clips (two or three harmonics of a random
  pitch under a slow envelope, peak about 0.5) plus white noise at about 5 dB SNR; a fraction
  `silent` of the clips are digital silence (zeros in and out, the padding and pauses a real
  corpus has). (noisy (rows, length, 1), clean (rows, length, 1))."""
  rng = np.random.RandomState(seed)
  t = np.arange(length)
  f0 = rng.uniform(0.02, 0.08, (rows, 1))
  env = np.sin(np.pi * (t + rng.uniform(0, length, (rows, 1))) / length) ** 2
  clean = sum(rng.uniform(0.1, 0.25, (rows, 1)) * np.sin(2 * np.pi * k * f0 * t) for k in (1, 2, 3))
  clean = clean * env
  noisy = clean + 0.1 * rng.randn(rows, length)
  quiet = rng.rand(rows) < silent
  clean[quiet] = 0
  noisy[quiet] = 0
  return noisy[..., None].astype(np.float32), clean[..., None].astype(np.float32)


class GlobalLayerNorm(L.Layer):
  """Conv-TasNet's global layer norm (gLN) as its reference code writes it: the mean and variance
  over time and channels, (x - mean) / sqrt(var + 1e-8) * gamma + beta, in the layer's compute
  dtype (float16 under mixed precision, where 1e-8 rounds to 0: a silent clip is 0 / 0).
  `float32`: computed in float32 (as Keras runs its own normalisation layers)."""

  def __init__(self, float32=False, eps=1e-8, **kwargs):
    super().__init__(**kwargs)
    self.float32, self.eps = float32, eps

  def build(self, shape):
    self.gamma = self.add_weight(shape=(shape[-1],), initializer='ones', name='gamma')
    self.beta = self.add_weight(shape=(shape[-1],), initializer='zeros', name='beta')

  def call(self, x):
    dtype = x.dtype
    if self.float32:
      x = tf.cast(x, tf.float32)
    mean = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=[1, 2], keepdims=True)
    y = (x - mean) / tf.sqrt(var + tf.cast(self.eps, x.dtype))
    y = y * tf.cast(self.gamma, x.dtype) + tf.cast(self.beta, x.dtype)
    return tf.cast(y, dtype)


def conv_tasnet_lite(seed, *, length=256, float32_norm=False):
  """A Conv-TasNet-lite (Luo & Mesgarani, 2019) enhancer: a learned encoder (Conv1D(32, 16,
  stride 8, ReLU, no bias), gLN, a 1x1 bottleneck), two dilated temporal blocks (Conv1D(32, 3,
  dilation 1 and 2, PReLU), gLN, residual), a sigmoid mask on the encoding, a transposed-conv
  decoder back to the waveform (float32 output)."""
  _seed(seed)
  x = keras.Input((length, 1))
  enc = L.Conv1D(32, 16, strides=8, padding='same', use_bias=False, activation='relu')(x)
  h = L.Conv1D(32, 1)(GlobalLayerNorm(float32_norm)(enc))
  for d in (1, 2):
    b = L.PReLU(shared_axes=[1])(L.Conv1D(32, 3, dilation_rate=d, padding='same')(h))
    h = h + GlobalLayerNorm(float32_norm)(b)
  mask = L.Conv1D(32, 1, activation='sigmoid')(h)
  out = L.Conv1DTranspose(1, 16, strides=8, padding='same')(enc * mask)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='conv_tasnet_lite')


def building_load(seed, *, hours=6000, lookback=32, horizon=8, gaps=0.01, fill=False):
  """An office building's hourly electric load in miniature, standardised: a daily and a weekly
  cycle, a slow drift and noise; a fraction `gaps` of the meter readings missing (NaN, as a meter
  that drops out logs them), or with `fill` interpolated (`interpolate_gaps`). Windows of
  `lookback` hours and the next `horizon`. (windows (rows,
  lookback, 1), next hours (rows, horizon))."""
  rng = np.random.RandomState(seed)
  t = np.arange(hours)
  load = (np.sin(2 * np.pi * t / 24 - 1.5) + 0.4 * np.sin(2 * np.pi * t / 168)
          + 0.3 * np.sin(2 * np.pi * t / 2000 + rng.uniform(0, 6)) + 0.15 * rng.randn(hours))
  load = (load - load.mean()) / load.std()
  load[rng.rand(hours) < gaps] = np.nan
  if fill:
    load = interpolate_gaps(load)
  idx = np.arange(hours - lookback - horizon)
  x = np.stack([load[i:i + lookback] for i in idx])[..., None]
  y = np.stack([load[i + lookback:i + lookback + horizon] for i in idx])
  return x.astype(np.float32), y.astype(np.float32)


def interpolate_gaps(series):
  """The threads' fix: the missing readings filled by linear interpolation."""
  s = series.copy()
  bad = np.isnan(s)
  s[bad] = np.interp(np.nonzero(bad)[0], np.nonzero(~bad)[0], s[~bad])
  return s


class SCIBlock(L.Layer):
  """SCINet's sample-convolution-and-interaction block (Liu et al., 2022): the sequence split into
  its even and odd samples, each scaled by exp of a convolution of the other, then each updated
  by adding (subtracting) a convolution of the other; the two halves interleaved back."""

  def __init__(self, hidden=16, **kwargs):
    super().__init__(**kwargs)

    def module():
      return keras.Sequential([L.Conv1D(hidden, 3, padding='same', activation='tanh'),
                               L.Conv1D(1, 3, padding='same', activation='tanh')])

    self.phi, self.psi, self.rho, self.eta = module(), module(), module(), module()

  def call(self, x):
    even, odd = x[:, ::2], x[:, 1::2]
    even_s = even * tf.exp(self.phi(odd))
    odd_s = odd * tf.exp(self.psi(even))
    even_u = even_s + self.rho(odd_s)
    odd_u = odd_s - self.eta(even_s)
    return tf.reshape(tf.stack([even_u, odd_u], axis=2), tf.shape(x))


def scinet_lite(seed, *, lookback=32, horizon=8):
  """A SCINet-lite forecaster: two SCI blocks with a residual, flattened, Dense(horizon)."""
  _seed(seed)
  x = keras.Input((lookback, 1))
  h = x + SCIBlock()(x)
  h = h + SCIBlock()(h)
  return keras.Model(x, L.Dense(horizon)(L.Flatten()(h)), name='scinet_lite')


def expert_demonstrations(seed, *, rows=4096, state=10, action=3):
  """Behaviour cloning data in miniature (a robot arm's expert controller): states of `state`
  features, the expert's action in [-1, 1]^`action` a smooth nonlinear feedback law. (states,
  actions)."""
  rng = np.random.RandomState(seed)
  s = rng.randn(rows, state)
  w1 = rng.randn(state, 16) / np.sqrt(state)
  w2 = rng.randn(16, action) / 2
  a = np.tanh(np.tanh(s @ w1) @ w2)
  return s.astype(np.float32), a.astype(np.float32)


def sac_actor_lite(seed, *, state=10, action=3, fault_at=None):
  """A SAC actor's mean head (Haarnoja et al., 2018) cloned from demonstrations: Dense(256, ReLU),
  Dense(256, ReLU), Dense(`action`), tanh. `fault_at`: the first layer's activations read NaN
  in one element at that training call, once (a flipped bit in the buffer; field.OneOffFault)."""
  _seed(seed)
  s = keras.Input((state,))
  h = L.Dense(256, activation='relu')(s)
  h = field.OneOffFault(fault_at, index=7, value=np.nan)(h)
  h = L.Dense(256, activation='relu')(h)
  return keras.Model(s, L.Activation('tanh')(L.Dense(action)(h)), name='sac_actor_lite')


def glyphs(seed, *, rows=2048, size=16, classes=10):
  """Printed characters in miniature (an OCR set): `classes` random stroke glyphs of 10 x 10,
  each sample one of them shifted by up to 2 pixels on a 16 x 16 page, with ink-density
  variation and scanner noise, pixels in [0, 1]. (images (rows, size, size, 1), ids (rows,))."""
  rng = np.random.RandomState(12345)  # The font: the same glyphs for every seed.
  font = np.zeros((classes, 10, 10))
  for c in range(classes):
    for _ in range(3):
      if rng.rand() < 0.5:
        r = rng.randint(0, 10)
        a, b = sorted(rng.randint(0, 10, 2))
        font[c, r, a:b + 1] = 1
      else:
        col = rng.randint(0, 10)
        a, b = sorted(rng.randint(0, 10, 2))
        font[c, a:b + 1, col] = 1
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  x = np.zeros((rows, size, size))
  for i in range(rows):
    r, c = rng.randint(0, size - 9, 2)
    x[i, r:r + 10, c:c + 10] = font[y[i]] * rng.uniform(0.6, 1.0)
  x = np.clip(x + 0.15 * rng.randn(rows, size, size), 0, 1)
  return x[..., None].astype(np.float32), y.astype(np.int32)


def mcdnn_lite(seed, *, size=16, classes=10, output='softmax'):
  """A multi-column deep network (Ciresan, Meier & Schmidhuber, 2012) for characters in
  miniature: two columns (the page as scanned, and a 3x3-blurred copy), each Conv(16, 3, ReLU),
  max-pool, Conv(32, 3, ReLU), max-pool, Dense(64, ReLU), Dense(`classes`); the columns'
  outputs averaged, then `output` ('softmax', or None: logits)."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  outs = []
  for inp in (x, L.AveragePooling2D(3, strides=1, padding='same')(x)):
    h = L.MaxPooling2D()(L.Conv2D(16, 3, padding='same', activation='relu')(inp))
    h = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(h))
    h = L.Dense(64, activation='relu')(L.Flatten()(h))
    outs.append(L.Dense(classes)(h))
  out = L.Average()(outs)
  if output:
    out = L.Activation(output)(out)
  return keras.Model(x, out, name='mcdnn_lite')


def impressions(seed, *, rows=4096, users=50, items=80, dim_u=4, dim_i=4):
  """An e-commerce impression log in miniature (the ESMM setting): user and item ids, each with a
  latent taste; a click when the taste match plus noise clears a threshold, a purchase only
  after a click, when a second match clears another. ((user ids, item ids) (rows, 1) each,
  purchase (rows, 1)); about a third of the impressions end in a purchase."""
  rng = np.random.RandomState(seed)
  tu, ti = rng.randn(users, dim_u), rng.randn(items, dim_i)
  u = rng.randint(0, users, rows)
  i = rng.randint(0, items, rows)
  match = np.sum(tu[u] * ti[i], -1) / 2
  click = match + 0.15 * rng.randn(rows) > -0.3
  buy = click & (match + 0.15 * rng.randn(rows) > 0.3)
  return (u[:, None].astype(np.int32), i[:, None].astype(np.int32)), buy[:, None].astype(np.float32)


def esmm_lite(seed, *, users=50, items=80, dim=16, fault_at=None):
  """An Entire Space Multi-task Model (Ma et al., 2018, Alibaba) in miniature: shared user and
  item embeddings of 16 joined, a CTR tower and a CVR tower (Dense(64, ReLU), Dense(32, ReLU),
  Dense(1, sigmoid) each), the output pCTCVR = pCTR x pCVR (trained on purchases over the whole
  impression space). `fault_at`: at that training call the gradient flowing back into the
  joined embeddings reads NaN in one element, once (a backward kernel that misfires;
  field.OneOffFault)."""
  _seed(seed)
  u = keras.Input((1,), dtype='int32')
  i = keras.Input((1,), dtype='int32')
  e = L.Concatenate()([L.Flatten()(L.Embedding(users, dim)(u)),
                       L.Flatten()(L.Embedding(items, dim)(i))])
  e = field.OneOffFault(fault_at, index=3, value=np.nan, backward=True)(e)

  def tower():
    h = L.Dense(64, activation='relu')(e)
    h = L.Dense(32, activation='relu')(h)
    return L.Dense(1, activation='sigmoid')(h)

  return keras.Model([u, i], L.Multiply()([tower(), tower()]), name='esmm_lite')


# --- The scenarios. -----------------------------------------------------------------------------


@add('blind37_grad_td3_critic_sgd_no_clip', 'exploding_gradients', 'td3_critic_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='chauncygu/Multi-Agent-Constrained-Policy-Optimisation#5; danijar/dreamer#20')
def _(seed, cured=False):
  """A TD3 critic (the state and action joined, two Dense(256, ReLU), Dense(1)) regressed on
  returns around 40 (an episode's sum of rewards, as the threads' critics see them), SGD at 0.01
  with momentum 0.9 and no gradient clipping: the squared errors of the returns make gradients in
  the hundreds, the first updates throw the weights (the running-mean loss 762 at step 0, 645 at
  step 1, back up to 877 at step 10), and the critic ends at a near-constant answer: 253 at step
  149, no training (the error 789 before, 180 after; the constant answer's 178). Seed 1: 725,
  597, 603 at step 10, 228 (the error 665 before, 188 after; the constant's 181).
  chauncygu/Multi-Agent-Constrained-Policy-Optimisation#5 (the critic's gradient norm goes to
  infinity and the values turn NaN: clip the gradient norm); danijar/dreamer#20 (the value
  function suddenly explodes: gradient clipping is the simple solution). Cured: the same SGD with
  the gradient norm clipped at 1: the running-mean loss 762 to 204, the error 789 to 108."""
  x, y = critic_returns(seed)
  return cases.Setup(td3_critic_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', stream(x, y, batch=64, seed=seed), 'regression')


@add('blind37_lr_bst_adam_0p1', 'learning_rate', 'bst_lite', doors=('trainer', 'fit'),
     steps=150, citation='rajveermalviya/language-modeling#3; aws/sagemaker-python-sdk#265')
def _(seed, cured=False):
  """A Behavior Sequence Transformer-lite (item and position embeddings of a user's last eight views
  and a candidate, one transformer block, an MLP, a sigmoid click probability) on a click log
  (a click when the candidate's category is the last view's), Adam at 0.1: the first steps throw
  the embeddings and the attention, the loss leaps and the net settles on one answer: the
  running-mean loss 0.706 at step 0, 4.19 at step 1, 13.5 at step 10, 2.20 at step 149, no NaN,
  no training (the error 0.516 before, 0.500 after; the constant answer's 0.500). Seed 1: 0.756,
  1.02, 10.4, 1.68 (the error 0.512 before, 0.508 after; the constant's 0.492).
  rajveermalviya/language-modeling#3 (a too-large Adam learning rate: the loss did not go down;
  Adam's default 0.001 trained much better); aws/sagemaker-python-sdk#265 (NaN and diverging
  losses: the learning rate lowered). Cured: Adam at 1e-3: the running-mean loss 0.706 to 0.692,
  the error 0.516 to 0.297."""
  x, y = click_sessions(seed)
  return cases.Setup(bst_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     'binary_crossentropy', stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind37_init_bpnn_zero_kernels', 'initialisation', 'bpnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='HomericIntelligence/Mnemosyne#1987; junxnone/tio#959')
def _(seed, cured=False):
  """A Behler-Parrinello atomic network (one MLP of two Dense(32, tanh) and Dense(1) shared by the
  eight atoms of a structure, on their radial symmetry functions, the atomic energies summed)
  fitted to total energies, Adam at 1e-3, every kernel initialised to zeros: every hidden unit is
  tanh(0) = 0, every gradient that reaches a kernel is zero, only the output bias moves and the
  model answers a constant: the running-mean loss 2.67 at step 0, 1.58 at step 149, no NaN, no
  training (the error 1.78 before, 1.67 after; the constant answer's 1.67). Seed 1: 2.00 to 2.25
  (the error 2.18 before, 2.17 after; the constant's 2.17). HomericIntelligence/Mnemosyne#1987
  (a uniform-fill weight initialisation leaves the layers symmetric, the gradients collapse and
  training plateaus: break the symmetry); junxnone/tio#959 (any constant initialisation, zero
  included, keeps units from learning different features). Cured: Glorot-uniform kernels: the
  running-mean loss 76.9 to 2.88, the error 79.9 to 0.693."""
  x, y = atomic_environments(seed)
  return cases.Setup(bpnn_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'mse', stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind37_div_diffpool_padding_degree', 'division_or_log', 'diffpool_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pyg-team/pytorch_geometric#61; mlx-graphs/mlx-graphs#18')
def _(seed, cured=False):
  """A DiffPool-lite molecule property model (graph convolutions D^-1/2 A D^-1/2 X W, a soft
  assignment to four clusters, an MLP) on padded molecular graphs (3 to 9 atoms, padded to 9 with
  all-zero atoms that have no bonds), Adam at 1e-3, the normalisation written by hand as
  deg ** -0.5 of the raw adjacency: a padding atom's degree 0 gives inf, inf x 0 = NaN, and
  every padded molecule's prediction is NaN from the first batch: the loss NaN from step 0 to
  149, the outputs NaN before and after (the error inf; the constant answer's 0.218). Seed 1:
  the same (NaN from step 0; the error inf, the constant's 2.20). pyg-team/pytorch_geometric#61
  (GCNConv's deg.pow(-0.5) gives inf and NaN that propagate through the model);
  mlx-graphs/mlx-graphs#18 (isolated nodes give inf in the GCN norm: handled). Cured: as
  Kipf's code, self-loops added and the inverse square roots of zero degrees set to 0: the
  running-mean loss 1.48 to 0.069, the error 1.72 to 0.017."""
  x, y = padded_graphs(seed)
  return cases.Setup(diffpool_lite(seed, guard=cured), keras.optimizers.Adam(1e-3), 'mse',
                     stream(x, y, batch=32, seed=seed), 'regression')


@add('blind37_softmax_mtad_gat_raw_sensors', 'softmax_overflow', 'mtad_gat_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pyg-team/pytorch_geometric#53; mila-iqia/blocks#727')
def _(seed, cured=False):
  """An MTAD-GAT-lite anomaly detector (a Conv1D, the feature-oriented graph attention over the six
  sensors' windows, a GRU, an anomaly logit) on plant sensor windows left in engineering units
  (levels of 50 to 400), Adam at 1e-3, the attention's softmax written by hand as exp(e) /
  sum(exp(e)): the attention scores of raw windows are in the hundreds, exp overflows to inf,
  inf / inf = NaN: the loss NaN from step 0 to 149, the outputs NaN before and after (the error
  inf; the constant answer's 0.453). Seed 1: the same (NaN from step 0; the constant's 0.445).
  pyg-team/pytorch_geometric#53 (GAT's scatter softmax did exp directly, overflowed and gave NaN
  often: subtract the max first, fixed); mila-iqia/blocks#727 (attention energies large enough
  to overflow exp gave NaN: stabilised as a regular softmax is). Cured: the stable softmax
  (tf.nn.softmax, the max subtracted): the running-mean loss 0.770 to 0.640, the error 0.547 to
  0.031."""
  x, y = plant_sensor_windows(seed)
  return cases.Setup(mtad_gat_lite(seed, stable=cured), keras.optimizers.Adam(1e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind37_fp16_conv_tasnet_gln_eps', 'precision', 'conv_tasnet_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='espnet/espnet#5277; traveller59/spconv#513')
def _(seed, cured=False):
  """A Conv-TasNet-lite speech enhancer (a bias-free ReLU encoder, global layer norms, dilated
  blocks, a sigmoid mask, a transposed-conv decoder) on noisy voiced clips, 15% of them digital
  silence, under mixed_float16, Adam at 1e-3, the gLN as the reference code writes it, (x - mean)
  / sqrt(var + 1e-8), in the compute dtype: in float16 1e-8 is 0, a silent clip's encoding is all
  zero and its norm is 0 / 0 = NaN (in float32 the same clip is fine): the loss NaN from step 0
  to 149, the outputs NaN before and after (the error inf; the constant answer's 0.0149). Seed 1:
  0.0168 at step 0 (a batch with no silent clip), NaN from step 1 (the error inf; the constant's
  0.0158). espnet/espnet#5277 (a LayerNorm epsilon of 1e-12 and mixed-precision training that
  explodes: AMP keeps layer norms out of half precision); traveller59/spconv#513 (tensors went
  NaN under automatic mixed precision: the normalisation's eps raised to a float16-compatible
  value). Cured: the gLN computed in float32 (as Keras runs its own normalisation layers): the
  running-mean loss 0.0164 to 0.0066, the error 0.0154 to 0.0024."""
  x, y = noisy_speech(seed)
  return cases.Setup(conv_tasnet_lite(seed, float32_norm=cured), keras.optimizers.Adam(1e-3),
                     'mse', stream(x, y, batch=16, seed=seed), 'regression')


@add('blind37_input_scinet_meter_gaps', 'bad_input', 'scinet_lite', doors=('trainer', 'fit'),
     steps=150, citation='Nixtla/neuralforecast#824; unit8co/darts#1954')
def _(seed, cured=False):
  """A SCINet-lite forecaster (two sample-convolution-and-interaction blocks, a linear head) on an
  office building's standardised hourly load, 32 hours in and the next 8 out, Adam at 3e-3
  (SCINet's usual rate), 1% of the meter readings missing and left as NaN (as the meter logs a
  dropout): nearly every batch holds a NaN window, the loss is NaN from step 0 and the weights
  go NaN: the loss NaN from step 0 to 149, the outputs NaN after (the error inf; the labels'
  own variance NaN). Seed 1: the same. Nixtla/neuralforecast#824 (NBEATS forecasts all NaN: the
  dataset has missing values, fill them and it works); unit8co/darts#1954 (NaN values in the
  series induce NaN in the weights and forecasts: fill the missing values). Cured: the gaps
  filled by linear interpolation: the running-mean loss 41.5 to 2.62, the error 56.9 to 0.466
  (the constant answer's 0.925)."""
  x, y = building_load(seed, fill=cured)
  return cases.Setup(scinet_lite(seed), keras.optimizers.Adam(3e-3), 'mse',
                     stream(x, y, batch=32, seed=seed), 'regression')


@add('blind37_transient_sac_actor_bitflip', 'transient', 'sac_actor_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='PKU-YuanGroup/Open-Sora-Plan#333; immortal3/MLNet-Pytorch#2')
def _(seed, cured=False):
  """A SAC actor's mean head (Dense(256, ReLU), Dense(256, ReLU), Dense(3), tanh) cloned from an
  expert controller's actions, Adam at 3e-4, healthy until one element of the first layer's
  activations reads NaN at the 60th training call, once (a flipped bit in a buffer; the count
  kept outside the model): training is clean to the fault (the running-mean loss 0.457 at step
  0, 0.155 at step 50), the NaN reaches the gradients and the weights, and the model answers NaN
  from then on (the running-mean loss climbs to 0.301 at step 149; the error 0.430 before, inf
  after; the constant answer's 0.399). Seed 1: 0.559, 0.221 at step 50, 0.416 at step 149 (the
  error 0.577 before, inf after). PKU-YuanGroup/Open-Sora-Plan#333 (the loss went NaN after 20k
  healthy steps: just resume the training); immortal3/MLNet-Pytorch#2 (the loss suddenly jumped
  to NaN and never came back). Cured: the same run without the fault: the running-mean loss
  0.457 to 0.070, the error 0.430 to 0.020."""
  x, y = expert_demonstrations(seed)
  return cases.Setup(sac_actor_lite(seed, fault_at=None if cured else 60),
                     keras.optimizers.Adam(3e-4), 'mse', stream(x, y, batch=64, seed=seed),
                     'regression')


@add('blind37_mismatch_mcdnn_logits_as_probs', 'loss_output_mismatch', 'mcdnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='xiph/LPCNet#97; keras-team/keras#15271')
def _(seed, cured=False):
  """An MCDNN-lite character recogniser (two conv columns, the scanned page and a blurred copy,
  averaged) on printed glyphs, Adam at 1e-3, the last layer linear (logits) but the loss
  sparse_categorical_crossentropy with its default from_logits=False: Keras reads the logits as
  probabilities (normalised by their sum and clipped, negatives to 1e-7), the gradient points
  nowhere useful: the running-mean loss 10.1 at step 0, 5.75 at step 149, no NaN, no training
  (the error 0.906 before, 0.875 after; the constant answer's 0.859). Seed 1: 5.21 to 3.09 (the
  error 0.945 before, 0.844 after; the constant's 0.867). xiph/LPCNet#97 (the model outputs
  logits, so set from_logits=True, or the loss clips the values and takes their log);
  keras-team/keras#15271 (from_logits must match the head: logits for from_logits=True, a
  softmax or sigmoid for the default). Cured: a softmax head for the default loss: the
  running-mean loss 2.32 to 1.47, the error 0.906 to 0.148."""
  x, y = glyphs(seed)
  return cases.Setup(mcdnn_lite(seed, output='softmax' if cured else None),
                     keras.optimizers.Adam(1e-3), 'sparse_categorical_crossentropy',
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind37_transient_esmm_backward_nan', 'transient', 'esmm_lite', doors=('trainer', 'fit'),
     steps=150, citation='tanmoyio/sahajBERT#1; microsoft/dion#76')
def _(seed, cured=False):
  """An ESMM-lite click-and-purchase model (shared user and item embeddings, a CTR and a CVR tower,
  pCTCVR = pCTR x pCVR on purchases) on an impression log, Adam at 3e-3, healthy until the
  gradient flowing back into the joined embeddings reads NaN in one element at the 90th training
  call, once (a backward kernel that misfires; the count kept outside the model): the loss is
  finite throughout (the running-mean 0.664 at step 0, 0.656 at step 60), but the NaN gradient
  makes the embeddings and the towers NaN, and the model answers NaN from then on (the error
  0.383 before, inf after; the constant answer's 0.383). Seed 1: 0.561 to 0.637, the error 0.328
  before, inf after. tanmoyio/sahajBERT#1 (a trainer hung after meeting NaN in its gradients
  once in six hours: ignore the NaN gradients and continue); microsoft/dion#76 (NaN parameter
  values on one machine, traced to a hardware error: gone after the motherboard swap). Cured:
  the same run without the fault: the running-mean loss 0.664 to 0.610, the error 0.383 to
  0.223."""
  x, y = impressions(seed)
  return cases.Setup(esmm_lite(seed, fault_at=None if cured else 90), keras.optimizers.Adam(3e-3),
                     'binary_crossentropy', stream(x, y, batch=64, seed=seed), 'binary_prob')
