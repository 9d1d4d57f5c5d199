"""A fifty-third blind set of sick scenarios (the 'blind53' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind52.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in weather and climate forecasting, traffic and
mobility forecasting, and retail demand forecasting (a GCN-LSTM-lite, an STID-lite, a GMAN-lite and
an AGCRN-lite traffic forecaster, a DLinear-lite, a FourCastNet-lite and a MetNet-lite weather
model, a PatchTST-lite and a HierE2E-lite demand forecaster).
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

BLIND53 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND53.add` with split='blind53'."""
  return BLIND53.add(name, expected, arch, split='blind53', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def road_speeds(seed, *, rows=2048, nodes=8, window=12, missing=0.0):
  """Loop-detector speeds of a small road network in miniature (a METR-LA / PeMS-like set, 5
  minute readings): each sensor a daily cycle (period 288 readings) with a morning and an evening
  dip, its neighbours' dips a few readings apart, noise; standardised, cut into windows; a share
  `missing` of the windows hold an outage of 3 to 8 readings on one sensor left as NaN (the CSV's
  blank cells as pandas reads them). (windows (rows, window, nodes), the next reading of every
  sensor (rows, nodes))."""
  rng = np.random.RandomState(seed)
  n = 288 * 14
  t = np.arange(n)[:, None]
  lag = np.arange(nodes)[None, :] * 3
  day = 2 * np.pi * (t - lag) / 288
  v = (60 - 18 * np.exp(-((np.mod(t - lag, 288) - 96) / 18.0) ** 2)
       - 22 * np.exp(-((np.mod(t - lag, 288) - 210) / 20.0) ** 2) + 3 * np.sin(day)
       + rng.randn(n, nodes) * 1.5)
  v = (v - v.mean()) / v.std()
  starts = rng.randint(0, n - window - 1, rows)
  x = np.stack([v[s:s + window] for s in starts]).astype(np.float32)
  y = np.stack([v[s + window] for s in starts]).astype(np.float32)
  for i in np.where(rng.rand(rows) < missing)[0]:
    a = rng.randint(0, window - 3)
    x[i, a:a + rng.randint(3, 9), rng.randint(nodes)] = np.nan
  return x, y


def ring_adjacency(nodes):
  """The normalised adjacency of a corridor of sensors (each linked to itself and its two
  neighbours), D^-1/2 (A + I) D^-1/2 as T-GCN builds it."""
  a = np.eye(nodes)
  for i in range(nodes):
    a[i, (i + 1) % nodes] = a[(i + 1) % nodes, i] = 1.0
  d = 1.0 / np.sqrt(a.sum(1))
  return (a * d[:, None] * d[None, :]).astype(np.float32)


def gcn_lstm(seed, *, window=12, nodes=8, activation='tanh'):
  """A GCN-LSTM-lite (StellarGraph's GCN_LSTM traffic forecaster, after Zhao et al.'s T-GCN),
  in miniature: each reading's graph convolution (the normalised corridor adjacency times the
  sensors' speeds, a Dense of 32 with ReLU), two stacked LSTMs of 64 over the window with
  `activation` (the cell output unbounded with 'relu'), a Dense per sensor: the next speeds."""
  _seed(seed)
  adj = tf.constant(ring_adjacency(nodes))
  x = keras.Input((window, nodes))
  h = L.Lambda(lambda t: tf.einsum('btn,mn->btm', t, adj))(x)
  h = L.Dense(32, activation='relu')(h)
  h = L.LSTM(64, activation=activation, return_sequences=True)(h)
  h = L.LSTM(64, activation=activation)(h)
  return keras.Model(x, L.Dense(nodes)(h), name='gcn_lstm_lite')


def station_weather(seed, *, rows=2048, window=48, channels=4):
  """Hourly readings of a weather station in miniature (an ETTh / Jena-climate-like set):
  temperature, humidity, pressure and wind, each a daily cycle, a slow synoptic swing and noise,
  standardised; the window of 48 hours and the next hour's temperature. (windows (rows, window,
  channels), the next temperature (rows, 1))."""
  rng = np.random.RandomState(seed)
  n = 24 * 200
  t = np.arange(n)[:, None]
  phase = rng.rand(1, channels) * 2 * np.pi
  v = (np.sin(2 * np.pi * t / 24 + phase) + 0.6 * np.sin(2 * np.pi * t / 170 + 2 * phase)
       + 0.15 * rng.randn(n, channels))
  v = (v - v.mean(0)) / v.std(0)
  starts = rng.randint(0, n - window - 1, rows)
  x = np.stack([v[s:s + window] for s in starts]).astype(np.float32)
  y = np.stack([v[s + window, :1] for s in starts]).astype(np.float32)
  return x, y


def dlinear(seed, *, window=48, channels=4, kernel=13):
  """A DLinear-lite (Zeng et al., 2023): the window split by a moving average of `kernel` hours
  into trend and remainder, one linear map of each over the flattened window, summed: the next
  hour's temperature."""
  _seed(seed)
  x = keras.Input((window, channels))
  trend = L.AveragePooling1D(kernel, strides=1, padding='same')(x)
  season = L.Subtract()([x, trend])
  out = L.Add()([L.Dense(1)(L.Flatten()(trend)), L.Dense(1)(L.Flatten()(season))])
  return keras.Model(x, out, name='dlinear_lite')


def sensor_table(seed, *, rows=2048, nodes=16, window=12):
  """STID's inputs in miniature: a sensor's last `window` standardised speeds, its id and the
  time of day (one of 288 slots, scaled to [0, 1]) in one row; the next speed. (rows (rows,
  window + 2), the next speed (rows, 1))."""
  rng = np.random.RandomState(seed)
  n = 288 * 7
  t = np.arange(n)
  base = rng.randn(nodes) * 0.5
  slot = np.mod(t, 288)
  v = (base[:, None] - np.exp(-((slot[None] - 96 - 4 * np.arange(nodes)[:, None]) / 20.0) ** 2)
       - 1.2 * np.exp(-((slot[None] - 210) / 25.0) ** 2) + 0.1 * rng.randn(nodes, n))
  v = (v - v.mean()) / v.std()
  node = rng.randint(0, nodes, rows)
  starts = rng.randint(0, n - window - 1, rows)
  hist = np.stack([v[i, s:s + window] for i, s in zip(node, starts)])
  tod = slot[starts + window] / 288.0
  x = np.concatenate([hist, node[:, None], tod[:, None]], axis=1).astype(np.float32)
  y = np.array([v[i, s + window] for i, s in zip(node, starts)], np.float32)[:, None]
  return x, y


def stid(seed, *, nodes=16, window=12, init='glorot_uniform'):
  """An STID-lite (Shao et al., 2022): the history's projection (32), a sensor-id embedding (16)
  and a time-of-day embedding (16) concatenated, two residual MLP blocks of 64 (ReLU), a linear
  head: the next speed. `init` for every kernel and embedding."""
  _seed(seed)
  x = keras.Input((window + 2,))
  hist = L.Lambda(lambda t: t[:, :window])(x)
  node = L.Lambda(lambda t: tf.cast(t[:, window], tf.int32))(x)
  tod = L.Lambda(lambda t: tf.cast(t[:, window + 1] * 288, tf.int32))(x)
  emb_init = 'uniform' if init == 'glorot_uniform' else init
  h = L.Concatenate()([L.Dense(32, kernel_initializer=init)(hist),
                       L.Embedding(nodes, 16, embeddings_initializer=emb_init)(node),
                       L.Embedding(288, 16, embeddings_initializer=emb_init)(tod)])
  for _ in range(2):
    r = L.Dense(64, activation='relu', kernel_initializer=init)(h)
    r = L.Dense(64, kernel_initializer=init)(r)
    h = L.Add()([h if h.shape[-1] == 64 else L.Dense(64, kernel_initializer=init)(h), r])
  return keras.Model(x, L.Dense(1, kernel_initializer=init)(h), name='stid_lite')


def item_sales(seed, *, rows=2048, window=28):
  """Daily unit sales of slow-moving store items in miniature (an M5 / Favorita-like set): a
  Poisson count whose rate has a strong weekly cycle (weekends several times weekdays) and a
  promotion lift, so that many weekdays sell nothing; the last 28 days and the next day's sales.
  (windows (rows, window, 1), the next day's units (rows, 1))."""
  rng = np.random.RandomState(seed)
  n = 7 * 60
  week = np.array([0.3, 0.2, 0.3, 0.6, 2.0, 6.0, 5.0])
  x, y = [], []
  for _ in range(rows // 64):
    level = rng.uniform(0.6, 1.6)
    rate = level * week[np.arange(n) % 7] * np.where(rng.rand(n) < 0.05, 2.0, 1.0)
    sales = rng.poisson(rate).astype(np.float32)
    for s in rng.randint(0, n - window - 1, 64):
      x.append(sales[s:s + window])
      y.append(sales[s + window])
  return (np.array(x, np.float32)[..., None], np.array(y, np.float32)[:, None])


def patchtst(seed, *, window=28, patch=7, dim=32):
  """A PatchTST-lite (Nie et al., 2023): the window cut into patches of a week, each embedded
  (`dim`) with a learned position, one Transformer encoder block (Keras MultiHeadAttention, 2
  heads, a ReLU feed-forward of 64, layer norms), flattened, a linear head: the next day."""
  _seed(seed)
  x = keras.Input((window, 1))
  h = L.Reshape((window // patch, patch))(x)
  h = L.Dense(dim)(h)
  pos = L.Embedding(window // patch, dim)(tf.range(window // patch)[None])
  h = h + pos
  h = L.LayerNormalization()(h + L.MultiHeadAttention(2, dim // 2)(h, h))
  h = L.LayerNormalization()(h + L.Dense(dim)(L.Dense(64, activation='relu')(h)))
  return keras.Model(x, L.Dense(1)(L.Flatten()(h)), name='patchtst_lite')


def handwritten_mape(y, p):
  """mean(|y - p| / |y|), the forecasting threads' MAPE loss written by hand."""
  return field.relative_error(y, p)


def wmape(y, p):
  """The weighted absolute percentage error sum|y - p| / sum|y| (the threads' remedy for
  intermittent demand: one denominator for the batch, never 0 unless nothing sold)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_sum(tf.abs(y - p)) / (tf.reduce_sum(tf.abs(y)) + 1.0)


def corridor_with_embeddings(seed, *, rows=2048, nodes=8, window=12, se_scale=3.0):
  """GMAN's inputs in miniature: `road_speeds` windows, and for each sensor its spatial embedding
  (node2vec vectors of 32, as the SE file the GMAN repository reads: entries of a few units, no
  normalisation: `se_scale`) added to every reading's features. (speeds and embeddings
  concatenated (rows, window, nodes, 1 + 32), the next speeds (rows, nodes))."""
  x, y = road_speeds(seed, rows=rows, nodes=nodes, window=window)
  rng = np.random.RandomState(100 + seed)
  se = rng.randn(nodes, 32) * se_scale
  se = np.broadcast_to(se[None, None], (rows, window, nodes, 32))
  return np.concatenate([x[..., None], se], axis=-1).astype(np.float32), y


class HandTemporalAttention(L.Layer):
  """GMAN's temporal attention written as the thread's code does it: for each sensor, scores
  q.k between time steps (the 1/sqrt(d) left out) made into weights by exp(s) / sum(exp(s))
  (`naive`; no max subtracted), or by tf.nn.softmax; the weighted values added back."""

  def __init__(self, dim, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.naive = dim, naive
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):  # x: (batch, nodes, time, dim)
    scores = tf.matmul(self.q(x), self.k(x), transpose_b=True)
    if self.naive:
      e = tf.exp(scores)
      weights = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    else:
      weights = tf.nn.softmax(scores, axis=-1)
    return x + tf.matmul(weights, self.v(x))


def gman(seed, *, nodes=8, window=12, dim=32, naive=True):
  """A GMAN-lite (Zheng et al., 2020), in miniature: each reading and its sensor's spatial
  embedding through a Dense of `dim` (the ST-embedding fusion), one temporal attention block
  (`HandTemporalAttention`) per sensor, a ReLU Dense, the last step read out per sensor: the next
  speeds."""
  _seed(seed)
  x = keras.Input((window, nodes, 33))
  h = L.Dense(dim)(x)
  h = L.Permute((2, 1, 3))(h)  # (nodes, time, dim)
  h = HandTemporalAttention(dim, naive=naive)(h)
  h = L.Dense(dim, activation='relu')(h)
  h = L.Lambda(lambda t: t[:, :, -1])(h)
  return keras.Model(x, L.Reshape((nodes,))(L.Dense(1)(h)), name='gman_lite')


def store_items(seed, *, rows=1024, items=512, window=28):
  """A store's item-level sales in miniature for a hierarchical forecast (an M5-like store): each
  item's daily units around its own level (100 to 300 a day, a fast mover) with the store's
  weekly cycle (0.78 to 1.22) and noise; the input each item's last 28 days divided by its level
  (DeepAR-style scaling) and the level itself; the label the store's total for the next day (a
  hundred thousand units). (items (rows, items, window + 1), the store total (rows, 1))."""
  rng = np.random.RandomState(seed)
  level = rng.uniform(100, 300, items)
  week = 1 + 0.22 * np.sin(2 * np.pi * np.arange(7) / 7 + 0.5)
  day0 = rng.randint(0, 7, rows)
  days = (day0[:, None] + np.arange(window + 1)[None]) % 7
  mult = week[days][:, None, :] * (1 + 0.03 * rng.randn(rows, items, window + 1))
  units = level[None, :, None] * mult
  x = np.concatenate([units[:, :, :window] / level[None, :, None],
                      np.broadcast_to(level[None, :, None], (rows, items, 1))], axis=-1)
  y = units[:, :, window].sum(axis=1, keepdims=True)
  return x.astype(np.float32), y.astype(np.float32)


class ScaleAndSum(L.Layer):
  """Each item's scaled forecast times its level, summed over the store's items (the
  bottom-up aggregation of a hierarchical forecast), in the layer's compute dtype."""

  def call(self, inputs):
    norm, level = inputs
    return tf.reduce_sum(norm * level, axis=1)


def hiere2e(seed, *, items=512, window=28, float32_sum=False):
  """A HierE2E-lite (Rangapuram et al., 2021), in miniature: a shared item network (the scaled
  history's mean plus a ReLU MLP of 32's correction) forecasting each item's next day, the
  forecasts rescaled by the items' levels and summed up the hierarchy to the store total
  (`ScaleAndSum`; in float32 with `float32_sum`)."""
  _seed(seed)
  x = keras.Input((items, window + 1))
  hist = L.Lambda(lambda t: t[..., :window])(x)
  level = L.Lambda(lambda t: t[..., window:])(x)
  base = L.Lambda(lambda t: tf.reduce_mean(t, axis=-1, keepdims=True))(hist)
  corr = L.Dense(1)(L.Dense(32, activation='relu')(hist))
  norm = L.Add()([base, corr])
  total = ScaleAndSum(dtype='float32' if float32_sum else None)([norm, level])
  return keras.Model(x, total, name='hiere2e_lite')


def agcrn(seed, *, nodes=8, window=12, embed=6, units=32):
  """An AGCRN-lite (Bai et al., 2020), in miniature: learned node embeddings E give the adaptive
  adjacency softmax(relu(E E^T)); each reading's graph convolution with it, a Dense of 16 per
  sensor, a GRU of `units` over the window (the sensors flattened), a Dense per sensor: the next
  speeds."""
  _seed(seed)

  class AdaptiveGraph(L.Layer):
    def build(self, shape):
      self.e = self.add_weight(shape=(nodes, embed), initializer='glorot_uniform', name='e')

    def call(self, t):  # (batch, time, nodes)
      a = tf.nn.softmax(tf.nn.relu(tf.matmul(self.e, self.e, transpose_b=True)), axis=-1)
      return tf.einsum('btn,mn->btm', t, a)

  x = keras.Input((window, nodes))
  h = L.Concatenate()([x, AdaptiveGraph()(x)])
  h = L.Dense(16 * nodes // 2, activation='relu')(h)
  h = L.GRU(units)(h)
  return keras.Model(x, L.Dense(nodes)(h), name='agcrn_lite')


def weather_grids(seed, *, rows=1536, size=16, channels=2):
  """Reanalysis-like fields on a small grid in miniature (an ERA5 stand-in for FourCastNet):
  two fields (geopotential- and temperature-like), each a few waves drifting eastward at their
  own speeds, standardised; the state and the state six hours on. (grids (rows, size, size,
  channels), the next grids (rows, size, size, channels))."""
  rng = np.random.RandomState(seed)
  g = np.arange(size) / size * 2 * np.pi
  lon, lat = np.meshgrid(g, g)
  kx, ky = rng.randint(1, 3, (2, channels, 3)), rng.randint(0, 2, (2, channels, 3))

  def state(t0, dt):
    out = np.zeros((len(t0), size, size, channels), np.float32)
    for c in range(channels):
      for w in range(3):
        ph = (t0 + dt) * (0.3 + 0.2 * w + 0.1 * c)
        out[..., c] += np.sin(kx[0, c, w] * lon[None] + ky[0, c, w] * lat[None] - ph[:, None, None])
    return out / 1.5

  t0 = rng.rand(rows) * 100
  return state(t0, 0.0), state(t0, 1.0)


class Glitch(field.OneOffFault):
  """`field.OneOffFault` with the element fixed: the first token's first feature reads NaN at
  the `at`-th training call (a flipped bit in one activation buffer)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, **kwargs)


def fourcastnet(seed, *, size=16, channels=2, patch=4, dim=48, glitch_at=None):
  """A FourCastNet-lite (Pathak et al., 2022), in miniature: 4x4 patch embedding (`dim`), two
  mixing blocks (global token mixing, here a learned dense across the 16 tokens in place of
  AFNO's Fourier filter, then a channel MLP, each residual with layer norm), a linear patch
  decoder: the fields six hours on. A `Glitch` after the patch embedding."""
  _seed(seed)
  tokens = (size // patch) ** 2
  x = keras.Input((size, size, channels))
  h = L.Conv2D(dim, patch, strides=patch)(x)
  h = L.Reshape((tokens, dim))(h)
  h = Glitch(glitch_at)(h)
  for _ in range(2):
    t = L.Permute((2, 1))(L.LayerNormalization()(h))
    h = h + L.Permute((2, 1))(L.Dense(tokens)(L.Dense(tokens, activation='gelu')(t)))
    h = h + L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(L.LayerNormalization()(h)))
  h = L.Dense(patch * patch * channels)(h)
  h = L.Reshape((size // patch, size // patch, patch, patch, channels))(h)
  h = L.Permute((1, 3, 2, 4, 5))(h)
  return keras.Model(x, L.Reshape((size, size, channels))(h), name='fourcastnet_lite')


def radar_sequences(seed, *, rows=1536, frames=4, size=16):
  """Radar reflectivity sequences in miniature (MetNet's precipitation nowcast): a rain cell
  drifting across the domain over four frames, or none but clutter; the label whether it rains
  over the centre at the lead time (about a sixth of the sequences). (frames (rows, frames, size,
  size, 1), rain or not (rows, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  x = 0.1 * rng.rand(rows, frames, size, size, 1)
  y = np.zeros((rows, 1))
  for i in range(rows):
    cx, cy = rng.uniform(0, size, 2)
    vx, vy = rng.uniform(-2, 2, 2)
    r = rng.uniform(2, 4)
    for f in range(frames):
      px, py = cx + vx * f, cy + vy * f
      x[i, f, ..., 0] += np.exp(-((xx - px) ** 2 + (yy - py) ** 2) / (2 * r * r))
    px, py = cx + vx * (frames + 1), cy + vy * (frames + 1)
    y[i] = float((px - size / 2) ** 2 + (py - size / 2) ** 2 < (r + 2) ** 2)
  return x.astype(np.float32), y.astype(np.float32)


def metnet(seed, *, frames=4, size=16, activation='sigmoid'):
  """A MetNet-lite (Sonderby et al., 2020), in miniature: a spatial downsampler (a strided
  convolution of 16 per frame), a ConvLSTM of 16 over the frames, self-attention over the 8x8
  positions (Keras MultiHeadAttention standing in for the axial attention), global pooling and
  Dense(1, `activation`): rain at the lead time or not."""
  _seed(seed)
  x = keras.Input((frames, size, size, 1))
  h = L.TimeDistributed(L.Conv2D(16, 3, strides=2, padding='same', activation='relu'))(x)
  h = L.ConvLSTM2D(16, 3, padding='same')(h)
  t = L.Reshape(((size // 2) ** 2, 16))(h)
  t = L.LayerNormalization()(t + L.MultiHeadAttention(2, 8)(t, t))
  return keras.Model(x, L.Dense(1, activation=activation)(L.GlobalAveragePooling1D()(t)),
                     name='metnet_lite')


# --- The scenarios. ----------------------------------------------------------------------------

DOORS = ('trainer', 'fit')


@add('blind53_explode_gcn_lstm_relu', 'exploding_gradients', 'gcn_lstm_lite', doors=DOORS,
     steps=200, citation='keras-team/keras#13221; equinor/gordo#346')
def _(seed, cured=False):
  """A GCN-LSTM-lite forecasting a corridor's next speeds from the last eight hours (96
  readings), two stacked LSTMs with activation='relu' (as the threads' code has them), MSE, Adam
  at 1e-2: the unbounded cell outputs and their gradients grow along the 96 steps: the loss 0.98
  at step 0, the running loss past 2.7e+14 and NaN from step 5, the weights NaN (the error 1.10
  before, non-finite after; the constant answer's 1.08). Seed 1: past 7.9e+20, NaN from step 6
  (1.13 before). keras-team/keras#13221 (stacked LSTMs with activation='relu': NaN losses and
  weights within a few batches, clipnorm did not help, 'tanh' stable); equinor/gordo#346 (relu in
  the Keras models caused infinities and NaNs all over the place: the default made tanh). Cured:
  activation='tanh' (with clipnorm=1.0; clipnorm alone, tried first, went NaN too): the loss 0.97
  to 0.065, the error 1.08 to 0.047."""
  x, y = road_speeds(seed, window=96)
  opt = keras.optimizers.Adam(1e-2, clipnorm=1.0 if cured else None)
  return cases.Setup(gcn_lstm(seed, window=96, activation='tanh' if cured else 'relu'), opt, 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind53_lr_dlinear_sgd', 'learning_rate', 'dlinear_lite', doors=DOORS, steps=200,
     citation='tensorflow/tensorflow#38796; guillaumegenthial/sequence_tagging#47')
def _(seed, cured=False):
  """A DLinear-lite forecasting the next hour's temperature from 48 hours of four standardised
  station readings, MSE, SGD at 0.5 with momentum 0.9 (a rate fifty times the one it was tuned
  at): every update overshoots the quadratic's bottom: the loss 1.83 at step 0, inf at step 12,
  NaN after (the error 1.58 before, non-finite after; the constant answer's 1.08). Seed 1: the
  loss 4.84 at step 0, non-finite from step 12. tensorflow/tensorflow#38796 (a high learning rate
  gives a NaN or inf loss with tf.keras.optimizers.SGD; less often at a lower one);
  guillaumegenthial/sequence_tagging#47 (at lr 0.01 or 0.1 the loss falls, rises, then NaN; 0.001
  is fine). Cured: SGD at 0.01 with the same momentum: the error 1.58 to 0.037."""
  x, y = station_weather(seed)
  opt = keras.optimizers.SGD(0.01 if cured else 0.5, momentum=0.9)
  return cases.Setup(dlinear(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind53_init_stid_zeros', 'initialisation', 'stid_lite', doors=DOORS, steps=200,
     citation='yz93/LAVT-RIS#25; jthickstun/pytorch_musicnet#4')
def _(seed, cured=False):
  """An STID-lite forecasting a loop detector's next speed from its last hour, its id and the
  time of day, MSE, Adam at 1e-3, every kernel and embedding initialised to zeros (as a
  hand-written tf.zeros start): every hidden unit reads 0 and every kernel's gradient is 0 but the
  head's bias: the loss 0.96 at step 0 and 1.005 at the end, the mean answered (the error 1.04
  before, 1.05 after; the constant answer's 1.02). Seed 1: 0.942 before, 0.941 after (the
  constant's 0.939). yz93/LAVT-RIS#25 (with both layers zero-initialised the first layer's
  gradient is all zeros; one zero init removed, it learns); jthickstun/pytorch_musicnet#4 (zero
  initial weights are only fine for a linear model: no symmetry to break). Cured: glorot_uniform
  kernels and uniform embeddings (Keras's defaults): the error 0.136 to 0.034."""
  x, y = sensor_table(seed)
  return cases.Setup(stid(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind53_log_patchtst_mape_zero_sales', 'division_or_log', 'patchtst_lite', doors=DOORS,
     steps=200, citation='unit8co/darts#2517; LibCity/Bigscity-LibCity#219')
def _(seed, cured=False):
  """A PatchTST-lite forecasting an item's next-day unit sales from its last 28 days
  (intermittent demand: many weekdays sell nothing), trained on a MAPE written by hand,
  mean(|y - p| / |y|): every batch holds zero-sales days, |y - p| / 0 is inf: the loss inf at
  step 0 and NaN after, the weights NaN (the error 11.8 before, non-finite after; the constant
  answer's 10.1). Seed 1: the same from step 0 (4.71 before, the constant's 4.81).
  unit8co/darts#2517 (a TFT trained with MapeLoss: the loss 0, the predictions all NaN);
  LibCity/Bigscity-LibCity#219 (MAPE is inf because the ground truth holds zeros: mask them).
  Cured: the weighted APE, sum|y - p| / sum|y|: the loss 0.98 to 0.53, the error 11.8 to 2.7."""
  x, y = item_sales(seed)
  return cases.Setup(patchtst(seed), keras.optimizers.Adam(1e-3),
                     wmape if cured else handwritten_mape,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind53_softmax_gman_naive_attention', 'softmax_overflow', 'gman_lite', doors=DOORS,
     steps=200, citation='pyg-team/pytorch_geometric#53; JuliaGraphs/GraphNeuralNetworks.jl#246')
def _(seed, cured=False):
  """A GMAN-lite forecasting a corridor's next speeds from the last hour, each reading fused with its
  sensor's node2vec spatial embedding (entries of a few units, not normalised), the temporal
  attention's softmax written by hand as exp(q.k) / sum(exp(q.k)) without the max subtracted or
  the 1/sqrt(d) scale: scores past 88.7 overflow exp to inf and inf / inf is NaN: the outputs
  non-finite before the first update, the loss NaN from step 0, seeds 0 and 1 (the constant
  answer's error 1.07 and 1.02). pyg-team/pytorch_geometric#53 (GAT's scatter softmax gives NaN
  often: exp taken straight, subtract the max); JuliaGraphs/GraphNeuralNetworks.jl#246 (GATConv's
  attention softmax overflows already with inputs of about 100). Cured: tf.nn.softmax on the
  same scores: the loss 32.7 to 1.03, the error 32.3 to 0.115."""
  x, y = corridor_with_embeddings(seed)
  return cases.Setup(gman(seed, naive=not cured), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind53_fp16_hiere2e_store_total', 'precision', 'hiere2e_lite', doors=DOORS, steps=200,
     precision='mixed_float16',
     citation='qubvel-org/segmentation_models.pytorch#463; tensorflow/tensorflow#47156')
def _(seed, cured=False):
  """A HierE2E-lite forecasting a store's next-day total (about a hundred thousand units) bottom-up
  from 512 items' scaled histories, MSE, Adam at 3e-3, under mixed_float16: the items' forecasts
  are rescaled and summed in float16 and the total passes float16's 65504: the output inf, the
  loss inf from step 0, every step's gradient non-finite (the error inf before and after; the
  constant answer's 2.6e+08). Seed 1: the loss 5.6e+09 at step 0, inf from step 35 (5.4e+09
  before, inf after). qubvel-org/segmentation_models.pytorch#463 (under mixed precision a sum
  over more than 65504 elements is inf in float16 and the loss NaN);
  tensorflow/tensorflow#47156 (mixed precision: a mean's sum overflows in float16; keep such
  reductions in float32). Cured: the rescale-and-sum layer in float32 (dtype='float32'): the
  error 2.3e+09 to 3.8e+04."""
  x, y = store_items(seed)
  return cases.Setup(hiere2e(seed, float32_sum=cured), keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind53_input_agcrn_nan_readings', 'bad_input', 'agcrn_lite', doors=DOORS, steps=200,
     citation='liyaguang/DCRNN#18; antoinecarme/pyaf#71')
def _(seed, cured=False):
  """An AGCRN-lite forecasting a corridor's next speeds from the last hour, Adam at 2e-3, MSE, the
  loop-detector windows read with the outages left as NaN (3% of the windows hold 3 to 8 missing
  readings on one sensor): the first batch holding one makes the loss and every gradient NaN:
  the loss NaN from step 1 (seed 0) and step 0 (seed 1), the weights NaN after (the constant
  answer's error 1.07, 1.02). liyaguang/DCRNN#18 (METR-LA has much missing and nil data: how is it
  dealt with? ignore it in the loss); antoinecarme/pyaf#71 (NaN is not supported in the signals:
  replace missing data first, fillna). Cured: the NaN readings filled with 0 (the standardised
  mean) before training: the error 1.13 to 0.045."""
  x, y = road_speeds(seed, missing=0.03)
  if cured:
    x = np.nan_to_num(x, nan=0.0)
  return cases.Setup(agcrn(seed), keras.optimizers.Adam(2e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind53_transient_fourcastnet_glitch', 'transient', 'fourcastnet_lite', doors=DOORS,
     steps=200, citation='PKU-YuanGroup/Open-Sora-Plan#333; AlexeyAB/darknet#5547')
def _(seed, cured=False):
  """A FourCastNet-lite forecasting two drifting reanalysis-like fields six hours on, MSE, Adam at
  1e-3, an otherwise healthy run in which one activation after the patch embedding reads NaN once
  (the 90th training call: a flipped bit, a misfiring kernel, not in the data; the call count
  kept outside the model): the loss falls from 2.8, then NaN at step 85 and every step after,
  the weights NaN (the error 2.82 before, non-finite after; the constant answer's 0.675). Seed 1:
  the same at step 85 (2.27 before). PKU-YuanGroup/Open-Sora-Plan#333 (a NaN loss after 20k+
  steps; the maintainers saw it too: just resume); AlexeyAB/darknet#5547 (a CUDA error and a NaN
  average loss traced to faulty hardware). Cured: the same run without the glitch: the error 2.82
  to 0.056."""
  x, y = weather_grids(seed)
  return cases.Setup(fourcastnet(seed, glitch_at=None if cured else 90),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind53_mismatch_metnet_softmax_one_unit', 'loss_output_mismatch', 'metnet_lite',
     doors=DOORS, steps=200, citation='keras-team/keras#126; keras-team/keras#7023')
def _(seed, cured=False):
  """A MetNet-lite nowcasting rain over the centre from four radar frames, binary cross-entropy,
  Adam at 1e-3, its head Dense(1, activation='softmax'): a softmax over one unit is 1.0 whatever
  the input, so every sequence is answered "rain". (Keras 3 computes the cross-entropy from the
  logits under the softmax, so the loss falls, 0.70 to 0.30, as if the head were a sigmoid.) The
  error 0.805 before and 0.805 after (the constant answer's 0.195). Seed 1: 0.852 and 0.852 (the
  constant's 0.148). keras-team/keras#126 (a Dense(64, 1, activation='softmax') output: y-hat
  always the same, the loss does not improve); keras-team/keras#7023 (a binary classifier
  assigning the same class to every image, the accuracy constant). Cured: Dense(1, 'sigmoid'):
  the error 0.61 to 0.11."""
  x, y = radar_sequences(seed)
  return cases.Setup(metnet(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
