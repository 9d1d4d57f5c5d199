"""A twenty-seventh blind set of sick scenarios (the 'blind27' split), written without reading
the doctor, its policies, forensics or notes, or the other sick files (sick_blind26.py read for
its format only): each is the set-up and symptom of public user reports (cited in its
docstring) on an architecture no other registry entry uses (a peephole-LSTM-lite, a
ZFNet-lite, a minGRU-lite, a PeleeNet-lite, a multi-task DeepBind-lite, a SpinalNet-lite, a
dilated-ConvNet-lite, a DeepNPTS-lite, an involution-net-lite and a DanQ-lite). Each builder
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

BLIND27 = cases.Registry()
LR_GRAD, CLIP_GRAD, LR_SGD, LR_ADAM, LR_LOG = 20.0, 0.005, 0.1, 1.0, 1e-3
DIGIT_SCALE = 255.0
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND27.add` with split='blind27'."""
  return BLIND27.add(name, expected, arch, split='blind27', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def grammar_text(seed, *, rows=2048, context=16, vocab=16):
  """Next-character prediction in miniature: a stream from a Markov chain over `vocab`
  symbols in which each symbol is followed by its usual successor 80% of the time and by one
  of two others otherwise; each row `context` symbols (the input) and the next (the label).
  (ids (rows, context), next id)."""
  rng = np.random.RandomState(seed)
  succ = np.stack([rng.permutation(vocab), rng.randint(0, vocab, vocab),
                   rng.randint(0, vocab, vocab)], -1)
  text = [rng.randint(vocab)]
  while len(text) < rows + context + 1:
    u = rng.rand()
    text.append(succ[text[-1], 0 if u < 0.8 else (1 if u < 0.9 else 2)])
  text = np.asarray(text)
  starts = rng.randint(0, len(text) - context - 1, rows)
  x = np.stack([text[s:s + context] for s in starts])
  return x.astype(np.int32), text[starts + context].astype(np.int32)


class PeepholeCell(L.Layer):
  """An LSTM cell with peephole connections (Gers & Schmidhuber, 2000; the cell of Graves's
  2013 sequence generator): the input and forget gates see the previous cell state, the output
  gate the new one, through diagonal peephole weights."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = [units, units]
    self.output_size = units

  def build(self, shape):
    d, u = shape[-1], self.units
    self.wx = self.add_weight(shape=(d, 4 * u), initializer='glorot_uniform')
    self.wh = self.add_weight(shape=(u, 4 * u), initializer='orthogonal')
    self.b = self.add_weight(shape=(4 * u,), initializer='zeros')
    self.p = self.add_weight(shape=(3, u), initializer='zeros')

  def call(self, x, states):
    h, c = states
    z = tf.matmul(x, self.wx) + tf.matmul(h, self.wh) + self.b
    i, f, o, g = tf.split(z, 4, axis=-1)
    i = tf.sigmoid(i + self.p[0] * c)
    f = tf.sigmoid(f + self.p[1] * c + 1.0)
    c = f * c + i * tf.tanh(g)
    o = tf.sigmoid(o + self.p[2] * c)
    h = o * tf.tanh(c)
    return h, [h, c]


def peephole_lstm_lite(seed, *, context=16, vocab=16, units=128):
  """A peephole-LSTM-lite character model: an embedding of 16, two stacked `PeepholeCell`
  layers of `units`, Dense(`vocab`): the next symbol's logits."""
  _seed(seed)
  x = keras.Input((context,), dtype='int32')
  h = L.RNN(PeepholeCell(units), return_sequences=True)(L.Embedding(vocab, 16)(x))
  h = L.RNN(PeepholeCell(units))(h)
  return keras.Model(x, L.Dense(vocab)(h), name='peephole_lstm_lite')


def peleenet_lite(seed, *, size=16, classes=10, init='glorot_uniform'):
  """A PeleeNet-lite (Wang et al., 2018): a stem block (a 3x3 convolution of 16, a branch of
  1x1 (8) and 3x3 (16) convolutions beside the stem's own output, both 2x2 max pooled,
  concatenated and fused by a 1x1 of 16), three two-way dense layers (one branch 1x1 then 3x3,
  the other 1x1 then two 3x3, 8 channels each, concatenated to the input), a 1x1 transition of
  32 and 2x2 average pooling, global average pooling, Dense(`classes`): the logits. Conv, BN,
  ReLU throughout; every kernel from `init`."""
  _seed(seed)
  kw = dict(kernel_initializer=init)
  x = keras.Input((size, size, 1))

  def cbr(t, n, k):
    return L.ReLU()(L.BatchNormalization()(L.Conv2D(n, k, padding='same', **kw)(t)))

  h = cbr(x, 16, 3)
  a = cbr(cbr(h, 8, 1), 16, 3)
  h = cbr(L.Concatenate()([L.MaxPooling2D()(a), L.MaxPooling2D()(h)]), 16, 1)
  for _ in range(3):
    b1 = cbr(cbr(h, 8, 1), 8, 3)
    b2 = cbr(cbr(cbr(h, 8, 1), 8, 3), 8, 3)
    h = L.Concatenate()([h, b1, b2])
  h = L.AveragePooling2D(2)(cbr(h, 32, 1))
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(x, L.Dense(classes, **kw)(h), name='peleenet_lite')


def dilated_convnet_lite(seed, *, size=16, classes=10, dtype='float32'):
  """A dilated-ConvNet-lite (Yu & Koltun's context module as a classifier): 3x3 convolutions of
  32 with dilation rates 1, 2, 4 and 1 (ReLU), 2x2 max pooling, Dropout 0.25, flattened,
  Dense(64, ReLU), Dense(`classes`, softmax). Every layer in `dtype` (the threads'
  float16 run, weights and optimizer state included), the output cast to float32."""
  _seed(seed)
  x = keras.Input((size, size, 1), dtype=dtype)
  h = x
  for r in (1, 2, 4, 1):
    h = L.Conv2D(32, 3, padding='same', dilation_rate=r, activation='relu', dtype=dtype)(h)
  h = L.Dropout(0.25, dtype=dtype)(L.MaxPooling2D(dtype=dtype)(h))
  h = L.Dense(64, activation='relu', dtype=dtype)(L.Flatten(dtype=dtype)(h))
  out = L.Dense(classes, activation='softmax', dtype=dtype)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out),
                     name='dilated_convnet_lite')


def gappy_load(seed, *, rows=1024, window=48, gaps=True, fill=False):
  """Hourly sensor load in miniature: a daily cycle (period 24) times a random level plus a
  slow trend and noise; each row `window` past values and the next value. `gaps`: about 3% of
  the readings missing (NaN), as raw exports have them; `fill`: the gaps forward-filled (the
  threads' remedy). (past (rows, window, 1), next (rows, 1))."""
  rng = np.random.RandomState(seed)
  n = window + 1
  t = np.arange(n)[None] + rng.randint(0, 24, (rows, 1))
  level = rng.uniform(0.5, 1.5, (rows, 1))
  s = level * (1 + 0.5 * np.sin(2 * np.pi * t / 24)) + 0.01 * t * rng.randn(rows, 1)
  s = (s + 0.05 * rng.randn(rows, n)).astype(np.float32)
  past, nxt = s[:, :window].copy(), s[:, window:]
  if gaps:
    past[rng.rand(rows, window) < 0.03] = np.nan
    if fill:
      for i in range(rows):
        row = past[i]
        for j in range(window):
          if np.isnan(row[j]):
            row[j] = row[j - 1] if j else np.nanmean(row)
  return past[..., None], nxt


def deepnpts_lite(seed, *, window=48):
  """A DeepNPTS-lite (Rangapuram et al., 2023, a non-parametric forecaster): an MLP (two
  Dense(64, ReLU), BN after the first) reads the window and outputs a softmax weight over its
  past values; the forecast is the weighted sum of those values."""
  _seed(seed)
  x = keras.Input((window, 1))
  past = L.Flatten()(x)
  h = L.BatchNormalization()(L.Dense(64, activation='relu')(past))
  h = L.Dense(64, activation='relu')(h)
  w = L.Dense(window, activation='softmax')(h)
  out = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], -1, keepdims=True))([w, past])
  return keras.Model(x, out, name='deepnpts_lite')


class Involution(L.Layer):
  """Involution (Li et al., 2021): a KxK kernel generated per pixel from the pixel's features
  (1x1 reduce, BN, ReLU, 1x1 to K*K*groups), shared across the channels of each group, applied
  to the pixel's neighbourhood."""

  def __init__(self, channels, k=3, groups=4, reduction=2, **kwargs):
    super().__init__(**kwargs)
    self.c, self.k, self.g = channels, k, groups
    self.reduce = L.Conv2D(channels // reduction, 1)
    self.bn = L.BatchNormalization()
    self.span = L.Conv2D(k * k * groups, 1)

  def call(self, x, training=False):
    b, h, w = tf.shape(x)[0], tf.shape(x)[1], tf.shape(x)[2]
    kern = self.span(tf.nn.relu(self.bn(self.reduce(x), training=training)))
    kern = tf.reshape(kern, [b, h, w, self.k * self.k, self.g, 1])
    patches = tf.image.extract_patches(x, [1, self.k, self.k, 1], [1, 1, 1, 1], [1, 1, 1, 1],
                                       'SAME')
    patches = tf.reshape(patches, [b, h, w, self.k * self.k, self.g, self.c // self.g])
    return tf.reshape(tf.reduce_sum(kern * patches, 3), [b, h, w, self.c])


class NaNOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel or buffer that
  misfires once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def involution_lite(seed, *, size=16, classes=10, fault=None):
  """An involution-net-lite (the RedNet idea in miniature): a 3x3 stem of 32 (BN, ReLU), two
  residual involution blocks (`Involution`, BN, ReLU, added to the input) with 2x2 max pooling
  after each, a `NaNOnce` (at its `fault`-th training call; None: never), global average
  pooling, Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding='same')(x)))
  for _ in range(2):
    t = L.ReLU()(L.BatchNormalization()(Involution(32)(h)))
    h = L.MaxPooling2D()(L.Add()([h, t]))
  h = L.GlobalAveragePooling2D()(NaNOnce(fault)(h))
  return keras.Model(x, L.Dense(classes)(h), name='involution_lite')


def zfnet_lite(seed, *, size=16, classes=10):
  """A ZFNet-lite (Zeiler & Fergus, 2013, without its local response normalisation): a 7x7
  convolution of 32 and 2x2 max pooling, a 5x5 of 64 and 2x2 max pooling, three 3x3
  convolutions (64, 64, 48) and 2x2 max pooling, two Dense(128) with Dropout 0.5,
  Dense(`classes`): the logits. ReLU throughout, no normalisation."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.MaxPooling2D()(L.Conv2D(32, 7, padding='same', activation='relu')(x))
  h = L.MaxPooling2D()(L.Conv2D(64, 5, padding='same', activation='relu')(h))
  for n in (64, 64, 48):
    h = L.Conv2D(n, 3, padding='same', activation='relu')(h)
  h = L.Flatten()(L.MaxPooling2D()(h))
  for _ in range(2):
    h = L.Dropout(0.5)(L.Dense(128, activation='relu')(h))
  return keras.Model(x, L.Dense(classes)(h), name='zfnet_lite')


class MinGRUCell(L.Layer):
  """A minGRU cell (Feng et al., 2024, "Were RNNs all we needed?"): the update gate and the
  candidate read the input only, z = sigmoid(W_z x), h = (1 - z) h + z (W_h x)."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = units
    self.output_size = units

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[-1], 2 * self.units), initializer='glorot_uniform')
    self.b = self.add_weight(shape=(2 * self.units,), initializer='zeros')

  def call(self, x, states):
    h = states[0] if isinstance(states, (list, tuple)) else states
    z, cand = tf.split(tf.matmul(x, self.w) + self.b, 2, axis=-1)
    z = tf.sigmoid(z)
    h = (1.0 - z) * h + z * cand
    return h, [h]


def mingru_lite(seed, *, context=16, vocab=16, units=128):
  """A minGRU-lite character model: an embedding of 32, two stacked `MinGRUCell` layers of
  `units` (the first returning its sequence), Dense(64, ReLU), Dense(`vocab`): the next
  symbol's logits."""
  _seed(seed)
  x = keras.Input((context,), dtype='int32')
  h = L.RNN(MinGRUCell(units), return_sequences=True)(L.Embedding(vocab, 32)(x))
  h = L.RNN(MinGRUCell(units))(h)
  h = L.Dense(64, activation='relu')(h)
  return keras.Model(x, L.Dense(vocab)(h), name='mingru_lite')


def motif_dna(seed, *, rows=2048, length=80, motif='TGACGTCA'):
  """Transcription-factor binding in miniature: random DNA of `length` bases, one-hot (A, C,
  G, T); half the rows carry `motif` (the CRE site) at a random place, the label 1 there and
  0 elsewhere. (one-hot (rows, length, 4), label (rows, 1) float)."""
  rng = np.random.RandomState(seed)
  seq = rng.randint(0, 4, (rows, length))
  y = rng.randint(0, 2, rows)
  code = np.array(['ACGT'.index(c) for c in motif])
  for i in np.flatnonzero(y):
    at = rng.randint(0, length - len(code))
    seq[i, at:at + len(code)] = code
  return np.eye(4, dtype=np.float32)[seq], y[:, None].astype(np.float32)


def deepbind_lite(seed, *, length=80, cells=4):
  """A multi-task DeepBind-lite (Alipanahi et al., 2015): a 1-D convolution of 16 motif
  detectors of width 12 over the one-hot sequence (ReLU), global max and average pooling,
  Dense(32, ReLU), Dense(`cells`, softmax): the share of the reads in each cell type."""
  _seed(seed)
  x = keras.Input((length, 4))
  h = L.Conv1D(16, 12, activation='relu')(x)
  h = L.Concatenate()([L.GlobalMaxPooling1D()(h), L.GlobalAveragePooling1D()(h)])
  h = L.Dense(32, activation='relu')(h)
  return keras.Model(x, L.Dense(cells, activation='softmax')(h), name='deepbind_lite')


MOTIFS = ('TGACGTCA', 'CACGTGAC', 'GGAATTCC', 'TTGCGCAA')


def motif_profiles(seed, *, rows=2048, length=80):
  """Binding profiles across cell types in miniature: random DNA of `length` bases, one-hot,
  with one or two of four motifs (one per cell type) planted; each cell type's read count
  Poisson with mean 0.2 + 6 x (its motif present); the label the counts' shares (a discrete
  distribution; many shares exactly 0, as in count data; uniform where no read fell).
  (one-hot (rows, length, 4), shares (rows, 4))."""
  rng = np.random.RandomState(seed)
  seq = rng.randint(0, 4, (rows, length))
  present = np.zeros((rows, len(MOTIFS)))
  for i in range(rows):
    for k, m in enumerate(rng.choice(len(MOTIFS), rng.randint(1, 3), replace=False)):
      code = np.array(['ACGT'.index(c) for c in MOTIFS[m]])
      at = k * (length // 2) + rng.randint(0, length // 2 - len(code))
      seq[i, at:at + len(code)] = code
      present[i, m] = 1
  counts = rng.poisson(0.2 + 6.0 * present).astype(np.float32)
  total = counts.sum(-1, keepdims=True)
  shares = np.where(total > 0, counts / np.maximum(total, 1), 1.0 / len(MOTIFS))
  return np.eye(4, dtype=np.float32)[seq], shares.astype(np.float32)


def handwritten_kl(y, p):
  """The threads' Kullback-Leibler divergence written out, sum(y log(y / p)), its mean over the
  batch; no guard for y = 0 (0 x log 0 = 0 x -inf = NaN)."""
  y = tf.cast(y, p.dtype)
  return tf.reduce_mean(tf.reduce_sum(y * tf.math.log(y / p), axis=-1))


class NaiveSoftmax(L.Layer):
  """The threads' softmax written out, exp(z) / sum(exp(z)), with no max subtracted."""

  def call(self, z):
    e = tf.exp(z)
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def spinalnet_lite(seed, *, size=16, classes=10, naive=True):
  """A SpinalNet-lite (Kabir et al., 2020): the flattened image split in two halves; four
  spinal Dense(32, ReLU) layers, each reading one half (alternating) and the previous spinal
  layer's output; their outputs concatenated, Dense(`classes`), a softmax: `NaiveSoftmax` if
  `naive`, Keras's otherwise."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  flat = L.Flatten()(x)
  half = size * size // 2
  halves = [flat[:, :half], flat[:, half:]]
  outs, prev = [], None
  for i in range(4):
    t = halves[i % 2] if prev is None else L.Concatenate()([halves[i % 2], prev])
    prev = L.Dense(32, activation='relu')(t)
    outs.append(prev)
  z = L.Dense(classes)(L.Concatenate()(outs))
  out = NaiveSoftmax()(z) if naive else L.Softmax()(z)
  return keras.Model(x, out, name='spinalnet_lite')


def danq_lite(seed, *, length=80, head='sigmoid'):
  """A DanQ-lite (Quang & Xie, 2016): a 1-D convolution of 32 motif detectors of width 12
  (ReLU), max pooling of 4, Dropout 0.2, a bidirectional LSTM of 16, Dropout 0.5, Dense(32,
  ReLU), Dense(1, `head`)."""
  _seed(seed)
  x = keras.Input((length, 4))
  h = L.Dropout(0.2)(L.MaxPooling1D(4)(L.Conv1D(32, 12, activation='relu')(x)))
  h = L.Dropout(0.5)(L.Bidirectional(L.LSTM(16))(h))
  h = L.Dense(32, activation='relu')(h)
  return keras.Model(x, L.Dense(1, activation=head)(h), name='danq_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind27_grad_peephole_lstm_no_clip', 'exploding_gradients', 'peephole_lstm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#5127; keras-team/keras#510')
def _(seed, cured=False):
  """A peephole-LSTM-lite (two stacked peephole LSTM layers of 128 over a symbol
  embedding, the next symbol's logits) trained as a character model on a stream from a sparse
  Markov grammar, SGD at 20 with momentum 0.9 and no gradient clipping (the word-language-model
  recipe's rate with its clipping left out): the gradients blow up and throw the weights: the
  loss Keras reports (its running mean) 2.77 at step 0, 409 at step 10, 1.98e3 at step 149, no
  NaN, every symbol predicted the same (the error 0.92 before, 0.875 after; the constant
  answer's 0.875). Seed 1: 2.77, 373, 1.57e3 (the error 0.95 before, 0.93 after; the constant's
  0.91). keras-team/keras#5127 ('why do the loss equal nan when i don't use clipnorm?': the
  gradients get very large and change the weights a lot); keras-team/keras#510 (NaN loss without
  clipnorm; setting clipnorm fixed it). Cured: the same rate with clipnorm=0.005: the loss 2.77
  to 1.47, the error 0.92 to 0.21."""
  x, y = grammar_text(seed)
  return cases.Setup(peephole_lstm_lite(seed),
                     keras.optimizers.SGD(LR_GRAD, momentum=0.9,
                                          clipnorm=CLIP_GRAD if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind27_init_peleenet_zeros', 'initialisation', 'peleenet_lite', doors=('trainer', 'fit'),
     steps=150, citation='Week 1, Programming Assignment initialization, Exercise 1 - '
     'initialize_parameters_zeros (https://community.deeplearning.ai/t/121049); '
     'https://datascience.stackexchange.com/questions/19170')
def _(seed, cured=False):
  """A PeleeNet-lite (a stem block, three two-way dense layers, a transition; Conv BN
  ReLU throughout) classifying the digits (16x16 grey), SGD at 0.01 with momentum 0.9, every
  kernel initialised with zeros as in the threads: every activation is zero, so every kernel's
  gradient is zero and only the last bias moves: the loss Keras reports stays at 2.30 from step
  0 to step 149, no NaN, the same answer for every input (the error 0.93 before and after; the
  constant answer's 0.86). Seed 1: the same (0.88 before, 0.89 after; the constant's 0.875).
  "Week 1, Programming Assignment initialization, Exercise 1 - initialize_parameters_zeros"
  (community.deeplearning.ai: with zero weights the model predicts the same for every input and
  no weight is adjusted); datascience.stackexchange.com/questions/19170 (why not set all initial
  weights to 0: every neuron computes the same output and gets the same update). Cured:
  he_normal kernels: the loss 2.37 to 1.87, the error 0.93 to 0.32 in training mode."""
  return cases.Setup(peleenet_lite(seed, init='he_normal' if cured else 'zeros'),
                     keras.optimizers.SGD(0.01, momentum=0.9), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind27_fp16_dilated_convnet_adam', 'precision', 'dilated_convnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#4032; tensorflow/tensorflow#38457')
def _(seed, cured=False):
  """A dilated-ConvNet-lite (3x3 convolutions of 32 with dilations 1, 2, 4, 1, max
  pooling, dropout, Dense(64), a softmax) classifying the digits (16x16 grey), Adam at 1e-3 with
  Keras's default epsilon 1e-7, every layer and the optimizer state in float16 (the threads'
  float16 run, as set_floatx('float16') makes it): the loss Keras reports 2.31 at step 0, NaN
  from step 1, the weights NaN (the error 0.96 before, inf after; the constant answer's 0.86).
  Seed 1: the same, NaN from step 1. keras-team/keras#4032 (setting floatx to float16 alone
  breaks the mnist CNN example: the loss collapses and the accuracy stays at 0.0987);
  tensorflow/tensorflow#38457 (NaN loss with a float16 Dense model; float32 is fine). Cured:
  the same run in float32: the loss 2.31 to 0.46, the error 0.95 to 0.008."""
  return cases.Setup(dilated_convnet_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), SCE(),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind27_input_deepnpts_missing_readings', 'bad_input', 'deepnpts_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Nixtla/neuralforecast#186; circleAhn/TESLA-tf#1')
def _(seed, cured=False):
  """A DeepNPTS-lite (an MLP reading a 48-step window, a softmax weight over the
  past values, the forecast their weighted sum) forecasting the next reading of an hourly load
  series with a daily cycle, MSE, Adam at 1e-3, about 3% of the readings missing and left as NaN
  as the raw export has them: the loss NaN from step 0, the weights NaN (the error 0.19 before,
  inf after; the constant answer's 0.60). Seed 1: the same (the constant's 0.52).
  Nixtla/neuralforecast#186 ('silent bug, training with NaNs values': the loss becomes nan
  during training and it is hard to see that the data is the problem); circleAhn/TESLA-tf#1
  (every loss NaN; missing values in the dataset; the preprocessed data solved it). Cured: the
  gaps forward-filled: the loss 0.23 to 0.04, the error 0.19 to 0.009 in training mode. The
  measure reads the gap-free series (eval_data) for both runs."""
  x, y = gappy_load(seed, fill=cured)
  clean, yc = gappy_load(seed, gaps=False)
  return cases.Setup(deepnpts_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind27_transient_involution_glitch', 'transient', 'involution_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='yxlijun/DSFD.pytorch#17; Rikorose/DeepFilterNet#30')
def _(seed, cured=False):
  """An involution-net-lite (a stem, two residual involution blocks whose 3x3
  kernels are generated per pixel, max pooling) classifying the digits (16x16 grey), Adam at
  1e-3, training normally (the loss 4.75 at step 0, 4.06 at step 10, Keras's running mean) when
  one element of the pooled features reads NaN once (`NaNOnce`: its 90th training call; step
  85 in a plain `fit` after the measure's training-mode passes; a kernel or buffer that misfires
  once, not the data, the model or the settings): the loss NaN from step 85, the weights NaN
  (the error 0.89 before, inf after; the constant answer's 0.86). Seed 1: the same step.
  yxlijun/DSFD.pytorch#17 (NaN after some iterations with the settings unchanged: 'it's easy to
  get nan, start another train'); Rikorose/DeepFilterNet#30 (NaN in rare circumstances after a
  few epochs; resuming from the previous checkpoint helps). Cured: the same run without the
  fault: the loss 4.75 to 2.02, the error 0.90 to 0.37 in training mode."""
  return cases.Setup(involution_lite(seed, fault=None if cured else 90),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind27_lr_zfnet_sgd', 'learning_rate', 'zfnet_lite', doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#8799; keras-team/keras#18919')
def _(seed, cured=False):
  """A ZFNet-lite (7x7 and 5x5 convolutions with max pooling, three 3x3
  convolutions, two Dense(128) with dropout; ReLU, no normalisation) classifying the digits
  (16x16 grey), SGD at 0.1 with momentum 0.9, a rate too large for a net without normalisation:
  the first updates kill the ReLUs and the net collapses to one answer: the loss Keras reports
  (its running mean) 2.30 at step 0, 2.31 at step 10, 2.32 at step 149, no NaN, no training (the
  error 0.89 before, 0.93 after; the constant answer's 0.86). Seed 1: 2.32, 2.31, 2.32 (the
  error 0.87 before, 0.88 after; the constant's 0.875). keras-team/keras#8799 (a CNN trained
  with SGD and momentum 0.9: the loss high and exactly the same each epoch, every prediction the
  same constant; first guess, the learning rate is too high); keras-team/keras#18919 (with SGD
  the loss is NaN, with other optimizers normal). Cured: SGD at 0.01: the loss 2.30 to 2.23,
  the error 0.89 to 0.51."""
  return cases.Setup(zfnet_lite(seed), keras.optimizers.SGD(0.01 if cured else LR_SGD,
                                                            momentum=0.9),
                     SCE(from_logits=True), data.digits_stream(seed, size=16, rgb=False),
                     'classes')


@add('blind27_lr_mingru_adam', 'learning_rate', 'mingru_lite', doors=('trainer', 'fit'),
     steps=150, citation='rajveermalviya/language-modeling#3; OpenNMT/OpenNMT-py#805')
def _(seed, cured=False):
  """A minGRU-lite (two stacked minGRU layers of 128 over a symbol embedding,
  Dense(64, ReLU), the next symbol's logits) trained as a character model on a stream from a
  sparse Markov grammar, Adam at 1.0 (SGD's customary rate left in place for Adam, as in the
  threads): the loss Keras reports (its running mean) 2.77 at step 0, 4.5e3 at step 1, 7.5e5 at
  step 10, 5.5e4 at step 149, no NaN, no training (the error 0.96 before, 0.93 after; the
  constant answer's 0.875). Seed 1: 2.77, 3.8e3, 3.9e5, 3.0e4 (the error 0.98 before, 0.97
  after; the constant's 0.91). rajveermalviya/language-modeling#3 (a language model with Adam
  at a learning rate of 1.0: the loss does not go down over many epochs; Adam's default 0.001
  trains much better); OpenNMT/OpenNMT-py#805 (Adam with the default rate of 1 meant for SGD:
  the perplexity stays high, the accuracy erratic; set it to 0.001). Cured: Adam at 1e-3: the
  loss 2.77 to 1.91, the error 0.96 to 0.27."""
  x, y = grammar_text(seed)
  return cases.Setup(mingru_lite(seed), keras.optimizers.Adam(1e-3 if cured else LR_ADAM),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind27_log_deepbind_handwritten_kl', 'division_or_log', 'deepbind_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#2473; Lightning-AI/torchmetrics#1029')
def _(seed, cured=False):
  """A multi-task DeepBind-lite (a 1-D convolution of 16 motif detectors over one-hot
  DNA, max and average pooling, Dense(32), a softmax over four cell types) predicting how a
  sequence's reads share out across the cell types (a discrete distribution from counts, many
  shares exactly 0), Adam at 1e-3, the Kullback-Leibler divergence written out as
  sum(y log(y / p)) as in the threads: every zero share gives 0 x log 0 = 0 x -inf = NaN: the
  loss NaN from step 0, the weights NaN (the error 0.105 before, inf after; the constant
  answer's 0.102). Seed 1: the same (0.112 before; the constant's 0.108).
  keras-team/keras#2473 (a custom Keras objective p log(p / q) for targets that are discrete
  distributions from many observations); Lightning-AI/torchmetrics#1029 ('KL-Divergence gives
  NaN on 0-probabilities': zero p_i should contribute nothing). Cured: Keras's KLDivergence,
  which clips both to [1e-7, 1]: the loss 0.80 at step 0, 0.80 at step 149 (its running mean),
  the error 0.105 to 0.068."""
  x, y = motif_profiles(seed)
  return cases.Setup(deepbind_lite(seed), keras.optimizers.Adam(LR_LOG),
                     keras.losses.KLDivergence() if cured else handwritten_kl,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind27_exp_spinalnet_naive_softmax', 'softmax_overflow', 'spinalnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#10142; daviddao/spatial-transformer-tensorflow#1')
def _(seed, cured=False):
  """A SpinalNet-lite (the flattened image split in two halves, four spinal Dense(32)
  layers each reading a half and the previous one's output, their outputs concatenated, ten
  logits) classifying the digits (16x16 grey) fed as raw 0-255 pixel values (no division by
  255, as many MNIST reports do), Adam at 1e-3, the softmax written out as
  exp(z) / sum(exp(z)) as the threads' own: the logits pass 88.7, exp overflows to inf and
  inf / inf = NaN: the outputs NaN before training and the loss NaN from step 0, the weights NaN
  (the error inf before and after; the constant answer's 0.86). Seed 1: the same (the
  constant's 0.875). tensorflow/tensorflow#10142 (a softmax computed by exponentiating
  directly overflows when x is too big; a loss = NaN); daviddao/spatial-transformer-tensorflow#1
  ('got nan loss' with a hand-written softmax in the classifier; the fix: tf's built-in
  softmax). Cured: Keras's Softmax (the maximum subtracted): the loss 256 to 16 (its running
  mean), the error 0.90 to 0.047."""
  return cases.Setup(spinalnet_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3), SCE(),
                     data.digits_stream(seed, size=16, rgb=False, scale=DIGIT_SCALE),
                     'classes')


@add('blind27_mismatch_danq_sigmoid_categorical', 'loss_output_mismatch', 'danq_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#14729; keras-team/keras#4784')
def _(seed, cured=False):
  """A DanQ-lite (a 1-D convolution of 32 motif detectors, max pooling, a
  bidirectional LSTM of 16, Dense(32)) predicting whether a DNA sequence carries a binding site,
  Adam at 1e-3, the head Dense(1, sigmoid) under categorical_crossentropy as in the threads:
  the categorical loss normalises its one output to 1.0, so the loss is 0 for every input and
  no gradient flows: the loss Keras reports 0 from step 0 to step 149, no NaN, no training (the
  error 0.49 before, 0.51 after; the constant answer's 0.49). Seed 1: the same (0.50 before,
  0.41 after; the constant's 0.41). keras-team/keras#14729 (Dense(1, sigmoid) compiled with
  categorical_crossentropy for a binary task: the accuracy too low and stuck);
  keras-team/keras#4784 (the accuracy does not change across epochs: the model does not match
  its loss; for 0/1 targets use a sigmoid with binary_crossentropy). Cured:
  binary_crossentropy: the loss 0.70 to 0.68, the error 0.49 to 0.16."""
  x, y = motif_dna(seed)
  return cases.Setup(danq_lite(seed), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
