"""A forty-ninth blind set of sick scenarios (the 'blind49' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind46.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in OCR and handwriting, insurance and credit
tabular models, and click-through in ads (a Graves-handwriting-lite pen-offset predictor, an
ONN-lite click model, a RealMLP-lite credit scorer, a CANN-lite claim-frequency model, a
SATRN-lite character recogniser, a DANets-lite credit scorer, an FmFM-lite click model, a
branching-and-merging CNN lite digit classifier, an IFM-lite click model, a LocalGLMnet-lite
claim model and a WaveMix-lite character recogniser). Each builder takes `cured`: the same run
with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with
plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the
cured twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND49 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND49.add` with split='blind49'."""
  return BLIND49.add(name, expected, arch, split='blind49', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def pen_strokes(seed, *, rows=2048, window=100, ahead=1):
  """Online handwriting in miniature (an IAM-OnDB-like pen trace): each line of "writing" a
  sum of three loops (letter strokes as rotating circles of random radius and speed) drifting
  right at its own speed, as the tablet gives it: the pen's position (x, y) along the line and
  its offset (dx, dy) per time step, each standardised. (the last `window` steps (rows, window,
  4), the next offset (rows, 2))."""
  rng = np.random.RandomState(seed)
  n = window + ahead
  t = np.arange(n)[None, :]
  dx = np.zeros((rows, n))
  dy = np.zeros((rows, n))
  for _ in range(3):
    r = rng.uniform(0.5, 2.0, (rows, 1))
    w = rng.uniform(0.2, 0.8, (rows, 1))
    ph = rng.uniform(0, 2 * np.pi, (rows, 1))
    dx += r * w * np.cos(w * t + ph)
    dy += r * w * np.sin(w * t + ph)
  dx += rng.uniform(0.1, 0.5, (rows, 1)) + 0.05 * rng.randn(rows, n)
  dy += 0.05 * rng.randn(rows, n)
  pos = np.cumsum(np.stack([dx, dy], -1), 1)
  seq = np.concatenate([pos, np.stack([dx, dy], -1)], -1)
  seq = (seq - seq.mean((0, 1))) / seq.std((0, 1))
  return seq[:, :window].astype(np.float32), seq[:, n - 1, 2:].astype(np.float32)


def graves_handwriting(seed, *, window=100, units=32):
  """A Graves-handwriting-lite (Graves, 2013, "Generating sequences with recurrent neural
  networks", the handwriting prediction network), in miniature: two stacked LSTMs of `units`,
  the cells with activation='relu' (as the threads' ports write them), the last state to a
  linear Dense(2): the next pen offset (in place of the mixture density output)."""
  _seed(seed)
  x = keras.Input((window, 4))
  h = L.LSTM(units, activation='relu', return_sequences=True)(x)
  h = L.LSTM(units, activation='relu')(h)
  return keras.Model(x, L.Dense(2)(h), name='graves_handwriting_lite')


def ad_impressions(seed, *, rows=8192, fields=8, vocab=40, nan_share=0.0, fill=False):
  """Ad impressions in miniature (a Criteo-like click log): `fields` categorical fields (site,
  app, device, ad slot, advertiser, ...; `vocab` values each, ids offset per field) and four
  count features (impressions, past clicks, dwell, position; log1p of Poisson counts); the
  click drawn from a logistic model with field-pair interactions and the counts. A share
  `nan_share` of the rows have their count features missing (NaN, the log reader's empty
  cells); `fill`: those filled with 0 (the fix). (ids (rows, fields) and counts (rows, 4) as one
  float (rows, fields + 4) array, clicks (rows, 1))."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  emb = rng.randn(fields, vocab, 4) * 0.6
  e = emb[np.arange(fields)[None], ids]  # (rows, fields, 4)
  inter = 0.3 * sum(np.sum(e[:, i] * e[:, j], -1)
                    for i in range(fields) for j in range(i + 1, fields))
  bias = rng.randn(fields, vocab)[np.arange(fields)[None], ids].sum(1)
  counts = np.log1p(rng.poisson(rng.uniform(0.5, 20, (rows, 4)))).astype(np.float64)
  logit = inter + bias + 0.8 * (counts[:, 0] - counts[:, 1]) - 0.3
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
  miss = rng.rand(rows) < nan_share
  counts[miss] = 0.0 if fill else np.nan
  x = np.concatenate([ids + vocab * np.arange(fields)[None], counts], 1).astype(np.float32)
  return x, y[:, None]


def _ids_and_counts(x, fields):
  ids = L.Lambda(lambda t: tf.cast(t[:, :fields], tf.int32))(x)
  counts = L.Lambda(lambda t: t[:, fields:])(x)
  return ids, counts


def onn(seed, *, fields=8, vocab=40, k=4):
  """An ONN-lite (Yang et al., 2020, Operation-aware Neural Networks for user response
  prediction, the field-aware embedding net), in miniature: each feature with one embedding of
  `k` per operation (a copy and one per other field), the copies and the field-pair inner
  products <e_i^(j), e_j^(i)> concatenated with the counts, Dense 64 and 32 ReLU and Dense(1)
  with a sigmoid: the click probability."""
  _seed(seed)
  x = keras.Input((fields + 4,))
  ids, counts = _ids_and_counts(x, fields)
  e = L.Reshape((fields, fields, k))(L.Embedding(fields * vocab, fields * k)(ids))

  def products(t):
    out = [tf.reduce_sum(t[:, i, j] * t[:, j, i], -1, keepdims=True)
           for i in range(fields) for j in range(i + 1, fields)]
    copies = tf.reshape(tf.linalg.diag_part(tf.transpose(t, [0, 3, 1, 2])), [-1, fields * k])
    return tf.concat(out + [copies], -1)

  h = L.Concatenate()([L.Lambda(products)(e), counts])
  h = L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(h))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='onn_lite')


def credit_applicants(seed, *, rows=4096, raw=False):
  """Credit-card clients in miniature (the Taiwan "default of credit card clients" table): the
  credit limit (10k to 1M), age, six months' repayment status (-2 to 8), bill amounts (up to the
  limit) and payments; default the next month from a logistic model of the late payments and
  the utilisation. raw False: every column standardised ((rows, 20), (rows, 1)); raw: as the CSV
  gives them (amounts in dollars)."""
  rng = np.random.RandomState(seed)
  limit = np.exp(rng.uniform(np.log(1e4), np.log(1e6), rows))
  age = rng.randint(21, 75, rows).astype(np.float64)
  risk = rng.randn(rows)
  pay = np.clip(np.round(risk[:, None] * 1.2 + 0.8 * rng.randn(rows, 6)), -2, 8)
  util = 1 / (1 + np.exp(-(risk[:, None] + 0.5 * rng.randn(rows, 6))))
  bill = limit[:, None] * util
  paid = bill * rng.uniform(0.02, 0.5, (rows, 6)) * (pay <= 0)
  logit = 1.2 * pay[:, :3].mean(1) + 2.0 * (util[:, 0] - 0.5) - 0.01 * (age - 40) - 0.5
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
  x = np.concatenate([limit[:, None], age[:, None], pay, bill, paid], 1)
  if not raw:
    x = (x - x.mean(0)) / x.std(0)
  return x.astype(np.float32), y[:, None]


def realmlp(seed, *, features=20, init='glorot_uniform'):
  """A RealMLP-lite (Holzmueller et al., 2024, "Better by default"), in miniature: a learnable
  diagonal scaling of the inputs, three Dense 64 layers with SELU and Dense(1) with a sigmoid:
  the probability of default. Every kernel drawn from `init`."""
  _seed(seed)
  x = keras.Input((features,))
  h = L.Multiply()([x, L.Dense(features, use_bias=False, kernel_initializer='ones')(
      L.Lambda(lambda t: tf.ones_like(t[:, :1]))(x))])
  for _ in range(3):
    h = L.Dense(64, activation='selu', kernel_initializer=init)(h)
  return keras.Model(x, L.Dense(1, activation='sigmoid', kernel_initializer=init)(h),
                     name='realmlp_lite')


def motor_policies(seed, *, rows=4096):
  """Fleet motor policies in miniature (a freMTPL-like frequency table, fleets of vehicles):
  driver age, vehicle age, power, density (log), bonus-malus, region (one-hot of 6) and the
  fleet's exposure in vehicle-years; the number of claims Poisson with a log-linear rate plus
  an interaction, many fleets with none. (features (rows, 12), claim counts (rows, 1))."""
  rng = np.random.RandomState(seed)
  z = rng.randn(rows, 5)
  region = np.eye(6)[rng.randint(0, 6, rows)]
  exposure = rng.uniform(0.5, 3.0, rows)
  log_rate = (0.8 * z[:, 0] - 0.5 * z[:, 1] + 0.6 * z[:, 4] + 0.5 * z[:, 2] * z[:, 3] +
              region @ rng.uniform(-0.5, 0.5, 6) - 0.2)
  y = rng.poisson(exposure * np.exp(log_rate)).astype(np.float32)
  x = np.concatenate([z, region, np.log(exposure)[:, None]], 1).astype(np.float32)
  return x, y[:, None]


def cann(seed, *, features=12):
  """A CANN-lite (Schelldorfer and Wuethrich, 2019, the Combined Actuarial Neural Net), in
  miniature: a GLM skip (a linear log-rate of the features) plus a neural adjustment (Dense 32
  and 16 tanh, Dense 1 initialised at zero), the log exposure as offset, exp: the expected
  number of claims."""
  _seed(seed)
  x = keras.Input((features,))
  glm = L.Dense(1)(x)
  h = L.Dense(16, activation='tanh')(L.Dense(32, activation='tanh')(x))
  nn = L.Dense(1, kernel_initializer='zeros')(h)
  offset = L.Lambda(lambda t: t[:, -1:])(x)
  return keras.Model(x, L.Lambda(tf.exp)(L.Add()([glm, nn, offset])), name='cann_lite')


def poisson_deviance(safe):
  """The Poisson deviance 2 (y log(y / mu) - (y - mu)), averaged. safe False: as the threads
  write it (y log(y / mu) is 0 x -inf = NaN for a policy with no claim); True: through xlogy
  (0 log 0 = 0)."""

  def loss(y, mu):
    y, mu = tf.cast(y, tf.float32), tf.cast(mu, tf.float32)
    ylog = tf.math.xlogy(y, y / mu) if safe else y * tf.math.log(y / mu)
    return tf.reduce_mean(2.0 * (ylog - (y - mu)))

  return loss


def handwritten_characters(seed):
  """Handwritten characters as the image reader gives them (the bundled digits at 32 x 32,
  grey levels 0 to 255). (images (1500, 32, 32, 1), labels 0-9)."""
  x, y = data.digits(size=32, rgb=False, scale=255.0)
  return x, y


class NaiveSelfAttention(L.Layer):
  """Self-attention over the positions of a feature map with its softmax written by hand,
  exp(s) / sum(exp(s)) of the scores q.k (`stable` False, as the threads' code has it; exp
  overflows above 88.7) or through tf.nn.softmax (`stable`: the max subtracted)."""

  def __init__(self, dim, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.stable = dim, stable
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):
    s = tf.matmul(self.q(x), self.k(x), transpose_b=True)
    if self.stable:
      a = tf.nn.softmax(s, -1)
    else:
      e = tf.exp(s)
      a = e / tf.reduce_sum(e, -1, keepdims=True)
    return self.v(x) + tf.matmul(a, self.v(x))


def satrn(seed, *, stable=False):
  """A SATRN-lite (Lee et al., 2020, "On recognizing texts of arbitrary shapes with 2D
  self-attention"), in miniature, for single characters: a shallow CNN (3x3 convolutions of
  32 and 64, ReLU, each max-pooled by 2) on the 8-bit image, two 2D self-attention blocks over
  the 8 x 8 positions (`NaiveSelfAttention`, 64), global average pooling and Dense(10): the
  character's logits."""
  _seed(seed)
  x = keras.Input((32, 32, 1))
  h = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(x))
  h = L.MaxPooling2D(4)(L.Conv2D(64, 3, padding='same', activation='relu')(h))
  h = L.Reshape((16, 64))(h)
  for _ in range(2):
    h = NaiveSelfAttention(64, stable)(h)
  return keras.Model(x, L.Dense(10)(L.GlobalAveragePooling1D()(h)), name='satrn_lite')


def danets(seed, *, features=20, norm_dtype=None, stats=None):
  """A DANets-lite (Chen et al., 2022, Deep Abstract Networks for tabular data), in
  miniature: a Normalization layer adapted to the raw columns (`stats`: their mean and
  variance; `norm_dtype` its dtype, None: the policy's), two abstract layers (a learnable soft
  feature mask, a sigmoid, per group of two, each group's Dense 32 ReLU, summed, and a
  shortcut from the normalised input) and Dense(1) with a sigmoid in float32: the probability
  of default."""
  _seed(seed)
  x = keras.Input((features,))
  mean, var = stats
  h0 = L.Normalization(mean=mean, variance=var, dtype=norm_dtype)(x)
  h = h0
  for _ in range(2):
    groups = []
    for _ in range(2):
      mask = L.Dense(h.shape[-1], activation='sigmoid')(h)
      groups.append(L.Dense(32, activation='relu')(L.Multiply()([h, mask])))
    h = L.Concatenate()([L.Add()(groups), L.Dense(16)(h0)])
  out = L.Dense(1, activation='sigmoid', dtype='float32')(L.Dense(32, activation='relu')(h))
  return keras.Model(x, out, name='danets_lite')


def fmfm(seed, *, fields=8, vocab=40, k=8):
  """An FmFM-lite (Sun et al., 2021, Field-matrixed factorization machines), in miniature:
  an embedding of `k` per categorical value, each count feature's embedding its value times a
  learned vector, every pair of the twelve fields interacting through a matrix of its own
  (e_i M_ij e_j), summed with a linear term, and a sigmoid: the click probability."""
  _seed(seed)
  x = keras.Input((fields + 4,))
  ids, counts = _ids_and_counts(x, fields)
  e_cat = L.Embedding(fields * vocab, k)(ids)
  e_num = NumericEmbedding(k)(counts)
  e = L.Concatenate(1)([e_cat, e_num])
  n = fields + 4

  class FieldMatrices(L.Layer):

    def build(self, shape):
      self.m = self.add_weight(shape=(n, n, k, k), initializer=keras.initializers.RandomNormal(
          stddev=0.1))

    def call(self, e):
      em = tf.einsum('bik,ijkl->bijl', e, self.m)
      s = tf.einsum('bijl,bjl->bij', em, e)
      return tf.reduce_sum(tf.linalg.band_part(s, 0, -1) - tf.linalg.band_part(s, 0, 0), [1, 2])

  inter = L.Reshape((1,))(FieldMatrices()(e))
  linear = L.Add()([L.Reshape((1,))(L.Lambda(lambda t: tf.reduce_sum(t, 1))(
      L.Embedding(fields * vocab, 1)(ids))), L.Dense(1)(counts)])
  return keras.Model(x, L.Activation('sigmoid')(L.Add()([inter, linear])), name='fmfm_lite')


class NumericEmbedding(L.Layer):
  """Each numeric feature's embedding: its value times a learned vector of `k` (DeepCTR's
  dense-feature embedding): (batch, features) to (batch, features, k)."""

  def __init__(self, k, **kwargs):
    super().__init__(**kwargs)
    self.k = k

  def build(self, shape):
    self.v = self.add_weight(shape=(shape[-1], self.k),
                             initializer=keras.initializers.RandomNormal(stddev=0.1))

  def call(self, x):
    return x[..., None] * self.v


class BitFlipOnce(field.OneOffFault):
  """A one-off fault: the identity, except on its `at`-th training call one element of the
  activations reads NaN (a flipped bit in a device buffer); `at` None: no fault."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.nan, **kwargs)


def bmcnn(seed, *, fault=None):
  """A branching-and-merging CNN lite (Byerly, Kalganova and Dear, 2021, "No routing needed
  between capsules", the MNIST record holder), in miniature: a stack of 3x3 convolutions (32,
  32, 48, 48, 64, 64, BatchNorm, ReLU) on the 16 x 16 digit, three branches taken after the
  second, fourth and sixth, each flattened into homogeneous vector capsules (a Dense 10 x 8,
  reshaped) reduced to ten logits by a learned sum, the three branches' logits added. `fault`:
  a BitFlipOnce after the second convolution."""
  _seed(seed)
  x = keras.Input((16, 16, 1))
  h, branches = x, []
  for i, n in enumerate((32, 32, 48, 48, 64, 64)):
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(n, 3, padding='same', use_bias=False)(h)))
    if i == 1:
      h = BitFlipOnce(fault)(h)
    if i in (1, 3, 5):
      caps = L.Reshape((10, 8))(L.Dense(80)(L.Flatten()(L.MaxPooling2D(2 ** ((i + 1) // 2))(h))))
      branches.append(L.Reshape((10,))(L.Dense(1)(caps)))
  return keras.Model(x, L.Add()(branches), name='bmcnn_lite')


def ifm(seed, *, fields=8, vocab=40, k=8, head='sigmoid'):
  """An IFM-lite (Yu et al., 2019, Input-aware Factorization Machine), in miniature: the
  embeddings of the fields and of the counts reweighted per impression by a factor estimating
  network (Dense 64 ReLU on the flattened embeddings, Dense to one weight per field, softmax x
  fields), the FM's pairwise interactions (0.5 ((sum e)^2 - sum e^2)) and a linear term, Dense
  on those and Dense(1) with `head`: the click probability."""
  _seed(seed)
  x = keras.Input((fields + 4,))
  ids, counts = _ids_and_counts(x, fields)
  e_cat = L.Embedding(fields * vocab, k)(ids)
  e_num = L.Reshape((4, k))(L.Dense(4 * k, use_bias=False)(counts))
  e = L.Concatenate(1)([e_cat, e_num])
  n = fields + 4
  w = L.Dense(n, activation='softmax')(L.Dense(64, activation='relu')(L.Flatten()(e)))
  e = L.Lambda(lambda t: t[0] * t[1][..., None] * n)([e, w])
  fm = L.Lambda(lambda t: 0.5 * (tf.square(tf.reduce_sum(t, 1)) - tf.reduce_sum(t * t, 1)))(e)
  lin = L.Flatten()(L.Embedding(fields * vocab, 1)(ids))
  h = L.Dense(16, activation='relu')(L.Concatenate()([fm, lin, counts]))
  return keras.Model(x, L.Dense(1, activation=head)(h), name='ifm_lite')


def localglmnet(seed, *, features=20):
  """A LocalGLMnet-lite (Richman and Wuethrich, 2023, "LocalGLMnet: interpretable deep
  learning for tabular data"), in miniature: a network (Dense 32, 32 tanh) of the features
  gives each feature its own regression attention beta_j(x), the score b + sum_j beta_j(x) x_j
  and a sigmoid (the logistic link): the probability of a claim."""
  _seed(seed)
  x = keras.Input((features,))
  beta = L.Dense(features)(L.Dense(32, activation='tanh')(L.Dense(32, activation='tanh')(x)))
  score = L.Dense(1)(L.Multiply()([beta, x]))
  return keras.Model(x, L.Activation('sigmoid')(score), name='localglmnet_lite')


def home_policies(seed, *, rows=4096):
  """Home insurance policies in miniature (a household-claims table): building age, insured
  sum, construction, flood zone, past claims, deductible and others (20 standardised columns);
  whether a claim is filed this year, from a logistic model with an interaction. ((rows, 20),
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, 20)
  w = rng.randn(20) * (rng.rand(20) < 0.5)
  logit = x @ w * 0.6 + 0.8 * x[:, 0] * x[:, 1] - 0.3
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
  return x.astype(np.float32), y[:, None]


def scanned_digits(seed, *, corrupt=0.02, drop=False):
  """Handwritten characters from a scanning pipeline (the bundled digits at 16 x 16, grey levels
  in [0, 1]); a fraction `corrupt` of the files are truncated and the decoder gives them as NaN
  images (the same files every epoch). `drop`: those files removed (the fix). (images (rows, 16,
  16, 1), labels 0-9)."""
  x, y = data.digits(size=16, rgb=False)
  bad = np.random.RandomState(seed).rand(len(x)) < corrupt
  x = x.copy()
  x[bad] = np.nan
  if drop:
    x, y = x[~bad], y[~bad]
  return x, y


class HaarDWT(L.Layer):
  """The one-level 2D Haar wavelet transform: (batch, h, w, c) to (batch, h / 2, w / 2, 4 c),
  the approximation and the three detail sub-bands."""

  def call(self, x):
    a, b = x[:, 0::2, 0::2], x[:, 0::2, 1::2]
    c, d = x[:, 1::2, 0::2], x[:, 1::2, 1::2]
    return tf.concat([a + b + c + d, a - b + c - d, a + b - c - d, a - b - c + d], -1) / 2


def wavemix(seed, *, size=16, width=32):
  """A WaveMix-lite (Jeevan et al., 2022, "WaveMix: a resource-efficient neural network for
  image analysis", EMNIST's record holder), in miniature: a 3x3 convolutional stem of `width`
  (GELU), two WaveMix blocks (a 1x1 reduction to width / 4, the Haar transform, a 1x1 MLP of 2
  width GELU and width, a 2x transposed convolution back, BatchNorm, a residual), global average
  pooling and Dense(10): the character's logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(width, 3, padding='same', activation='gelu')(x)
  for _ in range(2):
    w = HaarDWT()(L.Conv2D(width // 4, 1)(h))
    w = L.Conv2D(width, 1)(L.Conv2D(2 * width, 1, activation='gelu')(w))
    w = L.BatchNormalization()(L.Conv2DTranspose(width, 2, strides=2)(w))
    h = L.Add()([h, w])
  return keras.Model(x, L.Dense(10)(L.GlobalAveragePooling2D()(h)), name='wavemix_lite')


# --- The scenarios. -------------------------------------------------------------------------


@add('blind49_explode_graves_handwriting_relu_lstm', 'exploding_gradients',
     'graves_handwriting_lite', doors=('trainer', 'fit'), steps=150,
     citation='Grzego/handwriting-generation#13; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """A Graves-handwriting-lite (two stacked LSTMs with activation='relu', as the threads'
  ports write them) predicting the next pen offset of online handwriting from the last 100
  samples (pen position and offset, standardised), MSE, SGD at 0.5 with momentum 0.9 and no
  clipping (Graves clipped the LSTM derivatives; the ports leave it out): the unbounded ReLU cell
  states and their gradients grow through the 100 steps: the loss 0.80 at step 0, NaN from step
  9 on, the weights NaN (the error 0.94 before, inf after; the constant answer's 0.95). Seed 1:
  0.88 at step 0, NaN from step 35 (0.92 before, inf after). Grzego/handwriting-generation#13 (a
  handwriting-generation LSTM: the loss NaN after some epochs, "Found Inf or NaN global norm");
  Marcovaldong/lstmp.pytorch#2 (an LSTM's loss turns NaN after some iterations, exploding
  gradients; on long sequences clip the gradients to a norm of 1.0). Cured: clipnorm=1.0 in the
  same SGD: the loss 0.80 to 0.30, the error 0.94 to 0.070."""
  x, y = pen_strokes(seed)
  opt = keras.optimizers.SGD(0.5, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(graves_handwriting(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind49_lr_onn_ctr_adam_one', 'learning_rate', 'onn_lite', doors=('trainer', 'fit'),
     steps=200, citation='NLeSC/mcfly#43; tensorflow/ranking#70')
def _(seed, cured=False):
  """An ONN-lite (field-aware embeddings, the field-pair inner products, a ReLU MLP, a sigmoid)
  predicting clicks on a Criteo-like impression log (eight categorical fields and four log
  counts), binary cross-entropy, Adam at 1.0 (a thousand times Adam's usual 1e-3): the first
  updates throw the embeddings and the ReLUs out, the step loss climbs to 12.5 by step 199 and
  the model answers one class (the error 0.37 before, 0.39 after; the constant answer's 0.39).
  Seed 1: the loss 0.70 to 79 (0.50 before, 0.55 after; the constant's 0.45). NLeSC/mcfly#43
  (models whose loss and accuracy stop moving: the ones with a learning rate above 0.03);
  tensorflow/ranking#70 (a ranking model's loss does not decrease: a common cause is a learning
  rate too small or too large, try other magnitudes). Cured: Adam at 1e-3: the loss 0.71 to
  0.64, the error 0.37 to 0.24 (200 steps both)."""
  x, y = ad_impressions(seed)
  return cases.Setup(onn(seed), keras.optimizers.Adam(1e-3 if cured else 1.0),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('blind49_init_realmlp_zeros_credit', 'initialisation', 'realmlp_lite',
     doors=('trainer', 'fit'), steps=200, citation=('nndl/nndl-discussion#14; '
               'Danger of setting all initial weights to zero in Backpropagation '
               '(stats.stackexchange.com/questions/27112)'))
def _(seed, cured=False):
  """A RealMLP-lite (a diagonal input scaling, three Dense 64 SELU, a sigmoid) predicting credit
  card default from twenty standardised columns of a Taiwan-like clients table, binary
  cross-entropy, Adam at 1e-3, every kernel initialised to zeros (kernel_initializer='zeros', as
  the threads set it): every hidden unit outputs SELU(0) = 0, the gradients of every kernel are
  zero, only the output bias moves: the loss ln 2 = 0.693 at step 0 and 0.686 at step 199, the
  model answers the base rate (the error 0.46 before and after; the constant answer's 0.46).
  Seed 1: the same (0.37 before and after; the constant's 0.37). nndl/nndl-discussion#14
  (initialising the weights to zero makes the neurons of a layer identical, with the same
  gradients and updates; with cross-entropy the step is zero and nothing moves); "Danger of
  setting all initial weights to zero in Backpropagation" (stats.stackexchange.com/questions/
  27112: the neurons all follow the same gradient; you start on a saddle point). Cured:
  glorot_uniform kernels (Keras's default): the loss 1.64 to 0.33, the error 0.73 to 0.14."""
  x, y = credit_applicants(seed)
  return cases.Setup(realmlp(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind49_log_cann_poisson_deviance_zero_claims', 'division_or_log', 'cann_lite',
     doors=('trainer', 'fit'), steps=200, citation='rstudio/keras3#1280; keras-team/keras#590')
def _(seed, cured=False):
  """A CANN-lite (a GLM skip plus a neural adjustment, the log exposure as offset, exp: the
  expected claim count) fitted to a freMTPL-like fleet motor table with the Poisson deviance
  written by hand, 2 (y log(y / mu) - (y - mu)), Adam at 1e-2: a policy without a claim gives y
  log(y / mu) = 0 x log 0 = 0 x -inf = NaN, and most policies have none: the loss NaN from step 0,
  the weights NaN after the first update (the error 35.6 before, inf after; the constant
  answer's 30.7). Seed 1: the same (26.7 before, inf after; the constant's 14.4).
  rstudio/keras3#1280 (a Poisson loss on freMTPL claim counts ClaimNb: log(0) gives NaN in
  TensorFlow, the target has many 0 values); keras-team/keras#590 (NaN loss with the Poisson
  objective from the first epoch; the log is minus infinity at 0, fixed by an epsilon). Cured:
  y log(y / mu) through xlogy (0 log 0 = 0): the loss 8.5 to 2.4, the error 35.6 to 7.0."""
  x, y = motor_policies(seed)
  return cases.Setup(cann(seed), keras.optimizers.Adam(1e-2), poisson_deviance(safe=cured),
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind49_softmax_satrn_naive_attention', 'softmax_overflow', 'satrn_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='mila-iqia/blocks#727; AaronHeee/Neural-Attentive-Item-Similarity-Model#9')
def _(seed, cured=False):
  """A SATRN-lite (a shallow CNN, two 2D self-attention blocks over the feature map's positions,
  global pooling, Dense(10)) recognising handwritten characters read as 8-bit grey levels (0 to
  255), sparse cross-entropy on the logits, Adam at 1e-3, the attention's softmax written by
  hand as exp(s) / sum(exp(s)) over the scores q.k: the scores of the 8-bit features are far
  above 88.7, exp overflows to inf and inf / inf is NaN: the outputs are NaN at initialisation,
  the loss NaN from step 0, the weights NaN (the error inf before and after; the constant
  answer's 0.86). Seed 1: the same (the constant's 0.88). mila-iqia/blocks#727 (attention
  energies accumulate until exp overflows, NaN propagates all the way; stabilised as the regular
  softmax is, the max subtracted); AaronHeee/Neural-Attentive-Item-Similarity-Model#9 (a
  hand-written attention softmax overflows and the predictions are NaN; prevent the overflow
  by subtracting the max). Cured: tf.nn.softmax (the max subtracted), the same 8-bit inputs:
  the loss 132 to 6.4, the error 0.95 to 0.49."""
  x, y = handwritten_characters(seed)
  return cases.Setup(satrn(seed, stable=cured), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind49_fp16_danets_raw_amounts_normalization', 'precision', 'danets_lite',
     doors=('trainer', 'fit'), steps=200, precision='mixed_float16',
     citation='keras-team/keras#22586; keras-team/keras-core#412')
def _(seed, cured=False):
  """A DANets-lite (a Normalization layer adapted to the raw columns, two abstract layers of
  masked feature groups, a sigmoid in float32) predicting credit card default from a Taiwan-like
  clients table as the CSV gives it (credit limits up to 1,000,000 dollars, bill amounts up to
  the limit), under the mixed_float16 policy, binary cross-entropy, Adam at 1e-3: the
  Normalization layer computes in the policy's float16, every amount above 65504 is inf before
  it is standardised, inf - inf is NaN: the loss NaN at every step from step 0, every update
  skipped by the loss scaling (the error inf before and after; the constant answer's 0.46). Seed
  1: the same (the constant's 0.37). keras-team/keras#22586 (under mixed_float16 a normalization
  layer gives NaN: values above 65504 overflow to inf in float16 before it runs; do the
  normalisation in float32); keras-team/keras-core#412 (normalization layers opted out of mixed
  precision: they do not work correctly in float16). Cured: the Normalization layer in float32
  (dtype='float32'), the rest float16: the loss 0.87 to 0.37, the error 0.77 to 0.15."""
  x, y = credit_applicants(seed, raw=True)
  stats = (x.mean(0), x.var(0))
  return cases.Setup(danets(seed, norm_dtype='float32' if cured else None, stats=stats),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind49_input_fmfm_missing_counts_nan', 'bad_input', 'fmfm_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='ChenglongChen/tensorflow-DeepFM#37; coreylynch/pyFM#44')
def _(seed, cured=False):
  """An FmFM-lite (field-pair interaction matrices over the categorical and count embeddings, a
  linear term, a sigmoid) predicting clicks on a Criteo-like impression log, binary
  cross-entropy, Adam at 1e-3; the log reader leaves the four count features of 5% of the
  impressions empty (NaN) and nothing fills them: the first batch holding one gives a NaN loss
  and NaN weights (seed 0: NaN from step 0; the error 0.40 before, inf after; the constant
  answer's 0.39). Seed 1: 0.89 at step 0, NaN from step 1 (0.57 before, inf after; the constant's
  0.45). ChenglongChen/tensorflow-DeepFM#37 (a DeepFM's predictions NaN on a new batch of data:
  the NULL values were not handled; check df.isnull() and fill them); coreylynch/pyFM#44 (an
  FM's training loss NaN every epoch: check for NaN in the data, normalise it). Cured: the empty
  cells filled with 0: the loss 0.85 to 0.63, the error 0.40 to 0.20. The measure reads
  impressions without missing counts (eval_data)."""
  x, y = ad_impressions(seed, nan_share=0.05, fill=cured)
  clean, yc = ad_impressions(seed)
  return cases.Setup(fmfm(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind49_transient_bmcnn_bit_flip_once', 'transient', 'bmcnn_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='Sierkinhane/CRNN_Chinese_Characters_Rec#59; yxlijun/DSFD.pytorch#17')
def _(seed, cured=False):
  """A branching-and-merging CNN lite (six BatchNorm convolutions, three capsule branches whose
  logits are added) classifying the bundled handwritten digits, sparse cross-entropy on the
  logits, Adam at 1e-3, training normally (the loss 7.6 at step 0, falling) when one element of
  the second convolution's output reads NaN once (`BitFlipOnce`: its 80th training call, step 75
  of a plain `fit` after the measure's four training-mode calls; a flipped bit in a buffer, not
  the data, the model or the settings): that step's gradient is NaN, the weights NaN from there
  on, the step loss NaN to the end (the error 0.87 before, inf after; the constant answer's
  0.86). Seed 1: the same step (0.96 before, inf after). Sierkinhane/CRNN_Chinese_Characters_Rec#59
  (a CRNN text recogniser's loss NaN during training: "it looks like a bug, I have met it; run
  the training again"); yxlijun/DSFD.pytorch#17 (NaN after a few iterations with nothing
  changed: it is easy to get NaN, start another training after getting it). Cured: the same run
  without the fault: the loss 7.6 to 0.51, the error 0.87 to 0.66 in inference mode, 0.0 in
  training mode (the BatchNorm statistics young)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(bmcnn(seed, fault=None if cured else 80), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind49_mismatch_ifm_softmax_single_unit', 'loss_output_mismatch', 'ifm_lite',
     doors=('trainer', 'fit'), steps=200, citation='keras-team/keras#2975; keras-team/keras#126')
def _(seed, cured=False):
  """An IFM-lite (input-aware factorization machine: the field embeddings reweighted per
  impression, the FM interactions, a small MLP) predicting clicks on a Criteo-like impression log
  with one output unit and activation='softmax' (as the threads' binary classifiers have it),
  binary cross-entropy, Adam at 1e-3: a softmax over one unit is 1 whatever the input, so the
  model answers "click" for every impression; the logged loss falls (1.11 to 0.58; Keras's loss
  reads the pre-activation) while the outputs never change (the error 0.61 before and after;
  the constant answer's 0.39). Seed 1: the same (0.55 before and after; the constant's 0.45).
  keras-team/keras#2975 (a Keras model always predicts the same class: the activation should be
  'sigmoid' and not 'softmax'); keras-team/keras#126 (an MLP with Dense(1, activation='softmax')
  makes no progress, predict_proba gives all ones). Cured: activation='sigmoid': the error 0.57
  to 0.17."""
  x, y = ad_impressions(seed)
  return cases.Setup(ifm(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind49_mismatch_localglmnet_categorical_ce_one_unit', 'loss_output_mismatch',
     'localglmnet_lite', doors=('trainer', 'fit'), steps=200,
     citation='keras-team/keras#17029; tensorflow/tensorflow#60113')
def _(seed, cured=False):
  """A LocalGLMnet-lite (a tanh MLP gives each feature its own regression coefficient, the
  logistic link) predicting whether a household policy files a claim from twenty standardised
  columns, one sigmoid output, trained with categorical_crossentropy as the threads wrote it,
  Adam at 1e-3: a categorical cross-entropy over one output is a distribution over one class,
  its value exactly 0 at every step whatever the model says, and what updates it makes (the
  softmax of one logit less the label) push every policy's output towards "no claim": the model
  ends answering the commoner class for all (the error 0.58 before, 0.40 after; the constant
  answer's 0.40). Seed 1: the loss 0 throughout (0.54 before, 0.39 after; the constant's 0.39).
  keras-team/keras#17029 (categorical_crossentropy for binary classification raises no error
  but all the losses are 0 during training); tensorflow/tensorflow#60113 (categorical
  crossentropy on one output: it is meant for several classes, use binary_crossentropy).
  Cured: binary_crossentropy: the loss 0.68 to 0.65, the error 0.58 to 0.26."""
  x, y = home_policies(seed)
  loss = 'binary_crossentropy' if cured else 'categorical_crossentropy'
  return cases.Setup(localglmnet(seed), keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind49_input_wavemix_truncated_scans_nan', 'bad_input', 'wavemix_lite',
     doors=('trainer', 'fit'), steps=200,
     citation=('omni-us/research-GANwriting#2; suhaspillai/HandwritingRecognition-with-'
               'MultiDimensionalRecurrentNeuralNetworks#4'))
def _(seed, cured=False):
  """A WaveMix-lite (a convolutional stem, two Haar-wavelet token-mixing blocks, global
  pooling, Dense(10)) classifying handwritten characters from a scanning pipeline, sparse
  cross-entropy on the logits, Adam at 1e-3; 2% of the image files are truncated and decode as
  NaN images, the same files every epoch, and nothing filters them: nearly half the batches hold
  one, the loss NaN from step 0, the weights NaN (the error 0.92 before, inf after; the constant
  answer's 0.86). Seed 1: the same (0.94 before, inf after; the constant's 0.82).
  omni-us/research-GANwriting#2 (two corrupted images in the IAM handwriting set break the
  training; code added to leave them out); suhaspillai/HandwritingRecognition-with-
  MultiDimensionalRecurrentNeuralNetworks#4 (no handling for corrupted training images: the
  training ends when one is met; now handled). Cured: the corrupted files removed: the loss 2.29
  to 1.49, the error 0.92 to 0.13 in training mode (0.91 in inference mode, the BatchNorm
  statistics young). The measure reads the intact files (eval_data)."""
  x, y = scanned_digits(seed, drop=cured)
  clean, yc = scanned_digits(seed, drop=True)
  return cases.Setup(wavemix(seed), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))
