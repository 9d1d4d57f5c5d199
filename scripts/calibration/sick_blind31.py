"""A thirty-first blind set of nine sick scenarios (the 'blind31' split), written without reading
the doctor, its policies, forensics or notes, or the other sick files (sick_blind29.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a TPA-LSTM-lite, a FastSpeech-lite, a CCPM-lite, a
DeepTCN-lite, a SAnD-lite, a DS-CNN keyword spotter, an FNN-lite, a NARM-lite and an
Att-BLSTM-lite). Each builder takes `cured`: the same run with the thread's remedy (the registry
calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only:
the sick run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it
train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND31 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND31.add` with split='blind31'."""
  return BLIND31.add(name, expected, arch, split='blind31', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def load_windows(seed, *, rows=2048, window=24, series=8, horizon=1):
  """Multivariate load series in miniature (the electricity / traffic layout TPA-LSTM is run
  on): `series` meters, each a daily cycle (period 24) and a weekly one with its own phase and
  amplitude, cross-coupled (each meter partly follows a common factor), plus noise; the inputs
  standardised per meter, the target the next hour of every meter in kilowatts (a level about
  10, a spread about 4, as the threads feed it). (window (rows, window, series), next (rows,
  series))."""
  rng = np.random.RandomState(seed)
  n = rows + window + horizon + 1
  t = np.arange(n)
  amp = rng.uniform(1.0, 3.0, series)
  ph = rng.uniform(0, 6.3, series)
  common = np.sin(2 * np.pi * t / 24)[:, None]
  raw = (10 + amp * np.sin(2 * np.pi * t[:, None] / 24 + ph) +
         0.8 * np.sin(2 * np.pi * t[:, None] / 168 + ph) + common * rng.uniform(0.5, 2, series) +
         0.3 * rng.randn(n, series))
  mu, sd = raw.mean(0), raw.std(0)
  std = (raw - mu) / sd
  starts = rng.randint(0, n - window - horizon, rows)
  x = np.stack([std[s:s + window] for s in starts])
  y = np.stack([raw[s + window + horizon - 1] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


class TemporalPatternAttention(L.Layer):
  """TPA-LSTM's temporal pattern attention (Shih et al., 2019): CNN filters spanning the whole
  window applied to each row (hidden unit) of the LSTM's past states H (a Dense over time: HC,
  (units, filters)); each row scored sigmoid(HC_i W h_t); the context v = sum_i score_i HC_i;
  out = W_h h_t + W_v v."""

  def __init__(self, filters=16, **kwargs):
    super().__init__(**kwargs)
    self.filters = filters

  def build(self, shapes):
    units = shapes[-1]
    self.conv = L.Dense(self.filters, use_bias=False)
    self.w = L.Dense(self.filters, use_bias=False)
    self.wh = L.Dense(units)
    self.wv = L.Dense(units, use_bias=False)

  def call(self, h):
    past, last = h[:, :-1], h[:, -1]
    hc = self.conv(tf.transpose(past, [0, 2, 1]))  # (batch, units, filters)
    score = tf.sigmoid(tf.einsum('buf,bf->bu', hc, self.w(last)))
    v = tf.einsum('bu,buf->bf', score, hc)
    return self.wh(last) + self.wv(v)


def tpa_lstm_lite(seed, *, window=24, series=8, units=32):
  """A TPA-LSTM-lite (Shih et al., 2019): an LSTM of `units` over the window (all its states),
  `TemporalPatternAttention` (16 filters), Dense(`series`): the next hour of every meter."""
  _seed(seed)
  x = keras.Input((window, series))
  h = L.LSTM(units, return_sequences=True)(x)
  return keras.Model(x, L.Dense(series)(TemporalPatternAttention()(h)), name='tpa_lstm_lite')


def phoneme_frames(seed, *, rows=2048, length=16, vocab=24, mels=16):
  """Text-to-spectrogram in miniature (the LJSpeech layout FastSpeech reads, durations already
  expanded): phoneme ids, and for each its mel frame (each phoneme its own spectral envelope,
  coloured by its left and right neighbours (co-articulation), in standardised log-mel units).
  (ids (rows, length), frames (rows, length, mels))."""
  rng = np.random.RandomState(seed)
  env = rng.randn(vocab, mels)
  left = rng.randn(vocab, mels) * 0.4
  ids = rng.randint(1, vocab, (rows, length))
  prev = np.concatenate([np.zeros((rows, 1), int), ids[:, :-1]], 1)
  nxt = np.concatenate([ids[:, 1:], np.zeros((rows, 1), int)], 1)
  y = env[ids] + left[prev] + 0.3 * left[nxt] + 0.1 * rng.randn(rows, length, mels)
  return ids.astype(np.int32), y.astype(np.float32)


def fastspeech_lite(seed, *, length=16, vocab=24, mels=16, d=64, blocks=2):
  """A FastSpeech-lite (Ren et al., 2019): a phoneme embedding of `d` plus a learned position
  embedding, `blocks` feed-forward transformer blocks (two-head self-attention, then two 1-D
  convolutions of width 3, 128 and `d`, each with a residual and post-layer normalisation), a
  linear projection to `mels`: the mel frames."""
  _seed(seed)
  x = keras.Input((length,), dtype='int32')
  h = L.Embedding(vocab, d)(x)
  pos = L.Embedding(length, d)(tf.range(length)[None])
  h = h + pos
  for _ in range(blocks):
    a = L.MultiHeadAttention(2, d // 2)(h, h)
    h = L.LayerNormalization()(h + a)
    f = L.Conv1D(128, 3, padding='same', activation='relu')(h)
    h = L.LayerNormalization()(h + L.Conv1D(d, 3, padding='same')(f))
  return keras.Model(x, L.Dense(mels)(h), name='fastspeech_lite')


def click_logs(seed, *, rows=8192, fields=8, vocab=20, dense=0, missing=0.0):
  """Click logs in miniature (the Criteo / Avazu layout CTR models read): `fields` categorical
  fields (ids 0..`vocab`-1 each) whose click-through depends on each value's own propensity and
  on the pairwise interactions of the fields' latent factors; with `dense` numeric fields too
  (counts, log-transformed, as Criteo's I1-I13 are after log(1 + x)), of which a fraction
  `missing` is missing: NaN, as pandas reads an empty cell. ((ids (rows, fields)[, numbers
  (rows, dense)]), clicked (rows, 1))."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  first = rng.randn(fields, vocab) * 1.0
  lat = rng.randn(fields, vocab, 4) * 0.6
  logit = first[np.arange(fields), ids].sum(1)
  v = lat[np.arange(fields), ids]
  logit += 0.5 * ((v.sum(1) ** 2).sum(1) - (v ** 2).sum((1, 2)))
  x = (ids.astype(np.int32),)
  if dense:
    num = np.log1p(rng.poisson(rng.uniform(1, 20, dense), (rows, dense))).astype(np.float32)
    w = rng.randn(dense) * 1.5
    logit += (num - num.mean(0)) @ w
    num[rng.rand(rows, dense) < missing] = np.nan
    x = (ids.astype(np.int32), num)
  logit = (logit - logit.mean()) / logit.std() * 3.0
  y = (rng.rand(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
  return x if dense else x[0], y[:, None]


class KMaxPool(L.Layer):
  """CCPM's flexible p-max pooling: the `k` largest values along the fields, in their order."""

  def __init__(self, k, **kwargs):
    super().__init__(**kwargs)
    self.k = k

  def call(self, x):
    t = tf.transpose(x, [0, 2, 1])  # (batch, channels, fields)
    idx = tf.sort(tf.math.top_k(t, self.k).indices, -1)
    return tf.transpose(tf.gather(t, idx, batch_dims=2), [0, 2, 1])


def ccpm_lite(seed, *, fields=8, vocab=20, dim=8, init='glorot_uniform'):
  """A CCPM-lite (Liu et al., 2015, convolutional click prediction): each field's embedding of
  `dim` stacked into a (fields, dim) matrix, a 1-D convolution over the fields (width 3, 16
  filters, tanh) and p-max pooling to 4, a second (width 2, 8 filters, tanh) and p-max pooling
  to 2, Dense(1, sigmoid): the click probability. Every convolution and Dense kernel
  initialised with `init`."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  offs = tf.constant(np.arange(fields) * vocab, tf.int32)
  h = L.Embedding(fields * vocab, dim)(x + offs)
  h = KMaxPool(4)(L.Conv1D(16, 3, padding='same', activation='tanh', kernel_initializer=init)(h))
  h = KMaxPool(2)(L.Conv1D(8, 2, padding='same', activation='tanh', kernel_initializer=init)(h))
  out = L.Dense(1, activation='sigmoid', kernel_initializer=init)(L.Flatten()(h))
  return keras.Model(x, out, name='ccpm_lite')


def daily_sales(seed, *, rows=2048, window=28, items=64):
  """Daily demand in miniature (the JD.com / M5 layout DeepTCN forecasts): the unit sales of
  `items` products, each a Poisson count around its own level (1 to 150 a day) with a weekly
  pattern and promotions (a day of 2 to 3 times the demand, announced by a flag); a window of
  `window` days of raw counts and the promotion flags (the next day's flag included) in, the
  next day's count out. (window (rows, window + 1, 2), count (rows, 1))."""
  rng = np.random.RandomState(seed)
  days = rows // items + window + 2
  level = np.exp(rng.uniform(0, 5.0, items))
  week = 1 + 0.5 * np.sin(2 * np.pi * np.arange(days)[:, None] / 7 + rng.uniform(0, 6.3, items))
  promo = (rng.rand(days, items) < 0.1).astype(float)
  lam = level * week * (1 + promo * rng.uniform(1, 2, (days, items)))
  sales = rng.poisson(lam).astype(float)
  centre = sales.mean()
  xs, ys = [], []
  for _ in range(rows):
    i, s = rng.randint(items), rng.randint(0, days - window - 1)
    hist = np.append(sales[s:s + window, i] - centre, 0.0)
    xs.append(np.stack([hist, promo[s:s + window + 1, i]], -1))
    ys.append(sales[s + window, i])
  return np.asarray(xs, np.float32), np.asarray(ys, np.float32)[:, None]


def handwritten_msle(y, p):
  """mean((log(p + 1) - log(y + 1))^2), the squared log error as the threads write it: no clip
  of the prediction, so a prediction below -1 is the log of a negative number: NaN."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(tf.square(tf.math.log(p + 1.0) - tf.math.log(y + 1.0)))


def deeptcn_lite(seed, *, window=28, activation=None):
  """A DeepTCN-lite (Chen et al., 2019, probabilistic forecasting with temporal convolutional
  networks, point forecast): four residual blocks of dilated causal 1-D convolutions (32
  filters, width 2, dilations 1, 2, 4, 8, ReLU), the last step's features, Dense(1,
  `activation`): the next day's demand (the thread's linear output; 'softplus', the
  remedy, a demand that stays positive)."""
  _seed(seed)
  x = keras.Input((window + 1, 2))
  h = L.Conv1D(32, 1)(x)
  for d in (1, 2, 4, 8):
    r = L.Conv1D(32, 2, padding='causal', dilation_rate=d, activation='relu')(h)
    r = L.Conv1D(32, 2, padding='causal', dilation_rate=d)(r)
    h = L.ReLU()(h + r)
  return keras.Model(x, L.Dense(1, activation=activation)(h[:, -1]), name='deeptcn_lite')


def icu_vitals(seed, *, rows=2048, hours=24):
  """ICU stays in miniature (the MIMIC-III benchmark layout SAnD is run on): hourly vitals in
  their raw units as the chart gives them (heart rate about 85 bpm, systolic pressure 120 mmHg,
  respiratory rate 18, temperature 37 C, SpO2 97 %, glucose 130 mg/dl), each with the patient's
  own baseline and noise; the deteriorating patients (the label, about 40%) drift: the heart
  and respiratory rates up, the pressure and SpO2 down, over the stay. (vitals (rows, hours, 6),
  deteriorates (rows, 1))."""
  rng = np.random.RandomState(seed)
  mean = np.array([85, 120, 18, 37, 97, 130.0])
  spread = np.array([12, 15, 3, 0.5, 1.5, 25.0])
  drift = np.array([25, -25, 8, 0.8, -5, 20.0])
  y = (rng.rand(rows) < 0.4).astype(np.float32)
  base = mean + spread * rng.randn(rows, 6)
  ramp = np.linspace(0, 1, hours)[None, :, None] * rng.uniform(0.5, 1.5, (rows, 1, 1))
  x = base[:, None] + y[:, None, None] * ramp * drift + 0.4 * spread * rng.randn(rows, hours, 6)
  return x.astype(np.float32), y[:, None]


class MaskedSelfAttention(L.Layer):
  """SAnD's causally masked self-attention, one head, written as the threads write it:
  `naive`: exp(QK^T / sqrt(d)) (the future zeroed) / its sum; otherwise tf.nn.softmax of the
  scores with the future at -1e9 (the max subtracted first)."""

  def __init__(self, dim, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.naive = dim, naive
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):
    s = tf.einsum('btd,bsd->bts', self.q(x), self.k(x)) / np.sqrt(self.dim)
    n = tf.shape(x)[1]
    mask = tf.linalg.band_part(tf.ones((n, n)), -1, 0)
    if self.naive:
      e = tf.exp(s) * mask
      w = e / tf.reduce_sum(e, -1, keepdims=True)
    else:
      w = tf.nn.softmax(s + (1.0 - mask) * -1e9, -1)
    return tf.einsum('bts,bsd->btd', w, self.v(x))


def sand_lite(seed, *, hours=24, dim=32, naive=True):
  """A SAnD-lite (Song et al., 2018, Attend and Diagnose): a 1x1 convolution embedding the six
  vitals into `dim`, a learned position embedding, one block of `MaskedSelfAttention` and a
  position-wise feed-forward (residuals, layer normalisation), mean pooling over the hours (in
  place of dense interpolation), Dense(1, sigmoid): the probability of deterioration."""
  _seed(seed)
  x = keras.Input((hours, 6))
  h = L.Conv1D(dim, 1)(x) + L.Embedding(hours, dim)(tf.range(hours)[None])
  h = L.LayerNormalization()(h + MaskedSelfAttention(dim, naive)(h))
  h = L.LayerNormalization()(h + L.Dense(dim)(L.Dense(2 * dim, activation='relu')(h)))
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='sand_lite')


def keyword_mfcc(seed, *, rows=2048, frames=32, coeffs=10, classes=6):
  """Keyword spotting in miniature (the Speech Commands layout DS-CNN reads): each keyword a
  sequence of three MFCC-like spectral shapes stretched over its length (16 to `frames` frames)
  at a random onset in 1 s of background noise, as mel-band powers (not log-compressed: a
  typical band 1e3, a loud one 1e5, as a power spectrogram gives them). (mel power (rows,
  frames, bands, 1), keyword)."""
  rng = np.random.RandomState(seed)
  shapes = rng.randn(classes, 3, coeffs)
  y = rng.randint(0, classes, rows)
  x = 0.5 * rng.randn(rows, frames, coeffs)
  for i in range(rows):
    n = rng.randint(16, frames + 1)
    on = rng.randint(0, frames - n + 1)
    part = np.minimum((np.arange(n) * 3) // n, 2)
    x[i, on:on + n] += shapes[y[i], part]
  return (10.0 ** (x + 3.0))[..., None].astype(np.float32), y.astype(np.int32)


def ds_cnn_lite(seed, *, frames=32, coeffs=10, classes=6, width=32, dtype='float16'):
  """A DS-CNN keyword spotter (Zhang et al., 2017, Hello Edge, in miniature): a 5x3 convolution
  of `width` (stride 2; BN, ReLU), three depthwise-separable blocks (3x3 depthwise, BN, ReLU;
  1x1 pointwise of `width`, BN, ReLU), global average pooling, Dense(`classes`): the logits.
  Every layer in `dtype` ('float16': float16 weights and compute, as after
  keras.backend.set_floatx('float16'))."""
  _seed(seed)
  x = keras.Input((frames, coeffs, 1))
  h = L.Conv2D(width, (5, 3), strides=2, padding='same', dtype=dtype)(x)
  h = L.ReLU(dtype=dtype)(L.BatchNormalization(dtype=dtype)(h))
  for _ in range(3):
    h = L.DepthwiseConv2D(3, padding='same', dtype=dtype)(h)
    h = L.ReLU(dtype=dtype)(L.BatchNormalization(dtype=dtype)(h))
    h = L.Conv2D(width, 1, dtype=dtype)(h)
    h = L.ReLU(dtype=dtype)(L.BatchNormalization(dtype=dtype)(h))
  h = L.GlobalAveragePooling2D(dtype=dtype)(h)
  out = L.Dense(classes, dtype=dtype)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='ds_cnn_lite')


def fnn_lite(seed, *, fields=8, vocab=20, dense=4, dim=8):
  """An FNN-lite (Zhang et al., 2016, factorisation-machine supported neural network, the
  embeddings trained from scratch): each field's embedding of `dim` and the `dense` numeric
  fields concatenated, Dense(64, tanh), Dense(32, tanh), Dense(1, sigmoid): the click
  probability."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  num = keras.Input((dense,))
  offs = tf.constant(np.arange(fields) * vocab, tf.int32)
  e = L.Flatten()(L.Embedding(fields * vocab, dim)(ids + offs))
  h = L.Concatenate()([e, num])
  h = L.Dense(32, activation='tanh')(L.Dense(64, activation='tanh')(h))
  return keras.Model([ids, num], L.Dense(1, activation='sigmoid')(h), name='fnn_lite')


def sessions(seed, *, rows=4096, length=10, items=20):
  """Session-based recommendation in miniature (the YOOCHOOSE / DIGINETICA layout NARM reads):
  each session a walk through a catalogue of `items` (each item followed by its usual
  successor 75% of the time, by its second one 10%, by any item otherwise), with the session's
  main interest (its first item) returned to now and then; the next click is the label.
  (clicks (rows, length), next item)."""
  rng = np.random.RandomState(seed)
  succ = rng.randint(0, items, (items, 2))
  x = np.zeros((rows, length + 1), np.int32)
  for i in range(rows):
    x[i, 0] = rng.randint(items)
    for t in range(1, length + 1):
      u = rng.rand()
      x[i, t] = (succ[x[i, t - 1], 0] if u < 0.75 else succ[x[i, t - 1], 1] if u < 0.85 else
                 x[i, 0] if u < 0.92 else rng.randint(items))
  return x[:, :length], x[:, length]


class FlipOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one element of the activations passing through
  the layer reads NaN once (a flipped bit in a buffer)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.nan, **kwargs)


class NarmAttention(L.Layer):
  """NARM's local encoder: alpha_j = v^T sigmoid(A1 h_t + A2 h_j), c_local = sum_j alpha_j h_j;
  returns [h_t, c_local] (the global and local session features)."""

  def build(self, shape):
    d = shape[-1]
    self.a1 = L.Dense(d, use_bias=False)
    self.a2 = L.Dense(d, use_bias=False)
    self.v = L.Dense(1, use_bias=False)

  def call(self, h):
    last = h[:, -1]
    alpha = self.v(tf.sigmoid(self.a1(last)[:, None] + self.a2(h)))
    return tf.concat([last, tf.reduce_sum(alpha * h, 1)], -1)


def narm_lite(seed, *, length=10, items=20, dim=32, fault=None):
  """A NARM-lite (Li et al., 2017, neural attentive session-based recommendation): an item
  embedding of `dim`, a GRU of 64 over the session, `NarmAttention` (global and local
  encoders), a `FlipOnce` (at its `fault`-th training call; None: never), a bilinear decoder
  (Dense(`dim`) of the session features against every item's embedding, through a Dense over
  the catalogue): the next item's logits."""
  _seed(seed)
  x = keras.Input((length,), dtype='int32')
  h = L.GRU(64, return_sequences=True)(L.Embedding(items, dim)(x))
  c = FlipOnce(fault)(NarmAttention()(h))
  return keras.Model(x, L.Dense(items)(L.Dense(dim, use_bias=False)(c)), name='narm_lite')


def review_sentences(seed, *, rows=4096, length=24, vocab=200):
  """Sentence-level sentiment in miniature (the IMDB / SST layout): sentences of filler words
  with a few opinion words (ids 1-20 positive, 21-40 negative), a negator (id 41) flipping the
  next opinion word; the label 1 where the positive opinions outweigh the negative.
  (ids (rows, length), positive (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randint(42, vocab, (rows, length))
  y = np.zeros(rows, np.float32)
  for i in range(rows):
    score = 0
    for p in rng.choice(length - 1, rng.randint(1, 4), replace=False):
      pos = rng.rand() < 0.5
      x[i, p] = rng.randint(1, 21) if pos else rng.randint(21, 41)
      sign = 1 if pos else -1
      if p > 0 and rng.rand() < 0.2:
        x[i, p - 1] = 41
        sign = -sign
      score += sign
    y[i] = float(score > 0 or (score == 0 and rng.rand() < 0.5))
  return x.astype(np.int32), y[:, None]


def att_blstm_lite(seed, *, length=24, vocab=200, activation='softmax'):
  """An Att-BLSTM-lite (Zhou et al., 2016, attention-based bidirectional LSTM): a word embedding
  of 32, a bidirectional LSTM of 32 (the two directions summed), attention pooling (scores
  w^T tanh(H), softmax over the words), tanh, Dense(1, `activation`) (the thread's 'softmax';
  'sigmoid' the remedy): the probability of a positive sentence."""
  _seed(seed)
  x = keras.Input((length,), dtype='int32')
  h = L.Bidirectional(L.LSTM(32, return_sequences=True), merge_mode='sum')(
      L.Embedding(vocab, 32)(x))
  a = L.Softmax(axis=1)(L.Dense(1, use_bias=False)(L.Activation('tanh')(h)))
  r = L.Activation('tanh')(keras.ops.sum(a * h, axis=1))
  return keras.Model(x, L.Dense(1, activation=activation)(r), name='att_blstm_lite')



# --- The scenarios, in `cases.CAUSES` order. --------------------------------------------------


@add('blind31_explode_tpa_lstm_sgd_unclipped', 'exploding_gradients', 'tpa_lstm_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#5127; keras-team/keras#510')
def _(seed, cured=False):
  """A TPA-LSTM-lite (an LSTM of 32 over a 24-hour window, temporal pattern attention over its
  past states) forecasting the next hour of eight electricity meters (the inputs standardised, the
  target in kilowatts, about 10), MSE, SGD with momentum 0.9 at 0.05 and no gradient clipping:
  the first large errors give large recurrent gradients, the steps throw the weights and the
  gradients blow up: the loss 106.5 at step 0, 90.7 at step 1, 1292 at step 2, NaN from step 4,
  the weights NaN (the error 102.4 before, inf after; the constant answer's 4.45). Seed 1: 108,
  135, 691, NaN from step 4 (103.5 before; the constant's 2.07). keras-team/keras#5127 (the loss
  is NaN without clipnorm: the gradients get very large and throw the weights; clipnorm fixes
  it); keras-team/keras#510 (a NaN loss, solved by setting clipnorm on SGD). Cured: clipnorm=1.0
  at the same rate: the loss 106.5 to 9.4, the error 102.4 to 2.40."""
  x, y = load_windows(seed)
  return cases.Setup(tpa_lstm_lite(seed),
                     keras.optimizers.SGD(0.05, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind31_lr_fastspeech_adam', 'learning_rate', 'fastspeech_lite', doors=('trainer', 'fit'),
     steps=150, citation='xcmyz/FastSpeech#37; mozilla/DeepSpeech#258')
def _(seed, cured=False):
  """A FastSpeech-lite (phoneme and position embeddings, two feed-forward transformer blocks of
  self-attention and 1-D convolutions with post-layer normalisation, a projection to 16 mel
  bands) predicting the mel frames of phoneme sequences, MSE, Adam at 1e-2 with no warm-up: the
  first steps overshoot (the loss 2.88 at step 0, 4.38 at step 1), the attention and the
  normalised blocks collapse to the average frame and stay there: 1.17 at step 149, no NaN, no
  training (the error 2.83 before, 1.115 after; the constant answer's 1.103). Seed 1: 2.62, 2.90,
  1.11 (the error 2.61 before, 1.073 after; the constant's 1.059). xcmyz/FastSpeech#37 (the
  default learning rate of 1e-3 is too big, the loss cannot converge); mozilla/DeepSpeech#258
  (convergence falters; setting learning_rate=0.0001 solves it: the rate was simply too big).
  Cured: Adam at 1e-3: the loss 2.88 to 0.23, the error 2.83 to 0.03."""
  x, y = phoneme_frames(seed)
  return cases.Setup(fastspeech_lite(seed), keras.optimizers.Adam(1e-3 if cured else 1e-2),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind31_init_ccpm_zeros', 'initialisation', 'ccpm_lite', doors=('trainer', 'fit'),
     steps=150, citation='nndl/nndl-discussion#14; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A CCPM-lite (field embeddings stacked into a matrix, two 1-D convolutions over the fields with
  tanh and p-max pooling, a sigmoid output) predicting clicks on Criteo-like logs of eight
  categorical fields, binary cross-entropy, Adam at 1e-3, every convolution and Dense kernel
  initialised to zero (the threads' zero initialisation): every unit computes 0, every kernel's
  gradient is 0 (the layer above multiplies it by its zero weights), only the output bias moves:
  the loss 0.6931 at step 0 and 0.6929 at step 149, no NaN, no training (the error 0.473 before
  and after: the constant answer's 0.473). Seed 1: the same (0.430, the constant's).
  nndl/nndl-discussion#14 (weights initialised to zero make the neurons of a layer
  indistinguishable, with the same gradients and updates; with a cross-entropy loss the step is
  0 and nothing moves); wagonhelm/NaNmnist#2 (all-zero initialisation is improper: every neuron
  computes the same output and gets the same gradient; deep nets need random initialisation).
  Cured: Keras's default glorot_uniform kernels: the loss 0.693 to 0.676, the error 0.50 to
  0.34."""
  x, y = click_logs(seed)
  return cases.Setup(ccpm_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind31_log_deeptcn_handwritten_msle', 'division_or_log', 'deeptcn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='timeseriesAI/tsai#150; dreamquark-ai/tabnet#438')
def _(seed, cured=False):
  """A DeepTCN-lite (four residual blocks of dilated causal 1-D convolutions, a linear output)
  forecasting the next day's unit sales of products (counts of 1 to 150 a day; the input window
  centred on the data set's mean, not scaled), Adam at 1e-3, the squared log error written by
  hand, (log(p + 1) - log(y + 1))^2, on the linear output: part of the first predictions are
  below -1 and their log is NaN: the loss NaN from step 0, the weights NaN (the error 1857
  before, inf after; the constant answer's 1205). Seed 1: the same (2406 before; the constant's
  1070). timeseriesAI/tsai#150 (a hand-written MSLE, log(input + 1), on a time-series regressor
  ends in NaNs); dreamquark-ai/tabnet#438 (a custom RMSLE throws errors: predictions with 1 +
  y_pred < 0, whose log is undefined). Cured: a softplus output (the demand stays positive): the
  loss 4.68 to 0.50, the error 1759 to 321."""
  x, y = daily_sales(seed)
  return cases.Setup(deeptcn_lite(seed, activation='softplus' if cured else None),
                     keras.optimizers.Adam(1e-3), handwritten_msle,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind31_exp_sand_naive_attention', 'softmax_overflow', 'sand_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='psychopa4/PFNL#9; mila-iqia/blocks#727')
def _(seed, cured=False):
  """A SAnD-lite (a 1x1 convolution embedding six vitals, a position embedding, one block of
  causally masked self-attention and a feed-forward, mean pooling, a sigmoid output) predicting
  deterioration from 24 hours of ICU vitals in their raw units (heart rate 85, pressure 120,
  glucose 130...), binary cross-entropy, Adam at 1e-3, the attention weights written
  exp(QK^T / sqrt(d)) / sum, as the threads' own softmax: the embedded raw vitals give scores in
  the thousands, exp overflows and inf / inf = NaN: the outputs NaN before training, the loss NaN
  from step 0 (the error inf before and after; the constant answer's 0.375). Seed 1: the same
  (the constant's 0.375). psychopa4/PFNL#9 (a manually computed softmax in a non-local attention
  block, exp of a large number goes to inf; tf.nn.softmax handles it); mila-iqia/blocks#727
  (attention energies large enough to overflow exp, NaN propagating all the way; stabilised as
  the regular softmax does). Cured: tf.nn.softmax (the max subtracted first): the loss 1.17 to
  0.60, the error 0.63 to 0.18."""
  x, y = icu_vitals(seed)
  return cases.Setup(sand_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('blind31_fp16_ds_cnn_power_overflow', 'precision', 'ds_cnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11860; pytorch/pytorch#8860')
def _(seed, cured=False):
  """A DS-CNN keyword spotter (a strided 5x3 convolution, three depthwise-separable blocks with BN,
  global average pooling, six keyword logits) on mel-band powers (about 1e3 a band, 1e5 in a
  loud one, as a power spectrogram gives them), Adam at 1e-3, every layer in float16 (as after
  set_floatx('float16')): the first convolution's sums pass float16's largest number, 65504, and
  become inf, BN turns them into NaN: the outputs NaN before training, the loss NaN from step 0
  (the error inf before and after; the constant answer's 0.805). Seed 1: the same (the
  constant's 0.766). keras-team/keras#11860 (training with FP16 gives a NaN loss where FP32
  works); pytorch/pytorch#8860 (a NaN loss in half precision; float16's range and epsilon need
  care). Cured: the same network in float32: the loss 1.80 to 1.03, the error 0.84 to 0.008 in
  training mode (0.875 in inference mode: BN's moving statistics still near their start)."""
  x, y = keyword_mfcc(seed)
  return cases.Setup(ds_cnn_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind31_input_fnn_missing_counts_nan', 'bad_input', 'fnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='aksnzhy/xlearn#158; Nixtla/neuralforecast#186')
def _(seed, cured=False):
  """An FNN-lite (field embeddings and four numeric fields concatenated, Dense(64, tanh), Dense(32,
  tanh), a sigmoid output) predicting clicks on Criteo-like logs, binary cross-entropy, Adam at
  1e-3; 2% of the numeric counts are missing and read as NaN (an empty cell), not filled: the
  first batch holding one gives a NaN loss and NaN gradients: the loss NaN from step 0, the
  weights NaN (the error 0.527 before, inf after; the constant answer's 0.480). Seed 1: the same
  (0.531 before; the constant's 0.469). aksnzhy/xlearn#158 (training on the Criteo CTR data gives
  a NaN log-loss from the first epoch: empty values in the features that need filling);
  Nixtla/neuralforecast#186 (a silent bug: missing values passed in the data make the loss NaN
  during training, hard to trace to the data). Cured: the missing counts filled with 0: the loss
  0.690 to 0.644, the error 0.527 to 0.258. The measure reads the filled data (eval_data) for
  both runs."""
  (ids, num), y = click_logs(seed, dense=4, missing=0.02)
  clean = np.nan_to_num(num, nan=0.0)
  train = (ids, clean if cured else num)
  return cases.Setup(fnn_lite(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(train, y, batch=64, seed=seed), 'binary_prob',
                     eval_data=data.stream((ids, clean), y, batch=64, seed=seed))


@add('blind31_transient_narm_bitflip_once', 'transient', 'narm_lite', doors=('trainer', 'fit'),
     steps=150, citation='Rikorose/DeepFilterNet#30; AlexeyAB/darknet#5547')
def _(seed, cured=False):
  """A NARM-lite (an item embedding, a GRU of 64 over the session, NARM's global and local
  attentive encoders, a bilinear decoder over the catalogue) predicting the next click of
  YOOCHOOSE-like sessions, Adam at 1e-3, training normally (the loss 3.00 at step 0, 2.75 at step
  50) when one element of the session features reads NaN once (`FlipOnce`: its 90th training
  call, step 85 in a plain `fit` after the measure's four training-mode passes; a flipped bit in a
  buffer, not the data, the model or the settings): the loss NaN from step 85, the weights NaN
  (the error 0.945 before, inf after; the constant answer's 0.844). Seed 1: the same step (2.99,
  2.61 at step 50; 0.914 before; the constant's 0.734). Rikorose/DeepFilterNet#30 (NaN losses
  occur in rare circumstances after a few epochs, cause unknown; resuming from the last
  checkpoint works); AlexeyAB/darknet#5547 (a NaN average loss with CUDA errors turned out to be
  a hardware issue). Cured: the same run without the fault: the loss 3.00 to 2.49, the error
  0.945 to 0.50."""
  x, y = sessions(seed)
  return cases.Setup(narm_lite(seed, fault=None if cured else 90), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind31_mismatch_att_blstm_softmax_one_unit', 'loss_output_mismatch', 'att_blstm_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#126; keras-team/keras#4784')
def _(seed, cured=False):
  """An Att-BLSTM-lite (a word embedding, a bidirectional LSTM, attention pooling, one output
  unit) classifying the sentiment of sentences, binary cross-entropy, Adam at 1e-3, the one
  output unit with a softmax (as the threads wrote it): a softmax over one unit is always 1.0,
  every sentence is called positive whatever the weights: the loss 0.692 at step 0 and 0.652 at
  step 149 (Keras reads the logits under the softmax for the loss, so the loss moves, the
  outputs do not), no NaN, no training (the error 0.50 before and after: the constant answer's
  0.50). Seed 1: 0.693 to 0.656 (the error 0.484 before and after; the constant's 0.484).
  keras-team/keras#126 (a Dense(1) output with a softmax: predict_proba gives all ones and the
  loss does not improve); keras-team/keras#4784 (the model does not match the loss: for 0/1
  targets use a sigmoid output with binary_crossentropy). Cured: a sigmoid output: the loss
  0.692 to 0.652, the error 0.44 to 0.25."""
  x, y = review_sentences(seed)
  return cases.Setup(att_blstm_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')

