"""A thirtieth blind set of sick scenarios (the 'blind30' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind29.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
a vision architecture no other registry entry uses (a RetinaNet-lite, a CCT-lite, a DLA-lite,
an Efficient-CapsNet-lite, a DeiT-lite, an RDN-lite, a ResUNet-lite, a HarDNet-lite and a
BiSeNet-lite). Each builder takes `cured`: the same run
with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with
plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the
cured twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND30 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND30.add` with split='blind30'."""
  return BLIND30.add(name, expected, arch, split='blind30', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def box_scenes(seed, *, rows=2048, size=32, grid=4):
  """Single-object detection in miniature: a bright rectangle (8 to 20 pixels a side, at a
  random place) on a noisy textured background; the labels are the objectness of each cell of
  a `grid` x `grid` anchor grid (1 where the box's centre falls) and the box (x1, y1, x2, y2)
  in pixels, as a detection loader gives it. (image (rows, size, size, 1), labels (rows,
  grid * grid + 4))."""
  rng = np.random.RandomState(seed)
  x = 0.2 * rng.rand(rows, size, size) + 0.1 * np.sin(np.arange(size) / 2.0)[None, None, :]
  lab = np.zeros((rows, grid * grid + 4))
  for i in range(rows):
    w, h = rng.randint(8, 21, 2)
    x1, y1 = rng.randint(0, size - w + 1), rng.randint(0, size - h + 1)
    x[i, y1:y1 + h, x1:x1 + w] += rng.uniform(0.5, 1.0)
    cy, cx = (y1 + h / 2) * grid // size, (x1 + w / 2) * grid // size
    lab[i, int(min(cy, grid - 1)) * grid + int(min(cx, grid - 1))] = 1
    lab[i, -4:] = (x1, y1, x1 + w, y1 + h)
  return x[..., None].astype(np.float32), lab.astype(np.float32)


def retinanet_lite(seed, *, size=32, grid=4):
  """A RetinaNet-lite (Lin et al., 2017, one level): a backbone of 3x3 convolutions (16, 32, 64
  filters, stride 2 each after the first; ReLU), a feature-pyramid 1x1 lateral of 64, a
  classification subnet (two 3x3 convolutions of 64, ReLU; a 3x3 convolution to one anchor's
  objectness, sigmoid, its bias at the prior 0.01) and a box subnet (two 3x3 convolutions of
  64, ReLU, flattened, Dense(4): the box in pixels). The output: the `grid` x `grid`
  objectness map (flattened) and the box, concatenated."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(16, 3, padding='same', activation='relu')(x)
  h = L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(h)
  h = L.Conv2D(64, 3, strides=2, padding='same', activation='relu')(h)
  h = L.Conv2D(64, 3, strides=2, padding='same', activation='relu')(h)
  p = L.Conv2D(64, 1)(h)
  c = L.Conv2D(64, 3, padding='same', activation='relu')(p)
  c = L.Conv2D(64, 3, padding='same', activation='relu')(c)
  c = L.Conv2D(1, 3, padding='same', activation='sigmoid',
               bias_initializer=keras.initializers.Constant(-np.log(99.0)))(c)
  b = L.Conv2D(64, 3, padding='same', activation='relu')(p)
  b = L.Conv2D(64, 3, padding='same', activation='relu')(b)
  b = L.Dense(4)(L.Flatten()(b))
  return keras.Model(x, L.Concatenate()([L.Flatten()(c), b]), name='retinanet_lite')


def retina_loss(y, out, cells=16):
  """The focal loss (alpha 0.25, gamma 2) on the objectness map plus the squared error of the
  box in pixels (the threads' regression term on unnormalised coordinates)."""
  y, out = tf.cast(y, tf.float32), tf.cast(out, tf.float32)
  t, p = y[:, :cells], tf.clip_by_value(out[:, :cells], 1e-7, 1 - 1e-7)
  pt = tf.where(t > 0.5, p, 1 - p)
  alpha = tf.where(t > 0.5, 0.25, 0.75)
  focal = tf.reduce_sum(-alpha * (1 - pt) ** 2 * tf.math.log(pt), -1)
  box = tf.reduce_sum(tf.square(y[:, cells:] - out[:, cells:]), -1)
  return tf.reduce_mean(focal + box)



class TransformerBlock(L.Layer):
  """A pre-norm transformer encoder block: LayerNorm, multi-head self-attention (`heads` of
  `key_dim`), residual; LayerNorm, an MLP of `mlp` (GELU), residual."""

  def __init__(self, heads=2, key_dim=32, mlp=128, **kwargs):
    super().__init__(**kwargs)
    self.heads, self.key_dim, self.mlp = heads, key_dim, mlp

  def build(self, shape):
    d = shape[-1]
    self.n1, self.n2 = L.LayerNormalization(), L.LayerNormalization()
    self.att = L.MultiHeadAttention(self.heads, self.key_dim)
    self.f1, self.f2 = L.Dense(self.mlp, activation='gelu'), L.Dense(d)

  def call(self, x):
    h = self.n1(x)
    x = x + self.att(h, h)
    return x + self.f2(self.f1(self.n2(x)))


class SeqPool(L.Layer):
  """CCT's sequence pooling: a softmax attention over the tokens (one Dense score each), the
  tokens' weighted sum."""

  def build(self, shape):
    self.score = L.Dense(1)

  def call(self, x):
    w = tf.nn.softmax(self.score(x), axis=1)
    return tf.reduce_sum(w * x, axis=1)


def cct_lite(seed, *, size=16, classes=10, dim=64):
  """A CCT-lite (Hassani et al., 2021, Compact Convolutional Transformer): a convolutional
  tokenizer (a 3x3 convolution of `dim`, ReLU, 2x2 max pooling: 64 tokens), two pre-norm
  transformer blocks (two heads of 32, an MLP of 128), a LayerNorm, sequence pooling,
  Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.MaxPooling2D()(L.Conv2D(dim, 3, padding='same', activation='relu')(x))
  h = L.Reshape(((size // 2) ** 2, dim))(h)
  for _ in range(2):
    h = TransformerBlock()(h)
  h = SeqPool()(L.LayerNormalization()(h))
  return keras.Model(x, L.Dense(classes)(h), name='cct_lite')


def dla_lite(seed, *, size=16, classes=10, init='he_normal'):
  """A DLA-lite (Yu et al., 2018, deep layer aggregation): a 3x3 stem of 16 (BN, ReLU), two
  stages each of two residual blocks (3x3 convolutions with BN and ReLU) whose outputs and the
  stage's input are merged by an aggregation node (concatenation, a 1x1 convolution, BN, ReLU;
  32 then 64 channels), 2x2 pooling after the first stage, global average pooling,
  Dense(`classes`): the logits. Every kernel initialised with `init`."""
  _seed(seed)
  conv = lambda n, k: L.Conv2D(n, k, padding='same', kernel_initializer=init)
  x = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(conv(16, 3)(x)))
  for stage, n in enumerate((32, 64)):
    h = L.ReLU()(L.BatchNormalization()(conv(n, 1)(h)))
    outs = [h]
    t = h
    for _ in range(2):
      r = L.ReLU()(L.BatchNormalization()(conv(n, 3)(t)))
      r = L.BatchNormalization()(conv(n, 3)(r))
      t = L.ReLU()(L.Add()([t, r]))
      outs.append(t)
    h = L.ReLU()(L.BatchNormalization()(conv(n, 1)(L.Concatenate()(outs))))
    if stage == 0:
      h = L.MaxPooling2D()(h)
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(x, L.Dense(classes, kernel_initializer=init)(h), name='dla_lite')


class Squash(L.Layer):
  """Efficient-CapsNet's squash, (1 - 1 / exp(|s|)) s / |s|, with |s| = sqrt(sum s^2) written
  with no epsilon (`eps` = 0, the threads' form: a zero capsule is 0 / 0, and the gradient of
  sqrt at 0 is inf); `eps` > 0 the remedy."""

  def __init__(self, eps=0.0, **kwargs):
    super().__init__(**kwargs)
    self.eps = eps

  def call(self, s):
    n = tf.sqrt(tf.reduce_sum(tf.square(s), -1, keepdims=True) + self.eps)
    return (1 - 1 / tf.exp(n)) * s / (n + self.eps)


class AttentionRouting(L.Layer):
  """Efficient-CapsNet's self-attention routing: each primary capsule's prediction for each
  class capsule (a learned matrix), their agreement (the predictions' dot products, over
  sqrt(dim)) turned into coupling weights (softmax over the class capsules) plus a learned
  prior, the class capsules the weighted sums."""

  def __init__(self, caps=10, dim=16, **kwargs):
    super().__init__(**kwargs)
    self.caps, self.dim = caps, dim

  def build(self, shape):
    n, d = shape[1], shape[2]
    self.w = self.add_weight(shape=(n, self.caps, d, self.dim), initializer='he_normal')
    self.b = self.add_weight(shape=(self.caps, n, 1), initializer='zeros')

  def call(self, u):
    uhat = tf.einsum('bnd,nkde->bkne', u, self.w)
    a = tf.einsum('bkne,bkme->bknm', uhat, uhat) / np.sqrt(float(self.dim))
    c = tf.nn.softmax(tf.reduce_sum(a, -1, keepdims=True), axis=1) + self.b
    return tf.reduce_sum(uhat * c, axis=2)


def efficient_capsnet_lite(seed, *, size=16, caps=10, eps=0.0):
  """An Efficient-CapsNet-lite (Mazzia et al., 2021): 3x3 convolutions of 32, 64, 64 (BN,
  ReLU; the middle one stride 2), a primary capsule convolution (a 3x3 convolution of 64, ReLU,
  stride 2: eight capsules of 8 at each of the 4x4 places, 128 in all), `Squash`,
  self-attention routing to `caps` class capsules of 16, `Squash`, the capsules' lengths
  sqrt(sum v^2 + `eps`): each class's score."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = x
  for n, st in ((32, 1), (64, 2), (64, 1)):
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(n, 3, strides=st, padding='same')(h)))
  h = L.Conv2D(64, 3, strides=2, padding='same', activation='relu')(h)
  u = Squash(eps)(L.Reshape((-1, 8))(h))
  v = Squash(eps)(AttentionRouting(caps)(u))
  out = L.Lambda(lambda t: tf.sqrt(tf.reduce_sum(tf.square(t), -1) + eps))(v)
  return keras.Model(x, out, name='efficient_capsnet_lite')


def margin_loss(y, lengths):
  """CapsNet's margin loss: for the true class max(0, 0.9 - |v|)^2, for the others 0.5 max(0,
  |v| - 0.1)^2, summed over the classes."""
  t = tf.one_hot(tf.cast(tf.reshape(y, [-1]), tf.int32), tf.shape(lengths)[-1])
  lengths = tf.cast(lengths, tf.float32)
  loss = t * tf.square(tf.nn.relu(0.9 - lengths)) + 0.5 * (1 - t) * tf.square(
      tf.nn.relu(lengths - 0.1))
  return tf.reduce_mean(tf.reduce_sum(loss, -1))



class NaiveAttention(L.Layer):
  """Multi-head self-attention (`heads` of `key_dim`) with its softmax written by hand:
  exp(scores) / sum(exp(scores)) (`naive`, the threads' form: a score above 88.7 overflows
  float32's exp to inf, and inf / inf is NaN); otherwise tf.nn.softmax (the max subtracted
  first). The scores are the raw dot products q.k (no 1 / sqrt(key_dim), as the threads'
  hand-written attention computes them)."""

  def __init__(self, heads=2, key_dim=32, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.heads, self.key_dim, self.naive = heads, key_dim, naive

  def build(self, shape):
    d = shape[-1]
    self.qkv = L.Dense(3 * self.heads * self.key_dim)
    self.out = L.Dense(d)

  def call(self, x):
    b, n = tf.shape(x)[0], tf.shape(x)[1]
    qkv = tf.reshape(self.qkv(x), [b, n, 3, self.heads, self.key_dim])
    q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))
    s = tf.einsum('bhnd,bhmd->bhnm', q, k)
    if self.naive:
      e = tf.exp(s)
      a = e / tf.reduce_sum(e, -1, keepdims=True)
    else:
      a = tf.nn.softmax(s, -1)
    o = tf.transpose(tf.einsum('bhnm,bhmd->bhnd', a, v), [0, 2, 1, 3])
    return self.out(tf.reshape(o, [b, n, self.heads * self.key_dim]))


class ClassToken(L.Layer):
  """A learned class token prepended to the patch tokens, plus learned position embeddings."""

  def build(self, shape):
    self.cls = self.add_weight(shape=(1, 1, shape[-1]), initializer='zeros')
    self.pos = self.add_weight(shape=(1, shape[1] + 1, shape[-1]),
                               initializer=keras.initializers.TruncatedNormal(stddev=0.02))

  def call(self, x):
    cls = tf.tile(self.cls, [tf.shape(x)[0], 1, 1])
    return tf.concat([cls, x], 1) + self.pos


def deit_lite(seed, *, size=16, patch=4, classes=10, dim=64, naive=True):
  """A DeiT-lite (Touvron et al., 2021, a data-efficient image transformer): 4x4 patches
  embedded to `dim` (a strided convolution), a class token and position embeddings, two
  transformer blocks (attention `NaiveAttention`, an MLP of 128; residuals; LayerNorm after each
  residual, the original transformer's order), the class token's Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(dim, patch, strides=patch)(x)
  h = ClassToken()(L.Reshape(((size // patch) ** 2, dim))(h))
  for _ in range(2):
    h = L.LayerNormalization()(h + NaiveAttention(naive=naive)(h))
    f = L.Dense(dim)(L.Dense(128, activation='gelu')(h))
    h = L.LayerNormalization()(h + f)
  return keras.Model(x, L.Dense(classes)(h[:, 0]), name='deit_lite')



def sr_pairs(seed, *, rows=1024, size=32):
  """Single-image super-resolution in miniature (x2): high-resolution patches of oriented
  gratings, edges and blobs in raw 8-bit grey levels (0 to 255, as EDSR and RDN feed them), the
  low-resolution input their 2x2 average. (low (rows, size / 2, size / 2, 1), high (rows, size,
  size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  hi = np.zeros((rows, size, size))
  for i in range(rows):
    th = rng.uniform(0, np.pi)
    g = np.sin(2 * np.pi * rng.uniform(1, 4) * (np.cos(th) * xx + np.sin(th) * yy))
    cy, cx = rng.rand(2)
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / rng.uniform(0.01, 0.05))
    hi[i] = 128 + 60 * g * rng.uniform(0.3, 1) + 60 * blob * rng.choice([-1, 1])
  hi = np.clip(hi, 0, 255)
  lo = hi.reshape(rows, size // 2, 2, size // 2, 2).mean((2, 4))
  return lo[..., None].astype(np.float32), hi[..., None].astype(np.float32)


def rdn_lite(seed, *, dtype='float16'):
  """An RDN-lite (Zhang et al., 2018, residual dense network, x2): a shallow 3x3 convolution of
  32 and a second one, two residual dense blocks (three 3x3 convolutions of growth 16, ReLU,
  each fed all the block's earlier outputs; a 1x1 fusion to 32; a local residual), global
  feature fusion (1x1 and 3x3 convolutions of 32) plus the shallow features, a sub-pixel
  upsampling (a 3x3 convolution to 4 x 32 channels, depth-to-space), a 3x3 convolution to one
  channel: the high-resolution patch in grey levels. Every layer in `dtype` ('float16':
  float16 weights and compute, as after keras.backend.set_floatx('float16'))."""
  _seed(seed)
  conv = lambda n, k, act=None: L.Conv2D(n, k, padding='same', activation=act, dtype=dtype)
  x = keras.Input((None, None, 1))
  f0 = conv(32, 3)(x)
  h = conv(32, 3)(f0)
  blocks = []
  for _ in range(2):
    feats = [h]
    for _ in range(3):
      feats.append(conv(16, 3, 'relu')(L.Concatenate(dtype=dtype)(feats)))
    h = L.Add(dtype=dtype)([h, conv(32, 1)(L.Concatenate(dtype=dtype)(feats))])
    blocks.append(h)
  g = conv(32, 3)(conv(32, 1)(L.Concatenate(dtype=dtype)(blocks)))
  h = L.Add(dtype=dtype)([g, f0])
  h = L.Lambda(lambda t: tf.nn.depth_to_space(t, 2), dtype=dtype)(conv(4 * 32, 3)(h))
  out = conv(1, 3)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='rdn_lite')


def road_tiles(seed, *, rows=1536, size=32, bands=4, nodata=0.05, fill=False):
  """Road extraction from satellite tiles in miniature: four reflectance bands (vegetation,
  soil, a road's brighter and greyer signature along one or two straight roads of 2 to 3
  pixels, noise); the label the road mask. A fraction `nodata` of the tiles lie at the edge
  of the scene: a strip of them is NaN, the GeoTIFF's nodata as the reader returns it; `fill`:
  those set to 0 (the remedy). (tile (rows, size, size, bands), mask (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  sig_bg = np.array([0.25, 0.15, 0.35, 0.2])
  sig_road = np.array([0.45, 0.45, 0.25, 0.5])
  x = np.zeros((rows, size, size, bands))
  m = np.zeros((rows, size, size))
  for i in range(rows):
    for _ in range(rng.randint(1, 3)):
      th = rng.uniform(0, np.pi)
      c = rng.uniform(8, size - 8, 2)
      d = np.abs((xx - c[0]) * np.sin(th) - (yy - c[1]) * np.cos(th))
      m[i] = np.maximum(m[i], d < rng.uniform(1.0, 1.6))
    bg = sig_bg * rng.uniform(0.8, 1.2, bands)
    x[i] = (bg * (1 - m[i][..., None]) + sig_road * m[i][..., None] +
            0.05 * rng.randn(size, size, bands))
    if rng.rand() < nodata:
      w = rng.randint(4, 12)
      x[i, :, :w] = 0.0 if fill else np.nan
  return x.astype(np.float32), m[..., None].astype(np.float32)


def resunet_lite(seed, *, size=32, bands=4):
  """A ResUNet-lite (Zhang et al., 2018, deep residual U-Net for road extraction): an encoder of
  three residual units (BN, ReLU, 3x3 convolution, twice, a 1x1 shortcut; 16, 32, 64 filters,
  stride 2 in the last two), a bridge unit of 128 at stride 2, a decoder of three residual units
  (upsampling, concatenation with the encoder's skip; 64, 32, 16), a 1x1 convolution (sigmoid):
  the road probability of each pixel."""
  _seed(seed)

  def unit(t, n, stride=1):
    r = L.Conv2D(n, 3, strides=stride, padding='same')(L.ReLU()(L.BatchNormalization()(t)))
    r = L.Conv2D(n, 3, padding='same')(L.ReLU()(L.BatchNormalization()(r)))
    return L.Add()([r, L.BatchNormalization()(L.Conv2D(n, 1, strides=stride)(t))])

  x = keras.Input((size, size, bands))
  e1 = unit(L.Conv2D(16, 3, padding='same')(x), 16)
  e2 = unit(e1, 32, 2)
  e3 = unit(e2, 64, 2)
  h = unit(e3, 128, 2)
  for skip, n in ((e3, 64), (e2, 32), (e1, 16)):
    h = unit(L.Concatenate()([L.UpSampling2D()(h), skip]), n)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(h), name='resunet_lite')



class InfOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one activation reads +inf once (a flipped
  exponent bit in a buffer, a kernel that misfires once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.inf, **kwargs)


def hardnet_lite(seed, *, size=16, classes=10, fault=None):
  """A HarDNet-lite (Chao et al., 2019, harmonic densely connected network): a 3x3 stem of 24
  (BN, ReLU), two harmonic dense blocks of four 3x3 convolutions (growth 12 and 16; BN, ReLU),
  layer k fed by layers k - 2^n (k divisible by 2^n), the block's odd layers and its last
  concatenated out, a 1x1 transition (BN, ReLU), 2x2 pooling after the first block, global
  average pooling, an `InfOnce` (at its `fault`-th training call; None: never),
  Dense(`classes`): the logits."""
  _seed(seed)
  cbr = lambda n, k, t: L.ReLU()(L.BatchNormalization()(L.Conv2D(n, k, padding='same')(t)))
  x = keras.Input((size, size, 1))
  h = cbr(24, 3, x)
  for b, (growth, out) in enumerate(((12, 48), (16, 64))):
    layers = [h]
    for k in range(1, 5):
      ins = [layers[k - 2 ** n] for n in range(3) if k % 2 ** n == 0 and k - 2 ** n >= 0]
      t = ins[0] if len(ins) == 1 else L.Concatenate()(ins)
      layers.append(cbr(growth * (2 if k % 2 == 0 else 1), 3, t))
    h = cbr(out, 1, L.Concatenate()([layers[k] for k in (1, 3, 4)]))
    if b == 0:
      h = L.MaxPooling2D()(h)
  h = InfOnce(fault)(L.GlobalAveragePooling2D()(h))
  return keras.Model(x, L.Dense(classes)(h), name='hardnet_lite')


def blob_scenes(seed, *, rows=1536, size=32):
  """Binary segmentation in miniature (a foreground object against the background): one to
  three bright ellipses on a textured, shaded background with noise; the label the objects'
  mask, one channel of 0 / 1 as a binary mask loader gives it. (image (rows, size, size, 3),
  mask (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  x = np.zeros((rows, size, size, 3))
  m = np.zeros((rows, size, size))
  for i in range(rows):
    for _ in range(rng.randint(1, 4)):
      cy, cx = rng.uniform(0.15, 0.85, 2)
      ry, rx = rng.uniform(0.06, 0.2, 2)
      m[i] = np.maximum(m[i], ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1)
    bg = 0.3 + 0.2 * np.sin(2 * np.pi * rng.uniform(1, 3) * (xx + rng.rand() * yy))
    col = rng.uniform(0.5, 1.0, 3)
    x[i] = bg[..., None] * (1 - m[i][..., None]) + col * m[i][..., None]
    x[i] += 0.08 * rng.randn(size, size, 3)
  return x.astype(np.float32), m[..., None].astype(np.float32)


def bisenet_lite(seed, *, size=32):
  """A BiSeNet-lite (Yu et al., 2018, bilateral segmentation network): a spatial path (three
  3x3 convolutions of 32 at stride 2, BN, ReLU: 1/8 resolution), a context path (a faster
  downsampling to 1/16 with convolutions of 32, 64, 64, 96, an attention refinement module:
  global pooling, a 1x1 convolution, sigmoid, times the features; plus the global context,
  upsampled x2), a feature fusion module (concatenation, a 3x3 convolution of 64 with BN and
  ReLU, a channel attention re-weighting), a 1x1 convolution to one channel upsampled x8
  (bilinear), sigmoid: each pixel's foreground probability."""
  _seed(seed)
  cbr = lambda n, k, st, t: L.ReLU()(L.BatchNormalization()(
      L.Conv2D(n, k, strides=st, padding='same')(t)))
  x = keras.Input((size, size, 3))
  sp = cbr(32, 3, 2, cbr(32, 3, 2, cbr(32, 3, 2, x)))
  c = cbr(64, 3, 2, cbr(32, 3, 2, x))
  c = cbr(96, 3, 2, cbr(64, 3, 2, c))
  g = L.GlobalAveragePooling2D(keepdims=True)(c)
  att = L.Conv2D(96, 1, activation='sigmoid')(g)
  c = L.UpSampling2D(2)(L.Add()([L.Multiply()([c, att]), g]))
  f = cbr(64, 3, 1, L.Concatenate()([sp, c]))
  w = L.Conv2D(64, 1, activation='sigmoid')(L.GlobalAveragePooling2D(keepdims=True)(f))
  f = L.Add()([f, L.Multiply()([f, w])])
  out = L.UpSampling2D(8, interpolation='bilinear')(L.Conv2D(1, 1)(f))
  return keras.Model(x, L.Activation('sigmoid')(out), name='bisenet_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind30_explode_retinanet_no_clip', 'exploding_gradients', 'retinanet_lite',
     doors=('trainer', 'fit'), steps=150, 
     citation='fizyr/keras-retinanet#706; open-mmlab/mmdetection#2608')
def _(seed, cured=False):
  """A RetinaNet-lite (a convolutional backbone, a one-level feature pyramid, a focal-loss
  objectness subnet over a 4x4 anchor grid and a box subnet) detecting one bright rectangle in
  32x32 noisy scenes, the box regressed in pixels with a squared error, SGD with momentum 0.9 at
  0.01 (the detection configs' rate) and no gradient clipping: the box term's gradients (errors
  of tens of pixels through an unnormalised backbone) blow up within a few steps: the loss
  1.4e3 at step 0, 3.1e6 at step 2, NaN from step 3, the weights NaN (the error 63.2 before,
  inf after; the constant answer's 6.1). Seed 1: 1.27e3, 1.26e3 at step 2, NaN from step 4
  (65.5 before; the constant's 7.0). fizyr/keras-retinanet#706 (the focal loss goes NaN after a
  while of decreasing: exploding gradients, stopped by a smaller clipnorm);
  open-mmlab/mmdetection#2608 (gradient clipping added back to the RetinaNet configs to keep the
  loss from going NaN at the start of training). Cured: the gradients clipped to a global norm
  of 1 at the same rate: the loss 1.4e3 to 300, the error 63.2 to 1.95."""
  x, y = box_scenes(seed)
  return cases.Setup(retinanet_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9,
                                          global_clipnorm=1.0 if cured else None),
                     retina_loss, data.stream(x, y, batch=16, seed=seed), 'regression')


@add('blind30_lr_cct_adam_high', 'learning_rate', 'cct_lite', doors=('trainer', 'fit'),
     steps=150, citation='lucidrains/vit-pytorch#16; FluxML/model-zoo#220')
def _(seed, cured=False):
  """A CCT-lite (a convolutional tokenizer, two pre-norm transformer blocks,
  sequence pooling) classifying the digits (16x16 grey), Adam at 3e-2, one of the rates the
  thread tried on its ViT: the attention and the LayerNorm gains are thrown about, the net
  settles near a constant guess: the loss 2.68 at step 0, 3.75 at step 1, 2.61 at step 50, 2.43
  at step 149, no NaN, no training (the error 0.93 before, 0.87 after; the constant answer's
  0.86). Seed 1: 3.42, 3.76, 2.61, 2.44 (the error 0.90 before, 0.92 after; the constant's
  0.875). lucidrains/vit-pytorch#16 (a ViT whose loss does not descend at 5e-3, 1e-1, 3e-2;
  the advice: 3e-4); FluxML/model-zoo#220 (the accuracy stuck at chance: the learning rate
  should be smaller, the model diverges). Cured: Adam at 1e-3: the loss 2.68 to 1.55, the error
  0.93 to 0.22."""
  return cases.Setup(cct_lite(seed), keras.optimizers.Adam(1e-3 if cured else 3e-2),
                     SCE(from_logits=True), data.digits_stream(seed, size=16, rgb=False),
                     'classes')


@add('blind30_init_dla_zeros', 'initialisation', 'dla_lite', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/models#1529; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A DLA-lite (residual blocks merged by aggregation nodes, BN and ReLU
  throughout) classifying the digits (16x16 grey), Adam at 1e-3, every kernel initialised to
  zero (the tutorial helper's tf.zeros): every activation is 0 (BN of a constant is its beta,
  ReLU of 0 is 0), the zero classifier passes no gradient back, only its bias learns the class
  frequencies: the loss 2.30 from step 0 to step 149, no NaN, no training (the error 0.93
  before, 0.89 after; the constant answer's 0.86). Seed 1: the same (0.88 before, 0.89 after;
  the constant's 0.875). tensorflow/models#1529 (a weight_variable helper initialising the
  weights to zero instead of at random); wagonhelm/NaNmnist#2 (initialising the weights as
  zeros is improper: every neuron computes the same thing and gets the same update; initialise
  at random). Cured: He-normal kernels: the loss 2.52 to 0.54, the error 0.86 to 0.10 (0.95 to
  0.008 in training mode)."""
  return cases.Setup(dla_lite(seed, init='he_normal' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind30_sqrt_efficient_capsnet_squash', 'division_or_log', 'efficient_capsnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='ageron/handson-ml#173; jindongwang/Pytorch-CapsuleNet#7')
def _(seed, cured=False):
  """An Efficient-CapsNet-lite (BN convolutions, a ReLU primary-capsule
  convolution reshaped to 128 capsules of 8, squash, self-attention routing to ten class
  capsules of 16, their lengths) classifying the digits (16x16 grey) with the margin loss, Adam
  at 1e-3, the squash and the length written with sqrt(sum s^2) and no epsilon: a primary
  capsule whose eight ReLU outputs are all 0 (the digits' empty borders) is 0 / 0 = NaN: the
  outputs NaN before training, the loss NaN from step 0, the weights NaN (the error inf before
  and after; the constant answer's 0.86). Seed 1: the same (the constant's 0.875).
  ageron/handson-ml#173 (a squash without epsilon fails on a zero vector: sqrt has no gradient
  at 0); jindongwang/Pytorch-CapsuleNet#7 (undefined gradients from a division by zero in the
  squash: add an epsilon to the squared norm). Cured: an epsilon of 1e-7 under the square roots:
  the loss 0.74 to 0.12, the error 0.95 to 0.36 (0 in training mode)."""
  return cases.Setup(efficient_capsnet_lite(seed, eps=1e-7 if cured else 0.0),
                     keras.optimizers.Adam(1e-3), margin_loss,
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind30_exp_deit_naive_attention_softmax', 'softmax_overflow', 'deit_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pyg-team/pytorch_geometric#53; deeplearning4j/deeplearning4j-examples#730')
def _(seed, cured=False):
  """A DeiT-lite (4x4 patch embeddings, a class token, two post-norm
  transformer blocks) classifying the digits in their raw 0-to-16 grey levels (16x16), Adam at
  1e-3, the attention's softmax written exp(s) / sum(exp(s)) on the raw q.k scores: training
  sharpens the attention until a score passes 88.7, exp overflows to inf and inf / inf = NaN:
  the loss 3.09 at step 0, 2.38 at step 50, NaN from step 65, the weights NaN (the error 0.96
  before, inf after; the constant answer's 0.86). Seed 1: 3.13, 2.57 at step 10, NaN from step
  18 (0.95 before; the constant's 0.875). pyg-team/pytorch_geometric#53 (GAT's attention
  softmax gives NaN frequently: exp of the raw scores overflows; subtract the max first,
  fixed); deeplearning4j/deeplearning4j-examples#730 (a softmax taking exp of the raw input
  overflows to NaN for large inputs; the old op subtracted each row's max). Cured: tf.nn.softmax
  on the same scores: the loss 3.09 to 2.03, the error 0.96 to 0.53."""
  return cases.Setup(deit_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False, scale=16.0), 'classes')


@add('blind30_fp16_rdn_float16_adam', 'precision', 'rdn_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11832; keras-team/keras#11860')
def _(seed, cured=False):
  """An RDN-lite (two residual dense blocks, global feature fusion, sub-pixel
  x2 upsampling) super-resolving 16x16 patches to 32x32 in raw 0-to-255 grey levels, the
  squared error summed over the batch's pixels (the SR codes' size_average=False), Adam at
  1e-4 (RDN's rate), every layer in float16 (as after set_floatx('float16')): the summed loss's
  gradients (hundreds per pixel, summed over 16 x 1024 pixels into each kernel) pass float16's
  65504 and overflow to inf, the update is NaN: the loss 3.6e8 at step 0, NaN from step 1, the
  weights NaN (the error 2.2e4 before, inf after; the constant answer's 1.1e3). Seed 1: 2.8e8,
  NaN from step 1 (1.7e4 before; the constant's 984). keras-team/keras#11832 (an EDSR
  super-resolution model trains in float32 but its loss goes to inf and NaN in float16);
  keras-team/keras#11860 (with float16 the loss is NaN from the first epoch, with float32 it
  trains). Cured: the same network in float32: the loss 2.9e8 to 2.1e7, the error 1.8e4 to
  164."""
  x, y = sr_pairs(seed)
  return cases.Setup(rdn_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-4), keras.losses.MeanSquaredError(reduction='sum'),
                     data.stream(x, y, batch=16, seed=seed), 'regression')


@add('blind30_input_resunet_nodata_nan', 'bad_input', 'resunet_lite', doors=('trainer', 'fit'),
     steps=150, citation='NRCan/geo-deep-learning#68; prs-eth/Marigold#111')
def _(seed, cured=False):
  """A ResUNet-lite (residual units with BN in a U-Net, a sigmoid road map)
  extracting roads from four-band 32x32 satellite tiles, binary cross-entropy, Adam at 1e-3;
  5% of the tiles lie at the scene's edge and carry a strip of nodata pixels that the raster
  reader returns as NaN: any batch holding one has a NaN loss and NaN gradients: the loss NaN
  from step 0, the weights NaN (the error 0.18 before, inf after; the constant answer's 0.13).
  Seed 1: the loss 0.82, 0.68, 0.60, NaN from step 3 (0.81 before; the constant's 0.12).
  NRCan/geo-deep-learning#68 (NaN and inf values in the input images give a NaN loss and
  nothing is learned: write the NaN values as 0); prs-eth/Marigold#111 (the loss goes NaN
  when an input batch contains NaN values: check the data). Cured: the nodata pixels set to 0:
  the loss 0.87 to 0.036, the error 0.46 to 0.0016 in training mode (0.13 in inference mode).
  The measure reads the filled tiles (eval_data) for both runs."""
  x, y = road_tiles(seed, fill=cured)
  clean, yc = road_tiles(seed, fill=True)
  return cases.Setup(resunet_lite(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=16, seed=seed), 'binary_prob',
                     eval_data=data.stream(clean, yc, batch=16, seed=seed))


@add('blind30_transient_hardnet_inf_once', 'transient', 'hardnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='microsoft/dion#76; diagnosisda/dxda#1')
def _(seed, cured=False):
  """A HarDNet-lite (a stem and two harmonic dense blocks, BN and ReLU
  throughout) classifying the digits (16x16 grey), Adam at 1e-3, training normally (the loss
  2.45 at step 0, 1.42 at step 50) when one of the pooled features reads +inf once
  (`InfOnce`: its 80th training call, step 75 in a plain `fit` after the measure's four
  training-mode passes; a flipped exponent bit, not the data, the model or the settings): the
  loss NaN from step 75, the weights NaN (the error 0.86 before, inf after; the constant
  answer's 0.86). Seed 1: the same step (0.89 before; the constant's 0.875).
  microsoft/dion#76 (NaN parameter values in multi-GPU training that the maintainers could not
  reproduce; the cause a hardware fault on the machine's motherboard); diagnosisda/dxda#1 (NaN
  in the loss in some training trials: just rerun). Cured: the same run without the fault: the
  loss 2.45 to 0.68, the error 0.90 to 0 in training mode (0.89 in inference mode: BN's moving
  statistics still near their start)."""
  return cases.Setup(hardnet_lite(seed, fault=None if cured else 80),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind30_mismatch_bisenet_cce_one_channel', 'loss_output_mismatch', 'bisenet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='alexgkendall/caffe-segnet#31; GeorgeSeif/Semantic-Segmentation-Suite#52')
def _(seed, cured=False):
  """A BiSeNet-lite (a spatial path and a context path with attention
  refinement, a feature fusion module, an x8 bilinear upsampling of a one-channel sigmoid map)
  segmenting bright ellipses from a textured background (32x32, a one-channel 0 / 1 mask),
  Adam at 1e-3, compiled with categorical_crossentropy as for the multi-class masks: over a
  single channel that loss normalises each pixel's one probability to 1, the loss is exactly 0
  and no gradient flows: the loss 0 from step 0 to step 149, no NaN, no training (the error
  0.20 before, 0.097 after in inference mode, only the BN statistics moved; 0.086 in training
  mode; the constant answer's 0.098). Seed 1: the same, 0 throughout (0.87 before, 0.100 after;
  the constant's 0.101). alexgkendall/caffe-segnet#31 (SegNet trained on a single class gives
  loss = 0 immediately: a softmax loss over one output cannot learn; use two classes);
  GeorgeSeif/Semantic-Segmentation-Suite#52 (a one-channel mask, the training loss begins at 0
  and stays there, every pixel predicted 0). Cured: binary_crossentropy, the loss for a
  one-channel sigmoid mask: the loss 1.30 to 0.26, the error 0.20 to 0.089 (0.058 in training
  mode)."""
  x, y = blob_scenes(seed)
  return cases.Setup(bisenet_lite(seed), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, y, batch=16, seed=seed), 'binary_prob')
