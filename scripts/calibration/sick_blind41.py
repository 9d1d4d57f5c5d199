"""A forty-first blind set of sick scenarios (the 'blind41' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind39.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a Res8 keyword spotter, a gated-CNN handwriting
recogniser, a SWEM-lite, a GANDALF-lite, a TempCNN-lite, an AttnSleep-lite, a Kachuee ECG
ResNet-lite, a COVID-Net-lite, a Graves BLSTM phoneme tagger and an L-TAE-lite). Each builder
takes `cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick
run). Each was checked with plain Keras `compile` + `fit` only: the sick run shows the reported
symptom (seeds 0 and 1), the cured twin passes runner's "did it train" measure in the same
number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND41 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND41.add` with split='blind41'."""
  return BLIND41.add(name, expected, arch, split='blind41', **fields)


def stream(x, y, *, batch, seed):
  """An endless stream of batches of (x, y) (x may be a tuple), shuffled anew each epoch from
  `seed` (as data.stream)."""
  n = len(x[0]) if isinstance(x, tuple) else len(x)
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  ds = ds.shuffle(min(n, 2048), seed=seed, reshuffle_each_iteration=True)
  return ds.batch(batch, drop_remainder=True).prefetch(2)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def keyword_clips(seed, *, rows=2048, samples=4000, words=6):
  """Spoken keywords in miniature (the Speech Commands layout the keyword spotters read): half a
  second at 8 kHz, each clip one of `words` words (a voiced sound: a harmonic series on its own
  pitch contour and formant, with its own syllable envelope and a little breath noise), of 0.2
  to 0.4 s, at a random onset; the rest of the clip zero, as the dataset's clips shorter than
  the window are zero-padded. (waveforms (rows, samples), word ids)."""
  rng = np.random.RandomState(seed)
  t = np.arange(samples) / 8000.0
  pitch = rng.uniform(100, 250, words)
  glide = rng.uniform(-0.6, 0.6, words)
  formant = rng.uniform(500, 2500, words)
  syllables = rng.randint(1, 4, words)
  x = np.zeros((rows, samples), np.float32)
  y = rng.randint(0, words, rows).astype(np.int32)
  for i, w in enumerate(y):
    n = int(rng.uniform(0.2, 0.4) * 8000)
    start = rng.randint(0, samples - n)
    tt = t[:n]
    f0 = pitch[w] * (1 + glide[w] * tt / tt[-1]) * rng.uniform(0.9, 1.1)
    phase = 2 * np.pi * np.cumsum(f0) / 8000.0
    sound = sum(np.exp(-((k * f0 - formant[w]) / 400.0) ** 2) * np.sin(k * phase)
                for k in range(1, 12))
    env = np.sin(np.pi * syllables[w] * tt / tt[-1]) ** 2
    sound = sound * env + 0.02 * rng.randn(n)
    x[i, start:start + n] = 0.3 * sound / (np.abs(sound).max() + 1e-9)
  return x, y


class LogMel(L.Layer):
  """Log-mel features computed in the model, as the threads' Keras front ends write them: an
  STFT (256-sample frames, hop 128), the power spectrum, 40 mel bands, then the log: with `eps`
  0, `tf.math.log(mel)` (a zero-padded frame's power is exactly 0: log(0) = -inf)."""

  def __init__(self, eps=0.0, **kwargs):
    super().__init__(**kwargs)
    self.eps = eps
    self.mel = tf.signal.linear_to_mel_weight_matrix(40, 129, 8000, 20.0, 4000.0)

  def call(self, x):
    x = tf.convert_to_tensor(x)
    power = tf.square(tf.abs(tf.signal.stft(x, 256, 128)))
    return tf.math.log(tf.tensordot(power, self.mel, 1) + self.eps)[..., None]


def res8_kws_lite(seed, *, eps=0.0, words=6, maps=24):
  """A Res8-lite (Tang and Lin, 2018, the residual keyword spotter of Honk): `LogMel` front end,
  a 3x3 conv of `maps`, 4x3 average pooling, three residual blocks (two 3x3 convs, ReLU,
  BatchNorm), global average pooling, Dense(`words`): the keyword logits."""
  _seed(seed)
  x = keras.Input((4000,))
  h = LogMel(eps)(x)
  h = L.Conv2D(maps, 3, padding='same', activation='relu', use_bias=False)(h)
  h = L.AveragePooling2D((4, 3))(h)
  for _ in range(3):
    b = L.BatchNormalization()(L.Conv2D(maps, 3, padding='same', activation='relu',
                                        use_bias=False)(h))
    b = L.BatchNormalization()(L.Conv2D(maps, 3, padding='same', activation='relu',
                                        use_bias=False)(b))
    h = L.Add()([h, b])
  return keras.Model(x, L.Dense(words)(L.GlobalAveragePooling2D()(h)), name='res8_kws_lite')


def gated_htr_lite(seed, *, dtype='float32', classes=10):
  """A gated-CNN handwriting recogniser in miniature (Bluche and Messina, 2017 / Flor et al.,
  2020: convolutions whose half of the maps gate the other half through a sigmoid): a 3x3 conv
  of 16 (ReLU), then three stages of a 3x3 conv of 2 x 32 maps split into value and
  gate (value x sigmoid(gate)) and 2x2 max pooling, global average pooling, Dense(`classes`):
  the character logits. Every layer in `dtype`."""
  _seed(seed)
  x = keras.Input((32, 32, 1), dtype=dtype)
  h = L.Conv2D(16, 3, padding='same', activation='relu', dtype=dtype)(x)
  for _ in range(3):
    g = L.Conv2D(64, 3, padding='same', dtype=dtype)(h)
    h = L.Lambda(lambda t: t[..., :32] * tf.sigmoid(t[..., 32:]), dtype=dtype)(g)
    h = L.MaxPooling2D(2, dtype=dtype)(h)
  h = L.GlobalAveragePooling2D(dtype=dtype)(h)
  return keras.Model(x, L.Dense(classes, dtype=dtype)(h), name='gated_htr_lite')


def reviews(seed, *, rows=4096, length=40, vocab=2000):
  """Product reviews in miniature (the IMDB / Yelp polarity layout the text classifiers read):
  token ids 1 to `vocab` - 1 from a Zipf-like draw, 0 the padding after a review's end (reviews
  of 12 to `length` tokens); a tenth of the vocabulary positive words, a tenth negative, the
  label 1.0 when the review holds more positive than negative ones (ties broken at random).
  (ids (rows, length), label (rows, 1))."""
  rng = np.random.RandomState(seed)
  p = 1.0 / np.arange(1, vocab) ** 0.8
  p /= p.sum()
  polarity = np.zeros(vocab)
  words = rng.permutation(np.arange(20, vocab))
  polarity[words[:vocab // 10]] = 1
  polarity[words[vocab // 10:vocab // 5]] = -1
  ids = rng.choice(np.arange(1, vocab), (rows, length), p=p)
  ends = rng.randint(12, length + 1, rows)
  ids[np.arange(length)[None] >= ends[:, None]] = 0
  score = polarity[ids].sum(1) + 0.5 * rng.randn(rows)
  return ids.astype(np.int32), (score > 0).astype(np.float32)[:, None]


def swem_lite(seed, *, vocab=2000, dim=64, activation='sigmoid'):
  """A SWEM-lite (Shen et al., 2018, simple word-embedding models: SWEM-concat): word embeddings
  of `dim`, their average and their max over the review concatenated, Dense(128, ReLU),
  Dense(1, `activation`): the positive probability."""
  _seed(seed)
  x = keras.Input((None,), dtype='int32')
  e = L.Embedding(vocab, dim)(x)
  h = L.Concatenate()([L.GlobalAveragePooling1D()(e), L.GlobalMaxPooling1D()(e)])
  h = L.Dense(128, activation='relu')(h)
  return keras.Model(x, L.Dense(1, activation=activation)(h), name='swem_lite')


def loan_book(seed, *, rows=8192, missing=True):
  """A consumer-loan book in miniature (the Lending Club / Home Credit tables the credit models
  read): twelve standardised applicant features (income, debt-to-income, utilisation, loan
  amount, term, grade, employment length, inquiries, delinquencies, months since the last
  delinquency, open accounts, credit history length); the default label from a logistic of a
  few of them and two interactions (about a fifth default). As in the raw tables, 'months since
  the last delinquency' is empty (NaN) for the applicants who never had one (about half) and
  'employment length' empty for about 5%; with `missing` False, the threads' imputation: the
  median and a was-missing flag per such column. (x (rows, 12 or 14), default (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, 12)
  never = rng.rand(rows) < 0.5
  unknown = rng.rand(rows) < 0.05
  z = (1.1 * x[:, 1] + 0.9 * x[:, 2] - 0.8 * x[:, 0] + 0.7 * x[:, 5] + 0.6 * x[:, 8]
       - 0.5 * np.where(never, 1.0, x[:, 9]) + 0.6 * x[:, 1] * x[:, 2] - 1.6)
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * z))).astype(np.float32)[:, None]
  x[never, 9] = np.nan
  x[unknown, 6] = np.nan
  if not missing:
    flags = np.isnan(x[:, [9, 6]]).astype(np.float64)
    x = np.where(np.isnan(x), np.nanmedian(x, 0), x)
    x = np.concatenate([x, flags], 1)
  return x.astype(np.float32), y


class GFLU(L.Layer):
  """GANDALF's gated feature learning unit (Joseph and Raj, 2022) in miniature: a learned soft
  feature mask (a softmax over the features, per stage), then a GRU-like update of the hidden
  representation from the masked features: z and r gates, a tanh candidate."""

  def __init__(self, units, stages=3, **kwargs):
    super().__init__(**kwargs)
    self.units, self.stages = units, stages

  def build(self, shape):
    d = shape[-1]
    self.mask = self.add_weight(shape=(self.stages, d), initializer='random_normal', name='mask')
    self.gates = [L.Dense(2 * self.units, activation='sigmoid') for _ in range(self.stages)]
    self.cands = [L.Dense(self.units, activation='tanh') for _ in range(self.stages)]
    self.inp = L.Dense(self.units)

  def call(self, x):
    x = tf.convert_to_tensor(x)
    h = tf.tanh(self.inp(x))
    for s in range(self.stages):
      xs = x * tf.nn.softmax(self.mask[s]) * tf.cast(tf.shape(x)[-1], x.dtype)
      zr = self.gates[s](tf.concat([h, xs], -1))
      z, r = zr[:, :self.units], zr[:, self.units:]
      h = (1 - z) * h + z * self.cands[s](tf.concat([r * h, xs], -1))
    return h


def gandalf_lite(seed, *, features=12, units=32):
  """A GANDALF-lite (Joseph and Raj, 2022, gated adaptive network for deep automated learning
  of features): a `GFLU` of `units` (three stages), Dense(32, ReLU), Dense(1): the default
  logit."""
  _seed(seed)
  x = keras.Input((features,))
  h = L.Dense(32, activation='relu')(GFLU(units)(x))
  return keras.Model(x, L.Dense(1)(h), name='gandalf_lite')


def crop_series(seed, *, rows=4096, dates=24, bands=10, crops=6):
  """Satellite image time series in miniature (the Sentinel-2 pixel series TempCNN classifies
  into crop types): `dates` acquisitions of `bands` standardised surface reflectances per
  pixel; each crop its own phenology (a green-up date, a peak, a harvest date: a vegetation
  curve raising the near-infrared bands and lowering the red ones), shifted per field, plus
  cloud-free noise. (x (rows, dates, bands), crop ids)."""
  rng = np.random.RandomState(seed)
  t = np.arange(dates)[None]
  up = rng.uniform(3, 10, crops)
  down = up + rng.uniform(5, 12, crops)
  peak = rng.uniform(0.5, 1.5, crops)
  response = rng.randn(crops, bands) * 0.5 + np.linspace(-1, 1, bands)
  y = rng.randint(0, crops, rows)
  shift = rng.randn(rows) * 1.2
  g = peak[y][:, None] / (1 + np.exp(-(t - up[y][:, None] - shift[:, None]))) / (
      1 + np.exp(t - down[y][:, None] - shift[:, None]))
  x = g[..., None] * response[y][:, None] + 0.3 * rng.randn(rows, dates, bands)
  return x.astype(np.float32), y.astype(np.int32)


class FlipOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one activation of the first convolution reads NaN
  once (a corrupted activation buffer, a misfiring kernel)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=37, value=np.nan, **kwargs)


def tempcnn_lite(seed, *, dates=24, bands=10, crops=6, fault=None):
  """A TempCNN-lite (Pelletier et al., 2019, temporal convolutional networks for satellite
  image time series): three Conv1D of 32 (kernel 5, same) each with BatchNorm, ReLU and dropout
  0.2 (a `FlipOnce` at its `fault`-th training call after the first; None: never), flattened,
  Dense(64, ReLU), Dense(`crops`): the crop logits."""
  _seed(seed)
  x = keras.Input((dates, bands))
  h = x
  for i in range(3):
    h = L.Activation('relu')(L.BatchNormalization()(L.Conv1D(32, 5, padding='same')(h)))
    if i == 0:
      h = FlipOnce(fault)(h)
    h = L.Dropout(0.2)(h)
  h = L.Dense(64, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(crops)(h), name='tempcnn_lite')


def sleep_epochs(seed, *, rows=2048, samples=600, stages=5):
  """Single-channel EEG in miniature (the Sleep-EDF Fpz-Cz epochs AttnSleep stages), in
  microvolts as the EDF files store them (left unscaled, as the threads feed them): each epoch a
  mix of the stage's rhythms (alpha 8-12 Hz for wake, theta for N1, spindles and K-complexes for
  N2, large slow delta waves for N3, mixed low-voltage theta with saw-tooth waves for REM) plus
  pink-ish noise, at 50 Hz here (600 samples: 12 s). (x (rows, samples, 1) in uV, stage ids)."""
  rng = np.random.RandomState(seed)
  t = np.arange(samples) / 50.0
  y = rng.randint(0, stages, rows)
  x = np.zeros((rows, samples))
  plan = [(10.0, 25.0), (6.0, 30.0), (13.0, 25.0), (1.5, 90.0), (5.0, 20.0)]
  for i, s in enumerate(y):
    f, a = plan[s]
    f = f * rng.uniform(0.85, 1.15)
    x[i] = a * rng.uniform(0.7, 1.3) * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))
    if s == 2:
      k = rng.randint(50, samples - 50)
      x[i] -= 80 * np.exp(-((t - t[k]) / 0.25) ** 2)
    if s == 4:
      x[i] += 15 * ((t * 2.5 + rng.rand()) % 1 - 0.5)
    x[i] += np.cumsum(rng.randn(samples)) * 1.5 + rng.randn(samples) * 8
    x[i] -= x[i].mean()
  return x[..., None].astype(np.float32), y.astype(np.int32)


def naive_softmax(z, axis=-1):
  """exp(z) / sum(exp(z)) as the threads write their attention by hand: no max subtracted, so
  a score above about 88 is inf in float32 (and inf / inf NaN)."""
  e = tf.exp(z)
  return e / tf.reduce_sum(e, axis=axis, keepdims=True)


class ScoreAttention(L.Layer):
  """Scaled dot-product self-attention over the epoch's feature frames (one head, as AttnSleep's
  temporal context encoder): q, k, v projections of `dim`, the scores q k^T / sqrt(dim), the
  weights by `naive_softmax` (`naive`) or `tf.nn.softmax` (max subtracted)."""

  def __init__(self, dim=32, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.naive = dim, naive
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):
    x = tf.convert_to_tensor(x)
    scores = tf.matmul(self.q(x), self.k(x), transpose_b=True) / np.sqrt(self.dim)
    weights = naive_softmax(scores) if self.naive else tf.nn.softmax(scores)
    return tf.matmul(weights, self.v(x))


def attnsleep_lite(seed, *, samples=600, stages=5, naive=True):
  """An AttnSleep-lite (Eldele et al., 2021, attention-based sleep staging from single-channel
  EEG): a multi-resolution CNN (a fine branch: Conv1D 32 kernel 25 stride 3; a coarse branch:
  Conv1D 32 kernel 100 stride 12; ReLU, max pooling to a common length, concatenated), a
  `ScoreAttention` of 32 with a residual, global average pooling, Dense(`stages`): the stage
  logits."""
  _seed(seed)
  x = keras.Input((samples, 1))
  a = L.MaxPooling1D(8)(L.Conv1D(32, 25, strides=3, padding='same', activation='relu')(x))
  b = L.MaxPooling1D(2)(L.Conv1D(32, 100, strides=12, padding='same', activation='relu')(x))
  h = L.Concatenate()([a, b])
  h = L.Dense(32)(h)
  h = L.Add()([h, ScoreAttention(32, naive=naive)(h)])
  return keras.Model(x, L.Dense(stages)(L.GlobalAveragePooling1D()(h)), name='attnsleep_lite')


def heartbeats(seed, *, rows=4096, length=187, kinds=5):
  """Segmented ECG heartbeats in miniature (the MIT-BIH arrhythmia beats of the Kaggle
  heartbeat set, AAMI classes N, S, V, F, Q): each beat 187 samples at 125 Hz, min-max scaled to
  [0, 1] and zero-padded after the beat as that set; each class its own P wave, QRS width and
  height, and T wave (a premature beat shorter, a ventricular one wide with no P wave...), with
  per-beat jitter and noise. (x (rows, length, 1), class ids)."""
  rng = np.random.RandomState(seed)
  t = np.arange(length)
  kinds_p = [(1, 8, 1.0, 0.3), (1, 7, 0.9, 0.25), (0, 18, 1.2, -0.4), (1, 12, 0.8, 0.15),
             (0, 10, 0.6, 0.5)]
  y = rng.randint(0, kinds, rows)
  x = np.zeros((rows, length))
  for i, c in enumerate(y):
    p, width, height, tw = kinds_p[c]
    beat_len = int(rng.uniform(0.55, 0.75) * length) if c != 1 else int(rng.uniform(0.35, 0.5)
                                                                         * length)
    q = 30 + rng.randint(-4, 5)
    b = (p * 0.15 * np.exp(-((t - q + 18) / 5.0) ** 2)
         + height * np.exp(-((t - q) / (width / 3.0)) ** 2)
         - 0.2 * np.exp(-((t - q - width / 2 - 2) / 3.0) ** 2)
         + tw * np.exp(-((t - q - 40 - width) / 10.0) ** 2))
    b = b + 0.03 * rng.randn(length)
    b[beat_len:] = 0
    x[i] = (b - b[:beat_len].min()) / (np.ptp(b[:beat_len]) + 1e-9)
    x[i, beat_len:] = 0
  return x[..., None].astype(np.float32), y.astype(np.int32)


def kachuee_ecg_lite(seed, *, length=187, kinds=5, init='he_normal', blocks=3):
  """A Kachuee ECG ResNet-lite (Kachuee et al., 2018, ECG heartbeat classification: a deep
  transferable representation): a Conv1D of 32 (kernel 5), `blocks` residual blocks (Conv1D 32
  kernel 5 ReLU, Conv1D 32 kernel 5, the skip added, ReLU, max pooling 5 stride 2), Dense(32,
  ReLU), Dense(32), Dense(`kinds`): the class logits. Every kernel initialised with `init`."""
  _seed(seed)
  x = keras.Input((length, 1))
  h = L.Conv1D(32, 5, padding='same', kernel_initializer=init)(x)
  for _ in range(blocks):
    b = L.Conv1D(32, 5, padding='same', activation='relu', kernel_initializer=init)(h)
    b = L.Conv1D(32, 5, padding='same', kernel_initializer=init)(b)
    h = L.MaxPooling1D(5, strides=2)(L.Activation('relu')(L.Add()([h, b])))
  h = L.Dense(32, activation='relu', kernel_initializer=init)(L.Flatten()(h))
  h = L.Dense(32, kernel_initializer=init)(h)
  return keras.Model(x, L.Dense(kinds, kernel_initializer=init)(h), name='kachuee_ecg_lite')


def chest_films(seed, *, rows=1536, size=48, findings=3):
  """Chest radiographs in miniature (the COVIDx layout COVID-Net reads: normal, pneumonia,
  COVID-19): two lung fields (dark ellipses) in a bright mediastinum and
  ribs; pneumonia a dense lobar opacity in one lung, COVID-19 bilateral peripheral ground-glass
  patches; per film position, exposure and noise jitter; grey levels standardised over the set
  (x (rows, size, size, 1), finding ids)."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  y = rng.randint(0, findings, rows)
  x = np.zeros((rows, size, size))
  for i, c in enumerate(y):
    img = 0.75 + 0.05 * np.sin(yy * 40 + rng.rand() * 6)
    for side in (-1, 1):
      cx, cy = 0.5 + side * (0.2 + rng.uniform(-0.02, 0.02)), 0.5 + rng.uniform(-0.03, 0.03)
      lung = ((xx - cx) / 0.14) ** 2 + ((yy - cy) / 0.3) ** 2 < 1
      img = np.where(lung, 0.25, img)
      if c == 2:
        for _ in range(3):
          px, py = cx + side * rng.uniform(0.04, 0.1), cy + rng.uniform(-0.2, 0.2)
          img += 0.5 * np.exp(-(((xx - px) ** 2 + (yy - py) ** 2) / 0.006)) * lung
    if c == 1:
      side = rng.choice([-1, 1])
      px, py = 0.5 + side * 0.2, 0.5 + rng.uniform(0.0, 0.2)
      img += 0.6 * np.exp(-(((xx - px) ** 2 + (yy - py) ** 2) / 0.012))
    x[i] = img * rng.uniform(0.95, 1.05) + 0.05 * rng.randn(size, size)
  x = np.clip(x, 0, 1)
  return ((x - x.mean()) / x.std())[..., None].astype(np.float32), y.astype(np.int32)


def covidnet_lite(seed, *, size=48, findings=3):
  """A COVID-Net-lite (Wang et al., 2020, the PEPX design: projection-expansion-projection-
  extension modules): a 7x7 conv of 32 stride 2 and 2x2 max pooling, then two stages (32, 64) of a
  PEPX module (1x1 projection to half, 1x1 expansion to double, a 3x3 depthwise conv, 1x1
  projection, 1x1 extension back, ReLU, no batch normalisation) with a 1x1
  stage conv and max pooling between, global average pooling, Dense(64, ReLU), Dense(`findings`):
  the finding logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(32, 7, strides=2, padding='same', activation='relu')(x)
  h = L.MaxPooling2D(2)(h)
  for width in (32, 64):
    h = L.Conv2D(width, 1, activation='relu')(h)
    b = L.Conv2D(width // 2, 1, activation='relu')(h)
    b = L.Conv2D(width, 1, activation='relu')(b)
    b = L.DepthwiseConv2D(3, padding='same', activation='relu')(b)
    b = L.Conv2D(width // 2, 1, activation='relu')(b)
    b = L.Conv2D(width, 1, activation='relu')(b)
    h = L.Add()([h, b])
    h = L.MaxPooling2D(2)(h)
  h = L.Dense(64, activation='relu')(L.GlobalAveragePooling2D()(h))
  return keras.Model(x, L.Dense(findings)(h), name='covidnet_lite')


def graves_blstm_lite(seed, *, eps=1e-6, words=6, units=64):
  """A Graves BLSTM-lite (Graves and Schmidhuber, 2005, the bidirectional LSTM of framewise
  phoneme classification, here reading a whole word): `LogMel` front end (with `eps`), the
  frames' 40 log-mel bands, two bidirectional LSTMs of `units`, the last frame's state,
  Dense(`words`): the word logits."""
  _seed(seed)
  x = keras.Input((4000,))
  h = L.Reshape((-1, 40))(LogMel(eps)(x))
  h = L.Bidirectional(L.LSTM(units, return_sequences=True))(h)
  h = L.Bidirectional(L.LSTM(units))(h)
  return keras.Model(x, L.Dense(words)(h), name='graves_blstm_lite')


def cloudy_series(seed, *, rows=4096, dates=24, bands=10, crops=6, nodata=True):
  """`crop_series` as a cloud-masked Sentinel-2 export hands it over: about 8% of the
  acquisitions of each pixel cloudy (the scene classification's cloud and shadow classes),
  masked to NaN in every band (a masked raster read as floats); with `nodata` False, the
  threads' cure: those acquisitions filled with 0 (the standardised mean). (x (rows, dates,
  bands), crop ids)."""
  x, y = crop_series(seed, rows=rows, dates=dates, bands=bands, crops=crops)
  rng = np.random.RandomState(seed + 7)
  cloudy = rng.rand(rows, dates) < 0.08
  x[cloudy] = np.nan if nodata else 0.0
  return x, y


class TemporalAttention(L.Layer):
  """L-TAE's lightweight temporal attention in miniature: `heads` learned master queries, the
  keys a Dense of the date embeddings, the softmax over the dates (`tf.nn.softmax`), each head
  pooling its share of the channels; the heads concatenated."""

  def __init__(self, heads=4, key=8, **kwargs):
    super().__init__(**kwargs)
    self.heads, self.key = heads, key

  def build(self, shape):
    self.q = self.add_weight(shape=(self.heads, self.key), initializer='random_normal',
                             name='q')
    self.k = L.Dense(self.heads * self.key)

  def call(self, x):
    x = tf.convert_to_tensor(x)
    b, t, c = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
    k = tf.reshape(self.k(x), (b, t, self.heads, self.key))
    a = tf.nn.softmax(tf.einsum('bthk,hk->bht', k, self.q) / np.sqrt(self.key), axis=-1)
    v = tf.reshape(x, (b, t, self.heads, c // self.heads))
    return tf.reshape(tf.einsum('bht,bthc->bhc', a, v), (b, c))


def ltae_lite(seed, *, dates=24, bands=10, crops=6):
  """An L-TAE-lite (Garnot and Landrieu, 2020, the lightweight temporal attention encoder for
  satellite image time series): a Dense(32) embedding of each acquisition plus a sinusoidal
  encoding of its date, `TemporalAttention` (4 heads), Dense(64, ReLU), Dense(`crops`): the
  crop logits."""
  _seed(seed)
  x = keras.Input((dates, bands))
  pos = np.arange(dates)[:, None] / (10.0 ** (np.arange(16)[None] / 8.0))
  enc = np.concatenate([np.sin(pos), np.cos(pos)], -1).astype(np.float32)
  h = L.Lambda(lambda t: t + enc)(L.Dense(32)(x))
  h = L.Dense(64, activation='relu')(TemporalAttention(4)(h))
  return keras.Model(x, L.Dense(crops)(h), name='ltae_lite')

# --- The scenarios. ---------------------------------------------------------------------------


@add('blind41_grad_graves_blstm_sgd_summed_loss', 'exploding_gradients', 'graves_blstm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#5127; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """A Graves BLSTM-lite (two bidirectional LSTMs of 64 over 40 log-mel bands) reading spoken
  keywords (half a second at 8 kHz, six words), trained as the threads' speech LSTMs: SGD at 0.1
  with momentum 0.9 on the cross-entropy summed over the batch (reduction 'sum', as Graves summed
  the errors), no clipping. The summed loss's gradients grow with the batch and the LSTM unrolled
  over 30 frames: fit's running loss climbs from 62 to about 2,600 (seed 0; 62 to 2,900, seed 1)
  instead of falling, and the error stays at chance (0.82 and 0.84 against 0.73 and 0.81 for the
  commonest class). The threads (keras-team/keras#5127: the loss NaN without clipnorm, fine with it;
  Marcovaldong/lstmp.pytorch#2: an LSTM's cross-entropy blowing up on long sequences, cured by
  clipping the gradient norm to 1.0) name exploding gradients. Cure: clipnorm=1.0, same rate: the
  loss falls from 62 to 15 and the error from 0.75 to 0.23."""
  x, y = keyword_clips(seed)
  opt = keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(graves_blstm_lite(seed), opt, SCE(from_logits=True, reduction='sum'),
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind41_lr_covidnet_adam_0p1', 'learning_rate', 'covidnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='milesial/Pytorch-UNet#117; skorch-dev/skorch#468')
def _(seed, cured=False):
  """A COVID-Net-lite (PEPX modules, no batch normalisation) classifying chest films (normal,
  pneumonia, COVID-19; 48x48, standardised) with Adam at 0.1 (milesial/Pytorch-UNet#117's
  rate with Adam). The first update throws the ReLU stack out: fit's running loss jumps from 1.10 to
  204 by step 2 (seed 0; 1.18 to 343, seed 1) and, the units dead, the net answers one finding
  whatever the film: error 0.56 and 0.64, the commonest class's. The threads
  (milesial/Pytorch-UNet#117: Adam's rate of 0.1 questioned; skorch-dev/skorch#468: Adam at a
  rate meant for another optimizer, the loss NaN and the accuracy at chance, fixed by a much
  smaller rate) name the learning rate. Cure: Adam at its usual 1e-3: loss 1.10 to 0.63, error
  0.56 to 0.06."""
  x, y = chest_films(seed)
  return cases.Setup(covidnet_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     SCE(from_logits=True), stream(x, y, batch=32, seed=seed), 'classes')


@add('blind41_init_kachuee_ecg_zeros', 'initialisation', 'kachuee_ecg_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='nndl/nndl-discussion#14; jthickstun/pytorch_musicnet#4')
def _(seed, cured=False):
  """A Kachuee ECG ResNet-lite (a Conv1D stem, three residual blocks of Conv1D 32 kernel 5,
  Dense 32 and 32) classifying MIT-BIH-style heartbeats (187 samples in [0, 1], five AAMI
  classes), Adam at 1e-3, every kernel initialised to zeros (kernel_initializer='zeros'). Every
  activation is 0 and so is every kernel's gradient: only the output bias moves; the loss sits
  at ln 5 = 1.609 for 150 steps and the error at 0.77 (seed 0; 0.77, seed 1), the commonest
  class's. The threads (nndl/nndl-discussion#14: zero or constant weights give every unit the
  same activation and update, or none at all; jthickstun/pytorch_musicnet#4: zero weights fine
  for a linear model, not for a network) name the initialisation. Cure: He-normal kernels: loss
  5.2 to 0.21, error 0.89 to 0."""
  x, y = heartbeats(seed)
  return cases.Setup(kachuee_ecg_lite(seed, init='he_normal' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind41_log_res8_kws_log_of_padding', 'division_or_log', 'res8_kws_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/docs#1943; jameslyons/python_speech_features#7')
def _(seed, cured=False):
  """A Res8-lite keyword spotter whose log-mel front end is computed in the model as
  `tf.math.log(mel)` (no epsilon), reading Speech-Commands-style clips (half a second at 8 kHz,
  six words of 0.2 to 0.4 s, the rest of each clip zero-padded as the dataset's short clips
  are), Adam at 1e-3. The padded frames' power is exactly 0: log(0) = -inf, and the first
  convolution turns -inf into NaN: the loss is NaN from step 1 and the outputs NaN (seeds 0
  and 1). The threads (tensorflow/docs#1943: the spectrogram tutorial's log of zero;
  jameslyons/python_speech_features#7: zeros in the spectrum give log(0) and NaN MFCCs) add an
  epsilon before the log. Cure: log(mel + 1e-6): loss 0.28 at step 150, error 0.82 to 0 in
  training mode (0.45 in inference mode)."""
  x, y = keyword_clips(seed)
  return cases.Setup(res8_kws_lite(seed, eps=1e-6 if cured else 0.0),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind41_exp_attnsleep_naive_attention', 'softmax_overflow', 'attnsleep_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pytorch/executorch#18407; openai/baselines#761')
def _(seed, cured=False):
  """An AttnSleep-lite (a two-branch CNN, one self-attention layer, global pooling) staging
  single-channel sleep EEG epochs left in microvolts (as the EDF files hold them: slow waves of
  about 90 uV), its attention weights by a hand-written softmax, exp(s) / sum(exp(s)), with no
  max subtracted. The EEG's scale gives attention scores beyond 88.7: exp overflows to inf and
  inf / inf is NaN: the outputs are NaN from the first batch and the loss NaN from step 1
  (seeds 0 and 1). The threads (pytorch/executorch#18407: a naive attention softmax whose
  scores of 151 overflow float32's exp, inf / inf NaN, fixed by subtracting the max;
  openai/baselines#761: why the max is subtracted, exp(300) / exp(301) NaN) name the softmax's
  overflow. Cure: `tf.nn.softmax` (the max subtracted), same unscaled EEG: loss 8.5 to 0.53,
  error 0.77 to 0.10."""
  x, y = sleep_epochs(seed)
  return cases.Setup(attnsleep_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), stream(x, y, batch=32, seed=seed), 'classes')


@add('blind41_fp16_gated_htr_adam', 'precision', 'gated_htr_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11832; afiaka87/glide-finetune#5')
def _(seed, cured=False):
  """A gated-CNN handwriting recogniser in miniature (value x sigmoid(gate) convolutions) reading
  the bundled handwritten digits (32x32, grey), built and trained wholly in float16 (every layer's
  dtype float16, the images float16, no loss scaling), Adam at 1e-3 with its default epsilon. fit's
  running loss reads 2.30 at step 1, 2.40 at step 2, then hundreds (a batch loss of 571 at most,
  seed 0; 3,390, seed 1) and NaN from step 5 (seeds 0 and 1): the outputs NaN at the end. The
  threads (keras-team/keras#11832: an EDSR trained in float16, the loss inf then NaN, solved by a
  larger epsilon; afiaka87/glide-finetune#5: half-precision training NaN after the first iteration,
  Adam's epsilon too small for float16) name float16's limits. Cure: the same model in float32: loss
  1.74 at step 150, error 0.92 to 0.14."""
  x, y = data.digits(rgb=False)
  dtype = 'float32' if cured else 'float16'
  return cases.Setup(gated_htr_lite(seed, dtype=dtype), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), stream(x.astype(dtype), y, batch=32, seed=seed),
                     'classes')


@add('blind41_input_gandalf_unimputed_loan_table', 'bad_input', 'gandalf_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='danielegrattarola/keras-gat#14; gzerveas/mvts_transformer#41')
def _(seed, cured=False):
  """A GANDALF-lite (gated feature learning units, an MLP head) predicting loan default from a
  Lending-Club-style table fed as exported: 'months since the last delinquency' empty (NaN) for the
  half of the applicants who never had one, 'employment length' empty for 5%. Every batch holds NaN
  rows: the first step's gradients are NaN, and so are most weights after it; the outputs are NaN
  (error inf on median-filled rows, seeds 0 and 1), while Keras' reported loss reads a finite 0.67
  (seeds 0 and 1). The threads (danielegrattarola/keras-gat#14: NaN features give a NaN loss, fixed
  by X[np.isnan(X)] = 0; gzerveas/mvts_transformer#41: NaN left in the inputs make the loss NaN)
  name the data. Cure: the median imputed and a was-missing flag per such column: loss 0.77 to 0.35,
  error 0.71 to 0.09. The measure reads the rows with the gaps filled by the median (eval_data)."""
  x, y = loan_book(seed, missing=not cured)
  clean = np.where(np.isnan(x), np.nanmedian(x, 0), x)
  return cases.Setup(gandalf_lite(seed, features=x.shape[1]), keras.optimizers.Adam(1e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     stream(x, y, batch=64, seed=seed), 'binary_logit',
                     eval_data=stream(clean, y, batch=64, seed=seed))


@add('blind41_transient_tempcnn_flip_once', 'transient', 'tempcnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='PKU-YuanGroup/Open-Sora-Plan#333; allenai/olmoearth_pretrain#135')
def _(seed, cured=False):
  """A TempCNN-lite (three Conv1D-BatchNorm-ReLU-dropout layers, Dense 64) classifying
  Sentinel-2-style pixel time series (24 dates x 10 bands, standardised) into six crops, Adam
  at 1e-3: a healthy run (fit's running loss 2.7 to 0.59 by step 50) until, at the 90th
  training call, one activation of the first convolution reads NaN once (a corrupted buffer,
  `FlipOnce`). That step's update is NaN; plain fit carries on with NaN weights and BatchNorm
  statistics: the outputs are NaN at the end (error inf, seeds 0 and 1), while fit's running
  loss reads a finite 1.00 (seed 0; 1.03, seed 1). The threads
  (PKU-YuanGroup/Open-Sora-Plan#333: a NaN loss after 20k healthy steps, handled by resuming
  the run; allenai/olmoearth_pretrain#135: skip the batch whose loss goes NaN) treat it as a
  one-off. Cure: the same run without the fault: loss 2.7 to 0.25, error 0.84 to 0.01."""
  x, y = crop_series(seed)
  return cases.Setup(tempcnn_lite(seed, fault=None if cured else 90),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind41_mismatch_swem_softmax_one_unit', 'loss_output_mismatch', 'swem_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#126; marian-nmt/marian-dev#21')
def _(seed, cured=False):
  """A SWEM-lite (average and max of word embeddings, Dense 128) classifying review polarity,
  its output Dense(1, activation='softmax') under binary cross-entropy, Adam at 1e-3. A softmax
  over one unit is 1 whatever its input: every review is 'positive', the output's gradient is
  0 and nothing trains: the error stays the negatives' share, 0.40 (seed 0) and 0.67 (seed 1),
  while the loss drifts (0.69 to 0.68) with the batches' label mix. The threads
  (keras-team/keras#126: a one-unit softmax output, predict_proba all ones and no progress;
  marian-nmt/marian-dev#21: a softmax over one value is always 1) name the output's activation
  against the loss. Cure: Dense(1, sigmoid): error 0.40 to 0.21."""
  x, y = reviews(seed)
  return cases.Setup(swem_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind41_input_ltae_cloud_nan', 'bad_input', 'ltae_lite', doors=('trainer', 'fit'),
     steps=150, citation='NRCan/geo-deep-learning#68; prs-eth/Marigold#111')
def _(seed, cured=False):
  """An L-TAE-lite (a per-date embedding, a lightweight temporal attention of four master
  queries, an MLP) classifying Sentinel-2-style pixel series into six crops, fed the
  cloud-masked export as read: about 8% of the acquisitions NaN in every band. The NaN dates
  reach the attention and the first step's gradients: the weights go NaN and the
  predictions NaN (error inf on clean series, seeds 0 and 1; Keras' reported loss sits at a
  flat 1.792 = ln 6). The threads (NRCan/geo-deep-learning#68: NaN values in the input images
  make the loss NaN, written as 0 instead; prs-eth/Marigold#111: a NaN loss from input batches
  holding NaN) name the data. Cure: the masked acquisitions filled with 0 (the standardised
  mean): loss 1.92 to 1.05, error 0.83 to 0.06. The measure reads cloud-filled series
  (eval_data)."""
  x, y = cloudy_series(seed, nodata=not cured)
  xc, yc = cloudy_series(seed, nodata=False)
  return cases.Setup(ltae_lite(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=stream(xc, yc, batch=32, seed=seed))
