"""A sixteenth blind set of sick scenarios (the 'blind16' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind15.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a dilated RNN, an x-vector TDNN, a DPCNN, an
SKNet-lite, an EGNN, a C51 value head, a Wav2Letter-lite, a NODE-lite, a Caser and a fastText).
Each builder takes `cured`: the same run with the thread's remedy (the registry calls
`build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the sick
run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it train"
measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND16 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND16.add` with split='blind16'."""
  return BLIND16.add(name, expected, arch, split='blind16', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def grid_load(seed, *, rows=4096, window=48):
  """Hourly electricity demand of a regional grid in GW (not standardised: 3 to 9): a daily and
  a weekly cycle, a slow weather-driven swing and noise; windows of `window` hours and the next
  hour's demand. (x (rows, window, 1), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  hours = rows + window + 1
  t = np.arange(hours)
  weather = np.convolve(rng.randn(hours + 200), np.ones(200) / 14, mode='same')[:hours]
  load = (6.0 + 1.5 * np.sin(2 * np.pi * (t % 24 - 7) / 24) + 0.6 * (t % 168 < 120) +
          0.8 * weather + 0.15 * rng.randn(hours))
  idx = np.arange(rows)[:, None] + np.arange(window + 1)[None]
  win = load[idx]
  return win[:, :window, None].astype(np.float32), win[:, window:].astype(np.float32)


class DilatedRNN(L.Layer):
  """One layer of a dilated RNN: a ReLU SimpleRNN (`units`, orthogonal recurrent kernel) whose
  recurrence skips `dilation` steps (run over the `dilation` interleaved sub-series); the whole
  sequence of states."""

  def __init__(self, units, dilation, **kwargs):
    super().__init__(**kwargs)
    self.units, self.dilation = units, dilation
    self.rnn = L.SimpleRNN(units, activation='relu', return_sequences=True)

  def call(self, x):
    d, t, f = self.dilation, x.shape[1], x.shape[2]
    sub = tf.reshape(tf.transpose(tf.reshape(x, (-1, t // d, d, f)), (0, 2, 1, 3)),
                     (-1, t // d, f))
    out = tf.reshape(self.rnn(sub), (-1, d, t // d, self.units))
    return tf.reshape(tf.transpose(out, (0, 2, 1, 3)), (-1, t, self.units))


def drnn_lite(seed, *, window=48, units=32, dilations=(1, 2, 4)):
  """A dilated RNN (Chang et al., 2017): three `DilatedRNN` layers (`units`, ReLU) whose
  recurrences skip 1, 2 and 4 hours, the last state, Dense(1): the next hour's demand."""
  _seed(seed)
  inputs = keras.Input((window, 1))
  h = inputs
  for d in dilations:
    h = DilatedRNN(units, d)(h)
  return keras.Model(inputs, L.Dense(1)(h[:, -1]), name='drnn_lite')


def speaker_frames(seed, *, rows=2048, frames=60, coeffs=20, speakers=8):
  """Speaker identification in miniature: 60 frames of 20 MFCCs (cepstral mean removed per
  utterance, about unit scale), each speaker a vocal-tract envelope of its own over a random
  phone sequence, with channel noise. (x (rows, frames, coeffs), labels)."""
  rng = np.random.RandomState(seed)
  voice = 0.6 * rng.randn(speakers, coeffs)
  phones = rng.randn(12, coeffs)
  y = rng.randint(0, speakers, size=rows)
  seq = rng.randint(0, 12, size=(rows, frames // 6))
  x = np.repeat(phones[seq], 6, axis=1) + voice[y][:, None] + 0.8 * rng.randn(rows, frames,
                                                                              coeffs)
  x = x - x.mean(axis=1, keepdims=True) + voice[y][:, None]
  return x.astype(np.float32), y.astype(np.int32)


class StatsPooling(L.Layer):
  """The x-vector's statistics pooling: the mean and standard deviation over the frames (the
  variance floored at 1e-5)."""

  def call(self, x):
    mean = tf.reduce_mean(x, axis=1)
    var = tf.reduce_mean(tf.square(x - mean[:, None]), axis=1)
    return tf.concat([mean, tf.sqrt(tf.maximum(var, 1e-5))], axis=-1)


def xvector_lite(seed, *, frames=60, coeffs=20, speakers=8):
  """An x-vector-lite (Snyder et al., 2018): three TDNN layers (Conv1D 64, kernels 5, 3, 3,
  dilations 1, 2, 3) and a 1x1 layer (128), each ReLU + BatchNorm, statistics pooling, a
  Dense(64) embedding (ReLU + BatchNorm), Dense(speakers): the logits."""
  _seed(seed)
  inputs = keras.Input((frames, coeffs))
  h = inputs
  for f, k, d in ((64, 5, 1), (64, 3, 2), (64, 3, 3), (128, 1, 1)):
    h = L.BatchNormalization()(L.Conv1D(f, k, dilation_rate=d, activation='relu')(h))
  h = L.BatchNormalization()(L.Dense(64, activation='relu')(StatsPooling()(h)))
  return keras.Model(inputs, L.Dense(speakers)(h), name='xvector_lite')


def news_topics(seed, *, rows=4096, length=48, vocab=600, topics=5):
  """Topic classification of short news texts: token ids (1 to vocab - 1; 0 pads), each text a
  mix of Zipf-distributed function words and words of its topic (each topic favours its own 40
  words), 20 to 48 tokens long, right-padded. (ids (rows, length) int32, labels)."""
  rng = np.random.RandomState(seed)
  common = 1.0 / np.arange(1, vocab) ** 1.1
  common /= common.sum()
  topic_words = [rng.choice(np.arange(1, vocab), 40, replace=False) for _ in range(topics)]
  y = rng.randint(0, topics, size=rows)
  x = np.zeros((rows, length), np.int32)
  for r in range(rows):
    n = rng.randint(20, length + 1)
    words = rng.choice(np.arange(1, vocab), size=n, p=common)
    own = rng.rand(n) < 0.25
    words[own] = rng.choice(topic_words[y[r]], size=own.sum())
    x[r, :n] = words
  return x, y.astype(np.int32)


def dpcnn_lite(seed, *, length=48, vocab=600, topics=5, dim=64):
  """A DPCNN-lite (Johnson & Zhang, 2017): an Embedding, a region Conv1D (dim, 3), two
  pre-activation convolutions with a shortcut, then two pyramid blocks (max-pooling of 3 with
  stride 2, two pre-activation convolutions, a shortcut), Dropout(0.2) on the global max:
  Dense(topics), the logits."""
  _seed(seed)
  conv = lambda t: L.Conv1D(dim, 3, padding='same')(L.ReLU()(t))
  ids = keras.Input((length,), dtype='int32')
  h = L.Conv1D(dim, 3, padding='same')(L.Embedding(vocab, dim)(ids))
  h = h + conv(conv(h))
  for _ in range(2):
    h = L.MaxPooling1D(3, strides=2, padding='same')(h)
    h = h + conv(conv(h))
  h = L.Dropout(0.2)(L.GlobalMaxPooling1D()(h))
  return keras.Model(ids, L.Dense(topics)(h), name='dpcnn_lite')


class SelectiveKernel(L.Layer):
  """A Selective Kernel unit (Li et al., 2019): two branches (a 3x3 Conv and a 3x3 Conv of
  dilation 2, each BatchNorm + ReLU), their sum pooled and squeezed (Dense(max(width / 4, 16))
  + ReLU), a softmax over the branches per channel: the attention-weighted sum."""

  def __init__(self, width, kernel_initializer='glorot_uniform', **kwargs):
    super().__init__(**kwargs)
    init = kernel_initializer
    self.branches = [L.Conv2D(width, 3, padding='same', dilation_rate=d, use_bias=False,
                              kernel_initializer=init) for d in (1, 2)]
    self.norms = [L.BatchNormalization() for _ in (1, 2)]
    self.squeeze = L.Dense(max(width // 4, 16), activation='relu', kernel_initializer=init)
    self.select = L.Dense(2 * width, kernel_initializer=init)
    self.width = width

  def call(self, x, training=False):
    u = [tf.nn.relu(n(c(x), training=training)) for c, n in zip(self.branches, self.norms)]
    z = self.squeeze(tf.reduce_mean(u[0] + u[1], axis=[1, 2]))
    a = tf.nn.softmax(tf.reshape(self.select(z), (-1, 2, self.width)), axis=1)
    return u[0] * a[:, 0, None, None, :] + u[1] * a[:, 1, None, None, :]


def sknet_lite(seed, *, size=16, classes=10, kernel_initializer='glorot_uniform'):
  """An SKNet-lite: a Conv 3x3 (16) stem, two SK units (32 and 64 wide) each followed by 2x2
  max-pooling, global average, Dense(classes): the logits; every kernel from
  `kernel_initializer`."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(16, 3, padding='same', activation='relu', kernel_initializer=kernel_initializer)(
      inputs)
  for width in (32, 64):
    h = L.MaxPooling2D()(SelectiveKernel(width, kernel_initializer)(h))
  h = L.GlobalAveragePooling2D()(h)
  out = L.Dense(classes, kernel_initializer=kernel_initializer)(h)
  return keras.Model(inputs, out, name='sknet_lite')


def molecules(seed, *, rows=4096, atoms=6, kinds=3):
  """Small-molecule energies in miniature: 8 atoms of 3 kinds with 3-D coordinates (a jittered
  chain of bonds about 1.4 A long, randomly folded), the target a Morse-style pair energy summed
  over all pairs (pair strengths by kind), standardised. ((kinds one-hot (rows, atoms, kinds),
  coordinates (rows, atoms, 3)), energy (rows, 1))."""
  rng = np.random.RandomState(seed)
  z = rng.randint(0, kinds, size=(rows, atoms))
  steps = rng.randn(rows, atoms, 3)
  steps = 1.4 * steps / np.linalg.norm(steps, axis=-1, keepdims=True)
  pos = np.cumsum(steps, axis=1) + 0.1 * rng.randn(rows, atoms, 3)
  strength = np.array([[1.0, 0.7, 0.4], [0.7, 1.3, 0.5], [0.4, 0.5, 0.9]])
  d = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1)
  pair = strength[z[:, :, None], z[:, None, :]] * (1 - np.exp(-1.2 * (d - 1.5))) ** 2
  e = (pair * (1 - np.eye(atoms))).sum(axis=(1, 2)) / 2
  e = (e - e.mean()) / e.std()
  onehot = np.eye(kinds)[z]
  return (onehot.astype(np.float32), pos.astype(np.float32)), e[:, None].astype(np.float32)


class EGNNLayer(L.Layer):
  """An E(n)-equivariant graph layer (Satorras et al., 2021) over a fully connected molecule:
  messages m_ij = phi_e(h_i, h_j, |x_i - x_j|) with the distance written as tf.norm of the
  difference (`epsilon` None) or sqrt(squared + epsilon), the self-pairs masked out of the
  sums afterwards; x_i += mean_j (x_i - x_j) phi_x(m_ij); h_i += phi_h(h_i, sum_j m_ij)."""

  def __init__(self, dim, epsilon=0.0, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.epsilon = dim, epsilon
    self.phi_e = keras.Sequential([L.Dense(dim, activation='silu'),
                                   L.Dense(dim, activation='silu')])
    self.phi_x = keras.Sequential([L.Dense(dim, activation='silu'),
                                   L.Dense(1, kernel_initializer=keras.initializers.RandomNormal(
                                       stddev=1e-3))])
    self.phi_h = keras.Sequential([L.Dense(dim, activation='silu'), L.Dense(dim)])

  def call(self, h, x):
    n = x.shape[1]
    diff = x[:, :, None, :] - x[:, None, :, :]
    dist = tf.sqrt(tf.reduce_sum(tf.square(diff), axis=-1, keepdims=True) + self.epsilon)
    hi = tf.repeat(h[:, :, None, :], n, axis=2)
    hj = tf.repeat(h[:, None, :, :], n, axis=1)
    m = self.phi_e(tf.concat([hi, hj, dist], axis=-1))
    x = x + tf.reduce_sum(diff * self.phi_x(m), axis=2) / (n - 1)
    h = h + self.phi_h(tf.concat([h, tf.reduce_sum(m, axis=2)], axis=-1))
    return h, x


def egnn_lite(seed, *, atoms=6, kinds=3, dim=32, epsilon=0.0):
  """An EGNN-lite: an atom-kind embedding (Dense(dim)), three `EGNNLayer(dim, epsilon)`, the sum
  over atoms, Dense(dim) + SiLU, Dense(1): the molecule's energy."""
  _seed(seed)
  z, x = keras.Input((atoms, kinds)), keras.Input((atoms, 3))
  h = L.Dense(dim)(z)
  pos = x
  for _ in range(3):
    h, pos = EGNNLayer(dim, epsilon)(h, pos)
  out = L.Dense(1)(L.Dense(dim, activation='silu')(keras.ops.sum(h, axis=1)))
  return keras.Model([z, x], out, name='egnn_lite')


def lander_returns(seed, *, rows=4096, atoms=51, v_min=-10.0, v_max=10.0):
  """Distributional value targets of a lunar-lander-like task: 8 state readings as the
  simulator logs them (altitude in metres, 0 to 1,500; descent rate in m/s; fuel in kg, 0 to
  800; tilt in degrees; leg contacts 0/1; wind, pad offset and thrust), the target the return's
  distribution projected on `atoms` atoms of [v_min, v_max] (a Gaussian whose mean rises with
  fuel and falls with speed and tilt). (x (rows, 8), probabilities (rows, atoms))."""
  rng = np.random.RandomState(seed)
  alt = rng.uniform(0, 800, rows)
  vel = rng.normal(-20, 15, rows)
  fuel = rng.uniform(0, 400, rows)
  tilt = rng.normal(0, 15, rows)
  legs = (alt < 5).astype(float) * (rng.rand(rows) < 0.8)
  wind, pad, thrust = rng.randn(rows) * 5, rng.randn(rows) * 40, rng.uniform(0, 1, rows)
  x = np.stack([alt, vel, fuel, tilt, legs, wind, pad, thrust], axis=1)
  mean = (np.tanh(fuel / 150) * 6 - np.abs(vel + 10) / 8 - np.abs(tilt) / 10 - np.abs(pad) / 40
          + 3 * legs)
  mean = np.clip(mean, v_min + 1, v_max - 1)
  sd = 0.4 + np.abs(wind) / 10
  z = np.linspace(v_min, v_max, atoms)
  p = np.exp(-0.5 * ((z[None] - mean[:, None]) / sd[:, None]) ** 2)
  p /= p.sum(axis=1, keepdims=True)
  return x.astype(np.float32), p.astype(np.float32)


class ExpSoftmax(L.Layer):
  """The return distribution as the user wrote it: exp(z) / sum(exp(z)) over the atoms
  (`stable`: tf.nn.softmax, the maximum subtracted first)."""

  def __init__(self, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.stable = stable

  def call(self, z):
    if self.stable:
      return tf.nn.softmax(z, axis=-1)
    e = tf.exp(z)
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def c51_lite(seed, *, features=8, atoms=51, stable=False):
  """A C51-lite value head (Bellemare et al., 2017): Dense(128) + ReLU, Dense(128) + ReLU,
  Dense(atoms) logits and `ExpSoftmax(stable)`: the probabilities of the return's atoms."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = L.Dense(128, activation='relu')(L.Dense(128, activation='relu')(inputs))
  return keras.Model(inputs, ExpSoftmax(stable)(L.Dense(atoms)(h)), name='c51_lite')


def c51_cross_entropy(target, probs):
  """The C51 loss: -sum(target log(p + 1e-8)) over the atoms, averaged over the batch."""
  return -tf.reduce_mean(tf.reduce_sum(target * tf.math.log(tf.cast(probs, tf.float32) + 1e-8),
                                       axis=-1))


def sound_events(seed, *, rows=2048, frames=64, bands=24, classes=5, silent=0.04):
  """Environmental sound events in miniature: log-mel spectrograms (natural log, around -4 to
  4) of five event classes (each a spectral shape with its own temporal envelope over a noise
  floor); a fraction `silent` of the clips are digital silence (a muted microphone: every
  value log(1e-6)). (x (rows, frames, bands), labels)."""
  rng = np.random.RandomState(seed)
  t = np.linspace(0, 1, frames)[:, None]
  b = np.linspace(0, 1, bands)[None]
  shapes = [np.exp(-((b - c) / w) ** 2) for c, w in ((0.2, 0.1), (0.5, 0.2), (0.8, 0.1),
                                                     (0.35, 0.3), (0.65, 0.05))]
  envs = [np.exp(-t * 5), np.sin(np.pi * t) ** 2, (np.sin(12 * np.pi * t) > 0) * 1.0,
          t, 1.0 - t]
  y = rng.randint(0, classes, size=rows)
  x = np.empty((rows, frames, bands))
  for r in range(rows):
    power = (rng.uniform(1, 4) * envs[y[r]] * shapes[y[r]] +
             0.3 * rng.gamma(2.0, 0.5, size=(frames, bands)))
    x[r] = np.log1p(power)
  x[rng.rand(rows) < silent] = 0.0
  return x.astype(np.float32), y.astype(np.int32)


class UtteranceNorm(L.Layer):
  """Per-clip mean and variance normalisation as the user wrote it: (x - mean) / sqrt(var +
  1e-8) over the frames and bands, in the layer's compute dtype."""

  def call(self, x):
    mean = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=[1, 2], keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-8)


def wav2letter_lite(seed, *, frames=64, bands=24, classes=5, norm_dtype=None):
  """A Wav2Letter-lite (Collobert et al., 2016) as a clip classifier: `UtteranceNorm` (in
  `norm_dtype`; None: the policy's compute dtype), a strided Conv1D (64, 11, stride 2), three
  Conv1D (64, 7) and a Conv1D (128, 1), each ReLU, Dropout(0.1), global average over time,
  Dense(classes) in float32: the logits."""
  _seed(seed)
  inputs = keras.Input((frames, bands))
  h = UtteranceNorm(dtype=norm_dtype)(inputs)
  h = L.Conv1D(64, 11, strides=2, padding='same', activation='relu')(h)
  for _ in range(3):
    h = L.Conv1D(64, 7, padding='same', activation='relu')(h)
  h = L.Dropout(0.1)(L.Conv1D(128, 1, activation='relu')(h))
  out = L.Dense(classes, dtype='float32')(L.GlobalAveragePooling1D()(h))
  return keras.Model(inputs, out, name='wav2letter_lite')


def house_sales(seed, *, rows=4096, missing=0):
  """A house-sales table: ten features (floor area, lot size, age, rooms, bathrooms, distance
  to centre, school score, crime rate, a garage flag, the sale month), standardised, and the
  log sale price (standardised), a non-linear function of them with noise; `missing` prices
  (drawn at random) are NaN (sales recorded without a price: the CSV's empty cells).
  (x (rows, 10), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, 10)
  y = (0.8 * x[:, 0] + 0.3 * np.tanh(x[:, 1]) - 0.4 * np.maximum(x[:, 2], 0) +
       0.3 * x[:, 3] * (x[:, 4] > 0) - 0.5 * np.abs(x[:, 5]) + 0.4 * np.sin(x[:, 6]) -
       0.3 * (x[:, 7] > 1) + 0.2 * (x[:, 8] > 0) + 0.1 * rng.randn(rows))
  y = (y - y.mean()) / y.std()
  y[rng.choice(rows, missing, replace=False)] = np.nan
  return x.astype(np.float32), y[:, None].astype(np.float32)


class ObliviousTrees(L.Layer):
  """A NODE layer (Popov et al., 2019): `trees` differentiable oblivious decision trees of
  `depth` levels; each level picks a feature by a softmax over learned weights and splits at a
  learned threshold with a sigmoid of learned sharpness; each tree returns the leaf responses
  weighted by the probability of reaching them."""

  def __init__(self, trees=16, depth=3, **kwargs):
    super().__init__(**kwargs)
    self.trees, self.depth = trees, depth

  def build(self, shape):
    f, t, d = shape[-1], self.trees, self.depth
    self.select = self.add_weight(shape=(f, t, d), initializer='random_uniform', name='select')
    self.threshold = self.add_weight(shape=(t, d), initializer='random_normal', name='thr')
    self.log_scale = self.add_weight(shape=(t, d), initializer='zeros', name='log_scale')
    self.response = self.add_weight(shape=(t, 2 ** d), initializer='random_normal',
                                    name='response')

  def call(self, x):
    w = tf.nn.softmax(self.select, axis=0)
    v = tf.einsum('bf,ftd->btd', x, w)
    b = tf.sigmoid((v - self.threshold) * tf.exp(self.log_scale))
    leaf = tf.ones_like(b[:, :, :1])
    for level in range(self.depth):
      p = b[:, :, level:level + 1]
      leaf = tf.concat([leaf * p, leaf * (1 - p)], axis=-1)
    return tf.reduce_sum(leaf * self.response, axis=-1)


def node_lite(seed, *, features=10):
  """A NODE-lite: two `ObliviousTrees(16, depth 3)` layers, the second on the features and the
  first's outputs (NODE's dense connection), the trees' outputs concatenated, Dense(1): the
  log price."""
  _seed(seed)
  inputs = keras.Input((features,))
  t1 = ObliviousTrees()(inputs)
  t2 = ObliviousTrees()(L.Concatenate()([inputs, t1]))
  return keras.Model(inputs, L.Dense(1)(L.Concatenate()([t1, t2])), name='node_lite')


def purchases(seed, *, rows=4096, history=5, items=120):
  """Next-purchase prediction in miniature: each user's last `history` purchases (item ids 0 to
  items - 1) from a store whose items come in bundles of 4 (a purchase is followed by another of
  its bundle with probability 0.6, by the complement item two bundles on with 0.25, anything
  else otherwise); the label the next purchase. (ids (rows, history) int32, labels)."""
  rng = np.random.RandomState(seed)
  seq = np.zeros((rows, history + 1), np.int64)
  seq[:, 0] = rng.randint(0, items, size=rows)
  for t in range(1, history + 1):
    u = rng.rand(rows)
    prev = seq[:, t - 1]
    same = (prev // 4) * 4 + rng.randint(0, 4, size=rows)
    comp = ((prev // 4 + 2) * 4) % items + rng.randint(0, 4, size=rows)
    seq[:, t] = np.where(u < 0.6, same, np.where(u < 0.85, comp, rng.randint(0, items, rows)))
  return seq[:, :-1].astype(np.int32), seq[:, -1].astype(np.int32)


class GradientGlitch(field.OneOffFault):
  """A one-off fault in the backward pass: the identity, but at its `at`-th training call (None:
  never) one element of the gradient flowing back reads NaN (a backward kernel that misfires
  once; not the data, the model or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.nan, backward=True, **kwargs)


def caser_lite(seed, *, history=5, items=120, dim=32, glitch=None):
  """A Caser-lite (Tang & Wang, 2018): item embeddings of the last `history` purchases as an
  image (history x dim), horizontal convolutions (8 filters each of heights 1 to history, max
  over time), a vertical convolution (4 filters over the history), a `GradientGlitch(glitch)`
  on their concatenation, Dense(64) + ReLU, Dropout(0.3), Dense(items): the next-item logits."""
  _seed(seed)
  ids = keras.Input((history,), dtype='int32')
  e = L.Dense(dim, use_bias=False)(keras.ops.one_hot(ids, items))  # An embedding, as a matmul.
  img = e[..., None]
  horiz = [L.GlobalMaxPooling1D()(L.Reshape((history - k + 1, 8))(
      L.Conv2D(8, (k, dim), activation='relu')(img))) for k in range(1, history + 1)]
  vert = L.Flatten()(L.Conv2D(4, (history, 1))(img))
  h = GradientGlitch(glitch)(L.Concatenate()(horiz + [vert]))
  h = L.Dropout(0.3)(L.Dense(64, activation='relu')(h))
  return keras.Model(ids, L.Dense(items)(h), name='caser_lite')


def reviews(seed, *, rows=4096, length=40, vocab=1000, buckets=2000):
  """Sentiment of product reviews: unigram ids (1 to vocab - 1) followed by hashed bigram ids
  (vocab to vocab + buckets - 1), 0 pads; each review a mix of Zipf-distributed neutral words
  and words of its polarity (50 positive, 50 negative, a few negated by a preceding 'not').
  (ids (rows, 2 * length) int32, labels (rows, 1) float)."""
  rng = np.random.RandomState(seed)
  common = 1.0 / np.arange(1, vocab) ** 1.05
  common /= common.sum()
  words = rng.permutation(np.arange(2, vocab))
  pos, neg, negation = words[:50], words[50:100], 1
  y = rng.randint(0, 2, size=rows)
  x = np.zeros((rows, 2 * length), np.int32)
  for r in range(rows):
    n = rng.randint(10, length + 1)
    w = rng.choice(np.arange(1, vocab), size=n, p=common)
    own = rng.rand(n) < 0.15
    w[own] = rng.choice(pos if y[r] else neg, size=own.sum())
    flip = np.where(own[1:] & (rng.rand(n - 1) < 0.1))[0]
    w[flip] = negation
    x[r, :n] = w
    x[r, length:length + n - 1] = vocab + (w[:-1] * 7919 + w[1:]) % buckets
  return x, y[:, None].astype(np.float32)


def fasttext_lite(seed, *, length=80, vocab=3000, dim=32, activation='softmax'):
  """A fastText-lite (Joulin et al., 2017): an Embedding of the unigram and hashed bigram ids
  (masked padding), their average, Dense(1, `activation`): the probability of a positive
  review."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = L.GlobalAveragePooling1D()(L.Embedding(vocab, dim, mask_zero=True)(ids))
  return keras.Model(ids, L.Dense(1, activation=activation)(h), name='fasttext_lite')


# --- Scenarios -------------------------------------------------------------------------------


@add('blind16_grad_drnn_relu_grid_load', 'exploding_gradients', 'drnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='chenxie95/deeplearning_course_sjtu#31; apache/mxnet#8096; square/pysurvival#11')
def _(seed, cured=False):
  """A dilated RNN (three ReLU SimpleRNN layers skipping 1, 2 and 4 hours, orthogonal recurrent
  kernels, no normalisation) forecasting a grid's next-hour demand from 48 hours of load in GW
  (3 to 9, not standardised), Huber loss, SGD + momentum 0.9 at 0.01 (an ordinary rate) and no
  clipping: the unbounded ReLU recurrences multiply the gradient step over step: the loss (fit's
  running mean) 5.3 at step 0, 15 at step 2, 71 at step 5, NaN from step 6 (the weights NaN
  after step 6; the error 32.6 before, inf after; the constant answer's 2.03). Seed 1: 7.7, 58
  at step 2, NaN from step 15. chenxie95/deeplearning_course_sjtu#31 (an RNN_RELU language model:
  "loss爆炸(nan)", ReLU "may make the gradient too large"); apache/mxnet#8096 (NaN after good
  epochs: "gradient explosion ... specify clip_gradient"); square/pysurvival#11 (clipping
  added "especially for ReLU ... where gradient can explode very easily"). Cured: clipnorm=1.0
  at the same rate: the loss 5.3 to 0.44, the error 32.6 to 0.25."""
  x, y = grid_load(seed)
  return cases.Setup(drnn_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     keras.losses.Huber(), data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind16_lr_xvector_sgd_rate_two', 'learning_rate', 'xvector_lite',
     doors=('trainer', 'fit'), steps=150,
     citation=('tensorflow/tensorflow#38796; guillaumegenthial/sequence_tagging#47; '
               'CharlieDinh/pFedMe#11'))
def _(seed, cured=False):
  """An x-vector-lite (three dilated TDNN layers and a 1x1 layer with BatchNorm, statistics
  pooling, a BatchNorm embedding) identifying eight speakers from 60 frames of MFCCs, SGD +
  momentum 0.9 at learning_rate=2.0 (two hundred times the 0.01 this net trains at): the loss
  (fit's running mean) 2.6 at step 0, 6.5 at step 5, 70 at step 10, 7.9e4 at step 20, 4.6e12 at
  step 50; the weights NaN after step 57, the loss NaN from step 118 (the error 0.89 before, inf
  after; the constant answer's 0.80). Seed 1: 95 at step 10, 1.6e13 at step 50, the weights NaN
  after step 63. tensorflow/tensorflow#38796 ("A high learning rate may cause a nan or an inf
  loss with tf.keras.optimizers.SGD"); guillaumegenthial/sequence_tagging#47 (fine at 0.001, NaN
  at 0.01 or 0.1); CharlieDinh/pFedMe#11 ("the training loss is nan when the learning rate is
  large"). Cured: 0.01: the loss 2.6 to 0.063, the error 0.89 to 0.0."""
  x, y = speaker_frames(seed)
  return cases.Setup(xvector_lite(seed),
                     keras.optimizers.SGD(0.01 if cured else 2.0, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind16_lr_dpcnn_warmup_target_typo', 'learning_rate', 'dpcnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#3425; tensorflow/tensorflow#800; RoyalVane/CLAN#10')
def _(seed, cured=False):
  """A DPCNN-lite (a region embedding, pre-activation convolutions with shortcuts, two pyramid
  blocks of stride-2 pooling) classifying news texts into five topics, SGD + momentum 0.9 on a
  CosineDecay schedule whose linear warm-up climbs over 40 steps to warmup_target=2.0 (the
  user meant a peak of 0.05): the first steps are healthy (the loss 1.65 at step 0, 1.63 at step
  5), then, as the rate passes the net's range, 1.9 at step 20 and the weights and the loss NaN
  from step 24 (the error 0.81 before, inf after; the constant answer's 0.79). Seed 1: 2.2 at
  step 20, NaN from step 23. keras-team/keras#3425 (a sudden drop to zero accuracy: "if the
  learning rate is set too high" the ReLUs die); tensorflow/tensorflow#800 (a sudden loss
  explosion, asked whether the rate must be lowered); RoyalVane/CLAN#10 (why a warm-up to the
  base rate). Cured: a warm-up to 0.05: the loss 1.65 to 1.57, the error 0.81 to 0.52 (0.48 in
  training mode)."""
  x, y = news_topics(seed)
  schedule = keras.optimizers.schedules.CosineDecay(
      0.0, decay_steps=400, warmup_target=0.05 if cured else 2.0, warmup_steps=40)
  return cases.Setup(dpcnn_lite(seed), keras.optimizers.SGD(schedule, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind16_init_sknet_constant_filler', 'initialisation', 'sknet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='VinceShieh/spark-ffm#12; keras-team/keras#2975; tensorflow/models#1529')
def _(seed, cured=False):
  """An SKNet-lite (a stem and two Selective Kernel units: a 3x3 and a dilated 3x3 branch, each
  BatchNorm + ReLU, mixed by a per-channel softmax attention) on 16x16 digits, Nadam at 1e-3,
  every kernel initialised to Constant(0.05) (a ported 'constant' filler): every filter, unit and
  attention weight starts equal, gets the same gradient and stays equal, so the net is one
  channel wide: the loss 2.30 at step 0, 2.29 at step 10, 2.21 at step 149, no NaN (the error
  0.93 before, 0.93 after in inference, 0.83 in training mode; the constant answer's 0.86). Seed
  1: the same (2.30 to 2.21; the error 0.88 before and after, 0.77 in training mode; the
  constant's 0.875). VinceShieh/spark-ffm#12 ("Weight Initialisation might be a cause" of a
  broken loss; a proper scale needed); keras-team/keras#2975 (the same output for every
  input); tensorflow/models#1529 (weights initialised to a constant instead of random). Cured:
  he_normal: the loss 3.4 to 1.14, the error 0.89 to 0.41 (0.047 in training mode)."""
  x, y = data.digits(size=16, rgb=False)
  init = 'he_normal' if cured else keras.initializers.Constant(0.05)
  return cases.Setup(sknet_lite(seed, kernel_initializer=init), keras.optimizers.Nadam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind16_div_egnn_norm_self_pair', 'division_or_log', 'egnn_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='tensorflow/tensorflow#12071; pytorch/pytorch#2421; tensorflow/tensorflow#42889')
def _(seed, cured=False):
  """An EGNN-lite (three E(n)-equivariant layers over fully connected six-atom molecules,
  messages from the pair distances, coordinate updates) regressing a pair-potential energy, MSE,
  Adam at 1e-3, the distance written by hand as sqrt(sum((x_i - x_j)^2)) over every pair, each
  atom with itself included (the self-message): from the second layer on, the coordinates
  depend on the weights and the self-pair distance is sqrt(0), whose gradient is inf, times the
  difference's 0: NaN: the loss 1.09 at step 0, the weights NaN after step 0 and the loss NaN
  from step 1 (the error 1.38 before, inf after; the constant answer's 0.83). Seed 1: the same
  (6.7 at step 0, NaN from step 1). tensorflow/tensorflow#12071 (the gradient of tf.norm is NaN
  at 0); pytorch/pytorch#2421 ("Gradient of zero norm is nan": "there is a square root, which
  has a gradient of + infinity at 0"); tensorflow/tensorflow#42889 (NaN gradients from tf.sqrt
  near zero). Cured: sqrt(squared + 1e-8): the loss 1.09 to 0.96, the error 1.38 to 0.62."""
  x, y = molecules(seed)
  return cases.Setup(egnn_lite(seed, epsilon=1e-8 if cured else 0.0),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind16_exp_c51_raw_state_softmax', 'softmax_overflow', 'c51_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='vwxyzjn/cleanrl#105; uTensor/uTensor#175; openai/baselines#761')
def _(seed, cured=False):
  """A C51-lite value head (two ReLU layers, 51 atom logits) fitted to return distributions of a
  lunar-lander-like task from state readings in the simulator's units (altitude in metres up
  to 800, fuel in kg up to 400, speeds, tilt in degrees), the C51 cross-entropy, Adam at 3e-3,
  the atoms' probabilities written as exp(z) / sum(exp(z)): the raw readings make logits above
  88 on some rows, exp overflows to inf and inf / inf is NaN: the loss NaN from step 0 and the
  weights NaN after it (the error inf before and after; the constant answer's 0.0022). Seed 1:
  the same. vwxyzjn/cleanrl#105 ("Numerical instability in C51"); uTensor/uTensor#175 ("exp()
  call in SoftmaxOp leads to overflow": logit 378, exp inf, NaN); openai/baselines#761 (the
  maximum subtracted first: exp(300) / exp(301) is NaN). Cured: tf.nn.softmax (the maximum
  subtracted): finite, the loss 17.5 to 6.1, the error 0.019 to 0.0019 (a tenth of its start,
  but just short of the measure's 0.0017: the raw units leave it slow)."""
  x, y = lander_returns(seed)
  return cases.Setup(c51_lite(seed, stable=cured),
                     keras.optimizers.Adam(3e-3, epsilon=0.01 / 32), c51_cross_entropy,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind16_fp16_wav2letter_norm_epsilon', 'precision', 'wav2letter_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='keras-team/keras#22586; pytorch/pytorch#32137; tensorflow/tensorflow#47156')
def _(seed, cured=False):
  """A Wav2Letter-lite (a per-clip mean and variance normalisation, then strided and plain Conv1D
  layers) classifying five environmental sound events from log1p-mel spectrograms, AdamW at
  1e-3 with weight decay, under mixed_float16; the normalisation divides by sqrt(var + 1e-8) in
  float16, where 1e-8 rounds to 0, and about 4% of the clips are digital silence (a muted
  microphone: every value 0): 0 / 0 = NaN: the outputs NaN for those clips before any training
  (the error inf before and after; the constant answer's 0.74), the loss NaN at step 0 and
  after (the loss-scale optimizer skips those updates). Seed 1: the same (the constant's 0.77).
  keras-team/keras#22586 (a float16 epsilon "effectively acts as zero during variance
  normalization"); pytorch/pytorch#32137 (an epsilon "too small for half precision and gets
  evaluated as zero ... This causes nans"); tensorflow/tensorflow#47156 (mixed precision and an
  instance normalisation). Cured: the normalisation in float32: the loss 1.62 to 0.12, the
  error 0.77 to 0.023."""
  x, y = sound_events(seed)
  return cases.Setup(wav2letter_lite(seed, norm_dtype='float32' if cured else None),
                     keras.optimizers.AdamW(1e-3, weight_decay=1e-2), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind16_input_node_missing_prices', 'bad_input', 'node_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='Nixtla/neuralforecast#186; torchgeo/torchgeo#3760; vlfeat/matconvnet#899')
def _(seed, cured=False):
  """A NODE-lite (two layers of 16 differentiable oblivious decision trees of depth 3, densely
  connected) regressing standardised log sale prices from ten house features, Huber loss, Adam at
  1e-2; six of the 4,096 sales have no price (the CSV's empty cells read as NaN and never
  dropped): the first batch holding one makes the loss and the weights NaN: healthy before (the
  loss 0.60 at step 0, 0.44 at step 20), NaN from step 31 (the error on clean batches 1.04
  before, inf after; the constant answer's 1.01). Seed 1: NaN from step 30.
  Nixtla/neuralforecast#186 (missing values in y: "The loss becomes nan during training but it is
  hard to notice that the problem is in the data"); torchgeo/torchgeo#3760 (NaN targets not
  handled by regression trainers); vlfeat/matconvnet#899 (NaN labels). Cured: the rows without a
  price dropped: the loss 0.66 to 0.18, the error 1.04 to 0.13. The measure reads clean batches
  (eval_data) for both runs."""
  x, y = house_sales(seed, missing=6)
  if cured:
    keep = np.isfinite(y[:, 0])
    x, y = x[keep], y[keep]
  cx, cy = house_sales(seed)
  return cases.Setup(node_lite(seed), keras.optimizers.Adam(1e-2), keras.losses.Huber(),
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(cx, cy, batch=32, seed=seed))


@add('blind16_transient_caser_backward_glitch', 'transient', 'caser_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='mrphys/tensorflow-nufft#20; microsoft/dion#76; tensorflow/tensorflow#4754')
def _(seed, cured=False):
  """A Caser-lite (horizontal and vertical convolutions over the embeddings of a user's last five
  purchases) predicting the next of 120 items, RMSprop at 5e-3, training normally (the loss 4.78
  at step 0, 4.73 at step 50) when the gradient flowing back into the dense head reads NaN once
  (`GradientGlitch`: its 70th training call; step 65 in a plain `fit` after the measure's four
  training-mode passes; a backward kernel that misfires, not the data, the model or
  the settings): the weights are NaN from that step (ReLU and max-pooling keep fit's loss
  finite, 4.73 at step 149, the net broken: the error 0.98 before, inf after; the constant
  answer's 0.97); the same step re-run is finite. Seed 1: the same step (the error 1.0 before,
  inf after). mrphys/tensorflow-nufft#20 ("NaN's randomly pop up ... if i repeat the
  computations, usually, I dont get NaNs again"); microsoft/dion#76 (NaN parameters traced to a
  hardware error); tensorflow/tensorflow#4754 (NaN after applying gradients, in some runs
  only). Cured: the same run without the fault: the loss 4.78 to 4.12, the error 0.98 to 0.69."""
  x, y = purchases(seed)
  return cases.Setup(caser_lite(seed, glitch=None if cured else 70),
                     keras.optimizers.RMSprop(5e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind16_mismatch_fasttext_one_unit_softmax', 'loss_output_mismatch', 'fasttext_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#126; keras-team/keras#2975; tensorflow/tensorflow#39223')
def _(seed, cured=False):
  """A fastText-lite (the average of unigram and hashed bigram embeddings) scoring product
  reviews positive or negative, Adamax at 1e-2, BinaryCrossentropy, the output layer
  Dense(1, activation='softmax'): a softmax over one unit is 1.0 for every review; Keras's loss
  reads the layer's logits, so the loss falls as if all were well (0.693 at step 0, 0.49 at step
  149), but every prediction is "positive": the error 0.54 before and after (the constant
  answer's 0.46). Seed 1: the loss 0.693 to 0.50, the error 0.44 before and after (the
  constant's 0.44). keras-team/keras#126 (Dense(..., 1, activation='softmax'): "predict_proba
  gives all ones"); keras-team/keras#2975 ("always predicts same output class": "The activation
  function should be 'sigmoid' and not 'softmax'"); tensorflow/tensorflow#39223 (binary
  classification stuck at 0.5 accuracy). Cured: activation='sigmoid': the loss 0.693 to 0.49,
  the error 0.49 to 0.0."""
  x, y = reviews(seed)
  return cases.Setup(fasttext_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adamax(1e-2), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
