"""A thirty-second blind set of sick scenarios (the 'blind32' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind29.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a DRQN-lite, a DDPG critic, a Hamiltonian
neural network, a DTNN-lite, an N-pair embedding net, a DCGAN generator as a regressor, a
CrabNet-lite, a DiT-lite denoiser and a CGCNN-lite). Each builder takes `cured`: the same run with
the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain
Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured
twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND32 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND32.add` with split='blind32'."""
  return BLIND32.add(name, expected, arch, split='blind32', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def partial_observation_returns(seed, *, rows=2048, steps=8, actions=4):
  """Recurrent Q-learning in miniature (a partially observed control task, as DRQN is trained
  on): each row the last `steps` noisy observations of a damped oscillator's position and a
  cue (the velocity is hidden: a recurrent net must infer it from the history), and the
  discounted returns of the `actions` actions from the last state (undiscounted-scale returns as
  the threads' environments give them, around 40 to 100, not rescaled). (observations (rows,
  steps, 2), returns (rows, actions))."""
  rng = np.random.RandomState(seed)
  pos = rng.uniform(-1, 1, rows)
  vel = rng.uniform(-1, 1, rows)
  obs = np.zeros((rows, steps, 2))
  for t in range(steps):
    obs[:, t, 0] = pos + 0.05 * rng.randn(rows)
    obs[:, t, 1] = np.sin(3 * pos) + 0.05 * rng.randn(rows)
    vel = 0.95 * vel - 0.3 * pos
    pos = pos + 0.3 * vel
  push = np.linspace(-1, 1, actions)
  q = 70 + 25 * np.tanh(1.5 * (pos[:, None] * push[None, :] + vel[:, None] * (1 - push[None, :] ** 2)))
  return obs.astype(np.float32), q.astype(np.float32)


def drqn_lite(seed, *, steps=8, actions=4):
  """A DRQN-lite (Hausknecht & Stone, 2015: a deep recurrent Q-network): a Dense(64, ReLU) frame
  encoder per time step, an LSTM of 64 over the history, Dense(64, ReLU), Dense(`actions`): the
  Q-value of each action."""
  _seed(seed)
  x = keras.Input((steps, 2))
  h = L.TimeDistributed(L.Dense(64, activation='relu'))(x)
  h = L.LSTM(64)(h)
  h = L.Dense(64, activation='relu')(h)
  return keras.Model(x, L.Dense(actions)(h), name='drqn_lite')


def critic_targets(seed, *, rows=2048, state=8, action=2):
  """A DDPG critic's regression set in miniature (a continuous-control task): states of `state`
  features and actions in [-1, 1]^`action`, the target Q(s, a): a quadratic action cost around a
  state-dependent best action, plus a state value, plus noise (returns in the tens, as a reward
  of about 1 a step gives). ((state (rows, state), action (rows, action)), Q (rows, 1))."""
  rng = np.random.RandomState(seed)
  s = rng.randn(rows, state)
  a = rng.uniform(-1, 1, (rows, action))
  w = rng.randn(state, action) / np.sqrt(state)
  best = np.tanh(s @ w)
  v = rng.randn(state) / np.sqrt(state)
  q = 5 * np.tanh(s @ v) - 4 * np.sum(np.square(a - best), -1) + 0.3 * rng.randn(rows)
  return (s.astype(np.float32), a.astype(np.float32)), q[:, None].astype(np.float32)


def ddpg_critic_lite(seed, *, state=8, action=2):
  """A DDPG critic (Lillicrap et al., 2016, in miniature): the state through Dense(400, ReLU), the
  action joined at the second layer, Dense(300, ReLU), Dense(1): Q(s, a)."""
  _seed(seed)
  s = keras.Input((state,))
  a = keras.Input((action,))
  h = L.Dense(400, activation='relu')(s)
  h = L.Dense(300, activation='relu')(L.Concatenate()([h, a]))
  return keras.Model([s, a], L.Dense(1)(h), name='ddpg_critic_lite')


def spring_states(seed, *, rows=2048):
  """An ideal mass-spring system (the Hamiltonian neural network paper's first task): states
  (q, p) at random energies (radius 0.1 to 1), the time derivatives (dq/dt, dp/dt) = (p, -q)
  with a little noise as finite differences give them. (states (rows, 2), derivatives (rows,
  2))."""
  rng = np.random.RandomState(seed)
  r = rng.uniform(0.1, 1.0, rows)
  th = rng.uniform(0, 2 * np.pi, rows)
  q, p = r * np.cos(th), r * np.sin(th)
  x = np.stack([q, p], -1)
  y = np.stack([p, -q], -1) + 0.05 * rng.randn(rows, 2)
  return x.astype(np.float32), y.astype(np.float32)


class HamiltonianNN(keras.Model):
  """A Hamiltonian neural network (Greydanus et al., 2019): an MLP (two Dense(200, tanh), a
  scalar) learns the Hamiltonian H(q, p); the output is the symplectic gradient (dH/dp,
  -dH/dq), the predicted time derivative. Every kernel initialised with `init`."""

  def __init__(self, init='orthogonal', **kwargs):
    super().__init__(**kwargs)
    self.h1 = L.Dense(200, activation='tanh', kernel_initializer=init)
    self.h2 = L.Dense(200, activation='tanh', kernel_initializer=init)
    self.out = L.Dense(1, kernel_initializer=init)

  def call(self, x, training=False):
    x = tf.convert_to_tensor(x)  # The runner's measure passes numpy arrays.
    with tf.GradientTape() as tape:
      tape.watch(x)
      h = self.out(self.h2(self.h1(x)))
    g = tape.gradient(h, x)
    return tf.stack([g[:, 1], -g[:, 0]], -1)


def hnn_lite(seed, *, init='orthogonal'):
  """`HamiltonianNN` built on (q, p) inputs."""
  _seed(seed)
  model = HamiltonianNN(init, name='hnn_lite')
  model(tf.zeros((1, 2)))
  return model


def padded_molecules(seed, *, rows=1024, atoms=6, types=3):
  """Small molecules in miniature (a QM9-like set, with energies and forces): 3 to `atoms` atoms
  of `types` elements at random, non-overlapping places, a Morse pair potential (its depth and
  width by element pair) giving the energy and the forces; the smaller molecules padded to
  `atoms` with atoms of type 0 at the origin, as a padded batch of unequal molecules is.
  ((types (rows, atoms), positions (rows, atoms, 3)), [energy, forces] (rows, 1 + 3 atoms))."""
  rng = np.random.RandomState(seed)
  depth = rng.uniform(0.5, 1.5, (types + 1, types + 1))
  depth = (depth + depth.T) / 2
  width = rng.uniform(1.0, 2.0, (types + 1, types + 1))
  width = (width + width.T) / 2
  z = np.zeros((rows, atoms), np.int32)
  r = np.zeros((rows, atoms, 3))
  y = np.zeros((rows, 1 + 3 * atoms))
  for i in range(rows):
    n = rng.randint(3, atoms + 1)
    pts = []
    while len(pts) < n:
      c = rng.uniform(-1.6, 1.6, 3)
      if all(np.linalg.norm(c - p) > 0.9 for p in pts):
        pts.append(c)
    z[i, :n] = rng.randint(1, types + 1, n)
    r[i, :n] = pts
    e, f = 0.0, np.zeros((atoms, 3))
    for a in range(n):
      for b in range(a + 1, n):
        d = r[i, a] - r[i, b]
        dist = np.linalg.norm(d)
        D, w = depth[z[i, a], z[i, b]], width[z[i, a], z[i, b]]
        ex = np.exp(-w * (dist - 1.2))
        e += D * (1 - ex) ** 2 - D
        de = 2 * D * (1 - ex) * w * ex
        f[a] -= de * d / dist
        f[b] += de * d / dist
    y[i, 0] = e
    y[i, 1:] = f.reshape(-1)
  y[:, 0] = (y[:, 0] - y[:, 0].mean()) / y[:, 0].std()
  return (z, r.astype(np.float32)), y.astype(np.float32)


class DTNN(keras.Model):
  """A DTNN-lite (Schutt et al., 2017, deep tensor neural network), trained on energies and
  forces: element embeddings of 32; the interatomic distances sqrt(sum((r_i - r_j)^2)) over all
  pairs (`masked`: only over real pairs i != j, the others put to 1 before the square root and
  masked, the remedy), expanded on 16 Gaussians; two interaction passes c_i += sum_j
  tanh(W_fc((W_cf c_j) * (W_df e_ij))) over the real neighbours; per-atom energies (Dense 32 tanh,
  Dense 1) summed over the real atoms: E; the forces -dE/dr by a gradient tape. The output is
  [E, forces flattened]."""

  def __init__(self, types=3, masked=False, **kwargs):
    super().__init__(**kwargs)
    self.masked = masked
    self.embed = L.Embedding(types + 1, 32)
    self.cf = [L.Dense(32) for _ in range(2)]
    self.df = [L.Dense(32) for _ in range(2)]
    self.fc = [L.Dense(32, activation='tanh') for _ in range(2)]
    self.e1 = L.Dense(32, activation='tanh')
    self.e2 = L.Dense(1)
    self.centers = np.linspace(0.0, 4.0, 16).astype(np.float32)

  def call(self, inputs, training=False):
    z, r = inputs
    r = tf.convert_to_tensor(r)  # The runner's measure passes numpy arrays.
    real = tf.cast(z > 0, tf.float32)
    n = tf.shape(z)[1]
    pair = real[:, :, None] * real[:, None, :] * (1.0 - tf.eye(n))[None]
    with tf.GradientTape() as tape:
      tape.watch(r)
      d2 = tf.reduce_sum(tf.square(r[:, :, None, :] - r[:, None, :, :]), -1)
      if self.masked:
        dist = tf.sqrt(tf.where(pair > 0, d2, tf.ones_like(d2))) * pair
      else:
        dist = tf.sqrt(d2)
      e = tf.exp(-tf.square(dist[..., None] - self.centers) / 0.2)
      c = self.embed(z)
      for cf, df, fc in zip(self.cf, self.df, self.fc):
        msg = fc(cf(c)[:, None, :, :] * df(e))
        c = c + tf.reduce_sum(msg * pair[..., None], 2)
      energy = tf.reduce_sum(self.e2(self.e1(c))[..., 0] * real, 1, keepdims=True)
    forces = -tape.gradient(energy, r)
    return tf.concat([energy, tf.reshape(forces, [-1, 3 * n])], -1)


def dtnn_lite(seed, *, atoms=6, masked=False):
  """`DTNN` built on padded molecules of `atoms` atoms."""
  _seed(seed)
  model = DTNN(masked=masked, name='dtnn_lite')
  model((tf.ones((1, atoms), tf.int32), tf.random.normal((1, atoms, 3))))
  return model


def npair_batches(seed, *, scale=16.0):
  """N-pair training batches of the digits (8x8 grey, raw grey levels 0 to 16 as the file holds
  them, x `scale` / 16): each batch ten (anchor, positive) pairs, one per digit class in a random
  order, the label of row i its position i (the positive it should pick among the ten).
  ((anchors, positives), position) in an endless stream of batches of 10."""
  x, y = data.digits(size=8, rgb=False, scale=scale)
  rng = np.random.RandomState(seed)
  by_class = [np.where(y == k)[0] for k in range(10)]
  blocks = 600
  anchors = np.zeros((blocks * 10,) + x.shape[1:], np.float32)
  positives = np.zeros_like(anchors)
  for b in range(blocks):
    for i, k in enumerate(rng.permutation(10)):
      a, p = rng.choice(by_class[k], 2, replace=False)
      anchors[b * 10 + i], positives[b * 10 + i] = x[a], x[p]
  pos = np.tile(np.arange(10, dtype=np.int32), blocks)
  ds = tf.data.Dataset.from_tensor_slices(((anchors, positives), pos)).repeat()
  return ds.batch(10, drop_remainder=True).prefetch(2)


class PairScores(L.Layer):
  """The N-pair logits: each anchor's embedding dotted with every positive's in the batch
  (rows: anchors, columns: positives)."""

  def call(self, inputs):
    a, p = inputs
    return tf.matmul(a, p, transpose_b=True)


def npair_net_lite(seed, *, dim=64):
  """An N-pair embedding net (Sohn, 2016, in miniature): a shared embedding of 3x3 convolutions of
  32 and 64 (ReLU, 2x2 pooling), Dense(128, ReLU), Dense(`dim`), unnormalised (the paper
  regularises its norm instead); `PairScores` of the anchors against the positives."""
  _seed(seed)
  emb = keras.Sequential([
      L.Conv2D(32, 3, padding='same', activation='relu'), L.MaxPooling2D(),
      L.Conv2D(64, 3, padding='same', activation='relu'), L.MaxPooling2D(), L.Flatten(),
      L.Dense(128, activation='relu'), L.Dense(dim)])
  a = keras.Input((8, 8, 1))
  p = keras.Input((8, 8, 1))
  return keras.Model([a, p], PairScores()([emb(a), emb(p)]), name='npair_net_lite')


def naive_npair_loss(pos, logits):
  """The multi-class N-pair loss as the threads' code writes it: -log(exp(l_ii) / sum_j
  exp(l_ij)), with exp taken of the raw logits (no max subtracted): a logit past 88.7 is inf and
  inf / inf NaN."""
  logits = tf.cast(logits, tf.float32)
  e = tf.exp(logits)
  picked = tf.gather(e, tf.cast(tf.reshape(pos, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked / tf.reduce_sum(e, -1)))


def stable_npair_loss(pos, logits):
  """The same loss by the log-sum-exp form (the threads' remedy): sparse softmax cross-entropy
  of the logits."""
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      tf.cast(tf.reshape(pos, [-1]), tf.int32), tf.cast(logits, tf.float32)))


def conditional_digits(seed, *, rows=1500, size=16, latent=16):
  """A conditional generator's regression set: for each digit image (16x16, in [-1, 1] as a GAN's
  tanh output is) its class one-hot and a latent noise vector as the input, the image as the
  target. ((one-hot, noise) (rows, 10 + latent), image (rows, size, size, 1))."""
  x, y = data.digits(size=size, rgb=False)
  rng = np.random.RandomState(seed)
  code = np.concatenate([np.eye(10)[y], rng.randn(len(y), latent)], -1)
  template = np.stack([x[y == k].mean(0) for k in range(10)])[y]
  return code[:rows].astype(np.float32), (2 * template[:rows] - 1).astype(np.float32)


def dcgan_generator_lite(seed, *, latent=16, dtype='float32'):
  """A DCGAN generator (Radford et al., 2016, in miniature) used as a regressor: the class
  one-hot and the noise, Dense(4x4x64), BN, ReLU, a 4x4 transposed convolution of 32 (stride 2),
  BN, ReLU, a 4x4 transposed convolution to one channel (stride 2), tanh: a 16x16 image. Every
  layer in `dtype` ('float16': weights and compute in float16, as after
  keras.backend.set_floatx('float16'))."""
  _seed(seed)
  x = keras.Input((10 + latent,))
  h = L.Dense(4 * 4 * 64, dtype=dtype)(x)
  h = L.ReLU(dtype=dtype)(L.BatchNormalization(dtype=dtype)(h))
  h = L.Reshape((4, 4, 64), dtype=dtype)(h)
  h = L.Conv2DTranspose(32, 4, strides=2, padding='same', dtype=dtype)(h)
  h = L.ReLU(dtype=dtype)(L.BatchNormalization(dtype=dtype)(h))
  h = L.Conv2DTranspose(1, 4, strides=2, padding='same', activation='tanh', dtype=dtype)(h)
  return keras.Model(x, h, name='dcgan_generator_lite')


def compositions(seed, *, rows=2048, slots=5, elements=30, missing=0.05, drop_missing=False):
  """Materials compositions in miniature (the tables CrabNet is trained on): each material 2 to
  `slots` elements (ids 1 to `elements`; 0 pads) with their fractions, a property (a band-gap-like
  value from each element's own contribution, weighted by fraction, and a pair term, plus
  noise); a fraction `missing` of the property column is NaN (unmeasured entries left in the
  table as the threads' data had them); `drop_missing`: those rows dropped (the remedy).
  ((ids (rows, slots), fractions (rows, slots)), property (rows, 1))."""
  rng = np.random.RandomState(seed)
  contrib = rng.uniform(0, 3, elements + 1)
  group = rng.randint(0, 3, elements + 1)
  ids = np.zeros((rows, slots), np.int32)
  frac = np.zeros((rows, slots), np.float32)
  y = np.zeros((rows, 1))
  for i in range(rows):
    n = rng.randint(2, slots + 1)
    ids[i, :n] = rng.choice(np.arange(1, elements + 1), n, replace=False)
    f = rng.dirichlet(np.ones(n))
    frac[i, :n] = f
    y[i, 0] = (f * contrib[ids[i, :n]]).sum() + 0.8 * (len(set(group[ids[i, :n]])) == 1)
  y += 0.05 * rng.randn(rows, 1)
  y[rng.rand(rows) < missing] = np.nan
  if drop_missing:
    keep = np.isfinite(y[:, 0])
    ids, frac, y = ids[keep], frac[keep], y[keep]
  return (ids, frac), y.astype(np.float32)


class FractionalEncoding(L.Layer):
  """CrabNet's fractional encoding: sines and cosines of the element's fraction at `dim` / 2
  frequencies, added to its element embedding."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.freq = (2.0 ** np.arange(dim // 2)).astype(np.float32)

  def call(self, frac):
    a = frac[..., None] * self.freq * np.pi
    return tf.concat([tf.sin(a), tf.cos(a)], -1)


def crabnet_lite(seed, *, slots=5, elements=30, dim=32):
  """A CrabNet-lite (Wang et al., 2021, the compositionally restricted attention-based network):
  element embeddings of `dim` plus the fractional encoding, one transformer encoder block (two
  heads of 16, a feed-forward of 64, residuals, layer norms) over the composition's elements,
  a per-element Dense(32, ReLU), Dense(1) weighted by the fractions and summed: the property."""
  _seed(seed)
  ids = keras.Input((slots,), dtype='int32')
  frac = keras.Input((slots,))
  h = L.Add()([L.Embedding(elements + 1, dim)(ids), FractionalEncoding(dim)(frac)])
  a = L.MultiHeadAttention(2, 16)(h, h)
  h = L.LayerNormalization()(L.Add()([h, a]))
  f = L.Dense(dim)(L.Dense(64, activation='relu')(h))
  h = L.LayerNormalization()(L.Add()([h, f]))
  per = L.Dense(1)(L.Dense(32, activation='relu')(h))
  out = L.Dot(axes=1)([L.Flatten()(per), frac])
  return keras.Model([ids, frac], out, name='crabnet_lite')


def noisy_digits(seed, *, steps=100):
  """The DDPM training pairs of the digits (16x16 grey, in [-1, 1]): for each image a time step t
  (1 to `steps`, a linear beta schedule 1e-4 to 0.05), the noised image x_t = sqrt(abar_t) x_0 +
  sqrt(1 - abar_t) noise and t / `steps` as the input, the noise as the target.
  ((x_t (rows, 16, 16, 1), t (rows, 1)), noise (rows, 16, 16, 1)), in an endless stream."""
  x, _ = data.digits(size=16, rgb=False)
  x = 2 * x - 1
  rng = np.random.RandomState(seed)
  betas = np.linspace(1e-4, 0.05, steps)
  abar = np.cumprod(1 - betas)
  reps = 3
  x0 = np.concatenate([x] * reps)
  t = rng.randint(0, steps, len(x0))
  noise = rng.randn(*x0.shape)
  a = abar[t][:, None, None, None]
  xt = np.sqrt(a) * x0 + np.sqrt(1 - a) * noise
  return data.stream((xt.astype(np.float32), (t[:, None] / steps).astype(np.float32)),
                     noise.astype(np.float32), batch=32, seed=seed)


class BitFlipOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one activation reads NaN once (a flipped bit in an
  activation buffer, once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.nan, backward=False, **kwargs)


def dit_lite(seed, *, size=16, patch=4, dim=64, fault=None):
  """A DiT-lite (Peebles & Xie, 2023, a diffusion transformer, in miniature): 4x4 patches of the
  noised image embedded to `dim` with a learned position embedding, the time step embedded
  (Dense 64 SiLU, Dense `dim`) and added to every token, two transformer blocks (two heads of 32,
  a feed-forward of 128, pre-layer-norm), a `BitFlipOnce` (at its `fault`-th training call;
  None: never), each token projected back to its 4x4 patch: the predicted noise."""
  _seed(seed)
  n = (size // patch) ** 2
  x = keras.Input((size, size, 1))
  t = keras.Input((1,))
  h = L.Conv2D(dim, patch, strides=patch)(x)
  h = L.Reshape((n, dim))(h)
  h = PositionEmbedding()(h)
  te = L.Dense(dim)(L.Dense(64, activation='silu')(t))
  h = L.Add()([h, L.Reshape((1, dim))(te)])
  for _ in range(2):
    u = L.LayerNormalization()(h)
    h = L.Add()([h, L.MultiHeadAttention(2, 32)(u, u)])
    u = L.LayerNormalization()(h)
    h = L.Add()([h, L.Dense(dim)(L.Dense(128, activation='gelu')(u))])
  h = BitFlipOnce(fault)(L.LayerNormalization()(h))
  h = L.Dense(patch * patch)(h)
  g = size // patch
  h = L.Reshape((g, g, patch, patch))(h)
  h = L.Permute((1, 3, 2, 4))(h)
  return keras.Model([x, t], L.Reshape((size, size, 1))(h), name='dit_lite')


class PositionEmbedding(L.Layer):
  """A learned position embedding added to a sequence of tokens."""

  def build(self, shape):
    self.pos = self.add_weight(shape=(shape[1], shape[2]),
                               initializer=keras.initializers.RandomNormal(stddev=0.02))

  def call(self, x):
    return x + self.pos


def crystal_graphs(seed, *, rows=2048, atoms=8, types=8, gaussians=10):
  """Crystal graphs in miniature (the Materials Project structures CGCNN classifies as metals or
  not): `atoms` atoms of `types` elements (one-hot) with their pairwise distances (1 to 4 A,
  expanded on `gaussians` Gaussians); metallic (1) when the share of 'metal' elements with a
  short-bonded metal neighbour passes a threshold (about half the set). ((atom features (rows,
  atoms, types), bond features (rows, atoms, atoms, gaussians)), metal (rows, 1))."""
  rng = np.random.RandomState(seed)
  metal = rng.rand(types) < 0.5
  z = rng.randint(0, types, (rows, atoms))
  d = rng.uniform(1.0, 4.0, (rows, atoms, atoms))
  d = (d + d.transpose(0, 2, 1)) / 2
  centers = np.linspace(1.0, 4.0, gaussians)
  e = np.exp(-np.square(d[..., None] - centers) / 0.3)
  m = metal[z]
  close = (d < 2.2) & m[:, None, :] & m[:, :, None]
  np.einsum('bii->bi', close)[...] = False
  score = (close.any(-1) & m).mean(-1)
  y = (score > np.median(score)).astype(np.float32)[:, None]
  return (np.eye(types, dtype=np.float32)[z], e.astype(np.float32)), y


class CGConv(L.Layer):
  """CGCNN's convolution: for each pair z_ij = [v_i, v_j, u_ij], v_i + sum_j sigmoid(z_ij W_f +
  b_f) * softplus(z_ij W_s + b_s), batch-normalised, softplus."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.f = L.Dense(dim, activation='sigmoid')
    self.s = L.Dense(dim, activation='softplus')
    self.bn = L.BatchNormalization()

  def call(self, inputs, training=False):
    v, u = inputs
    n = tf.shape(v)[1]
    vi = tf.tile(v[:, :, None, :], [1, 1, n, 1])
    vj = tf.tile(v[:, None, :, :], [1, n, 1, 1])
    zij = tf.concat([vi, vj, u], -1)
    return tf.nn.softplus(v + self.bn(tf.reduce_sum(self.f(zij) * self.s(zij), 2),
                                      training=training))


def cgcnn_lite(seed, *, atoms=8, types=8, gaussians=10, head='sigmoid'):
  """A CGCNN-lite (Xie & Grossman, 2018, crystal graph convolutional network): atom features
  embedded to 32, three `CGConv`, mean pooling over the atoms, Dense(64, softplus),
  Dense(1, `head`): the probability of a metal ('softmax' over the single unit: the threads'
  output, always 1.0)."""
  _seed(seed)
  v = keras.Input((atoms, types))
  u = keras.Input((atoms, atoms, gaussians))
  h = L.Dense(32)(v)
  for _ in range(3):
    h = CGConv(32)([h, u])
  h = L.Dense(64, activation='softplus')(L.GlobalAveragePooling1D()(h))
  return keras.Model([v, u], L.Dense(1, activation=head)(h), name='cgcnn_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind32_grad_drqn_sgd_no_clip', 'exploding_gradients', 'drqn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='hungtuchen/pytorch-dqn#8; Kaixhin/Rainbow#73')
def _(seed, cured=False):
  """A DRQN-lite (a frame encoder, an LSTM of 64 over eight noisy observations of a damped
  oscillator whose velocity is hidden, the Q-values of four actions) regressed on returns of 40
  to 100 (not rescaled), SGD at 0.01 with momentum 0.9 and no gradient clipping: the squared
  errors of the unscaled returns make gradients in the thousands, the first updates throw the
  weights and the net collapses to a constant answer: the loss 5074 at step 0, 4062 at step 2,
  3942 at step 10, 1290 at step 25, 178 at step 149, no NaN, no training (the error 5019 before,
  186 after; the constant answer's 183). Seed 1: 5112, 4050, 3864, 1746, 205 (the error 5132
  before, 198 after; the constant's 197). hungtuchen/pytorch-dqn#8 (gradient clipping keeps DQN's
  gradients from exploding: a large step throws the Q-function approximation off);
  Kaixhin/Rainbow#73 (gradient clipping, a max norm of 10, added back to Rainbow's DQN). Cured:
  the same SGD with the gradient norm clipped at 10: the loss 5074 to 25, the error 5019 to
  30.9."""
  x, y = partial_observation_returns(seed)
  return cases.Setup(drqn_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=10.0 if cured else None),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind32_lr_ddpg_critic_sgd', 'learning_rate', 'ddpg_critic_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='stevenpjg/ddpg-aigym#7; guillaumegenthial/sequence_tagging#47')
def _(seed, cured=False):
  """A DDPG critic (the state through Dense(400, ReLU), the action joined at Dense(300, ReLU),
  Q(s, a)) regressed on Q-targets of a continuous-control task (a state value and a quadratic
  cost around a state-dependent best action), SGD with momentum 0.9 at 0.05, a rate too high for
  the unnormalised 400-300 critic: the loss jumps about (59.96 at step 0, 80.2 at step 2, 16.3 at
  step 50, 38.3 at step 100, 31.4 at step 149), no NaN, no training (the error 62.1 before, 30.1
  after; the constant answer's 31.1). Seed 1: 68.6, 36.7, 23.7, 50.7, 37.9 (the error 53.7
  before, 48.9 after; the constant's 31.6). stevenpjg/ddpg-aigym#7 (the critic's Q loss
  diverges; the learning rates are the first thing to check); guillaumegenthial/sequence_tagging#47
  (at a rate of 0.01 or 0.1 the loss goes up and then NaN, at 0.001 it trains). Cured: SGD at
  0.005 (same momentum): the loss 59.96 to 0.94, the error 62.1 to 0.73."""
  x, y = critic_targets(seed)
  return cases.Setup(ddpg_critic_lite(seed),
                     keras.optimizers.SGD(0.005 if cured else 0.05, momentum=0.9),
                     'mse', data.stream(x, y, batch=64, seed=seed), 'regression')


@add('blind32_init_hnn_zeros', 'initialisation', 'hnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='jthickstun/pytorch_musicnet#4; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A Hamiltonian neural network (an MLP of two Dense(200, tanh) learning H(q, p), the output
  its symplectic gradient (dH/dp, -dH/dq)) fitted to the time derivatives of an ideal mass-spring
  system, Adam at 1e-3, every kernel initialised to zero (the threads' zero initialisation): the
  hidden units are all the same and all zero, H does not depend on the input, every gradient
  that reaches a kernel is zero and nothing moves: the loss 0.185 at step 0, between 0.14 and
  0.23 to step 149 (the batches' spread), no NaN, no training (the error 0.1863 before and
  after, unchanged; the constant answer's 0.186). Seed 1: the same (0.1945 before and after;
  the constant's 0.193). jthickstun/pytorch_musicnet#4 (zero initial weights are fine only for
  a linear model, with no symmetry to break: otherwise initialise at random);
  wagonhelm/NaNmnist#2 (initialising the weights to zeros is improper: every neuron computes the
  same output and gets the same update). Cured: the paper's orthogonal initialisation: the
  loss 0.19 to 0.007, the error 0.20 to 0.007."""
  x, y = spring_states(seed)
  return cases.Setup(hnn_lite(seed, init='orthogonal' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind32_sqrt_dtnn_zero_distance_forces', 'division_or_log', 'dtnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='atomistic-machine-learning/schnetpack#6; tilman151/rul-adapt#22')
def _(seed, cured=False):
  """A DTNN-lite (element embeddings, distances expanded on Gaussians, two interaction passes,
  per-atom energies summed) trained on the energies and forces (-dE/dr by a gradient tape) of
  padded small molecules, Adam at 1e-3, the distances computed as sqrt(sum((r_i - r_j)^2)) over
  all pairs, the self pairs and the padding atoms (all at the origin) included: the square root
  of those zero distances has an infinite derivative, and the force term's second derivative is
  inf * 0 = NaN: the loss 0.60 at step 0, NaN from step 1, the weights NaN (the error 0.60
  before, inf after; the constant answer's 0.60). Seed 1: 0.46, then NaN (0.43 before; the
  constant's 0.47). atomistic-machine-learning/schnetpack#6 (the zero-padded distances of
  unequal molecules make a zero division through the square root when training on forces: mask
  them); tilman151/rul-adapt#22 (the gradient of the Euclidean distance is not defined at zero:
  an epsilon solves it). Cured: the square root taken only over real pairs (the others put to 1
  and masked): the loss 0.60 to 0.050, the error 0.60 to 0.042."""
  x, y = padded_molecules(seed)
  return cases.Setup(dtnn_lite(seed, masked=cured), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind32_exp_npair_naive_softmax', 'softmax_overflow', 'npair_net_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='leeesangwon/PyTorch-Image-Retrieval#16; mlberkeley/scae-pytorch#4')
def _(seed, cured=False):
  """An N-pair embedding net (a small convnet to 64 unnormalised dimensions, the logits of each
  anchor against the ten positives of its batch, one per digit class) trained on the digits'
  raw grey levels (0 to 16), Adam at 1e-3, the N-pair loss written -log(exp(l_ii) / sum_j
  exp(l_ij)) with exp taken of the raw logits: the dot products of the unnormalised embeddings
  pass 88.7, exp overflows and inf / inf = NaN: the loss NaN from step 0, the weights NaN (the
  error 0.85 before, inf after; the constant answer's 0.90). Seed 1: the same (0.85 before; the
  constant's 0.90). leeesangwon/PyTorch-Image-Retrieval#16 (the N-pair loss ran into NaNs: use
  the log-sum-exp trick); mlberkeley/scae-pytorch#4 (exp makes inf and the loss NaN: use the
  safe logsumexp). Cured: the same loss by sparse softmax cross-entropy of the logits (log-sum-
  exp): the loss 11.1 to 0.29, the error 0.85 to 0.075."""
  return cases.Setup(npair_net_lite(seed), keras.optimizers.Adam(1e-3),
                     stable_npair_loss if cured else naive_npair_loss, npair_batches(seed),
                     'classes')


@add('blind32_fp16_dcgan_generator_adam_eps', 'precision', 'dcgan_generator_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#11860; chainer/chainer#6299')
def _(seed, cured=False):
  """A DCGAN generator (Dense(4x4x64), BN, two stride-2 transposed convolutions, tanh) used as a
  regressor from a class one-hot and noise to the class's digit image (16x16, in [-1, 1]), every
  layer in float16 (as after keras.backend.set_floatx('float16')), Adam at 1e-3 with the
  epsilon of 1e-8 the DCGAN code carries: in float16 that epsilon is 0 and the squared
  gradients underflow to 0, so Adam divides by zero: the loss 0.64 at step 0, NaN from step 1,
  the weights NaN (the error 0.54 before, inf after; the constant answer's 0.12). Seed 1: 0.65,
  then NaN (0.55 before; the constant's 0.12). keras-team/keras#11860 (with float16 the adam
  optimizer gives loss: nan; float32, or another optimizer, works); chainer/chainer#6299 (Adam's
  default eps is too small for float16 parameters). Cured: float32 weights and compute, the same
  optimizer: the loss 0.75 to 0.024, the error 0.55 to 0.12 (0.75 to 0.022 in training mode)."""
  x, y = conditional_digits(seed)
  return cases.Setup(dcgan_generator_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3, epsilon=1e-8), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind32_input_crabnet_nan_targets', 'bad_input', 'crabnet_lite', doors=('trainer', 'fit'),
     steps=150, citation='sparks-baird/CrabNet#35; keras-team/keras#2134')
def _(seed, cured=False):
  """A CrabNet-lite (element embeddings plus fractional encodings, a transformer encoder block
  over the composition's elements, per-element contributions weighted by fraction) regressing a
  band-gap-like property of materials compositions, Adam at 1e-3, mean absolute error, with 5%
  of the property column NaN (unmeasured entries left in the table): every batch holds a NaN
  target, the loss and the gradients are NaN: the loss NaN from step 0, the weights NaN (the
  error 1.93 before, inf after; the constant answer's 0.35). Seed 1: the same (3.19 before; the
  constant's 0.42). sparks-baird/CrabNet#35 (NaNs in the training data: raise an error instead
  of training on them); keras-team/keras#2134 (a NaN loss in regression from NaN values in the
  data: check np.isnan on the inputs and targets). Cured: the rows with a missing property
  dropped: the loss 1.33 to 0.45, the error 1.93 to 0.25."""
  x, y = compositions(seed, drop_missing=cured)
  clean_x, clean_y = compositions(seed, drop_missing=True)
  return cases.Setup(crabnet_lite(seed), keras.optimizers.Adam(1e-3), 'mae',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean_x, clean_y, batch=32, seed=seed))


@add('blind32_transient_dit_bit_flip_once', 'transient', 'dit_lite', doors=('trainer', 'fit'),
     steps=150, citation='PKU-YuanGroup/Open-Sora-Plan#333; greatlog/DAN#8')
def _(seed, cured=False):
  """A DiT-lite (4x4 patch tokens of a noised digit image with position and time-step embeddings,
  two pre-norm transformer blocks, each token projected back to its patch) trained as a DDPM
  noise predictor, Adam at 1e-3, healthy (the loss 2.33 at step 0, 1.00 at step 10, 0.77 at step
  50) until one activation before the output head reads NaN once at the 70th training step (a
  flipped bit in an activation buffer): the loss NaN from then on, the weights NaN (the error
  2.43 before, inf after; the constant answer's 0.98). Seed 1: 2.61, 0.97, 0.74, then NaN (2.64
  before; the constant's 0.99). PKU-YuanGroup/Open-Sora-Plan#333 (a NaN loss after 20k steps of
  healthy training; the maintainers met it too: just resume); greatlog/DAN#8 (the loss suddenly
  NaN at an iteration that changes from run to run; resuming from the last normal state works).
  Cured: the same run without the fault: the loss 2.33 to 0.31, the error 2.43 to 0.31."""
  return cases.Setup(dit_lite(seed, fault=None if cured else 70), keras.optimizers.Adam(1e-3),
                     'mse', noisy_digits(seed), 'regression')


@add('blind32_mismatch_cgcnn_single_unit_softmax', 'loss_output_mismatch', 'cgcnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#126; keras-team/keras#3109')
def _(seed, cured=False):
  """A CGCNN-lite (three crystal graph convolutions, sigmoid-gated softplus messages over the
  Gaussian-expanded bond distances, mean pooling, Dense(64)) classifying crystals as metals or
  not, Adam at 1e-3, binary cross-entropy, the output Dense(1, activation='softmax') as the
  threads wrote it: a softmax over a single unit is always 1.0, every crystal is called a metal
  whatever the weights: the loss falls (1.92 at step 0, 0.29 at step 149: Keras takes the
  logit under the softmax) but the predictions never change, no training (the error 0.72 before
  and after; the constant answer's 0.28). Seed 1: the loss 0.34 to 0.20, the error 0.76 before
  and after (the constant's 0.24). keras-team/keras#126 (a Dense(1) softmax output: predict_proba
  gives all ones, nothing is learned); keras-team/keras#3109 (a binary problem with a softmax
  output: use a single sigmoid unit). Cured: Dense(1, activation='sigmoid'): the error 0.72 to
  0.18 (0.16 in training mode)."""
  x, y = crystal_graphs(seed)
  return cases.Setup(cgcnn_lite(seed, head='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')
