"""A fiftieth blind set of sick scenarios (the 'blind50' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind49.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in reinforcement learning and control (policy,
value and world-model networks), robot sensing and autonomous-driving perception (an R2D2-lite
recurrent Q-network, a Nature-DQN-lite Q-network, an A3C-lite policy, a TRPO-lite Gaussian
policy, a Decision-Transformer-lite, a PointPillars-lite lidar classifier, a DR-SPAAM-lite laser
person detector, a Sparse-to-Dense-lite depth completer, a DroNet-lite collision predictor, a
PETS-lite dynamics ensemble and a CIL-lite conditional driving policy). Each builder takes
`cured`: the same run with the thread's remedy (the registry calls `build(seed)`, the sick run).
Each was checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom
(seeds 0 and 1), the cured twin passes runner's "did it train" measure in the same number of
steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND50 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND50.add` with split='blind50'."""
  return BLIND50.add(name, expected, arch, split='blind50', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def pendulum_returns(seed, *, rows=1024, window=40, horizon=30, gamma=0.97):
  """A partially observed swinging pendulum in miniature (only the angle seen, through cos and
  sin, with sensor noise): a replayed sequence of `window` observations (rows, window, 3) and
  the discounted n-step return of the reward 1 + cos(theta) over its last `horizon` steps
  (rows, 1), standardised (as a running return normaliser gives it)."""
  rng = np.random.RandomState(seed)
  n = window + horizon
  w = rng.uniform(0.1, 0.4, (rows, 1))
  amp = rng.uniform(0.3, 3.0, (rows, 1))
  damp = rng.uniform(0.0, 0.02, (rows, 1))
  t = np.arange(n)[None]
  theta = amp * np.exp(-damp * t) * np.cos(w * t + rng.uniform(0, 2 * np.pi, (rows, 1)))
  obs = np.stack([np.cos(theta), np.sin(theta), 0.05 * rng.randn(rows, n)], -1)
  reward = 1 + np.cos(theta[:, window - horizon:window])
  ret = (reward * gamma ** np.arange(horizon)[::-1][None]).sum(1, keepdims=True)
  ret = (ret - ret.mean()) / ret.std()
  return obs[:, :window].astype(np.float32), ret.astype(np.float32)


def r2d2(seed, *, window=40, units=32):
  """An R2D2-lite (Kapturowski et al., 2019, Recurrent experience replay in distributed
  reinforcement learning), in miniature: a Dense 32 ReLU torso per step, an LSTM of `units`
  over the burn-in and training window, the last state to a Dense 32 tanh and a linear Dense(1):
  the value of the greedy action."""
  _seed(seed)
  x = keras.Input((window, 3))
  h = L.TimeDistributed(L.Dense(32, activation='relu'))(x)
  h = L.LSTM(units)(h)
  return keras.Model(x, L.Dense(1)(L.Dense(32, activation='tanh')(h)), name='r2d2_lite')


def catch_frames(seed, *, rows=2048, size=12, actions=3):
  """A Catch-like Atari game in miniature: four stacked 12 x 12 frames of a falling ball and a
  paddle (the last frame the brightest), grey levels in [0, 1]; the targets the Q-values of
  the three actions (left, stay, right) one step from the catch: minus the paddle's distance to
  the ball after the move, plus one if caught. ((rows, 12, 12, 4), (rows, 3))."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, size, size, 4), np.float32)
  bx = rng.randint(0, size, rows)
  by = rng.randint(4, size - 1, rows)
  px = rng.randint(1, size - 1, rows)
  vx = rng.randint(-1, 2, rows)
  for f in range(4):
    xs = np.clip(bx - vx * (3 - f), 0, size - 1)
    ys = by - (3 - f)
    x[np.arange(rows), ys, xs, f] = 0.4 + 0.2 * f
    x[np.arange(rows), size - 1, px, f] = 1.0
  land = np.clip(bx + vx * (size - 1 - by), 0, size - 1)
  q = np.stack([-np.abs(np.clip(px + a, 0, size - 1) - land) / 4.0 for a in (-1, 0, 1)], 1)
  q += (q == 0)
  return x, q.astype(np.float32)


def nature_dqn(seed, *, size=12, actions=3):
  """A Nature-DQN-lite (Mnih et al., 2015, "Human-level control through deep reinforcement
  learning"), in miniature: convolutions of 16 (4x4, stride 2) and 32 (3x3) with ReLU on the
  four stacked frames, Dense 64 ReLU and a linear Dense per action: the Q-values."""
  _seed(seed)
  x = keras.Input((size, size, 4))
  h = L.Conv2D(16, 4, strides=2, activation='relu')(x)
  h = L.Conv2D(32, 3, activation='relu')(h)
  h = L.Dense(64, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(actions)(h), name='nature_dqn_lite')


def gridworld_demos(seed, *, rows=2048, size=10):
  """Expert demonstrations on a gridworld in miniature: a top-down 10 x 10 view (2 channels:
  the agent, the goal) and the expert's move (0 up, 1 down, 2 left, 3 right: along the larger
  gap to the goal). ((rows, 10, 10, 2), actions (rows,))."""
  rng = np.random.RandomState(seed)
  a = rng.randint(0, size, (rows, 2))
  g = rng.randint(0, size, (rows, 2))
  same = (a == g).all(1)
  g[same, 0] = (g[same, 0] + 3) % size
  x = np.zeros((rows, size, size, 2), np.float32)
  x[np.arange(rows), a[:, 0], a[:, 1], 0] = 1
  x[np.arange(rows), g[:, 0], g[:, 1], 1] = 1
  d = g - a
  vertical = np.abs(d[:, 0]) >= np.abs(d[:, 1])
  y = np.where(vertical, np.where(d[:, 0] < 0, 0, 1), np.where(d[:, 1] < 0, 2, 3))
  return x, y.astype(np.int32)


def a3c(seed, *, size=10, actions=4, init='glorot_uniform'):
  """An A3C-lite (Mnih et al., 2016, Asynchronous methods for deep reinforcement learning, the
  feed-forward agent), in miniature: convolutions of 16 (3x3) and 32 (3x3, stride 2) with ReLU,
  Dense 64 ReLU and the policy's linear Dense per action: the action logits. Every kernel drawn
  from `init`."""
  _seed(seed)
  x = keras.Input((size, size, 2))
  h = L.Conv2D(16, 3, activation='relu', kernel_initializer=init)(x)
  h = L.Conv2D(32, 3, strides=2, activation='relu', kernel_initializer=init)(h)
  h = L.Dense(64, activation='relu', kernel_initializer=init)(L.Flatten()(h))
  return keras.Model(x, L.Dense(actions, kernel_initializer=init)(h), name='a3c_lite')


def reacher_demos(seed, *, rows=2048):
  """Expert demonstrations of a two-joint reacher in miniature: the joint angles (cos, sin),
  velocities and the target (8 columns) and the expert's two torques (a PD law towards the
  target plus noise). ((rows, 8), (rows, 2))."""
  rng = np.random.RandomState(seed)
  q = rng.uniform(-np.pi, np.pi, (rows, 2))
  dq = rng.randn(rows, 2)
  target = rng.uniform(-1, 1, (rows, 2))
  tip = np.stack([np.cos(q[:, 0]) + np.cos(q.sum(1)), np.sin(q[:, 0]) + np.sin(q.sum(1))], 1)
  err = target - tip / 2
  u = np.tanh(1.5 * err - 0.3 * dq) + 0.1 * rng.randn(rows, 2)
  x = np.concatenate([np.cos(q), np.sin(q), dq, target], 1)
  return x.astype(np.float32), u.astype(np.float32)


class StateIndependentStd(L.Layer):
  """The identity on the policy's mean, holding its state-independent spread: `log_param`
  True, a log standard deviation (zeros: std 1); False, the standard deviation itself, set to
  zeros as the threads' ports write it."""

  def __init__(self, dims, log_param=True, **kwargs):
    super().__init__(**kwargs)
    self.dims, self.log_param = dims, log_param

  def build(self, shape):
    self.param = self.add_weight(shape=(self.dims,), initializer='zeros', name='std_param')

  def std(self):
    p = tf.cast(self.param, tf.float32)
    return tf.exp(p) if self.log_param else p

  def call(self, x):
    return x


def trpo_policy(seed, *, log_param=True):
  """A TRPO-lite (Schulman et al., 2015, Trust region policy optimization, the MuJoCo policy),
  in miniature: Dense 64 tanh twice and a linear Dense(2): the mean torques of a diagonal
  Gaussian policy whose standard deviation is a state-independent parameter
  (`StateIndependentStd`). Returns (model, the std layer)."""
  _seed(seed)
  x = keras.Input((8,))
  h = L.Dense(64, activation='tanh')(L.Dense(64, activation='tanh')(x))
  std = StateIndependentStd(2, log_param)
  return keras.Model(x, std(L.Dense(2)(h)), name='trpo_policy_lite'), std


def gaussian_nll(std_layer):
  """The Gaussian negative log-likelihood of the demonstrated torques, log std + (a - mu)^2 /
  (2 std^2), averaged (the constant dropped)."""

  def loss(a, mu):
    a, mu = tf.cast(a, tf.float32), tf.cast(mu, tf.float32)
    std = std_layer.std()
    return tf.reduce_mean(tf.math.log(std) + tf.square(a - mu) / (2 * tf.square(std)))

  return loss


def cartpole_trajectories(seed, *, rows=2048, context=8, scale=1.0):
  """Offline CartPole trajectories in miniature: `context` time steps of (return-to-go, four
  state values); the action the behaviour policy took at the last step (0 left, 1 right: a
  noisy balance law on the angle and angular velocity). The returns-to-go count the remaining
  reward (1 a step, episodes up to 500) times `scale` (the Decision Transformer's scale is
  1/1000). ((rows, context, 5), actions (rows,))."""
  rng = np.random.RandomState(seed)
  s = 0.3 * rng.randn(rows, context, 4)
  s = np.cumsum(s, 1) * 0.3
  rtg = rng.uniform(50, 500, (rows, 1)) - np.arange(context)[None]
  last = s[:, -1]
  y = (last[:, 2] + 0.5 * last[:, 3] + 0.1 * rng.randn(rows) > 0).astype(np.int32)
  x = np.concatenate([rtg[..., None] * scale, s], -1)
  return x.astype(np.float32), y


class CausalSelfAttention(L.Layer):
  """One causal self-attention head over the trajectory's tokens, the softmax written by hand,
  exp(s) / sum(exp(s)) of the masked scores q.k (`stable` False, as the threads' kernels had it:
  exp overflows above 88.7) or through tf.nn.softmax (`stable`: the max subtracted)."""

  def __init__(self, dim, stable=False, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.stable = dim, stable
    self.q, self.k, self.v = L.Dense(dim), L.Dense(dim), L.Dense(dim)

  def call(self, x):
    s = tf.matmul(self.q(x), self.k(x), transpose_b=True)
    n = tf.shape(x)[1]
    mask = tf.linalg.band_part(tf.ones((n, n), s.dtype), -1, 0)
    if self.stable:
      a = tf.nn.softmax(s + (1.0 - mask) * -1e9, -1)
    else:
      e = tf.exp(s) * mask
      a = e / tf.reduce_sum(e, -1, keepdims=True)
    return x + tf.matmul(a, self.v(x))


def decision_transformer(seed, *, context=8, dim=32, stable=False):
  """A Decision-Transformer-lite (Chen et al., 2021, "Decision Transformer: reinforcement
  learning via sequence modeling"), in miniature: each step's (return-to-go, state) embedded by
  a Dense of `dim` plus a learned timestep embedding, two causal self-attention blocks
  (`CausalSelfAttention`, each followed by a Dense 2 dim ReLU and back, residual) and a
  Dense(2) on the last token: the action logits."""
  _seed(seed)
  x = keras.Input((context, 5))
  h = L.Dense(dim)(x)
  h = h + L.Embedding(context, dim)(tf.range(context))[None]
  for _ in range(2):
    h = CausalSelfAttention(dim, stable)(h)
    h = h + L.Dense(dim)(L.Dense(2 * dim, activation='relu')(h))
  last = L.Lambda(lambda t: t[:, -1])(h)
  return keras.Model(x, L.Dense(2)(last), name='decision_transformer_lite')


def lidar_objects(seed, *, rows=2048, points=64):
  """Lidar returns of road users in miniature (a Waymo-like sensor): each object's `points`
  returns (x, y, z, intensity) as the driver gives them: positions in millimetres (objects 5 to
  110 m away), the intensity in raw counts (100 to 3000); the class (0 car, 1 pedestrian, 2
  cyclist) from the object's size. ((rows, points, 4), (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 3, rows)
  size = np.array([[4.5, 1.8, 1.5], [0.6, 0.6, 1.8], [1.8, 0.6, 1.7]])[y]
  dist = rng.uniform(5, 110, rows)
  ang = rng.uniform(-np.pi, np.pi, rows)
  centre = np.stack([dist * np.cos(ang), dist * np.sin(ang), np.zeros(rows)], 1)
  local = (rng.rand(rows, points, 3) - 0.5) * size[:, None] * rng.uniform(0.8, 1.2, (rows, 1, 3))
  xyz = centre[:, None] + local
  inten = rng.uniform(100, 3000, (rows, points, 1))
  pts = np.concatenate([xyz * 1000, inten], -1)
  return pts.astype(np.float32), y.astype(np.int32)


def pointpillars(seed, *, points=64, pfn_dtype=None):
  """A PointPillars-lite (Lang et al., 2019, "PointPillars: fast encoders for object detection
  from point clouds"), in miniature, on one object's points: the pillar feature net (`pfn_dtype`
  its dtype, None: the policy's): the positions read in metres (x 1e-3), each point's offset
  from the points' mean (the decoration) and its intensity (x 1e-3), a Dense 32 with BatchNorm
  and ReLU per point and the max over the points; then Dense 64 ReLU and Dense(3) in float32:
  the object's class logits."""
  _seed(seed)
  x = keras.Input((points, 4))
  pfn = dict(dtype=pfn_dtype) if pfn_dtype else {}
  x_m = L.Rescaling(1e-3, **pfn)(x)
  offs = L.Lambda(lambda t: tf.concat([t[..., :3] - tf.reduce_mean(t[..., :3], 1, keepdims=True),
                                       t[..., 3:]], -1), **pfn)(x_m)
  h = L.ReLU(**pfn)(L.BatchNormalization(**pfn)(L.Dense(32, use_bias=False, **pfn)(offs)))
  h = L.GlobalMaxPooling1D(**pfn)(h)
  h = L.Dense(64, activation='relu')(h)
  return keras.Model(x, L.Dense(3, dtype='float32')(h), name='pointpillars_lite')


def laser_cutouts(seed, *, rows=4096, width=48, bad_share=0.1, clean=False):
  """2D laser cutouts in miniature (a DROW / FROG-like Hokuyo set): 48 range readings around a
  candidate point, depth-centred and divided by the cutout's depth (as DR-SPAAM does); a person
  (two leg arcs 0.1 m across, 0.3 m apart) or not (a wall, clutter). A share `bad_share` of the
  cutouts hold the driver's invalid beams (inf out of range, NaN no echo), as the recorded scans
  give them; `clean`: those beams set to the maximum range 29.96 m (the DROW magic value) before
  the cutout is normalised. ((rows, 48, 1), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 2, rows)
  depth = rng.uniform(1, 15, (rows, 1))
  u = np.linspace(-0.5, 0.5, width)[None] * depth / 4
  bg = depth + rng.uniform(0.5, 3, (rows, 1)) + rng.uniform(-1, 1, (rows, 1)) * u
  legs = np.zeros((rows, width))
  for c in (-0.15, 0.15):
    d2 = (u - c + 0.03 * rng.randn(rows, 1)) ** 2
    legs = np.where(d2 < 0.01, -np.sqrt(np.maximum(0.01 - d2, 0)), legs)
  clutter = np.where(rng.rand(rows, width) < 0.1, -rng.uniform(0, 2, (rows, width)), 0)
  r = np.where(y[:, None] == 1, np.minimum(bg, depth + legs), bg + clutter)
  r = r + 0.01 * rng.randn(rows, width)
  bad = rng.rand(rows) < bad_share
  beams = (rng.rand(rows, width) < 0.15) & bad[:, None]
  r = np.where(beams, np.where(rng.rand(rows, width) < 0.5, np.inf, np.nan), r)
  if clean:
    r = np.where(np.isfinite(r), r, 29.96)
  x = np.clip((r - depth) / depth, -1.0, None) if clean else (r - depth) / depth
  if clean:
    x = np.minimum(x, 1.0)
  return x[..., None].astype(np.float32), y[:, None].astype(np.float32)


def dr_spaam(seed, *, width=48):
  """A DR-SPAAM-lite (Jia et al., 2020, "DR-SPAAM: a spatial-attention and auto-regressive model
  for person detection in 2D range data"), in miniature: the cutout through 1D convolutions of
  32 and 64 (3 wide, BatchNorm, LeakyReLU, max-pooled by 2), a spatial attention pooling
  (softmax scores over positions) and Dense(1) with a sigmoid: the probability of a person."""
  _seed(seed)
  x = keras.Input((width, 1))
  h = x
  for n in (32, 64):
    h = L.Conv1D(n, 3, padding='same')(h)
    h = L.MaxPooling1D()(L.LeakyReLU(0.1)(L.BatchNormalization()(h)))
  w = L.Softmax(1)(L.Dense(1)(h))
  pooled = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], 1))([h, w])
  return keras.Model(x, L.Dense(1, activation='sigmoid')(pooled), name='dr_spaam_lite')


def depth_frames(seed, *, rows=1024, size=16, nan_share=0.1, drop=False):
  """Camera frames with lidar depth in miniature (a KITTI-like rig): a 16 x 16 RGB image (a
  ground plane under a horizon of its own and a box, shaded by depth), 5% of the pixels' lidar
  depth as a fourth input channel (0 elsewhere) and the dense depth (in tens of metres) as the
  target. A share `nan_share` of the frames' ground truth have NaN pixels (the projection's
  invalid depths, the same frames every epoch); `drop`: those frames removed. ((rows, 16, 16,
  4), (rows, 16, 16, 1))."""
  rng = np.random.RandomState(seed)
  v = np.linspace(0, 1, size)[None, :, None] - rng.uniform(-0.3, 0.3, (rows, 1, 1))
  ground = 0.2 + 3.0 / (1 + 6 * np.clip(v, 0, None)) * rng.uniform(0.6, 1.4, (rows, 1, 1))
  depth = np.repeat(ground, size, axis=2)
  for i in range(rows):
    r0, c0 = rng.randint(2, 10), rng.randint(0, 10)
    depth[i, r0:r0 + rng.randint(3, 6), c0:c0 + rng.randint(3, 6)] = rng.uniform(0.3, 1.5)
  shade = 1 / (1 + depth)
  rgb = np.stack([shade * rng.uniform(0.8, 1, (rows, 1, 1)) for _ in range(3)], -1)
  rgb += 0.03 * rng.randn(*rgb.shape)
  sparse = np.where(rng.rand(rows, size, size) < 0.05, depth, 0)
  x = np.concatenate([rgb, sparse[..., None]], -1).astype(np.float32)
  y = depth[..., None].astype(np.float32)
  bad = rng.rand(rows) < nan_share
  holes = (rng.rand(rows, size, size, 1) < 0.2) & bad[:, None, None, None]
  y = np.where(holes, np.nan, y).astype(np.float32)
  if drop:
    x, y = x[~bad], y[~bad]
  return x, y


def sparse_to_dense(seed, *, size=16):
  """A Sparse-to-Dense-lite (Ma and Karaman, 2018, "Sparse-to-dense: depth prediction from
  sparse depth samples and a single image"), in miniature: the RGB-d input through an encoder
  (3x3 convolutions of 32 and 64, stride 2 each, ReLU), a decoder of two 2x
  upsampling convolutions (32, 16) with a skip from the input, and a 3x3 convolution to one
  channel: the dense depth."""
  _seed(seed)
  x = keras.Input((size, size, 4))
  h = x
  for n in (32, 64):
    h = L.Conv2D(n, 3, strides=2, padding='same', activation='relu')(h)
  for n in (32, 16):
    h = L.ReLU()(L.Conv2D(n, 3, padding='same')(L.UpSampling2D()(h)))
  h = L.Concatenate()([h, x])
  return keras.Model(x, L.Conv2D(1, 3, padding='same')(h), name='sparse_to_dense_lite')


def drone_frames(seed, *, rows=2048, size=24):
  """Forward camera frames of a drone flying city streets in miniature (the DroNet collision
  set): a 24 x 24 grey road scene (the road's edges converging, texture noise) with or without
  an obstacle close ahead (a bright or dark blob whose size grows as it nears); the label 1 when
  a collision is imminent. ((rows, 24, 24, 1), (rows, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  y = rng.randint(0, 2, rows)
  x = np.empty((rows, size, size), np.float32)
  for i in range(rows):
    road = np.abs(xx - 0.5 - 0.1 * rng.randn()) < 0.1 + 0.4 * yy
    img = 0.3 + 0.3 * road + 0.1 * rng.randn(size, size)
    if y[i]:
      r = rng.uniform(0.15, 0.3)
      c = rng.uniform(0.3, 0.7, 2)
      blob = (yy - c[0]) ** 2 + (xx - c[1]) ** 2 < r ** 2
      img = np.where(blob, rng.choice([0.0, 1.0]), img)
    x[i] = img
  return x[..., None], y[:, None].astype(np.float32)


def dronet(seed, *, size=24):
  """A DroNet-lite (Loquercio et al., 2018, "DroNet: learning to fly by driving"), in miniature:
  a 5x5 convolution of 16 (stride 2) and max pooling, two residual blocks (BatchNorm, ReLU, 3x3
  convolutions of 16 and 32, stride 2, a 1x1 projection shortcut), dropout and the collision
  head: Dense(1) with a sigmoid, the probability of collision."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.MaxPooling2D(2)(L.Conv2D(16, 5, strides=2, padding='same')(x))
  for n in (16, 32):
    r = L.Conv2D(n, 3, strides=2, padding='same')(L.ReLU()(L.BatchNormalization()(h)))
    r = L.Conv2D(n, 3, padding='same')(L.ReLU()(L.BatchNormalization()(r)))
    h = L.Add()([r, L.Conv2D(n, 1, strides=2, padding='same')(h)])
  h = L.Dropout(0.2)(L.Flatten()(L.ReLU()(h)))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='dronet_lite')


def pendulum_transitions(seed, *, rows=4096):
  """Transitions of a torque-driven pendulum with a cart in miniature (the PETS benchmarks'
  cartpole): the state (cart position, velocity, pole cos, sin, angular velocity) and the
  action; the target the change of the first four state values in one step (scaled by 10).
  ((rows, 6), (rows, 4))."""
  rng = np.random.RandomState(seed)
  p, v, th, w = rng.uniform(-1, 1, rows), rng.randn(rows), rng.uniform(-np.pi, np.pi, rows), \
      rng.randn(rows)
  a = rng.uniform(-1, 1, rows)
  dt = 0.05
  acc = (a + 0.5 * np.sin(th) * w ** 2) / (1.5 - 0.5 * np.cos(th) ** 2)
  alpha = (9.8 * np.sin(th) - np.cos(th) * acc) / 1.0
  w2 = w + dt * alpha
  th2 = th + dt * w2
  v2 = v + dt * acc
  d = np.stack([v2 * dt, v2 - v, np.cos(th2) - np.cos(th), np.sin(th2) - np.sin(th)], 1) * 10
  x = np.stack([p, v, np.cos(th), np.sin(th), w, a], 1)
  return x.astype(np.float32), d.astype(np.float32)


class GlitchOnce(field.OneOffFault):
  """A one-off fault: the identity, except on its `at`-th training call one element of the
  hidden activations reads NaN (a bit flipped in a device buffer); `at` None: no fault."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.nan, **kwargs)


def pets(seed, *, members=3, fault=None):
  """A PETS-lite (Chua et al., 2018, "Deep reinforcement learning in a handful of trials using
  probabilistic dynamics models"), in miniature: an ensemble of `members` MLPs (Dense 64 swish
  twice, a linear Dense(4)) on the state and action, their predictions averaged: the change of
  the state. `fault`: a GlitchOnce after the first member's first layer."""
  _seed(seed)
  x = keras.Input((6,))
  outs = []
  for m in range(members):
    h = L.Dense(64, activation='swish')(x)
    if m == 0:
      h = GlitchOnce(fault)(h)
    outs.append(L.Dense(4)(L.Dense(64, activation='swish')(h)))
  return keras.Model(x, L.Average()(outs), name='pets_lite')


def driving_frames(seed, *, rows=2048, size=24):
  """Front camera frames of a simulated town in miniature (a CARLA-like set): a 24 x 24 RGB
  road view (lane edges curving by the road's curvature, sky, noise) and the navigation command
  (follow lane, turn left, turn right, one-hot); the expert's steering from the curvature and
  the command. (((rows, 24, 24, 3), (rows, 3)), (rows, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size] / size
  curv = rng.uniform(-1, 1, rows)
  cmd = rng.randint(0, 3, rows)
  img = np.empty((rows, size, size, 3), np.float32)
  for i in range(rows):
    centre = 0.5 + curv[i] * 0.4 * (1 - yy) ** 2
    road = (np.abs(xx - centre) < 0.05 + 0.3 * yy) & (yy > 0.35)
    sky = yy < 0.35
    base = np.stack([0.2 + 0.4 * road + 0.5 * sky, 0.5 * road + 0.6 * sky, 0.3 + 0.8 * sky], -1)
    img[i] = base + 0.05 * rng.randn(size, size, 3)
  steer = 0.6 * curv + np.array([0.0, -0.5, 0.5])[cmd]
  return (img, np.eye(3, dtype=np.float32)[cmd]), steer[:, None].astype(np.float32)


def cil(seed, *, size=24):
  """A CIL-lite (Codevilla et al., 2018, "End-to-end driving via conditional imitation
  learning", the branched network), in miniature: the image through 3x3 convolutions of 16, 32
  (stride 2) and 32 (stride 2) with ReLU and a Dense 64, one Dense 32 ReLU and Dense(1) branch
  per command, the branch of the given command selected (the one-hot as a mask): the
  steering."""
  _seed(seed)
  img = keras.Input((size, size, 3))
  cmd = keras.Input((3,))
  h = L.Conv2D(16, 3, activation='relu')(img)
  h = L.Conv2D(32, 3, strides=2, activation='relu')(h)
  h = L.Conv2D(32, 3, strides=2, activation='relu')(h)
  h = L.Dense(64, activation='relu')(L.Flatten()(h))
  branches = L.Concatenate()([L.Dense(1)(L.Dense(32, activation='relu')(h)) for _ in range(3)])
  out = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], -1, keepdims=True))([branches, cmd])
  return keras.Model([img, cmd], out, name='cil_lite')


def one_bad_batch(ds, at):
  """`ds` (batched) with its `at`-th batch's steering labels NaN (a chunk of the drive log whose
  CAN-bus steering messages were lost), once; `at` None: untouched."""
  if at is None:
    return ds

  def corrupt(i, batch):
    x, y = batch
    return x, tf.where(tf.equal(i, at), y * np.nan, y)

  return ds.enumerate().map(corrupt)


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind50_explode_r2d2_unclipped_returns', 'exploding_gradients', 'r2d2_lite',
     doors=('trainer', 'fit'), steps=200,
     citation=('hungtuchen/pytorch-dqn#8; '
               'austineaero/Remaining-Useful-Life-RUL-Estimation#19'))
def _(seed, cured=False):
  """An R2D2-lite (a ReLU torso per step, an LSTM over the replayed sequence, a tanh Dense and
  the value) regressing the standardised n-step returns of a partially observed pendulum from
  replayed 40-step sequences, mean squared error, SGD at 0.3 with momentum 0.9 and no gradient
  clipping (R2D2 and DQN clip the gradient norm; the port leaves it out): the gradients through
  the recurrent sequence and the momentum grow the updates step after step, the loss 0.72 at
  step 0 and NaN from step 20 on, the weights NaN (the error 0.78 before, inf after; the constant
  answer's 0.85). Seed 1: 1.28 at step 0, NaN from step 20 (1.14 before, inf after; the
  constant's 1.12). hungtuchen/pytorch-dqn#8 (a DQN agent fixed by gradient clipping: it keeps
  the gradients from exploding and the Q-function from large, destabilising updates);
  austineaero/Remaining-Useful-Life-RUL-Estimation#19 (an LSTM's loss NaN after the first epoch:
  exploding gradients, add gradient clipping to the optimizer). Cured: clipnorm=1.0 in the same
  SGD: the loss 0.72 to 0.012, the error 0.78 to 0.018."""
  x, y = pendulum_returns(seed)
  opt = keras.optimizers.SGD(0.3, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(r2d2(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind50_lr_nature_dqn_adam_half', 'learning_rate', 'nature_dqn_lite',
     doors=('trainer', 'fit'), steps=300,
     citation=('muupan/dqn-in-the-caffe#6; '
               'Albert-Z-Guo/Deep-Reinforcement-Stock-Trading#5'))
def _(seed, cured=False):
  """A Nature-DQN-lite (two ReLU convolutions on four stacked frames, Dense 64 ReLU, a linear
  Q-value per action) regressing the Q-values of a Catch-like game's three moves, mean squared
  error, Adam at 0.5 (five hundred times Adam's usual 1e-3): the first updates throw the ReLUs
  and the Q-values out and the loss climbs instead of falling, 1.6 at step 0 and about 13 at
  step 299, the Q-values far from their targets (the error 1.5 before, 9.4 after; the constant
  answer's 0.72). Seed 1: the same (1.46 before, 8.9 after; the constant's 0.65).
  muupan/dqn-in-the-caffe#6 (no good results reproducing DQN: the learning rate must be
  selected carefully, otherwise the Q-values diverge); Albert-Z-Guo/Deep-Reinforcement-Stock-
  Trading#5 (a DQN's loss in the millions: the model is not converging; fixed by reducing the
  learning rate). Cured: Adam at 1e-3: the loss 1.6 to 0.51, the error 1.5 to 0.54 (300 steps
  both)."""
  x, y = catch_frames(seed)
  return cases.Setup(nature_dqn(seed), keras.optimizers.Adam(1e-3 if cured else 0.5), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind50_init_a3c_zeros_gridworld', 'initialisation', 'a3c_lite',
     doors=('trainer', 'fit'), steps=200, citation='davharris/mistnet#87; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """An A3C-lite (two ReLU convolutions, Dense 64 ReLU, the policy's action logits) cloned from
  an expert's moves on a 10 x 10 gridworld view (agent and goal planes), sparse cross-entropy on
  the logits, Adam at 1e-3, every kernel initialised to zeros (kernel_initializer='zeros', as the
  threads set it): every unit outputs ReLU(0) = 0 and every kernel's gradient is zero, only the
  output bias moves: the loss ln 4 = 1.386 at step 0 and 1.397 at step 199, the policy answers
  the commonest move (the error 0.76 before, 0.66 after; the constant answer's 0.66). Seed 1:
  the loss 1.386 to 1.387 (0.78 before and after; the constant's 0.72). davharris/mistnet#87
  (the weights must be initialised: otherwise there are no gradients for any network with a
  hidden layer); wagonhelm/NaNmnist#2 (all-zero initialisation is a pitfall: every neuron
  computes the same output and gets the same gradient and update). Cured: glorot_uniform
  kernels (Keras's default): the loss 1.39 to 0.93, the error 0.77 to 0.21."""
  x, y = gridworld_demos(seed)
  return cases.Setup(a3c(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind50_log_trpo_std_zero', 'division_or_log', 'trpo_policy_lite',
     doors=('trainer', 'fit'), steps=200,
     citation=('leggedrobotics/rsl_rl#190; '
               'x35f/unstable_baselines#12'))
def _(seed, cured=False):
  """A TRPO-lite Gaussian policy (Dense 64 tanh twice, the mean torques, a state-independent
  spread) cloned from a two-joint reacher's expert torques by the Gaussian negative
  log-likelihood log std + (a - mu)^2 / (2 std^2), Adam at 1e-3, the spread parameter used as the
  standard deviation itself and initialised to zeros (as a log-std would be): log 0 = -inf and a
  division by zero at the first step: the loss NaN from step 0, the weights NaN after the first
  update (the error 0.67 before, inf after; the constant answer's 0.47). Seed 1: the same (0.68
  before, inf after; the constant's 0.50). leggedrobotics/rsl_rl#190 (a Gaussian policy's std
  reaching zero: the log-probabilities diverge to inf and the gradients turn NaN; a scalar std
  parameter can also be pushed to or below zero); x35f/unstable_baselines#12 (a default added to
  the Gaussian policy's log-std clip in case the log-std is zero). Cured: the parameter read as
  a log standard deviation (std = exp(param), 1 at the start): the loss 0.38 to -0.11, the error
  0.67 to 0.13."""
  x, y = reacher_demos(seed)
  model, std = trpo_policy(seed, log_param=cured)
  return cases.Setup(model, keras.optimizers.Adam(1e-3), gaussian_nll(std),
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind50_softmax_dt_unscaled_returns', 'softmax_overflow', 'decision_transformer_lite',
     doors=('trainer', 'fit'), steps=200,
     citation=('NVIDIA/FasterTransformer#43; '
               'prescient-design/e3tools#3'))
def _(seed, cured=False):
  """A Decision-Transformer-lite (the (return-to-go, state) tokens embedded, two causal
  self-attention blocks, the action logits of the last token) trained on offline CartPole
  trajectories, sparse cross-entropy on the logits, Adam at 1e-3, the returns-to-go divided by
  10 only (5 to 50; the paper's code divides by 1000) and the attention's softmax written by
  hand, exp(s) / sum(exp(s)) with no max subtracted: the large embeddings give scores q.k in the
  hundreds and thousands, exp overflows to inf and inf / inf is NaN: the loss NaN from step 0,
  the weights NaN (the error inf before and after; the constant answer's 0.46). Seed 1: the
  same (the constant's 0.46). NVIDIA/FasterTransformer#43 (NaN from a transformer layer: the
  attention softmax's input is not protected by subtracting the max value);
  prescient-design/e3tools#3 (fix overflow in softmax in attention). Cured: the softmax through
  tf.nn.softmax (the max subtracted), the same data: the loss 33 to 0.93, the error 0.46 to
  0.24."""
  x, y = cartpole_trajectories(seed, scale=0.1)
  return cases.Setup(decision_transformer(seed, stable=cured), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind50_precision_pointpillars_millimetres', 'precision', 'pointpillars_lite',
     doors=('trainer', 'fit'), steps=200, precision='mixed_float16',
     citation=('open-mmlab/mmdetection3d#299; '
               'HuangJunJie2017/BEVDet#265'))
def _(seed, cured=False):
  """A PointPillars-lite (the pillar feature net: positions read in metres, each point's offset
  from the points' mean, a Dense with BatchNorm and ReLU per point, max-pooled; a Dense 64 ReLU
  and the class logits in float32) classifying road users from their lidar returns as the
  driver gives them (positions in millimetres, objects 5 to 110 m away), sparse cross-entropy
  on the logits, Adam at 1e-3, trained under the mixed_float16 policy: every layer casts its
  input to float16, whose largest value is 65504, so any return beyond 65.5 m reads inf before
  the rescaling to metres, and inf - inf is NaN in the offsets: the loss NaN from step 0, the
  weights NaN (the error inf before and after; the constant answer's 0.63). Seed 1: the same (the
  constant's 0.65). open-mmlab/mmdetection3d#299 (mixed-precision training of PointPillars on
  Waymo gives NaN all the time; the raw point features' range is the problem, fp32 trains);
  HuangJunJie2017/BEVDet#265 (the loss is NaN from the start when training a BEV detector with
  fp16; fp32 trains). Cured: the pillar feature net kept in float32 (dtype='float32' on its
  layers, the rest mixed): the loss 1.31 to 0.14, the error 0.64 to 0.0."""
  x, y = lidar_objects(seed)
  return cases.Setup(pointpillars(seed, pfn_dtype='float32' if cured else None),
                     keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind50_input_dr_spaam_invalid_beams', 'bad_input', 'dr_spaam_lite',
     doors=('trainer', 'fit'), steps=200,
     citation=('tomasvr/turtlebot3_drlnav#43; '
               'robotics-upo/2DLaserPeopleBenchmark#1'))
def _(seed, cured=False):
  """A DR-SPAAM-lite (1D convolutions with BatchNorm, spatial attention pooling, a sigmoid)
  detecting people in 2D laser cutouts, binary cross-entropy, Adam at 1e-3; the recorded scans
  hold the driver's invalid beams, inf (out of range) and NaN (no echo), in a tenth of the
  cutouts, and nothing filters them before the depth normalisation: most batches hold one, the
  loss NaN from step 0, the weights NaN (the error 0.49 before, inf after; the constant answer's
  0.49). Seed 1: the same (0.79 before, inf after; the constant's 0.48).
  tomasvr/turtlebot3_drlnav#43 (how to handle the NaN values of a real lidar's scan before they
  are fed to the network: they come from the min range, the max range or the device);
  robotics-upo/2DLaserPeopleBenchmark#1 (inf and nan values in the scans make the DR-SPAAM
  cutout step fail; the DROW set replaces NaN with the magic 29.96). Cured: the invalid beams set
  to 29.96 m before the normalisation: the loss 0.96 to 0.016, the error 0.55 to 0.0 in
  training mode (0.49 in inference mode, the BatchNorm statistics young). The measure reads the
  cleaned cutouts (eval_data)."""
  x, y = laser_cutouts(seed, clean=cured)
  xc, yc = laser_cutouts(seed, clean=True)
  return cases.Setup(dr_spaam(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob',
                     eval_data=data.stream(xc, yc, batch=32, seed=seed))


@add('blind50_input_sparse_to_dense_nan_depth', 'bad_input', 'sparse_to_dense_lite',
     doors=('trainer', 'fit'), steps=200, citation='haofeixu/gmflow#27; prs-eth/Marigold#111')
def _(seed, cured=False):
  """A Sparse-to-Dense-lite (a strided convolutional encoder, an upsampling decoder with a skip
  from the input) completing dense depth from a camera frame and 5% of the pixels' lidar depth,
  mean squared error, Adam at 1e-3; a tenth of the frames' ground-truth depth maps have NaN
  pixels (the projection's invalid depths, the same frames every epoch) and nothing masks or
  drops them: most batches hold one, the loss NaN from step 0, the weights NaN (the error 2.79
  before, inf after; the constant answer's 0.32). Seed 1: the same (1.99 before, inf after; the
  constant's 0.26). haofeixu/gmflow#27 (the ground truth of FlyingThings3D may contain NaN: the
  training skips such samples); prs-eth/Marigold#111 (loss=nan during depth training: it happens
  when the input batch contains NaN; check the input image and ground truth). Cured: the frames
  with invalid depth dropped: the loss 2.75 to 0.081, the error 2.79 to 0.062. The measure reads
  the valid frames (eval_data)."""
  x, y = depth_frames(seed, drop=cured)
  xc, yc = depth_frames(seed, drop=True)
  return cases.Setup(sparse_to_dense(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(xc, yc, batch=32, seed=seed))


@add('blind50_mismatch_dronet_categorical_one_unit', 'loss_output_mismatch', 'dronet_lite',
     doors=('trainer', 'fit'), steps=200, citation='darioizzo/dcgp#86; keras-team/keras#4784')
def _(seed, cured=False):
  """A DroNet-lite (a strided convolution, two residual blocks, the collision head: Dense(1)
  with a sigmoid) predicting imminent collisions from a drone's forward camera, Adam at 1e-3,
  compiled with categorical_crossentropy on the one-unit sigmoid output: the prediction is
  renormalised over its single class, p / p = 1, and the loss is 0 for every input with a zero
  gradient (Keras warns that num_classes should be above 1): the loss 0 from step 0 to 199 and
  the model never moves from its start (the error 0.52 before, 0.50 after; the constant answer's
  0.50). Seed 1: the same (0.47 before, 0.48 after; the constant's 0.48). darioizzo/dcgp#86
  (cross-entropy always 0.0 on a network with one output: with one class every output is
  right); keras-team/keras#4784 (accuracy not changing across epochs: the model does not match
  its loss; for 0/1 targets use a sigmoid output and binary_crossentropy). Cured:
  binary_crossentropy: the loss 0.76 to 0.0002, the error 0.54 to 0.0 in training mode."""
  x, y = drone_frames(seed)
  loss = 'binary_crossentropy' if cured else 'categorical_crossentropy'
  return cases.Setup(dronet(seed), keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind50_transient_pets_glitch', 'transient', 'pets_lite', doors=('trainer', 'fit'),
     steps=200, citation='Zhefan-Xu/NavRL#141; mrphys/tensorflow-nufft#20')
def _(seed, cured=False):
  """A PETS-lite (an ensemble of three swish MLPs, their predictions averaged) learning a cart
  pole's one-step dynamics from transitions, mean squared error, Adam at 1e-3: the run is
  healthy (the loss 0.13 falling) until one element of the first member's hidden activations
  reads NaN on a single step (its 60th training-mode call, the measure's four counted: a
  flipped bit on the device, once), the loss NaN from step 55 and, in plain Keras, the weights
  NaN from then on (the error 0.16 before, inf after; the constant answer's 0.15). Seed 1: the
  same step (0.18 before, inf after). Zhefan-Xu/NavRL#141 (an RL navigation run trains
  normally, NaN appears after about 8000 steps; restarting the training is fine);
  mrphys/tensorflow-nufft#20 (NaNs randomly pop up in GPU computations; repeating the same
  computation usually gives no NaN). Cured: the same run without the glitch: the loss 0.13 to
  0.028, the error 0.16 to 0.013."""
  x, y = pendulum_transitions(seed)
  return cases.Setup(pets(seed, fault=None if cured else 60), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind50_input_cil_torn_frame', 'bad_input', 'cil_lite', doors=('trainer', 'fit'),
     steps=200, citation='ARCC-RACE/deepracer-for-dummies#48; pokaxpoka/netrand#1')
def _(seed, cured=False):
  """A CIL-lite (a small CNN on the front camera, one steering branch per navigation command,
  the commanded branch selected) imitating an expert's steering in a simulated town, mean
  squared error, Adam at 1e-3: the run is healthy (the loss 0.29 falling to 0.06) until one
  chunk of the drive log, the 70th batch, comes with its steering labels NaN (the CAN-bus
  messages lost), once: the loss NaN at step 70 and, in plain Keras, the weights NaN from then
  on (the error 0.28 before, inf after; the constant answer's 0.30). Seed 1: the same step (0.39
  before, inf after). ARCC-RACE/deepracer-for-dummies#48 (a DeepRacer training randomly stops
  after N iterations: "NaN detected in loss function"); pokaxpoka/netrand#1 (after a random
  number of steps, sometimes never, a statistic suddenly becomes NaN and the next step every
  other one). Cured: the same log without the lost chunk: the loss 0.30 to 0.001, the error
  0.28 to 0.0007. The measure reads intact batches (eval_data). Written as `transient` from a
  brief (this project's) that called a single corrupted batch transient; relabelled bad input
  after the first look, which named it so at high confidence through both doors: the NaN is in
  the data, the same on every re-run of that batch, and the cure is the data's."""
  x, y = driving_frames(seed)
  ds = one_bad_batch(data.stream(x, y, batch=32, seed=seed), None if cured else 70)
  return cases.Setup(cil(seed), keras.optimizers.Adam(1e-3), 'mse', ds, 'regression',
                     eval_data=data.stream(x, y, batch=32, seed=seed))
