"""A thirty-fourth blind set of sick scenarios (the 'blind34' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind29.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a GAINN building-energy surrogate, a
FinalMLP-lite, a PINN-lite, an Informer-lite, a PPO-policy-lite, a USAD-lite, a
neural-fingerprint-lite, an RNNoise-lite, a MaskNet-lite and a GateNet-lite). Each builder takes `cured`: the same run with the thread's
remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain Keras
`compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin
passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import field

BLIND34 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND34.add` with split='blind34'."""
  return BLIND34.add(name, expected, arch, split='blind34', **fields)


def stream(x, y, *, batch, seed):
  """An endless stream of batches of (x, y) (x may be a tuple), shuffled anew each epoch from
  `seed` (as data.stream)."""
  n = len(x[0]) if isinstance(x, tuple) else len(x)
  ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  ds = ds.shuffle(min(n, 2048), seed=seed, reshuffle_each_iteration=True)
  return ds.batch(batch, drop_remainder=True).prefetch(2)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def building_energy(seed, *, rows=4096, features=12):
  """Simulated building energy in miniature (the EnergyPlus / TRNSYS runs an ANN surrogate is
  fitted to): twelve standardised design and weather variables (insulation, glazing ratio,
  set-points, degree-days...), the annual heating demand in kWh/m2 (a mean of 120, spread 40,
  not scaled, as the threads feed it) a mostly linear function of them with one interaction.
  (x (rows, features), demand (rows, 1))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, features)
  w = rng.randn(features) / np.sqrt(features)
  y = 120 + 40 * (x @ w + 0.3 * np.tanh(x[:, 0] * x[:, 1]) + 0.1 * rng.randn(rows))
  return x.astype(np.float32), y[:, None].astype(np.float32)


def gainn_surrogate_lite(seed, *, features=12, width=128):
  """A GAINN-lite (Magnier and Haghighat, 2010: the artificial-neural-network surrogate of a
  building simulation used for design optimisation): three Dense layers of `width` (ReLU),
  Dense(1): the annual demand."""
  _seed(seed)
  x = keras.Input((features,))
  h = x
  for _ in range(3):
    h = L.Dense(width, activation='relu')(h)
  return keras.Model(x, L.Dense(1)(h), name='gainn_surrogate_lite')


def gatenet_lite(seed, *, fields=8, vocab=40, dim=16):
  """A GateNet-lite (Huang et al., 2020): the fields' embeddings of `dim`, each scaled by its
  own embedding gate (a per-field sigmoid of a Dense of it), flattened; an MLP of 128 and 64
  (ReLU) with a hidden gate (a sigmoid Dense of the same width multiplied in) after each;
  Dense(1): the click logit."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  e = L.Embedding(fields * vocab, dim)(x)
  e = L.Flatten()(L.Multiply()([e, L.Dense(1, activation='sigmoid')(e)]))
  h = e
  for n in (128, 64):
    h = L.Dense(n, activation='relu')(h)
    h = L.Multiply()([h, L.Dense(n, activation='sigmoid')(h)])
  return keras.Model(x, L.Dense(1)(h), name='gatenet_lite')


def click_log(seed, *, rows=8192, fields=8, vocab=40):
  """Ad click logs in miniature (the Criteo layout the CTR models read): `fields` categorical
  fields of `vocab` values each (the user, the ad, the slot, the hour...); the click drawn from a
  logistic of per-value effects and of pairwise effects of three field pairs. (ids (rows,
  fields), each field's ids offset by field x `vocab` (one shared table), click (rows, 1) as
  0. / 1.)."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (rows, fields))
  first = rng.randn(fields, vocab) * 0.6
  pair = rng.randn(3, vocab, vocab) * 1.0
  z = first[np.arange(fields), ids].sum(1)
  for k, (a, b) in enumerate(((0, 1), (2, 3), (4, 5))):
    z += pair[k, ids[:, a], ids[:, b]]
  p = 1 / (1 + np.exp(-(z - np.median(z))))
  y = (rng.rand(rows) < p).astype(np.float32)[:, None]
  return (ids + np.arange(fields) * vocab).astype(np.int32), y


def finalmlp_lite(seed, *, fields=8, vocab=40, dim=16):
  """A FinalMLP-lite (Mao et al., 2023): the fields' embeddings of `dim`, flattened; two MLP
  streams (Dense 128-64, ReLU), each input gated by a feature-selection gate (a sigmoid MLP of
  the embeddings, times 2), fused by a bilinear head (w1.a + w2.b + a^T W b over 4 heads), the
  click logit."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  e = L.Flatten()(L.Embedding(fields * vocab, dim)(x))
  streams = []
  for _ in range(2):
    gate = L.Dense(fields * dim, activation='sigmoid')(L.Dense(64, activation='relu')(e))
    h = L.Multiply()([e, L.Rescaling(2.0)(gate)])
    h = L.Dense(64, activation='relu')(L.Dense(128, activation='relu')(h))
    streams.append(h)
  return keras.Model(x, BilinearFusion(4)(streams), name='finalmlp_lite')


class BilinearFusion(L.Layer):
  """FinalMLP's multi-head bilinear fusion of two streams a, b: the heads' chunks a_i, b_i,
  sum_i (w1_i.a_i + w2_i.b_i + a_i^T W_i b_i) + bias: one logit."""

  def __init__(self, heads, **kwargs):
    super().__init__(**kwargs)
    self.heads = heads

  def build(self, shapes):
    d = shapes[0][-1] // self.heads
    self.w1 = self.add_weight(shape=(self.heads, d), initializer='glorot_uniform')
    self.w2 = self.add_weight(shape=(self.heads, d), initializer='glorot_uniform')
    self.w = self.add_weight(shape=(self.heads, d, d), initializer='glorot_uniform')
    self.b = self.add_weight(shape=(1,), initializer='zeros')

  def call(self, streams):
    a, b = streams
    a = tf.reshape(a, [-1, self.heads, a.shape[-1] // self.heads])
    b = tf.reshape(b, [-1, self.heads, b.shape[-1] // self.heads])
    out = (tf.einsum('bhd,hd->b', a, self.w1) + tf.einsum('bhd,hd->b', b, self.w2) +
           tf.einsum('bhd,hde,bhe->b', a, self.w, b))
    return out[:, None] + self.b


def heat_samples(seed, *, rows=4096):
  """Solution samples of the 1-D heat equation u_t = u_xx / pi^2 on x in [0, 1], t in [0, 1]
  (the physics-informed networks' textbook case): u = sin(pi x) exp(-t) + 0.5 sin(3 pi x)
  exp(-9 t), sampled at random points. ((x, t) (rows, 2), u (rows, 1))."""
  rng = np.random.RandomState(seed)
  xt = rng.rand(rows, 2)
  x, t = xt[:, :1], xt[:, 1:]
  u = np.sin(np.pi * x) * np.exp(-t) + 0.5 * np.sin(3 * np.pi * x) * np.exp(-9 * t)
  return xt.astype(np.float32), u.astype(np.float32)


def pinn_lite(seed, *, width=32, depth=4, init='glorot_normal'):
  """A PINN-lite (Raissi et al., 2019, the data-fitting part of a physics-informed network): an
  MLP of `depth` tanh layers of `width` on (x, t), Dense(1): u(x, t). Every kernel initialised
  with `init`."""
  _seed(seed)
  x = keras.Input((2,))
  h = x
  for _ in range(depth):
    h = L.Dense(width, activation='tanh', kernel_initializer=init)(h)
  return keras.Model(x, L.Dense(1, kernel_initializer=init)(h), name='pinn_lite')


def pv_power(seed, *, rows=2048, window=48, horizon=12):
  """Rooftop photovoltaic output in miniature (the solar series the forecasting threads fit):
  hourly generation over 120 days, zero from dusk to dawn, a clear-sky bell by day scaled by the
  day's cloudiness and noise; each row `window` hours of (power, sin and cos of the hour) and
  the next `horizon` hours of power (zero at night). (x (rows, window, 3), y (rows, horizon))."""
  rng = np.random.RandomState(seed)
  hours = 24 * 120
  h = np.arange(hours) % 24
  bell = np.sin(np.pi * (h - 6) / 12)
  bell = np.where(bell > 1e-6, bell, 0.0)  # Night (and sin(pi)'s 1e-16 at dusk) is 0.
  cloud = np.repeat(rng.uniform(0.3, 1.0, hours // 24), 24)
  p = bell * cloud * (1 + 0.05 * rng.randn(hours))
  p = np.where(bell > 0, np.clip(p, 0, None), 0.0)
  feats = np.stack([p, np.sin(2 * np.pi * h / 24), np.cos(2 * np.pi * h / 24)], -1)
  starts = rng.randint(0, hours - window - horizon, rows)
  x = np.stack([feats[s:s + window] for s in starts])
  y = np.stack([p[s + window:s + window + horizon] for s in starts])
  return x.astype(np.float32), y.astype(np.float32)


def informer_lite(seed, *, window=48, horizon=12, dim=32):
  """An Informer-lite (Zhou et al., 2021, full attention in place of ProbSparse): a token
  projection of each hour to `dim` plus a learned position embedding, two encoder layers of
  two-head self-attention and a feed-forward (residuals, layer norm) with a distilling
  convolution (Conv1D 3, ELU, max pooling 2) between them, a generative head (flatten,
  Dense(`horizon`)): all `horizon` hours at once."""
  _seed(seed)
  x = keras.Input((window, 3))
  h = L.Dense(dim)(x)
  h = h + L.Embedding(window, dim)(tf.range(window))[None]
  for i in range(2):
    a = L.MultiHeadAttention(2, dim // 2)(h, h)
    h = L.LayerNormalization()(h + a)
    f = L.Dense(dim)(L.Dense(2 * dim, activation='gelu')(h))
    h = L.LayerNormalization()(h + f)
    if i == 0:
      h = L.MaxPooling1D(2)(L.Conv1D(dim, 3, padding='same', activation='elu')(h))
  return keras.Model(x, L.Dense(horizon)(L.Flatten()(h)), name='informer_lite')


def handwritten_mape(y, p):
  """mean(|y - p| / |y|) x 100, the mean absolute percentage error as the threads write it: no
  epsilon and no mask, so a zero target is a division by zero."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  return 100.0 * tf.reduce_mean(tf.abs(y - p) / tf.abs(y))


def masked_mape(y, p):
  """The mean absolute percentage error over the non-zero targets only (LibCity's masked_mape:
  the zero targets masked out)."""
  y, p = tf.cast(y, tf.float32), tf.cast(p, tf.float32)
  mask = tf.cast(tf.not_equal(y, 0.0), tf.float32)
  safe = tf.where(tf.equal(y, 0.0), tf.ones_like(y), y)
  return 100.0 * tf.reduce_sum(mask * tf.abs(y - p) / tf.abs(safe)) / tf.reduce_sum(mask)


def arm_demos(seed, *, rows=4096, joints=6, actions=5):
  """Demonstrations of a reaching arm in miniature (behaviour cloning of a scripted expert, as a
  policy is pre-trained before PPO): the observation the robot's raw telemetry (joint angles in
  degrees, joint velocities in degrees per second, the target's position in millimetres), the
  action one of `actions` discrete motor commands, the expert's choice a function of the target
  direction relative to the arm. (obs (rows, 3 joints + 2), action id)."""
  rng = np.random.RandomState(seed)
  ang = rng.uniform(-90, 90, (rows, joints))
  vel = rng.uniform(-120, 120, (rows, joints))
  tgt = rng.uniform(-400, 400, (rows, 2))
  reach = ang[:, :2].sum(1) * 4.0
  err = np.stack([tgt[:, 0] - reach, tgt[:, 1] + 0.5 * vel[:, 0]], -1)
  action = np.where(np.abs(err).max(1) < 80, 0, 1 + 2 * (np.abs(err[:, 1]) > np.abs(err[:, 0]))
                    + (err[np.arange(rows), (np.abs(err[:, 1]) > np.abs(err[:, 0])).astype(int)]
                       > 0))
  obs = np.concatenate([ang, vel, tgt], 1)
  return obs.astype(np.float32), action.astype(np.int32)


def naive_softmax(z):
  """exp(z) / sum(exp(z)), the softmax as the threads' policies compute it: no max subtracted,
  so a logit above 88.7 overflows float32's exp to inf (and inf / inf = NaN)."""
  e = tf.exp(z)
  return e / tf.reduce_sum(e, -1, keepdims=True)


def ppo_policy_lite(seed, *, obs=14, actions=5, naive=True):
  """A PPO-policy-lite (Schulman et al., 2017, the actor of a discrete-action PPO agent with
  the ReLU MLP the threads use): Dense(64, ReLU), Dense(64, ReLU), Dense(`actions`) logits, then
  the action probabilities: `naive_softmax` (the threads') or tf.nn.softmax (max subtracted)."""
  _seed(seed)
  x = keras.Input((obs,))
  h = L.Dense(64, activation='relu')(x)
  h = L.Dense(64, activation='relu')(h)
  z = L.Dense(actions)(h)
  probs = L.Lambda(naive_softmax if naive else tf.nn.softmax)(z)
  return keras.Model(x, probs, name='ppo_policy_lite')


def plant_windows(seed, *, rows=2048, window=32, sensors=16):
  """Process-plant telemetry in miniature (the SWaT / WADI layout USAD is evaluated on): sixteen
  sensors driven by three latent operating cycles with noise, min-max scaled to [0, 1] as USAD
  does; windows of `window` readings flattened (the input and the reconstruction target).
  (x (rows, window * sensors), x)."""
  rng = np.random.RandomState(seed)
  length = rows + window
  t = np.arange(length)[:, None]
  lat = np.concatenate([np.sin(2 * np.pi * t / rng.uniform(10, 60)) for _ in range(3)], 1)
  sig = lat @ rng.randn(3, sensors) + 0.1 * rng.randn(length, sensors)
  sig = (sig - sig.min(0)) / (sig.max(0) - sig.min(0))
  starts = rng.permutation(rows)
  x = np.stack([sig[s:s + window].reshape(-1) for s in starts]).astype(np.float32)
  return x, x


def usad_lite(seed, *, inputs=512, latent=32, dtype='float32'):
  """A USAD-lite (Audibert et al., 2020, unsupervised anomaly detection on multivariate time
  series, trained on its reconstruction phase): an encoder (Dense inputs/2, inputs/4, `latent`,
  ReLU) shared by two decoders (Dense inputs/4, inputs/2, inputs, the last sigmoid); the two
  reconstructions averaged. Every layer in `dtype`."""
  _seed(seed)
  x = keras.Input((inputs,), dtype=dtype)
  h = x
  for n in (inputs // 2, inputs // 4, latent):
    h = L.Dense(n, activation='relu', dtype=dtype)(h)
  outs = []
  for _ in range(2):
    d = h
    for n in (inputs // 4, inputs // 2):
      d = L.Dense(n, activation='relu', dtype=dtype)(d)
    outs.append(L.Dense(inputs, activation='sigmoid', dtype=dtype)(d))
  return keras.Model(x, L.Average(dtype=dtype)(outs), name='usad_lite')


def molecules(seed, *, rows=2048, atoms=12, feats=8, descriptors=8, nan_rows=0.0):
  """Small molecules in miniature (the logD tables the chemprop threads train on): each a random
  connected graph of up to `atoms` atoms (a chain with a few rings closed; padding atoms all
  zero), one-hot atom types plus degree; eight molecule descriptors (standardised, as an RDKit
  featuriser gives them); the property a function of the atom-type counts, the ring bonds and
  two descriptors. A fraction `nan_rows` of the molecules has NaN descriptors (RDKit's
  featuriser returning NaN where a descriptor fails). ((atoms (rows, atoms, feats), adjacency
  (rows, atoms, atoms), descriptors (rows, descriptors)), y (rows, 1))."""
  rng = np.random.RandomState(seed)
  xa = np.zeros((rows, atoms, feats), np.float32)
  adj = np.zeros((rows, atoms, atoms), np.float32)
  y = np.zeros((rows, 1), np.float32)
  contrib = rng.randn(feats - 2)
  desc = rng.randn(rows, descriptors).astype(np.float32)
  for i in range(rows):
    n = rng.randint(5, atoms + 1)
    types = rng.randint(0, feats - 2, n)
    xa[i, np.arange(n), types] = 1
    for a in range(n - 1):
      adj[i, a, a + 1] = adj[i, a + 1, a] = 1
    rings = rng.randint(0, 3)
    for _ in range(rings):
      a, b = sorted(rng.choice(n, 2, replace=False))
      adj[i, a, b] = adj[i, b, a] = 1
    xa[i, :n, feats - 2] = adj[i, :n].sum(1) / 4.0
    xa[i, :n, feats - 1] = 1
    y[i] = 0.3 * contrib[types].sum() + 0.5 * rings + 0.8 * desc[i, 0] - 0.5 * desc[i, 1]
  y = (y - y.mean()) / y.std()
  bad = rng.rand(rows) < nan_rows
  desc[bad, rng.randint(0, descriptors, bad.sum())] = np.nan
  return (xa, adj, desc), y.astype(np.float32)


class GraphConv(L.Layer):
  """Duvenaud et al.'s neural-fingerprint layer on a dense graph: each atom's features plus its
  neighbours' sum (A h), a Dense of `units` (ReLU); and the layer's fingerprint contribution:
  softmax(Dense(`fp`)) per atom, summed over the real atoms."""

  def __init__(self, units, fp, **kwargs):
    super().__init__(**kwargs)
    self.dense = L.Dense(units, activation='relu')
    self.out = L.Dense(fp)

  def call(self, inputs):
    h, adj, mask = inputs
    h = self.dense(h + tf.matmul(adj, h)) * mask
    return h, tf.reduce_sum(tf.nn.softmax(self.out(h)) * mask, 1)


def neural_fp_lite(seed, *, atoms=12, feats=8, descriptors=8, fp=32):
  """A neural-fingerprint-lite (Duvenaud et al., 2015, convolutional networks on molecular
  graphs): three `GraphConv` layers of 32 over the atom features and adjacency, their
  fingerprint contributions summed (`fp` wide), concatenated with the molecule descriptors (as
  chemprop adds RDKit features), Dense(64, ReLU), Dense(1): the property."""
  _seed(seed)
  xa = keras.Input((atoms, feats))
  adj = keras.Input((atoms, atoms))
  desc = keras.Input((descriptors,))
  mask = L.Lambda(lambda t: t[..., -1:])(xa)
  h, fps = xa, []
  for _ in range(3):
    h, f = GraphConv(32, fp)([h, adj, mask])
    fps.append(f)
  z = L.Concatenate()([L.Add()(fps), desc])
  out = L.Dense(1)(L.Dense(64, activation='relu')(z))
  return keras.Model([xa, adj, desc], out, name='neural_fp_lite')


def noisy_speech(seed, *, rows=2048, frames=20, bands=22):
  """Speech enhancement targets in miniature (RNNoise's training pairs): per frame the 22 Bark
  band log-energies of speech-like spectra (a formant envelope moving slowly) plus noise of a
  random level and colour, and the ideal band gains sqrt(speech energy / noisy energy) in
  [0, 1]. (features (rows, frames, 42): the 22 log-energies and the frame-to-frame derivatives
  of the first 20, gains (rows, frames, bands))."""
  rng = np.random.RandomState(seed)
  f = np.arange(bands)[None, None, :]
  t = np.arange(frames)[None, :, None]
  c = rng.uniform(3, 18, (rows, 1, 1)) + rng.uniform(-0.3, 0.3, (rows, 1, 1)) * t
  speech = np.exp(-0.5 * ((f - c) / rng.uniform(1.5, 4, (rows, 1, 1))) ** 2)
  speech = speech * rng.uniform(0.2, 2.0, (rows, frames, 1))
  noise = rng.uniform(0.05, 1.0, (rows, 1, 1)) * np.exp(-rng.uniform(0, 0.2, (rows, 1, 1)) * f)
  noisy = speech + noise * rng.uniform(0.7, 1.3, (rows, frames, bands))
  gains = np.sqrt(speech / noisy)
  logE = np.log10(noisy + 1e-3)
  extra = np.concatenate([np.diff(logE, axis=1, prepend=logE[:, :1]),
                          rng.randn(rows, frames, 20 - bands) if bands < 20 else
                          np.zeros((rows, frames, 0))], -1)[..., :20]
  x = np.concatenate([logE, extra], -1)
  return x.astype(np.float32), gains.astype(np.float32)


class BitFlipOnce(field.OneOffFault):
  """`field.OneOffFault` on the forward pass: one activation reads inf once (a flipped exponent
  bit in a buffer)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=5, value=np.inf, **kwargs)


def rnnoise_lite(seed, *, frames=20, features=42, bands=22, fault=None):
  """An RNNoise-lite (Valin, 2018, a recurrent noise suppressor): Dense(24, tanh) per frame, a
  GRU of 24, a GRU of 48 on its output and the input, a GRU of 96 on all three, a `BitFlipOnce`
  (at its `fault`-th training call; None: never), Dense(`bands`, sigmoid) per frame: the band
  gains."""
  _seed(seed)
  x = keras.Input((frames, features))
  d = L.Dense(24, activation='tanh')(x)
  v = L.GRU(24, return_sequences=True)(d)
  n = L.GRU(48, return_sequences=True)(L.Concatenate()([d, v, x]))
  s = L.GRU(96, return_sequences=True)(L.Concatenate()([v, n, x]))
  return keras.Model(x, L.Dense(bands, activation='sigmoid')(BitFlipOnce(fault)(s)),
                     name='rnnoise_lite')


def masknet_lite(seed, *, fields=8, vocab=40, dim=16, activation='sigmoid'):
  """A MaskNet-lite (Wang et al., 2021, serial MaskNet): the fields' embeddings of `dim`
  (flattened, layer-normalised); three MaskBlocks, each an instance-guided mask (Dense 64 ReLU,
  Dense to the block's input width, of the embeddings) multiplied into its input, Dense(64),
  layer norm, ReLU; Dense(1, `activation`): the click probability."""
  _seed(seed)
  x = keras.Input((fields,), dtype='int32')
  e = L.Flatten()(L.Embedding(fields * vocab, dim)(x))
  h = L.LayerNormalization()(e)
  for _ in range(3):
    mask = L.Dense(h.shape[-1])(L.Dense(64, activation='relu')(e))
    h = L.ReLU()(L.LayerNormalization()(L.Dense(64)(L.Multiply()([h, mask]))))
  return keras.Model(x, L.Dense(1, activation=activation)(h), name='masknet_lite')

# --- The scenarios. ---------------------------------------------------------------------------


@add('blind34_grad_gainn_sgd_no_clip', 'exploding_gradients', 'gainn_surrogate_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#510; keras-team/keras#5127')
def _(seed, cured=False):
  """A GAINN-lite (a building-simulation surrogate: three Dense(128, ReLU) layers) fitted to the
  annual heating demand in kWh/m2 (a mean of 120, not scaled), SGD at 0.01 with Nesterov
  momentum 0.9 and no clipping (keras-team/keras#510's optimizer): the first errors of about 120
  give gradients in the thousands, each step throws the weights further: the loss 1.5e4 at step
  0, 7.8e3 at step 1, 7.8e6 at step 2, NaN from step 4, the weights NaN (the error 1.5e4 before,
  inf after; the constant answer's 861). Seed 1: 1.9e4, 4.2e4, 7.4e5, NaN from step 4 (the
  constant's 2122). keras-team/keras#510 (an MLP with SGD 0.01, momentum 0.9, nesterov gets a NaN
  loss without clipnorm; clipnorm is the solution that worked); keras-team/keras#5127 (the loss
  is NaN without clipnorm: the gradient gets really large and moves the weights a lot). Cured:
  clipnorm=1.0 on the same SGD: the loss 1.5e4 to 2.5e3, the error 1.5e4 to 58."""
  x, y = building_energy(seed)
  return cases.Setup(gainn_surrogate_lite(seed),
                     keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True,
                                          clipnorm=1.0 if cured else None),
                     'mse', stream(x, y, batch=32, seed=seed), 'regression')


@add('blind34_lr_finalmlp_adam_high', 'learning_rate', 'finalmlp_lite', doors=('trainer', 'fit'),
     steps=150, citation='guillaumegenthial/sequence_tagging#47; thtrieu/darkflow#1059')
def _(seed, cured=False):
  """A FinalMLP-lite (embeddings of eight categorical fields, two gated MLP streams, a bilinear
  fusion head) predicting clicks, Adam at 0.1 (the threads' rate): the first steps throw the
  embeddings and the gates far off and the net settles on a constant guess: the loss 0.69 at
  step 0, 6.1 at step 2, 1.1 at step 50, 0.83 at step 149, no NaN, no training (the error 0.52
  before, 0.50 after; the constant answer's 0.50). Seed 1: 0.69, 12.5, 1.4, 0.95 (the error 0.53
  before, 0.50 after; the constant's 0.50). guillaumegenthial/sequence_tagging#47 (at 0.001 no
  problem, at 0.01 or 0.1 the loss decreases first and then increases, then NaN);
  thtrieu/darkflow#1059 (Adam at 0.1 and 0.3 gives a NaN loss early; a smaller rate trains
  further). Cured: Adam at 1e-3: the loss 0.69 to 0.64, the error 0.52 to 0.28."""
  x, y = click_log(seed)
  return cases.Setup(finalmlp_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     stream(x, y, batch=64, seed=seed), 'binary_logit')


@add('blind34_init_pinn_zeros', 'initialisation', 'pinn_lite', doors=('trainer', 'fit'),
     steps=150, citation='wagonhelm/NaNmnist#2; nndl/nndl-discussion#14')
def _(seed, cured=False):
  """A PINN-lite (four tanh layers of 32 on (x, t)) fitted to samples of a heat-equation
  solution, Adam at 1e-3, every kernel initialised to zero (the threads' all-zero
  initialisation): tanh(0) = 0, every hidden unit computes the same zero and gets no gradient,
  only the output bias learns: the loss 0.25 at step 0, 0.20 at step 50, 0.17 at step 149, no
  NaN, no training (the error 0.21 before, 0.12 after; the constant answer's 0.049). Seed 1:
  0.23, 0.20, 0.17 (the error 0.26 before, 0.16 after; the constant's 0.064).
  wagonhelm/NaNmnist#2 (all-zero initialisation is a pitfall: every neuron computes the same
  output and gets the same update; deep nets need random initialisation);
  nndl/nndl-discussion#14 (weights initialised to 0 make a layer's neurons identical, with the
  same gradients: initialise at random). Cured: glorot_normal kernels: the loss 0.51 to 0.052,
  the error 0.45 to 0.029."""
  x, y = heat_samples(seed)
  return cases.Setup(pinn_lite(seed, init='glorot_normal' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3), 'mse', stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind34_log_informer_mape_zero_targets', 'division_or_log', 'informer_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='LibCity/Bigscity-LibCity#219; unit8co/darts#2517')
def _(seed, cured=False):
  """An Informer-lite (hour tokens with positions, two self-attention encoder layers with a
  distilling convolution between, a generative head of 12 hours) forecasting rooftop solar
  output, Adam at 1e-3, trained on the mean absolute percentage error written as the threads
  write it, |y - p| / |y| with no mask: the night hours are 0, a division by zero: the loss inf
  at step 0, NaN from step 1, the weights NaN (the error 1.56 before, inf after; the constant
  answer's 0.083). Seed 1: the same (1.86 before; the constant's 0.075).
  LibCity/Bigscity-LibCity#219 (MAPE is inf because the ground truth has zeros; traffic papers
  mask the zeros out); unit8co/darts#2517 (a TFT trained with MapeLoss predicts NaN; no issue
  with any other loss, e.g. MSE). Cured: MSE (darts#2517's other loss): the loss 1.62 to 0.048,
  the error 1.56 to 0.017."""
  x, y = pv_power(seed)
  return cases.Setup(informer_lite(seed), keras.optimizers.Adam(1e-3),
                     'mse' if cured else handwritten_mape,
                     stream(x, y, batch=32, seed=seed), 'regression')


@add('blind34_exp_ppo_policy_naive_softmax', 'softmax_overflow', 'ppo_policy_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='KanishJebaMathewM/Truxify#11388; keras-rl/keras-rl#25')
def _(seed, cured=False):
  """A PPO-policy-lite (two Dense(64, ReLU), five action logits, the probabilities by a
  hand-written exp(z) / sum(exp(z))) pre-trained by behaviour cloning on a reaching arm's raw
  telemetry (angles in degrees, velocities in degrees per second, the target in millimetres),
  Adam at 1e-3, sparse categorical cross-entropy on the probabilities: the logits of the raw
  observations pass 88.7, exp overflows and inf / inf = NaN: seed 0 the outputs NaN before
  training and the loss NaN from step 0 (the error inf before and after; the constant answer's
  0.66); seed 1 the loss 11.2 at step 0, 10.7 at step 10, NaN from step 17, the weights NaN (the
  error 0.79 before, inf after; the constant's 0.65). KanishJebaMathewM/Truxify#11388 (a MAPPO
  policy's np.exp(logits) / sum overflows to inf for a moderately large logit and gives NaN:
  subtract the max first); keras-rl/keras-rl#25 (a Boltzmann policy's probabilities break from
  overflows in exp(x) for a large x). Cured: tf.nn.softmax (the max subtracted): the loss 82.8
  (the clipped log of the zero probabilities) to 6.8, the error 0.70 to 0.20."""
  x, y = arm_demos(seed)
  return cases.Setup(ppo_policy_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3), SCE(),
                     stream(x, y, batch=32, seed=seed), 'classes')


@add('blind34_fp16_usad_adam', 'precision', 'usad_lite', doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#11832; TianzhongSong/keras-FP16-test#2')
def _(seed, cured=False):
  """A USAD-lite (an encoder of 256, 128, 32 shared by two decoders, their sigmoid reconstructions
  averaged) reconstructing min-max-scaled windows of sixteen plant sensors, Adam at 1e-3 with
  its defaults, every layer and so the weights and Adam's slots in float16 (as after
  set_floatx('float16')): the squared gradients underflow float16 (after five steps every
  second-moment slot reads 0) and the updates are lost: the loss 0.0573 at step 0, 0.0578 at
  step 50, 0.0579 at step 149, no NaN, no training (the error 0.0580 before and after; the
  constant answer's 0.0575). Seed 1: 0.0484, 0.0492, 0.0492 (the error 0.0490 before, 0.0489
  after; the constant's 0.0485). An epsilon of 1e-4 (keras#11832's fix) did not rescue it (the
  loss 0.0578). keras-team/keras#11832 (training in float16 fails where float32 converges);
  TianzhongSong/keras-FP16-test#2 (with set_floatx('float16') a model does not train: float16's
  precision is not enough; train in float32). Cured: the same network in float32: the loss
  0.057 to 0.011, the error 0.058 to 0.0011."""
  x, y = plant_windows(seed)
  return cases.Setup(usad_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), 'mse', stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind34_input_neural_fp_nan_descriptors', 'bad_input', 'neural_fp_lite',
     doors=('trainer', 'fit'), steps=150, citation='chemprop/chemprop#1138; prs-eth/Marigold#111')
def _(seed, cured=False):
  """A neural-fingerprint-lite (three graph convolutions over atoms and bonds, their softmax
  fingerprints summed, concatenated with eight RDKit-like molecule descriptors, Dense(64), the
  property) fitted to a logD-like property, Adam at 1e-3; 2% of the molecules have a NaN
  descriptor (the featuriser failing on them, as in chemprop#1138), about half the batches hold
  one: the weights turn NaN on the first such batch, the outputs NaN (Keras's logged running
  loss stays finite: 1.36 at step 0, 1.01 at step 149), no training (the error 1.27 before, inf
  after on clean molecules; the constant answer's 0.75). Seed 1: the same (the logged loss 1.03
  to 0.99; the error 0.96 before, inf after; the constant's 0.98). chemprop/chemprop#1138 (with
  any of the RDKit molecule featurisers the validation loss is NaN and the model predicts only
  NaN; the features held NaN); prs-eth/Marigold#111 (a NaN loss when the input batch contains
  NaN values: check the data). Cured: the NaN descriptors set to 0 (np.nan_to_num): the loss
  1.46 to 0.30, the error 1.27 to 0.12. The measure reads clean molecules (eval_data)."""
  (xa, adj, desc), y = molecules(seed, nan_rows=0.02)
  if cured:
    desc = np.nan_to_num(desc)
  clean, yc = molecules(seed)
  return cases.Setup(neural_fp_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     stream((xa, adj, desc), y, batch=32, seed=seed), 'regression',
                     eval_data=stream(clean, yc, batch=32, seed=seed))


@add('blind34_transient_rnnoise_bit_flip_once', 'transient', 'rnnoise_lite',
     doors=('trainer', 'fit'), steps=150, citation='Rikorose/DeepFilterNet#30; facebookresearch/mmf#1251')
def _(seed, cured=False):
  """An RNNoise-lite (Dense(24, tanh), three GRUs of 24, 48 and 96 fed each other's outputs and
  the input, 22 sigmoid band gains per frame) learning the ideal band gains of noisy speech-like
  spectra, Adam at 1e-3, training normally (the loss 0.73 at step 0, 0.52 at step 50) when one
  activation reads inf once (`BitFlipOnce`: its 80th training call, step 75 in a plain `fit`
  after the measure's four training-mode passes; a flipped bit, not the data, the model or the
  settings): the loss NaN from step 75, the weights NaN (the error 0.157 before, inf after; the
  constant answer's 0.116). Seed 1: the same step (0.146 before; the constant's 0.123).
  Rikorose/DeepFilterNet#30 (in some rare circumstances NaNs occur during training of a speech
  enhancement net; resuming from the last checkpoint helps); facebookresearch/mmf#1251 (resumed
  from a checkpoint, the NaN does not come back at the same iteration). Cured: the same run
  without the fault: the loss 0.73 to 0.44, the error 0.157 to 0.012."""
  x, y = noisy_speech(seed)
  return cases.Setup(rnnoise_lite(seed, fault=None if cured else 80),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     stream(x, y, batch=32, seed=seed), 'regression')


@add('blind34_mismatch_masknet_softmax_one_unit', 'loss_output_mismatch', 'masknet_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#126; keras-team/keras#2975')
def _(seed, cured=False):
  """A MaskNet-lite (field embeddings, three MaskBlocks of instance-guided masks) predicting
  clicks, Adam at 1e-3, the output Dense(1, activation='softmax') with binary_crossentropy (the
  threads' one-unit softmax): a softmax over one unit is 1.0 whatever the input, so every
  prediction says "click" (in a plain Keras fit the logged loss falls as the cured run's, 0.69
  to 0.65, Keras reading the logits behind the activation, but the outputs never move): no NaN,
  no training (the error 0.504 before and after; the constant answer's 0.496). Seed 1: the same
  (the loss 0.70 to 0.64; the error 0.504 before and after). keras-team/keras#126 (an MLP with
  Dense(64, 1, activation='softmax') makes no progress; predict_proba gives all ones);
  keras-team/keras#2975 (a binary model always predicts the same class; solved by a sigmoid
  output in place of softmax). Cured: Dense(1, sigmoid): the loss 0.69 to 0.65, the error 0.52
  to 0.26."""
  x, y = click_log(seed)
  return cases.Setup(masknet_lite(seed, activation='sigmoid' if cured else 'softmax'),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     stream(x, y, batch=64, seed=seed), 'binary_prob')


@add('blind34_lr_gatenet_adam_high', 'learning_rate', 'gatenet_lite', doors=('trainer', 'fit'),
     steps=150, citation='CharlieDinh/pFedMe#11; pavancm/CONTRIQUE#8')
def _(seed, cured=False):
  """A GateNet-lite (field embeddings scaled by embedding gates, an MLP of 128 and 64 with hidden
  gates, the click logit) predicting clicks, Adam at 0.1: the first steps saturate the sigmoid
  gates and kill the ReLUs, the net collapses to a constant guess: the loss 0.69 at step 0,
  0.75 at step 2, 0.70 at step 50 and 149, no NaN, no training (the error 0.50 before and
  after; the constant answer's 0.50). Seed 1: 0.69, 0.83, 0.71, 0.72 (the error 0.50 before and
  after). CharlieDinh/pFedMe#11 (the training loss is NaN when the learning rate is large);
  pavancm/CONTRIQUE#8 (a NaN loss in the second epoch: reduce the learning rate). Cured: Adam
  at 1e-3: the loss 0.69 to 0.66, the error 0.50 to 0.27."""
  x, y = click_log(seed)
  return cases.Setup(gatenet_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.1),
                     keras.losses.BinaryCrossentropy(from_logits=True),
                     stream(x, y, batch=64, seed=seed), 'binary_logit')
