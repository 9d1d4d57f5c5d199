"""A tenth blind set of sick scenarios (the 'blind10' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind9.py read for its
format only): each is the set-up and symptom of a public user report (cited in its docstring) on
an architecture no other registry entry uses (an EDSR-lite super-resolution net, a DCN-v2
click model, a word2vec skip-gram with negative sampling, a Neural Turing Machine-lite, a
non-local (self-attention) convnet, a DLinear forecaster with RevIN, a GRU-D-lite for missing
data, a DenseNet-BC-lite, a U-Net++-lite, an FT-Transformer-lite). Each builder takes `cured`: the
same run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was
checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom, the
cured twin passes runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND10 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND10.add` with split='blind10'."""
  return BLIND10.add(name, expected, arch, split='blind10', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def edsr_lite(seed, *, width=32, blocks=16):
  """An EDSR-lite x2 super-resolution net (Lim et al., 2017): a head Conv2D(width, 3x3),
  `blocks` residual blocks (Conv2D 3x3, ReLU, Conv2D 3x3, added to the block input, no
  BatchNorm and no residual scaling), a Conv2D added back to the head's output (the global
  skip), a sub-pixel upsampler (Conv2D(4 width) + depth_to_space(2)) and a Conv2D(1): the
  16x16 image."""
  _seed(seed)
  kw = dict(padding='same')
  inputs = keras.Input((8, 8, 1))  # The digits at 8x8; the target: at 16x16.
  head = L.Conv2D(width, 3, **kw)(inputs)
  h = head
  for _ in range(blocks):
    r = L.Conv2D(width, 3, activation='relu', **kw)(h)
    h = L.Add()([h, L.Conv2D(width, 3, **kw)(r)])
  h = L.Add()([head, L.Conv2D(width, 3, **kw)(h)])
  h = L.Lambda(lambda z: tf.nn.depth_to_space(z, 2))(L.Conv2D(4 * width, 3, **kw)(h))
  return keras.Model(inputs, L.Conv2D(1, 3, padding='same')(h), name='edsr_lite')


class CrossLayer(L.Layer):
  """A DCN-v2 cross layer (Wang et al., 2021): x_{l+1} = x0 * (x_l W + b) + x_l."""

  def build(self, shape):
    d = shape[-1]
    self.dense = L.Dense(d)
    self.dense.build((None, d))

  def call(self, x0, x):
    return x0 * self.dense(x) + x


def ad_clicks(seed, *, rows=4096, features=16):
  """Ad impressions as dense standardised features (user, ad and context statistics) and
  whether the ad was clicked: the click logit is a sum of a few pairwise feature crosses (user
  x ad, ad x context, the interactions DCN is built for) and two linear terms, plus noise.
  (x (rows, features), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  logit = (1.2 * x[:, 0] * x[:, 5] - 1.0 * x[:, 1] * x[:, 9] + 0.8 * x[:, 2] * x[:, 12]
           + 0.6 * x[:, 3] - 0.5 * x[:, 7])
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
  return x.astype(np.float32), y[:, None]


def dcn_v2(seed, *, features=16, cross=3, deep=(64, 64)):
  """A DCN-v2 click model: `cross` stacked `CrossLayer`s next to a ReLU MLP (`deep`),
  concatenated, Dense(1): the click logit."""
  _seed(seed)
  inputs = keras.Input((features,))
  c = inputs
  for _ in range(cross):
    c = CrossLayer()(inputs, c)
  d = inputs
  for units in deep:
    d = L.Dense(units, activation='relu')(d)
  return keras.Model(inputs, L.Dense(1)(L.Concatenate()([c, d])), name='dcn_v2')


def skipgram_pairs(seed, *, rows=8192, vocab=256, topics=8, negatives=1):
  """Skip-gram training pairs with negative sampling from a synthetic corpus: each word belongs
  to one of `topics` topics; a positive pair is a word and a context word of the same topic (a
  neighbour in a text on that topic), a negative pair a word and a word drawn at random from the
  vocabulary (`negatives` per positive). ((word ids, context ids) (rows, 2) int32, labels
  (rows, 1) 1 = a true context)."""
  rng = np.random.RandomState(seed)
  topic = rng.randint(0, topics, size=vocab)
  by_topic = [np.flatnonzero(topic == t) for t in range(topics)]
  pos = rows // (1 + negatives)
  words = rng.randint(0, vocab, size=rows)
  context = rng.randint(0, vocab, size=rows)
  for r in range(pos):
    context[r] = rng.choice(by_topic[topic[words[r]]])
  y = (np.arange(rows) < pos).astype(np.float32)
  y[pos:] = (topic[words[pos:]] == topic[context[pos:]]).astype(np.float32)
  order = rng.permutation(rows)
  return np.stack([words, context], axis=1)[order].astype(np.int32), y[order, None]


def word2vec_sgns(seed, *, vocab=256, dim=32, word_init='zeros'):
  """A word2vec skip-gram with negative sampling (Mikolov et al., 2013): a word embedding
  (initialiser `word_init`; word2vec's own: uniform +-0.5 / dim) and a context embedding
  (zeros, as word2vec starts it), their dot product: the logit that the pair is a true
  context."""
  _seed(seed)
  pairs = keras.Input((2,), dtype='int32')
  if word_init == 'word2vec':
    word_init = keras.initializers.RandomUniform(-0.5 / dim, 0.5 / dim)
  w = L.Embedding(vocab, dim, embeddings_initializer=word_init)(pairs[:, 0])
  c = L.Embedding(vocab, dim, embeddings_initializer='zeros')(pairs[:, 1])
  logit = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], axis=-1, keepdims=True))([w, c])
  return keras.Model(pairs, logit, name='word2vec_sgns')


class NTMCell(L.Layer):
  """A Neural Turing Machine-lite cell (Graves et al., 2014): a feed-forward controller
  (Dense(units, tanh) of the input and the last read), one head addressing `slots` x `width`
  memory by content only (the cosine similarity of a key to each slot, sharpened by a softplus
  strength, tf.nn.softmax), an erase and an add vector written to the addressed slots, the read
  vector; the memory starts at zeros (the RNN's initial state). `safe`: the cosine's norms
  taken as sqrt(|.|^2 + 1e-8) instead of sqrt(|.|^2) (0 / 0 on an empty memory)."""

  def __init__(self, units=64, slots=16, width=8, outputs=1, safe=False, **kwargs):
    super().__init__(**kwargs)
    self.units, self.slots, self.width, self.safe = units, slots, width, safe
    self.state_size = [slots * width, width]
    self.output_size = outputs
    self.controller = L.Dense(units, activation='tanh')
    self.head = L.Dense(3 * width + 1)
    self.out = L.Dense(outputs)

  def build(self, shape):
    self.controller.build((None, shape[-1] + self.width))
    self.head.build((None, self.units))
    self.out.build((None, self.units + self.width))

  def norm(self, z):
    return tf.sqrt(tf.reduce_sum(tf.square(z), axis=-1) + (1e-8 if self.safe else 0.0))

  def call(self, x, states):
    memory = tf.reshape(states[0], [-1, self.slots, self.width])
    h = self.controller(tf.concat([x, states[1]], axis=-1))
    key, erase, add, strength = tf.split(self.head(h), [self.width] * 3 + [1], axis=-1)
    cosine = tf.einsum('bw,bsw->bs', key, memory) / (self.norm(key)[:, None] * self.norm(memory))
    w = tf.nn.softmax(tf.nn.softplus(strength) * cosine, axis=-1)
    memory = (memory * (1.0 - w[:, :, None] * tf.sigmoid(erase)[:, None, :])
              + w[:, :, None] * tf.tanh(add)[:, None, :])
    read = tf.einsum('bs,bsw->bw', w, memory)
    memory = tf.reshape(memory, [-1, self.slots * self.width])
    return self.out(tf.concat([h, read], axis=-1)), [memory, read]


def ntm_lite(seed, *, steps=20, safe=False):
  """An NTM-lite sequence regressor: `NTMCell` over the sequence, its last output."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  return keras.Model(inputs, L.RNN(NTMCell(safe=safe))(inputs), name='ntm_lite')


class NonLocalBlock(L.Layer):
  """A non-local block (Wang et al., 2018), the embedded-Gaussian version: theta, phi and g
  1x1 convolutions, the pairwise affinities theta_i . phi_j over all positions, normalised into
  attention weights by a softmax written out by hand as exp(f) / sum exp(f) (`stable`:
  tf.nn.softmax), the attended g, a 1x1 convolution added back to the input."""

  def __init__(self, inner, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.inner, self.stable = inner, stable

  def build(self, shape):
    self.theta, self.phi, self.g = (L.Conv2D(self.inner, 1) for _ in range(3))
    self.z = L.Conv2D(shape[-1], 1)
    for conv in (self.theta, self.phi, self.g):
      conv.build(shape)
    self.z.build(shape[:-1] + (self.inner,))

  def call(self, x):
    b, hgt, wid = tf.shape(x)[0], x.shape[1], x.shape[2]
    flat = lambda t: tf.reshape(t, [b, hgt * wid, self.inner])
    f = tf.matmul(flat(self.theta(x)), flat(self.phi(x)), transpose_b=True)
    if self.stable:
      attn = tf.nn.softmax(f, axis=-1)
    else:
      e = tf.exp(f)
      attn = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    y = tf.reshape(tf.matmul(attn, flat(self.g(x))), [b, hgt, wid, self.inner])
    return x + self.z(y)


def nonlocal_convnet(seed, *, size=16, width=32, classes=10, stable=False):
  """A non-local convnet: two Conv2D(width, 3x3) + BatchNorm + ReLU, a 2x2 max-pool (8x8
  left), a `NonLocalBlock` (inner width `width`) over the 64 positions at the top of the
  network, global average, Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for _ in range(2):
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(width, 3, padding='same')(h)))
  h = NonLocalBlock(width, stable)(L.MaxPooling2D()(h))
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='nonlocal_convnet')


def feeder_load(seed, *, rows=2048, window=24):
  """Hourly load of distribution feeders in kW: a per-feeder level U(150, 1400), a daily cycle
  of 40 % of it, a slow drift and noise; windows of `window` hours and the next hour. (x (rows,
  window, 1), y (rows, 1)). Every reading and every window's sum fit float16 (below 65504);
  the squared deviations from a window's mean do not (|x - mean| > 256) for most feeders."""
  rng = np.random.RandomState(seed)
  t = np.arange(window + 1)[None, :] + rng.randint(0, 24, size=(rows, 1))
  level = rng.uniform(150, 1400, size=(rows, 1))
  daily = 1 + 0.4 * np.sin(2 * np.pi * (t - 7) / 24)
  drift = 1 + rng.uniform(-0.003, 0.003, size=(rows, 1)) * t
  series = level * daily * drift * (1 + 0.02 * rng.randn(rows, window + 1))
  return series[:, :window, None].astype(np.float32), series[:, window:].astype(np.float32)


class RevIN(L.Layer):
  """Reversible instance normalisation (Kim et al., 2022), written out: each window's mean and
  standard deviation, sqrt(mean((x - mean)^2) + 1e-5), in the layer's compute dtype; returns
  the normalised window, the mean and the standard deviation."""

  def call(self, x):
    mean = tf.reduce_mean(x, axis=1, keepdims=True)
    std = tf.sqrt(tf.reduce_mean(tf.square(x - mean), axis=1, keepdims=True) + 1e-5)
    return (x - mean) / std, mean[:, 0], std[:, 0]


class Denormalise(L.Layer):
  """RevIN's way back: the forecast x std + mean."""

  def call(self, y, mean, std):
    c = lambda t: tf.cast(t, self.compute_dtype)
    return c(y) * c(std) + c(mean)


def dlinear_revin(seed, *, window=24, kernel=5, revin_dtype=None):
  """A DLinear forecaster (Zeng et al., 2023) with RevIN: the window normalised by `RevIN`
  (dtype `revin_dtype`; None: the global policy), split into a trend (a moving average,
  AveragePooling1D(kernel, same)) and the remainder, one Dense(1) on each (flattened),
  summed, `Denormalise`d in float32: the next hour's load."""
  _seed(seed)
  inputs = keras.Input((window, 1))
  z, mean, std = RevIN(dtype=revin_dtype)(inputs)
  trend = L.AveragePooling1D(kernel, strides=1, padding='same')(z)
  seasonal = L.Subtract()([z, trend])
  y = L.Add()([L.Dense(1)(L.Flatten()(trend)), L.Dense(1)(L.Flatten()(seasonal))])
  return keras.Model(inputs, Denormalise(dtype='float32')(y, mean, std), name='dlinear_revin')


def icu_vitals(seed, *, rows=2048, steps=24, features=4, missing=0.3, nan_missing=True):
  """ICU stays in miniature: 24 hourly readings of four standardised vitals, each missing with
  probability `missing`; patients who deteriorate (label 1, 30 %) drift upward in two vitals.
  Per vital: the reading (NaN where missing, as a pandas export leaves it, or 0 without
  `nan_missing`), the mask (1 = measured), the hours since the last measurement and the last
  measured value (0 before the first). (x (rows, steps, 4 features), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  y = (rng.rand(rows) < 0.3).astype(np.float32)
  t = np.linspace(0, 1, steps)[None, :, None]
  drift = np.zeros((rows, 1, features))
  drift[:, :, :2] = 1.5 * y[:, None, None]
  vals = drift * t + 0.6 * rng.randn(rows, steps, features)
  mask = (rng.rand(rows, steps, features) > missing).astype(np.float64)
  delta = np.zeros_like(vals)
  last = np.zeros_like(vals)
  for s in range(1, steps):
    delta[:, s] = np.where(mask[:, s - 1] > 0, 1.0, delta[:, s - 1] + 1.0)
    last[:, s] = np.where(mask[:, s - 1] > 0, vals[:, s - 1], last[:, s - 1])
  reading = np.where(mask > 0, vals, np.nan if nan_missing else 0.0)
  x = np.concatenate([reading, mask, delta, last], axis=-1)
  return x.astype(np.float32), y[:, None]


class InputDecay(L.Layer):
  """GRU-D's input decay (Che et al., 2018): gamma = exp(-relu(delta w + b)) per vital and
  the input m x + (1 - m) (gamma x_last + (1 - gamma) x_mean), with x_mean learned (the
  vitals are standardised: it starts at 0); returns it next to the mask."""

  def __init__(self, features, **kwargs):
    super().__init__(**kwargs)
    self.features = features

  def build(self, shape):
    f = self.features
    self.w = self.add_weight(shape=(f,), initializer='zeros', name='w')
    self.b = self.add_weight(shape=(f,), initializer='zeros', name='b')
    self.mean = self.add_weight(shape=(f,), initializer='zeros', name='mean')

  def call(self, z):
    x, m, delta, last = tf.split(z, 4, axis=-1)
    gamma = tf.exp(-tf.nn.relu(delta * self.w + self.b))
    x_hat = m * x + (1.0 - m) * (gamma * last + (1.0 - gamma) * self.mean)
    return tf.concat([x_hat, m], axis=-1)


def gru_d_lite(seed, *, steps=24, features=4, units=32):
  """A GRU-D-lite: `InputDecay`, a GRU(units) over the decayed inputs and masks, Dense(1):
  the logit of deterioration."""
  _seed(seed)
  inputs = keras.Input((steps, 4 * features))
  h = L.GRU(units)(InputDecay(features)(inputs))
  return keras.Model(inputs, L.Dense(1)(h), name='gru_d_lite')



class GradientGlitch(field.OneOffFault):
  """A one-off fault in the backward pass: identity forward; at its `at`-th training call only
  (None: never), one value of the gradient flowing back through it reads NaN (a flipped bit in
  a gradient buffer). The count lives outside the model's variables (`field.OneOffFault`, made
  under tf.init_scope): a guard that restores the model after a skipped step cannot replay
  it."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.nan, backward=True, **kwargs)


def densenet_bc_lite(seed, *, size=16, growth=8, layers=(3, 3), classes=10, glitch=None):
  """A DenseNet-BC-lite (Huang et al., 2017): a stem Conv2D(2 growth, 3x3), dense blocks of
  bottleneck layers (BN, ReLU, Conv2D(4 growth, 1x1), BN, ReLU, Conv2D(growth, 3x3), each
  concatenated to its input), a compressing transition (BN, ReLU, Conv2D(half, 1x1), 2x2
  average pool) between the blocks, a `GradientGlitch(glitch)` after the first block, BN, ReLU,
  global average, Dense(classes): the logits."""
  _seed(seed)

  def bn_relu_conv(h, f, k):
    return L.Conv2D(f, k, padding='same', use_bias=False)(L.ReLU()(L.BatchNormalization()(h)))

  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(2 * growth, 3, padding='same', use_bias=False)(inputs)
  for i, n in enumerate(layers):
    for _ in range(n):
      h = L.Concatenate()([h, bn_relu_conv(bn_relu_conv(h, 4 * growth, 1), growth, 3)])
    if i == 0:
      h = GradientGlitch(glitch)(h)
    if i < len(layers) - 1:
      h = L.AveragePooling2D(2)(bn_relu_conv(h, h.shape[-1] // 2, 1))
  h = L.GlobalAveragePooling2D()(L.ReLU()(L.BatchNormalization()(h)))
  return keras.Model(inputs, L.Dense(classes)(h), name='densenet_bc_lite')


def nuclei(seed, *, rows=1024, size=16):
  """Microscopy-style binary segmentation: a noisy dim background with 1 to 3 bright
  elliptical nuclei of random size and place; the mask their pixels (about 13 % of the image).
  (x (rows, size, size, 1), masks (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  x = 0.15 * rng.rand(rows, size, size)
  y = np.zeros((rows, size, size))
  for r in range(rows):
    for _ in range(rng.randint(1, 4)):
      cy, cx = rng.uniform(2, size - 2, size=2)
      ry, rx = rng.uniform(1.5, 3.5, size=2)
      blob = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
      y[r][blob] = 1
      x[r][blob] += rng.uniform(0.4, 0.8)
  x += 0.05 * rng.randn(rows, size, size)
  return x[..., None].astype(np.float32), y[..., None].astype(np.float32)


def unetpp_lite(seed, *, size=16, base=8, head='sigmoid'):
  """A U-Net++-lite (Zhou et al., 2018), depth 2: encoder nodes X00, X10, X20 (two Conv2D 3x3
  + ReLU each, 2x2 max-pool between), the nested dense skip nodes X01 (X00 + up X10), X11 (X10
  + up X20) and X02 (X00 + X01 + up X11), a Conv2D(1, 1x1, activation=`head`) on X02: the
  foreground probability per pixel."""
  _seed(seed)

  def node(h, f):
    h = L.Conv2D(f, 3, padding='same', activation='relu')(h)
    return L.Conv2D(f, 3, padding='same', activation='relu')(h)

  up = lambda h: L.UpSampling2D()(h)
  inputs = keras.Input((size, size, 1))
  x00 = node(inputs, base)
  x10 = node(L.MaxPooling2D()(x00), 2 * base)
  x20 = node(L.MaxPooling2D()(x10), 4 * base)
  x01 = node(L.Concatenate()([x00, up(x10)]), base)
  x11 = node(L.Concatenate()([x10, up(x20)]), 2 * base)
  x02 = node(L.Concatenate()([x00, x01, up(x11)]), base)
  return keras.Model(inputs, L.Conv2D(1, 1, activation=head)(x02), name='unetpp_lite')


def loan_table(seed, *, rows=2048, features=8, broken=True):
  """Loan applications (a credit-default table): eight standardised numeric fields and the
  default label (a logistic function of three of them). Field 7 is a debt-to-income ratio
  computed upstream as debt / income: with `broken`, the 1.5 % of applicants who report no
  income carry +inf there (the division by zero of the export), about one batch in three has
  one; otherwise their ratio is capped at the field's 99th percentile. (x (rows, features), labels
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  logit = 1.2 * x[:, 0] - 0.9 * x[:, 1] + 0.8 * x[:, 7]
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
  no_income = rng.rand(rows) < 0.015
  x[no_income, 7] = np.inf if broken else np.percentile(x[:, 7], 99)
  return x.astype(np.float32), y[:, None]


class FeatureTokenizer(L.Layer):
  """FT-Transformer's feature tokenizer (Gorishniy et al., 2021): each numeric feature x_j as
  the token x_j W_j + b_j, and a learned [CLS] token in front."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.dim = dim

  def build(self, shape):
    n = shape[-1]
    self.w = self.add_weight(shape=(n, self.dim), initializer='glorot_uniform', name='w')
    self.b = self.add_weight(shape=(n, self.dim), initializer='zeros', name='b')
    self.cls = self.add_weight(shape=(1, 1, self.dim), initializer='glorot_uniform', name='cls')

  def call(self, x):
    tokens = x[:, :, None] * self.w + self.b
    return tf.concat([tf.tile(self.cls, [tf.shape(x)[0], 1, 1]), tokens], axis=1)


def dice_loss(masks, probs):
  """The soft Dice loss of segmentation, per image: 1 - (2 sum(y p) + 1) / (sum(y) + sum(p) +
  1), averaged over the batch."""
  axes = list(range(1, len(probs.shape)))
  masks = tf.cast(masks, probs.dtype)
  inter = tf.reduce_sum(masks * probs, axis=axes)
  total = tf.reduce_sum(masks, axis=axes) + tf.reduce_sum(probs, axis=axes)
  return tf.reduce_mean(1.0 - (2.0 * inter + 1.0) / (total + 1.0))


def ft_transformer_lite(seed, *, features=8, dim=32, heads=4):
  """An FT-Transformer-lite: `FeatureTokenizer`, one pre-norm transformer block (multi-head
  self-attention and a ReLU feed-forward, both residual), the [CLS] token's LayerNorm-ed
  state, Dense(1): the default logit."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = FeatureTokenizer(dim)(inputs)
  n = L.LayerNormalization()(h)
  h = h + L.MultiHeadAttention(heads, dim // heads)(n, n)
  h = h + L.Dense(dim)(L.Dense(2 * dim, activation='relu')(L.LayerNormalization()(h)))
  return keras.Model(inputs, L.Dense(1)(L.LayerNormalization()(h[:, 0])),
                     name='ft_transformer_lite')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind10_grad_edsr_residual_stack_unclipped', 'exploding_gradients', 'edsr_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='sanghyun-son/EDSR-PyTorch#198; sanghyun-son/EDSR-PyTorch#312; '
              'twtygqyy/pytorch-vdsr#2; Jongchan/tensorflow-vdsr#28')
def _(seed, cured=False):
  """An EDSR-lite (sixteen unnormalised residual blocks, no residual scaling, a global skip and
  a sub-pixel x2 upsampler; Keras's default initialisers) learning 8x8 -> 16x16 digit super-
  resolution, MSE, SGD + momentum 0.9 at 0.03 (VDSR's recipe trains at 0.1 with clipping) and
  no clipping: the sixteen residual sums amplify the back-propagated gradient, the first
  update overshoots and the loss goes 1.14 (step 0), 10.5 (step 1), 1.5e12 (step 2) and NaN
  from step 3; the model never trains (its output inf). sanghyun-son/EDSR-PyTorch#198 (EDSR
  training: "[L1: inf]" at every report of the epoch); sanghyun-son/EDSR-PyTorch#312 (its
  trainer's gradient clipping, "What value did you use for gradient clipping"); twtygqyy/
  pytorch-vdsr#2 ("gradient clip avoid the gradient explode"; with too large a threshold "the
  gradients will explode in a very early stage during the training and nothing can be learnt
  after that"); Jongchan/tensorflow-vdsr#28 (clipping removed only when switching to Adam,
  which "can handle the gradient scale by itself"). Cured: clipnorm=0.5 (same rate, same
  architecture): the loss falls to 0.0022, the error 1.12 to 0.0023 (the constant answer's
  0.072)."""
  (x, _), (y, _) = data.digits(size=8, rgb=False), data.digits(size=16, rgb=False)
  return cases.Setup(edsr_lite(seed),
                     keras.optimizers.SGD(0.03, momentum=0.9, clipnorm=0.5 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind10_lr_dcn_v2_sgd_too_high', 'learning_rate', 'dcn_v2',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#38796; PENGLU-WashU/IMC_Denoise#11; '
              'fferroni/DEC-Keras#9')
def _(seed, cured=False):
  """A DCN-v2 click model (three cross layers next to a ReLU MLP) on ad impressions whose
  clicks depend on feature crosses, SGD + momentum 0.9 at 1.0: every step overshoots, the
  multiplicative cross layers compound it, the loss climbs 0.99, 1.41, 1.62, ... 68 at step 5
  and is NaN from step 8 (the weights NaN); the model never trains. tensorflow/tensorflow#38796
  ("A high learning rate may cause a nan or an inf loss with tf.keras.optimizers.SGD"; "When I
  decrease the learning rate, it is of less probability to happen"); PENGLU-WashU/IMC_Denoise#11
  (NaN loss: "the current initial learning rate is 1, which is too big. Please set
  train_initial_lr as 1e-3"); fferroni/DEC-Keras#9 ("the loss is quickly reaching nan"; "by
  reducing learning rate may fix this issue"). Cured: SGD + momentum at 0.05:
  the error 0.48 to 0.16 (the constant answer's 0.49)."""
  x, y = ad_clicks(seed)
  return cases.Setup(dcn_v2(seed), keras.optimizers.SGD(0.05 if cured else 1.0, momentum=0.9),
                     BCE(from_logits=True), data.stream(x, y, batch=32, seed=seed),
                     'binary_logit')


# --- initialisation --------------------------------------------------------------------------


@add('blind10_init_word2vec_both_embeddings_zero', 'initialisation', 'word2vec_sgns',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#28487; smallflyingpig/universal_adversarial_perturbation_'
              'generative_network_for_speaker_recognition#4; NVlabs/FastGen#42')
def _(seed, cured=False):
  """A word2vec skip-gram with negative sampling (a word and a context embedding, their dot
  product the logit) on topic-structured word pairs, Adam at 3e-3, both embedding tables
  initialised to zeros (word2vec zeroes only the context table): the gradient of each table is
  the other table, zero, so nothing ever moves; the loss is ln 2 = 0.6931 at every one of the
  150 steps and the logits stay 0 (error 0.58, the constant answer's 0.42; no NaN).
  tensorflow/tensorflow#28487 ("Adam optimizer does not update embeddings when they are
  initialized to zero"); smallflyingpig/...#4 ("If you initialize the last layer as zeros, the
  gradients will also be zeros for all layers. Then the model cannot be trained");
  NVlabs/FastGen#42 (every parameter of an embedder set to zero: "several weight tensors
  receive zero gradients because of the zero symmetry"). Cured: the word table drawn from
  word2vec's uniform +-0.5 / dim (the context table still zeros): the error 0.58 to 0.03."""
  x, y = skipgram_pairs(seed)
  return cases.Setup(word2vec_sgns(seed, word_init='word2vec' if cured else 'zeros'),
                     keras.optimizers.Adam(3e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=64, seed=seed), 'binary_logit')


# --- division_or_log -------------------------------------------------------------------------


@add('blind10_div_ntm_cosine_on_zero_memory', 'division_or_log', 'ntm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='carpedm20/NTM-tensorflow#2; EderSantana/seya#50; snipsco/ntm-lasagne#34')
def _(seed, cured=False):
  """An NTM-lite (a feed-forward controller, one content-addressed read/write head on a 16 x 8
  memory) regressing the mean of 20-step random walks, MSE, Adam at 3e-3, its content
  addressing the cosine similarity key . M_i / (|key| |M_i|) written out by hand with the
  memory starting at zeros: at the first time step every |M_i| is 0, the cosine 0 / 0 = NaN,
  the addressing weights, the memory and the output are NaN, and the loss is NaN at every step
  from step 0 (the model never trains). carpedm20/NTM-tensorflow#2 ("Loss sometimes goes to
  nan even with the gradient clipping"; NaNs "caused by ... Initializing the memory to zero.
  The memory appears in the denominator of the cosine distance ... add a small constant in the
  denominator"); EderSantana/seya#50 ("we can't initialize the memory with zeros otherwise we
  will get some divisions by zero"); snipsco/ntm-lasagne#34 (the NTM copy task: "Training
  always results in NaN"). Cured: the norms taken as sqrt(|.|^2 + 1e-8): the error 0.55 to
  0.006 (the constant answer's 0.59)."""
  x, y = data.series(seed, steps=20)
  return cases.Setup(ntm_lite(seed, safe=cured), keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind10_exp_nonlocal_handwritten_softmax', 'softmax_overflow', 'nonlocal_convnet',
     doors=('trainer', 'fit'), steps=150,
     citation='psychopa4/PFNL#9; uTensor/uTensor#175; deeplearning4j/deeplearning4j#6039')
def _(seed, cured=False):
  """A non-local convnet (two Conv-BN-ReLU layers, an embedded-Gaussian non-local block at the
  top, global average) on standardised 16x16 digits, Adam at 3e-3, whose non-local attention
  normalises the pairwise affinities with a softmax written out as exp(f) / sum exp(f): the
  affinities are unscaled dot products over 32 channels (up to about 25 at the start) and grow
  as the features sharpen; the run trains (the loss 2.76 to 1.73 by step 25) until an affinity
  passes 88.7, exp overflows to inf, inf / inf = NaN, and the loss is NaN from step 41 on (the
  weights NaN). psychopa4/PFNL#9 (a non-local block with `f = tf.exp(f)` then `f /
  tf.reduce_sum(f)`: "f going to inf due to exponent of a pretty large number (something around
  exp(300+) ...), while tf.nn.softmax will handle this properly"); uTensor/uTensor#175 ("calling
  exp() on the logits ... this leads to overflows ... this infinity value bubbles through to my
  results which yields a nan value"); deeplearning4j/deeplearning4j#6039 (a softmax "taking exp
  of the raw input which is likely to cause NaN values"). Cured: tf.nn.softmax (the maximum
  subtracted): the error 0.87 to 0.47-0.57 in inference mode (over runs), 0.95 to 0.13-0.22
  in training mode."""
  x, y = data.digits(size=16, rgb=False)
  x = (x - x.mean()) / x.std()  # Standardised, the usual image preprocessing.
  return cases.Setup(nonlocal_convnet(seed, stable=cured), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- precision -------------------------------------------------------------------------------


@add('blind10_fp16_dlinear_revin_variance_overflow', 'precision', 'dlinear_revin',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='ml-explore/mlx#4228; facebookresearch/ConvNeXt#80; tensorflow/tensorflow#47156')
def _(seed, cured=False):
  """A DLinear forecaster with RevIN (each window normalised by its own mean and standard
  deviation, a linear trend and remainder head, the forecast denormalised) predicting the next
  hour of feeder load (about 100 to 2,000 kW) under mixed_float16, MSE, Adam at 3e-3: every
  reading and every window's sum fit float16, but RevIN squares the deviations from the mean
  in float16, a deviation above 256 kW squares past 65504, the variance is inf, the standard
  deviation inf, the denormalised forecast inf or NaN and the loss NaN at every step from step
  0 (the loss-scale optimizer skips every update; the model never moves). ml-explore/mlx#4228
  ("InstanceNorm FP16 variance overflow collapses finite feature maps": "the variance can
  overflow even when every input value is finite"); facebookresearch/ConvNeXt#80 (a hand-written
  LayerNorm's "(x - u).pow(2)" overflows the FP16 range); tensorflow/tensorflow#47156 (mixed
  precision: "Numerical instability with instance normalization layer", the statistics best in
  float32). Cured: RevIN computed in float32 (dtype='float32' on that layer, the rest still
  mixed): the error 6.1e4 to 845 (the constant answer's 1.9e5)."""
  x, y = feeder_load(seed)
  return cases.Setup(dlinear_revin(seed, revin_dtype='float32' if cured else None),
                     keras.optimizers.Adam(3e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


# --- bad_input -------------------------------------------------------------------------------


@add('blind10_input_gru_d_nan_missing_readings', 'bad_input', 'gru_d_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='danielegrattarola/keras-gat#14; MLforHealth/MIMIC_Extract#56; '
              'WenjieDu/PyPOTS#232')
def _(seed, cured=False):
  """A GRU-D-lite (GRU-D's learned input decay towards the last measured value, a GRU over the
  decayed vitals and their masks) predicting deterioration from 24 hours of ICU vitals, Adam at
  3e-3, fed the readings with the missing ones (30 %) left as NaN, as the table export gives
  them: the mask is right, but GRU-D's m x + (1 - m) x_decayed multiplies each NaN by 0, and
  NaN x 0 = NaN, so every batch's forward pass and loss are NaN from step 0 and the weights NaN
  after the first update (the model never trains; the error on clean batches inf after,
  0.30 before). danielegrattarola/keras-gat#14 ("the training loss is nan"; "after function
  load_data(), maybe should add: X[np.isnan(X)] = 0. then it works!"); MLforHealth/
  MIMIC_Extract#56 (its GRU-D notebook: "the training loss is NaN for the whole time");
  WenjieDu/PyPOTS#232 (missing data left in an input tensor "will cause NaN loss"). Cured: the
  missing readings written as 0 (the mask still marks them): the error 0.30 to 0.00. The
  measure reads clean batches (eval_data) for both runs."""
  x, y = icu_vitals(seed, nan_missing=not cured)
  clean, _ = icu_vitals(seed, nan_missing=False)
  return cases.Setup(gru_d_lite(seed), keras.optimizers.Adam(3e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit',
                     eval_data=data.stream(clean, y, batch=32, seed=seed))


@add('blind10_input_ft_transformer_inf_ratio_field', 'bad_input', 'ft_transformer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='NRCan/geo-deep-learning#68; alteryx/featuretools#1496; microsoft/qlib#666')
def _(seed, cured=False):
  """An FT-Transformer-lite (a feature tokenizer, one pre-norm transformer block, the [CLS]
  token classed) predicting loan default, Adam at 1e-3, from a table whose debt-to-income field
  was computed upstream as debt / income: the 1.5 % of applicants with no income carry +inf
  there (about one batch in three holds one), the token inf x W_j + b_j is inf, LayerNorm makes
  it NaN, and the first such batch (step 0 or 1 by the order) has a NaN loss and NaN
  gradients, the weights go NaN and the loss stays NaN (no training). NRCan/geo-deep-learning#68
  ("Not a number (NaN) and infinite (inf) values in images ... will affect the loss
  calculation, resulting in a NaN loss, therefore not learning anything"); alteryx/
  featuretools#1496 (a ratio feature: "does not currently handle divide by 0 (it outputs
  inf)"; a function "to replace inf values in a feature matrix" before ML); microsoft/qlib#666
  ("some features calculated as -inf on my data ... Maybe it is caused by dividing zeros").
  Cured: the broken ratios capped at the field's 99th percentile: the error 0.53 to 0.20 (the
  constant answer's 0.45). The measure reads clean batches (eval_data) for both runs."""
  x, y = loan_table(seed, broken=not cured)
  clean, _ = loan_table(seed, broken=False)
  return cases.Setup(ft_transformer_lite(seed), keras.optimizers.Adam(1e-3),
                     BCE(from_logits=True), data.stream(x, y, batch=32, seed=seed),
                     'binary_logit', eval_data=data.stream(clean, y, batch=32, seed=seed))


# --- transient -------------------------------------------------------------------------------


@add('blind10_transient_densenet_one_nan_gradient', 'transient', 'densenet_bc_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tanmoyio/sahajBERT#1; kyutai-labs/pocket-tts#262; huggingface/diffusers#10075')
def _(seed, cured=False):
  """A DenseNet-BC-lite (two dense blocks of bottleneck layers, BatchNorm, a compressing
  transition) on 16x16 digits, Adam at 2e-3, training normally (the loss 2.35 to 1.06 by step
  75), where one value of the gradient flowing back through the first dense block's output
  reads NaN at one training call (`GradientGlitch`: the 80th training-mode call; step 76 in a
  plain `fit` after the measure's four training-mode passes; a one-off fault in a gradient
  buffer, not in the data, the model or the settings): that step's loss is finite but its
  gradients NaN, the update writes NaN into the weights and, in plain `fit`, the loss is NaN
  for the rest of the run; skipped, the run goes on training. tanmoyio/sahajBERT#1 (a trainer
  hung "because it encountered NaN in the fp16 gradients" once in six hours; the fix lets it
  "ignore NaN gradients and continue training"); kyutai-labs/pocket-tts#262 ("one bad step
  writes NaN into every weight and the run keeps going"); huggingface/diffusers#10075 (the same
  code trains on one machine while another reports "Gradient for module.xxx contains NaN!").
  Cured: the same run without the fault: the error 0.92 to 0.05 in training mode (0.93 in
  inference mode: BatchNorm's moving statistics still lag at 150 steps)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(densenet_bc_lite(seed, glitch=None if cured else 80),
                     keras.optimizers.Adam(2e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind10_mismatch_unetpp_softmax_one_channel', 'loss_output_mismatch', 'unetpp_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='BVLC/caffe#5240; open-mmlab/mmsegmentation#2201; '
              'tkuanlun350/Tensorflow-SegNet#20')
def _(seed, cured=False):
  """A U-Net++-lite (nested dense skip pathways, depth 2) segmenting bright nuclei in 16x16
  microscopy-style images (about 13 % foreground), soft Dice loss, Adam at 2e-3, its one-channel
  output head given a softmax (the multi-class recipe) instead of a sigmoid: a softmax over a
  single channel is 1 at every pixel whatever the logits, its gradient is zero, so nothing
  trains; the Dice loss only wanders with the batch (0.75 to 0.78 over the 150 steps) and every
  pixel is called foreground (error 0.87, the constant answer's 0.13; no NaN). BVLC/caffe#5240
  (a segmentation net whose output "only has one channel" under softmax: "Softmax function
  normalizes responses between channels and thus requires at least two channels. You should
  use sigmoid"); open-mmlab/mmsegmentation#2201 (binary segmentation with out_channels=1 "does
  not work well because the loss is always zero"; fixed with use_sigmoid=True);
  tkuanlun350/Tensorflow-SegNet#20 (binary masks: "it always turns to 100% accuracy for class 0
  and 0% percent for class 1 ... I think there is an issue with the softmax output"). Cured: a
  sigmoid head: the error 0.50 to 0.013."""
  x, y = nuclei(seed)
  return cases.Setup(unetpp_lite(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(2e-3), dice_loss,
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
