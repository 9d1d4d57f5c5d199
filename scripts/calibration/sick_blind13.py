"""A thirteenth blind set of sick scenarios (the 'blind13' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind12.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a Seq2seq forecaster with Bahdanau attention, an
Xception-lite, a DeepLabV3-lite with ASPP, a StyleGAN mapping network, a CenterNet-lite heatmap
head, a ProtoNet-lite embedder, a BiDAF-lite reader, a CoAtNet-lite, a DGCNN-lite point-cloud
classifier, a LeViT-lite). Each builder takes `cured`: the same run with the thread's remedy (the
registry calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit`
only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's
"did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND13 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND13.add` with split='blind13'."""
  return BLIND13.add(name, expected, arch, split='blind13', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def shop_series(seed, *, rows=2048, window=24, horizon=6):
  """Daily demand of many products in miniature: a level, a weekly cycle of random phase and
  amplitude, a slow trend and noise (about unit scale); the last `window` days the input, the
  next `horizon` days the target. (x (rows, window, 1), y (rows, horizon))."""
  rng = np.random.RandomState(seed)
  t = np.arange(window + horizon)[None, :]
  level = rng.uniform(-1, 1, size=(rows, 1))
  amp = rng.uniform(0.3, 1.0, size=(rows, 1))
  phase = rng.uniform(0, 2 * np.pi, size=(rows, 1))
  trend = rng.uniform(-0.03, 0.03, size=(rows, 1))
  s = level + amp * np.sin(2 * np.pi * t / 7 + phase) + trend * t + 0.1 * rng.randn(rows, t.size)
  return s[:, :window, None].astype(np.float32), s[:, window:].astype(np.float32)


class BahdanauSeq2Seq(keras.Model):
  """A Seq2seq forecaster with Bahdanau (additive) attention: a GRU encoder over the history, a
  GRU decoder over the horizon started from the encoder's last state and fed the last observed
  value and the step's position, at each decoder step additive attention over the encoder
  states (v^T tanh(W1 h_enc + W2 h_dec)), the context and the decoder state into Dense(1)."""

  def __init__(self, *, units=32, horizon=6, **kwargs):
    super().__init__(**kwargs)
    self.horizon = horizon
    self.encoder = L.GRU(units, return_sequences=True, return_state=True)
    self.decoder = L.GRU(units, return_sequences=True)
    self.w1, self.w2, self.v = L.Dense(units), L.Dense(units), L.Dense(1)
    self.hidden = L.Dense(units, activation='tanh')
    self.out = L.Dense(1)

  def call(self, x, training=False):
    enc, state = self.encoder(x)
    steps = tf.cast(tf.range(1, self.horizon + 1), x.dtype)[None, :, None] / self.horizon
    last = tf.repeat(x[:, -1:, :], self.horizon, axis=1)
    dec_in = tf.concat([last, tf.broadcast_to(steps, tf.shape(last))], axis=-1)
    dec = self.decoder(dec_in, initial_state=state)
    scores = self.v(tf.tanh(self.w1(enc)[:, None] + self.w2(dec)[:, :, None]))[..., 0]
    weights = tf.nn.softmax(scores, axis=-1)  # (batch, horizon, window)
    context = tf.einsum('bhw,bwu->bhu', weights, enc)
    return self.out(self.hidden(tf.concat([dec, context], axis=-1)))[..., 0]


def bahdanau_seq2seq(seed, **kwargs):
  """`BahdanauSeq2Seq`, built on a batch of zeros."""
  _seed(seed)
  model = BahdanauSeq2Seq(name='bahdanau_seq2seq', **kwargs)
  model(tf.zeros((1, 24, 1)))
  return model


def xception_lite(seed, *, size=16, classes=10):
  """An Xception-lite: an entry flow (Conv 3x3 (16) + BatchNorm + ReLU, Conv 3x3 (32) + BatchNorm
  + ReLU; two blocks of two SeparableConv 3x3 + BatchNorm with a ReLU between, a 3x3 max-pool of
  stride 2 and a strided 1x1 Conv + BatchNorm shortcut, to 64 then 128 channels), a middle-flow
  block (three ReLU + SeparableConv + BatchNorm, added to its input), an exit SeparableConv(192)
  + BatchNorm + ReLU, global average, Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, padding='same', use_bias=False)(inputs)))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding='same', use_bias=False)(h)))
  for width in (64, 128):
    skip = L.BatchNormalization()(L.Conv2D(width, 1, strides=2, use_bias=False)(h))
    r = L.BatchNormalization()(L.SeparableConv2D(width, 3, padding='same', use_bias=False)(h))
    r = L.BatchNormalization()(L.SeparableConv2D(width, 3, padding='same', use_bias=False)(
        L.ReLU()(r)))
    h = L.Add()([L.MaxPooling2D(3, strides=2, padding='same')(r), skip])
  r = h
  for _ in range(3):
    r = L.BatchNormalization()(L.SeparableConv2D(128, 3, padding='same', use_bias=False)(
        L.ReLU()(r)))
  h = L.Add()([h, r])
  h = L.ReLU()(L.BatchNormalization()(L.SeparableConv2D(192, 3, padding='same',
                                                          use_bias=False)(h)))
  return keras.Model(inputs, L.Dense(classes)(L.GlobalAveragePooling2D()(h)),
                     name='xception_lite')


def style_codes(seed, *, rows=4096, latent=32, styles=16):
  """Latent-to-style regression (fitting a mapping network to the style codes of a frozen
  generator, as GAN-inversion encoders do): z ~ N(0, 1) of `latent` dims, its target the output
  of a fixed random 2-layer tanh network, standardised. (z (rows, latent), w (rows, styles))."""
  rng = np.random.RandomState(seed)
  z = rng.randn(rows, latent)
  h = z
  for fan_out in (64, styles):
    h = np.tanh(h @ (rng.randn(h.shape[1], fan_out) / np.sqrt(h.shape[1])))
  w = (h - h.mean(axis=0)) / h.std(axis=0)
  return z.astype(np.float32), w.astype(np.float32)


class EqualizedDense(L.Layer):
  """StyleGAN's equalised-learning-rate dense layer (Karras et al., 2019): the kernel stored by
  `kernel_init` (N(0, 1) in the paper) and multiplied at run time by the He constant
  sqrt(2 / fan_in) x `lr_mul`, the bias by `lr_mul`; LeakyReLU(0.2) unless `linear`."""

  def __init__(self, units, *, lr_mul=1.0, kernel_init='random_normal', linear=False,
               **kwargs):
    super().__init__(**kwargs)
    self.units, self.lr_mul, self.linear = units, lr_mul, linear
    self.kernel_init = kernel_init

  def build(self, shape):
    self.scale = float(np.sqrt(2.0 / shape[-1]) * self.lr_mul)
    init = (keras.initializers.RandomNormal(stddev=1.0 / self.lr_mul)
            if self.kernel_init == 'random_normal' else self.kernel_init)
    self.kernel = self.add_weight(shape=(shape[-1], self.units), initializer=init, name='kernel')
    self.bias = self.add_weight(shape=(self.units,), initializer='zeros', name='bias')

  def call(self, x):
    h = tf.matmul(x, self.kernel * self.scale) + self.bias * self.lr_mul
    return h if self.linear else tf.nn.leaky_relu(h, 0.2)


class StyleMapping(keras.Model):
  """A StyleGAN mapping network (lite): pixel norm of z, `depth` `EqualizedDense(width)` layers
  (learning-rate multiplier 1), a linear `EqualizedDense(styles)`: the style code w."""

  def __init__(self, *, width=64, depth=6, styles=16, kernel_init='random_normal', **kwargs):
    super().__init__(**kwargs)
    self.blocks = [EqualizedDense(width, kernel_init=kernel_init) for _ in range(depth)]
    self.head = EqualizedDense(styles, kernel_init=kernel_init, linear=True)

  def call(self, z, training=False):
    h = z * tf.math.rsqrt(tf.reduce_mean(tf.square(z), axis=-1, keepdims=True) + 1e-8)
    for block in self.blocks:
      h = block(h)
    return self.head(h)


def stylegan_mapping_net(seed, *, latent=32, **kwargs):
  """`StyleMapping(**kwargs)`, built on a batch of zeros."""
  _seed(seed)
  model = StyleMapping(name='stylegan_mapping_net', **kwargs)
  model(tf.ones((1, latent)))
  return model


def blob_frames(seed, *, rows=1024, size=32, stride=4, sigma=0.6, empty=0.0):
  """Centre-point detection in miniature: a noisy 32x32 frame holding one to three bright
  squares (3 to 7 pixels a side), or, for a fraction `empty` of the frames, none (a background
  crop); the CenterNet target a size / stride heatmap with a Gaussian (`sigma` cells, peak exactly
  1) at each object's centre cell. (x (rows, size, size, 1), heatmaps (rows, size / stride,
  size / stride, 1))."""
  rng = np.random.RandomState(seed)
  cells = size // stride
  grid = np.arange(cells)
  x = 0.1 * rng.randn(rows, size, size)
  y = np.zeros((rows, cells, cells))
  for r in range(rows):
    if rng.rand() < empty:
      continue
    for _ in range(rng.randint(1, 4)):
      side = rng.randint(3, 8)
      i, j = rng.randint(0, size - side, size=2)
      x[r, i:i + side, j:j + side] += rng.uniform(0.6, 1.0)
      ci, cj = int((i + side / 2) // stride), int((j + side / 2) // stride)
      g = np.exp(-((grid[:, None] - ci) ** 2 + (grid[None, :] - cj) ** 2) / (2 * sigma ** 2))
      y[r] = np.maximum(y[r], g)
  return x[..., None].astype(np.float32), y[..., None].astype(np.float32)


def centernet_lite(seed, *, size=32):
  """A CenterNet-lite heatmap head: a Conv 3x3 (16) stem, two strided Conv 3x3 + BatchNorm + ReLU
  stages (32, 64) to a 1/4 map, a residual block, the head Conv 3x3 (32) + ReLU, Conv 1x1 (1) with
  the bias at -2.19 (the paper's prior 0.1) and a sigmoid: the centre heatmap."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(16, 3, padding='same', activation='relu')(inputs)
  for f in (32, 64):
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(f, 3, strides=2, padding='same')(h)))
  r = L.ReLU()(L.BatchNormalization()(L.Conv2D(64, 3, padding='same')(h)))
  h = L.ReLU()(L.Add()([h, L.BatchNormalization()(L.Conv2D(64, 3, padding='same')(r))]))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(h)
  heat = L.Conv2D(1, 1, activation='sigmoid',
                  bias_initializer=keras.initializers.Constant(-2.19))(h)
  return keras.Model(inputs, heat, name='centernet_lite')


def centernet_focal_loss(safe):
  """CornerNet / CenterNet's penalty-reduced focal loss (alpha 2, beta 4) on the clamped
  heatmap (1e-4 to 1 - 1e-4), normalised per image by that image's number of object centres
  (the peaks equal to 1); `safe`: by max(count, 1) (an image without objects adds only its
  negative term), else by the count itself."""

  def loss(y, p):
    p = tf.clip_by_value(p, 1e-4, 1 - 1e-4)
    pos = tf.cast(tf.equal(y, 1.0), p.dtype)
    pos_loss = tf.math.log(p) * tf.square(1 - p) * pos
    neg_loss = tf.math.log(1 - p) * tf.square(p) * tf.pow(1 - y, 4) * (1 - pos)
    count = tf.reduce_sum(pos, axis=[1, 2, 3])
    if safe:
      count = tf.maximum(count, 1.0)
    return tf.reduce_mean(-tf.reduce_sum(pos_loss + neg_loss, axis=[1, 2, 3]) / count)

  return loss


class PrototypeHead(L.Layer):
  """Prototypical-network logits (Snell et al., 2017) with learned class prototypes (the
  'prototype classifier' form of the few-shot embedder): minus the squared Euclidean distance
  of each embedding to each of the `classes` prototypes."""

  def __init__(self, classes, **kwargs):
    super().__init__(**kwargs)
    self.classes = classes

  def build(self, shape):
    self.prototypes = self.add_weight(shape=(self.classes, shape[-1]), name='prototypes',
                                      initializer=keras.initializers.RandomNormal(stddev=1.0))

  def call(self, e):
    d = (tf.reduce_sum(tf.square(e), -1, keepdims=True) - 2 * tf.matmul(e, self.prototypes,
                                                                        transpose_b=True)
         + tf.reduce_sum(tf.square(self.prototypes), -1)[None])
    return -d


def protonet_lite(seed, *, size=16, classes=10, dim=64):
  """A ProtoNet-lite embedder: the four-block Conv-4 backbone of the few-shot papers in miniature
  (Conv 3x3 (32) + BatchNorm + ReLU + 2x2 max-pool, twice), flattened, Dense(dim): the embedding;
  `PrototypeHead(classes)`: minus the squared distances, the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for _ in range(2):
    h = L.MaxPooling2D()(L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding='same')(h))))
  e = L.Dense(dim)(L.Flatten()(h))
  return keras.Model(inputs, PrototypeHead(classes)(e), name='protonet_lite')


def prototype_nll(labels, neg_dist):
  """The episode loss as the ProtoNet paper writes it: p = exp(-d) / sum exp(-d), -log p of the
  true class (the softmax written out, no maximum subtracted)."""
  e = tf.exp(neg_dist)
  p = e / tf.reduce_sum(e, axis=-1, keepdims=True)
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  return -tf.reduce_mean(tf.math.log(tf.gather(p, labels, batch_dims=1)))


def reading_spans(seed, *, rows=4096, vocab=40, context=16, question=4):
  """Extractive reading in miniature: a context of 8 to `context` distinct token ids (1 to
  `vocab` - 1; zero padding after), a question of 1 to `question` tokens (zero padding after)
  whose first token occurs once in the context; the answer the position of that occurrence (the
  span start). (x (rows, context + question) int32: the context then the question, labels)."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, context + question), np.int32)
  y = np.zeros(rows, np.int32)
  for r in range(rows):
    n = rng.randint(8, context + 1)
    ids = rng.choice(np.arange(1, vocab), size=n, replace=False)
    x[r, :n] = ids
    y[r] = rng.randint(0, n)
    q = rng.randint(1, question + 1)
    x[r, context] = ids[y[r]]
    x[r, context + 1:context + q] = rng.choice(ids, size=q - 1)
  return x, y


class BiDAFAttention(L.Layer):
  """BiDAF's attention flow layer (Seo et al., 2017): the similarity S = w^T [c; q; c * q] of
  each context and question position, the padded question positions masked by adding
  (1 - mask) x `penalty` before the softmax over the question (context-to-query), the padded
  context positions masked the same way before the softmax over the context of max_q S
  (query-to-context); out: [c, c~, c * c~, c * q~]."""

  def __init__(self, penalty, dim, **kwargs):
    super().__init__(**kwargs)
    self.penalty = penalty
    self.w = self.add_weight(shape=(3 * dim,), initializer='glorot_uniform', name='w')

  def call(self, c, q, c_mask, q_mask):
    d = c.shape[-1]
    w = tf.cast(self.w, c.dtype)
    s = (tf.einsum('bid,d->bi', c, w[:d])[:, :, None] + tf.einsum('bjd,d->bj', q, w[d:2 * d])[
        :, None, :] + tf.einsum('bid,bjd->bij', c * w[2 * d:], q))
    s = s + (1.0 - q_mask[:, None, :]) * self.penalty
    c2q = tf.einsum('bij,bjd->bid', tf.nn.softmax(s, axis=-1), q)
    b = tf.reduce_max(s, axis=-1) + (1.0 - c_mask) * self.penalty
    q2c = tf.einsum('bi,bid->bd', tf.nn.softmax(b, axis=-1), c)[:, None, :]
    return tf.concat([c, c2q, c * c2q, c * q2c], axis=-1)


class BiDAFLite(keras.Model):
  """A BiDAF-lite reader: a shared embedding and bidirectional GRU contextual encoder for the
  context and the question, `BiDAFAttention(penalty)`, a bidirectional GRU modelling layer,
  Dense(1) per context position (float32): the span-start logits, the padded positions masked by
  the same penalty (in float32)."""

  def __init__(self, *, vocab=40, context=16, dim=32, penalty=-1e30, **kwargs):
    super().__init__(**kwargs)
    self.context, self.penalty = context, penalty
    self.embed = L.Embedding(vocab, dim)
    self.encode = L.Bidirectional(L.GRU(dim // 2, return_sequences=True))
    self.attend = BiDAFAttention(penalty, dim)
    self.model_layer = L.Bidirectional(L.GRU(dim // 2, return_sequences=True))
    self.start = L.Dense(1, dtype='float32')

  def call(self, ids, training=False):
    c_ids, q_ids = ids[:, :self.context], ids[:, self.context:]
    c, q = self.encode(self.embed(c_ids)), self.encode(self.embed(q_ids))
    c_mask = tf.cast(c_ids > 0, c.dtype)
    q_mask = tf.cast(q_ids > 0, c.dtype)
    g = self.model_layer(self.attend(c, q, c_mask, q_mask))
    logits = self.start(g)[..., 0]
    return logits + (1.0 - tf.cast(c_mask, tf.float32)) * self.penalty


def bidaf_lite(seed, *, context=16, question=4, **kwargs):
  """`BiDAFLite(**kwargs)`, built on a batch of ones."""
  _seed(seed)
  model = BiDAFLite(context=context, name='bidaf_lite', **kwargs)
  model(tf.ones((1, context + question), tf.int32))
  return model


def standardised_digits(*, size=16, blank=(), safe=False):
  """The digits at size x size, each image standardised on its own (minus its mean, over its
  standard deviation, as a per-image preprocessing step does); the images listed in `blank`
  replaced by all-black frames first (dead-sensor captures), whose standard deviation is 0;
  `safe`: the deviation floored at 1 / sqrt(pixels) (tf.image.per_image_standardization's
  rule). (x, labels)."""
  x, y = data.digits(size=size, rgb=False)
  x = x.astype(np.float64)
  x[list(blank)] = 0.0
  mean = x.mean(axis=(1, 2, 3), keepdims=True)
  std = x.std(axis=(1, 2, 3), keepdims=True)
  if safe:
    std = np.maximum(std, 1.0 / np.sqrt(x[0].size))
  with np.errstate(invalid='ignore'):
    x = (x - mean) / std
  return x.astype(np.float32), y


def coatnet_lite(seed, *, size=16, classes=10, dim=48):
  """A CoAtNet-lite (Dai et al., 2021): a Conv 3x3 (24) + BatchNorm + GELU stem, an MBConv block
  (1x1 expansion x4 + BatchNorm + GELU, depthwise 3x3 of stride 2 + BatchNorm + GELU,
  squeeze-excitation, 1x1 projection to `dim` + BatchNorm, a strided pooled shortcut), then two
  pre-norm transformer blocks over the 8x8 positions (2-head self-attention with a learned
  position embedding, a GELU MLP), LayerNorm, global average, Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Activation('gelu')(L.BatchNormalization()(L.Conv2D(24, 3, padding='same')(inputs)))
  e = L.Activation('gelu')(L.BatchNormalization()(L.Conv2D(96, 1)(h)))
  e = L.Activation('gelu')(L.BatchNormalization()(L.DepthwiseConv2D(3, 2, padding='same')(e)))
  se = L.Dense(96, activation='sigmoid')(L.Dense(24, activation='gelu')(
      L.GlobalAveragePooling2D()(e)))
  e = L.BatchNormalization()(L.Conv2D(dim, 1)(e * se[:, None, None, :]))
  h = L.Add()([e, L.Conv2D(dim, 1)(L.AveragePooling2D(2)(h))])
  t = L.Reshape(((size // 2) ** 2, dim))(h)
  t = t + L.Embedding((size // 2) ** 2, dim)(tf.range((size // 2) ** 2))[None]
  for _ in range(2):
    a = L.LayerNormalization()(t)
    t = L.Add()([t, L.MultiHeadAttention(2, dim // 2)(a, a)])
    m = L.Dense(2 * dim, activation='gelu')(L.LayerNormalization()(t))
    t = L.Add()([t, L.Dense(dim)(m)])
  t = L.GlobalAveragePooling1D()(L.LayerNormalization()(t))
  return keras.Model(inputs, L.Dense(classes)(t), name='coatnet_lite')


def shape_clouds(seed, *, rows=1024, points=64, classes=4):
  """Point-cloud classification in miniature: `points` points sampled on the surface of a sphere,
  a cube, a cylinder or a cone, randomly scaled (0.7 to 1.3), turned about the vertical axis and
  jittered. (x (rows, points, 3), labels)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, size=rows)
  x = np.zeros((rows, points, 3))
  for r in range(rows):
    u = rng.rand(points, 3)
    if y[r] == 0:
      v = rng.randn(points, 3)
      p = v / np.linalg.norm(v, axis=1, keepdims=True)
    elif y[r] == 1:
      p = 2 * u - 1
      face = rng.randint(0, 3, size=points)
      p[np.arange(points), face] = np.sign(p[np.arange(points), face])
    elif y[r] == 2:
      a = 2 * np.pi * u[:, 0]
      p = np.stack([np.cos(a), np.sin(a), 2 * u[:, 1] - 1], axis=1)
    else:
      a, hgt = 2 * np.pi * u[:, 0], u[:, 1]
      p = np.stack([(1 - hgt) * np.cos(a), (1 - hgt) * np.sin(a), 2 * hgt - 1], axis=1)
    t = rng.uniform(0, 2 * np.pi)
    rot = np.array([[np.cos(t), -np.sin(t), 0], [np.sin(t), np.cos(t), 0], [0, 0, 1]])
    x[r] = rng.uniform(0.7, 1.3) * p @ rot.T + 0.02 * rng.randn(points, 3)
  return x.astype(np.float32), y.astype(np.int32)


class EdgeConv(L.Layer):
  """DGCNN's EdgeConv (Wang et al., 2019): the k nearest neighbours of each point in the current
  feature space (the graph rebuilt at each layer), the edge features [x_i, x_j - x_i] through
  Dense(units) + BatchNorm + LeakyReLU(0.2), the maximum over the neighbours."""

  def __init__(self, units, k=8, **kwargs):
    super().__init__(**kwargs)
    self.k = k
    self.dense = L.Dense(units, use_bias=False)
    self.norm = L.BatchNormalization()

  def call(self, x, training=False):
    sq = tf.reduce_sum(tf.square(x), axis=-1, keepdims=True)
    d = sq - 2 * tf.matmul(x, x, transpose_b=True) + tf.transpose(sq, [0, 2, 1])
    _, idx = tf.math.top_k(-d, k=self.k)
    nbrs = tf.gather(x, idx, batch_dims=1)
    centre = tf.repeat(x[:, :, None, :], self.k, axis=2)
    e = tf.concat([centre, nbrs - centre], axis=-1)
    e = tf.nn.leaky_relu(self.norm(self.dense(e), training=training), 0.2)
    return tf.reduce_max(e, axis=2)



class GlitchedActivation(field.OneOffFault):
  """A one-off fault in the forward pass: identity, except at its `at`-th training call (None:
  never), where one activation element reads +inf (a flipped exponent bit in a buffer; not the
  data, the model or the settings). The count lives outside the model's variables (made under
  tf.init_scope), so a guard that restores the model after a skipped step does not replay it."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.inf, backward=False, **kwargs)


def dgcnn_lite(seed, *, points=64, classes=4, glitch=None):
  """A DGCNN-lite point-cloud classifier: two `EdgeConv`s (32, 64; k = 8), a
  `GlitchedActivation(glitch)` after the first, their outputs concatenated, Dense(128) +
  BatchNorm + LeakyReLU per point, global max and average pooling, Dense(64) + LeakyReLU,
  Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((points, 3))
  h1 = GlitchedActivation(glitch)(EdgeConv(32)(inputs))
  h2 = EdgeConv(64)(h1)
  h = L.Concatenate()([h1, h2])
  h = L.LeakyReLU(0.2)(L.BatchNormalization()(L.Dense(128, use_bias=False)(h)))
  h = L.Concatenate()([L.GlobalMaxPooling1D()(h), L.GlobalAveragePooling1D()(h)])
  h = L.LeakyReLU(0.2)(L.Dense(64)(h))
  return keras.Model(inputs, L.Dense(classes)(h), name='dgcnn_lite')


class AttentionBiasMHSA(L.Layer):
  """LeViT's attention (Graham et al., 2021): `heads` heads of key size `key_dim`, a learned
  per-head bias for each pair of positions added to q k^T / sqrt(key_dim), softmax, the values
  (twice the key size) through Hardswish, a Dense back to the model width."""

  def __init__(self, heads=2, key_dim=16, **kwargs):
    super().__init__(**kwargs)
    self.heads, self.key_dim = heads, key_dim

  def build(self, shape):
    n, d = shape[1], shape[2]
    self.qkv = L.Dense(self.heads * self.key_dim * 4)
    self.proj = L.Dense(d)
    self.bias = self.add_weight(shape=(self.heads, n, n), initializer='zeros', name='bias')

  def call(self, x):
    b, n = tf.shape(x)[0], x.shape[1]
    qkv = tf.reshape(self.qkv(x), (b, n, self.heads, 4 * self.key_dim))
    q, k, v = tf.split(qkv, [self.key_dim, self.key_dim, 2 * self.key_dim], axis=-1)
    s = tf.einsum('bihd,bjhd->bhij', q, k) / np.sqrt(self.key_dim) + self.bias
    o = tf.einsum('bhij,bjhd->bihd', tf.nn.softmax(s, axis=-1), v)
    return self.proj(keras.activations.hard_swish(
        tf.reshape(o, (b, n, self.heads * 2 * self.key_dim))))


def levit_lite(seed, *, size=16, classes=10, dim=64, head='log_softmax'):
  """A LeViT-lite: a convolutional stem (two Conv 3x3 of stride 2 + BatchNorm, Hardswish between:
  16x16 to a 4x4 map of `dim`), two blocks of `AttentionBiasMHSA` and a Hardswish MLP (x2), each
  with a residual, global average over the 16 positions, a BatchNorm, Dense(classes) with
  activation `head` (the PyTorch port's LogSoftmax head)."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.BatchNormalization()(L.Conv2D(dim // 2, 3, 2, padding='same')(inputs))
  h = L.BatchNormalization()(L.Conv2D(dim, 3, 2, padding='same')(L.Activation('hard_swish')(h)))
  t = L.Reshape(((size // 4) ** 2, dim))(h)
  for _ in range(2):
    t = L.Add()([t, AttentionBiasMHSA()(t)])
    m = L.Dense(2 * dim, activation='hard_swish')(t)
    t = L.Add()([t, L.Dense(dim)(m)])
  t = L.BatchNormalization()(L.GlobalAveragePooling1D()(t))
  return keras.Model(inputs, L.Dense(classes, activation=head)(t), name='levit_lite')


def mask_scenes(seed, *, rows=1024, size=32):
  """Binary segmentation in miniature: a noisy 32x32 frame holding two to four bright discs and
  squares of random size; the target the foreground mask. (x (rows, size, size, 1), mask (rows,
  size, size, 1))."""
  rng = np.random.RandomState(seed)
  ii, jj = np.mgrid[:size, :size]
  x = 0.15 * rng.randn(rows, size, size)
  y = np.zeros((rows, size, size))
  for r in range(rows):
    for _ in range(rng.randint(2, 5)):
      ci, cj, rad = rng.uniform(4, size - 4), rng.uniform(4, size - 4), rng.uniform(2, 5)
      m = ((ii - ci) ** 2 + (jj - cj) ** 2 < rad ** 2) if rng.rand() < 0.5 else (
          (np.abs(ii - ci) < rad) & (np.abs(jj - cj) < rad))
      y[r] = np.maximum(y[r], m)
      x[r] += 0.6 * m
  return x[..., None].astype(np.float32), y[..., None].astype(np.float32)


def deeplabv3_lite(seed, *, size=32):
  """A DeepLabV3-lite: a backbone of Conv 3x3 + BatchNorm + ReLU stages (16, stride 2; 32,
  stride 2; 64) to a 1/4 map, ASPP (a 1x1 branch, 3x3 atrous branches at rates 1, 2 and 3 and an
  image-pooling branch, 32 each, BatchNorm + ReLU), concatenated, a 1x1 Conv (32) + BatchNorm +
  ReLU, a 1x1 Conv to one channel, bilinear upsampling x4, a sigmoid: the foreground
  probability."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for f, s in ((16, 2), (32, 2), (64, 1)):
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(f, 3, strides=s, padding='same')(h)))
  branch = lambda k, r: L.ReLU()(L.BatchNormalization()(
      L.Conv2D(32, k, dilation_rate=r, padding='same')(h)))
  pooled = L.ReLU()(L.Conv2D(32, 1)(L.GlobalAveragePooling2D(keepdims=True)(h)))
  pooled = L.UpSampling2D(size // 4)(pooled)
  a = L.Concatenate()([branch(1, 1), branch(3, 1), branch(3, 2), branch(3, 3), pooled])
  a = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 1)(a)))
  out = L.UpSampling2D(4, interpolation='bilinear')(L.Conv2D(1, 1)(a))
  return keras.Model(inputs, L.Activation('sigmoid')(out), name='deeplabv3_lite')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind13_grad_bahdanau_seq2seq_sgd_no_clip', 'exploding_gradients', 'bahdanau_seq2seq',
     doors=('trainer', 'fit'), steps=150,
     citation='magenta/magenta#1202; PaddlePaddle/Paddle#3944; '
              'Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """A Seq2seq forecaster with Bahdanau attention (a GRU encoder over 24 days of demand, a GRU
  decoder over the next six started from its state, additive attention over the encoder states
  at each decoder step), MSE, SGD + momentum 0.9 at 0.4 (the high rate of the classic
  RNN-with-SGD recipes) and no gradient clipping: the loss wanders between 0.6 and 4.5 for ten
  steps while the recurrent weights grow, then the gradient through the unrolled recurrences
  blows up: 935 at step 10, 4.3e4 at step 11, and NaN from step 24 (the error 0.91 before, inf
  after; the constant answer's 0.86). Seed 1: 740 at step 9, NaN from step 24.
  magenta/magenta#1202 (an attention RNN: "NaN loss during training", fixed by smaller layers);
  PaddlePaddle/Paddle#3944 ("cost goes to NAN in the training of the seq2seq model"; the logged
  gradients: avg_abs_grad 3e5, max_grad 2.6e9); Marcovaldong/lstmp.pytorch#2 ("Loss function goes
  to nan after n number of iterations - might be problem of exploding gradient?"; the answer:
  "just clip the gradients"). Cured: clipnorm=0.25 (the clip of the classic word-language-model
  recipe) at the same rate: the loss 0.89 to 0.1, the error 0.91 to 0.078 (seed 1: 0.92 to
  0.28)."""
  x, y = shop_series(seed)
  return cases.Setup(bahdanau_seq2seq(seed),
                     keras.optimizers.SGD(0.4, momentum=0.9, clipnorm=0.25 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')



# --- learning_rate ---------------------------------------------------------------------------


@add('blind13_lr_xception_rmsprop_too_high', 'learning_rate', 'xception_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#6182; PaddlePaddle/Paddle#15162; '
              'apache/mxnet#10320')
def _(seed, cured=False):
  """An Xception-lite (an entry flow of separable-convolution blocks with strided 1x1 shortcuts, a
  middle-flow residual block of three separable convolutions, BatchNorm throughout) classifying
  16x16 digits, RMSprop with learning_rate=1.0 (the Adadelta default left in the script when the
  optimizer was switched): the first update throws every weight by about 1, the loss 2.57 at
  step 0 is 929 at step 1, 107, 44, then sinks back to 2.3 to 2.9 (a uniform guess) for the rest
  of the run and never lower; no NaN. The error 0.89 before, 0.89 after (0.86 in training mode;
  the constant answer's 0.86). Seed 1: 967 at step 1, then about 2.5; the error 0.88 after (0.95
  in training mode). keras-team/keras#6182 (RMSprop: "the loss will decrease at the begining but
  start increasing after few epochs due to too large learning rate"); PaddlePaddle/Paddle#15162
  (an Inception net under RMSProp at 0.045: the loss does not go down at all, the accuracy does
  not rise; Momentum trains); apache/mxnet#10320 ("RMSProp doesn't work for MobileNetV2": "try
  either a significantly larger stepsize or a much smaller one"). Cured: RMSprop at 1e-3: the
  loss 2.57 to about 0.1, the error 0.89 to 0.039 in training mode (0.89 in inference mode:
  BatchNorm's moving statistics lag)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(xception_lite(seed), keras.optimizers.RMSprop(1e-3 if cured else 1.0),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind13_lr_deeplab_exponential_decay_per_step', 'learning_rate', 'deeplabv3_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='cjiang2/VDCNN#4; NVlabs/instant-ngp#1418')
def _(seed, cured=False):
  """A DeepLabV3-lite (a strided Conv + BatchNorm backbone to a 1/4 map, ASPP with atrous rates 1, 2
  and 3 and image pooling, bilinear upsampling, a sigmoid) segmenting bright shapes on noisy
  32x32 frames, binary cross-entropy, Adam on ExponentialDecay(1e-3, decay_steps=1,
  decay_rate=0.1): decay_steps written as 1 (meant: one epoch of steps), so the rate falls
  tenfold at every step (1e-4 at step 1, 1e-13 by step 10) and the model freezes after two
  updates: the loss 0.996 at step 0, 0.87 to 0.91 for the rest of the run, no NaN; the pixel
  error 0.83 before, 0.86 after (0.66 in training mode; the constant answer's 0.13). Seed 1: the
  loss 0.46, then flat at 0.38; the error 0.13 before, 0.125 after (the constant answer's
  0.125), 0.0998 in training mode (just inside the measure's 0.8 x 0.125: the two updates taken
  were enough to pass it there). cjiang2/VDCNN#4 (exponential_decay with decay_steps 100: "the
  decay setup is completely wrong. It should be the number of steps which is actually around
  num_epochs*num_batches_per_epoch"); NVlabs/instant-ngp#1418 (replicating a decay "after a
  given number of steps ... but what is a step?"). Cured: decay_steps=1000: the loss 0.996 to
  0.15, the error 0.83 to 0.090 (0.029 in training mode)."""
  x, y = mask_scenes(seed)
  lr = keras.optimizers.schedules.ExponentialDecay(1e-3, decay_steps=1000 if cured else 1,
                                                   decay_rate=0.1)
  return cases.Setup(deeplabv3_lite(seed), keras.optimizers.Adam(lr), BCE(),
                     data.stream(x, y, batch=16, seed=seed), 'binary_prob')


# --- initialisation --------------------------------------------------------------------------


@add('blind13_init_stylegan_mapping_zero_kernels', 'initialisation', 'stylegan_mapping_net',
     doors=('trainer', 'fit'), steps=150,
     citation='longjon/caffe#3; wagonhelm/NaNmnist#2; yz93/LAVT-RIS#25')
def _(seed, cured=False):
  """A StyleGAN mapping network (lite, subclassed: pixel norm, six equalised-learning-rate dense
  layers with LeakyReLU(0.2), a linear one to the 16-dim style code) fitted to the style codes
  of a frozen generator's latents, MSE, Adam at 3e-3, the custom layer's kernels created with
  initializer='zeros' (the equalised layer's N(0, 1) dropped for the 'neutral' start): every
  hidden activation is 0, no kernel gets a gradient (each layer's input is zero and so is the
  kernel after it) and only the last bias learns: the run answers the mean code, the loss 1.0
  at every step (0.999 at step 0, about 1.0 at step 150), no NaN; the error 1.01 before and
  after (the constant answer's 1.00). Seed 1: the same (1.01 before and after).
  longjon/caffe#3 (the same loss every iteration: "If you have the same, constant loss and/or
  score it is likely that the weights are not initialized properly and the network is outputting
  all zeroes"); wagonhelm/NaNmnist#2 ("Pitfall: all zero initialization": every neuron computes
  the same output and gets the same update); yz93/LAVT-RIS#25 (zero-initialised layers whose
  gradients print as all zeros). Cured: the paper's N(0, 1) kernels scaled at run time: the
  loss 5.8 to 0.75, the error 5.1 to 0.70 (the constant answer's 1.00)."""
  z, w = style_codes(seed)
  return cases.Setup(stylegan_mapping_net(seed, kernel_init='random_normal' if cured else 'zeros'),
                     keras.optimizers.Adam(3e-3), 'mse', data.stream(z, w, batch=64, seed=seed),
                     'regression')


# --- division_or_log -------------------------------------------------------------------------


@add('blind13_div_centernet_focal_per_image_num_pos', 'division_or_log', 'centernet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Stick-To/CenterNet-tensorflow#20; '
              'xggIoU/centernet_tensorflow_wilderface_voc#18; xingyizhou/CenterNet#241')
def _(seed, cured=False):
  """A CenterNet-lite heatmap head (a strided Conv + BatchNorm backbone to a 1/4 map, a residual
  block, a sigmoid heatmap with the paper's -2.19 bias) locating the centres of one to three
  bright squares on noisy 32x32 frames, CenterNet's penalty-reduced focal loss normalised per
  image by that image's number of centres, Adam at 1e-3; two frames of the 1,024 hold no object
  (background crops), whose centre count is 0: the first batch holding one gives 0 / 0: the
  loss 2.0 at step 0, inf at step 1, NaN from then (the weights NaN; the error 0.037 before, inf
  after; the constant answer's 0.035). Seed 1: 2.86, 0.90, 0.82, inf at step 3, NaN after.
  Stick-To/CenterNet-tensorflow#20 (CenterNet "Loss Nan" after 4 to 5 iterations on a new
  dataset: the crops can hold "no valid targets"; the fix avoids "division by zero" in the
  keypoint loss); xggIoU/centernet_tensorflow_wilderface_voc#18 (the focal loss's "if num_pos ==
  0" branch); xingyizhou/CenterNet#241 (the reference: "if num_pos == 0: loss = loss -
  neg_loss"). Cured: divided by max(count, 1): the loss 2.0 to 0.01, the error 0.037 to 0.0058
  in training mode (0.038 in inference mode: BatchNorm's moving statistics lag)."""
  x, y = blob_frames(seed, empty=0.002)
  return cases.Setup(centernet_lite(seed), keras.optimizers.Adam(1e-3),
                     centernet_focal_loss(safe=cured), data.stream(x, y, batch=32, seed=seed),
                     'regression')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind13_exp_protonet_manual_softmax_distances', 'softmax_overflow', 'protonet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='jakesnell/prototypical-networks#28; deeplearning4j/nd4j#458; '
              'roimehrez/contextualLoss#30')
def _(seed, cured=False):
  """A ProtoNet-lite embedder (a Conv-4-style backbone, Dense(64) embedding, ten learned class
  prototypes; the logits minus the squared distances) classifying 16x16 digits, Adam at 1e-3,
  the loss written as the paper's formula, p = exp(-d) / sum exp(-d) and -log p of the true
  class, no maximum subtracted: the squared distances of the untrained embeddings are in the
  hundreds, exp(-d) underflows to 0 for every prototype, 0 / 0 = NaN: the loss is NaN from step
  0 and the first update writes NaN into the weights (the error 0.89 before, inf after). Seed 1:
  NaN from step 0. jakesnell/prototypical-networks#28 (the reference code computes the loss as
  "F.log_softmax(-dists, dim=1)", not the formula); deeplearning4j/nd4j#458 ("use LogSoftMax
  when possible (avoids underflow)"); roimehrez/contextualLoss#30 (a distance-based exp: "This op
  is very unstable, the value goes inf after exp"). Cured: SparseCategoricalCrossentropy(
  from_logits=True) on the same minus-distances: the loss 54 to under 1, the error 0.89 to
  0.0078 in training mode (0.90 in inference mode: BatchNorm's moving statistics lag)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(protonet_lite(seed), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True) if cured else prototype_nll,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind13_fp16_bidaf_mask_penalty_1e30', 'precision', 'bidaf_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='allenai/allennlp-models#68; huggingface/transformers#6915; '
              'openai/gpt-2#122')
def _(seed, cured=False):
  """A BiDAF-lite reader (a shared embedding and bidirectional GRU encoder, BiDAF's attention flow
  with context-to-query and query-to-context attention, a bidirectional GRU modelling layer,
  span-start logits) finding the answer position in padded 16-token contexts, Adam at 3e-3,
  under mixed_float16, its masks written as BiDAF's scores + (1 - mask) x -1e30: in float16 -1e30
  is -inf, and at every real (mask 1) position 0 x -inf = NaN: the attention is NaN everywhere,
  the outputs are NaN before any training (the error inf before and after) and the loss is NaN
  at every step from step 0 (the loss-scale optimizer skips each update). Seed 1: the same.
  allenai/allennlp-models#68 (BiDAF under mixed precision: "-1e7 would result in an overflow.
  Hence we fall back to the min FP16 value"); huggingface/transformers#6915 (TF DistilBert's
  "scores - 1e30 * (1.0 - mask)" under mixed precision, computed in float32 to "avoid numeric
  overflow"); openai/gpt-2#122 (the 1e10 mask overflows in fp16: "changed this to 1e4 to keep it
  within the range of fp16"). Cured: the penalty -1e4 (float16 holds it): the loss 2.46 to 0.11,
  the error 0.89 to 0.0078 (the constant answer's 0.88)."""
  x, y = reading_spans(seed)
  return cases.Setup(bidaf_lite(seed, penalty=-1e4 if cured else -1e30),
                     keras.optimizers.Adam(3e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind13_input_coatnet_per_image_std_blank_frames', 'bad_input', 'coatnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Project-MONAI/MONAI#1092; vanvalenlab/deepcell-toolbox#72; '
              'keras-team/keras#1880')
def _(seed, cured=False):
  """A CoAtNet-lite (a convolutional stem, an MBConv block with squeeze-excitation to an 8x8 map,
  two transformer blocks over its positions) classifying 16x16 digits, Adam at 1e-3, each image
  standardised on its own in NumPy, (x - mean) / std, three of the 1,500 images all-black frames
  (dead-sensor captures): their std is 0 and they become 0 / 0 = NaN images; the first batch
  holding one writes NaN into the weights: the loss 2.42 at step 0, NaN from step 1 (the error on
  clean batches 0.95 before, inf after). Seed 1: trains (2.49 to 1.84 by step 9) until the first
  such batch, NaN from step 14. Project-MONAI/MONAI#1092 ("divide std in NormalizeIntensity, but
  std could be 0. This will cause NaN": "Let the input image to be all zeros");
  vanvalenlab/deepcell-toolbox#72 (an epsilon on the per-image standard deviation "to prevent any
  NaN issues when the standard deviation is 0"); keras-team/keras#1880 ("ImageDataGenerator
  induces nans": no check that std is not zero "before it divides the data"). Cured: the std
  floored at 1 / sqrt(pixels) (tf.image.per_image_standardization's rule): the loss 2.42 to 0.12,
  the error 0.95 to 0.031 in training mode (0.90 in inference mode: BatchNorm's moving
  statistics lag). The measure reads clean batches (eval_data) for both runs."""
  blank = (101, 702, 1333)
  x, y = standardised_digits(blank=blank, safe=cured)
  clean_x, clean_y = standardised_digits(safe=True)
  return cases.Setup(coatnet_lite(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean_x, clean_y, batch=32, seed=seed))


# --- transient -------------------------------------------------------------------------------


@add('blind13_transient_dgcnn_one_inf_activation', 'transient', 'dgcnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='greatlog/DAN#8; karpathy/nanoGPT#227; allenai/olmoearth_pretrain#135')
def _(seed, cured=False):
  """A DGCNN-lite point-cloud classifier (two EdgeConvs on k-nearest-neighbour graphs rebuilt in
  feature space, max and average pooling) telling spheres, cubes, cylinders and cones apart,
  SGD + Nesterov momentum 0.9 at 0.05, training normally (the loss jumpy, 2.2, 6.4, 12.8, ...
  then falling), where one activation element after the first EdgeConv reads +inf at one
  forward pass (`GlitchedActivation`: the 66th training-mode call; step 61 in a plain `fit`
  after the measure's four training-mode passes; a flipped bit in a buffer, not the data, the
  model or the settings): that step's loss is NaN, the update writes NaN into the weights and,
  in plain `fit`, the loss is NaN from step 61 on (the error 0.73 before, inf after); skipped,
  the run goes on training. Seed 1: the same step. greatlog/DAN#8 (the loss NaN "at 22800
  iterations ... suddenly", once or twice in 400,000; "A workaround method is to resume from the
  last normal training state"); karpathy/nanoGPT#227 ("Skip step if loss is nan ... To prevent
  breaking training"); allenai/olmoearth_pretrain#135 ("Skip batch when loss goes to nan": "stop
  gradient updates on those anomalous batches"). Cured: the same run without the fault: the
  error 0.73 to 0.023 (0.0 in training mode; the constant answer's 0.73)."""
  x, y = shape_clouds(seed)
  return cases.Setup(dgcnn_lite(seed, glitch=None if cured else 66),
                     keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind13_mismatch_levit_log_softmax_head', 'loss_output_mismatch', 'levit_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#11801; princeton-vl/SimpleView#13; tensorflow/docs#2102')
def _(seed, cured=False):
  """A LeViT-lite (a convolutional stem to a 4x4 map, two blocks of attention with learned
  per-position attention biases and Hardswish MLPs) classifying 16x16 digits, Adam at 1e-3, its
  head ported from PyTorch as Dense(10, activation='log_softmax') (for nn.NLLLoss) and trained
  with SparseCategoricalCrossentropy() (from_logits=False: probabilities expected): every
  log-probability is negative, Keras clips each output to [1e-7, 1 - 1e-7] before its log, so
  every output reads 1e-7, the loss is ln 10 = 2.3026 at every step, no gradient reaches the
  model and it never moves: the error 0.90 before and after (the constant answer's 0.86). Seed 1:
  2.3026 at every step, the error 0.87 before, 0.90 after. keras-team/keras#11801 (the
  from_logits=False path: "output = tf.clip_by_value(output, _epsilon, 1 - _epsilon); output =
  tf.log(output)"); princeton-vl/SimpleView#13 (a PointNet port whose model returns
  "F.log_softmax(x, dim=1)" fed to a cross-entropy loss); tensorflow/docs#2102 (a head and loss
  that do not match: "the accuracy would be around 0.3, not far away from the random-guess
  0.25"). Cured: from_logits=True (log-probabilities are valid logits): the loss 3.19 to about
  0.1, the error 0.90 to 0.0078 in training mode (0.93 in inference mode: BatchNorm's moving
  statistics lag)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(levit_lite(seed), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=cured), data.stream(x, y, batch=32, seed=seed), 'classes')
