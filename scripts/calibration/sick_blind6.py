"""A sixth blind set of sick scenarios (the 'blind6' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind5.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (a Wide ResNet without normalisation, an N-BEATS-lite
forecaster, a TabTransformer, a highway-stacked LSTM, a gated-convolution (GLU) language model,
a conditional VAE, an InceptionTime-lite series classifier, a Siamese BiGRU with attention
pooling, a deep state-space RNN, an attention U-Net, a DeepFM). Each builder takes `cured`: the
same run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was
checked with plain Keras `fit`: the sick run shows the reported symptom, the cured twin passes
runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data

BLIND6 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed



def add(name, expected, arch, **fields):
  """`BLIND6.add` with split='blind6'."""
  return BLIND6.add(name, expected, arch, split='blind6', **fields)


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


def wide_resnet(seed, *, size=16, classes=10, width=48, blocks=6, norm=False):
  """A Wide ResNet-lite (Zagoruyko & Komodakis): a stem Conv2D(width, 3x3), `blocks` wide
  basic blocks (two 3x3 convolutions of `width` channels, He init, identity shortcut; with
  `norm` pre-activation BatchNormalization before each ReLU as the paper has, without it none),
  a 2x2 pool after the third, global average, Dense(classes) logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(width, 3, padding='same', kernel_initializer='he_normal')(inputs)
  for i in range(blocks):
    b = h
    for _ in range(2):
      if norm:
        b = L.BatchNormalization()(b)
      b = L.Conv2D(width, 3, padding='same', kernel_initializer='he_normal')(L.ReLU()(b))
    h = L.Add()([h, b])
    if i == 2:
      h = L.MaxPooling2D()(h)
  if norm:
    h = L.BatchNormalization()(h)
  h = L.GlobalAveragePooling2D()(L.ReLU()(h))
  return keras.Model(inputs, L.Dense(classes)(h), name='wide_resnet')


class NBeatsBlock(L.Layer):
  """A generic N-BEATS block (Oreshkin et al.): four Dense(width, ReLU) layers, then linear
  backcast (the window) and forecast (the horizon) heads."""

  def __init__(self, width, window, horizon, **kwargs):
    super().__init__(**kwargs)
    self.fc = [L.Dense(width, activation='relu') for _ in range(4)]
    self.back = L.Dense(window)
    self.fore = L.Dense(horizon)

  def call(self, x):
    h = x
    for layer in self.fc:
      h = layer(h)
    return self.back(h), self.fore(h)


def nbeats_lite(seed, *, window=48, horizon=8, blocks=12, width=128):
  """An N-BEATS-lite forecaster: `blocks` `NBeatsBlock`s in a doubly residual stack (each block
  reads the residual of the window left by the blocks before it, x <- x - backcast, and the
  forecasts of all blocks are summed)."""
  _seed(seed)
  inputs = keras.Input((window,))
  x, forecast = inputs, None
  for _ in range(blocks):
    back, fore = NBeatsBlock(width, window, horizon)(x)
    x = L.Subtract()([x, back])
    forecast = fore if forecast is None else L.Add()([forecast, fore])
  return keras.Model(inputs, forecast, name='nbeats_lite')


def tab_transformer(seed, *, fields=8, vocab=10, numeric=4, dim=16, depth=2):
  """A TabTransformer (Huang et al.): each categorical column embedded (dim 16) plus a column
  embedding, `depth` post-norm Transformer blocks (MultiHeadAttention 2 heads, ReLU MLP) over the
  columns, the contextual embeddings flattened and concatenated with the LayerNorm'd numeric
  columns, an MLP 64 (ReLU), Dense(1): the logit."""
  _seed(seed)
  cats = keras.Input((fields,), dtype='int32')
  nums = keras.Input((numeric,))
  offsets = np.arange(fields, dtype=np.int32) * vocab
  e = L.Embedding(fields * vocab, dim)(L.Lambda(lambda t: t + offsets,
                                                output_shape=(fields,))(cats))
  col = L.Embedding(fields, dim)(L.Lambda(
      lambda t: tf.broadcast_to(tf.range(fields), tf.shape(t)), output_shape=(fields,))(cats))
  h = L.Add()([e, col])
  for _ in range(depth):
    h = L.LayerNormalization()(L.Add()([h, L.MultiHeadAttention(2, dim // 2)(h, h)]))
    h = L.LayerNormalization()(L.Add()([h, L.Dense(dim)(L.Dense(4 * dim, activation='relu')(h))]))
  z = L.Concatenate()([L.Flatten()(h), L.LayerNormalization()(nums)])
  z = L.Dense(64, activation='relu')(z)
  return keras.Model([cats, nums], L.Dense(1)(z), name='tab_transformer')


class HighwayGate(L.Layer):
  """A highway connection between stacked recurrent layers (Srivastava et al.; Zhang et al.'s
  highway LSTM): y = T * new + (1 - T) * old, T = sigmoid(W old + b), b initialised to -1 (the
  carry favoured at the start)."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.gate = None

  def build(self, shapes):
    self.gate = L.Dense(shapes[0][-1], activation='sigmoid',
                        bias_initializer=keras.initializers.Constant(-1.0))

  def call(self, inputs):
    old, new = inputs
    t = self.gate(old)
    return t * new + (1.0 - t) * old


def highway_lstm(seed, *, steps=40, units=32, layers=3):
  """A highway LSTM regressor: Dense(units) input projection, `layers` LSTM(units) layers joined
  by `HighwayGate`s, the last state, Dense(1)."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  h = L.Dense(units)(inputs)
  for _ in range(layers):
    h = HighwayGate()([h, L.LSTM(units, return_sequences=True)(h)])
  h = L.Lambda(lambda t: t[:, -1], output_shape=(units,))(h)
  return keras.Model(inputs, L.Dense(1)(h), name='highway_lstm')


class GLUConv(L.Layer):
  """A gated convolutional layer (Dauphin et al.): h = (X * W + b) x sigmoid(X * V + c), causal
  1-D convolutions of width 3, a residual connection around it."""

  def __init__(self, channels, init, **kwargs):
    super().__init__(**kwargs)
    self.a = L.Conv1D(channels, 3, padding='causal', kernel_initializer=init)
    self.b = L.Conv1D(channels, 3, padding='causal', kernel_initializer=init)

  def call(self, x):
    return x + self.a(x) * tf.sigmoid(self.b(x))


def gated_cnn_lm(seed, *, seq_len=16, vocab=64, classes=8, dim=64, layers=4,
                 init='glorot_uniform'):
  """A gated-convolution language-model encoder: Embedding(vocab, 64), `layers` `GLUConv`s
  (kernels initialised with `init`), the last position's state, Dense(classes) logits."""
  _seed(seed)
  tokens = keras.Input((seq_len,), dtype='int32')
  h = L.Embedding(vocab, dim)(tokens)
  for _ in range(layers):
    h = GLUConv(dim, init)(h)
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(tokens, L.Dense(classes, kernel_initializer=init)(h), name='gated_cnn_lm')


class Reparameterize(L.Layer):
  """z = mu + exp(logvar / 2) * eps in training, mu in inference."""

  def call(self, inputs, training=False):
    mu, logvar = inputs
    if not training:
      return mu
    return mu + tf.exp(0.5 * logvar) * tf.random.normal(tf.shape(mu))


def cvae(seed, *, pixels=64, classes=10, latent=4):
  """A conditional VAE (Sohn et al.): the encoder (image, one-hot class) -> MLP 128 (ReLU) ->
  mu, logvar (4-d), `Reparameterize`, the decoder (z, class) -> MLP 128 (ReLU) ->
  Dense(pixels, sigmoid): the Bernoulli means of the reconstruction."""
  _seed(seed)
  image = keras.Input((pixels,))
  label = keras.Input((classes,))
  h = L.Dense(128, activation='relu')(L.Concatenate()([image, label]))
  z = Reparameterize()([L.Dense(latent)(h), L.Dense(latent)(h)])
  d = L.Dense(128, activation='relu')(L.Concatenate()([z, label]))
  return keras.Model([image, label], L.Dense(pixels, activation='sigmoid')(d), name='cvae')


def bernoulli_nll(safe):
  """The reconstruction term of the VAE loss written out, -mean(x log p + (1 - x) log(1 - p));
  `safe`: p clipped to [1e-7, 1 - 1e-7] first (the thread's remedy)."""

  def loss(x, p):
    p = tf.cast(p, tf.float32)
    if safe:
      p = tf.clip_by_value(p, 1e-7, 1.0 - 1e-7)
    return -tf.reduce_mean(x * tf.math.log(p) + (1.0 - x) * tf.math.log(1.0 - p))

  return loss


def inception_time(seed, *, steps=64, channels=3, classes=5, filters=16, modules=3):
  """An InceptionTime-lite (Fawaz et al.) without BatchNormalization: `modules` inception
  modules (a 1x1 bottleneck, convolutions of widths 9, 19 and 39 and a max-pool branch,
  concatenated, ReLU), a residual 1x1 shortcut, global average, Dense(classes) logits."""
  _seed(seed)
  inputs = keras.Input((steps, channels))
  h = inputs
  for _ in range(modules):
    b = L.Conv1D(filters, 1, padding='same', use_bias=False)(h)
    branches = [L.Conv1D(filters, k, padding='same', use_bias=False)(b) for k in (9, 19, 39)]
    branches.append(L.Conv1D(filters, 1, padding='same', use_bias=False)(
        L.MaxPooling1D(3, strides=1, padding='same')(h)))
    h = L.ReLU()(L.Add()([L.Concatenate()(branches),
                          L.Conv1D(4 * filters, 1, padding='same')(h)]))
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='inception_time')


def naive_softmax_ce(stable):
  """Cross-entropy on a softmax written out, exp(l) / sum(exp(l)), against integer labels;
  `stable`: the max logit subtracted first and the log taken through log-softmax (the thread's
  remedy)."""

  def loss(y, logits):
    logits = tf.cast(logits, tf.float32)
    t = tf.one_hot(tf.cast(tf.reshape(y, [-1]), tf.int32), tf.shape(logits)[-1])
    if stable:
      return -tf.reduce_mean(tf.reduce_sum(t * tf.nn.log_softmax(logits), -1))
    e = tf.exp(logits)
    p = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    return -tf.reduce_mean(tf.math.log(tf.reduce_sum(t * p, -1)))

  return loss


class MaskedAttentionPool(L.Layer):
  """Additive attention pooling over a padded sequence: scores = v . tanh(W h); the padding
  pushed out of the softmax by adding (1 - mask) * `fill` (computed in the layer's compute
  dtype), softmax over the steps, sum of the weighted states."""

  def __init__(self, units, fill, **kwargs):
    super().__init__(**kwargs)
    self.fill = fill
    self.proj = L.Dense(units, activation='tanh')
    self.score = L.Dense(1, use_bias=False)

  def call(self, inputs):
    h, mask = inputs
    s = self.score(self.proj(h))[..., 0]
    s = s + (1.0 - tf.cast(mask, s.dtype)) * tf.cast(self.fill, s.dtype)
    a = tf.nn.softmax(s, axis=-1)
    return tf.reduce_sum(a[..., None] * h, axis=1)


def siamese_bigru(seed, *, seq_len=12, vocab=50, dim=32, fill=-1e9):
  """A Siamese BiGRU for question pairs: a shared encoder (Embedding(vocab, 32), a bidirectional
  GRU(32) over the tokens, `MaskedAttentionPool` with the padding mask, id 0 = padding), the two
  codes compared as [|a - b|, a * b] -> Dense(32, ReLU) -> Dense(1, sigmoid) in float32: the
  probability that the pair is a duplicate."""
  _seed(seed)
  tok = keras.Input((seq_len,), dtype='int32')
  mask = L.Lambda(lambda t: tf.cast(t > 0, 'float32'), output_shape=(seq_len,))(tok)
  h = L.Bidirectional(L.GRU(dim, return_sequences=True))(L.Embedding(vocab, dim)(tok))
  encoder = keras.Model(tok, MaskedAttentionPool(dim, fill)([h, mask]), name='encoder')
  a_in = keras.Input((seq_len,), dtype='int32')
  b_in = keras.Input((seq_len,), dtype='int32')
  a, b = encoder(a_in), encoder(b_in)
  diff = L.Lambda(lambda t: tf.abs(t[0] - t[1]))([a, b])
  prod = L.Multiply()([a, b])
  h = L.Dense(32, activation='relu')(L.Concatenate()([diff, prod]))
  out = L.Dense(1, activation='sigmoid', dtype='float32')(h)
  return keras.Model([a_in, b_in], out, name='siamese_bigru')


class StateSpaceCell(L.Layer):
  """A deep state-space (Kalman-style) cell: a latent state with a learned transition and an
  input (control) matrix, z_t = tanh(A z_{t-1} + B x_t + b); the emission is a Dense head."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = units
    self.output_size = units

  def build(self, shape):
    self.a = self.add_weight(shape=(self.units, self.units), initializer='orthogonal', name='A')
    self.b = self.add_weight(shape=(shape[-1], self.units), initializer='glorot_uniform',
                             name='B')
    self.c = self.add_weight(shape=(self.units,), initializer='zeros', name='bias')

  def call(self, x, states):
    z = tf.tanh(tf.matmul(states[0], self.a) + tf.matmul(x, self.b) + self.c)
    return z, [z]


def state_space_rnn(seed, *, steps=48, sensors=3, units=32):
  """A deep state-space regressor: `StateSpaceCell`(32) over multichannel sensor readings, the
  emission MLP 32 (ReLU) -> Dense(1) of the last state: the next-hour reading forecast."""
  _seed(seed)
  inputs = keras.Input((steps, sensors))
  z = L.RNN(StateSpaceCell(units))(inputs)
  return keras.Model(inputs, L.Dense(1)(L.Dense(32, activation='relu')(z)),
                     name='state_space_rnn')


class _Calls:
  """A training-call counter kept out of Keras's tracking (the fault leaves no state in the
  model's weights)."""

  def __init__(self):
    with tf.init_scope():
      self.n = tf.Variable(0, dtype=tf.int64, trainable=False)


class MisfiringOp(L.Layer):
  """The identity, except that at its `at`-th training call a few activations come back NaN (a
  kernel misfiring once); never again."""

  def __init__(self, at, **kwargs):
    super().__init__(**kwargs)
    self.at = at
    self.calls = _Calls()

  def call(self, x, training=False):
    if not training or self.at is None:
      return x
    n = self.calls.n.assign_add(1)
    flat = tf.reshape(x, [-1])
    spots = tf.equal(tf.range(tf.size(flat)) % 1009, 7)
    hit = tf.logical_and(spots, tf.equal(n, self.at))
    return tf.reshape(tf.where(hit, tf.constant(np.nan, x.dtype), flat), tf.shape(x))


class AttentionGate(L.Layer):
  """An additive attention gate (Oktay et al.): alpha = sigmoid(psi(ReLU(W_x x + W_g g))), the
  skip connection x scaled by alpha; g is the coarser gating signal, upsampled to x's size."""

  def __init__(self, inter, **kwargs):
    super().__init__(**kwargs)
    self.wx = L.Conv2D(inter, 1)
    self.wg = L.Conv2D(inter, 1)
    self.psi = L.Conv2D(1, 1, activation='sigmoid')
    self.up = L.UpSampling2D()

  def call(self, inputs):
    x, g = inputs
    alpha = self.psi(tf.nn.relu(self.wx(x) + self.up(self.wg(g))))
    return x * alpha


def attention_unet(seed, *, size=16, fault_at=None):
  """An attention U-Net-lite: encoder Conv 16, 32 (3x3, ReLU, BN) with a 2x2 pool between,
  a bottleneck Conv 64; the decoder upsamples, gates the skip with an `AttentionGate`,
  concatenates and convolves (32), a Conv2D(1, 1x1, sigmoid): the foreground mask; `fault_at`:
  a `MisfiringOp` in the bottleneck."""
  _seed(seed)

  def conv(t, n):
    return L.ReLU()(L.BatchNormalization()(L.Conv2D(n, 3, padding='same')(t)))

  inputs = keras.Input((size, size, 1))
  e1 = conv(conv(inputs, 16), 16)
  e2 = conv(L.MaxPooling2D()(e1), 32)
  bott = MisfiringOp(fault_at)(conv(e2, 32))
  up = L.UpSampling2D()(bott)
  skip = AttentionGate(8)([e1, bott])
  d = conv(L.Concatenate()([up, skip]), 16)
  out = L.Conv2D(1, 1, activation='sigmoid')(d)
  return keras.Model(inputs, L.Reshape((size * size,))(out), name='attention_unet')


class FMInteraction(L.Layer):
  """The factorisation-machine second-order term over field embeddings (Rendle):
  0.5 * sum_k ((sum_i v_ik)^2 - sum_i v_ik^2)."""

  def call(self, v):
    return 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(v, 1)) - tf.reduce_sum(tf.square(v), 1),
                               axis=-1, keepdims=True)


def deepfm(seed, *, fields=8, vocab=20, k=8, head='sigmoid'):
  """A DeepFM CTR model (Guo et al.): per field a shared embedding (k = 8) and a first-order
  weight; the FM part (first order + `FMInteraction`) and the deep part (the embeddings
  flattened -> MLP 64-32 ReLU -> Dense(1)) summed; then `head` ('sigmoid' or None)."""
  _seed(seed)
  cats = keras.Input((fields,), dtype='int32')
  offsets = np.arange(fields, dtype=np.int32) * vocab
  ids = L.Lambda(lambda t: t + offsets, output_shape=(fields,))(cats)
  v = L.Embedding(fields * vocab, k)(ids)
  first = L.Lambda(lambda t: tf.reduce_sum(t, axis=1), output_shape=(1,))(
      L.Embedding(fields * vocab, 1)(ids))
  deep = L.Dense(1)(L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(
      L.Flatten()(v))))
  logit = L.Add()([first, FMInteraction()(v), deep])
  out = L.Lambda(tf.sigmoid, output_shape=(1,))(logit) if head == 'sigmoid' else logit
  return keras.Model(cats, out, name='deepfm')


# --- Data of this file. -----------------------------------------------------------------------


def seasonal_windows(seed, *, rows=4096, window=48, horizon=8):
  """Windows of seasonal series (a daily-like period of 12, amplitude 1-3, trend and noise,
  per-series level 0-5): (the window, the next `horizon` values)."""
  rng = np.random.RandomState(61000 + seed)
  t = np.arange(window + horizon)[None]
  amp = rng.uniform(1, 3, (rows, 1))
  phase = rng.uniform(0, 2 * np.pi, (rows, 1))
  level = rng.uniform(0, 5, (rows, 1))
  trend = rng.uniform(-0.05, 0.05, (rows, 1))
  s = level + amp * np.sin(2 * np.pi * t / 12 + phase) + trend * t + 0.2 * rng.normal(
      size=(rows, t.shape[1]))
  return s[:, :window].astype(np.float32), s[:, window:].astype(np.float32)


def census_table(seed, *, rows=4096, fields=8, vocab=10, numeric=4):
  """A census-like table: categorical columns (ids 0-9) and numeric columns; the label a
  logistic function of per-category effects, two interactions and the numerics:
  ((categories, numerics), float labels (rows, 1))."""
  rng = np.random.RandomState(62000 + seed)
  cats = rng.randint(0, vocab, (rows, fields)).astype(np.int32)
  nums = rng.normal(size=(rows, numeric)).astype(np.float32)
  effect = rng.normal(size=(fields, vocab))
  z = effect[np.arange(fields)[None], cats].sum(1) / np.sqrt(fields) * 2.0
  z += 1.5 * ((cats[:, 0] % 2) == (cats[:, 1] % 2)) - 0.75 + nums @ rng.normal(size=numeric)
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * z))).astype(np.float32)[:, None]
  return (cats, nums), y


def binary_digits(seed):
  """The digits (8x8) binarised at 0.5 and flattened, with their one-hot labels:
  ((pixels, one-hot), pixels)."""
  x, y = data.digits(size=8, rgb=False)
  pixels = (x.reshape(len(x), 64) > 0.5).astype(np.float32)
  return (pixels, np.eye(10, dtype=np.float32)[y]), pixels


def motion_series(seed, *, rows=2048, steps=64, channels=3, classes=5, scale=40.0):
  """Three-axis motion recordings in raw sensor units (about +-`scale`: gyroscope deg/s, not
  standardised): each class a different frequency and axis mix plus noise: (series, class)."""
  rng = np.random.RandomState(63000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  t = np.arange(steps)[None, :, None]
  freq = (0.03 + 0.04 * y)[:, None, None]
  mix = rng.normal(size=(classes, 1, channels))[y]
  x = scale * (np.sin(2 * np.pi * freq * t + rng.uniform(0, 6.3, (rows, 1, 1))) * mix +
               0.3 * rng.normal(size=(rows, steps, channels)))
  return x.astype(np.float32), y


def question_pairs(seed, *, rows=4096, seq_len=12, vocab=50, topics=10):
  """Question pairs: each question draws most of its words (ids 1-49, 0 padding, lengths 5-12)
  from its topic's vocabulary; duplicates share the topic: ((q1, q2), duplicate (rows, 1))."""
  rng = np.random.RandomState(64000 + seed)

  def question(topic):
    own = 1 + (topic[:, None] * 5 + rng.randint(0, 5, (len(topic), seq_len))) % (vocab - 1)
    other = rng.randint(1, vocab, (len(topic), seq_len))
    q = np.where(rng.rand(len(topic), seq_len) < 0.7, own, other)
    lengths = rng.randint(5, seq_len + 1, len(topic))
    q[np.arange(seq_len)[None] >= lengths[:, None]] = 0
    return q.astype(np.int32)

  t1 = rng.randint(0, topics, rows)
  same = rng.rand(rows) < 0.5
  t2 = np.where(same, t1, (t1 + rng.randint(1, topics, rows)) % topics)
  return (question(t1), question(t2)), same[:, None].astype(np.float32)


def sensor_log(seed, *, rows=2048, steps=48, sensors=3, gaps=0.0, fill=False):
  """Hourly readings of three building sensors (standardised) and the next-hour reading of the
  first: (windows, targets, gap mask). A fraction `gaps` of the windows has a dropout (NaN for
  2-6 hours on one sensor, as a logger exports missing readings); `fill`: the gaps forward
  filled (the thread's remedy: impute before training)."""
  rng = np.random.RandomState(65000 + seed)
  t = np.arange(steps + 1)[None, :, None]
  phase = rng.uniform(0, 2 * np.pi, (rows, 1, sensors))
  s = np.sin(2 * np.pi * t / 24 + phase) + 0.2 * rng.normal(size=(rows, steps + 1, sensors))
  x, y = s[:, :steps].copy(), s[:, steps, :1]
  gapped = rng.rand(rows) < gaps
  for r in np.where(gapped)[0]:
    start, length, ch = rng.randint(1, steps - 6), rng.randint(2, 7), rng.randint(sensors)
    x[r, start:start + length, ch] = x[r, start - 1, ch] if fill else np.nan
  return x.astype(np.float32), y.astype(np.float32), gapped


def blob_masks(seed, *, rows=1536, size=16):
  """Noisy images of one bright disc (radius 2-5) on a textured background, and its mask
  (flattened, float): (images, masks)."""
  rng = np.random.RandomState(66000 + seed)
  yy, xx = np.mgrid[:size, :size]
  cy, cx = rng.randint(4, size - 4, (2, rows))
  r = rng.uniform(2, 5, rows)
  mask = ((yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2
          <= r[:, None, None] ** 2).astype(np.float32)
  img = 0.8 * mask + 0.35 * rng.normal(size=mask.shape)
  return img[..., None].astype(np.float32), mask.reshape(rows, -1)


def click_logs(seed, *, rows=4096, fields=8, vocab=20, k=4):
  """Click logs: categorical fields (ids 0-19); a click drawn from a logistic model with
  first-order and factorised pairwise effects: (fields, float clicks (rows, 1))."""
  rng = np.random.RandomState(67000 + seed)
  cats = rng.randint(0, vocab, (rows, fields)).astype(np.int32)
  w = rng.normal(size=(fields, vocab)) * 0.5
  v = rng.normal(size=(fields, vocab, k)) * 0.5
  e = v[np.arange(fields)[None], cats]
  z = w[np.arange(fields)[None], cats].sum(1) + 0.5 * (
      np.square(e.sum(1)) - np.square(e).sum(1)).sum(-1)
  z = (z - z.mean()) / z.std() * 4.0
  y = (rng.rand(rows) < 1 / (1 + np.exp(-z))).astype(np.float32)[:, None]
  return cats, y


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind6_grad_wide_resnet_without_bn', 'exploding_gradients', 'wide_resnet',
     doors=('trainer', 'fit'), steps=150,
     citation='kekmodel/MPL-pytorch#24; barisozmen/deepaugment#18; AlexeyAB/darknet#4135')
def _(seed, cured=False):
  """A Wide ResNet-lite (six wide basic blocks of 48 channels, He init) with its BatchNorm
  layers left out, trained on digits with the WRN paper's SGD + momentum 0.9 at 0.1: each
  residual sum adds the variance of its branch, the logits of the first batch are large, the
  first updates blow up and the loss jumps to about 2e23 by the fifth step; the model never
  trains (error stays at chance). kekmodel/MPL-pytorch#24 (a WideResNet whose last BN was
  commented out: "the loss in the model will become NaN after few steps (in a high learning
  rate)"); barisozmen/deepaugment#18 (wrn-16-8: the loss suddenly NaN; clipnorm=1 suggested);
  AlexeyAB/darknet#4135 (batch_normalize=0: "the loss always tend to be NAN"). Cured:
  pre-activation BatchNormalization in every block and clipnorm=1."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(wide_resnet(seed, norm=cured),
                     keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=1.0 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind6_grad_nbeats_doubly_residual_stack', 'exploding_gradients', 'nbeats_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='business-science/modeltime.gluonts#26; awslabs/gluonts#994')
def _(seed, cured=False):
  """An N-BEATS-lite forecaster (twelve generic blocks of four Dense(128, ReLU) layers in a
  doubly residual stack, the forecasts of all blocks summed) trained on seasonal windows with
  SGD + momentum 0.9 at 0.01: the summed forecasts and the chained backcast residuals amplify
  the gradient through the stack, the loss reaches about 3e26 and is NaN by the fourth step.
  business-science/modeltime.gluonts#26 (NBEATS: "Batch [2] of Epoch[0] gave NaN loss"; a
  commenter: the same with DeepAR "was due to exploding gradients and I had to adjust the
  clip_gradient"); awslabs/gluonts#994 ("NBEATS doesn't work properly" where other estimators
  do). Cured: clipnorm=1."""
  x, y = seasonal_windows(seed)
  return cases.Setup(nbeats_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9,
                                          clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind6_lr_tab_transformer_adam_too_high', 'learning_rate', 'tab_transformer',
     doors=('trainer', 'fit'), steps=150,
     citation='YiwuZhong/SGG_from_NLS#1; naver-ai/rope-vit#16; CharlieDinh/pFedMe#11')
def _(seed, cured=False):
  """A TabTransformer (two Transformer blocks over eight categorical column embeddings,
  LayerNorm'd numerics, an MLP head) on a census-like binary table, trained with Adam at 0.1:
  the first updates overshoot (the loss jumps from 0.9 to about 5), then wanders and the model
  ends no better than the best constant answer (error 0.34 against 0.38).
  YiwuZhong/SGG_from_NLS#1 (a Transformer's loss NaN: "common when using Transformer ... One of
  the solution is to lower the learning rate ... by a factor of 0.5 or 0.1"); naver-ai/rope-vit#16
  ("NaN loss might mean the learning rate setting is too big"); CharlieDinh/pFedMe#11 ("the
  training loss is nan when the learning rate is large"). Cured: Adam at 1e-3."""
  (c, n), y = census_table(seed)
  return cases.Setup(tab_transformer(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     BCE(from_logits=True), data.stream((c, n), y, batch=32, seed=seed),
                     'binary_logit')


@add('blind6_lr_highway_lstm_sgd_too_high', 'learning_rate', 'highway_lstm',
     doors=('trainer', 'fit'), steps=150,
     citation='jaungiers/LSTM-Neural-Network-for-Time-Series-Prediction#77; '
              'alexander-rakhlin/CNN-for-Sentence-Classification-in-Keras#7; keras-team/keras#7375')
def _(seed, cured=False):
  """A highway LSTM (three LSTM(32) layers joined by highway gates) regressing the mean of
  40-step random walks with SGD + momentum 0.9 at 1.0: the second update overshoots, the loss is
  about 6e24 at step 5 and NaN from step 6. jaungiers/LSTM-Neural-Network-for-Time-Series-
  Prediction#77 (an LSTM's loss turns nan; the asker wants to decrease the learning rate;
  "K.set_value(model.optimizer.lr, 0.0001)"); alexander-rakhlin/CNN-for-Sentence-Classification-
  in-Keras#7 (loss nan from epoch 2: "Maybe learning rate is too big"); keras-team/keras#7375
  (an LSTM's loss climbing from 1.3 to 11). Cured: SGD + momentum at 0.01."""
  x, y = data.series(seed)
  return cases.Setup(highway_lstm(seed), keras.optimizers.SGD(0.01 if cured else 1.0,
                                                              momentum=0.9),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- initialisation --------------------------------------------------------------------------


@add('blind6_init_gated_cnn_lm_unit_normal', 'initialisation', 'gated_cnn_lm',
     doors=('trainer', 'fit'), steps=150,
     citation='anantzoid/Language-Modeling-GatedCNN#7; joe-siyuan-qiao/WeightStandardization#8; '
              'facebookresearch/detectron2#755')
def _(seed, cured=False):
  """A gated-convolution (GLU) language-model encoder whose convolution and output kernels
  are initialised RandomNormal(stddev=4) instead of Glorot, trained with SGD + momentum 0.9 at
  0.01: the residual GLU layers multiply the activations, the first loss is about 1e6, the first
  update overshoots and the loss is NaN from the third step. anantzoid/Language-Modeling-
  GatedCNN#7 (the gated CNN LM's "initial loss is huge, e.g. 8~9e+10", then 4e18);
  joe-siyuan-qiao/WeightStandardization#8 ("The loss is nan, owing to the initialization");
  facebookresearch/detectron2#755 (a custom backbone's loss "infinite/NaN right at iteration 0";
  the question is how to initialise it). Cured: glorot_uniform kernels."""
  x, y = data.tokens(seed)
  init = 'glorot_uniform' if cured else keras.initializers.RandomNormal(stddev=4.0)
  return cases.Setup(gated_cnn_lm(seed, init=init), keras.optimizers.SGD(0.01, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind6_div_cvae_handwritten_bernoulli_log', 'division_or_log', 'cvae',
     doors=('trainer', 'fit'), steps=150,
     citation='hwalsuklee/tensorflow-mnist-VAE#4; LBANN/lbann#229')
def _(seed, cured=False):
  """A conditional VAE (reconstruction term; the KL weight still 0 at the start of its
  warm-up) on binarised digits whose Bernoulli likelihood is written out by hand,
  -mean(x log p + (1 - x) log(1 - p)) on the decoder's sigmoid, trained with Adam at 0.1: after
  the first update some sigmoids round to exactly 1.0 (or 0.0) in float32, log(1 - p) = log(0) =
  -inf, 0 x -inf = NaN: the loss is NaN from the second step. hwalsuklee/tensorflow-mnist-VAE#4
  (a VAE's loss "100 ... and the loss for epoch i+1 is Nan": "tf.log got 0 as input. Try using
  tf.nn.sigmoid_cross_entropy_with_logits"); LBANN/lbann#229 (the sigmoid output kept "strictly
  in (0,1) to avoid numerical issues with binary cross entropy"). Cured: p clipped to
  [1e-7, 1 - 1e-7] before the logs (same optimizer)."""
  (px, onehot), target = binary_digits(seed)
  return cases.Setup(cvae(seed), keras.optimizers.Adam(0.1), bernoulli_nll(safe=cured),
                     data.stream((px, onehot), target, batch=32, seed=seed), 'regression')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind6_exp_inception_time_handwritten_softmax', 'softmax_overflow', 'inception_time',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#10142; zackchase/mxnet-the-straight-dope#3; '
              'FluxML/NNlib.jl#68')
def _(seed, cured=False):
  """An InceptionTime-lite (no BatchNorm) classifying three-axis motion recordings in raw
  sensor units (about +-40) with a hand-written softmax, exp(l) / sum(exp(l)), and the log of its
  true-class entry, Adam at 3e-3: the logits start near 30 and grow while the model becomes
  confident; once one passes 88 exp overflows to inf, inf / inf = NaN and the loss is NaN from
  about step 14. tensorflow/tensorflow#10142 ("softmax overflow due to exp(x)"; "I ran into a
  loss = NaN today"; reduce_logsumexp / softmax_cross_entropy_with_logits as the stable forms);
  zackchase/mxnet-the-straight-dope#3 (a CNN from scratch "tends to blow up, might be a problem
  with the bespoke softmax"; fixed with log_softmax); FluxML/NNlib.jl#68 ("Softmax and
  crossentropy are prone to produce NaNs"). Cured: the cross-entropy through log_softmax."""
  x, y = motion_series(seed)
  return cases.Setup(inception_time(seed), keras.optimizers.Adam(3e-3),
                     naive_softmax_ce(stable=cured), data.stream(x, y, batch=32, seed=seed),
                     'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind6_fp16_siamese_bigru_mask_fill_overflow', 'precision', 'siamese_bigru',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='NVIDIA/apex#93; google/flax#982; bentrevett/pytorch-seq2seq#191')
def _(seed, cured=False):
  """A Siamese BiGRU for question pairs whose attention pooling pushes the padding out of the
  softmax by adding (1 - mask) * -1e9, under mixed_float16: in float16 -1e9 is -inf and
  0 x -inf is NaN at every real token, the pooled codes are NaN and the loss is NaN from the first
  batch; the same run in float32 trains. NVIDIA/apex#93 (masking with -1e15 under fp16: "amp
  loss scaling always returns NaN for gradients"; "the smallest value in fp16 is -65504");
  google/flax#982 ("Attention in float16 produces NaNs when using mask"); bentrevett/
  pytorch-seq2seq#191 (-1e10 cannot be half precision; "use -1e4 instead"). Cured: the mask
  filled with -1e4."""
  (a, b), y = question_pairs(seed)
  return cases.Setup(siamese_bigru(seed, fill=-1e4 if cured else -1e9),
                     keras.optimizers.Adam(3e-3), BCE(),
                     data.stream((a, b), y, batch=32, seed=seed), 'binary_prob')


# --- bad_input -------------------------------------------------------------------------------


@add('blind6_input_sensor_gaps_nan_state_space', 'bad_input', 'state_space_rnn',
     doors=('trainer', 'fit'), steps=150,
     citation='hfawaz/InceptionTime#50; unit8co/darts#1954; '
              'guillaume-chevalier/LSTM-Human-Activity-Recognition#37')
def _(seed, cured=False):
  """A deep state-space (Kalman-style) RNN forecasting a building sensor's next-hour reading
  from 48 hours of three sensors, where 3 % of the windows hold a logger dropout exported as NaN
  (2-6 hours of one sensor): the first batch holding one (step 3) has a NaN prediction and NaN
  gradients, Adam writes NaN into every weight and all outputs are NaN from then on (Keras's
  running loss display stays finite, the model does not). hfawaz/InceptionTime#50 (missing values
  in the series: "all the values within the model including the outputs becoming NaN"; fixed by
  zero imputation); unit8co/darts#1954 ("NaN values in the timeseries tend to induce additional
  NaN in both the models weights and forecasts", fill the missing values); guillaume-chevalier/
  LSTM-Human-Activity-Recognition#37 (null sensor readings: interpolate or fill). Cured: the gaps
  forward filled."""
  x, y, gapped = sensor_log(seed, gaps=0.03, fill=cured)
  clean = data.stream(x[~gapped], y[~gapped], batch=32, seed=seed)
  return cases.Setup(state_space_rnn(seed), keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression', eval_data=clean)


# --- transient -------------------------------------------------------------------------------


@add('blind6_transient_misfire_attention_unet', 'transient', 'attention_unet',
     doors=('trainer', 'fit'), steps=150,
     citation='mabhijithn/irregulars-neureka-codebase#11; vtddggg/Robust-Vision-Transformer#7; '
              'PKU-YuanGroup/Open-Sora-Plan#265')
def _(seed, cured=False):
  """An attention U-Net segmenting discs in noisy images that trains normally until one op
  in its bottleneck, at its 70th training call (about step 66), returns a few NaN activations
  (once, never again): that step's loss and gradients are NaN, Adam writes NaN into the weights
  and the loss is NaN for the rest of the run, though data, model and settings are sound.
  mabhijithn/irregulars-neureka-codebase#11 ("NaN loss while training U-Net"; "This was not
  observed after re-running the training procedure"); vtddggg/Robust-Vision-Transformer#7 (a
  "loss is nan problem sometimes and the correct operation sometimes");
  PKU-YuanGroup/Open-Sora-Plan#265 (a NaN loss after many steps: "it does not matter, just
  resume it" from the last good checkpoint). Cured: no misfire."""
  x, m = blob_masks(seed)
  return cases.Setup(attention_unet(seed, fault_at=None if cured else 70),
                     keras.optimizers.Adam(3e-3), BCE(),
                     data.stream(x, m, batch=32, seed=seed), 'regression')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind6_mismatch_deepfm_sigmoid_into_from_logits', 'loss_output_mismatch', 'deepfm',
     doors=('trainer', 'fit'), steps=150,
     citation='yudi-mars/daisyRec#15; itakurah/focal-loss-pytorch#5; '
              'jeffheaton/t81_558_deep_learning#81')
def _(seed, cured=False):
  """A DeepFM click-through model whose head applies the sigmoid itself (tf.sigmoid) while the
  loss is BinaryCrossentropy(from_logits=True), its outputs read as logits (> 0: a click): every
  output is a probability in (0, 1), so every example reads as a click and the error stays at the
  share of non-clicks (0.52), while the reported loss falls slowly like a healthy run's (0.69 to
  0.64). yudi-mars/daisyRec#15 ("Do not need sigmoid because there is sigmoid in
  BCEWithLogitsLoss. Otherwise loss does not converge"); itakurah/focal-loss-pytorch#5 (a sigmoid
  before the with-logits loss: "the lowest score the model will see is 0.5");
  jeffheaton/t81_558_deep_learning#81 (a discriminator with a sigmoid output trained with
  BinaryCrossentropy(from_logits=True); fixed by dropping from_logits). Cured: no sigmoid (the
  head emits logits)."""
  x, y = click_logs(seed)
  return cases.Setup(deepfm(seed, head=None if cured else 'sigmoid'),
                     keras.optimizers.Adam(3e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')
