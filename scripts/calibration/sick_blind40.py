"""A fortieth blind set of ten sick scenarios (the 'blind40' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind31.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (an ES-RNN-lite, an NLinear-lite, a
behaviour-cloning policy, a DCRNN-lite, a MemAE-lite, a SetRank-lite, an NSNet2-lite, a
MEGNet-lite, an LPRNet-lite and an FGCNN-lite; two of division_or_log). Each builder takes
`cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick
run). Each was checked with plain Keras `compile` +
`fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin passes
runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND40 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND40.add` with split='blind40'."""
  return BLIND40.add(name, expected, arch, split='blind40', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def tourism_windows(seed, *, rows=2048, window=24, series=32):
  """Monthly tourism arrivals in miniature (the M4 / tourism layout ES-RNN forecasts): `series`
  destinations, each a level (10 to 40 thousand visitors a month), a trend, a yearly season of
  its own phase and amplitude and noise; the window in tens of thousands of visitors (values about
  0.5 to 6), the target (the next month) in thousands of visitors (about 5 to 60). (window
  (rows, window, 1), next (rows, 1))."""
  rng = np.random.RandomState(seed)
  months = window + 1 + rows // series + 1
  t = np.arange(months)[:, None]
  level = rng.uniform(10, 40, series)
  y = (level * (1 + 0.004 * rng.randn(series) * t) *
       (1 + rng.uniform(0.1, 0.4, series) *
        np.sin(2 * np.pi * t / 12 + rng.uniform(0, 6.3, series)))
       + rng.randn(months, series) * 0.05 * level)
  xs, ys = [], []
  for s in range(series):
    for start in range(rows // series):
      w = y[start:start + window, s]
      xs.append(w / 10.0)
      ys.append(y[start + window, s])
  order = rng.permutation(len(xs))
  return (np.asarray(xs, np.float32)[order, :, None], np.asarray(ys, np.float32)[order, None])


def es_rnn_lite(seed, *, window=24, units=32):
  """An ES-RNN-lite (Smyl, 2020, the M4 winner's recurrent half): two residual blocks of LSTMs,
  the second dilated (it reads every second state of the first), a linear output: the next
  month."""
  _seed(seed)
  x = keras.Input((window, 1))
  h = L.LSTM(units, return_sequences=True)(x)
  h = h + L.LSTM(units, return_sequences=True)(h)
  d = h[:, 1::2]
  d = L.LSTM(units, return_sequences=True)(d)
  d = d + L.LSTM(units, return_sequences=True)(d)
  return keras.Model(x, L.Dense(1)(d[:, -1]), name='es_rnn_lite')


def sensor_readings(seed, *, rows=4096, sensors=32, factors=4):
  """Readings of an industrial plant in normal operation (the layout MemAE and other
  reconstruction-based anomaly detectors learn): `sensors` channels driven by `factors` latent
  operating conditions through a fixed nonlinear map, plus sensor noise, standardised per
  channel. (readings (rows, sensors), the same readings as the target)."""
  rng = np.random.RandomState(seed)
  z = rng.randn(rows, factors)
  w1 = rng.randn(factors, 16)
  w2 = rng.randn(16, sensors) / 4
  x = np.tanh(z @ w1) @ w2 + 0.05 * rng.randn(rows, sensors)
  x = (x - x.mean(0)) / x.std(0)
  return x.astype(np.float32), x.astype(np.float32)


class Memory(L.Layer):
  """MemAE's memory module (Gong et al., 2019): `items` learned prototypes; the encoding's
  attention over them (softmax of the dot products), hard-shrunk (weights below `shrink`, 1 /
  `items` as the paper sets it, to zero, the rest renormalised to sum 1); the output the weighted
  sum of the items. Its entropy loss, `entropy` x mean(sum(-w log(w + `eps`))), is added to the
  model's losses (the paper's sparsity term, weight 0.0002)."""

  def __init__(self, items=50, entropy=2e-4, eps=0.0, **kwargs):
    super().__init__(**kwargs)
    self.items, self.shrink, self.entropy, self.eps = items, 1.0 / items, entropy, eps

  def build(self, shape):
    self.m = self.add_weight(shape=(self.items, shape[-1]), initializer='glorot_uniform',
                             name='items')

  def call(self, z):
    z = tf.convert_to_tensor(z)
    w = tf.nn.softmax(tf.matmul(z, self.m, transpose_b=True), -1)
    w = tf.nn.relu(w - self.shrink) * w / (tf.abs(w - self.shrink) + 1e-12)
    w = w / (tf.reduce_sum(w, -1, keepdims=True) + 1e-12)
    self.add_loss(self.entropy * tf.reduce_mean(tf.reduce_sum(-w * tf.math.log(w + self.eps), -1)))
    return tf.matmul(w, self.m)


def memae_lite(seed, *, sensors=32, eps=0.0):
  """A MemAE-lite: an encoder (Dense 64, 16, ReLU then linear), the memory module (50 items, its
  entropy loss's `eps`), a decoder (Dense 64 ReLU, Dense `sensors`): the reconstruction."""
  _seed(seed)
  x = keras.Input((sensors,))
  z = L.Dense(16)(L.Dense(64, activation='relu')(x))
  out = L.Dense(sensors)(L.Dense(64, activation='relu')(Memory(eps=eps)(z)))
  return keras.Model(x, out, name='memae_lite')


def load_profiles(seed, *, rows=2048, window=96, horizon=24, channels=7):
  """Electricity transformer load in miniature (the ETTh layout the linear forecasters run on):
  `channels` loads and oil temperature, each a daily cycle (period 24) and a slower one, with a
  random-walk drift and noise, standardised per channel; a window of `window` hours in, the
  next `horizon` hours out. (window (rows, window, channels), next (rows, horizon, channels))."""
  rng = np.random.RandomState(seed)
  n = rows + window + horizon
  t = np.arange(n)[:, None]
  v = (rng.uniform(0.5, 2, channels) * np.sin(2 * np.pi * t / 24 + rng.uniform(0, 6.3, channels))
       + 0.5 * np.sin(2 * np.pi * t / 168 + rng.uniform(0, 6.3, channels))
       + np.cumsum(rng.randn(n, channels) * 0.05, 0) + 0.2 * rng.randn(n, channels))
  v = (v - v.mean(0)) / v.std(0)
  starts = rng.permutation(rows)
  x = np.stack([v[s:s + window] for s in starts])
  y = np.stack([v[s + window:s + window + horizon] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


def nlinear_lite(seed, *, window=96, horizon=24, channels=7):
  """An NLinear (Zeng et al., 2023): the window's last value subtracted, one Dense from the
  `window` hours to the `horizon` hours shared by the channels, the last value added back."""
  _seed(seed)
  x = keras.Input((window, channels))
  last = x[:, -1:, :]
  h = keras.ops.transpose(x - last, [0, 2, 1])
  out = keras.ops.transpose(L.Dense(horizon)(h), [0, 2, 1]) + last
  return keras.Model(x, out, name='nlinear_lite')


def arm_demos(seed, *, rows=4096, joints=7):
  """Demonstrations of a 7-joint arm reaching (the layout behaviour cloning learns from): the
  state (joint angles, joint velocities, the goal's position), the expert's action (an
  operational-space controller: torques that are a saturated nonlinear function of the state).
  (state (rows, 2 * joints + 3), action (rows, joints))."""
  rng = np.random.RandomState(seed)
  q = rng.uniform(-1, 1, (rows, joints))
  dq = rng.randn(rows, joints) * 0.3
  goal = rng.uniform(-1, 1, (rows, 3))
  jac = rng.randn(3, joints) / np.sqrt(joints)
  reach = np.sin(q) @ jac.T
  torque = np.tanh(1.5 * (goal - reach) @ jac - 0.5 * dq + 0.3 * np.cos(q))
  x = np.concatenate([q, dq, goal], 1)
  return x.astype(np.float32), torque.astype(np.float32)


def bc_policy_lite(seed, *, state=17, joints=7, init='glorot_uniform'):
  """A behaviour-cloning policy (the robomimic / BC baseline MLP): Dense(256, ReLU), Dense(256,
  ReLU), Dense(`joints`, tanh): the torques, every kernel initialised with `init`."""
  _seed(seed)
  return keras.Sequential([
      keras.Input((state,)),
      L.Dense(256, activation='relu', kernel_initializer=init),
      L.Dense(256, activation='relu', kernel_initializer=init),
      L.Dense(joints, activation='tanh', kernel_initializer=init)], name='bc_policy_lite')


def traffic_counts(seed, *, rows=2048, window=12, sensors=12):
  """Loop-detector counts in miniature (the PEMS layout DCRNN forecasts): `sensors` detectors in
  a line along a freeway, each a daily rush-hour profile of its own scale (5 to 40 vehicles per
  five minutes), congestion travelling downstream, Poisson counts; the window standardised
  (all detectors, one mean and spread), the next five minutes' counts out. (window (rows,
  window, sensors), counts (rows, sensors))."""
  rng = np.random.RandomState(seed)
  n = rows + window + 1
  t = np.arange(n)[:, None]
  scale = rng.uniform(5, 40, sensors)
  lag = np.arange(sensors) * 2
  rate = scale * (1.2 + np.sin(2 * np.pi * (t - lag) / 288) +
                  0.6 * np.exp(-((t - lag) % 288 - 100) ** 2 / 200.0))
  counts = rng.poisson(np.maximum(rate, 0.1)).astype(np.float32)
  z = (counts - counts.mean()) / counts.std()
  starts = rng.permutation(rows)
  x = np.stack([z[s:s + window] for s in starts])
  y = np.stack([counts[s + window] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


class DiffusionConv(L.Layer):
  """DCRNN's diffusion convolution over the sensors (Li et al., 2018), K=2: the readings, one
  and two steps of the forward and the backward random walk of the road graph (a line of
  sensors), concatenated along the features."""

  def __init__(self, sensors, **kwargs):
    super().__init__(**kwargs)
    a = np.eye(sensors, k=1)
    fwd = a / np.maximum(a.sum(1, keepdims=True), 1)
    bwd = a.T / np.maximum(a.T.sum(1, keepdims=True), 1)
    self.walks = [fwd, fwd @ fwd, bwd, bwd @ bwd]

  def call(self, x):
    x = tf.convert_to_tensor(x)
    parts = [x] + [tf.einsum('btn,mn->btm', x, tf.constant(w, x.dtype)) for w in self.walks]
    return tf.concat(parts, -1)


def dcrnn_lite(seed, *, window=12, sensors=12, units=64, activation=None):
  """A DCRNN-lite: the diffusion convolution of the readings, a GRU of `units` over the window,
  Dense(`sensors`, `activation`): the next counts (a rate)."""
  _seed(seed)
  x = keras.Input((window, sensors))
  h = L.GRU(units)(DiffusionConv(sensors)(x))
  return keras.Model(x, L.Dense(sensors, activation=activation)(h), name='dcrnn_lite')


def handwritten_poisson(y, p):
  """The Poisson negative log-likelihood, p - y log p, as the threads write it: no guard for a
  rate at or below zero."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(p - y * tf.math.log(p))


def query_lists(seed, *, rows=2048, docs=16, features=12):
  """Learning-to-rank lists in miniature (the MSLR-WEB30K layout): `docs` candidate documents a
  query, each `features` raw features as the data set ships them (term counts, BM25 scores in
  the tens, document lengths and inlink counts in the hundreds and thousands, PageRank-like
  scores), not normalised; one relevant document a list, the one of the highest hidden score.
  (lists (rows, docs, features), the relevant document's position (rows,))."""
  rng = np.random.RandomState(seed)
  scale = np.array([1, 2, 5, 10, 20, 30, 50, 100, 300, 800, 1500, 3000], np.float64)[:features]
  raw = rng.gamma(2.0, 1.0, (rows, docs, features)) * scale
  w = rng.randn(features) / scale
  score = (raw * w).sum(-1) + 0.3 * rng.randn(rows, docs)
  return raw.astype(np.float32), np.argmax(score, -1).astype(np.int32)


def naive_listwise_ce(y, scores):
  """The listwise softmax cross-entropy (ListNet's top-one probability) written by hand,
  -log(exp(s_y) / sum exp(s)): exp of a score above 88.7 is inf."""
  scores = tf.cast(scores, tf.float32)
  e = tf.exp(scores)
  p = e / tf.reduce_sum(e, -1, keepdims=True)
  picked = tf.gather(p, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked + 1e-7))


def setrank_lite(seed, *, docs=16, features=12, d=64):
  """A SetRank-lite (Pang et al., 2020): each document's features through Dense(`d`, ReLU), one
  pre-norm block (layer normalisation before each sublayer, the residual stream left as it is) of
  multi-head self-attention across the list (two heads) and a feed-forward, Dense(1): the
  documents' scores (docs,)."""
  _seed(seed)
  x = keras.Input((docs, features))
  h = L.Dense(d, activation='relu')(x)
  n = L.LayerNormalization()(h)
  h = h + L.MultiHeadAttention(2, d // 2)(n, n)
  h = h + L.Dense(d)(L.Dense(2 * d, activation='relu')(L.LayerNormalization()(h)))
  return keras.Model(x, L.Reshape((docs,))(L.Dense(1)(h)), name='setrank_lite')


def noisy_spectra(seed, *, rows=1024, frames=16, bins=32):
  """Noisy speech power spectra in miniature (the DNS-challenge layout NSNet2 enhances):
  speech-like harmonic envelopes (a power of up to a few hundred a bin, as |STFT|^2 of 16-bit
  audio scaled to [-1, 1] gives over a 512-point frame) plus stationary noise of a random
  level; the noisy power in, the clean power out. (noisy (rows, frames, bins), clean (rows,
  frames, bins))."""
  rng = np.random.RandomState(seed)
  f = np.arange(bins)
  f0 = rng.uniform(2, 5, (rows, 1, 1))
  gain = rng.uniform(50, 400, (rows, frames, 1)) * (rng.rand(rows, frames, 1) < 0.7)
  clean = gain * np.exp(-((f % f0) - 0.5) ** 2 * 2) * np.exp(-f / 16.0)
  noise = rng.uniform(2, 40, (rows, 1, 1)) * rng.exponential(1.0, (rows, frames, bins))
  return (clean + noise).astype(np.float32), clean.astype(np.float32)


def nsnet2_lite(seed, *, frames=16, bins=32, dtype='float32'):
  """An NSNet2-lite (Braun et al., 2021): the log power (log(p + 1e-3), centred and scaled by
  fixed constants), Dense(64, ReLU), two GRUs of 64, Dense(`bins`, sigmoid): a suppression mask
  applied to the noisy power: the enhanced power. Every layer in `dtype`."""
  _seed(seed)
  x = keras.Input((frames, bins))
  p = L.Activation('linear', dtype=dtype)(x)
  feats = (keras.ops.log(p + 1e-3) - 3.0) / 2
  h = L.Dense(64, activation='relu', dtype=dtype)(feats)
  h = L.GRU(64, return_sequences=True, dtype=dtype)(h)
  h = L.GRU(64, return_sequences=True, dtype=dtype)(h)
  mask = L.Dense(bins, activation='sigmoid', dtype=dtype)(h)
  return keras.Model(x, mask * p, name='nsnet2_lite')


def spectral_convergence(y, p):
  """The spectral convergence loss (Parallel WaveGAN's STFT loss: ||Y - P||_F / ||Y||_F) of the
  batch's power spectra, computed in the outputs' dtype (float16 in a float16 model: the sums of
  squares of powers in the hundreds pass 65504)."""
  y = tf.cast(y, p.dtype)
  return tf.cast(tf.norm(y - p) / tf.norm(y), tf.float32)


def crystals(seed, *, rows=4096, atoms=8, elements=20, inf_rate=0.0):
  """Crystals in miniature (the Materials Project layout MEGNet reads): `atoms` atoms each of
  one of `elements` elements, a neighbour graph (atoms within a cutoff), and the crystal's
  state (its density and packing fraction: the atoms' volume / the cell volume); the target the
  formation energy (eV per atom): each element's own energy, each bonded pair's, and a state
  term. A fraction `inf_rate` of the records have a cell volume of zero (a failed parse), and
  their packing fraction reads inf. ((elements (rows, atoms), adjacency (rows, atoms, atoms),
  state (rows, 2)), energy (rows, 1))."""
  rng = np.random.RandomState(seed)
  el = rng.randint(0, elements, (rows, atoms))
  pos = rng.rand(rows, atoms, 3)
  dist = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1)
  adj = ((dist < 0.55) & (dist > 0)).astype(np.float32)
  e_el = rng.uniform(-3, 0, elements)
  e_pair = rng.randn(elements, elements) * 0.3
  e_pair = (e_pair + e_pair.T) / 2
  density = rng.uniform(0.5, 1.5, rows)
  volume = rng.uniform(0.5, 1.5, rows)
  atom_vol = rng.uniform(0.2, 0.6, rows)
  energy = (e_el[el].mean(1) + (e_pair[el[:, :, None], el[:, None]] * adj).sum((1, 2)) /
            (2 * atoms) + 0.5 * (density - 1))
  volume[rng.rand(rows) < inf_rate] = 0.0
  with np.errstate(divide='ignore'):
    packing = atom_vol / volume
  state = np.stack([density - 1, packing - 0.4], 1)
  return ((el.astype(np.int32), adj, state.astype(np.float32)),
          energy[:, None].astype(np.float32))


def megnet_lite(seed, *, atoms=8, elements=20, d=32, blocks=2):
  """A MEGNet-lite (Chen et al., 2019): an element embedding of `d`, the state through Dense(`d`),
  `blocks` graph blocks (each atom updated from itself, the sum of its neighbours and the
  state, Dense(`d`, softplus) twice, with a residual; the state updated from itself and the
  atoms' mean), the atoms' mean and the state concatenated, Dense(32, softplus), Dense(1): the
  formation energy."""
  _seed(seed)
  el = keras.Input((atoms,), dtype='int32')
  adj = keras.Input((atoms, atoms))
  st = keras.Input((2,))
  v = L.Embedding(elements, d)(el)
  u = L.Dense(d, activation='softplus')(st)
  for _ in range(blocks):
    nb = keras.ops.einsum('bij,bjd->bid', adj, v)
    uu = keras.ops.repeat(u[:, None], atoms, axis=1)
    v = v + L.Dense(d, activation='softplus')(
        L.Dense(d, activation='softplus')(keras.ops.concatenate([v, nb, uu], -1)))
    u = u + L.Dense(d, activation='softplus')(keras.ops.concatenate([u, keras.ops.mean(v, 1)], -1))
  h = L.Dense(32, activation='softplus')(keras.ops.concatenate([keras.ops.mean(v, 1), u], -1))
  return keras.Model([el, adj, st], L.Dense(1)(h), name='megnet_lite')


def plate_glyphs(seed, *, rows=2048, size=24, classes=16):
  """Licence-plate characters in miniature (the layout LPRNet reads, one character cropped):
  `classes` glyph templates of strokes on a 24x24 grid, each sample shifted by up to two
  pixels, its contrast varied, with noise; pixels in [0, 1]. (images (rows, 24, 24, 1), the
  character (rows,))."""
  rng = np.random.RandomState(seed)
  templates = np.zeros((classes, size, size))
  for c in range(classes):
    for _ in range(4):
      if rng.rand() < 0.5:
        r = rng.randint(4, 20)
        a, b = sorted(rng.randint(4, 20, 2))
        templates[c, r - 1:r + 1, a:b + 2] = 1
      else:
        col = rng.randint(4, 20)
        a, b = sorted(rng.randint(4, 20, 2))
        templates[c, a:b + 2, col - 1:col + 1] = 1
  y = rng.randint(0, classes, rows)
  x = np.zeros((rows, size, size))
  for i in range(rows):
    dx, dy = rng.randint(-2, 3, 2)
    x[i] = np.roll(np.roll(templates[y[i]], dx, 0), dy, 1) * rng.uniform(0.5, 1.0)
  x = np.clip(x + 0.15 * rng.randn(rows, size, size), 0, 1)
  return x[..., None].astype(np.float32), y.astype(np.int32)


class BitFlipOnce(field.OneOffFault):
  """A one-off fault in the feature maps: one element reads NaN at the `at`-th training call
  (a flipped bit in a buffer)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.nan, **kwargs)


def _small_basic_block(x, out):
  """LPRNet's small basic block: 1x1 to out/4, 3x1, 1x3, 1x1 to `out`, BN and ReLU after."""
  h = L.Conv2D(out // 4, 1, activation='relu')(x)
  h = L.Conv2D(out // 4, (3, 1), padding='same', activation='relu')(h)
  h = L.Conv2D(out // 4, (1, 3), padding='same', activation='relu')(h)
  h = L.Conv2D(out, 1)(h)
  return L.ReLU()(L.BatchNormalization()(h))


def lprnet_lite(seed, *, size=24, classes=16, fault=None):
  """An LPRNet-lite (Zherzdev and Gruzdev, 2018): a 3x3 stem of 32 with BN and ReLU, max
  pooling, two small basic blocks (64, 128) with max pooling between, global pooling, Dense
  (`classes`): the character's logits. `BitFlipOnce(fault)` on the pooled features."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding='same')(x)))
  h = L.MaxPooling2D()(h)
  h = L.MaxPooling2D()(_small_basic_block(h, 64))
  h = _small_basic_block(h, 128)
  h = BitFlipOnce(fault)(L.GlobalAveragePooling2D()(h))
  return keras.Model(x, L.Dense(classes)(h), name='lprnet_lite')


def ad_clicks(seed, *, rows=8192, fields=8, vocab=30):
  """Ad impressions in miniature (the Avazu layout FGCNN is run on): `fields` categorical
  fields (ids 0..`vocab`-1), the click drawn from each value's own propensity and the pairwise
  interactions of latent factors; about a quarter clicked. (ids (rows, fields), clicked
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  first = rng.randn(fields, vocab)
  lat = rng.randn(fields, vocab, 4) * 0.6
  v = lat[np.arange(fields), ids]
  logit = (first[np.arange(fields), ids].sum(1) +
           0.5 * ((v.sum(1) ** 2).sum(1) - (v ** 2).sum((1, 2))))
  logit = (logit - logit.mean()) / logit.std() * 2.5 - 1.2
  y = (rng.rand(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
  return ids.astype(np.int32), y[:, None]


def fgcnn_lite(seed, *, fields=8, vocab=30, dim=8):
  """An FGCNN-lite (Liu et al., 2019): each field's embedding of `dim`; the feature generator (a
  (3, 1) convolution of 6 maps over the fields' embedding matrix, tanh, (2, 1) max pooling, a
  Dense recombination into 4 new fields); the original and new fields' embeddings, and the
  inner products of every pair (IPNN), into Dense(64, ReLU), Dense(1, sigmoid): the click."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  offs = np.arange(fields, dtype=np.int32) * vocab
  e = L.Embedding(fields * vocab, dim)(x + offs)
  g = L.Conv2D(6, (3, 1), padding='same', activation='tanh')(e[..., None])
  g = L.MaxPooling2D((2, 1))(g)
  new = L.Reshape((4, dim))(L.Dense(4 * dim, activation='tanh')(L.Flatten()(g)))
  allf = keras.ops.concatenate([e, new], 1)
  n = fields + 4
  i, j = np.triu_indices(n, 1)
  prod = keras.ops.sum(keras.ops.take(allf, i, axis=1) * keras.ops.take(allf, j, axis=1), -1)
  h = L.Dense(64, activation='relu')(keras.ops.concatenate([L.Flatten()(allf), prod], -1))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='fgcnn_lite')


# --- The scenarios, in `cases.CAUSES` order. --------------------------------------------------


@add('blind40_explode_es_rnn_sgd_unclipped', 'exploding_gradients', 'es_rnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Marcovaldong/lstmp.pytorch#2; austineaero/Remaining-Useful-Life-RUL-Estimation#19')
def _(seed, cured=False):
  """An ES-RNN-lite (two residual blocks of LSTMs of 32, the second dilated) forecasting next
  month's tourism arrivals of 32 destinations (the window in tens of thousands of visitors, the
  target in thousands, about 5 to 60), MSE, SGD with momentum 0.9 at 0.05 and no gradient
  clipping: the first large errors give large recurrent gradients and the steps throw the
  weights: the loss (per step) 596 at step 0, 230 at step 1, then 1905 and 8970 at steps 2 and
  3, 297 at step 50 and 191 at step 149, no NaN, no training (the error 653 before, 178.6 after;
  the constant answer's 141.8). Seed 1: 634, 386, 3141, 14980, 174 at step 149 (the error 796
  before, 182.3 after; the constant's 170.7). Marcovaldong/lstmp.pytorch#2 (an LSTM's loss
  blows up to NaN, an exploding gradient; training on long sequences works with the gradients
  clipped to a norm of 1.0); austineaero/Remaining-Useful-Life-RUL-Estimation#19 (an LSTM
  regressor's loss goes to NaN: exploding gradients; clip the gradients, clipvalue=1.0). Cured:
  clipnorm=1.0 at the same rate: the loss 596 to 19.6, the error 653 to 19.2."""
  x, y = tourism_windows(seed)
  return cases.Setup(es_rnn_lite(seed),
                     keras.optimizers.SGD(0.05, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind40_lr_nlinear_sgd_high', 'learning_rate', 'nlinear_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#3040; tensorflow/tensorflow#38796')
def _(seed, cured=False):
  """An NLinear (the window's last value subtracted, one Dense from 96 hours to the next 24,
  shared by seven channels) forecasting ETTh-like transformer loads (standardised), MSE, plain
  SGD at 0.5: past the linear model's stable step (about 2 over the largest curvature of its
  quadratic loss) each step overshoots further: the loss (per step) 4.17 at step 0, 18.9, 150,
  1702 at step 3, NaN from step 41, the weights NaN (the error 4.36 before, inf after; the
  constant answer's 0.970). Seed 1: 2.89, 4.29, 5.97, 9.79, 4.5e13 at step 50, NaN at step 127
  (the error 2.75 before, 1.4e42 after; the constant's 0.917). keras-team/keras#3040 (a simple
  linear regression's weights go to NaN after a few iterations: the learning rate was too
  high); tensorflow/tensorflow#38796 (a high learning rate with SGD gives a NaN or inf loss;
  lowering it makes it unlikely). Cured: SGD at 0.01: the loss 4.17 to 0.178, the error 4.36 to
  0.179."""
  x, y = load_profiles(seed)
  return cases.Setup(nlinear_lite(seed), keras.optimizers.SGD(0.01 if cured else 0.5), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind40_init_bc_policy_zeros', 'initialisation', 'bc_policy_lite', doors=('trainer', 'fit'),
     steps=150,
     citation=('smallflyingpig/universal_adversarial_perturbation_generative_network_for_'
               'speaker_recognition#4; davharris/mistnet#87'))
def _(seed, cured=False):
  """A behaviour-cloning policy (Dense 256 ReLU, Dense 256 ReLU, Dense 7 tanh) imitating an
  operational-space controller's torques from a 7-joint arm's state, MSE, Adam at 1e-3, every
  kernel initialised to zero: every hidden unit outputs 0, the gradient of every kernel is 0
  (each is multiplied by a zero activation or a zero weight above), only the output bias
  learns: the policy answers the mean torque: the loss 0.371 at step 0 and 0.354 at step 149, no
  NaN, no training (the error 0.378 before, 0.358 after; the constant answer's 0.354). Seed 1:
  0.298 to 0.246 (0.2875 before, 0.2585 after; the constant's 0.2528).
  smallflyingpig/universal_adversarial_perturbation_generative_network_for_speaker_recognition#4
  (layers initialised to zeros: the gradients of the layers before are zero, the model cannot
  be trained); davharris/mistnet#87 (the weights must be initialised: otherwise there are no
  gradients for any network with a hidden layer). Cured: Keras's default glorot_uniform
  kernels: the loss 0.363 to 0.0022, the error 0.375 to 0.0021."""
  x, y = arm_demos(seed)
  return cases.Setup(bc_policy_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=64, seed=seed), 'regression')


@add('blind40_log_dcrnn_handwritten_poisson', 'division_or_log', 'dcrnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#590; tianzhi0549/FCOS#25')
def _(seed, cured=False):
  """A DCRNN-lite (diffusion convolution over a line of 12 loop detectors, a GRU of 64, a
  linear Dense output) forecasting the next five minutes' vehicle counts (about 1 to 110; the
  input window standardised), Adam at 1e-2 (DCRNN's rate), the Poisson negative log-likelihood
  written by hand, p - y log(p), on the linear output: part of the first predicted rates are
  negative, their log is NaN: the loss NaN from step 0 at every step; the weights stay finite
  (the gradient of log p, 1 / p, is finite) but are pushed by a loss that means nothing: no
  training (the error 1582 before, 2492 after; the constant answer's 493). Seed 1: the same (702
  before, 1625 after; the constant's 224). keras-team/keras#590 (a model fit with the Poisson
  loss on a linear Dense output gives NaN from the first epoch: the log of a prediction at or
  below 0); tianzhi0549/FCOS#25 (negative outputs of a regression layer make a log-based loss
  NaN; an exp on the output keeps them positive). Cured: an exponential output (the rate stays
  positive): the loss 1.99 to -84 (the NLL without its log(y!) term), the error 1499 to 39.5."""
  x, y = traffic_counts(seed)
  return cases.Setup(dcrnn_lite(seed, activation='exponential' if cured else None),
                     keras.optimizers.Adam(1e-2), handwritten_poisson,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind40_log_memae_entropy_zero_weights', 'division_or_log', 'memae_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='donggong1/memae-anomaly-detection#10; RasmussenLab/vamb#12')
def _(seed, cured=False):
  """A MemAE-lite (an encoder to 16, a memory of 50 items read by hard-shrunk attention, a
  decoder) reconstructing a plant's 32 standardised sensor readings, MSE plus the paper's
  entropy loss on the memory weights (weight 2e-4), sum(-w log w), Adam at 1e-3: the hard
  shrinkage sets the weights below 1/50 to exactly zero, and 0 x log(0) = 0 x -inf = NaN: the
  loss NaN from step 0, the weights NaN (the error 1.036 before, inf after; the constant
  answer's 1.029). Seed 1: the same (1.013 before; the constant's 1.008).
  donggong1/memae-anomaly-detection#10 (the hard shrinkage's ReLU gives zero weights and the
  entropy loss then takes log(0) = -inf; add a small constant, log(w + 1e-10));
  RasmussenLab/vamb#12 (NaN after some epochs: an entropy term's 0 x log(0); add a tiny
  pseudocount). Cured: log(w + 1e-12): the loss 1.05 to 0.59, the error 1.036 to 0.235."""
  x, y = sensor_readings(seed)
  return cases.Setup(memae_lite(seed, eps=1e-12 if cured else 0.0), keras.optimizers.Adam(1e-3),
                     'mse',
                     data.stream(x, y, batch=64, seed=seed), 'regression')


@add('blind40_exp_setrank_naive_listwise', 'softmax_overflow', 'setrank_lite',
     doors=('trainer', 'fit'), steps=150, citation='uTensor/uTensor#175; mlberkeley/scae-pytorch#4')
def _(seed, cured=False):
  """A SetRank-lite (a per-document Dense of 64, a pre-norm block of self-attention across
  the list and a feed-forward, a score per document) ranking lists of 16 documents on raw
  MSLR-like features (counts, BM25 scores in the tens, lengths and inlinks in the thousands,
  not normalised), Adam at 1e-3, the listwise softmax cross-entropy written by hand,
  -log(exp(s_y) / sum exp(s)): the raw features give scores in the hundreds, exp overflows to
  inf and inf / inf = NaN: the loss NaN from step 0, the weights NaN (the error 0.898 before,
  inf after; the constant answer's 0.883). Seed 1: the loss 16.1 at step 0, NaN from step 1
  (1.0 before; the constant's 0.914). uTensor/uTensor#175 (logits of a few hundred through
  exp() give inf, and the inf bubbles through to a NaN result); mlberkeley/scae-pytorch#4 (the
  loss goes NaN because exp gives inf in a log-probability; the safe logsumexp solves it).
  Cured: Keras's sparse categorical cross-entropy from logits (the log-softmax, max
  subtracted): the loss 506 to 16.9, the error 0.898 to 0.648."""
  x, y = query_lists(seed)
  return cases.Setup(setrank_lite(seed), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True) if cured else naive_listwise_ce,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind40_fp16_nsnet2_spectral_convergence', 'precision', 'nsnet2_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='engichang1467/Open-Rig3R#35; ProGamerGov/neural-style-pt#97')
def _(seed, cured=False):
  """An NSNet2-lite (log-power features, Dense 64, two GRUs of 64, a sigmoid suppression mask
  times the noisy power) enhancing noisy speech power spectra (a few hundred a bin), Adam at
  1e-3, the spectral convergence loss ||Y - P|| / ||Y||, every layer in float16 (as after
  set_floatx('float16')): the loss is about 0.5, and its gradient reaching the outputs is about
  4e-7 an element (1 / ||Y|| is about 1e-4, spread over 16384 bins), below float16's smallest
  normal number (6.1e-5), kept only as a few subnormal steps of 6e-8: the gradients are rounded
  away and the float16 weights wander: the loss 0.530 at step 0, 0.669 at step 50, 0.681 at
  step 149, no NaN, no training (the error 758 before, 1210 after; the constant answer's 1845).
  Seed 1: 0.511 to 0.565 (815 before, 1128 after; the constant's 1932). (Computed in float16
  itself, as a custom loop would, the sums of squares overflow 65504: the loss is inf / inf =
  NaN and every gradient 0.) engichang1467/Open-Rig3R#35 (fp16 without loss scaling: gradients
  below 6.1e-5 flush to zero in the backward pass, silently; no NaN, the loss curve just
  flattens); ProGamerGov/neural-style-pt#97 (a half-precision model's losses are NaN: sums of
  squared features exceed float16's 65500). Cured: the same network in float32: the loss 0.532
  to 0.298, the error 758 to 224."""
  x, y = noisy_spectra(seed)
  return cases.Setup(nsnet2_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), spectral_convergence,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind40_input_megnet_inf_packing', 'bad_input', 'megnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/tensorflow#46145; NRCan/geo-deep-learning#68')
def _(seed, cured=False):
  """A MEGNet-lite (element embeddings, two graph blocks updating atoms from their neighbours
  and the crystal's state, the state from the atoms, a Dense readout) predicting formation
  energies of Materials-Project-like crystals, MSE, Adam at 1e-3; 1% of the records have a cell
  volume of zero (a failed parse) and their packing fraction (atoms' volume / cell volume)
  reads inf, not filtered: the first batch holding one gives inf activations, a NaN loss and
  NaN gradients: the loss 5.12 at step 0, NaN from step 1, the weights NaN (the error 4.89
  before, inf after; the constant answer's 0.080). Seed 1: 0.275, NaN from step 1 (0.323
  before; the constant's 0.159). tensorflow/tensorflow#46145 (features made by a ratio,
  pandas' pct_change, contain inf and the loss is NaN from the start); NRCan/geo-deep-learning#68
  (NaN and inf values in the input images make the loss NaN: the model learns nothing; replace
  them). Cured: the records with a non-finite state dropped: the loss 5.12 to 0.18, the error
  4.89 to 0.033. The measure reads the clean records (eval_data) for both runs."""
  (el, adj, state), y = crystals(seed, inf_rate=0.01)
  keep = np.all(np.isfinite(state), 1)
  train = ((el[keep], adj[keep], state[keep]), y[keep]) if cured else ((el, adj, state), y)
  clean = (el[keep], adj[keep], state[keep]), y[keep]
  return cases.Setup(megnet_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(*train, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(*clean, batch=32, seed=seed))


@add('blind40_transient_lprnet_bitflip_once', 'transient', 'lprnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; nickgkan/3d_diffuser_actor#80')
def _(seed, cured=False):
  """An LPRNet-lite (a 3x3 stem with BN, two of LPRNet's small basic blocks, global pooling,
  a Dense head) reading single licence-plate characters (16 glyphs, shifted, noisy), Adam at
  1e-3, training normally (the loss 2.79 at step 0, 1.97 at step 50) when one element of the
  pooled features reads NaN once (`BitFlipOnce`: its 90th training call, step 85 in a plain
  `fit` after the measure's four training-mode passes; a flipped bit in a buffer, not the data,
  the model or the settings): the loss NaN from step 85, the weights NaN (the error 0.9375
  before, inf after; the constant answer's 0.883). Seed 1: the same step (2.81, 2.08 at step
  50; 0.914 before; the constant's 0.906). Rikorose/DeepFilterNet#30 (NaN losses occur in rare
  circumstances after a few epochs, cause unknown; resuming from the last checkpoint works);
  nickgkan/3d_diffuser_actor#80 (an exception during training judged a random system issue,
  rare on a stable machine: resumed, it does not happen again). Cured: the same run without the
  fault: the loss 2.79 to 0.70, the error 0.9375 to 0.016 in training mode (BN's moving
  statistics still near their start in inference mode)."""
  x, y = plate_glyphs(seed)
  return cases.Setup(lprnet_lite(seed, fault=None if cured else 90), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind40_mismatch_fgcnn_cce_one_unit', 'loss_output_mismatch', 'fgcnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#17029; tensorflow/tensorflow#60113')
def _(seed, cured=False):
  """An FGCNN-lite (field embeddings, a convolutional feature generator making four new
  fields, the inner products of every pair, an MLP, one sigmoid output) predicting clicks on
  Avazu-like impressions, Adam at 1e-3, compiled with categorical_crossentropy on the one
  output unit (as the threads did): the output is normalised over its one unit, p / p = 1, and
  the cross-entropy of a one-class distribution is log(1) = 0 whatever the weights: the loss
  0 at every step, no NaN, nothing to learn from; the model ends answering "no click" for
  every impression (the error 0.609 before, 0.340 after: the constant answer's 0.340). Seed 1:
  the same (0.594 before, 0.297 after; the constant's 0.297). keras-team/keras#17029 (with
  categorical_crossentropy for binary classification no error is raised but the losses are all
  0 during training: the wrong loss; use binary cross-entropy); tensorflow/tensorflow#60113
  (categorical_crossentropy on one output for a binary problem: use binary_crossentropy).
  Cured: binary_crossentropy: the loss 0.697 to 0.586, the error 0.609 to 0.258."""
  x, y = ad_clicks(seed)
  return cases.Setup(fgcnn_lite(seed), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')
