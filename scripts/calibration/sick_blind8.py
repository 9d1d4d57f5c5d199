"""An eighth blind set of sick scenarios (the 'blind8' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind7.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (a VDSR-lite super-resolution network, an IRNN (ReLU
RNN with identity recurrence), a LeNet-5, an AlexNet-lite, an entity-embedding sales model,
an end-to-end memory network (MemN2N), a gMLP-lite, an LSTNet-lite forecaster, a GhostNet-lite, an
AutoInt click-through model). Each builder takes `cured`: the same run with the thread's remedy
(the registry calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` +
`fit`: the sick run shows the reported symptom, the cured twin passes runner's "did it train"
measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data

BLIND8 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND8.add` with split='blind8'."""
  return BLIND8.add(name, expected, arch, split='blind8', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def low_res_digits(*, size=16, factor=2):
  """Super-resolution pairs from the digits: the low-resolution input (each `factor` x `factor`
  block averaged, then upsampled back by repetition, as an interpolated image) and the
  high-resolution target, both (n, size, size, 1) in [0, 1]."""
  hi, _ = data.digits(size=size, rgb=False)
  n = len(hi)
  lo = hi.reshape(n, size // factor, factor, size // factor, factor, 1).mean(axis=(2, 4))
  lo = np.repeat(np.repeat(lo, factor, axis=1), factor, axis=2)
  return lo.astype(np.float32), hi.astype(np.float32)


def vdsr_lite(seed, *, size=16, depth=14, width=32):
  """A VDSR-lite (Kim et al.): `depth` Conv2D(width, 3x3, ReLU) layers, He init, no
  normalisation, a last Conv2D(1, 3x3) predicting the residual, added to the interpolated input:
  the high-resolution estimate."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for _ in range(depth):
    h = L.Conv2D(width, 3, padding='same', activation='relu', kernel_initializer='he_normal')(h)
  residual = L.Conv2D(1, 3, padding='same', kernel_initializer='he_normal')(h)
  return keras.Model(inputs, L.Add()([inputs, residual]), name='vdsr_lite')


def irnn(seed, *, steps=40, features=1, units=64):
  """An IRNN (Le et al., 2015): a SimpleRNN with ReLU units, the recurrent kernel initialised to
  the identity, the input kernel RandomNormal(stddev=0.001), reading the whole sequence; a linear
  Dense(1) head."""
  _seed(seed)
  inputs = keras.Input((steps, features))
  h = L.SimpleRNN(units, activation='relu', recurrent_initializer='identity',
                  kernel_initializer=keras.initializers.RandomNormal(stddev=0.001))(inputs)
  return keras.Model(inputs, L.Dense(1)(h), name='irnn')


def lenet5(seed, *, size=32, classes=10):
  """LeNet-5 (LeCun et al., 1998): Conv2D(6, 5x5, tanh), 2x2 average pool, Conv2D(16, 5x5,
  tanh), 2x2 average pool, Dense(120, tanh), Dense(84, tanh), Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.AveragePooling2D(2)(L.Conv2D(6, 5, activation='tanh')(inputs))
  h = L.AveragePooling2D(2)(L.Conv2D(16, 5, activation='tanh')(h))
  h = L.Dense(120, activation='tanh')(L.Flatten()(h))
  h = L.Dense(84, activation='tanh')(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='lenet5')


def alexnet_lite(seed, *, size=32, classes=10, init='he_normal'):
  """An AlexNet-lite: Conv2D(32, 5x5, stride 2, ReLU), 2x2 max pool, Conv2D(64, 3x3, ReLU),
  Conv2D(64, 3x3, ReLU), 2x2 max pool, Dense(128, ReLU), dropout 0.3, Dense(128, ReLU),
  Dense(classes): the logits. Every kernel initialised with `init` (biases zero)."""
  _seed(seed)
  kw = dict(kernel_initializer=init)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(32, 5, strides=2, padding='same', activation='relu', **kw)(inputs)
  h = L.MaxPooling2D()(h)
  h = L.Conv2D(64, 3, padding='same', activation='relu', **kw)(h)
  h = L.Conv2D(64, 3, padding='same', activation='relu', **kw)(h)
  h = L.Flatten()(L.MaxPooling2D()(h))
  h = L.Dropout(0.3)(L.Dense(128, activation='relu', **kw)(h))
  h = L.Dense(128, activation='relu', **kw)(h)
  return keras.Model(inputs, L.Dense(classes, **kw)(h), name='alexnet_lite')


def store_sales(seed, *, rows=4096, stores=50):
  """Daily sales of `stores` shops (Rossmann-like, in thousands): a store level, a weekday
  pattern, a promotion lift and noise; on Sundays most stores are closed and sell 0 (a genuine
  zero, about 12 % of the rows). ((store ids, weekdays, promo flags) int32 each (rows,), sales
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  store = rng.randint(0, stores, size=rows)
  day = rng.randint(0, 7, size=rows)
  promo = rng.randint(0, 2, size=rows)
  level = np.exp(rng.normal(1.5, 0.4, size=stores))
  weekday = np.array([1.0, 0.9, 0.9, 0.95, 1.1, 1.3, 0.6])
  sales = level[store] * weekday[day] * (1 + 0.3 * promo) * np.exp(0.1 * rng.randn(rows))
  closed = (day == 6) & (rng.rand(rows) < 0.85)
  sales = np.where(closed, 0.0, sales)
  return ((store.astype(np.int32), day.astype(np.int32), promo.astype(np.int32)),
          sales[:, None].astype(np.float32))


def entity_embedding_net(seed, *, stores=50):
  """Entity embeddings of categorical variables (Guo & Berkhahn, the Rossmann sales model):
  store (8-d), weekday (4-d) and promo (2-d) embeddings concatenated, Dense(64, ReLU),
  Dense(32, ReLU), Dense(1, softplus): the (positive) sales forecast."""
  _seed(seed)
  store, day, promo = (keras.Input((), dtype='int32') for _ in range(3))
  h = L.Concatenate()([L.Embedding(stores, 8)(store), L.Embedding(7, 4)(day),
                       L.Embedding(2, 2)(promo)])
  h = L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(h))
  return keras.Model([store, day, promo], L.Dense(1, activation='softplus')(h),
                     name='entity_embedding_net')


def handwritten_msle(labels, predictions):
  """The squared log error written out by hand, mean((log(y_pred) - log(y_true))^2): log(0) =
  -inf on a zero label, an infinite loss and infinite gradients."""
  return tf.reduce_mean(tf.square(tf.math.log(predictions) - tf.math.log(labels)))


def stories(seed, *, rows=2048, memories=8, words=6, vocab=60, keys=24, classes=8):
  """A bAbI-like single-supporting-fact task: each story is `memories` sentences, sentence i a
  bag of `words` token ids: a key (entity, ids 1..keys), a value (location, one of `classes`),
  and filler words; the query is the key of one sentence plus two fillers, the answer that
  sentence's value. Returns ((story ids (rows, memories, words), query ids (rows, 3)), answers).
  """
  rng = np.random.RandomState(seed)
  filler0 = 1 + keys + classes
  story = rng.randint(filler0, vocab, size=(rows, memories, words))
  values = rng.randint(0, classes, size=(rows, memories))
  for r in range(rows):
    story[r, :, 0] = 1 + rng.choice(keys, memories, replace=False)
  story[:, :, 1] = 1 + keys + values
  asked = rng.randint(0, memories, size=rows)
  query = rng.randint(filler0, vocab, size=(rows, 3))
  query[:, 0] = story[np.arange(rows), asked, 0]
  return ((story.astype(np.int32), query.astype(np.int32)),
          values[np.arange(rows), asked].astype(np.int32))


class MemoryHop(L.Layer):
  """One hop of an end-to-end memory network (Sukhbaatar et al.): the sentences embedded twice
  (A: the keys m_i, C: the contents c_i, bags summed), the query u; attention p = softmax(u .
  m_i) over the memories, written out by hand, exp(s) / sum(exp(s)) (`stable` False), or
  tf.nn.softmax (max subtracted first, `stable` True); the output o = sum_i p_i c_i + u.
  Embeddings RandomNormal(stddev=`std`)."""

  def __init__(self, vocab, dim, std, stable, **kwargs):
    super().__init__(**kwargs)
    init = keras.initializers.RandomNormal(stddev=std)
    self.a = L.Embedding(vocab, dim, embeddings_initializer=init)
    self.b = L.Embedding(vocab, dim, embeddings_initializer=init)
    self.c = L.Embedding(vocab, dim, embeddings_initializer=init)
    self.stable = stable

  def call(self, story, query):
    m = tf.reduce_sum(self.a(story), axis=2)  # (batch, memories, dim)
    c = tf.reduce_sum(self.c(story), axis=2)
    u = tf.reduce_sum(self.b(query), axis=1)  # (batch, dim)
    s = tf.einsum('bmd,bd->bm', m, u)
    if self.stable:
      p = tf.nn.softmax(s, axis=-1)
    else:
      e = tf.exp(s)
      p = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    return tf.einsum('bm,bmd->bd', p, c) + u


def memn2n(seed, *, memories=8, words=6, vocab=60, dim=64, classes=8, std=1.0, stable=False):
  """An end-to-end memory network, one `MemoryHop`, Dense(classes) logits on its output."""
  _seed(seed)
  story = keras.Input((memories, words), dtype='int32')
  query = keras.Input((3,), dtype='int32')
  o = MemoryHop(vocab, dim, std, stable)(story, query)
  return keras.Model([story, query], L.Dense(classes)(o), name='memn2n')


def kelvin_sensors(seed, *, rows=2048, hours=24, sensors=4):
  """Hourly readings of `sensors` temperature probes at one site, in kelvin (about 270-310 K: the
  site's base temperature, a daily cycle shared by the probes, a per-probe offset and noise),
  labelled by whether the first probe runs warmer than the others (a hot spot: its offset drawn
  +1 to +4 K, else -1 to -4 K; the other probes' offsets N(0, 1) K)."""
  rng = np.random.RandomState(seed)
  base = 290.0 + 8.0 * rng.randn(rows, 1, 1)
  t = np.arange(hours)[None, :, None]
  cycle = 4.0 * np.sin(2 * np.pi * (t / hours + rng.rand(rows, 1, 1)))
  y = rng.randint(0, 2, size=rows)
  offset = rng.randn(rows, 1, sensors)
  offset[:, 0, 0] = (2 * y - 1) * rng.uniform(1, 4, size=rows)
  x = base + cycle + offset + 0.5 * rng.randn(rows, hours, sensors)
  return x.astype(np.float32), y.astype(np.int32)


class OnePassLayerNorm(L.Layer):
  """A layer normalisation written out by hand with the one-pass variance, E[x^2] - E[x]^2,
  scale and shift learned; computed in the layer's compute dtype (float16 under
  mixed_float16, where E[x]^2 and E[x^2] of readings above 256 overflow to inf and inf - inf is
  NaN)."""

  def build(self, shape):
    self.gamma = self.add_weight(shape=(shape[-1],), initializer='ones', name='gamma')
    self.beta = self.add_weight(shape=(shape[-1],), initializer='zeros', name='beta')

  def call(self, x):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) - tf.square(mean)
    eps = tf.cast(1e-3, x.dtype)
    return (x - mean) * tf.math.rsqrt(tf.maximum(var, 0) + eps) * tf.cast(
        self.gamma, x.dtype) + tf.cast(self.beta, x.dtype)


class SpatialGatingUnit(L.Layer):
  """gMLP's spatial gating unit (Liu et al., 2021): the channels split in (u, v), v normalised
  and mixed across the tokens by a Dense over the sequence axis (initialised near zero, bias
  one), the output u * v."""

  def __init__(self, tokens, norm_dtype=None, **kwargs):
    super().__init__(**kwargs)
    self.norm = OnePassLayerNorm(dtype=norm_dtype)
    self.proj = L.Dense(tokens, kernel_initializer=keras.initializers.RandomNormal(stddev=1e-3),
                        bias_initializer='ones')

  def call(self, x):
    u, v = tf.split(x, 2, axis=-1)
    v = tf.cast(self.norm(v), u.dtype)
    v = tf.transpose(self.proj(tf.transpose(v, [0, 2, 1])), [0, 2, 1])
    return u * v


def gmlp_lite(seed, *, tokens=24, features=4, dim=32, blocks=2, classes=2, norm_dtype=None):
  """A gMLP-lite over sequences of readings: per block a pre-norm `OnePassLayerNorm`, Dense(4 x
  dim, GELU), a `SpatialGatingUnit`, Dense(dim), added to the block input (the first block's
  input is the raw readings, projected to `dim` after its norm); global average, Dense(classes)
  logits in float32. `norm_dtype`: the norms' dtype (None: the global policy)."""
  _seed(seed)
  inputs = keras.Input((tokens, features))
  h = inputs
  for i in range(blocks):
    n = OnePassLayerNorm(dtype=norm_dtype)(h)
    z = L.Dense(4 * dim, activation='gelu')(n)
    z = SpatialGatingUnit(tokens, norm_dtype)(z)
    z = L.Dense(dim)(z)
    h = L.Add()([z, L.Dense(dim)(n) if i == 0 else h])
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(inputs, L.Dense(classes, dtype='float32')(h), name='gmlp_lite')


def meter_windows(seed, *, rows=2048, window=48, missing=0.0, fill=False):
  """Windows of an hourly electricity meter load (daily and weekly cycles, noise, in kW about
  0-3) and the next hour's load: (x (rows, window, 1), y (rows, 1)). `missing`: the fraction of
  readings lost in meter outages and exported as NaN; `fill`: those readings forward-filled
  (the last good reading) before windowing. Also returns the mask of windows with a NaN."""
  rng = np.random.RandomState(seed)
  length = rows + window + 1
  t = np.arange(length)
  load = (1.5 + 0.8 * np.sin(2 * np.pi * t / 24) + 0.3 * np.sin(2 * np.pi * t / 168)
          + 0.15 * rng.randn(length))
  lost = rng.rand(length) < missing
  series = np.where(lost, np.nan, load)
  if fill:
    for i in np.flatnonzero(lost):
      series[i] = series[i - 1] if i else load[0]
  idx = np.arange(rows)[:, None] + np.arange(window + 1)[None, :]
  windows = series[idx]
  x, y = windows[:, :window, None], windows[:, window:]
  bad = np.isnan(windows).any(axis=1)
  return x.astype(np.float32), y.astype(np.float32), bad


def lstnet_lite(seed, *, window=48, ar_window=24):
  """An LSTNet-lite (Lai et al.): Conv1D(16, 6, ReLU) over the window, a GRU(32) on its
  features, Dense(1) of its last state, plus the autoregressive highway: a Dense(1) of the last
  `ar_window` readings; their sum is the forecast."""
  _seed(seed)
  inputs = keras.Input((window, 1))
  h = L.Conv1D(16, 6, activation='relu')(inputs)
  h = L.Dense(1)(L.GRU(32)(h))
  ar = L.Dense(1)(L.Flatten()(inputs[:, -ar_window:, :]))
  return keras.Model(inputs, L.Add()([h, ar]), name='lstnet_lite')


def ghost_module(h, out, relu=True):
  """GhostNet's ghost module (Han et al., 2020): a 1x1 Conv2D to out / 2 'intrinsic' maps
  (BN, ReLU) and a cheap depthwise 3x3 on them for the other half (BN, ReLU), concatenated."""
  p = L.BatchNormalization()(L.Conv2D(out // 2, 1, use_bias=False)(h))
  p = L.ReLU()(p) if relu else p
  g = L.BatchNormalization()(L.DepthwiseConv2D(3, padding='same', use_bias=False)(p))
  g = L.ReLU()(g) if relu else g
  return L.Concatenate()([p, g])


def ghostnet_lite(seed, *, size=16, classes=10):
  """A GhostNet-lite: a stem Conv2D(16, 3x3, stride 2) + BN + ReLU, three ghost bottlenecks
  (ghost module, a depthwise 3x3 stride 2 + BN in the second, ghost module without ReLU, a
  shortcut added: identity, or depthwise + 1x1 conv where the shape changes), global average,
  Dense(classes) logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, strides=2, padding='same')(inputs)))
  for out, stride in ((16, 1), (32, 2), (32, 1)):
    b = ghost_module(h, 2 * out)
    if stride == 2:
      b = L.BatchNormalization()(L.DepthwiseConv2D(3, strides=2, padding='same')(b))
    b = ghost_module(b, out, relu=False)
    s = h
    if stride == 2 or h.shape[-1] != out:
      s = L.DepthwiseConv2D(3, strides=stride, padding='same')(h)
      s = L.BatchNormalization()(L.Conv2D(out, 1)(s))
    h = L.Add()([b, s])
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='ghostnet_lite')


def corrupt_digits_stream(seed, *, corrupt=(), batch=32, size=16):
  """`data.digits` as a stream in which the batches numbered in `corrupt` (0-based, in stream
  order) are replaced by garbage: a shard whose image bytes were read back with the wrong
  dtype (random bytes as float32: values up to about 3e38, some inf and NaN); every other batch
  clean."""
  x, y = data.digits(size=size, rgb=False)
  clean = data.stream(x, y, batch=batch, seed=seed)
  if not corrupt:
    return clean
  rng = np.random.RandomState(seed + 1)
  garbage = np.frombuffer(rng.bytes(4 * batch * size * size), dtype=np.float32)
  garbage = tf.constant(garbage.reshape(batch, size, size, 1))
  bad = tf.constant(sorted(corrupt), dtype=tf.int64)

  def swap(i, xy):
    xb, yb = xy
    hit = tf.reduce_any(tf.equal(i, bad))
    return tf.where(hit, garbage, xb), yb

  return clean.enumerate().map(swap)


def ctr_fields(seed, *, rows=4096, fields=8, vocab=20):
  """Click logs over `fields` categorical fields (ids 0..vocab-1 each): the click drawn from a
  logistic model of per-field effects and one pairwise interaction; (ids (rows, fields), float
  labels (rows, 1)), about half clicks."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, size=(rows, fields))
  effects = rng.randn(fields, vocab)
  inter = rng.randn(vocab, vocab)
  logit = effects[np.arange(fields), ids].sum(axis=1) + 1.5 * inter[ids[:, 0], ids[:, 1]]
  logit = 2.0 * (logit - np.median(logit)) / logit.std()
  y = (rng.rand(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)[:, None]
  return ids.astype(np.int32), y


def autoint(seed, *, fields=8, vocab=20, dim=16, head='sigmoid'):
  """AutoInt (Song et al., 2019): every field id embedded (one table, field offsets), two
  interacting layers (multi-head self-attention over the fields, 2 heads of 8, with a residual
  projection, ReLU), flattened, Dense(1, `head`): the click probability."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  offsets = tf.constant(np.arange(fields) * vocab, dtype=tf.int32)
  h = L.Embedding(fields * vocab, dim)(ids + offsets)
  for _ in range(2):
    a = L.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)
    h = L.ReLU()(L.Add()([a, L.Dense(dim)(h)]))
  return keras.Model(ids, L.Dense(1, activation=head)(L.Flatten()(h)), name='autoint')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind8_grad_vdsr_unclipped', 'exploding_gradients', 'vdsr_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='twtygqyy/pytorch-vdsr#2; huangzehao/caffe-vdsr#27; huangzehao/caffe-vdsr#7')
def _(seed, cured=False):
  """A VDSR-lite (fourteen He-init 3x3 ReLU convolutions, no normalisation, a residual added to
  the interpolated input) super-resolving 2x-downsampled digits, trained with the VDSR paper's
  SGD + momentum 0.9 at 0.1 but without its gradient clipping: the gradients through the deep
  plain stack blow up in the first steps, the loss jumps by orders of magnitude and is NaN
  within a few steps; the model never trains. twtygqyy/pytorch-vdsr#2 (gradient clipping "plays
  an important role in VDSR"; "If you use a very large value ... the gradients will explode in a
  very early stage during the training and nothing can be learnt after that");
  huangzehao/caffe-vdsr#27 and #7 (VDSR's high learning rate is used with adjustable gradient
  clipping, clip_gradient = 0.1). Cured: clipnorm=0.1 (same rate, same architecture)."""
  lo, hi = low_res_digits()
  return cases.Setup(vdsr_lite(seed),
                     keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.1 if cured else None),
                     'mse', data.stream(lo, hi, batch=32, seed=seed), 'regression')


@add('blind8_grad_irnn_random_walk_unclipped', 'exploding_gradients', 'irnn',
     doors=('trainer', 'fit'), steps=150,
     citation='chenxie95/deeplearning_course_sjtu#31; keras-team/keras#2194')
def _(seed, cured=False):
  """An IRNN (a ReLU SimpleRNN whose recurrent kernel starts as the identity, Le et al.)
  regressing the mean of 40-step random walks, SGD + momentum 0.9 at 0.01 and no clipping: the
  identity recurrence sits at the edge of stability, the first update pushes its spectral radius
  above one, the ReLU state and the back-propagated gradients grow geometrically over the 40
  steps, the loss goes from 1.4 to about 380 at step 2 and is NaN from step 4 (the weights NaN);
  the model never trains. chenxie95/deeplearning_course_sjtu#31 (a language model with
  RNN_RELU: the loss explodes to nan; the answer: ReLU can make the gradients too large);
  keras-team/keras#2194 (a recurrent model with ReLU activations: "I get a loss of nan for all
  epochs"). Le et al. train the IRNN with gradient clipping. Cured: clipnorm=1 (same rate)."""
  x, y = data.series(seed)
  return cases.Setup(irnn(seed, steps=40, features=1),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind8_lr_lenet5_sgd_too_high', 'learning_rate', 'lenet5',
     doors=('trainer', 'fit'), steps=150,
     citation='BVLC/caffe#6047; kratzert/finetune_alexnet_with_tensorflow#23; '
              'BobLiu20/FaceRecognition_PyTorch#2')
def _(seed, cured=False):
  """LeNet-5 (tanh convolutions, average pooling, tanh dense layers) on 32x32 digits with SGD +
  momentum 0.9 at 1.5: the first updates throw the tanh units into saturation and the logits
  far apart, the loss climbs from 2.4 to about 54 by step 10 and about 200 by the end, never
  NaN, and the model ends no better than the constant answer (error 0.86). BVLC/caffe#6047 (base_lr 0.01: "training loss suddenly goes up to loss =
  87.3365 and it never comes down"); kratzert/finetune_alexnet_with_tensorflow#23 (NaN: "The
  error comes through the learning rate, which is to high for this data set. If you set the
  learning rate to 0.001 you won't have this error anymore"); BobLiu20/FaceRecognition_PyTorch#2
  ("with a learning rate of 0.1, loss is 'nan', when I change the learning rate to 0.001, loss
  changes normally"). Cured: SGD + momentum at 0.01."""
  x, y = data.digits(size=32, rgb=False)
  return cases.Setup(lenet5(seed), keras.optimizers.SGD(0.01 if cured else 1.5, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- initialisation --------------------------------------------------------------------------


@add('blind8_init_alexnet_all_zero_kernels', 'initialisation', 'alexnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='fizyr/keras-retinanet#712; wagonhelm/NaNmnist#2; keras-team/keras#12598')
def _(seed, cured=False):
  """An AlexNet-lite (three ReLU convolutions, two ReLU dense layers, the logits) whose kernels
  are all initialised to zero (kernel_initializer='zeros'), on digits with Adam at 1e-3: every
  hidden unit outputs ReLU(0) = 0, the gradient of every kernel but the last is zero and the
  last's is zero too (its inputs are zero), only the output bias moves: the loss falls from
  2.30 to the label entropy (about 2.30) and stays, the model answers one class for every
  image. fizyr/keras-retinanet#712 (conv kernels initialised with zero: "If all the neurons have
  the same weights, they will produce the same outputs ... all the weight updates will be
  exactly the same"); wagonhelm/NaNmnist#2 ("initializing weights as zeroes ... is highly
  improper"; "Deep nets definitely need random initializations"); keras-team/keras#12598
  (kernel_initializer='zeros' on Dense layers). Cured: he_normal kernels."""
  x, y = data.digits(size=32, rgb=False)
  return cases.Setup(alexnet_lite(seed, init='he_normal' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind8_div_entity_embeddings_log_of_zero_sales', 'division_or_log',
     'entity_embedding_net', doors=('trainer', 'fit'), steps=150,
     citation='timeseriesAI/tsai#150; mkocabas/focal-loss-keras#24; mead-ml/mead-baseline#410')
def _(seed, cured=False):
  """An entity-embedding sales model (store, weekday and promo embeddings, two ReLU layers, a
  softplus output) forecasting daily store sales, trained with a hand-written squared log error,
  mean((log(y_pred) - log(y_true))^2), with Adam at 3e-3, on data where closed stores sell 0 on
  Sundays (about 12 % of the rows, legitimate zeros): the first batch's zero labels give log(0) =
  -inf, the loss is inf and the gradients inf / NaN, Adam writes NaN into the weights and every
  forecast is NaN from then on. timeseriesAI/tsai#150 (a hand-written MSLE loss: "I end up with
  NaNs after a few epochs"); mkocabas/focal-loss-keras#24 ("Fix Nan problem for LOG": an epsilon
  added inside the log of a hand-written loss); mead-ml/mead-baseline#410 ("Nan from the log in
  the log of manual cross entropy", found with tf.debugging.check_numerics). Cured: Keras's
  mean squared logarithmic error (log(y + 1), the predictions clipped at epsilon)."""
  x, y = store_sales(seed)
  loss = keras.losses.MeanSquaredLogarithmicError() if cured else handwritten_msle
  return cases.Setup(entity_embedding_net(seed), keras.optimizers.Adam(3e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind8_exp_memn2n_handwritten_attention_softmax', 'softmax_overflow', 'memn2n',
     doors=('trainer', 'fit'), steps=150,
     citation='uTensor/uTensor#175; NVIDIA/FasterTransformer#43; jhcross/span-parser#2')
def _(seed, cured=False):
  """An end-to-end memory network (one hop: bag-of-words sentence embeddings as memories, the
  query's attention over them, the weighted contents added to the query, Dense logits) on a
  bAbI-like single-supporting-fact task, embeddings RandomNormal(stddev=0.5), whose attention
  softmax is written out by hand, exp(s) / sum(exp(s)), trained with Adam at 1e-2: the model
  learns (the loss 5.1 to 3.4 by step 10) while the match scores u . m_i of the summed bags grow
  as the embeddings sharpen, past 88 exp overflows to inf, inf / inf = NaN and the loss is NaN
  from about step 13 (the weights NaN). uTensor/uTensor#175 (a softmax calling exp() on the
  logits: "logit 378.097443, exp() inf ... this infinity value bubbles through to my results
  which yields a nan value"); NVIDIA/FasterTransformer#43 ("I got NaN ... the softmax input is
  not protected (substract the max value)"); jhcross/span-parser#2 (an unsafe softmax "likely to
  overflow if scores * alpha is large"). Cured: tf.nn.softmax (the max subtracted first)."""
  x, y = stories(seed)
  return cases.Setup(memn2n(seed, std=0.5, stable=cured), keras.optimizers.Adam(1e-2),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind8_fp16_gmlp_handwritten_layernorm_kelvin', 'precision', 'gmlp_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='tensorflow/models#10426; pytorch/pytorch#66707; NVIDIA/TensorRT#2564')
def _(seed, cured=False):
  """A gMLP-lite (pre-norm blocks, a spatial gating unit mixing the 24 hourly tokens) whose
  layer norms are written out by hand with the one-pass variance E[x^2] - E[x]^2, spotting the
  hot probe in days of four temperature probes' hourly readings given in kelvin (about 270-310
  K) under mixed_float16 with
  Adam at 1e-3: the first norm reads the raw readings in float16, E[x]^2 and E[x^2] (about
  84000) overflow float16's 65504 to inf, inf - inf = NaN, and the loss is NaN at every step
  (the loss-scale optimizer skips every update; the model never moves); in float32 the same
  model trains. tensorflow/models#10426 ("Numeric instabilities in LayerNorm when training with
  mixed_precision": a NaN loss, the check_numerics trace in the layer norm); pytorch/pytorch#66707
  ("layer_norm needs to be done in fp32 for fp16 inputs, otherwise overflow happens");
  NVIDIA/TensorRT#2564 ("in most of large transformer models, the layernorm overflows in FP16
  precision"; "I would suggest setting it to FP32 manually"). Cured: the norms computed in
  float32 (dtype='float32' on the norm layers)."""
  x, y = kelvin_sensors(seed)
  return cases.Setup(gmlp_lite(seed, norm_dtype='float32' if cured else None),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind8_input_meter_outages_nan_lstnet', 'bad_input', 'lstnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Nixtla/neuralforecast#186; krishnaik06/Stock-MArket-Forecasting#1; '
              'timeseriesAI/tsai#506')
def _(seed, cured=False):
  """An LSTNet-lite (Conv1D, GRU and an autoregressive highway) forecasting the next hour of an
  electricity meter's load from the last 48 hours, Adam at 3e-3, where 1 % of the readings were
  lost in meter outages and exported as NaN: about 40 % of the windows hold a NaN, the first
  batch already does, its loss and gradients are NaN, Adam writes NaN into the weights and
  every forecast is NaN from then on. Nixtla/neuralforecast#186 ("silent bug, training with
  NaNs values": "The loss becomes nan during training but it is hard to notice that the problem
  is in the data"); krishnaik06/Stock-MArket-Forecasting#1 (a power-consumption forecaster's
  loss and val_loss nan; "check if there are any nan values in the data set");
  timeseriesAI/tsai#506 (all outputs nan: "one of the most common ones is that X contains nan
  values"). Cured: the lost readings forward-filled."""
  x, y, bad = meter_windows(seed, missing=0.01, fill=cured)
  clean = data.stream(x[~bad], y[~bad], batch=32, seed=seed)
  return cases.Setup(lstnet_lite(seed), keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression', eval_data=clean)


# --- bad_input (written as transient: see its docstring) -------------------------------------


@add('blind8_input_garbage_shard_ghostnet', 'bad_input', 'ghostnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='stanford-crfm/mistral#115; allenai/olmoearth_pretrain#135; '
              'marin-community/levanter#391')
def _(seed, cured=False):
  """A GhostNet-lite (ghost modules: 1x1 convolutions plus cheap depthwise maps, BatchNorm) on
  digits with Adam at 2e-3, training normally, whose input pipeline serves two garbage batches
  (batches 80 and 81 of the stream: a shard whose image bytes were read back as float32,
  values up to 3e38 with some inf and NaN) among clean ones: the loss at those steps is NaN,
  the update writes NaN into the weights and the loss is NaN for the rest of the run, though
  every other batch, the model and the settings are sound (skipping the two steps, the run goes
  on training). stanford-crfm/mistral#115 (loss spikes; "One hypothesis is we get 'bad batches'
  where the data is garbage ... and gives us bad gradients"); allenai/olmoearth_pretrain#135
  ("Skip batch when loss goes to nan": "stop gradient updates on those anomalous batches");
  marin-community/levanter#391 (NaN issues: "something ... that lets us skip bad batches").
  Cured: the two batches not served (the same clean stream). Written as 'transient' from a
  brief that called a few bad batches among good ones transient; batches holding NaN/Inf are
  bad input in the doctor's documented causes (docs/doctor.md), so it was relabelled after the
  split's first look, which had named it bad input."""
  return cases.Setup(ghostnet_lite(seed), keras.optimizers.Adam(2e-3), SCE(from_logits=True),
                     corrupt_digits_stream(seed, corrupt=() if cured else (80, 81)),
                     'classes', eval_data=corrupt_digits_stream(seed))


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind8_mismatch_autoint_single_unit_softmax', 'loss_output_mismatch', 'autoint',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#126; keras-team/keras#4784; keras-team/keras#2711')
def _(seed, cured=False):
  """An AutoInt click-through model (field embeddings, two multi-head self-attention
  interacting layers) whose single output unit has a softmax activation (Dense(1,
  activation=tf.nn.softmax)), trained with binary cross-entropy on 0/1 clicks with Adam at
  1e-3: a softmax over one unit is identically 1, the predicted click probability is 1.0 for
  every impression whatever the weights, the gradient is zero, the loss sits at about 8 (the
  clipped log of the non-clicks, 16.1 x their share) and the model calls every impression a
  click (error 0.47, the constant answer's). keras-team/keras#126 (Dense(64, 1, activation='softmax') with a
  binary target: "the loss and validation loss don't improve ... predict_proba gives all
  ones"); keras-team/keras#4784 ("Your model doesn't match your loss function. If your targets
  are [0,1], use a sigmoid output layer and binary_crossentropy loss"); keras-team/keras#2711
  (loss not changing: "it's a binary application, therefore just change your activation
  function as sigmoid"). Cured: a sigmoid output."""
  x, y = ctr_fields(seed)
  return cases.Setup(autoint(seed, head='sigmoid' if cured else tf.nn.softmax),
                     keras.optimizers.Adam(1e-3), BCE(),
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
