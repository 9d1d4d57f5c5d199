"""A thirty-eighth blind set of sick scenarios (the 'blind38' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind33.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a deep Koopman autoencoder, a DBNet-lite text
detector, a PLE-lite multi-task click model, an iTransformer-lite solar forecaster, a
Wave-U-Net-lite speech denoiser, a DPR-lite dense retriever, a GDN-lite sensor-graph
forecaster, a DeepLOB-lite order-book model, a DIEN-lite click model and an EA-LSTM-lite
rainfall-runoff model). Each builder takes `cured`: the same run with the thread's remedy (the
registry calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit`
only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's
"did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND38 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND38.add` with split='blind38'."""
  return BLIND38.add(name, expected, arch, split='blind38', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def oscillator_rollouts(seed, *, rows=1024, horizon=50, dt=0.1):
  """Trajectories of a damped nonlinear pendulum in miniature (the systems deep Koopman nets
  learn): a random start (angle in [-2, 2] rad, velocity in [-1, 1] rad/s), integrated for
  `horizon` steps of `dt`. (start state (rows, 2), the rollout (rows, horizon, 2))."""
  rng = np.random.RandomState(seed)
  s = np.stack([rng.uniform(-2, 2, rows), rng.uniform(-1, 1, rows)], 1)
  start = s.astype(np.float32)
  out = np.empty((rows, horizon, 2), np.float32)
  for t in range(horizon):
    for _ in range(4):
      th, om = s[:, 0], s[:, 1]
      s = s + dt / 4 * np.stack([om, -np.sin(th) - 0.1 * om], 1)
    out[:, t] = s
  return start, out


class KoopmanRollout(L.Layer):
  """The latent rollout of a deep Koopman net: z_{t+1} = K z_t with K a learned linear map
  (glorot-uniform start), the `horizon` latent states stacked."""

  def __init__(self, horizon, **kwargs):
    super().__init__(**kwargs)
    self.horizon = horizon

  def build(self, shape):
    d = shape[-1]
    self.k = self.add_weight(name='koopman', shape=(d, d), initializer='glorot_uniform')

  def call(self, z):
    states = []
    for _ in range(self.horizon):
      z = tf.matmul(z, self.k)
      states.append(z)
    return tf.stack(states, 1)


def deep_koopman(seed, *, horizon=50, latent=16):
  """A deep Koopman autoencoder (Lusch, Kutz and Brunton, 2018), in miniature: an encoder
  (Dense 64, 64 tanh, a linear latent of `latent`), the latent rolled forward `horizon` steps by
  one learned linear map K, the shared decoder (Dense 64, 64 tanh, Dense 2) on every step: the
  predicted trajectory."""
  _seed(seed)
  x = keras.Input((2,))
  h = L.Dense(64, activation='tanh')(L.Dense(64, activation='tanh')(x))
  z = KoopmanRollout(horizon)(L.Dense(latent)(h))
  d = L.Dense(64, activation='tanh')(L.Dense(64, activation='tanh')(z))
  return keras.Model(x, L.Dense(2)(d), name='deep_koopman_lite')


def document_pages(seed, *, rows=768, size=32):
  """Scanned document crops in miniature (the pages a text detector reads): a paper background
  with grain and a faint shading, two to four text lines (runs of dark glyph-like strokes of
  random widths and gaps, 3 to 5 pixels high) and sometimes a ruled line (not text); pixels in
  [0, 1]; the label the text-region mask. (pages (rows, size, size, 1), masks of the same
  shape)."""
  rng = np.random.RandomState(seed)
  x = np.empty((rows, size, size), np.float32)
  m = np.zeros((rows, size, size), np.float32)
  for i in range(rows):
    page = 0.85 + 0.05 * rng.randn(size, size) + np.linspace(0, rng.uniform(-0.1, 0.1), size)
    top = rng.randint(1, 5)
    for _ in range(rng.randint(2, 5)):
      h = rng.randint(3, 6)
      if top + h >= size - 1:
        break
      c0, c1 = rng.randint(0, 8), rng.randint(size - 10, size)
      c = c0
      while c < c1:
        w = rng.randint(1, 4)
        page[top:top + h, c:c + w] -= rng.uniform(0.5, 0.7)
        c += w + rng.randint(1, 3)
      m[i, top:top + h, c0:c1] = 1.0
      top += h + rng.randint(2, 5)
    if rng.rand() < 0.5:
      page[rng.randint(0, size), :] -= 0.3
    x[i] = np.clip(page, 0, 1)
  return x[..., None], m[..., None]


def dbnet_lite(seed, *, size=32):
  """A DBNet-lite text detector (Liao et al., 2020), in miniature: a small feature pyramid
  (3x3 convolutions of 16 and 32 channels with ReLU at 1/1, 1/2 and 1/4 scale, the coarser maps
  upsampled and concatenated), a 3x3 convolution of 16 and the probability head (a 1x1
  convolution, sigmoid): the text probability of each pixel."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  c1 = L.Conv2D(16, 3, padding='same', activation='relu')(x)
  c2 = L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(c1)
  c3 = L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(c2)
  f = L.Concatenate()([c1, L.UpSampling2D(2)(c2), L.UpSampling2D(4)(c3)])
  f = L.Conv2D(16, 3, padding='same', activation='relu')(f)
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(f), name='dbnet_lite')


def ctr_logs(seed, *, rows=4096, fields=8, vocab=50):
  """Impression logs in miniature (an e-commerce feed): `fields` categorical fields (user
  segment, item category, position, ...), each an id of `vocab`; a click drawn from a logistic
  model of per-id effects and pairwise interactions, a conversion after a click from another.
  (ids (rows, fields), labels (rows, 2): click, conversion)."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  eff = rng.randn(fields, vocab)
  emb = rng.randn(fields, vocab, 4) * 0.6
  lin = eff[np.arange(fields), ids].sum(1) * 0.5
  e = emb[np.arange(fields), ids]
  inter = (e[:, 0] * e[:, 1]).sum(1) + (e[:, 2] * e[:, 3]).sum(1)
  click = rng.rand(rows) < 1 / (1 + np.exp(-3 * (lin + inter)))
  conv = click & (rng.rand(rows) < 1 / (1 + np.exp(-3 * (eff[4, ids[:, 4]] + inter))))
  return ids.astype(np.int32), np.stack([click, conv], 1).astype(np.float32)


def ple_lite(seed, *, fields=8, vocab=50, init='glorot_uniform'):
  """A PLE-lite multi-task click model (Tang et al., 2020, one extraction layer): field
  embeddings of 8 concatenated, two shared experts and one expert per task (Dense 32, ReLU),
  each task's softmax gate over its own and the shared experts, a tower per task (Dense 16,
  ReLU, Dense 1, sigmoid): the click and conversion probabilities. Every Dense kernel drawn from
  `init`."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  h = L.Flatten()(L.Embedding(vocab, 8)(x))
  dense = lambda n, act=None: L.Dense(n, activation=act, kernel_initializer=init)
  shared = [dense(32, 'relu')(h) for _ in range(2)]
  outs = []
  for _ in range(2):
    experts = L.Lambda(lambda t: tf.stack(t, 1))([dense(32, 'relu')(h)] + shared)
    gate = dense(3, 'softmax')(h)
    mixed = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1][..., None], 1))([experts, gate])
    outs.append(dense(1, 'sigmoid')(dense(16, 'relu')(mixed)))
  return keras.Model(x, L.Concatenate()(outs), name='ple_lite')


def solar_plants(seed, *, rows=2048, window=48, horizon=1, plants=6):
  """Hourly output of neighbouring solar plants in miniature (a regional PV fleet): a clear-sky
  bell each day (zero from dusk to dawn), the day's cloudiness shared by the region, each
  plant's own capacity and noise; in per-unit of capacity. (the last `window` hours of every
  plant (rows, window, plants), the next hour of plant 0 (rows, 1)): the night hours are
  exactly 0."""
  rng = np.random.RandomState(seed)
  hours = 24 * 200
  t = np.arange(hours)
  sun = np.clip(np.sin((t % 24 - 6) / 12 * np.pi), 0, None)
  cloud = np.repeat(rng.uniform(0.3, 1.0, hours // 24), 24)
  cap = rng.uniform(0.7, 1.0, plants)
  p = sun[:, None] * cloud[:, None] * cap * (1 + 0.05 * rng.randn(hours, plants))
  p = np.where(sun[:, None] > 0, np.clip(p, 0, None), 0.0)
  starts = rng.randint(0, hours - window - horizon, rows)
  x = np.stack([p[s:s + window] for s in starts])
  y = np.stack([p[s + window:s + window + horizon, 0] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


def itransformer_lite(seed, *, window=48, plants=6, width=32):
  """An iTransformer-lite (Liu et al., 2024), in miniature: each variate's whole window
  embedded as one token (Dense `width`), one transformer block over the variates (two-head
  attention, LayerNorm, a feed-forward of 64), the first variate's token projected to its next
  value."""
  _seed(seed)
  x = keras.Input((window, plants))
  tok = L.Dense(width)(L.Permute((2, 1))(x))
  a = L.MultiHeadAttention(2, width // 2)(tok, tok)
  h = L.LayerNormalization()(tok + a)
  f = L.Dense(width)(L.Dense(64, activation='relu')(h))
  h = L.LayerNormalization()(h + f)
  return keras.Model(x, L.Dense(1)(h[:, 0]), name='itransformer_lite')


def mape_loss(y, p):
  """MAPE as the threads write it: mean(|y - p| / |y|) x 100, no guard for a zero target."""
  return 100.0 * tf.reduce_mean(tf.abs(y - p) / tf.abs(y))


def noisy_speech(seed, *, rows=2048, samples=256):
  """Speech-like frames in miniature (a denoising set): voiced segments (a pitch of 100 to
  300 Hz with four harmonics under a syllable envelope, at 8 kHz) plus recorded-noise-like
  coloured noise at 0 to 10 dB SNR; waveforms in [-1, 1]. (noisy (rows, samples, 1), clean of
  the same shape)."""
  rng = np.random.RandomState(seed)
  t = np.arange(samples) / 8000.0
  clean = np.zeros((rows, samples), np.float32)
  for i in range(rows):
    f0 = rng.uniform(100, 300)
    env = np.sin(np.pi * np.clip((t - rng.uniform(0, 0.01)) / rng.uniform(0.02, 0.04), 0, 1))
    clean[i] = env * sum(rng.uniform(0.1, 0.3) / k * np.sin(2 * np.pi * k * f0 * t +
                                                             rng.uniform(0, 6))
                         for k in range(1, 5))
  white = rng.randn(rows, samples + 3)
  noise = (white[:, 3:] + 0.8 * white[:, 2:-1] + 0.5 * white[:, 1:-2]).astype(np.float32)
  snr = rng.uniform(0, 10, (rows, 1))
  p_s = np.mean(clean ** 2, 1, keepdims=True) + 1e-6
  noise *= np.sqrt(p_s / 10 ** (snr / 10) / np.mean(noise ** 2, 1, keepdims=True))
  return (clean + noise)[..., None].astype(np.float32), clean[..., None]


def wave_u_net(seed, *, samples=256, dtype='float32'):
  """A Wave-U-Net-lite speech denoiser (Stoller et al., 2018; Macartney and Weyde's speech
  version), in miniature: three downsampling blocks (a 1-D convolution of 15 taps, 16, 24, 32
  channels, LeakyReLU, decimation by 2), a bottleneck, three upsampling blocks (linear
  upsampling, the skip concatenated, a convolution of 5 taps), the input concatenated and a
  1x1 convolution with tanh: the clean waveform. Every layer in `dtype`."""
  _seed(seed)
  kw = dict(padding='same', dtype=dtype)
  x = keras.Input((samples, 1))
  h, skips = x, []
  for ch in (16, 24, 32):
    h = L.LeakyReLU(0.2, dtype=dtype)(L.Conv1D(ch, 15, **kw)(h))
    skips.append(h)
    h = L.Lambda(lambda t: t[:, ::2], dtype=dtype)(h)
  h = L.LeakyReLU(0.2, dtype=dtype)(L.Conv1D(40, 15, **kw)(h))
  for ch, skip in zip((32, 24, 16), skips[::-1]):
    h = L.UpSampling1D(2, dtype=dtype)(h)
    h = L.Concatenate(dtype=dtype)([h, skip])
    h = L.LeakyReLU(0.2, dtype=dtype)(L.Conv1D(ch, 5, **kw)(h))
  h = L.Concatenate(dtype=dtype)([h, L.Lambda(lambda t: t, dtype=dtype)(x)])
  return keras.Model(x, L.Conv1D(1, 1, activation='tanh', **kw)(h), name='wave_u_net_lite')


def query_passages(seed, *, rows=4096, qlen=6, plen=16, vocab=600, topics=40):
  """Question-passage pairs in miniature (a retrieval set): each passage drawn from one of
  `topics` topics (12 topic words of its own, some common words), its question a few of the
  passage's topic words plus common ones; token ids, 0 unused. (pairs (rows, qlen + plen):
  the question's ids then the passage's, the topic (rows,))."""
  rng = np.random.RandomState(seed)
  words = rng.choice(np.arange(41, vocab), (topics, 12), replace=False)
  t = rng.randint(0, topics, rows)
  x = np.empty((rows, qlen + plen), np.int32)
  for i in range(rows):
    own = words[t[i]]
    p = np.where(rng.rand(plen) < 0.6, rng.choice(own, plen), rng.randint(1, 41, plen))
    q = np.where(rng.rand(qlen) < 0.5, rng.choice(p, qlen), rng.randint(1, 41, qlen))
    x[i] = np.concatenate([q, p])
  return x, t.astype(np.int32)


def dpr_lite(seed, *, qlen=6, plen=16, vocab=600, width=128):
  """A DPR-lite dense retriever (Karpukhin et al., 2020), in miniature: a question encoder and
  a passage encoder (token embeddings of 64, mean-pooled, Dense 128 ReLU, Dense `width`), each
  question scored against every passage of the batch by the dot product (in-batch negatives):
  the (batch, batch) score matrix, row i's right answer passage i."""
  _seed(seed)
  x = keras.Input((qlen + plen,), dtype='int32')

  def encoder(ids):
    h = L.GlobalAveragePooling1D()(L.Embedding(vocab, 64)(ids))
    return L.LayerNormalization(epsilon=1e-12)(L.Dense(width)(L.Dense(128, activation='relu')(h)))

  q = encoder(L.Lambda(lambda t: t[:, :qlen])(x))
  p = encoder(L.Lambda(lambda t: t[:, qlen:])(x))
  scores = L.Lambda(lambda t: tf.matmul(t[0], t[1], transpose_b=True))([q, p])
  return keras.Model(x, scores, name='dpr_lite')


def in_batch_nce(stable, temperature=0.05):
  """The in-batch contrastive loss at `temperature`: naive (as the threads write it):
  -log(exp(s_ii / T) / sum_j exp(s_ij / T)); stable: the same through
  sparse_softmax_cross_entropy_with_logits (the max subtracted)."""

  def loss(y, scores):
    z = tf.cast(scores, tf.float32) / temperature
    y = tf.cast(tf.reshape(y, [-1]), tf.int32)
    if stable:
      return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z))
    e = tf.exp(z)
    picked = tf.gather(e, y, batch_dims=1)
    return -tf.reduce_mean(tf.math.log(picked / tf.reduce_sum(e, -1)))

  return loss


def in_batch_stream(x, seed, batch):
  """Batches of the pairs labelled with their own position (in-batch negatives: passage i is
  row i's answer)."""
  ds = data.stream(x, np.zeros(len(x), np.int32), batch=batch, seed=seed)
  return ds.map(lambda f, _: (f, tf.range(batch, dtype=tf.int32)))


def plant_sensors(seed, *, rows=2048, window=16, sensors=8, gaps=0.0, fill=False):
  """A plant's sensor network in miniature (a SWaT/WADI-like water treatment line): 8 sensors
  (levels, flows, pressures; standardised) driven by three shared hidden processes with lags,
  plus noise; each row the last `window` readings of every sensor and the next reading of each.
  A fraction `gaps` of the windows hold a dropout (a sensor offline for 3 to 8 readings, logged
  as NaN; `fill` carries the last good reading forward, the threads' fix). (windows (rows,
  sensors, window), next readings (rows, sensors))."""
  rng = np.random.RandomState(seed)
  n = rows + window + 64
  t = np.arange(n)
  procs = np.stack([np.sin(2 * np.pi * t / p + rng.uniform(0, 6)) for p in (37.0, 61.0, 113.0)])
  mix = rng.randn(sensors, 3)
  lags = rng.randint(0, 6, sensors)
  series = np.stack([mix[k] @ np.roll(procs, lags[k], axis=1) for k in range(sensors)])
  series = series + 0.1 * rng.randn(sensors, n)
  series = (series - series.mean(1, keepdims=True)) / series.std(1, keepdims=True)
  starts = rng.randint(0, n - window - 1, rows)
  x = np.stack([series[:, s:s + window] for s in starts]).astype(np.float32)
  y = np.stack([series[:, s + window] for s in starts]).astype(np.float32)
  for i in np.where(rng.rand(rows) < gaps)[0]:
    k, a = rng.randint(sensors), rng.randint(1, window - 3)
    b = min(window, a + rng.randint(3, 9))
    x[i, k, a:b] = x[i, k, a - 1] if fill else np.nan
  return x, y


def gdn_lite(seed, *, window=16, sensors=8, dim=16):
  """A GDN-lite (Graph Deviation Network, Deng and Hooi, 2021), in miniature: a learned
  embedding per sensor, the sensor graph as attention between the embeddings (softmax over
  the others), each sensor's window encoded (Dense `dim`) and its neighbours' encodings
  aggregated by that attention, the result times the sensor's embedding, Dense 32 ReLU, Dense
  1: every sensor's next reading."""
  _seed(seed)
  x = keras.Input((sensors, window))
  ids = L.Lambda(lambda t: tf.tile(tf.range(sensors)[None], [tf.shape(t)[0], 1]))(x)
  emb = L.Embedding(sensors, dim)(ids)
  enc = L.Dense(dim)(x)
  att = L.Lambda(lambda e: tf.nn.softmax(tf.matmul(e, e, transpose_b=True) -
                                         1e9 * tf.eye(sensors), -1))(emb)
  agg = L.Lambda(lambda t: tf.matmul(t[0], t[1]) + t[1])([att, enc])
  h = L.Dense(32, activation='relu')(L.Multiply()([agg, emb]))
  return keras.Model(x, L.Reshape((sensors,))(L.Dense(1)(h)), name='gdn_lite')


def order_book(seed, *, rows=3072, depth=10, window=32):
  """Limit-order-book snapshots in miniature (a FI-2010-like set): `window` snapshots of
  `depth` price levels on each side (prices and volumes, 4 x depth numbers, normalised as the
  set is), the mid-price's move over the next ten events labelled down, flat or up by a
  threshold; the order-flow imbalance leads the move. (snapshots (rows, window, 4 depth, 1),
  label 0, 1, 2)."""
  rng = np.random.RandomState(seed)
  x = np.empty((rows, window, 4 * depth), np.float32)
  y = np.empty(rows, np.int32)
  for i in range(rows):
    drift = rng.choice([-1.0, 0.0, 1.0])
    imb = np.cumsum(0.15 * drift + 0.3 * rng.randn(window))
    mid = np.cumsum(0.02 * rng.randn(window))
    lv = np.arange(1, depth + 1) * 0.05
    ask_p, bid_p = mid[:, None] + lv, mid[:, None] - lv
    ask_v = np.exp(-0.3 * imb[:, None] + 0.2 * rng.randn(window, depth))
    bid_v = np.exp(0.3 * imb[:, None] + 0.2 * rng.randn(window, depth))
    x[i] = np.concatenate([ask_p, ask_v, bid_p, bid_v], 1)
    y[i] = int(drift + 1)
  x = (x - x.mean((0, 1))) / x.std((0, 1))
  return x[..., None], y


class BadReadOnce(field.OneOffFault):
  """A one-off fault in the input pipeline's device copy: the identity, except on its `at`-th
  training call one element of the activations reads inf (a flipped exponent bit in a buffer);
  `at` None: no fault. The count lives outside the model (`field.OneOffFault`)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.inf, **kwargs)


def deeplob_lite(seed, *, depth=10, window=32, fault=None):
  """A DeepLOB-lite (Zhang, Zohren and Roberts, 2019), in miniature: convolutions across the
  book (1x2 stride 2 over price-volume pairs, 1x2 stride 2 over the sides, 1x`depth` over the
  levels; 16 channels, LeakyReLU, with 4x1 convolutions in time), an inception module (1x1,
  3x1 and max-pool branches of 16), an LSTM of 32 and Dense(3): the logits of down, flat, up.
  `fault`: a BadReadOnce after the first block."""
  _seed(seed)
  act = lambda: L.LeakyReLU(0.01)
  x = keras.Input((window, 4 * depth, 1))
  h = act()(L.Conv2D(16, (1, 2), strides=(1, 2))(x))
  h = act()(L.Conv2D(16, (4, 1), padding='same')(h))
  h = BadReadOnce(fault)(h)
  h = act()(L.Conv2D(16, (1, 2), strides=(1, 2))(h))
  h = act()(L.Conv2D(16, (4, 1), padding='same')(h))
  h = act()(L.Conv2D(16, (1, depth))(h))
  b1 = act()(L.Conv2D(16, 1, padding='same')(h))
  b2 = act()(L.Conv2D(16, (3, 1), padding='same')(act()(L.Conv2D(16, 1, padding='same')(h))))
  b3 = act()(L.Conv2D(16, 1, padding='same')(L.MaxPooling2D((3, 1), 1, padding='same')(h)))
  h = L.Reshape((window, 48))(L.Concatenate()([b1, b2, b3]))
  return keras.Model(x, L.Dense(3)(L.LSTM(32)(h)), name='deeplob_lite')


def behaviour_logs(seed, *, rows=4096, hist=10, items=60, cats=10):
  """Browsing histories in miniature (an Amazon-like click set): each user's last `hist` item
  ids (0 padding for short histories), a candidate item; the user drifts between two or three
  interest categories, the click drawn from the candidate's popularity (two items in five are
  hits) and whether its category is among the user's interests. (ids (rows, hist + 1): the
  history then the candidate, click (rows, 1))."""
  rng = np.random.RandomState(seed)
  cat_of = rng.randint(0, cats, items)
  popular = rng.rand(items) < 0.4
  by_cat = [np.where(cat_of == c)[0] for c in range(cats)]
  x = np.zeros((rows, hist + 1), np.int32)
  y = np.zeros((rows, 1), np.float32)
  for i in range(rows):
    interests = rng.choice(cats, rng.randint(2, 4), replace=False)
    n = rng.randint(4, hist + 1)
    for j in range(hist - n, hist):
      c = interests[min(len(interests) - 1, (j * len(interests)) // hist)]
      x[i, j] = rng.choice(by_cat[c]) if len(by_cat[c]) else 1
    if rng.rand() < 0.5:
      cand = rng.choice(by_cat[rng.choice(interests)])
    else:
      cand = rng.choice(by_cat[rng.choice(np.setdiff1d(np.arange(cats), interests))])
    click = rng.rand() < 0.05 + 0.6 * popular[cand] + 0.3 * (cat_of[cand] in interests)
    x[i, hist] = max(cand, 1)
    y[i] = click
  return x, y


def dien_lite(seed, *, hist=10, items=60, probability='sigmoid'):
  """A DIEN-lite click model (Zhou et al., 2019), in miniature: item embeddings of 16, an
  interest-extractor GRU of 32 over the history, attention of the candidate on its states
  (a softmax over the non-padding steps), an interest-evolving GRU over the attention-weighted
  states, its last state with the candidate's embedding, Dense 64, 32 (ReLU) and Dense(1) with
  `probability` ('sigmoid' as DIEN has; 'softmax' as the threads wrote it)."""
  _seed(seed)
  x = keras.Input((hist + 1,), dtype='int32')
  e = L.Embedding(items, 16)(x)
  seq, cand = e[:, :hist], e[:, hist]
  states = L.GRU(32, return_sequences=True)(seq)
  keys = L.Dense(16)(states)
  score = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1][:, None], -1))([keys, cand])
  mask = L.Lambda(lambda t: tf.cast(tf.not_equal(t[:, :hist], 0), tf.float32))(x)
  att = L.Lambda(lambda t: tf.nn.softmax(t[0] - 1e9 * (1 - t[1]), -1))([score, mask])
  evolved = L.GRU(32)(L.Lambda(lambda t: t[0] * t[1][..., None])([states, att]))
  h = L.Concatenate()([evolved, cand])
  h = L.Dense(32, activation='relu')(L.Dense(64, activation='relu')(h))
  return keras.Model(x, L.Dense(1, activation=probability)(h), name='dien_lite')


def catchments(seed, *, rows=2048, days=30, missing=0.0):
  """Rainfall-runoff records in miniature (a CAMELS-like set): daily forcings of each basin
  (precipitation, temperature, radiation; standardised) over the last `days` days, five static
  attributes (area, slope, forest share, soil depth, aridity; standardised), and the next day's
  discharge (standardised), a leaky-bucket response to the rain whose speed the attributes set.
  A fraction `missing` of the discharges are gauge gaps, written -999 as CAMELS writes them
  (the set's documented sentinel). (forcings (rows, days, 3) and attributes (rows, 5) as one
  (rows, days, 8) array, the attributes repeated each day; discharge (rows, 1))."""
  rng = np.random.RandomState(seed)
  static = rng.randn(rows, 5)
  rain = np.maximum(rng.randn(rows, days + 1) - 0.3, 0) * rng.uniform(0.5, 2, (rows, 1))
  temp = rng.randn(rows, days + 1)
  rad = 0.5 * temp + rng.randn(rows, days + 1)
  k = 1 / (1 + np.exp(-(0.8 * static[:, 0] - 0.6 * static[:, 2] + 0.4 * static[:, 1])))
  k = 0.5 + 0.45 * k
  store = np.zeros(rows)
  for t in range(days + 1):
    store = k * store + rain[:, t] * (1 - 0.2 * np.tanh(temp[:, t]))
  q = (1 - k) * store
  q = (q - q.mean()) / q.std()
  dyn = np.stack([rain[:, :days], temp[:, :days], rad[:, :days]], -1)
  dyn = (dyn - dyn.mean((0, 1))) / dyn.std((0, 1))
  x = np.concatenate([dyn, np.repeat(static[:, None], days, 1)], -1)
  q = np.where(rng.rand(rows) < missing, -999.0, q)
  return x.astype(np.float32), q[:, None].astype(np.float32)


class EALSTMCell(L.Layer):
  """The Entity-Aware LSTM cell (Kratzert et al., 2019): its input gate set once from the
  basin's static attributes (the last 5 features), the forget and output gates and the cell
  input from the dynamic forcings and the state, as an LSTM's."""

  def __init__(self, units, n_static=5, **kwargs):
    super().__init__(**kwargs)
    self.units, self.n_static = units, n_static
    self.state_size = [units, units]

  def build(self, shape):
    d = shape[-1] - self.n_static
    self.gate_i = L.Dense(self.units, activation='sigmoid')
    self.gate_i.build((None, self.n_static))
    self.w = self.add_weight(name='w', shape=(d, 3 * self.units), initializer='glorot_uniform')
    self.u = self.add_weight(name='u', shape=(self.units, 3 * self.units),
                             initializer='orthogonal')
    self.b = self.add_weight(name='b', shape=(3 * self.units,), initializer='zeros')

  def call(self, x, states):
    h, c = states
    dyn, static = x[:, :-self.n_static], x[:, -self.n_static:]
    f, o, g = tf.split(tf.matmul(dyn, self.w) + tf.matmul(h, self.u) + self.b, 3, -1)
    c = tf.sigmoid(f + 1.0) * c + self.gate_i(static) * tf.tanh(g)
    h = tf.sigmoid(o) * tf.tanh(c)
    return h, [h, c]


def ealstm_lite(seed, *, days=30, units=32):
  """An EA-LSTM-lite rainfall-runoff model (Kratzert et al., 2019), in miniature: an
  Entity-Aware LSTM of `units` over the basin's forcings, its last state to Dense(1): the next
  day's discharge."""
  _seed(seed)
  x = keras.Input((days, 8))
  h = L.RNN(EALSTMCell(units))(x)
  return keras.Model(x, L.Dense(1)(h), name='ealstm_lite')


# --- The scenarios. -------------------------------------------------------------------------


@add('blind38_explode_koopman_rollout_sgd', 'exploding_gradients', 'deep_koopman_lite',
     doors=('trainer', 'fit'), steps=150, citation='xl402/deep-koopman#2; dynamicslab/pykoopman#45')
def _(seed, cured=False):
  """A deep Koopman autoencoder learning a damped pendulum from its start state,
  the latent state rolled forward 50 steps by one learned linear map K (the trajectory loss
  over all 50, MSE), SGD at 0.01 with momentum 0.9: the gradient through K^50 swings with K's
  spectral radius; at seed 0 the step losses jump (1.23 at step 0, 0.93 at step 50, still 0.64
  at step 149) and the model does not train (the error 1.35 before, 0.63 after; the constant
  answer's 0.65). Seed 1: the loss NaN from step 54 on, the weights NaN (1.24 before, inf
  after). xl402/deep-koopman#2 (a pendulum Koopman model's loss does not fall, then becomes
  very large: gradient explosion through the recurrent rollout); dynamicslab/pykoopman#45 (NaN
  in training with clean data, suspected gradient explosion). Cured: clipnorm=1.0 in the same
  SGD: the loss 1.23 to 0.059 at step 149, the error 1.35 to 0.12 (seed 1: 1.24 to 0.16)."""
  x, y = oscillator_rollouts(seed)
  opt = keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(deep_koopman(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind38_lr_dbnet_adam_01', 'learning_rate', 'dbnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='milesial/Pytorch-UNet#255; meetps/pytorch-semseg#134')
def _(seed, cured=False):
  """A DBNet-lite text detector segmenting text lines in scanned document crops,
  binary cross-entropy on the probability map, Adam at 0.1: the first update throws the
  network out (the loss 0.68 at step 0, 328 at step 1), the ReLUs die and it answers
  background everywhere from then on: the loss 0.55 to 0.60, the error 0.32 before and 0.272
  after, the all-background answer's 0.272. Seed 1: 0.70, 86.6 at step 1, 0.61 at step 149
  (the error 0.70 before, 0.266 after, the constant's 0.266). milesial/Pytorch-UNet#255 (the
  loss stays put and the prediction is all black: the learning rate seems too high);
  meetps/pytorch-semseg#134 (the training loss does not change: set a smaller learning rate).
  Cured: Adam at 1e-3: the loss 0.68 to 0.067, the error 0.32 to 0.024."""
  x, m = document_pages(seed)
  return cases.Setup(dbnet_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     'binary_crossentropy', data.stream(x, m, batch=16, seed=seed),
                     'binary_prob')


@add('blind38_init_ple_zeros', 'initialisation', 'ple_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#16539; fizyr/keras-retinanet#712')
def _(seed, cured=False):
  """A PLE-lite multi-task click model (shared and task experts, gates, towers)
  predicting click and conversion from eight categorical fields, binary cross-entropy on both,
  Adam at 1e-3, every Dense kernel initialised to zeros (kernel_initializer='zeros'): every
  hidden unit outputs ReLU(0) = 0 and gets no gradient, only the output biases move: the loss
  0.6931 to 0.688 in 150 steps, the error 0.467 before and 0.420 after (the constant answer's
  0.467; training needs 0.374). Seed 1: 0.6931 to 0.688, the error 0.426 before and after (the
  constant's 0.426). keras-team/keras#16539 (a layer's kernel set to one constant: the bias
  learns, the kernel never changes); fizyr/keras-retinanet#712 (zero-initialised kernels: all
  units compute the same and get the same updates, the symmetry is never broken: initialise at
  random). Cured: glorot_uniform kernels (Keras's default): the loss 0.692 to 0.658, the error
  0.518 to 0.346."""
  x, y = ctr_logs(seed)
  return cases.Setup(ple_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind38_divide_itransformer_mape_night', 'division_or_log', 'itransformer_lite',
     doors=('trainer', 'fit'), steps=150, citation='unit8co/darts#2517; dmlc/xgboost#7586')
def _(seed, cured=False):
  """An iTransformer-lite forecasting the next hour of a solar plant from the
  last 48 hours of six neighbouring plants, trained with MAPE written by hand (mean(|y - p| /
  |y|) x 100), Adam at 1e-3: the night hours are exactly 0, |y - p| / 0 is inf: the loss inf at
  step 0 and NaN from step 1, the weights NaN (the error 0.78 before, inf after; the constant
  answer's 0.044). Seed 1: the same (1.91 before; the constant's 0.058). unit8co/darts#2517
  (a forecaster trained with MapeLoss predicts only NaN; other losses work);
  dmlc/xgboost#7586 (MAPE of a zero label is a division by zero: NaN / inf; MAPE is not for
  series with zeros). Cured: MAE: the loss 0.73 to 0.042, the error 0.78 to 0.0056."""
  x, y = solar_plants(seed)
  return cases.Setup(itransformer_lite(seed), keras.optimizers.Adam(1e-3),
                     'mae' if cured else mape_loss, data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind38_fp16_wave_u_net_adam_eps', 'precision', 'wave_u_net_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#11832; keras-team/keras#11853')
def _(seed, cured=False):
  """A Wave-U-Net-lite denoising speech frames, every layer and variable in
  float16 (as with set_floatx('float16')), MSE, Adam at 1e-3 with its default epsilon 1e-7:
  in float16 the squared gradients underflow to 0 and the epsilon is all that is left under
  m, the first updates are huge: the loss 0.027 at step 0, 1.11 at step 1, NaN from step 2, the
  weights NaN (the error 0.022 before, inf after; the constant answer's 0.013). Seed 1: 0.0061,
  0.83, NaN from step 2 (0.0057 before, inf after). keras-team/keras#11832 (a model trained
  in float16: the loss falls for ten batches, then rises to inf and NaN; solved by setting the
  epsilon to 1e-4); keras-team/keras#11853 (fp16 with set_floatx: the model does not converge
  while float32 does; try set_epsilon(1e-4)). Cured: epsilon=1e-4 in the same float16 run: the
  loss 0.027 to 0.0028, the error 0.022 to 0.0021."""
  x, y = noisy_speech(seed)
  return cases.Setup(wave_u_net(seed, dtype='float16'),
                     keras.optimizers.Adam(1e-3, epsilon=1e-4 if cured else 1e-7), 'mse',
                     data.stream(x, y, batch=16, seed=seed), 'regression')


@add('blind38_softmax_dpr_in_batch_naive_exp', 'softmax_overflow', 'dpr_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='huggingface/sentence-transformers#2774; emadeldeen24/TS-TCC#25')
def _(seed, cured=False):
  """A DPR-lite dense retriever (question and passage encoders ending in
  BERT-style LayerNorm, in-batch negatives) trained with the contrastive loss at temperature
  0.05 written by hand, -log(exp(s_ii / T) / sum_j exp(s_ij / T)), Adam at 1e-3: the
  unnormalised dot products over T pass 88.7, exp overflows and inf / inf is NaN: the loss NaN
  from step 0, the weights NaN (the error 0.97 before, inf after; the constant answer's 0.97).
  Seed 1: the same (0.98 before). huggingface/sentence-transformers#2774 (the contrastive loss
  takes e^(s/tau) of the scores: overflow unless a constant is subtracted first);
  emadeldeen24/TS-TCC#25 (a hand-made exp / sum in a contrastive loss gives NaN).
  Cured: the same loss through sparse_softmax_cross_entropy_with_logits (the max
  subtracted): the loss 378 to 4.2, the error 0.97 to 0.63."""
  x, _ = query_passages(seed)
  return cases.Setup(dpr_lite(seed), keras.optimizers.Adam(1e-3), in_batch_nce(stable=cured),
                     in_batch_stream(x, seed, 32), 'classes')


@add('blind38_input_gdn_sensor_dropout_nan', 'bad_input', 'gdn_lite', doors=('trainer', 'fit'),
     steps=150, citation='timeseriesAI/tsai#506; Nixtla/neuralforecast#186')
def _(seed, cured=False):
  """A GDN-lite forecasting the next reading of each of eight plant sensors from
  their last 16, MSE, Adam at 1e-3; 3% of the windows hold a sensor dropout logged as NaN: a
  batch holding one gives a NaN loss and NaN weights (seed 0: the loss 1.06, 1.01, NaN from
  step 2; the error 1.03 before, inf after; the constant answer's 1.02). Seed 1: NaN from step
  0 (0.99 before, inf after). timeseriesAI/tsai#506 (the outputs are all NaN: the inputs
  contain NaN values; replace them, e.g. by zeros, before training);
  Nixtla/neuralforecast#186 (missing values in the series make the loss NaN, and it is hard to
  see that the data is the cause). Cured: the last good reading carried forward over the gaps:
  the loss 1.06 to 0.097, the error 1.03 to 0.088. The measure reads windows without gaps
  (eval_data)."""
  x, y = plant_sensors(seed, gaps=0.03, fill=cured)
  clean, yc = plant_sensors(seed)
  return cases.Setup(gdn_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind38_transient_deeplob_bad_read_once', 'transient', 'deeplob_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='greatlog/DAN#8; PKU-YuanGroup/Open-Sora-Plan#333')
def _(seed, cured=False):
  """A DeepLOB-lite classifying the next mid-price move (down, flat, up) from 32
  order-book snapshots, cross-entropy, Adam at 1e-3, training normally (the loss 1.12 at step
  0, 0.53 at step 50) when one element of the first block's activations reads inf once
  (`BadReadOnce`: its 80th training call, step 75 of a plain `fit`; a flipped exponent bit, not
  the data, the model or the settings): the loss NaN from there on, the weights NaN (the error
  0.66 before, inf after; the constant answer's 0.59). Seed 1: the same step (0.70 before).
  greatlog/DAN#8 (the loss turns NaN suddenly at some iteration, a different one each time;
  resuming from the last normal state works); PKU-YuanGroup/Open-Sora-Plan#333 (NaN after
  20k steps: just resume the training). Cured: the same run without the fault: the loss 1.12
  to 0.29, the error 0.66 to 0.125."""
  x, y = order_book(seed)
  return cases.Setup(deeplob_lite(seed, fault=None if cured else 80), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind38_mismatch_dien_one_unit_softmax', 'loss_output_mismatch', 'dien_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#126; keras-team/keras#4784')
def _(seed, cured=False):
  """A DIEN-lite click model (interest-extractor GRU, attention on the
  candidate, interest-evolving GRU) with its one output unit given a softmax, binary
  cross-entropy, Adam at 1e-3: a softmax over one unit is 1.0 whatever the input: the model
  answers "click" for everyone before and after (the error 0.605 before and after, the share
  of non-clicks; the constant answer's 0.395), while Keras's loss, reading the logits behind
  the activation, falls 0.694 to 0.55 as if it trained. Seed 1: 0.520 before and after (the
  constant's 0.480). keras-team/keras#126 (a Dense(1) with softmax: the loss does not improve,
  predict_proba gives all ones); keras-team/keras#4784 (the model does not match the loss:
  for 0/1 targets use a sigmoid output with binary_crossentropy). Cured: a sigmoid output:
  the loss 0.694 to 0.47, the error 0.488 to 0.180."""
  x, y = behaviour_logs(seed)
  return cases.Setup(dien_lite(seed, probability='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind38_input_ealstm_missing_discharge_sentinel', 'bad_input', 'ealstm_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='neuralhydrology/neuralhydrology#77; neuralhydrology/neuralhydrology#8')
def _(seed, cured=False):
  """An EA-LSTM-lite (Entity-Aware LSTM) predicting a basin's next-day
  discharge (standardised) from 30 days of forcings and its static attributes, MSE, Adam at
  1e-3; 4% of the discharges are gauge gaps written -999 (CAMELS's sentinel), read as values:
  the loss 6.2e4 at step 0 and 3e4 to 9e4 throughout, the model pulled toward the sentinel
  (the error 0.75 before, 130 after; the constant answer's 0.77). Seed 1: 3.1e4 at step 0, 9e4
  at step 149 (1.05 before, 97 after; the constant's 1.21). neuralhydrology/neuralhydrology#77
  (how must missing values be given, as -9999 or flagged, and are the steps without data kept
  out of the loss?); neuralhydrology/neuralhydrology#8 (missing data entering the training
  process). Cured: the gauge gaps dropped: the loss 1.64 to 0.34, the error 0.75 to 0.39. The
  measure reads records without gaps (eval_data)."""
  x, q = catchments(seed, missing=0.04)
  if cured:
    keep = q[:, 0] > -900
    x, q = x[keep], q[keep]
  clean, qc = catchments(seed)
  return cases.Setup(ealstm_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, q, batch=64, seed=seed), 'regression',
                     eval_data=data.stream(clean, qc, batch=64, seed=seed))
