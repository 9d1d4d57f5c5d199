"""A thirty-sixth blind set of ten sick scenarios (the 'blind36' split), written without reading
the doctor, its policies, forensics or notes, or the other sick files (sick_blind31.py read for
its format only): each is the set-up and symptom of public user reports (cited in its docstring)
on an architecture no other registry entry uses (industrial and applied models: a remaining-
useful-life LSTM, a DeepAnT anomaly forecaster, a DCASE machine-sound autoencoder, a PNA
molecule model, a LightTS PV forecaster, a TimesNet-lite, a CRN speech enhancer, an ESMM
conversion model, a visuomotor spatial-softmax policy and a document-image CNN). Each builder
takes `cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the
sick run). Each was checked with plain Keras `compile` + `fit` only: the sick run shows the
reported symptom (seeds 0 and 1), the cured twin passes runner's "did it train" measure in the
same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND36 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND36.add` with split='blind36'."""
  return BLIND36.add(name, expected, arch, split='blind36', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def turbofan_windows(seed, *, rows=2048, window=30, sensors=14):
  """Run-to-failure engines in miniature (the NASA C-MAPSS layout RUL models read): each engine
  degrades over its life (200 to 300 cycles), its `sensors` drifting with the damage (each
  with its own sign and rate, exponentially towards the end) under noise; the sensors min-max
  scaled to [0, 1] as the threads do, the target the remaining useful life in cycles, capped
  at 125 (the piecewise-linear RUL). (window (rows, window, sensors), RUL (rows, 1))."""
  rng = np.random.RandomState(seed)
  sign = rng.choice([-1.0, 1.0], sensors)
  rate = rng.uniform(0.5, 2.0, sensors)
  xs, ys = [], []
  for _ in range(rows):
    life = rng.randint(200, 300)
    end = rng.randint(window, life)
    t = np.arange(end - window, end) / life
    damage = (np.exp(3 * t) - 1) / (np.e ** 3 - 1)
    xs.append(sign * rate * damage[:, None] + 0.08 * rng.randn(window, sensors))
    ys.append(min(life - end, 125))
  x = np.asarray(xs)
  lo, hi = x.min((0, 1)), x.max((0, 1))
  return ((x - lo) / (hi - lo)).astype(np.float32), np.asarray(ys, np.float32)[:, None]


def rul_lstm_lite(seed, *, window=30, sensors=14):
  """An LSTM RUL estimator (Zheng et al., 2017, long short-term memory network for remaining
  useful life estimation, in miniature): two stacked LSTMs (64, 32), Dense(8, ReLU),
  Dense(1): the remaining cycles."""
  _seed(seed)
  x = keras.Input((window, sensors))
  h = L.LSTM(32)(L.LSTM(64, return_sequences=True)(x))
  return keras.Model(x, L.Dense(1)(L.Dense(8, activation='relu')(h)), name='rul_lstm_lite')


def machine_sensor(seed, *, rows=2048, window=45, channels=3):
  """An industrial sensor stream in miniature (the Yahoo Webscope / NAB layout DeepAnT reads):
  `channels` readings of a machine (a load cycle of period 50, a slower thermal drift, each
  channel its own mix of them) with noise, standardised; the next reading of every channel is
  the target. (window (rows, window, channels), next (rows, channels))."""
  rng = np.random.RandomState(seed)
  n = rows + window + 1
  t = np.arange(n)[:, None]
  mix = rng.uniform(0.5, 1.5, (2, channels))
  raw = (mix[0] * np.sin(2 * np.pi * t / 50 + rng.uniform(0, 6.3, channels)) +
         mix[1] * np.sin(2 * np.pi * t / 400) + 0.15 * rng.randn(n, channels))
  raw = (raw - raw.mean(0)) / raw.std(0)
  starts = rng.randint(0, n - window - 1, rows)
  x = np.stack([raw[s:s + window] for s in starts])
  y = np.stack([raw[s + window] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


def deepant_lite(seed, *, window=45, channels=3):
  """A DeepAnT-lite (Munir et al., 2019, the time-series predictor of the DeepAnT anomaly
  detector): two blocks of Conv1D(32, 3, ReLU) and max pooling by 2, Dense(40, ReLU), Dense
  (`channels`): the next reading (the anomaly score is its distance to the actual one)."""
  _seed(seed)
  x = keras.Input((window, channels))
  h = L.MaxPooling1D(2)(L.Conv1D(32, 3, activation='relu')(x))
  h = L.MaxPooling1D(2)(L.Conv1D(32, 3, activation='relu')(h))
  h = L.Dense(40, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(channels)(h), name='deepant_lite')


def machine_sound(seed, *, rows=2048, frames=5, mels=32, machines=4):
  """Machine sounds in miniature (the DCASE 2020 task 2 layout, normal operation only): each
  clip a fan or pump of one of `machines` machine ids, its log-mel frames (the machine's own
  harmonic spectrum, a slow rotation-speed wobble, noise) standardised per band; five
  consecutive frames concatenated (5 x `mels`), as the baseline feeds them. The autoencoder's
  target is its input. (frames (rows, frames * mels), the same)."""
  rng = np.random.RandomState(seed)
  base = rng.randn(machines, mels) * 1.5
  harm = rng.randn(machines, mels)
  ids = rng.randint(0, machines, rows)
  speed = rng.uniform(-1, 1, rows)
  x = []
  for f in range(frames):
    wobble = np.sin(speed * 3 + f * 0.8)[:, None]
    x.append(base[ids] + wobble * harm[ids] + 0.3 * rng.randn(rows, mels))
  x = np.concatenate(x, 1)
  x = (x - x.mean(0)) / x.std(0)
  return x.astype(np.float32), x.astype(np.float32)


def dcase_ae_lite(seed, *, dims=160, stddev=None):
  """The DCASE 2020 task 2 baseline autoencoder in miniature (Koizumi et al., 2020): four
  Dense(64) + BatchNormalization + ReLU, a bottleneck Dense(8) + BN + ReLU, four Dense(64) + BN
  + ReLU, Dense(`dims`): the reconstruction (the anomaly score its error). Every kernel
  initialised RandomNormal(stddev=`stddev`) (None: Keras's glorot_uniform)."""
  _seed(seed)

  def init():
    return ('glorot_uniform' if stddev is None else
            keras.initializers.RandomNormal(stddev=stddev))

  x = keras.Input((dims,))
  h = x
  for units in (64, 64, 64, 64, 8, 64, 64, 64, 64):
    h = L.Dense(units, kernel_initializer=init())(h)
    h = L.ReLU()(L.BatchNormalization()(h))
  return keras.Model(x, L.Dense(dims, kernel_initializer=init())(h), name='dcase_ae_lite')


def molecules(seed, *, rows=2048, atoms=12, types=5):
  """Small molecules in miniature (the ZINC / ESOL layout PNA reads): each a tree of 4 to
  `atoms` heavy atoms (each atom bonded to an earlier one; up to 4 bonds an atom) with a ring
  closed in 40% of them, the atom types one-hot (C, N, O, S, halogen); the property (a
  solubility-like score, standardised) a sum of atom contributions, of bonded pairs' and of
  the branching (an atom's degree). (((types (rows, atoms, types), adjacency (rows, atoms,
  atoms)), property (rows, 1)), padding atoms all zero."""
  rng = np.random.RandomState(seed)
  contrib = rng.randn(types)
  pair = rng.randn(types, types) * 0.5
  pair = pair + pair.T
  feats = np.zeros((rows, atoms, types), np.float32)
  adj = np.zeros((rows, atoms, atoms), np.float32)
  y = np.zeros(rows)
  for i in range(rows):
    n = rng.randint(4, atoms + 1)
    kind = rng.choice(types, n, p=[0.55, 0.15, 0.15, 0.05, 0.10])
    feats[i, np.arange(n), kind] = 1
    for a in range(1, n):
      free = [b for b in range(a) if adj[i, b].sum() < 4]
      b = rng.choice(free)
      adj[i, a, b] = adj[i, b, a] = 1
    if rng.rand() < 0.4 and n > 4:
      a, b = 0, n - 1
      adj[i, a, b] = adj[i, b, a] = 1
    deg = adj[i].sum(1)[:n]
    rows_, cols = np.nonzero(np.triu(adj[i]))
    y[i] = (contrib[kind].sum() + pair[kind[rows_], kind[cols]].sum() +
            0.5 * np.sum(np.maximum(deg - 2, 0)))
  y = (y - y.mean()) / y.std()
  return (feats, adj), y.astype(np.float32)[:, None]


class PnaAggregate(L.Layer):
  """PNA's aggregation (Corso et al., 2020): over each atom's neighbours the mean, max, min and
  standard deviation, each scaled by identity and by the amplification log(d + 1) / delta (d
  the degree, delta the mean log degree of training, about 1); the standard deviation written
  as the threads write it, sqrt(relu(E[x^2] - E[x]^2)) (`eps` added under the root: PyG's
  1e-5, the remedy; 0: none). Each mean divides by max(degree, 1)."""

  def __init__(self, eps=0.0, **kwargs):
    super().__init__(**kwargs)
    self.eps = eps

  def call(self, inputs):
    h, adj = inputs
    h, adj = tf.convert_to_tensor(h), tf.convert_to_tensor(adj)
    deg = tf.reduce_sum(adj, -1, keepdims=True)
    safe = tf.maximum(deg, 1.0)
    mean = tf.matmul(adj, h) / safe
    sq = tf.matmul(adj, h * h) / safe
    std = tf.sqrt(tf.nn.relu(sq - mean * mean) + self.eps)
    m = adj[..., None]
    big = 1e9 * (1.0 - m)
    mx = tf.reduce_max(h[:, None] * m - big, 2) * tf.minimum(deg, 1.0)
    mn = tf.reduce_min(h[:, None] * m + big, 2) * tf.minimum(deg, 1.0)
    agg = tf.concat([mean, mx, mn, std], -1)
    amp = tf.math.log(deg + 1.0) / 1.0
    return tf.concat([agg, agg * amp], -1)


def pna_lite(seed, *, atoms=12, types=5, dim=32, eps=0.0):
  """A PNA-lite (principal neighbourhood aggregation): an atom embedding Dense(`dim`), two
  message-passing layers (`PnaAggregate`, then Dense(`dim`, ReLU) of the atom's state and the
  eight aggregates, a residual), a sum readout, Dense(1): the property."""
  _seed(seed)
  f = keras.Input((atoms, types))
  adj = keras.Input((atoms, atoms))
  node = keras.ops.max(f, -1, keepdims=True)
  h = L.Dense(dim)(f) * node
  for _ in range(2):
    agg = PnaAggregate(eps)([h, adj])
    h = h + L.Dense(dim, activation='relu')(L.Concatenate()([h, agg])) * node
  g = keras.ops.sum(h, 1)
  return keras.Model([f, adj], L.Dense(1)(g), name='pna_lite')

def pv_power(seed, *, rows=2048, window=48, capacity=5.0):
  """Rooftop PV output in miniature (the solar-forecasting layout): hourly AC power of a
  `capacity` kW system, a clear-sky bell between sunrise and sunset (day length varying with
  the season), dimmed by day-to-day cloudiness and hourly cloud noise; exactly 0 at night. The
  inputs the last `window` hours of power divided by the capacity, the target the next hour's
  power in kW (0 at night). (window (rows, window, 1), next (rows, 1))."""
  rng = np.random.RandomState(seed)
  days = rows // 24 + window // 24 + 3
  hours = np.arange(days * 24)
  day = hours // 24
  length = 12 + 3 * np.sin(2 * np.pi * (day + rng.randint(365)) / 365)
  rise = 12 - length / 2
  phase = (hours % 24 - rise) / length
  bell = np.where((phase > 0) & (phase < 1), np.sin(np.pi * np.clip(phase, 0, 1)) ** 1.5, 0.0)
  cloud = np.clip(rng.beta(4, 1.5, days)[day] + 0.15 * rng.randn(len(hours)), 0.05, 1)
  power = capacity * bell * cloud
  starts = rng.randint(0, len(hours) - window - 1, rows)
  x = np.stack([power[s:s + window] / capacity for s in starts])[..., None]
  y = np.asarray([power[s + window] for s in starts])[:, None]
  return x.astype(np.float32), y.astype(np.float32)


def lightts_lite(seed, *, window=48, chunk=6):
  """A LightTS-lite (Zhang et al., 2022, light sampling-oriented MLP forecasting): the window
  sampled two ways, continuously (chunks of `chunk` consecutive hours) and by interval (every
  (window / `chunk`)-th hour), each through an IEBlock (a ReLU Dense(32) within each chunk, a
  linear Dense across the chunks, a Dense(8) projection), both concatenated, Dense(1): the
  next hour's power in kW."""
  _seed(seed)
  x = keras.Input((window, 1))
  n = window // chunk
  cont = L.Reshape((n, chunk))(x)
  inter = keras.ops.transpose(L.Reshape((chunk, n))(x), [0, 2, 1])

  def ie_block(h):
    h = L.Dense(32, activation='relu')(h)  # (batch, chunks, 32)
    h = keras.ops.transpose(L.Dense(h.shape[1])(keras.ops.transpose(h, [0, 2, 1])), [0, 2, 1])
    return L.Flatten()(L.Dense(8)(h))

  h = L.Concatenate()([ie_block(cont), ie_block(inter)])
  return keras.Model(x, L.Dense(1)(h), name='lightts_lite')



def transformer_load(seed, *, rows=2048, window=336, horizon=12, channels=7):
  """Electricity transformer records in miniature (the ETTh layout TimesNet is benchmarked on):
  seven hourly loads and the oil temperature (the last channel), a daily cycle (period 24) and
  a half-daily one in every channel (each its own phase and mix), the oil temperature lagging
  the loads, plus noise; every channel standardised (as the benchmark's scaler does). The
  window of `window` hours in, the next `horizon` hours of the oil temperature out.
  (window (rows, window, channels), next (rows, horizon))."""
  rng = np.random.RandomState(seed)
  n = rows + window + horizon
  t = np.arange(n)[:, None]
  ph = rng.uniform(0, 6.3, channels)
  raw = (rng.uniform(1, 2, channels) * np.sin(2 * np.pi * t / 24 + ph) +
         rng.uniform(0.2, 0.6, channels) * np.sin(2 * np.pi * t / 12 + 2 * ph) +
         0.2 * rng.randn(n, channels))
  raw[:, -1] = 0.7 * np.roll(raw[:, :-1].mean(1), 3) * 3 + 0.1 * rng.randn(n)
  raw = (raw - raw.mean(0)) / raw.std(0)
  starts = rng.randint(0, n - window - horizon, rows)
  x = np.stack([raw[s:s + window] for s in starts])
  y = np.stack([raw[s + window:s + window + horizon, -1] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


class TimesBlock(L.Layer):
  """TimesNet's block (Wu et al., 2023): the FFT of the (embedded) series, the `k` strongest
  frequencies of the batch (mean amplitude over batch and channels) give `k` periods; the
  series folded into 2-D (cycles x period) for each, an inception-like Conv2D (3x3, GELU) over
  it, unfolded; the `k` results aggregated with weights from each sample's amplitudes at those
  frequencies, written as the thread's own softmax (`naive`: exp(a) / sum exp(a); otherwise
  tf.nn.softmax), plus the input (a residual)."""

  def __init__(self, k=2, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.k, self.naive = k, naive

  def build(self, shape):
    self.conv = L.Conv2D(shape[-1], 3, padding='same', activation='gelu')

  def call(self, x):
    x = tf.convert_to_tensor(x)
    t, d = x.shape[1], x.shape[2]
    amp = tf.abs(tf.signal.rfft(tf.transpose(x, [0, 2, 1])))  # (batch, d, freqs)
    amp = tf.reduce_mean(amp, 1)  # (batch, freqs)
    mask = tf.concat([[0.0], tf.ones([amp.shape[-1] - 1])], 0)
    top = tf.math.top_k(tf.reduce_mean(tf.stop_gradient(amp), 0) * mask, self.k).indices
    outs = []
    for i in range(self.k):
      period = t // tf.maximum(top[i], 1)
      cycles = -(-t // period)
      pad = cycles * period - t
      xp = tf.concat([x, tf.zeros([tf.shape(x)[0], pad, d])], 1)
      h = self.conv(tf.reshape(xp, [tf.shape(x)[0], cycles, period, d]))
      outs.append(tf.reshape(h, [tf.shape(x)[0], -1, d])[:, :t])
    a = tf.gather(amp, top, axis=1)  # (batch, k)
    if self.naive:
      e = tf.exp(a)
      w = e / tf.reduce_sum(e, -1, keepdims=True)
    else:
      w = tf.nn.softmax(a, -1)
    return x + tf.einsum('bk,kbtd->btd', w, tf.stack(outs))


def timesnet_lite(seed, *, window=336, horizon=12, channels=7, dim=16, naive=True):
  """A TimesNet-lite (Wu et al., 2023, temporal 2-D variation modelling): a Dense(`dim`)
  embedding of the channels, two `TimesBlock`s (k=2) each followed by layer normalisation, a
  linear head over the flattened window: the next `horizon` hours of the oil temperature."""
  _seed(seed)
  x = keras.Input((window, channels))
  h = L.Dense(dim)(x)
  for _ in range(2):
    h = L.LayerNormalization()(TimesBlock(naive=naive)(h))
  return keras.Model(x, L.Dense(horizon)(L.Flatten()(h)), name='timesnet_lite')


def noisy_speech(seed, *, rows=1024, frames=32, bins=64):
  """Speech enhancement in miniature (the VoiceBank-DEMAND layout CRN reads): magnitude
  spectrogram frames of a voiced speaker (a harmonic comb on a gliding pitch, formant-shaped,
  switching on and off by syllables) in stationary coloured noise and a babble of random
  partials (5 to 15 dB below); the magnitudes compressed by log1p as the threads feed them.
  (noisy (rows, frames, bins, 1), clean (rows, frames, bins, 1))."""
  rng = np.random.RandomState(seed)
  f = np.arange(bins)[None, :]
  xs, ys = [], []
  for _ in range(rows):
    f0 = rng.uniform(3, 7) + np.cumsum(rng.randn(frames) * 0.05)[:, None]
    comb = np.exp(-0.5 * ((np.mod(f, f0) - 0) / 0.6) ** 2) + np.exp(
        -0.5 * ((np.mod(f, f0) - f0) / 0.6) ** 2)
    env = np.exp(-f / rng.uniform(20, 40)) * (
        1 + np.exp(-0.5 * ((f - rng.uniform(10, 30)) / 4) ** 2))
    on = (np.sin(np.arange(frames) / rng.uniform(2, 4) + rng.uniform(0, 6)) > -0.3)[:, None]
    clean = 8 * comb * env * on
    noise = rng.uniform(0.5, 2) * np.exp(-f / rng.uniform(15, 60)) * rng.rayleigh(1, (frames, bins))
    babble = np.zeros((frames, bins))
    babble[:, rng.randint(0, bins, 6)] = rng.uniform(0.5, 2, 6)
    xs.append(np.log1p(clean + noise + babble))
    ys.append(np.log1p(clean))
  return (np.asarray(xs, np.float32)[..., None], np.asarray(ys, np.float32)[..., None])


def crn_lite(seed, *, frames=32, bins=64, dtype='float16'):
  """A CRN-lite (Tan & Wang, 2018, a convolutional recurrent network for real-time speech
  enhancement): an encoder of three Conv2D (3x3 over time x frequency, stride 2 along the
  frequency, 8, 16 and 32 channels, ELU), an LSTM of 64 over the frames (the encoder's
  frequency x channel features), a Dense back to them, a decoder of three Conv2DTranspose
  mirroring the encoder with skip connections (concatenated), a softplus output: the clean
  log-magnitude spectrogram. Every layer in `dtype` ('float16': float16 weights, compute and
  optimizer state, as after keras.backend.set_floatx('float16'))."""
  _seed(seed)
  x = keras.Input((frames, bins, 1))
  h, skips = x, []
  for ch in (8, 16, 32):
    h = L.Conv2D(ch, 3, strides=(1, 2), padding='same', activation='elu', dtype=dtype)(h)
    skips.append(h)
  r = L.Reshape((frames, (bins // 8) * 32), dtype=dtype)(h)
  r = L.LSTM(64, return_sequences=True, dtype=dtype)(r)
  h = L.Reshape((frames, bins // 8, 32), dtype=dtype)(L.Dense((bins // 8) * 32, dtype=dtype)(r))
  for ch, skip in zip((16, 8, 1), reversed(skips)):
    h = L.Concatenate(dtype=dtype)([h, skip])
    h = L.Conv2DTranspose(ch, 3, strides=(1, 2), padding='same',
                          activation='elu' if ch > 1 else 'softplus', dtype=dtype)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(h), name='crn_lite')


def impressions(seed, *, rows=8192, fields=6, vocab=30, counts=3):
  """Impression logs in miniature (the Taobao / Ali-CCP layout ESMM reads): `fields`
  categorical fields (user, item, shop ids, ids 0..`vocab`-1) and `counts` behaviour counts
  (the user's past views, clicks and purchases in the item's category, Poisson, many of them
  0); a click depends on the fields' propensities and the counts, a conversion (only after a
  click) on other propensities. The counts given as log(count), as the threads compute them
  (`log1p`: log(1 + count); otherwise np.log: a zero count is -inf). ((ids (rows, fields),
  counts (rows, counts)), (clicked, clicked and converted) (rows, 2))."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  ctr = rng.randn(fields, vocab)
  cvr = rng.randn(fields, vocab)
  lam = rng.uniform(0.5, 4, counts)
  c = rng.poisson(lam, (rows, counts)).astype(np.float64)
  w = rng.randn(counts)
  z = ctr[np.arange(fields), ids].sum(1) + (np.log1p(c) - np.log1p(c).mean(0)) @ w * 1.5
  click = rng.rand(rows) < 1 / (1 + np.exp(-(z / z.std() * 2.5)))
  v = cvr[np.arange(fields), ids].sum(1) + np.log1p(c[:, -1])
  conv = click & (rng.rand(rows) < 1 / (1 + np.exp(-(v / v.std() * 2.5 - 0.5))))
  return ids.astype(np.int32), c, np.stack([click, conv], 1).astype(np.float32)


def esmm_lite(seed, *, fields=6, vocab=30, counts=3, dim=8):
  """An ESMM-lite (Ma et al., 2018, entire space multi-task model): shared field embeddings of
  `dim` and the counts concatenated, a CTR tower and a CVR tower (Dense(64), Dense(32), each
  with a PReLU as Alibaba's DIN-family models use, Dense(1, sigmoid) each); outputs pCTR and
  pCTCVR = pCTR x pCVR (both supervised on the whole impression space)."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  num = keras.Input((counts,))
  offs = tf.constant(np.arange(fields) * vocab, tf.int32)
  e = L.Flatten()(L.Embedding(fields * vocab, dim)(ids + offs))
  h = L.Concatenate()([e, num])

  def tower(h):
    for units in (64, 32):
      h = L.PReLU()(L.Dense(units)(h))
    return L.Dense(1, activation='sigmoid')(h)

  ctr, cvr = tower(h), tower(h)
  return keras.Model([ids, num], L.Concatenate()([ctr, ctr * cvr]), name='esmm_lite')


def reaching(seed, *, rows=2048, size=24):
  """Visuomotor reaching in miniature (the Levine et al. PR2 layout): a camera image of
  `size` x `size` (two channels: the target object a bright blob, the gripper a dimmer one,
  on a textured table) and the arm's joint state (the gripper's position); the action the
  expert's velocity towards the object (proportional to the offset, saturating). ((image
  (rows, size, size, 2), state (rows, 2)), action (rows, 2))."""
  rng = np.random.RandomState(seed)
  g = np.arange(size)
  obj = rng.uniform(3, size - 3, (rows, 2))
  ee = rng.uniform(3, size - 3, (rows, 2))

  def blob(p, width):
    return np.exp(-(((g[None, :, None] - p[:, 0, None, None]) ** 2 +
                     (g[None, None, :] - p[:, 1, None, None]) ** 2) / (2 * width ** 2)))

  table = 0.2 * rng.rand(rows, size, size)
  img = np.stack([blob(obj, 1.5) + table, 0.6 * blob(ee, 2.0) + table], -1)
  state = (ee / size - 0.5) * 2
  action = np.tanh((obj - ee) / 8.0)
  return (img.astype(np.float32), state.astype(np.float32)), action.astype(np.float32)


class SpatialSoftmax(L.Layer):
  """The spatial softmax of deep visuomotor policies: per feature map a softmax over the
  pixels, and the expected image coordinates under it (two per map, in [-1, 1])."""

  def call(self, x):
    x = tf.convert_to_tensor(x)
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    p = tf.nn.softmax(tf.reshape(tf.transpose(x, [0, 3, 1, 2]), [-1, c, h * w]), -1)
    ys, xs = tf.meshgrid(tf.linspace(-1.0, 1.0, h), tf.linspace(-1.0, 1.0, w), indexing='ij')
    ex = tf.reduce_sum(p * tf.reshape(xs, [1, 1, -1]), -1)
    ey = tf.reduce_sum(p * tf.reshape(ys, [1, 1, -1]), -1)
    return tf.concat([ex, ey], -1)


class FlipOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one element of the activations passing through
  the layer reads NaN once (a flipped bit in a buffer, a misfiring kernel)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=3, value=np.nan, **kwargs)


def visuomotor_lite(seed, *, size=24, fault=None):
  """A deep visuomotor policy in miniature (Levine et al., 2016, end-to-end training of deep
  visuomotor policies): three 3x3 convolutions (16 maps, ReLU), `SpatialSoftmax` (the maps'
  expected feature points), the points concatenated with the joint state, Dense(64, ReLU)
  twice, a `FlipOnce` (at its `fault`-th training call; None: never), Dense(2): the commanded
  velocities."""
  _seed(seed)
  img = keras.Input((size, size, 2))
  state = keras.Input((2,))
  h = img
  for _ in range(3):
    h = L.Conv2D(16, 3, padding='same', activation='relu')(h)
  h = L.Concatenate()([SpatialSoftmax()(h), state])
  h = L.Dense(64, activation='relu')(L.Dense(64, activation='relu')(h))
  return keras.Model([img, state], L.Dense(2)(FlipOnce(fault)(h)), name='visuomotor_lite')


def doc_cnn_lite(seed, *, size=32, classes=10, activation=None):
  """A document-image CNN in miniature (Kang et al., 2014, convolutional neural networks for
  document image classification): two convolutions (5x5, 20 and 50 maps, ReLU), each max
  pooled by 2, Dense(128, ReLU), dropout 0.5, Dense(`classes`, `activation`) (None: the
  logits)."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.MaxPooling2D(2)(L.Conv2D(20, 5, activation='relu')(x))
  h = L.MaxPooling2D(2)(L.Conv2D(50, 5, activation='relu')(h))
  h = L.Dropout(0.5)(L.Dense(128, activation='relu')(L.Flatten()(h)))
  return keras.Model(x, L.Dense(classes, activation=activation)(h), name='doc_cnn_lite')


# --- The scenarios, in `cases.CAUSES` order. --------------------------------------------------


@add('blind36_explode_rul_lstm_sgd_unclipped', 'exploding_gradients', 'rul_lstm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='austineaero/Remaining-Useful-Life-RUL-Estimation#19; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """An LSTM RUL estimator (two stacked LSTMs of 64 and 32, a small ReLU head) predicting the
  remaining useful life of turbofan engines from 30 cycles of 14 min-max scaled sensors (the
  target in cycles, capped at 125, as C-MAPSS is trained), MSE, SGD with momentum 0.9 at 0.02
  and no gradient clipping: the first errors are about 90 cycles, the recurrent gradients are
  huge, the third step throws the weights (the loss 8714 at step 0, 5771 at step 1, 2.9e6 at
  step 2, 6e4 at step 5), the LSTMs and the ReLU head end saturated and the run answers a
  constant: 1812 at step 149, no training (the error 9611 before, 1624 after; the constant
  answer's 1623). Seed 1: 9736, 8623, 9.7e5 at step 2 (10437 before, 1485 after; the
  constant's 1461). austineaero/Remaining-Useful-Life-RUL-Estimation#19 (an LSTM RUL model's
  loss blows up after the first epoch: exploding gradients; clip the gradients, clipvalue=1.0);
  Marcovaldong/lstmp.pytorch#2 (an LSTM's loss goes to NaN after a number of iterations: the
  gradient explodes; clipping the gradients to a max norm of 1.0 trains on long sequences).
  Cured: clipnorm=1.0 at the same rate: the loss 8714 to 65, the error 9611 to 95."""
  x, y = turbofan_windows(seed)
  return cases.Setup(rul_lstm_lite(seed),
                     keras.optimizers.SGD(0.02, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind36_lr_deepant_sgd_high', 'learning_rate', 'deepant_lite', doors=('trainer', 'fit'),
     steps=150, citation='NLeSC/mcfly#43; Lasagne/Lasagne#765')
def _(seed, cured=False):
  """A DeepAnT-lite (two blocks of Conv1D and max pooling, a ReLU Dense, a linear output)
  forecasting the next reading of three standardised machine sensors from a window of 45 (the
  predictor of the DeepAnT anomaly detector), MSE, SGD with momentum 0.9 at 0.3: the steps
  overshoot, the loss wanders (1.12 at step 0, 0.92, 0.76, 1.23 at step 3, 0.73 at step 10)
  and blows up: NaN from step 15, the weights NaN (the error 1.00 before, inf after; the
  constant answer's 0.94). Seed 1: 0.67, 1.02, 0.55, 3.74 at step 5, no NaN but no training:
  1.02 at step 149 (the error 1.17 before, 1.13 after; the constant's 1.04). NLeSC/mcfly#43
  (sensor time-series CNNs that stop learning, a stable loss or NaN weights: the models that do
  not learn are those with a learning rate above 0.03); Lasagne/Lasagne#765 (NaN with Nesterov
  momentum and high learning rates). Cured: the rate lowered to 0.03 (the same momentum): the
  loss 1.12 to 0.022, the error 1.00 to 0.022 (seed 1: 1.17 to 0.059)."""
  x, y = machine_sensor(seed)
  return cases.Setup(deepant_lite(seed), keras.optimizers.SGD(0.03 if cured else 0.3, momentum=0.9),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind36_init_dcase_ae_normal_stddev1', 'initialisation', 'dcase_ae_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='VinceShieh/spark-ffm#12; joe-siyuan-qiao/WeightStandardization#8')
def _(seed, cured=False):
  """The DCASE 2020 machine-sound baseline autoencoder in miniature (nine Dense layers of 64 and a
  bottleneck of 8, each with BN and ReLU, a linear reconstruction of 160) on five concatenated
  standardised log-mel frames of fans and pumps, MSE, Adam at 1e-3, every kernel initialised
  RandomNormal(stddev=1.0) (the threads' wide normal initialisation) in place of a fan-in
  scaled one: BN keeps the hidden layers in range, but the output layer's 64-input sums come
  out about six times the data's spread (a loss of 33 against the data's variance of 1) and
  Adam's steps of 1e-3 cannot shrink weights of size 1 in 150 steps: the loss 32.8 at step 0,
  6.74 at step 149, no NaN, no training (the error 7.3e14 before (BN's start statistics), 253
  after in inference mode; 33.4 and 6.70 in training mode; the constant answer's 1.00). Seed
  1: 32.9 to 6.05 (33.0 and 6.54 in training mode; the constant's 1.00).
  VinceShieh/spark-ffm#12 (the weights initialised with too wide a normal make the
  activations' spread huge and the loss NaN; the distribution must be narrowed to about
  sqrt(1/fan-in)); joe-siyuan-qiao/WeightStandardization#8 (the loss explodes to NaN even at a
  learning rate of 0: the initialisation was the cause). Cured: Keras's glorot_uniform: the
  loss 1.32 to 0.20, the error 1.30 to 0.17 in training mode (1.00 to 0.40 in inference
  mode)."""
  x, y = machine_sound(seed)
  return cases.Setup(dcase_ae_lite(seed, stddev=None if cured else 1.0),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind36_sqrt_pna_std_aggregator', 'division_or_log', 'pna_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#2960; pytorch/pytorch#4320')
def _(seed, cured=False):
  """A PNA-lite (an atom embedding, two layers of principal neighbourhood aggregation (mean, max,
  min and standard deviation of the neighbours, identity and amplification scalers) with
  residuals, a sum readout, a linear output) regressing a solubility-like property of small
  molecules (up to 12 heavy atoms, standardised target), MSE, Adam at 1e-3, the standard
  deviation aggregator written sqrt(relu(E[x^2] - E[x]^2)) with nothing under the root: an
  atom with one neighbour (every chain end) has a variance of exactly 0, the gradient of the
  root there is inf and inf * 0 is NaN: the loss 20.7 at step 0, NaN from step 1, the weights
  NaN (the error 19.5 before, inf after; the constant answer's 0.88). Seed 1: 13.9, NaN from
  step 1 (12.3 before; the constant's 0.94). keras-team/keras#2960 (K.std is sqrt(var) and
  its gradient is inf where the variance is 0; sqrt(var + eps) wanted);
  pytorch/pytorch#4320 (the standard deviation gives NaN gradients for constant inputs). Cured:
  1e-5 under the root (PyG's PNA): the loss 20.8 to 0.73, the error 19.7 to 0.63."""
  x, y = molecules(seed)
  return cases.Setup(pna_lite(seed, eps=1e-5 if cured else 0.0), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind36_div_lightts_mape_night_zeros', 'division_or_log', 'lightts_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='unit8co/darts#2517; SolarArbiter/solarforecastarbiter-core#732')
def _(seed, cured=False):
  """A LightTS-lite (the window sampled continuously and by interval, an MLP IEBlock on each,
  a linear output) forecasting the next hour's output of a 5 kW rooftop PV system from 48
  hours of its output (divided by the capacity), Adam at 1e-3, the loss the mean absolute
  percentage error written by hand, mean(|y - p| / |y|): the target is exactly 0 every night,
  so the first batch divides by zero: the loss inf at step 0 (|y - p| / 0), NaN from step 1,
  the weights NaN (the error 2.90 before, inf after; the constant answer's 2.09). Seed 1: the
  same (3.27 before; the constant's 1.87). unit8co/darts#2517 (a forecasting model trained with
  a MAPE loss predicts NaN; no issue with MSE); SolarArbiter/solarforecastarbiter-core#732 (PV
  power reported as 0 makes MAPE inf). Cured: MSE (as the first thread does): the loss 2.59 to
  0.18, the error 2.90 to 0.20."""
  x, y = pv_power(seed)
  return cases.Setup(lightts_lite(seed), keras.optimizers.Adam(1e-3),
                     'mse' if cured else field.relative_error,
                     data.stream(x, y, batch=32, seed=seed), 'regression')

@add('blind36_exp_timesnet_amplitude_softmax', 'softmax_overflow', 'timesnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='thuml/Time-Series-Library#367; pyg-team/pytorch_geometric#53')
def _(seed, cured=False):
  """A TimesNet-lite (a channel embedding of 16, two TimesBlocks: the strongest two FFT
  frequencies fold the series into 2-D for a 3x3 convolution, the branches weighted by each
  sample's FFT amplitudes through a softmax; a linear head) forecasting the next 12 hours of an
  electricity transformer's oil temperature from a look-back of 336 hours of seven standardised
  channels, MSE, Adam at 1e-3, the adaptive aggregation's softmax written exp(a) / sum exp(a)
  as the thread's own: the FFT amplitudes of the standardised, embedded window reach about 170
  at the daily frequency (the series is standardised, its spectrum is not), exp overflows
  above 88.7 and inf / inf = NaN: the outputs NaN before training, the loss NaN from step 0
  (the error inf before and after; the constant answer's 1.00). Seed 1: the same (the
  constant's 1.00). thuml/Time-Series-Library#367 (TimesNet's softmax over the frequency
  amplitudes can overflow: amplitudes in the hundreds even after normalising the data;
  normalise them or stabilise the softmax); pyg-team/pytorch_geometric#53 (a softmax that
  applies exp directly overflows and gives NaN; subtract the max first, fixed). Cured:
  tf.nn.softmax (the max subtracted first): the loss 2.19 to 0.040, the error 2.20 to 0.034."""
  x, y = transformer_load(seed)
  return cases.Setup(timesnet_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind36_fp16_crn_adam_epsilon', 'precision', 'crn_lite', doors=('trainer', 'fit'),
     steps=150, citation='soumith/cudnn.torch#377; afiaka87/glide-finetune#5')
def _(seed, cured=False):
  """A CRN-lite speech enhancer (a strided convolutional encoder, an LSTM over the frames, a
  transposed-convolution decoder with skips, a softplus output) mapping noisy log1p magnitude
  spectrograms (32 frames x 64 bins) to the clean ones, MSE, Adam at 1e-3 (epsilon 1e-7), every
  layer and so every weight and Adam slot in float16 (as after set_floatx('float16')): the
  squared gradients below float16's smallest number (6e-8) are 0 in Adam's second moment, the
  epsilon is 1.2e-7 in float16, and the steps m / (sqrt(v) + eps) are thousands of times the
  rate: the loss 0.449 at step 0, 8.3e5 at step 1, NaN from step 2, the weights NaN (the error
  0.448 before, inf after; the constant answer's 0.293). Seed 1: 0.478, 1.2e6, NaN from step 2
  (0.473 before; the constant's 0.277). soumith/cudnn.torch#377 (a NaN loss training in half
  precision, fine in float32: Adam's epsilon of 1e-8 rounds to zero in float16);
  afiaka87/glide-finetune#5 (NaN after the first iteration in half precision: Adam breaks in
  float16, a division by zero). Cured: the same network in float32: the loss 0.530 to 0.076,
  the error 0.520 to 0.071 (in float16 with epsilon 1e-4, the threads' other remedy, it trains
  too: a mean loss of 0.136 over the 150 steps)."""
  x, y = noisy_speech(seed)
  return cases.Setup(crn_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=16, seed=seed),
                     'regression')


@add('blind36_input_esmm_log_zero_counts', 'bad_input', 'esmm_lite', doors=('trainer', 'fit'),
     steps=150, citation='xuannianz/keras-ctpn#1; nosuggest/deep_learning#1')
def _(seed, cured=False):
  """An ESMM-lite (shared field embeddings and three behaviour counts, a CTR and a CVR tower of
  Dense + PReLU, outputs pCTR and pCTCVR = pCTR x pCVR) trained on Taobao-like impression logs,
  binary cross-entropy on both outputs, Adam at 1e-3; the behaviour counts fed as np.log(count),
  so a zero count (37% of the rows hold one; 32% at seed 1) is -inf in the data: the first
  batch gives inf - inf = NaN in the towers, a NaN loss and NaN gradients: the loss NaN from
  step 0, the weights NaN (the error 0.443 before, inf after; the constant answer's 0.447).
  Seed 1: the same (0.324 before; the constant's 0.289). xuannianz/keras-ctpn#1 ("divide by
  zero encountered in log" in the data generator, then the loss is NaN: a zero in the data
  log-transformed); nosuggest/deep_learning#1 (a CTR model on sparse features with many zeros:
  the training loss is NaN from the start). Cured: log1p of the counts (log(1 + count)): the
  loss 0.635 to 0.537, the error 0.443 to 0.207. The measure reads the log1p data (eval_data)
  for both runs."""
  ids, counts, y = impressions(seed)
  with np.errstate(divide='ignore'):
    raw = np.log(counts).astype(np.float32)
  clean = np.log1p(counts).astype(np.float32)
  return cases.Setup(esmm_lite(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream((ids, clean if cured else raw), y, batch=64, seed=seed),
                     'binary_prob', eval_data=data.stream((ids, clean), y, batch=64, seed=seed))


@add('blind36_transient_visuomotor_bitflip_once', 'transient', 'visuomotor_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; mlfoundations/open_lm#7')
def _(seed, cured=False):
  """A deep visuomotor policy in miniature (three convolutions, a spatial softmax turning the
  maps into expected feature points, the points and the joint state through two ReLU Dense
  layers, two commanded velocities) cloning an expert's reaching from 24x24 two-channel camera
  images, MSE, Adam at 1e-3, training normally (the loss 0.326 at step 0, 0.026 at step 50)
  when one element of the policy's hidden features reads NaN once (`FlipOnce`: its 90th
  training call, step 85 in a plain `fit` after the measure's four training-mode passes; a
  flipped bit in a buffer, not the data, the model or the settings): the loss NaN from step 85,
  the weights NaN (the error 0.373 before, inf after; the constant answer's 0.359). Seed 1:
  the same step (0.390, 0.032 at step 50; 0.367 before; the constant's 0.385).
  Rikorose/DeepFilterNet#30 (NaN losses in rare circumstances after a few epochs, cause
  unknown; resuming from the last checkpoint works); mlfoundations/open_lm#7 (a loss gone NaN
  from bad nodes: stop, free the resources and do not checkpoint the NaN state, restart).
  Cured: the same run without the fault: the loss 0.326 to 0.0020, the error 0.373 to
  0.0023."""
  x, y = reaching(seed)
  return cases.Setup(visuomotor_lite(seed, fault=None if cured else 90),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind36_mismatch_doc_cnn_logits_as_probs', 'loss_output_mismatch', 'doc_cnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='xiph/LPCNet#97; keras-team/keras#6587')
def _(seed, cured=False):
  """A document-image CNN in miniature (two convolutions of 20 and 50 maps with max pooling, a
  ReLU Dense of 128, dropout, ten outputs with no activation: logits) classifying the
  handwritten digits (32x32, grey), Adam at 1e-3, Keras's SparseCategoricalCrossentropy left at
  its default from_logits=False: the loss reads the logits as probabilities (divides them by
  their sum, clips them to [1e-7, 1], takes the log), negative and mixed-sign outputs make it
  meaningless and the model does not learn the classes: the loss 10.5 at step 0, 2.30 at step
  149, no NaN, no training (the error 0.883 before, 0.820 after; the constant answer's 0.859).
  Seed 1: 7.35 to 2.66 (the error 0.930 before, 0.758 after; the constant's 0.875).
  xiph/LPCNet#97 (the model outputs logits; set from_logits=True in the
  sparse_categorical_crossentropy, or the loss clips the values and takes their log);
  keras-team/keras#6587 (the softmax removed before sparse_categorical_crossentropy: the model
  did not fit; from_logits is False by default). Cured: from_logits=True: the loss 2.36 to
  0.15, the error 0.883 to 0.008."""
  return cases.Setup(doc_cnn_lite(seed, activation=None),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=cured),
                     data.digits_stream(seed, rgb=False), 'classes')
