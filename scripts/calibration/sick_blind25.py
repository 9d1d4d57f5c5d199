"""A twenty-fifth blind set of sick scenarios (the 'blind25' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind24.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (a char-RNN-lite, a VDCNN-lite, a deep averaging
network, a deep-retina CNN, a NetVLAD-lite, a SimpleNet-lite, a DeepDTA-lite, a
Shake-Shake-lite, a MalConv-lite and a LinkNet-lite). Each builder takes `cured`: the same run
with the thread's remedy (the registry calls `build(seed)`, the sick run). Each was checked with
plain Keras `compile` + `fit` only: the sick run shows the reported symptom (seeds 0 and 1), the
cured twin passes runner's "did it train" measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND25 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND25.add` with split='blind25'."""
  return BLIND25.add(name, expected, arch, split='blind25', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def char_text(seed, *, rows=4096, context=24, vocab=24):
  """Character streams in miniature for next-character prediction: words drawn from a small
  lexicon of `vocab` - 1 letters (id 0 the space) with a bigram grammar, joined by spaces; each
  row the last `context` characters (the input) and the next character (the label).
  (ids (rows, context), next id)."""
  rng = np.random.RandomState(seed)
  lexicon = [rng.randint(1, vocab, rng.randint(2, 6)) for _ in range(40)]
  follow = rng.randint(0, 40, (40, 3))
  text, w = [], rng.randint(40)
  while len(text) < rows + context + 1:
    text.extend(list(lexicon[w]) + [0])
    w = follow[w, rng.randint(3)]
  text = np.asarray(text)
  starts = rng.randint(0, len(text) - context - 1, rows)
  x = np.stack([text[s:s + context] for s in starts])
  y = text[starts + context]
  return x.astype(np.int32), y.astype(np.int32)


def char_rnn_lite(seed, *, context=24, vocab=24, units=128):
  """A char-RNN-lite (Karpathy's char-rnn, its vanilla 'rnn' cell): an embedding of 16, two
  tanh SimpleRNN layers of `units`, Dense(`vocab`): the next character's logits."""
  _seed(seed)
  x = keras.Input((context,), dtype='int32')
  h = L.Embedding(vocab, 16)(x)
  h = L.SimpleRNN(units, return_sequences=True)(h)
  h = L.SimpleRNN(units)(h)
  return keras.Model(x, L.Dense(vocab)(h), name='char_rnn_lite')


def char_topics(seed, *, rows=4096, length=64, vocab=40, classes=4):
  """Character-level topic classification in miniature (AG News as VDCNN reads it): each class
  has three 4-character keywords planted among random characters (id 0 the padding, never
  drawn). (ids (rows, length), class)."""
  rng = np.random.RandomState(seed)
  keys = rng.randint(1, vocab, (classes, 3, 4))
  y = rng.randint(0, classes, rows)
  x = rng.randint(1, vocab, (rows, length))
  for i in range(rows):
    for _ in range(3):
      k = keys[y[i], rng.randint(3)]
      p = rng.randint(0, length - 4)
      x[i, p:p + 4] = k
  return x.astype(np.int32), y.astype(np.int32)


def vdcnn_lite(seed, *, length=64, vocab=40, classes=4):
  """A VDCNN-lite (Conneau et al., 2017, very deep CNN for text): a character embedding of 16,
  a 3-wide temporal convolution of 64, two convolutional blocks of two 3-wide convolutions (64,
  then 128; BN, ReLU) with max pooling of 2 between, k-max pooling (k = 4), two Dense(128,
  ReLU), Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((length,), dtype='int32')
  h = L.Conv1D(64, 3, padding='same')(L.Embedding(vocab, 16)(x))
  for n in (64, 128):
    for _ in range(2):
      h = L.ReLU()(L.BatchNormalization()(L.Conv1D(n, 3, padding='same')(h)))
    h = L.MaxPooling1D(2)(h)
  h = L.Lambda(lambda t: tf.reshape(tf.math.top_k(tf.transpose(t, [0, 2, 1]), 4).values,
                                    [-1, 4 * 128]))(h)
  h = L.Dense(128, activation='relu')(h)
  h = L.Dense(128, activation='relu')(h)
  return keras.Model(x, L.Dense(classes)(h), name='vdcnn_lite')


def dan_lite(seed, *, seq_len=16, vocab=64, classes=8, init='zeros'):
  """A deep averaging network (Iyyer et al., 2015): word embeddings of 32 averaged over the
  sequence, two Dense(64, ReLU), Dense(`classes`): the logits. The Dense kernels initialised
  with `init` (the thread's 'zeros'; Keras's default glorot_uniform the remedy)."""
  _seed(seed)
  x = keras.Input((seq_len,), dtype='int32')
  h = L.GlobalAveragePooling1D()(L.Embedding(vocab, 32)(x))
  h = L.Dense(64, activation='relu', kernel_initializer=init)(h)
  h = L.Dense(64, activation='relu', kernel_initializer=init)(h)
  return keras.Model(x, L.Dense(classes, kernel_initializer=init)(h), name='dan_lite')


def retina_responses(seed, *, rows=3072, size=12, frames=6, cells=4):
  """Retinal ganglion cell responses in miniature: white-noise movies (`frames` of size x
  size), each cell a linear-nonlinear-Poisson neuron (a centre-surround spatial filter at its
  own place, a biphasic temporal filter, softplus) whose spike count in the bin is the label.
  (movie (rows, size, size, frames), counts (rows, cells))."""
  rng = np.random.RandomState(seed)
  x = rng.randn(rows, size, size, frames).astype(np.float32)
  yy, xx = np.mgrid[0:size, 0:size]
  temporal = np.sin(np.linspace(0, np.pi * 1.5, frames)) * np.exp(-np.arange(frames) / 3.0)
  rates = []
  for _ in range(cells):
    cy, cx = rng.uniform(3, size - 3, 2)
    r2 = (yy - cy) ** 2 + (xx - cx) ** 2
    spatial = np.exp(-r2 / 2.0) - 0.5 * np.exp(-r2 / 8.0)
    spatial *= rng.choice([-1.0, 1.0])
    drive = np.einsum('nhwt,hw,t->n', x, spatial, temporal)
    drive = drive / drive.std()
    rates.append(np.log1p(np.exp(3.0 * drive - 1.0)) * 2.0)
  counts = rng.poisson(np.stack(rates, -1)).astype(np.float32)
  return x, counts


def deep_retina_lite(seed, *, size=12, frames=6, cells=4, activation=None):
  """A deep-retina CNN (McIntosh et al., 2016): the movie's frames as channels, a 5x5
  convolution of 8 (ReLU), a 3x3 convolution of 8 (ReLU), Dense(`cells`, `activation`) (the
  thread's linear output; 'softplus', the remedy, keeps the Poisson rate positive)."""
  _seed(seed)
  x = keras.Input((size, size, frames))
  h = L.Conv2D(8, 5, activation='relu')(x)
  h = L.Conv2D(8, 3, activation='relu')(h)
  return keras.Model(x, L.Dense(cells, activation=activation)(L.Flatten()(h)),
                     name='deep_retina_lite')


class NetVLAD(L.Layer):
  """NetVLAD pooling (Arandjelovic et al., 2016): soft assignment of every local descriptor
  to `clusters` centres, a_k = softmax_k(alpha (2 c_k . x - |c_k|^2)) with a large alpha (the
  paper initialises it large: a sharp assignment), the assigned residuals summed, intra- and
  L2-normalised. `naive`: the
  softmax written exp(s) / sum(exp(s)) (the thread's own softmax); otherwise tf.nn.softmax."""

  def __init__(self, clusters=8, alpha=10.0, naive=True, **kwargs):
    super().__init__(**kwargs)
    self.clusters, self.alpha, self.naive = clusters, alpha, naive

  def build(self, shape):
    self.centres = self.add_weight(shape=(self.clusters, shape[-1]),
                                   initializer=keras.initializers.RandomUniform(0.0, 1.0))

  def call(self, x):
    d = x.shape[-1]
    x = tf.reshape(x, [tf.shape(x)[0], -1, d])
    s = self.alpha * (2.0 * tf.einsum('bnd,kd->bnk', x, self.centres) -
                      tf.reduce_sum(tf.square(self.centres), -1))
    if self.naive:
      e = tf.exp(s)
      a = e / tf.reduce_sum(e, -1, keepdims=True)
    else:
      a = tf.nn.softmax(s, -1)
    v = tf.einsum('bnk,bnd->bkd', a, x) - tf.reduce_sum(a, 1)[..., None] * self.centres
    v = tf.math.l2_normalize(v, -1)
    return tf.math.l2_normalize(tf.reshape(v, [-1, self.clusters * d]), -1)


def netvlad_lite(seed, *, size=16, classes=10, naive=True):
  """A NetVLAD-lite: two 3x3 convolutions of 32 (ReLU; 2x2 pooling after the first) as the
  local descriptor backbone, `NetVLAD` of 8 clusters, Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.MaxPooling2D()(L.Conv2D(32, 3, padding='same', activation='relu')(x))
  h = L.Conv2D(32, 3, padding='same', activation='relu')(h)
  h = NetVLAD(8, naive=naive)(h)
  return keras.Model(x, L.Dense(classes)(L.Lambda(lambda t: 10.0 * t)(h)), name='netvlad_lite')


def simplenet_lite(seed, *, size=16, classes=10, dtype='float16'):
  """A SimpleNet-lite (Hasanpour et al., 2016: a plain stack of 3x3 convolutions with BN and
  ReLU, max pooling between stages): 32, 32 | pool | 64, 64 | pool | 128, global max pooling,
  Dense(`classes`): the logits. Every layer in `dtype` ('float16': float16 weights, updates and
  compute, the threads' half-precision run; 'float32' the remedy)."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = x
  for stage in ((32, 32), (64, 64), (128,)):
    for n in stage:
      h = L.Conv2D(n, 3, padding='same', use_bias=False, dtype=dtype)(h)
      h = L.ReLU(dtype=dtype)(L.BatchNormalization(dtype=dtype)(h))
    if len(stage) == 2:
      h = L.MaxPooling2D(dtype=dtype)(h)
  h = L.GlobalMaxPooling2D(dtype=dtype)(h)
  out = L.Dense(classes, dtype=dtype)(h)
  return keras.Model(x, L.Activation('linear', dtype='float32')(out), name='simplenet_lite')


def affinity_pairs(seed, *, rows=4096, drug_len=24, protein_len=48, missing=0.03,
                   drop_missing=False):
  """Drug-target binding affinities in miniature (the Davis / KIBA layout DeepDTA reads): a
  SMILES-like token string (20 symbols) and a protein sequence (21 residues), the affinity (a
  pKd-like value around 5 to 9) a function of which binding motifs each carries. A fraction
  `missing` of the affinities were never measured and are NaN in the matrix, as the KIBA
  matrix has them; `drop_missing`: those pairs dropped (the threads' remedy).
  (([drug (rows, drug_len), protein (rows, protein_len)]), affinity (rows, 1))."""
  rng = np.random.RandomState(seed)
  d = rng.randint(1, 20, (rows, drug_len))
  p = rng.randint(1, 21, (rows, protein_len))
  dm, pm = rng.randint(1, 20, (4, 3)), rng.randint(1, 21, (4, 3))
  w = rng.uniform(0.5, 1.5, (4, 4))
  has_d = np.zeros((rows, 4))
  has_p = np.zeros((rows, 4))
  for i in range(rows):
    for k in range(4):
      if rng.rand() < 0.4:
        at = rng.randint(0, drug_len - 3)
        d[i, at:at + 3], has_d[i, k] = dm[k], 1
      if rng.rand() < 0.4:
        at = rng.randint(0, protein_len - 3)
        p[i, at:at + 3], has_p[i, k] = pm[k], 1
  y = 5.0 + np.einsum('nk,kl,nl->n', has_d, w, has_p) + 0.2 * rng.randn(rows)
  y[rng.rand(rows) < missing] = np.nan
  keep = ~np.isnan(y) if drop_missing else np.ones(rows, bool)
  return (d[keep].astype(np.int32), p[keep].astype(np.int32)), y[keep, None].astype(np.float32)


def deepdta_lite(seed, *, drug_len=24, protein_len=48):
  """A DeepDTA-lite (Ozturk et al., 2018): for the drug and for the protein an embedding of
  16 and three 1-D convolutions (32, 64, 96 filters; ReLU), global max pooling; the two
  concatenated, Dense(128, ReLU), Dense(64, ReLU), Dense(1): the affinity."""
  _seed(seed)
  d = keras.Input((drug_len,), dtype='int32')
  p = keras.Input((protein_len,), dtype='int32')

  def encoder(ids, vocab, k):
    h = L.Embedding(vocab, 16)(ids)
    for n in (32, 64, 96):
      h = L.Conv1D(n, k, activation='relu')(h)
    return L.GlobalMaxPooling1D()(h)

  h = L.Concatenate()([encoder(d, 20, 3), encoder(p, 21, 5)])
  h = L.Dense(64, activation='relu')(L.Dense(128, activation='relu')(h))
  return keras.Model([d, p], L.Dense(1)(h), name='deepdta_lite')


class ShakeShake(L.Layer):
  """Shake-Shake's join of two residual branches (Gastaldi, 2017): alpha b1 + (1 - alpha) b2
  with a random alpha per sample in training (the 'shake' forward; the backward uses the same
  alpha here), 0.5 at inference."""

  def call(self, inputs, training=False):
    b1, b2 = inputs
    if training:
      alpha = tf.random.uniform([tf.shape(b1)[0], 1, 1, 1])
    else:
      alpha = tf.constant(0.5)
    return alpha * b1 + (1.0 - alpha) * b2


class NaNOnce(field.OneOffFault):
  """`field.OneOffFault` on the first element of the activations, NaN (a kernel that misfires
  once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=0, value=np.nan, **kwargs)


def shake_shake_lite(seed, *, size=16, classes=10, fault=None):
  """A Shake-Shake-lite (a ResNet of three shake-shake blocks: two branches of ReLU-3x3
  conv-BN-ReLU-3x3 conv-BN joined by `ShakeShake`, added to the shortcut; 16, 32, 64 channels,
  stride 2 at the second and third, a 1x1 convolution shortcut when the shape changes), global
  average pooling, a `NaNOnce` (at its `fault`-th training call; None: never), Dense(`classes`):
  the logits."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.BatchNormalization()(L.Conv2D(16, 3, padding='same')(x))
  for n, stride in ((16, 1), (32, 2), (64, 2)):
    def branch(t, n=n, stride=stride):
      t = L.Conv2D(n, 3, strides=stride, padding='same')(L.ReLU()(t))
      t = L.BatchNormalization()(t)
      t = L.Conv2D(n, 3, padding='same')(L.ReLU()(t))
      return L.BatchNormalization()(t)
    join = ShakeShake()([branch(h), branch(h)])
    short = h if h.shape[-1] == n and stride == 1 else L.Conv2D(n, 1, strides=stride)(h)
    h = L.Add()([short, join])
  h = L.GlobalAveragePooling2D()(L.ReLU()(h))
  return keras.Model(x, L.Dense(classes)(NaNOnce(fault)(h)), name='shake_shake_lite')


def byte_files(seed, *, rows=2048, length=256):
  """Executables in miniature for malware detection (the byte sequences MalConv reads): random
  bytes with header-like and zero-padded regions; the malicious ones (label 1, ~half) carry two
  of four 6-byte signatures (a packer stub, an API-hashing loop...) at random offsets.
  Ids 0..255, 256 the padding. (bytes (rows, length), label (rows, 1))."""
  rng = np.random.RandomState(seed)
  sigs = rng.randint(0, 256, (4, 6))
  x = rng.randint(0, 256, (rows, length))
  x[:, :16] = rng.randint(0, 256, 16)
  y = (rng.rand(rows) < 0.5).astype(np.float32)
  for i in range(rows):
    x[i, length - rng.randint(0, 64):] = 256
    if y[i]:
      for k in rng.choice(4, 2, replace=False):
        at = rng.randint(16, length - 70)
        x[i, at:at + 6] = sigs[k]
  return x.astype(np.int32), y[:, None]


def malconv_lite(seed, *, length=256):
  """A MalConv-lite (Raff et al., 2018): a byte embedding of 8, a gated 1-D convolution
  (Conv1D(64, 8, stride 4) times the sigmoid of its twin), global max pooling, Dense(64, ReLU),
  Dense(1, sigmoid): the probability that the file is malicious."""
  _seed(seed)
  x = keras.Input((length,), dtype='int32')
  e = L.Embedding(257, 8)(x)
  g = L.Multiply()([L.Conv1D(64, 8, strides=4)(e), L.Conv1D(64, 8, strides=4,
                                                               activation='sigmoid')(e)])
  h = L.Dense(64, activation='relu')(L.GlobalMaxPooling1D()(g))
  return keras.Model(x, L.Dense(1, activation='sigmoid')(h), name='malconv_lite')



def shape_masks(seed, *, rows=1024, size=32):
  """Foreground segmentation in miniature: one to three discs and boxes of random grey levels
  on a noisy background gradient; the mask their pixels. (image (rows, size, size, 1), mask
  (rows, size, size, 1))."""
  rng = np.random.RandomState(seed)
  yy, xx = np.mgrid[0:size, 0:size]
  x = np.zeros((rows, size, size), np.float32)
  m = np.zeros((rows, size, size), np.float32)
  for i in range(rows):
    img = rng.uniform(0.0, 0.3) + rng.uniform(-0.2, 0.2) * xx / size
    for _ in range(rng.randint(1, 4)):
      cy, cx = rng.randint(4, size - 4, 2)
      r = rng.randint(3, 8)
      shape = ((yy - cy) ** 2 + (xx - cx) ** 2 < r * r) if rng.rand() < 0.5 else (
          (abs(yy - cy) < r) & (abs(xx - cx) < r))
      img = np.where(shape, rng.uniform(0.6, 1.0), img)
      m[i] = np.maximum(m[i], shape)
    x[i] = img + 0.05 * rng.randn(size, size)
  return x[..., None], m[..., None]


def linknet_lite(seed, *, size=32):
  """A LinkNet-lite (Chaurasia & Culurciello, 2017): a 3x3 stem of 16, three encoder blocks
  (two 3x3 convolutions with BN and ReLU, the first strided 2, a 1x1 strided shortcut; 16, 32,
  64), three decoder blocks (1x1 convolution to a quarter, 3x3 transposed convolution x2, 1x1
  convolution) each added to the encoder output of its size (LinkNet's skip by addition), a
  1x1 convolution to one map, sigmoid: the foreground probability."""
  _seed(seed)
  x = keras.Input((size, size, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(16, 3, padding='same')(x)))
  skips = [h]
  for n in (16, 32, 64):
    r = L.ReLU()(L.BatchNormalization()(L.Conv2D(n, 3, strides=2, padding='same')(h)))
    r = L.BatchNormalization()(L.Conv2D(n, 3, padding='same')(r))
    h = L.ReLU()(L.Add()([r, L.Conv2D(n, 1, strides=2)(h)]))
    skips.append(h)
  for skip in reversed(skips[:-1]):
    n = skip.shape[-1]
    d = L.ReLU()(L.Conv2D(max(h.shape[-1] // 4, 4), 1)(h))
    d = L.ReLU()(L.Conv2DTranspose(max(h.shape[-1] // 4, 4), 3, strides=2, padding='same')(d))
    h = L.Add()([skip, L.ReLU()(L.Conv2D(n, 1)(d))])
  return keras.Model(x, L.Conv2D(1, 1, activation='sigmoid')(h), name='linknet_lite')

# --- The scenarios. ---------------------------------------------------------------------------


@add('blind25_grad_char_rnn_no_clip', 'exploding_gradients', 'char_rnn_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#5127; keras-team/keras#440')
def _(seed, cured=False):
  """A char-RNN-lite (a character embedding, two tanh SimpleRNN layers of 128, the next
  character's logits) trained on a character stream of words from a small bigram grammar, SGD
  with momentum 0.9 at 0.2 and no gradient clipping (as plain SGD on RNNs is run in the
  threads): the recurrent gradients blow up and each step throws the weights further: the loss
  3.19 at step 0, 5.1 at step 10, 19.7 at step 50, 36.5 at step 149, no NaN (the error 0.96
  before, 0.75 after; the constant answer's 0.75). Seed 1: 3.18, 4.6, 15.6, 32.1 (the error
  0.93 before, 0.98 after; the constant's 0.77). keras-team/keras#5127 (the loss is NaN without
  clipnorm: the gradient gets really large and throws the weights); keras-team/keras#440 (SGD is
  notoriously unstable with RNNs and needs gradient clipping). Cured: the same rate with
  clipnorm=0.25: the loss 3.19 to 1.78, the error 0.96 to 0.20."""
  x, y = char_text(seed)
  return cases.Setup(char_rnn_lite(seed),
                     keras.optimizers.SGD(0.2, momentum=0.9, clipnorm=0.25 if cured else None),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind25_lr_vdcnn_adam', 'learning_rate', 'vdcnn_lite', doors=('trainer', 'fit'),
     steps=150, citation='alexander-rakhlin/CNN-for-Sentence-Classification-in-Keras#7; '
     'nfmcclure/tensorflow_cookbook#129')
def _(seed, cured=False):
  """A VDCNN-lite (character embedding, temporal convolution blocks of 64 and 128 with BN
  and ReLU, k-max pooling, two Dense(128)) classifying character strings by their planted topic
  keywords (four topics), Adam at 0.5, a learning rate far above the default: the first update
  throws the weights far off, the loss 2.35 at step 0, 3.2e4 at step 1, 460 at step 149, no NaN,
  the error 0.79 before and 0.74 after (the constant answer's 0.72): it never trains. Seed 1:
  1.94, 4.8e4, 829 (the error 0.81 before, 0.77 after; the constant's 0.72).
  alexander-rakhlin/CNN-for-Sentence-Classification-in-Keras#7 (a CNN for sentence
  classification: the loss turns to NaN after the first epoch; maybe the learning rate is too
  big); nfmcclure/tensorflow_cookbook#129 (the loss is NaN at every step; lowering the learning
  rate makes it train). Cured: Adam at 1e-3: the loss 2.35 to 0.27, the error 0.79 to 0 in
  training mode (0.79 in inference mode: BN's moving statistics still near their start)."""
  x, y = char_topics(seed)
  return cases.Setup(vdcnn_lite(seed), keras.optimizers.Adam(1e-3 if cured else 0.5),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind25_init_dan_zero_kernels', 'initialisation', 'dan_lite', doors=('trainer', 'fit'),
     steps=150, citation='Zero weight initialization on the layer with Relu activation fails '
     'miserably (mvschamanth.medium.com); Week 1, Programming Assignment initialization, '
     'Exercise 1 - initialize_parameters_zeros (community.deeplearning.ai)')
def _(seed, cured=False):
  """A deep averaging network (word embeddings averaged, two Dense(64, ReLU), eight class
  logits) classifying token sequences, Adam at 3e-3, every Dense kernel initialised to zeros (as
  the posts' networks are): each hidden unit computes ReLU(0) = 0 and the ReLU's gradient at 0
  is 0, so no kernel ever gets a gradient; only the output bias moves, to the class prior: the
  loss 2.08 (log 8) from step 0 to 149, no NaN, every answer the commonest class (the error 0.83
  before and after; the constant answer's 0.83). Seed 1: the same (0.88 / 0.88; the constant's
  0.84). "Zero weight initialization on the layer with Relu activation fails miserably"
  (mvschamanth.medium.com: with zero weights and ReLU no learning is done in backpropagation);
  "Week 1, Programming Assignment initialization, Exercise 1 - initialize_parameters_zeros"
  (community.deeplearning.ai: a network initialised to zeros learns nothing; break the symmetry
  with random weights). Cured: Keras's default glorot_uniform kernels: the loss 2.08 to 0.46,
  the error 0.91 to 0."""
  x, y = data.tokens(seed)
  return cases.Setup(dan_lite(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(3e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind25_mismatch_deep_retina_poisson_linear', 'loss_output_mismatch', 'deep_retina_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#590; keras-team/keras#479')
def _(seed, cured=False):
  """A deep-retina CNN (the movie's six frames as channels, a 5x5 convolution of 8, a 3x3
  convolution of 8, a Dense layer of the four cells' rates) fitted to Poisson spike counts of
  ganglion cells under white noise, Adam at 3e-3, Keras's 'poisson' loss (y_pred - y_true *
  log(y_pred + eps)) on a linear output as the thread builds it: about half the initial rates
  are negative, log of a negative number is NaN: the loss NaN from step 0; the gradient (1 -
  y / y_pred) stays finite and drives the negative rates further down: the error 13.7 before,
  3.5e8 after (the constant answer's 9.6). Seed 1: the same (13.6 before, 8.4e8 after; the
  constant's 10.0). keras-team/keras#590 (nan loss with the poisson objective from the first
  epoch; a Dense output; log of y_pred <= 0); keras-team/keras#479 (the Poisson loss assumes
  y_pred > 0: use it after a softplus activation). Cured: Dense(4, softplus): the loss 1.78 to
  0.34, the error 11.0 to 4.4. Written as 'division_or_log'; a linear head under a Poisson loss
  is a loss/output mismatch in the doctor's documented causes (docs/doctor.md) and in three
  earlier splits' scenarios (blind2, blind7, blind9), so it was relabelled after the split's first
  look, which had named it a mismatch."""
  x, y = retina_responses(seed)
  return cases.Setup(deep_retina_lite(seed, activation='softplus' if cured else None),
                     keras.optimizers.Adam(3e-3), 'poisson',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind25_exp_netvlad_naive_softmax', 'softmax_overflow', 'netvlad_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='daviddao/spatial-transformer-tensorflow#1; WeidiXie/VGG-Speaker-Recognition#36')
def _(seed, cured=False):
  """A NetVLAD-lite (two 3x3 convolutions of 32 as the local descriptor backbone, NetVLAD
  pooling of 8 clusters with the soft-assignment sharpness alpha = 10, intra- and L2
  normalisation, the class logits) classifying the digits (16x16 grey), Adam at 1e-3, the soft
  assignment written exp(s) / sum(exp(s)) as the thread's own softmax computes it: the
  assignment scores alpha (2 c.x - |c|^2) of the unnormalised ReLU descriptors pass 88.7, exp
  overflows and inf / inf = NaN: the loss 2.36 at step 0 and NaN from step 1, the weights NaN
  (the error 0.93 before, inf after; the constant answer's 0.86). Seed 1: the outputs NaN before
  training, the loss NaN from step 0 (the constant's 0.875).
  daviddao/spatial-transformer-tensorflow#1 ('nan' loss during training; replacing the
  hand-written softmax with TF's built-in one solves it); WeidiXie/VGG-Speaker-Recognition#36 (the
  NetVLAD / VLAD pooling softmax subtracts the max first). Cured: tf.nn.softmax: the loss 2.32 to
  1.73, the error 0.89 to 0.30."""
  return cases.Setup(netvlad_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.digits_stream(seed, size=16, rgb=False),
                     'classes')


@add('blind25_fp16_simplenet_16bit_overflow', 'precision', 'simplenet_lite',
     doors=('trainer', 'fit'), steps=150, citation='Blaizzy/mlx-vlm#293; openvla/openvla#30')
def _(seed, cured=False):
  """A SimpleNet-lite (3x3 convolutions with BN and ReLU: 32, 32 | pool | 64, 64 | pool |
  128, global max pooling) classifying 16-bit microscopy-like images (the digits at 16x16 on
  the 0 to 65535 scale a 16-bit TIFF reader gives), Adam at 1e-3, every layer in float16 (the
  thread's half-precision run): the first convolution's outputs pass float16's largest value,
  65504, and are inf, BN of inf is NaN: the outputs non-finite before training, the loss NaN from
  step 0 (the error inf before and after; the constant answer's 0.86). Seed 1: the same (the
  constant's 0.875). Blaizzy/mlx-vlm#293 (float16's maximum is 65504; values above it become
  inf and break the gradients; compute in float32 where they can exceed it);
  openvla/openvla#30 (float16 training gives a NaN loss: its range is too small; use a dtype of
  float32's range). Cured: the same network in float32: the loss 3.31 to 0.16, the error 0.87
  to 0."""
  return cases.Setup(simplenet_lite(seed, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False, scale=65535.0), 'classes')


@add('blind25_input_deepdta_nan_affinity', 'bad_input', 'deepdta_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#1628; keras-team/keras#2134')
def _(seed, cured=False):
  """A DeepDTA-lite (embeddings and three 1-D convolutions for the drug's SMILES-like string
  and for the protein sequence, global max pooling, Dense 128 and 64) regressing binding
  affinities (pKd-like, 5 to 9), MSE, Adam at 1e-3; 3% of the affinities were never measured
  and are NaN in the matrix (as KIBA's are), left in the training set: the loss NaN from step 0,
  the weights NaN after it (the error 68.4 before, inf after; the constant answer's 7.35). Seed
  1: the same (68.7 before; the constant's 6.45). keras-team/keras#1628 (outputs with missing
  values: the cost comes out as nan; mask or drop them); keras-team/keras#2134 (NaN loss for
  regression: check np.isnan on X and y). Cured: the unmeasured pairs dropped: the loss 68.8 to
  8.9, the error 68.4 to 4.6. The measure reads the measured pairs (eval_data) for both runs."""
  x, y = affinity_pairs(seed, drop_missing=cured)
  clean, yc = affinity_pairs(seed, drop_missing=True)
  return cases.Setup(deepdta_lite(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind25_transient_shake_shake_glitch', 'transient', 'shake_shake_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='Rikorose/DeepFilterNet#30; commaai/research#24')
def _(seed, cured=False):
  """A Shake-Shake-lite (three shake-shake residual blocks of 16, 32, 64 channels, two
  branches mixed by a random alpha per sample in training) classifying the digits (16x16 grey),
  Adam at 1e-3, training normally (the loss 2.49 at step 0, 1.27 at step 50) when one element
  of the pooled features reads NaN once (`NaNOnce`: its 70th training call; step 65 in a plain
  `fit` after the measure's four training-mode passes; a kernel or buffer that misfires once,
  not the data, the model or the settings): the loss NaN from step 65, the weights NaN (the
  error 0.87 before, inf after; the constant answer's 0.86). Seed 1: the same step.
  Rikorose/DeepFilterNet#30 (NaNs occur in rare circumstances, cause unknown; resuming from the
  last checkpoint helps); commaai/research#24 (a NaN crash mid-training that other runs and
  machines do not show; continuing from the checkpoint works). Cured: the same run without the
  fault: the loss 2.49 to 0.58, the error 0.89 to 0 in training mode (in inference mode 0.93 in
  one run, 0.01 in another: the shake's random mixing makes it vary)."""
  return cases.Setup(shake_shake_lite(seed, fault=None if cured else 70),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=16, rgb=False, scale=65535.0), 'classes')


@add('blind25_mismatch_malconv_categorical_one_unit', 'loss_output_mismatch', 'malconv_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#14729; keras-team/keras#4784')
def _(seed, cured=False):
  """A MalConv-lite (a byte embedding, a gated strided 1-D convolution, global max pooling,
  Dense(64)) flagging malicious files from their first 256 bytes, Adam at 1e-3, the head
  Dense(1, sigmoid) compiled with categorical_crossentropy as the threads compile it: Keras
  normalises the one-unit prediction by its sum (p / p = 1), so the loss is 0 for every input
  and its gradient 0: the loss 0 from step 0 to 149 (Keras warns), no training (the error 0.45
  before, 0.41 after; the constant answer's 0.41). Seed 1: the same (0.44 before, 0.59 after;
  the constant's 0.41). keras-team/keras#14729 (Dense(1, sigmoid) with categorical_crossentropy:
  too low accuracy); keras-team/keras#4784 (accuracy not changing: targets in [0, 1] need a
  sigmoid output and binary_crossentropy). Cured: binary_crossentropy: the loss 0.69 to 0.50,
  the error 0.45 to 0."""
  x, y = byte_files(seed)
  return cases.Setup(malconv_lite(seed), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy' if cured else 'categorical_crossentropy',
                     data.stream(x, y, batch=32, seed=seed), 'binary_prob')


@add('blind25_lr_linknet_sgd', 'learning_rate', 'linknet_lite', doors=('trainer', 'fit'),
     steps=150, citation='JihongJu/keras-fcn#6; facebookresearch/maskrcnn-benchmark#831')
def _(seed, cured=False):
  """A LinkNet-lite (a stem and three residual encoder blocks with BN, decoder blocks of
  1x1, transposed 3x3 and 1x1 convolutions added to the encoder outputs, a sigmoid map)
  segmenting discs and boxes from a noisy background (32x32), per-pixel binary cross-entropy,
  SGD with momentum 0.9 at 50, a learning rate far too large: the decoder's unnormalised
  convolutions blow up: the loss 0.81 at step 0, 3.6 at step 1, 1.5e5 at step 2, NaN from step
  3, the weights NaN (the error 0.24 before, inf after; the constant answer's 0.15). Seed 1:
  0.75, 7.2, 2.6e3, NaN from step 14. JihongJu/keras-fcn#6 (an FCN segmenter's weights and loss
  NaN: usually too large a learning rate); facebookresearch/maskrcnn-benchmark#831 (loss NaN:
  probably too high a learning rate). Cured: SGD at 0.05: the loss 0.81 to 0.053, the error
  0.24 to 0.056."""
  x, m = shape_masks(seed)
  return cases.Setup(linknet_lite(seed), keras.optimizers.SGD(0.05 if cured else 50.0,
                                                             momentum=0.9),
                     'binary_crossentropy', data.stream(x, m, batch=16, seed=seed),
                     'binary_prob')
