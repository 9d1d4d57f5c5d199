"""A third blind set of sick scenarios (the 'blind3' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind2.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (a Deep Sets regressor, a ConvLSTM,
keras.applications EfficientNetV2B0, an RBF network, a single-object box regressor, a BiLSTM-CRF
tagger, a ListNet ranker, a bilinear (Gram) CNN, a PointNet, a TabNet-style attentive MLP, a GRU
encoder-decoder). The capsule-net and DenseNet layers below are kept but unregistered: their
scenarios did not show the symptom in the plain-Keras check. Each builder takes
`cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick run).
Each was checked with plain Keras `fit`: the sick run shows the reported symptom, the cured twin
passes runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data

BLIND3 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND3.add` with split='blind3'."""
  return BLIND3.add(name, expected, arch, split='blind3', **fields)


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


def conv_lstm(seed, *, frames=16, size=8, classes=10, activation='tanh'):
  """A ConvLSTM classifier of short clips: ConvLSTM2D(16, 3x3, `activation`) over the frames,
  global average, Dense(classes) logits."""
  _seed(seed)
  return keras.Sequential([
      keras.Input((frames, size, size, 1)),
      L.ConvLSTM2D(16, 3, padding='same', activation=activation),
      L.GlobalAveragePooling2D(), L.Dense(classes)], name='conv_lstm')


def deep_sets(seed, *, size=100, pooling='sum'):
  """A Deep Sets regressor: phi = Dense 32-32 (ReLU) on each element, `pooling` ('sum' as in
  Zaheer et al., or 'mean') over the set, rho = Dense 32 (ReLU), Dense(1)."""
  _seed(seed)
  inputs = keras.Input((size, 1))
  h = L.Dense(32, activation='relu')(L.Dense(32, activation='relu')(inputs))
  pool = tf.reduce_sum if pooling == 'sum' else tf.reduce_mean
  h = L.Lambda(lambda t: pool(t, axis=1))(h)
  return keras.Model(inputs, L.Dense(1)(L.Dense(32, activation='relu')(h)), name='deep_sets')


def efficientnet_v2_b0(seed, *, classes=10):
  """keras.applications.EfficientNetV2B0, weights=None, 32x32 RGB in [0, 255] (its own
  rescaling), softmax head."""
  _seed(seed)
  return keras.applications.EfficientNetV2B0(weights=None, input_shape=(32, 32, 3),
                                             classes=classes)


class RBF(L.Layer):
  """Gaussian radial basis units exp(-beta |x - c|^2), centres trainable, from `centres`
  (an initializer)."""

  def __init__(self, units, beta, centres, **kwargs):
    super().__init__(**kwargs)
    self.units, self.beta, self.centres_init = units, beta, centres

  def build(self, shape):
    self.centres = self.add_weight(shape=(self.units, shape[-1]), initializer=self.centres_init,
                                   name='centres')

  def call(self, x):
    d2 = tf.reduce_sum(tf.square(x[:, None, :] - self.centres[None]), axis=-1)
    return tf.exp(-self.beta * d2)


class InitCentresFromRows(keras.initializers.Initializer):
  """RBF centres initialised as random rows of the training set (rbf_keras's InitCentersRandom)."""

  def __init__(self, rows, seed):
    self.rows, self.seed = rows, seed

  def __call__(self, shape, dtype=None):
    pick = np.random.RandomState(self.seed).choice(len(self.rows), shape[0], replace=False)
    return tf.constant(self.rows[pick], dtype=dtype or 'float32')


def rbf_net(seed, *, features=8, units=48, classes=6, beta=0.05, centres='random_normal'):
  """An RBF network: `RBF(units, beta)` on the raw features, Dense(classes) logits."""
  _seed(seed)
  return keras.Sequential([keras.Input((features,)), RBF(units, beta, centres),
                           L.Dense(classes)], name='rbf_net')


def squash(s, epsilon):
  """The capsule non-linearity |s|^2 / (1 + |s|^2) * s / |s|, written as s * |s| / (1 + |s|^2)
  (the handson-ml#173 variant); `epsilon` inside the square root (0: none)."""
  n = tf.reduce_sum(tf.square(s), axis=-1, keepdims=True)
  return s * tf.sqrt(n + epsilon) / (1.0 + n)


class DigitCaps(L.Layer):
  """Capsules by routing-by-agreement (Sabour et al.): predictions u_hat = W_ij u_i, 3 routing
  iterations, `squash`ed; the output is the capsules' lengths (batch, classes)."""

  def __init__(self, classes, dim, epsilon, **kwargs):
    super().__init__(**kwargs)
    self.classes, self.dim, self.epsilon = classes, dim, epsilon

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[1], self.classes, self.dim, shape[2]),
                             initializer=keras.initializers.RandomNormal(stddev=0.05), name='w')

  def call(self, u):
    u_hat = tf.einsum('ijdk,bik->bijd', self.w, u)
    b = tf.zeros(tf.shape(u_hat)[:3])
    for i in range(3):
      c = tf.nn.softmax(b, axis=2)
      v = squash(tf.reduce_sum(c[..., None] * u_hat, axis=1), self.epsilon)
      if i < 2:
        b += tf.einsum('bijd,bjd->bij', u_hat, v)
    return tf.sqrt(tf.reduce_sum(tf.square(v), -1) + 1e-7)


def capsnet(seed, *, size=28, classes=10, epsilon=0.0):
  """A small CapsNet: Conv2D(32, 3, ReLU), primary capsules Conv2D(4 x 8, 3, stride 2) (linear,
  as CapsNet-Keras's PrimaryCap) as 8-D vectors, `squash`, `DigitCaps` (16-D): the lengths."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  x = L.Conv2D(32, 3, activation='relu')(inputs)
  x = L.Conv2D(32, 3, strides=2)(x)
  u = L.Lambda(lambda t: squash(t, epsilon))(L.Reshape((-1, 8))(x))
  return keras.Model(inputs, DigitCaps(classes, 16, epsilon)(u), name='capsnet')


def box_regressor(seed, *, size=32):
  """A single-object localiser: conv-pool x3, Dense(64), 4 deltas from a centred anchor a quarter
  of the image wide: (cx, cy) = 0.5 + (dx, dy) / 4, (w, h) = 0.25 exp(dw, dh), the box
  (x1, y1, x2, y2) in image units."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  x = inputs
  for width in (16, 32, 32):
    x = L.MaxPooling2D()(L.Conv2D(width, 3, padding='same', activation='relu')(x))
  d = L.Dense(4)(L.Dense(64, activation='relu')(L.Flatten()(x)))

  def decode(d):
    centre = 0.5 + d[:, :2] / 4.0
    half = 0.125 * tf.exp(d[:, 2:])
    return tf.concat([centre - half, centre + half], axis=-1)

  return keras.Model(inputs, L.Lambda(decode)(d), name='box_regressor')


class CRFEmissions(L.Layer):
  """The potentials of a two-tag (outside / inside) linear-chain CRF: the inputs projected to the
  'inside' emission score (the 'outside' score is 0), and a trainable 2x2 transition matrix that
  the loss reads."""

  def build(self, shape):
    self.proj = L.Dense(1)
    self.transitions = self.add_weight(shape=(2, 2), initializer='zeros', name='transitions')

  def call(self, h):
    return self.proj(h)


def bilstm_crf(seed, *, seq_len=64, vocab=40):
  """A BiLSTM-CRF tagger: Embedding(vocab, 16), BiLSTM(2 x 24), `CRFEmissions`: the 'inside'
  score per token (batch, seq_len, 1)."""
  _seed(seed)
  inputs = keras.Input((seq_len,), dtype='int32')
  h = L.Bidirectional(L.LSTM(24, return_sequences=True))(L.Embedding(vocab, 16)(inputs))
  crf = CRFEmissions(name='crf')
  return keras.Model(inputs, crf(h), name='bilstm_crf')


def listnet(seed, *, docs=10, features=12):
  """A ListNet ranker: one scoring MLP (Dense 32-16 ReLU, Dense 1) applied to each document of a
  list: the scores (batch, docs)."""
  _seed(seed)
  inputs = keras.Input((docs, features))
  s = L.Dense(1)(L.Dense(16, activation='relu')(L.Dense(32, activation='relu')(inputs)))
  return keras.Model(inputs, L.Reshape((docs,))(s), name='listnet')


class BilinearPool(L.Layer):
  """Bilinear (Gram) pooling of a feature map: sum over positions of f f^T, signed square root,
  L2 normalisation (Lin et al.'s B-CNN); in the layer's compute dtype (float16 under
  mixed_float16) unless built with dtype='float32'."""

  def call(self, f):
    hw = f.shape[1] * f.shape[2]
    f = tf.reshape(f, (-1, hw, f.shape[3]))
    g = tf.reshape(tf.matmul(f, f, transpose_a=True), (-1, f.shape[2] * f.shape[2]))
    g = tf.sign(g) * tf.sqrt(tf.abs(g) + 1e-5)
    return g / tf.norm(g, axis=-1, keepdims=True)


def bilinear_cnn(seed, *, size=16, classes=10, float32_pool=False):
  """A bilinear CNN: Conv2D 16, 32 (3x3, ReLU, one pool), `BilinearPool`, Dense(classes)
  logits in float32."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  x = L.Conv2D(16, 3, padding='same', activation='relu')(inputs)
  x = L.Conv2D(32, 3, padding='same', activation='relu')(L.MaxPooling2D()(x))
  x = BilinearPool(dtype='float32' if float32_pool else None)(x)
  return keras.Model(inputs, L.Dense(classes, dtype='float32')(x), name='bilinear_cnn')


def pointnet(seed, *, points=64, classes=5):
  """A PointNet (vanilla, no T-nets): a shared per-point MLP 3 -> 32 -> 64 -> 128 (ReLU), global
  max pooling, Dense 64 (ReLU), Dense(classes) logits."""
  _seed(seed)
  return keras.Sequential([
      keras.Input((points, 3)), L.Dense(32, activation='relu'), L.Dense(64, activation='relu'),
      L.Dense(128, activation='relu'), L.GlobalMaxPooling1D(), L.Dense(64, activation='relu'),
      L.Dense(classes)], name='pointnet')


class AttentiveStep(L.Layer):
  """One TabNet-style decision step: a feature mask softmax(Dense(prior state)) times the
  relaxation prior, the masked features through a GLU block, half of it to the decision (ReLU),
  half as the next state."""

  def __init__(self, width, **kwargs):
    super().__init__(**kwargs)
    self.width = width

  def build(self, shapes):
    d = shapes[0][-1]
    self.mask = L.Dense(d)
    self.glu = L.Dense(2 * self.width)

  def call(self, inputs):
    x, state, prior = inputs
    m = tf.nn.softmax(self.mask(state), axis=-1) * prior
    a, g = tf.split(self.glu(x * m), 2, axis=-1)
    h = a * tf.sigmoid(g)
    half = self.width // 2
    return tf.nn.relu(h[:, :half]), h[:, half:], prior * (1.5 - m)


def tabnet_lite(seed, *, features=12, width=32, steps=3):
  """A TabNet-style net: BatchNorm of the inputs, `steps` `AttentiveStep`s whose decisions are
  summed, Dense(1) logit."""
  _seed(seed)
  inputs = keras.Input((features,))
  x = L.BatchNormalization()(inputs)
  state = L.Dense(width // 2)(x)
  prior = L.Lambda(lambda t: tf.ones_like(t))(x)
  decisions = []
  for _ in range(steps):
    dec, state, prior = AttentiveStep(width)([x, state, prior])
    decisions.append(dec)
  return keras.Model(inputs, L.Dense(1)(L.Add()(decisions)), name='tabnet_lite')


class _Counter:
  """A call counter kept out of Keras's tracking (a misfiring memory cell does not remember)."""

  def __init__(self):
    with tf.init_scope():
      self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)


class ExponentBitFlip(L.Layer):
  """The identity, except at its `at`-th training call, where the top exponent bit of one
  activation flips (a value of about 1 becomes +inf, a value near 0 becomes about 2^128 or inf):
  a soft memory error, once."""

  def __init__(self, at, **kwargs):
    super().__init__(**kwargs)
    self.at = at
    self.counter = _Counter()

  def call(self, x, training=False):
    if not training or self.at is None:
      return x
    calls = self.counter.calls.assign_add(1)
    corner = tf.reshape(tf.one_hot(7, tf.size(x)), tf.shape(x)) > 0
    flipped = tf.bitcast(tf.bitwise.bitwise_or(tf.bitcast(x, tf.int32), 0x40000000), x.dtype)
    return tf.where(tf.logical_and(corner, tf.equal(calls, self.at)), flipped, x)


def densenet_small(seed, *, size=16, classes=10, growth=12, layers=3, flip_at=None):
  """A DenseNet-style convnet: Conv2D 16, a dense block (`layers` x BN-ReLU-Conv3x3(growth),
  each concatenated), a transition (BN-ReLU-Conv1x1, average pool), a second dense block,
  BN-ReLU, global average, Dense(classes) logits; `flip_at`: an `ExponentBitFlip` after the
  first block."""
  _seed(seed)

  def block(x):
    for _ in range(layers):
      y = L.Conv2D(growth, 3, padding='same')(L.ReLU()(L.BatchNormalization()(x)))
      x = L.Concatenate()([x, y])
    return x

  inputs = keras.Input((size, size, 1))
  x = block(L.Conv2D(16, 3, padding='same')(inputs))
  x = ExponentBitFlip(flip_at)(x)
  x = L.AveragePooling2D(2)(L.Conv2D(32, 1)(L.ReLU()(L.BatchNormalization()(x))))
  x = L.ReLU()(L.BatchNormalization()(block(x)))
  return keras.Model(inputs, L.Dense(classes)(L.GlobalAveragePooling2D()(x)),
                     name='densenet_small')


def gru_seq2seq(seed, *, past=24, features=3, horizon=6, units=32):
  """A GRU encoder-decoder: the encoder's last state starts a decoder GRU over `horizon` steps
  (its input the encoder state repeated), a sigmoid per step (batch, horizon, 1)."""
  _seed(seed)
  inputs = keras.Input((past, features))
  _, state = L.GRU(units, return_state=True)(inputs)
  h = L.GRU(units, return_sequences=True)(L.RepeatVector(horizon)(state), initial_state=state)
  return keras.Model(inputs, L.TimeDistributed(L.Dense(1, activation='sigmoid'))(h),
                     name='gru_seq2seq')


# --- Data of this file. -----------------------------------------------------------------------


def drifting_digits(seed, *, frames=16, size=8):
  """Clips of an 8x8 digit drifting one pixel right per frame (wrapping), noise 0.1."""
  x, y = data.digits(size=size, rgb=False)
  rng = np.random.RandomState(12000 + seed)
  clips = np.stack([np.roll(x, t, axis=2) for t in range(frames)], axis=1)
  return (clips + 0.1 * rng.normal(size=clips.shape)).astype(np.float32), y


def meter_sets(seed, *, rows=2048, size=100):
  """Sets of `size` positive meter readings (log-normal, a level per set) and the log of their
  mean square."""
  rng = np.random.RandomState(11500 + seed)
  x = rng.lognormal(rng.uniform(-0.5, 0.5, (rows, 1, 1)), 0.5, (rows, size, 1)).astype(np.float32)
  return x, np.log(np.mean(np.square(x), axis=(1, 2)))[:, None].astype(np.float32)


def sensor_classes(seed, *, rows=2048, features=8, classes=6):
  """Raw sensor readings (about 30 +- 4 per channel): Gaussian clusters, one per class."""
  rng = np.random.RandomState(13000 + seed)
  centres = 3.0 * rng.normal(size=(classes, features))
  y = rng.randint(0, classes, rows).astype(np.int32)
  x = 30.0 + centres[y] + rng.normal(size=(rows, features))
  return x.astype(np.float32), y


def mnist_like(seed, *, batch=32):
  """The digits as MNIST lays them out: 16x16 in the middle of a blank 28x28 canvas."""
  x, y = data.digits(size=16, rgb=False)
  return data.stream(np.pad(x, ((0, 0), (6, 6), (6, 6), (0, 0))), y, batch=batch, seed=seed)


def placed_digits(seed, *, rows=2048, size=32):
  """A digit (8x8 or 16x16) placed at random on a blank 32x32 canvas, noise 0.05: (image, its box
  (x1, y1, x2, y2) in image units)."""
  x, _ = data.digits(size=8, rgb=False)
  rng = np.random.RandomState(14000 + seed)
  out = np.zeros((rows, size, size, 1), np.float32)
  boxes = np.zeros((rows, 4), np.float32)
  for r in range(rows):
    im = x[rng.randint(len(x))]
    if rng.rand() < 0.5:
      im = np.repeat(np.repeat(im, 2, 0), 2, 1)
    k = im.shape[0]
    r0, c0 = rng.randint(0, size - k + 1, 2)
    out[r, r0:r0 + k, c0:c0 + k] = im
    boxes[r] = np.array([c0, r0, c0 + k, r0 + k]) / size
  return out + 0.05 * rng.normal(size=out.shape).astype(np.float32), boxes


def tagged_tokens(seed, *, rows=2048, seq_len=64, vocab=40):
  """Token sequences tagged inside (1) / outside (0): spans opened by a trigger token (1-3) and
  running over the following 'name' tokens (30-39), as a chunker's IO tags."""
  rng = np.random.RandomState(15000 + seed)
  x = rng.randint(4, 30, (rows, seq_len))
  y = np.zeros((rows, seq_len), np.float32)
  for r in range(rows):
    t = 0
    while t < seq_len - 1:
      if rng.rand() < 0.12:
        x[r, t] = rng.randint(1, 4)
        n = rng.randint(1, 6)
        x[r, t + 1:t + 1 + n] = rng.randint(30, 40, n)[:seq_len - t - 1]
        y[r, t + 1:t + 1 + n] = 1
        t += n + 1
      t += 1
  return x.astype(np.int32), y


def ranked_lists(seed, *, rows=2048, docs=10, features=12):
  """Lists of documents with editorial relevance scores 0-100 (a linear score of the features
  plus noise, squashed to a percentage)."""
  rng = np.random.RandomState(16000 + seed)
  x = rng.normal(size=(rows, docs, features)).astype(np.float32)
  w = rng.normal(size=(features,)) / np.sqrt(features)
  z = x @ w + 0.3 * rng.normal(size=(rows, docs))
  return x, (100.0 / (1.0 + np.exp(-2.0 * z))).astype(np.float32)


def point_clouds(seed, *, rows=1536, points=64, degenerate=0.0):
  """Point clouds of five shapes (sphere, cube surface, cylinder, cone, flat disc) at random
  scales, stretched, rotated about z, noisy; a fraction `degenerate` are all zeros (a failed
  scan, zero-padded). Returned raw (not centred or scaled)."""
  rng = np.random.RandomState(17000 + seed)
  y = rng.randint(0, 5, rows).astype(np.int32)
  out = np.zeros((rows, points, 3), np.float32)
  for r, k in enumerate(y):
    u = rng.uniform(-1, 1, (points, 3))
    if k == 0:
      p = u / np.linalg.norm(u, axis=1, keepdims=True)
    elif k == 1:
      axis = rng.randint(0, 3, points)
      p = u.copy()
      p[np.arange(points), axis] = np.sign(u[np.arange(points), axis])
    elif k == 2:
      a = np.pi * u[:, 0]
      p = np.stack([np.cos(a), np.sin(a), u[:, 1]], 1)
    elif k == 3:
      a, h = np.pi * u[:, 0], (u[:, 1] + 1) / 2
      p = np.stack([(1 - h) * np.cos(a), (1 - h) * np.sin(a), 2 * h - 1], 1)
    else:
      a, rad = np.pi * u[:, 0], np.sqrt((u[:, 1] + 1) / 2)
      p = np.stack([rad * np.cos(a), rad * np.sin(a), 0.02 * u[:, 2]], 1)
    p = p * rng.uniform(0.7, 1.3, 3) * rng.uniform(0.5, 20.0)
    th = rng.uniform(0, 2 * np.pi)
    rot = np.array([[np.cos(th), -np.sin(th), 0], [np.sin(th), np.cos(th), 0], [0, 0, 1]])
    out[r] = p @ rot.T + rng.normal(size=3) * 10 + 0.01 * rng.normal(size=p.shape)
  bad = rng.rand(rows) < degenerate
  out[bad] = 0.0
  return out, y, bad


def normalise_clouds(clouds, guarded):
  """The usual PointNet preprocessing: centre each cloud, divide by its largest norm (guarded:
  at least 1e-6)."""
  c = clouds - clouds.mean(axis=1, keepdims=True)
  scale = np.linalg.norm(c, axis=2).max(axis=1)[:, None, None]
  with np.errstate(invalid='ignore', divide='ignore'):
    return (c / (np.maximum(scale, 1e-6) if guarded else scale)).astype(np.float32)


def loan_table(seed, *, rows=4096, zero_income=0.0):
  """Loan applications: 11 standardised features, plus the debt-to-income ratio computed as
  debt / income in preprocessing; a fraction `zero_income` reported an income of 0. Labelled 1
  (default) from a logistic model of the features and the ratio. Returns (features, ratio,
  labels, income)."""
  rng = np.random.RandomState(18000 + seed)
  base = rng.normal(size=(rows, 11))
  income = np.exp(rng.normal(10.5, 0.5, rows))
  debt = income * rng.uniform(0.0, 0.8, rows)
  w = rng.normal(size=11) / np.sqrt(11)
  logit = 1.5 * (base @ w) + 6.0 * (debt / income - 0.4) + 0.3 * rng.normal(size=rows)
  y = (logit > 0).astype(np.float32)[:, None]
  income[rng.rand(rows) < zero_income] = 0.0
  return base.astype(np.float32), debt.astype(np.float32), y, income.astype(np.float32)


def rain_windows(seed, *, rows=2048, past=24, horizon=6):
  """Hourly (pressure change, humidity, temperature) over `past` hours and whether it rains in
  each of the next `horizon` hours (a latent front arriving)."""
  rng = np.random.RandomState(19000 + seed)
  arrival = rng.uniform(-12, 30, rows)
  t = np.arange(past + horizon)[None] - past
  front = 1 / (1 + np.exp(-(t - arrival[:, None]) / 3.0))
  pressure = -np.gradient(front, axis=1) * 5 + 0.2 * rng.normal(size=front.shape)
  humidity = front + 0.2 * rng.normal(size=front.shape)
  temp = -front + 0.3 * rng.normal(size=front.shape)
  x = np.stack([pressure, humidity, temp], -1)[:, :past]
  y = (front[:, past:] + 0.1 * rng.normal(size=(rows, horizon)) > 0.5).astype(np.float32)
  return x.astype(np.float32), y[..., None]


# --- Losses as the threads write them. -------------------------------------------------------


def margin_loss(y, lengths):
  """CapsNet's margin loss: T max(0, 0.9 - |v|)^2 + 0.5 (1 - T) max(0, |v| - 0.1)^2."""
  t = tf.one_hot(tf.cast(tf.reshape(y, [-1]), tf.int32), tf.shape(lengths)[-1])
  lengths = tf.cast(lengths, tf.float32)
  loss = t * tf.square(tf.nn.relu(0.9 - lengths)) + 0.5 * (1 - t) * tf.square(
      tf.nn.relu(lengths - 0.1))
  return tf.reduce_mean(tf.reduce_sum(loss, -1))


def iou_loss(epsilon):
  """UnitBox's IoU loss, -log(IoU) of (x1, y1, x2, y2) boxes; `epsilon` added to the IoU (0:
  as the thread wrote it: a box that misses its target has IoU 0 and log(0) = -inf)."""

  def loss(t, p):
    p = tf.cast(p, tf.float32)
    iw = tf.nn.relu(tf.minimum(p[:, 2], t[:, 2]) - tf.maximum(p[:, 0], t[:, 0]))
    ih = tf.nn.relu(tf.minimum(p[:, 3], t[:, 3]) - tf.maximum(p[:, 1], t[:, 1]))
    inter = iw * ih
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    iou = inter / (area(p) + area(t) - inter)
    return -tf.reduce_mean(tf.math.log(iou + epsilon))

  return loss


def crf_loss(crf_layer, log_space, seq_len=64):
  """The negative log-likelihood of the gold IO tags under the linear-chain CRF of `crf_layer`:
  log Z - score(gold). Z by the forward algorithm in probability space, alpha_t = (alpha_{t-1}
  @ exp(A)) * exp(u_t) (as the thread wrote it: overflows once the path scores pass ~88), or,
  with `log_space`, by logsumexp."""

  def loss(y, s):
    s = tf.reshape(tf.cast(s, tf.float32), (-1, seq_len))
    u = tf.stack([tf.zeros_like(s), s], axis=-1)  # (batch, T, 2): outside 0, inside s.
    a = crf_layer.transitions
    tags = tf.reshape(tf.cast(y, tf.int32), (-1, seq_len))
    gold = tf.reduce_sum(s * tf.cast(tags, tf.float32), -1) + tf.reduce_sum(
        tf.gather_nd(a, tf.stack([tags[:, :-1], tags[:, 1:]], -1)), -1)
    if log_space:
      alpha = u[:, 0]
      for t in range(1, seq_len):
        alpha = tf.reduce_logsumexp(alpha[:, :, None] + a[None], axis=1) + u[:, t]
      log_z = tf.reduce_logsumexp(alpha, -1)
    else:
      alpha, ea = tf.exp(u[:, 0]), tf.exp(a)
      for t in range(1, seq_len):
        alpha = tf.matmul(alpha, ea) * tf.exp(u[:, t])
      log_z = tf.math.log(tf.reduce_sum(alpha, -1))
    return tf.reduce_mean(log_z - gold) / seq_len

  return loss


def listnet_loss(stable):
  """ListNet's top-one cross-entropy between softmax(relevance) and softmax(scores): naively
  exp(v) / sum(exp(v)) (as the thread wrote it), or, `stable`, tf.nn.softmax / log_softmax."""

  def loss(rel, scores):
    scores = tf.cast(scores, tf.float32)
    if stable:
      return -tf.reduce_mean(tf.reduce_sum(
          tf.nn.softmax(rel) * tf.nn.log_softmax(scores), -1))
    p_true = tf.exp(rel) / tf.reduce_sum(tf.exp(rel), -1, keepdims=True)
    p_pred = tf.exp(scores) / tf.reduce_sum(tf.exp(scores), -1, keepdims=True)
    return -tf.reduce_mean(tf.reduce_sum(p_true * tf.math.log(p_pred), -1))

  return loss


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind3_grad_sum_pooling_deep_sets', 'exploding_gradients', 'deep_sets',
     doors=('trainer', 'fit'), steps=150, citation='cvignac/SMP#3; juho-lee/set_transformer#4')
def _(seed, cured=False):
  """A Deep Sets regressor of sets of 100 meter readings whose set pooling is the plain sum (as
  in the paper's rho(sum phi(x))): the pooled features and the gradients of phi scale with the
  set size, the first SGD steps (0.002, momentum 0.9, a rate that trains sets of 20) overshoot and
  the loss explodes to inf and NaN within a few steps. cvignac/SMP#3 (NaN loss in a permutation-
  invariant net: "NaNs usually arise when the activations explode", summed aggregations "and no
  normalization"); juho-lee/set_transformer#4 (the Deep Sets baseline as rho(sum(phi(x)))).
  Cured: mean pooling."""
  x, y = meter_sets(seed)
  return cases.Setup(deep_sets(seed, pooling='mean' if cured else 'sum'),
                     keras.optimizers.SGD(0.002, momentum=0.9), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind3_lr_adam_convlstm_clips', 'learning_rate', 'conv_lstm', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#4066; skorch-dev/skorch#468')
def _(seed, cured=False):
  """A ConvLSTM2D classifying 16-frame clips of drifting digits, trained with Adam at 0.3 (a
  rate meant for SGD): the first steps throw the gates into saturation, the loss sits at
  log(10) = 2.30 and the accuracy at chance for the whole run. keras-team/keras#4066 (the net
  "locks into a situation where it only predicts a single class and accuracy fixes at 0.1", loss
  "stucked at 2.304"; Adam with its default 0.001 learns); skorch-dev/skorch#468 (Adam instead of
  Adadelta at its rate: accuracy ~0.1; "for Adam, try to use a much smaller learning rate").
  Cured: Adam 2e-3."""
  x, y = drifting_digits(seed)
  return cases.Setup(conv_lstm(seed), keras.optimizers.Adam(2e-3 if cured else 0.3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind3_lr_sgd_efficientnet_v2', 'learning_rate', 'efficientnet_v2_b0', doors=('fit',),
     steps=100, citation='PaddlePaddle/PaddleDetection#1946; tensorflow/models#9151')
def _(seed, cured=False):
  """keras.applications EfficientNetV2B0 (weights=None) on the 32x32 digits with SGD + momentum
  at a learning rate copied from a multi-GPU, large-batch config (1.0 at batch 32): the loss
  rises and is NaN within a few dozen steps. PaddlePaddle/PaddleDetection#1946 (EfficientNet:
  the loss falls, then "突然就变为nan"; the config's rate was for 8 GPUs, a smaller rate fixed
  it); tensorflow/models#9151 (EfficientDet loss=nan: "learning rate is too high for your batch
  size. Try dividing LR by 10 or 100"; "Dividing LR by 10 seems to solve it").
  Cured: SGD 0.05 with momentum."""
  return cases.Setup(efficientnet_v2_b0(seed),
                     keras.optimizers.SGD(0.05 if cured else 1.0, momentum=0.9),
                     'sparse_categorical_crossentropy',
                     data.digits_stream(seed, scale=255.0), 'classes')


# --- initialisation --------------------------------------------------------------------------


@add('blind3_init_rbf_centres_off_data', 'initialisation', 'rbf_net', doors=('trainer',),
     steps=150, citation='tensorflow/tensorflow#50584; PetraVidnerova/rbf_keras#6')
def _(seed, cured=False):
  """An RBF network on raw sensor readings (about 30 per channel) whose centres start from the
  default random_normal initializer, near 0: every unit's exp(-beta |x - c|^2) underflows to 0
  on every input, the gradients of the centres and of the head's kernel are exactly 0, and the
  net never leaves the constant prediction (the loss stays at the prior's entropy).
  tensorflow/tensorflow#50584 ("RBF Custom Layer in Tensorflow can not learn the centers (mu)
  parameters", mu from random_normal_initializer); PetraVidnerova/rbf_keras#6 (centres from a
  default initializer: "you may need to add Normalization ... to have initialized the centers
  correctly"; #5: centres from the data "usually helps"). Cured: centres from random rows."""
  x, y = sensor_classes(seed)
  centres = InitCentresFromRows(x, seed) if cured else 'random_normal'
  return cases.Setup(rbf_net(seed, centres=centres), keras.optimizers.Adam(1e-2),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind3_div_unitbox_log_iou_no_overlap', 'division_or_log', 'box_regressor',
     doors=('fit',), seeds=(0, 1), steps=150,
     citation='zhimingluo/UnitBox_TF#6; YunYang1994/tensorflow-yolov3#529')
def _(seed, cured=False):
  """A single-object box regressor (digits placed on a 32x32 canvas) trained with UnitBox's IoU
  loss -log(IoU) as written in the thread, without an epsilon: a predicted box that misses its
  target has IoU 0 and -log(0) = inf; the loss is inf on such batches and the gradients NaN.
  zhimingluo/UnitBox_TF#6 (the IoU loss reproduced: "However I got NaN"; the reference code adds
  an epsilon inside the log); YunYang1994/tensorflow-yolov3#529 (degenerate boxes: "iou or giou
  would is nan"). Cured: -log(IoU + 1e-6)."""
  x, boxes = placed_digits(seed)
  return cases.Setup(box_regressor(seed), keras.optimizers.Adam(1e-3),
                     iou_loss(1e-6 if cured else 0.0),
                     data.stream(x, boxes, batch=32, seed=seed), 'regression')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind3_exp_crf_probability_space_forward', 'softmax_overflow', 'bilstm_crf',
     doors=('trainer', 'fit'), steps=200,
     citation='candle-org/MindAct#171; apache/mxnet#13329; allanj/pytorch_neural_crf#4')
def _(seed, cured=False):
  """A BiLSTM-CRF chunker (IO tags, 64 tokens) whose partition function is computed by the
  forward algorithm in probability space, alpha_t = (alpha_{t-1} @ exp(A)) * exp(u_t): as the
  emission scores grow with training, Z passes float32's range (e^88), log Z is inf, the loss inf
  and the gradients NaN. candle-org/MindAct#171 ("Bi-LSTM+CRF model loss appears "nan""; "use
  `logsumexp` to avoid overflow problem"); apache/mxnet#13329 (the lstm_crf example: "the first
  "logsumexp" may be replaced with "sumexp"" -- "the new result is numerical stability" after
  going back); allanj/pytorch_neural_crf#4 (the CRF loss through exp then log "generates "nan"").
  Cured: the forward algorithm in log space (logsumexp)."""
  x, y = tagged_tokens(seed)
  model = bilstm_crf(seed)
  return cases.Setup(model, keras.optimizers.Adam(5e-3),
                     crf_loss(model.get_layer('crf'), log_space=cured),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind3_exp_listnet_percentage_relevance', 'softmax_overflow', 'listnet', doors=('trainer',),
     steps=150, jit=True,
     citation='shiba24/learning2rank#22; huggingface/sentence-transformers#4012; '
              'dotnet/machinelearning#3648')
def _(seed, cured=False):
  """A ListNet ranker (XLA) whose top-one loss computes softmax(relevance) as exp(v) / sum(exp(v));
  the editorial relevance is a score of 0-100, and exp(100) overflows float32: inf / inf = NaN
  in the target distribution, the loss is NaN from the first batch. shiba24/learning2rank#22
  ("ListNet predict nan", the top-k probabilities as np.exp(...) / np.sum(np.exp(...)));
  huggingface/sentence-transformers#4012 (a listwise loss that "exponentiates scores directly"
  overflows for large scores; fixed with log-sum-exp); dotnet/machinelearning#3648 (a softmax that
  "returns NaN even for scores of ~90"). Cured: tf.nn.softmax / log_softmax (max subtracted)."""
  x, rel = ranked_lists(seed)
  top = np.argmax(rel, axis=1).astype(np.int32)
  model = listnet(seed)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), listnet_loss(stable=cured),
                     data.stream(x, rel, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(x, top, batch=32, seed=seed))


# --- precision -------------------------------------------------------------------------------


@add('blind3_fp16_bilinear_gram_pooling', 'precision', 'bilinear_cnn', doors=('trainer', 'fit'),
     steps=150, precision='mixed_float16',
     citation='NVIDIA/apex#402; pytorch/pytorch#3651')
def _(seed, cured=False):
  """A bilinear CNN (Gram pooling: sum over positions of f f^T) of the 16x16 digits as raw pixel
  values 0-255, under mixed_float16: the Gram sums pass float16's 65504, inf / inf in the L2
  normalisation is NaN and the loss is NaN from the first batch (in float32 it trains).
  NVIDIA/apex#402 ("bmm for style loss": the Gram matrix under mixed precision "will always give
  NaN"; "if you are expecting large values outside the valid range of FP16" run it in FP32);
  pytorch/pytorch#3651 (the same Gram matrix in half precision). Cured: the pooling in float32."""
  return cases.Setup(bilinear_cnn(seed, float32_pool=cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False, scale=255.0), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind3_input_degenerate_cloud_pointnet', 'bad_input', 'pointnet', doors=('trainer', 'fit'),
     seeds=(0, 1), steps=200,
     citation='charlesq34/pointnet#239; fxia22/pointnet.pytorch#58')
def _(seed, cured=False):
  """A PointNet classifying point clouds centred and scaled to the unit sphere in preprocessing;
  0.4 % of the scans failed and came back as zeros (padding only), whose largest norm is 0:
  0 / 0 puts NaN clouds in the data; the batch holding one gives NaN gradients and the weights turn NaN (on CPU
  the global max pooling can pass finite values, so the logged loss may stay finite and flat
  near log(5) while the model's outputs are non-finite). charlesq34/pointnet#239 and
  fxia22/pointnet.pytorch#58 ("Getting NAN after few iterations": "There were NAN's in the input
  to the network. These NaN's were generated after the Zero Mean and Normalization step for one
  model only"; removed, it trained). Cured: the scale guarded (at least 1e-6)."""
  clouds, y, bad = point_clouds(seed, degenerate=0.004)
  model = pointnet(seed)
  clean = data.stream(normalise_clouds(clouds[~bad], True), y[~bad], batch=32, seed=seed)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(normalise_clouds(clouds, cured), y, batch=32, seed=seed),
                     'classes', eval_data=clean)


@add('blind3_input_inf_debt_ratio_tabnet', 'bad_input', 'tabnet_lite', doors=('fit',),
     seeds=(0, 1), steps=200,
     citation='dreamquark-ai/tabnet#192; dreamquark-ai/tabnet#199; mihaidusmanu/d2-net#78')
def _(seed, cured=False):
  """A TabNet-style credit model whose debt-to-income feature is debt / income from numpy
  preprocessing; 0.2 % of the applicants reported an income of 0, so the column holds inf, the
  input BatchNorm turns the batch holding one into NaN and the loss is NaN there.
  dreamquark-ai/tabnet#192 (a fit on data with NaN or infinite values fails far from its cause;
  #199: "Checks for nans and infinite values to through clear error"); mihaidusmanu/d2-net#78 ("the
  problem caused by dividing by zero"). Cured: the ratio over max(income, 1)."""
  base, debt, y, income = loan_table(seed, zero_income=0.002)
  with np.errstate(divide='ignore', invalid='ignore'):
    ratio = debt / (np.maximum(income, 1.0) if cured else income)
  x = np.concatenate([base, ratio[:, None]], 1).astype(np.float32)
  ok = income > 0
  model = tabnet_lite(seed)
  return cases.Setup(model, keras.optimizers.Adam(2e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=64, seed=seed), 'binary_logit',
                     eval_data=data.stream(x[ok], y[ok], batch=64, seed=seed))


# --- transient -------------------------------------------------------------------------------


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind3_mismatch_sigmoid_from_logits_seq2seq', 'loss_output_mismatch', 'gru_seq2seq',
     doors=('trainer', 'fit'), steps=200,
     citation='lsdefine/attention-is-all-you-need-keras#12; google-research/google-research#367')
def _(seed, cured=False):
  """A GRU encoder-decoder forecasting rain in each of the next six hours whose decoder ends in a
  sigmoid, trained with BinaryCrossentropy(from_logits=True): the probabilities are squashed a
  second time, the loss cannot go below ~0.5 and stalls there. lsdefine/attention-is-all-you-need-
  keras#12 ("when i use softmax ... the loss can not down"; "The tf loss contains a softmax. In
  fact, you do softmax twice"); google-research/google-research#367 (a softmax output with a
  from_logits=True loss lowers accuracy: "return_softmax has to be equal zero").
  Cured: from_logits=False."""
  x, y = rain_windows(seed)
  return cases.Setup(gru_seq2seq(seed), keras.optimizers.Adam(3e-3),
                     BCE(from_logits=not cured), data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')
