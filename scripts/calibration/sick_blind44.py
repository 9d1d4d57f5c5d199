"""A forty-fourth blind set of sick scenarios (the 'blind44' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind38.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (an MLP-PLR house-price regressor, an ELECTRA-lite
ticket router, a DCNN k-max text classifier, a MatchboxNet-lite keyword spotter, a
K-Branch-CNN-lite multi-label land-cover tagger, a ChestX-ray8-lite nodule detector, a UNet
3+-lite lesion segmenter, a TC-ResNet-lite keyword spotter on raw audio, an FC-EF-lite
satellite change detector and a TabM-lite readmission model). Each builder takes `cured`: the
same run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was
checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds
0 and 1), the cured twin passes runner's "did it train" measure in the same number of steps
(seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND44 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND44.add` with split='blind44'."""
  return BLIND44.add(name, expected, arch, split='blind44', **fields)


# --- Layers, architectures and data of this file. -------------------------------------------


def house_sales(seed, *, rows=2048, features=12):
  """House sales in miniature (a Boston- or Ames-like table): twelve numeric features (rooms,
  age, distance to centres, tax rate, crime, lot size, ...; standardised), the sale price in
  thousands of dollars as the set gives it (mean about 22, spread about 9: not standardised),
  a smooth nonlinear function of the features plus noise. (features (rows, 12), price (rows,
  1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  w = rng.randn(features) / np.sqrt(features)
  price = (22 + 6 * x @ w + 3 * np.sin(1.5 * x[:, 0]) + 2 * x[:, 1] * x[:, 2] +
           1.5 * np.abs(x[:, 3]) + 1.0 * rng.randn(rows))
  return x.astype(np.float32), price[:, None].astype(np.float32)


class PeriodicEmbedding(L.Layer):
  """The periodic embeddings of numerical features (Gorishniy, Rubachev and Babenko, 2022):
  each feature x_j to [sin(2 pi c_j x_j), cos(2 pi c_j x_j)] with `k` trainable frequencies
  c_j (normal, sigma 0.1 at the start), then a per-feature linear map to `dim` and a ReLU (the
  'PLR' variant)."""

  def __init__(self, k=8, dim=16, **kwargs):
    super().__init__(**kwargs)
    self.k, self.dim = k, dim

  def build(self, shape):
    n = shape[-1]
    self.c = self.add_weight(name='frequencies', shape=(n, self.k),
                             initializer=keras.initializers.RandomNormal(stddev=0.1))
    self.w = self.add_weight(name='w', shape=(n, 2 * self.k, self.dim),
                             initializer='glorot_uniform')
    self.b = self.add_weight(name='b', shape=(n, self.dim), initializer='zeros')

  def call(self, x):
    v = 2 * np.pi * self.c[None] * tf.convert_to_tensor(x)[..., None]
    v = tf.concat([tf.sin(v), tf.cos(v)], -1)
    return tf.nn.relu(tf.einsum('bnk,nkd->bnd', v, self.w) + self.b)


def mlp_plr(seed, *, features=12):
  """An MLP-PLR (Gorishniy et al., 2022), in miniature: periodic embeddings of every numerical
  feature (8 frequencies, 16 dims, ReLU), flattened, an MLP of two Dense(128) ReLU layers and
  Dense(1): the price."""
  _seed(seed)
  x = keras.Input((features,))
  h = L.Flatten()(PeriodicEmbedding()(x))
  h = L.Dense(128, activation='relu')(L.Dense(128, activation='relu')(h))
  return keras.Model(x, L.Dense(1)(h), name='mlp_plr_lite')


def support_tickets(seed, *, rows=2048, length=32, vocab=200, topics=4):
  """Customer-support tickets in miniature (a help-desk routing set): token ids of `length`
  (0 padding after the text, 1 the [CLS] token first), the text 16 to 31 tokens of common
  words (ids 2 to 119) among which two to five topic words (each topic has 20 of its own among
  ids 120 to 199) and one or two words of another topic (the noise real tickets have); the
  label the ticket's topic (billing, login, shipping, refund). (ids (rows, length), topic)."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, length), np.int32)
  y = rng.randint(0, topics, rows).astype(np.int32)
  for i in range(rows):
    n = rng.randint(16, length)
    words = rng.randint(2, 120, n)
    spots = rng.choice(n, rng.randint(3, 8), replace=False)
    own = rng.randint(2, 6)
    words[spots[:own]] = 120 + 20 * y[i] + rng.randint(0, 20, len(spots[:own]))
    other = (y[i] + rng.randint(1, topics)) % topics
    words[spots[own:]] = 120 + 20 * other + rng.randint(0, 20, len(spots[own:]))
    x[i, 0] = 1
    x[i, 1:n] = words[:n - 1]
  return x, y


def electra_lite(seed, *, length=32, vocab=200, dim=64, heads=4, blocks=2, classes=4):
  """An ELECTRA-small-style discriminator encoder (Clark et al., 2020), in miniature, with a
  classification head: token and position embeddings of `dim` (LayerNorm), `blocks`
  post-LayerNorm transformer blocks (self-attention of `heads` heads over the non-padding
  tokens, a GELU feed-forward of 2 x `dim`), the [CLS] state through Dense(`dim`, GELU) and
  Dense(`classes`): the logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = L.Embedding(vocab, dim)(ids)
  pos = L.Embedding(length, dim)(L.Lambda(lambda t: tf.range(tf.shape(t)[1])[None])(ids))
  h = L.LayerNormalization()(L.Add()([h, pos]))
  mask = L.Lambda(lambda t: tf.not_equal(t, 0)[:, None, :])(ids)
  for _ in range(blocks):
    a = L.MultiHeadAttention(heads, dim // heads)(h, h, attention_mask=mask)
    h = L.LayerNormalization()(L.Add()([h, a]))
    f = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h))
    h = L.LayerNormalization()(L.Add()([h, f]))
  cls = L.Dense(dim, activation='gelu')(L.Lambda(lambda t: t[:, 0])(h))
  return keras.Model(ids, L.Dense(classes)(cls), name='electra_lite')


class KMaxPooling(L.Layer):
  """k-max pooling over time (Kalchbrenner, Grefenstette and Blunsom, 2014): the `k` largest
  values of each channel, in their order in the sequence."""

  def __init__(self, k, **kwargs):
    super().__init__(**kwargs)
    self.k = k

  def call(self, x):
    x = tf.transpose(tf.convert_to_tensor(x), [0, 2, 1])
    idx = tf.sort(tf.math.top_k(x, self.k).indices, -1)
    return tf.transpose(tf.gather(x, idx, batch_dims=2), [0, 2, 1])


def dcnn_kmax(seed, *, length=32, vocab=200, dim=48, classes=4, stddev=None):
  """A DCNN (dynamic convolutional network, Kalchbrenner et al., 2014), in miniature: word
  embeddings of `dim`, a wide convolution of 7 (64 maps), k-max pooling (k=8), tanh, a
  convolution of 5 (64 maps), k-max pooling (k=4), tanh, Dense(`classes`): the logits.
  `stddev`: every embedding and kernel drawn from RandomNormal(stddev) (None: Keras's
  defaults, uniform embeddings and glorot_uniform kernels)."""
  _seed(seed)
  init = keras.initializers.RandomNormal(stddev=stddev) if stddev else 'glorot_uniform'
  ids = keras.Input((length,), dtype='int32')
  h = L.Embedding(vocab, dim, embeddings_initializer=init if stddev else 'uniform')(ids)
  h = L.Activation('tanh')(KMaxPooling(8)(L.Conv1D(64, 7, padding='same',
                                                   kernel_initializer=init)(h)))
  h = L.Activation('tanh')(KMaxPooling(4)(L.Conv1D(64, 5, padding='same',
                                                   kernel_initializer=init)(h)))
  return keras.Model(ids, L.Dense(classes, kernel_initializer=init)(L.Flatten()(h)),
                     name='dcnn_kmax_lite')


def keyword_clips(seed, *, rows=2048, frames=48, coeffs=20, words=6, keyword=None):
  """One-second voice-command clips in miniature (a Speech-Commands-like set) as the MFCC
  frames a keyword spotter reads: each of `words` words a smooth template of 24 frames of
  `coeffs` coefficients (its formant pattern), spoken at a random offset in the clip, at a
  random loudness (scaling the coefficients 0.7 to 1.3) over background noise (standardised
  features); the label the word. `keyword` (a word id): the label is 1.0 for that word, 0.0
  for the others (a wake-word detector's set). (frames (rows, frames, coeffs), label)."""
  rng = np.random.RandomState(seed)
  base = rng.randn(words, 6, coeffs)
  t = np.linspace(0, 5, 24)
  templates = np.stack([np.stack([np.interp(t, np.arange(6), b[:, c]) for c in range(coeffs)],
                                  1) for b in base])
  y = rng.randint(0, words, rows)
  x = 0.6 * rng.randn(rows, frames, coeffs)
  for i in range(rows):
    o = rng.randint(0, frames - 24)
    x[i, o:o + 24] += rng.uniform(0.7, 1.3) * templates[y[i]]
  x = (x - x.mean()) / x.std()
  if keyword is not None:
    return x.astype(np.float32), (y == keyword).astype(np.float32)[:, None]
  return x.astype(np.float32), y.astype(np.int32)


class BitFlipOnce(field.OneOffFault):
  """A one-off fault in a convolution's output buffer: the identity, except on its `at`-th
  training call one element of the activations reads inf (a flipped exponent bit); `at` None:
  no fault. The count lives outside the model (`field.OneOffFault`)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.inf, **kwargs)


def matchboxnet(seed, *, frames=48, coeffs=20, words=6, channels=32, fault=None):
  """A MatchboxNet-lite keyword spotter (Majumdar and Ginsburg, 2020; 3x1x... in miniature):
  a prologue (a 1-D convolution of 11, `channels` maps, BatchNorm, ReLU), two residual blocks
  of two time-channel separable convolutions (depthwise of 13 and 15, pointwise; BatchNorm,
  ReLU; the residual a pointwise convolution and BatchNorm), an epilogue (a separable
  convolution of 29 dilated 2, a pointwise one of 64), global average pooling and
  Dense(`words`): the logits. `fault`: a BitFlipOnce after the prologue."""
  _seed(seed)

  def sep(h, k, c, dilation=1):
    h = L.SeparableConv1D(c, k, padding='same', dilation_rate=dilation)(h)
    return L.BatchNormalization()(h)

  x = keras.Input((frames, coeffs))
  h = L.ReLU()(L.BatchNormalization()(L.Conv1D(channels, 11, padding='same')(x)))
  h = BitFlipOnce(fault)(h)
  for k in (13, 15):
    r = L.BatchNormalization()(L.Conv1D(channels, 1)(h))
    b = L.ReLU()(sep(h, k, channels))
    h = L.ReLU()(L.Add()([sep(b, k, channels), r]))
  h = L.ReLU()(sep(h, 29, channels, dilation=2))
  h = L.ReLU()(L.BatchNormalization()(L.Conv1D(64, 1)(h)))
  return keras.Model(x, L.Dense(words)(L.GlobalAveragePooling1D()(h)), name='matchboxnet_lite')


def command_waves(seed, *, rows=2048, rate=8000, length=4000, words=6):
  """Voice commands in miniature as raw audio (a Speech-Commands-like set, 8 kHz): each of
  `words` words a sequence of three voiced segments (two formant tones each, word-specific,
  with a little vibrato), spoken 0.2 to 0.35 s long at a random loudness (peak 0.3 to 0.9)
  over light microphone noise, and the clip zero-padded to 0.5 s after it (as the set pads
  its short recordings: digital silence); the label the word. (waves (rows, length), word)."""
  rng = np.random.RandomState(seed)
  formants = rng.uniform(250, 3000, (words, 3, 2))
  x = np.zeros((rows, length), np.float32)
  y = rng.randint(0, words, rows)
  for i in range(rows):
    n = int(rng.uniform(0.2, 0.35) * rate)
    t = np.arange(n) / rate
    seg = np.minimum(3 * np.arange(n) // n, 2)
    f = formants[y[i]][seg] * (1 + 0.01 * np.sin(2 * np.pi * 5 * t))[:, None]
    w = np.sin(2 * np.pi * np.cumsum(f, 0) / rate).sum(1) * np.hanning(n)
    w = w + 0.02 * rng.randn(n)
    x[i, :n] = rng.uniform(0.3, 0.9) * w / np.abs(w).max()
  return x, y.astype(np.int32)


class LogMelFrontEnd(L.Layer):
  """A log-mel front end inside the model (as nnAudio or convmelspec compute it on the
  accelerator): frames of 256 samples (hop 128, Hann window), the power spectrum through a
  fixed DFT basis (a matrix product), 20 triangular mel bands, 10 log10(max(mel, 1e-10)) (the
  decibel floor of torchaudio's AmplitudeToDB), scaled as (dB + 50) / 20. In the layer's
  compute dtype: in float16 the 1e-10 floor rounds to 0, and a frame of digital silence gives
  log10(0) = -inf."""

  def __init__(self, n_fft=256, hop=128, bands=20, rate=8000, **kwargs):
    super().__init__(**kwargs)
    self.n_fft, self.hop = n_fft, hop
    k = np.arange(n_fft // 2 + 1)
    n = np.arange(n_fft)[:, None]
    win = np.hanning(n_fft)[:, None]
    self.cos = (win * np.cos(2 * np.pi * n * k / n_fft)).astype(np.float32)
    self.sin = (win * np.sin(2 * np.pi * n * k / n_fft)).astype(np.float32)
    mel = lambda f: 2595 * np.log10(1 + f / 700)
    edges = 700 * (10 ** (np.linspace(mel(0), mel(rate / 2), bands + 2) / 2595) - 1)
    freqs = k * rate / n_fft
    fb = np.stack([np.clip(np.minimum((freqs - a) / (b - a), (c - freqs) / (c - b)), 0, None)
                   for a, b, c in zip(edges, edges[1:], edges[2:])], 1)
    self.fb = fb.astype(np.float32)

  def call(self, wave):
    wave = tf.cast(tf.convert_to_tensor(wave), self.compute_dtype)
    frames = tf.signal.frame(wave, self.n_fft, self.hop)
    c = lambda a: tf.constant(a, self.compute_dtype)
    power = tf.square(frames @ c(self.cos)) + tf.square(frames @ c(self.sin))
    mel = power @ c(self.fb)
    db = 10.0 * tf.math.log(tf.maximum(mel, c(1e-10))) / np.log(10.0)
    return (db + 50.0) / 20.0


def tc_resnet(seed, *, length=4000, words=6, dtype='mixed_float16', front_dtype=None):
  """A TC-ResNet8-lite keyword spotter on raw audio (Choi et al., 2019), in miniature: the
  log-mel front end (LogMelFrontEnd, in `front_dtype`, default `dtype`), the 20 bands as the
  channels of a 1-D convolution in time (3, 16 maps), three residual blocks (two convolutions
  of 9, the first strided 2, BatchNorm, ReLU; a strided pointwise shortcut) of 24, 32 and 48
  maps, global average pooling and Dense(`words`) in float32: the logits. Every other layer in
  `dtype` ('mixed_float16': float16 arithmetic, float32 weights)."""
  _seed(seed)
  kw = dict(dtype=dtype)
  x = keras.Input((length,))
  h = LogMelFrontEnd(dtype=front_dtype or dtype)(x)
  h = L.Conv1D(16, 3, padding='same', use_bias=False, **kw)(h)
  for c in (24, 32, 48):
    b = L.Conv1D(c, 9, 2, padding='same', use_bias=False, **kw)(h)
    b = L.ReLU(**kw)(L.BatchNormalization(**kw)(b))
    b = L.BatchNormalization(**kw)(L.Conv1D(c, 9, padding='same', use_bias=False, **kw)(b))
    r = L.BatchNormalization(**kw)(L.Conv1D(c, 1, 2, use_bias=False, **kw)(h))
    h = L.ReLU(**kw)(L.Add(**kw)([b, L.ReLU(**kw)(r)]))
  h = L.GlobalAveragePooling1D(**kw)(h)
  return keras.Model(x, L.Dense(words, dtype='float32')(h), name='tc_resnet_lite')


def scene_chips(seed, *, rows=2048, size=32, labels=7):
  """Satellite scene chips in miniature (a Planet-Amazon- or BigEarthNet-like multi-label set):
  four bands (red, green, blue, near infrared; reflectances scaled to [0, 1]) over a bare-soil
  background, each chip showing two or three of seven land covers, each drawn where it is: a
  forest patch (dark green, bright NIR), water (dark, NIR near 0), a road (a bright line), a
  field of stripes (agriculture), houses (small bright squares), clouds (bright in every band)
  and bare rock (a grey blob with NIR equal to red); the label which of the seven the chip
  shows (rows, 7), one or more at a time."""
  rng = np.random.RandomState(seed)
  x = np.empty((rows, size, size, 4), np.float32)
  y = np.zeros((rows, labels), np.float32)
  yy, xx = np.mgrid[:size, :size]
  looks = np.array([[0.10, 0.30, 0.10, 0.80], [0.05, 0.10, 0.20, 0.02], [0.7, 0.7, 0.7, 0.5],
                    [0.40, 0.50, 0.20, 0.60], [0.80, 0.60, 0.50, 0.40], [0.95, 0.95, 0.95, 0.9],
                    [0.50, 0.50, 0.50, 0.50]])
  for i in range(rows):
    img = np.array([0.45, 0.35, 0.25, 0.35]) + 0.04 * rng.randn(size, size, 4)
    for k in rng.choice(labels, rng.randint(2, 4), replace=False):
      y[i, k] = 1.0
      cy, cx, r = rng.randint(4, size - 4), rng.randint(4, size - 4), rng.randint(4, 9)
      if k == 2:
        m = np.abs((yy - cy) * rng.uniform(-1, 1) - (xx - cx)) < 1.2
      elif k == 3:
        m = (np.abs(yy - cy) < r) & (np.abs(xx - cx) < r) & ((yy // 2) % 2 == 0)
      elif k == 4:
        m = np.zeros((size, size), bool)
        for _ in range(rng.randint(3, 6)):
          a, b = rng.randint(0, size - 3, 2)
          m[a:a + 3, b:b + 3] = True
      else:
        m = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
      img[m] = looks[k] + 0.03 * rng.randn(m.sum(), 4)
    x[i] = np.clip(img, 0, 1)
  return x, y


def kbranch_cnn(seed, *, size=32, labels=7, activation='sigmoid'):
  """A K-Branch CNN (Sumbul et al., BigEarthNet, 2021), in miniature: one branch on the visible
  bands (two 3x3 convolutions of 32, ReLU, 2x2 max pooling), one on the near infrared (a 3x3
  convolution of 16, ReLU, pooling), concatenated, a 3x3 convolution of 64, global average
  pooling, Dense(64, ReLU) and Dense(`labels`, `activation`): the probability of each land
  cover."""
  _seed(seed)
  x = keras.Input((size, size, 4))
  rgb = L.Lambda(lambda t: t[..., :3])(x)
  nir = L.Lambda(lambda t: t[..., 3:])(x)
  a = L.Conv2D(32, 3, padding='same', activation='relu')(rgb)
  a = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(a))
  b = L.MaxPooling2D()(L.Conv2D(16, 3, padding='same', activation='relu')(nir))
  h = L.Conv2D(64, 3, padding='same', activation='relu')(L.Concatenate()([a, b]))
  h = L.Dense(64, activation='relu')(L.GlobalAveragePooling2D()(h))
  return keras.Model(x, L.Dense(labels, activation=activation)(h), name='kbranch_cnn_lite')


def chest_films(seed, *, rows=2048, size=32):
  """Chest radiographs in miniature (a ChestX-ray8-like set, one finding): a bright mediastinum
  and ribs over two darker lung fields, a random patient scale and exposure, grain; in half of
  the films a nodule (a bright disc of radius 3 to 5 inside a lung); pixels in [0, 1].
  (films (rows, size, size, 1), finding (rows, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[:size, :size] / size
  x = np.empty((rows, size, size), np.float32)
  y = (rng.rand(rows) < 0.5).astype(np.float32)
  for i in range(rows):
    s = rng.uniform(0.9, 1.1)
    lungs = (((xx - 0.3) / (0.17 * s)) ** 2 + ((yy - 0.5) / (0.33 * s)) ** 2 < 1) | (
        ((xx - 0.7) / (0.17 * s)) ** 2 + ((yy - 0.5) / (0.33 * s)) ** 2 < 1)
    img = 0.75 - 0.4 * lungs + 0.05 * np.sin(yy * 40 + rng.uniform(0, 6)) * lungs
    if y[i]:
      side = rng.choice([0.3, 0.7])
      cy, cx = rng.uniform(0.3, 0.7) * size, (side + rng.uniform(-0.08, 0.08)) * size
      r = rng.uniform(3.0, 5.0)
      img = img + 0.8 * (((yy * size - cy) ** 2 + (xx * size - cx) ** 2) < r * r)
    x[i] = np.clip(img * rng.uniform(0.85, 1.15) + 0.04 * rng.randn(size, size), 0, 1)
  return x[..., None], y[:, None]


class LSEPool(L.Layer):
  """Log-sum-exp pooling of a score map (Pinheiro and Collobert; the ChestX-ray8 baseline of
  Wang et al., 2017): (1 / r) log(mean(exp(r S))) over the map, between its mean (r -> 0) and
  its max (r -> inf). `stable`: computed as max + (1 / r) log(mean(exp(r (S - max)))); not:
  written as the formula reads, exp(r S) overflowing float32 once a score passes 88.7 / r."""

  def __init__(self, r=10.0, stable=True, **kwargs):
    super().__init__(**kwargs)
    self.r, self.stable = r, stable

  def call(self, s):
    s = tf.convert_to_tensor(s)
    s = tf.reshape(s, [tf.shape(s)[0], -1, s.shape[-1]])
    n = tf.cast(tf.shape(s)[1], s.dtype)
    if self.stable:
      return (tf.reduce_logsumexp(self.r * s, 1) - tf.math.log(n)) / self.r
    return tf.math.log(tf.reduce_mean(tf.exp(self.r * s), 1)) / self.r


def chestxray8(seed, *, size=32, stable=True):
  """A ChestX-ray8-lite weakly supervised classifier (Wang et al., 2017), in miniature: a
  ResNet-style backbone (a 3x3 convolution of 32, two residual blocks of 32 and 64 maps with
  ReLU, the second strided 2), the transition layer (a 1x1 convolution to 64 maps, ReLU),
  log-sum-exp pooling of each map (r = 10) and the prediction layer (Dense(1)): the finding's
  logit."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(x)
  for c, st in ((32, 1), (64, 2)):
    b = L.Conv2D(c, 3, st, padding='same', activation='relu')(h)
    b = L.Conv2D(c, 3, padding='same')(b)
    h = L.ReLU()(L.Add()([b, L.Conv2D(c, 1, st)(h)]))
  h = L.Conv2D(64, 1, activation='relu')(h)
  return keras.Model(x, L.Dense(1)(LSEPool(10.0, stable)(h)), name='chestxray8_lite')


def lesion_slices(seed, *, rows=1024, size=32):
  """Liver CT slices in miniature (a LiTS-like set): an organ (a bright ellipse of random size
  and place) in dark surroundings with grain; in 60% of the slices one or two lesions (darker
  blobs of radius 2 to 5 inside the organ), the rest lesion-free (an empty mask, as most slices
  of a scan are); pixels in [0, 1]. (slices (rows, size, size, 1), lesion masks (rows, size,
  size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[:size, :size]
  x = np.empty((rows, size, size), np.float32)
  m = np.zeros((rows, size, size), np.float32)
  for i in range(rows):
    cy, cx = rng.uniform(12, 20, 2)
    ay, ax = rng.uniform(8, 12, 2)
    organ = ((yy - cy) / ay) ** 2 + ((xx - cx) / ax) ** 2 < 1
    img = 0.15 + 0.5 * organ
    if rng.rand() < 0.6:
      for _ in range(rng.randint(1, 3)):
        ly, lx, r = cy + rng.uniform(-4, 4), cx + rng.uniform(-4, 4), rng.uniform(3, 6)
        blob = (((yy - ly) ** 2 + (xx - lx) ** 2) < r * r) & organ
        img = img - 0.25 * blob
        m[i] = np.maximum(m[i], blob)
    x[i] = np.clip(img + 0.05 * rng.randn(size, size), 0, 1)
  return x[..., None], m[..., None]


def unet3plus(seed, *, size=32, base=16):
  """A UNet 3+-lite (Huang et al., 2020), in miniature: an encoder of three levels (two 3x3
  convolutions of 16, 32, 64 with BatchNorm and ReLU, 2x2 max pooling between), full-scale
  skip connections: each decoder level concatenates every encoder level resampled to its
  scale (max-pooled or upsampled) and the deeper decoder levels upsampled, each through a 3x3
  convolution of 16, then a 3x3 convolution of 48, BatchNorm and ReLU; a 1x1 convolution and
  sigmoid: the lesion probability of each pixel."""
  _seed(seed)

  def conv(h, c):
    return L.ReLU()(L.BatchNormalization()(L.Conv2D(c, 3, padding='same')(h)))

  def resample(h, factor):
    if factor > 1:
      return L.MaxPooling2D(int(factor))(h)
    if factor < 1:
      return L.UpSampling2D(int(1 / factor), interpolation='bilinear')(h)
    return h

  x = keras.Input((size, size, 1))
  e1 = conv(conv(x, base), base)
  e2 = conv(conv(L.MaxPooling2D()(e1), 2 * base), 2 * base)
  e3 = conv(conv(L.MaxPooling2D()(e2), 4 * base), 4 * base)
  enc = {1: e1, 2: e2, 4: e3}
  d2 = conv(L.Concatenate()([conv(resample(enc[s], 2 / s), base) for s in (1, 2, 4)]), 3 * base)
  parts = [conv(resample(enc[s], 1 / s), base) for s in (1, 2)]
  parts += [conv(resample(d2, 0.5), base), conv(resample(e3, 0.25), base)]
  d1 = conv(L.Concatenate()(parts), 3 * base)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(d1), name='unet3plus_lite')


def bce_log_dice_loss(smooth=0.0):
  """Binary cross-entropy minus the log of each image's soft Dice, 2 |y p| / (|y| + |p|), the
  'bce_logdice' loss of the segmentation kernels as the threads wrote it; `smooth` added to
  the numerator and the denominator (0: as written: a slice without lesion has |y p| = 0, a
  Dice of 0 and -log(0) = inf)."""

  def loss(y, p):
    y = tf.reshape(tf.cast(y, tf.float32), [tf.shape(y)[0], -1])
    p = tf.reshape(tf.cast(p, tf.float32), [tf.shape(p)[0], -1])
    bce = tf.reduce_mean(keras.losses.binary_crossentropy(y[..., None], p[..., None]))
    dice = ((2.0 * tf.reduce_sum(y * p, -1) + smooth) /
            (tf.reduce_sum(y, -1) + tf.reduce_sum(p, -1) + smooth))
    return bce - tf.reduce_mean(tf.math.log(dice))

  return loss


def scene_pairs(seed, *, rows=1024, size=32, nodata=0.0, fill=False):
  """Bi-temporal Sentinel-2 chips in miniature (an OSCD-like change set): two dates of four
  bands (reflectances standardised), the same fields, roads and seasonal shifts in both, and
  in 70% of the pairs new buildings or clearings in the second (bright blocks); the label the
  change mask. A fraction `nodata` of the pairs reach past the swath's edge: a strip of one
  date is nodata, written NaN as the GeoTIFFs hold it (`fill`: set to 0, the band mean, the
  threads' fix). (pairs (rows, size, size, 8): both dates' bands, masks (rows, size, size,
  1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[:size, :size]
  x = np.empty((rows, size, size, 8), np.float32)
  m = np.zeros((rows, size, size, 1), np.float32)
  for i in range(rows):
    base = 0.3 * rng.randn(4)[None, None] + 0.2 * rng.randn(size, size, 4)
    for _ in range(3):
      a, b = rng.randint(0, size - 8, 2)
      base[a:a + rng.randint(4, 10), b:b + rng.randint(4, 10)] += 0.8 * rng.randn(4)
    t2 = base + 0.3 * rng.randn(4)[None, None] + 0.15 * rng.randn(size, size, 4)
    t1 = base + 0.15 * rng.randn(size, size, 4)
    if rng.rand() < 0.7:
      for _ in range(rng.randint(1, 4)):
        a, b = rng.randint(0, size - 6, 2)
        h, w = rng.randint(3, 7, 2)
        t2[a:a + h, b:b + w] = np.array([1.5, 1.5, 1.4, 0.3]) + 0.1 * rng.randn(h, w, 4)
        m[i, a:a + h, b:b + w] = 1.0
    x[i] = np.concatenate([t1, t2], -1)
    if rng.rand() < nodata:
      edge = rng.randint(3, 10)
      date = rng.randint(2)
      x[i, :, :edge, 4 * date:4 * date + 4] = 0.0 if fill else np.nan
  return x, m


def fc_ef(seed, *, size=32):
  """An FC-EF (fully convolutional early fusion, Daudt, Le Saux and Boulch, 2018), in
  miniature: both dates' bands stacked as one input, a U-Net of three levels (3x3
  convolutions of 16, 32, 64 with BatchNorm and ReLU, max pooling, transposed convolutions
  up, skip connections) and a 1x1 convolution with sigmoid: the change probability of each
  pixel."""
  _seed(seed)

  def conv(h, c):
    return L.ReLU()(L.BatchNormalization()(L.Conv2D(c, 3, padding='same')(h)))

  x = keras.Input((size, size, 8))
  e1 = conv(x, 16)
  e2 = conv(L.MaxPooling2D()(e1), 32)
  e3 = conv(L.MaxPooling2D()(e2), 64)
  d2 = conv(L.Concatenate()([L.Conv2DTranspose(32, 2, 2)(e3), e2]), 32)
  d1 = conv(L.Concatenate()([L.Conv2DTranspose(16, 2, 2)(d2), e1]), 16)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(d1), name='fc_ef_lite')


def hospital_stays(seed, *, rows=4096, features=14, missing=0.0, fill=False):
  """Hospital discharges in miniature (a readmission table): fourteen numeric features (age,
  length of stay, prior admissions, lab results: creatinine, haemoglobin, sodium, ...;
  standardised), the 30-day readmission drawn from a logistic model of a few of them and two
  interactions. A fraction `missing` of the rows lack one lab (not drawn), left NaN as pandas
  reads a blank cell (`fill`: set to 0, the column mean, the threads' fillna). (features
  (rows, 14), readmitted (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  z = (1.2 * x[:, 0] - 0.9 * x[:, 1] + 0.8 * x[:, 2] * x[:, 3] + 0.7 * np.abs(x[:, 4]) - 0.5 +
       0.6 * x[:, 5] * (x[:, 6] > 0))
  y = (rng.rand(rows) < 1 / (1 + np.exp(-2 * z))).astype(np.float32)
  lab = rng.randint(6, features, rows)
  gone = rng.rand(rows) < missing
  x[np.where(gone)[0], lab[gone]] = 0.0 if fill else np.nan
  return x.astype(np.float32), y[:, None]


class BatchEnsembleDense(L.Layer):
  """A BatchEnsemble linear layer (Wen et al., 2020) as TabM uses it: `k` members sharing one
  weight matrix W, each with its own input and output scalings r_k, s_k (random signs at the
  start) and bias: member k computes ((x_k * r_k) W) * s_k + b_k; then ReLU."""

  def __init__(self, units, k, **kwargs):
    super().__init__(**kwargs)
    self.units, self.k = units, k

  def build(self, shape):
    signs = lambda: keras.initializers.RandomUniform(-1.0, 1.0)
    self.w = self.add_weight(name='w', shape=(shape[-1], self.units),
                             initializer='glorot_uniform')
    self.r = self.add_weight(name='r', shape=(self.k, shape[-1]), initializer=signs())
    self.s = self.add_weight(name='s', shape=(self.k, self.units), initializer=signs())
    self.b = self.add_weight(name='b', shape=(self.k, self.units), initializer='zeros')

  def call(self, x):
    return tf.nn.relu(tf.einsum('bkf,fu->bku', tf.convert_to_tensor(x) * self.r, self.w) *
                      self.s + self.b)


def tabm(seed, *, features=14, k=8, width=128):
  """A TabM-lite (Gorishniy et al., 2024), in miniature: the features copied to `k` ensemble
  members, two BatchEnsemble Dense(`width`) ReLU layers, a linear head per member and the
  mean of the members' logits: the readmission logit."""
  _seed(seed)
  x = keras.Input((features,))
  h = L.Lambda(lambda t: tf.tile(t[:, None], [1, k, 1]))(x)
  h = BatchEnsembleDense(width, k)(BatchEnsembleDense(width, k)(h))
  heads = L.EinsumDense('bku,ku->bk', output_shape=(k,), bias_axes='k')(h)
  return keras.Model(x, L.Lambda(lambda t: tf.reduce_mean(t, -1, keepdims=True))(heads),
                     name='tabm_lite')


# --- The scenarios. -------------------------------------------------------------------------


@add('blind44_explode_mlp_plr_house_prices_sgd', 'exploding_gradients', 'mlp_plr_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#5127; keras-team/keras#2134')
def _(seed, cured=False):
  """An MLP-PLR (periodic embeddings of the numerical features, two Dense(128)
  ReLU layers) predicting house sale prices in thousands of dollars (as the table gives them:
  mean about 22) from twelve standardised features, MSE, SGD at 0.01 with momentum 0.9 (the
  threads' settings): the first errors are in the hundreds, the gradients with them, and the
  updates blow the weights up: the loss 527 at step 0, 392 at step 1, NaN from step 11, the
  weights NaN (the error 626 before, inf after; the constant answer's 35.7). Seed 1: 499 at
  step 0, NaN from step 9 (571 before, inf after). keras-team/keras#5127 (the loss is NaN
  unless clipnorm is set: the gradients get very large and the weights with them);
  keras-team/keras#2134 (a regression on a real-valued target gives a NaN loss in the first
  epoch with SGD and momentum). Cured: clipnorm=1.0 in the same SGD: the loss 527 to 4.3 at
  step 149, the error 626 to 6.6."""
  x, y = house_sales(seed)
  opt = keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(mlp_plr(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind44_lr_electra_ticket_router_adam_2e2', 'learning_rate', 'electra_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='huggingface/transformers#12041; NielsRogge/Transformers-Tutorials#31')
def _(seed, cured=False):
  """An ELECTRA-small-style encoder (two post-LayerNorm transformer blocks, the
  [CLS] state to a classification head) routing support tickets to one of four topics,
  sparse cross-entropy on the logits, Adam at 2e-2 (no warm-up): the attention and LayerNorm
  weights are thrown about, the model settles on one topic for every ticket: the loss 1.67 at
  step 0, 1.38 at step 50 and 1.39 at step 149 (ln 4 = 1.386: the uniform answer), the error
  0.758 before and 0.711 after, the constant answer's 0.711. Seed 1: 1.97, then 1.40 and 1.38
  (0.781 before, 0.75 after; the constant's 0.680). (At 1e-2 seed 0 fails the same way, seed
  1 trains.) huggingface/transformers#12041 (a simple BERT text classifier learns nothing at
  a learning rate of 1e-3); NielsRogge/Transformers-Tutorials#31 (a document classifier
  predicts the same class for everything; the learning rate was the problem). Cured: Adam at
  3e-4: the loss 1.67 to 0.56, the error 0.758 to 0.234."""
  x, y = support_tickets(seed)
  return cases.Setup(electra_lite(seed), keras.optimizers.Adam(3e-4 if cured else 2e-2),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')



@add('blind44_init_dcnn_kmax_normal_1', 'initialisation', 'dcnn_kmax_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='HuwCampbell/grenade#51; mozilla/DeepSpeech#138')
def _(seed, cured=False):
  """A DCNN (dynamic k-max convolutional network, tanh after each k-max pooling)
  classifying support tickets by topic, sparse cross-entropy on the logits, Adam at 1e-3,
  with every embedding and kernel drawn from RandomNormal(stddev=1.0) (a unit-scale random
  start as in the threads): the convolutions' sums over 7 x 48 inputs have a spread near 18,
  the tanh units sit saturated at +-1 with no gradient, and the output layer's logits start
  with a spread near 16: the loss 24.4 at step 0, 4.5 at step 50, still 2.0 at step 149, the
  error 0.703 before and 0.617 after (the constant answer's 0.711; training needs 0.562).
  Seed 1: 18.7, 2.5, 2.3 (0.680 before, 0.758 after; the constant's 0.680, training needs
  0.544).
  HuwCampbell/grenade#51 (weights initialised at random in [-1, 1] give huge outputs, which
  breaks tanh layers; initialise close to 0); mozilla/DeepSpeech#138 (with the default
  initialisation the loss stays infinite and never improves; a stddev of 0.1 lets it train).
  Cured: Keras's default initialisers: the loss 1.39 to 0.60, the error 0.711 to 0.25."""
  x, y = support_tickets(seed)
  return cases.Setup(dcnn_kmax(seed, stddev=None if cured else 1.0), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind44_transient_matchboxnet_bit_flip_once', 'transient', 'matchboxnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; facebookresearch/mmf#1251')
def _(seed, cured=False):
  """A MatchboxNet-lite keyword spotter (time-channel separable convolutions,
  BatchNorm, residual blocks) on MFCC frames, sparse cross-entropy, Adam at 1e-3, training
  normally (the loss 2.12 at step 0, 0.080 at step 50) when one element of the prologue's
  output reads inf once (`BitFlipOnce`: its 90th training call, step 85 of a plain `fit`
  after the measure's training-mode passes; a flipped exponent bit, not the data, the model
  or the settings): the loss NaN from there on, the weights NaN (the error 0.844 before, inf
  after; the constant answer's 0.773). Seed 1: the same step (0.805 before).
  Rikorose/DeepFilterNet#30 (a NaN loss in rare circumstances after some epochs, cause
  unknown; resuming from the last checkpoint works); facebookresearch/mmf#1251 (NaN during
  training; resumed from a checkpoint it does not come back at the same iteration). Cured:
  the same run without the fault: the loss 2.12 to 0.018, the error 0.844 to 0.242 (0.0078 in
  training mode)."""
  x, y = keyword_clips(seed)
  return cases.Setup(matchboxnet(seed, fault=None if cured else 90), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind44_mismatch_kbranch_multilabel_softmax', 'loss_output_mismatch', 'kbranch_cnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#741; godardt/planet-amazon-deforestation#1')
def _(seed, cured=False):
  """A K-Branch CNN (visible and near-infrared branches) tagging satellite
  chips with the land covers they show (two or three of seven at once), binary
  cross-entropy, Adam at 1e-3, the output layer a softmax: the seven probabilities must share
  1.0, so with two or more covers present none can pass 0.5 and the model answers "none" for
  nearly every cover, while Keras's loss, reading the logits behind the activation, falls
  0.695 to 0.557 exactly as the sigmoid twin's does: the error 0.362 before and 0.330 after
  (the constant answer's 0.362; training needs 0.289). Seed 1: 0.700 to 0.622, the error 0.358
  before and 0.357 after (the constant's 0.358). keras-team/keras#741 (a multi-label
  classifier: do not use softmax, use sigmoid outputs with binary_crossentropy);
  godardt/planet-amazon-deforestation#1 (a satellite multi-label model: with a softmax, one
  label at 0.6 leaves at most 0.4 to the sixteen others; the labels need independent
  probabilities). Cured: sigmoid outputs: the error 0.5 to 0.267."""
  x, y = scene_chips(seed)
  return cases.Setup(kbranch_cnn(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind44_softmax_chestxray8_naive_lse_pool', 'softmax_overflow', 'chestxray8_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='mlberkeley/scae-pytorch#4; lzx1413/PytorchSSD#22')
def _(seed, cured=False):
  """A ChestX-ray8-lite (a small ResNet-style backbone, the transition layer,
  log-sum-exp pooling of each map with r = 10, the prediction layer) detecting nodules in
  chest films, binary cross-entropy on the logit, Adam at 1e-3, the pooling written as the
  formula reads, (1 / r) log(mean(exp(r S))): as the detector learns, the transition maps'
  peaks on a nodule pass 88.7 / r = 8.9, exp overflows float32 to inf and its gradient is
  inf / inf: the loss 0.696 at step 0, 0.53 at step 100, NaN from step 111, the weights NaN
  (the error 0.492 before, inf after; the constant answer's 0.492). Seed 1: 0.692, 0.68 at
  step 100, NaN from step 129 (0.453 before, inf after). mlberkeley/scae-pytorch#4 (the loss
  goes NaN after several epochs: exp gives inf inside a log-probability; the safe logsumexp
  fixed it); lzx1413/PytorchSSD#22 (why log_sum_exp subtracts x_max: to handle the overflow,
  the softmax trick). Cured: the same pooling through tf.reduce_logsumexp (the max taken out
  first): the loss 0.696 to 0.11, the error 0.492 to 0.0078."""
  x, y = chest_films(seed)
  return cases.Setup(chestxray8(seed, stable=cured), keras.optimizers.Adam(1e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind44_divide_unet3plus_log_dice_empty_slice', 'division_or_log', 'unet3plus_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='ivadomed/ivadomed#183; faustomilletari/VNet#3')
def _(seed, cured=False):
  """A UNet 3+-lite (full-scale skip connections) segmenting liver lesions in CT
  slices, 40% of which hold no lesion (an empty mask), trained with binary cross-entropy
  minus the log of each slice's soft Dice written without a smoothing term, Adam at 1e-3: a
  lesion-free slice has a Dice of 0 / |p| = 0 and -log(0) = inf: the loss inf at step 0 and
  NaN from step 1, the weights NaN (the error 0.064 before, inf after; the constant answer's
  0.063). Seed 1: the same (0.171 before; the constant's 0.055). ivadomed/ivadomed#183 (the
  Dice of an empty ground truth and an empty prediction is NaN; the loss needs a smoothing
  term); faustomilletari/VNet#3 (a Dice loss layer: "invalid value encountered in divide",
  the union is zero). Cured: smooth=1 in the numerator and the denominator: the loss 4.6 to
  0.44, the error 0.064 to 0.0042 in training mode (BatchNorm's moving statistics are still
  young at step 150: 0.238 in inference)."""
  x, m = lesion_slices(seed)
  return cases.Setup(unet3plus(seed), keras.optimizers.Adam(1e-3),
                     bce_log_dice_loss(1.0 if cured else 0.0),
                     data.stream(x, m, batch=16, seed=seed), 'binary_prob')


@add('blind44_fp16_tc_resnet_logmel_floor', 'precision', 'tc_resnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='qiuqiangkong/audioset_tagging_cnn#17; gfdb/wav2aug#14')
def _(seed, cured=False):
  """A TC-ResNet8-lite keyword spotter on raw 8 kHz audio with its log-mel
  front end inside the model, every layer in mixed_float16 (float16 arithmetic, the output
  Dense in float32), sparse cross-entropy, Adam at 1e-3: the clips are zero-padded after the
  word (digital silence), and in float16 the decibel floor max(mel, 1e-10) is max(mel, 0):
  log10(0) = -inf: the features, outputs and loss NaN from step 0, before any update (the
  measure's error inf before and after; the constant answer's 0.766). Seed 1: the same (the
  constant's 0.781). qiuqiangkong/audioset_tagging_cnn#17 (the log-mel filter bank layer gives
  NaN outputs under mixed precision, not in float32); gfdb/wav2aug#14 (a clamp at 1e-12 in
  fp16 is cast to 0; the fix computes that stage in fp32). Cured: the front end in float32
  (dtype='float32'), the rest still mixed_float16: the loss 2.07 to 0.0051, the error 0.875 to
  0."""
  x, y = command_waves(seed)
  return cases.Setup(tc_resnet(seed, front_dtype='float32' if cured else None),
                     keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind44_input_fc_ef_swath_edge_nan', 'bad_input', 'fc_ef_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='NRCan/geo-deep-learning#68; fieldsoftheworld/ftw-baselines#261')
def _(seed, cured=False):
  """An FC-EF (fully convolutional early fusion) change detector on pairs of
  four-band Sentinel-2 chips, binary cross-entropy on the change mask, Adam at 1e-3; 5% of the
  pairs reach past the swath's edge, where one date is nodata stored as NaN: a batch holding
  one gives a NaN loss and NaN weights (seed 0: NaN from step 0; the error 0.934 before, inf
  after; the constant answer's 0.026). Seed 1: 0.73, 0.69, NaN from step 2 (0.558 before, inf
  after). NRCan/geo-deep-learning#68 (NaN values in the input images make the loss NaN and
  nothing is learned; write them as 0); fieldsoftheworld/ftw-baselines#261 (nodata/NaN pixels
  propagate through the normalisation and spoil whole patches). Cured: the nodata set to 0
  (the band mean after standardising): the loss 1.16 to 0.23, the error 0.934 to 0.0017. The
  measure reads pairs without nodata (eval_data)."""
  x, m = scene_pairs(seed, nodata=0.05, fill=cured)
  clean, mc = scene_pairs(seed)
  return cases.Setup(fc_ef(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, m, batch=16, seed=seed), 'binary_prob',
                     eval_data=data.stream(clean, mc, batch=16, seed=seed))


@add('blind44_input_tabm_blank_lab_cells_nan', 'bad_input', 'tabm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='mlverse/tabnet#23; dreamquark-ai/tabnet#415')
def _(seed, cured=False):
  """A TabM-lite (a BatchEnsemble MLP of eight members) predicting 30-day
  readmission from fourteen standardised discharge features, binary cross-entropy on the
  logit, Adam at 1e-3; in 1% of the rows one lab result is a blank cell, read as NaN and fed
  as it is: a batch holding one gives a NaN loss and NaN weights (seed 0: the loss 0.693 at
  step 0, NaN from step 5; the error 0.453 before, inf after; the constant answer's 0.449).
  Seed 1: NaN from step 0 (0.484 before, inf after). mlverse/tabnet#23 (TabNet, like most
  deep learning packages, does not manage missing values; with them training starts and then
  fails with a misleading error); dreamquark-ai/tabnet#415 (a table with missing values: the
  model cannot take them; fill them, e.g. fillna(0), before training). Cured: the blanks set
  to 0 (the column mean): the loss 0.693 to 0.43, the error 0.453 to 0.203. The measure reads
  rows without blanks (eval_data)."""
  x, y = hospital_stays(seed, missing=0.01, fill=cured)
  clean, yc = hospital_stays(seed)
  return cases.Setup(tabm(seed), keras.optimizers.Adam(1e-3),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     data.stream(x, y, batch=64, seed=seed), 'binary_logit',
                     eval_data=data.stream(clean, yc, batch=64, seed=seed))
