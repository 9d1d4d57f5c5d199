"""A forty-eighth blind set of sick scenarios (the 'blind48' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind46.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in three domains: 3D point clouds and meshes (a
VoxNet-lite shape classifier, a MeshNet-lite mesh classifier, a KPConv-lite point-cloud
classifier), molecules and materials (a D-MPNN-lite (Chemprop) property model, a
PaiNN-lite equivariant model, a DeePMD-lite atomic network, a DimeNet-lite
directional message-passing model, a Roost-lite composition model) and satellite remote sensing
(a PSE-lite Sentinel-2 crop classifier, a SpectralFormer-lite hyperspectral classifier, a
DeepSat-lite aerial patch classifier). Each builder takes `cured`: the same run with the thread's
remedy (the registry calls `build(seed)`, the sick run). Each was checked with plain Keras
`compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the cured twin
passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND48 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND48.add` with split='blind48'."""
  return BLIND48.add(name, expected, arch, split='blind48', **fields)


# --- Data of this file. -------------------------------------------------------------------------

ATOMS = 12  # Atoms per molecule, padded.
ELEMENTS = 5  # H, C, N, O, F.


def conformers(seed, *, rows=2048):
  """Small molecules in miniature (a QM9-like set): 6 to 12 atoms of five elements grown as a
  tree (each new atom bonded to an earlier one with fewer than four bonds, 1.0 to 1.5 A away,
  no two atoms closer than 0.9 A), padded to 12 atoms with zeros (the padding atoms at the
  origin, as padded batches have them). Per atom: the element one-hot (5), x, y, z (A) and a
  mask (1 for a real atom): (rows, 12, 9). The target (standardised): a sum of per-element
  terms, per-bond terms by element pair and a Morse-like term of each bond length, an
  'atomisation energy' that the graph and the geometry both tell."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, ATOMS, ELEMENTS + 4), np.float32)
  atom_e = np.array([-0.5, -1.0, -0.8, -0.9, -0.3])
  pair_e = rng.uniform(-1.0, 0.0, (ELEMENTS, ELEMENTS))
  pair_e = (pair_e + pair_e.T) / 2
  y = np.zeros(rows)
  for r in range(rows):
    n = rng.randint(6, ATOMS + 1)
    kinds = rng.choice(ELEMENTS, n, p=[0.35, 0.35, 0.1, 0.15, 0.05])
    pos = np.zeros((n, 3))
    degree = np.zeros(n, int)
    bonds = []
    for a in range(1, n):
      for _ in range(50):
        b = rng.choice([i for i in range(a) if degree[i] < 4])
        d = rng.uniform(1.0, 1.5)
        v = rng.randn(3)
        p = pos[b] + d * v / np.linalg.norm(v)
        if np.min(np.linalg.norm(pos[:a] - p, axis=1)) > 0.9:
          break
      pos[a] = p
      degree[a] += 1
      degree[b] += 1
      bonds.append((a, b, d))
    pos -= pos.mean(0)
    e = atom_e[kinds].sum()
    for a, b, d in bonds:
      e += pair_e[kinds[a], kinds[b]] * (1 - np.exp(-2.0 * (d - 1.25))) ** 2 + pair_e[
          kinds[a], kinds[b]]
    x[r, :n, :ELEMENTS] = np.eye(ELEMENTS)[kinds]
    x[r, :n, ELEMENTS:ELEMENTS + 3] = pos
    x[r, :n, -1] = 1.0
    y[r] = e
  y = (y - y.mean()) / y.std()
  return x, y[:, None].astype(np.float32)


def _split_atoms(x):
  """(element one-hot, positions, mask) of packed atoms (batch, atoms, 9)."""
  return x[..., :ELEMENTS], x[..., ELEMENTS:ELEMENTS + 3], x[..., -1:]


def _shape_surface(rng, kind, n):
  """`n` points on a unit primitive (0 sphere, 1 cube, 2 cylinder, 3 cone) and their normals."""
  if kind == 0:
    p = rng.randn(n, 3)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    return p, p.copy()
  if kind == 1:
    face = rng.randint(0, 6, n)
    p = rng.uniform(-0.7, 0.7, (n, 3))
    axis, sign = face % 3, np.where(face < 3, 1.0, -1.0)
    p[np.arange(n), axis] = 0.7 * sign
    normal = np.zeros((n, 3))
    normal[np.arange(n), axis] = sign
    return p, normal
  t = rng.uniform(0, 2 * np.pi, n)
  h = rng.uniform(-0.8, 0.8, n)
  radius = 0.7 if kind == 2 else 0.7 * (0.8 - h) / 1.6
  p = np.stack([radius * np.cos(t), radius * np.sin(t), h], 1)
  normal = np.stack([np.cos(t), np.sin(t), np.full(n, 0.0 if kind == 2 else 0.44)], 1)
  return p, normal / np.linalg.norm(normal, axis=1, keepdims=True)


def _rotation_z(rng):
  a = rng.uniform(0, 2 * np.pi)
  return np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])


def voxel_shapes(seed, *, rows=1536, grid=16, points=512):
  """ModelNet-like objects in miniature: 512 surface points of a sphere, cube, cylinder or cone
  (scaled 0.7 to 1.0, turned about the vertical, jittered) voxelised into a 16^3 occupancy grid
  as VoxNet takes them. ((rows, 16, 16, 16, 1) occupancy, the shape (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 4, rows).astype(np.int32)
  x = np.zeros((rows, grid, grid, grid, 1), np.float32)
  for r in range(rows):
    p, _ = _shape_surface(rng, y[r], points)
    p = p @ _rotation_z(rng).T * rng.uniform(0.7, 1.0) + 0.02 * rng.randn(points, 3)
    idx = np.clip(((p + 1) / 2 * grid).astype(int), 0, grid - 1)
    x[r, idx[:, 0], idx[:, 1], idx[:, 2], 0] = 1.0
  return x, y


def mesh_faces(seed, *, rows=1536, faces=128):
  """Meshes in miniature, as MeshNet reads them: per face its centre (3), the three corner
  vectors from the centre (9) and the unit normal (3) of a triangle on a sphere, cube, cylinder
  or cone (scaled, turned, jittered). ((rows, 128, 15), the shape (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 4, rows).astype(np.int32)
  x = np.zeros((rows, faces, 15), np.float32)
  for r in range(rows):
    c, normal = _shape_surface(rng, y[r], faces)
    rot = _rotation_z(rng)
    s = rng.uniform(0.7, 1.0)
    c, normal = c @ rot.T * s, normal @ rot.T
    t1 = np.cross(normal, rng.randn(faces, 3))
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    t2 = np.cross(normal, t1)
    corners = [0.08 * (np.cos(a) * t1 + np.sin(a) * t2) for a in (0, 2.1, 4.2)]
    x[r] = np.concatenate([c] + corners + [normal], 1) + 0.01 * rng.randn(faces, 15)
  return x, y


def shape_clouds(seed, *, rows=1536, points=128):
  """ModelNet-like objects as point clouds in miniature: 128 surface points of a sphere, cube,
  cylinder or cone (scaled 0.7 to 1.0, turned about the vertical, jittered).
  ((rows, 128, 3), the shape (rows,))."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, 4, rows).astype(np.int32)
  x = np.zeros((rows, points, 3), np.float32)
  for r in range(rows):
    p, _ = _shape_surface(rng, y[r], points)
    x[r] = p @ _rotation_z(rng).T * rng.uniform(0.7, 1.0) + 0.02 * rng.randn(points, 3)
  return x, y


def parcel_pixels(seed, *, rows=2048, pixels=32, bands=10, classes=6):
  """Sentinel-2 crop parcels in miniature (an S2-Agri-like set, one date): for each parcel a set
  of 32 of its pixels, ten bands of surface reflectance x 10000 as the L2A product stores them
  (each crop its own spectrum, 0.02 to 0.5, the parcel's brightness varying +/-30% with soil and
  slope, the pixels +/-5% about the parcel). ((rows, 32, 10), the crop (rows,))."""
  rng = np.random.RandomState(seed)
  w = np.linspace(0, 1, bands)
  spectra = np.stack([0.05 + 0.3 / (1 + np.exp(-(w - rng.uniform(0.3, 0.6)) * rng.uniform(8, 20)))
                      * rng.uniform(0.3, 1.0) + 0.05 * np.sin(2 * np.pi * w * rng.uniform(1, 3))
                      for _ in range(classes)])
  y = rng.randint(0, classes, rows).astype(np.int32)
  parcel = spectra[y] * rng.uniform(0.7, 1.3, (rows, 1))
  x = parcel[:, None, :] * (1 + 0.05 * rng.randn(rows, pixels, bands))
  return (np.clip(x, 0.005, 1) * 10000).astype(np.float32), y


def hyperspectral_pixels(seed, *, rows=4096, bands=64, classes=8, nodata=0.0):
  """Hyperspectral pixels in miniature (an Indian-Pines-like scene): 64-band reflectance
  spectra mixed from eight classes' endmembers (smooth spectra with absorption dips), 10% of
  another class mixed in, brightness varying +/-20%, 1% noise; a share `nodata` of the pixels
  (the scene's no-data border and bad detector lines) NaN in every band, as the GeoTIFF's
  masked values are read. ((rows, 64), the class (rows,))."""
  rng = np.random.RandomState(seed)
  w = np.linspace(0, 1, bands)
  ends = np.stack([0.3 + 0.2 * np.sin(2 * np.pi * (rng.uniform(0.5, 2) * w + rng.uniform()))
                   - 0.2 * np.exp(-((w - rng.uniform(0.2, 0.9)) / 0.05) ** 2)
                   for _ in range(classes)])
  y = rng.randint(0, classes, rows).astype(np.int32)
  other = rng.randint(0, classes, rows)
  x = (0.9 * ends[y] + 0.1 * ends[other]) * rng.uniform(0.8, 1.2, (rows, 1))
  x = (x + 0.01 * rng.randn(rows, bands)).astype(np.float32)
  x[rng.rand(rows) < nodata] = np.nan
  return x, y


def sat_patches(seed, *, rows=2048, size=28):
  """SAT-6-like aerial patches in miniature (28 x 28, red, green, blue and near infrared in
  [0, 1]) and whether a building is in it: textured ground (vegetation bright in the NIR, bare
  soil or roads) with, in about half of them, one to three bright rectangular roofs (low NIR)
  and their shadows. ((rows, 28, 28, 4), (rows, 1) building or not)."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  y = (rng.rand(rows) < 0.5).astype(np.float32)
  x = np.zeros((rows, size, size, 4), np.float32)
  for r in range(rows):
    veg = np.clip(0.5 + 0.4 * np.sin(xx / rng.uniform(2, 6) + rng.uniform(0, 6)) *
                  np.sin(yy / rng.uniform(2, 6)), 0, 1)
    img = np.stack([0.2 + 0.1 * (1 - veg), 0.25 + 0.05 * veg, 0.2 + 0.1 * (1 - veg),
                    0.3 + 0.4 * veg], -1)
    if y[r]:
      for _ in range(rng.randint(1, 4)):
        h, w = rng.randint(4, 10, 2)
        top, left = rng.randint(0, size - h), rng.randint(0, size - w)
        img[top + h // 2 + 2:top + h + 2, left + 2:left + w + 2] *= 0.5  # The shadow.
        img[top:top + h, left:left + w] = [0.6, 0.6, 0.62, 0.35] + 0.05 * rng.randn(4)
    x[r] = np.clip(img + 0.03 * rng.randn(size, size, 4), 0, 1)
  return x, y[:, None]


def compositions(seed, *, rows=2048, elements=24, slots=4):
  """Inorganic compositions in miniature (a Materials-Project-like band-gap set): two to four
  of 24 elements with fractions (stoichiometry / total); each element a hidden electronegativity
  and radius; the band gap (eV, 0 to about 6, a third of them metals at 0) grows with the
  spread of electronegativity. ((rows, 4, 25): element one-hot and fraction, (rows, 1) gap)."""
  rng = np.random.RandomState(seed)
  chi = rng.uniform(0.8, 4.0, elements)
  rad = rng.uniform(0.5, 2.5, elements)
  x = np.zeros((rows, slots, elements + 1), np.float32)
  y = np.zeros((rows, 1), np.float32)
  for r in range(rows):
    k = rng.randint(2, slots + 1)
    el = rng.choice(elements, k, replace=False)
    amount = rng.randint(1, 5, k).astype(float)
    frac = amount / amount.sum()
    x[r, :k, :elements] = np.eye(elements)[el]
    x[r, :k, -1] = frac
    mean_chi = (frac * chi[el]).sum()
    spread = np.sqrt((frac * (chi[el] - mean_chi) ** 2).sum())
    gap = 4.0 * spread - 0.6 * (frac * rad[el]).sum() + 0.8
    y[r, 0] = max(gap, 0.0)
  return x, y


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


class BondMessages(L.Layer):
  """Chemprop's directed message passing (D-MPNN), in miniature: bonds are atom pairs closer
  than 1.6 A; each directed bond's hidden state starts as W_i [atom_v, atom_w] and is updated
  `depth` times with the sum of the messages coming into its source atom (less its reverse),
  h_vw = ReLU(h0_vw + W_m sum_{k in N(v), k != w} h_kv), as the paper writes it (sum, no
  normalisation); the atoms then sum their incoming bonds."""

  def __init__(self, hidden=64, depth=6, **kwargs):
    super().__init__(**kwargs)
    self.hidden, self.depth = hidden, depth
    self.w_i = L.Dense(hidden, use_bias=False)
    self.w_m = L.Dense(hidden, use_bias=False)
    self.w_a = L.Dense(hidden, activation='relu')

  def call(self, x):
    kinds, pos, mask = _split_atoms(x)
    d = tf.norm(pos[:, :, None] - pos[:, None, :] + 1e-9, axis=-1)
    real = mask * tf.transpose(mask, [0, 2, 1])
    eye = tf.eye(ATOMS, batch_shape=[1])
    bond = tf.cast(d < 1.6, x.dtype) * real * (1 - eye)  # bond[v, w]: v - w.
    n = ATOMS
    pair = tf.concat([tf.tile(kinds[:, :, None], [1, 1, n, 1]),
                      tf.tile(kinds[:, None, :], [1, n, 1, 1])], -1)  # [v, w]: (atom v, atom w)
    h0 = self.w_i(pair) * bond[..., None]
    h = tf.nn.relu(h0)
    for _ in range(self.depth):
      incoming = tf.einsum('bkv,bkvc->bvc', bond, h)  # Sum over k -> v.
      m = incoming[:, :, None, :] - tf.transpose(h, [0, 2, 1, 3])  # Less the reverse w -> v.
      h = tf.nn.relu(h0 + self.w_m(m)) * bond[..., None]
    atoms = self.w_a(tf.concat([kinds, tf.einsum('bkv,bkvc->bvc', bond, h)], -1)) * mask
    return tf.reduce_sum(atoms, 1)


def dmpnn(seed, *, hidden=64, depth=6):
  """A D-MPNN-lite (Yang et al., 2019: Chemprop), in miniature: `BondMessages` (depth 6,
  hidden 64), the atoms summed into the molecule, a feed-forward head (Dense 64 ReLU, Dense 1)."""
  _seed(seed)
  x = keras.Input((ATOMS, ELEMENTS + 4))
  h = BondMessages(hidden, depth)(x)
  return keras.Model(x, L.Dense(1)(L.Dense(64, activation='relu')(h)), name='dmpnn_lite')


def voxnet(seed):
  """A VoxNet-lite (Maturana and Scherer, 2015), in miniature: a 3D convolution of 16 5^3
  filters with stride 2, one of 16 3^3 filters, 2^3 max-pooling, Dense 64 ReLU and Dense 4
  (logits): the object's class from its occupancy grid."""
  _seed(seed)
  x = keras.Input((16, 16, 16, 1))
  h = L.Conv3D(16, 5, strides=2, padding='same', activation='relu')(x)
  h = L.MaxPooling3D(2)(L.Conv3D(16, 3, padding='same', activation='relu')(h))
  h = L.Dense(64, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(4)(h), name='voxnet_lite')


def meshnet(seed, *, init='glorot_uniform'):
  """A MeshNet-lite (Feng et al., 2019), in miniature: a spatial descriptor of each face's
  centre (shared MLP 32, 32), a structural descriptor of its corner vectors and normal (shared
  MLP 32, 32), a mesh convolution over both (shared MLP 64), max-pooled over the faces, Dense 64
  ReLU and Dense 4 (logits). Every kernel drawn from `init`."""
  _seed(seed)
  dense = lambda n, act='relu': L.Dense(n, activation=act, kernel_initializer=init)
  x = keras.Input((128, 15))
  spatial = dense(32)(dense(32)(x[..., :3]))
  structural = dense(32)(dense(32)(x[..., 3:]))
  h = dense(64)(L.Concatenate()([spatial, structural]))
  h = dense(64)(L.GlobalMaxPooling1D()(h))
  return keras.Model(x, dense(4, None)(h), name='meshnet_lite')


class PaiNNBlock(L.Layer):
  """PaiNN's message and update in miniature (Schuett, Unke and Gastegger, 2021): scalar
  features s and vector features v (per atom, 3 x F); messages from every other atom within 5 A
  weighted by a radial filter of the distance (sine basis, cosine cutoff), the vector messages
  along the unit vector r_ij / |r_ij|; the update mixes |v| into s. `eps`: added under the
  square root of the squared distance (None: tf.norm of r_ij as written, |0| = 0 on the
  diagonal and between padding atoms, r / |r| = 0 / 0 there)."""

  def __init__(self, features=32, eps=None, **kwargs):
    super().__init__(**kwargs)
    self.features, self.eps = features, eps
    self.phi = L.Dense(3 * features)
    self.filt = L.Dense(3 * features)
    self.u = L.Dense(features, use_bias=False)
    self.upd = L.Dense(2 * features)

  def call(self, inputs):
    s, v, pos, mask = inputs
    r = pos[:, None, :, :] - pos[:, :, None, :]  # r_ij = x_j - x_i: (b, i, j, 3).
    if self.eps is None:
      d = tf.norm(r, axis=-1, keepdims=True)
    else:
      d = tf.sqrt(tf.reduce_sum(tf.square(r), -1, keepdims=True) + self.eps)
    unit = r / d
    cutoff = 0.5 * (tf.cos(np.pi * tf.minimum(d, 5.0) / 5.0) + 1.0)
    n = tf.range(1, 9, dtype=d.dtype)
    basis = tf.sin(n * np.pi * d / 5.0) / d
    pair = (mask[:, :, None, :] * mask[:, None, :, :]) * cutoff
    w = self.filt(basis) * pair  # (b, i, j, 3F)
    x = self.phi(s)[:, None, :, :] * w  # Messages from j.
    ds, dvv, dvs = tf.split(x, 3, axis=-1)
    s = s + tf.reduce_sum(ds, 2)
    v = v + tf.einsum('bijf,bjcf->bicf', dvv, v) + tf.einsum('bijf,bijc->bicf', dvs, unit)
    uv = self.u(v)
    norm = tf.sqrt(tf.reduce_sum(tf.square(uv), 2) + 1e-8)
    a, b = tf.split(self.upd(tf.concat([s, norm], -1)), 2, -1)
    return s + a * mask, v + uv * b[:, :, None, :] * mask[:, :, None, :]


def painn(seed, *, eps=None, features=32, blocks=2):
  """A PaiNN-lite, in miniature: element embedding (Dense 32), two `PaiNNBlock`s, an atom-wise
  Dense 32 SiLU and Dense 1, summed over the real atoms: the molecule's energy."""
  _seed(seed)
  x = keras.Input((ATOMS, ELEMENTS + 4))
  kinds, pos, mask = L.Lambda(lambda t: _split_atoms(t))(x)
  s = L.Dense(features)(kinds)
  v = L.Lambda(lambda t: tf.zeros(tf.concat([tf.shape(t)[:2], [3, features]], 0)))(kinds)
  for _ in range(blocks):
    s, v = PaiNNBlock(features, eps)([s, v, pos, mask])
  e = L.Dense(1)(L.Dense(features, activation='silu')(s))
  out = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], 1))([e, mask])
  return keras.Model(x, out, name='painn_lite')


class KernelPointConv(L.Layer):
  """KPConv's rigid kernel point convolution (Thomas et al., 2019), in miniature: seven kernel
  points (the centre and six at 0.25 along the axes); each neighbour y of a point x adds its
  features through the kernel point x_k's weights W_k with the linear influence
  max(0, 1 - |y - x - x_k| / 0.25), summed over the neighbours (no density normalisation, as
  the paper's convolution has it), then ReLU."""

  def __init__(self, features, **kwargs):
    super().__init__(**kwargs)
    self.features = features
    self.kernel = np.concatenate([np.zeros((1, 3)), 0.25 * np.eye(3), -0.25 * np.eye(3)]
                                 ).astype(np.float32)
    self.w = L.Dense(7 * features, use_bias=False)

  def call(self, inputs):
    pos, feat = inputs
    rel = pos[:, None, :, :] - pos[:, :, None, :]  # y - x: (b, x, y, 3)
    d = tf.norm(rel[:, :, :, None, :] - self.kernel + 1e-9, axis=-1)  # (b, x, y, 7)
    h = tf.nn.relu(1.0 - d / 0.25)
    fw = tf.reshape(self.w(feat), [-1, tf.shape(feat)[1], 7, self.features])
    return tf.nn.relu(tf.einsum('bxyk,bykc->bxc', h, fw))


def kpconv(seed, *, points=128):
  """A KPConv-lite classifier, in miniature: two `KernelPointConv`s (32, 64 features) on the
  points (the first on a constant feature, as KPConv starts), summed over the points,
  Dense 64 ReLU and Dense 4: the class scores (logits)."""
  _seed(seed)
  x = keras.Input((points, 3))
  ones = L.Lambda(lambda t: tf.ones_like(t[..., :1]))(x)
  f = KernelPointConv(32)([x, ones])
  f = KernelPointConv(64)([x, f])
  h = L.Dense(64, activation='relu')(L.Lambda(lambda t: tf.reduce_sum(t, 1))(f))
  return keras.Model(x, L.Dense(4)(h), name='kpconv_lite')


class SpectralStandardise(L.Layer):
  """Each pixel's spectrum standardised across its bands by hand (the brightness removed, the
  shape kept), as the thread's preprocessing layer has it: (x - mean) / sqrt(E[x^2] - mean^2 +
  eps), in the layer's compute dtype."""

  def call(self, x):
    mean = tf.reduce_mean(x, -1, keepdims=True)
    var = tf.reduce_mean(tf.square(x), -1, keepdims=True) - tf.square(mean)
    return (x - mean) / tf.sqrt(var + 1e-3)


def pse(seed, *, standardise_dtype=None, classes=6):
  """A PSE-lite (Garnot et al., 2020: the pixel-set encoder of PSE-TAE), in miniature:
  `SpectralStandardise` (in `standardise_dtype`; None: the policy's), a shared MLP over the
  pixels (Dense 32, 64 ReLU), the set pooled by its mean and standard deviation, Dense 64 ReLU
  and Dense(`classes`) logits in float32 (as the mixed-precision guide puts the output)."""
  _seed(seed)
  x = keras.Input((32, 10))
  h = SpectralStandardise(dtype=standardise_dtype)(x)
  h = L.Dense(64, activation='relu')(L.Dense(32, activation='relu')(h))
  mean = L.GlobalAveragePooling1D()(h)
  std = L.Lambda(lambda t: tf.sqrt(tf.reduce_mean(tf.square(t[0] - t[1][:, None]), 1) + 1e-3))(
      [h, mean])
  h = L.Dense(64, activation='relu')(L.Concatenate()([mean, std]))
  return keras.Model(x, L.Dense(classes, dtype='float32')(h), name='pse_lite')


def spectralformer(seed, *, bands=64, group=8, dim=32, classes=8):
  """A SpectralFormer-lite (Hong et al., 2022), in miniature: group-wise spectral embedding
  (each band with its neighbours within `group`, as overlapping windows: Conv1D of `dim` with
  stride 4), a class token-free transformer block (4-head attention, MLP 64, layer norms) and
  mean pooling, Dense(`classes`) logits: the pixel's land cover."""
  _seed(seed)
  x = keras.Input((bands,))
  t = L.Conv1D(dim, group, strides=4, padding='same')(L.Reshape((bands, 1))(x))
  a = L.MultiHeadAttention(4, dim // 4)(L.LayerNormalization()(t), L.LayerNormalization()(t))
  t = t + a
  t = t + L.Dense(dim)(L.Dense(64, activation='gelu')(L.LayerNormalization()(t)))
  h = L.GlobalAveragePooling1D()(L.LayerNormalization()(t))
  return keras.Model(x, L.Dense(classes)(h), name='spectralformer_lite')


def deepsat(seed, *, output_activation='sigmoid'):
  """A DeepSat-lite (Basu et al., 2015: the SAT-4/SAT-6 classifiers), in miniature: two 3x3 ReLU
  convolutions (16, 32) with 2x poolings, Dense 64 ReLU and Dense(1) with `output_activation`:
  whether the patch holds a building."""
  _seed(seed)
  x = keras.Input((28, 28, 4))
  h = L.MaxPooling2D()(L.Conv2D(16, 3, padding='same', activation='relu')(x))
  h = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(h))
  h = L.Dense(64, activation='relu')(L.Flatten()(h))
  return keras.Model(x, L.Dense(1, activation=output_activation)(h), name='deepsat_lite')


class RadialSymmetry(L.Layer):
  """Behler-Parrinello radial symmetry functions G2 = sum_j exp(-eta (r_ij - r_s)^2) fc(r_ij)
  (eight shells r_s from 0.8 to 4.0 A, eta 4, cosine cutoff at 5 A), summed separately over the
  neighbours of each element: each atom's environment (8 x 5 numbers)."""

  def call(self, x):
    kinds, pos, mask = _split_atoms(x)
    d = tf.sqrt(tf.reduce_sum(tf.square(pos[:, :, None] - pos[:, None, :]), -1) + 1e-9)
    pair = mask * tf.transpose(mask, [0, 2, 1]) * (1 - tf.eye(ATOMS, batch_shape=[1]))
    fc = 0.5 * (tf.cos(np.pi * tf.minimum(d, 5.0) / 5.0) + 1.0) * pair
    shells = tf.linspace(0.8, 4.0, 8)
    g = tf.exp(-4.0 * tf.square(d[..., None] - shells)) * fc[..., None]  # (b, i, j, 8)
    return tf.reshape(tf.einsum('bijs,bje->bise', g, kinds), [-1, ATOMS, 8 * ELEMENTS])


def deepmd(seed):
  """A DeePMD-lite (Zhang et al., 2018: Deep Potential), in miniature: a smooth radial
  environment descriptor per atom (`RadialSymmetry`, with the atom's element), an
  element-shared fitting net of two tanh layers of 32 (DeePMD's default activation) and
  Dense 1, summed over the real atoms: the energy."""
  _seed(seed)
  x = keras.Input((ATOMS, ELEMENTS + 4))
  g = RadialSymmetry()(x)
  kinds = L.Lambda(lambda t: t[..., :ELEMENTS])(x)
  mask = L.Lambda(lambda t: t[..., -1:])(x)
  h = L.Concatenate()([g, kinds])
  h = L.Dense(32, activation='tanh')(L.Dense(32, activation='tanh')(h))
  e = L.Dense(1)(h)
  out = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], 1))([e, mask])
  return keras.Model(x, out, name='deepmd_lite')


class DirectionalMessages(L.Layer):
  """DimeNet's directional message passing, in miniature (Gasteiger, Gross and Guennemann, 2020):
  a message m_ji per atom pair within 5 A from the two atoms and a radial Bessel basis of their
  distance; each interaction adds to m_ji the messages m_kj coming into j, weighted by a basis
  of the angle k-j-i (Legendre polynomials P0 to P3 of its cosine) and the distance; the atoms
  then sum their incoming messages."""

  def __init__(self, features=32, blocks=2, **kwargs):
    super().__init__(**kwargs)
    self.features, self.blocks = features, blocks
    self.embed = L.Dense(features, activation='silu')
    self.rbf = L.Dense(features, use_bias=False)
    self.angle = [L.Dense(4 * features, use_bias=False) for _ in range(blocks)]
    self.update = [L.Dense(features, activation='silu') for _ in range(blocks)]

  def call(self, x):
    kinds, pos, mask = _split_atoms(x)
    r = pos[:, None, :, :] - pos[:, :, None, :]  # r[j, i] = x_i - x_j.
    d = tf.sqrt(tf.reduce_sum(tf.square(r), -1) + 1e-9)
    pair = mask * tf.transpose(mask, [0, 2, 1]) * (1 - tf.eye(ATOMS, batch_shape=[1]))
    pair *= tf.cast(d < 5.0, x.dtype)
    n = tf.range(1, 7, dtype=d.dtype)
    bessel = tf.sin(n * np.pi * d[..., None] / 5.0) / d[..., None]
    n_at = ATOMS
    both = tf.concat([tf.tile(kinds[:, :, None], [1, 1, n_at, 1]),
                      tf.tile(kinds[:, None, :], [1, n_at, 1, 1]), bessel], -1)
    m = self.embed(both) * self.rbf(bessel) * pair[..., None]  # m[j, i]
    unit = r / d[..., None]
    # cos of the angle k-j-i: between r[j, k] and r[j, i].
    cos = tf.einsum('bjkc,bjic->bkji', unit, unit)
    legendre = tf.stack([tf.ones_like(cos), cos, 0.5 * (3 * cos ** 2 - 1),
                         0.5 * (5 * cos ** 3 - 3 * cos)], -1)  # (b, k, j, i, 4)
    legendre *= (pair[:, :, :, None] * pair[:, None, :, :])[..., None]  # k-j and j-i bonds.
    for angle, update in zip(self.angle, self.update):
      a = tf.reshape(angle(m), [-1, n_at, n_at, 4, self.features])  # From m[k, j].
      incoming = tf.einsum('bkjil,bkjlf->bjif', legendre, a)
      m = m + update(tf.concat([m, incoming], -1)) * pair[..., None]
    return tf.reduce_sum(m, 1) * mask  # Atom i sums m[j, i] over j.


def dimenet(seed, *, fault=None):
  """A DimeNet-lite, in miniature: `DirectionalMessages` (32 features, two interactions), an
  atom-wise Dense 32 SiLU and Dense 1 summed over the atoms; `fault`: a `field.OneOffFault`
  after the message passing, its `fault`-th training call (None: none)."""
  _seed(seed)
  x = keras.Input((ATOMS, ELEMENTS + 4))
  h = DirectionalMessages()(x)
  h = field.OneOffFault(fault, index=5)(h)
  e = L.Dense(1)(L.Dense(32, activation='silu')(h))
  mask = L.Lambda(lambda t: t[..., -1:])(x)
  out = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], 1))([e, mask])
  return keras.Model(x, out, name='dimenet_lite')


class WeightedAttentionPool(L.Layer):
  """Roost's weighted soft attention (Goodall and Lee, 2020), in miniature: each element's
  message from every other element of the composition, the attention weights (softmax of a
  Dense of the pair, the max subtracted) scaled by the other element's fraction."""

  def __init__(self, features=64, **kwargs):
    super().__init__(**kwargs)
    self.gate = L.Dense(1)
    self.msg = L.Dense(features, activation='relu')

  def call(self, inputs):
    h, frac, present = inputs
    n = tf.shape(h)[1]
    pair = tf.concat([tf.tile(h[:, :, None], [1, 1, n, 1]), tf.tile(h[:, None], [1, n, 1, 1])],
                     -1)
    g = tf.squeeze(self.gate(pair), -1)
    g = g + tf.math.log(frac[:, None, :, 0] + 1e-9)  # Weighted by the fraction.
    g = tf.where(present[:, None, :, 0] > 0, g, -1e9)
    w = tf.nn.softmax(g, -1)
    return h + tf.einsum('bij,bijf->bif', w, self.msg(pair))


def roost(seed, *, output_activation='sigmoid', features=64):
  """A Roost-lite, in miniature: an element embedding (Dense 64) with the fraction, two
  `WeightedAttentionPool`s, fraction-weighted pooling, a residual head (Dense 64 ReLU) and
  Dense(1) with `output_activation`: the band gap (eV)."""
  _seed(seed)
  x = keras.Input((4, 25))
  frac = L.Lambda(lambda t: t[..., -1:])(x)
  present = L.Lambda(lambda t: tf.reduce_max(t[..., :-1], -1, keepdims=True))(x)
  h = L.Dense(features)(x)
  for _ in range(2):
    h = WeightedAttentionPool(features)([h, frac, present])
  pooled = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1], 1))([h, frac])
  h = L.Dense(64, activation='relu')(pooled)
  return keras.Model(x, L.Dense(1, activation=output_activation)(h), name='roost_lite')


# --- The scenarios. ----------------------------------------------------------------------------


@add('blind48_explode_dmpnn_sum_messages', 'exploding_gradients', 'dmpnn_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='cvignac/SMP#3; aimat-lab/gcnn_keras#42')
def _(seed, cured=False):
  """A D-MPNN-lite (Chemprop's directed bond messages, summed, depth 6, no normalisation)
  predicting a small molecule's atomisation energy (standardised) from its graph, MSE, SGD at
  0.01 with momentum 0.9 and no gradient clipping: the summed messages grow with each of the six
  passes, the gradients with them, and the loss blows up: 9.4e3 at step 0, NaN from step 1,
  the weights NaN (the error 4.2e3 before, inf after; the constant answer's 0.98). Seed 1: 2.6e5,
  NaN from step 1 (1.7e4 before, inf after; the constant's 1.16). cvignac/SMP#3 (a message-passing
  model's loss turns NaN: the activations explode, too many layers without normalisation;
  gradient clipping solved it); aimat-lab/gcnn_keras#42 (NaN loss with DMPNN and PAiNN in kgcnn:
  normalisation or clipping the gradient to avoid the explosion). Cured: clipnorm=1.0 in the
  same SGD: the loss 9.4e3 to 0.078, the error 4.2e3 to 0.076."""
  x, y = conformers(seed)
  opt = keras.optimizers.SGD(0.01, momentum=0.9, clipnorm=1.0 if cured else None)
  return cases.Setup(dmpnn(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind48_lr_voxnet_sgd_one', 'learning_rate', 'voxnet_lite', doors=('trainer', 'fit'),
     steps=200, citation='keras-team/keras#2711; thtrieu/darkflow#118')
def _(seed, cured=False):
  """A VoxNet-lite classifying voxelised objects (sphere, cube, cylinder, cone; 16^3 occupancy)
  with sparse categorical cross-entropy on logits, SGD with momentum 0.9 at 1.0 (a hundred
  times VoxNet's 0.01): the first updates throw the weights out, the ReLUs die and the loss
  jumps about ln 4 = 1.39 to the end (1.38 at step 0, 1.51 at step 100, 1.39 at step 199); the
  model is no better than the commonest class (the error 0.76 before, 0.84 after; the constant
  answer's 0.69). Seed 1: 1.38, 1.45, 1.42 (0.68 before, 0.74 after; the constant's 0.71).
  keras-team/keras#2711 (the loss does not change while training: lower the learning rate, at 0.1
  it has converged after the first epoch and nothing changes afterwards); thtrieu/darkflow#118
  (the loss oscillates and does not go down: decrease the learning rate). Cured: SGD at 0.01 with
  momentum 0.9 (VoxNet's): the loss 1.38 to 0.0016, the error 0.76 to 0.00."""
  x, y = voxel_shapes(seed)
  opt = keras.optimizers.SGD(0.01 if cured else 1.0, momentum=0.9)
  return cases.Setup(voxnet(seed), opt,
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind48_init_meshnet_zeros', 'initialisation', 'meshnet_lite', doors=('trainer', 'fit'),
     steps=200, citation='BVLC/caffe#2937; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A MeshNet-lite classifying meshes (sphere, cube, cylinder, cone) from their faces, every
  kernel initialised to zeros (as in the thread's code), sparse categorical cross-entropy on
  logits, Adam at 1e-3: every hidden unit computes 0, every ReLU's gradient is 0, only the
  last bias moves, and the model answers the class prior for every mesh: the loss falls to
  ln 4 and stays (1.386 at step 0, 1.382 at step 100, 1.386 at step 199; the error 0.72
  before, 0.69 after, the constant answer's 0.69). Seed 1: the same (0.74 before, 0.71 after;
  the constant's 0.71). BVLC/caffe#2937 (a CNN learns nothing, all zeros as output);
  wagonhelm/NaNmnist#2
  (all-zero initialisation: every neuron computes the same output and gets the same gradient,
  deep nets need a random initialisation). Cured: glorot_uniform kernels (Keras's default): the
  loss 1.40 to 0.0022, the error 0.69 to 0.00."""
  x, y = mesh_faces(seed)
  init = 'glorot_uniform' if cured else 'zeros'
  return cases.Setup(meshnet(seed, init=init), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind48_div_painn_zero_distance_unit_vector', 'division_or_log', 'painn_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='atomistic-machine-learning/schnetpack#6; pytorch/pytorch#2421')
def _(seed, cured=False):
  """A PaiNN-lite predicting a small molecule's energy from its atoms' elements and positions,
  the batch padded to 12 atoms with zeros (the padding atoms at the origin), MSE, Adam at 1e-3;
  the unit vectors r_ij / |r_ij| taken over every atom pair as written: the diagonal and the
  padding pairs have |r_ij| = 0, 0 / 0 is NaN (the mask multiplies it afterwards, NaN x 0 is
  NaN): the loss NaN from step 0, the outputs NaN before and after (the error inf; the constant
  answer's 0.98). Seed 1: the same (the constant's 1.16).
  atomistic-machine-learning/schnetpack#6 (0-padded distances
  of molecules of unequal size: a zero division through the square root; masked);
  pytorch/pytorch#2421 (the gradient of a zero norm is NaN, breaking everything downstream; add
  a small constant). Cured: sqrt(|r|^2 + 1e-9): the loss 22.7 to 0.47, the error 18.4 to
  0.23."""
  x, y = conformers(seed)
  return cases.Setup(painn(seed, eps=1e-9 if cured else None), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind48_softmax_kpconv_handwritten_softmax_ce', 'softmax_overflow', 'kpconv_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='uTensor/uTensor#175; tensorflow/tensorflow#10142')
def _(seed, cured=False):
  """A KPConv-lite classifying point clouds (sphere, cube, cylinder, cone; 128 points), its
  cross-entropy written by hand on a softmax written as exp(z) / sum(exp(z)) (no max
  subtracted), Adam at 1e-3: the kernel convolutions sum over the neighbours and the global
  feature over the points, the class scores are in the hundreds, exp overflows to inf and
  inf / inf is NaN: the loss NaN from step 0, the weights NaN (the error 0.98 before, inf
  after; the constant answer's 0.69). Seed 1: the same (0.80 before, inf after; the constant's
  0.71). uTensor/uTensor#175 (exp() in the
  softmax overflows on logits of a few hundred, the inf gives a NaN result);
  tensorflow/tensorflow#10142 (a loss = NaN suspected from the softmax's exp(x) overflowing;
  use the max-subtracting forms, softmax_cross_entropy_with_logits). Cured: the same
  cross-entropy from the logits (SparseCategoricalCrossentropy(from_logits=True), the max
  subtracted): the loss 30.5 to 0.062, the error 0.98 to 0.047."""
  x, y = shape_clouds(seed)
  loss = (keras.losses.SparseCategoricalCrossentropy(from_logits=True) if cured else
          field.temperature_ce(1.0))
  return cases.Setup(kpconv(seed), keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind48_fp16_pse_spectral_standardise_in_half', 'precision', 'pse_lite',
     doors=('trainer', 'fit'), steps=200, precision='mixed_float16',
     citation='tensorflow/tensorflow#47156; keras-team/keras#11832')
def _(seed, cured=False):
  """A PSE-lite classifying Sentinel-2 crop parcels (sets of 32 pixels, ten bands of surface
  reflectance x 10000 as the L2A product stores them) into six crops, trained under the
  mixed_float16 policy, sparse categorical cross-entropy on logits, Adam at 1e-3; its first
  layer standardises each pixel's spectrum by hand in the compute dtype: the squares of
  reflectances in the hundreds and thousands pass float16's 65504, E[x^2] and mean^2 are inf,
  the variance inf - inf = NaN: the outputs and the loss NaN at every step, every update skipped
  by the loss scaling (in float32 the same model trains). tensorflow/tensorflow#47156 (mixed
  precision: a normalisation layer's variance overflows in float16; the mean and variance should
  be computed in float32); keras-team/keras#11832 (a model that converges in float32 gives an
  infinite loss in float16). Cured: the standardisation layer in float32 (dtype='float32'), the
  rest still float16: the loss 1.79 to 0.0047, the error 0.87 to 0.00. Sick, seeds 0 and 1: NaN
  from step 0, the outputs NaN (the error inf before and after; the constant answer's 0.77,
  0.80)."""
  x, y = parcel_pixels(seed)
  model = pse(seed, standardise_dtype='float32' if cured else None)
  return cases.Setup(model, keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind48_input_spectralformer_nodata_nan', 'bad_input', 'spectralformer_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='NRCan/geo-deep-learning#68; kvos/CoastSat#141')
def _(seed, cured=False):
  """A SpectralFormer-lite classifying hyperspectral pixels (64 bands) into eight land covers,
  sparse categorical cross-entropy on logits, Adam at 1e-3; 3% of the training pixels are the
  scene's no-data (NaN in every band, as the masked GeoTIFF is read), so most batches hold one:
  the first gives a NaN loss and NaN weights (seed 0: 2.60 at step 0, NaN from step 2; the error
  1.00 before, inf after; the constant answer's 0.84. Seed 1: NaN from step 1, 0.76 before, inf
  after). NRCan/geo-deep-learning#68 (NaN and inf values in
  the input images give a NaN loss, nothing learned; write them as 0); kvos/CoastSat#141 (NaN or
  infinity values in the training data: remove those rows). Cured: the no-data pixels dropped:
  the loss 2.46 to 0.014, the error 1.00 to 0.00.
  The measure reads clean pixels (eval_data)."""
  x, y = hyperspectral_pixels(seed, nodata=0.03)
  if cured:
    keep = ~np.isnan(x).any(1)
    x, y = x[keep], y[keep]
  clean, yc = hyperspectral_pixels(seed)
  return cases.Setup(spectralformer(seed), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind48_transient_dimenet_glitch_once', 'transient', 'dimenet_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='PKU-YuanGroup/Open-Sora-Plan#333; allenai/olmoearth_pretrain#135')
def _(seed, cured=False):
  """A DimeNet-lite predicting a small molecule's energy from its atoms' elements and positions,
  MSE, Adam at 1e-3, training normally when one element of the message-passing output reads NaN
  once (`field.OneOffFault` at its 80th training call: a flipped bit, not the data, the model or
  the settings; step 79 of a plain `fit`, step 75 after the measure's four training-mode calls):
  that step's gradient is NaN and the weights NaN from there on (the loss 65.7 at step 0; the
  error 43.4 before, inf after; the constant answer's 0.98). Seed 1: the same step (118 before,
  inf after).
  PKU-YuanGroup/Open-Sora-Plan#333 (a NaN loss after many steps of normal training; the
  maintainers met it too: just resume); allenai/olmoearth_pretrain#135 (the loss goes NaN on an
  anomalous batch: skip the update of that batch). Cured: the same run without the fault: the
  error 43.4 to 0.33."""
  x, y = conformers(seed)
  return cases.Setup(dimenet(seed, fault=None if cured else 80), keras.optimizers.Adam(1e-3),
                     'mse', data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind48_mismatch_deepsat_softmax_one_unit', 'loss_output_mismatch', 'deepsat_lite',
     doors=('trainer', 'fit'), steps=200, citation='keras-team/keras#126; keras-team/keras#4784')
def _(seed, cured=False):
  """A DeepSat-lite telling aerial patches with buildings from those without, its single output
  unit with a softmax and the mean squared error (as the thread's code has them), Adam at 1e-3:
  a softmax over one unit is 1.0 whatever the input, the gradient is zero, the model says
  "building" for every patch and the loss is only the batch's share of patches without one
  (0.56 at step 0, 0.66 at step 100, 0.50 at step 199; the error 0.49 before and after, the
  constant answer's 0.49). Seed 1: the same (0.55 before and after; the constant's 0.45).
  keras-team/keras#126 (a binary
  classifier with Dense(1, activation='softmax'): the loss does not improve, predict_proba
  gives all ones); keras-team/keras#4784 (the model does not match the loss: 0/1 targets need a
  sigmoid output with binary_crossentropy). Cured: a sigmoid output with binary_crossentropy:
  the loss 0.70 to 0.0027, the error 0.51 to 0.00."""
  x, y = sat_patches(seed)
  model = deepsat(seed, output_activation='sigmoid' if cured else 'softmax')
  return cases.Setup(model, keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind48_lr_deepmd_adam_half', 'learning_rate', 'deepmd_lite', doors=('trainer', 'fit'),
     steps=300, citation='KovenYu/MAR#5; facebookresearch/maskrcnn-benchmark#295')
def _(seed, cured=False):
  """A DeePMD-lite (a radial environment descriptor, an element-shared tanh fitting net, summed)
  predicting a small molecule's energy (standardised), MSE, Adam at 0.5: the first steps
  drive the tanh units into saturation and the weights far out, and the model ends no better
  than the mean answer (the loss 5.7 at step 0 and about 0.7 to 1 from step 150 on; the error
  7.7 before, 1.00 after; the constant answer's 0.98). Seed 1: 14.5 to about 1.2 (16.2 before,
  1.35 after; the constant's 1.16). KovenYu/MAR#5 (the default learning rate is too large for
  the batch size: turn it down); facebookresearch/maskrcnn-benchmark#295 (the losses go bad in
  the middle of training: the learning rate too large, training diverges). Cured: Adam at 1e-3:
  the error 7.7 to 0.12."""
  x, y = conformers(seed)
  return cases.Setup(deepmd(seed), keras.optimizers.Adam(1e-3 if cured else 0.5), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind48_mismatch_roost_sigmoid_band_gap', 'loss_output_mismatch', 'roost_lite',
     doors=('trainer', 'fit'), steps=300, citation='codeplea/genann#54; DeepRank/deeprank2#87')
def _(seed, cured=False):
  """A Roost-lite predicting inorganic materials' band gaps (eV, 0 to about 6) from their
  composition, its output Dense(1) with a sigmoid (kept from a classifier), MSE, Adam at 1e-3:
  the sigmoid cannot pass 1 eV while most gaps are larger; the model saturates at 1 and its
  error stays above the constant answer's (5.48 before, 3.63 after; the constant's 2.01). Seed 1:
  4.98 before, 3.24 after (the constant's 1.71). codeplea/genann#54 (the network's outputs are only
  ever 0 or 1 whatever the targets: the sigmoid output returns 0 to 1; use a linear output);
  DeepRank/deeprank2#87 (a sigmoid on a regression output maps the predictions into [0, 1]; only
  bad reasons to do it). Cured: a linear output: the error 8.99 to 0.28."""
  x, y = compositions(seed)
  model = roost(seed, output_activation='linear' if cured else 'sigmoid')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')
