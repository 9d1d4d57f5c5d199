"""A seventeenth blind set of sick scenarios (the 'blind17' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind16.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a polynomial Pi-net, a PSPNet-lite, a
VGGish-lite, a GRU4Rec-lite, a CSRNet-lite, a RETAIN-lite, an AstroNet-lite, an STGCN-lite, a
QuartzNet-lite and a DKT-lite). Each builder takes `cured`: the same run with the thread's
remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain Keras
`compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin
passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND17 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND17.add` with split='blind17'."""
  return BLIND17.add(name, expected, arch, split='blind17', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def beam_deflection(seed, *, rows=4096):
  """A materials-lab table: the mid-span deflection of loaded beams from six measurements (span
  0.5 to 3 m, load 1 to 20 kN, width and depth 2 to 10 cm, Young's modulus 70 to 210 GPa, support
  stiffness 0 to 1), standardised, the target the deflection in cm as logged (PL^3 / (48 E I)
  with a support term: heavy-tailed, 0 to 20; beams that failed logged at the gauge's 20 cm).
  (x (rows, 6), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  span = rng.uniform(0.5, 3.0, rows)
  load = rng.uniform(1.0, 20.0, rows)
  width, depth = rng.uniform(2, 10, rows), rng.uniform(2, 10, rows)
  modulus = rng.uniform(70, 210, rows)
  support = rng.uniform(0, 1, rows)
  inertia = width * depth ** 3 / 12 * 1e-8
  mm = load * 1e3 * span ** 3 / (48 * modulus * 1e9 * inertia) * 1e3 * (1 + 0.5 * support)
  x = np.stack([span, load, width, depth, modulus, support], axis=1)
  x = (x - x.mean(axis=0)) / x.std(axis=0)
  return x.astype(np.float32), (np.clip(mm, 0, 200) / 10)[:, None].astype(np.float32)


class PolyBlock(L.Layer):
  """One Pi-net (CCP) recursion step (Chrysos et al., 2020): x_n = (U_n z) * x_{n-1} + x_{n-1},
  the Hadamard product with a linear map of the input `z` raising the polynomial's degree."""

  def __init__(self, width, **kwargs):
    super().__init__(**kwargs)
    self.u = L.Dense(width, use_bias=False)

  def call(self, z, x):
    return self.u(z) * x + x


def pinet_lite(seed, *, features=6, width=64, degree=4):
  """A Pi-net-lite: a polynomial network of degree `degree` (no activation functions): x_1 = U_1
  z, then `degree` - 1 `PolyBlock`s, Dense(1): the deflection."""
  _seed(seed)
  z = keras.Input((features,))
  x = L.Dense(width, use_bias=False)(z)
  for _ in range(degree - 1):
    x = PolyBlock(width)(z, x)
  return keras.Model(z, L.Dense(1)(x), name='pinet_lite')


def rooftops(seed, *, rows=1024, size=32):
  """Building-footprint segmentation of aerial tiles in miniature: RGB tiles (in [0, 1]) of
  grass and road textures with one to four rectangular roofs (brighter, their own tint, a shadow
  to one side), the label the roof mask (1 on roofs, 0 elsewhere). (x (rows, size, size, 3),
  masks (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  x = np.empty((rows, size, size, 3), np.float32)
  m = np.zeros((rows, size, size, 1), np.float32)
  for r in range(rows):
    img = 0.3 + 0.08 * rng.randn(size, size, 3) + np.array([0.0, 0.12, 0.0])
    if rng.rand() < 0.5:  # A road across the tile.
      c = rng.randint(4, size - 4)
      img[:, c - 2:c + 2] = 0.45 + 0.03 * rng.randn(size, 4, 3)
    for _ in range(rng.randint(1, 5)):
      h, w = rng.randint(4, 11, size=2)
      i, j = rng.randint(0, size - h), rng.randint(0, size - w)
      img[i + h:min(i + h + 2, size), j:j + w] *= 0.5  # Shadow.
      img[i:i + h, j:j + w] = (0.6 + 0.15 * rng.rand(3)) + 0.05 * rng.randn(h, w, 3)
      m[r, i:i + h, j:j + w] = 1.0
    x[r] = img
  return np.clip(x, 0, 1), m


def pspnet_lite(seed, *, size=32, width=32):
  """A PSPNet-lite (Zhao et al., 2017): a stem of three 3x3 convolutions (the first strided),
  each BatchNorm + ReLU, a pyramid pooling module (average pooling to 1x1, 2x2 and 4x4 bins,
  each a 1x1 convolution + BatchNorm + ReLU, upsampled and concatenated with the features), a
  3x3 convolution (BatchNorm + ReLU), Dropout(0.1), a 1x1 convolution and a bilinear upsampling
  to the tile: the roof logits per pixel."""
  _seed(seed)
  inputs = keras.Input((size, size, 3))
  h = inputs
  for i, f in enumerate((width, width, 2 * width)):
    h = L.Conv2D(f, 3, strides=2 if i == 0 else 1, padding='same', use_bias=False)(h)
    h = L.ReLU()(L.BatchNormalization()(h))
  side = size // 2
  branches = [h]
  for bins in (1, 2, 4):
    p = L.AveragePooling2D(side // bins)(h)
    p = L.ReLU()(L.BatchNormalization()(L.Conv2D(width // 2, 1, use_bias=False)(p)))
    branches.append(L.UpSampling2D(side // bins, interpolation='bilinear')(p))
  h = L.Concatenate()(branches)
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(width, 3, padding='same', use_bias=False)(h)))
  h = L.Conv2D(1, 1)(L.Dropout(0.1)(h))
  return keras.Model(inputs, L.UpSampling2D(2, interpolation='bilinear')(h), name='pspnet_lite')


def audio_tags(seed, *, rows=2048, frames=48, mels=32, classes=6):
  """Audio tagging in miniature: log-mel patches (frames x mels, natural log of power, about -6
  to 2) of six sound classes (a dog's harmonic bark, a siren's sweep, rain's broadband hiss, an
  engine's low drone, speech-like formant bursts, birdsong chirps), each with random gain, onset
  and a pink noise floor. (x (rows, frames, mels, 1), labels)."""
  rng = np.random.RandomState(seed)
  t = np.arange(frames)[:, None]
  f = np.arange(mels)[None]
  y = rng.randint(0, classes, size=rows)
  x = np.empty((rows, frames, mels, 1), np.float32)
  for r in range(rows):
    k, g, o = y[r], rng.uniform(0.5, 2.0), rng.randint(0, frames // 2)
    on = (t >= o) & (t < o + rng.randint(10, frames))
    if k == 0:
      p = on * ((np.sin(t / 2.0) > 0.3) * sum(np.exp(-((f - 4 * h) / 1.2) ** 2) for h in (1, 2, 3)))
    elif k == 1:
      p = on * np.exp(-((f - (14 + 8 * np.sin(t / 5.0))) / 2.0) ** 2)
    elif k == 2:
      p = 0.4 * on * (f > 8) * rng.rand(frames, mels)
    elif k == 3:
      p = on * np.exp(-(f / 4.0) ** 2) * (1 + 0.3 * np.sin(t))
    elif k == 4:
      p = on * (rng.rand(frames, 1) > 0.4) * (np.exp(-((f - 6) / 2) ** 2) +
                                              np.exp(-((f - 15) / 3) ** 2))
    else:
      p = on * (t % 8 < 2) * np.exp(-((f - 24 - (t % 8) * 2) / 1.5) ** 2)
    noise = 0.05 * rng.gamma(2.0, 1.0, (frames, mels)) / (1 + f / 8)
    x[r, ..., 0] = np.log(g * p + noise + 1e-3)
  return x, y.astype(np.int32)


def vggish_lite(seed, *, frames=48, mels=32, classes=6):
  """A VGGish-lite (Hershey et al., 2017): four 3x3 convolutions (16, 32, 64, 64), each ReLU,
  max-pooling after the first, second and fourth, a Dense(128) + ReLU embedding with
  Dropout(0.2), Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((frames, mels, 1))
  h = inputs
  for f, pool in ((16, True), (32, True), (64, False), (64, True)):
    h = L.Conv2D(f, 3, padding='same', activation='relu')(h)
    if pool:
      h = L.MaxPooling2D()(h)
  h = L.Dropout(0.2)(L.Dense(128, activation='relu')(L.Flatten()(h)))
  return keras.Model(inputs, L.Dense(classes)(h), name='vggish_lite')


def sessions(seed, *, rows=4096, length=8, items=150):
  """Browsing sessions of a web shop: the last `length` item views of a session (ids 1 to
  items - 1; shorter sessions left-padded with 0), the label the next view. Items come in
  categories of 10; a view is followed by one of its category (0.3), by its 'accessory'
  (0.5, a fixed map), or by a popular item (Zipf). (ids (rows,
  length) int32, labels)."""
  rng = np.random.RandomState(seed)
  accessory = rng.permutation(np.arange(1, items))
  accessory = np.concatenate([[0], accessory])
  pop = 1.0 / np.arange(1, items) ** 1.2
  pop /= pop.sum()
  seq = np.zeros((rows, length + 1), np.int64)
  seq[:, 0] = rng.choice(np.arange(1, items), size=rows, p=pop)
  for t in range(1, length + 1):
    u, prev = rng.rand(rows), seq[:, t - 1]
    cat = np.clip((prev // 10) * 10 + rng.randint(0, 10, rows), 1, items - 1)
    seq[:, t] = np.where(u < 0.3, cat, np.where(u < 0.8, accessory[prev],
                                                 rng.choice(np.arange(1, items), rows, p=pop)))
  short = rng.randint(2, length + 1, size=rows)
  x = seq[:, :-1].copy()
  x[np.arange(length)[None] < (length - short)[:, None]] = 0
  return x.astype(np.int32), seq[:, -1].astype(np.int32)


def gru4rec_lite(seed, *, length=8, items=150, dim=48, initializer=None):
  """A GRU4Rec-lite (Hidasi et al., 2016): item embeddings (masked padding), a GRU(dim) over the
  session, Dropout(0.25), Dense(items): the next-item logits. `initializer` (None: Keras's
  defaults) is the kernel and recurrent initializer of the GRU and the output layer."""
  _seed(seed)
  kw = {} if initializer is None else dict(kernel_initializer=initializer,
                                           recurrent_initializer=initializer)
  ids = keras.Input((length,), dtype='int32')
  h = L.GRU(dim, **kw)(L.Embedding(items, dim, mask_zero=True)(ids))
  out_kw = {} if initializer is None else dict(kernel_initializer=initializer)
  return keras.Model(ids, L.Dense(items, **out_kw)(L.Dropout(0.25)(h)), name='gru4rec_lite')


def crowds(seed, *, rows=2048, size=32, empty=0.006):
  """Crowd counting in miniature: grey 32x32 surveillance frames (a textured plaza, in [0, 1])
  with 0 to 40 people (dark head-and-shoulder blobs), the label the density map at 8x8 (each
  person a unit of mass spread over its cell and neighbours: it sums to the count); a fraction
  `empty` of the frames show the empty plaza at night (no one: count 0). (x (rows, size, size,
  1), density (rows, 8, 8, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  gy, gx = np.mgrid[0:8, 0:8]
  x = np.empty((rows, size, size, 1), np.float32)
  dens = np.zeros((rows, 8, 8, 1), np.float32)
  for r in range(rows):
    img = 0.6 + 0.05 * np.sin(xx / 3.0) * np.sin(yy / 3.0) + 0.05 * rng.randn(size, size)
    n = 0 if rng.rand() < empty else rng.randint(1, 41)
    for _ in range(n):
      cy, cx = rng.uniform(2, size - 2, 2)
      img -= 0.35 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 2.0)
      k = np.exp(-((gy - cy / 4 + 0.5) ** 2 + (gx - cx / 4 + 0.5) ** 2) / 0.8)
      dens[r, ..., 0] += k / k.sum()
    x[r, ..., 0] = img
  return np.clip(x, 0, 1), dens


def csrnet_lite(seed, *, size=32):
  """A CSRNet-lite (Li et al., 2018): a VGG-style front end (two 3x3 convolutions of 16, max
  pooling, two of 32, max pooling), a dilated back end (three 3x3 convolutions of 32 with
  dilation 2), each ReLU, a 1x1 convolution + ReLU: the density map at a quarter of the
  resolution."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for f in (16, 32):
    for _ in range(2):
      h = L.Conv2D(f, 3, padding='same', activation='relu')(h)
    h = L.MaxPooling2D()(h)
  for _ in range(3):
    h = L.Conv2D(32, 3, padding='same', dilation_rate=2, activation='relu')(h)
  return keras.Model(inputs, L.Conv2D(1, 1, activation='relu')(h), name='csrnet_lite')


def count_log_loss(safe):
  """The user's counting loss: the pixel MSE of the density maps plus the squared error of the
  log counts, log(sum(pred)) - log(sum(true)) per frame (`safe`: log1p of both)."""
  log = tf.math.log1p if safe else tf.math.log

  def loss(y, p):
    y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
    cy, cp = tf.reduce_sum(y, axis=[1, 2, 3]), tf.reduce_sum(p, axis=[1, 2, 3])
    return tf.reduce_mean(tf.square(y - p)) * 100 + 0.1 * tf.reduce_mean(
        tf.square(log(cp) - log(cy)))

  return loss


def patient_visits(seed, *, rows=4096, visits=10, codes=60, no_history=0.003):
  """Heart-failure onset from electronic health records in miniature: each patient's last
  `visits` visits as multi-hot vectors of `codes` diagnosis codes (padding visits all zero, at
  the front; 1 to `visits` real visits), the label whether heart failure was diagnosed within the
  next year (about 30%: driven by hypertension, diabetes and kidney codes, more so in recent
  visits). A fraction `no_history` of the patients are new to the practice: no visit at all in
  the window. ((multi-hot (rows, visits, codes), visit mask (rows, visits)), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, visits, codes), np.float32)
  mask = np.zeros((rows, visits), np.float32)
  risk = np.zeros(rows)
  base = rng.dirichlet(np.ones(codes) * 0.3)
  for r in range(rows):
    n = 0 if rng.rand() < no_history else rng.randint(1, visits + 1)
    frailty = rng.rand()
    for v in range(visits - n, visits):
      k = rng.randint(1, 6)
      picked = rng.choice(codes, size=k, replace=False, p=base)
      if rng.rand() < frailty * 0.6:
        picked = np.append(picked, rng.choice([0, 1, 2]))
      x[r, v, picked] = 1.0
      mask[r, v] = 1.0
      recency = 0.5 + (v - visits + n + 1) / max(n, 1)
      risk[r] += recency * (1.2 * x[r, v, 0] + 0.9 * x[r, v, 1] + 1.5 * x[r, v, 2])
  y = rng.rand(rows) < 1 / (1 + np.exp(-(risk - 2.0) * 1.5))
  return (x, mask), y[:, None].astype(np.float32)


class RetainAttention(L.Layer):
  """RETAIN's two attentions (Choi et al., 2016): over the visit embeddings in reverse time, a
  GRU whose Dense(1) scores give the visit weights alpha (a softmax over the visits, padding
  visits' scores set to `fill`: -inf as the user wrote it) and a GRU whose Dense(dim) + tanh
  gives the per-variable weights beta; the context sum_t alpha_t beta_t v_t."""

  def __init__(self, dim, fill=-np.inf, **kwargs):
    super().__init__(**kwargs)
    self.fill = fill
    self.gru_a, self.gru_b = L.GRU(dim, return_sequences=True), L.GRU(dim, return_sequences=True)
    self.score, self.beta = L.Dense(1), L.Dense(dim, activation='tanh')

  def call(self, v, mask):
    rev = tf.reverse(v, axis=[1])
    e = tf.reverse(self.score(self.gru_a(rev)), axis=[1])[..., 0]
    e = tf.where(mask > 0, e, tf.constant(self.fill, e.dtype))
    alpha = tf.nn.softmax(e, axis=-1)[..., None]
    beta = tf.reverse(self.beta(self.gru_b(rev)), axis=[1])
    return tf.reduce_sum(alpha * beta * v, axis=1)


def retain_lite(seed, *, visits=10, codes=60, dim=32, fill=-np.inf):
  """A RETAIN-lite: a visit embedding (Dense(dim), no bias, of the multi-hot codes),
  `RetainAttention(dim, fill)`, Dropout(0.2), Dense(1): the logit of heart-failure onset."""
  _seed(seed)
  x, mask = keras.Input((visits, codes)), keras.Input((visits,))
  v = L.Dense(dim, use_bias=False)(x)
  c = L.Dropout(0.2)(RetainAttention(dim, fill)(v, mask))
  return keras.Model([x, mask], L.Dense(1)(c), name='retain_lite')


def light_curves(seed, *, rows=2048, global_bins=128, local_bins=32):
  """Exoplanet transit vetting in miniature: phase-folded light curves in raw photo-electron
  counts per cadence (the star's brightness sets the level: 2e3 to 2e5, log-uniform, so about
  a quarter of the stars exceed 65,504), a global view of the whole orbit and a local view
  around the event; planets are flat-bottomed dips of 0.3% to 2%, false positives (eclipsing
  binaries) are V-shaped, deeper, with a secondary eclipse at phase 0.5, both with photon
  noise. ((global (rows, global_bins, 1), local (rows, local_bins, 1)), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 2, size=rows)
  level = np.exp(rng.uniform(np.log(2e3), np.log(2e5), rows))
  views = []
  for bins, width in ((global_bins, 0.04), (local_bins, 0.5)):
    ph = np.linspace(-0.5, 0.5, bins)[None]
    dur = width * rng.uniform(0.6, 1.4, (rows, 1))
    depth = np.where(y[:, None] == 1, rng.uniform(0.003, 0.02, (rows, 1)),
                     rng.uniform(0.01, 0.05, (rows, 1)))
    box = np.clip(1.2 - np.abs(ph) / dur * 2, 0, 1)
    vee = np.clip(1 - np.abs(ph) / dur * 2, 0, 1)
    shape = np.where(y[:, None] == 1, box, vee)
    if bins == global_bins:
      second = np.clip(1 - np.abs(np.abs(ph) - 0.5) / dur * 2, 0, 1) * 0.4
      shape = shape + np.where(y[:, None] == 1, 0.0, second)
    flux = level[:, None] * (1 - depth * shape)
    flux = flux + np.sqrt(flux) * rng.randn(rows, bins) * 3
    views.append(flux[..., None].astype(np.float32))
  return tuple(views), y[:, None].astype(np.float32)


class MedianNorm(L.Layer):
  """The light curve divided by its median (the mean of the middle half, sorted) minus 1, as the
  user wrote it, in the layer's compute dtype."""

  def call(self, x):
    s = tf.sort(x, axis=1)
    n = x.shape[1]
    med = tf.reduce_mean(s[:, n // 4:3 * n // 4], axis=1, keepdims=True)
    return (x / med - 1.0) * 100.0


def astronet_lite(seed, *, global_bins=128, local_bins=32, norm_dtype=None):
  """An AstroNet-lite (Shallue & Vanderburg, 2018): two columns, each `MedianNorm` (in
  `norm_dtype`; None: the policy's compute dtype) and Conv1D + max-pooling blocks (global: 16,
  32, 64 filters of 5; local: 16, 32 of 5), flattened and concatenated, two Dense(64) + ReLU
  with Dropout(0.2), Dense(1) in float32: the logit of a planet."""
  _seed(seed)
  g, loc = keras.Input((global_bins, 1)), keras.Input((local_bins, 1))
  cols = []
  for inp, filters in ((g, (16, 32, 64)), (loc, (16, 32))):
    h = MedianNorm(dtype=norm_dtype)(inp)
    for f in filters:
      h = L.Conv1D(f, 5, padding='same', activation='relu')(h)
      h = L.MaxPooling1D(3, strides=2, padding='same')(h)
    cols.append(L.Flatten()(h))
  h = L.Concatenate()(cols)
  for _ in range(2):
    h = L.Dropout(0.2)(L.Dense(64, activation='relu')(h))
  return keras.Model([g, loc], L.Dense(1, dtype='float32')(h), name='astronet_lite')


def road_graph(sensors=12):
  """The sensor graph of a ring road with two cross links: the normalised adjacency
  D^-1/2 (A + I) D^-1/2 (sensors x sensors)."""
  a = np.eye(sensors)
  for i in range(sensors):
    a[i, (i + 1) % sensors] = a[(i + 1) % sensors, i] = 1.0
  for i, j in ((0, 6), (3, 9)):
    a[i, j] = a[j, i] = 1.0
  d = 1.0 / np.sqrt(a.sum(axis=1))
  return (a * d[:, None] * d[None]).astype(np.float32)


def traffic_speeds(seed, *, windows=3000, history=12, sensors=12, missing=0):
  """Loop-detector speeds on the ring road, 5-minute readings in mph, standardised with the
  training set's mean and standard deviation: free flow about 65 with two rush hours whose
  congestion spreads from sensor to sensor, noise; windows of `history` readings of every sensor
  and the next reading of each. `missing` readings (one sensor-time each, at random) are NaN
  (loop detector outages left in the CSV). (x (windows, history, sensors, 1), y (windows,
  sensors))."""
  rng = np.random.RandomState(seed)
  total = windows + history + 1
  t = np.arange(total)[:, None]
  day = (t % 288) / 288.0
  s = np.arange(sensors)[None]
  jam = (np.exp(-((day - 0.33 - s * 0.004) / 0.03) ** 2) +
         0.8 * np.exp(-((day - 0.72 + s * 0.004) / 0.04) ** 2))
  speed = 65 - 35 * jam * (0.7 + 0.3 * np.sin(s + t // 288)) + 3 * rng.randn(total, sensors)
  speed = (speed - speed.mean()) / speed.std()
  idx = np.arange(windows)[:, None] + np.arange(history + 1)[None]
  win = speed[idx]
  x, y = win[:, :history, :, None].copy(), win[:, history].copy()
  if missing:
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, missing, replace=False)] = np.nan
  return x.astype(np.float32), y.astype(np.float32)


class GraphConv(L.Layer):
  """A graph convolution over the sensors (Kipf & Welling's first-order form): A_hat X W,
  applied at every time step, ReLU."""

  def __init__(self, units, adjacency, **kwargs):
    super().__init__(**kwargs)
    self.adjacency = tf.constant(adjacency)
    self.dense = L.Dense(units)

  def call(self, x):
    return tf.nn.relu(self.dense(tf.einsum('ij,btjc->btic', self.adjacency, x)))


def gated_temporal(x, channels):
  """STGCN's temporal gated convolution: a (3 x 1) convolution over time into 2 * channels, the
  GLU (P * sigmoid(Q))."""
  h = L.Conv2D(2 * channels, (3, 1))(x)
  p, q = h[..., :channels], h[..., channels:]
  return p * keras.ops.sigmoid(q)


def stgcn_lite(seed, *, history=12, sensors=12):
  """An STGCN-lite (Yu et al., 2018): one ST-Conv block (a gated temporal convolution of 32, a
  `GraphConv` of 16, a gated temporal convolution of 32, LayerNorm), a temporal convolution
  over the remaining steps, Dense(1) per sensor: the next speed of every sensor."""
  _seed(seed)
  inputs = keras.Input((history, sensors, 1))
  h = gated_temporal(inputs, 32)
  h = GraphConv(16, road_graph(sensors))(h)
  h = L.LayerNormalization()(gated_temporal(h, 32))
  h = L.Conv2D(32, (history - 4, 1), activation='relu')(h)
  return keras.Model(inputs, L.Reshape((sensors,))(L.Dense(1)(h)), name='stgcn_lite')


def keywords(seed, *, rows=2048, frames=40, coeffs=20, words=8):
  """Keyword spotting in miniature: 40 frames of 20 MFCCs (unit scale) of eight keywords, each a
  fixed sequence of three to five phones (12 phone templates) stretched by a random speaking
  rate and shifted in time, over background babble. (x (rows, frames, coeffs), labels)."""
  rng = np.random.RandomState(seed)
  phones = rng.randn(12, coeffs)
  spellings = [rng.randint(0, 12, size=rng.randint(3, 6)) for _ in range(words)]
  y = rng.randint(0, words, size=rows)
  x = 0.6 * rng.randn(rows, frames, coeffs)
  for r in range(rows):
    sp = spellings[y[r]]
    per = rng.randint(4, 8)
    start = rng.randint(0, max(1, frames - per * len(sp)))
    for k, p in enumerate(sp):
      a = start + k * per
      x[r, a:a + per] += phones[p]
  return x.astype(np.float32), y.astype(np.int32)


class FlippedExponent(field.OneOffFault):
  """A one-off fault in the forward pass: the identity, but at its `at`-th training call (None:
  never) one activation reads inf (a bit flipped in an exponent by a flaky kernel or memory; not
  the data, the model or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.inf, **kwargs)


def quartznet_lite(seed, *, frames=40, coeffs=20, words=8, glitch=None):
  """A QuartzNet-lite (Kriman et al., 2020): a separable Conv1D (64, 11) prologue, three blocks
  of two time-channel separable convolutions (64, kernels 13, 15, 17), each BatchNorm + ReLU, a
  residual 1x1 convolution + BatchNorm around each block, a `FlippedExponent(glitch)` after the
  second block, a 1x1 epilogue (128) + ReLU, global average over time, Dense(words): the
  logits."""
  _seed(seed)
  inputs = keras.Input((frames, coeffs))
  h = L.ReLU()(L.BatchNormalization()(L.SeparableConv1D(64, 11, padding='same')(inputs)))
  for b, k in enumerate((13, 15, 17)):
    r = L.BatchNormalization()(L.Conv1D(64, 1)(h))
    for i in range(2):
      h = L.BatchNormalization()(L.SeparableConv1D(64, k, padding='same')(h))
      h = L.ReLU()(h + r) if i == 1 else L.ReLU()(h)
    if b == 1:
      h = FlippedExponent(glitch)(h)
  h = L.Conv1D(128, 1, activation='relu')(h)
  return keras.Model(inputs, L.Dense(words)(L.GlobalAveragePooling1D()(h)),
                     name='quartznet_lite')


def student_answers(seed, *, rows=4096, length=30, skills=10):
  """Knowledge tracing in miniature: each student's last `length` exercises as one-hot (skill,
  correct) pairs (2 * skills wide), the labels whether the student answers the next exercise of
  each skill correctly (multi-label: about 55% yes): mastery grows with practice of a skill and
  of its prerequisite, a student's aptitude scales it, answers are Bernoulli in it. (x (rows,
  length, 2 * skills), labels (rows, skills))."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, length, 2 * skills), np.float32)
  labels = np.zeros((rows, skills), np.float32)
  prereq = np.concatenate([[0], np.arange(skills - 1)])
  for r in range(rows):
    apt = rng.randn()
    mastery = rng.randn(skills) * 0.5 - 0.5
    focus = rng.choice(skills, size=3, replace=False)
    for t in range(length):
      s = focus[rng.randint(3)] if rng.rand() < 0.7 else rng.randint(skills)
      p = 1 / (1 + np.exp(-(mastery[s] + apt)))
      c = rng.rand() < p
      x[r, t, s + skills * c] = 1.0
      mastery[s] += 0.35
      mastery[prereq[s]] += 0.1
    p = 1 / (1 + np.exp(-2.5 * (mastery + apt)))
    labels[r] = rng.rand(skills) < p
  return x, labels


def dkt_lite(seed, *, length=30, skills=10, dim=64, activation='softmax'):
  """A DKT-lite (Piech et al., 2015): an LSTM(dim) over the (skill, correct) one-hots,
  Dropout(0.2), Dense(skills, `activation`): the probability of a correct next answer for each
  skill."""
  _seed(seed)
  inputs = keras.Input((length, 2 * skills))
  h = L.Dropout(0.2)(L.LSTM(dim)(inputs))
  return keras.Model(inputs, L.Dense(skills, activation=activation)(h), name='dkt_lite')


# --- Scenarios -------------------------------------------------------------------------------


@add('blind17_grad_pinet_stiff_beam_tail', 'exploding_gradients', 'pinet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#5127; keras-team/keras#510; RaoFoundation/bittensor#229')
def _(seed, cured=False):
  """A Pi-net-lite (a degree-4 polynomial network: Hadamard products of linear maps, no
  activations) regressing beam deflections in cm (heavy-tailed, 0 to 20) from six standardised
  lab measurements, MSE, SGD + momentum 0.9 at 0.01 (an ordinary rate) and no clipping: the
  large errors of the stiff-beam tail meet the polynomial's multiplicative paths and the
  gradient grows step over step: the loss (fit's running mean) 27.5 at step 0, 17.6 at step 20,
  4.4e33 at step 30, NaN from step 31 (the weights NaN after step 31; the error 52 before, inf
  after; the constant answer's 36.8). Seed 1: 29, 15.4 at step 20, NaN from step 35.
  keras-team/keras#5127 ("why do the loss equal nan when i don't use clipnorm?": "the gradient
  gets really really large"); keras-team/keras#510 (NaN loss, "using clipnorm is one solution
  working for me"); RaoFoundation/bittensor#229 (the loss explodes after some epochs; gradient
  clipping added). Cured: clipnorm=1.0 at the same rate: the loss 27.5 to 10.2, the error 52 to
  9.4."""
  x, y = beam_deflection(seed)
  return cases.Setup(pinet_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind17_lr_pspnet_sgd_rate_fifty', 'learning_rate', 'pspnet_lite',
     doors=('trainer', 'fit'), steps=120,
     citation=('arslan-chaudhry/dcsp_segmentation#1; CSAILVision/semantic-segmentation-pytorch#59; '
               'pavancm/CONTRIQUE#8'))
def _(seed, cured=False):
  """A PSPNet-lite (a BatchNorm stem, a pyramid pooling module of 1, 2 and 4 bins) segmenting
  roofs in 32x32 aerial tiles, per-pixel BinaryCrossentropy on logits, SGD + momentum 0.9 at
  learning_rate=50.0 (a thousand times the 0.05 this net trains at: the user typed 50 for
  5e-2): the loss (fit's running mean) 0.94 at step 0, 47 at step 2, 9.9e4 at step 5, 1.2e8 at
  step 10, still 1.6e7 at step 119, finite: the net diverged and answers "no roof" everywhere
  (the error 0.63 before, 0.115 after in both modes: the constant answer's 0.115). Seed 1: 30 at
  step 2, 3.7e10 at step 10 (the error 0.12 before, 0.16 after; the constant's 0.117).
  arslan-chaudhry/dcsp_segmentation#1 (a segmentation loss NaN after 14 steps: "the problem was
  with the learning rate"); CSAILVision/semantic-segmentation-pytorch#59 (loss NaN: "Try with
  a smaller learning rate"); pavancm/CONTRIQUE#8 ("Try reducing the learning rate"). Cured:
  0.05: the loss 0.94 to 0.063, the error 0.63 to 0.115 in inference (BatchNorm's moving
  statistics still young), 0.0054 in training mode."""
  x, y = rooftops(seed)
  return cases.Setup(pspnet_lite(seed),
                     keras.optimizers.SGD(0.05 if cured else 50.0, momentum=0.9),
                     BCE(from_logits=True), data.stream(x, y, batch=16, seed=seed),
                     'binary_logit')


@add('blind17_lr_vggish_lion_sgd_rate', 'learning_rate', 'vggish_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#4066; OpenNMT/OpenNMT-py#805; NLeSC/mcfly#43')
def _(seed, cured=False):
  """A VGGish-lite (four 3x3 convolutions, a Dense(128) embedding) tagging six sound
  classes from log-mel patches, Lion with weight decay at 3e-2 (the SGD recipe's rate kept when
  switching to Lion, whose usual range is 1e-4 to 3e-4: every weight moves by the rate's full
  sign step): the loss (fit's running mean) 1.87 at step 0, 32 at step 2, 4.5 at step 50, 63
  at step 149, no NaN, the net never learns (the error 0.85 before, 0.85 after, 0.81 in training
  mode; the constant answer's 0.78). Seed 1: 2.1, 65 at step 2, 22 at step 149 (the error 0.83
  before, 0.875 after; the constant's 0.77). keras-team/keras#4066 (only one class predicted,
  the accuracy stuck; fixed by Adam's smaller default rate); OpenNMT/OpenNMT-py#805 (Adam at
  SGD's rate 1: the perplexity stays high: "you need to set the learning_rate to 0.001");
  NLeSC/mcfly#43 (learning stops: the models that do not learn are the ones with a rate above
  0.03). Cured: 1e-4: the loss 1.87 to 0.99, the error 0.85 to 0.031."""
  x, y = audio_tags(seed)
  return cases.Setup(vggish_lite(seed),
                     keras.optimizers.Lion(1e-4 if cured else 3e-2, weight_decay=1e-2),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind17_init_gru4rec_zeros', 'initialisation', 'gru4rec_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='wagonhelm/NaNmnist#2; nndl/nndl-discussion#14; BVLC/caffe#2937')
def _(seed, cured=False):
  """A GRU4Rec-lite (item embeddings, a GRU, a Dense output over 150 items) predicting a
  web shop session's next view, Adagrad at 0.5, the GRU's kernel and recurrent weights and the
  output layer initialised to zeros ('zeros' passed to make runs reproducible): the GRU's state
  stays 0 and every weight but the output bias gets a zero gradient, so the net learns only the
  items' popularity: the loss 5.01 at step 0, 4.74 at step 199, no NaN (the error 1.0 before,
  0.94 after; the constant answer's 0.92). Seed 1: 5.01 to 4.79 (the error 1.0 before, 0.96
  after; the constant's 0.96). wagonhelm/NaNmnist#2 ("Pitfall: all zero initialization": every
  neuron computes the same output and gets the same update); nndl/nndl-discussion#14 (zero
  initial weights: no asymmetry, the update step zero); BVLC/caffe#2937 ("The CNN seems to not
  learn anything at all"). Cured: Keras's default initializers (glorot_uniform, orthogonal): the
  loss 5.01 to 4.35, the error 1.0 to 0.70."""
  x, y = sessions(seed)
  return cases.Setup(gru4rec_lite(seed, initializer=None if cured else 'zeros'),
                     keras.optimizers.Adagrad(0.5), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind17_div_csrnet_log_empty_count', 'division_or_log', 'csrnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation=('deeplearning4j/nd4j#377; summerlvsong/Aggregation-Cross-Entropy#2; '
               'mkocabas/focal-loss-keras#24'))
def _(seed, cured=False):
  """A CSRNet-lite (a VGG-style front end, a dilated back end) regressing crowd density
  maps of 32x32 surveillance frames, Adam at 1e-3, the user's loss the pixel MSE plus the
  squared error of the log counts, log(sum(pred)) - log(sum(true)); 0.6% of the frames are the
  empty plaza at night (count 0): log(0) = -inf: the loss inf on the first batch holding one
  (fit's running mean 17.6 at step 0, inf from step 1) and the weights and the loss NaN after
  it (the error 0.20 before, inf after; the constant answer's 0.098). Seed 1: healthy to step 9
  (31.5, 17.9 at step 5), inf at step 10, NaN after. deeplearning4j/nd4j#377 ("When z is zero,
  log(z) is -Infinity. This produces an overall score of NaN"); summerlvsong/
  Aggregation-Cross-Entropy#2 (log of an accumulated count that is 0 for an absent class: NaN);
  mkocabas/focal-loss-keras#24 (an epsilon added to the log to fix NaN). Cured: log1p of both
  counts: the loss 17.3 to 5.2, the error 0.20 to 0.0072."""
  x, y = crowds(seed)
  return cases.Setup(csrnet_lite(seed), keras.optimizers.Adam(1e-3), count_log_loss(cured),
                     data.stream(x, y, batch=16, seed=seed), 'regression')


@add('blind17_exp_retain_new_patient_mask', 'softmax_overflow', 'retain_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pytorch/pytorch#41508; pytorch/pytorch#103749; microsoft/Graphormer#141')
def _(seed, cured=False):
  """A RETAIN-lite (reverse-time GRU attentions over visits and variables) predicting
  heart-failure onset from ten visits of diagnosis codes, BinaryCrossentropy on logits, Nadam at
  2e-3, the padding visits' attention scores set to -inf before the softmax; 0.3% of the
  patients are new to the practice (no visit in the window): their row is all -inf, softmax
  gives -inf - (-inf) = NaN: healthy until the first batch holding one (the loss 0.697 at step
  0, 0.694 at step 5), NaN from step 7 (the weights NaN after it; the error 0.59 before, inf
  after; the constant answer's 0.47). Seed 1: NaN from step 16. pytorch/pytorch#41508
  (MultiheadAttention gradients NaN when rows are fully masked); pytorch/pytorch#103749 ("SDPA
  produces NaN with padding mask"); microsoft/Graphormer#141 (a row full of -inf: the softmax's
  denominator is 0). Cured: a finite fill of -1e9: the loss 0.697 to 0.50, the error 0.59 to
  0.18."""
  x, y = patient_visits(seed)
  return cases.Setup(retain_lite(seed, fill=-1e9 if cured else -np.inf),
                     keras.optimizers.Nadam(2e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind17_fp16_astronet_raw_flux', 'precision', 'astronet_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation=('qubvel-org/segmentation_models.pytorch#463; Blaizzy/mlx-vlm#293; '
               'THUFutureLab/gluon-face#28'))
def _(seed, cured=False):
  """An AstroNet-lite (a global and a local view of phase-folded light curves, each divided
  by its median in a `MedianNorm` layer, Conv1D columns) vetting transit candidates, AdamW at
  1e-3 with weight decay, under mixed_float16; the curves are raw photo-electron counts (2e3 to
  2e5) and about a quarter of the stars are brighter than 65,504, float16's largest value: the
  layer's cast makes them inf, and inf / inf = NaN: the outputs NaN for those stars before any
  training (the error inf before and after; the constant answer's 0.45), the loss NaN from step
  0 (the loss-scale optimizer skips those updates; the weights stay finite). Seed 1: the same
  (the constant's 0.445). qubvel-org/segmentation_models.pytorch#463 (sums past float16's
  6.55e4 give inf and a NaN loss); Blaizzy/mlx-vlm#293 ("Float16 has a max value of 65504 ...
  70000.0 in float16 becomes inf": upcast to float32 first); THUFutureLab/gluon-face#28 (values
  beyond float16's range become inf, the network diverges). Cured: `MedianNorm` in float32:
  the loss 0.85 to 0.65, the error 0.45 to 0.30."""
  x, y = light_curves(seed)
  return cases.Setup(astronet_lite(seed, norm_dtype='float32' if cured else None),
                     keras.optimizers.AdamW(1e-3, weight_decay=1e-2), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind17_input_stgcn_detector_outage', 'bad_input', 'stgcn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='danielegrattarola/keras-gat#14; circleAhn/TESLA-tf#1; haofeixu/gmflow#27')
def _(seed, cured=False):
  """An STGCN-lite (gated temporal convolutions around a graph convolution over twelve
  loop detectors of a ring road) forecasting every sensor's next 5-minute speed, MAE, RMSprop at
  1e-3; five readings of the 3,000 windows are NaN (detector outages left in the CSV, never
  filled): the first batch holding one gives NaN gradients and the weights go NaN after step 9,
  while fit's loss stays finite (0.57 at step 0, 0.66 at step 149: the ReLUs turn the NaN
  activations into zeros), the outputs NaN on clean data (the error 1.21 before, inf after; the
  constant answer's 1.04). Seed 1: the weights NaN after step 36. danielegrattarola/keras-gat#14
  (a loss NaN fixed by X[np.isnan(X)] = 0 after loading); circleAhn/TESLA-tf#1 ("The NaN loss
  issue you're experiencing is likely due to missing or NaN values in your dataset");
  haofeixu/gmflow#27 (ground truth that contains NaN skipped). Cured: the outages filled with
  the mean: the loss 0.57 to 0.42, the error 1.21 to 0.24. The measure reads clean batches
  (eval_data) for both runs."""
  x, y = traffic_speeds(seed, missing=5)
  if cured:
    x = np.nan_to_num(x, nan=0.0)  # Outages filled with the mean (0 after standardising).
  cx, cy = traffic_speeds(seed)
  return cases.Setup(stgcn_lite(seed), keras.optimizers.RMSprop(1e-3), 'mae',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(cx, cy, batch=32, seed=seed))


@add('blind17_transient_quartznet_flipped_exponent', 'transient', 'quartznet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='axolotl-ai-cloud/axolotl#2326; greatlog/DAN#8; Rikorose/DeepFilterNet#30')
def _(seed, cured=False):
  """A QuartzNet-lite (time-channel separable convolutions with BatchNorm and residual
  1x1 convolutions) spotting eight keywords in MFCC frames, SGD + Nesterov momentum 0.9 on a
  cosine decay from 0.05, training normally (the loss 2.31 at step 0, 0.36 at step 50) when one
  activation after the second block reads inf once (`FlippedExponent`: its 80th training call;
  step 75 in a plain `fit` after the measure's four training-mode passes; a bit flipped by a
  flaky kernel or memory, not the data, the model or the settings): the loss and the weights NaN
  from that step (the error 0.86 before, inf after; the constant answer's 0.85); the same step
  re-run is finite. Seed 1: the same step (0.33 at step 50, NaN from step 75).
  axolotl-ai-cloud/axolotl#2326 (a sudden NaN; resumed from a checkpoint on the same data it
  "passes without any issues"); greatlog/DAN#8 (NaN at a random iteration, gone after resuming);
  Rikorose/DeepFilterNet#30 ("in some rare circumstances NaNs may occur"; restarting from the
  last checkpoint works). Cured: the same run without the fault: the loss 2.31 to 0.14, the
  error 0.86 to 0.086."""
  x, y = keywords(seed)
  schedule = keras.optimizers.schedules.CosineDecay(0.05, decay_steps=600)
  return cases.Setup(quartznet_lite(seed, glitch=None if cured else 80),
                     keras.optimizers.SGD(schedule, momentum=0.9, nesterov=True),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind17_mismatch_dkt_multilabel_softmax', 'loss_output_mismatch', 'dkt_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#741; HaojiHu/Sets2Sets#3; mp2893/doctorai#10')
def _(seed, cured=False):
  """A DKT-lite (an LSTM over (skill, correct) one-hots) predicting, for each of ten
  skills, whether a student answers the next exercise correctly (multi-label, about 55% yes),
  Adadelta at 1.0, BinaryCrossentropy, the output layer Dense(10, activation='softmax'): the ten
  probabilities must sum to 1, so at most one skill can read above 0.5; the loss falls slowly
  (0.697 at step 0, 0.60 at step 149, no NaN) while every prediction stays "wrong": the error
  0.66 before and after (the constant answer's 0.34). Seed 1: 0.697 to 0.60, the error 0.65
  before and after (the constant's 0.35). keras-team/keras#741 (a multi-label classifier: "Don't
  use softmax. Use sigmoid units in the output layer and then use binary_crossentropy");
  HaojiHu/Sets2Sets#3 (softmax over a multi-label output sums to 1: sigmoid instead);
  mp2893/doctorai#10 ("Softmax for multi-label classification?"). Cured: activation='sigmoid':
  the loss 0.697 to 0.60, the error 0.51 to 0.27."""
  x, y = student_answers(seed)
  return cases.Setup(dkt_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adadelta(1.0), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
