"""A twenty-third blind set of sick scenarios (the 'blind23' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind22.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a DeepSDF-lite, a DeepConvLSTM-lite, an LSTM
autoencoder, an ST-ResNet-lite, a Gumbel-softmax autoencoder, an All-CNN-lite, a PANNs
CNN6-lite, an SGC-lite, a TextRCNN-lite and a YouTube-DNN-lite). Each builder takes `cured`:
the same run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each
was checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom
(seeds 0 and 1), the cured twin passes runner's "did it train" measure in the same number of
steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND23 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND23.add` with split='blind23'."""
  return BLIND23.add(name, expected, arch, split='blind23', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def shape_sdf_samples(seed, *, shapes=64, rows=8192):
  """Signed distances of 2-D shapes in miniature (DeepSDF's training data): `shapes` circles
  and axis-aligned boxes of random centre and size in [-1, 1]^2; each row a shape id and a
  sample point (half near the surface, half uniform), the target the point's signed distance
  (negative inside). (([ids (rows,), points (rows, 2)]), sdf (rows, 1))."""
  rng = np.random.RandomState(seed)
  centre = rng.uniform(-0.4, 0.4, (shapes, 2))
  size = rng.uniform(0.2, 0.5, (shapes, 2))
  box = rng.rand(shapes) < 0.5
  ids = rng.randint(0, shapes, rows)
  pts = rng.uniform(-1, 1, (rows, 2))

  def sdf(i, p):
    d = p - centre[i]
    circle = np.linalg.norm(d, axis=-1) - size[i, 0]
    q = np.abs(d) - size[i]
    square = (np.linalg.norm(np.maximum(q, 0), axis=-1) +
              np.minimum(np.maximum(q[:, 0], q[:, 1]), 0))
    return np.where(box[i], square, circle)

  near = rng.rand(rows) < 0.5
  theta = rng.uniform(0, 2 * np.pi, rows)
  ring = centre[ids] + size[ids, :1] * np.stack([np.cos(theta), np.sin(theta)], 1)
  pts = np.where(near[:, None], ring + 0.05 * rng.randn(rows, 2), pts)
  return ((ids.astype(np.int32), pts.astype(np.float32)),
          sdf(ids, pts)[:, None].astype(np.float32))


def deepsdf_lite(seed, *, shapes=64, code=16, width=64, depth=4):
  """A DeepSDF-lite auto-decoder (Park et al., 2019): a learned latent code per shape (an
  Embedding of `code`), concatenated with the query point, `depth` Dense(`width`, ReLU)
  layers, Dense(1): the signed distance."""
  _seed(seed)
  ids = keras.Input((), dtype='int32')
  pts = keras.Input((2,))
  codes = L.Embedding(shapes, code,
                      embeddings_initializer=keras.initializers.RandomNormal(stddev=0.01))(ids)
  h = L.Concatenate()([codes, pts])
  for _ in range(depth):
    h = L.Dense(width, activation='relu')(h)
  return keras.Model([ids, pts], L.Dense(1)(h), name='deepsdf_lite')


def activity_windows(seed, *, rows=2048, steps=64, channels=6, classes=6, rate=32):
  """Wearable-sensor activity windows in miniature (2 s at 32 Hz of a 3-axis accelerometer and
  gyroscope): each activity a cadence (0.5 to 3 Hz), an axis mix and an intensity, plus sensor
  noise and gravity on one axis; per-channel standardised. (x (rows, steps, channels),
  labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  t = np.arange(steps) / rate
  cadence = np.linspace(0.5, 3.0, classes)
  mix = rng.uniform(0.2, 1.0, (classes, channels))
  amp = np.linspace(0.4, 1.6, classes)
  phase = rng.uniform(0, 2 * np.pi, (rows, 1, 1))
  f = cadence[y][:, None, None] * (1 + 0.05 * rng.randn(rows, 1, 1))
  wave = np.sin(2 * np.pi * f * t[None, :, None] + phase)
  x = amp[y][:, None, None] * mix[y][:, None, :] * wave
  x = x + 0.3 * rng.randn(rows, steps, channels)
  x[..., 2] += 1.0
  x = (x - x.mean(axis=(0, 1))) / x.std(axis=(0, 1))
  return x.astype(np.float32), y.astype(np.int32)


def deepconvlstm_lite(seed, *, steps=64, channels=6, classes=6):
  """A DeepConvLSTM-lite (Ordonez & Roggen, 2016): four temporal convolutions (5 samples, 32
  filters, ReLU), two LSTM(32) layers, Dense(`classes`) on the last step: the logits."""
  _seed(seed)
  x = keras.Input((steps, channels))
  h = x
  for _ in range(4):
    h = L.Conv1D(32, 5, activation='relu')(h)
  h = L.LSTM(32, return_sequences=True)(h)
  h = L.LSTM(32)(h)
  return keras.Model(x, L.Dense(classes)(h), name='deepconvlstm_lite')


def machine_vibration(seed, *, rows=2048, steps=48):
  """Pump vibration sensor windows in their raw units (each pump's own baseline of 10 to 30
  and swings of a few units, as the sensor logs them; not standardised): a running frequency,
  its harmonic, a slow drift and noise. (x, x): an autoencoder's input and target, (rows,
  steps, 1)."""
  rng = np.random.RandomState(seed)
  t = np.arange(steps)[None, :]
  f = rng.uniform(0.05, 0.2, (rows, 1))
  phase = rng.uniform(0, 2 * np.pi, (rows, 1))
  amp = rng.uniform(2.0, 6.0, (rows, 1))
  base = rng.uniform(10.0, 30.0, (rows, 1))
  sig = (base + amp * np.sin(2 * np.pi * f * t + phase) +
         0.3 * amp * np.sin(4 * np.pi * f * t + 2 * phase) +
         rng.uniform(-0.05, 0.05, (rows, 1)) * t + 0.3 * rng.randn(rows, steps))
  x = sig[..., None].astype(np.float32)
  return x, x


def lstm_autoencoder(seed, *, steps=48, units=32):
  """An LSTM autoencoder (Srivastava et al., 2015; Malhotra et al., 2016 for anomaly
  detection): an LSTM(`units`) encoder to one vector, repeated over the window, an LSTM decoder
  (sequences), a time-distributed Dense(1): the reconstruction."""
  _seed(seed)
  x = keras.Input((steps, 1))
  code = L.LSTM(units)(x)
  h = L.LSTM(units, return_sequences=True)(L.RepeatVector(steps)(code))
  return keras.Model(x, L.TimeDistributed(L.Dense(1))(h), name='lstm_autoencoder')


def crowd_flows(seed, *, rows=1024, grid=8, closeness=3, period=2):
  """Citywide crowd flows in miniature (ST-ResNet's task): per grid cell the count of people
  entering in an interval, a Poisson draw around a daily-cycle rate that differs by cell (a
  few quiet cells near 0, busy ones ~30); the inputs the last `closeness` intervals and the same
  interval on the last `period` days (counts / 10), the target the next interval's counts.
  (x (rows, grid, grid, closeness + period), y (rows, grid, grid, 1))."""
  rng = np.random.RandomState(seed)
  base = np.exp(rng.uniform(np.log(0.2), np.log(30.0), (grid, grid)))
  t = rng.uniform(0, 48, (rows, 1, 1))

  def counts(at):
    rate = base[None] * (1.0 + 0.8 * np.sin(2 * np.pi * at / 48.0))
    return rng.poisson(np.maximum(rate, 0.0)).astype(np.float32)

  frames = [counts(t - k) for k in range(closeness, 0, -1)]
  frames += [counts(t - 48.0 * d) for d in range(period, 0, -1)]
  x = np.stack(frames, axis=-1) / 10.0
  return x.astype(np.float32), counts(t)[..., None]


def st_resnet_lite(seed, *, grid=8, channels=5, units=2, relu_out=True):
  """An ST-ResNet-lite (Zhang et al., 2017): a 3x3 convolution of 32, `units` residual units
  (ReLU, 3x3 convolution, twice, added back), a 3x3 convolution to one flow map; the output
  through a ReLU (counts are never negative) as the thread's model has it."""
  _seed(seed)
  x = keras.Input((grid, grid, channels))
  h = L.Conv2D(32, 3, padding='same')(x)
  for _ in range(units):
    r = L.Conv2D(32, 3, padding='same')(L.Activation('relu')(h))
    r = L.Conv2D(32, 3, padding='same')(L.Activation('relu')(r))
    h = L.Add()([h, r])
  out = L.Conv2D(1, 3, padding='same', activation='relu' if relu_out else None)(h)
  return keras.Model(x, out, name='st_resnet_lite')


def handwritten_poisson(y, p):
  """mean(p - y log p), the Poisson negative log-likelihood as the thread writes it (no
  epsilon: a prediction of 0 is log(0))."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(p - y * tf.math.log(p))


def epsilon_poisson(y, p):
  """mean(p - y log(p + 1e-7)), the thread's remedy (Keras's own poisson loss)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return tf.reduce_mean(p - y * tf.math.log(p + 1e-7))


class GumbelSoftmax(L.Layer):
  """The Gumbel-softmax relaxation (Jang et al., 2017; Maddison et al., 2017) of `groups`
  categorical latents of `categories` each: in training, Gumbel noise -log(-log(u)) added to
  the logits, divided by the temperature `tau` and normalised over the categories (`naive`:
  exp(z) / sum(exp(z)), as the thread's code writes it; otherwise tf.nn.softmax); in inference
  the softmax of logits / tau."""

  def __init__(self, groups, categories, tau, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.groups, self.categories, self.tau, self.naive = groups, categories, tau, naive

  def call(self, logits, training=False):
    z = tf.reshape(logits, [-1, self.groups, self.categories])
    if training:
      u = tf.random.uniform(tf.shape(z), 1e-9, 1.0)
      z = z - tf.math.log(-tf.math.log(u))
    z = z / self.tau
    y = field.naive_softmax(z) if self.naive else tf.nn.softmax(z, axis=-1)
    return tf.reshape(y, [-1, self.groups * self.categories])


def gumbel_softmax_ae_lite(seed, *, size=16, groups=8, categories=10, tau=0.1, naive=True):
  """A Gumbel-softmax autoencoder (the categorical VAE of Jang et al., 2017, its
  reconstruction term): a convolutional encoder (3x3 convolutions of 16 and 32, stride 2,
  ReLU) to `groups` x `categories` logits, `GumbelSoftmax` at temperature `tau`, a Dense
  decoder (256, ReLU) to the pixels, sigmoid: the reconstructed image."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(16, 3, strides=2, padding='same', activation='relu')(x)
  h = L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(h)
  logits = L.Dense(groups * categories)(L.Flatten()(h))
  code = GumbelSoftmax(groups, categories, tau, naive=naive)(logits)
  h = L.Dense(256, activation='relu')(code)
  out = L.Reshape((size, size, 1))(L.Dense(size * size, activation='sigmoid')(h))
  return keras.Model(x, out, name='gumbel_softmax_ae_lite')


def all_cnn_lite(seed, *, size=16, classes=10, init='zeros'):
  """An All-CNN-lite (Springenberg et al., 2015, "Striving for Simplicity"): no pooling layers,
  3x3 convolutions of 32 with a strided 3x3 convolution for downsampling (twice), a 1x1
  convolution to `classes`, global average pooling: the logits. Every kernel initialised with
  `init` (the thread's 'zeros'; Keras's default glorot_uniform otherwise)."""
  _seed(seed)
  conv = lambda n, k, s=1: L.Conv2D(n, k, strides=s, padding='same', activation='relu',
                                    kernel_initializer=init)
  x = keras.Input((size, size, 1))
  h = conv(32, 3)(x)
  h = conv(32, 3, 2)(h)
  h = conv(48, 3)(h)
  h = conv(48, 3, 2)(h)
  h = L.Conv2D(classes, 1, kernel_initializer=init)(h)
  return keras.Model(x, L.GlobalAveragePooling2D()(h), name='all_cnn_lite')


def instrument_clips(seed, *, rows=1024, length=2048, rate=8000, classes=5):
  """Short clips of five sound classes (tonal notes at class-specific pitches and harmonics,
  a noise burst, a click train) read from 16-bit WAV files as integers (amplitudes up to
  ~20,000, as scipy.io.wavfile returns them; not scaled to [-1, 1]). (x (rows, length, 1),
  labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  t = np.arange(length) / rate
  x = np.zeros((rows, length))
  pitch = np.array([220.0, 440.0, 880.0])
  for i in range(rows):
    c = y[i]
    if c < 3:
      f0 = pitch[c] * (1 + 0.02 * rng.randn())
      x[i] = np.sin(2 * np.pi * f0 * t) + 0.5 * np.sin(4 * np.pi * f0 * t + rng.rand())
    elif c == 3:
      x[i] = rng.randn(length) * np.exp(-t * rng.uniform(5, 15))
    else:
      x[i, ::rng.randint(150, 300)] = 4.0
    x[i] += 0.05 * rng.randn(length)
  gain = rng.uniform(3000, 8000, (rows, 1))
  return np.round(x * gain)[..., None].astype(np.float32), y.astype(np.int32)


def dft_kernel(n_fft):
  """The real and imaginary DFT bases as a Conv1D kernel (n_fft, 1, 2 * bins), Hann-windowed:
  an STFT as a strided convolution, the way PANNs' torchlibrosa front end computes it."""
  n = np.arange(n_fft)
  k = np.arange(n_fft // 2 + 1)
  window = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
  ang = 2 * np.pi * n[:, None] * k[None, :] / n_fft
  kernel = np.concatenate([np.cos(ang), -np.sin(ang)], axis=1) * window[:, None]
  return kernel[:, None, :].astype(np.float32)


def mel_matrix(bins, mels, rate):
  """A triangular mel filter bank (bins, mels)."""
  hz = np.linspace(0, rate / 2, bins)
  mel = lambda f: 2595 * np.log10(1 + f / 700.0)
  edges = np.linspace(mel(30.0), mel(rate / 2), mels + 2)
  edges = 700 * (10 ** (edges / 2595) - 1)
  fb = np.zeros((bins, mels))
  for m in range(mels):
    lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
    fb[:, m] = np.maximum(0, np.minimum((hz - lo) / (mid - lo), (hi - hz) / (hi - mid)))
  return fb.astype(np.float32)


class LogMel(L.Layer):
  """PANNs' front end: the STFT as a fixed strided convolution (n_fft 256, hop 128), the power
  spectrum (re^2 + im^2), a mel filter bank (32 bands), 10 log10(power + 1e-10): a
  (frames, 32, 1) log-mel image, in the layer's compute dtype."""

  def __init__(self, n_fft=256, hop=128, mels=32, rate=8000, **kwargs):
    super().__init__(**kwargs)
    self.n_fft, self.hop, self.bins = n_fft, hop, n_fft // 2 + 1
    self.kernel_np, self.mel_np = dft_kernel(n_fft), mel_matrix(n_fft // 2 + 1, mels, rate)

  def call(self, x):
    x = tf.cast(x, self.compute_dtype)
    kernel = tf.constant(self.kernel_np, self.compute_dtype)
    spec = tf.nn.conv1d(x, kernel, self.hop, 'VALID')
    re, im = spec[..., :self.bins], spec[..., self.bins:]
    power = re * re + im * im
    mel = tf.matmul(power, tf.constant(self.mel_np, self.compute_dtype))
    logmel = 10.0 * tf.math.log(mel + tf.constant(1e-10, self.compute_dtype)) / np.log(10.0)
    return logmel[..., None]


def panns_cnn6_lite(seed, *, length=2048, classes=5, front_dtype='mixed_float16'):
  """A PANNs CNN6-lite (Kong et al., 2020): `LogMel` (in `front_dtype`), BN over the mel
  bands, three 5x5 convolution blocks (16, 32, 64; BN, ReLU, 2x2 average pooling), the mean
  over frequency, max + mean over time, Dense(`classes`): the logits; everything but the front
  end under mixed_float16 (float16 compute, float32 variables), the logits cast to float32."""
  _seed(seed)
  x = keras.Input((length, 1))
  h = LogMel(dtype=front_dtype)(x)
  h = L.BatchNormalization(axis=2, dtype='mixed_float16')(h)
  for w in (16, 32, 64):
    h = L.Conv2D(w, 5, padding='same', use_bias=False, dtype='mixed_float16')(h)
    h = L.Activation('relu', dtype='mixed_float16')(
        L.BatchNormalization(dtype='mixed_float16')(h))
    h = L.AveragePooling2D(2, padding='same', dtype='mixed_float16')(h)
  h = keras.ops.mean(h, axis=2)
  h = L.Add(dtype='mixed_float16')([L.GlobalMaxPooling1D(dtype='mixed_float16')(h),
                                    L.GlobalAveragePooling1D(dtype='mixed_float16')(h)])
  out = L.Dense(classes, dtype='mixed_float16')(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='panns_cnn6_lite')


def citation_graph(seed, *, nodes=1200, classes=6, features=64, degree=4, hops=2,
                   missing=0):
  """A citation network in miniature (a stochastic block model: ~85% of each paper's
  `degree`-ish citations within its topic), bag-of-words features drawn from topic word
  distributions (row-normalised), `missing` papers whose feature rows are NaN (no abstract in
  the dump, as the loader leaves them). SGC's preprocessing: the features propagated `hops`
  times over the symmetrically normalised adjacency with self-loops (S^K X), which carries a
  NaN row to its neighbours. (S^K X (nodes, features), labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, nodes)
  adj = np.zeros((nodes, nodes), np.float32)
  for i in range(nodes):
    for _ in range(degree // 2):
      same = rng.rand() < 0.85
      pool = np.flatnonzero((y == y[i]) == same)
      j = rng.choice(pool)
      if j != i:
        adj[i, j] = adj[j, i] = 1.0
  topics = rng.dirichlet(np.full(features, 0.3), classes)
  x = np.stack([rng.multinomial(20, topics[c]) for c in y]).astype(np.float32)
  x = x / np.maximum(x.sum(1, keepdims=True), 1.0)
  x[rng.choice(nodes, missing, replace=False)] = np.nan
  a = adj + np.eye(nodes, dtype=np.float32)
  d = 1.0 / np.sqrt(a.sum(1))
  s = a * d[:, None] * d[None, :]
  for _ in range(hops):
    x = s @ x
  return (x * 10.0).astype(np.float32), y.astype(np.int32)


def sgc_lite(seed, *, features=64, classes=6):
  """An SGC-lite (Wu et al., 2019, Simplifying Graph Convolutional Networks): logistic
  regression, Dense(`classes`), on the pre-propagated features S^K X: the logits."""
  _seed(seed)
  x = keras.Input((features,))
  return keras.Model(x, L.Dense(classes)(x), name='sgc_lite')


def review_sentences(seed, *, rows=2048, length=24, vocab=200):
  """Product-review sentences in miniature: token ids of neutral filler plus a few sentiment
  words (ids 1-20 positive, 21-40 negative), some negated by a 'not' token (id 41) just before
  them; the label 1 if the (negation-aware) sentiment is positive. (ids (rows, length), labels
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randint(42, vocab, (rows, length))
  y = np.zeros(rows, np.float32)
  for i in range(rows):
    score = 0
    for p in rng.choice(np.arange(1, length), rng.randint(1, 4), replace=False):
      positive = rng.rand() < 0.5
      x[i, p] = rng.randint(1, 21) if positive else rng.randint(21, 41)
      negate = rng.rand() < 0.25
      if negate:
        x[i, p - 1] = 41
      score += (1 if positive else -1) * (-1 if negate else 1)
    y[i] = 1.0 if score > 0 or (score == 0 and rng.rand() < 0.5) else 0.0
  return x.astype(np.int32), y[:, None]


def textrcnn_lite(seed, *, length=24, vocab=200, dim=32):
  """A TextRCNN-lite (Lai et al., 2015, Recurrent Convolutional Neural Networks for Text
  Classification): word embeddings, a bidirectional GRU for each word's left and right context,
  [context, embedding] through a time-distributed Dense(32, tanh), max pooling over time,
  Dense(1) with no activation (the output a logit)."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  e = L.Embedding(vocab, dim)(ids)
  c = L.Bidirectional(L.GRU(dim, return_sequences=True))(e)
  h = L.TimeDistributed(L.Dense(32, activation='tanh'))(L.Concatenate()([c, e]))
  return keras.Model(ids, L.Dense(1)(L.GlobalMaxPooling1D()(h)), name='textrcnn_lite')


def watch_histories(seed, *, rows=4096, items=60, genres=6, history=10):
  """Video watch histories in miniature: each user a favourite genre (10 videos each), the
  last `history` watches mostly from it; the next watch the genre's current hit with
  probability 0.6, another video of the genre otherwise; also the user's age bucket (0-4).
  (([ids (rows, history), age (rows,)]), next video id)."""
  rng = np.random.RandomState(seed)
  per = items // genres
  g = rng.randint(0, genres, rows)
  own = g[:, None] * per + rng.randint(0, per, (rows, history))
  other = rng.randint(0, items, (rows, history))
  ids = np.where(rng.rand(rows, history) < 0.8, own, other)
  age = rng.randint(0, 5, rows)
  hit = g * per + (age % per)
  nxt = np.where(rng.rand(rows) < 0.6, hit, g * per + rng.randint(0, per, rows))
  return (ids.astype(np.int32), age.astype(np.int32)), nxt.astype(np.int32)


class GlitchOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel that misfires
  once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def youtube_dnn_lite(seed, *, items=60, history=10, dim=32, glitch=None):
  """A YouTube-DNN-lite candidate generator (Covington et al., 2016): the watched videos'
  embeddings averaged, an age-bucket embedding concatenated, a tower of ReLU layers (64, 32), a
  `GlitchOnce` (at its `glitch`-th training call; None: never) on the user vector, a softmax
  over the videos (Dense(`items`)): the logits."""
  _seed(seed)
  ids = keras.Input((history,), dtype='int32')
  age = keras.Input((), dtype='int32')
  watched = L.GlobalAveragePooling1D()(L.Embedding(items, dim)(ids))
  h = L.Concatenate()([watched, L.Embedding(5, 8)(age)])
  h = L.Dense(64, activation='relu')(h)
  h = GlitchOnce(glitch)(L.Dense(32, activation='relu')(h))
  return keras.Model([ids, age], L.Dense(items)(h), name='youtube_dnn_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind23_lr_deepsdf_adam', 'learning_rate', 'deepsdf_lite', doors=('trainer', 'fit'),
     steps=150,
     citation='wiewel/LatentSpaceSubdivision#3; PENGLU-WashU/IMC_Denoise#11')
def _(seed, cured=False):
  """A DeepSDF-lite auto-decoder (a 16-d latent code per shape concatenated with the query
  point, four Dense(64, ReLU) layers) regressing the signed distances of 64 2-D circles and
  boxes, MSE, Adam at 0.1: the first update throws the weights far off: the loss (fit's running
  mean) 0.16 at step 0, 1.4e3 at step 1, falling back to 19 at step 149 with the ReLUs dead and
  the output near a constant, no NaN (the error 0.143 before, 0.111 after; the constant
  answer's 0.115). Seed 1: 0.13 at step 0, 696 at step 1, 9.4 at step 149 (the error 0.123
  before, 0.084 after; the constant's 0.097). wiewel/LatentSpaceSubdivision#3 (the loss keeps
  getting bigger and finally NaN: "because of the large lr"); PENGLU-WashU/IMC_Denoise#11 (NaN
  loss: the initial learning rate of 1 is too big; set 1e-3). Cured: Adam at 1e-3: the loss
  0.16 to 0.029, the error 0.143 to 0.0021."""
  x, y = shape_sdf_samples(seed)
  return cases.Setup(deepsdf_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     'mse', data.stream(x, y, batch=64, seed=seed), 'regression')


@add('blind23_lr_deepconvlstm_adam', 'learning_rate', 'deepconvlstm_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#4066; keras-team/keras#8190')
def _(seed, cured=False):
  """A DeepConvLSTM-lite (four 5-sample temporal convolutions of 32, two LSTM(32) layers)
  classifying six activities from 2 s windows of standardised accelerometer and gyroscope
  signals, Adam at 0.05: the early updates overshoot and the network settles on one class: the
  loss (fit's running mean) 1.80 at step 0, 2.06 at step 1, 1.81 from step 100 to 149 (ln 6 =
  1.79), no NaN (the error 0.82 before, 0.82 after; the constant answer's 0.78). Seed 1: 1.80 at
  step 0, 2.22 at step 1, 1.80 at step 149 (the error 0.79 before, 0.875 after; the constant's
  0.77). keras-team/keras#4066 (the model locks into predicting a single class and accuracy
  stays at chance; Adam at its default rate, a smaller one than the user's, fixed it);
  keras-team/keras#8190 (an LSTM for action recognition stuck at a loss, predicting one class
  always). Cured: Adam at 1e-3: the loss 1.80 to 0.70, the error 0.82 to 0.17."""
  x, y = activity_windows(seed)
  return cases.Setup(deepconvlstm_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.05),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind23_grad_lstm_ae_vibration', 'exploding_gradients', 'lstm_autoencoder',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#5127; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """An LSTM autoencoder (an LSTM(32) encoder, the code repeated, an LSTM(32) decoder, a
  time-distributed Dense(1)) reconstructing pump vibration windows in their raw units (each
  pump's baseline 10 to 30, swings of a few units; not standardised), MSE, SGD with momentum
  0.9 at 0.1, no clipping: the large errors of the raw signal give large gradients through the
  recurrent steps and the loss jumps instead of falling: the loss (fit's running mean) 430 at
  step 0, 270 at step 1, 385 at step 2, 87 at step 149, no NaN (the error 468 before, 42.9 after;
  the constant answer's 42.8). Seed 1: 460 at step 0, 677 at step 2, 688 at step 5, 119 at step
  149 (the error 427 before, 159 after; the constant's 40.8). keras-team/keras#5127 (the loss
  NaN without clipnorm; clipnorm fixes it: the gradients get very large);
  Marcovaldong/lstmp.pytorch#2 (an LSTM's loss goes to NaN: exploding gradients; clip the
  gradients to a max norm). Cured: the same rate with clipnorm=0.5: the loss 430 to 47, the
  error 468 to 21.4."""
  x, y = machine_vibration(seed)
  return cases.Setup(lstm_autoencoder(seed),
                     keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.5 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind23_log_stresnet_poisson_relu', 'division_or_log', 'st_resnet_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#590; pytorch/pytorch#3336')
def _(seed, cured=False):
  """An ST-ResNet-lite (a 3x3 convolution, two residual units of ReLU and 3x3 convolutions,
  a 3x3 convolution to one flow map through a ReLU so that counts are never negative)
  forecasting the next interval's crowd counts per cell of an 8x8 city grid from the last three
  intervals and the same interval on the last two days, Adam at 1e-3, the loss the Poisson
  negative log-likelihood written by hand, mean(p - y log p): the ReLU output is exactly 0 on
  many cells, log(0) = -inf: the loss NaN from step 0 (the weights NaN after the first update;
  the error 119 before, inf after; the constant answer's 35.5). Seed 1: the same (the error 97.7
  before; the constant's 27). keras-team/keras#590 (the poisson objective gives NaN from the
  first epoch: log of a y_pred of 0; fixed with an epsilon fuzz factor); pytorch/pytorch#3336
  (the Poisson NLL is NaN if the prediction is zero: a small epsilon added). Cured: mean(p - y
  log(p + 1e-7)) (Keras's poisson): the loss 22 to -7.8, the error 119 to 9.5."""
  x, y = crowd_flows(seed)
  return cases.Setup(st_resnet_lite(seed), keras.optimizers.Adam(1e-3),
                     epsilon_poisson if cured else handwritten_poisson,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind23_exp_gumbel_softmax_low_tau', 'softmax_overflow', 'gumbel_softmax_ae_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='ericjang/gumbel-softmax#2; hexiangnan/attentional_factorization_machine#9')
def _(seed, cured=False):
  """A Gumbel-softmax autoencoder (a convolutional encoder to 8 categorical latents of 10,
  Gumbel noise added and divided by the temperature 0.1, normalised per latent; a Dense
  decoder to the pixels, sigmoid) reconstructing the digits (16x16 grey), binary_crossentropy,
  Adam at 3e-3, the softmax written as exp(z) / sum(exp(z)): logits plus Gumbel noise over a
  temperature of 0.1 pass 88.7 and exp overflows, inf / inf = NaN: the latents NaN from the
  first training batch, the weights NaN after step 1 (step 0 for seed 1); Keras's clipping of the
  probabilities hides it in the loss, which reads 0.70 at step 0 and 0.64 at step 149 (the
  error 0.18 before, inf after; the constant answer's 0.072; in training mode the outputs are
  NaN from the start). ericjang/gumbel-softmax#2 (a temperature very close to 0 breaks the
  backpropagation; use 0.5 to 1.0); hexiangnan/attentional_factorization_machine#9 (NaN from a
  softmax implemented with exp, which overflows; the library softmax does not). Cured:
  tf.nn.softmax at the same temperature: the loss 0.70 to 0.42, the error 0.18 to 0.053."""
  x, _ = data.digits(size=16, rgb=False)
  return cases.Setup(gumbel_softmax_ae_lite(seed, naive=not cured), keras.optimizers.Adam(3e-3),
                     'binary_crossentropy', data.stream(x, x, batch=32, seed=seed),
                     'regression')


@add('blind23_init_allcnn_zeros', 'initialisation', 'all_cnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='wagonhelm/NaNmnist#2; jthickstun/pytorch_musicnet#4')
def _(seed, cured=False):
  """An All-CNN-lite (3x3 convolutions with strided 3x3 convolutions in place of pooling,
  a 1x1 convolution to the classes, global average pooling) classifying the digits (16x16
  grey), SGD with momentum 0.9 at 0.05, every kernel initialised to zeros: every activation is
  0, so every kernel's gradient is 0 and only the last biases move: the loss 2.30 (ln 10) at
  step 0 and 2.31 at step 149, no NaN (the error 0.93 before, 0.89 after; the constant answer's
  0.86). Seed 1: the same (the error 0.88 before, 0.91 after; the constant's 0.875).
  wagonhelm/NaNmnist#2 (weights initialised as zeros: every neuron computes the same output
  and gets the same update; deep nets need random initialisation); jthickstun/pytorch_musicnet#4
  (zero initial weights; use a random normal initialisation). Cured: Keras's default
  glorot_uniform kernels: the loss 2.30 to 2.09, the error 0.91 to 0.31."""
  return cases.Setup(all_cnn_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.SGD(0.05, momentum=0.9), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind23_fp16_panns_logmel_int16', 'precision', 'panns_cnn6_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='qiuqiangkong/audioset_tagging_cnn#17; '
              'LIHANG-HONG/birdclef2023-2nd-place-solution#2')
def _(seed, cured=False):
  """A PANNs CNN6-lite (a log-mel front end computing the STFT as a fixed strided
  convolution, the power spectrum and a mel filter bank; BN; three 5x5 convolution blocks;
  max + mean pooling over time) classifying five sound classes from clips read from 16-bit WAV
  files as integers (amplitudes to ~20,000), the whole model under mixed_float16 (float16
  compute, float32 variables; Adam at 1e-3 in a LossScaleOptimizer as the mixed-precision guide
  has it): the STFT of integer-scale audio and its power pass float16's 65,504, inf, and the
  log-mel and BN turn it into NaN: the outputs NaN before training and the loss NaN from step
  0, BN's moving statistics NaN after it (the error inf before and after; the constant answer's
  0.76). Seed 1: the same. qiuqiangkong/audioset_tagging_cnn#17 (with mixed precision the
  LogmelFilterBank layer sometimes gives NaN, which makes the loss NaN; not without it);
  LIHANG-HONG/birdclef2023-2nd-place-solution#2 (MelSpectrogram in float16 produces inf during
  the audio-to-spectrogram conversion). Cured: the front end in float32 (the rest still mixed):
  the loss 2.95 to 0.068, the error 0.79 to 0 in training mode (0.86 to 0.61 in inference
  mode: BN's moving statistics still near their start)."""
  x, y = instrument_clips(seed)
  return cases.Setup(panns_cnn6_lite(seed, front_dtype='float32' if cured else 'mixed_float16'),
                     keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3)),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind23_input_sgc_nan_features', 'bad_input', 'sgc_lite', doors=('trainer', 'fit'),
     steps=150, citation='danielegrattarola/keras-gat#14; yao8839836/text_gcn#64')
def _(seed, cured=False):
  """An SGC-lite (logistic regression on features propagated twice over the normalised
  citation graph, S^2 X, as SGC precomputes them) classifying 1,200 papers into six topics, Adam
  at 1e-2; two papers' feature rows are NaN (no abstract in the dump) and the propagation carries
  them to their two-hop neighbourhoods: the first batch already holds such rows: the loss NaN
  from step 0 (the weights NaN; the error 0.70 before, inf after; the constant answer's 0.73).
  Seed 1: the same. danielegrattarola/keras-gat#14 (on citeseer the training loss is NaN;
  X[np.isnan(X)] = 0 after loading fixed it); yao8839836/text_gcn#64 (loss NaN with node
  features added: some nodes' features missing). Cured: the missing rows zero (the thread's
  remedy): the loss 1.90 to 0.35, the error 0.70 to 0. The measure reads the clean graph
  (eval_data) for both runs."""
  x, y = citation_graph(seed, missing=0 if cured else 2)
  clean, yc = citation_graph(seed)
  return cases.Setup(sgc_lite(seed), keras.optimizers.Adam(1e-2), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind23_mismatch_textrcnn_logit_bce', 'loss_output_mismatch', 'textrcnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#28718; keras-team/keras#15271')
def _(seed, cured=False):
  """A TextRCNN-lite (word embeddings, a bidirectional GRU for each word's context,
  [context, embedding] through a tanh layer, max pooling over time, Dense(1) with no activation)
  classifying review sentences' sentiment, Adam at 1e-3, compiled with 'binary_crossentropy',
  which expects probabilities: the logit is clipped to [1e-7, 1 - 1e-7] before the log, so every
  output outside that range gets no gradient and the loss sits on the clip: the loss (fit's
  running mean) 1.99 at step 0, 0.71 at step 149, no NaN, nothing learned (the error 0.47
  before, 0.48 after; the constant answer's 0.48). Seed 1: 1.60 to 0.71 (the error 0.51 before,
  0.50 after; the constant's 0.50). tensorflow/tensorflow#28718 (a head with no activation
  compiled with binary_crossentropy, whose from_logits=False expects a probability: add a
  sigmoid or set from_logits=True); keras-team/keras#15271 (from_logits=True means the last
  layer's activation is linear). Cured: BinaryCrossentropy(from_logits=True): the loss 0.69 to
  0.68, the error 0.47 to 0.20."""
  x, y = review_sentences(seed)
  return cases.Setup(textrcnn_lite(seed), keras.optimizers.Adam(1e-3),
                     BCE(from_logits=True) if cured else 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind23_transient_youtube_dnn_glitch', 'transient', 'youtube_dnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='axolotl-ai-cloud/axolotl#2326; Rikorose/DeepFilterNet#30')
def _(seed, cured=False):
  """A YouTube-DNN-lite candidate generator (the watched videos' embeddings averaged, an
  age-bucket embedding, a ReLU tower of 64 and 32, a softmax over 60 videos) predicting each
  user's next watch, Adam at 1e-3, training normally (the loss 4.10 at step 0, 4.05 at step 50)
  when one element of the user vector reads NaN once (`GlitchOnce`: its 90th training call; step
  85 in a plain `fit` after the measure's four training-mode passes; a kernel or buffer that
  misfires once, not the data, the model or the settings): the loss NaN from step 85, the
  weights NaN after it (the error 0.98 before, inf after; the constant answer's 0.95). Seed 1:
  the same step. axolotl-ai-cloud/axolotl#2326 (the loss suddenly NaN at random; resumed from a
  checkpoint on the same data it passes without any issue); Rikorose/DeepFilterNet#30 (NaN in
  rare circumstances; starting again from the last checkpoint works). Cured: the same run
  without the fault: the loss 4.10 to 3.36, the error 0.98 to 0.55."""
  x, y = watch_histories(seed)
  return cases.Setup(youtube_dnn_lite(seed, glitch=None if cured else 90),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=64, seed=seed), 'classes')
