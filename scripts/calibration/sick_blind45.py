"""A forty-fifth blind set of sick scenarios (the 'blind45' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind38.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a latent-ODE-lite trajectory model, a
FlowNetS-lite and a FlowNetC-lite optical-flow net, an Eigen-lite depth estimator, a
DeepHit-lite survival model, a SAKT-lite and a DKVMN-lite knowledge tracer, an FCOS-lite
detection head, an ANODE-lite classifier and a DeepCaps-lite capsule net). Each builder takes `cured`:
the same run with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was
checked with plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds
0 and 1), the cured twin passes runner's "did it train" measure in the same number of steps
(seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import field

BLIND45 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND45.add` with split='blind45'."""
  return BLIND45.add(name, expected, arch, split='blind45', **fields)


def stream(x, y, *, batch, seed):
  """An endless stream of batches of (x, y), shuffled anew each epoch from `seed` (as
  `data.stream` makes them; features may be a tuple)."""
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  ds = ds.shuffle(min(len(y), 2048), seed=seed, reshuffle_each_iteration=True)
  return ds.batch(batch, drop_remainder=True).prefetch(2)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def spirals(seed, *, rows=1024, seen=10, ahead=20, dt=0.3):
  """Noisy two-dimensional spirals (the toy trajectories of latent-ODE papers): a random radius
  (0.5 to 1.5), phase, angular speed (0.8 to 1.2 rad per unit) and decay (0 to 0.1),
  sampled every `dt`, with noise of 0.02. (the first `seen` points (rows, seen, 2), the next
  `ahead` points (rows, ahead, 2))."""
  rng = np.random.RandomState(seed)
  r0 = rng.uniform(0.5, 1.5, rows)
  th0 = rng.uniform(0, 2 * np.pi, rows)
  w = rng.uniform(0.8, 1.2, rows)
  decay = rng.uniform(0.0, 0.1, rows)
  t = np.arange(seen + ahead) * dt
  r = r0[:, None] * np.exp(-decay[:, None] * t)
  th = th0[:, None] + w[:, None] * t
  traj = np.stack([r * np.cos(th), r * np.sin(th)], -1)
  traj = (traj + 0.02 * rng.randn(*traj.shape)).astype(np.float32)
  return traj[:, :seen], traj[:, seen:]


class EulerODE(L.Layer):
  """A neural ODE dz/dt = f(z) (f: Dense `width` tanh, Dense back to the latent size) solved by
  `steps` explicit Euler steps of `dt`: the latent states after each step, stacked."""

  def __init__(self, steps, dt, width=32, **kwargs):
    super().__init__(**kwargs)
    self.steps, self.dt, self.width = steps, dt, width
    self.f1 = L.Dense(width, activation='tanh')

  def build(self, shape):
    self.f2 = L.Dense(shape[-1])
    self.f1.build(shape)
    self.f2.build(tuple(shape[:-1]) + (self.width,))

  def call(self, z):
    states = []
    for _ in range(self.steps):
      z = z + self.dt * self.f2(self.f1(z))
      states.append(z)
    return tf.stack(states, 1)


def latent_ode_lite(seed, *, seen=10, ahead=20, latent=16, dt=0.5):
  """A latent ODE (Rubanova, Chen and Duvenaud, 2019; here with a plain GRU encoder), in
  miniature: a GRU of 32 over the observed points, a Dense latent start z0 of `latent`, the
  latent ODE rolled `ahead` Euler steps of `dt`, a shared Dense(2) decoder on every state: the
  predicted continuation."""
  _seed(seed)
  x = keras.Input((seen, 2))
  z0 = L.Dense(latent)(L.GRU(32)(x))
  zs = EulerODE(ahead, dt)(z0)
  return keras.Model(x, L.Dense(2)(zs), name='latent_ode_lite')


def _texture(rng, size):
  """A smooth random texture in [0, 1] (six random plane waves)."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
  t = np.zeros((size, size), np.float32)
  for _ in range(6):
    fy, fx = rng.uniform(-0.6, 0.6, 2)
    t += np.sin(fy * yy + fx * xx + rng.uniform(0, 2 * np.pi)).astype(np.float32)
  return t / 6 + 0.5


def moving_frames(seed, *, rows=1024, size=32, shift=3, obj=10):
  """Frame pairs in miniature (the FlyingChairs recipe): a textured background translated by up
  to `shift` pixels each way, an `obj`-pixel textured square pasted over it that moves by its
  own shift. (the two grey frames stacked (rows, size, size, 2), the flow of each pixel of the
  first frame (dx, dy) (rows, size, size, 2))."""
  rng = np.random.RandomState(seed)
  x = np.empty((rows, size, size, 2), np.float32)
  f = np.empty((rows, size, size, 2), np.float32)
  for i in range(rows):
    bg = _texture(rng, size)
    ob = _texture(rng, obj) * 0.6 + 0.4 * (rng.rand() > 0.5)
    sb = rng.randint(-shift, shift + 1, 2)
    so = rng.randint(-shift, shift + 1, 2)
    oy, ox = rng.randint(shift, size - obj - shift, 2)
    a = bg.copy()
    a[oy:oy + obj, ox:ox + obj] = ob
    b = np.roll(bg, sb, (0, 1))
    b[oy + so[0]:oy + so[0] + obj, ox + so[1]:ox + so[1] + obj] = ob
    x[i, ..., 0], x[i, ..., 1] = a, b
    f[i] = sb[::-1][None, None].astype(np.float32)
    f[i, oy:oy + obj, ox:ox + obj] = so[::-1]
  return x, f


def flownet_s_lite(seed):
  """A FlowNetS-lite (Dosovitskiy et al., 2015), in miniature: the two frames stacked, a
  contracting part (5x5 stride-2 convolution of 16, 3x3 stride-2 of 32, stride-2 of 64 and one
  more of 64, LeakyReLU 0.1), one refinement step (a transposed convolution to 1/4 scale, the
  skip concatenated, a 3x3 convolution of 32) and the flow prediction at 1/4 resolution (a 3x3
  convolution of 2)."""
  _seed(seed)
  act = lambda: L.LeakyReLU(0.1)
  x = keras.Input((32, 32, 2))
  c1 = L.Conv2D(16, 5, strides=2, padding='same', activation=act())(x)
  c2 = L.Conv2D(32, 3, strides=2, padding='same', activation=act())(c1)
  c3 = L.Conv2D(64, 3, strides=2, padding='same', activation=act())(c2)
  c3 = L.Conv2D(64, 3, padding='same', activation=act())(c3)
  up = L.Conv2DTranspose(32, 4, strides=2, padding='same', activation=act())(c3)
  h = L.Conv2D(32, 3, padding='same', activation=act())(L.Concatenate()([up, c2]))
  return keras.Model(x, L.Conv2D(2, 3, padding='same')(h), name='flownet_s_lite')


def epe(y, p):
  """The average end-point error: the mean over pixels of |flow - predicted| (Euclidean)."""
  d = tf.cast(y, tf.float32) - tf.cast(p, tf.float32)
  return tf.reduce_mean(tf.sqrt(tf.reduce_sum(tf.square(d), -1) + 1e-12))


def room_scenes(seed, *, rows=1024, size=32, holes=0.1):
  """Indoor RGB-D frames in miniature (the NYU-depth set-up): a back wall 4 to 8 m away and a
  floor rising to 1 to 2 m, one to three boxes in front, the image a noisy shading of inverse
  depth per colour channel (standardised); a fraction `holes` of the depth pixels missing (0: no
  return from the sensor, as the raw maps store it). (images (rows, size, size, 3), the full
  depth, the depth as recorded, with holes (each (rows, size, size, 1)))."""
  rng = np.random.RandomState(seed)
  yy = np.mgrid[0:size, 0:size][0].astype(np.float32) / size
  x = np.empty((rows, size, size, 3), np.float32)
  d = np.empty((rows, size, size, 1), np.float32)
  for i in range(rows):
    far = rng.uniform(4, 8)
    depth = far - (far - rng.uniform(1, 2)) * np.clip((yy - rng.uniform(0.4, 0.6)) * 2, 0, 1)
    for _ in range(rng.randint(1, 4)):
      h, w = rng.randint(4, 12, 2)
      r, c = rng.randint(0, size - h), rng.randint(0, size - w)
      depth[r:r + h, c:c + w] = np.minimum(depth[r:r + h, c:c + w], rng.uniform(1, 4))
    x[i] = np.stack([rng.uniform(0.5, 1.5) / depth + 0.05 * rng.randn(size, size)
                     for _ in range(3)], -1)
    d[i, ..., 0] = depth
  x = (x - x.mean()) / x.std()
  valid = rng.rand(rows, size, size, 1) > holes
  return x, d, np.where(valid, d, 0.0).astype(np.float32)


def eigen_depth_lite(seed):
  """An Eigen-lite depth estimator (Eigen, Puhrsch and Fergus, 2014), in miniature: the coarse
  network (three stride-2 3x3 convolutions of 16, 32, 32, ReLU, Dense 128 and 64 ReLU reshaped
  to an 8x8 map, upsampled) and the fine network (a 5x5 convolution of 16 on the image, the
  coarse map concatenated, a 5x5 convolution of 16 and the 5x5 depth output with ReLU)."""
  _seed(seed)
  x = keras.Input((32, 32, 3))
  c = L.Conv2D(16, 3, strides=2, padding='same', activation='relu')(x)
  c = L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(c)
  c = L.Flatten()(L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(c))
  coarse = L.Reshape((8, 8, 1))(L.Dense(64, activation='relu')(L.Dense(128, activation='relu')(c)))
  coarse = L.UpSampling2D(4, interpolation='bilinear')(coarse)
  f = L.Conv2D(16, 5, padding='same', activation='relu')(x)
  f = L.Conv2D(16, 5, padding='same', activation='relu')(L.Concatenate()([f, coarse]))
  return keras.Model(x, L.Conv2D(1, 5, padding='same', activation='relu')(f),
                     name='eigen_depth_lite')


def silog_masked(y, p, lam=0.85):
  """The scale-invariant log loss (Eigen et al.; x10, lambda 0.85 as in BTS) as threads write
  it: d = (log p - log y) x mask, with the mask (y > 0) applied after the logs: a hole's log 0
  is -inf and 0 x inf is NaN (a zero prediction's log too)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  mask = tf.cast(y > 0, tf.float32)
  d = (tf.math.log(p) - tf.math.log(y)) * mask
  n = tf.reduce_sum(mask)
  return tf.sqrt(tf.reduce_sum(d ** 2) / n - lam * (tf.reduce_sum(d) / n) ** 2) * 10.0


def silog_valid(y, p, lam=0.85):
  """The same loss on the valid pixels only (selected before the logs) and log(p + 1e-3)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  valid = y > 0
  d = tf.math.log(tf.boolean_mask(p, valid) + 1e-3) - tf.math.log(tf.boolean_mask(y, valid))
  return tf.sqrt(tf.reduce_mean(d ** 2) - lam * tf.reduce_mean(d) ** 2) * 10.0


def cohort(seed, *, rows=2048, bins=4):
  """A clinical cohort in miniature, as recorded (not standardised): age (40 to 85 years),
  systolic pressure (mmHg), cholesterol (mg/dL), BMI, platelets (10^9/L), sodium (mmol/L) and
  four yes/no flags; the time to the event log-normal around a proportional-hazards risk of
  the first four and the flags, cut into `bins` intervals of equal counts. (covariates (rows,
  10), the event's interval (rows,))."""
  rng = np.random.RandomState(seed)
  age = rng.uniform(40, 85, rows)
  sbp, chol, bmi = rng.normal(140, 18, rows), rng.normal(220, 35, rows), rng.normal(27, 4, rows)
  flags = (rng.rand(rows, 4) < 0.3).astype(np.float64)
  risk = (0.06 * (age - 60) + 0.025 * (sbp - 140) + 0.012 * (chol - 220) + 0.06 * (bmi - 27) +
          flags @ np.array([0.8, 0.5, -0.4, 0.3]))
  t = 36 * np.exp(-risk + 0.1 * rng.randn(rows))
  edges = np.quantile(t, np.linspace(0, 1, bins + 1)[1:-1])
  platelets, sodium = rng.normal(260, 60, rows), rng.normal(140, 3, rows)
  x = np.column_stack([age, sbp, chol, bmi, platelets, sodium, flags]).astype(np.float32)
  return x, np.digitize(t, edges).astype(np.int32)


def deephit_lite(seed, *, features=10, bins=4):
  """A DeepHit-lite for a single risk (Lee et al., 2018), in miniature: a shared Dense 64 ReLU,
  the covariates concatenated back in (the residual input of the cause-specific net), Dense 64
  and 32 ReLU and the logits of the event's time interval (`bins`)."""
  _seed(seed)
  x = keras.Input((features,))
  h = L.Dense(64, activation='relu')(x)
  h = L.Dense(64, activation='relu')(L.Concatenate()([h, x]))
  h = L.Dense(32, activation='relu')(h)
  return keras.Model(x, L.Dense(bins)(h), name='deephit_lite')


def naive_pmf_nll(y, z):
  """DeepHit's likelihood term (uncensored) with the softmax written out: p = exp(z) / sum
  exp(z), -log p[interval]: exp of a logit above 88.7 is inf, inf / inf NaN."""
  z = tf.cast(z, tf.float32)
  e = tf.exp(z)
  p = e / tf.reduce_sum(e, -1, keepdims=True)
  picked = tf.gather(p, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked))


def stable_pmf_nll(y, z):
  """The same term through sparse_softmax_cross_entropy_with_logits (the max subtracted)."""
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      tf.cast(tf.reshape(y, [-1]), tf.int32), tf.cast(z, tf.float32)))


def tutor_logs(seed, *, rows=2048, steps=20, skills=16):
  """Intelligent-tutor logs in miniature (the ASSISTments set-up): students of varied ability
  (sd 1.5) answer `steps` questions on `skills` skills of varied difficulty, getting better as
  they go; the response time of each answer in milliseconds as logged (log-normal around 25 s,
  a long tail past a minute; wrong answers slower). (features: the current skill, the previous
  interaction id (1 + skill + skills x correct; 0 at the start), the previous response time
  in ms (rows, steps) each; correct or not (rows, steps))."""
  rng = np.random.RandomState(seed)
  ability = rng.randn(rows) * 1.5
  difficulty = rng.randn(skills)
  sk = rng.randint(0, skills, (rows, steps))
  p = 1 / (1 + np.exp(-(ability[:, None] - difficulty[sk] + 0.15 * np.arange(steps)[None])))
  c = (rng.rand(rows, steps) < p).astype(np.int32)
  ms = np.exp(rng.normal(np.log(25000), 0.8, (rows, steps)) - 0.3 * (c - 0.5))
  prev = np.zeros((rows, steps), np.int32)
  prev[:, 1:] = 1 + sk[:, :-1] + skills * c[:, :-1]
  prev_ms = np.zeros((rows, steps), np.float32)
  prev_ms[:, 1:] = ms[:, :-1]
  return (sk.astype(np.int32), prev, prev_ms), c.astype(np.float32)


class LogMillis(L.Layer):
  """log1p(milliseconds) / 10: a response time as a feature (in the layer's compute dtype:
  float16 under mixed precision, where 65,504 ms and up are already inf when it starts)."""

  def call(self, t):
    return tf.math.log1p(t)[..., None] / 10.0


def sakt_lite(seed, *, steps=20, skills=16, dim=32, time_dtype=None):
  """A SAKT-lite knowledge tracer (Pandey and Karypis, 2019), in miniature: the previous
  interactions embedded (32) plus a Dense projection of their log response time, the current
  skill embedded as the query, causal two-head attention over the interactions, residual and
  LayerNorm, a feed-forward block (32 ReLU, 32), LayerNorm, and Dense(1) sigmoid in float32: the
  probability of a correct answer at each step. `time_dtype`: the LogMillis layer's dtype."""
  _seed(seed)
  sk = keras.Input((steps,), dtype='int32')
  prev = keras.Input((steps,), dtype='int32')
  ms = keras.Input((steps,))
  inter = L.Embedding(2 * skills + 1, dim)(prev)
  inter = L.Add()([inter, L.Dense(dim)(LogMillis(dtype=time_dtype)(ms))])
  q = L.Embedding(skills, dim)(sk)
  h = L.LayerNormalization()(L.Add()([q, L.MultiHeadAttention(2, dim // 2)(
      q, inter, use_causal_mask=True)]))
  h = L.LayerNormalization()(L.Add()([h, L.Dense(dim)(L.Dense(dim, activation='relu')(h))]))
  out = L.Dense(1, activation='sigmoid', dtype='float32')(h)
  return keras.Model([sk, prev, ms], L.Reshape((steps,), dtype='float32')(out), name='sakt_lite')


class DKVMNMemory(L.Layer):
  """The key-value memory of DKVMN, unrolled over the sequence: `slots` concept keys (dk) and
  a per-student value memory (dv) from a learned start; at each step the question's key
  attends over the keys (softmax of the dot products), reads the value memory, and a Dense 32
  tanh on (read, key) gives the logit of a correct answer; the previous interaction erases
  (sigmoid) and adds (tanh) to the value memory by its own attention. Every weight drawn from
  `init`."""

  def __init__(self, slots=8, dk=16, dv=16, init='glorot_uniform', **kwargs):
    super().__init__(**kwargs)
    self.slots, self.dk, self.dv, self.init = slots, dk, dv, init

  def build(self, shapes):
    ini = lambda: keras.initializers.get(self.init)
    self.mk = self.add_weight(shape=(self.slots, self.dk), initializer=ini(), name='keys')
    self.mv0 = self.add_weight(shape=(self.slots, self.dv), initializer=ini(), name='values')
    self.f = L.Dense(32, activation='tanh', kernel_initializer=ini())
    self.e = L.Dense(self.dv, activation='sigmoid', kernel_initializer=ini())
    self.a = L.Dense(self.dv, activation='tanh', kernel_initializer=ini())
    self.p = L.Dense(1, kernel_initializer=ini())
    self.f.build((None, self.dv + self.dk))
    self.e.build((None, self.dv))
    self.a.build((None, self.dv))
    self.p.build((None, 32))

  def call(self, inputs):
    k, v = inputs  # The current question's key (B, T, dk), the previous interaction (B, T, dv).
    mv = tf.tile(self.mv0[None], [tf.shape(k)[0], 1, 1])
    logits = []
    for t in range(k.shape[1]):
      if t > 0:
        wv = tf.nn.softmax(tf.einsum('bd,sd->bs', k[:, t - 1], self.mk))[..., None]
        mv = mv * (1 - wv * self.e(v[:, t])[:, None]) + wv * self.a(v[:, t])[:, None]
      w = tf.nn.softmax(tf.einsum('bd,sd->bs', k[:, t], self.mk))
      r = tf.einsum('bs,bsd->bd', w, mv)
      logits.append(self.p(self.f(tf.concat([r, k[:, t]], -1))))
    return tf.concat(logits, -1)


def dkvmn_lite(seed, *, steps=20, skills=16, init='glorot_uniform'):
  """A DKVMN-lite knowledge tracer (Zhang et al., 2017), in miniature: the question and the
  previous interaction embedded (16), a DKVMNMemory of 8 slots and a sigmoid: the probability
  of a correct answer at each step. Every weight (embeddings included) drawn from `init`."""
  _seed(seed)
  sk = keras.Input((steps,), dtype='int32')
  prev = keras.Input((steps,), dtype='int32')
  k = L.Embedding(skills, 16, embeddings_initializer=keras.initializers.get(init))(sk)
  v = L.Embedding(2 * skills + 1, 16, embeddings_initializer=keras.initializers.get(init))(prev)
  return keras.Model([sk, prev], L.Activation('sigmoid')(DKVMNMemory(init=init)([k, v])),
                     name='dkvmn_lite')


def rings(seed, *, rows=2048):
  """The concentric-rings task of the augmented-neural-ODE paper, in two dimensions: points of
  a disc of radius 0.5 (label 1) and of the ring between radii 1 and 1.5 (label 0), which no
  plain neural ODE flow in the plane can separate. (points (rows, 2), labels (rows, 1))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 2, rows)
  r = np.where(y == 1, rng.uniform(0, 0.5, rows), rng.uniform(1.0, 1.5, rows))
  th = rng.uniform(0, 2 * np.pi, rows)
  x = np.stack([r * np.cos(th), r * np.sin(th)], 1).astype(np.float32)
  return x, y.astype(np.float32)[:, None]


class ZeroAugment(L.Layer):
  """The augmentation of an ANODE: `extra` zero dimensions appended to the state."""

  def __init__(self, extra, **kwargs):
    super().__init__(**kwargs)
    self.extra = extra

  def call(self, x):
    return tf.concat([x, tf.zeros_like(x[:, :1]) * tf.zeros((1, self.extra), x.dtype)], -1)


class EulerFlow(L.Layer):
  """A neural ODE flow dz/dt = f(z) (f: Dense `width` ReLU, Dense back) solved by `steps`
  Euler steps of `dt` from t = 0 to 1: the final state."""

  def __init__(self, steps=10, dt=0.1, width=32, **kwargs):
    super().__init__(**kwargs)
    self.steps, self.dt, self.width = steps, dt, width

  def build(self, shape):
    self.f1 = L.Dense(self.width, activation='relu')
    self.f2 = L.Dense(shape[-1])
    self.f1.build(shape)
    self.f2.build((None, self.width))

  def call(self, z):
    for _ in range(self.steps):
      z = z + self.dt * self.f2(self.f1(z))
    return z


def anode_lite(seed, *, output='sigmoid'):
  """An ANODE-lite classifier (Dupont, Doucet and Teh, 2019), in miniature: the 2-d input
  augmented with four zero dimensions, an EulerFlow (10 steps), Dense(1) with `output`."""
  _seed(seed)
  x = keras.Input((2,))
  z = EulerFlow()(ZeroAugment(4)(x))
  return keras.Model(x, L.Dense(1, activation=output)(z), name='anode_lite')


class GlitchOnce(field.OneOffFault):
  """A one-off fault in the detector's feature buffer: the identity, except on its `at`-th
  training call one element of the features reads NaN (a flipped bit, a misfiring kernel);
  `at` None: no fault. The count lives outside the model (`field.OneOffFault`)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.nan, **kwargs)


def box_scenes(seed, *, rows=1024, size=32, stride=4):
  """Single-object detection scenes in miniature: a noisy grey background and one rectangle (8
  to 19 pixels a side) brighter or darker than it; FCOS targets on the stride-4 grid: whether
  the location lies inside the box, and its distances to the box's left, top, right and bottom
  edges over the image size. (images (rows, size, size, 1), targets (rows, 8, 8, 5))."""
  rng = np.random.RandomState(seed)
  g = size // stride
  x = (0.3 + 0.1 * rng.randn(rows, size, size, 1)).astype(np.float32)
  y = np.zeros((rows, g, g, 5), np.float32)
  cy, cx = (np.mgrid[0:g, 0:g] + 0.5) * stride
  for i in range(rows):
    h, w = rng.randint(8, 20, 2)
    t, l = rng.randint(0, size - h), rng.randint(0, size - w)
    x[i, t:t + h, l:l + w] += rng.choice([-0.25, 0.5])
    y[i, ..., 0] = (cy > t) & (cy < t + h) & (cx > l) & (cx < l + w)
    y[i, ..., 1:] = np.stack([cx - l, cy - t, l + w - cx, t + h - cy], -1) / size
  return x, y


def fcos_lite(seed, *, fault=None):
  """An FCOS-lite detection head (Tian et al., 2019), in miniature: a backbone of three 3x3
  convolutions (16 and 32 stride 2, 32; ReLU) to the stride-4 grid, a GlitchOnce(`fault`) on its
  features, then the classification and regression towers (a 3x3 convolution of 32 each) and
  their outputs: the object probability (sigmoid) and the four edge distances of every
  location, concatenated."""
  _seed(seed)
  x = keras.Input((32, 32, 1))
  h = L.Conv2D(16, 3, strides=2, padding='same', activation='relu')(x)
  h = L.Conv2D(32, 3, strides=2, padding='same', activation='relu')(h)
  h = GlitchOnce(fault)(L.Conv2D(32, 3, padding='same', activation='relu')(h))
  c = L.Conv2D(32, 3, padding='same', activation='relu')(h)
  r = L.Conv2D(32, 3, padding='same', activation='relu')(h)
  cls = L.Conv2D(1, 3, padding='same', activation='sigmoid')(c)
  return keras.Model(x, L.Concatenate()([cls, L.Conv2D(4, 3, padding='same')(r)]),
                     name='fcos_lite')


def fcos_loss(y, p):
  """The head's loss: binary cross-entropy of the object probability plus 4 x the L1 error of
  the edge distances."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  cls = keras.losses.binary_crossentropy(y[..., :1], p[..., :1])
  return tf.reduce_mean(cls) + 4.0 * tf.reduce_mean(tf.abs(y[..., 1:] - p[..., 1:]))


class Correlation(L.Layer):
  """FlowNetC's correlation layer: for each displacement within `radius` (a (2r + 1)^2 grid),
  the dot product of the first map's feature vector with the second map's at that offset
  (summed over the channels; the map wrapped at the borders)."""

  def __init__(self, radius=3, **kwargs):
    super().__init__(**kwargs)
    self.radius = radius

  def call(self, inputs):
    a, b = inputs
    r = self.radius
    return tf.stack([tf.reduce_sum(a * tf.roll(b, (-dy, -dx), (1, 2)), -1)
                     for dy in range(-r, r + 1) for dx in range(-r, r + 1)], -1)


def flownet_c_lite(seed):
  """A FlowNetC-lite (Dosovitskiy et al., 2015), in miniature: a shared tower per frame (3x3
  stride-2 convolutions of 16 and 32, LeakyReLU 0.1) to 1/4 scale, the correlation of the two
  (radius 3: 49 channels) and a 1x1 redirection (16) of the first frame's features
  concatenated, 3x3 convolutions of 64 and 32 and the flow at 1/4 resolution (3x3, 2)."""
  _seed(seed)
  act = lambda: L.LeakyReLU(0.1)
  x = keras.Input((32, 32, 2))
  c1 = L.Conv2D(16, 3, strides=2, padding='same', activation=act())
  c2 = L.Conv2D(32, 3, strides=2, padding='same', activation=act())
  fa, fb = c2(c1(x[..., :1])), c2(c1(x[..., 1:]))
  h = L.Concatenate()([Correlation(3)([fa, fb]), L.Conv2D(16, 1, activation=act())(fa)])
  h = L.Conv2D(64, 3, padding='same', activation=act())(h)
  h = L.Conv2D(32, 3, padding='same', activation=act())(h)
  return keras.Model(x, L.Conv2D(2, 3, padding='same')(h), name='flownet_c_lite')


def valid_epe(y, p):
  """The average end-point error over the pixels whose ground truth is finite."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  d = tf.boolean_mask(y - p, tf.reduce_all(tf.math.is_finite(y), -1))
  return tf.reduce_mean(tf.sqrt(tf.reduce_sum(tf.square(d), -1) + 1e-12))


_SEGMENTS = {0: 'abcdef', 1: 'bc', 2: 'abged', 3: 'abgcd', 4: 'fgbc', 5: 'afgcd', 6: 'afgedc',
             7: 'abc', 8: 'abcdefg', 9: 'abcdfg'}


def meter_digits(seed, *, rows=2048, size=20):
  """Seven-segment digits read off meter photos in miniature (an OCR task): a digit of random
  height, width, stroke and brightness at a random place on a black (exactly 0) background.
  (images (rows, size, size, 1), the digit (rows,))."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, size, size, 1), np.float32)
  y = rng.randint(0, 10, rows).astype(np.int32)
  for i in range(rows):
    h, w = rng.randint(10, 15), rng.randint(6, 10)
    t, l = rng.randint(1, size - h - 1), rng.randint(1, size - w - 1)
    th, m = rng.randint(1, 3), t + h // 2
    seg = {'a': (t, t + th, l, l + w), 'd': (t + h - th, t + h, l, l + w),
           'g': (m, m + th, l, l + w), 'f': (t, m + th, l, l + th),
           'b': (t, m + th, l + w - th, l + w), 'e': (m, t + h, l, l + th),
           'c': (m, t + h, l + w - th, l + w)}
    for s in _SEGMENTS[int(y[i])]:
      r0, r1, c0, c1 = seg[s]
      x[i, r0:r1, c0:c1, 0] = rng.uniform(0.6, 1.0)
  return x, y


def squash_naive(s):
  """The capsule squash as the paper writes it, |s|^2 / (1 + |s|^2) x s / |s|: a zero capsule
  (|s| = 0) is 0 / 0 = NaN (and sqrt(0)'s gradient is inf)."""
  n2 = tf.reduce_sum(tf.square(s), -1, keepdims=True)
  return n2 / (1 + n2) * s / tf.sqrt(n2)


def squash_safe(s):
  """The same squash with an epsilon under the square root."""
  n2 = tf.reduce_sum(tf.square(s), -1, keepdims=True)
  return n2 / (1 + n2) * s / tf.sqrt(n2 + 1e-7)


class ConvCaps(L.Layer):
  """A DeepCaps convolutional capsule layer: a 3x3 convolution to `caps` x `dim` channels (no
  activation), each capsule vector squashed."""

  def __init__(self, caps, dim, strides=1, squash=squash_naive, **kwargs):
    super().__init__(**kwargs)
    self.caps, self.dim, self.squash = caps, dim, squash
    self.conv = L.Conv2D(caps * dim, 3, strides=strides, padding='same')

  def call(self, x):
    u = self.conv(x)
    s = tf.reshape(u, tf.concat([tf.shape(u)[:-1], [self.caps, self.dim]], 0))
    return tf.reshape(self.squash(s), tf.shape(u))


class ClassCaps(L.Layer):
  """Class capsules by dynamic routing (two iterations) from every `in_dim` capsule of the
  map through one shared transform; the capsule lengths (the class scores)."""

  def __init__(self, classes, dim, in_dim, squash=squash_naive, **kwargs):
    super().__init__(**kwargs)
    self.classes, self.dim, self.in_dim, self.squash = classes, dim, in_dim, squash

  def build(self, shape):
    self.n = shape[1] * shape[2] * shape[3] // self.in_dim
    self.w = self.add_weight(shape=(self.in_dim, self.classes * self.dim),
                             initializer='glorot_uniform', name='transform')

  def call(self, x):
    u = tf.reshape(x, [-1, self.n, self.in_dim])
    uhat = tf.reshape(tf.einsum('bnd,de->bne', u, self.w), [-1, self.n, self.classes, self.dim])
    b = tf.zeros_like(uhat[..., 0])
    for _ in range(2):
      v = self.squash(tf.reduce_sum(tf.nn.softmax(b, axis=2)[..., None] * uhat, 1))
      b = b + tf.reduce_sum(uhat * v[:, None], -1)
    return tf.sqrt(tf.reduce_sum(tf.square(v), -1) + 1e-9)


def deepcaps_lite(seed, *, squash=squash_naive):
  """A DeepCaps-lite (Rajasegaran et al., 2019), in miniature: a 3x3 convolution of 32 (ReLU),
  a stride-2 ConvCaps (4 capsules of 8), a cell of two more ConvCaps with a skip around the
  second, and ClassCaps (10 classes of 8): the capsule lengths. `squash`: every layer's."""
  _seed(seed)
  x = keras.Input((20, 20, 1))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(x)
  c1 = ConvCaps(4, 8, strides=2, squash=squash)(h)
  c2 = ConvCaps(4, 8, squash=squash)(c1)
  c3 = L.Add()([c1, ConvCaps(4, 8, squash=squash)(c2)])
  return keras.Model(x, ClassCaps(10, 8, 8, squash=squash)(c3), name='deepcaps_lite')


def margin_loss(y, lengths):
  """The capsule margin loss (m+ 0.9, m- 0.1, lambda 0.5)."""
  t = tf.one_hot(tf.cast(tf.reshape(y, [-1]), tf.int32), 10)
  lengths = tf.cast(lengths, tf.float32)
  return tf.reduce_mean(tf.reduce_sum(
      t * tf.square(tf.maximum(0., 0.9 - lengths)) +
      0.5 * (1 - t) * tf.square(tf.maximum(0., lengths - 0.1)), -1))


# --- The scenarios. ------------------------------------------------------------------------


@add('blind45_explode_latent_ode_euler_sgd', 'exploding_gradients', 'latent_ode_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='DENG-MIT/StiffNeuralODE#1; tbung/pytorch-revnet#1')
def _(seed, cured=False):
  """A latent-ODE-lite (GRU encoder, a neural ODE rolled 20 Euler steps of 0.5 in the
  latent space, a shared decoder) continuing noisy spirals from their first ten points, MSE,
  SGD at 1e-2 with momentum 0.9: backpropagated through the twenty steps of the same dynamics
  the gradients grow step on step: the loss 37.7 at step 0, 1401 at step 1 and NaN from step
  4, the weights NaN from step 5 (the error 35.7 before, inf after; the constant answer's
  0.32). Seed 1: 6.2, 18.4, NaN from step 6 (7.8 before). DENG-MIT/StiffNeuralODE#1 (the
  neural ODE's gradients divided by their norm and capped at grad_max: the commonly used
  gradient clipping, against gradient pathologies in training); tbung/pytorch-revnet#1 (a deep
  reversible net's loss goes to NaN at once, a plain ResNet trains: its gradients explode;
  gradient-norm clipping, `--clip 0.25`, worked). Cured: clipnorm=1.0 on the same SGD: the loss
  37.7 to 0.17, the error 35.7 to 0.141 (training needs 0.255)."""
  x, y = spirals(seed)
  return cases.Setup(latent_ode_lite(seed), keras.optimizers.SGD(
      1e-2, momentum=0.9, clipnorm=1.0 if cured else None), 'mse',
                     stream(x, y, batch=32, seed=seed), 'regression')


@add('blind45_lr_flownet_s_adam_1e2', 'learning_rate', 'flownet_s_lite', doors=('trainer', 'fit'),
     steps=150, citation='yjxiong/action-detection#74; simonmeister/UnFlow#47')
def _(seed, cured=False):
  """A FlowNetS-lite estimating the optical flow (1/4 resolution) of textured
  frame pairs with a moving square, average end-point error, Adam at 1e-2: the steps are too
  large for the flow net, it falls to predicting about the mean flow and stays there: the loss
  2.68 at step 0, 2.65 at step 150, the error 4.35 before and 4.40 after (the constant answer's
  4.28). Seed 1: the loss 2.73 to 2.98, the error 4.19 to 4.21 (the constant's 4.17).
  yjxiong/action-detection#74 (a net on optical-flow inputs: NaN at lr 1e-3, fine at 1e-4: the
  initial rate lowered); simonmeister/UnFlow#47 (FlowNet training stalls for tens of thousands
  of iterations; a slightly larger rate diverges). Cured: Adam at 1e-3: the loss 2.68 to 1.89,
  the error 4.35 to 1.88 (training needs 3.42)."""
  x, f = moving_frames(seed)
  return cases.Setup(flownet_s_lite(seed), keras.optimizers.Adam(1e-3 if cured else 1e-2), epe,
                     stream(x, f[:, ::4, ::4], batch=16, seed=seed), 'regression')


@add('blind45_divide_eigen_depth_silog_log_zero', 'division_or_log', 'eigen_depth_lite',
     doors=('trainer', 'fit'), steps=150, citation='cleinc/bts#149; dontLoveBugs/DORN_pytorch#23')
def _(seed, cured=False):
  """An Eigen-lite depth estimator (coarse and fine networks) on indoor frames
  whose raw depth maps have 10% holes stored as 0, trained with the scale-invariant log loss
  written with the validity mask multiplied in after the logs (log 0 = -inf, 0 x -inf = NaN),
  Adam at 1e-3: the loss NaN from step 0, the weights NaN (the error 25.2 before, inf after;
  the constant answer's 1.91; measured on the full depth). Seed 1: the same (26.7 before;
  the constant's 1.83). cleinc/bts#149 (NaN in training: the depth estimate is sometimes 0 and
  the loss takes log(0); use log(depth_est[mask] + 1e-4)); dontLoveBugs/DORN_pytorch#23
  (log(depth) of a zero depth is illegal: select the valid pixels, gt > 0, first). Cured: the
  valid pixels selected before the logs, log(p + 1e-3): the loss 32.8 to 2.2, the error 25.2
  to 0.90 (training needs 1.53)."""
  x, dense, holey = room_scenes(seed)
  return cases.Setup(eigen_depth_lite(seed), keras.optimizers.Adam(1e-3),
                     silog_valid if cured else silog_masked,
                     stream(x, holey, batch=16, seed=seed), 'regression',
                     eval_data=stream(x, dense, batch=16, seed=seed))


@add('blind45_softmax_deephit_pmf_naive_exp', 'softmax_overflow', 'deephit_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='uTensor/uTensor#175; FlorianMuellerklein/Machine-Learning#2')
def _(seed, cured=False):
  """A DeepHit-lite predicting the interval (quartiles) of the event time of
  patients from their covariates as recorded (age, blood pressure, cholesterol, platelets in
  their clinical units, not standardised: the one such set-up of this split), its likelihood
  written with the softmax spelled out, exp(z) / sum exp(z), Adam at 3e-3: the logits pass 88.7,
  exp overflows and inf / inf is NaN: the loss inf at step 0 and NaN from step 1, the weights
  NaN (the error 0.81 before, inf after; the constant answer's 0.71). Seed 1: NaN from step 0
  (0.71 before). uTensor/uTensor#175 (a softmax calling exp() on the logits overflows: logits of
  378 give inf and the results NaN; subtract the max); FlorianMuellerklein/Machine-Learning#2
  (softmax overflow in a hand-written network). Cured: the same likelihood through
  sparse_softmax_cross_entropy_with_logits: the loss 32.6 to 1.1, the error 0.81 to 0.39
  (training needs 0.57)."""
  x, y = cohort(seed)
  return cases.Setup(deephit_lite(seed), keras.optimizers.Adam(3e-3),
                     stable_pmf_nll if cured else naive_pmf_nll,
                     stream(x, y, batch=64, seed=seed), 'classes')


@add('blind45_fp16_sakt_millis_overflow', 'precision', 'sakt_lite', doors=('trainer', 'fit'),
     steps=150, precision='mixed_float16',
     citation='Blaizzy/mlx-vlm#293; tensorflow/tensorflow#43719')
def _(seed, cured=False):
  """A SAKT-lite knowledge tracer predicting whether each answer is right from the
  previous interactions and their response times in milliseconds (as the tutor logs them,
  log1p'd inside the model), binary cross-entropy, Adam at 1e-3, under the mixed_float16
  policy: the time layer runs in float16, where every response of 65.5 s or more (about one in
  nine) is inf before log1p sees it: the outputs of those students NaN, the loss NaN from step
  0 and every step skipped by the loss scaling (the error inf before and after; the constant
  answer's 0.30). Seed 1: the same (the constant's 0.27). Blaizzy/mlx-vlm#293 (float16's
  largest value is 65504: an input of 70000 becomes inf and breaks the gradients; upcast to
  float32 where values may pass it); tensorflow/tensorflow#43719 (values beyond the float16
  range become inf in the float16 model and NaN spreads through it). Cured: the time layer in
  float32 (dtype='float32', the rest still mixed): the loss 0.68 to 0.46, the error 0.37 to
  0.205 (training needs 0.24)."""
  x, y = tutor_logs(seed)
  return cases.Setup(sakt_lite(seed, time_dtype='float32' if cured else None),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind45_init_dkvmn_normal_std1', 'initialisation', 'dkvmn_lite', doors=('trainer', 'fit'),
     steps=150, citation='mukul-rathi/deep-learning-tutorials#2; nyk510/bayesian-neural-network#10')
def _(seed, cured=False):
  """A DKVMN-lite knowledge tracer (key-value memory over eight concepts, erase and
  add gates) predicting whether each answer is right, binary cross-entropy, Adam at 1e-3, every
  weight drawn from RandomNormal(0, 1) (standard-normal weights, as in textbook code): the
  attention, gates and tanh layers start saturated and pass almost no gradient: the loss 2.76
  at step 0 and 0.68 at step 150, the error 0.49 before and 0.295 after (the constant answer's
  0.299; training needs 0.239). Seed 1: the loss 1.60 to 0.54, the error 0.44 to 0.267 (the
  constant's 0.271). mukul-rathi/deep-learning-tutorials#2 (the sigmoid and tanh gradients of
  an LSTM saturated: look at the initial weights); nyk510/bayesian-neural-network#10 (the
  weights' initial variance set without regard to He et al.: the signal diverges or dies and a
  sigmoid net does not learn; initialise sensibly). Cured: glorot_uniform (Keras's default):
  the loss 0.68 to 0.46, the error 0.43 to 0.205."""
  (skill, prev, _), y = tutor_logs(seed)
  init = 'glorot_uniform' if cured else keras.initializers.RandomNormal(0.0, 1.0)
  return cases.Setup(dkvmn_lite(seed, init=init), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy', stream((skill, prev), y, batch=64, seed=seed),
                     'binary_prob')


@add('blind45_transient_fcos_glitch_once', 'transient', 'fcos_lite', doors=('trainer', 'fit'),
     steps=150, citation='AlexeyAB/darknet#5547; stanford-crfm/mistral#115')
def _(seed, cured=False):
  """An FCOS-lite detection head (object probability and edge distances on a
  stride-4 grid) on single-rectangle scenes, cross-entropy plus L1, Adam at 1e-3, training
  normally (the loss 2.0 at step 0, 1.07 at step 50) when one element of the backbone's
  features reads NaN once (`GlitchOnce`: its 60th training call; a flipped bit or a misfiring
  kernel, not the data, the model or the settings): the weights NaN from step 56 of a plain
  `fit` on (the error 0.186 before, inf after; the constant answer's 0.050). Seed 1: the same
  step (0.176 before). AlexeyAB/darknet#5547 (a detector's average loss turns NaN with a CUDA
  error mid-training: a hardware fault; the same run works on one good GPU);
  stanford-crfm/mistral#115 (sudden spikes in the training loss from which the run recovers: a
  bad batch or fp16 instability, not the settings). Cured: the same run without the fault: the
  loss 2.0 to 0.45, the error 0.186 to 0.019."""
  x, y = box_scenes(seed)
  return cases.Setup(fcos_lite(seed, fault=None if cured else 60), keras.optimizers.Adam(1e-3),
                     fcos_loss, stream(x, y, batch=32, seed=seed), 'regression')


@add('blind45_mismatch_anode_one_unit_softmax', 'loss_output_mismatch', 'anode_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#500; vllm-project/vllm#18313')
def _(seed, cured=False):
  """An ANODE-lite (four zero dimensions appended, a ten-step Euler neural ODE
  flow) classifying the concentric-rings task, binary cross-entropy on a Dense(1, softmax)
  output, Adam at 1e-3: a softmax over one unit is exp(x) / exp(x) = 1 for every input: the
  model answers "inside" for every point (the loss falls, 0.64 to 0.09, as Keras's
  cross-entropy reads the logits under the activation, but the outputs never move off 1.0): the
  error 0.469 before and after (the constant answer's 0.469; training needs 0.375). Seed 1: 0.563
  before and after (the constant's 0.438). keras-team/keras#500 (a net whose outputs are all 1
  regardless of the input: softmax on an array of size 1 is always 1); vllm-project/vllm#18313
  (a one-label classifier: softmax of a single output is always 1, use sigmoid). Cured:
  Dense(1, sigmoid): the error 0.535 to 0."""
  x, y = rings(seed)
  return cases.Setup(anode_lite(seed, output='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind45_input_flownet_c_nan_flow', 'bad_input', 'flownet_c_lite', doors=('trainer', 'fit'),
     steps=150, citation='lmb-freiburg/dispnet-flownet-docker#20; microsoft/MaskFlownet#39')
def _(seed, cured=False):
  """A FlowNetC-lite (shared towers, correlation layer) estimating the optical
  flow of textured frame pairs, average end-point error, Adam at 1e-3, on ground-truth flow
  maps in which 3% of the pixels are NaN (invalid flow, as the FlyingThings3D files hold it):
  one NaN pixel makes the batch's loss NaN: the loss NaN from step 0, the weights NaN (the
  error 4.37 before, inf after; the constant answer's 4.28; measured on the flow without the
  gaps, eval_data). Seed 1: the same (4.18 before; the constant's 4.17).
  lmb-freiburg/dispnet-flownet-docker#20 (NaN values in the disparity and flow ground truth:
  filter the NaN pixels out of the error and the backpropagation; a sparse set of them gives
  -nan flow losses); microsoft/MaskFlownet#39 (do not load the training samples with NaN or
  inf flow values). Cured: the end-point error over the finite pixels only: the loss 2.39 to
  about 2.0, the error 4.37 to 2.56 (training needs 3.42)."""
  x, f = moving_frames(seed)
  f = f[:, ::4, ::4].copy()
  gaps = f.copy()
  gaps[np.random.RandomState(seed + 7).rand(*f.shape[:-1]) < 0.03] = np.nan
  return cases.Setup(flownet_c_lite(seed), keras.optimizers.Adam(1e-3),
                     valid_epe if cured else epe, stream(x, gaps, batch=16, seed=seed),
                     'regression', eval_data=stream(x, f, batch=16, seed=seed))


@add('blind45_divide_deepcaps_squash_zero', 'division_or_log', 'deepcaps_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='jindongwang/Pytorch-CapsuleNet#7; ageron/handson-ml#173')
def _(seed, cured=False):
  """A DeepCaps-lite (convolutional capsule cells, dynamic routing to ten class
  capsules) reading seven-segment meter digits on a black background, margin loss, Adam at
  3e-3, its squash written as the paper has it, |s|^2 / (1 + |s|^2) x s / |s|: over the black
  background every capsule's input is exactly 0 and 0 / sqrt(0) is NaN: the outputs NaN from
  the start, the loss NaN from step 0, the weights NaN (the error inf before and after; the
  constant answer's 0.86). Seed 1: the same (the constant's 0.87).
  jindongwang/Pytorch-CapsuleNet#7 (undefined gradients from a division by zero in the squash:
  put an epsilon in the squared norm); ageron/handson-ml#173 (a squash without the epsilon
  fails on a zero vector: sqrt(x) has no gradient at 0). Cured: sqrt(|s|^2 + 1e-7): the loss
  0.78 to about 0.43, the error 0.93 to 0.63 (training needs 0.69)."""
  x, y = meter_digits(seed)
  return cases.Setup(deepcaps_lite(seed, squash=squash_safe if cured else squash_naive),
                     keras.optimizers.Adam(3e-3), margin_loss, stream(x, y, batch=32, seed=seed),
                     'classes')
