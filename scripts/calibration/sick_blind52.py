"""A fifty-second blind set of sick scenarios (the 'blind52' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind47.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in IT operations and log anomaly detection, speech
synthesis and vocoders, and video action recognition (a DeepLog-lite next-log-key predictor, a
NeuralLog-lite log-sequence classifier, a LogRobust-lite attention Bi-LSTM, a LogAnomaly-lite
count model, a Donut-lite KPI reconstructor, a HiFi-GAN-lite, a Parallel-WaveGAN-lite and a
MelGAN-lite vocoder generator, a TSN-lite, an I3D-lite and a two-stream-lite action recogniser).
Each builder takes `cured`: the same run with the thread's remedy (the registry calls
`build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the sick run shows the reported
symptom (seeds 0 and 1), the cured twin passes runner's "did it train" measure in the same number
of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND52 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND52.add` with split='blind52'."""
  return BLIND52.add(name, expected, arch, split='blind52', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def log_sessions(seed, *, rows=2048, window=32, keys=24, anomalous=0.0):
  """Parsed log-key sessions in miniature (an HDFS-like set of block sessions): each session
  follows the service's workflow (a key's successor fixed, as a block's
  allocate-write-replicate-close events are) with 5% of the keys out of order; an anomalous
  session (a share `anomalous`) has error keys (the top four ids) spliced in. (the key ids
  (rows, window), the next key (rows,), anomalous or not (rows, 1))."""
  rng = np.random.RandomState(seed)
  normal_keys = keys - 4
  succ = rng.permutation(normal_keys)
  seq = np.zeros((rows, window + 1), np.int64)
  seq[:, 0] = rng.randint(0, normal_keys, rows)
  for t in range(1, window + 1):
    nxt = succ[seq[:, t - 1]]
    noise = rng.rand(rows) < 0.05
    seq[:, t] = np.where(noise, rng.randint(0, normal_keys, rows), nxt)
  bad = (rng.rand(rows) < anomalous)
  for i in np.where(bad)[0]:
    where = rng.choice(window, rng.randint(2, 5), replace=False)
    seq[i, where] = rng.randint(normal_keys, keys, len(where))
  return (seq[:, :-1].astype(np.int32), seq[:, -1].astype(np.int32),
          bad.astype(np.float32)[:, None])


def deeplog(seed, *, keys=24, window=32, units=64, activation='relu'):
  """A DeepLog-lite (Du et al., 2017), in miniature: the log keys embedded (16), two stacked
  LSTMs of `units` with `activation` (the threads' code gives them 'relu': the cell output
  unbounded) and a softmax over the keys: the next log key."""
  _seed(seed)
  x = keras.Input((window,), dtype='int32')
  h = L.Embedding(keys, 16)(x)
  h = L.LSTM(units, activation=activation, return_sequences=True)(h)
  h = L.LSTM(units, activation=activation)(h)
  return keras.Model(x, L.Dense(keys, activation='softmax')(h), name='deeplog_lite')


def message_vectors(seed, *, rows=2048, window=16, dim=48, anomalous=0.5):
  """Log sequences as NeuralLog and LogRobust feed them: each log message's semantic vector
  (a frozen BERT-like encoder's, norm about 15, as raw [CLS] vectors are: no normalisation),
  twenty message templates, an anomalous sequence holding error templates. (vectors (rows,
  window, dim), anomalous or not (rows, 1))."""
  rng = np.random.RandomState(seed)
  templates = rng.randn(24, dim) * 15.0 / np.sqrt(dim) + rng.randn(1, dim) * 1.5
  y = (rng.rand(rows) < anomalous)
  ids = rng.randint(0, 20, (rows, window))
  for i in np.where(y)[0]:
    where = rng.choice(window, rng.randint(1, 4), replace=False)
    ids[i, where] = rng.randint(20, 24, len(where))
  x = templates[ids] + 0.3 * rng.randn(rows, window, dim)
  return x.astype(np.float32), y.astype(np.float32)[:, None]


class NaiveSelfAttention(L.Layer):
  """Single-head self-attention written out as the thread's code does it: scores q.k (the
  1/sqrt(d) scaling left out) turned into weights by exp(s) / sum(exp(s)) (`naive`; no max
  subtracted), or by tf.nn.softmax."""

  def __init__(self, dim, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.naive = dim, naive
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):
    scores = tf.matmul(self.q(x), self.k(x), transpose_b=True)
    if self.naive:
      e = tf.exp(scores)
      weights = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    else:
      weights = tf.nn.softmax(scores, axis=-1)
    return tf.matmul(weights, self.v(x))


def neurallog(seed, *, window=16, dim=48, naive=True):
  """A NeuralLog-lite (Le and Zhang, 2021), in miniature: the messages' semantic vectors through
  one Transformer encoder block (the self-attention written by hand, `NaiveSelfAttention`, a
  residual projection, layer norm, a ReLU feed-forward of 64), mean-pooled, and a sigmoid:
  anomalous or not."""
  _seed(seed)
  x = keras.Input((window, dim))
  h = L.Dense(32)(x)
  h = L.LayerNormalization()(h + NaiveSelfAttention(32, naive=naive)(x))
  h = L.LayerNormalization()(h + L.Dense(32)(L.Dense(64, activation='relu')(h)))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(L.GlobalAveragePooling1D()(h)),
                     name='neurallog_lite')


def logrobust(seed, *, window=16, dim=48, out_units=2, activation='softmax'):
  """A LogRobust-lite (Zhang et al., 2019), in miniature: the messages' semantic vectors through
  a bidirectional LSTM of 24, additive attention over time (a tanh score per step, softmax over
  the steps, the weighted sum) and Dense(`out_units`, `activation`): normal or anomalous."""
  _seed(seed)
  x = keras.Input((window, dim))
  h = L.Bidirectional(L.LSTM(24, return_sequences=True))(x)
  score = L.Dense(1)(L.Dense(32, activation='tanh')(h))
  weights = L.Softmax(axis=1)(score)
  pooled = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], axis=1))([h, weights])
  return keras.Model(x, L.Dense(out_units, activation=activation)(pooled), name='logrobust_lite')


def kpi_windows(seed, *, rows=2048, window=64, missing=0.0):
  """A web service's KPI (page views a minute) in miniature, as Donut's sets: a daily cycle
  (period 48 here), a weekly swing, noise, standardised, cut into sliding windows; a share
  `missing` of the windows hold a run of 3 to 12 missing points left as NaN (the collector's
  gaps, as the CSV's blank cells read). (windows (rows, window), the same (rows, window))."""
  rng = np.random.RandomState(seed)
  n = rows + window + 1
  t = np.arange(n)
  kpi = (np.sin(2 * np.pi * t / 48) + 0.4 * np.sin(2 * np.pi * t / 336 + 1.0) +
         0.3 * np.sin(4 * np.pi * t / 48 + 0.5) + 0.1 * rng.randn(n))
  kpi = (kpi - kpi.mean()) / kpi.std()
  starts = rng.randint(0, n - window, rows)
  x = np.stack([kpi[s:s + window] for s in starts]).astype(np.float32)
  for i in np.where(rng.rand(rows) < missing)[0]:
    a = rng.randint(0, window - 12)
    x[i, a:a + rng.randint(3, 13)] = np.nan
  return x, x.copy()


def donut(seed, *, window=64):
  """A Donut-lite (Xu et al., 2018), in miniature, its sampling left out: an encoder (Dense 64
  and 32, ReLU) to an 8-d code and a decoder (Dense 32 and 64, ReLU, a linear Dense(`window`)):
  the window's reconstruction, whose error scores anomalies."""
  _seed(seed)
  x = keras.Input((window,))
  h = L.Dense(8)(L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(x)))
  h = L.Dense(64, activation='relu')(L.Dense(32, activation='relu')(h))
  return keras.Model(x, L.Dense(window)(h), name='donut_lite')


def voiced_speech(seed, *, rows=1536, frames=16, hop=32, silence=0.0):
  """Voiced speech in miniature at a low rate, frame-locked so that the waveform is a function
  of its spectrum: each frame of `hop` samples a fundamental of 1 to 5 cycles a frame with its
  second harmonic, the loudness a slow envelope; a share `silence` of the clips end in a pause
  (digital silence, zeros, from frame 10 on: the end of an utterance). (log-magnitude
  spectrogram frames, the mel-like conditioning (rows, frames, hop // 2 + 1), the waveform
  (rows, frames * hop))."""
  rng = np.random.RandomState(seed)
  n = np.arange(hop)[None, None, :]
  f0 = rng.randint(1, 6, (rows, 1, 1)) + np.zeros((1, frames, 1), np.int64)
  change = rng.rand(rows, frames, 1) < 0.15
  f0 = np.where(change, rng.randint(1, 6, (rows, frames, 1)), f0)
  env = 0.3 + 0.7 * np.abs(np.sin(np.linspace(0, np.pi, frames)[None, :, None] *
                                   rng.uniform(0.5, 2.0, (rows, 1, 1)) + rng.uniform(0, 3, (rows,
                                                                                           1, 1))))
  h2 = rng.uniform(0.2, 0.5, (rows, 1, 1))
  wave = env * (np.sin(2 * np.pi * f0 * n / hop) + h2 * np.sin(4 * np.pi * f0 * n / hop))
  quiet = rng.rand(rows) < silence
  wave[quiet, 10:] = 0.0
  wave = wave / 1.2
  mag = np.abs(np.fft.rfft(wave, axis=-1))
  mel = np.log(np.maximum(mag, 1e-5))
  return mel.astype(np.float32), wave.reshape(rows, frames * hop).astype(np.float32)


def vocoder(seed, name, *, frames=16, bins=17, hop=32, channels=32, glitch_at=None):
  """A GAN vocoder's generator in miniature (HiFi-GAN-, Parallel-WaveGAN- and MelGAN-like): the
  conditioning frames through a Conv1D(`channels`, 7), two transposed-convolution upsamplings
  by 4 and 8 (LeakyReLU 0.1), each followed by a residual block of two dilated convolutions
  (dilations 1 and 3, kernel 3) and a Conv1D(1, 7) with tanh: the waveform. A `Glitch` after
  the first upsampling (`glitch_at`)."""
  _seed(seed)
  act = lambda t: L.LeakyReLU(0.1)(t)
  x = keras.Input((frames, bins))
  h = L.Conv1D(channels, 7, padding='same')(x)
  for i, up in enumerate((4, 8)):
    h = L.Conv1DTranspose(channels // (i + 1), 2 * up, strides=up, padding='same')(act(h))
    if i == 0 and glitch_at is not None:
      h = Glitch(glitch_at)(h)
    for d in (1, 3):
      h = h + L.Conv1D(channels // (i + 1), 3, padding='same', dilation_rate=d)(act(h))
  out = L.Conv1D(1, 7, padding='same', activation='tanh')(act(h))
  return keras.Model(x, L.Reshape((frames * hop,))(out), name=name)


class Glitch(field.OneOffFault):
  """`field.OneOffFault` with the element fixed: the first activation of the batch reads NaN at
  the `at`-th training call (a misfiring kernel, once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def stft_log_loss(eps=None):
  """Parallel WaveGAN's loss in miniature: the L1 of the waveform plus the L1 of the
  log-magnitude STFT (frame 64, hop 16) of output and target, the magnitude sqrt(re^2 + im^2)
  and its log written out: with `eps` None, as the thread's code has it, no floor under either
  (a silent frame is log(0)); else the magnitude clamped at `eps` first."""

  def loss(y, p):
    y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)

    def mag(w):
      s = tf.signal.stft(w, 64, 16, pad_end=False)
      m2 = tf.square(tf.math.real(s)) + tf.square(tf.math.imag(s))
      return tf.sqrt(m2) if eps is None else tf.sqrt(tf.maximum(m2, eps ** 2))

    spec = tf.reduce_mean(tf.abs(tf.math.log(mag(y)) - tf.math.log(mag(p))))
    return tf.reduce_mean(tf.abs(y - p)) + 0.1 * spec

  return loss


def motion_clips(seed, *, rows=1536, frames=8, size=16, classes=4):
  """Action clips in miniature (a moving-square set in the spirit of UCF's moving-object
  classes): a bright 4 x 4 square on textured noise moving one pixel a frame left, right, up or
  down (the class), in [0, 1] (frames decoded and scaled). (clips (rows, frames, size, size, 1),
  class (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  moves = np.array([(0, -1), (0, 1), (-1, 0), (1, 0)])
  x = 0.25 * rng.rand(rows, frames, size, size, 1)
  for i in range(rows):
    dy, dx = moves[y[i]]
    start = [rng.randint(0, size - 3 - frames + 1) + (frames - 1) * (d < 0) if d else
             rng.randint(0, size - 3) for d in (dy, dx)]
    for f in range(frames):
      r, c = start[0] + dy * f, start[1] + dx * f
      x[i, f, r:r + 4, c:c + 4, 0] = 0.75 + 0.25 * rng.rand()
  return x.astype(np.float32), y.astype(np.int32)


def tsn(seed, *, segments=4, size=16, classes=4):
  """A TSN-lite (Wang et al., 2016), in miniature: the clip cut into `segments` snippets of two
  consecutive frames (the RGB-difference modality: the pair as channels), one shared 2-D CNN
  (Conv2D 16 and 32, ReLU, max-pooled, global-average-pooled, Dense(`classes`)) on every
  snippet, the segmental consensus an average of the snippets' scores, then the softmax."""
  _seed(seed)
  x = keras.Input((segments, size, size, 2))
  cnn = keras.Sequential([
      keras.Input((size, size, 2)), L.Conv2D(16, 3, padding='same', activation='relu'),
      L.MaxPooling2D(), L.Conv2D(32, 3, padding='same', activation='relu'),
      L.GlobalAveragePooling2D(), L.Dense(classes)])
  scores = L.TimeDistributed(cnn)(x)
  return keras.Model(x, L.Softmax()(L.GlobalAveragePooling1D()(scores)), name='tsn_lite')


def tsn_snippets(x, segments=4):
  """Clips (rows, 8, s, s, 1) to TSN's snippets: frame pairs (2k, 2k+1) as two channels."""
  rows, frames, s, _, _ = x.shape
  return x.reshape(rows, segments, frames // segments, s, s).transpose(0, 1, 3, 4, 2).copy()


def i3d(seed, *, frames=8, size=16, classes=4, init='glorot_uniform'):
  """An I3D-lite (Carreira and Zisserman, 2017), in miniature: three inflated 3x3x3
  convolutions (16, 32, 32, ReLU, the first two max-pooled 1x2x2 then 2x2x2), global average
  pooling and Dense(`classes`) with a softmax; every kernel drawn from `init`."""
  _seed(seed)
  x = keras.Input((frames, size, size, 1))
  h = L.Conv3D(16, 3, padding='same', activation='relu', kernel_initializer=init)(x)
  h = L.MaxPooling3D((1, 2, 2))(h)
  h = L.Conv3D(32, 3, padding='same', activation='relu', kernel_initializer=init)(h)
  h = L.MaxPooling3D(2)(h)
  h = L.Conv3D(32, 3, padding='same', activation='relu', kernel_initializer=init)(h)
  out = L.Dense(classes, activation='softmax', kernel_initializer=init)(
      L.GlobalAveragePooling3D()(h))
  return keras.Model(x, out, name='i3d_lite')


def event_counts(seed, *, rows=1536, minutes=1440, keys=24, anomalous=0.5):
  """A day of per-minute log event counts in miniature (LogAnomaly's quantitative pattern): each
  of the `keys` templates a Poisson count a minute (rates 2 to 20), an anomalous day (a share
  `anomalous`) holding a burst of the four error templates (rates up 40 to 80 a minute for 60 to
  240 minutes). (counts (rows, minutes, keys), anomalous or not (rows, 1))."""
  rng = np.random.RandomState(seed)
  rates = rng.uniform(20, 200, (1, 1, keys)) * np.ones((rows, 1, 1))
  rates[..., -4:] = 5.0
  y = rng.rand(rows) < anomalous
  lam = np.repeat(rates, minutes, axis=1)
  for i in np.where(y)[0]:
    a, n = rng.randint(0, minutes - 240), rng.randint(60, 241)
    lam[i, a:a + n, -4:] += rng.uniform(40, 80)
  return rng.poisson(lam).astype(np.float32), y.astype(np.float32)[:, None]


class SumOverTime(L.Layer):
  """The total over the minutes, in the layer's compute dtype (float16 under mixed precision: a
  day's total above 65504 is inf), as the thread's pooling sums."""

  def call(self, x):
    return tf.reduce_sum(x, axis=1)


def loganomaly(seed, *, minutes=1440, keys=24, pool='sum'):
  """A LogAnomaly-lite (Meng et al., 2019), its quantitative branch in miniature: each minute's
  template counts through Dense 32 and 32 (ReLU), pooled over the day (`pool`: 'sum',
  `SumOverTime`, or 'mean'), Dense 16 ReLU and a float32 Dense(1) with a sigmoid: an anomalous
  day or not."""
  _seed(seed)
  x = keras.Input((minutes, keys))
  h = L.Dense(32, activation='relu')(L.Dense(32, activation='relu')(x))
  h = SumOverTime()(h) if pool == 'sum' else L.GlobalAveragePooling1D()(h)
  h = L.Dense(16, activation='relu')(h)
  return keras.Model(x, L.Dense(1, activation='sigmoid', dtype='float32')(h),
                     name='loganomaly_lite')


def flow_clips(seed, *, rows=1536, frames=8, size=16, broken=0.0):
  """The motion clips with a two-stream net's inputs: the middle RGB frame (here one channel)
  and the stacked optical flow between consecutive frames (x and y displacement a pixel, 2 x 7
  channels), computed by a brightness-constancy (Lucas-Kanade-like) estimate whose
  division by the local gradient energy is left unguarded: in a share `broken` of the clips (a
  frozen, duplicated frame: zero temporal and spatial change over a patch) the flow reads inf or
  NaN. (((rows, size, size, 1), (rows, size, size, 14)), class (rows,))."""
  x, y = motion_clips(seed, rows=rows, frames=frames, size=size)
  rng = np.random.RandomState(seed + 7)
  moves = np.array([(0, -1), (0, 1), (-1, 0), (1, 0)], np.float32)
  fl = np.zeros((rows, size, size, frames - 1, 2), np.float32)
  square = x[:, :-1, :, :, 0] > 0.5
  v = moves[y][:, None, None, None, :] * square.transpose(0, 2, 3, 1)[..., None]
  fl = v + 0.05 * rng.randn(*v.shape).astype(np.float32)
  fl = fl.reshape(rows, size, size, 2 * (frames - 1))
  for i in np.where(rng.rand(rows) < broken)[0]:
    r, c = rng.randint(0, size - 4, 2)
    fl[i, r:r + 4, c:c + 4, rng.randint(0, 2 * (frames - 1))] = rng.choice([np.inf, np.nan])
  return (x[:, frames // 2], fl), y


def two_stream(seed, *, size=16, classes=4, channels=14):
  """A two-stream-lite (Simonyan and Zisserman, 2014), in miniature: a spatial stream on the
  middle frame and a temporal stream on the stacked flow (each Conv2D 16 and 32, ReLU,
  max-pooled, global-average-pooled, Dense(`classes`)), fused late by averaging the two
  softmaxes."""
  _seed(seed)

  def stream(inp):
    h = L.Conv2D(16, 3, padding='same', activation='relu')(inp)
    h = L.Conv2D(32, 3, padding='same', activation='relu')(L.MaxPooling2D()(h))
    return L.Dense(classes, activation='softmax')(L.GlobalAveragePooling2D()(h))

  rgb, flow = keras.Input((size, size, 1)), keras.Input((size, size, channels))
  return keras.Model([rgb, flow], L.Average()([stream(rgb), stream(flow)]), name='two_stream_lite')


# --- The scenarios. -------------------------------------------------------------------------

DOORS = ('trainer', 'fit')


@add('blind52_explode_deeplog_relu_lstm', 'exploding_gradients', 'deeplog_lite', doors=DOORS,
     steps=200, citation='keras-team/keras#2194; AlexanderVNikitin/tsgm#59')
def _(seed, cured=False):
  """A DeepLog-lite predicting the next log key of HDFS-like block sessions (windows of 64
  keys), two stacked LSTMs with activation='relu' (as the threads' code has them), sparse
  categorical cross-entropy, Adam at 1e-2 and no clipping: the unbounded cell outputs and their
  gradients grow over the 64 steps: the loss 3.18 at step 0, the running loss past 4.07e+06, the
  model never better than the commonest key (the error 0.98 before, 0.91 after; the constant
  answer's 0.91). Seed 1: the running loss peaking at 63.4 (0.96 before, 0.79 after; the
  constant's 0.91). keras-team/keras#2194 (an LSTM with ReLU activations: the loss NaN, it does
  not learn); AlexanderVNikitin/tsgm#59 (a Conv+LSTM with activation='relu' in the LSTM: the loss
  explodes suddenly to very high numbers, a recurrent layer wants a saturating non-linearity).
  Cured: clipnorm=1.0 in the same Adam: the error 0.98 to 0.086."""
  x, y, _ = log_sessions(seed, window=64)
  opt = keras.optimizers.Adam(1e-2, clipnorm=1.0 if cured else None)
  return cases.Setup(deeplog(seed, window=64), opt, 'sparse_categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind52_lr_hifigan_adam', 'learning_rate', 'hifigan_lite', doors=DOORS, steps=300,
     citation='jik876/hifi-gan#143; RVC-Project/Retrieval-based-Voice-Conversion-WebUI#798')
def _(seed, cured=False):
  """A HiFi-GAN-lite generator (transposed-convolution upsampling with dilated residual
  blocks, a tanh output) turning frame-locked voiced-speech spectrogram frames into the waveform,
  L1 loss on the waveform, Adam at 0.5 (a rate typed 2500 times HiFi-GAN's 2e-4): the first
  updates throw the weights out and the tanh saturates: the loss 0.86 at step 0 and 0.9997 at
  the end, the output a square wave of +-1 (the error 0.98 before, 1.24 after; the constant
  answer's 0.18). Seed 1: 0.98 before, 1.23 after (the constant's 0.18). jik876/hifi-gan#143
  (a learning loss explosion on LJSpeech, the generator loss to 6.5e+07 then NaN);
  RVC-Project/Retrieval-based-Voice-Conversion-WebUI#798 (the learning rate raised from 1e-4 to
  5e-3: the model outputs no sound, too high a rate breaks it). Cured: Adam at 2e-3: the loss
  0.86 to 0.135, the error 0.98 to 0.017."""
  x, y = voiced_speech(seed)
  return cases.Setup(vocoder(seed, 'hifigan_lite'), keras.optimizers.Adam(2e-3 if cured else 0.5),
                     'mae', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind52_lr_tsn_sgd', 'learning_rate', 'tsn_lite', doors=DOORS, steps=200,
     citation='yjxiong/action-detection#74; roytseng-tw/Detectron.pytorch#19')
def _(seed, cured=False):
  """A TSN-lite (a shared 2-D CNN on four RGB-difference snippets, average consensus) recognising
  the direction of motion in small clips, sparse categorical cross-entropy, SGD at 5.0 with
  momentum 0.9 (a rate linearly scaled for many GPUs and a large batch, kept for one): the
  updates overshoot, the ReLUs die and the consensus answers one class: the loss 1.39 at step 0
  and 2.07 at the end (the error 0.72 before, 0.72 after; the constant answer's 0.69). Seed 1:
  0.81 before, 0.71 after (the constant's 0.71). yjxiong/action-detection#74 (training a TSN-based
  net on optical flow: the loss becomes NaN after several iterations; lr 1e-3 NaN, 1e-4 fine);
  roytseng-tw/Detectron.pytorch#19 (NaN losses when the learning rate is scaled for more GPUs).
  Cured: SGD at 0.05 with the same momentum: the error 0.72 to 0.34."""
  x, y = motion_clips(seed)
  opt = keras.optimizers.SGD(0.05 if cured else 5.0, momentum=0.9)
  return cases.Setup(tsn(seed), opt, 'sparse_categorical_crossentropy',
                     data.stream(tsn_snippets(x), y, batch=32, seed=seed), 'classes')


@add('blind52_init_i3d_zeros', 'initialisation', 'i3d_lite', doors=DOORS, steps=200,
     citation='BVLC/caffe#2937; ksw0306/FloWaveNet#9')
def _(seed, cured=False):
  """An I3D-lite (three 3x3x3 convolutions, global pooling, softmax) recognising the direction
  of motion in small clips, sparse categorical cross-entropy, Adam at 1e-3, every kernel
  initialised to zeros (as hand-built TF variables start, tf.zeros): every activation is relu(0)
  = 0 and every kernel's gradient zero, only the output bias moves: the loss 1.386 (ln 4) from
  start to end, the commonest class answered (the error 0.72 before, 0.69 after; the constant
  answer's 0.69). Seed 1: 0.74 before, 0.71 after (the constant's 0.71). BVLC/caffe#2937 (the CNN
  seems to learn nothing at all, its convolution outputs all zeros); ksw0306/FloWaveNet#9
  (weights and bias initialised to exactly zeros: is the output always zeros?). Cured:
  glorot_uniform kernels (Keras's default): the loss 1.39 to 0.29, the error 0.84 to 0."""
  x, y = motion_clips(seed)
  init = 'glorot_uniform' if cured else 'zeros'
  return cases.Setup(i3d(seed, init=init), keras.optimizers.Adam(1e-3),
                     'sparse_categorical_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'classes')


@add('blind52_log_parallel_wavegan_stft_silence', 'division_or_log', 'parallel_wavegan_lite',
     doors=DOORS, steps=300, citation='kan-bayashi/ParallelWaveGAN#247; kan-bayashi/ParallelWaveGAN#184')
def _(seed, cured=False):
  """A Parallel-WaveGAN-lite generator turning voiced-speech spectrogram frames into the
  waveform, its loss the L1 of the waveform plus the L1 of the log-magnitude STFT written out
  with no floor (sqrt(re^2 + im^2), then log), Adam at 2e-3; 30% of the training clips end in
  digital silence (the utterance's trailing pause kept): log(0) = -inf on every silent frame:
  the loss inf from step 0 to the end (the waveform itself still fits: on clean clips the error
  0.99 before, 0.054 after; the constant answer's 0.18). Seed 1: inf throughout (0.99 before,
  0.038 after). kan-bayashi/ParallelWaveGAN#247 (the STFT loss's log spectrogram needs a cutoff,
  1e-7 there); kan-bayashi/ParallelWaveGAN#184 (the loss value became NaN in the middle of the
  training, the generated audio blank). Cured: the squared magnitude clamped at (1e-7)^2 before
  the sqrt and the log: the loss 1.31 to 0.447, the error 0.99 to 0.054."""
  x, y = voiced_speech(seed, silence=0.3)
  clean = voiced_speech(seed + 100)
  return cases.Setup(vocoder(seed, 'parallel_wavegan_lite'), keras.optimizers.Adam(2e-3),
                     stft_log_loss(1e-7 if cured else None),
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(*clean, batch=32, seed=seed))


@add('blind52_softmax_neurallog_naive_attention', 'softmax_overflow', 'neurallog_lite',
     doors=DOORS, steps=200, citation='uTensor/uTensor#175; mila-iqia/blocks#727')
def _(seed, cured=False):
  """A NeuralLog-lite (one Transformer encoder block over raw BERT-like log-message vectors,
  norm about 15) classifying log sequences as anomalous, binary cross-entropy, Adam at 1e-3; its
  self-attention written by hand, q.k with no 1/sqrt(d) scaling turned into weights by exp(s) /
  sum(exp(s)) with no max subtracted: the scores pass 88.7, exp overflows to inf and inf / inf
  is NaN: the outputs NaN before training, the loss NaN from step 0, the weights NaN (the error
  inf before and after; the constant answer's 0.45). Seed 1: the same (the constant's 0.49).
  uTensor/uTensor#175 (exp() in a softmax overflows on large logits: inf, then NaN);
  mila-iqia/blocks#727 (attention energies large enough to make exp overflow: NaN all the way,
  stabilise as the regular softmax does). Cured: tf.nn.softmax (the max subtracted): the loss
  0.84 to 0.191, the error 0.47 to 0."""
  x, y = message_vectors(seed)
  return cases.Setup(neurallog(seed, naive=not cured), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind52_fp16_loganomaly_sum_counts', 'precision', 'loganomaly_lite', doors=DOORS,
     steps=200, precision='mixed_float16', citation='idiap/fast-transformers#32; TensorSpeech/TensorFlowTTS#647')
def _(seed, cured=False):
  """A LogAnomaly-lite's quantitative branch (per-minute Dense layers over a day of raw log
  template counts, pooled over the day) telling anomalous days, binary cross-entropy, Adam at
  1e-3, mixed_float16 (the head float32); the pooling a sum over the 1440 minutes in the layer's
  float16 (a busy service: tens to hundreds of events a minute a template): the day's totals pass
  65504 and read inf: the outputs NaN before training, the loss NaN from step 0 (the error inf
  before and after; the constant answer's 0.46). Seed 1: the same. idiap/fast-transformers#32
  (under mixed precision a NaN trickles in: summing across the sequence-length axis overflows
  float16's range); TensorSpeech/TensorFlowTTS#647 (with the generator in mixed precision the
  loss becomes NaN, in float32 it is finite). Cured: the mean over the minutes
  (GlobalAveragePooling1D): the loss 14.0 to 1.09, the error 0.54 to 0.070."""
  x, y = event_counts(seed)
  return cases.Setup(loganomaly(seed, pool='mean' if cured else 'sum'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind52_input_donut_kpi_missing', 'bad_input', 'donut_lite', doors=DOORS, steps=200,
     citation='KDD-OpenSource/DeepADoTS#43; KDD-OpenSource/DeepADoTS#75')
def _(seed, cured=False):
  """A Donut-lite reconstructing sliding windows of a web service's standardised KPI, MSE,
  Adam at 1e-3; 5% of the windows hold a run of missing points left as NaN (the collector's gaps,
  blank cells in the CSV), so most batches hold one: the loss NaN from step 0, the weights NaN (on
  clean windows the error 1.05 before, inf after; the constant answer's 1.00). Seed 1: the same
  (1.07 before; the constant's 0.97). KDD-OpenSource/DeepADoTS#43 (training Donut raises "Tensor
  had NaN values" in a gradient); KDD-OpenSource/DeepADoTS#75 (adapt Donut to missing data).
  Cured: the missing points filled with zeros (Donut's own treatment): the loss 1.02 to 0.244,
  the error 1.05 to 0.036."""
  x, y = kpi_windows(seed, missing=0.05)
  if cured:
    x, y = np.nan_to_num(x, nan=0.0), np.nan_to_num(y, nan=0.0)
  clean = kpi_windows(seed + 100)
  return cases.Setup(donut(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(*clean, batch=32, seed=seed))


@add('blind52_input_two_stream_broken_flow', 'bad_input', 'two_stream_lite', doors=DOORS,
     steps=200, citation='trillhause/deeps#1; haofeixu/gmflow#27')
def _(seed, cured=False):
  """A two-stream-lite (a spatial stream on the middle frame, a temporal one on 7 stacked
  optical-flow fields, the softmaxes averaged) recognising the direction of motion, sparse
  categorical cross-entropy, Adam at 1e-3; the flow estimator's division by the local gradient
  energy unguarded, so in 4% of the clips (a frozen, duplicated frame) a patch of a flow field
  reads inf or NaN: the weights turn non-finite within the first steps and the model never
  answers (seed 0: the running loss stuck at 1.386, the outputs non-finite; on clean clips the
  error 0.73 before, inf after; the constant answer's 0.72). Seed 1: the loss NaN from step 1
  (0.64 before, inf after). trillhause/deeps#1 (the OpenCV flow images come out different,
  sometimes black: NaN loss after a while); haofeixu/gmflow#27 (the flow data may contain NaN, such
  samples skipped). Cured: the non-finite flow values zeroed: the loss 1.39 to 0.61, the error
  0.73 to 0."""
  (rgb, fl), y = flow_clips(seed, broken=0.04)
  if cured:
    fl = np.nan_to_num(fl, nan=0.0, posinf=0.0, neginf=0.0)
  clean = flow_clips(seed + 100)
  return cases.Setup(two_stream(seed), keras.optimizers.Adam(1e-3),
                     'sparse_categorical_crossentropy',
                     data.stream((rgb, fl), y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(*clean, batch=32, seed=seed))


@add('blind52_transient_melgan_glitch', 'transient', 'melgan_lite', doors=DOORS, steps=200,
     citation='marcoppasini/musika#22; TensorSpeech/TensorFlowTTS#125')
def _(seed, cured=False):
  """A MelGAN-lite generator turning voiced-speech spectrogram frames into the waveform, L1,
  Adam at 2e-3, healthy until one kernel misfires once: at the 110th training-mode call (the
  106th step of fit, after runner's four training-mode evaluation batches; step 105 0-based) one
  activation after the first upsampling reads NaN, that step's loss and gradients are NaN and,
  with nothing to skip the update, the weights turn NaN: the loss 0.86 at step 0, NaN from step
  105 on (the error 0.98 before, inf after; the constant answer's 0.18). Seed 1: NaN from step 105
  (0.98 before). marcoppasini/musika#22 (after 18 epochs some losses hit NaN: it happens
  sometimes when training GANs, restart from the last healthy checkpoint);
  TensorSpeech/TensorFlowTTS#125 (everything becomes NaN at 53k steps). Cured: the same run
  without the misfire: the loss 0.86 to 0.152, the error 0.98 to 0.019."""
  x, y = voiced_speech(seed)
  model = vocoder(seed, 'melgan_lite', glitch_at=None if cured else 110)
  return cases.Setup(model, keras.optimizers.Adam(2e-3), 'mae',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind52_mismatch_logrobust_softmax_mse', 'loss_output_mismatch', 'logrobust_lite',
     doors=DOORS, steps=200, citation='keras-team/keras#4784; keras-team/keras#13006')
def _(seed, cured=False):
  """A LogRobust-lite (an attention Bi-LSTM over log-message vectors) classifying log
  sequences as normal or anomalous with Dense(2, activation='softmax') but loss='mse' on the 0/1
  labels (shape (n, 1)): the labels broadcast against both probabilities, pulling both towards
  the label, and with the two summing to one the best the loss can do is 0.5 and 0.5 whatever
  the sequence: the loss 0.262 at step 0, 0.2505 at the end, the model never better than the
  commonest class (the error 0.47 before, 0.47 after; the constant answer's 0.45). Seed 1: 0.45
  before, 0.57 after (the constant's 0.49). keras-team/keras#4784 (accuracy not changing across
  epochs: the model does not match the loss function); keras-team/keras#13006 (the accuracy
  always converges to 0.5 until the labels' mode and the output match). Cured: sparse
  categorical cross-entropy: the loss 0.79 to 0.157, the error 0.47 to 0."""
  x, y = message_vectors(seed)
  loss = 'sparse_categorical_crossentropy' if cured else 'mse'
  return cases.Setup(logrobust(seed), keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'classes')
