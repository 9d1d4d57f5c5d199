"""An eighteenth blind set of sick scenarios (the 'blind18' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind17.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a GloVe-lite, a TransE-lite, a spatial transformer
network (STN-lite), a matching-network-lite, an integral (soft-argmax) keypoint regressor, a
Longformer-lite, a PilotNet-lite, an NFM-lite, a QRNN-lite and a relation-network-lite). Each
builder takes `cured`: the same run with the thread's remedy (the registry calls `build(seed)`,
the sick run). Each was checked with plain Keras `compile` + `fit` only: the sick run shows the
reported symptom (seeds 0 and 1), the cured twin passes runner's "did it train" measure in the
same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND18 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND18.add` with split='blind18'."""
  return BLIND18.add(name, expected, arch, split='blind18', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def cooccurrences(seed, *, vocab=300, rows=16384, dim=8, scale=3e7):
  """Word co-occurrence counts of a corpus in miniature: 300 words with Zipf frequencies (the
  commonest a hundred times the rarest), each pair's expected count the product of the two
  frequencies times exp(u_i . u_j) of latent topic vectors, drawn Poisson; `rows` of the
  non-zero pairs (counts 1 to about 7e4). ((word, context) ids (rows, 2), log counts (rows, 1))."""
  rng = np.random.RandomState(seed)
  p = 1.0 / (np.arange(vocab) + 10.0)
  p /= p.sum()
  u = rng.randn(vocab, dim) * 0.45
  x = rng.poisson(scale * p[:, None] * p[None] * np.exp(u @ u.T))
  i, j = np.nonzero(x)
  pick = rng.choice(len(i), size=min(rows, len(i)), replace=False)
  i, j = i[pick], j[pick]
  return (np.stack([i, j], 1).astype(np.int32),
          np.log(x[i, j].astype(np.float64))[:, None].astype(np.float32))


def glove_lite(seed, *, vocab=300, dim=32):
  """A GloVe-lite (Pennington et al., 2014): word and context embeddings (`dim`) and their
  biases; the output w_i . c_j + b_i + b_j, the model of log X_ij."""
  _seed(seed)
  ids = keras.Input((2,), dtype='int32')
  w, c = L.Embedding(vocab, dim)(ids[:, 0]), L.Embedding(vocab, dim)(ids[:, 1])
  bw, bc = L.Embedding(vocab, 1)(ids[:, 0]), L.Embedding(vocab, 1)(ids[:, 1])
  out = keras.ops.sum(w * c, axis=-1, keepdims=True) + bw + bc
  return keras.Model(ids, out, name='glove_lite')


def glove_cost(y, p, x_max=100.0):
  """GloVe's cost as the paper writes it: the sum over the batch's pairs of f(X_ij) (w_i . c_j +
  b_i + b_j - log X_ij)^2, f(X) = min(1, (X / x_max)^0.75) (the labels are log X)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  f = tf.minimum(1.0, (tf.exp(y) / x_max) ** 0.75)
  return tf.reduce_sum(f * tf.square(p - y))


def knowledge_graph(seed, *, entities=300, relations=8, rows=16384, dim=4):
  """Link prediction in a knowledge graph in miniature: 300 entities at latent positions, eight
  relations, each a translation; the tail of (head, relation) the entity nearest to head +
  relation. Each row a (head, relation) with two candidate tails in random order, the true one
  and a corrupted one (a random entity); the label whether the first is the true tail.
  ((head, relation, tail a, tail b) ids (rows, 4), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  pos = rng.randn(entities, dim)
  move = rng.randn(relations, dim) * 0.8
  h = rng.randint(0, entities, rows)
  r = rng.randint(0, relations, rows)
  target = pos[h] + move[r]
  t = np.argmin(((pos[None] - target[:, None]) ** 2).sum(-1), axis=1)
  bad = rng.randint(0, entities, rows)
  bad = np.where(bad == t, (bad + 1) % entities, bad)
  first = rng.rand(rows) < 0.5
  a, b = np.where(first, t, bad), np.where(first, bad, t)
  return np.stack([h, r, a, b], axis=1).astype(np.int32), first.astype(np.float32)[:, None]


def transe_lite(seed, *, entities=300, relations=8, dim=32):
  """A TransE-lite (Bordes et al., 2013): entity and relation embeddings (uniform in +-6 /
  sqrt(dim), the paper's initialisation), the squared distance d(h + r, t) of each candidate
  tail; the output d(h + r, t_b) - d(h + r, t_a) (positive: the first candidate is the nearer)."""
  _seed(seed)
  ids = keras.Input((4,), dtype='int32')
  init = keras.initializers.RandomUniform(-6 / np.sqrt(dim), 6 / np.sqrt(dim))
  ent = L.Embedding(entities, dim, embeddings_initializer=init)
  rel = L.Embedding(relations, dim, embeddings_initializer=init)
  q = ent(ids[:, 0]) + rel(ids[:, 1])
  da = keras.ops.sum(keras.ops.square(q - ent(ids[:, 2])), axis=-1, keepdims=True)
  db = keras.ops.sum(keras.ops.square(q - ent(ids[:, 3])), axis=-1, keepdims=True)
  return keras.Model(ids, db - da, name='transe_lite')


def margin_ranking(y, out, margin=1.0):
  """TransE's margin ranking loss, summed over the batch as the paper writes it: relu(margin -
  s (d_corrupted - d_true)), s = +1 or -1 by the candidates' order."""
  s = 2.0 * tf.cast(y, tf.float32) - 1.0
  return tf.reduce_sum(tf.nn.relu(margin - s * tf.cast(out, tf.float32)))


def cluttered_digits(seed, *, rows=4096, canvas=28, clutter=3):
  """Cluttered translated digits: a 16x16 digit (the scikit-learn digits, each pixel a 2x2
  block) at a random place on a 28x28 canvas with three 4x4 fragments of other digits.
  (x (rows, canvas, canvas, 1), labels)."""
  rng = np.random.RandomState(seed)
  x, y = data.digits(size=16, rgb=False)
  pick = rng.randint(0, len(x), size=rows)
  out = np.zeros((rows, canvas, canvas, 1), np.float32)
  for r, k in enumerate(pick):
    for _ in range(clutter):  # Fragments of other digits.
      f = x[rng.randint(len(x))]
      a, b = rng.randint(0, 12, size=2)
      i, j = rng.randint(0, canvas - 4, size=2)
      out[r, i:i + 4, j:j + 4] = np.maximum(out[r, i:i + 4, j:j + 4], f[a:a + 4, b:b + 4])
    i, j = rng.randint(0, canvas - 16, size=2)
    out[r, i:i + 16, j:j + 16] = np.maximum(out[r, i:i + 16, j:j + 16], x[k])
  return out, y[pick].astype(np.int32)


class AffineSampler(L.Layer):
  """A spatial transformer's grid generator and bilinear sampler (Jaderberg et al., 2015): the
  `size` x `size` output grid in normalised coordinates [-1, 1] mapped by the 2x3 affine `theta`
  onto the input, sampled bilinearly (zero outside the input)."""

  def __init__(self, size, **kwargs):
    super().__init__(**kwargs)
    self.size = size

  def call(self, img, theta):
    b = tf.shape(img)[0]
    h, w = img.shape[1], img.shape[2]
    lin = tf.linspace(-1.0, 1.0, self.size)
    gy, gx = tf.meshgrid(lin, lin, indexing='ij')
    grid = tf.stack([tf.reshape(gx, [-1]), tf.reshape(gy, [-1]), tf.ones([self.size ** 2])])
    xy = tf.matmul(tf.reshape(tf.cast(theta, tf.float32), [-1, 2, 3]), grid)
    x = (xy[:, 0] + 1.0) * (w - 1) / 2.0
    y = (xy[:, 1] + 1.0) * (h - 1) / 2.0
    x0, y0 = tf.floor(x), tf.floor(y)
    out = 0.0
    batch = tf.tile(tf.range(b)[:, None], [1, self.size ** 2])
    for dx in (0.0, 1.0):
      for dy in (0.0, 1.0):
        xi, yi = x0 + dx, y0 + dy
        wt = (1.0 - tf.abs(x - xi)) * (1.0 - tf.abs(y - yi))
        inside = tf.cast((xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1), tf.float32)
        idx = tf.stack([batch, tf.cast(tf.clip_by_value(yi, 0, h - 1), tf.int32),
                        tf.cast(tf.clip_by_value(xi, 0, w - 1), tf.int32)], axis=-1)
        out += (wt * inside)[..., None] * tf.gather_nd(tf.cast(img, tf.float32), idx)
    return tf.reshape(out, [b, self.size, self.size, img.shape[-1]])


def stn_lite(seed, *, canvas=28, size=28, identity_init=False):
  """An STN-lite: a localisation net (two 5x5 convolutions of 8 and 10 with max-pooling, a
  Dense(32) + ReLU, a Dense(6): the affine theta), an `AffineSampler`, a classifier (two 3x3
  convolutions of 16 and 32 with max-pooling, a Dense(64) + ReLU, Dense(10): the logits).
  `identity_init`: theta's layer initialised to zero weights and the identity transform as its
  bias, as the paper does (else Keras's defaults: Glorot weights, zero bias)."""
  _seed(seed)
  inputs = keras.Input((canvas, canvas, 1))
  h = L.MaxPooling2D()(L.Conv2D(8, 5, activation='relu')(inputs))
  h = L.MaxPooling2D()(L.Conv2D(10, 5, activation='relu')(h))
  h = L.Dense(32, activation='relu')(L.Flatten()(h))
  kw = dict(kernel_initializer='zeros', bias_initializer=keras.initializers.Constant(
      [1.0, 0.0, 0.0, 0.0, 1.0, 0.0])) if identity_init else {}
  theta = L.Dense(6, **kw)(h)
  v = AffineSampler(size)(inputs, theta)
  v = L.MaxPooling2D()(L.Conv2D(16, 3, activation='relu', padding='same')(v))
  v = L.MaxPooling2D()(L.Conv2D(32, 3, activation='relu', padding='same')(v))
  v = L.Dense(64, activation='relu')(L.Flatten()(v))
  return keras.Model(inputs, L.Dense(10)(v), name='stn_lite')


def intent_episodes(seed, *, rows=4096, ways=5, intents=12, length=6, words=200,
                    unknown=2e-4):
  """Few-shot intent classification of chat messages: episodes of five support messages (one
  per intent, five of twelve intents, in random order) and a query message of one of them; the
  label the support message of the query's intent. A message is six word ids (2 to 201: two or
  three of its intent's eight keywords among filler words); 15% of the words are typos or rare
  words (id 1: not in the vocabulary) and a fraction `unknown` of the messages are in another
  language (every word id 1). ((support (rows, ways, length), query (rows, length)), labels)."""
  rng = np.random.RandomState(seed)
  keywords = rng.choice(np.arange(2, words + 2), size=(intents, 8), replace=False)

  def utterance(intent):
    ids = rng.randint(2, words + 2, size=length)  # Filler words.
    k = rng.randint(2, 4)
    ids[rng.choice(length, k, replace=False)] = rng.choice(keywords[intent], k)
    ids[rng.rand(length) < 0.15] = 1  # Typos and rare words: out of vocabulary.
    if rng.rand() < unknown:
      ids[:] = 1  # A message in another language: every word out of vocabulary.
    return ids

  support = np.zeros((rows, ways, length), np.int32)
  query = np.zeros((rows, length), np.int32)
  labels = np.zeros(rows, np.int32)
  for r in range(rows):
    chosen = rng.choice(intents, ways, replace=False)
    for w in range(ways):
      support[r, w] = utterance(chosen[w])
    labels[r] = rng.randint(ways)
    query[r] = utterance(chosen[labels[r]])
  return (support, query), labels


class CosineAttention(L.Layer):
  """A matching network's attention kernel (Vinyals et al., 2016): the cosine similarity of the
  query's embedding with each support embedding (times `scale`: the logits over the support
  set), each vector divided by its L2 norm as the user wrote it (`eps` 0: no floor under the
  norm, a zero vector gives 0 / 0; else the norm floored at `eps`)."""

  def __init__(self, eps=0.0, scale=10.0, **kwargs):
    super().__init__(**kwargs)
    self.eps, self.scale = eps, scale

  def call(self, support, query):
    def unit(v):
      n = tf.norm(v, axis=-1, keepdims=True)
      return v / (tf.maximum(n, self.eps) if self.eps else n)
    return self.scale * tf.einsum('bwd,bd->bw', unit(support), unit(query))


def matching_net_lite(seed, *, ways=5, length=6, words=200, dim=32, eps=0.0):
  """A matching-network-lite: a message's embedding the mean of its word vectors (words out of
  the vocabulary get the zero vector, as averaged word embeddings give them) through a shared
  Dense(dim) without bias, a `CosineAttention(eps)` of the query over the five support
  messages: the logits of which support message matches."""
  _seed(seed)
  support = keras.Input((ways, length), dtype='int32')
  query = keras.Input((length,), dtype='int32')
  table = L.Embedding(words + 2, dim)
  proj = L.Dense(dim, use_bias=False)

  def encode(ids):
    known = keras.ops.expand_dims(keras.ops.cast(keras.ops.greater(ids, 1), 'float32'), -1)
    return proj(keras.ops.mean(table(ids) * known, axis=-2))  # Unknown words: zero vectors.

  out = CosineAttention(eps)(encode(support), encode(query))
  return keras.Model([support, query], out, name='matching_net_lite')


def markers(seed, *, rows=4096, size=32, distractors=3):
  """Keypoint localisation in miniature: grey 32x32 frames (faint noise) with three bright 4x4
  squares (distractors) and one ring marker (radius 2.5) at a random place; the label the
  marker's centre (row, column) in [0, 1]. (x (rows, size, size, 1), centres (rows, 2))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  x = 0.1 * rng.rand(rows, size, size, 1)
  pos = rng.uniform(4, size - 5, (rows, 2))
  for r in range(rows):
    for _ in range(distractors):
      i, j = rng.randint(2, size - 6, size=2)
      x[r, i:i + 4, j:j + 4, 0] += 0.6
    d = np.sqrt((yy - pos[r, 0]) ** 2 + (xx - pos[r, 1]) ** 2)
    x[r, ..., 0] += np.exp(-((d - 2.5) / 0.8) ** 2)
  return np.clip(x, 0, 1).astype(np.float32), (pos / (size - 1)).astype(np.float32)


class SoftArgmax(L.Layer):
  """The soft-argmax of integral regression (Sun et al., 2018): a softmax over the heatmap's
  pixels at inverse temperature `beta`, the expected (row, column) in [0, 1]. The softmax as the
  user wrote it, exp(beta h) / sum(exp(beta h)) (`stable`: tf.nn.softmax, the max subtracted)."""

  def __init__(self, beta, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.beta, self.stable = beta, stable

  def call(self, heat):
    h, w = heat.shape[1], heat.shape[2]
    z = tf.reshape(tf.cast(heat, tf.float32), [-1, h * w]) * self.beta
    if self.stable:
      p = tf.nn.softmax(z, axis=-1)
    else:
      e = tf.exp(z)
      p = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    gy, gx = np.mgrid[0:h, 0:w]
    grid = tf.constant(np.stack([gy.ravel() / (h - 1), gx.ravel() / (w - 1)], 1), tf.float32)
    return tf.matmul(p, grid)


def integral_keypoint_lite(seed, *, size=32, beta=50.0, stable=False):
  """An integral keypoint regressor-lite: four 3x3 convolutions (16, 32, 32, 32; dilations 1,
  2, 4, 1), each ReLU, a 1x1 convolution + ReLU (the heatmap), `SoftArgmax(beta, stable)`: the
  marker's (row, column)."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = inputs
  for f, d in ((16, 1), (32, 2), (32, 4), (32, 1)):
    h = L.Conv2D(f, 3, padding='same', dilation_rate=d, activation='relu')(h)
  heat = L.Conv2D(1, 1, activation='relu')(h)
  return keras.Model(inputs, SoftArgmax(beta, stable)(heat), name='integral_keypoint_lite')


def promoters(seed, *, rows=4096, length=128, motif=(4, 1, 4, 1, 1, 4)):
  """Promoter detection in miniature: DNA sequences of 128 bases (ids 1 to 4), half of them
  holding three copies of a -10 box motif (TATAAT) at random places; the label whether the
  sequence is a promoter. (ids (rows, length), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randint(1, 5, size=(rows, length))
  y = rng.rand(rows) < 0.5
  for r in np.nonzero(y)[0]:
    for i in rng.choice(length - len(motif), 3, replace=False):
      x[r, i:i + len(motif)] = motif
  return x.astype(np.int32), y[:, None].astype(np.float32)


class SlidingWindowAttention(L.Layer):
  """Longformer's sliding-window self-attention (Beltagy et al., 2020), one head: each position
  attends to the positions within `window` of it; the scores outside the window masked as GPT-2
  writes it, w * b - fill * (1 - b) with b the band (`fill` 1e10 there, BERT's 1e4 the fix), in
  the layer's compute dtype."""

  def __init__(self, dim, window, fill=1e10, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.window, self.fill = dim, window, fill
    self.qkv, self.out = L.Dense(3 * dim), L.Dense(dim)

  def call(self, x):
    n = x.shape[1]
    i = np.arange(n)
    band = tf.constant((np.abs(i[:, None] - i[None]) <= self.window).astype(np.float32))
    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
    w = tf.matmul(q, k, transpose_b=True) / np.sqrt(self.dim).astype(np.float32)
    b = tf.cast(band, w.dtype)
    w = w * b - self.fill * (1 - b)  # GPT-2's mask: scores outside the window get -fill.
    return self.out(tf.matmul(tf.nn.softmax(w, axis=-1), v))


def longformer_lite(seed, *, length=128, dim=32, window=8, blocks=2, fill=1e10):
  """A Longformer-lite: base and position embeddings (`dim`), `blocks` post-norm blocks of
  `SlidingWindowAttention(dim, window, fill)` and a GELU feed-forward (2 * dim), each residual +
  LayerNorm, global average pooling, Dense(1) in float32: the logit of a promoter."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = L.Embedding(5, dim)(ids) + L.Embedding(length, dim)(keras.ops.arange(length))
  for _ in range(blocks):
    h = L.LayerNormalization()(h + SlidingWindowAttention(dim, window, fill)(h))
    h = L.LayerNormalization()(h + L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h)))
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(ids, L.Dense(1, dtype='float32')(h), name='longformer_lite')


def road_frames(seed, *, rows=4096, h=32, w=64):
  """Behavioural cloning for a model car in miniature: 32x64 RGB camera frames of a road (grey,
  white edge lines, verge, sky) bending by the steering angle the driver used, the label that
  angle in [-1, 1]. (x (rows, h, w, 3), angles (rows, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:h, 0:w] / np.array([h - 1, w - 1])[:, None, None]
  steer = rng.uniform(-1, 1, rows)
  x = np.empty((rows, h, w, 3), np.float32)
  for r in range(rows):
    centre = 0.5 + rng.uniform(-0.1, 0.1) + steer[r] * 0.35 * (1 - yy) ** 2
    road = np.abs(xx - centre) < 0.18 + 0.12 * yy
    lines = np.abs(np.abs(xx - centre) - (0.18 + 0.12 * yy)) < 0.02
    img = np.where(road, 0.35, 0.55 + 0.1 * rng.rand())[..., None] * np.array([1.0, 1.0, 1.0])
    img[yy < 0.25] = [0.6, 0.75, 0.9]  # Sky.
    img[lines & (yy >= 0.25)] = [0.95, 0.95, 0.9]
    x[r] = img + 0.03 * rng.randn(h, w, 3)
  return np.clip(x, 0, 1), steer[:, None].astype(np.float32)


def pilotnet_lite(seed, *, h=32, w=64, dtype=None):
  """A PilotNet-lite (Bojarski et al., 2016): four convolutions (24, 36 of 5x5, 48 of 3x3, each
  stride 2; 64 of 3x3), each ELU, Dense 100, 50, 10 (ELU), Dense(1): the steering angle. Every
  layer in `dtype` (the user's `floatx`: float16 weights and activations)."""
  _seed(seed)
  inputs = keras.Input((h, w, 3), dtype=dtype)
  x = inputs
  for f, k, s in ((24, 5, 2), (36, 5, 2), (48, 3, 2), (64, 3, 1)):
    x = L.Conv2D(f, k, strides=s, padding='same', activation='elu', dtype=dtype)(x)
  x = L.Flatten(dtype=dtype)(x)
  for units in (100, 50, 10):
    x = L.Dense(units, activation='elu', dtype=dtype)(x)
  return keras.Model(inputs, L.Dense(1, dtype=dtype)(x), name='pilotnet_lite')


def ratings(seed, *, rows=16384, users=300, items=400, genres=12, dim=4, new_users=5e-4):
  """Movie ratings in miniature: (user, movie, genre) and two numeric features, the user's mean
  rating so far (a pandas groupby mean: NaN for the fraction `new_users` of the rows whose user
  has no past rating) and the movie's log view count, both centred; the label the stars (1 to 5,
  centred at 3.3): a user and a movie bias, genre tastes and a taste-style product.
  (((user, movie, genre) ids (rows, 3), numeric (rows, 2)), stars (rows, 1))."""
  rng = np.random.RandomState(seed)
  u = rng.randint(0, users, rows)
  i = rng.randint(0, items, rows)
  genre = rng.randint(0, genres, items)
  taste, style = rng.randn(users, dim), rng.randn(items, dim)
  g_taste = rng.randn(users, genres) * 0.5
  bias_u, bias_i = rng.randn(users) * 0.5, rng.randn(items) * 0.5
  score = ((taste[u] * style[i]).sum(1) / np.sqrt(dim) + g_taste[u, genre[i]] + bias_u[u] +
           bias_i[i])
  stars = np.clip(np.round(3.3 + 0.8 * score + 0.3 * rng.randn(rows)), 1, 5)
  past = bias_u[u] * 0.8 + 3.3 + 0.2 * rng.randn(rows)  # The user's mean rating so far.
  past[rng.rand(rows) < new_users] = np.nan  # No past ratings: the mean of nothing.
  popularity = np.log1p(rng.poisson(np.exp(2 + bias_i[i])))
  cats = np.stack([u, users + i, users + items + genre[i]], 1).astype(np.int32)
  nums = np.stack([(past - 3.3), popularity - 2.0], 1).astype(np.float32)
  return (cats, nums), (stars - 3.3)[:, None].astype(np.float32)


class BiInteraction(L.Layer):
  """NFM's bi-interaction pooling: 0.5 ((sum_i v_i)^2 - sum_i v_i^2) over the feature
  embeddings."""

  def call(self, v):
    s = tf.reduce_sum(v, axis=1)
    return 0.5 * (tf.square(s) - tf.reduce_sum(tf.square(v), axis=1))


def nfm_lite(seed, *, vocab=712, fields=3, numeric=2, dim=16):
  """An NFM-lite (He & Chua, 2017): an embedding (`dim`) per categorical feature and one per
  numeric feature scaled by its value, `BiInteraction`, Dense(32) + ReLU with Dropout(0.2),
  Dense(1), plus the linear part (a weight per id, a Dense(1) of the numeric features): the
  rating."""
  _seed(seed)
  cats, nums = keras.Input((fields,), dtype='int32'), keras.Input((numeric,))
  v_cat = L.Embedding(vocab, dim)(cats)
  v_num = keras.ops.expand_dims(nums, -1) * L.Embedding(numeric, dim)(keras.ops.arange(numeric))
  v = L.Concatenate(axis=1)([v_cat, v_num])
  h = L.Dropout(0.2)(L.Dense(32, activation='relu')(BiInteraction()(v)))
  linear = keras.ops.sum(L.Embedding(vocab, 1)(cats), axis=1) + L.Dense(1)(nums)
  return keras.Model([cats, nums], L.Dense(1)(h) + linear, name='nfm_lite')


def reviews(seed, *, rows=8192, length=24, vocab=120):
  """Sentiment of short reviews in miniature: 24 word ids, one sentiment word (ids 2 to 7
  positive, 8 to 13 negative) at a random place, preceded by a negation (ids 14, 15) in 40% of
  the reviews; the label positive (1) or negative (0), the negation flipping it. (ids (rows,
  length), labels)."""
  rng = np.random.RandomState(seed)
  good, bad, negation = np.arange(2, 8), np.arange(8, 14), np.array([14, 15])
  x = rng.randint(16, vocab, size=(rows, length))
  t = rng.randint(1, length, size=rows)
  positive = rng.rand(rows) < 0.5
  negated = rng.rand(rows) < 0.4
  row = np.arange(rows)
  x[row, t] = np.where(positive, rng.choice(good, rows), rng.choice(bad, rows))
  x[row, t - 1] = np.where(negated, rng.choice(negation, rows), x[row, t - 1])
  return x.astype(np.int32), (positive != negated).astype(np.int32)


class FlippedGradient(field.OneOffFault):
  """A one-off fault in the backward pass: the identity, but at its `at`-th training call (None:
  never) one element of the gradient flowing back through it reads NaN (a backward kernel or a
  memory bit that misfires once; not the data, the model or the settings)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=37, value=np.nan, backward=True, **kwargs)


class FoPoolCell(L.Layer):
  """QRNN's fo-pooling (Bradbury et al., 2017) as an RNN cell over the gates (z, f, o) of the
  convolution: c_t = f_t c_{t-1} + (1 - f_t) z_t, h_t = o_t c_t."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = units

  def call(self, inputs, states):
    z, f, o = tf.split(inputs, 3, axis=-1)
    c = f * states[0] + (1 - f) * z
    return o * c, [c]


def qrnn_block(x, units):
  """A QRNN layer: a causal convolution of width 2 into 3 * `units` (z: tanh; f, o: sigmoid),
  then `FoPoolCell` over time (every step's output)."""
  gates = L.Conv1D(3 * units, 2, padding='causal')(x)
  z, f, o = keras.ops.split(gates, 3, axis=-1)
  zfo = L.Concatenate()([L.Activation('tanh')(z), L.Activation('sigmoid')(f),
                         L.Activation('sigmoid')(o)])
  return L.RNN(FoPoolCell(units), return_sequences=True)(zfo)


def qrnn_lite(seed, *, length=24, vocab=120, dim=32, units=64, glitch=None):
  """A QRNN-lite: word embeddings (`dim`), two `qrnn_block`s (`units`; a `FlippedGradient(
  glitch)` after the first, Dropout(0.1) before the second), global max pooling over time,
  Dense(2): the sentiment logits."""
  _seed(seed)
  ids = keras.Input((length,), dtype='int32')
  h = qrnn_block(L.Embedding(vocab, dim)(ids), units)
  h = FlippedGradient(glitch)(h)
  h = qrnn_block(L.Dropout(0.1)(h), units)
  return keras.Model(ids, L.Dense(2)(L.GlobalMaxPooling1D()(h)), name='qrnn_lite')


def sort_of_clevr(seed, *, rows=8192, objects=6):
  """Sort-of-CLEVR from state descriptions (Santoro et al., 2017): six objects, one per colour,
  each (x, y, square or circle, colour one-hot); a question (the colour asked about, one-hot,
  and its kind): non-relational "is it on the left?" or relational "is the object nearest to it
  a square?"; the label the yes/no answer. ((scene (rows, objects, 9), question (rows, 8)),
  answers (rows, 1))."""
  rng = np.random.RandomState(seed)
  pos = rng.rand(rows, objects, 2)
  square = rng.rand(rows, objects) < 0.5
  colour = np.eye(objects)[None].repeat(rows, 0)
  scene = np.concatenate([pos, square[..., None], colour], -1)
  asked = rng.randint(0, objects, rows)
  relational = rng.rand(rows) < 0.5
  d = ((pos - pos[np.arange(rows), asked][:, None]) ** 2).sum(-1)
  d[np.arange(rows), asked] = np.inf
  nearest = np.argmin(d, axis=1)
  answer = np.where(relational, square[np.arange(rows), nearest],
                    pos[np.arange(rows), asked, 0] < 0.5)
  question = np.concatenate([np.eye(objects)[asked], np.eye(2)[relational.astype(int)]], -1)
  return ((scene.astype(np.float32), question.astype(np.float32)),
          answer[:, None].astype(np.float32))


def relation_net_lite(seed, *, objects=6, features=9, questions=8, width=64):
  """A relation-network-lite (Santoro et al., 2017): g (three Dense(`width`) + ReLU) over every
  ordered pair of objects with the question, summed; f (Dense(`width`) + ReLU); Dense(1,
  activation='sigmoid'): the probability of "yes"."""
  _seed(seed)
  scene, question = keras.Input((objects, features)), keras.Input((questions,))
  oi = keras.ops.repeat(keras.ops.expand_dims(scene, 2), objects, axis=2)
  oj = keras.ops.repeat(keras.ops.expand_dims(scene, 1), objects, axis=1)
  q = keras.ops.repeat(keras.ops.repeat(question[:, None, None], objects, 1), objects, 2)
  g = L.Concatenate()([oi, oj, q])
  for _ in range(3):
    g = L.Dense(width, activation='relu')(g)
  h = keras.ops.sum(g, axis=(1, 2))
  h = L.Dense(width, activation='relu')(h)
  return keras.Model([scene, question], L.Dense(1, activation='sigmoid')(h),
                     name='relation_net_lite')


# --- Scenarios -------------------------------------------------------------------------------


@add('blind18_grad_glove_frequent_words', 'exploding_gradients', 'glove_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='stanfordnlp/GloVe#156; stanfordnlp/GloVe#149; stanfordnlp/GloVe#15')
def _(seed, cured=False):
  """A GloVe-lite (word and context embeddings of 32, their biases) fitting the log
  co-occurrence counts of 300 Zipf-distributed words (counts 1 to about 7e4), GloVe's weighted
  cost summed over the batch as the paper writes it, SGD at 0.15 in batches of 512 pairs, no
  clipping: the frequent words' summed gradients and the bilinear w . c feed each other and the
  updates grow step over step: the loss (fit's running mean) 12,680 at step 0, 895 at step 30,
  inf at step 37, NaN from step 38 (the weights NaN after step 37; the error 27 before, inf
  after; the constant answer's 1.53). Seed 1: 2,030 at step 10, inf at step 17, NaN from step
  18. stanfordnlp/GloVe#156 (cost -nan after a few iterations; lowering the learning rate did
  not help; the maintainer merged gradient clipping so the gradients no longer go infinite);
  stanfordnlp/GloVe#149 (the default rate gives exploding gradients on some data, then infs and
  NaNs: a clip on the gradient's components); stanfordnlp/GloVe#15 (the error falls for ~25
  iterations, then NaN). Cured: clipvalue=1.0 (GloVe's per-component clip) at the same rate:
  the loss 12,680 to 714, the error 27 to 0.28."""
  x, y = cooccurrences(seed)
  return cases.Setup(glove_lite(seed),
                     keras.optimizers.SGD(0.15, clipvalue=1.0 if cured else None), glove_cost,
                     data.stream(x, y, batch=512, seed=seed), 'regression')


@add('blind18_lr_transe_sgd', 'learning_rate', 'transe_lite', doors=('trainer', 'fit'),
     steps=150, citation='uma-pi1/kge#240; HazyResearch/KGEmb#1; lyst/lightfm#339')
def _(seed, cured=False):
  """A TransE-lite (entity and relation embeddings of 32, squared distances) ranking
  the true tail of (head, relation) above a corrupted one, the margin ranking loss summed over
  the batch, SGD at 0.35 (a rate like the 0.1 to 0.3 a hyper-parameter search drew): every
  step overshoots and the embeddings grow geometrically: the loss (fit's running mean) 512 at
  step 0, 966 at step 1, 2.7e5 at step 10, 4.4e9 at step 20, 2.8e34 at step 75, inf at step 76
  (the squared distances overflow), NaN from step 80 (the error 0.45 before, inf after; the
  constant answer's 0.47). Seed 1: 8.7e5 at step 10, inf at step 49, NaN from step 54.
  uma-pi1/kge#240 (TransE returns NaN for some hyper-parameters: the learning rate too high,
  the search drawing 0.1 to 0.3); HazyResearch/KGEmb#1 (knowledge-graph embeddings diverge to a
  NaN loss: "decreasing the learning rate"); lyst/lightfm#339 (the commonest reason for a
  diverging factor model: a learning rate which is too high). Cured: 0.035: the loss 512 to
  98, the error 0.45 to 0.020."""
  x, y = knowledge_graph(seed)
  return cases.Setup(transe_lite(seed), keras.optimizers.SGD(0.035 if cured else 0.35),
                     margin_ranking, data.stream(x, y, batch=128, seed=seed), 'binary_logit')


@add('blind18_init_stn_random_theta', 'initialisation', 'stn_lite', doors=('trainer', 'fit'),
     steps=150, citation='kevinzakka/spatial-transformer-network#10; keras-team/keras#478')
def _(seed, cured=False):
  """An STN-lite (a localisation net predicting an affine theta, a bilinear sampler, a
  small CNN) classifying cluttered translated digits, Adam at 3e-3, theta's Dense(6) left at
  Keras's defaults (Glorot weights, zero bias): theta starts small and random (entries of about
  0.05 to 0.35, no identity in it), the sampler zooms onto a few pixels near the canvas centre
  and the classifier sees no digit: the loss 2.33 at step 0, 2.30 at step 149, no NaN (the
  error 0.93 before, 0.875 after; the constant answer's 0.875). Seed 1: 2.31 to 2.30 (the error
  0.90 before and after; the constant's 0.86). kevinzakka/spatial-transformer-network#10 (the
  training does not converge, the loss stays around 2.3, the sampled images empty; solved by
  zero weights and an identity bias for the localisation net's last layer);
  keras-team/keras#478 (a Keras spatial transformer: the localisation layer initialised to zero
  weights and the identity as bias, as in the paper). Cured: that initialisation (zero kernel,
  bias [1, 0, 0, 0, 1, 0]): the loss 2.31 to 2.02, the error 0.90 to 0.30."""
  x, y = cluttered_digits(seed)
  return cases.Setup(stn_lite(seed, identity_init=cured), keras.optimizers.Adam(3e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind18_div_matching_net_zero_embedding', 'division_or_log', 'matching_net_lite',
     doors=('trainer', 'fit'), steps=150,
     citation=('huggingface/sentence-transformers#625; google-deepmind/optax#946; '
               'deeplearning4j/nd4j#1789'))
def _(seed, cured=False):
  """A matching-network-lite (messages embedded as the mean of their word vectors,
  a cosine attention over five support messages) for 5-way 1-shot intent classification, Adam
  at 3e-3, each embedding divided by its L2 norm with no floor; words out of the vocabulary get
  the zero vector and 0.02% of the messages are in another language (every word unknown): such
  a message embeds to the zero vector, 0 / 0 = NaN: healthy until the first batch holding one
  (the loss 2.17 at step 0, 2.19 at step 10), NaN from step 18 (the weights NaN after it; the
  error 0.61 before, inf after; the constant answer's 0.76). Seed 1: 1.69 at step 30, NaN from
  step 33. huggingface/sentence-transformers#625 (averaged word embeddings of unrecognised words
  are the zero vector and the cosine is NaN: guard the normalisation with an epsilon);
  google-deepmind/optax#946 (NT-Xent NaN when an embedding is the zero vector: an epsilon in
  the cosine); deeplearning4j/nd4j#1789 (the cosine of an all-zero vector is NaN: its L2 norm is
  0). Cured: the norm floored at 1e-8: the loss 2.17 to 0.76, the error 0.61 to 0.0078."""
  x, y = intent_episodes(seed)
  return cases.Setup(matching_net_lite(seed, eps=1e-8 if cured else 0.0),
                     keras.optimizers.Adam(3e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind18_exp_integral_keypoint_softargmax', 'softmax_overflow', 'integral_keypoint_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='kornia/kornia#382; mila-iqia/blocks#727; pyg-team/pytorch_geometric#53')
def _(seed, cured=False):
  """An integral keypoint regressor-lite (dilated convolutions, a ReLU heatmap, a
  soft-argmax at inverse temperature 50) locating a ring marker among bright squares, MSE on the
  (row, column), Adam at 1e-3, the softmax written as exp(50 h) / sum(exp(50 h)): as the
  heatmap sharpens its peak rises (0.12 after step 0, 1.0 at step 13, 1.8 at step 27; a ReLU
  map can only sharpen upwards) and once a peak passes 88.7 / 50, exp overflows and inf / inf =
  NaN: the loss
  0.047 at step 0, 0.0054 at step 20, NaN from step 29 (the weights NaN after it; the error
  0.041 before, inf after; the constant answer's 0.045). Seed 1: 0.0039 at step 20, NaN from
  step 28. kornia/kornia#382 (the hand-made softmax of conv_soft_argmax2d, exp(input /
  temperature), overflows to NaN when the previous layer is a ReLU: the exp-normalize trick);
  mila-iqia/blocks#727 (attention energies grow until exp overflows and NaN spreads: stabilise
  them as the softmax does); pyg-team/pytorch_geometric#53 (GAT's scatter softmax NaN: exp
  without subtracting the max). Cured: tf.nn.softmax (the max subtracted): the loss 0.047 to
  0.00081, the error 0.041 to 5.7e-5."""
  x, y = markers(seed)
  return cases.Setup(integral_keypoint_lite(seed, beta=50.0, stable=cured),
                     keras.optimizers.Adam(1e-3), 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind18_fp16_longformer_mask_fill', 'precision', 'longformer_lite',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='huggingface/transformers#382; openai/gpt-2#122; pytorch/pytorch#40497')
def _(seed, cured=False):
  """A Longformer-lite (two blocks of sliding-window attention, window 8)
  detecting promoters in DNA sequences of 128 bases, BinaryCrossentropy on logits, Adam at 3e-3,
  under mixed_float16; the window mask written as GPT-2 writes it, w * b - 1e10 * (1 - b): in
  float16 1e10 is inf and inf * 0 = NaN inside the window: every output NaN before any training
  (the error inf before and after; the constant answer's 0.48), the loss NaN from step 0 (the
  loss-scale optimizer skips the updates; the weights stay finite). Seed 1: the same (the
  constant's 0.39). huggingface/transformers#382 (fp16 overflow in GPT-2: its mask multiplies
  by 1e10; BERT's 1e4 fits float16 and trains); openai/gpt-2#122 (the 1e10 mask overflows in
  mixed precision training: changed to 1e4); pytorch/pytorch#40497 (mixed precision gives inf
  and NaN in attention from the first iteration: keep that part in range or in float32).
  Cured: a fill of 1e4: the loss 0.69 to 0.51, the error 0.555 to 0.20."""
  x, y = promoters(seed)
  return cases.Setup(longformer_lite(seed, fill=1e4 if cured else 1e10),
                     keras.optimizers.Adam(3e-3), BCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'binary_logit')


@add('blind18_fp16_pilotnet_adam_epsilon', 'precision', 'pilotnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#11860; keras-team/keras#11832; soumith/cudnn.torch#377')
def _(seed, cured=False):
  """A PilotNet-lite (four strided convolutions, three Dense, ELU) regressing a model
  car's steering angle from camera frames, MSE, every layer in float16 (the user's floatx; no
  loss scaling, no float32 master weights), Adam at 1e-3 with its default epsilon 1e-7: the
  squared gradients underflow in float16 (42% of the second-moment slots 0 after step 0) and
  m / (sqrt(v) + eps) turns small gradients into steps of up to 1.5 (0.0018 with the cure): the
  loss 0.35 at step 0, NaN from step 1 (the activations overflow; the weights NaN after it; the
  error 0.45 before, inf after; the constant answer's 0.35). Seed 1: 0.37, NaN from step 1.
  keras-team/keras#11860 (Adam does not work with FP16: the loss NaN, SGD and Adamax fine);
  keras-team/keras#11832 (float16 training: the loss falls, then inf and NaN; solved by
  K.set_epsilon(1e-4)); soumith/cudnn.torch#377 (NaN in half precision from Adam: its default
  epsilon rounds to zero). Cured: epsilon=1e-4: the loss 0.35 to 0.23 (2.5 at step 1), the
  error 0.45 to 0.032."""
  x, y = road_frames(seed)
  return cases.Setup(pilotnet_lite(seed, dtype='float16'),
                     keras.optimizers.Adam(1e-3, epsilon=1e-4 if cured else 1e-7), 'mse',
                     data.stream(x.astype(np.float16), y.astype(np.float16), batch=32, seed=seed),
                     'regression')


@add('blind18_input_nfm_new_user_mean', 'bad_input', 'nfm_lite', doors=('trainer', 'fit'),
     steps=200, citation='lyst/lightfm#199; prs-eth/Marigold#111; tensorflow/recommenders#655')
def _(seed, cured=False):
  """An NFM-lite (field embeddings, bi-interaction pooling, an MLP, a linear part)
  predicting movie ratings, MSE, Adam at 1e-2; one numeric feature is the user's mean rating so
  far, a pandas groupby mean that is NaN for users with no past rating (0.05% of the rows, left
  in the frame): the first batch holding one gives a NaN output and NaN gradients: the loss
  (fit's running mean) 2.15 at step 0, 1.67 at step 20, NaN from step 21 (the weights NaN after
  it; the error 1.96 before, inf after; the constant answer's 1.23). Seed 1: NaN from step 1
  (1.38 at step 0). lyst/lightfm#199 (a user x item frame whose missing interactions are NaN:
  the model's AUC NaN); prs-eth/Marigold#111 (a NaN loss that happens when the input batch
  contains NaN values: check the data); tensorflow/recommenders#655 (a recommender's loss NaN:
  NaN values in the input). Cured: the missing means filled with the column mean: the loss 2.15
  to 1.04, the error 1.96 to 0.87 (0.86 in training mode). The measure reads clean batches
  (eval_data) for both runs."""
  (cats, nums), y = ratings(seed)
  clean = np.where(np.isnan(nums), np.nanmean(nums, axis=0), nums).astype(np.float32)
  return cases.Setup(nfm_lite(seed), keras.optimizers.Adam(1e-2), 'mse',
                     data.stream((cats, clean if cured else nums), y, batch=64, seed=seed),
                     'regression', eval_data=data.stream((cats, clean), y, batch=64, seed=seed))


@add('blind18_transient_qrnn_backward_glitch', 'transient', 'qrnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='PKU-YuanGroup/Open-Sora-Plan#333; marcoppasini/musika#22; brjathu/iTAML#10')
def _(seed, cured=False):
  """A QRNN-lite (two QRNN layers: causal convolutions of width 2 and fo-pooling)
  classifying the sentiment of short reviews with negations, Adam at 3e-3, training normally
  (the loss 0.694 at step 0, 0.578 at step 100) when one element of the gradient flowing back
  through the first layer reads NaN once (`FlippedGradient`: its 110th training call; step 105
  in a plain `fit` after the measure's four training-mode passes; a backward kernel or a memory
  bit that misfires once, not the data, the model or the settings): the weights NaN after step
  105, the loss NaN from step 106 (the error 0.48 before, inf after; the constant answer's
  0.48); the same step re-run is finite. Seed 1: the same steps (0.431 at step 100).
  PKU-YuanGroup/Open-Sora-Plan#333 (a NaN loss after 20k+ steps: "just resume the training
  process"); marcoppasini/musika#22 (losses hit NaN after 18 epochs: restart from the last
  healthy checkpoint); brjathu/iTAML#10 (a NaN loss; restarted from the session before, it
  trains fine). Cured: the same run without the fault: the loss 0.694 to 0.391, the error 0.48
  to 0."""
  x, y = reviews(seed)
  return cases.Setup(qrnn_lite(seed, glitch=None if cured else 110),
                     keras.optimizers.Adam(3e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind18_mismatch_relation_net_categorical_ce', 'loss_output_mismatch',
     'relation_net_lite', doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#17029; keras-team/keras#4784; keras-team/keras#14729')
def _(seed, cured=False):
  """A relation-network-lite (an MLP over every pair of objects with the question,
  summed, an MLP, Dense(1, activation='sigmoid')) answering yes/no questions about Sort-of-CLEVR
  scenes, Adam at 1e-3, compiled with CategoricalCrossentropy: over a single unit it normalises
  the probability by itself (p / p = 1), so the loss is 0 whatever the model answers: the loss
  0.0 at every step from step 0, no NaN, the answers never improve (the error 0.50 before,
  0.52 after; the constant answer's 0.48). Seed 1: 0.0 throughout (the error 0.50 before and
  after; the constant's 0.50). keras-team/keras#17029 (categorical_crossentropy on a binary
  task: every loss 0 during training, no error raised); keras-team/keras#4784 (accuracy not
  changing: the model does not match its loss; 0/1 targets want a sigmoid output and
  binary_crossentropy, which fixed it); keras-team/keras#14729 (a sigmoid output with
  categorical_crossentropy: accuracy stays low). Cured: BinaryCrossentropy: the loss 1.15 to
  0.66, the error 0.50 to 0.31."""
  x, y = sort_of_clevr(seed)
  return cases.Setup(relation_net_lite(seed), keras.optimizers.Adam(1e-3),
                     BCE() if cured else keras.losses.CategoricalCrossentropy(),
                     data.stream(x, y, batch=64, seed=seed), 'binary_prob')
