"""A twenty-ninth blind set of sick scenarios (the 'blind29' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind25.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a GRU word language model, an SPP-net-lite, a
Fixup-ResNet-lite, a SoundNet-lite, an LFADS-lite, a CPC-lite, a Speech-Transformer-lite, a
DeepFill-lite, a VoVNet-lite and a DeepCoNN-lite). Each builder takes `cured`: the same run
with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with
plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the
cured twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND29 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND29.add` with split='blind29'."""
  return BLIND29.add(name, expected, arch, split='blind29', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def word_stream(seed, *, rows=4096, context=20, vocab=48):
  """A word-level corpus in miniature (Penn-Treebank-like, as the word language model example
  reads it): a text drawn from a bigram grammar (each word followed by its usual successor 70%
  of the time, by a second one 20%, by any word 10%); each row `context` words (the input)
  and the next word (the label). (ids (rows, context), next id)."""
  rng = np.random.RandomState(seed)
  succ = rng.randint(0, vocab, (vocab, 2))
  text = [rng.randint(vocab)]
  for _ in range(rows + context):
    u = rng.rand()
    text.append(succ[text[-1], 0] if u < 0.7 else succ[text[-1], 1] if u < 0.9 else
                rng.randint(vocab))
  text = np.asarray(text)
  starts = rng.randint(0, len(text) - context - 1, rows)
  x = np.stack([text[s:s + context] for s in starts])
  return x.astype(np.int32), text[starts + context].astype(np.int32)


def gru_word_lm_lite(seed, *, context=20, vocab=48, units=128):
  """A GRU word language model (PyTorch's word_language_model example with --model GRU, in
  miniature): an embedding of 64, two GRU layers of `units`, Dense(`vocab`) on the last step:
  the next word's logits."""
  _seed(seed)
  x = keras.Input((context,), dtype='int32')
  h = L.Embedding(vocab, 64)(x)
  h = L.GRU(units, return_sequences=True)(h)
  h = L.GRU(units)(h)
  return keras.Model(x, L.Dense(vocab)(h), name='gru_word_lm_lite')


class SpatialPyramidPool(L.Layer):
  """Spatial pyramid pooling (He et al., 2014): max pooling of the feature map into 1x1, 2x2
  and 4x4 bins, flattened and concatenated (a fixed length for any input size)."""

  def __init__(self, levels=(1, 2, 4), **kwargs):
    super().__init__(**kwargs)
    self.levels = levels

  def call(self, x):
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    out = []
    for n in self.levels:
      t = tf.reshape(x, [-1, n, h // n, n, w // n, c])
      out.append(tf.reshape(tf.reduce_max(t, [2, 4]), [-1, n * n * c]))
    return tf.concat(out, -1)


def sppnet_lite(seed, *, size=16, classes=10):
  """An SPP-net-lite (He et al., 2014, ZF-5 style without normalisation): 3x3 convolutions of
  32, 64 (2x2 max pooling between), 128 (ReLU), spatial pyramid pooling (1, 2, 4), Dense(256,
  ReLU), Dense(256, ReLU), Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(x)
  h = L.MaxPooling2D()(h)
  h = L.Conv2D(64, 3, padding='same', activation='relu')(h)
  h = L.Conv2D(128, 3, padding='same', activation='relu')(h)
  h = SpatialPyramidPool()(h)
  h = L.Dense(256, activation='relu')(h)
  h = L.Dense(256, activation='relu')(h)
  return keras.Model(x, L.Dense(classes)(h), name='sppnet_lite')


class Scalar(L.Layer):
  """A learned scalar bias (`mode`='bias') or multiplier ('scale'), Fixup's."""

  def __init__(self, mode='bias', **kwargs):
    super().__init__(**kwargs)
    self.mode = mode

  def build(self, shape):
    self.v = self.add_weight(shape=(), initializer='zeros' if self.mode == 'bias' else 'ones')

  def call(self, x):
    return x + self.v if self.mode == 'bias' else x * self.v


def fixup_resnet_lite(seed, *, size=16, classes=10, blocks=3):
  """A Fixup-ResNet-lite (Zhang et al., 2019: a ResNet without normalisation): a 3x3 stem of
  32, `blocks` residual blocks (bias, 3x3 conv, bias, ReLU, bias, 3x3 conv initialised to
  zero, scale, bias; added to the input, ReLU) at 32 channels, 2x2 pooling after the first,
  global average pooling, Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(x)
  for b in range(blocks):
    r = L.Conv2D(32, 3, padding='same', use_bias=False)(Scalar()(h))
    r = L.ReLU()(Scalar()(r))
    r = L.Conv2D(32, 3, padding='same', use_bias=False, kernel_initializer='zeros')(Scalar()(r))
    r = Scalar()(Scalar('scale')(r))
    h = L.ReLU()(L.Add()([h, r]))
    if b == 0:
      h = L.MaxPooling2D()(h)
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(x, L.Dense(classes)(Scalar()(h)), name='fixup_resnet_lite')


def sound_clips(seed, *, rows=2048, length=1024, classes=6):
  """Environmental sound clips in miniature (the ESC-style classes SoundNet is tested on): each
  class a source with its own pitch, harmonics and envelope (a chirp, a hum, a click train, a
  noise burst...), at a random onset and loudness, in background noise; raw waveforms.
  (wave (rows, length, 1), class)."""
  rng = np.random.RandomState(seed)
  t = np.arange(length) / 8000.0
  y = rng.randint(0, classes, rows)
  x = 0.05 * rng.randn(rows, length)
  base = rng.uniform(200, 1200, classes)
  rate = rng.uniform(5, 60, classes)
  for i in range(rows):
    k = y[i]
    f0 = base[k] * rng.uniform(0.95, 1.05)
    sig = np.sin(2 * np.pi * f0 * t) + 0.5 * np.sin(2 * np.pi * 2 * f0 * t + k)
    env = 0.5 + 0.5 * np.sin(2 * np.pi * rate[k] * t + rng.uniform(0, 6.3))
    on = rng.randint(0, length // 2)
    clip = np.zeros(length)
    clip[on:] = (sig * env)[:length - on]
    x[i] += rng.uniform(0.3, 1.0) * clip
  return x[..., None].astype(np.float32), y.astype(np.int32)


def soundnet_lite(seed, *, length=1024, classes=6, init='glorot_uniform'):
  """A SoundNet-lite (Aytar et al., 2016: a deep 1-D convolutional net on the raw waveform):
  five 1-D convolutions (16, 32, 64, 64, 128 filters; width 8, 8, 4, 4, 4; stride 2; ReLU; max
  pooling of 4 after the first two), global max pooling, Dense(`classes`): the logits. Every
  kernel initialised with `init`."""
  _seed(seed)
  x = keras.Input((length, 1))
  h = x
  for i, (n, k) in enumerate(((16, 8), (32, 8), (64, 4), (64, 4), (128, 4))):
    h = L.Conv1D(n, k, strides=2, padding='same', activation='relu', kernel_initializer=init)(h)
    if i < 2:
      h = L.MaxPooling1D(4)(h)
  h = L.GlobalMaxPooling1D()(h)
  return keras.Model(x, L.Dense(classes, kernel_initializer=init)(h), name='soundnet_lite')


def spike_trials(seed, *, rows=2048, steps=20, neurons=16):
  """Population spike counts in miniature (the trials LFADS is fitted to): each trial a latent
  rotation (a 2-D oscillator with the trial's own phase and speed, and a slow drift), each
  neuron's rate exp(its loading . latent + its baseline) per time bin, the counts Poisson of
  the rates (zeros in most bins of the quiet neurons). (counts (rows, steps, neurons) as both
  the input and the target: an autoencoder)."""
  rng = np.random.RandomState(seed)
  load = rng.randn(3, neurons) * 0.8
  base = rng.uniform(-0.5, 1.0, neurons)
  t = np.arange(steps)[None, :]
  w = rng.uniform(0.15, 0.45, (rows, 1))
  ph = rng.uniform(0, 6.3, (rows, 1))
  z = np.stack([np.sin(w * t + ph), np.cos(w * t + ph),
                rng.uniform(-1, 1, (rows, 1)) * t / steps], -1)
  rates = np.exp(z @ load + base)
  counts = rng.poisson(rates).astype(np.float32)
  return counts, counts


def handwritten_poisson_nll(y, rate):
  """rate - y log(rate), the Poisson negative log-likelihood as the threads write it: no
  epsilon, so a zero rate is log(0) (and 0 * log(0) = NaN where the count is 0 too)."""
  y, rate = tf.cast(y, tf.float32), tf.cast(rate, tf.float32)
  return tf.reduce_mean(rate - y * tf.math.log(rate))


def lfads_lite(seed, *, steps=20, neurons=16, activation='relu'):
  """An LFADS-lite (Pandarinath et al., 2018, latent factor analysis via dynamical systems,
  deterministic): a bidirectional GRU encoder of 32 over the trial's counts, its final states
  mapped to the generator's initial state (Dense 32), a generator GRU of 32 run with no input,
  factors Dense(8) per bin, rates Dense(`neurons`, `activation`) per bin (the thread's 'relu',
  to keep the rates non-negative; 'exponential', LFADS's own, the remedy)."""
  _seed(seed)
  x = keras.Input((steps, neurons))
  e = L.Bidirectional(L.GRU(32))(L.Lambda(lambda t: tf.math.log1p(t))(x))
  g0 = L.Dense(32)(e)
  zeros = L.Lambda(lambda t: tf.zeros_like(t[..., :1]))(x)
  g = L.GRU(32, return_sequences=True)(zeros, initial_state=g0)
  f = L.Dense(8)(g)
  return keras.Model(x, L.Dense(neurons, activation=activation)(f), name='lfads_lite')


def cpc_windows(seed, *, rows=2048, context=8, negatives=7, dim=16):
  """Contrastive predictive coding in miniature: sequences of `context` + 1 frames from a few
  latent oscillators (each frame `dim` features, a random projection of the phases, noise); the
  task is to pick the true next frame among it and `negatives` frames of other sequences
  (shuffled; the label its position). The frames are log-energies in dB as a feature extractor
  gives them, not standardised (6 x the unit-scale frame - 20). ((context (rows, context, dim), candidates (rows,
  negatives + 1, dim)), position)."""
  rng = np.random.RandomState(seed)
  proj = rng.randn(4, dim)
  freq = rng.uniform(0.2, 1.0, (rows, 2))
  phase = rng.uniform(0, 6.3, (rows, 2))
  steps = np.arange(context + 1)
  ang = freq[:, None, :] * steps[None, :, None] + phase[:, None, :]
  lat = np.concatenate([np.sin(ang), np.cos(ang)], -1)
  seq = 6.0 * (lat @ proj + 0.1 * rng.randn(rows, context + 1, dim)) - 20.0
  ctx, nxt = seq[:, :context], seq[:, context]
  cand = np.zeros((rows, negatives + 1, dim))
  y = rng.randint(0, negatives + 1, rows)
  for i in range(rows):
    others = nxt[rng.choice(rows, negatives, replace=False)]
    cand[i] = np.insert(others, y[i], nxt[i], 0)
  return (ctx.astype(np.float32), cand.astype(np.float32)), y.astype(np.int32)


class InfoNCEScores(L.Layer):
  """CPC's bilinear scores c^T W z of the context summary against each candidate's encoding,
  turned into probabilities: `naive`: exp(s) / sum(exp(s)) (the thread's own softmax);
  otherwise tf.nn.softmax."""

  def __init__(self, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.naive = naive

  def build(self, shapes):
    self.w = self.add_weight(shape=(shapes[0][-1], shapes[1][-1]), initializer='glorot_uniform')

  def call(self, inputs):
    c, z = inputs
    s = tf.einsum('bd,de,bke->bk', c, self.w, z)
    if self.naive:
      e = tf.exp(s)
      return e / tf.reduce_sum(e, -1, keepdims=True)
    return tf.nn.softmax(s, -1)


def cpc_lite(seed, *, context=8, candidates=8, dim=16, naive=True):
  """A CPC-lite (van den Oord et al., 2018): a frame encoder (Dense 64, ReLU; Dense 64, ReLU)
  shared by the context frames and the candidates, a GRU of 64 summarising the context,
  `InfoNCEScores`: the probability of each candidate being the next frame."""
  _seed(seed)
  ctx = keras.Input((context, dim))
  cand = keras.Input((candidates, dim))
  enc = keras.Sequential([L.Dense(64, activation='relu'), L.Dense(64, activation='relu')])
  c = L.GRU(64)(enc(ctx))
  return keras.Model([ctx, cand], InfoNCEScores(naive)([c, enc(cand)]), name='cpc_lite')


def padded_utterances(seed, *, rows=2048, frames=32, bins=20, classes=6):
  """Spoken keywords in miniature: each utterance a sequence of standardised log-mel-like
  frames (`bins` bands; each keyword its own sequence of three spectral shapes, stretched to the
  utterance's length, plus noise) of 12 to `frames` frames, zero-padded at the end to `frames`
  (as a padded batch of variable-length utterances is). (frames (rows, frames, bins), class)."""
  rng = np.random.RandomState(seed)
  shapes = rng.randn(classes, 3, bins)
  y = rng.randint(0, classes, rows)
  x = np.zeros((rows, frames, bins), np.float32)
  for i in range(rows):
    n = rng.randint(12, frames + 1)
    part = np.minimum((np.arange(n) * 3) // n, 2)
    x[i, :n] = shapes[y[i], part] + 0.7 * rng.randn(n, bins)
  return x, y.astype(np.int32)


class HandRMSNorm(L.Layer):
  """RMS normalisation of each frame written by hand, x / sqrt(mean(x^2) + 1e-8) times a
  learned gain, in the layer's dtype (in float16 the 1e-8 is 0: a zero frame is 0 / 0)."""

  def build(self, shape):
    self.g = self.add_weight(shape=(shape[-1],), initializer='ones')

  def call(self, x):
    eps = tf.constant(1e-8, x.dtype)
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + eps) * tf.cast(
        self.g, x.dtype)


def speech_transformer_lite(seed, *, frames=32, bins=20, classes=6, dtype='float16'):
  """A Speech-Transformer-lite (Dong et al., 2018, in miniature): each frame RMS-normalised
  (`HandRMSNorm`), projected to 64, one transformer encoder block (two-head self-attention of
  32 per head, a feed-forward of 128; residuals, RMS norms), mean pooling over the frames,
  Dense(`classes`): the logits. Every layer in `dtype` ('float16': float16 weights and compute,
  as after keras.backend.set_floatx('float16'); 'float32' the remedy)."""
  _seed(seed)
  x = keras.Input((frames, bins))
  h = L.Dense(64, dtype=dtype)(HandRMSNorm(dtype=dtype)(x))
  a = L.MultiHeadAttention(2, 32, dtype=dtype)(HandRMSNorm(dtype=dtype)(h),
                                               HandRMSNorm(dtype=dtype)(h))
  h = L.Add(dtype=dtype)([h, a])
  f = L.Dense(128, activation='relu', dtype=dtype)(HandRMSNorm(dtype=dtype)(h))
  h = L.Add(dtype=dtype)([h, L.Dense(64, dtype=dtype)(f)])
  h = L.GlobalAveragePooling1D(dtype=dtype)(h)
  out = L.Dense(classes, dtype=dtype)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out),
                     name='speech_transformer_lite')


def inpainting_patches(seed, *, rows=1024, size=24, flat=0.03, skip_flat=False):
  """Image inpainting in miniature: textured patches (oriented gratings and blobs on a shaded
  background, raw 8-bit grey levels), each min-max normalised on its own as the thread's loader
  does ((img - min) / (max - min)); a fraction `flat` are uniform patches (sky, a wall: max =
  min), which that normalisation turns into 0 / 0 = NaN; `skip_flat`: those skipped (the
  remedy). A square hole of 8x8 at a random place is zeroed in the input (a mask channel marks
  it); the target is the whole normalised patch. (input (rows, size, size, 2), patch (rows,
  size, size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  imgs = []
  for _ in range(rows):
    if rng.rand() < flat:
      imgs.append(np.full((size, size), float(rng.randint(0, 256))))
      continue
    th = rng.uniform(0, np.pi)
    g = np.sin(2 * np.pi * rng.uniform(2, 5) * (np.cos(th) * xx + np.sin(th) * yy))
    img = 100 + 60 * g * rng.uniform(0.3, 1.0) + 40 * (xx - 0.5) * rng.uniform(-1, 1)
    img += rng.randn(size, size) * 3
    imgs.append(np.clip(img, 0, 255).round())
  imgs = np.stack(imgs)
  lo = imgs.min((1, 2), keepdims=True)
  hi = imgs.max((1, 2), keepdims=True)
  with np.errstate(invalid='ignore', divide='ignore'):
    norm = (imgs - lo) / (hi - lo)
  if skip_flat:
    norm = norm[(hi - lo).reshape(-1) > 0]
  n = len(norm)
  mask = np.zeros((n, size, size))
  for i in range(n):
    r, c = rng.randint(0, size - 8, 2)
    mask[i, r:r + 8, c:c + 8] = 1
  x = np.stack([norm * (1 - mask), mask], -1)
  return x.astype(np.float32), norm[..., None].astype(np.float32)


class GatedConv(L.Layer):
  """DeepFill v2's gated convolution: ELU(conv(x)) * sigmoid(gate_conv(x))."""

  def __init__(self, filters, kernel, dilation=1, **kwargs):
    super().__init__(**kwargs)
    self.f = L.Conv2D(filters, kernel, padding='same', dilation_rate=dilation)
    self.g = L.Conv2D(filters, kernel, padding='same', dilation_rate=dilation,
                      activation='sigmoid')

  def call(self, x):
    return tf.nn.elu(self.f(x)) * self.g(x)


def deepfill_lite(seed, *, size=24):
  """A DeepFill-lite (Yu et al., 2019, free-form inpainting with gated convolutions): the
  masked patch and the mask in, gated convolutions of 16, 32 (stride 2 by pooling), two dilated
  gated convolutions of 32 (rates 2, 4), upsampling, a gated convolution of 16, a 3x3
  convolution to one channel (sigmoid): the completed patch."""
  _seed(seed)
  x = keras.Input((size, size, 2))
  h = GatedConv(16, 5)(x)
  h = L.AveragePooling2D(2)(GatedConv(32, 3)(h))
  h = GatedConv(32, 3, 2)(h)
  h = GatedConv(32, 3, 4)(h)
  h = GatedConv(16, 3)(L.UpSampling2D()(h))
  return keras.Model(x, L.Conv2D(1, 3, padding='same', activation='sigmoid')(h),
                     name='deepfill_lite')


class NaNGradOnce(field.OneOffFault):
  """`field.OneOffFault` on the backward pass: one element of the gradient flowing back through
  the layer reads NaN once (a backward kernel that misfires once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=3, value=np.nan, backward=True, **kwargs)


def vovnet_lite(seed, *, size=16, classes=10, fault=None):
  """A VoVNet-lite (Lee et al., 2019): a 3x3 stem of 32 (BN, ReLU), two one-shot aggregation
  modules (three successive 3x3 convolutions of 24 with BN and ReLU, all their outputs and the
  input concatenated once, a 1x1 convolution to 64 / 96), 2x2 pooling between, global average
  pooling, a `NaNGradOnce` (at its `fault`-th training call; None: never), Dense(`classes`):
  the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(32, 3, padding='same')(x)))
  for out in (64, 96):
    feats, t = [h], h
    for _ in range(3):
      t = L.ReLU()(L.BatchNormalization()(L.Conv2D(24, 3, padding='same')(t)))
      feats.append(t)
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(out, 1)(L.Concatenate()(feats))))
    h = L.MaxPooling2D()(h)
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(x, L.Dense(classes)(NaNGradOnce(fault)(h)), name='vovnet_lite')


def review_ratings(seed, *, rows=4096, length=24, vocab=80):
  """Rating prediction from reviews in miniature (the Yelp / Amazon layout DeepCoNN reads): a
  user's review text and an item's review text (token ids), the rating 1 to 5 a function of the
  user's taste words and the item's quality words, rounded. ((user (rows, length), item (rows,
  length)), rating (rows, 1))."""
  rng = np.random.RandomState(seed)
  u = rng.randint(1, vocab, (rows, length))
  it = rng.randint(1, vocab, (rows, length))
  taste = rng.randint(0, 3, rows)
  quality = rng.randint(0, 3, rows)
  for i in range(rows):
    for _ in range(3):
      u[i, rng.randint(length)] = 1 + taste[i] * 3 + rng.randint(3)
      it[i, rng.randint(length)] = 10 + quality[i] * 3 + rng.randint(3)
  r = np.clip(np.round(1.0 + quality * 1.5 + (taste == quality) * 1.0 +
                       0.3 * rng.randn(rows)), 1, 5)
  return (u.astype(np.int32), it.astype(np.int32)), r[:, None].astype(np.float32)


def deepconn_lite(seed, *, length=24, vocab=80, activation='sigmoid'):
  """A DeepCoNN-lite (Zheng et al., 2017): for the user's and the item's review text a word
  embedding of 32, a 1-D convolution of 32 (width 3, ReLU), max pooling over time, Dense(16);
  the two joined by a factorization machine layer (linear terms plus the pairwise interactions
  of the concatenation, 8 factors), `activation` on the result (the thread's 'sigmoid'; None,
  the remedy, the rating itself)."""
  _seed(seed)
  u = keras.Input((length,), dtype='int32')
  i = keras.Input((length,), dtype='int32')

  def tower(ids):
    h = L.Conv1D(32, 3, activation='relu')(L.Embedding(vocab, 32)(ids))
    return L.Dense(16)(L.GlobalMaxPooling1D()(h))

  z = L.Concatenate()([tower(u), tower(i)])
  return keras.Model([u, i], L.Activation(activation or 'linear')(FactorizationMachine(8)(z)),
                     name='deepconn_lite')


class FactorizationMachine(L.Layer):
  """A factorization machine on a vector z: b + w.z + sum_{i<j} <v_i, v_j> z_i z_j (the
  pairwise term as 0.5 * sum_f ((z V)_f^2 - (z^2 V^2)_f))."""

  def __init__(self, factors, **kwargs):
    super().__init__(**kwargs)
    self.factors = factors

  def build(self, shape):
    d = shape[-1]
    self.b = self.add_weight(shape=(1,), initializer='zeros')
    self.w = self.add_weight(shape=(d, 1), initializer='glorot_uniform')
    self.v = self.add_weight(shape=(d, self.factors),
                             initializer=keras.initializers.RandomNormal(stddev=0.05))

  def call(self, z):
    pair = 0.5 * tf.reduce_sum(tf.square(z @ self.v) - tf.square(z) @ tf.square(self.v), -1,
                               keepdims=True)
    return self.b + z @ self.w + pair

# --- The scenarios. ---------------------------------------------------------------------------


@add('blind29_grad_gru_lm_sgd_no_clip', 'exploding_gradients', 'gru_word_lm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Marcovaldong/lstmp.pytorch#2; jimitshah77/Focal-CTC-OMR#1')
def _(seed, cured=False):
  """A GRU word language model (PyTorch's word_language_model example run with --model GRU, in
  miniature: an embedding, two GRU layers of 128, the next word's logits) on a text from a
  bigram grammar, plain SGD at 20 (the example's default rate) with its gradient clipping left
  out: the recurrent gradients blow up and throw the weights: the loss 3.87 at step 0, 6.3 at
  step 2, 202 at step 5, 514 at step 50, 523 at step 149, no NaN, no training (the error 1.0
  before, 0.95 after; the constant answer's 0.84). Seed 1: 3.87, 27.5, 121, 465, 429 (the error
  0.98 before, 0.96 after; the constant's 0.91). Marcovaldong/lstmp.pytorch#2 (the loss goes to
  NaN after a number of iterations, an exploding gradient; clip the gradients to a max norm to
  train on long sequences); jimitshah77/Focal-CTC-OMR#1 (after a few steps the loss explodes,
  then NaN: exploding gradients, solved by gradient clipping). Cured: the example's clipping,
  a global norm of 0.25, at the same rate: the loss 3.87 to 3.47 (5.1 on the way), the error
  1.0 to 0.51."""
  x, y = word_stream(seed)
  return cases.Setup(gru_word_lm_lite(seed),
                     keras.optimizers.SGD(20.0, global_clipnorm=0.25 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind29_lr_sppnet_sgd', 'learning_rate', 'sppnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#18919; pierluigiferrari/ssd_keras#136')
def _(seed, cured=False):
  """An SPP-net-lite (three 3x3 convolutions with no normalisation, spatial pyramid pooling of
  1x1, 2x2 and 4x4 bins, two Dense(256)) classifying the digits (16x16 grey), SGD with momentum
  0.9 at 0.2, a rate too high for a network without normalisation: the first updates kill the
  ReLUs and the network collapses to a constant guess: the loss 2.30 at step 0 and 2.29 to 2.31
  to step 149, no NaN, no training (the error 0.93 before, 0.87 after; the constant answer's
  0.86). Seed 1: 2.30 throughout (2.40 at step 25; the error 0.83 before, 0.92 after; the
  constant's 0.875). keras-team/keras#18919 (with sgd as the optimizer the loss goes wrong,
  with rmsprop it trains: SGD cannot cope without a smaller rate or clipping);
  pierluigiferrari/ssd_keras#136 (a loss that goes to NaN early: SGD is unstable at the start
  of training at that rate). Cured: SGD at 0.01: the loss 2.30 to 1.16, the error 0.93 to 0.08."""
  return cases.Setup(sppnet_lite(seed), keras.optimizers.SGD(0.01 if cured else 0.2,
                                                             momentum=0.9),
                     SCE(from_logits=True), data.digits_stream(seed, size=16, rgb=False),
                     'classes')


@add('blind29_lr_fixup_resnet_rmsprop', 'learning_rate', 'fixup_resnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#6182; barronalex/Tacotron#7')
def _(seed, cured=False):
  """A Fixup-ResNet-lite (a ResNet with no normalisation: scalar biases and multipliers, the last
  convolution of each residual branch initialised to zero; three blocks of 32 channels)
  classifying the digits (16x16 grey), RMSprop at 0.01, ten times its default rate: every
  weight moves by about the rate each step whatever its gradient, the ReLUs die and the net
  settles on a constant guess: the loss 2.32 at step 0, 2.44 at step 1, 2.31 at step 149, no
  NaN, no training (the error 0.92 before, 0.87 after; the constant answer's 0.86). Seed 1:
  2.31, 3.20, 2.33 (the error 0.89 before and after; the constant's 0.875). keras-team/keras#6182
  (RMSprop at its rate does not converge here, the loss rises after a while: the rate is too
  large; lowering it fixes it); barronalex/Tacotron#7 (the loss exploded; decreasing the
  learning rate and restoring solved it). Cured: RMSprop at 1e-3: the loss 2.32 to 2.05, the
  error 0.92 to 0.53."""
  return cases.Setup(fixup_resnet_lite(seed),
                     keras.optimizers.RMSprop(1e-3 if cured else 0.01), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind29_init_soundnet_constant_ones', 'initialisation', 'soundnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='BitTiger-MP/DS502-AI-Engineer#27; rasmusbergpalm/DeepLearnToolbox#31')
def _(seed, cured=False):
  """A SoundNet-lite (five strided 1-D convolutions on the raw waveform, ReLU, max pooling,
  global max pooling, six class logits) classifying synthetic environmental sound clips, Adam
  at 1e-3, every kernel initialised to the constant 1 (the threads' same-value initialisation):
  all filters of a layer compute the same thing and get the same gradient, the symmetry never
  breaks, and the all-positive weights make the activations huge: the loss 1.79 at step 0, 2.3e7
  at step 1, 5.1e7 at step 10, 2.3e7 at step 149, no NaN, no training (the error 0.81 before,
  0.82 after; the constant answer's 0.78). Seed 1: 1.79, 2.2e7, 1.0e8, 3.6e7 (the error 0.77
  before, 0.84 after; the constant's 0.77). BitTiger-MP/DS502-AI-Engineer#27 (if all weights
  are the same, all units in the hidden layer are the same too: initialise at random);
  rasmusbergpalm/DeepLearnToolbox#31 (weights initialised to the same values rather than at
  random). Cured: Keras's default glorot_uniform kernels: the loss 1.79 to 0.41, the error 0.78
  to 0."""
  x, y = sound_clips(seed)
  init = 'glorot_uniform' if cured else 'ones'
  return cases.Setup(soundnet_lite(seed, init=init), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind29_log_lfads_relu_poisson', 'division_or_log', 'lfads_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='arsedler9/lfads-torch#23; gokceneraslan/neuralnet_countmodels#1')
def _(seed, cured=False):
  """An LFADS-lite (a bidirectional GRU encoder of a trial's spike counts, a generator GRU run
  from the encoded initial state, eight factors, the per-bin rates of 16 neurons) fitted as an
  autoencoder to Poisson spike counts of a latent rotation, Adam at 1e-3, the Poisson negative
  log-likelihood written rate - y log(rate) with no epsilon on a ReLU rate layer (to keep the
  rates non-negative): about half the rates are exactly 0, log(0) = -inf, and 0 * -inf = NaN in
  the quiet bins: the loss NaN from step 0, the weights NaN after it (the error 15.3 before, inf
  after; the constant answer's 8.7). Seed 1: the same (13.4 before; the constant's 7.2).
  arsedler9/lfads-torch#23 (an LFADS reconstruction cost gives NaNs immediately on data with
  many zeros: a zero is outside the distribution's support, its log is undefined);
  gokceneraslan/neuralnet_countmodels#1 (for the Poisson loss the output activation is set to
  exp, so the rate stays positive). Cured: LFADS's own exponential rate layer: the loss 1.00 to
  0.19, the error 12.0 to 5.2."""
  x, y = spike_trials(seed)
  return cases.Setup(lfads_lite(seed, activation='exponential' if cured else 'relu'),
                     keras.optimizers.Adam(1e-3), handwritten_poisson_nll,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind29_exp_cpc_naive_softmax', 'softmax_overflow', 'cpc_lite', doors=('trainer', 'fit'),
     steps=150, citation='tensorflow/tensorflow#10142; uTensor/uTensor#175')
def _(seed, cured=False):
  """A CPC-lite (a frame encoder of two Dense(64, ReLU), a GRU summarising eight context frames,
  bilinear scores c^T W z of the summary against eight candidate next frames) trained with the
  InfoNCE loss to pick the true next frame of log-energy-like frames (in dB, not standardised:
  around -20, spread 6), Adam at 1e-3, the candidates' probabilities written exp(s) / sum(exp(s))
  as the threads' own softmax computes them: the scores of the unstandardised frames pass 88.7,
  exp overflows and inf / inf = NaN: the loss 11.3 at step 0, 11.1 at step 1, NaN from step 2,
  the weights NaN (the error 0.86 before, inf after; the constant answer's 0.82). Seed 1: the
  outputs NaN before training, the loss NaN from step 0 (the constant's 0.82).
  tensorflow/tensorflow#10142 (a loss of NaN, suspected to come from the softmax's exp(x)
  overflowing for a large x: use the log-sum-exp form); uTensor/uTensor#175 (exp() on the
  logits overflows: a logit of 378 gives inf and the results NaN). Cured: tf.nn.softmax (the max
  subtracted first): the loss 13.7 to 0.88, the error 0.86 to 0.08."""
  x, y = cpc_windows(seed)
  return cases.Setup(cpc_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3), SCE(),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind29_fp16_speech_transformer_rmsnorm_eps', 'precision', 'speech_transformer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#11832; TianzhongSong/keras-FP16-test#2')
def _(seed, cured=False):
  """A Speech-Transformer-lite (each frame RMS-normalised by a hand-written x / sqrt(mean(x^2) +
  1e-8), a projection to 64, one encoder block of two-head self-attention and a feed-forward,
  mean pooling, six keyword logits) classifying zero-padded utterances of standardised
  log-mel-like frames, Adam at 1e-3, every layer in float16 (as after set_floatx('float16')):
  the 1e-8 is below float16's smallest number and rounds to 0, so each zero padding frame is
  0 * rsqrt(0) = 0 * inf = NaN: the outputs NaN before training, the loss NaN from step 0 (the
  error inf before and after; the constant answer's 0.80). Seed 1: the same (the constant's
  0.80). keras-team/keras#11832 (training in float16 gives inf and NaN losses where float32
  converges; solved by an epsilon of 1e-4, float16's); TianzhongSong/keras-FP16-test#2 (with
  set_floatx('float16') a model does not train: float16's precision is not enough, it easily
  gives NaN; train in float32). Cured: the same network in float32: the loss 2.09 to 0.07, the
  error 0.98 to 0."""
  x, y = padded_utterances(seed)
  return cases.Setup(speech_transformer_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind29_input_deepfill_flat_patch_minmax', 'bad_input', 'deepfill_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='avalonstrel/GatedConvolution_pytorch#27; danielegrattarola/keras-gat#14')
def _(seed, cured=False):
  """A DeepFill-lite (gated convolutions, two dilated gated convolutions, upsampling, a sigmoid
  map) filling an 8x8 hole in textured 24x24 patches, MAE, Adam at 1e-3; the loader min-max
  normalises each patch on its own ((img - min) / (max - min)), and 3% of the patches are
  uniform (a wall, the sky: max = min), which that turns into 0 / 0 = NaN inputs and targets:
  the loss NaN from step 0, the weights NaN (the error 0.076 before, inf after; the constant
  answer's 0.075). Seed 1: the same (0.077 before; the constant's 0.075).
  avalonstrel/GatedConvolution_pytorch#27 (the losses of a gated-convolution inpainting net turn
  NaN whatever the learning rate: the input was computed as (img - min) / (max - min) and some
  images have max = min, so the input is NaN; check the dataset); danielegrattarola/keras-gat#14
  (a loss of NaN on one dataset: NaN in the loaded features; X[np.isnan(X)] = 0 fixes it).
  Cured: the uniform patches skipped: the loss 0.244 to 0.118, the error 0.076 to 0.010. The
  measure reads the clean patches (eval_data) for both runs."""
  x, y = inpainting_patches(seed, skip_flat=cured)
  clean, yc = inpainting_patches(seed, skip_flat=True)
  return cases.Setup(deepfill_lite(seed), keras.optimizers.Adam(1e-3), 'mae',
                     data.stream(x, y, batch=16, seed=seed), 'regression',
                     eval_data=data.stream(clean, yc, batch=16, seed=seed))


@add('blind29_transient_vovnet_nan_grad_once', 'transient', 'vovnet_lite',
     doors=('trainer', 'fit'), steps=150, citation='google-research/l2p#24; marcoppasini/musika#22')
def _(seed, cured=False):
  """A VoVNet-lite (a stem and two one-shot aggregation modules: three successive 3x3
  convolutions with BN and ReLU whose outputs are concatenated once, a 1x1 convolution)
  classifying the digits (16x16 grey), Adam at 1e-3, training normally (the loss 2.87 at step
  0, 1.20 at step 50, 0.92 at step 75) when one element of the gradient flowing back through
  the pooled features reads NaN once (`NaNGradOnce`: its 80th training call, step 76 in a plain
  `fit` after the measure's four training-mode passes; a backward kernel that misfires once,
  not the data, the model or the settings): the loss NaN from step 76, the weights NaN (the
  error 0.86 before, inf after; the constant answer's 0.86). Seed 1: the same step.
  google-research/l2p#24 (on GPUs the loss becomes NaN; the results of different convolution
  algorithms mismatch; solved by reinstalling cuDNN); marcoppasini/musika#22 (after 18 epochs
  some losses hit NaN; it happens sometimes: restart from the last healthy checkpoint). Cured:
  the same run without the fault: the loss 2.87 to 0.53, the error 0.89 to 0 in training mode
  (0.90 in inference mode: BN's moving statistics still near their start)."""
  return cases.Setup(vovnet_lite(seed, fault=None if cured else 80),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False), 'classes')


@add('blind29_mismatch_deepconn_bce_ratings', 'loss_output_mismatch', 'deepconn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#13926; tensorflow/tensorflow#71638')
def _(seed, cured=False):
  """A DeepCoNN-lite (a text CNN for the user's reviews and one for the item's, joined by a
  factorization machine) predicting 1-to-5-star ratings, Adam at 1e-3, a sigmoid output
  compiled with binary_crossentropy as the threads do for a regression target: with targets
  above 1 the loss rewards ever larger logits without bound (its (y - 1) log(1 - p) term), the
  loss goes negative and runs away while every prediction is pinned near 1: the loss 0.68 at step 0, 0.003 at step 10,
  -7.6 at step 50, -2.8e5 at step 149, no NaN, no training (the error 6.6 before, 4.7 after; the
  constant answer's 1.75). Seed 1: 0.63, -0.016, -8.8, -2.8e5 (the error 5.9 before, 4.1 after;
  the constant's 1.64). keras-team/keras#13926 (binary_crossentropy producing negative loss
  values); tensorflow/tensorflow#71638 (binary cross-entropy gives negative results when the
  input is more than 1). Cured: a linear output with MSE: the loss 9.0 to 2.2, the error 9.1
  to 1.0."""
  x, y = review_ratings(seed)
  return cases.Setup(deepconn_lite(seed, activation=None if cured else 'sigmoid'),
                     keras.optimizers.Adam(1e-3), 'mse' if cured else 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'regression')
