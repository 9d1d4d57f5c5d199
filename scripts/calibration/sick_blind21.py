"""A twenty-first blind set of sick scenarios (the 'blind21' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind20.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a TSMixer-lite, a Linformer-lite, a DA-RNN-lite, a
ResMLP-lite, a DSSM-lite, a pointer-network-lite, an RWKV-lite, an AutoRec-lite, a FiLM-lite and
an MMoE-lite). Each builder takes `cured`: the same run with the thread's remedy (the registry
calls `build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the
sick run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it
train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND21 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND21.add` with split='blind21'."""
  return BLIND21.add(name, expected, arch, split='blind21', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def sensor_grid(seed, *, rows=2048, history=48, horizon=12, channels=7):
  """An ETT-style multivariate sensor log in miniature: `channels` series, each a mix of a daily
  (24-step) and a half-daily cycle with its own phases and amplitudes, a slow drift shared by the
  channels and noise, standardised per channel; windows of `history` steps, the next `horizon`
  steps of every channel the target. (x (rows, history, channels), y (rows, horizon,
  channels))."""
  rng = np.random.RandomState(seed)
  t = np.arange(history + horizon)[None, :, None] + rng.randint(0, 240, (rows, 1, 1))
  amp = rng.uniform(0.5, 1.5, (1, 1, channels))
  phase = rng.uniform(0, 2 * np.pi, (rows, 1, channels))
  drift = 0.01 * rng.randn(rows, 1, 1) * (t - t[:, :1])
  v = (amp * np.sin(2 * np.pi * t / 24 + phase) + 0.5 * amp * np.sin(2 * np.pi * t / 12 + 2 *
                                                                       phase) + drift +
       0.1 * rng.randn(rows, history + horizon, channels))
  v = (v - v.mean(axis=(0, 1))) / v.std(axis=(0, 1))
  v = v.astype(np.float32)
  return v[:, :history], v[:, history:]


class TimeMixing(L.Layer):
  """TSMixer's time-mixing MLP (Chen et al., 2023): the series transposed to (channels, time), a
  Dense + ReLU across time shared by the channels, transposed back, added to its input."""

  def __init__(self, steps, **kwargs):
    super().__init__(**kwargs)
    self.dense = L.Dense(steps, activation='relu')

  def call(self, x):
    return x + tf.transpose(self.dense(tf.transpose(x, [0, 2, 1])), [0, 2, 1])


def tsmixer_lite(seed, *, history=48, horizon=12, channels=7, blocks=2, hidden=64):
  """A TSMixer-lite: `blocks` mixer blocks (a LayerNorm'd `TimeMixing`, a LayerNorm'd
  feature-mixing MLP of `hidden` units with a residual), the temporal projection (a Dense from
  `history` to `horizon` steps across time): the next `horizon` steps of every channel."""
  _seed(seed)
  x = keras.Input((history, channels))
  h = x
  for _ in range(blocks):
    h = TimeMixing(history)(L.LayerNormalization()(h))
    f = L.Dense(channels)(L.Dense(hidden, activation='relu')(L.LayerNormalization()(h)))
    h = h + f
  out = L.Permute((2, 1))(L.Dense(horizon)(L.Permute((2, 1))(h)))
  return keras.Model(x, out, name='tsmixer_lite')


def topic_tokens(seed, *, rows=2048, steps=32, vocab=64, classes=4, bias=0.35):
  """Token sequences of `classes` topics: each token drawn from the whole vocabulary or, with
  probability `bias`, from its topic's quarter of it (ids 1 to vocab - 1; 0 is never used); the
  label the topic. (ids (rows, steps), labels (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, classes, rows)
  span = (vocab - 1) // classes
  topical = 1 + y[:, None] * span + rng.randint(0, span, (rows, steps))
  anywhere = rng.randint(1, vocab, (rows, steps))
  ids = np.where(rng.rand(rows, steps) < bias, topical, anywhere)
  return ids.astype(np.int32), y.astype(np.int32)


class LinformerAttention(L.Layer):
  """Linformer's self-attention (Wang et al., 2020): keys and values projected along the
  sequence from `steps` positions to `k`, single-head scaled dot-product attention of every
  query on the `k` projected positions."""

  def __init__(self, dim, steps, k, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.steps, self.k = dim, steps, k
    self.qkv = L.Dense(3 * dim)
    self.out = L.Dense(dim)

  def build(self, shape):
    self.e = self.add_weight(shape=(self.k, self.steps), name='e', initializer='glorot_uniform')
    self.f = self.add_weight(shape=(self.k, self.steps), name='f', initializer='glorot_uniform')

  def call(self, x):
    q, key, v = tf.split(self.qkv(x), 3, axis=-1)
    key = tf.einsum('kn,bnd->bkd', self.e, key)
    v = tf.einsum('kn,bnd->bkd', self.f, v)
    a = tf.nn.softmax(tf.matmul(q, key, transpose_b=True) / self.dim ** 0.5, axis=-1)
    return self.out(tf.matmul(a, v))


class PositionEmbedding(L.Layer):
  """A learned position embedding added to the token embeddings."""

  def build(self, shape):
    self.pos = self.add_weight(shape=(shape[1], shape[2]), name='pos',
                               initializer=keras.initializers.RandomNormal(stddev=0.02))

  def call(self, x):
    return x + self.pos


def linformer_lite(seed, *, steps=32, vocab=64, dim=64, k=8, layers=2, classes=4):
  """A Linformer-lite encoder: token and position embeddings, `layers` post-LN blocks (a
  `LinformerAttention` projecting to `k` positions, a GELU FFN of 2 x `dim`), mean pooling,
  Dense(`classes`): the topic logits."""
  _seed(seed)
  ids = keras.Input((steps,), dtype='int32')
  h = PositionEmbedding()(L.Embedding(vocab, dim)(ids))
  for _ in range(layers):
    h = L.LayerNormalization()(h + LinformerAttention(dim, steps, k)(h))
    f = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h))
    h = L.LayerNormalization()(h + f)
  return keras.Model(ids, L.Dense(classes)(L.GlobalAveragePooling1D()(h)), name='linformer_lite')


def engine_wear(seed, *, rows=2048, window=30, sensors=14, life=(120, 300), cap=125.0):
  """Turbofan run-to-failure logs in miniature (the C-MAPSS RUL task): each engine a lifetime of
  `life` cycles; its `sensors` readings a baseline, a wear term growing as the engine ages
  (exponentially, each sensor its own sign and gain) and noise, standardised per sensor as the
  threads do; a window of `window` cycles ending at a random cycle, the label the remaining
  useful life in cycles, capped at `cap` (piecewise-linear, as usual; not scaled). (x (rows,
  window, sensors), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  total = rng.randint(life[0], life[1], rows)
  end = (rng.rand(rows) * (total - window)).astype(int) + window
  cycles = end[:, None] - window + np.arange(window)[None, :]
  wear = np.exp(4.0 * cycles / total[:, None]) - 1.0
  gain = rng.uniform(0.5, 1.5, sensors) * rng.choice([-1, 1], sensors)
  x = (gain[None, None, :] * wear[..., None] / 20.0 + rng.randn(rows, 1, sensors) * 0.3 +
       rng.randn(rows, window, sensors) * 0.4)
  x = (x - x.mean(axis=(0, 1))) / x.std(axis=(0, 1))
  y = np.minimum(total - end, cap)
  return x.astype(np.float32), y[:, None].astype(np.float32)


class InputAttention(L.Layer):
  """DA-RNN's input attention in miniature (Qin et al., 2017): a score per driving series from
  its whole window (a tanh layer and a vector), softmax over the series, the inputs reweighted
  by it (times the number of series)."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.hidden = L.Dense(units, activation='tanh')
    self.score = L.Dense(1)

  def call(self, x):
    series = tf.transpose(x, [0, 2, 1])  # (b, sensors, window)
    alpha = tf.nn.softmax(tf.squeeze(self.score(self.hidden(series)), -1), axis=-1)
    return x * alpha[:, None, :] * tf.cast(tf.shape(x)[-1], x.dtype)


class TemporalAttention(L.Layer):
  """DA-RNN's temporal attention in miniature: a score per encoder step (a tanh layer and a
  vector), softmax over time, the context the weighted sum of the encoder states, beside the
  last state."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.hidden = L.Dense(units, activation='tanh')
    self.score = L.Dense(1)

  def call(self, h):
    beta = tf.nn.softmax(self.score(self.hidden(h)), axis=1)
    return tf.concat([tf.reduce_sum(beta * h, axis=1), h[:, -1]], axis=-1)


def darnn_lite(seed, *, window=30, sensors=14, units=64):
  """A DA-RNN-lite: `InputAttention` over the driving series, an LSTM encoder of `units`,
  `TemporalAttention` over its states, Dense(32, tanh), Dense(1): the remaining useful life."""
  _seed(seed)
  x = keras.Input((window, sensors))
  h = L.LSTM(units, return_sequences=True)(InputAttention(16)(x))
  c = TemporalAttention(32)(h)
  return keras.Model(x, L.Dense(1)(L.Dense(32, activation='tanh')(c)), name='darnn_lite')


class Affine(L.Layer):
  """ResMLP's Affine layer (Touvron et al., 2021): x * alpha + beta per channel (1 and 0 at
  first)."""

  def build(self, shape):
    self.alpha = self.add_weight(shape=(shape[-1],), name='alpha', initializer='ones')
    self.beta = self.add_weight(shape=(shape[-1],), name='beta', initializer='zeros')

  def call(self, x):
    return x * self.alpha + self.beta


class CrossPatch(L.Layer):
  """ResMLP's cross-patch sublayer: a linear layer across the patches (shared by the channels),
  applied to the Affine'd input, added to it."""

  def __init__(self, patches, kernel_initializer, **kwargs):
    super().__init__(**kwargs)
    self.affine = Affine()
    self.dense = L.Dense(patches, kernel_initializer=kernel_initializer)

  def call(self, x):
    mixed = self.dense(tf.transpose(self.affine(x), [0, 2, 1]))
    return x + tf.transpose(mixed, [0, 2, 1])


def resmlp_lite(seed, *, size=16, patch=4, dim=64, blocks=2, classes=10, init='glorot_uniform'):
  """A ResMLP-lite: non-overlapping `patch` x `patch` patches of a grey `size` x `size` image
  embedded linearly to `dim`, `blocks` residual blocks (a `CrossPatch` sublayer, an Affine'd
  GELU MLP of 4 x `dim` per patch), a final Affine, average pooling over the patches,
  Dense(`classes`): the logits. `init`: every Dense kernel's initialiser."""
  _seed(seed)
  patches = (size // patch) ** 2
  x = keras.Input((size, size, 1))
  h = L.Reshape((size // patch, patch, size // patch, patch))(x)
  h = L.Reshape((patches, patch * patch))(L.Permute((1, 3, 2, 4))(h))
  h = L.Dense(dim, kernel_initializer=init)(h)
  for _ in range(blocks):
    h = CrossPatch(patches, init)(h)
    f = L.Dense(4 * dim, activation='gelu', kernel_initializer=init)(Affine()(h))
    h = h + L.Dense(dim, kernel_initializer=init)(f)
  h = L.GlobalAveragePooling1D()(Affine()(h))
  return keras.Model(x, L.Dense(classes, kernel_initializer=init)(h), name='resmlp_lite')


def search_log(seed, *, rows=4096, words=12, doc_words=20, vocab=400, topics=20, candidates=5,
               empty=0.005):
  """A web-search click log in miniature: each query and document a bag of word ids (0 the
  padding), drawn mostly from its topic's words (`topics` topics over a `vocab`-word
  vocabulary); each query shown with `candidates` documents, one clicked (its topic the
  query's), the others of other topics, in random order; a fraction `empty` of the queries are
  empty strings (every id padding), as raw logs have. (([query (rows, words), docs (rows,
  candidates, doc_words)]), the clicked position)."""
  rng = np.random.RandomState(seed)
  per = vocab // topics

  def bag(topic, n, size):
    own = 1 + topic[..., None] * per + rng.randint(0, per - 1, topic.shape + (size,))
    other = rng.randint(1, vocab, topic.shape + (size,))
    ids = np.where(rng.rand(*topic.shape, size) < 0.7, own, other)
    lengths = rng.randint(n // 2, n + 1, topic.shape)
    return np.where(np.arange(size) < lengths[..., None], ids, 0)

  topic = rng.randint(0, topics, rows)
  others = (topic[:, None] + rng.randint(1, topics, (rows, candidates))) % topics
  y = rng.randint(0, candidates, rows)
  others[np.arange(rows), y] = topic
  q = bag(topic, words, words)
  q[rng.rand(rows) < empty] = 0
  d = bag(others, doc_words, doc_words)
  return (q.astype(np.int32), d.astype(np.int32)), y.astype(np.int32)


class BagSum(L.Layer):
  """The sum of a bag's word embeddings, the padding (id 0) left out: an empty bag is the zero
  vector."""

  def call(self, e, ids):
    return tf.reduce_sum(e * tf.cast(ids > 0, e.dtype)[..., None], axis=-2)


class CosineScores(L.Layer):
  """The cosine of the query's semantic vector with each candidate's, written as the DSSM paper
  writes it, q.d / (|q| |d|) (`epsilon`: the norms' product floored at it, the fix the Keras
  cos merge took; None: no guard), times the smoothing factor `gamma`: the logits of the
  click."""

  def __init__(self, gamma=10.0, epsilon=None, **kwargs):
    super().__init__(**kwargs)
    self.gamma, self.epsilon = gamma, epsilon

  def call(self, q, d):
    dot = tf.einsum('bf,bcf->bc', q, d)
    norms = tf.norm(q, axis=-1, keepdims=True) * tf.norm(d, axis=-1)
    if self.epsilon is not None:
      norms = tf.maximum(norms, self.epsilon)
    return self.gamma * dot / norms


def dssm_lite(seed, *, words=12, doc_words=20, candidates=5, vocab=400, dim=64, epsilon=None):
  """A DSSM-lite (Huang et al., 2013): a query tower and a document tower (a bag of word
  embeddings, two bias-free tanh layers of 128 and 64, as the paper's projections), `CosineScores`
  of the query with each of the `candidates` documents: the click logits."""
  _seed(seed)
  q_ids = keras.Input((words,), dtype='int32')
  d_ids = keras.Input((candidates, doc_words), dtype='int32')
  q = BagSum()(L.Embedding(vocab, dim)(q_ids), q_ids)
  d = BagSum()(L.Embedding(vocab, dim)(d_ids), d_ids)
  for units in (128, 64):
    q = L.Dense(units, activation='tanh', use_bias=False)(q)
    d = L.Dense(units, activation='tanh', use_bias=False)(d)
  return keras.Model([q_ids, d_ids], CosineScores(epsilon=epsilon)(q, d), name='dssm_lite')


def price_lists(seed, *, rows=4096, items=10, top=100.0):
  """Lists of `items` prices (0 to `top`, as listed: not scaled) with a second feature, the
  item's rank on the page divided by `items`; the label the position of the dearest item.
  (x (rows, items, 2), positions)."""
  rng = np.random.RandomState(seed)
  prices = rng.uniform(0, top, (rows, items))
  x = np.stack([prices, np.broadcast_to(np.arange(items) / items, prices.shape)], -1)
  return x.astype(np.float32), prices.argmax(axis=1).astype(np.int32)


class Pointer(L.Layer):
  """The pointer network's output (Vinyals et al., 2015) in its dot-product form: the score of
  each input element the decoder query's dot product with the element's encoding, the pointer
  distribution exp(u) / sum(exp(u)) as the threads write it (`stable`: tf.nn.softmax, which
  subtracts the max)."""

  def __init__(self, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.stable = stable

  def call(self, query, keys):
    u = tf.einsum('bd,bnd->bn', query, keys)
    if self.stable:
      return tf.nn.softmax(u, axis=-1)
    return field.naive_softmax(u)


def pointer_net_lite(seed, *, items=10, dim=32, stable=False):
  """A pointer-network-lite: each element encoded by a Dense(`dim`) (no activation), an LSTM of
  `dim` over the encodings, a decoder query (Dense(`dim`) of its last state), the `Pointer`
  distribution over the elements."""
  _seed(seed)
  x = keras.Input((items, 2))
  e = L.Dense(dim)(x)
  query = L.Dense(dim)(L.LSTM(dim)(e))
  return keras.Model(x, Pointer(stable)(query, e), name='pointer_net_lite')


class WKV(L.Layer):
  """RWKV's time mixing (Peng et al., 2023), written in parallel form as the JAX/TPU ports do:
  for each channel, wkv_t = sum_{i<=t} exp(k_i - (t - i) w) v_i / sum_{i<=t} exp(k_i - (t - i)
  w), computed as exp(-t w) cumsum(exp(k_i + i w) v_i) over exp(-t w) cumsum(exp(k_i + i w)),
  the decay w = 0.05 + 0.95 sigmoid(.) per channel; r, k, v from token-shifted mixes of the input;
  the output Dense(sigmoid(r) * wkv). In the layer's compute dtype, or in float32
  (`float32`)."""

  def __init__(self, dim, float32=False, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.float32 = dim, float32
    self.r, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)
    self.out = L.Dense(dim)

  def build(self, shape):
    self.decay = self.add_weight(shape=(self.dim,), name='decay',
                                 initializer=keras.initializers.RandomUniform(-2.0, 2.0))
    self.mix = self.add_weight(shape=(3, self.dim), name='mix',
                               initializer=keras.initializers.Constant(0.5))

  def call(self, x):
    shifted = tf.pad(x, [[0, 0], [1, 0], [0, 0]])[:, :-1]
    mix = tf.cast(self.mix, x.dtype)
    r = self.r(x * mix[0] + shifted * (1 - mix[0]))
    k = self.k(x * mix[1] + shifted * (1 - mix[1]))
    v = self.v(x * mix[2] + shifted * (1 - mix[2]))
    dtype = tf.float32 if self.float32 else x.dtype
    k, v = tf.cast(k, dtype), tf.cast(v, dtype)
    w = tf.cast(0.05 + 0.95 * tf.sigmoid(self.decay), dtype)
    t = tf.cast(tf.range(tf.shape(x)[1]), dtype)[None, :, None]
    grow = tf.exp(k + t * w)
    wkv = tf.math.cumsum(grow * v, axis=1) / tf.math.cumsum(grow, axis=1)
    return self.out(tf.sigmoid(r) * tf.cast(wkv, x.dtype))


def rwkv_lite(seed, *, steps=48, vocab=64, dim=64, layers=2, classes=4, float32=False):
  """An RWKV-lite classifier: token embeddings, `layers` pre-LN blocks (a `WKV` time mixing, a
  ReLU^2 channel mixing of 2 x `dim`, each with a residual), a final LayerNorm, the last
  position's state, Dense(`classes`): the topic logits."""
  _seed(seed)
  ids = keras.Input((steps,), dtype='int32')
  h = L.Embedding(vocab, dim)(ids)
  for _ in range(layers):
    h = h + WKV(dim, float32=float32)(L.LayerNormalization()(h))
    f = L.Dense(2 * dim, activation='relu')(L.LayerNormalization()(h))
    h = h + L.Dense(dim)(f * f)
  h = L.LayerNormalization()(h)
  out = L.Dense(classes)(L.Lambda(lambda t: t[:, -1])(h))
  return keras.Model(ids, L.Activation('linear', dtype='float32')(out), name='rwkv_lite')


def ratings(seed, *, items=2048, users=256, rank=3, observed=0.3, blanks=0):
  """A MovieLens-style rating matrix in miniature, item by item (I-AutoRec's rows): each rating
  3 + an item bias + a user bias + a rank-`rank` taste term plus noise, rounded and clipped to 1
  to 5; a fraction `observed` of them rated (the rest 0); `blanks` of the rated entries came
  through as NaN (a blank rating field the pivot kept). (observed (items, users),
  the full matrix (items, users))."""
  rng = np.random.RandomState(seed)
  taste = rng.randn(items, rank) @ rng.randn(rank, users) * 0.3
  full = 3.0 + 1.0 * rng.randn(items, 1) + 0.3 * rng.randn(1, users) + taste
  full = np.clip(np.round(full + 0.2 * rng.randn(items, users)), 1, 5)
  seen = rng.rand(items, users) < observed
  x = np.where(seen, full, 0.0)
  rows, cols = np.nonzero(seen)
  pick = rng.choice(len(rows), blanks, replace=False)
  x[rows[pick], cols[pick]] = np.nan
  return x.astype(np.float32), full.astype(np.float32)


def observed_mse(y, p):
  """AutoRec's loss: the squared error over the observed (non-zero) ratings only."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  seen = tf.cast(tf.not_equal(y, 0.0), tf.float32)
  return tf.reduce_sum(seen * tf.square(y - p)) / tf.maximum(tf.reduce_sum(seen), 1.0)


def autorec_lite(seed, *, users=256, hidden=64):
  """An I-AutoRec-lite (Sedhain et al., 2015): an item's rating vector over the users, Dense
  (`hidden`, sigmoid), Dense(users) (identity): the reconstructed ratings of every user."""
  _seed(seed)
  x = keras.Input((users,))
  return keras.Model(x, L.Dense(users)(L.Dense(hidden, activation='sigmoid')(x)),
                     name='autorec_lite')


def shape_questions(seed, *, rows=4096, size=16, cells=4, objects=2, colours=4):
  """CLEVR-style visual questions in miniature: a `size` x `size` RGB scene of `objects` squares
  (each a random colour of `colours`, in a random cell of a `cells` x `cells` grid, a random
  shade); the question "is there a <colour> thing?" as three tokens; the answer yes (1) or no
  (0). ((scenes, questions (rows, 3)), answers)."""
  rng = np.random.RandomState(seed)
  palette = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], np.float32)[:colours]
  step = size // cells
  x = np.zeros((rows, size, size, 3), np.float32)
  colour = rng.randint(0, colours, (rows, objects))
  for r in range(rows):
    where = rng.choice(cells * cells, objects, replace=False)
    for o, cell in enumerate(where):
      i, j = divmod(cell, cells)
      x[r, i * step + 1:(i + 1) * step - 1, j * step + 1:(j + 1) * step - 1] = (
          palette[colour[r, o]] * rng.uniform(0.6, 1.0))
  asked = rng.randint(0, colours, rows)
  q = np.stack([np.ones(rows), 2 + asked, np.full(rows, 2 + colours)], 1)
  y = (colour == asked[:, None]).any(1)
  return (x, q.astype(np.int32)), y.astype(np.int32)


class FiLM(L.Layer):
  """Feature-wise linear modulation (Perez et al., 2018): gamma * x + beta per channel, gamma
  and beta from the question."""

  def call(self, x, gamma, beta):
    return x * (1.0 + gamma[:, None, None, :]) + beta[:, None, None, :]


class GlitchOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel that misfires
  once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def film_lite(seed, *, size=16, width=32, vocab=8, answers=2, glitch=None):
  """A FiLM-lite visual-question answerer: a GRU(32) over the question's token embeddings, two
  FiLM'd residual blocks (a 3x3 convolution of `width`, BatchNorm without scale and centre, FiLM
  from the question, ReLU), global average pooling, Dense(64, ReLU) (its output through
  `GlitchOnce(glitch)`), Dense(`answers`): the answer logits."""
  _seed(seed)
  image, question = keras.Input((size, size, 3)), keras.Input((3,), dtype='int32')
  qv = L.GRU(32)(L.Embedding(vocab, 16)(question))
  h = L.Conv2D(width, 3, padding='same', activation='relu')(image)
  for block in range(2):
    film = L.Dense(2 * width)(qv)
    gamma, beta = film[:, :width], film[:, width:]
    f = L.BatchNormalization(center=False, scale=False)(L.Conv2D(width, 3, padding='same')(h))
    h = h + L.ReLU()(FiLM()(f, gamma, beta))
  h = GlitchOnce(glitch)(L.Dense(64, activation='relu')(L.GlobalAveragePooling2D()(h)))
  return keras.Model([image, question], L.Dense(answers)(h), name='film_lite')


def census_tasks(seed, *, rows=8192, features=16):
  """Two related binary tasks on census-like rows in miniature (the MMoE paper's income and
  marital-status pair): standardised features; each task's label a noisy threshold of its own
  mix of a shared score and a task-specific one. (x (rows, features), labels (rows, 2))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  shared = x @ rng.randn(features) / np.sqrt(features)
  own = x @ rng.randn(features, 2) / np.sqrt(features)
  score = np.stack([0.7 * shared + 0.7 * own[:, 0], 0.7 * shared - 0.7 * np.tanh(own[:, 1]) *
                    2], 1) + 0.3 * rng.randn(rows, 2)
  y = score > np.quantile(score, 0.6, axis=0)
  return x.astype(np.float32), y.astype(np.float32)


class Experts(L.Layer):
  """MMoE's experts and gates (Ma et al., 2018): `experts` ReLU experts of `units` on the input,
  one softmax gate per task over them; each task's input the gate-weighted mix."""

  def __init__(self, experts, units, tasks, **kwargs):
    super().__init__(**kwargs)
    self.experts = [L.Dense(units, activation='relu') for _ in range(experts)]
    self.gates = [L.Dense(experts, activation='softmax') for _ in range(tasks)]

  def call(self, x):
    e = tf.stack([expert(x) for expert in self.experts], axis=1)  # (b, experts, units)
    return [tf.einsum('be,beu->bu', gate(x), e) for gate in self.gates]


def mmoe_lite(seed, *, features=16, experts=4, units=16, tasks=2, head='sigmoid'):
  """An MMoE-lite: `Experts` with one gate per task, a tower per task (Dense(8, ReLU),
  Dense(1, `head`)), the towers' outputs side by side: each task's probability."""
  _seed(seed)
  x = keras.Input((features,))
  mixes = Experts(experts, units, tasks)(x)
  towers = [L.Dense(1, activation=head)(L.Dense(8, activation='relu')(m)) for m in mixes]
  return keras.Model(x, L.Concatenate()(towers), name='mmoe_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind21_lr_tsmixer_adam', 'learning_rate', 'tsmixer_lite', doors=('trainer', 'fit'),
     steps=150, citation='OpenNMT/OpenNMT-py#805; rajveermalviya/language-modeling#3')
def _(seed, cured=False):
  """A TSMixer-lite (two mixer blocks of time- and feature-mixing MLPs, a temporal
  projection) forecasting the next 12 steps of seven standardised sensor channels from 48, MSE,
  Adam at a learning rate of 1.0 (the default of the SGD recipe the script came from, left in
  when the optimizer was switched to Adam): the first steps throw the weights far off and the
  loss never comes back: the loss (fit's running mean) 4.27 at step 0, 2.9e4 at step 1, 1.2e6 at
  step 10, 1.3e5 at step 149, no NaN (the error 4.10 before, 34.9 after; the constant answer's
  1.19). Seed 1: 5.03 at step 0, 2.9e6 at step 2, 2.1e5 at step 149 (the error 4.90 before, 39.6
  after; the constant's 1.25). OpenNMT/OpenNMT-py#805 (with -optim adam the perplexity stays at
  a high constant: the learning rate defaults to 1, SGD's; set it to 0.001);
  rajveermalviya/language-modeling#3 (Adam at a learning rate of 1.0: the loss does not really
  go down; Adam's default 0.001 trains). Cured: Adam at 1e-3: the loss 4.27 to 0.92, the error
  4.10 to 0.54."""
  x, y = sensor_grid(seed)
  return cases.Setup(tsmixer_lite(seed), keras.optimizers.Adam(1e-3 if cured else 1.0), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind21_lr_linformer_collapse', 'learning_rate', 'linformer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='huggingface/transformers#735; namiyousef/argument-mining#48')
def _(seed, cured=False):
  """A Linformer-lite (token and position embeddings, two post-LN blocks of attention
  over keys and values projected from 32 positions to 8, mean pooling) classifying token
  sequences into four topics, Adam at 0.05: the first updates knock the encoder into a state
  where it answers one topic for every input and it stays there: the loss (fit's running mean)
  1.49 at step 0, 5.7 at step 2, 1.54 at step 149 (above chance's ln 4 = 1.39), no NaN
  (the error 0.80 before, 0.71 after, exactly the constant answer's 0.71). Seed 1: 1.47 to 1.55
  (the error 0.74 before, 0.80 after; the constant's 0.68). huggingface/transformers#735 (the
  encoder gives the same output for every input; changing the learning rate from 0.01 to 5e-5
  fixed it); namiyousef/argument-mining#48 (after the first input the model outputs the same
  class every time: the learning rate). Cured: Adam at 1e-3: the loss 1.49 to 0.26, the error
  0.80 to 0.016."""
  x, y = topic_tokens(seed)
  return cases.Setup(linformer_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.05),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind21_grad_darnn_rul', 'exploding_gradients', 'darnn_lite', doors=('trainer', 'fit'),
     steps=150,
     citation=('austineaero/Remaining-Useful-Life-RUL-Estimation#19; '
               'fferroni/PhasedLSTM-Keras#11'))
def _(seed, cured=False):
  """A DA-RNN-lite (input attention over 14 standardised sensor series, an LSTM
  encoder, temporal attention) estimating turbofan engines' remaining useful life in cycles
  (capped at 125, not scaled) from 30-cycle windows, MSE, SGD with momentum 0.9 at 0.2, no
  clipping: the squared errors of targets in the hundreds give gradients that grow step on step
  through the recurrence and attention: the loss (fit's running mean) 7.4e3 at step 0, 4.2e4 at
  step 2, 1.5e14 at step 10, 4.1e35 at step 24, inf at step 25, NaN from step 26 (the weights NaN
  after it; the error 7.7e3 before, inf after; the constant answer's 1.9e3). Seed 1: 1.1e14 at
  step 10, inf at step 23, NaN after. austineaero/Remaining-Useful-Life-RUL-Estimation#19 (an
  RUL LSTM's loss NaN after the first epoch: "this usually means exploding gradients"; clip the
  gradients with clipvalue); fferroni/PhasedLSTM-Keras#11 (a recurrent regression's mse NaN after
  promising steps; clipvalue in the optimizer suggested). Cured: the same rate with
  clipvalue=0.5: the loss 7.4e3 to 1.0e3, the error 7.7e3 to 636."""
  x, y = engine_wear(seed)
  return cases.Setup(darnn_lite(seed),
                     keras.optimizers.SGD(0.2, momentum=0.9, clipvalue=0.5 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind21_init_resmlp_zeros', 'initialisation', 'resmlp_lite', doors=('trainer', 'fit'),
     steps=150,
     citation=("'Week 1, Programming Assignment initialization, Exercise 1 - "
               "initialize_parameters_zeros' https://community.deeplearning.ai/t/"
               'week-1-programming-assignment-initialization-exercise-1-initialize-parameters-'
               'zeros/121049; wagonhelm/NaNmnist#2'))
def _(seed, cured=False):
  """A ResMLP-lite (4x4 patches embedded linearly, two residual blocks of a
  cross-patch linear layer and a per-patch GELU MLP with Affine layers, average pooling)
  classifying the digits (16x16 grey), Adam at 1e-3, every Dense kernel initialised to zeros
  (kernel_initializer='zeros', as the user set it): the patch embedding is zero, so every block
  and the pooled features are zero; the classifier's kernel gets zero gradient from zero
  features, and the layers below get none through a zero kernel: only the output bias moves:
  the loss (fit's running mean) 2.303 (ln 10) at every step from 0 to 149, no NaN (the error
  0.93 before and after; the constant answer's 0.86). Seed 1: 2.303 throughout (the error 0.88
  before, 0.89 after; the constant's 0.88). "Week 1, Programming Assignment initialization,
  Exercise 1 - initialize_parameters_zeros" (a network initialised with zeros learns nothing:
  the activations are zero and the weights get no update); wagonhelm/NaNmnist#2 (initialising
  weights as zeros is the pitfall: deep nets need random initialisation). Cured: Keras's default
  Glorot-uniform kernels: the loss 2.35 to 0.86, the error 0.98 to 0.094."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(resmlp_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind21_div_dssm_empty_query', 'division_or_log', 'dssm_lite', doors=('trainer', 'fit'),
     steps=150, citation='keras-team/keras#2672; keras-team/keras#2725')
def _(seed, cured=False):
  """A DSSM-lite (query and document towers: a bag of word embeddings, two bias-free
  tanh layers; the cosine of the query with each of five shown documents, times 10) predicting
  which document was clicked, Adam at 1e-3, the cosine written q.d / (|q| |d|) with no guard;
  0.5% of the logged queries are empty strings: their bag, and so their semantic vector, is the
  zero vector and the cosine 0 / 0: healthy until the first batch holding one (the loss 2.08 at
  step 0, 1.18 at step 18), NaN from step 19 (the weights NaN after it; the error 0.80 before,
  inf after; the constant answer's 0.77). Seed 1: NaN from step 2 (the weights NaN after it; an
  empty query among the measure's first batches, so the error inf before too).
  keras-team/keras#2672 (a hand-written cosine similarity layer: division by zero for a zero
  vector, NaN); keras-team/keras#2725 (the fix: the norms' product floored with K.maximum at
  the fuzz factor). Cured: the norms' product floored at 1e-7: the loss 2.08 to 0.27, the error
  0.80 to 0."""
  x, y = search_log(seed)
  return cases.Setup(dssm_lite(seed, epsilon=1e-7 if cured else None),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind21_exp_pointer_unscaled_prices', 'softmax_overflow', 'pointer_net_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#10142; numenta/nupic-legacy#3174')
def _(seed, cured=False):
  """A pointer-network-lite (a linear encoding of each element, an LSTM over them, a
  decoder query, dot-product pointer scores) pointing at the dearest of ten listed prices (0 to
  100, as listed: not scaled), SparseCategoricalCrossentropy on the pointer distribution, Adam
  at 1e-3, the distribution written exp(u) / sum(exp(u)): the encodings carry the prices'
  scale, the scores pass 88.7 and exp overflows, inf / inf = NaN: the loss (fit's running mean)
  16.1 at step 0 (the distribution already saturated the wrong way), 8.6 at step 15, NaN from
  step 16 (the weights NaN after it; the error 1.0 before, inf after; the constant answer's
  0.86). Seed 1: 0.21 at step 0, NaN from step 2. tensorflow/tensorflow#10142 (a loss NaN
  traced to a softmax computed with a bare exp(x), which overflows for large x; log-sum-exp,
  subtracting the max, avoids it); numenta/nupic-legacy#3174 (the classifier's softmax,
  numpy.exp of the activations, overflows; the usual fix offsets them by their maximum). Cured:
  tf.nn.softmax: the loss 31.9 to 0.51, the error 1.0 to 0."""
  x, y = price_lists(seed)
  return cases.Setup(pointer_net_lite(seed, stable=cured), keras.optimizers.Adam(1e-3), SCE(),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind21_fp16_rwkv_wkv_overflow', 'precision', 'rwkv_lite', doors=('trainer', 'fit'),
     steps=150, precision='mixed_float16',
     citation='tensorpro/tpu_rwkv#1; BlinkDL/ChatRWKV#3')
def _(seed, cured=False):
  """An RWKV-lite (token embeddings, two blocks of time mixing and squared-ReLU channel
  mixing) classifying 48-token sequences into four topics, Adam at 1e-3, under
  mixed_float16; the time mixing in the parallel form of the JAX/TPU ports, exp(k_i + i w)
  summed along the sequence, in float16: i w reaches about 40 by the last position (float16
  overflows past exp(11.1)), so numerator and denominator are both inf and their ratio NaN: the
  outputs NaN before any training (the error inf before and after; the constant answer's
  0.71), the loss NaN from step 0 at every step (the loss-scale optimizer skips the updates;
  the weights stay finite). Seed 1: the same (the constant's 0.68). tensorpro/tpu_rwkv#1 (the
  WKV numerically
  unstable: inf in a / b after some layers); BlinkDL/ChatRWKV#3 (NaN probabilities in fp16:
  "floating-point overflow", the maintainer's answer; the same model runs in fp32). Cured: the
  WKV computed in float32 (its inputs cast up, its result cast back): the loss 1.85 to 0.48, the
  error 0.84 to 0.031."""
  x, y = topic_tokens(seed, steps=48)
  return cases.Setup(rwkv_lite(seed, float32=cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind21_input_autorec_blank_ratings', 'bad_input', 'autorec_lite',
     doors=('trainer', 'fit'), steps=300,
     citation='chinchi-hsu/KerasCollaborativeFiltering#3; lyst/lightfm#199')
def _(seed, cured=False):
  """An I-AutoRec-lite (an item's ratings by 256 users, a sigmoid layer of 64, a
  linear reconstruction) learning a MovieLens-style rating matrix (30% rated), the squared
  error over the rated entries, Adam at 1e-2; two of the 157,000 ratings came through the pivot
  as NaN (blank rating fields): the masked loss keeps them (NaN != 0) and the input carries them:
  healthy until the first batch holding one (the loss 9.58 at step 0, 4.44 at step 7), NaN from
  step 8 (the weights NaN after it; the error on the full matrix 10.5 before, inf after; the
  constant answer's 1.12). Seed 1: NaN from step 27. chinchi-hsu/KerasCollaborativeFiltering#3
  (a Keras matrix factorisation on processed MovieLens-1M: the loss, the RMSE and the embeddings
  all NaN); lyst/lightfm#199 (missing interactions left as NaN in the rating matrix give NaN
  results). Cured: the blank ratings dropped (as unrated): the loss 9.58 to 1.18, the error 10.5
  to 0.70. The measure reads the clean observed matrix against the full one (eval_data) for
  both runs."""
  x, full = ratings(seed, blanks=0 if cured else 2)
  clean, _ = ratings(seed)
  return cases.Setup(autorec_lite(seed), keras.optimizers.Adam(1e-2), observed_mse,
                     data.stream(x, x, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, full, batch=32, seed=seed))


@add('blind21_transient_film_glitch', 'transient', 'film_lite', doors=('trainer', 'fit'),
     steps=150, citation='facebookresearch/mmf#1251; lucidrains/DALLE-pytorch#38')
def _(seed, cured=False):
  """A FiLM-lite (a GRU question encoder, two FiLM'd residual convolution blocks, a
  pooled MLP head) answering "is there a <colour> thing?" about small CLEVR-style scenes, Adam at
  3e-3, training normally (the loss 0.67 at step 0, 0.68 at step 64) when one element of the
  head's hidden features reads NaN once (`GlitchOnce`: its 70th training call; step 65 in a
  plain `fit` after the measure's four training-mode passes; a kernel or buffer that misfires
  once, not the data, the model or the settings): the loss NaN from step 65, the weights NaN
  after it (the error 0.57 before, inf after; the constant answer's 0.43); the same step re-run
  from the weights and optimizer state before it is finite, and so are those after. Seed 1: the
  same step (0.67 at step 64). facebookresearch/mmf#1251 (NaN mid-training; resumed from the
  checkpoint, it does not come back at the same iteration); lucidrains/DALLE-pytorch#38
  (skipping the step when NaN occurs keeps training alive). Cured: the same run without the
  fault: the loss 0.67 to 0.58, the error 0.57 to 0.38 (0.19 in training mode: BatchNorm's
  moving statistics still near their start)."""
  x, y = shape_questions(seed)
  return cases.Setup(film_lite(seed, glitch=None if cured else 70), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind21_mismatch_mmoe_one_unit_softmax', 'loss_output_mismatch', 'mmoe_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#500; keras-team/keras#126')
def _(seed, cured=False):
  """An MMoE-lite (four ReLU experts, a softmax gate per task, a tower per task)
  predicting two related binary labels of census-like rows, BinaryCrossentropy, Adam at 1e-3,
  each tower's output written Dense(1, activation='softmax'): the softmax of a single unit is 1
  for every input, its gradient 0: every answer is "yes" and nothing below it learns: the loss
  (fit's running mean) 8.7 at step 0, 9.6 at step 149 (the clipped log of 1 - 1 on every "no"),
  no NaN (the error 0.56 before and after: the share of "no" labels; the constant answer's
  0.44). Seed 1: 9.5 throughout (the error 0.60 before and after; the constant's 0.40).
  keras-team/keras#500 (the network outputs only 1 regardless of the input: "softmax on an
  array of size 1 is always 1", fchollet); keras-team/keras#126 (an MLP with a one-unit softmax
  output makes no progress, predict_proba all ones). Cured: a sigmoid output: the loss 0.73 to
  0.59, the error 0.51 to 0.28."""
  x, y = census_tasks(seed)
  return cases.Setup(mmoe_lite(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), BCE(), data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')
