"""A forty-sixth blind set of sick scenarios (the 'blind46' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind38.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (an SLSTM-lite soft sensor, a RainNet-lite
nowcasting U-Net, a Basset-lite DNA accessibility CNN, a K-NRM-lite product search ranker, a
CLSM-lite query-product matcher, an SSIM-autoencoder-lite surface inspector, a VW-SAE-lite soft
sensor, a TransLOB-lite order-book model, a DeepSEA-lite chromatin-feature CNN and a VQA-lite
image-and-question model fused late). Each builder takes `cured`: the same run with the
thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain
Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the
cured twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND46 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND46.add` with split='blind46'."""
  return BLIND46.add(name, expected, arch, split='blind46', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def debutanizer(seed, *, rows=2048, window=100, inputs=7):
  """A debutanizer column's process records in miniature (the classic soft-sensor set): seven
  measured variables (tray temperatures, reflux flow, pressures; standardised) driven by three
  slow hidden disturbances plus noise, and the butane content at the bottom (standardised), a
  lagged nonlinear response to them. (the last `window` readings (rows, window, inputs), the
  next analyser value (rows, 1))."""
  rng = np.random.RandomState(seed)
  n = rows + window + 16
  t = np.arange(n)
  hidden = np.stack([np.sin(2 * np.pi * t / p + rng.uniform(0, 6)) +
                     0.3 * np.cumsum(rng.randn(n)) / np.sqrt(n) for p in (53.0, 89.0, 131.0)])
  mix = rng.randn(inputs, 3)
  series = mix @ hidden + 0.2 * rng.randn(inputs, n)
  series = (series - series.mean(1, keepdims=True)) / series.std(1, keepdims=True)
  lagged = np.roll(hidden, 5, axis=1)
  target = np.tanh(lagged[0]) * lagged[1] + 0.5 * lagged[2] ** 2
  target = (target - target.mean()) / target.std()
  starts = rng.randint(0, n - window - 1, rows)
  x = np.stack([series[:, s:s + window].T for s in starts]).astype(np.float32)
  y = np.array([target[s + window] for s in starts], np.float32)[:, None]
  return x, y


def slstm_soft_sensor(seed, *, window=100, inputs=7, units=32):
  """An SLSTM-lite soft sensor (Yuan et al.'s supervised LSTM, 2020), in miniature: two
  stacked LSTMs of `units` with the ReLU activation the threads' code gives them (Keras's
  `activation='relu'`, the cell state then unbounded), the last state to Dense(1): the
  analyser value."""
  _seed(seed)
  x = keras.Input((window, inputs))
  h = L.LSTM(units, activation='relu', return_sequences=True)(x)
  h = L.LSTM(units, activation='relu')(h)
  return keras.Model(x, L.Dense(1)(h), name='slstm_soft_sensor_lite')


def radar_sequences(seed, *, rows=1024, size=32, frames=4):
  """Radar rain-rate composites in miniature (a RADOLAN-like nowcasting set): two to four rain
  cells (Gaussian blobs of random size and intensity, log-transformed rates in [0, ~1.5])
  advected by one motion vector per scene (up to 2 pixels a frame), growing or decaying
  slowly. (the last `frames` frames as channels (rows, size, size, frames), the next frame
  (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  cells = 4
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
  c0 = rng.uniform(4, size - 4, (rows, cells, 2))
  v = rng.uniform(-2, 2, (rows, 1, 2))
  width = rng.uniform(2.5, 6, (rows, cells))
  amp = rng.uniform(0.4, 1.0, (rows, cells)) * (rng.rand(rows, cells) < 0.8)
  grow = rng.uniform(-0.05, 0.05, (rows, cells))
  out = np.zeros((rows, frames + 1, size, size), np.float32)
  for t in range(frames + 1):
    c = c0 + v * t
    d2 = ((yy[None, None] - c[..., 0, None, None]) ** 2 +
          (xx[None, None] - c[..., 1, None, None]) ** 2)
    a = amp * (1 + grow * t)
    out[:, t] = np.sum(a[..., None, None] * np.exp(-d2 / (2 * width[..., None, None] ** 2)), 1)
  out = np.log1p(out).astype(np.float32)
  return np.transpose(out[:, :frames], (0, 2, 3, 1)), out[:, frames, ..., None]


def rainnet(seed, *, size=32, frames=4):
  """A RainNet-lite (Ayzel, Scheffer and Heistermann, 2020), in miniature: a U-Net over the
  stacked past frames (two 3x3 ReLU convolutions of 16, 32 and 64 channels with two 2x
  poolings, nearest upsampling, the skips concatenated) and a linear 1x1 convolution: the next
  frame's (log) rain rate."""
  _seed(seed)
  conv = lambda n: L.Conv2D(n, 3, padding='same', activation='relu')
  x = keras.Input((size, size, frames))
  e1 = conv(16)(conv(16)(x))
  e2 = conv(32)(conv(32)(L.MaxPooling2D()(e1)))
  b = conv(64)(conv(64)(L.MaxPooling2D()(e2)))
  d2 = conv(32)(conv(32)(L.Concatenate()([L.UpSampling2D()(b), e2])))
  d1 = conv(16)(conv(16)(L.Concatenate()([L.UpSampling2D()(d2), e1])))
  return keras.Model(x, L.Conv2D(1, 1)(d1), name='rainnet_lite')


def dna_peaks(seed, *, rows=2048, length=100, cells=6, rate=0.3, copies=3):
  """Regulatory DNA in miniature (an ENCODE-like peak set): random sequence of `length` bases,
  one-hot (A, C, G, T); each of `cells` cell types (or chromatin features) opens where its own
  8-base motif occurs, planted with probability `rate` (10% of its bases mutated); the label
  of each cell type 1 where the motif is planted (5% of labels flipped: noisy peaks). (one-hot
  sequences (rows, length, 4), multi-hot labels (rows, cells))."""
  rng = np.random.RandomState(seed)
  motifs = rng.randint(0, 4, (cells, 8))
  seq = rng.randint(0, 4, (rows, length))
  y = (rng.rand(rows, cells) < rate).astype(np.float32)
  for i in range(rows):
    for c in np.where(y[i] > 0)[0]:
      for _ in range(copies):
        m = np.where(rng.rand(8) < 0.1, rng.randint(0, 4, 8), motifs[c])
        p = rng.randint(0, length - 8)
        seq[i, p:p + 8] = m
  y = np.where(rng.rand(rows, cells) < 0.05, 1 - y, y).astype(np.float32)
  return np.eye(4, dtype=np.float32)[seq], y


def basset(seed, *, length=100, cells=4, init='glorot_uniform'):
  """A Basset-lite (Kelley, Snoek and Rinn, 2016), in miniature: three convolutions over the
  one-hot sequence (32 filters of 19, 11 and 7 bases, ReLU, max-pooled by 3, 4 and 4), Dense 64
  ReLU and Dense(`cells`) with a sigmoid: each cell type's accessibility. Every kernel drawn
  from `init`."""
  _seed(seed)
  x = keras.Input((length, 4))
  h = x
  for width, pool in ((19, 3), (11, 4), (7, 4)):
    h = L.MaxPooling1D(pool)(L.Conv1D(32, width, padding='same', activation='relu',
                                             kernel_initializer=init)(h))
  h = L.Dense(64, activation='relu', kernel_initializer=init)(L.Flatten()(h))
  return keras.Model(x, L.Dense(cells, activation='sigmoid', kernel_initializer=init)(h),
                     name='basset_lite')


def search_log(seed, *, rows=4096, qlen=4, tlen=12, cats=100, own=8, common=40, pairs=False):
  """Product-search logs in miniature (an e-commerce query set): `cats` product categories,
  each with `own` words of its own, plus `common` shared words (ids 1 to `common`); a query is
  `qlen` words of its category, a product title `tlen` words, 60% of them its category's.
  `pairs` False: each query with a title of its own category or (half the time) of another,
  the label whether the title is relevant ((rows, qlen + tlen) ids, (rows, 1) labels); True:
  each query with a relevant title ((rows, qlen + tlen) ids, the category (rows,)))."""
  rng = np.random.RandomState(seed)
  words = common + 1 + np.arange(cats * own).reshape(cats, own)
  c = rng.randint(0, cats, rows)
  other = (c + rng.randint(1, cats, rows)) % cats
  rel = np.ones(rows, bool) if pairs else rng.rand(rows) < 0.5
  tc = np.where(rel, c, other)
  q = words[c[:, None], rng.randint(0, own, (rows, qlen))]
  t = np.where(rng.rand(rows, tlen) < 0.6, words[tc[:, None], rng.randint(0, own, (rows, tlen))],
               rng.randint(1, common + 1, (rows, tlen)))
  x = np.concatenate([q, t], 1).astype(np.int32)
  if pairs:
    return x, c.astype(np.int32)
  return x, rel.astype(np.float32)[:, None]


class KernelPooling(L.Layer):
  """K-NRM's kernel pooling (Xiong et al., 2017): the query-title cosine matrix through 11 RBF
  kernels (an exact-match kernel at 1.0, sigma 1e-3, and ten soft ones from 0.9 to -0.9, sigma
  0.1), summed over the title, the log taken ("soft-TF") and summed over the query. `floor`
  None: log(x) as the paper writes it; a number: log(max(x, floor)) x 0.01 (K-NRM's code)."""

  def __init__(self, qlen, floor=None, **kwargs):
    super().__init__(**kwargs)
    self.qlen, self.floor = qlen, floor
    self.mu = tf.constant([1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9])
    self.sigma = tf.constant([1e-3] + [0.1] * 10)

  def call(self, e):
    e = tf.math.l2_normalize(tf.convert_to_tensor(e), -1)
    m = tf.matmul(e[:, :self.qlen], e[:, self.qlen:], transpose_b=True)[..., None]
    k = tf.reduce_sum(tf.exp(-tf.square(m - self.mu) / (2 * tf.square(self.sigma))), 2)
    if self.floor is None:
      return tf.reduce_sum(tf.math.log(k), 1)
    return tf.reduce_sum(tf.math.log(tf.maximum(k, self.floor)) * 0.01, 1)


def knrm(seed, *, qlen=4, tlen=12, vocab=841, floor=None):
  """A K-NRM-lite ranker (Xiong et al., 2017), in miniature: word embeddings of 32, the
  kernel pooling of the query against the title (`KernelPooling`, `floor`) and Dense(1) with a
  sigmoid: the probability that the product is relevant."""
  _seed(seed)
  x = keras.Input((qlen + tlen,), dtype='int32')
  feats = KernelPooling(qlen, floor)(L.Embedding(vocab, 32)(x))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(feats), name='knrm_lite')


def clsm(seed, *, qlen=4, tlen=12, vocab=841):
  """A CLSM-lite (Shen et al., 2014, the convolutional latent semantic model), in miniature:
  for the query and for the title, word embeddings of 32 (in place of letter-trigram hashing),
  a convolution over word trigrams (64, tanh), max pooling over positions and a semantic layer
  (Dense 32, tanh), one tower shared by both; every query scored against every title of the
  batch by cosine similarity: the (batch, batch) matrix, row i's relevant title title i."""
  _seed(seed)
  x = keras.Input((qlen + tlen,), dtype='int32')
  emb = L.Embedding(vocab, 32)
  conv = L.Conv1D(64, 3, padding='same', activation='tanh')
  semantic = L.Dense(32, activation='tanh')

  def tower(ids):
    return semantic(L.GlobalMaxPooling1D()(conv(emb(ids))))

  q = tower(L.Lambda(lambda t: t[:, :qlen])(x))
  d = tower(L.Lambda(lambda t: t[:, qlen:])(x))
  cos = L.Lambda(lambda t: tf.matmul(tf.math.l2_normalize(t[0], -1),
                                     tf.math.l2_normalize(t[1], -1), transpose_b=True))([q, d])
  return keras.Model(x, cos, name='clsm_lite')


def clsm_softmax_loss(stable, gamma=100.0):
  """CLSM's training loss: the posterior of the clicked title given the query,
  exp(gamma cos(q, d+)) / sum_d exp(gamma cos(q, d)) over the batch's titles, its negative log.
  naive (as the threads write it): the exps taken as they are; stable: the same through
  sparse_softmax_cross_entropy_with_logits (the max subtracted)."""

  def loss(y, cos):
    z = gamma * tf.cast(cos, tf.float32)
    y = tf.cast(tf.reshape(y, [-1]), tf.int32)
    if stable:
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z))
    e = tf.exp(z)
    p = tf.gather(e, y, batch_dims=1) / tf.reduce_sum(e, -1)
    return -tf.reduce_mean(tf.math.log(p))

  return loss


def in_batch(x, seed, batch):
  """Batches of the query-title pairs labelled with their own position (row i's relevant
  title is title i; the batch's other titles the negatives)."""
  ds = data.stream(x, np.zeros(len(x), np.int32), batch=batch, seed=seed)
  return ds.map(lambda f, _: (f, tf.range(batch, dtype=tf.int32)))


def fabric_patches(seed, *, rows=1024, size=32):
  """Textured-surface patches in miniature (an MVTec-like carpet/grid class): a woven pattern
  (two sinusoidal gratings of random period and phase), a slow illumination gradient and
  sensor noise, as 8-bit grey levels in [0, 255] (as the image reader gives them). (patches
  (rows, size, size, 1), the same patches: the reconstruction target)."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
  x = np.empty((rows, size, size), np.float32)
  for i in range(rows):
    p1, p2 = rng.uniform(4, 9, 2)
    g = (np.sin(2 * np.pi * xx / p1 + rng.uniform(0, 6)) *
         np.sin(2 * np.pi * yy / p2 + rng.uniform(0, 6)))
    light = rng.uniform(90, 160) + rng.uniform(-20, 20) * (xx / size) + rng.uniform(-20, 20) * (
        yy / size)
    x[i] = light + rng.uniform(30, 60) * g + 6 * rng.randn(size, size)
  x = np.clip(np.round(x), 0, 255)[..., None].astype(np.float32)
  return x, x


def ssim_autoencoder(seed, *, size=32):
  """An SSIM-autoencoder-lite (Bergmann et al., 2019), in miniature: the 8-bit patch rescaled
  to [0, 1], a convolutional encoder (4x4 stride-2 convolutions of 32 and 64, a 3x3 of 64,
  LeakyReLU, a 1x1 latent of 16), the mirrored transposed-convolution decoder and a sigmoid
  rescaled to [0, 255]: the reconstructed patch."""
  _seed(seed)
  act = lambda: L.LeakyReLU(0.2)
  x = keras.Input((size, size, 1))
  h = L.Rescaling(1 / 255.0)(x)
  h = act()(L.Conv2D(32, 4, strides=2, padding='same')(h))
  h = act()(L.Conv2D(64, 4, strides=2, padding='same')(h))
  h = act()(L.Conv2D(64, 3, padding='same')(h))
  h = L.Conv2D(16, 1)(h)
  h = act()(L.Conv2DTranspose(64, 4, strides=2, padding='same')(h))
  h = act()(L.Conv2DTranspose(32, 4, strides=2, padding='same')(h))
  out = L.Conv2D(1, 3, padding='same', activation='sigmoid')(h)
  return keras.Model(x, L.Rescaling(255.0)(out), name='ssim_autoencoder_lite')


def ssim_loss(in_float32, max_val=255.0, window=7):
  """1 - SSIM (Wang et al., 2004) over 7x7 windows (a uniform window, as Keras ports write
  it), C1 = (0.01 max_val)^2, C2 = (0.03 max_val)^2. in_float32 False: both images cast to
  the policy's compute dtype and computed there (float16 under mixed precision, as the
  threads' loss runs); True: both cast to float32 first (the fix)."""

  def loss(y, p):
    dt = tf.float32 if in_float32 else keras.mixed_precision.global_policy().compute_dtype
    y, p = tf.cast(y, dt), tf.cast(p, dt)
    pool = lambda t: tf.nn.avg_pool2d(t, window, 1, 'VALID')
    c1, c2 = tf.cast((0.01 * max_val) ** 2, dt), tf.cast((0.03 * max_val) ** 2, dt)
    mx, my = pool(y), pool(p)
    vx = pool(y * y) - mx * mx
    vy = pool(p * p) - my * my
    cxy = pool(y * p) - mx * my
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return tf.cast(1.0 - tf.reduce_mean(s), tf.float32)

  return loss


def column_records(seed, *, rows=4096, shutdown=0.0, drop=False):
  """A distillation unit's hourly records in miniature (a soft-sensor set): ten process
  variables (temperatures, pressures, flows; standardised) from four hidden operating factors,
  and the reflux ratio as the threads' feature engineering computes it, log(reflux flow /
  distillate flow) from the raw flows; the label the product's impurity (standardised). A
  fraction `shutdown` of the hours are upsets with the distillate valve shut (flow 0): the
  ratio log(x / 0) = inf. `drop`: those hours removed (the fix). (features (rows, 11),
  impurity (rows, 1))."""
  rng = np.random.RandomState(seed)
  f = rng.randn(rows, 4)
  pv = f @ rng.randn(4, 10) + 0.3 * rng.randn(rows, 10)
  pv = (pv - pv.mean(0)) / pv.std(0)
  reflux = 40 * np.exp(0.3 * f[:, 0])
  distillate = 25 * np.exp(0.3 * f[:, 1])
  off = rng.rand(rows) < shutdown
  distillate[off] = 0.0
  with np.errstate(divide='ignore'):
    ratio = np.log(reflux / distillate)
  y = np.tanh(f[:, 0] - f[:, 1]) + 0.5 * f[:, 2] + 0.1 * rng.randn(rows)
  y = (y - y.mean()) / y.std()
  x = np.concatenate([pv, ratio[:, None]], 1).astype(np.float32)
  y = y[:, None].astype(np.float32)
  if drop:
    x, y = x[~off], y[~off]
  return x, y


def vw_sae(seed, *, features=11):
  """A VW-SAE-lite soft sensor (Yuan et al., 2018, the variable-wise weighted stacked
  autoencoder), in miniature, fine-tuned end to end: the stacked encoder (Dense 32, 16, 8,
  sigmoid) and a Dense(1) regression head: the impurity."""
  _seed(seed)
  x = keras.Input((features,))
  h = x
  for n in (32, 16, 8):
    h = L.Dense(n, activation='sigmoid')(h)
  return keras.Model(x, L.Dense(1)(h), name='vw_sae_lite')


def lob_windows(seed, *, rows=3072, window=50, depth=10):
  """Limit-order-book windows in miniature (a FI-2010-like set, normalised per feature): the
  last `window` events of `depth` price levels a side (ask and bid prices and volumes, 4 x
  depth features), the next mid-price move labelled down, flat or up; a persistent order-flow
  imbalance leads the move. (windows (rows, window, 4 depth), labels 0, 1, 2)."""
  rng = np.random.RandomState(seed)
  drift = rng.randint(0, 3, rows) - 1.0
  imb = np.cumsum(0.15 * drift[:, None] + 0.3 * rng.randn(rows, window), 1)
  mid = np.cumsum(0.02 * rng.randn(rows, window), 1)
  lv = np.arange(1, depth + 1) * 0.05
  ask_p, bid_p = mid[..., None] + lv, mid[..., None] - lv
  ask_v = np.exp(-0.3 * imb[..., None] + 0.2 * rng.randn(rows, window, depth))
  bid_v = np.exp(0.3 * imb[..., None] + 0.2 * rng.randn(rows, window, depth))
  x = np.concatenate([ask_p, ask_v, bid_p, bid_v], -1)
  x = (x - x.mean((0, 1))) / x.std((0, 1))
  return x.astype(np.float32), (drift + 1).astype(np.int32)


class GlitchOnce(field.OneOffFault):
  """A one-off fault: the identity, except on its `at`-th training call one element of the
  activations reads NaN (flipped exponent bits in a device buffer); `at` None: no fault. The
  count lives outside the model (`field.OneOffFault`)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=11, value=np.nan, **kwargs)


def translob(seed, *, window=50, depth=10, fault=None):
  """A TransLOB-lite (Wallbridge, 2020), in miniature: five causal dilated convolutions (14
  channels, kernel 2, dilations 1 to 16, ReLU), LayerNorm, the position appended, two
  transformer blocks (two-head attention, a feed-forward of 32, LayerNorm), Dense 32 ReLU on
  the flattened sequence and Dense(3): the logits of down, flat, up. `fault`: a GlitchOnce
  after the convolutions."""
  _seed(seed)
  x = keras.Input((window, 4 * depth))
  h = x
  for d in (1, 2, 4, 8, 16):
    h = L.Conv1D(14, 2, dilation_rate=d, padding='causal', activation='relu')(h)
  h = GlitchOnce(fault)(h)
  h = L.LayerNormalization()(h)
  pos = L.Lambda(lambda t: tf.tile(tf.linspace(-1.0, 1.0, window)[None, :, None],
                                   [tf.shape(t)[0], 1, 1]))(h)
  h = L.Dense(16)(L.Concatenate()([h, pos]))
  for _ in range(2):
    h = L.LayerNormalization()(h + L.MultiHeadAttention(2, 8)(h, h))
    h = L.LayerNormalization()(h + L.Dense(16)(L.Dense(32, activation='relu')(h)))
  h = L.Dense(32, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(3)(h), name='translob_lite')


def deepsea(seed, *, length=100, features=6, multilabel=True):
  """A DeepSEA-lite (Zhou and Troyanskaya, 2015), in miniature: three convolutions over the
  one-hot sequence (32, 48, 64 filters of 8 bases, ReLU, max-pooled by 4 after the first two),
  Dense 64 ReLU and Dense(`features`): each chromatin feature's probability, by a sigmoid
  (`multilabel`, as DeepSEA has it) or a softmax over the features (as the threads wrote
  it)."""
  _seed(seed)
  x = keras.Input((length, 4))
  h = L.MaxPooling1D(4)(L.Conv1D(32, 8, padding='same', activation='relu')(x))
  h = L.MaxPooling1D(4)(L.Conv1D(48, 8, padding='same', activation='relu')(h))
  h = L.Conv1D(64, 8, padding='same', activation='relu')(h)
  h = L.Dense(64, activation='relu')(L.Flatten()(h))
  act = 'sigmoid' if multilabel else 'softmax'
  return keras.Model(x, L.Dense(features, activation=act)(h), name='deepsea_lite')


QUESTIONS = ((1, 2, 3, 4, 0), (5, 6, 7, 0, 0), (5, 6, 8, 9, 10))  # What digit is this; is it
# even; is it greater than four (word ids, 0 padding).


def digit_questions(seed, *, size=16):
  """Visual questions in miniature (a VQA-like set on the bundled digits): each image with
  one of three questions (what digit is this; is it even; is it greater than four) as word
  ids, the answer one of 12 (the ten digits, no, yes). (images (rows, size, size, 1) and
  questions (rows, 5) as one (rows, size * size + 5) array, answers (rows,))."""
  x, y = data.digits(size=size, rgb=False)
  rng = np.random.RandomState(seed)
  q = rng.randint(0, 3, len(x))
  answer = np.where(q == 0, y, np.where(q == 1, 10 + (y % 2 == 0), 10 + (y > 4)))
  words = np.array(QUESTIONS, np.float32)[q]
  return (np.concatenate([x.reshape(len(x), -1), words], 1).astype(np.float32),
          answer.astype(np.int32))


def vqa_lstm_cnn(seed, *, size=16, answers=12):
  """A "deeper LSTM Q + norm I" VQA-lite (Antol et al., 2015), in miniature, image and text
  fused late: a small CNN on the image (3x3 convolutions of 16 and 32, ReLU, each max-pooled,
  flattened, Dense 64, L2-normalised: "norm I"), word embeddings of 16 and an LSTM of 64 on the
  question, both through Dense 64 tanh, fused by the elementwise product, Dense 64 tanh and
  Dense(`answers`) without an activation: the answers' logits."""
  _seed(seed)
  x = keras.Input((size * size + 5,))
  img = L.Reshape((size, size, 1))(L.Lambda(lambda t: t[:, :size * size])(x))
  words = L.Lambda(lambda t: tf.cast(t[:, size * size:], tf.int32))(x)
  h = L.MaxPooling2D()(L.Conv2D(16, 3, padding='same', activation='relu')(img))
  h = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(h))
  h = L.Flatten()(h)
  i = L.UnitNormalization()(L.Dense(64)(h))
  q = L.LSTM(64)(L.Embedding(11, 16)(words))
  f = L.Multiply()([L.Dense(64, activation='tanh')(i), L.Dense(64, activation='tanh')(q)])
  return keras.Model(x, L.Dense(answers)(L.Dense(64, activation='tanh')(f)),
                     name='vqa_lstm_cnn_lite')


LR_RAIN = 0.1  # Pytorch-UNet's default rate in milesial/Pytorch-UNet#42.

# --- The scenarios. -------------------------------------------------------------------------


@add('blind46_explode_slstm_relu_soft_sensor', 'exploding_gradients', 'slstm_soft_sensor_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='AlexanderVNikitin/tsgm#59; Marcovaldong/lstmp.pytorch#2')
def _(seed, cured=False):
  """An SLSTM-lite soft sensor (two stacked LSTMs with activation='relu', as the threads' code
  has them) predicting a debutanizer's butane content from the last 100 readings of seven process
  variables, MSE, SGD at 0.1 with momentum 0.9 (the rate LSTM models are usually trained at with
  SGD, there with clipping) and no clipping: the unbounded ReLU cell states and their gradients
  grow through the 100 steps: the loss 1.32 at step 0, NaN from step 12 on, the weights NaN (the
  error 1.00 before, inf after; the constant answer's 0.82). Seed 1: 0.83 at step 0, NaN from
  step 4 (0.91 before, inf after). AlexanderVNikitin/tsgm#59 (an LSTM with a ReLU activation: the
  loss suddenly explodes to very high numbers); Marcovaldong/lstmp.pytorch#2 (an LSTM's loss
  turns NaN after some iterations, exploding gradients: on long sequences clip the gradients to a
  norm of 1.0). Cured: clipnorm=1.0 in the same SGD: the loss 1.32 to 0.011, the error 1.00 to
  0.010 (seed 1: 0.91 to 0.027)."""
  x, y = debutanizer(seed)
  opt = keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(slstm_soft_sensor(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind46_lr_rainnet_adam', 'learning_rate', 'rainnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='milesial/Pytorch-UNet#42; ugent-korea/pytorch-unet-segmentation#5')
def _(seed, cured=False):
  """A RainNet-lite U-Net nowcasting the next radar frame (log rain rates) from the last four,
  log-cosh loss (RainNet's), Adam at 0.1 (the default rate of the U-Net code in
  milesial/Pytorch-UNet#42): the first update throws the network out (the loss 0.030 at step 0,
  1.9e8 at step 1), the ReLUs die and it ends answering about the mean rain field (the step loss
  between 3 and 10 to the end; the error 0.070 before, 0.046 after; the constant answer's 0.040).
  Seed 1: 0.033, 2.0e8 at step 1 (0.086 before, 0.048 after; the constant's 0.041).
  milesial/Pytorch-UNet#42 (a U-Net trained at the default rate 0.1 gives a bad model: the rate
  is too large, try lower values); ugent-korea/pytorch-unet-segmentation#5 (a U-Net's output is
  all white after training: solved by reducing the learning rate, 1e-4 works). Cured: Adam at
  1e-4 (RainNet's rate): the loss 0.030 to 0.0010, the error 0.070 to 0.0022."""
  x, y = radar_sequences(seed)
  return cases.Setup(rainnet(seed), keras.optimizers.Adam(1e-4 if cured else LR_RAIN),
                     keras.losses.LogCosh(), data.stream(x, y, batch=16, seed=seed),
                     'regression')


@add('blind46_init_basset_random_normal_1', 'initialisation', 'basset_lite',
     doors=('trainer', 'fit'), steps=400,
     citation='VinceShieh/spark-ffm#12; mozilla/DeepSpeech#138')
def _(seed, cured=False):
  """A Basset-lite predicting four cell types' chromatin accessibility from 100-base DNA
  (one-hot), binary cross-entropy, Adam at 1e-3, every kernel initialised from a normal of
  standard deviation 1.0 (as tf.random_normal's default gives it, in the threads' hand-built
  layers): the pre-activations grow by the square root of each fan-in (76, 608, 224 and 256
  inputs), the logits are in the thousands, every sigmoid saturates: the loss 1.1e4 at step 0 and
  still 848 at step 399, the model never better than the constant (the error 0.49 before, 0.37
  after; the constant answer's 0.27). Seed 1: 4.8e4 to 1.2e3 (0.44 before, 0.38 after; the
  constant's 0.31). VinceShieh/spark-ffm#12 (weights initialised with too wide a normal: the
  pre-activation's deviation grows with the fan-in, exp of it overflows and the loss is NaN; a
  narrower initialisation is needed); mozilla/DeepSpeech#138 (with the default initialisation the
  loss stays infinite and never improves; initialising with stddev 0.1 makes it converge). Cured:
  glorot_uniform kernels (Keras's default): the loss 0.67 to 0.40, the error 0.29 to 0.12."""
  x, y = dna_peaks(seed, cells=4)
  init = 'glorot_uniform' if cured else keras.initializers.RandomNormal(stddev=1.0)
  return cases.Setup(basset(seed, init=init), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('blind46_log_knrm_exact_match_kernel', 'division_or_log', 'knrm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='NTMC-Community/MatchZoo#56; AdeDZY/K-NRM#10')
def _(seed, cured=False):
  """A K-NRM-lite ranker scoring product titles against search queries by kernel pooling over
  their word-embedding cosine matrix, binary cross-entropy on relevance, Adam at 1e-3; the
  soft-TF features are log(sum_j K(M_ij)) as the paper writes them, and the exact-match kernel
  (sigma 1e-3) is exp(-(cos - 1)^2 / 2e-6) = 0 for every query word that does not occur in the
  title: log(0) = -inf, the score inf - inf: the loss NaN from step 0, the weights NaN (the error
  0.57 before, inf after; the constant answer's 0.48). Seed 1: the same (0.46 before; the
  constant's 0.44). NTMC-Community/MatchZoo#56 (K-NRM's code takes log(max(x, 1e-10)) x 0.01: the
  1e-10 prevents log(0), the 0.01 keeps the next layer in range); AdeDZY/K-NRM#10 (the kernel
  pooling sum(log(sum(exp(-(x - mu)^2 / 2 sigma^2))))). Cured: log(max(x, 1e-10)) x 0.01 as
  K-NRM's code has it: the loss 0.77 to 0.66, the error 0.81 to 0.27."""
  x, y = search_log(seed)
  return cases.Setup(knrm(seed, floor=1e-10 if cured else None), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', data.stream(x, y, batch=64, seed=seed),
                     'binary_prob')


@add('blind46_softmax_clsm_naive_posterior', 'softmax_overflow', 'clsm_lite',
     doors=('trainer', 'fit'), steps=150, citation='fwd4/dssm#11; mlberkeley/scae-pytorch#4')
def _(seed, cured=False):
  """A CLSM-lite query-product matcher (one convolutional tower shared by queries and titles,
  cosine similarity, in-batch negatives) trained on the CLSM posterior with the smoothing factor
  gamma = 100 written by hand, -log(exp(gamma cos(q, d+)) / sum_d exp(gamma cos(q, d))), Adam at
  1e-3: the tanh towers' outputs of related texts start out closely aligned, gamma cos passes
  88.7, exp overflows and inf / inf is NaN: the loss NaN from step 0, the weights NaN (the error
  0.83 before, inf after; the constant answer's 0.97). Seed 1: the same (0.82 before).
  fwd4/dssm#11 (a DSSM's training loss: after a few epochs the softmax value is NaN);
  mlberkeley/scae-pytorch#4 (the loss goes NaN because exp gives inf; solved by the safe
  logsumexp). Cured: the same loss through sparse_softmax_cross_entropy_with_logits (the max
  subtracted): the loss 5.8 to 0.57, the error 0.83 to 0.11."""
  x, _ = search_log(seed, pairs=True)
  return cases.Setup(clsm(seed), keras.optimizers.Adam(1e-3), clsm_softmax_loss(stable=cured),
                     in_batch(x, seed, 32), 'classes')


@add('blind46_fp16_ssim_autoencoder_loss_in_half', 'precision', 'ssim_autoencoder_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='FluxML/Flux.jl#2178; Lightning-AI/torchmetrics#1290')
def _(seed, cured=False):
  """An SSIM-autoencoder-lite reconstructing 8-bit textured-surface patches (grey levels 0 to 255
  as the image reader gives them; the model rescales them itself), trained under the
  mixed_float16 policy on 1 - SSIM with max_val 255 (C1 = 6.5, C2 = 58.5), Adam at 1e-3, the loss
  computed in the policy's compute dtype (float16) as the threads' loss runs: (mu_x^2 + mu_y^2 +
  C1)(sigma_x^2 + sigma_y^2 + C2) is about 1e7 to 1e8 for mid-grey patches, past float16's 65504:
  inf / inf is NaN: the loss NaN at every step from step 0, every update skipped by the loss
  scaling, the model never moves (the error 1121 before and after; the constant answer's 1111).
  Seed 1: the same (1014 before and after; the constant's 1001). FluxML/Flux.jl#2178 (SSIM is
  numerically unstable in Float16: the constants and the statistics' products do not fit half
  precision); Lightning-AI/torchmetrics#1290 (SSIM returns wrong values under mixed precision;
  fixed by computing it in float32). Cured: both images cast to float32 inside the loss (the same
  float16 model): the loss 0.90 to 0.054, the error 1121 to 618."""
  x, y = fabric_patches(seed)
  return cases.Setup(ssim_autoencoder(seed), keras.optimizers.Adam(1e-3),
                     ssim_loss(in_float32=cured), data.stream(x, y, batch=16, seed=seed),
                     'regression')


@add('blind46_input_vwsae_reflux_ratio_inf', 'bad_input', 'vw_sae_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='microsoft/qlib#666; evandowning/deepreflect#11')
def _(seed, cured=False):
  """A VW-SAE-lite soft sensor (a stacked sigmoid encoder fine-tuned with a regression head)
  predicting a distillation product's impurity from ten standardised process variables and the
  reflux ratio, engineered as log(reflux flow / distillate flow) from the raw flows, MSE, Adam at
  1e-3; in 1% of the hours (upsets) the distillate valve is shut, flow 0, and the feature reads
  inf: the first batch holding one gives a NaN loss and NaN weights (seed 0: the loss 1.45, 1.39,
  NaN from step 7; the error 1.28 before, inf after; the constant answer's 1.01). Seed 1: NaN
  from step 2 (1.03 before, inf after; the constant's 0.93). microsoft/qlib#666 (some engineered
  features are -inf on the user's data: caused by dividing by zeros; drop them);
  evandowning/deepreflect#11 (the loss and MSE NaN: a feature divided by a zero in the
  normalisation; remove those features). Cured: the upset hours dropped: the loss 1.13 to about
  0.9, the error 1.28 to 0.72. The measure reads records without upsets (eval_data)."""
  x, y = column_records(seed, shutdown=0.01, drop=cured)
  clean, yc = column_records(seed, drop=True)
  return cases.Setup(vw_sae(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind46_transient_translob_glitch_once', 'transient', 'translob_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; facebookresearch/mmf#1251')
def _(seed, cured=False):
  """A TransLOB-lite (dilated causal convolutions, two transformer blocks) classifying the next
  mid-price move from 50 order-book events, cross-entropy, Adam at 1e-3, training normally (the
  loss 1.39 at step 0, 0.24 at step 50) when one element of the convolutions' output reads NaN
  once (`GlitchOnce`: its 90th training call, step 89 of a plain `fit`, step 85 after the
  measure's four training-mode calls; flipped bits in a buffer, not the data, the model or the
  settings): the gradient of that step is NaN, the convolution weights NaN from there on, the
  model answers the uniform distribution (the step loss ln 3 = 1.0986 to the end) and its outputs
  on the clean batches are not finite (the error 0.65 before, inf after; the constant answer's
  0.63). Seed 1: the same step (0.76 before, inf after). Rikorose/DeepFilterNet#30 (NaN losses in
  rare circumstances after some epochs, cause unknown; resuming from the last checkpoint helps);
  facebookresearch/mmf#1251 (NaN during training; resumed from a checkpoint, the NaN does not
  come back at the same iteration). Cured: the same run without the fault: the loss 1.39 to 0.40,
  the error 0.65 to 0.047."""
  x, y = lob_windows(seed)
  return cases.Setup(translob(seed, fault=None if cured else 90), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind46_mismatch_deepsea_softmax_multilabel', 'loss_output_mismatch', 'deepsea_lite',
     doors=('trainer', 'fit'), steps=400, citation='keras-team/keras#741; keras-team/keras#2166')
def _(seed, cured=False):
  """A DeepSEA-lite predicting six chromatin features (several can hold at once: a multi-label
  task) from 100-base DNA, with a softmax over the features and categorical_crossentropy as the
  threads wrote it, Adam at 1e-3: the softmax shares one unit of probability among the features,
  so with two or three present none passes 0.5, and the loss does not fit multi-hot targets: it
  climbs (3.5 at step 0, 2.8e4 at step 149, 5.4e6 at step 399) while the model answers "absent"
  almost everywhere (the error 0.37 before, 0.43 after; the constant answer's 0.37). Seed 1: 4.4
  to 6.7e6 (0.41 before, 0.45 after; the constant's 0.41). keras-team/keras#741 (a multi-label
  classifier trained with softmax does not converge: use sigmoid outputs and
  binary_crossentropy); keras-team/keras#2166 (for 0/1 labels with several ones:
  binary_crossentropy, not categorical). Cured: sigmoid outputs with binary_crossentropy
  (DeepSEA's): the loss 0.70 to 0.46, the error 0.54 to 0.19."""
  x, y = dna_peaks(seed + 100, rate=0.35)
  model = deepsea(seed, multilabel=cured)
  loss = 'binary_crossentropy' if cured else 'categorical_crossentropy'
  return cases.Setup(model, keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind46_mismatch_vqa_logits_as_probabilities', 'loss_output_mismatch', 'vqa_lstm_cnn_lite',
     doors=('trainer', 'fit'), steps=300, citation='xiph/LPCNet#97; tensorflow/docs#2102')
def _(seed, cured=False):
  """A "deeper LSTM Q + norm I" VQA-lite (a CNN on the image, an LSTM on the question, fused late
  by an elementwise product) answering three kinds of question about the bundled digits (which
  digit, is it even, is it greater than four: 12 answers), its last Dense without an activation
  (logits) but the loss SparseCategoricalCrossentropy() with its default from_logits=False, Adam
  at 1e-3: the loss reads the logits as probabilities (divided by their sum, clipped) and its
  gradient does not lead to the right answers: at seed 0 the error 0.97 before, 0.55 after (the
  constant answer's 0.65; training needs 0.52) with the step loss 6.1 to 1.9; at seed 1 the model
  ends on one answer, the step loss stuck at ln 12 = 2.485 (0.91 before, 0.94 after; the
  constant's 0.59). xiph/LPCNet#97 (the model's outputs are logits: set from_logits=True in
  sparse_categorical_crossentropy, or the loss clips them and takes their log);
  tensorflow/docs#2102 (a tutorial's classifier without a softmax stays near chance: set
  SparseCategoricalCrossentropy(from_logits=True)). Cured: from_logits=True: the loss 2.49 to
  0.40, the error 0.97 to 0.16 (300 steps both)."""
  x, y = digit_questions(seed)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=cured)
  return cases.Setup(vqa_lstm_cnn(seed), keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'classes')
