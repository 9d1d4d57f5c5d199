"""A forty-seventh blind set of sick scenarios (the 'blind47' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind46.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in speech and music audio, seismology and power
systems (a SampleRNN-lite frame-level audio predictor, a PhaseNet-lite phase picker, a
DeepEnergy-lite load forecaster, a GPD-lite phase classifier, an ECAPA-TDNN-lite speaker
recogniser, an AST-lite music tagger, a PQD-DCNN-lite power-quality classifier, a
CRED-lite earthquake detector, a NILM-DAE-lite energy disaggregator, an Open-Unmix-lite source
separator and a ConvNetQuake-lite event detector). Each builder takes `cured`: the same run with
the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain
Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured
twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND47 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND47.add` with split='blind47'."""
  return BLIND47.add(name, expected, arch, split='blind47', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def audio_frames(seed, *, rows=2048, frames=64, frame=4):
  """Tonal audio in miniature (a piano-like set at a low rate): each clip a sum of three decaying
  partials of random pitch and phase plus a little noise, peak-normalised, then standardised
  (divided by the set's standard deviation, as the threads' loaders do). (the last `frames`
  frames of `frame` samples (rows, frames, frame), the next sample (rows, 1))."""
  rng = np.random.RandomState(seed)
  n = frames * frame + 1
  t = np.arange(n)[None, :, None]
  f0 = rng.uniform(0.01, 0.06, (rows, 1, 1))
  partials = f0 * np.array([1.0, 2.0, 3.0])[None, None]
  amp = rng.uniform(0.2, 0.5, (rows, 1, 3)) / np.array([1.0, 1.5, 2.0])
  decay = np.exp(-t * rng.uniform(0.0, 0.004, (rows, 1, 1)))
  x = np.sum(amp * decay * np.sin(2 * np.pi * partials * t + rng.uniform(0, 6, (rows, 1, 3))), -1)
  x = x + 0.01 * rng.randn(rows, n)
  x = x / np.abs(x).max(1, keepdims=True)
  x = (x / x.std()).astype(np.float32)
  return x[:, :-1].reshape(rows, frames, frame), x[:, -1:]


def samplernn(seed, *, frames=64, frame=4, units=64, rnn="simple"):
  """A SampleRNN-lite (Mehri et al., 2017), in miniature: the frame-level tier, two stacked
  recurrent layers of `units` (`rnn`: 'simple', an Elman RNN, 'gru' or 'lstm') over frames of
  `frame` samples, with the ReLU activation the threads' code gives them (`activation='relu'`:
  the state unbounded), then the sample-level MLP (Dense 32 ReLU, Dense 1): the next sample."""
  _seed(seed)
  RNN = {'gru': L.GRU, 'lstm': L.LSTM, 'simple': L.SimpleRNN}[rnn]
  x = keras.Input((frames, frame))
  h = RNN(units, activation="relu", return_sequences=True)(x)
  h = RNN(units, activation="relu")(h)
  return keras.Model(x, L.Dense(1)(L.Dense(32, activation='relu')(h)), name='samplernn_lite')


def seismograms(seed, *, rows=1536, length=256, sigma=6.0):
  """Three-component local-earthquake records in miniature (an STEAD-like picking set): noise
  (standard deviation 0.1), a P wave (vertical-heavy, 8 to 14 cycles a hundred samples,
  decaying) at a random onset and an S wave (horizontal-heavy, twice the amplitude, lower
  frequency) 30 to 90 samples later, each record scaled to a peak of 1. (records (rows, length,
  3), PhaseNet's targets: Gaussian bumps of width `sigma` at the P and S onsets (rows, length,
  2))."""
  rng = np.random.RandomState(seed)
  t = np.arange(length)[None, :]
  p = rng.randint(20, length - 140, (rows, 1))
  s = p + rng.randint(30, 90, (rows, 1))
  x = 0.1 * rng.randn(rows, length, 3)
  for onset, freq, amp, comp in ((p, rng.uniform(0.08, 0.14, (rows, 1)), 1.0, (1.0, 0.3, 0.3)),
                                 (s, rng.uniform(0.03, 0.06, (rows, 1)), 2.0, (0.4, 1.0, 1.0))):
    dt = t - onset
    wave = amp * np.where(dt >= 0, np.exp(-np.maximum(dt, 0) / 40.0), 0) * np.sin(2 * np.pi *
                                                                                 freq * dt)
    for c in range(3):
      x[..., c] += comp[c] * wave * rng.uniform(0.7, 1.3, (rows, 1))
  x = x / np.abs(x).max((1, 2), keepdims=True)
  y = np.stack([np.exp(-(t - p) ** 2 / (2 * sigma ** 2)), np.exp(-(t - s) ** 2 / (2 * sigma ** 2))],
               -1)
  return x.astype(np.float32), y.astype(np.float32)


def phasenet(seed, *, length=256):
  """A PhaseNet-lite (Zhu and Beroza, 2019), in miniature: a 1-D U-Net over the three components
  (ReLU convolutions of 8, 16 and 32 channels, kernel 7, two stride-2 downsamplings, transposed
  upsamplings, the skips concatenated) and a 1x1 convolution with a sigmoid: the P and S pick
  probabilities at every sample."""
  _seed(seed)
  conv = lambda n, s=1: L.Conv1D(n, 7, strides=s, padding='same', activation='relu')
  x = keras.Input((length, 3))
  e1 = conv(8)(x)
  e2 = conv(16)(conv(16, 2)(e1))
  b = conv(32)(conv(32, 2)(e2))
  d2 = conv(16)(L.Concatenate()([L.Conv1DTranspose(16, 7, 2, padding='same',
                                                   activation='relu')(b), e2]))
  d1 = conv(8)(L.Concatenate()([L.Conv1DTranspose(8, 7, 2, padding='same',
                                                  activation='relu')(d2), e1]))
  return keras.Model(x, L.Conv1D(2, 1, activation='sigmoid')(d1), name='phasenet_lite')


def hourly_load(seed, *, rows=2048, past=168, ahead=24):
  """A utility's hourly system load in miniature (a TaiPower-like set): daily and weekly cycles,
  a slow seasonal swing, weather noise (an AR(1) process) and measurement noise, standardised.
  (the last `past` hours (rows, past, 1), the next `ahead` hours (rows, ahead))."""
  rng = np.random.RandomState(seed)
  n = rows + past + ahead + 1
  h = np.arange(n)
  ar = np.zeros(n)
  e = rng.randn(n) * 0.15
  for i in range(1, n):
    ar[i] = 0.95 * ar[i - 1] + e[i]
  load = (np.sin(2 * np.pi * (h % 24) / 24 - 1.5) + 0.6 * np.sin(4 * np.pi * (h % 24) / 24) -
          0.5 * ((h // 24) % 7 >= 5) + 0.4 * np.sin(2 * np.pi * h / 2000) + ar +
          0.05 * rng.randn(n))
  load = (load - load.mean()) / load.std()
  starts = rng.randint(0, n - past - ahead, rows)
  x = np.stack([load[s:s + past] for s in starts])[..., None].astype(np.float32)
  y = np.stack([load[s + past:s + past + ahead] for s in starts]).astype(np.float32)
  return x, y


def deepenergy(seed, *, past=168, ahead=24):
  """A DeepEnergy-lite (Kuo and Huang, 2018), in miniature: three 1-D ReLU convolutions (16, 32
  and 32 filters of 5, each max-pooled by 2) over the past week of hourly load, flattened, and a
  linear Dense(`ahead`): the next day's load."""
  _seed(seed)
  x = keras.Input((past, 1))
  h = x
  for n in (16, 32, 32):
    h = L.MaxPooling1D(2)(L.Conv1D(n, 5, padding='same', activation='relu')(h))
  return keras.Model(x, L.Dense(ahead)(L.Flatten()(h)), name='deepenergy_lite')


def phase_windows(seed, *, rows=2048, length=200):
  """Windows of three-component records in miniature (the GPD set's classes): noise only (0), a
  P wave at the window's centre (1) or an S wave at the centre (2), each window scaled to a peak
  of 1. (windows (rows, length, 3), class (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 3, rows)
  t = np.arange(length)[None, :] - length // 2
  x = 0.15 * rng.randn(rows, length, 3)
  freq = np.where(y == 1, rng.uniform(0.08, 0.14, rows), rng.uniform(0.03, 0.06, rows))[:, None]
  wave = np.where(t >= 0, np.exp(-np.maximum(t, 0) / 40.0), 0) * np.sin(2 * np.pi * freq * t)
  comp = np.where((y == 1)[:, None], [1.0, 0.3, 0.3], [0.4, 1.0, 1.0]) * (y > 0)[:, None]
  x = x + wave[..., None] * comp[:, None, :] * rng.uniform(0.6, 1.4, (rows, 1, 3))
  x = x / np.abs(x).max((1, 2), keepdims=True)
  return x.astype(np.float32), y.astype(np.int32)


def gpd(seed, *, length=200, init='glorot_uniform'):
  """A GPD-lite (Ross et al.'s generalized phase detection, 2018), in miniature: four 1-D ReLU
  convolutions (16, 16, 32 and 32 filters, kernels 21 to 7, each max-pooled by 2), Dense 64 ReLU
  and Dense(3) with a softmax (noise, P, S). Every kernel drawn from `init`."""
  _seed(seed)
  x = keras.Input((length, 3))
  h = x
  for n, k in ((16, 21), (16, 15), (32, 11), (32, 7)):
    h = L.MaxPooling1D(2)(L.Conv1D(n, k, padding='same', activation='relu',
                                   kernel_initializer=init)(h))
  h = L.Dense(64, activation='relu', kernel_initializer=init)(L.Flatten()(h))
  return keras.Model(x, L.Dense(3, activation='softmax', kernel_initializer=init)(h),
                     name='gpd_lite')


def utterances(seed, *, rows=2048, frames=64, mels=40, speakers=8, min_frames=24):
  """Speaker-labelled utterances as mel power spectrograms in miniature (a VoxCeleb-like set):
  each speaker a spectral envelope of its own (formant-like bumps), each frame the envelope times
  a voiced/unvoiced gain times log-normal noise; utterances of `min_frames` to `frames` frames,
  zero-padded to `frames` (the batch padding of the threads' loaders: exact zeros, as digital
  silence is). (mel power (rows, frames, mels), speaker (rows,))."""
  rng = np.random.RandomState(seed)
  m = np.arange(mels)[None, :]
  centres = rng.uniform(3, mels - 3, (speakers, 3))
  env = sum(np.exp(-(m - centres[:, i:i + 1]) ** 2 / 8.0) for i in range(3)) + 0.05
  y = rng.randint(0, speakers, rows)
  gain = np.exp(rng.randn(rows, frames, 1) * 0.7)
  x = env[y][:, None, :] * gain * np.exp(0.5 * rng.randn(rows, frames, mels))
  lengths = rng.randint(min_frames, frames + 1, rows)
  x = np.where(np.arange(frames)[None, :, None] < lengths[:, None, None], x, 0.0)
  return x.astype(np.float32), y.astype(np.int32)


class LogMel(L.Layer):
  """The log of the mel power, as the threads' front ends take it: `eps` 0, log(x) (digital
  silence: log(0) = -inf); a number: log(x + eps)."""

  def __init__(self, eps=0.0, **kwargs):
    super().__init__(**kwargs)
    self.eps = eps

  def call(self, x):
    return tf.math.log(x + self.eps) if self.eps else tf.math.log(x)


def ecapa_tdnn(seed, *, frames=64, mels=40, speakers=8, eps=0.0):
  """An ECAPA-TDNN-lite (Desplanques, Thienpondt and Demuynck, 2020), in miniature: the log-mel
  front end (`LogMel`, `eps`), a Conv1D of 32 (kernel 5, ReLU, BatchNorm), one SE-Res2-like
  block (a dilated convolution of 32, kernel 3, dilation 2, squeeze-excitation by 8, residual),
  attentive statistics pooling (weighted mean and standard deviation over frames), Dense 32
  (the linear embedding) and Dense(`speakers`): the speaker logits."""
  _seed(seed)
  x = keras.Input((frames, mels))
  h = L.BatchNormalization()(L.Conv1D(32, 5, padding='same', activation='relu')(
      LogMel(eps)(x)))
  r = L.BatchNormalization()(L.Conv1D(32, 3, dilation_rate=2, padding='same',
                                      activation='relu')(h))
  se = L.Dense(32, activation='sigmoid')(L.Dense(8, activation='relu')(
      L.GlobalAveragePooling1D()(r)))
  h = L.Add()([h, L.Multiply()([r, L.Reshape((1, 32))(se)])])
  w = L.Softmax(axis=1)(L.Conv1D(32, 1)(L.Conv1D(16, 1, activation='tanh')(h)))
  mean = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], 1))([h, w])
  std = L.Lambda(lambda t: tf.sqrt(tf.maximum(
      tf.reduce_sum(t[0] * tf.square(t[1]), 1) - tf.square(t[2]), 1e-5)))([w, h, mean])
  e = L.Dense(32)(L.Concatenate()([mean, std]))
  return keras.Model(x, L.Dense(speakers)(e), name='ecapa_tdnn_lite')


def music_clips(seed, *, rows=2048, frames=32, bins=48, genres=6):
  """Music excerpts as log-frequency power spectrograms in decibels in miniature (a GTZAN-like
  genre set, values -80 to 0 dB as librosa's power_to_db gives them, not standardised): each
  genre a register (a fundamental range), a number of harmonics and a rhythm (a beat period);
  notes drawn per clip, their harmonics 12 log2(k) bins above. (dB spectrograms (rows, frames,
  bins), genre (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, genres, rows)
  low = np.array([2, 6, 10, 4, 8, 12])[y]
  harmonics = np.array([1, 2, 3, 4, 5, 6])[y]
  beat = np.array([8, 4, 6, 16, 3, 5])[y]
  f = np.arange(bins)[None, None, :]
  t = np.arange(frames)[None, :, None]
  root = low[:, None, None] + rng.randint(0, 6, (rows, 1, 1))
  spec = np.zeros((rows, frames, bins))
  for k in range(1, 7):
    on = (k <= harmonics)[:, None, None]
    spec += on * np.exp(-(f - root - 12 * np.log2(k)) ** 2 / 2.0) / k
  spec *= 0.3 + (t % beat[:, None, None] == 0)
  spec += 1e-4 * np.exp(rng.randn(rows, frames, bins))
  db = np.clip(10 * np.log10(spec / spec.max((1, 2), keepdims=True) + 1e-8), -80, 0)
  return db.astype(np.float32), y.astype(np.int32)


class DotAttention(L.Layer):
  """Self-attention over the patch tokens written as the threads write it: scores q.k (no
  1/sqrt(d)), weights exp(scores) / sum exp(scores) (`naive`: no max subtracted; else
  tf.nn.softmax), the weighted sum of the values."""

  def __init__(self, dim, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.naive = naive
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):
    scores = tf.matmul(self.q(x), self.k(x), transpose_b=True)
    w = field.naive_softmax(scores) if self.naive else tf.nn.softmax(scores)
    return tf.matmul(w, self.v(x))


class PositionEmbedding(L.Layer):
  """A learned embedding per token position, added."""

  def build(self, shape):
    self.pos = self.add_weight(shape=tuple(shape[1:]), initializer='random_normal')

  def call(self, x):
    return x + self.pos


def ast(seed, *, frames=32, bins=48, genres=6, dim=32, naive=True):
  """An AST-lite (Gong, Chung and Glass's Audio Spectrogram Transformer, 2021), in miniature: 4x4
  patches of the dB spectrogram embedded by a strided Conv2D of `dim`, a learned position
  embedding, one encoder block (`DotAttention`, `naive`, with its residual and LayerNorm, an MLP
  of 64 with its residual and LayerNorm), mean pooling over the tokens and Dense(`genres`) with a
  softmax."""
  _seed(seed)
  x = keras.Input((frames, bins))
  h = L.Conv2D(dim, 4, strides=4)(L.Reshape((frames, bins, 1))(x))
  tokens = (frames // 4) * (bins // 4)
  h = L.Reshape((tokens, dim))(h)
  h = PositionEmbedding()(h)
  h = L.LayerNormalization()(L.Add()([h, DotAttention(dim, naive)(h)]))
  h = L.LayerNormalization()(L.Add()([h, L.Dense(dim)(L.Dense(64, activation='gelu')(h))]))
  return keras.Model(x, L.Dense(genres, activation='softmax')(L.GlobalAveragePooling1D()(h)),
                     name='ast_lite')


def voltage_events(seed, *, rows=2048, cycles=10, per_cycle=64):
  """Power-quality disturbance records in miniature (the IEEE 1159 classes, synthesised as the
  PQD literature does): ten cycles of a 230 V rms (325 V peak) mains waveform in volts, as the
  recorder gives it: normal (0), a sag to 10-90% (1), a swell to 110-180% (2), an interruption
  below 10% (3), harmonics (3rd, 5th, 7th at 5-15%, 4) or an oscillatory transient (5), with
  1% noise. (waveforms (rows, cycles * per_cycle), class (rows,))."""
  rng = np.random.RandomState(seed)
  n = cycles * per_cycle
  t = np.arange(n)[None, :] / per_cycle
  y = rng.randint(0, 6, rows)
  phase = rng.uniform(0, 2 * np.pi, (rows, 1))
  a = np.ones((rows, n))
  start = rng.randint(1, 5, (rows, 1))
  span = (t >= start) & (t < start + rng.randint(2, 5, (rows, 1)))
  a = np.where((y == 1)[:, None] & span, rng.uniform(0.1, 0.9, (rows, 1)), a)
  a = np.where((y == 2)[:, None] & span, rng.uniform(1.1, 1.8, (rows, 1)), a)
  a = np.where((y == 3)[:, None] & span, rng.uniform(0.0, 0.1, (rows, 1)), a)
  v = a * np.sin(2 * np.pi * t + phase)
  harm = sum(rng.uniform(0.05, 0.15, (rows, 1)) * np.sin(2 * np.pi * k * t + k * phase)
             for k in (3, 5, 7))
  v = v + (y == 4)[:, None] * harm
  dt = t - start
  osc = (dt >= 0) * np.exp(-np.maximum(dt, 0) * 8) * np.sin(2 * np.pi * 12 * dt)
  v = v + (y == 5)[:, None] * rng.uniform(0.5, 1.0, (rows, 1)) * osc
  v = v + 0.01 * rng.randn(rows, n)
  return (325.0 * v).astype(np.float32), y.astype(np.int32)


class WindowRms(L.Layer):
  """The rms of each `window` samples, sqrt(mean(v^2)), in the layer's compute dtype (float16
  under mixed_float16, as the threads' feature layers run: 325^2 = 105625 is past float16's
  65504: inf)."""

  def __init__(self, window, **kwargs):
    super().__init__(**kwargs)
    self.window = window

  def call(self, v):
    v = tf.cast(v, self.compute_dtype)
    frames = tf.reshape(v, [tf.shape(v)[0], -1, self.window])
    return tf.sqrt(tf.reduce_mean(tf.square(frames), -1, keepdims=True))


def pqd_dcnn(seed, *, samples=640, window=32, classes=6, rms_dtype=None):
  """A PQD-DCNN-lite (Wang and Chen's deep CNN for power-quality disturbances, 2019), in
  miniature: the half-cycle rms (`WindowRms`, dtype `rms_dtype`: None, the policy's) in per unit
  (/ 230) beside the half-cycle waveform in per unit (/ 325) as channels, three 1-D ReLU
  convolutions (16, 32, 32, kernel 3), global average pooling and Dense(`classes`) with a
  float32 softmax."""
  _seed(seed)
  x = keras.Input((samples,))
  rms = L.Rescaling(1 / 230.0)(WindowRms(window, dtype=rms_dtype)(x))
  wave = L.Rescaling(1 / 325.0)(L.Reshape((samples // window, window))(x))
  h = L.Concatenate()([wave, L.Activation('linear')(rms)])
  for n in (16, 32, 32):
    h = L.Conv1D(n, 3, padding='same', activation='relu')(h)
  z = L.Dense(classes)(L.GlobalAveragePooling1D()(h))
  return keras.Model(x, L.Activation('softmax', dtype='float32')(z), name='pqd_dcnn_lite')


def detection_windows(seed, *, rows=2048, length=200, gaps=0.0):
  """Continuous three-component records cut into windows in miniature (a detection set): half
  the windows hold an event (a P then an S arrival, random onset), half are noise (with, in a
  third of them, a noise burst of the event's band); each window demeaned and scaled to a peak
  of 1. A fraction `gaps` of the windows hold a telemetry gap of 20 to 60 samples filled with
  NaN (ObsPy's merge of a gappy stream: a masked array, NaN once filled with its default).
  (windows (rows, length, 3), event (rows, 1))."""
  rng = np.random.RandomState(seed)
  y = (rng.rand(rows) < 0.5).astype(np.float32)
  t = np.arange(length)[None, :]
  x = 0.2 * rng.randn(rows, length, 3)
  p = rng.randint(10, length - 100, (rows, 1))
  s = p + rng.randint(20, 60, (rows, 1))
  for onset, freq, amp, comp in ((p, 0.11, 1.0, (1.0, 0.3, 0.3)), (s, 0.05, 2.0, (0.4, 1.0, 1.0))):
    dt = t - onset
    wave = amp * np.where(dt >= 0, np.exp(-np.maximum(dt, 0) / 30.0), 0) * np.sin(
        2 * np.pi * freq * dt)
    x += y[:, None, None] * wave[..., None] * np.array(comp)
  burst = (rng.rand(rows) < 0.33) & (y == 0)
  x += burst[:, None, None] * 0.5 * np.sin(2 * np.pi * 0.08 * t)[..., None] * np.exp(
      -(t - p) ** 2 / 200.0)[..., None]
  x = x - x.mean(1, keepdims=True)
  x = x / np.abs(x).max((1, 2), keepdims=True)
  gapped = np.where(rng.rand(rows) < gaps)[0]
  for i in gapped:
    g = rng.randint(0, length - 60)
    x[i, g:g + rng.randint(20, 60)] = np.nan
  return x.astype(np.float32), y[:, None]


def cred(seed, *, length=200):
  """A CRED-lite (Mousavi et al.'s convolutional-recurrent earthquake detector, 2019), in
  miniature: two strided 1-D convolutions (16 and 32 filters, ReLU) with a residual block of two
  convolutions, a third strided convolution of 32, a bidirectional LSTM of 16, and Dense(1) with
  a sigmoid on its last output: the
  probability of an event in the window."""
  _seed(seed)
  x = keras.Input((length, 3))
  h = L.Conv1D(16, 7, strides=2, padding='same', activation='relu')(x)
  h = L.Conv1D(32, 5, strides=2, padding='same', activation='relu')(h)
  r = L.Conv1D(32, 3, padding='same')(L.Conv1D(32, 3, padding='same', activation='relu')(h))
  h = L.Activation('relu')(L.Add()([h, r]))
  h = L.Bidirectional(L.LSTM(16))(L.Conv1D(32, 3, strides=2, padding='same', activation='relu')(h))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='cred_lite')


def household(seed, *, rows=2048, window=128, dropouts=0.0):
  """A house's mains and one appliance's sub-meter in miniature (a UK-DALE-like kettle set, in
  kW): the kettle on for 5 to 20 samples at 2.0-3.0 kW in 60% of the windows, the rest of the
  house a slowly varying base load with 0.05-0.4 kW appliances switching, and meter noise. A
  fraction `dropouts` of the windows had the sub-meter drop out: its readings NaN (the threads'
  missing samples, kept because nothing dropped them). (mains (rows, window, 1), kettle power
  (rows, window))."""
  rng = np.random.RandomState(seed)
  t = np.arange(window)[None, :]
  on = rng.rand(rows, 1) < 0.6
  start = rng.randint(0, window - 20, (rows, 1))
  kettle = on * ((t >= start) & (t < start + rng.randint(5, 21, (rows, 1)))) * rng.uniform(
      2.0, 3.0, (rows, 1))
  base = rng.uniform(0.2, 0.6, (rows, 1)) + 0.05 * np.sin(2 * np.pi * t / rng.uniform(
      60, 200, (rows, 1)))
  others = np.zeros((rows, window))
  for _ in range(3):
    s = rng.randint(-window, window, (rows, 1))
    others += ((t >= s) & (t < s + rng.randint(10, 80, (rows, 1)))) * rng.uniform(
        0.05, 0.4, (rows, 1))
  mains = kettle + base + others + 0.02 * rng.randn(rows, window)
  kettle = kettle.astype(np.float32)
  kettle[rng.rand(rows) < dropouts] = np.nan
  return mains[..., None].astype(np.float32), kettle


def nilm_dae(seed, *, window=128):
  """A NILM-DAE-lite (Kelly and Knottenbelt's denoising autoencoder for energy disaggregation,
  2015), in miniature: a Conv1D of 8 (kernel 4, linear), flattened, Dense 128 ReLU, Dense 32
  ReLU (the code), Dense 128 ReLU and a linear Dense(`window`): the appliance's power over the
  window."""
  _seed(seed)
  x = keras.Input((window, 1))
  h = L.Flatten()(L.Conv1D(8, 4, padding='same')(x))
  h = L.Dense(128, activation='relu')(L.Dense(32, activation='relu')(
      L.Dense(128, activation='relu')(h)))
  return keras.Model(x, L.Dense(window)(h), name='nilm_dae_lite')


def stems(seed, *, rows=1024, frames=32, bins=32):
  """Music mixtures and their vocal stem as magnitude spectrograms in miniature (a MUSDB-like
  set): the accompaniment a few sustained harmonic notes (steady, low), the vocals a gliding
  harmonic line (vibrato, higher, on and off by phrase), mixed by adding magnitudes. (mixture
  (rows, frames, bins), vocal magnitude (rows, frames, bins))."""
  rng = np.random.RandomState(seed)
  f = np.arange(bins)[None, None, :]
  t = np.arange(frames)[None, :, None]
  acc = np.zeros((rows, frames, bins))
  for _ in range(3):
    r = rng.uniform(1, 8, (rows, 1, 1))
    for k in (1, 2, 3):
      acc += np.exp(-(f - r * k) ** 2 / 1.0) / k * rng.uniform(0.3, 1.0, (rows, 1, 1))
  pitch = rng.uniform(6, 14, (rows, 1, 1)) + 1.5 * np.sin(2 * np.pi * t / rng.uniform(
      6, 12, (rows, 1, 1)))
  voiced = (np.sin(2 * np.pi * t / rng.uniform(10, 20, (rows, 1, 1)) + rng.uniform(
      0, 6, (rows, 1, 1))) > -0.3)
  voc = sum(np.exp(-(f - pitch * k) ** 2 / 1.5) / k for k in (1, 2)) * voiced * rng.uniform(
      0.5, 1.5, (rows, 1, 1))
  return (acc + voc).astype(np.float32), voc.astype(np.float32)


class Glitch(field.OneOffFault):
  """`field.OneOffFault` with the element fixed: the first activation of the batch reads NaN at
  the `at`-th training call (a misfiring kernel, once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def open_unmix(seed, *, frames=32, bins=32, glitch_at=None):
  """An Open-Unmix-lite (Stoter et al., 2019), in miniature: the mixture's magnitude through
  Dense 32 with BatchNorm and tanh, a bidirectional LSTM of 16 with its skip, Dense 32 ReLU and
  Dense(`bins`) with a sigmoid: a soft mask, times the mixture: the vocals' magnitude. A
  `Glitch` (`glitch_at`) after the encoder."""
  _seed(seed)
  x = keras.Input((frames, bins))
  h = L.Activation('tanh')(L.BatchNormalization()(L.Dense(32)(x)))
  h = Glitch(glitch_at)(h)
  h = L.Concatenate()([h, L.Bidirectional(L.LSTM(16, return_sequences=True))(h)])
  mask = L.Dense(bins, activation='sigmoid')(L.Dense(32, activation='relu')(h))
  return keras.Model(x, L.Multiply()([mask, x]), name='open_unmix_lite')


def convnetquake(seed, *, length=256, activation='softmax'):
  """A ConvNetQuake-lite (Perol, Gharbi and Denolle, 2018), in miniature: five 1-D convolutions
  of 16 filters (kernel 3, stride 2, ReLU) over the three components, flattened, and Dense(1)
  with `activation`: event or noise."""
  _seed(seed)
  x = keras.Input((length, 3))
  h = x
  for _ in range(5):
    h = L.Conv1D(16, 3, strides=2, padding='same', activation='relu')(h)
  return keras.Model(x, L.Dense(1, activation=activation)(L.Flatten()(h)),
                     name='convnetquake_lite')


# --- The scenarios. -------------------------------------------------------------------------

DOORS = ('trainer', 'fit')


@add('blind47_explode_samplernn_relu_rnn', 'exploding_gradients', 'samplernn_lite', doors=DOORS,
     steps=200, citation='fatchord/WaveRNN#129; bricewalker/Hey-Jetson#7')
def _(seed, cured=False):
  """A SampleRNN-lite's frame-level tier (two stacked Elman RNNs with activation='relu', as
  the threads' code has them) predicting the next sample of standardised tonal audio from the
  last 64 frames of 4 samples, MSE, SGD at 0.3 with momentum 0.9 and no clipping: the unbounded
  ReLU states and their gradients grow through the 64 steps: the loss 0.67 at step 0, the
  running loss past 43.1, non-finite from step 4 on, the weights NaN (the error 0.70
  before, inf after; the constant answer's 0.66). Seed 1: 0.41 at step 0, past 1.27e+06,
  non-finite from step 30 (0.58 before, inf after). fatchord/WaveRNN#129 (a WaveRNN vocoder's
  loss exploded to NaN mid-training); bricewalker/Hey-Jetson#7 (a speech RNN's loss turns NaN and
  TerminateOnNaN stops it: the exploding/vanishing gradients RNNs are plagued by, clip the
  gradients). Cured: clipnorm=0.1 in the same SGD: the loss 0.67 to 0.112, the error 0.70 to
  0.037."""
  x, y = audio_frames(seed)
  opt = keras.optimizers.SGD(0.3, momentum=0.9, clipnorm=0.1 if cured else None)
  return cases.Setup(samplernn(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind47_lr_phasenet_adam_one', 'learning_rate', 'phasenet_lite', doors=DOORS, steps=300,
     citation='PENGLU-WashU/IMC_Denoise#11; OpenNMT/OpenNMT-tf#744')
def _(seed, cured=False):
  """A PhaseNet-lite 1-D U-Net picking P and S arrivals on three-component local-earthquake
  records (Gaussian target bumps at the onsets, binary cross-entropy per sample, PhaseNet's
  loss), Adam at 1.0 (a rate typed for SGD's, as in the threads' configs): the first updates
  throw the network out, the ReLUs die and the sigmoids saturate: the loss 0.71 at step 0, the
  running loss peaking at 1.45e+12 and 9.67e+09 at the end, the picks never better than answering
  no pick anywhere (the error 0.24 before, 0.038 after; the constant answer's 0.033). Seed 1: the
  error 0.23 before, 0.038 after (the constant's 0.033). PENGLU-WashU/IMC_Denoise#11 (the initial
  learning rate was 1, too big: the loss is NaN; set it to 1e-3); OpenNMT/OpenNMT-tf#744 (the
  model diverged: the rate set to 2 where the default is 2.5e-4). Cured: Adam at 1e-3 (PhaseNet's
  rate): the error 0.24 to 0.001."""
  x, y = seismograms(seed)
  opt = keras.optimizers.Adam(1e-3 if cured else 1.0)
  return cases.Setup(phasenet(seed), opt, 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind47_lr_deepenergy_sgd', 'learning_rate', 'deepenergy_lite', doors=DOORS, steps=200,
     citation='tensorflow/tensorflow#38796; ourownstory/neural_prophet#1625')
def _(seed, cured=False):
  """A DeepEnergy-lite CNN forecasting a utility's next-day hourly load from the past week
  (standardised), MSE, SGD at 1.0 with momentum 0.9 (the rate of the threads' SGD runs, left
  untuned when the optimizer was switched): the updates overshoot and grow: the loss 1.06 at
  step 0, non-finite from step 10 on, the weights NaN (the error 1.01 before, inf after; the
  constant answer's 0.95). Seed 1: non-finite from step 7 (0.99 before, inf after).
  tensorflow/tensorflow#38796 (a high learning rate with tf.keras.optimizers.SGD gives a NaN or
  inf loss; lowering it makes it rarer); ourownstory/neural_prophet#1625 (a forecaster with
  optimizer SGD returns NaN metrics and NaN forecasts; set and tune the learning rate). Cured:
  SGD at 0.01 with the same momentum: the loss 1.06 to 0.387, the error 1.01 to 0.23."""
  x, y = hourly_load(seed)
  opt = keras.optimizers.SGD(0.01 if cured else 1.0, momentum=0.9)
  return cases.Setup(deepenergy(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind47_init_gpd_zeros', 'initialisation', 'gpd_lite', doors=DOORS, steps=200,
     citation='longjon/caffe#3; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A GPD-lite CNN classifying three-component windows as noise, P or S, sparse categorical
  cross-entropy, Adam at 1e-3, every kernel initialised to zeros (kernel_initializer='zeros', as
  the threads' hand-built layers start their weights): every hidden activation is relu(0) = 0,
  every kernel's gradient is zero, only the output bias moves: the loss 1.10 at step 0 and
  1.0985 (ln 3) at the end, the model answers the commonest class (the error 0.73
  before, 0.62 after; the constant answer's 0.62). Seed 1: 0.66 before, 0.65 after (the
  constant's 0.65). longjon/caffe#3 (the same constant loss whatever the data: the weights are
  not initialised properly and the network outputs all zeros); wagonhelm/NaNmnist#2 (weights
  initialised as zeros: every neuron computes the same output and gets the same update, deep
  nets need a random initialisation). Cured: glorot_uniform kernels (Keras's default): the loss
  1.11 to 0.0929, the error 0.61 to 0.000."""
  x, y = phase_windows(seed)
  model = gpd(seed, init='glorot_uniform' if cured else 'zeros')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'sparse_categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind47_log_ecapa_logmel_padding', 'division_or_log', 'ecapa_tdnn_lite', doors=DOORS,
     steps=200, citation='csteinmetz1/auraloss#63; JuliaDSP/MFCC.jl#14')
def _(seed, cured=False):
  """An ECAPA-TDNN-lite identifying eight speakers from mel power spectrograms whose
  utterances are zero-padded to 64 frames (the loader's batch padding: digital silence), its
  front end log(mel) with no floor: log(0) = -inf in the padded frames, -inf - -inf is NaN in
  the convolutions and the pooling: the loss NaN from step 0, the weights NaN (the error inf
  before and after: non-finite outputs; the constant answer's 0.84). Seed 1: the same (the
  constant's 0.84). csteinmetz1/auraloss#63 (the epsilon is missing in the
  torch.log of the STFT magnitude: sometimes a NaN gradient); JuliaDSP/MFCC.jl#14 (an all-zero
  waveform gives log(0): -Inf and NaN in the MFCCs; fixed by an epsilon before the log). Cured:
  log(mel + 1e-6): the loss 2.78 to 0.215, the error 0.85 to 0.000."""
  x, y = utterances(seed)
  model = ecapa_tdnn(seed, eps=1e-6 if cured else 0.0)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind47_softmax_ast_naive_attention', 'softmax_overflow', 'ast_lite',
     doors=DOORS, steps=200,
     citation='uTensor/uTensor#175; deeplearning4j/deeplearning4j-examples#730')
def _(seed, cured=False):
  """An AST-lite tagging music excerpts by genre from dB spectrograms (-80 to 0 dB, as
  power_to_db gives them, not standardised), sparse categorical cross-entropy, Adam at 1e-3, its
  self-attention written by hand: scores q.k with no 1/sqrt(d) and exp(scores) / sum
  exp(scores) with no max subtracted: the patch embeddings of -40 dB values give scores in the
  thousands, exp overflows, inf / inf is NaN: the loss NaN from step 0, the weights NaN (the
  error inf before: non-finite outputs, inf after; the constant answer's 0.78). Seed 1: the same
  (the constant's 0.77). uTensor/uTensor#175 (exp() of logits in the hundreds overflows in the
  softmax op: inf, then NaN in the results); deeplearning4j/deeplearning4j-examples#730 (a
  softmax taking exp of the raw input gives NaN when the input is large; subtract each row's
  maximum first). Cured: tf.nn.softmax over the same scores (the max subtracted): the loss
  1.96 to 1.33, the error 0.82 to 0.27."""
  x, y = music_clips(seed)
  model = ast(seed, naive=not cured)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'sparse_categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add("blind47_fp16_pqd_rms_in_volts", "precision", "pqd_dcnn_lite", doors=DOORS, steps=300,
     precision='mixed_float16',
     citation='qubvel-org/segmentation_models.pytorch#463; tracel-ai/burn#4109')
def _(seed, cured=False):
  """A PQD-DCNN-lite classifying power-quality disturbances (sag, swell, interruption,
  harmonics, transient, normal) from ten cycles of mains voltage in volts (325 V peak, as the
  recorder gives it), trained under the mixed_float16 policy, Adam at 3e-3; its half-cycle rms
  feature computed in the policy's compute dtype (float16) as the threads' feature layers run:
  v^2 reaches 105625, past float16's 65504: inf in every record, the rms inf, the logits NaN:
  the loss NaN at every step from step 0, the model never trains (the error inf before and
  after: non-finite outputs; the constant answer's 0.78). Seed 1: the same (the constant's 0.77).
  qubvel-org/segmentation_models.pytorch#463 (under float16 a sum over 262144 ones is inf, past
  6.55e4: a NaN loss); tracel-ai/burn#4109 (fp16 values becoming INF: a sum past the fp16
  maximum of 65504). Cured: the rms layer in float32 (dtype='float32', the threads' remedy for
  one reduction): the loss 1.81 to 1.25, the error 0.71 to 0.55."""
  x, y = voltage_events(seed)
  model = pqd_dcnn(seed, rms_dtype='float32' if cured else None)
  return cases.Setup(model, keras.optimizers.Adam(3e-3), 'sparse_categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind47_input_cred_nan_gaps', 'bad_input', 'cred_lite', doors=DOORS, steps=200,
     citation='geoscience-community-codes/GISMO#32; gzerveas/mvts_transformer#41')
def _(seed, cured=False):
  """A CRED-lite detecting earthquakes in three-component windows cut from continuous
  records, binary cross-entropy, Adam at 1e-3; 5% of the windows hold a telemetry gap of 20 to
  60 samples left as NaN (ObsPy's merge of a gappy stream gives a masked array, NaN once
  filled), so most batches hold one: the loss NaN from step 0, the weights NaN (on clean
  windows the error 0.30 before, inf after; the constant answer's 0.50). Seed 1: the same (0.51
  before; the constant's 0.49). geoscience-community-codes/GISMO#32 (gappy waveform data:
  missing values filled with NaN by default, or with zeros, a number, interpolation);
  gzerveas/mvts_transformer#41 (series with NaN values make the loss NaN: use a mask and a
  filler value instead). Cured: the gaps filled with zeros (merge's fill_value=0): the loss
  0.69 to 0.137, the error 0.30 to 0.023."""
  x, y = detection_windows(seed, gaps=0.05)
  if cured:
    x = np.nan_to_num(x, nan=0.0)
  clean = detection_windows(seed + 100)
  return cases.Setup(cred(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob',
                     eval_data=data.stream(*clean, batch=32, seed=seed))


@add('blind47_input_nilm_dae_submeter_dropouts', 'bad_input', 'nilm_dae_lite', doors=DOORS,
     steps=200, citation='nilmtk/nilmtk-contrib#51; Nixtla/neuralforecast#186')
def _(seed, cured=False):
  """A NILM-DAE-lite disaggregating a kettle's power from a house's mains (kW, 128-sample
  windows), MSE, Adam at 1e-3; the kettle's sub-meter dropped out in 4% of the windows and its
  missing readings were kept as NaN (nothing dropped them), so most batches hold one: the loss
  NaN from step 0, the weights NaN (on clean windows the error 0.38 before, inf after; the
  constant answer's 0.35). Seed 1: the same (0.40 before; the constant's 0.33).
  nilmtk/nilmtk-contrib#51 (seq2point on UK-DALE: the loss never improves from inf);
  Nixtla/neuralforecast#186 (missing values in the target: the loss becomes NaN during training
  and it is hard to see that the data is the cause). Cured: the windows with missing readings
  dropped (DROP_ALL_NANS): the loss 0.40 to 0.131, the error 0.38 to 0.070."""
  x, y = household(seed, dropouts=0.04)
  if cured:
    keep = np.isfinite(y).all(1)
    x, y = x[keep], y[keep]
  clean = household(seed + 100)
  return cases.Setup(nilm_dae(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(*clean, batch=32, seed=seed))


@add('blind47_transient_open_unmix_glitch', 'transient', 'open_unmix_lite', doors=DOORS,
     steps=200, citation='Rikorose/DeepFilterNet#30; PKU-YuanGroup/Open-Sora-Plan#333')
def _(seed, cured=False):
  """An Open-Unmix-lite separating the vocals from music mixtures (magnitude spectrograms),
  MSE, Adam at 3e-3, healthy until one kernel misfires once: at the 90th training-mode call (the
  86th step, after runner's four training-mode evaluation batches; step 85 0-based) one
  activation after the encoder reads NaN, that step's loss and gradients are NaN and, with
  nothing to skip the update, the weights turn NaN: the loss 0.038 at step 0, NaN from step
  85 on (the error 0.038 before, inf after; the constant answer's 0.031). Seed 1: NaN from step
  85 (0.035 before). Rikorose/DeepFilterNet#30 (in some rare circumstances NaNs occur during
  training, cause unknown; resuming from the last checkpoint works);
  PKU-YuanGroup/Open-Sora-Plan#333 (a NaN loss after 20k+ steps: just resume the training).
  Cured: the same run without the misfire: the loss 0.038 to 0.00624, the error 0.038 to 0.002."""
  x, y = stems(seed)
  model = open_unmix(seed, glitch_at=None if cured else 90)
  return cases.Setup(model, keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind47_mismatch_convnetquake_softmax_one_unit', 'loss_output_mismatch',
     'convnetquake_lite', doors=DOORS, steps=200,
     citation='keras-team/keras#126; keras-team/keras#4784')
def _(seed, cured=False):
  """A ConvNetQuake-lite classifying windows as event or noise with Dense(1,
  activation='softmax') and binary cross-entropy, Adam at 1e-3: a softmax over one unit is 1.0
  whatever its input. Keras's cross-entropy reads the logit behind the activation, so the
  training loss falls as if all were well (0.70 at step 0, running mean 0.242 at the end),
  but every prediction is 1.0: every window called an event, the accuracy stuck at the share of
  events (the error 0.49 before, 0.49 after; the constant answer's 0.49). Seed 1: 0.55 before,
  0.55 after (the constant's 0.45). keras-team/keras#126 (a Dense(1) with a softmax activation:
  predict_proba gives all ones); keras-team/keras#4784 (accuracy not changing across epochs: the
  model does not match the loss; targets in [0, 1] want a sigmoid output layer with
  binary_crossentropy). Cured: a sigmoid output: the same loss curve, the error 0.50 to 0.000."""
  x, y = detection_windows(seed, length=256)
  model = convnetquake(seed, activation='sigmoid' if cured else 'softmax')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
