"""A fifth blind set of sick scenarios (the 'blind5' split), written without reading the doctor,
its policies, forensics or notes, or the other sick files (sick_blind4.py read for its format
only): each is the set-up and symptom of a public user report (cited in its docstring) on an
architecture no other registry entry uses (an IndRNN, a graph isomorphism network with sum
aggregation, a dueling Q-network, a hypernetwork, a self-normalising SELU network, a capsule
network with dynamic routing, a Perceiver-lite latent cross-attention classifier, a RealNVP-style
coupling-flow classifier, a CRNN on log spectrograms, a ResNeXt-lite grouped-convolution net, a
hierarchical attention network). Each builder takes `cured`: the same run with the thread's
remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain Keras `fit`:
the sick run shows the reported symptom, the cured twin passes runner's "did it train" measure
in the same number of steps."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data

BLIND5 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
BCE = keras.losses.BinaryCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND5.add` with split='blind5'."""
  return BLIND5.add(name, expected, arch, split='blind5', **fields)


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


class IndRNNCell(L.Layer):
  """An independently recurrent cell (Li et al. 2018): h_t = ReLU(W x_t + u * h_{t-1} + b), one
  recurrent weight per unit; `recurrent_max`: u clipped to [0, recurrent_max] after each update
  (the paper's constraint, 2^(1/T)); None: unconstrained."""

  def __init__(self, units, recurrent_max=None, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.state_size = units
    self.output_size = units
    self.recurrent_max = recurrent_max

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[-1], self.units), initializer='glorot_uniform',
                             name='w')
    constraint = None
    if self.recurrent_max is not None:
      top = self.recurrent_max
      constraint = lambda u: tf.clip_by_value(u, 0.0, top)
    self.u = self.add_weight(shape=(self.units,),
                             initializer=keras.initializers.RandomUniform(0.0, 1.0), name='u',
                             constraint=constraint)
    self.b = self.add_weight(shape=(self.units,), initializer='zeros', name='b')

  def call(self, x, states):
    h = tf.nn.relu(tf.matmul(x, self.w) + self.u * states[0] + self.b)
    return h, [h]


def indrnn(seed, *, steps=100, units=32, recurrent_max=None):
  """Two stacked IndRNN layers (32 units, ReLU) over a numeric sequence, Dense(1)."""
  _seed(seed)
  inputs = keras.Input((steps, 1))
  h = L.RNN(IndRNNCell(units, recurrent_max), return_sequences=True)(inputs)
  h = L.RNN(IndRNNCell(units, recurrent_max))(h)
  return keras.Model(inputs, L.Dense(1)(h), name='indrnn')


class GINLayer(L.Layer):
  """A graph isomorphism layer (Xu et al.): MLP((1 + eps) h_i + sum_{j in N(i)} h_j), the MLP
  Dense(units, ReLU) -> Dense(units, ReLU), He init; sum aggregation, no normalisation."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.d1 = L.Dense(units, activation='relu', kernel_initializer='he_normal')
    self.d2 = L.Dense(units, activation='relu', kernel_initializer='he_normal')

  def build(self, shapes):
    self.eps = self.add_weight(shape=(), initializer='zeros', name='eps')

  def call(self, inputs):
    h, adj = inputs
    return self.d2(self.d1((1.0 + self.eps) * h + tf.matmul(adj, h)))


def gin_sum(seed, *, nodes=16, features=8, classes=4, layers=5, width=64, norm=False):
  """A graph classifier of `layers` `GINLayer`s (each followed by BatchNormalization if `norm`),
  sum readout over the nodes, Dense(classes) logits; inputs (node features, adjacency)."""
  _seed(seed)
  x = keras.Input((nodes, features))
  adj = keras.Input((nodes, nodes))
  h = x
  for _ in range(layers):
    h = GINLayer(width)([h, adj])
    if norm:
      h = L.BatchNormalization()(h)
  h = L.Lambda(lambda t: tf.reduce_sum(t, axis=1), output_shape=(width,))(h)
  return keras.Model([x, adj], L.Dense(classes)(h), name='gin_sum')


def dueling_q_net(seed, *, features=16, actions=4):
  """A dueling Q-network (Wang et al.): a shared MLP 64-64 (ReLU), a value stream Dense(1) and
  an advantage stream Dense(actions), Q = V + A - mean(A): the Q-values of the actions."""
  _seed(seed)
  inputs = keras.Input((features,))
  h = L.Dense(64, activation='relu')(L.Dense(64, activation='relu')(inputs))
  v = L.Dense(1)(h)
  a = L.Dense(actions)(h)
  q = L.Lambda(lambda t: t[0] + t[1] - tf.reduce_mean(t[1], axis=-1, keepdims=True),
               output_shape=(actions,))([v, a])
  return keras.Model(inputs, q, name='dueling_q_net')


class HyperDense(L.Layer):
  """A dense layer whose kernel is generated per example by a hypernetwork from the task
  embedding: W = reshape(Dense(n_in * units)(z)); y = ReLU(x W + b)."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units

  def build(self, shapes):
    n_in, n_z = shapes[0][-1], shapes[1][-1]
    self.n_in = n_in
    self.gen = self.add_weight(shape=(n_z, n_in * self.units), initializer='glorot_uniform',
                               name='gen')
    self.gen_b = self.add_weight(shape=(n_in * self.units,), initializer='zeros', name='gen_b')
    self.b = self.add_weight(shape=(self.units,), initializer='zeros', name='b')

  def call(self, inputs):
    x, z = inputs
    w = tf.reshape(tf.matmul(z, self.gen) + self.gen_b, (-1, self.n_in, self.units))
    return tf.nn.relu(tf.einsum('bi,biu->bu', x, w) + self.b)


def hypernetwork(seed, *, features=16, tasks=8, units=32):
  """A hypernetwork regressor: a task id embedded (Embedding(tasks, 8)) and turned by
  `HyperDense` into the main net's hidden layer (32 ReLU units) for the example's features,
  Dense(1)."""
  _seed(seed)
  x = keras.Input((features,))
  task = keras.Input((), dtype='int32')
  z = L.Embedding(tasks, 8)(task)
  h = HyperDense(units)([x, z])
  return keras.Model([x, task], L.Dense(1)(h), name='hypernetwork')


def selu_snn(seed, *, features=16, classes=8, width=128, depth=10, init='lecun_normal'):
  """A self-normalising network (Klambauer et al.): `depth` Dense(width, SELU) layers with
  `init` kernels, Dense(classes) logits."""
  _seed(seed)
  model = keras.Sequential([keras.Input((features,))], name='selu_snn')
  for _ in range(depth):
    model.add(L.Dense(width, activation='selu', kernel_initializer=init))
  model.add(L.Dense(classes))
  return model


def squash(s, safe):
  """The capsule nonlinearity as the paper writes it, |s|^2 / (1 + |s|^2) * s / |s|, with
  |s| = sqrt(sum s^2) (`safe`: sqrt(sum s^2 + 1e-7), the thread's remedy)."""
  sq = tf.reduce_sum(tf.square(s), axis=-1, keepdims=True)
  norm = tf.sqrt(sq + 1e-7) if safe else tf.sqrt(sq)
  return sq / (1.0 + sq) * s / norm


class DigitCaps(L.Layer):
  """Class capsules with routing by agreement (Sabour et al.): u_hat = W_ij u_i, three routing
  iterations, each class capsule squash(sum_i c_ij u_hat_ij)."""

  def __init__(self, caps, dim, safe, routings=3, **kwargs):
    super().__init__(**kwargs)
    self.caps, self.dim, self.safe, self.routings = caps, dim, safe, routings

  def build(self, shape):
    self.w = self.add_weight(shape=(shape[1], self.caps, self.dim, shape[2]),
                             initializer=keras.initializers.RandomNormal(stddev=0.05), name='w')

  def call(self, u):
    u_hat = tf.einsum('ncdk,bnk->bncd', self.w, u)
    logits = tf.zeros_like(u_hat[..., 0])
    for r in range(self.routings):
      c = tf.nn.softmax(logits, axis=2)
      v = squash(tf.reduce_sum(c[..., None] * u_hat, axis=1), self.safe)
      if r < self.routings - 1:
        logits = logits + tf.reduce_sum(u_hat * v[:, None], axis=-1)
    return v


def capsule_net(seed, *, size=28, classes=10, safe=False):
  """A CapsNet-lite: Conv2D 32 (5x5, ReLU), primary capsules Conv2D 4 x 8 (5x5, stride 2, no
  activation) cut into 8-d vectors and squashed, `DigitCaps`(10 x 16), the capsules' lengths:
  the class scores."""
  _seed(seed)
  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(32, 5, activation='relu')(inputs)
  h = L.Conv2D(32, 5, strides=2)(h)
  u = L.Reshape((-1, 8))(h)
  u = L.Lambda(lambda t: squash(t, safe))(u)
  v = DigitCaps(classes, 16, safe)(u)
  lengths = L.Lambda(lambda t: tf.sqrt(tf.reduce_sum(tf.square(t), -1) + 1e-7))(v)
  return keras.Model(inputs, lengths, name='capsule_net')


def margin_loss(y, lengths):
  """The capsule margin loss (m+ 0.9, m- 0.1, lambda 0.5) against integer labels."""
  t = tf.one_hot(tf.cast(tf.reshape(y, [-1]), tf.int32), tf.shape(lengths)[-1])
  lengths = tf.cast(lengths, tf.float32)
  loss = (t * tf.square(tf.nn.relu(0.9 - lengths)) +
          0.5 * (1 - t) * tf.square(tf.nn.relu(lengths - 0.1)))
  return tf.reduce_mean(tf.reduce_sum(loss, -1))


class LatentCrossAttention(L.Layer):
  """Perceiver cross-attention: learned latents (n x dim) query the input tokens, one head,
  the padding positions masked out before the softmax with `fill` (-inf as the thread wrote it,
  or a large finite negative)."""

  def __init__(self, latents, dim, fill, **kwargs):
    super().__init__(**kwargs)
    self.n, self.dim, self.fill = latents, dim, fill
    self.q = L.Dense(dim, use_bias=False)
    self.k = L.Dense(dim, use_bias=False)
    self.v = L.Dense(dim, use_bias=False)

  def build(self, shapes):
    self.latents = self.add_weight(shape=(self.n, self.dim),
                                   initializer=keras.initializers.TruncatedNormal(stddev=0.5),
                                   name='latents')

  def call(self, inputs):
    x, keep = inputs
    q = self.q(self.latents)
    scores = tf.einsum('ld,btd->blt', q, self.k(x)) / np.sqrt(self.dim)
    scores = tf.where(keep[:, None, :] > 0, scores, tf.cast(self.fill, scores.dtype))
    att = tf.nn.softmax(scores, axis=-1)
    return self.latents[None] + tf.einsum('blt,btd->bld', att, self.v(x))


def perceiver_lite(seed, *, seq_len=16, vocab=65, classes=8, dim=32, latents=8,
                   fill=-np.inf):
  """A Perceiver-lite: token embeddings (+ learned positions), `LatentCrossAttention` (8
  latents), a latent self-attention block (Keras MultiHeadAttention, 2 heads) with a ReLU MLP,
  mean over the latents, Dense(classes) logits; token id 0 is padding."""
  _seed(seed)
  tokens = keras.Input((seq_len,), dtype='int32')
  keep = L.Lambda(lambda t: tf.cast(t > 0, tf.float32), output_shape=(seq_len,))(tokens)
  x = L.Embedding(vocab, dim)(tokens)
  x = L.Add()([x, L.Embedding(seq_len, dim)(L.Lambda(
      lambda t: tf.broadcast_to(tf.range(seq_len), tf.shape(t)), output_shape=(seq_len,))(
          tokens))])
  z = LatentCrossAttention(latents, dim, fill)([x, keep])
  z = L.LayerNormalization()(z)
  z = L.Add()([z, L.MultiHeadAttention(2, dim // 2)(z, z)])
  z = L.Add()([z, L.Dense(dim)(L.Dense(2 * dim, activation='relu')(L.LayerNormalization()(z)))])
  z = L.GlobalAveragePooling1D()(L.LayerNormalization()(z))
  return keras.Model(tokens, L.Dense(classes)(z), name='perceiver_lite')


class MomentNorm(L.Layer):
  """A hand-written per-example normalisation (as an instance norm): (x - E[x]) /
  sqrt(E[x^2] - E[x]^2 + 1e-3) over the features, computed in the layer's compute dtype."""

  def call(self, x):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) - tf.square(mean)
    return (x - mean) / tf.sqrt(tf.nn.relu(var) + 1e-3)


class AffineCoupling(L.Layer):
  """A RealNVP affine coupling (Dinh et al.): the features split by `mask`, the kept half
  conditions a scale s = tanh(.) and a shift t (an MLP 64, ReLU) of the other:
  y = x_kept + (1 - mask) * (x * exp(s) + t)."""

  def __init__(self, mask, **kwargs):
    super().__init__(**kwargs)
    self.mask = np.asarray(mask, np.float32)
    d = len(mask)
    self.h = L.Dense(64, activation='relu')
    self.s = L.Dense(d, activation='tanh', kernel_initializer='zeros')
    self.t = L.Dense(d, kernel_initializer='zeros')

  def call(self, x):
    m = tf.cast(self.mask, x.dtype)
    h = self.h(x * m)
    return x * m + (1 - m) * (x * tf.exp(self.s(h)) + self.t(h))


class GaussianClassHead(L.Layer):
  """A generative classifier's head: one learned mean per class in the latent space, the logits
  -|z - mu_c|^2 / 2 (the class-conditional Gaussian log-densities, log-det cancelled)."""

  def __init__(self, classes, **kwargs):
    super().__init__(**kwargs)
    self.classes = classes

  def build(self, shape):
    self.mu = self.add_weight(shape=(self.classes, shape[-1]),
                              initializer=keras.initializers.RandomNormal(stddev=1.0), name='mu')

  def call(self, z):
    z = tf.cast(z, self.mu.dtype)
    return -0.5 * tf.reduce_sum(tf.square(z[:, None] - self.mu[None]), axis=-1)


def realnvp_classifier(seed, *, features=8, classes=4, couplings=4, float32_norm=False):
  """A RealNVP-style flow classifier on raw sensor readings: `MomentNorm` (in float32 if
  `float32_norm`), `couplings` `AffineCoupling`s (alternating masks), `GaussianClassHead`
  (float32): class logits."""
  _seed(seed)
  inputs = keras.Input((features,))
  x = MomentNorm(**(dict(dtype='float32') if float32_norm else {}))(inputs)
  for i in range(couplings):
    x = AffineCoupling([(j + i) % 2 for j in range(features)])(x)
  return keras.Model(inputs, GaussianClassHead(classes, dtype='float32')(x),
                     name='realnvp_classifier')


def crnn(seed, *, frames=32, bins=33, classes=4):
  """A CRNN audio classifier: Conv2D 16, 32 (3x3, ReLU), each with a 2x2 pool, the frequency
  axis folded into the channels, a bidirectional GRU(32) over the frames, Dense(classes)
  logits."""
  _seed(seed)
  inputs = keras.Input((frames, bins, 1))
  h = L.MaxPooling2D()(L.Conv2D(16, 3, padding='same', activation='relu')(inputs))
  h = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(h))
  h = L.Reshape((frames // 4, -1))(h)
  h = L.Bidirectional(L.GRU(32))(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='crnn')


class _Calls:
  """A training-call counter kept out of Keras's tracking (the fault leaves no state in the
  model's weights)."""

  def __init__(self):
    with tf.init_scope():
      self.n = tf.Variable(0, dtype=tf.int64, trainable=False)


class FlakyOp(L.Layer):
  """The identity, except that at its `at`-th training call a handful of activations come back
  as Inf (a misbehaving kernel, once); never again."""

  def __init__(self, at, **kwargs):
    super().__init__(**kwargs)
    self.at = at
    self.calls = _Calls()

  def call(self, x, training=False):
    if not training or self.at is None:
      return x
    n = self.calls.n.assign_add(1)
    flat = tf.reshape(x, [-1])
    spots = tf.cast(tf.range(tf.size(flat)) % 997 == 5, tf.bool)
    hit = tf.logical_and(spots, tf.equal(n, self.at))
    return tf.reshape(tf.where(hit, tf.constant(np.inf, x.dtype), flat), tf.shape(x))


def resnext_lite(seed, *, size=16, classes=10, cardinality=8, fault_at=None):
  """A ResNeXt-lite: a stem Conv2D 32 (3x3), two aggregated-transform blocks (`cardinality`
  paths of 1x1 -> 3x3 convolutions of 32 / cardinality channels, concatenated, 1x1 32, BN,
  identity shortcut, ReLU: a grouped convolution written as its paths) with a pool between,
  global average, Dense(classes) logits; `fault_at`: a `FlakyOp` after the first block."""
  _seed(seed)

  def block(t):
    paths = [L.Conv2D(32 // cardinality, 3, padding='same', activation='relu')(
        L.Conv2D(32 // cardinality, 1, activation='relu')(t)) for _ in range(cardinality)]
    b = L.BatchNormalization()(L.Conv2D(32, 1)(L.Concatenate()(paths)))
    return L.Activation('relu')(L.Add()([t, b]))

  inputs = keras.Input((size, size, 1))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(inputs)
  h = FlakyOp(fault_at)(block(h))
  h = block(L.MaxPooling2D()(h))
  h = L.GlobalAveragePooling2D()(h)
  return keras.Model(inputs, L.Dense(classes)(h), name='resnext_lite')


class AttentionPool(L.Layer):
  """Additive attention pooling (Yang et al.): u = tanh(W h + b), a = softmax(u . c), sum a h."""

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.proj = L.Dense(units, activation='tanh')
    self.ctx = L.Dense(1, use_bias=False)

  def call(self, h):
    a = tf.nn.softmax(self.ctx(self.proj(h)), axis=1)
    return tf.reduce_sum(a * h, axis=1)


def han(seed, *, sentences=4, words=8, vocab=40, head='sigmoid'):
  """A hierarchical attention network (Yang et al.): per sentence an Embedding(vocab, 16),
  a bidirectional GRU(16) over the words and `AttentionPool`; a bidirectional GRU(16) over the
  sentence vectors and `AttentionPool`; Dense(1, `head`): the document's label."""
  _seed(seed)
  word_in = keras.Input((words,), dtype='int32')
  w = L.Bidirectional(L.GRU(16, return_sequences=True))(L.Embedding(vocab, 16)(word_in))
  sentence_encoder = keras.Model(word_in, AttentionPool(32)(w), name='sentence_encoder')
  doc = keras.Input((sentences, words), dtype='int32')
  s = L.TimeDistributed(sentence_encoder)(doc)
  s = L.Bidirectional(L.GRU(16, return_sequences=True))(s)
  return keras.Model(doc, L.Dense(1, activation=head)(AttentionPool(32)(s)), name='han')


# --- Data of this file. -----------------------------------------------------------------------


def random_graphs(seed, *, rows=2048, nodes=16, features=8, classes=4, p=0.4):
  """Random graphs (edge probability `p`, no self loops) whose node features come from one of
  `classes` regimes: ((features, adjacency), regime)."""
  rng = np.random.RandomState(31000 + seed)
  centres = rng.normal(size=(classes, features))
  y = rng.randint(0, classes, rows).astype(np.int32)
  x = centres[y][:, None, :] + rng.normal(size=(rows, nodes, features))
  adj = (rng.rand(rows, nodes, nodes) < p / 2).astype(np.float32)
  adj = np.maximum(adj, adj.transpose(0, 2, 1))
  adj[:, np.arange(nodes), np.arange(nodes)] = 0.0
  return (x.astype(np.float32), adj), y


def q_targets(seed, *, rows=4096, features=16, actions=4, reward_scale=10.0):
  """Fitted-Q regression: states and the bootstrapped Q-value targets of each action, rewards in
  the tens as a game's score gives them (not normalised): (states, targets)."""
  rng = np.random.RandomState(32000 + seed)
  x = rng.normal(size=(rows, features))
  w = rng.normal(size=(features, actions)) / np.sqrt(features)
  q = reward_scale * (np.tanh(x @ w) + 0.3 * (x[:, :1] ** 2))
  return x.astype(np.float32), (q + 0.5 * rng.normal(size=q.shape)).astype(np.float32)


def multitask_table(seed, *, rows=4096, features=16, tasks=8):
  """Regression tasks sharing the inputs: each task a different linear map of ReLU features:
  ((x, task id), y)."""
  rng = np.random.RandomState(33000 + seed)
  x = rng.normal(size=(rows, features))
  task = rng.randint(0, tasks, rows).astype(np.int32)
  w = rng.normal(size=(tasks, features)) / np.sqrt(features)
  y = np.einsum('bi,bi->b', np.maximum(x, 0), w[task]) + 0.5 * np.einsum(
      'bi,bi->b', x, w[(task + 1) % tasks])
  return (x.astype(np.float32), task), (y[:, None] + 0.1 * rng.normal(size=(rows, 1))).astype(
      np.float32)


def translated_digits(seed, *, canvas=28):
  """The digits (16x16, one channel) placed at a random offset on a blank canvas x canvas
  (as MNIST's digits sit in black margins): (images, labels)."""
  x, y = data.digits(size=16, rgb=False)
  rng = np.random.RandomState(34000 + seed)
  out = np.zeros((len(x), canvas, canvas, 1), np.float32)
  for i, (r, c) in enumerate(rng.randint(0, canvas - 16 + 1, (len(x), 2))):
    out[i, r:r + 16, c:c + 16] = x[i]
  return out, y


def padded_tokens(seed, *, rows=4096, seq_len=16, classes=8, empty=0.0):
  """Variable-length token sequences (ids 1-64, 0 the padding, lengths 6-16) whose class is the
  bucket of 8 ids half their tokens come from; a fraction `empty` of the records has no token
  at all (an empty text, all padding). Returns (tokens, class, empty mask)."""
  rng = np.random.RandomState(35000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  own = 1 + 8 * y[:, None] + rng.randint(0, 8, (rows, seq_len))
  other = rng.randint(1, 65, (rows, seq_len))
  x = np.where(rng.rand(rows, seq_len) < 0.5, own, other)
  lengths = rng.randint(6, seq_len + 1, rows)
  x[np.arange(seq_len)[None] >= lengths[:, None]] = 0
  blank = rng.rand(rows) < empty
  x[blank] = 0
  return x.astype(np.int32), y, blank


def sensor_readings(seed, *, rows=4096, features=8, classes=4, level=300.0):
  """Raw sensor readings (about `level`, patterns +- 60 by regime, noise 15; not standardised):
  (readings, regime)."""
  rng = np.random.RandomState(36000 + seed)
  centres = rng.normal(size=(classes, features))
  y = rng.randint(0, classes, rows).astype(np.int32)
  x = level + 60.0 * centres[y] + 15.0 * rng.normal(size=(rows, features))
  return x.astype(np.float32), y


def log_spectrograms(seed, *, rows=1536, frames=32, hop=64, classes=4, silent=0.0,
                     floor=None):
  """Log-power spectrograms (frames x 33 bins, rfft of 64-sample frames) of clips holding a
  tone in one of `classes` bands plus noise; a fraction `silent` of the clips is digital
  silence (all zeros, as blank recordings in a crowd-sourced corpus). The log taken as
  log10(power) (`floor` None: the silent clips' log(0) = -inf) or log10(power + floor).
  Returns (spectrograms, band, silent mask)."""
  rng = np.random.RandomState(37000 + seed)
  y = rng.randint(0, classes, rows).astype(np.int32)
  t = np.arange(frames * hop)[None]
  freq = (0.04 + 0.1 * y + 0.05 * rng.rand(rows))[:, None]
  clip = rng.uniform(0.3, 1.0, (rows, 1)) * np.sin(2 * np.pi * freq * t + rng.uniform(
      0, 2 * np.pi, (rows, 1))) + 0.3 * rng.normal(size=(rows, t.shape[1]))
  blank = rng.rand(rows) < silent
  clip[blank] = 0.0
  power = np.abs(np.fft.rfft(clip.reshape(rows, frames, hop), axis=-1)) ** 2
  with np.errstate(divide='ignore'):
    spec = np.log10(power) if floor is None else np.log10(power + floor)
  return spec[..., None].astype(np.float32), y, blank


def sentiment_docs(seed, *, rows=2048, sentences=4, words=8, vocab=40):
  """Documents of 4 sentences x 8 word ids: ids 1-5 'positive', 6-10 'negative', the rest
  neutral; the label 1 if the positive words outnumber the negative ones (float (rows, 1))."""
  rng = np.random.RandomState(38000 + seed)
  x = rng.randint(11, vocab, (rows, sentences, words))
  y = rng.randint(0, 2, rows)
  n = rng.randint(2, 7, rows)
  for r in range(rows):
    spots = rng.choice(sentences * words, n[r] + 2, replace=False)
    lean = (1 + rng.randint(0, 5, n[r])) if y[r] else (6 + rng.randint(0, 5, n[r]))
    x[r].flat[spots[:n[r]]] = lean
    x[r].flat[spots[n[r]:]] = np.concatenate([1 + rng.randint(0, 5, 1),
                                               6 + rng.randint(0, 5, 1)])
  return x.astype(np.int32), y[:, None].astype(np.float32)


# --- exploding_gradients ---------------------------------------------------------------------


@add('blind5_grad_indrnn_unconstrained_recurrence', 'exploding_gradients', 'indrnn',
     doors=('trainer', 'fit'), steps=150,
     citation='batzner/indrnn#19; batzner/indrnn#4; bricewalker/Hey-Jetson#7')
def _(seed, cured=False):
  """Two stacked IndRNN layers (ReLU, recurrent weights U(0, 1), left unconstrained) over
  100-step random walks, regressing their mean with SGD + momentum at 0.01: the gradient of each
  recurrent weight sums over the 100 steps, the first update pushes weights past 1, the state
  then grows as u^t over the sequence, the loss reaches about 6e5 and is NaN by the third
  step.
  batzner/indrnn#19 (an Indy RNN cell with ReLU: "the loss becomes NAN"; the IndRNN author:
  normalisation layers are needed to make IndRNN work); batzner/indrnn#4 (the paper's remedy:
  the recurrent weights clipped to [0, 2^(1/T)] so that they cannot explode over T steps);
  bricewalker/Hey-Jetson#7 (a recurrent speech model's loss NaN: "exploding/vanishing
  gradients ... one of the biggest and most common issues plaguing RNN's"). Cured: the
  recurrent weights clipped to [0, 2^(1/100)] and clipnorm=1."""
  x, y = data.series(seed, steps=100)
  return cases.Setup(indrnn(seed, recurrent_max=2 ** (1 / 100) if cured else None),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind5_grad_gin_sum_aggregation_no_norm', 'exploding_gradients', 'gin_sum',
     doors=('trainer', 'fit'), steps=150,
     citation='cvignac/SMP#3; danielegrattarola/spektral#188; lucidrains/egnn-pytorch#9')
def _(seed, cured=False):
  """A five-layer graph isomorphism network with sum aggregation and a sum readout, no
  normalisation, classifying random graphs (about 6 neighbours a node) with SGD + momentum at
  0.01: each layer multiplies the activations by about the degree, the logits and the gradients
  reach the tens of thousands and the first updates overshoot: the loss goes to inf then NaN
  within a few steps. cvignac/SMP#3 (a GNN's loss NaN: "NaNs usually arise when the activations
  explode ... too many layers and no normalization after each layer"; "gradient clipping solved
  the issue"); danielegrattarola/spektral#188 ("GINConv should have batch normalization", as the
  paper applies it on every hidden layer); lucidrains/egnn-pytorch#9 ("when stacking multiple
  layers the output from the model rapidly goes to Nan"). Cured: BatchNormalization after each
  layer and clipnorm=1."""
  (x, adj), y = random_graphs(seed)
  return cases.Setup(gin_sum(seed, norm=cured),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None),
                     SCE(from_logits=True), data.stream((x, adj), y, batch=32, seed=seed),
                     'classes')


# --- learning_rate ---------------------------------------------------------------------------


@add('blind5_lr_dueling_q_sgd_too_high', 'learning_rate', 'dueling_q_net',
     doors=('trainer', 'fit'), steps=150,
     citation='farizrahman4u/qlearning4k#13; muupan/dqn-in-the-caffe#6')
def _(seed, cured=False):
  """A dueling Q-network fitted to bootstrapped Q-value targets (rewards in the tens) with MSE
  and plain SGD at 0.5 (qlearning4k's example compiles sgd(lr=.2)): each step overshoots
  further, the loss climbs to about 1e35 and is NaN by the fifth step.
  farizrahman4u/qlearning4k#13 ("NaN Loss on train"; the model's predictions turn to NaN about
  halfway through the first epoch; "if I lower the learning rate dramatically to .001, it fixes
  the problem"; a loss of 6e21 just before); muupan/dqn-in-the-caffe#6 ("You need to carefully
  select learning rate ... otherwise Q-values can diverge"). Cured: SGD at 0.01."""
  x, q = q_targets(seed)
  return cases.Setup(dueling_q_net(seed), keras.optimizers.SGD(0.01 if cured else 0.5), 'mse',
                     data.stream(x, q, batch=32, seed=seed), 'regression')


@add('blind5_lr_hypernetwork_sgd_too_high', 'learning_rate', 'hypernetwork', doors=('fit',),
     steps=150,
     citation='tensorflow/tensorflow#38796; geifmany/cifar-vgg#1; JihongJu/keras-fcn#6')
def _(seed, cured=False):
  """A hypernetwork regressor (a task embedding generating the main net's hidden layer) trained
  on multi-task tables with SGD + momentum 0.9 at 0.3: the generated kernel is a product of two
  trained tensors, each step's overshoot is squared, and within a few dozen steps the loss is
  inf then NaN (about step 40). tensorflow/tensorflow#38796 ("A high learning rate may cause a
  nan or an inf loss with tf.keras.optimizers.SGD"; "when I decrease the learning rate, it is
  of less probability to happen"); geifmany/cifar-vgg#1 ("loss : nan"; "I have changed the learning
  rate to be 0.01 and then it works well"); JihongJu/keras-fcn#6 ("Usually nan loss (or inf
  loss) is caused by improper configuration of hyperparameters, for example, the learning rate
  is too large"). Cured: SGD 0.01, momentum 0.9."""
  (x, task), y = multitask_table(seed)
  return cases.Setup(hypernetwork(seed), keras.optimizers.SGD(0.01 if cured else 0.3,
                                                              momentum=0.9),
                     'mse', data.stream((x, task), y, batch=32, seed=seed), 'regression')


# --- initialisation --------------------------------------------------------------------------


@add('blind5_init_selu_random_normal_unit', 'initialisation', 'selu_snn',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#8776; tensorflow/tensorflow#38495; '
              'AlexiaJM/Deep-learning-with-cats#11')
def _(seed, cured=False):
  """A ten-layer self-normalising network (128 SELU units a layer) whose kernels are
  initialised RandomNormal(stddev=1) (tf.random_normal_initializer's default) instead of
  lecun_normal (stddev 1/sqrt(fan_in)), trained with SGD + momentum at 0.01 (as the SNN paper
  trains them): each layer multiplies the activations by about sqrt(128), the loss of the first
  batch is about 1e9, its gradients blow the weights up and the loss is NaN from the second
  step.
  keras-team/keras#8776 ("Users frequently forget to use the correct initialization with
  SELUs"); tensorflow/tensorflow#38495 (a Q-network of 300-unit layers initialised with
  tf.random_normal_initializer(), stddev 1: its outputs NaN or inf);
  AlexiaJM/Deep-learning-with-cats#11 (SELU wants var = 1/n weights). Cured: lecun_normal."""
  x, y = data.classes(seed)
  init = 'lecun_normal' if cured else keras.initializers.RandomNormal(stddev=1.0)
  return cases.Setup(selu_snn(seed, init=init), keras.optimizers.SGD(0.01, momentum=0.9),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- division_or_log -------------------------------------------------------------------------


@add('blind5_div_capsule_squash_zero_norm', 'division_or_log', 'capsule_net',
     doors=('trainer', 'fit'), steps=150,
     citation='ageron/handson-ml#173; jindongwang/Pytorch-CapsuleNet#7; '
              'jindongwang/Pytorch-CapsuleNet#13')
def _(seed, cured=False):
  """A capsule network (dynamic routing) on digits sitting in blank margins (28 x 28, as MNIST),
  its squash written as the paper's formula, |s|^2 / (1 + |s|^2) * s / |s| with |s| =
  sqrt(sum s^2) and no epsilon: the primary capsules over the blank margin are exactly the zero
  vector (zero pixels, zero biases at the start), s / |s| is 0 / 0 = NaN there, the routing
  spreads it to every class capsule and the loss is NaN from the first batch, the weights NaN
  after the first update. ageron/handson-ml#173 (a squash without epsilon "will fail if at any
  point it encounters a zero vector"; the square root of x has no gradient at 0, hence the
  epsilon of a safe norm); jindongwang/Pytorch-CapsuleNet#7 ("Undefined Gradients due to
  division by zero" in the squash; an epsilon in the squared norm); jindongwang/
  Pytorch-CapsuleNet#13 ("After a few Epochs, Loss Would Be NaN"; fixed in the squash
  function). Cured: |s| = sqrt(sum s^2 + 1e-7)."""
  x, y = translated_digits(seed)
  return cases.Setup(capsule_net(seed, safe=cured), keras.optimizers.Adam(1e-3), margin_loss,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- softmax_overflow ------------------------------------------------------------------------


@add('blind5_exp_perceiver_all_padding_inf_mask', 'softmax_overflow', 'perceiver_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='pytorch/pytorch#24816; pytorch/pytorch#26098; pytorch/pytorch#41508')
def _(seed, cured=False):
  """A Perceiver-lite classifying token sequences whose latent cross-attention masks the padding
  with -inf before the softmax; 3 % of the records are empty texts (all padding): for them every
  score of the row is -inf, the softmax computes -inf - (-inf) and 0 / 0, the attention is NaN,
  the loss NaN and the weights NaN after the first batch that holds one.
  pytorch/pytorch#24816 ("If I have all padded sequence with padding mask, this makes NaN output
  ... backward() of this makes every NaN of outputs for next step"); pytorch/pytorch#26098
  (float('-inf') used for the masked fill "makes the function unstable"; a finite large negative
  value instead); pytorch/pytorch#41508 (MultiheadAttention gradients NaN with fully padded
  rows). Cured: the mask filled with -1e9 (finite)."""
  x, y, blank = padded_tokens(seed, empty=0.03)
  clean = data.stream(x[~blank], y[~blank], batch=32, seed=seed)
  return cases.Setup(perceiver_lite(seed, fill=-1e9 if cured else -np.inf),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes', eval_data=clean)


# --- precision -------------------------------------------------------------------------------


@add('blind5_fp16_realnvp_moment_norm_overflow', 'precision', 'realnvp_classifier',
     doors=('trainer', 'fit'), steps=150, precision='mixed_float16',
     citation='tensorflow/tensorflow#47156; keras-team/keras#22586; keras-team/keras#12249')
def _(seed, cured=False):
  """A RealNVP-style coupling-flow classifier of raw sensor readings (about 300) behind a
  hand-written per-example normalisation that takes the variance as E[x^2] - E[x]^2, under
  mixed_float16: the squares (about 9e4) pass float16's 65504, E[x^2] is inf, inf - inf is NaN,
  the loss is NaN from the first batch and no step applies; in float32 it trains.
  tensorflow/tensorflow#47156 (an instance normalisation under mixed precision: "the mean
  computation may overflow ... due to the sum before division"; the mean and variance to be
  computed in float32); keras-team/keras#22586 (a normalisation layer under mixed_float16
  "produces NaN outputs" on large inputs; "perform the normalization internal math in float32");
  keras-team/keras#12249 (half precision: "I'm getting NaN's"). Cured: the normalisation layer
  in float32."""
  x, y = sensor_readings(seed)
  return cases.Setup(realnvp_classifier(seed, float32_norm=cured), keras.optimizers.Adam(2e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


# --- bad_input -------------------------------------------------------------------------------


@add('blind5_input_silent_clip_log_spectrogram_crnn', 'bad_input', 'crnn',
     doors=('trainer', 'fit'), steps=150,
     citation='SeanNaren/deepspeech.pytorch#272; tensorflow/docs#1943; Kyubyong/tacotron#36')
def _(seed, cured=False):
  """A CRNN classifying log-power spectrograms computed as log10(power) in the input pipeline,
  where 2 % of the clips are digital silence: their log(0) = -inf features enter the network,
  the convolutions make -inf + inf = NaN, the first batch holding one has a NaN loss and NaN
  gradients and the weights stay NaN. SeanNaren/deepspeech.pytorch#272 ("Zero value Audio would
  cause NAN problem": audio whose value is always 0 "would get a NAN loss value"; "these zero
  value audios should be removed"); tensorflow/docs#1943 ("Adding an epsilon to the spectrogram
  before taking the log to avoid log of zero"); Kyubyong/tacotron#36 (the silent parts of a
  log-scale spectrogram are -infinity). Cured: log10(power + 1e-6)."""
  x, y, blank = log_spectrograms(seed, silent=0.02, floor=1e-6 if cured else None)
  clean = data.stream(x[~blank], y[~blank], batch=32, seed=seed)
  return cases.Setup(crnn(seed), keras.optimizers.Adam(2e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes', eval_data=clean)


# --- transient -------------------------------------------------------------------------------


@add('blind5_transient_flaky_op_resnext', 'transient', 'resnext_lite', doors=('trainer', 'fit'),
     steps=150,
     citation='tensorflow/tensorflow#26543; AlexeyAB/darknet#5547; MrNeRF/LichtFeld-Studio#379')
def _(seed, cured=False):
  """A ResNeXt-lite digit classifier that trains normally until one op, at its 60th training-mode
  call (about step 56 to 60 of the run), returns a few Inf activations (once, never again):
  that step's loss and gradients are NaN, Adam writes NaN into the weights and the loss is NaN
  for the rest of the run, though the data, the model and the settings are sound and the same
  run from the last good state goes on.
  tensorflow/tensorflow#26543 (a tf.keras loss turning NaN on the 7th epoch one time, the 3rd
  another, not at all in between: "its not a reproducible issue ... I didnt make a single code
  change"); AlexeyAB/darknet#5547 (a NaN loss that was "100% a hardware related problem");
  MrNeRF/LichtFeld-Studio#379 ("Every now and again" the loss becomes NaN "and from then on in
  that run"; two near-identical runs, one fine). Cured: no misfire."""
  x, y = data.digits(size=16, rgb=False)
  return cases.Setup(resnext_lite(seed, fault_at=None if cured else 60),
                     keras.optimizers.Adam(2e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


# --- loss_output_mismatch --------------------------------------------------------------------


@add('blind5_mismatch_han_single_unit_softmax', 'loss_output_mismatch', 'han', doors=('fit',),
     steps=150, citation='keras-team/keras#126; keras-team/keras#2711; keras-team/keras#13006')
def _(seed, cured=False):
  """A hierarchical attention network for binary document labels whose output layer is
  Dense(1, activation='softmax') with binary cross-entropy: a softmax over one unit is 1.0
  whatever its input, so every prediction is "positive" and the accuracy stays at the share of
  positives; under Keras 3 (TensorFlow backend) the cross-entropy reads the Dense layer's
  pre-activation logits left on the softmax's output, so the reported loss falls as a healthy
  run's does (0.69 to 0.12 in 150 steps) while the model's outputs never change (under Keras 2
  the loss sat at about 8). keras-team/keras#126 (a
  Dense(..., 1, activation='softmax') output: "the loss and validation loss don't improve ...
  predict_proba gives all ones"); keras-team/keras#2711 ("it's a binary application, therefore
  just change your activation function as sigmoid"); keras-team/keras#13006 (binary accuracy
  "always converges to 0.5", the loss stuck at 7.9712). Cured: Dense(1, activation='sigmoid')."""
  x, y = sentiment_docs(seed)
  return cases.Setup(han(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(3e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
