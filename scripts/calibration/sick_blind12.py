"""A twelfth blind set of sick scenarios (the 'blind12' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind11.py read for its
format only): each is the set-up and symptom of a public user report (cited in its docstring) on
an architecture no other registry entry uses (a stacked-hourglass-lite pose net, a
PixelCNN-lite, a MobileViT-lite, a denoising-diffusion noise-predictor MLP, a SchNet-lite force
model, a Temporal Fusion Transformer-lite, a DeepSpeech2-lite keyword model, a SAINT-lite tabular
net, a YOLO-lite detector, an ESIM-lite text matcher). Each builder takes `cured`: the same run
with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with
plain Keras `compile` + `fit` only: the sick run shows the reported symptom, the cured twin
passes runner's "did it train" measure in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND12 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND12.add` with split='blind12'."""
  return BLIND12.add(name, expected, arch, split='blind12', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def keypoint_scenes(seed, *, rows=1024, size=16, joints=2, sigma=2.0):
  """Pose estimation in miniature: a noisy 16x16 frame with a limb (a bright line) drawn between
  `joints` end points, each end point marked by a brighter blob; the targets one Gaussian heatmap
  per joint (peak 1, `sigma` pixels), as the stacked-hourglass recipe renders them. (x (rows,
  size, size, 1), heatmaps (rows, size, size, joints))."""
  rng = np.random.RandomState(seed)
  grid = np.arange(size)
  x = 0.1 * rng.randn(rows, size, size)
  y = np.zeros((rows, size, size, joints))
  for r in range(rows):
    pts = rng.uniform(2, size - 3, size=(joints, 2))
    for t in np.linspace(0, 1, 3 * size):
      i, j = np.round(pts[0] + t * (pts[-1] - pts[0])).astype(int)
      x[r, i, j] += 0.5
    for k, (pi, pj) in enumerate(pts):
      blob = np.exp(-((grid[:, None] - pi) ** 2 + (grid[None, :] - pj) ** 2) / (2 * sigma ** 2))
      x[r] += blob
      y[r, :, :, k] = blob
  return x[..., None].astype(np.float32), y.astype(np.float32)


def hourglass_residual(h, width):
  """The hourglass residual module (bottleneck: 1x1 to width / 2, 3x3, 1x1 to width, plus the
  input), ReLU before each convolution; no BatchNorm (the 'BN-free' ports)."""
  r = L.Conv2D(width // 2, 1, activation='relu')(L.ReLU()(h))
  r = L.Conv2D(width // 2, 3, padding='same', activation='relu')(r)
  return L.Add()([h, L.Conv2D(width, 1)(r)])


def hourglass(h, width, depth):
  """One hourglass (Newell et al., 2016), recursive: an upper residual branch at this scale; a
  lower branch max-pooled, a residual, the next hourglass (or a residual at the bottom), a
  residual, nearest upsampling; the two branches added."""
  up = hourglass_residual(h, width)
  low = hourglass_residual(L.MaxPooling2D()(h), width)
  low = hourglass(low, width, depth - 1) if depth > 1 else hourglass_residual(low, width)
  low = L.UpSampling2D()(hourglass_residual(low, width))
  return L.Add()([up, low])


def stacked_hourglass_lite(seed, *, size=16, width=32, stacks=2, joints=2, depth=2):
  """A stacked-hourglass-lite pose net: a Conv 3x3 stem, `stacks` hourglasses of `depth`, each
  followed by a 1x1 Conv + ReLU and a heatmap head (1x1 Conv to `joints`); between stacks the
  features and the remapped heatmaps are added back (the intermediate supervision path); the
  last stack's heatmaps are the output."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(width, 3, padding='same', activation='relu')(inputs)
  heat = None
  for s in range(stacks):
    f = L.Conv2D(width, 1, activation='relu')(hourglass(h, width, depth))
    heat = L.Conv2D(joints, 1)(f)
    if s < stacks - 1:
      h = L.Add()([h, L.Conv2D(width, 1)(f), L.Conv2D(width, 1)(heat)])
  return keras.Model(inputs, heat, name='stacked_hourglass_lite')


class MaskedConv2D(L.Layer):
  """PixelCNN's masked convolution (van den Oord et al., 2016): a k x k kernel whose taps at and
  after the centre pixel (type 'A', the first layer) or after it (type 'B') are zeroed, so that
  each output sees only the pixels above and to the left."""

  def __init__(self, filters, kernel, kind, activation=None, **kwargs):
    super().__init__(**kwargs)
    self.filters, self.kernel, self.kind = filters, kernel, kind
    self.activation = keras.activations.get(activation)

  def build(self, shape):
    k, c = self.kernel, shape[-1]
    mask = np.ones((k, k, c, self.filters), np.float32)
    mask[k // 2, k // 2 + (self.kind == 'B'):] = 0
    mask[k // 2 + 1:] = 0
    self.mask = mask
    self.w = self.add_weight(shape=(k, k, c, self.filters), initializer='glorot_uniform', name='w')
    self.b = self.add_weight(shape=(self.filters,), initializer='zeros', name='b')

  def call(self, x, training=False):
    w = self.w * tf.constant(self.mask, self.w.dtype)
    return self.activation(tf.nn.conv2d(x, w, 1, 'SAME') + self.b)


def binarised_digits(*, size=16):
  """The digits at size x size, binarised at 0.5 (PixelCNN's binarised MNIST in miniature): the
  input and the per-pixel target are the same image. (x, x)."""
  x, _ = data.digits(size=size, rgb=False)
  x = (x > 0.5).astype(np.float32)
  return x, x


def pixelcnn_lite(seed, *, size=16, width=32, blocks=4):
  """A PixelCNN-lite: a 7x7 type-A masked convolution, `blocks` residual blocks (ReLU, 1x1 Conv
  to width / 2, ReLU, 3x3 type-B masked convolution, ReLU, 1x1 Conv to width, added), ReLU, two
  1x1 convolutions: one Bernoulli logit per pixel."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = MaskedConv2D(width, 7, 'A')(inputs)
  for _ in range(blocks):
    r = L.Conv2D(width // 2, 1, activation='relu')(L.ReLU()(h))
    r = MaskedConv2D(width // 2, 3, 'B', activation='relu')(r)
    h = L.Add()([h, L.Conv2D(width, 1)(r)])
  h = L.Conv2D(width, 1, activation='relu')(L.ReLU()(h))
  return keras.Model(inputs, L.Conv2D(1, 1)(h), name='pixelcnn_lite')


def swiss_roll_diffusion(seed, *, rows=4096, steps=100, dims=16):
  """DDPM training pairs on a 2-D swiss roll (scaled to about unit size): a point x0, a step t of
  a linear beta schedule (1e-4 to 0.08 over `steps`), noise eps, the noised point x_t = sqrt(ab)
  x0 + sqrt(1 - ab) eps; the features [x_t, a sinusoidal embedding of t (`dims`)], the target eps.
  (x (rows, 2 + dims), eps (rows, 2))."""
  rng = np.random.RandomState(seed)
  u = 1.5 * np.pi * (1 + 2 * rng.rand(rows))
  x0 = np.stack([u * np.cos(u), u * np.sin(u)], axis=1) / 7.0 + 0.05 * rng.randn(rows, 2)
  betas = np.linspace(1e-4, 0.08, steps)
  abar = np.cumprod(1 - betas)
  t = rng.randint(0, steps, size=rows)
  eps = rng.randn(rows, 2)
  xt = np.sqrt(abar[t])[:, None] * x0 + np.sqrt(1 - abar[t])[:, None] * eps
  freqs = np.exp(-np.log(1000.0) * np.arange(dims // 2) / (dims // 2))
  emb = np.concatenate([np.sin(t[:, None] * freqs), np.cos(t[:, None] * freqs)], axis=1)
  return np.concatenate([xt, emb], axis=1).astype(np.float32), eps.astype(np.float32)


def ddpm_noise_mlp(seed, *, inputs=18, width=256, blocks=4, init='he_normal'):
  """A denoising-diffusion noise predictor for 2-D data (the toy-DDPM MLP): Dense(width) on
  [x_t, time embedding], `blocks` residual blocks (Dense(width) + ReLU, Dense(width), added, ReLU),
  Dense(2): the predicted noise. Every kernel initialised by `init`."""
  _seed(seed)
  x = keras.Input((inputs,))
  dense = lambda n, act=None: L.Dense(n, activation=act, kernel_initializer=init)
  h = dense(width, 'relu')(x)
  for _ in range(blocks):
    r = dense(width)(dense(width, 'relu')(h))
    h = L.ReLU()(L.Add()([h, r]))
  return keras.Model(x, dense(2)(h), name='ddpm_noise_mlp')


def molecules(seed, *, rows=2048, atoms=8, types=3):
  """Small molecules in miniature: 4 to `atoms` atoms of `types` kinds placed at random (no two
  closer than 0.9), the rest of the `atoms` slots zero padding (type 0, position (0, 0, 0)); the
  forces on the atoms of a Morse-like pair potential whose depth depends on the two kinds (zero
  on the padding). (x (rows, atoms, 4): position and kind, forces (rows, atoms * 3))."""
  rng = np.random.RandomState(seed)
  depth = 0.5 + rng.rand(types + 1, types + 1)
  depth = (depth + depth.T) / 2
  x = np.zeros((rows, atoms, 4))
  f = np.zeros((rows, atoms, 3))
  for r in range(rows):
    n = rng.randint(4, atoms + 1)
    pos = []
    while len(pos) < n:
      p = rng.uniform(-1.5, 1.5, size=3)
      if all(np.linalg.norm(p - q) > 0.9 for q in pos):
        pos.append(p)
    kind = rng.randint(1, types + 1, size=n)
    x[r, :n, :3], x[r, :n, 3] = pos, kind
    for i in range(n):
      for j in range(n):
        if i != j:
          v = x[r, i, :3] - x[r, j, :3]
          d = np.linalg.norm(v)
          e = np.exp(-1.5 * (d - 1.2))
          dedd = depth[kind[i], kind[j]] * 2 * (1 - e) * 1.5 * e  # d/dd of D (1 - e)^2
          f[r, i] -= dedd * v / d
  return x.astype(np.float32), (f / f.std()).reshape(rows, -1).astype(np.float32)


def shifted_softplus(x):
  return tf.nn.softplus(x) - tf.cast(np.log(2.0), x.dtype)


class SchNetForces(keras.Model):
  """A SchNet-lite (Schütt et al., 2017) trained on forces: an embedding of the atom kinds,
  `interactions` continuous-filter convolution blocks (the pairwise distances expanded in
  Gaussians (centres 0 to 4), a filter network Dense + shifted softplus x2, the filters times the
  neighbours' features summed, an atom-wise Dense + shifted softplus + Dense, added), an
  atom-wise MLP to a per-atom energy summed over the real atoms; the forces its negative
  gradient with respect to the positions (taken inside `call`). `neighbour_mask`: the distances
  of the self pairs and the padding replaced by 1 before the square root (schnetpack's fix);
  without it, d = sqrt(sum (r_i - r_j)^2) over all pairs, then the filters masked."""

  def __init__(self, *, atoms=8, dim=32, gaussians=16, interactions=2, neighbour_mask=False,
               **kwargs):
    super().__init__(**kwargs)
    self.atoms, self.neighbour_mask = atoms, neighbour_mask
    self.centres = tf.constant(np.linspace(0, 4, gaussians), tf.float32)
    self.embed = L.Embedding(4, dim)
    self.blocks = [(L.Dense(dim), L.Dense(dim), L.Dense(dim), L.Dense(dim), L.Dense(dim))
                   for _ in range(interactions)]
    self.out1, self.out2 = L.Dense(dim // 2), L.Dense(1)

  def energy(self, pos, kind):
    real = tf.cast(kind > 0, tf.float32)
    pair = real[:, :, None] * real[:, None, :] * (1 - tf.eye(self.atoms))[None]
    d2 = tf.reduce_sum(tf.square(pos[:, :, None, :] - pos[:, None, :, :]), axis=-1)
    if self.neighbour_mask:
      d2 = tf.where(pair > 0, d2, tf.ones_like(d2))
    d = tf.sqrt(d2)
    rbf = tf.exp(-10.0 * tf.square(d[..., None] - self.centres))
    h = self.embed(kind)
    for f1, f2, inp, a1, a2 in self.blocks:
      w = shifted_softplus(f2(shifted_softplus(f1(rbf)))) * pair[..., None]
      m = tf.einsum('bijf,bjf->bif', w, inp(h))
      h = h + a2(shifted_softplus(a1(m)))
    e = self.out2(shifted_softplus(self.out1(h)))[..., 0] * real
    return tf.reduce_sum(e, axis=1)

  def call(self, x, training=False):
    x = tf.convert_to_tensor(x)
    pos, kind = x[..., :3], tf.cast(x[..., 3], tf.int32)
    with tf.GradientTape() as tape:
      tape.watch(pos)
      e = self.energy(pos, kind)
    forces = -tape.gradient(e, pos)
    return tf.reshape(forces, [-1, self.atoms * 3])


def schnet_lite(seed, *, neighbour_mask=False):
  """`SchNetForces`, built on a batch of zeros."""
  _seed(seed)
  model = SchNetForces(neighbour_mask=neighbour_mask, name='schnet_lite')
  model(tf.zeros((1, 8, 4)))
  return model


def store_sales(seed, *, rows=2048, window=24, horizon=6):
  """Daily sales of shops in miniature (standardised): a level per shop, a weekly cycle, promotion
  days that lift sales, price changes that lower them and noise; five inputs per day (sales,
  promotion flag, price, day-of-week sine and cosine) for `window` days, the next `horizon` days'
  sales the target. (x (rows, window, 5), y (rows, horizon))."""
  rng = np.random.RandomState(seed)
  n = window + horizon
  t = np.arange(n)[None, :] + rng.randint(0, 7, size=(rows, 1))
  promo = (rng.rand(rows, n) < 0.15).astype(float)
  price = np.cumsum(0.05 * rng.randn(rows, n), axis=1)
  sales = (rng.uniform(-1, 1, size=(rows, 1)) + 0.5 * np.sin(2 * np.pi * t / 7) + 0.8 * promo
           - 0.5 * price + 0.1 * rng.randn(rows, n))
  x = np.stack([sales, promo, price, np.sin(2 * np.pi * t / 7), np.cos(2 * np.pi * t / 7)], -1)
  return x[:, :window].astype(np.float32), sales[:, window:].astype(np.float32)


def manual_softmax(z, axis=-1):
  """The softmax written out, as exp(z) / sum exp(z): no maximum subtracted."""
  e = tf.exp(z)
  return e / tf.reduce_sum(e, axis=axis, keepdims=True)


class GatedResidual(L.Layer):
  """TFT's gated residual network (GRN): Dense + ELU, Dense, a GLU gate, added to a linear skip,
  LayerNorm."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.d1, self.d2 = L.Dense(units, activation='elu'), L.Dense(units)
    self.gate = L.Dense(units, activation='sigmoid')
    self.value, self.skip = L.Dense(units), L.Dense(units)
    self.norm = L.LayerNormalization()

  def call(self, x, training=False):
    h = self.d2(self.d1(x))
    return self.norm(self.skip(x) + self.gate(h) * self.value(h))


class InterpretableAttention(L.Layer):
  """TFT's interpretable self-attention, one head, causal: q k^T (times `scale`) over the time
  steps, the future masked by -1e9 added, the weights by `softmax`, the weighted values, a
  Dense."""

  def __init__(self, units, softmax, scale, **kwargs):
    super().__init__(**kwargs)
    self.units, self.softmax, self.scale = units, softmax, scale
    self.q, self.k, self.v, self.o = (L.Dense(units) for _ in range(4))

  def call(self, x, training=False):
    t = tf.shape(x)[1]
    s = tf.matmul(self.q(x), self.k(x), transpose_b=True) * self.scale
    causal = tf.linalg.band_part(tf.ones([t, t]), -1, 0)
    w = self.softmax(s + (1.0 - causal) * -1e9)
    return self.o(tf.matmul(w, self.v(x)))


class TFTLite(keras.Model):
  """A Temporal Fusion Transformer-lite (Lim et al., 2021): a variable selection network (one
  Dense embedding per input, their weights from a GRN of all inputs through `softmax`), an LSTM
  encoder with a gated skip, a GRN, `InterpretableAttention(softmax, scale)` with a gated skip, a
  GRN on the last step, Dense(horizon): the next days' sales."""

  def __init__(self, *, horizon=6, features=5, units=32, softmax=tf.nn.softmax, scale=1.0,
               **kwargs):
    super().__init__(**kwargs)
    self.softmax = softmax
    self.embeds = [L.Dense(units) for _ in range(features)]
    self.select, self.select_grn = L.Dense(features), GatedResidual(units)
    self.lstm = L.LSTM(units, return_sequences=True)
    self.gates = [(L.Dense(units, activation='sigmoid'), L.Dense(units), L.LayerNormalization())
                  for _ in range(2)]
    self.grn, self.attention = GatedResidual(units), InterpretableAttention(units, softmax, scale)
    self.last, self.head = GatedResidual(units), L.Dense(horizon)

  def gated_skip(self, i, h, r):
    gate, value, norm = self.gates[i]
    return norm(h + gate(r) * value(r))

  def call(self, x, training=False):
    weights = self.softmax(self.select(self.select_grn(x)))
    embeds = tf.stack([e(x[..., i:i + 1]) for i, e in enumerate(self.embeds)], axis=2)
    h = tf.einsum('btf,btfu->btu', weights, embeds)
    h = self.grn(self.gated_skip(0, h, self.lstm(h)))
    h = self.gated_skip(1, h, self.attention(h))
    return self.head(self.last(h[:, -1]))


def tft_lite(seed, *, window=24, features=5, **kwargs):
  """`TFTLite(**kwargs)`, built on a batch of zeros."""
  _seed(seed)
  model = TFTLite(features=features, name='tft_lite', **kwargs)
  model(tf.zeros((1, window, features)))
  return model



def tone_keywords(seed, *, rows=1024, samples=2048, classes=4):
  """Spoken 'keywords' in miniature: four tone contours (rising, falling, a step, a warble) at a
  random pitch under a smooth envelope, a random gain (0.1 to 2, float audio in [-2, 2] as a
  loud recording has after gain), plus noise. (x (rows, samples, 1), labels)."""
  rng = np.random.RandomState(seed)
  t = np.arange(samples) / samples
  y = rng.randint(0, classes, size=rows)
  f0 = rng.uniform(100, 200, size=rows)[:, None]
  contours = [f0 * (1 + t), f0 * (2 - t), f0 * (1 + (t > 0.5)),
              f0 * (1.5 + 0.3 * np.sin(8 * np.pi * t))]
  phase = 2 * np.pi * np.cumsum(np.choose(y[:, None], contours), axis=1) / samples
  gain = rng.uniform(0.1, 2.0, size=(rows, 1))
  x = gain * np.sin(np.pi * t) ** 2 * np.sin(phase) + 0.01 * rng.randn(rows, samples)
  return x[..., None].astype(np.float32), y.astype(np.int32)


class ConvSpectrogram(L.Layer):
  """A log-power spectrogram as a strided Conv1D with fixed cosine and sine kernels (a
  rectangular `window`, hop `hop`, the first `bins` DFT bins; the conv-STFT front ends that
  export to any runtime): re^2 + im^2, then log(power + 1e-6)."""

  def __init__(self, window=512, hop=128, bins=64, **kwargs):
    super().__init__(**kwargs)
    self.window, self.hop = window, hop
    n, k = np.arange(window)[:, None], np.arange(bins)[None, :]
    kernel = np.concatenate([np.cos(2 * np.pi * n * k / window),
                             -np.sin(2 * np.pi * n * k / window)], axis=1)
    self.kernel = kernel[:, None, :].astype(np.float32)

  def call(self, x, training=False):
    z = tf.nn.conv1d(x, tf.constant(self.kernel, x.dtype), self.hop, 'VALID')
    re, im = tf.split(z, 2, axis=-1)
    return tf.math.log(re * re + im * im + tf.cast(1e-6, x.dtype))


def deepspeech_lite(seed, *, samples=2048, classes=4, front_dtype=None):
  """A DeepSpeech2-lite keyword model: `ConvSpectrogram` (dtype `front_dtype`; None: the global
  policy), a Conv1D(64, 3) + BatchNorm + ReLU over the frames, a bidirectional GRU(48), global
  average over time, Dense(classes, float32): the logits."""
  _seed(seed)
  inputs = keras.Input((samples, 1))
  h = ConvSpectrogram(dtype=front_dtype)(inputs)
  h = L.ReLU()(L.BatchNormalization()(L.Conv1D(64, 3, padding='same')(h)))
  h = L.Bidirectional(L.GRU(48, return_sequences=True))(h)
  return keras.Model(inputs, L.Dense(classes, dtype='float32')(L.GlobalAveragePooling1D()(h)),
                     name='deepspeech_lite')


def loan_table(seed, *, rows=4096, zero_income=0.003, log1p=False):
  """Loan applications in miniature: eight standardised numeric fields plus the log of the
  applicant's income (np.log; the few applicants with no declared income, a fraction
  `zero_income`, get log(0) = -inf; with `log1p`, np.log1p of the income in thousands, finite);
  default (1) more likely with high debt ratio, low income, short history. (x (rows, 9), y
  (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, 8)
  income = np.exp(rng.normal(3.5, 0.6, size=rows))  # In thousands.
  income[rng.rand(rows) < zero_income] = 0.0
  with np.errstate(divide='ignore'):
    li = np.log1p(income) if log1p else np.log(income)
  score = 1.2 * x[:, 0] - 0.8 * x[:, 1] + 0.6 * x[:, 2] * x[:, 3] - 1.0 * (np.log1p(income) - 3.5)
  y = (score + 0.5 * rng.randn(rows) > 0).astype(np.float32)
  return np.concatenate([x, li[:, None]], axis=1).astype(np.float32), y[:, None]


class IntersampleAttention(L.Layer):
  """SAINT's intersample attention (Somepalli et al., 2021): each row attends over the other rows
  of the batch (its feature embeddings flattened), one head, then a residual and LayerNorm."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.attention, self.norm = L.MultiHeadAttention(1, dim), L.LayerNormalization()

  def call(self, h):
    b, f, d = tf.shape(h)[0], h.shape[1], h.shape[2]
    flat = tf.reshape(h, [1, b, f * d])
    return self.norm(h + tf.reshape(self.attention(flat, flat), [b, f, d]))


class SAINTLite(keras.Model):
  """A SAINT-lite tabular classifier: a [CLS] token and one Dense(dim) embedding per numeric
  field, a transformer layer over the fields (MultiHeadAttention(2) + LayerNorm, a ReLU MLP +
  LayerNorm), `IntersampleAttention`, the [CLS] state into Dense(32, ReLU), Dense(1): the
  default logit."""

  def __init__(self, *, fields=9, dim=16, **kwargs):
    super().__init__(**kwargs)
    self.cls = self.add_weight(shape=(1, 1, dim), initializer='random_normal', name='cls')
    self.embed_w = self.add_weight(shape=(fields, dim), initializer='glorot_uniform', name='ew')
    self.embed_b = self.add_weight(shape=(fields, dim), initializer='zeros', name='eb')
    self.attention, self.norm1 = L.MultiHeadAttention(2, dim // 2), L.LayerNormalization()
    self.mlp1, self.mlp2, self.norm2 = L.Dense(2 * dim, activation='relu'), L.Dense(dim), \
        L.LayerNormalization()
    self.intersample = IntersampleAttention(dim)
    self.head1, self.head2 = L.Dense(32, activation='relu'), L.Dense(1)

  def call(self, x, training=False):
    h = x[..., None] * self.embed_w + self.embed_b
    h = tf.concat([tf.tile(self.cls, [tf.shape(x)[0], 1, 1]), h], axis=1)
    h = self.norm1(h + self.attention(h, h))
    h = self.norm2(h + self.mlp2(self.mlp1(h)))
    h = self.intersample(h)
    return self.head2(self.head1(h[:, 0]))


def saint_lite(seed, *, fields=9):
  """`SAINTLite`, built on a batch of zeros."""
  _seed(seed)
  model = SAINTLite(fields=fields, name='saint_lite')
  model(tf.zeros((2, fields)))
  return model


def box_scenes(seed, *, rows=1024, size=32, grid=4):
  """Object detection in miniature: a noisy 32x32 frame holding one bright rectangle (4 to 14
  pixels a side); the YOLO target grid (grid x grid x 5): in the cell holding the box centre,
  objectness 1, the centre's offset in the cell and the box's width and height as fractions of
  the frame; zeros elsewhere. (x (rows, size, size, 1), targets (rows, grid, grid, 5))."""
  rng = np.random.RandomState(seed)
  x = 0.1 * rng.randn(rows, size, size)
  y = np.zeros((rows, grid, grid, 5))
  cell = size / grid
  for r in range(rows):
    h, w = rng.randint(4, 15, size=2)
    i, j = rng.randint(0, size - h + 1), rng.randint(0, size - w + 1)
    x[r, i:i + h, j:j + w] += rng.uniform(0.6, 1.0)
    ci, cj = i + h / 2, j + w / 2
    gi, gj = min(int(ci // cell), grid - 1), min(int(cj // cell), grid - 1)
    y[r, gi, gj] = [1, ci / cell - gi, cj / cell - gj, h / size, w / size]
  return x[..., None].astype(np.float32), y.astype(np.float32)



class FlakyGradient(field.OneOffFault):
  """A one-off fault in the backward pass: identity forward; at its `at`-th training call only
  (None: never), one element of the gradient flowing back through it reads NaN (a flaky
  reduction kernel or a corrupted all-reduce buffer), the forward pass and that step's loss
  finite. The count lives outside the model's variables (`field.OneOffFault`, made under
  tf.init_scope): a guard that restores the model after a skipped step cannot replay it."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.nan, backward=True, **kwargs)


def yolo_lite(seed, *, size=32, grid=4, flaky=None):
  """A YOLO-lite detector: Conv 3x3 + BatchNorm + LeakyReLU(0.1) stages (16, 32, 64) each
  followed by a 2x2 max-pool (a 4x4 map), a `FlakyGradient(flaky)`, a Conv 3x3(64) + LeakyReLU,
  a 1x1 Conv to 5 per cell with a sigmoid: objectness, centre offset, width, height."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for f in (16, 32, 64):
    h = L.LeakyReLU(0.1)(L.BatchNormalization()(L.Conv2D(f, 3, padding='same', use_bias=False)(h)))
    h = L.MaxPooling2D()(h)
  h = FlakyGradient(flaky)(h)
  h = L.LeakyReLU(0.1)(L.Conv2D(64, 3, padding='same')(h))
  return keras.Model(inputs, L.Conv2D(5, 1, activation='sigmoid')(h), name='yolo_lite')


def yolo_loss(targets, outputs):
  """A YOLO-style sum-squared loss per image: the cells that hold an object, all five terms (the
  box terms x 5); the empty cells, all five terms pulled to zero x 0.5 (the 'no object' weight);
  averaged over the batch."""
  obj = targets[..., :1]
  sq = tf.square(outputs - targets)
  per = (tf.reduce_sum(obj * sq[..., :1] + 5.0 * obj * sq[..., 1:], axis=[1, 2, 3])
         + 0.5 * tf.reduce_sum((1 - obj) * sq, axis=[1, 2, 3]))
  return tf.reduce_mean(per)


def sentence_pairs(seed, *, rows=4096, vocab=50, length=8, hyp=4):
  """Text matching in miniature (an NLI-like entailment task): a premise of `length` token ids
  drawn from `vocab`; a hypothesis of `hyp` tokens, all taken from the premise (entailed, label
  1) or with two of them swapped for words absent from it (not entailed, 0). (x (rows, length +
  hyp) int32: the premise then the hypothesis, labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, length + hyp), np.int32)
  y = rng.randint(0, 2, size=rows)
  for r in range(rows):
    p = rng.choice(np.arange(1, vocab), size=length, replace=False)
    h = rng.choice(p, size=hyp, replace=False)
    if y[r] == 0:
      others = np.setdiff1d(np.arange(1, vocab), p)
      h[rng.choice(hyp, size=2, replace=False)] = rng.choice(others, size=2, replace=False)
    x[r, :length], x[r, length:] = p, h
  return x, y[:, None].astype(np.float32)


class SoftAlign(L.Layer):
  """ESIM's local inference (Chen et al., 2017): e = a b^T, each side summarised from the other
  through softmax(e), then [x, x~, x - x~, x * x~] for both sides."""

  def call(self, a, b):
    e = tf.matmul(a, b, transpose_b=True)
    a_t = tf.matmul(tf.nn.softmax(e, axis=2), b)
    b_t = tf.matmul(tf.nn.softmax(e, axis=1), a, transpose_a=True)
    enhance = lambda x, t: tf.concat([x, t, x - t, x * t], axis=-1)
    return enhance(a, a_t), enhance(b, b_t)


def esim_lite(seed, *, vocab=50, length=8, hyp=4, dim=32, head='sigmoid'):
  """An ESIM-lite matcher: a shared embedding and BiLSTM(dim) encoder for the premise and the
  hypothesis, `SoftAlign`, a Dense(dim, ReLU) projection and a shared BiLSTM(dim) composition,
  average and max pooling of both sides, Dense(dim, tanh), Dense(1, activation=`head`)."""
  _seed(seed)
  ids = keras.Input((length + hyp,), dtype='int32')
  embed, encode = L.Embedding(vocab, dim), L.Bidirectional(L.LSTM(dim, return_sequences=True))
  a, b = encode(embed(ids[:, :length])), encode(embed(ids[:, length:]))
  ma, mb = SoftAlign()(a, b)
  project = L.Dense(dim, activation='relu')
  compose = L.Bidirectional(L.LSTM(dim, return_sequences=True))
  va, vb = compose(project(ma)), compose(project(mb))
  pooled = L.Concatenate()([L.GlobalAveragePooling1D()(va), L.GlobalMaxPooling1D()(va),
                            L.GlobalAveragePooling1D()(vb), L.GlobalMaxPooling1D()(vb)])
  h = L.Dense(dim, activation='tanh')(pooled)
  return keras.Model(ids, L.Dense(1, activation=head)(h), name='esim_lite')


def mobilevit_block(h, dim, patch=2, heads=2):
  """A MobileViT block (Mehta and Rastegari, 2022): a local 3x3 Conv + a 1x1 Conv to `dim`,
  unfolded into patch x patch pixel groups, a transformer layer across the patches (per pixel
  position), folded back, a 1x1 Conv, concatenated with the block input, a 3x3 Conv."""
  hh, ww, c = h.shape[1], h.shape[2], h.shape[3]
  local = L.Conv2D(dim, 1)(L.Conv2D(c, 3, padding='same', activation='swish')(h))
  p = L.Reshape((hh // patch, patch, ww // patch, patch, dim))(local)
  p = L.Permute((2, 4, 1, 3, 5))(p)
  p = L.Reshape((patch * patch, (hh // patch) * (ww // patch), dim))(p)
  a = L.LayerNormalization()(p)
  p = L.Add()([p, L.MultiHeadAttention(heads, dim // heads, attention_axes=(2,))(a, a)])
  m = L.Dense(2 * dim, activation='swish')(L.LayerNormalization()(p))
  p = L.Add()([p, L.Dense(dim)(m)])
  p = L.Reshape((patch, patch, hh // patch, ww // patch, dim))(p)
  p = L.Reshape((hh, ww, dim))(L.Permute((3, 1, 4, 2, 5))(p))
  fused = L.Concatenate()([h, L.Conv2D(c, 1)(p)])
  return L.Conv2D(c, 3, padding='same', activation='swish')(fused)


def mobilevit_lite(seed, *, size=16, classes=10):
  """A MobileViT-lite: a strided 3x3 Conv stem (16) + BatchNorm + swish, an inverted-residual
  (MobileNetV2) block to 32 with stride 2, a `mobilevit_block` (dim 48), a 1x1 Conv(64) +
  swish, global average, Dense(classes): the logits."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Activation('swish')(L.BatchNormalization()(L.Conv2D(16, 3, 2, padding='same')(inputs)))
  e = L.Activation('swish')(L.BatchNormalization()(L.Conv2D(64, 1)(h)))
  e = L.Activation('swish')(L.BatchNormalization()(L.DepthwiseConv2D(3, 2, padding='same')(e)))
  h = L.BatchNormalization()(L.Conv2D(32, 1)(e))
  h = mobilevit_block(h, 48)
  h = L.Conv2D(64, 1, activation='swish')(h)
  return keras.Model(inputs, L.Dense(classes)(L.GlobalAveragePooling2D()(h)),
                     name='mobilevit_lite')


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind12_grad_hourglass_bn_free_no_clip', 'exploding_gradients', 'stacked_hourglass_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='JotaBravo/spacecraft-uda#17; thtrieu/darkflow#557; '
              'open-mmlab/mmdetection#5312')
def _(seed, cured=False):
  """A stacked-hourglass-lite pose net (two hourglasses of bottleneck residual modules, no
  BatchNorm, as in the BN-free ports) regressing two keypoint heatmaps on 16x16 frames, MSE,
  SGD + momentum 0.9 at 0.02 and no gradient clipping: the untrained heads answer far from the
  heatmaps (the loss 5.4 at step 0, against the constant answer's 0.036), the unnormalised
  residual stacks pass back a huge gradient and the first updates overshoot: the loss 117 at
  step 1, 4.7e8 at step 2 and NaN from step 3 (the error 4.6 before, inf after). Seed 1: 12.6,
  403, 1.6e24, NaN from step 4. JotaBravo/spacecraft-uda#17 (a keypoint heatmap net: "About
  Gradient Explosion Issues", the loss NaN in training); thtrieu/darkflow#557 ("NaN training loss
  *after* first iteration"; the maintainer: "A lot of NaN problems can actually be fixed by
  clipping the gradients"); open-mmlab/mmdetection#5312 (the FAQ's answer to loss=nan: "some
  models requires gradient clipping to stablize the training process"). Cured: clipnorm=1.0 at
  the same rate: the loss 5.4 to 0.018, the error 4.6 to 0.022 (seed 1: 2.8 to 0.022; the
  constant answer's 0.036 and 0.035)."""
  x, y = keypoint_scenes(seed)
  return cases.Setup(stacked_hourglass_lite(seed),
                     keras.optimizers.SGD(0.02, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind12_lr_pixelcnn_adam_too_high', 'learning_rate', 'pixelcnn_lite',
     doors=('trainer', 'fit'), steps=120,
     citation='OpenNMT/OpenNMT-tf#744; NLeSC/mcfly#43; '
              'facebookresearch/maskrcnn-benchmark#295')
def _(seed, cured=False):
  """A PixelCNN-lite (a 7x7 type-A masked convolution, four residual blocks of type-B masked
  convolutions, a Bernoulli logit per pixel) modelling binarised 16x16 digits, per-pixel
  sigmoid cross-entropy, Adam with the learning rate typed as 1.0 (meant 1e-3): the first update
  throws every weight by about 1, the loss is 0.69 at step 0 and about 4e12 at step 1, and then
  swings between -1e7 and 1e8 (fit's running mean; no NaN) while the net settles on the
  commonest answer, 'background' everywhere: after 120 steps the pixel error is 0.27 (0.55
  before; the constant answer's 0.30). Seeds 1 and 2: 0.29 and 0.57 after (the constant answer's
  0.29). OpenNMT/OpenNMT-tf#744 ("Model diverged with loss = NaN"; the maintainer: "The learning
  rate you set in the configuration is too large ... the default ... is 2.5e-4 but you then set
  2"); NLeSC/mcfly#43 (runs that "don't learn", a completely stable accuracy and loss: "These
  two models have a learning rate of >0.03"); facebookresearch/maskrcnn-benchmark#295 ("The
  simplest reason can be that the learning rate is too large and training diverges"). Cured:
  Adam at 1e-3: the loss 0.69 to 0.12, the pixel error 0.55 to 0.052."""
  x, y = binarised_digits()
  return cases.Setup(pixelcnn_lite(seed), keras.optimizers.Adam(1e-3 if cured else 1.0),
                     BCE(from_logits=True), data.stream(x, y, batch=32, seed=seed),
                     'binary_logit')


@add('blind12_lr_mobilevit_adam_no_warmup_too_high', 'learning_rate', 'mobilevit_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tahmid0007/VisionTransformer#1; lucidrains/vit-pytorch#16; '
              'lucidrains/vit-pytorch#45')
def _(seed, cured=False):
  """A MobileViT-lite (a strided conv stem, an inverted-residual block, a MobileViT block: local
  convolutions, a transformer across unfolded 2x2 patches, fold and fuse) classifying 16x16
  digits, Adam at 0.05 with no warm-up (a CNN recipe's rate): the loss 2.29 at step 0, then 17,
  11, 67, ... up to 312 in the first ten steps, and back to about 2.3 (ln 10, a uniform guess) by
  the end, no NaN; the error 0.98 before, 0.93 after (0.93 in training mode; the constant
  answer's 0.86). Seed 1: the same (up to 312, 2.33 at the end, error 0.92). tahmid0007/
  VisionTransformer#1 (the ViT loss climbs to 134 within the first epoch, accuracy 50 % on two
  classes); lucidrains/vit-pytorch#16 ("loss doesn't descend during training" with Adam at 5e-3;
  the author suggests 3e-4); lucidrains/vit-pytorch#45 (a ViT that "doesn't converge" over a
  range of rates). Cured: Adam at 1e-3: the loss 2.29 to 0.10, the error 0.98 to 0.039 in
  training mode (0.93 in inference mode: BatchNorm's moving statistics lag)."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(mobilevit_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.05),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- initialisation --------------------------------------------------------------------------


@add('blind12_init_ddpm_mlp_standard_normal_weights', 'initialisation', 'ddpm_noise_mlp',
     doors=('trainer', 'fit'), steps=150,
     citation='VinceShieh/spark-ffm#12; joe-siyuan-qiao/WeightStandardization#8; '
              'XingangPan/SCNN#82')
def _(seed, cured=False):
  """A denoising-diffusion noise-predictor MLP (Dense(256) on the noised 2-D point and a
  sinusoidal step embedding, four residual ReLU blocks, Dense(2)) on a swiss roll, MSE on the
  noise, Adam at 1e-3, every kernel initialised from N(0, 1) (RandomNormal(stddev=1.0), 'weights
  ~ normal' as a from-scratch port writes it) instead of a fan-scaled initialiser: each 256-wide
  layer multiplies the activations by about 11, the predicted noise is in the billions and the
  loss is 2.8e19 at step 0; Adam moves each weight by about 1e-3 a step and cannot rescale
  them: the loss is still 1.4e17 after 150 steps (no NaN; the error 2.6e19 before, 1.1e17 after,
  the constant answer's 1.0). Seed 1: 5.8e19 to 3.1e17. VinceShieh/spark-ffm#12 ("Weight
  Initialisation might be a cause for loss NaN": the standard deviation of W x grows with the
  fan-in; "Proper initialization of weight should make the Guassion distribution more
  narrowed"); joe-siyuan-qiao/WeightStandardization#8 (the loss NaN "even if my learning rate is
  set 0"; "The loss is nan, owing to the initialization"); XingangPan/SCNN#82 (a loss that is
  "too big and became Nan at the beginning": "Using smaller initialization value"). Cured:
  he_normal kernels: the loss 70 to 0.40, the error 72 to 0.38 (the constant answer's 1.0)."""
  x, y = swiss_roll_diffusion(seed)
  init = 'he_normal' if cured else keras.initializers.RandomNormal(stddev=1.0)
  return cases.Setup(ddpm_noise_mlp(seed, init=init), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=64, seed=seed), 'regression')


# --- division_or_log -------------------------------------------------------------------------


@add('blind12_div_schnet_force_zero_padded_distance', 'division_or_log', 'schnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='atomistic-machine-learning/schnetpack#6; keras-team/keras#9097; '
              'open-mmlab/mmrotate#205')
def _(seed, cured=False):
  """A SchNet-lite (an atom-kind embedding, two continuous-filter convolution blocks over
  Gaussian-expanded distances, an atom-wise MLP to energies) trained on forces, the negative
  gradient of the energy with respect to the positions taken inside the model, MSE, Adam at
  1e-3, on molecules of 4 to 8 atoms zero-padded to 8: the distances are sqrt(sum (r_i - r_j)^2)
  over all pairs, the self pairs and the padding included (their filters masked after), and
  those distances are exactly 0; the forward forces are finite (the loss 1.03 at step 0), but
  the training gradient goes through the derivative of sqrt at 0 (1 / (2 sqrt 0) = inf, times 0)
  and the first update writes NaN into the weights: the loss is NaN from step 1 (error 1.01
  before, inf after). Seed 1: 0.96, NaN from step 1. atomistic-machine-learning/schnetpack#6 (the
  force-training NaN: "the 0-padded distances for molecules of unequal size. When computing
  forces, this leads to a zero division due to the square root operation"); keras-team/keras#9097
  ("NaN loss when using euclidean distance ... (due to K.sqrt)" when two inputs are the same);
  open-mmlab/mmrotate#205 ("Sqrt function y = sqrt(x) has a notorious characteristic that the
  grad dy/dx is nan when x == 0"). Cured: schnetpack's neighbour mask, the self and padded
  distances replaced by 1 before the square root: the loss 1.03 to 0.047, the error 1.01 to
  0.039 (the constant answer's 1.00)."""
  x, y = molecules(seed)
  return cases.Setup(schnet_lite(seed, neighbour_mask=cured), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')



# --- softmax_overflow ------------------------------------------------------------------------


@add('blind12_exp_tft_attention_manual_softmax', 'softmax_overflow', 'tft_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='psychopa4/PFNL#9; mila-iqia/blocks#727; '
              'pyg-team/pytorch_geometric#53')
def _(seed, cured=False):
  """A Temporal Fusion Transformer-lite (a variable selection network, an LSTM encoder, a GRN,
  interpretable self-attention over the 24 days, 64 units) forecasting six days of shop sales,
  MSE, Adam at 1e-2, its softmaxes (the variable weights and the attention) written out as
  exp(z) / sum exp(z) and the attention scores unscaled q k^T (no 1 / sqrt(d)): the run trains
  (the loss 2.48 to 1.0 by step 2) while the scores grow; at step 4 one exceeds 88, exp
  overflows to inf, inf / inf = NaN, and the loss is NaN from step 4 (the weights NaN; the error
  2.51 before, inf after). Seeds 1 and 2: NaN from steps 11 and 5. psychopa4/PFNL#9 (a
  non-local block's softmax computed by hand: "f going to inf due to exponent of a pretty large
  number ... while tf.nn.softmax will handle this properly"); mila-iqia/blocks#727 ("enough
  energies to make exp overflow in some case, resulting NaN propagation all the way for machine
  translation"; stabilised "as its done in regular softmax"); pyg-team/pytorch_geometric#53 (GAT
  attention "produce 'nan' frequently ... doing exp straightly cause overflow, should it be
  better to sub the max beforehand"). Cured: tf.nn.softmax (the maximum subtracted), the scores
  still unscaled: the error 2.51 to 0.31 (seed 1: 2.71 to 0.22; the constant answer's 0.57 and
  0.58)."""
  x, y = store_sales(seed)
  return cases.Setup(tft_lite(seed, units=64, softmax=tf.nn.softmax if cured else manual_softmax),
                     keras.optimizers.Adam(1e-2), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')

# --- precision -------------------------------------------------------------------------------


@add('blind12_fp16_deepspeech_conv_stft_power', 'precision', 'deepspeech_lite',
     doors=('trainer', 'fit'), steps=100, precision='mixed_float16',
     citation='LIHANG-HONG/birdclef2023-2nd-place-solution#2; '
              'qiuqiangkong/audioset_tagging_cnn#17; adobe-research/convmelspec#3')
def _(seed, cured=False):
  """A DeepSpeech2-lite keyword model (a conv-STFT log-power front end: a strided Conv1D with fixed
  cosine and sine kernels over 512-sample windows, re^2 + im^2, log; a Conv1D + BatchNorm, a
  bidirectional GRU, a Dense head in float32) classifying four tone-contour keywords under
  mixed_float16, Adam at 1e-3: a loud tone (gain above about 1) gives a DFT magnitude near
  gain x 256 and a power near 65,536 or more, past the largest float16 (65,504): inf, log(inf) =
  inf, and the convolution after it mixes +inf and -inf into NaN; every batch holds such clips,
  so the loss is NaN at every step from step 0 (the loss-scale optimizer skips each update and
  halves its scale; the model never moves; the error inf before and after). Seed 1: the same.
  LIHANG-HONG/birdclef2023-2nd-place-solution#2 ("16-bit precision can't be used":
  MelSpectrogram "produces some inf values during audio -> spectrogram conversion");
  qiuqiangkong/audioset_tagging_cnn#17 (under mixed precision "I get sometimes nan values in the
  forward output of this layer", the log-mel filter bank, "I do not have this issue when I am
  not using mixed precision"); adobe-research/convmelspec#3 ("FP16 STFT updates": debug checks
  "to help validate FP16 overflow", clamping the values to the representable range). Cured: the
  front end computed in float32 (dtype='float32', the rest still mixed): the loss 1.41 to 0.14,
  the error 0.79 to 0.016 in training mode (0.33 in inference mode: BatchNorm's moving
  statistics lag; the constant answer's 0.73)."""
  x, y = tone_keywords(seed)
  return cases.Setup(deepspeech_lite(seed, front_dtype='float32' if cured else None),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind12_input_saint_log_zero_income', 'bad_input', 'saint_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='c2siorg/tensormap#408; microsoft/finnts#108; '
              'cschlaffner/PROTzilla2#41')
def _(seed, cured=False):
  """A SAINT-lite tabular classifier (a per-field embedding, a transformer over the fields, SAINT's
  intersample attention across the rows of the batch, a [CLS] head) predicting loan defaults,
  Adam at 1e-3, one field the log of the declared income taken with np.log: 14 of the 4,096
  applicants declared no income, log(0) = -inf, and the intersample attention spreads it over
  the whole batch: the run trains for two steps (0.71, 0.60) until the first batch holding such
  a row, step 2, whose gradients write NaN into 29 of the 30 variables; from then every output
  is NaN (the error on clean batches 0.45 before, inf after), while plain fit reports the loss
  at 0.693 for the rest of the run. Seed 1: the same from step 2 or 3. c2siorg/tensormap#408 (a
  log transform "silently corrupts dataset with -inf"; "Infinite values then poison downstream
  training (NaN losses ...)"); microsoft/finnts#108 ("NaN/Inf values getting created when taking
  the log of negative external regressor values during feature engineering");
  cschlaffner/PROTzilla2#41 ("log transform of 0 is -inf. Therefore they should get dropped").
  Cured: np.log1p of the income (finite at 0): the loss 0.71 to 0.18, the error 0.45 to 0.11
  (the constant answer's 0.45). The measure reads clean batches (eval_data) for both runs."""
  x, y = loan_table(seed, log1p=cured)
  clean_x, clean_y = loan_table(seed, log1p=True)
  return cases.Setup(saint_lite(seed), keras.optimizers.Adam(1e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit',
                     eval_data=data.stream(clean_x, clean_y, batch=32, seed=seed))


# --- transient -------------------------------------------------------------------------------


@add('blind12_transient_yolo_one_nan_gradient', 'transient', 'yolo_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='rwth-i6/returnn#1568; tanmoyio/sahajBERT#1; microsoft/dion#79')
def _(seed, cured=False):
  """A YOLO-lite detector (three Conv + BatchNorm + LeakyReLU stages to a 4x4 grid, a per-cell
  objectness and box) trained on one-box 32x32 frames, a YOLO-style sum-squared loss, Adam at
  1e-3, training normally (the loss 12.7 at step 0, 1.7 by step 11, still falling), where one
  element of the gradient flowing back into the head reads NaN at one backward pass
  (`FlakyGradient`: the 84th training-mode call; step 79 in a plain `fit` after the measure's four
  training-mode passes; a flaky kernel or a corrupted reduction buffer, not the data, the model or
  the settings): that step's loss is finite, the update writes NaN into the weights and, in plain
  `fit`, the loss is NaN from step 80 on (error 0.24 before, inf after); skipped, the run goes on
  training. Seed 1: the same step. rwth-i6/returnn#1568 ("I sometimes get 'nan' gradients, which
  break the training. Surprisingly, just restarting the training from the last checkpoint is often
  enough"; the request: "Ignore a single broken gradient"); tanmoyio/sahajBERT#1 (a trainer that
  "encountered NaN in the fp16 gradients" once in six hours; the PR lets it "ignore NaN gradients
  and continue training"); microsoft/dion#79 ("the intermittent NaN bug": "once a single rank's
  ... output goes non-finite, the bad value poisons the parameter ... and the run is dead"; the
  fix skips that step). Cured: the same run without the fault: the loss 12.7 to 0.36, the error
  0.24 to 0.016 in inference mode, 0.003 in training mode (the constant answer's 0.020)."""
  x, y = box_scenes(seed)
  return cases.Setup(yolo_lite(seed, flaky=None if cured else 84), keras.optimizers.Adam(1e-3),
                     yolo_loss, data.stream(x, y, batch=32, seed=seed), 'regression')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind12_mismatch_esim_single_unit_softmax', 'loss_output_mismatch', 'esim_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='keras-team/keras#126; keras-team/keras#4784; keras-team/keras#2711')
def _(seed, cured=False):
  """An ESIM-lite text matcher (a shared embedding and BiLSTM encoder, soft alignment, the
  enhanced [x, x~, x - x~, x * x~] features, a BiLSTM composition, average and max pooling)
  deciding whether a hypothesis is entailed by a premise, BinaryCrossentropy() (probabilities
  in), Adam at 3e-3, its last layer Dense(1, activation='softmax'): a softmax over one unit is
  1.0 for every input, so every pair is answered 'entailed' and the error never moves from the
  share of non-entailed pairs: 0.51 before and after 200 steps (the constant answer's 0.49); the
  loss (Keras reads the logit behind the softmax) creeps from 0.693 to 0.50 with no NaN. Seed 1:
  0.52 before and after (150 steps). keras-team/keras#126 (a Dense(..., 1, activation='softmax')
  output: "the loss and validation loss don't improve ... predict_proba gives all ones");
  keras-team/keras#4784 (accuracy not changing: "If your targets are [0,1], use a sigmoid output
  layer and binary_crossentropy loss"; "Once I set the output layer to sigmoid, I see accurcy
  improving"); keras-team/keras#2711 ("Loss not changing when training": "it's a binary
  application, therefore just change your activation function as sigmoid"). Cured: a sigmoid
  head: the error 0.48 to 0.31 (seed 1, not registered: 0.51 to 0.38, just short of the
  measure)."""
  x, y = sentence_pairs(seed)
  return cases.Setup(esim_lite(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(3e-3), BCE(), data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')
