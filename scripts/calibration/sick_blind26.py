"""A twenty-sixth blind set of sick scenarios (the 'blind26' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind25.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a multiplicative-LSTM-lite, a SegNet-lite, an
ALBERT-lite, a C3D-lite, an AFN-lite, an AFM-lite, an FSRCNN-lite, an LSTM-FCN-lite, a
DPN-lite and an FwFM-lite). Each builder takes `cured`: the same run with the thread's remedy
(the registry calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` +
`fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin passes
runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND26 = cases.Registry()
LR_GRAD, LR_SEG, LR_ALBERT = 20.0, 500.0, 0.05
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND26.add` with split='blind26'."""
  return BLIND26.add(name, expected, arch, split='blind26', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def markov_text(seed, *, rows=4096, context=12, vocab=12):
  """A character stream in miniature for next-character prediction: a Markov chain over
  `vocab` symbols in which each symbol is followed by its usual successor 85% of the time and
  by a second one otherwise (a sparse grammar); each row the last `context` symbols (the input)
  and the next (the label). (ids (rows, context), next id)."""
  rng = np.random.RandomState(seed)
  succ = np.stack([rng.permutation(vocab), rng.randint(0, vocab, vocab)], -1)
  text = [rng.randint(vocab)]
  while len(text) < rows + context + 1:
    text.append(succ[text[-1], int(rng.rand() > 0.85)])
  text = np.asarray(text)
  starts = rng.randint(0, len(text) - context - 1, rows)
  x = np.stack([text[s:s + context] for s in starts])
  return x.astype(np.int32), text[starts + context].astype(np.int32)


class MLSTMCell(L.Layer):
  """A multiplicative LSTM cell (Krause et al., 2016): an intermediate state
  m = (W_mx x) * (W_mh h) replaces h in the LSTM's gates, so that each input has its own
  recurrent transition."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = [units, units]
    self.output_size = units

  def build(self, shape):
    d, u = shape[-1], self.units
    self.wmx = self.add_weight(shape=(d, u), initializer='glorot_uniform')
    self.wmh = self.add_weight(shape=(u, u), initializer='orthogonal')
    self.wx = self.add_weight(shape=(d, 4 * u), initializer='glorot_uniform')
    self.wm = self.add_weight(shape=(u, 4 * u), initializer='orthogonal')
    self.b = self.add_weight(shape=(4 * u,), initializer='zeros')

  def call(self, x, states):
    h, c = states
    m = tf.matmul(x, self.wmx) * tf.matmul(h, self.wmh)
    z = tf.matmul(x, self.wx) + tf.matmul(m, self.wm) + self.b
    i, f, o, g = tf.split(z, 4, axis=-1)
    c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(g)
    h = tf.sigmoid(o) * tf.tanh(c)
    return h, [h, c]


def mlstm_lite(seed, *, context=12, vocab=12, units=96):
  """A multiplicative-LSTM-lite (the byte-level mLSTM language model of Krause et al. and of
  Radford et al.'s sentiment neuron, in miniature): an embedding of 16, one `MLSTMCell` of
  `units`, Dense(`vocab`): the next symbol's logits."""
  _seed(seed)
  x = keras.Input((context,), dtype='int32')
  h = L.RNN(MLSTMCell(units))(L.Embedding(vocab, 16)(x))
  return keras.Model(x, L.Dense(vocab)(h), name='mlstm_lite')


def bar_masks(seed, *, rows=1024, size=32):
  """Foreground segmentation in miniature: one to three bright bars (horizontal or vertical,
  random widths) and rings on a noisy textured background; the mask their pixels.
  (image (rows, size, size, 1), mask (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  x = np.zeros((rows, size, size), np.float32)
  m = np.zeros((rows, size, size), np.float32)
  for i in range(rows):
    img = 0.2 + 0.1 * np.sin(xx * rng.uniform(0.2, 0.8)) * np.cos(yy * rng.uniform(0.2, 0.8))
    for _ in range(rng.randint(1, 4)):
      if rng.rand() < 0.5:
        a, w = rng.randint(0, size - 4), rng.randint(2, 6)
        shape = (yy >= a) & (yy < a + w) if rng.rand() < 0.5 else (xx >= a) & (xx < a + w)
      else:
        cy, cx = rng.randint(6, size - 6, 2)
        r2 = (yy - cy) ** 2 + (xx - cx) ** 2
        shape = (r2 < 36) & (r2 > 9)
      img = np.where(shape, rng.uniform(0.6, 1.0), img)
      m[i] = np.maximum(m[i], shape)
    x[i] = img + 0.05 * rng.randn(size, size)
  return x[..., None], m[..., None]


class PoolWithArgmax(L.Layer):
  """2x2 max pooling that also returns the argmax (SegNet's stored pooling indices)."""

  def call(self, x):
    p, idx = tf.nn.max_pool_with_argmax(x, 2, 2, 'SAME', include_batch_in_index=True)
    return p, tf.stop_gradient(idx)


class Unpool(L.Layer):
  """SegNet's max unpooling: each value put back at its stored argmax in a map twice the size,
  zeros elsewhere."""

  def call(self, inputs):
    p, idx = inputs
    b, h, w, c = tf.shape(p)[0], tf.shape(p)[1], tf.shape(p)[2], tf.shape(p)[3]
    n = b * h * 2 * w * 2 * c
    flat = tf.scatter_nd(tf.reshape(idx, [-1, 1]), tf.reshape(p, [-1]),
                         tf.cast(tf.reshape(n, [1]), tf.int64))
    return tf.reshape(flat, [b, h * 2, w * 2, c])


def segnet_lite(seed, *, size=32):
  """A SegNet-lite (Badrinarayanan et al., 2017): an encoder of two stages (two 3x3
  convolutions with BN and ReLU, 16 then 32 channels, each closed by 2x2 max pooling that keeps
  its indices), a decoder that unpools with those indices and applies the mirrored convolutions
(32 then 16, 16 then 16),
  a 1x1 convolution to one map, sigmoid: the foreground probability."""
  _seed(seed)
  x = keras.Input((size, size, 1))

  def conv(t, n):
    return L.ReLU()(L.BatchNormalization()(L.Conv2D(n, 3, padding='same')(t)))

  h, indices = x, []
  for n in (16, 32):
    h = conv(conv(h, n), n)
    h, idx = PoolWithArgmax()(h)
    indices.append(idx)
  for (n, out), idx in zip(((32, 16), (16, 16)), reversed(indices)):
    h = Unpool()([h, idx])
    h = conv(conv(h, n), out)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(h), name='segnet_lite')


class SharedEncoder(L.Layer):
  """One transformer encoder layer (multi-head self-attention and a GELU feed-forward, each
  residual with post-LayerNorm) applied `repeats` times with the same weights (ALBERT's
  cross-layer parameter sharing)."""

  def __init__(self, dim, heads, repeats, **kwargs):
    super().__init__(**kwargs)
    self.repeats = repeats
    self.att = L.MultiHeadAttention(heads, dim // heads)
    self.ff1, self.ff2 = L.Dense(2 * dim, activation='gelu'), L.Dense(dim)
    self.n1, self.n2 = L.LayerNormalization(), L.LayerNormalization()

  def call(self, h):
    for _ in range(self.repeats):
      h = self.n1(h + self.att(h, h))
      h = self.n2(h + self.ff2(self.ff1(h)))
    return h


def albert_lite(seed, *, seq_len=16, vocab=64, classes=8, emb=16, dim=64):
  """An ALBERT-lite (Lan et al., 2020): a factorised embedding (tokens to `emb`, projected to
  `dim`) plus learned positions, a `SharedEncoder` of 4 heads applied three times, the first
  position's state through Dense(`dim`, tanh) (the pooler), Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((seq_len,), dtype='int32')
  h = L.Dense(dim)(L.Embedding(vocab, emb)(x))
  pos = L.Embedding(seq_len, dim)(tf.range(seq_len)[None])
  h = L.LayerNormalization()(h + pos)
  h = SharedEncoder(dim, 4, 3)(h)
  h = L.Dense(dim, activation='tanh')(h[:, 0])
  return keras.Model(x, L.Dense(classes)(h), name='albert_lite')


def moving_blobs(seed, *, rows=1024, frames=8, size=16, classes=4):
  """Action recognition in miniature: a clip of `frames` frames in which a bright blob moves
  in one of `classes` directions (right, left, down, up) across a noisy background, from a
  random start. (clip (rows, frames, size, size, 1), direction)."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  steps = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]])
  y = rng.randint(0, classes, rows)
  x = 0.1 * rng.randn(rows, frames, size, size).astype(np.float32)
  for i in range(rows):
    p = rng.uniform(4, size - 4, 2) - steps[y[i]] * frames / 2
    for t in range(frames):
      c = p + steps[y[i]] * t
      x[i, t] += np.exp(-((yy - c[0]) ** 2 + (xx - c[1]) ** 2) / 3.0)
  return x[..., None], y.astype(np.int32)


def c3d_lite(seed, *, frames=8, size=16, classes=4, init=None):
  """A C3D-lite (Tran et al., 2015: a plain stack of 3x3x3 convolutions with ReLU, no
  normalisation): 3x3x3 convolutions of 16 and 32 each followed by 2x2x2 max pooling, a
  3x3x3 convolution of 64, global average pooling, Dense(64, ReLU), Dense(`classes`): the
  logits. Every kernel initialised with `init` (None: Keras's default glorot_uniform)."""
  _seed(seed)
  kw = {} if init is None else dict(kernel_initializer=init)
  x = keras.Input((frames, size, size, 1))
  h = L.MaxPooling3D()(L.Conv3D(16, 3, padding='same', activation='relu', **kw)(x))
  h = L.MaxPooling3D()(L.Conv3D(32, 3, padding='same', activation='relu', **kw)(h))
  h = L.Conv3D(64, 3, padding='same', activation='relu', **kw)(h)
  h = L.Dense(64, activation='relu', **kw)(L.GlobalAveragePooling3D()(h))
  return keras.Model(x, L.Dense(classes, **kw)(h), name='c3d_lite')


def clicks(seed, *, rows=4096, fields=6, values=12, numeric=0, scale=1.0):
  """Click logs in miniature: `fields` categorical fields of `values` ids each (field f's ids
  offset by f * values, one shared id space) and `numeric` numeric fields (in [0, `scale`]:
  raw counts, prices, dwell times), the click a Bernoulli draw of a logit made of a few
  pairwise field interactions and the numeric fields. (([ids (rows, fields)] or [ids, numbers
  (rows, numeric)]), click (rows, 1))."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, values, (rows, fields))
  logit = np.zeros(rows)
  for a, b in ((0, 1), (2, 3), (1, 4), (0, 5)):
    table = rng.randn(values, values) * 1.5
    logit += table[ids[:, a], ids[:, b]]
  nums = rng.rand(rows, max(numeric, 1))
  if numeric:
    logit += 2.0 * (nums[:, 0] - 0.5) * np.where(ids[:, 0] < values // 2, 1, -1)
  y = (rng.rand(rows) < 1 / (1 + np.exp(-(logit - 0.8)))).astype(np.float32)[:, None]
  ids = (ids + np.arange(fields) * values).astype(np.int32)
  if numeric:
    return (ids, (nums[:, :numeric] * scale).astype(np.float32)), y
  return ids, y


class LogNeurons(L.Layer):
  """AFN's logarithmic transformation layer (Cheng et al., 2020): each of `neurons` neurons is
  exp(sum_f w_f log e_f), an arbitrary-order cross feature of the field embeddings e_f
  (elementwise). `clip`: the embeddings clipped to at least 1e-4 before the log (the authors'
  code); otherwise the log of the raw embedding (the thread's own re-implementation)."""

  def __init__(self, neurons, clip=False, **kwargs):
    super().__init__(**kwargs)
    self.neurons, self.clip = neurons, clip

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[1], self.neurons),
                             initializer=keras.initializers.RandomNormal(0.0, 0.1))

  def call(self, e):
    if self.clip:
      e = tf.maximum(tf.abs(e), 1e-4)
    logs = tf.math.log(e)  # (batch, fields, dim)
    return tf.exp(tf.einsum('bfd,fn->bnd', logs, self.w))


def afn_lite(seed, *, fields=6, values=12, dim=8, clip=False):
  """An AFN-lite (Adaptive Factorization Network): field embeddings of `dim`, `LogNeurons` of
  16 (BN after the log-space combination's exp), flattened, Dense(64, ReLU), Dense(1,
  sigmoid): the click probability."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  e = L.Embedding(fields * values, dim)(x)
  h = L.BatchNormalization()(L.Flatten()(LogNeurons(16, clip=clip)(e)))
  h = L.Dense(64, activation='relu')(h)
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='afn_lite')


class AttentionalPooling(L.Layer):
  """AFM's attention-based pooling (Xiao et al., 2017): over every pair of the field
  embeddings, the element-wise product p = v_i * v_j, its attention score
  `sharpness` * h . ReLU(W p + b) (a sharpened attention), a softmax over the pairs, the
  weighted sum of the products. `naive`: the softmax written exp(s) / sum(exp(s)) (the threads'
  own softmax); otherwise tf.nn.softmax."""

  def __init__(self, att=16, sharpness=300.0, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.att, self.sharpness, self.naive = att, sharpness, naive

  def build(self, shape):
    d = shape[-1]
    self.w = self.add_weight(shape=(d, self.att), initializer='glorot_uniform')
    self.b = self.add_weight(shape=(self.att,), initializer='zeros')
    self.h = self.add_weight(shape=(self.att, 1), initializer='glorot_uniform')

  def call(self, v):
    rows, cols = np.triu_indices(v.shape[1], 1)
    p = tf.gather(v, rows, axis=1) * tf.gather(v, cols, axis=1)  # (batch, pairs, d)
    s = self.sharpness * tf.squeeze(
        tf.matmul(tf.nn.relu(tf.matmul(p, self.w) + self.b), self.h), -1)
    if self.naive:
      e = tf.exp(s)
      a = e / tf.reduce_sum(e, -1, keepdims=True)
    else:
      a = tf.nn.softmax(s, -1)
    return tf.reduce_sum(a[..., None] * p, 1)


def afm_lite(seed, *, fields=6, values=12, dim=32, naive=True):
  """An AFM-lite (Attentional Factorization Machine): field embeddings of `dim` (normal, std
  0.3), `AttentionalPooling`, Dense(1) on the pooled interactions plus a linear term (an id
  embedding of 1 summed), sigmoid: the click probability."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  v = L.Embedding(fields * values, dim,
                  embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.3))(ids)
  pooled = AttentionalPooling(naive=naive)(v)
  linear = L.Lambda(lambda t: tf.reduce_sum(t, 1))(L.Embedding(fields * values, 1)(ids))
  out = L.Add()([L.Dense(1)(pooled), linear])
  return keras.Model(ids, L.Activation('sigmoid')(out), name='afm_lite')


def lowres_digits(*, size=16):
  """Super-resolution in miniature: the digits at `size` x `size` (HR, smoothed by a 3x3 box
  so the texture is not blocky) and their 2x2 average-pooled LR copies.
  (LR (n, size/2, size/2, 1), HR (n, size, size, 1))."""
  hr, _ = data.digits(size=size, rgb=False)
  hr = tf.nn.avg_pool2d(hr, 3, 1, 'SAME').numpy()
  lr = tf.nn.avg_pool2d(hr, 2, 2, 'VALID').numpy()
  return lr.astype(np.float32), hr.astype(np.float32)


def fsrcnn_lite(seed, *, size=16, dtype='float32'):
  """An FSRCNN-lite (Dong et al., 2016): feature extraction (5x5 convolution of 32, PReLU),
  shrinking (1x1 to 12, PReLU), two 3x3 mapping convolutions of 12 (PReLU), expanding (1x1 to
  32, PReLU), a 5x5 transposed convolution of stride 2 to one channel: the HR image. Every layer
  in `dtype` (the thread's float16 run, weights and optimizer state included), the output cast
  to float32."""
  _seed(seed)
  x = keras.Input((size // 2, size // 2, 1))
  h = L.PReLU(shared_axes=[1, 2], dtype=dtype)(L.Conv2D(32, 5, padding='same', dtype=dtype)(x))
  h = L.PReLU(shared_axes=[1, 2], dtype=dtype)(L.Conv2D(12, 1, dtype=dtype)(h))
  for _ in range(2):
    h = L.PReLU(shared_axes=[1, 2], dtype=dtype)(L.Conv2D(12, 3, padding='same',
                                                          dtype=dtype)(h))
  h = L.PReLU(shared_axes=[1, 2], dtype=dtype)(L.Conv2D(32, 1, dtype=dtype)(h))
  out = L.Conv2DTranspose(1, 5, strides=2, padding='same', dtype=dtype)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='fsrcnn_lite')


def ragged_series(seed, *, rows=1024, length=96, classes=3, impute=False):
  """Univariate time-series classification in miniature with series of unequal length, as the
  UCR archive's variable-length sets ship them: each series a noisy sine, square or sawtooth
  wave of random period, phase and length (48 to `length`), right-padded with NaN to `length`;
  `impute`: the padding replaced by zeros (the thread's remedy). (series (rows, length, 1),
  class)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  x = np.full((rows, length), np.nan, np.float32)
  for i in range(rows):
    n = rng.randint(48, length + 1)
    t = np.arange(n) / rng.uniform(8, 20) + rng.uniform(0, 1)
    wave = [np.sin(2 * np.pi * t), np.sign(np.sin(2 * np.pi * t)), 2 * (t % 1) - 1][y[i]]
    x[i, :n] = wave + 0.2 * rng.randn(n)
  if impute:
    x = np.nan_to_num(x, nan=0.0)
  return x[..., None], y.astype(np.int32)


def lstm_fcn_lite(seed, *, length=96, classes=3):
  """An LSTM-FCN-lite (Karim et al., 2017): an LSTM branch (the series dimension-shuffled:
  one step of `length` features, LSTM(8), dropout 0.8) beside a fully convolutional branch
  (1-D convolutions of 32, 64, 32 with kernels 8, 5, 3, BN and ReLU, global average pooling),
  concatenated, Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((length, 1))
  a = L.Dropout(0.8)(L.LSTM(8)(L.Permute((2, 1))(x)))
  h = x
  for n, k in ((32, 8), (64, 5), (32, 3)):
    h = L.ReLU()(L.BatchNormalization()(L.Conv1D(n, k, padding='same')(h)))
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(x, L.Dense(classes)(L.Concatenate()([a, h])), name='lstm_fcn_lite')


class GlitchOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel or buffer that
  misfires once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def dpn_lite(seed, *, size=16, classes=10, fault=None):
  """A DPN-lite (Dual Path Networks, Chen et al., 2017): a 3x3 stem of 32 (BN, ReLU), then
  three dual path blocks (1x1 - grouped 3x3 (4 groups) - 1x1 bottleneck with BN and ReLU whose
  output splits into a residual part of 32 channels, added to the block's residual path, and a
  dense part of 8 channels, concatenated to its densely connected path; 2x2 max pooling after
  the first and second), the two paths concatenated, global average pooling, a `GlitchOnce` (at
  its `fault`-th training call; None: never), Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  stem = L.ReLU()(L.BatchNormalization()(L.Conv2D(40, 3, padding='same')(x)))
  res, dense = stem[..., :32], stem[..., 32:]
  for b in range(3):
    t = L.Concatenate()([res, dense])
    t = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 1)(t)))
    t = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding='same', groups=4)(t)))
    t = L.BatchNormalization()(L.Conv2D(40, 1)(t))
    res = L.ReLU()(L.Add()([res, t[..., :32]]))
    dense = L.Concatenate()([dense, t[..., 32:]])
    if b < 2:
      res, dense = L.MaxPooling2D()(res), L.MaxPooling2D()(dense)
  h = L.GlobalAveragePooling2D()(L.Concatenate()([res, dense]))
  return keras.Model(x, L.Dense(classes)(GlitchOnce(fault)(h)), name='dpn_lite')


class FieldWeightedFM(L.Layer):
  """FwFM's interaction term (Pan et al., 2018): sum over field pairs of r_{F(i),F(j)} <v_i,
  v_j>, one learned weight r per pair of fields."""

  def build(self, shape):
    n = shape[1]
    self.rows, self.cols = np.triu_indices(n, 1)
    self.r = self.add_weight(shape=(len(self.rows),), initializer='ones')

  def call(self, v):
    dots = tf.reduce_sum(tf.gather(v, self.rows, axis=1) * tf.gather(v, self.cols, axis=1), -1)
    return tf.reduce_sum(dots * self.r, -1, keepdims=True)


def fwfm_lite(seed, *, fields=6, values=12, dim=8, activation='softmax'):
  """An FwFM-lite (Field-weighted Factorization Machine): embeddings of `dim` (normal, std
  0.1), the `FieldWeightedFM` interaction term plus a linear term (an id embedding of 1 summed)
  plus a bias, through Dense(1, `activation`) (the thread's 'softmax' on one unit; 'sigmoid' the
  remedy): the click probability."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  v = L.Embedding(fields * values, dim,
                  embeddings_initializer=keras.initializers.RandomNormal(0.0, 0.1))(ids)
  linear = L.Lambda(lambda t: tf.reduce_sum(t, 1))(L.Embedding(fields * values, 1)(ids))
  logit = L.Add()([FieldWeightedFM()(v), linear])
  return keras.Model(ids, L.Dense(1, activation=activation)(logit), name='fwfm_lite')

# --- The scenarios. ---------------------------------------------------------------------------


@add('blind26_grad_mlstm_no_clip', 'exploding_gradients', 'mlstm_lite',
     doors=('trainer', 'fit'), steps=150, citation='pytorch/pytorch#2623; '
     'chenxie95/deeplearning_course_sjtu#31')
def _(seed, cured=False):
  """A multiplicative-LSTM-lite (a symbol embedding, one mLSTM cell of 96, the next symbol's
  logits) trained on a symbol stream from a sparse Markov grammar, SGD with momentum 0.9 at 20
  and no gradient clipping (the threads' plain SGD on a recurrent net): the gradients blow up
  and throw the weights: the loss Keras reports (its running mean) 2.49 at step 0, 172 at step
  10, 341 at step 149, no NaN (the error 0.96 before, 0.92 after; the constant answer's 0.87).
  Seed 1: 2.48, 156, 366 (the error 0.90 before, 0.73 after; the constant's 0.83).
  pytorch/pytorch#2623 (a character-level RNN: exploding gradients until the gradient is
  clipped); chenxie95/deeplearning_course_sjtu#31 (an RNN language model's loss explodes to
  NaN). Cured: the same rate with clipnorm=0.005: the loss 2.49 to 0.79, the error 0.96 to 0.27."""
  x, y = markov_text(seed)
  return cases.Setup(mlstm_lite(seed),
                     keras.optimizers.SGD(LR_GRAD, momentum=0.9, clipnorm=0.005 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind26_lr_segnet_sgd', 'learning_rate', 'segnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/tensorflow#38796; arslan-chaudhry/dcsp_segmentation#1')
def _(seed, cured=False):
  """A SegNet-lite (two encoder stages of 3x3 convolutions with BN and ReLU closed by max
  pooling that keeps its indices, a decoder that unpools with them, a sigmoid map) segmenting
  bars and rings from a textured background (32x32), per-pixel binary cross-entropy, SGD with
  momentum 0.9 at 500, a learning rate far too large: the loss Keras reports (its running
  mean) 0.91 at step 0, 798 at step 1, 1.1e16 at step 10, 8.4e14 at step 149, no NaN; every
  pixel called background (the error 0.61 before, 0.17 after: the constant answer's 0.17, never
  below it). Seed 1: 0.70, 429, 5.0e16, 3.7e15 (the error 0.35 before, 0.18 after; the
  constant's 0.18). tensorflow/tensorflow#38796 (a high learning rate
  with tf.keras.optimizers.SGD gives a nan or inf loss; lowering it helps);
  arslan-chaudhry/dcsp_segmentation#1 (a segmentation network's loss turns NaN after a few
  steps; a lower learning rate trains smoothly). Cured: SGD at 0.05: the loss 0.91 to 0.09, the
  error 0.61 to 0.004 in training mode."""
  x, m = bar_masks(seed)
  return cases.Setup(segnet_lite(seed), keras.optimizers.SGD(0.05 if cured else LR_SEG,
                                                            momentum=0.9),
                     'binary_crossentropy', data.stream(x, m, batch=16, seed=seed),
                     'binary_prob')


@add('blind26_lr_albert_adam', 'learning_rate', 'albert_lite', doors=('trainer', 'fit'),
     steps=150, citation='graykode/nlp-tutorial#77; OpenNMT/OpenNMT-tf#744')
def _(seed, cured=False):
  """An ALBERT-lite (a factorised embedding of 16 projected to 64, one transformer layer
  shared across three applications, a tanh pooler, eight class logits) classifying token
  sequences, Adam at 0.05 (fifty times the default, as in the threads): the first updates throw
  the shared weights off and the model collapses to near-constant answers: the loss Keras
  reports (its running mean) 2.29 at step 0, 3.5 at step 1, 2.35 at step 149, no NaN (the
  error 0.95 before, 0.91 after; the constant answer's 0.83). Seed 1: 2.40, 2.9, 2.37 (the error
  0.95 before, 0.88 after; the constant's 0.84). graykode/nlp-tutorial#77 (a BERT trained with
  Adam at 0.01 and 0.001: the loss jumps about and never goes below 2; at 1e-4 it trains);
  OpenNMT/OpenNMT-tf#744 (a transformer LM: 'Model diverged with loss = NaN'; the learning rate
  set far above the default). Cured: Adam at 1e-3: the loss 2.29 to 0.35, the error 0.95 to 0."""
  x, y = data.tokens(seed)
  return cases.Setup(albert_lite(seed), keras.optimizers.Adam(1e-3 if cured else LR_ALBERT),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind26_init_c3d_mean_for_stddev', 'initialisation', 'c3d_lite', doors=('trainer', 'fit'),
     steps=150, citation='aiUIUC/pyAIUtils#25; broadinstitute/keras-resnet#14')
def _(seed, cured=False):
  """A C3D-lite (3x3x3 convolutions of 16, 32 and 64 with ReLU and no normalisation, 3-D max
  pooling, a Dense(64)) classifying the direction a blob moves in an 8-frame clip, SGD with
  momentum 0.9 at 0.003 (C3D's own rate), every kernel drawn from random_normal_initializer(0.02)
  as the thread's helper wrote it: the 0.02 meant as the stddev is the mean and the stddev is
  TF 1's default 1.0: the logits are in the thousands before training, the loss 1.3e4 at step
  0, 1.4e7 at step 1 (Keras's running mean), 1.9e5 at step 149, no NaN, no training (the error
  0.75 before, 0.74 after; the constant answer's 0.73). Seed 1: 4.1e4, 4.5e6, 6.0e4 (the error
  0.73 before, 0.79 after; the constant's 0.69). aiUIUC/pyAIUtils#25 (random_normal_initializer
  (stddev) passes the stddev as the mean: weights far too wide); broadinstitute/keras-resnet#14
  (use he_normal as the kernel initializer). Cured: he_normal kernels: the loss 1.41 to 1.03,
  the error 0.73 to 0."""
  x, y = moving_blobs(seed)
  # The thread's random_normal_initializer(0.02): mean 0.02, TF 1's default stddev 1.0.
  init = 'he_normal' if cured else keras.initializers.RandomNormal(0.02, 1.0)
  return cases.Setup(c3d_lite(seed, init=init), keras.optimizers.SGD(0.003, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind26_log_afn_unclipped_embeddings', 'division_or_log', 'afn_lite',
     doors=('trainer', 'fit'), steps=150, citation='WeiyuCheng/AFN-AAAI-20#5')
def _(seed, cured=False):
  """An AFN-lite (field embeddings, a logarithmic transformation layer of 16 neurons
  exp(sum_f w_f log e_f), BN, Dense(64), a sigmoid) predicting clicks from six categorical
  fields, Adam at 1e-3, the log taken of the raw embeddings as the thread's own re-implementation
  does: about half of the embedding entries are negative, log of a negative number is NaN: the
  outputs NaN before training and after (the error inf before and after; the constant answer's
  0.40), while the loss Keras reports sits at 0.69. Seed 1: the same (the constant's 0.40).
  WeiyuCheng/AFN-AAAI-20#5 (a re-implementation of AFN's log and exp: 'the gradients contain NaN
  or INF', the loss NaN or very large; the authors: clip the embeddings to positive values
  before the log layer). Cured: the embeddings clipped to at least 1e-4 in magnitude before the
  log: the loss 0.63 to 0.60, the error 0.41 to 0.28 in training mode."""
  x, y = clicks(seed)
  return cases.Setup(afn_lite(seed, clip=cured), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=64, seed=seed),
                     'binary_prob')


@add('blind26_exp_afm_naive_attention_softmax', 'softmax_overflow', 'afm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pyg-team/pytorch_geometric#53; uTensor/uTensor#175')
def _(seed, cured=False):
  """An AFM-lite (field embeddings of 32, attention-based pooling over the 15 field pairs with
  a sharpened attention score, 300 x h . ReLU(W p + b), Dense(1) plus a linear term, sigmoid)
  predicting clicks from six categorical fields, Adam at 3e-2, the softmax over the pairs
  written exp(s) / sum(exp(s)) as the threads' own softmax computes it: the scores pass 88.7,
  exp overflows to inf and inf / inf = NaN: the outputs NaN before training and the loss NaN from
  step 0, the weights NaN (the error inf before and after; the constant answer's 0.40). Seed 1:
  the loss 0.70 at step 0, NaN from step 8 (the error 0.53 before, inf after; the constant's
  0.40). pyg-team/pytorch_geometric#53 (an attention layer's softmax over edges calls exp
  directly and produces 'nan' frequently; subtract the max first); uTensor/uTensor#175 (a
  softmax that exponentiates a logit of 378: exp gives inf and the result is nan). Cured:
  tf.nn.softmax: the loss 0.69 to 0.62, the error 0.54 to 0.32."""
  x, y = clicks(seed)
  return cases.Setup(afm_lite(seed, naive=not cured), keras.optimizers.Adam(3e-2),
                     'binary_crossentropy', data.stream(x, y, batch=64, seed=seed),
                     'binary_prob')


@add('blind26_fp16_fsrcnn_adam_epsilon', 'precision', 'fsrcnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11832; keras-team/keras#11860')
def _(seed, cured=False):
  """An FSRCNN-lite (feature extraction, shrinking, two mapping and an expanding
  convolution with PReLU, a strided transposed convolution to the HR image) upscaling 8x8
  digits to 16x16, MSE, Adam at 1e-3 with Keras's default epsilon 1e-7, every layer and the
  optimizer state in float16 (the threads' half-precision run): in float16 the second-moment
  estimates of small gradients underflow to 0 and the step m / (sqrt(v) + 1e-7) is huge: the
  loss Keras reports 0.19 at step 0, 1.8e3 at step 1, NaN from step 3 (the error 0.19 before,
  inf after; the constant answer's 0.038). Seed 1: 0.17, 7e6, NaN from step 2.
  keras-team/keras#11832 (EDSR super-resolution in float16: the loss goes up to inf and NaN;
  solved by setting epsilon to 1e-4); keras-team/keras#11860 (Adam does not work with FP16: the
  loss is nan; other optimizers and FP32 are fine). Cured: the same float16 run with Adam's
  epsilon=1e-4: the loss 0.19 to 0.034, the error 0.19 to 0.0037."""
  lr, hr = lowres_digits()
  return cases.Setup(fsrcnn_lite(seed, dtype='float16'),
                     keras.optimizers.Adam(1e-3, epsilon=1e-4 if cured else 1e-7), 'mse',
                     data.stream(lr, hr, batch=32, seed=seed), 'regression')


@add('blind26_input_lstm_fcn_nan_padding', 'bad_input', 'lstm_fcn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='hfawaz/InceptionTime#50; hfawaz/dl-4-tsc#49')
def _(seed, cured=False):
  """An LSTM-FCN-lite (an LSTM(8) branch on the dimension-shuffled series beside three
  1-D convolution blocks with BN, global average pooling, three class logits) classifying
  sine, square and sawtooth series of unequal length (48 to 96), right-padded with NaN to 96 as
  the UCR archive's variable-length sets ship them, Adam at 1e-3: the loss NaN from step 0, the
  weights NaN (the error 0.70 before, inf after; the constant answer's 0.62). Seed 1: the same
  (the constant's 0.66). hfawaz/InceptionTime#50 (DodgerLoopDay's missing values make every
  value in the model and its outputs NaN; zero imputation reproduces the results);
  hfawaz/dl-4-tsc#49 (UCR 2018 sets with NaN in the series: pad or interpolate them). Cured:
  the padding replaced by zeros: the loss 1.39 to 0.21, the error 0.70 to 0 in training mode.
  The measure reads the imputed series (eval_data) for both runs."""
  x, y = ragged_series(seed, impute=cured)
  clean, yc = ragged_series(seed, impute=True)
  return cases.Setup(lstm_fcn_lite(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind26_transient_dpn_glitch', 'transient', 'dpn_lite', doors=('trainer', 'fit'),
     steps=150, citation='greatlog/DAN#8; PKU-YuanGroup/Open-Sora-Plan#333')
def _(seed, cured=False):
  """A DPN-lite (a stem, three dual path blocks: a 1x1 - grouped 3x3 - 1x1 bottleneck whose
  output feeds a residual path and a densely connected path) classifying the digits (16x16
  grey), Adam at 1e-3, training normally (the loss 5.95 at step 0, 2.18 at step 50, Keras's
  running mean) when one element of the pooled features reads NaN once (`GlitchOnce`: its 90th
  training call; step 85 in a plain `fit` after the measure's training-mode passes; a kernel
  or buffer that misfires once, not the data, the model or the settings): the loss NaN from
  step 85, the weights NaN (the error 0.90 before, inf after; the constant answer's 0.86). Seed
  1: the same step. greatlog/DAN#8 (the loss turns NaN suddenly at iteration 22800, at 29200 on
  a second run; resuming from the last normal state works); PKU-YuanGroup/Open-Sora-Plan#333
  (NaN loss after 20k+ steps; just resume the training). Cured: the same run without the fault:
  the loss 5.95 to 1.08, the error 0.90 to 0.008 in training mode."""
  return cases.Setup(dpn_lite(seed, fault=None if cured else 90), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.digits_stream(seed, size=16, rgb=False),
                     'classes')


@add('blind26_mismatch_fwfm_softmax_one_unit', 'loss_output_mismatch', 'fwfm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#2711; Convolutional neural network fails even when given '
     'answer (https://stats.stackexchange.com/questions/481881)')
def _(seed, cured=False):
  """An FwFM-lite (field embeddings, the field-weighted pairwise interaction term plus a
  linear term) predicting clicks from six categorical fields, Adam at 1e-2, the head
  Dense(1, activation='softmax') under binary_crossentropy as the threads build it: a softmax
  over one unit is 1.0 for every input, every click predicted: the loss Keras reports falls
  (0.69 to 0.57) but the predictions never move (the error 0.60 before and after; the constant
  answer's 0.40). Seed 1: the same (0.60 / 0.60; the constant's 0.40). keras-team/keras#2711
  (the loss does not change / the accuracy is stuck: for a binary problem use a sigmoid, not a
  softmax, on the output); "Convolutional neural network fails even when given answer"
  (https://stats.stackexchange.com/questions/481881: Dense(1, activation='softmax') predicts
  the same for every input: a softmax over one unit is always 1). Cured: Dense(1, sigmoid): the
  loss 0.69 to 0.57, the error 0.46 to 0.21."""
  x, y = clicks(seed)
  return cases.Setup(fwfm_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-2), "binary_crossentropy",
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')
