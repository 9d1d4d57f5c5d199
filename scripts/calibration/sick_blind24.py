"""A twenty-fourth blind set of sick scenarios (the 'blind24' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind23.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a U-Net-lite for depth, a MixHop-lite, an
RCAN-lite, a WaveRNN-lite, a BERT4Rec-lite, a FractalNet-lite, a PFNL-lite, a FiBiNET-lite, a
PyramidNet-lite and an FCN for time-series classification). Each builder takes `cured`: the same
run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked
with plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and
1), the cured twin passes runner's "did it train" measure in the same number of steps (seed
0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND24 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND24.add` with split='blind24'."""
  return BLIND24.add(name, expected, arch, split='blind24', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def depth_scenes(seed, *, rows=1024, size=32, holes=0.1):
  """Indoor scenes in miniature for monocular depth: a back wall and a floor plane (depth 2 to
  8 m) with one or two boxes in front (1 to 4 m); the RGB image shades each pixel by its depth
  (nearer is brighter, a per-surface tint, texture noise). The ground truth as a depth sensor
  gives it: a fraction `holes` of pixels are 0 (no return: invalid), as in NYU / KITTI maps.
  (image (rows, size, size, 3), sensor depth (rows, size, size, 1), dense depth (same))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing='ij')
  depth = np.zeros((rows, size, size), np.float32)
  tint = np.zeros((rows, size, size, 3), np.float32)
  for i in range(rows):
    wall = rng.uniform(4.0, 8.0)
    horizon = rng.uniform(0.4, 0.7)
    floor = np.where(yy > horizon, wall / (1.0 + 4.0 * (yy - horizon)), wall)
    d = np.maximum(floor, 2.0)
    t = np.broadcast_to(rng.uniform(0.3, 1.0, 3), (size, size, 3)).copy()
    for _ in range(rng.randint(1, 3)):
      y0, x0 = rng.randint(0, size - 8, 2)
      h, w = rng.randint(6, 14, 2)
      box = np.zeros((size, size), bool)
      box[y0:y0 + h, x0:x0 + w] = True
      d = np.where(box, rng.uniform(1.0, 4.0), d)
      t[box] = rng.uniform(0.3, 1.0, 3)
    depth[i] = d
    tint[i] = t
  image = tint * (1.5 / depth[..., None]) + 0.03 * rng.randn(rows, size, size, 3)
  sensor = np.where(rng.rand(rows, size, size) < holes, 0.0, depth)
  return (image.astype(np.float32), sensor[..., None].astype(np.float32),
          depth[..., None].astype(np.float32))


def unet_depth_lite(seed, *, size=32):
  """A U-Net-lite for monocular depth (Ronneberger et al., 2015, as depth estimators such as
  BTS and AdaBins use the encoder-decoder): two 3x3 convolutions per level (16, 32, 64; ReLU),
  2x2 max pooling down, transposed convolutions up with the skip connections concatenated, a
  1x1 convolution to one map through softplus + 0.1 (depth is positive): metres."""
  _seed(seed)
  x = keras.Input((size, size, 3))

  def block(h, n):
    h = L.Conv2D(n, 3, padding='same', activation='relu')(h)
    return L.Conv2D(n, 3, padding='same', activation='relu')(h)

  e1 = block(x, 16)
  e2 = block(L.MaxPooling2D()(e1), 32)
  b = block(L.MaxPooling2D()(e2), 64)
  d2 = block(L.Concatenate()([L.Conv2DTranspose(32, 2, strides=2)(b), e2]), 32)
  d1 = block(L.Concatenate()([L.Conv2DTranspose(16, 2, strides=2)(d2), e1]), 16)
  out = L.Conv2D(1, 1, activation='softplus')(d1)
  return keras.Model(x, L.Lambda(lambda t: t + 0.1)(out), name='unet_depth_lite')


def silog_unmasked(y, p):
  """The scale-invariant log loss (Eigen et al., 2014; lambda 0.85) over every pixel, as the
  thread's adjusted code computes it: the sensor's invalid 0s go into log(y) = -inf."""
  d = tf.math.log(tf.cast(p, tf.float32)) - tf.math.log(tf.cast(y, tf.float32))
  return tf.reduce_mean(tf.square(d)) - 0.85 * tf.square(tf.reduce_mean(d))


def silog_masked(y, p):
  """The scale-invariant log loss over the valid pixels (y > 0) only: the thread's remedy (the
  valid mask of BTS, DORN)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  valid = y > 0
  d = tf.boolean_mask(tf.math.log(p), valid) - tf.boolean_mask(tf.math.log(y), valid)
  return tf.reduce_mean(tf.square(d)) - 0.85 * tf.square(tf.reduce_mean(d))


def padded_graphs(seed, *, rows=2048, nodes=16, features=8):
  """Small graphs of three families (a ring, a star, two cliques joined by one edge) of 8 to
  16 nodes, padded to `nodes` as a batched loader pads them: the padding nodes have no edges and
  zero features. Node features noise plus a constant channel. (([features (rows, nodes,
  features), adjacency (rows, nodes, nodes), mask (rows, nodes)]), family)."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, nodes, features), np.float32)
  a = np.zeros((rows, nodes, nodes), np.float32)
  m = np.zeros((rows, nodes), np.float32)
  y = rng.randint(0, 3, rows)
  for i in range(rows):
    n = rng.randint(8, nodes + 1)
    order = rng.permutation(n)
    if y[i] == 0:
      edges = [(order[k], order[(k + 1) % n]) for k in range(n)]
    elif y[i] == 1:
      edges = [(order[0], order[k]) for k in range(1, n)]
    else:
      h = n // 2
      edges = [(order[p], order[q]) for p in range(h) for q in range(p + 1, h)]
      edges += [(order[p], order[q]) for p in range(h, n) for q in range(p + 1, n)]
      edges.append((order[0], order[h]))
    for p, q in edges:
      a[i, p, q] = a[i, q, p] = 1.0
    x[i, :n] = 0.5 * rng.randn(n, features)
    x[i, :n, 0] = 1.0
    m[i, :n] = 1.0
  return (x, a, m), y.astype(np.int32)


class MixHopConv(L.Layer):
  """A MixHop graph convolution (Abu-El-Haija et al., 2019): [X W0, A_hat X W1, A_hat^2 X W2]
  concatenated, with A_hat = D^-1/2 A D^-1/2 computed in the layer from the batch's adjacency
  (`guard`: a degree of 0 gives 0 instead of 0^-1/2 = inf, the threads' remedy; otherwise as the
  thread's code has it)."""

  def __init__(self, units, guard=False, **kwargs):
    super().__init__(**kwargs)
    self.units, self.guard = units, guard
    self.dense = [L.Dense(units) for _ in range(3)]

  def call(self, inputs):
    x, a = inputs
    deg = tf.reduce_sum(a, axis=-1)
    if self.guard:
      dinv = tf.where(deg > 0, tf.math.rsqrt(tf.maximum(deg, 1e-12)), tf.zeros_like(deg))
    else:
      dinv = tf.pow(deg, -0.5)
    a_hat = a * dinv[:, :, None] * dinv[:, None, :]
    h1 = tf.matmul(a_hat, x)
    h2 = tf.matmul(a_hat, h1)
    return tf.nn.relu(tf.concat([d(h) for d, h in zip(self.dense, (x, h1, h2))], axis=-1))


def mixhop_lite(seed, *, nodes=16, features=8, classes=3, guard=False):
  """A MixHop-lite graph classifier: two `MixHopConv` layers (3 x 16), the mean over the real
  nodes (the mask), Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((nodes, features))
  a = keras.Input((nodes, nodes))
  m = keras.Input((nodes,))
  h = MixHopConv(16, guard=guard)([x, a])
  h = MixHopConv(16, guard=guard)([h, a])
  pooled = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1][..., None], 1) /
                    tf.reduce_sum(t[1], 1, keepdims=True))([h, m])
  return keras.Model([x, a, m], L.Dense(classes)(pooled), name='mixhop_lite')


def sr_pairs(seed):
  """Super-resolution pairs from the digits: the 16x16 image the target, its 2x2 average
  (8x8) the input. (low (1500, 8, 8, 1), high (1500, 16, 16, 1))."""
  del seed
  high, _ = data.digits(size=16, rgb=False)
  low = high.reshape(-1, 8, 2, 8, 2, 1).mean(axis=(2, 4))
  return low.astype(np.float32), high


def rcan_lite(seed, *, dtype='float16', groups=2, blocks=2, width=32):
  """An RCAN-lite (Zhang et al., 2018, residual channel attention networks): a 3x3
  convolution of `width`, `groups` residual groups of `blocks` residual channel-attention blocks
  (3x3 conv, ReLU, 3x3 conv, channel attention: global average, Dense(width / 8, ReLU),
  Dense(width, sigmoid), rescale; added back), a long skip, x2 upsampling by a convolution and
  depth-to-space, a 3x3 convolution to the image. Every layer in `dtype` (the thread's
  `K.set_floatx('float16')`: float16 weights and compute)."""
  _seed(seed)
  conv = lambda n, k=3: L.Conv2D(n, k, padding='same', dtype=dtype)
  x = keras.Input((8, 8, 1))
  h0 = conv(width)(x)
  h = h0
  for _ in range(groups):
    g = h
    for _ in range(blocks):
      r = conv(width)(L.Activation('relu', dtype=dtype)(conv(width)(g)))
      s = L.GlobalAveragePooling2D(keepdims=True, dtype=dtype)(r)
      s = L.Dense(width // 8, activation='relu', dtype=dtype)(s)
      s = L.Dense(width, activation='sigmoid', dtype=dtype)(s)
      g = L.Add(dtype=dtype)([g, L.Multiply(dtype=dtype)([r, s])])
    h = L.Add(dtype=dtype)([h, conv(width)(g)])
  h = L.Add(dtype=dtype)([h0, h])
  h = L.Lambda(lambda t: tf.nn.depth_to_space(t, 2), dtype=dtype)(conv(4 * width)(h))
  out = conv(1)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='rcan_lite')


def mulaw_speech(seed, *, rows=2048, context=32, classes=8):
  """Voiced sounds in miniature at 8 kHz: a fundamental (100 to 400 Hz) and its second
  harmonic at random phases and levels, a little noise, mu-law companded to [-1, 1]. Each row
  the last `context` samples (the input, as WaveRNN feeds back its samples) and the next
  sample's mu-law class (`classes` levels). (x (rows, context, 1), classes)."""
  rng = np.random.RandomState(seed)
  t = np.arange(context + 1)[None] / 8000.0
  f0 = rng.uniform(100, 400, (rows, 1))
  x = (np.sin(2 * np.pi * f0 * t + rng.uniform(0, 6.3, (rows, 1))) +
       rng.uniform(0, 0.5, (rows, 1)) * np.sin(4 * np.pi * f0 * t + rng.uniform(0, 6.3, (rows, 1))))
  x = x / np.abs(x).max(axis=1, keepdims=True) * rng.uniform(0.3, 1.0, (rows, 1))
  x = x + 0.01 * rng.randn(*x.shape)
  mu = np.clip(np.sign(x) * np.log1p(255 * np.abs(x)) / np.log(256.0), -1, 1)
  label = np.clip(((mu[:, -1] + 1) / 2 * classes).astype(int), 0, classes - 1)
  return mu[:, :-1, None].astype(np.float32), label.astype(np.int32)


def wavernn_lite(seed, *, context=32, classes=8, units=64):
  """A WaveRNN-lite (Kalchbrenner et al., 2018; fatchord's single-GRU version without the
  conditioning network): a GRU(`units`) over the past samples, Dense(`units`, ReLU),
  Dense(`classes`): the logits of the next sample's mu-law class."""
  _seed(seed)
  x = keras.Input((context, 1))
  h = L.GRU(units)(x)
  h = L.Dense(units, activation='relu')(h)
  return keras.Model(x, L.Dense(classes)(h), name='wavernn_lite')


def item_sequences(seed, *, rows=4096, items=50, length=12, genres=5):
  """Interaction sequences in miniature for BERT4Rec's cloze task: each user a genre (10 items)
  and a walk through it (the next item mostly the genre's next one); the last position replaced
  by the [mask] token (id `items`), the label the hidden item. (ids (rows, length), item)."""
  rng = np.random.RandomState(seed)
  per = items // genres
  g = rng.randint(0, genres, rows)
  start = rng.randint(0, per, rows)
  steps = np.where(rng.rand(rows, length) < 0.8, 1, rng.randint(0, per, (rows, length)))
  pos = (start[:, None] + np.cumsum(steps, axis=1)) % per
  seq = g[:, None] * per + pos
  label = seq[:, -1].copy()
  seq[:, -1] = items
  return seq.astype(np.int32), label.astype(np.int32)


def bert4rec_lite(seed, *, items=50, length=12, dim=32, heads=2, blocks=2):
  """A BERT4Rec-lite (Sun et al., 2019): item + position embeddings, `blocks` post-norm
  Transformer encoder blocks (bidirectional multi-head attention of `heads`, a GELU feed-forward
  of 4 x `dim`, LayerNorm), the [mask] position's state, Dense(`items`): the logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = L.Embedding(items + 1, dim)(ids)
  h = h + L.Embedding(length, dim)(tf.range(length))[None]
  for _ in range(blocks):
    a = L.MultiHeadAttention(heads, dim // heads)(h, h)
    h = L.LayerNormalization()(h + a)
    f = L.Dense(dim, kernel_initializer='glorot_uniform')(
        L.Dense(4 * dim, activation='gelu')(h))
    h = L.LayerNormalization()(h + f)
  return keras.Model(ids, L.Dense(items)(h[:, -1]), name='bert4rec_lite')


def fractalnet_lite(seed, *, size=16, classes=10, init='random_normal_1'):
  """A FractalNet-lite (Larsson et al., 2017): two fractal blocks of two columns (C=2: one 3x3
  convolution beside two in series, joined by their mean), ReLU, 2x2 max pooling after each,
  global average pooling, Dense(`classes`): the logits. Every kernel initialised with `init`
  ('random_normal_1': N(0, 1), the thread's unit normal; otherwise a Keras initializer)."""
  _seed(seed)
  ini = keras.initializers.RandomNormal(stddev=1.0) if init == 'random_normal_1' else init
  conv = lambda n: L.Conv2D(n, 3, padding='same', activation='relu', kernel_initializer=ini)
  x = keras.Input((size, size, 1))
  h = x
  for n in (32, 64):
    short = conv(n)(h)
    deep = conv(n)(conv(n)(h))
    h = L.MaxPooling2D()(L.Average()([short, deep]))
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(x, L.Dense(classes, kernel_initializer=ini)(h), name='fractalnet_lite')


def frame_stacks(seed, *, frames=3):
  """Video super-resolution pairs in miniature from the digits: `frames` frames of each digit,
  each shifted by a random sub-image offset (a camera's jitter) and averaged 2x2 to 8x8; the
  target the centre frame at 16x16. (x (1500, 8, 8, frames), y (1500, 16, 16, 1))."""
  high, _ = data.digits(size=16, rgb=False, scale=255.0)
  rng = np.random.RandomState(seed)
  stack = []
  for f in range(frames):
    shift = np.zeros((len(high), 2), int) if f == frames // 2 else rng.randint(-1, 2,
                                                                                (len(high), 2))
    moved = np.stack([np.roll(im, tuple(s), axis=(0, 1)) for im, s in zip(high, shift)])
    stack.append(moved.reshape(-1, 8, 2, 8, 2).mean(axis=(2, 4)))
  return np.stack(stack, -1).astype(np.float32), high


class NonLocal(L.Layer):
  """PFNL's non-local residual block (Yi et al., 2019, after Wang et al., 2018): theta and phi
  1x1 embeddings of every position, their dot products (not scaled), normalised over the
  positions (`naive`: exp(f) / sum(exp(f)) as the thread's NLBlock computes it; otherwise
  tf.nn.softmax), the weighted sum of the g embedding, a 1x1 convolution added back."""

  def __init__(self, width, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.naive = naive
    self.theta, self.phi, self.g = (L.Conv2D(width, 1) for _ in range(3))
    self.out = L.Conv2D(width, 1)

  def call(self, x):
    b, hgt, wid, c = tf.shape(x)[0], tf.shape(x)[1], tf.shape(x)[2], x.shape[-1]
    flat = lambda t: tf.reshape(t, [b, hgt * wid, c])
    f = tf.matmul(flat(self.theta(x)), flat(self.phi(x)), transpose_b=True)
    if self.naive:
      e = tf.exp(f)
      w = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    else:
      w = tf.nn.softmax(f, axis=-1)
    y = tf.reshape(tf.matmul(w, flat(self.g(x))), tf.shape(x))
    return x + self.out(y)


def pfnl_lite(seed, *, frames=3, width=32, naive=True):
  """A PFNL-lite (progressive fusion video super-resolution with non-local blocks): a 5x5
  convolution of the frame stack to `width` (ReLU), a `NonLocal` block, two progressive
  fusion residual blocks (3x3 conv, ReLU, 1x1 fusion, 3x3 conv, added back), x2 depth-to-space
  upsampling, a 3x3 convolution to the centre frame plus its bilinear upsampling."""
  _seed(seed)
  x = keras.Input((8, 8, frames))
  h = L.Conv2D(width, 5, padding='same', activation='relu')(x)
  h = NonLocal(width, naive=naive)(h)
  for _ in range(2):
    r = L.Conv2D(width, 3, padding='same', activation='relu')(h)
    r = L.Conv2D(width, 1, activation='relu')(r)
    h = L.Add()([h, L.Conv2D(width, 3, padding='same')(r)])
  h = L.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(L.Conv2D(4 * width, 3, padding='same')(h))
  base = L.UpSampling2D(interpolation='bilinear')(
      L.Lambda(lambda t: t[..., frames // 2:frames // 2 + 1])(x))
  return keras.Model(x, L.Add()([base, L.Conv2D(1, 3, padding='same')(h)]), name='pfnl_lite')


def click_logs(seed, *, rows=4096, fields=6, vocab=10, dense=4, missing=0.05, fill=False):
  """Display-ad click logs in miniature (Criteo's layout): `fields` categorical fields (ids
  below `vocab`) and `dense` count features (log-transformed); the click a logistic function of
  field-pair interactions and the counts. A fraction `missing` of the count cells is empty, read
  as NaN (as pandas reads an empty CSV cell); `fill`: filled with 0 (the threads' fill_na).
  (([ids (rows, fields), counts (rows, dense)]), click (rows, 1))."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  counts = np.log1p(rng.poisson(rng.uniform(0.5, 20, dense), (rows, dense))).astype(np.float32)
  pair = 2.0 * rng.randn(vocab, vocab)
  w = rng.randn(dense) * 0.5
  logit = (pair[ids[:, 0], ids[:, 1]] + pair[ids[:, 2], ids[:, 3]] - pair[ids[:, 4], ids[:, 5]]
           + (counts - counts.mean(0)) @ w)
  y = (rng.rand(rows) < 1 / (1 + np.exp(-1.5 * logit))).astype(np.float32)
  empty = rng.rand(rows, dense) < missing
  counts = np.where(empty, 0.0 if fill else np.nan, counts).astype(np.float32)
  return (ids.astype(np.int32), counts), y[:, None]


class SENet(L.Layer):
  """FiBiNET's squeeze-excitation over the field embeddings: each field's mean, Dense(fields /
  reduction, ReLU), Dense(fields, ReLU), the embeddings reweighted."""

  def __init__(self, fields, reduction=2, **kwargs):
    super().__init__(**kwargs)
    self.squeeze = L.Dense(max(fields // reduction, 1), activation='relu')
    self.excite = L.Dense(fields, activation='relu')

  def call(self, e):
    return e * self.excite(self.squeeze(tf.reduce_mean(e, axis=-1)))[..., None]


class Bilinear(L.Layer):
  """FiBiNET's bilinear interaction ('field-all' type): (v_i W) * v_j for every field pair,
  flattened."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.w = L.Dense(dim, use_bias=False)

  def call(self, e):
    vw = self.w(e)
    n = e.shape[1]
    return tf.concat([vw[:, i] * e[:, j] for i in range(n) for j in range(i + 1, n)], axis=-1)


def fibinet_lite(seed, *, fields=6, vocab=10, dense=4, dim=8):
  """A FiBiNET-lite (Huang et al., 2019): field embeddings of `dim`, `SENet`, `Bilinear`
  interactions of both the raw and the reweighted embeddings, concatenated with the count
  features, an MLP (64, 32, ReLU), Dense(1): the click logit."""
  _seed(seed)
  ids = keras.Input((fields,), dtype='int32')
  counts = keras.Input((dense,))
  e = L.Embedding(vocab, dim)(ids)
  h = L.Concatenate()([Bilinear(dim)(e), Bilinear(dim)(SENet(fields)(e)), counts])
  h = L.Dense(64, activation='relu')(h)
  h = L.Dense(32, activation='relu')(h)
  return keras.Model([ids, counts], L.Dense(1)(h), name='fibinet_lite')


class GlitchOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel that misfires
  once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def pyramidnet_lite(seed, *, size=16, classes=10, blocks=4, start=16, alpha=24, glitch=None):
  """A PyramidNet-lite (Han et al., 2017): residual blocks whose width grows additively (from
  `start` by `alpha` / `blocks` a block), each BN, 3x3 conv, BN, ReLU, 3x3 conv, BN, added to
  the zero-padded shortcut (stride 2 at the middle block), global average pooling, a
  `GlitchOnce` (at its `glitch`-th training call; None: never) on the pooled features,
  Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.BatchNormalization()(L.Conv2D(start, 3, padding='same')(x))
  width = float(start)
  for k in range(blocks):
    width += alpha / blocks
    n, stride = int(round(width)), 2 if k == blocks // 2 else 1
    r = L.Conv2D(n, 3, strides=stride, padding='same')(L.BatchNormalization()(h))
    r = L.Conv2D(n, 3, padding='same')(L.ReLU()(L.BatchNormalization()(r)))
    r = L.BatchNormalization()(r)
    short = L.AveragePooling2D(stride, padding='same')(h) if stride > 1 else h
    pad = n - short.shape[-1]
    short = L.Lambda(lambda t, p=pad: tf.pad(t, [[0, 0], [0, 0], [0, 0], [0, p]]))(short)
    h = L.Add()([short, r])
  h = L.GlobalAveragePooling2D()(L.ReLU()(L.BatchNormalization()(h)))
  return keras.Model(x, L.Dense(classes)(GlitchOnce(glitch)(h)), name='pyramidnet_lite')


def heartbeat_windows(seed, *, rows=2048, steps=96):
  """Single-lead ECG windows in miniature (a binary time-series classification set like ECG200):
  beats of a P wave, a QRS spike and a T wave at a heart rate of 60 to 100, baseline wander and
  noise; the abnormal class (label 1, ~40%) with a widened QRS and an inverted T wave.
  Standardised per window. (x (rows, steps, 1), label (rows, 1))."""
  rng = np.random.RandomState(seed)
  t = np.arange(steps) / 48.0
  y = (rng.rand(rows) < 0.4).astype(np.float32)
  x = np.zeros((rows, steps))
  for i in range(rows):
    period = 60.0 / rng.uniform(60, 100)
    qrs_w = 0.05 if y[i] else 0.02
    t_sign = -1.0 if y[i] else 1.0
    for b in np.arange(rng.uniform(0, period), t[-1] + period, period):
      x[i] += 0.15 * np.exp(-((t - b + 0.16) / 0.03) ** 2)
      x[i] += np.exp(-((t - b) / qrs_w) ** 2)
      x[i] += t_sign * 0.3 * np.exp(-((t - b - 0.25) / 0.06) ** 2)
    x[i] += 0.2 * np.sin(2 * np.pi * rng.uniform(0.1, 0.4) * t + rng.rand() * 6)
    x[i] += 0.05 * rng.randn(steps)
  x = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
  return x[..., None].astype(np.float32), y[:, None]


def fcn_tsc_lite(seed, *, steps=96, activation='softmax'):
  """An FCN for time-series classification (Wang, Yan & Oates, 2017): three temporal
  convolutions (8, 5 and 3 samples; 32, 64, 32 filters), each BN and ReLU, global average
  pooling, Dense(1, `activation`) (the thread's 'softmax'; 'sigmoid' the remedy): the
  probability of the abnormal class."""
  _seed(seed)
  x = keras.Input((steps, 1))
  h = x
  for n, k in ((32, 8), (64, 5), (32, 3)):
    h = L.ReLU()(L.BatchNormalization()(L.Conv1D(n, k, padding='same')(h)))
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(x, L.Dense(1, activation=activation)(h), name='fcn_tsc_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind24_log_unet_depth_silog_holes', 'division_or_log', 'unet_depth_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='ENSTA-U2IS-AI/LDU#7; dontLoveBugs/DORN_pytorch#23')
def _(seed, cured=False):
  """A U-Net-lite (two 3x3 convolutions a level, 16/32/64, skip connections, softplus + 0.1
  out) estimating depth from 32x32 indoor scenes, Adam at 1e-3, the scale-invariant log loss
  (SILog, lambda 0.85) over every pixel: the sensor's ground truth has 10% invalid pixels stored
  as 0, log(0) = -inf: the loss NaN from step 0, the weights NaN after it (the error 16.3
  before, inf after; the constant answer's 1.63). Seed 1: the same (17.5 before; the
  constant's 1.76). ENSTA-U2IS-AI/LDU#7 (SILog takes the log of the masked-out zeros: -inf; the
  valid mask fixes it); dontLoveBugs/DORN_pytorch#23 (depth = 0 makes log(depth) illegal; mask
  gt > 0). Cured: the loss over the valid pixels only (y > 0): the loss 0.62 to 0.11, the error
  16.3 to 0.75. The measure reads the dense depth (eval_data) for both runs."""
  x, sensor, dense = depth_scenes(seed)
  return cases.Setup(unet_depth_lite(seed), keras.optimizers.Adam(1e-3),
                     silog_masked if cured else silog_unmasked,
                     data.stream(x, sensor, batch=16, seed=seed), 'regression',
                     eval_data=data.stream(x, dense, batch=16, seed=seed))


@add('blind24_log_mixhop_isolated_padding', 'division_or_log', 'mixhop_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='MrLeeeee/GCN-GAT-and-Graphsage#3; wujcan/SGL-TensorFlow#19')
def _(seed, cured=False):
  """A MixHop-lite (two MixHop layers: [X, A_hat X, A_hat^2 X] through Dense(16) each, A_hat =
  D^-1/2 A D^-1/2 computed in the layer from the batch's adjacency; masked mean pooling)
  classifying graphs of 8 to 16 nodes (a ring, a star, two cliques) padded to 16 nodes, Adam at
  1e-2: the padding nodes have degree 0 and 0^-1/2 = inf, inf x 0 = NaN in A_hat: the outputs
  NaN before training, the loss NaN from step 0, the weights NaN after it (the error inf before
  and after; the constant answer's 0.65). Seed 1: the same (the constant's 0.61).
  MrLeeeee/GCN-GAT-and-Graphsage#3 (h / degree with degree 0 makes the loss NaN; add a small
  number to the denominator); wujcan/SGL-TensorFlow#19 (divide by zero in the degree power:
  d_inv[np.isinf(d_inv)] = 0). Cured: a degree of 0 gives 0: the loss 1.14 to 0.31, the error
  0.65 to 0.023."""
  x, y = padded_graphs(seed)
  return cases.Setup(mixhop_lite(seed, guard=cured), keras.optimizers.Adam(1e-2),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind24_fp16_rcan_adam_epsilon', 'precision', 'rcan_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11832; keras-team/keras#11860')
def _(seed, cured=False):
  """An RCAN-lite (two residual groups of two residual channel-attention blocks, a long
  skip, x2 depth-to-space upsampling) super-resolving the digits from 8x8 to 16x16, MAE, every
  layer in float16 (the thread's K.set_floatx('float16'): float16 weights, no float32 master
  copy), Adam at 1e-3 with its default epsilon 1e-7: in float16 the second-moment estimate of a
  small gradient underflows to 0 and epsilon is near the smallest subnormal, so the first update
  divides by ~1e-7: the loss 0.42 at step 0 and NaN from step 1, the weights NaN (the error
  0.33 before, inf after; the constant answer's 0.072). Seed 1: 0.46 then NaN from step 1 (0.40
  before; the constant's 0.072). keras-team/keras#11832 (an EDSR super-resolution model in
  float16: the loss goes up to inf and NaN; solved by K.set_epsilon(1e-4));
  keras-team/keras#11860 (Adam does not work with FP16: loss NaN; fine in FP32). Cured: Adam's
  epsilon 1e-4: the loss 0.42 to 0.031, the error 0.33 to 0.0004."""
  x, y = sr_pairs(seed)
  return cases.Setup(rcan_lite(seed), keras.optimizers.Adam(1e-3, epsilon=1e-4 if cured else 1e-7),
                     'mae', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind24_grad_wavernn_no_clip', 'exploding_gradients', 'wavernn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='fatchord/WaveRNN#129; mravanelli/pytorch-kaldi#112')
def _(seed, cured=False):
  """A WaveRNN-lite (a GRU(64) over the last 32 mu-law samples, Dense(64, ReLU), the logits
  of the next sample's 8 mu-law classes) trained on voiced tones at 8 kHz, SGD with momentum 0.9
  at 0.6, no gradient clipping: the loss falls, then the recurrent gradients blow up and the
  loss climbs back: the loss (fit's running mean) 2.09 at step 0, 1.15 at step 50, 1.41 at step
  149, no NaN (the error 0.84 before, 0.70 after; the constant answer's 0.67). Seed 1: 2.00 at
  step 0, 1.16 at step 50, 1.55 at step 149 (the error 0.54 before, 0.67 after; the constant's
  0.63). fatchord/WaveRNN#129 (WaveRNN's loss exploded to NaN in training);
  mravanelli/pytorch-kaldi#112 (an LSTM's loss NaN after training well: activate gradient
  clipping). Cured: the same rate with clipnorm=0.25: the loss 2.09 to 0.78, the error 0.84 to
  0.28."""
  x, y = mulaw_speech(seed)
  return cases.Setup(wavernn_lite(seed),
                     keras.optimizers.SGD(0.6, momentum=0.9, clipnorm=0.25 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind24_lr_bert4rec_adam', 'learning_rate', 'bert4rec_lite', doors=('trainer', 'fit'),
     steps=150, citation='OpenNMT/OpenNMT-tf#744; RUCAIBox/RecBole#882')
def _(seed, cured=False):
  """A BERT4Rec-lite (item and position embeddings, two post-norm Transformer blocks of
  two-head attention, the [mask] position's state to 50 item logits) predicting the hidden last
  item of interaction walks through five genres, Adam at 0.05: the updates are too large for the
  attention blocks and the model settles on frequent items: the loss (fit's running mean) 4.57
  at step 0, 2.70 at step 149, no NaN, the error 0.98 before and 0.91 after (the constant
  answer's 0.95). Seed 1: 4.09 to 2.58 (the error 0.99 before, 0.90 after; the constant's 0.95).
  OpenNMT/OpenNMT-tf#744 (the model diverged: the learning rate set is far above the default);
  RUCAIBox/RecBole#882 (BERT4Rec's loss NaN in the first epochs). Cured: Adam at 1e-3: the loss
  4.57 to 2.13, the error 0.98 to 0.20."""
  x, y = item_sequences(seed)
  return cases.Setup(bert4rec_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.05),
                     SCE(from_logits=True), data.stream(x, y, batch=64, seed=seed), 'classes')


@add('blind24_init_fractalnet_unit_normal', 'initialisation', 'fractalnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='VinceShieh/spark-ffm#12; keras-team/keras#6259')
def _(seed, cured=False):
  """A FractalNet-lite (two fractal blocks of two columns joined by their mean, 2x2 pooling,
  global average pooling) classifying the digits (16x16 grey), SGD with momentum 0.9 at 0.05,
  every kernel initialised N(0, 1) (unit-variance normal, as raw tf.random_normal weights
  are): each 3x3 convolution multiplies the activations' scale by ~sqrt(fan-in), the logits are
  ~1e4: the loss 1.8e4 at step 0, 2e7 at step 1, NaN from step 6, the weights NaN (the error
  0.90 before, inf after; the constant answer's 0.86). Seed 1: 1.4e4 at step 0, 1.9e13 at step
  2, 4.6e11 at step 149 (no NaN; the error 0.89 before, 0.88 after; the constant's 0.875).
  VinceShieh/spark-ffm#12 (the weight initialisation's spread makes exp overflow and the loss
  NaN; initialise narrower); keras-team/keras#6259 (the initial loss is far above log(classes):
  a wrongly scaled network). Cured: he_normal kernels: the loss 2.62 to 1.73, the error 0.89 to
  0.16."""
  return cases.Setup(fractalnet_lite(seed, init='he_normal' if cured else 'random_normal_1'),
                     keras.optimizers.SGD(0.05, momentum=0.9), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind24_exp_pfnl_nonlocal_softmax', 'softmax_overflow', 'pfnl_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='psychopa4/PFNL#9; pyg-team/pytorch_geometric#53')
def _(seed, cured=False):
  """A PFNL-lite (a 5x5 convolution of the three-frame stack, a non-local block whose
  attention weights are exp(f) / sum(exp(f)) over the 64 positions, as the thread's NLBlock
  computes them; two residual fusion blocks; x2 depth-to-space) super-resolving the centre
  frame of jittered digit clips from 8x8 8-bit frames (0 to 255, as a video reader gives them)
  to 16x16, MAE, Adam at 1e-3: the unscaled dot products of the theta and phi embeddings are far
  past 88.7 and exp overflows, inf / inf = NaN: the outputs NaN before training, the loss NaN
  from step 0, the weights NaN (the error inf before and after; the constant answer's 4665).
  Seed 1: the same (the constant's 4706). psychopa4/PFNL#9 (the manual softmax in NLBlock:
  exp(300+) goes to inf; tf.nn.softmax handles it); pyg-team/pytorch_geometric#53 (a softmax
  taking exp directly overflows to NaN; subtract the max first). Cured: tf.nn.softmax: the loss
  33.7 to 8.2, the error 1829 to 16.9."""
  x, y = frame_stacks(seed)
  return cases.Setup(pfnl_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3), 'mae',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind24_input_fibinet_nan_counts', 'bad_input', 'fibinet_lite', doors=('trainer', 'fit'),
     steps=150, citation='NVIDIA-Merlin/NVTabular#145; reczoo/RecZoo#37')
def _(seed, cured=False):
  """A FiBiNET-lite (field embeddings, a SENET reweighting, bilinear interactions of the raw
  and reweighted embeddings, the count features, an MLP of 64 and 32) predicting clicks on
  Criteo-like logs (six categorical fields, four log counts), Adam at 3e-3; 5% of the count cells
  are empty in the CSV and read as NaN: the outputs of those rows NaN, the weights NaN after the
  first steps; fit's running loss reads ~0.69 throughout (the error 0.47 before, inf after; the
  constant answer's 0.47). Seed 1: the same (0.54 before; the constant's 0.46).
  NVIDIA-Merlin/NVTabular#145 (the most pressing issue of Criteo's columns is their missing
  values: fill them); reczoo/RecZoo#37 (a feature column requires a fill_na value).
  Cured: the empty cells filled with 0: the loss 0.70 to 0.64, the error 0.47 to 0.24. The
  measure reads the filled logs (eval_data) for both runs."""
  x, y = click_logs(seed, fill=cured)
  clean, yc = click_logs(seed, fill=True)
  return cases.Setup(fibinet_lite(seed), keras.optimizers.Adam(3e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=64, seed=seed), 'binary_logit',
                     eval_data=data.stream(clean, yc, batch=64, seed=seed))


@add('blind24_transient_pyramidnet_glitch', 'transient', 'pyramidnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='facebookresearch/mmf#1251; AlexeyAB/darknet#5547')
def _(seed, cured=False):
  """A PyramidNet-lite (four residual blocks widening additively from 16 to 40 channels,
  BN-conv-BN-ReLU-conv-BN, zero-padded shortcuts, global average pooling) classifying the digits
  (16x16 grey), Adam at 1e-3, training normally (the loss 2.38 at step 0, 1.36 at step 50) when
  one element of the pooled features reads NaN once (`GlitchOnce`: its 90th training call; step
  85 in a plain `fit` after the measure's four training-mode passes; a kernel or buffer that
  misfires once, not the data, the model or the settings): the loss NaN from step 85, the weights
  NaN (the error 0.95 before, inf after; the constant answer's 0.86). Seed 1: the same step.
  facebookresearch/mmf#1251 (resumed from a checkpoint, the NaN does not come back at the same
  iteration); AlexeyAB/darknet#5547 (loss NaN with CUDA errors: a hardware problem). Cured: the
  same run without the fault: the loss 2.38 to 0.70, the error 0.89 to 0 in training mode (0.93
  in inference mode: BN's moving statistics still near their start)."""
  return cases.Setup(pyramidnet_lite(seed, glitch=None if cured else 90),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind24_mismatch_fcn_tsc_softmax_one_unit', 'loss_output_mismatch', 'fcn_tsc_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#2711; keras-team/keras#126')
def _(seed, cured=False):
  """An FCN for time-series classification (three temporal convolutions with BN and ReLU,
  global average pooling) flagging abnormal beats in single-lead ECG windows, Adam at 1e-3, the
  head Dense(1, activation='softmax') with the MSE loss as the thread compiles it: a softmax over
  one unit is exp(z) / exp(z) = 1 for every input, its gradient 0: the loss flat (0.69 at step
  0, 0.59 at step 149: the share of normal windows in the batch), every prediction "abnormal"
  (the error 0.625 before and after; the constant answer's 0.375). Seed 1: the same (0.625 /
  0.625; 0.375). keras-team/keras#126 (an MLP with a one-unit softmax output predicts all ones
  and never improves); keras-team/keras#2711 (the loss not changing: a binary task needs a
  sigmoid, not a softmax). Cured: Dense(1, activation='sigmoid'): the loss 0.23 to 0.021, the
  error 0.375 to 0 in training mode (0.60 in inference mode: BN's moving statistics)."""
  x, y = heartbeat_windows(seed)
  return cases.Setup(fcn_tsc_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
