"""A thirty-ninth blind set of sick scenarios (the 'blind39' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind34.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a combined-cycle power plant ANN surrogate, a
RankNet-lite, an LPRNet-lite, an MQ-CNN-lite, an NRMS-lite, an ANI-lite, a Graph WaveNet-lite, a
DTLN-lite, an FGCNN-lite and a BC-RNN-lite). Each builder takes `cured`: the same run with the
thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain
Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured
twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND39 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND39.add` with split='blind39'."""
  return BLIND39.add(name, expected, arch, split='blind39', **fields)


def stream(x, y, *, batch, seed):
  """An endless stream of batches of (x, y) (x may be a tuple), shuffled anew each epoch from
  `seed` (as data.stream)."""
  n = len(x[0]) if isinstance(x, tuple) else len(x)
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  ds = ds.shuffle(min(n, 2048), seed=seed, reshuffle_each_iteration=True)
  return ds.batch(batch, drop_remainder=True).prefetch(2)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def power_plant(seed, *, rows=4096):
  """A combined-cycle power plant in miniature (the UCI CCPP table its ANN surrogates are fitted
  to), in its raw units as the threads feed it: ambient temperature (degC, 2 to 35), exhaust
  vacuum (cm Hg, 25 to 81), ambient pressure (mbar, about 1013) and relative humidity (%, 25 to
  100); the net electrical output (MW, about 454, spread about 17) mostly falling with the
  temperature and the vacuum. (x (rows, 4), output (rows, 1))."""
  rng = np.random.RandomState(seed)
  at = rng.uniform(2, 35, rows)
  v = np.clip(30 + 1.3 * at + rng.randn(rows) * 8, 25, 81)
  ap = 1013 + rng.randn(rows) * 6 - 0.2 * (at - 20)
  rh = rng.uniform(25, 100, rows)
  pe = (454 - 1.7 * (at - 19) - 0.25 * (v - 54) + 0.06 * (ap - 1013) - 0.15 * (rh - 73)
        + 0.01 * (at - 19) ** 2 + rng.randn(rows) * 4)
  x = np.stack([at, v, ap, rh], 1)
  return x.astype(np.float32), pe[:, None].astype(np.float32)


def ccpp_surrogate_lite(seed, *, width=64):
  """A CCPP ANN surrogate in miniature (the feed-forward net of the combined-cycle power plant
  studies, e.g. Tufekci, 2014 / Kesgin and Heperkan, 2005): two Dense layers of `width` (ReLU),
  Dense(1): the net output in MW."""
  _seed(seed)
  x = keras.Input((4,))
  h = L.Dense(width, activation='relu')(x)
  h = L.Dense(width, activation='relu')(h)
  return keras.Model(x, L.Dense(1)(h), name='ccpp_surrogate_lite')


def query_docs(seed, *, rows=8192, features=20):
  """Learning-to-rank pairs in miniature (the LETOR layout RankNet is trained on): two
  documents of one query, each twenty standardised relevance features (BM25 scores, clicks,
  page rank...), the label 1.0 if the first is the more relevant (a nonlinear function of the
  features plus noise). ((first, second) (rows, features) each, label (rows, 1))."""
  rng = np.random.RandomState(seed)
  w = rng.randn(features) / np.sqrt(features)

  def rel(x):
    return x @ w + 0.5 * np.tanh(x[:, 0] * x[:, 1]) + 0.3 * rng.randn(len(x))

  a, b = rng.randn(rows, features), rng.randn(rows, features)
  y = (rel(a) > rel(b)).astype(np.float32)[:, None]
  return (a.astype(np.float32), b.astype(np.float32)), y


def ranknet_lite(seed, *, features=20):
  """A RankNet-lite (Burges et al., 2005): one scoring MLP (Dense 64 and 32, ReLU, Dense(1))
  shared by the two documents; the output the difference of their scores: the logit that the
  first ranks above the second."""
  _seed(seed)
  a, b = keras.Input((features,)), keras.Input((features,))
  scorer = keras.Sequential([L.Dense(64, activation='relu'), L.Dense(32, activation='relu'),
                             L.Dense(1)])
  return keras.Model([a, b], L.Subtract()([scorer(a), scorer(b)]), name='ranknet_lite')


def lprnet_lite(seed, *, init='glorot_uniform', classes=10, widths=(64, 128)):
  """An LPRNet-lite (Zherzdev and Gruzdev, 2018, licence-plate character recognition without
  RNNs): a 3x3 stem conv of 32 (ReLU), two small basic blocks of `widths` (1x1 conv to a
  quarter, 3x1 and 1x3 convs, 1x1 conv back, ReLU) with max pooling after each, a 1x1 conv of `classes` per position,
  global average pooling: the character logits. Every kernel initialised with `init`."""
  _seed(seed)
  x = keras.Input((32, 32, 1))
  h = L.Conv2D(32, 3, padding='same', activation='relu', kernel_initializer=init)(x)
  h = L.MaxPooling2D(2)(h)
  for width in widths:
    q = width // 4
    b = L.Conv2D(q, 1, activation='relu', kernel_initializer=init)(h)
    b = L.Conv2D(q, (3, 1), padding='same', activation='relu', kernel_initializer=init)(b)
    b = L.Conv2D(q, (1, 3), padding='same', activation='relu', kernel_initializer=init)(b)
    h = L.Conv2D(width, 1, activation='relu', kernel_initializer=init)(b)
    h = L.MaxPooling2D(2)(h)
  h = L.Conv2D(classes, 1, kernel_initializer=init)(h)
  return keras.Model(x, L.GlobalAveragePooling2D()(h), name='lprnet_lite')


def store_demand(seed, *, rows=4096, window=28, horizon=7):
  """Daily unit sales in miniature (the retail demand MQ-CNN forecasts): each item-store series
  a Poisson count of rate level x weekly profile x a slow trend (levels from 0.3 to 30 units a
  day: many zero days); each row the log1p of `window` days of sales with the day of week
  (sin, cos), and the next `horizon` days' counts (raw units, as a Poisson loss reads them).
  (x (rows, window, 3), counts (rows, horizon))."""
  rng = np.random.RandomState(seed)
  days = window + horizon
  level = np.exp(rng.uniform(np.log(0.3), np.log(30), (rows, 1)))
  start = rng.randint(0, 7, (rows, 1))
  dow = (start + np.arange(days)[None]) % 7
  profile = 1 + 0.4 * np.sin(2 * np.pi * dow / 7 + rng.uniform(0, 1, (rows, 1)))
  trend = np.exp(rng.uniform(-0.01, 0.01, (rows, 1)) * np.arange(days)[None])
  counts = rng.poisson(level * profile * trend).astype(np.float32)
  x = np.stack([np.log1p(counts[:, :window]), np.sin(2 * np.pi * dow[:, :window] / 7),
                np.cos(2 * np.pi * dow[:, :window] / 7)], -1)
  return x.astype(np.float32), counts[:, window:]


def mqcnn_lite(seed, *, window=28, horizon=7, activation=None):
  """An MQ-CNN-lite (Wen et al., 2017, the multi-horizon forecaster: a dilated causal
  convolution encoder and an MLP decoder, one quantile): Conv1D of 32 (kernel 2, causal,
  dilations 1, 2, 4, 8, ReLU), the last step's encoding, Dense(64, ReLU), Dense(`horizon`,
  `activation`): the daily rates."""
  _seed(seed)
  x = keras.Input((window, 3))
  h = x
  for d in (1, 2, 4, 8):
    h = L.Conv1D(32, 2, padding='causal', dilation_rate=d, activation='relu')(h)
  h = L.Dense(64, activation='relu')(L.Lambda(lambda t: t[:, -1])(h))
  return keras.Model(x, L.Dense(horizon, activation=activation)(h), name='mqcnn_lite')


def handwritten_poisson(y, rate):
  """The Poisson negative log-likelihood as the threads write it, rate - y log(rate): no
  positivity on the rate, so a negative rate is the log of a negative number (NaN)."""
  y, rate = tf.cast(y, tf.float32), tf.cast(rate, tf.float32)
  return tf.reduce_mean(rate - y * tf.math.log(rate))


def news_clicks(seed, *, rows=4096, history=10, candidates=5, dim=32, topics=8):
  """News impressions in miniature (the MIND layout NRMS is trained on): each news title a
  pre-trained title embedding (the sum of its word vectors, not averaged, as summed word2vec
  features give it: norms around 15), of one of `topics` topics; a user's `history` clicked
  titles from two favourite topics; `candidates` shown titles, one from a favourite topic (the
  click) and the rest from others, in random order. ((history (rows, history, dim), candidates
  (rows, candidates, dim)), the click's position)."""
  rng = np.random.RandomState(seed)
  centres = rng.randn(topics, dim) * 2.0

  def titles(topic):
    return centres[topic] + rng.randn(*topic.shape, dim) * 1.5 + 0.5

  fav = np.stack([rng.choice(topics, 2, replace=False) for _ in range(rows)])
  hist = titles(fav[np.arange(rows)[:, None], rng.randint(0, 2, (rows, history))])
  pos = fav[np.arange(rows), rng.randint(0, 2, rows)]
  neg = np.stack([rng.choice([t for t in range(topics) if t not in f], candidates - 1,
                             replace=False) for f in fav])
  cand_topics = np.concatenate([pos[:, None], neg], 1)
  order = np.argsort(rng.rand(rows, candidates), 1)
  cand_topics = np.take_along_axis(cand_topics, order, 1)
  label = np.argmin(order, 1).astype(np.int32)
  return (hist.astype(np.float32), titles(cand_topics).astype(np.float32)), label


def naive_softmax(z, axis=-1):
  """exp(z) / sum(exp(z)), as the threads' attention and click scores compute it: no max
  subtracted, so a score above 88.7 overflows float32's exp to inf (and inf / inf = NaN)."""
  e = tf.exp(z)
  return e / tf.reduce_sum(e, axis, keepdims=True)


class NrmsHead(L.Layer):
  """NRMS's user encoder and click predictor: additive attention over the clicked titles'
  encodings (tanh(Dense) . q, then `softmax` over the history), the user vector; each
  candidate's score its dot product with the user vector; `softmax` over the candidates."""

  def __init__(self, dim, softmax, **kwargs):
    super().__init__(**kwargs)
    self.att = L.Dense(dim, activation='tanh')
    self.q = L.Dense(1, use_bias=False)
    self.softmax = softmax

  def call(self, inputs):
    hist, cand = inputs
    w = self.softmax(tf.squeeze(self.q(self.att(hist)), -1))
    user = tf.reduce_sum(hist * w[..., None], 1)
    return self.softmax(tf.einsum('bcd,bd->bc', cand, user))


def nrms_lite(seed, *, history=10, candidates=5, dim=32, naive=True):
  """An NRMS-lite (Wu et al., 2019, neural news recommendation with multi-head self-attention):
  a news encoder (Dense 64, ReLU, Dense 64; the word-level self-attention left out, the titles
  coming as pre-trained embeddings) shared by the clicked and the candidate titles; `NrmsHead`
  with the hand-written softmax (`naive`) or tf.nn.softmax (max subtracted): the click
  probabilities of the candidates."""
  _seed(seed)
  h = keras.Input((history, dim))
  c = keras.Input((candidates, dim))
  d1, d2 = L.Dense(64, activation='relu'), L.Dense(64)
  out = NrmsHead(64, naive_softmax if naive else tf.nn.softmax)([d2(d1(h)), d2(d1(c))])
  return keras.Model([h, c], out, name='nrms_lite')


def conformers(seed, *, rows=2048, atoms=8, rs=8):
  """Small-molecule conformers in miniature (the ANI-1 data: energies of distorted
  geometries): up to `atoms` atoms of two species at random 3-D positions (a minimum spacing),
  each atom's atomic environment vector (ANI's radial part: sum over neighbours of
  exp(-4 (r - Rs)^2) fc(r), `rs` shells per neighbour species); the energy a sum of smooth pair
  terms (a bonding well and a weaker long-range one) per species pair, centred, in Hartree (a
  spread of 0.05 Ha, about 30 kcal/mol, as ANI-1's conformer energies). ((aev (rows, atoms, 2 rs), mask (rows, atoms, 1)),
  energy (rows, 1))."""
  rng = np.random.RandomState(seed)
  shells = np.linspace(0.8, 4.0, rs)
  aev = np.zeros((rows, atoms, 2 * rs), np.float32)
  mask = np.zeros((rows, atoms, 1), np.float32)
  energy = np.zeros(rows)
  depth = np.array([[1.0, 0.7], [0.7, 0.4]])
  for i in range(rows):
    n = rng.randint(3, atoms + 1)
    pos = np.cumsum(rng.randn(n, 3) * 0.6 + [1.0, 0, 0], 0)
    spec = rng.randint(0, 2, n)
    r = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    fc = np.where(r < 5.0, 0.5 * np.cos(np.pi * r / 5.0) + 0.5, 0.0)
    np.fill_diagonal(fc, 0.0)
    g = np.exp(-4.0 * (r[..., None] - shells) ** 2) * fc[..., None]
    for s in range(2):
      aev[i, :n, s * rs:(s + 1) * rs] = (g * (spec == s)[None, :, None]).sum(1)
    mask[i, :n] = 1
    iu = np.triu_indices(n, 1)
    d = depth[spec[iu[0]], spec[iu[1]]]
    energy[i] = np.sum(d * (np.exp(-2.0 * (r[iu] - 1.1) ** 2) - 0.3 * np.exp(-0.5 * (r[iu] - 2.5)
                                                                          ** 2)) * fc[iu])
  energy = 0.05 * (energy - energy.mean()) / energy.std()
  return (aev, mask), energy[:, None].astype(np.float32)


def ani_lite(seed, *, atoms=8, features=16, dtype='float32'):
  """An ANI-lite (Smith et al., 2017, ANI-1: an atomic neural network potential): one atomic
  network (Dense 64, 32, CELU-like ELU, Dense 1 with a zero-initialised kernel: every atomic
  energy starts at 0, as neural potentials start) applied to each atom's environment vector, the
  atomic energies masked and summed: the molecule's energy. Every layer in `dtype`."""
  _seed(seed)
  aev = keras.Input((atoms, features), dtype=dtype)
  mask = keras.Input((atoms, 1), dtype=dtype)
  h = L.Dense(64, activation='elu', dtype=dtype)(aev)
  h = L.Dense(32, activation='elu', dtype=dtype)(h)
  e = L.Multiply(dtype=dtype)([L.Dense(1, kernel_initializer='zeros', dtype=dtype)(h), mask])
  return keras.Model([aev, mask], L.Lambda(lambda t: tf.reduce_sum(t, 1), dtype=dtype)(e),
                     name='ani_lite')


def loop_detectors(seed, *, rows=2048, window=12, sensors=10, horizon=3, missing=0.0):
  """Freeway loop-detector speeds in miniature (the METR-LA / PEMS-BAY layout Graph WaveNet
  forecasts): ten sensors along a corridor, five-minute speeds from a daily profile with rush
  hour dips travelling downstream and noise, standardised; each row `window` readings of every
  sensor and the next `horizon` of each. A fraction `missing` of the readings is NaN (a detector
  dropping out, left as NaN in the exported table). (x (rows, window, sensors, 1), y (rows,
  sensors x horizon))."""
  rng = np.random.RandomState(seed)
  length = 288 * 14
  t = np.arange(length)[:, None]
  lag = np.arange(sensors)[None] * 3
  dip = (np.exp(-((t - lag) % 288 - 96) ** 2 / 300.0) +
         0.8 * np.exp(-((t - lag) % 288 - 210) ** 2 / 400.0))
  speed = 65 - 30 * dip * rng.uniform(0.6, 1.2, (1, sensors)) + 2 * rng.randn(length, sensors)
  speed = (speed - speed.mean()) / speed.std()
  starts = rng.randint(0, length - window - horizon, rows)
  x = np.stack([speed[s:s + window] for s in starts])[..., None]
  y = np.stack([speed[s + window:s + window + horizon].T.reshape(-1) for s in starts])
  x[rng.rand(*x.shape) < missing] = np.nan
  return x.astype(np.float32), y.astype(np.float32)


class AdaptiveGraphConv(L.Layer):
  """Graph WaveNet's graph convolution with the self-adaptive adjacency: A = softmax(relu(E1
  E2^T)) from two learned node embeddings, the output Dense([x, A x, A^2 x])."""

  def __init__(self, nodes, units, **kwargs):
    super().__init__(**kwargs)
    self.nodes, self.units = nodes, units
    self.mix = L.Dense(units)

  def build(self, shape):
    self.e1 = self.add_weight(shape=(self.nodes, 8), initializer='random_normal')
    self.e2 = self.add_weight(shape=(self.nodes, 8), initializer='random_normal')

  def call(self, x):
    a = tf.nn.softmax(tf.nn.relu(tf.matmul(self.e1, self.e2, transpose_b=True)), -1)
    ax = tf.einsum('nm,btmc->btnc', a, x)
    aax = tf.einsum('nm,btmc->btnc', a, ax)
    return self.mix(tf.concat([x, ax, aax], -1))


def graph_wavenet_lite(seed, *, window=12, sensors=10, horizon=3, channels=16):
  """A Graph WaveNet-lite (Wu et al., 2019): a 1x1 start conv to `channels`, three layers of a
  gated dilated temporal conv (tanh x sigmoid, kernel 2 along time, dilations 1, 2, 4) followed
  by an `AdaptiveGraphConv` and a residual, skip connections summed from the last step, ReLU,
  Dense(`horizon`) per sensor, flattened."""
  _seed(seed)
  x = keras.Input((window, sensors, 1))
  h = L.Conv2D(channels, 1)(x)
  skip = 0
  for d in (1, 2, 4):
    f = L.Conv2D(channels, (2, 1), dilation_rate=(d, 1), padding='valid', activation='tanh')(h)
    g = L.Conv2D(channels, (2, 1), dilation_rate=(d, 1), padding='valid',
                 activation='sigmoid')(h)
    z = AdaptiveGraphConv(sensors, channels)(L.Multiply()([f, g]))
    h = z + h[:, d:]
    skip = skip + L.Conv2D(32, 1)(z[:, -1:])
  out = L.Dense(horizon)(L.Dense(64, activation='relu')(L.ReLU()(skip)))
  return keras.Model(x, L.Flatten()(out), name='graph_wavenet_lite')


def noisy_spectra(seed, *, rows=2048, frames=24, bins=48):
  """Speech enhancement pairs in miniature (the DNS-challenge mixtures DTLN is trained on):
  log-compressed magnitude spectra of speech-like frames (two formant bumps moving slowly, a
  voiced/unvoiced level) plus stationary coloured noise at a random SNR, and the ideal ratio
  mask speech / (speech + noise) in [0, 1]. (log magnitudes (rows, frames, bins), mask (rows,
  frames, bins))."""
  rng = np.random.RandomState(seed)
  f = np.arange(bins)[None, None, :]
  t = np.arange(frames)[None, :, None]
  speech = 0
  for _ in range(2):
    c = rng.uniform(4, bins - 4, (rows, 1, 1)) + rng.uniform(-0.4, 0.4, (rows, 1, 1)) * t
    speech = speech + np.exp(-0.5 * ((f - c) / rng.uniform(2, 5, (rows, 1, 1))) ** 2)
  speech = speech * rng.uniform(0.0, 2.0, (rows, frames, 1))
  noise = rng.uniform(0.05, 1.5, (rows, 1, 1)) * np.exp(-rng.uniform(0, 0.08, (rows, 1, 1)) * f)
  noise = noise * rng.uniform(0.6, 1.4, (rows, frames, bins))
  mask = speech / (speech + noise)
  x = np.log1p(10 * (speech + noise))
  return x.astype(np.float32), mask.astype(np.float32)


class GlitchOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one LSTM output reads NaN once (a corrupted
  activation buffer)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.nan, **kwargs)


def dtln_lite(seed, *, frames=24, bins=48, fault=None):
  """A DTLN-lite (Westhausen and Meyer, 2020, the dual-signal transformation LSTM network, its
  first, magnitude-masking stage): layer normalisation of the log magnitudes, two LSTMs of 64, a
  `GlitchOnce` (at its `fault`-th training call; None: never), Dense(`bins`, sigmoid) per frame:
  the mask."""
  _seed(seed)
  x = keras.Input((frames, bins))
  h = L.LayerNormalization()(x)
  h = L.LSTM(64, return_sequences=True)(h)
  h = L.LSTM(64, return_sequences=True)(h)
  return keras.Model(x, L.Dense(bins, activation='sigmoid')(GlitchOnce(fault)(h)),
                     name='dtln_lite')


def ad_clicks(seed, *, rows=8192, fields=10, vocab=30):
  """Ad click logs in miniature (the Avazu layout the CTR models read): `fields` categorical
  fields of `vocab` values each (site, app, device, hour, banner position...); the click drawn
  from a logistic of per-value effects and of two field-pair interactions. (ids (rows, fields),
  each field's ids offset by field x `vocab` (one shared table), click (rows, 1) as 0. / 1.)."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  first = rng.randn(fields, vocab) * 0.7
  pair = rng.randn(2, vocab, vocab) * 1.0
  z = first[np.arange(fields), ids].sum(1) + pair[0, ids[:, 0], ids[:, 1]] + pair[1, ids[:, 2],
                                                                                ids[:, 3]]
  p = 1 / (1 + np.exp(-(z - np.median(z))))
  y = (rng.rand(rows) < p).astype(np.float32)[:, None]
  return (ids + np.arange(fields) * vocab).astype(np.int32), y


def fgcnn_lite(seed, *, fields=10, vocab=30, dim=8):
  """An FGCNN-lite (Liu et al., 2019, feature generation by convolutional neural network): the
  fields' embeddings of `dim` as a (fields x dim) map, two convolutions along the fields (kernel
  3, 8 and 12 maps, tanh) with max pooling 2, each recombined by a Dense into 3 new feature
  embeddings; the raw and the new embeddings flattened, an MLP of 128 and 64 (ReLU), Dense(1):
  the click logit."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  e = L.Embedding(fields * vocab, dim)(x)
  h = L.Reshape((fields, dim, 1))(e)
  new = []
  for maps in (8, 12):
    h = L.Conv2D(maps, (3, 1), padding='same', activation='tanh')(h)
    h = L.MaxPooling2D((2, 1))(h)
    new.append(L.Dense(3 * dim, activation='tanh')(L.Flatten()(h)))
  z = L.Concatenate()([L.Flatten()(e)] + new)
  z = L.Dense(64, activation='relu')(L.Dense(128, activation='relu')(z))
  return keras.Model(x, L.Dense(1)(z), name='fgcnn_lite')


def reach_demos(seed, *, demos=400, length=60, window=10, nan_first=True):
  """Teleoperated reaching demonstrations in miniature (the robomimic low-dimensional datasets
  BC-RNN is trained on): a two-link arm driven to a target by a PD expert; each observation the
  joint angles, the joint velocities (finite differences of the logged angles, so the first
  frame of a demo has none: NaN, as the threads' velocity fields) and the target's joint-space
  position, standardised; the action the expert's two torques in [-1, 1]; windows of `window`
  steps, a tenth of them starting at a demo's first frame. With `nan_first` False the first
  frame's velocity is 0. (obs (rows, window, 6), actions (rows, window, 2))."""
  rng = np.random.RandomState(seed)
  obs, act = [], []
  for _ in range(demos):
    q = rng.uniform(-1.5, 1.5, 2)
    goal = rng.uniform(-1.5, 1.5, 2)
    qs, us = [], []
    qd = np.zeros(2)
    for _ in range(length):
      u = np.clip(2.0 * (goal - q) - 0.8 * qd + 0.05 * rng.randn(2), -1, 1)
      qs.append(q.copy())
      us.append(u)
      qd = 0.9 * qd + 0.1 * u
      q = q + 0.1 * qd
    qs = np.array(qs)
    vel = np.concatenate([np.full((1, 2), np.nan if nan_first else 0.0), np.diff(qs, axis=0) /
                          0.1], 0)
    obs.append(np.concatenate([qs, vel, np.repeat(goal[None], length, 0)], 1))
    act.append(np.array(us))
  obs, act = np.array(obs), np.array(act)
  mean = np.nanmean(obs.reshape(-1, 6), 0)
  std = np.nanstd(obs.reshape(-1, 6), 0)
  obs = (obs - mean) / std
  starts = np.where(rng.rand(demos * 8) < 0.1, 0, rng.randint(1, length - window, demos * 8))
  which = rng.randint(0, demos, demos * 8)
  x = np.stack([obs[d, s:s + window] for d, s in zip(which, starts)])
  y = np.stack([act[d, s:s + window] for d, s in zip(which, starts)])
  return x.astype(np.float32), y.astype(np.float32)


def bc_rnn_lite(seed, *, window=10):
  """A BC-RNN-lite (Mandlekar et al., 2021, robomimic's recurrent behaviour-cloning policy):
  an observation encoder Dense(64, ReLU), two LSTMs of 64 over the window, Dense(2, tanh) per
  step: the torques."""
  _seed(seed)
  x = keras.Input((window, 6))
  h = L.Dense(64, activation='relu')(x)
  h = L.LSTM(64, return_sequences=True)(h)
  h = L.LSTM(64, return_sequences=True)(h)
  return keras.Model(x, L.Dense(2, activation='tanh')(h), name='bc_rnn_lite')

# --- The scenarios. ---------------------------------------------------------------------------


@add('blind39_grad_ccpp_sgd_no_clip', 'exploding_gradients', 'ccpp_surrogate_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#4563; austineaero/Remaining-Useful-Life-RUL-Estimation#19')
def _(seed, cured=False):
  """A CCPP-lite surrogate (two Dense(64, ReLU) layers) fitted to a combined-cycle power
  plant's net output in MW from its raw readings (temperature in degC, vacuum in cm Hg, pressure
  about 1013 mbar, humidity in %: neither inputs nor output scaled, as keras-team/keras#4563
  feeds its large targets), SGD at 1e-3 with Nesterov momentum 0.9 (keras#4563's optimizer), no
  clipping: the first error of about 450 MW times inputs of about 1000 gives gradients in the
  hundreds of thousands, the first step throws the weights far off: the loss 2.0e5 at step 0,
  6.1e21 at step 1, inf from step 2, the weights NaN (the error 2.0e5 before, inf after; the
  constant answer's 424). Seed 1: 3.3e5, 6.2e22, inf from step 2, the weights NaN (the constant's
  488). keras-team/keras#4563 (an LSTM regression with very high targets gets a very high or
  NaN loss with rmsprop, adam and sgd; over- and underflows early in training when the error is
  large); austineaero/Remaining-Useful-Life-RUL-Estimation#19 (a NaN loss after the first epoch:
  exploding gradients; add clipvalue=1.0 to the optimizer). Cured: clipvalue=1.0 on the same
  SGD: the loss 2.0e5 to 5.1e3 (the running mean), the error 2.0e5 to 53."""
  x, y = power_plant(seed)
  return cases.Setup(ccpp_surrogate_lite(seed),
                     keras.optimizers.SGD(1e-3, momentum=0.9, nesterov=True,
                                          clipvalue=1.0 if cured else None),
                     'mse', stream(x, y, batch=32, seed=seed), 'regression')


@add('blind39_lr_ranknet_sgd_high', 'learning_rate', 'ranknet_lite', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/tensorflow#38796; gurkirt/FPN.pytorch1.0#7')
def _(seed, cured=False):
  """A RankNet-lite (one scoring MLP of 64 and 32 shared by two documents, the logit their score
  difference) learning which of two documents of a query is the more relevant from twenty
  standardised features, SGD at 1.0 with momentum 0.9: each step overshoots, the scores swing
  and the ReLUs die: the loss 0.73 at step 0, 0.79 at step 10, 2.6 at step 50, 1.35 at step 149
  (the running mean), no training (the error 0.51 before and after; the constant answer's
  0.49). Seed 1: 0.68, 0.43 at step 10, then 1.5e16 at step 50 and 3.5e17 at step 149, the error
  0.47 before, 0.55 after (the constant's 0.45). tensorflow/tensorflow#38796 (a high learning
  rate gives a NaN or inf loss with SGD; less often at a lower rate); gurkirt/FPN.pytorch1.0#7
  (a NaN loss from the first iterations: reduce the learning rate and try again). Cured: SGD at
  0.05 with the same momentum: the loss 0.73 to 0.30, the error 0.51 to 0.086."""
  x, y = query_docs(seed)
  return cases.Setup(ranknet_lite(seed),
                     keras.optimizers.SGD(0.05 if cured else 1.0, momentum=0.9),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     stream(x, y, batch=64, seed=seed), 'binary_logit')


@add('blind39_init_lprnet_zeros', 'initialisation', 'lprnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/models#1529; tensorflow/tensorflow#13935')
def _(seed, cured=False):
  """An LPRNet-lite (a 3x3 stem conv, two small basic blocks of 1x1, 3x1, 1x3 and 1x1 convs with
  max pooling, a 1x1 conv to ten classes, global average pooling) recognising the digits as
  plate characters (32x32 grey), Adam at 1e-3, every kernel initialised to zero (the threads'
  weight_variable returning tf.zeros): every ReLU outputs 0 and passes no gradient, only the
  class biases can move and the inputs never reach the logits: the loss 2.303 (ln 10) from step
  0 to step 149, no NaN, no training (the error 0.93 before, 0.89 after; the commonest class's
  0.86). Seed 1: 2.303 throughout (the error 0.88 before, 0.89 after; the commonest's 0.875).
  tensorflow/models#1529 (a weight_variable helper initialises the weights to zero instead of
  at random, the random normal commented out); tensorflow/tensorflow#13935 (W should be
  initialised at random, not as zeros: otherwise the network is symmetric). Cured: he_normal
  kernels: the loss 3.07 to 1.91 (the running mean), the error 0.89 to 0.30."""
  init = 'he_normal' if cured else 'zeros'
  return cases.Setup(lprnet_lite(seed, init=init), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.digits_stream(seed, rgb=False), 'classes')


@add('blind39_log_mqcnn_poisson_linear_rate', 'division_or_log', 'mqcnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#590; keras-team/keras#479')
def _(seed, cured=False):
  """An MQ-CNN-lite (a dilated causal Conv1D encoder over 28 days of log1p sales and the day of
  week, an MLP decoder of the next seven days' rates) forecasting retail unit sales, Adam at
  1e-3, trained on the Poisson negative log-likelihood written as the threads write it, rate -
  y log(rate), with a linear output layer (keras-team/keras#590's Dense(1) under a poisson loss):
  some of the first rates are negative, the log of a negative number: the loss NaN from step 0
  to the end; the gradient 1 - y/rate stays finite and pushes the rates around at random: the
  error 113 before, 6.4e6 after (the constant answer's 74). Seed 1: the loss NaN from step 0,
  the error 121 before, 3.6e6 after (the constant's 74). keras-team/keras#590 (a poisson
  objective gives NaN from the first epoch; the log of a zero or negative prediction);
  keras-team/keras#479 (the Poisson loss y_pred - y_true log(y_pred) assumes y_pred > 0: use it
  after a softplus activation). Cured: a softplus output (the rate positive): the loss 2.7 to
  -7.4 (the Poisson NLL without its log(y!) term), the error 105 to 15.6."""
  x, y = store_demand(seed)
  return cases.Setup(mqcnn_lite(seed, activation='softplus' if cured else None),
                     keras.optimizers.Adam(1e-3), handwritten_poisson,
                     stream(x, y, batch=32, seed=seed), 'regression')


@add('blind39_exp_nrms_naive_softmax', 'softmax_overflow', 'nrms_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='mila-iqia/blocks#727; pyg-team/pytorch_geometric#53')
def _(seed, cured=False):
  """An NRMS-lite (a news encoder Dense 64-64 over pre-trained title embeddings, additive
  attention over a user's ten clicked titles, the candidates' dot-product scores) predicting
  which of five shown titles is clicked, Adam at 1e-3, both the attention weights and the click
  probabilities by a hand-written exp(z) / sum(exp(z)): the title embeddings (sums of word
  vectors, norms about 15) give dot-product scores in the hundreds, exp overflows, inf / inf =
  NaN: the outputs NaN before training, the loss NaN from step 0, the weights NaN (the error inf
  before and after; the constant answer's 0.73). Seed 1: the same (the constant's 0.77).
  mila-iqia/blocks#727 (attention energies accumulate enough to make exp overflow, NaN
  propagates through a translation model: stabilise them as the regular softmax does);
  pyg-team/pytorch_geometric#53 (GAT's scatter softmax gives NaN often: exp straight on the
  scores overflows; subtract the max first, fixed). Cured: tf.nn.softmax (the max subtracted):
  the loss 10.6 (the clipped log of the zero probabilities) to 0.88, the error 0.43 to 0.039."""
  x, y = news_clicks(seed)
  return cases.Setup(nrms_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3), SCE(),
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind39_fp16_ani_adam', 'precision', 'ani_lite', doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#11860; keras-team/keras#4032')
def _(seed, cured=False):
  """An ANI-lite (one atomic network, Dense 64 and 32 with ELU and a zero-initialised output,
  over each atom's radial environment vector, the atomic energies summed) fitted to conformer
  energies in Hartree (a spread of 0.05 Ha), Adam at 1e-3 with its defaults, every layer and so
  the weights and Adam's slots in float16 (as after set_floatx('float16')): the small gradients'
  second moments 0.001 g^2 underflow float16 (a tenth to a seventh of the slots read 0), and
  m / (sqrt(v) + eps) with eps 1e-7 is then a step thousands of times the rate: the loss 0.0038
  at step 0, 1.67 at step 1 (the running mean), 1.2 at step 10, 0.17 at step 149, no NaN, no
  training (the error 0.0031 before, 0.0216 after; the constant answer's 0.0031). Seed 1:
  0.0017, 2.7, 1.1, 0.16 (the error 0.0021 before, 0.0137 after; the constant's 0.0020).
  keras-team/keras#11860 (the Adam optimizer does not work with FP16: a NaN loss, no issue in
  FP32 or with SGD); keras-team/keras#4032 (setting the config to float16 alone introduces
  numerical issues: the loss goes to 0 and the accuracy stays at chance). Cured: the same
  network in float32: the loss 0.0038 to 0.00047, the error 0.0031 to 0.00021."""
  x, y = conformers(seed)
  return cases.Setup(ani_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), 'mse', stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind39_input_graph_wavenet_nan_readings', 'bad_input', 'graph_wavenet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Nixtla/neuralforecast#186; WenjieDu/PyPOTS#232')
def _(seed, cured=False):
  """A Graph WaveNet-lite (gated dilated temporal convolutions with graph convolutions over a
  self-adaptive adjacency, skip connections, a per-sensor head) forecasting the next three
  five-minute speeds of ten freeway loop detectors from the last twelve, Adam at 1e-3; 0.2% of
  the readings are NaN (detectors dropping out, left as NaN in the exported table), about eight
  in every batch of 32: the loss NaN from step 0, the weights NaN (the error 0.96 before, inf
  after on clean windows; the constant answer's 0.92). Seed 1: the same (1.0 before; the
  constant's 0.92). Nixtla/neuralforecast#186 (training with NaN values in y: the loss becomes
  NaN and it is hard to notice that the problem is in the data); WenjieDu/PyPOTS#232 (a
  validation set containing missing data gives a NaN loss). Cured: the NaN readings set to 0
  (np.nan_to_num, METR-LA's own convention for a missing reading): the loss 0.93 to 0.15, the
  error 0.96 to 0.069. The measure reads clean windows (eval_data)."""
  x, y = loop_detectors(seed, missing=0.002)
  if cured:
    x = np.nan_to_num(x)
  clean, yc = loop_detectors(seed)
  return cases.Setup(graph_wavenet_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=stream(clean, yc, batch=32, seed=seed))


@add('blind39_transient_dtln_glitch_once', 'transient', 'dtln_lite', doors=('trainer', 'fit'),
     steps=150, citation='YuanGongND/ast#102; AlexeyAB/darknet#5547')
def _(seed, cured=False):
  """A DTLN-lite (layer normalisation, two LSTMs of 64, a sigmoid mask per frequency bin)
  learning the ideal ratio masks of noisy speech-like spectra, Adam at 1e-3, training normally
  (the loss 0.151 at step 0, 0.101 at step 50) when one LSTM output reads NaN once
  (`GlitchOnce`: its 100th training call, step 95 in a plain `fit` after the measure's four
  training-mode passes; a corrupted buffer, not the data, the model or the settings): the loss
  NaN from step 95, the weights NaN (the error 0.157 before, inf after; the constant answer's
  0.109). Seed 1: the same step (0.152 before; the constant's 0.112). YuanGongND/ast#102 (a
  NaN train loss deep into the fourth epoch of a run with the published settings: an overflow
  or underflow that may be hardware related; run the experiment again); AlexeyAB/darknet#5547
  (CUDA errors and a NaN average loss: a hardware problem, gone with one GPU plugged). Cured:
  the same run without the fault: the loss 0.151 to 0.068, the error 0.157 to 0.038."""
  x, y = noisy_spectra(seed)
  return cases.Setup(dtln_lite(seed, fault=None if cured else 100), keras.optimizers.Adam(1e-3),
                     'mse', stream(x, y, batch=32, seed=seed), 'regression')


@add('blind39_mismatch_fgcnn_logits_no_from_logits', 'loss_output_mismatch', 'fgcnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='xiph/LPCNet#97; tensorflow/tensorflow#28718')
def _(seed, cured=False):
  """An FGCNN-lite (field embeddings, convolutions along the fields generating new
  features, an MLP of 128 and 64, one output unit with no activation: the click logit)
  predicting clicks, Adam at 1e-3, binary_crossentropy with from_logits left False: the loss
  reads the logits as probabilities, clips them into [1e-7, 1 - 1e-7] and takes their log, so
  the negative logits and those above 1 give no gradient and the rest a wrong one: the logged
  loss falls (8.8 at step 0, 2.3 at step 10, 0.79 at step 149) but the logits never learn the
  clicks: no NaN, no training (the error 0.488 before, 0.504 after; the constant answer's
  0.496). Seed 1: 5.0, 1.6, 0.72 (the error 0.559 before, 0.50 after; the constant's 0.50).
  xiph/LPCNet#97 (the model's output is logits: set from_logits=True in the loss, or the code
  will clip the value and process it with log); tensorflow/tensorflow#28718 (a head with no
  activation treated as a logit under binary_crossentropy, whose from_logits=False expects a
  probability: add a sigmoid or set from_logits=True). Cured: from_logits=True: the loss 0.695
  to 0.603, the error 0.488 to 0.223."""
  x, y = ad_clicks(seed)
  return cases.Setup(fgcnn_lite(seed), keras.optimizers.Adam(1e-3),
                     keras.losses.BinaryCrossentropy(from_logits=cured),
                     stream(x, y, batch=64, seed=seed), 'binary_logit')


@add('blind39_input_bc_rnn_nan_first_velocity', 'bad_input', 'bc_rnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='nutonomy/nuscenes-devkit#450; pratapbhanu/CRCNN#4')
def _(seed, cured=False):
  """A BC-RNN-lite (a Dense(64) observation encoder, two LSTMs of 64, tanh torques per step)
  cloning a PD expert's reaching demonstrations, Adam at 1e-3, MSE; the joint velocities are
  finite differences of the logged angles, so every demo's first frame holds NaN velocities
  (left in, as the threads' datasets give them), and a tenth of the windows start there, about
  three in every batch of 32: the loss NaN from step 0, the weights NaN (the error 0.156 before,
  inf after on clean windows; the constant answer's 0.143). Seed 1: the same (0.197 before; the
  constant's 0.186). nutonomy/nuscenes-devkit#450 (the velocity or acceleration is NaN at an
  agent's first observation: pad it, interpolate it or discard the sample);
  pratapbhanu/CRCNN#4 (the loss is NaN: incorrect input data might be causing it, verify it).
  Cured: the first frame's velocity set to 0 (padded): the loss 0.161 to 0.056, the error 0.156
  to 0.019. The measure reads clean windows (eval_data)."""
  x, y = reach_demos(seed, nan_first=not cured)
  clean, yc = reach_demos(seed, nan_first=False)
  return cases.Setup(bc_rnn_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=stream(clean, yc, batch=32, seed=seed))
