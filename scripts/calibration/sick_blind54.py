"""A fifty-fourth blind set of sick scenarios (the 'blind54' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind51.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses, in three domains: session-based recommenders (a
STAMP-lite attention/memory model), knowledge-graph
embeddings (a DistMult-lite, a ComplEx-lite and a ConvE-lite 1-N link predictor) and legal and
biomedical text classification (a CAML-lite ICD coder, a PubMedBERT-lite trial classifier, a
Lawformer-lite judgment predictor, a Legal-BERT-lite article classifier).
Each builder takes `cured`: the same run with the thread's remedy (the registry calls
`build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the sick
run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it train"
measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND54 = cases.Registry()
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND54.add` with split='blind54'."""
  return BLIND54.add(name, expected, arch, split='blind54', **fields)


# --- Data of this file. -------------------------------------------------------------------------

ITEMS = 200  # Item ids 1..200 (8 categories of 25), 0 the padding.
CATS = 8
SESSION = 10


def sessions(seed, *, rows=2048, empty=0.0):
  """Click sessions in miniature (a YooChoose/Diginetica-like set): each session browses one
  category's items (25 a category), 3 to 10 clicks, right-aligned and left-padded with 0 to 10;
  the next click is the successor (within its category) of the last item clicked. A share
  `empty` of the sessions have no clicks left (every item was a cold item filtered out by the
  preprocessing's minimum-support rule): all padding, the target a random item.
  ((rows, 10) ids, (rows,) next item)."""
  rng = np.random.RandomState(seed)
  x = np.zeros((rows, SESSION), np.int32)
  y = np.zeros(rows, np.int32)
  for r in range(rows):
    c = rng.randint(CATS)
    n = rng.randint(3, SESSION + 1)
    local = rng.randint(0, 25, n)
    x[r, SESSION - n:] = c * 25 + local + 1
    y[r] = c * 25 + (local[-1] + 1) % 25 + 1
  bad = rng.rand(rows) < empty
  x[bad] = 0
  y[bad] = rng.randint(1, ITEMS + 1, bad.sum())
  return x, y


ENTITIES = 100  # 10 types of 10 entities.
RELATIONS = 8


def triples(seed, *, rows=2048):
  """A knowledge graph in miniature (an FB15k-237-like set) for 1-N scoring: 100 entities of ten
  types, eight relations; (head, relation) maps to the hub entity of type (type(head) + r + 1)
  mod 10 that the relation picks (one of that type's ten). ((rows, 2) head and relation ids,
  (rows,) tail)."""
  rng = np.random.RandomState(seed)
  hub = rng.randint(0, 10, (RELATIONS, 10))
  h = rng.randint(0, ENTITIES, rows)
  r = rng.randint(0, RELATIONS, rows)
  kind = (h // 10 + r + 1) % 10
  t = kind * 10 + hub[r, kind]
  return np.stack([h, r], 1).astype(np.int32), t.astype(np.int32)


VOCAB = 300  # Word-piece ids 1..299, 0 the padding.


def documents(seed, *, rows=2048, length=48, classes=2, cues=(2, 5)):
  """Documents in miniature (PubMed abstracts, ECtHR judgments): `length` tokens of a Zipf-like
  vocabulary; a document of class k carries 2 to 4 (`cues`) of its class's eight cue terms
  ('randomised', 'placebo'; 'Article 6', 'detention') at random places; ((rows, length) ids,
  (rows,) class)."""
  rng = np.random.RandomState(seed)
  p = 1.0 / np.arange(1, VOCAB - 8 * classes)
  p /= p.sum()
  x = rng.choice(VOCAB - 8 * classes - 1, (rows, length), p=p) + 1
  y = rng.randint(0, classes, rows).astype(np.int32)
  cue_ids = VOCAB - 8 * classes + np.arange(8 * classes).reshape(classes, 8)
  for i in range(rows):
    k = rng.randint(*cues)
    x[i, rng.choice(length, k, replace=False)] = rng.choice(cue_ids[y[i]], k)
  return x.astype(np.int32), y


# --- Layers and architectures of this file (in the order of the scenarios). ------------------


class SessionMemory(L.Layer):
  """STAMP's external memory: the session's mean item embedding, sum over clicks / the number of
  clicks as the thread's code writes it; with `guard`, the count floored at 1."""

  def __init__(self, guard=False, **kwargs):
    super().__init__(**kwargs)
    self.guard = guard

  def call(self, inputs):
    e, ids = inputs
    mask = tf.cast(tf.not_equal(ids, 0), e.dtype)[..., None]
    count = tf.reduce_sum(mask, 1)
    if self.guard:
      count = tf.maximum(count, 1.0)
    return tf.reduce_sum(e * mask, 1) / count


def stamp(seed, guard=False):
  """STAMP-lite: item embeddings; the session memory m_s (the mean of the clicks), the last
  click m_t, an attention over the clicks from both to a general interest m_a; two MLP cells
  h_s = tanh(W m_a), h_t = tanh(W' m_t); the trilinear score <h_s * h_t, item embedding> over
  every item (logits)."""
  _seed(seed)
  ids = keras.Input((SESSION,), dtype='int32')
  emb = L.Embedding(ITEMS + 1, 48)
  e = emb(ids)
  ms = SessionMemory(guard=guard)([e, ids])
  mt = L.Lambda(lambda t: t[:, -1], output_shape=(48,))(e)
  q = L.Dense(48)(L.Concatenate()([ms, mt]))
  s = L.Dense(1)(L.Activation('sigmoid')(L.Dense(48)(e) + q[:, None]))
  w = L.Softmax(axis=1)(s[..., 0])
  ma = L.Lambda(lambda t: tf.reduce_sum(t[0] * t[1][..., None], 1), output_shape=(48,))([e, w])
  ma = ma + ms
  hs = L.Dense(48, activation='tanh')(ma)
  ht = L.Dense(48, activation='tanh')(mt)
  out = L.Dense(ITEMS + 1)(hs * ht)
  return keras.Model(ids, out, name='stamp_lite')


def distmult(seed, dim=64, stddev=0.3):
  """DistMult-lite (1-N scoring): head and relation embeddings (normal, std `stddev`, as the
  thread's initialisation), their element-wise product scored against every entity's embedding
  (a shared table, logits)."""
  _seed(seed)
  hr = keras.Input((2,), dtype='int32')
  init = keras.initializers.RandomNormal(stddev=stddev)
  ent = L.Embedding(ENTITIES, dim, embeddings_initializer=init)
  rel = L.Embedding(RELATIONS, dim, embeddings_initializer=init)
  h = ent(hr[:, 0])
  r = rel(hr[:, 1])
  out = L.Lambda(lambda t: tf.matmul(t[0] * t[1], t[2], transpose_b=True),
                 output_shape=(ENTITIES,))([h, r, ent.embeddings])
  return keras.Model(hr, out, name='distmult_lite')


class ComplExScores(L.Layer):
  """ComplEx's 1-N scores: Re(<h, r, conj(t)>) for every entity t (real and imaginary halves)."""

  def __init__(self, dim, std=1.0, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.std = dim, std

  def build(self, shape):
    init = keras.initializers.RandomNormal(stddev=self.std)
    self.ent = self.add_weight(shape=(ENTITIES, 2 * self.dim), initializer=init, name='ent')
    self.rel = self.add_weight(shape=(RELATIONS, 2 * self.dim), initializer=init, name='rel')

  def call(self, hr):
    h = tf.gather(self.ent, hr[:, 0])
    r = tf.gather(self.rel, hr[:, 1])
    hre, him = tf.split(h, 2, -1)
    rre, rim = tf.split(r, 2, -1)
    tre, tim = tf.split(self.ent, 2, -1)
    a = hre * rre - him * rim
    b = hre * rim + him * rre
    return tf.matmul(a, tre, transpose_b=True) + tf.matmul(b, tim, transpose_b=True)


def complex_kge(seed, dim=128):
  """ComplEx-lite: complex entity and relation embeddings (128 dimensions, a unit normal
  initialisation), 1-N scores over every entity."""
  _seed(seed)
  hr = keras.Input((2,), dtype='int32')
  return keras.Model(hr, ComplExScores(dim)(hr), name='complex_lite')


def naive_softmax_ce(y, scores):
  """The multiclass NLL of the thread's code: p = exp(s) / sum(exp(s)), -log p[true]."""
  probs = field.naive_softmax(scores)
  picked = tf.gather(probs, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked + 1e-9))


def stable_softmax_ce(y, scores):
  """The same loss through tf.nn.log_softmax (the max subtracted)."""
  logp = tf.nn.log_softmax(tf.cast(scores, tf.float32))
  picked = tf.gather(logp, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(picked)


class FeatureMapFault(field.OneOffFault):
  """The one-off fault of the ConvE-lite scenario: element 7 of the convolution's feature maps
  reads NaN once, in the forward pass."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=7, value=np.nan, **kwargs)


def conve(seed, fault=None, dim=32):
  """ConvE-lite: head and relation embeddings (32 each) reshaped to 4x8 and stacked to an 8x8
  'image', a 3x3 2D convolution (16 maps, ReLU), flattened, a dense projection back to 32, and
  1-N scores against every entity's embedding plus a bias."""
  _seed(seed)
  hr = keras.Input((2,), dtype='int32')
  ent = L.Embedding(ENTITIES, dim)
  rel = L.Embedding(RELATIONS, dim)
  h = L.Reshape((4, 8, 1))(ent(hr[:, 0]))
  r = L.Reshape((4, 8, 1))(rel(hr[:, 1]))
  img = L.Concatenate(axis=1)([h, r])
  f = L.Conv2D(16, 3, activation='relu')(img)
  f = FeatureMapFault(fault)(f)
  z = L.Dense(dim, activation='relu')(L.Flatten()(f))
  out = L.Lambda(lambda t: tf.matmul(t[0], t[1], transpose_b=True),
                 output_shape=(ENTITIES,))([z, ent.embeddings])
  return keras.Model(hr, L.Dense(ENTITIES)(out), name='conve_lite')


class LabelAttention(L.Layer):
  """CAML's per-label attention: for each code c, alpha_c = softmax(H u_c) over the positions,
  v_c = sum alpha_c H, score_c = <beta_c, v_c> + b_c."""

  def __init__(self, labels, init='glorot_uniform', **kwargs):
    super().__init__(**kwargs)
    self.labels, self.init = labels, init

  def build(self, shape):
    d = shape[-1]
    self.u = self.add_weight(shape=(d, self.labels), initializer=self.init, name='u')
    self.beta = self.add_weight(shape=(self.labels, d), initializer=self.init, name='beta')
    self.b = self.add_weight(shape=(self.labels,), initializer='zeros', name='b')

  def call(self, h):
    alpha = tf.nn.softmax(tf.einsum('bld,dc->blc', h, self.u), axis=1)
    v = tf.einsum('blc,bld->bcd', alpha, h)
    return tf.reduce_sum(v * self.beta[None], -1) + self.b


def caml(seed, codes=6, init='glorot_uniform'):
  """CAML-lite: word embeddings, a 1D convolution (kernel 5, tanh), the per-label attention
  and the codes' scores (logits); `init` the kernels' initialiser."""
  _seed(seed)
  ids = keras.Input((48,), dtype='int32')
  e = L.Embedding(VOCAB, 32, embeddings_initializer='uniform' if init != 'zeros' else 'zeros')(ids)
  h = L.Conv1D(32, 5, padding='same', activation='tanh', kernel_initializer=init)(e)
  return keras.Model(ids, LabelAttention(codes, init=init)(h), name='caml_lite')


def pubmedbert(seed):
  """PubMedBERT-lite: word-piece and position embeddings, one transformer block (two heads,
  post-LN), the [CLS]-like first position's state, a sigmoid head ('is this a randomised
  controlled trial')."""
  _seed(seed)
  ids = keras.Input((48,), dtype='int32')
  h = L.Embedding(VOCAB, 32)(ids)
  h = PositionEmbedding()(h)
  h = L.LayerNormalization()(h + L.MultiHeadAttention(2, 16)(h, h))
  h = L.LayerNormalization()(h + L.Dense(32)(L.Dense(64, activation='gelu')(h)))
  h = L.GlobalAveragePooling1D()(h)
  return keras.Model(ids, L.Dense(1, activation='sigmoid')(h), name='pubmedbert_lite')


class PositionEmbedding(L.Layer):
  """Adds a learned embedding per position."""

  def build(self, shape):
    self.table = self.add_weight(shape=(shape[1], shape[2]), initializer='random_normal')

  def call(self, h):
    return h + tf.cast(self.table, h.dtype)[None]


class GlobalSumNorm(L.Layer):
  """Lawformer-lite's document vector: the positions' features summed (the global token's
  aggregate), L2-normalised as the thread's code writes it, x / sqrt(sum(x^2)), in the layer's
  compute dtype."""

  def call(self, h):
    s = tf.reduce_sum(h, 1)
    return s / tf.sqrt(tf.reduce_sum(tf.square(s), -1, keepdims=True))


LONG = 512


def lawformer(seed, norm_dtype=None):
  """Lawformer-lite: word-piece embeddings (scaled by sqrt(d_model) = 8) over a 512-token
  judgment, a position-wise ReLU feed-forward layer (256 units), the global sum and L2 norm
  (`GlobalSumNorm`, dtype `norm_dtype`), a sigmoid head in float32 ('violation found')."""
  _seed(seed)
  ids = keras.Input((LONG,), dtype='int32')
  h = L.Embedding(VOCAB, 64)(ids)
  h = L.Lambda(lambda t: t * 8.0, output_shape=(LONG, 64))(h)  # x sqrt(d_model).
  h = L.Dense(256, activation='relu')(h)
  h = GlobalSumNorm(dtype=norm_dtype)(h)
  return keras.Model(ids, L.Dense(1, activation='sigmoid', dtype='float32')(L.Dense(32)(h)),
                     name='lawformer_lite')


def legal_bert(seed, classes=6, binary_head=False):
  """Legal-BERT-lite: word-piece and position embeddings, one transformer block (four heads,
  post-LN), mean pooling, a softmax over the ECHR articles (with `binary_head`, one sigmoid
  unit as the thread's model has)."""
  _seed(seed)
  ids = keras.Input((48,), dtype='int32')
  h = L.Embedding(VOCAB, 32)(ids)
  h = PositionEmbedding()(h)
  h = L.LayerNormalization()(h + L.MultiHeadAttention(4, 8)(h, h))
  h = L.LayerNormalization()(h + L.Dense(32)(L.Dense(64, activation='relu')(h)))
  h = L.GlobalAveragePooling1D()(h)
  head = L.Dense(1, activation='sigmoid') if binary_head else L.Dense(classes, activation='softmax')
  return keras.Model(ids, head(h), name='legal_bert_lite')


# --- The scenarios. ----------------------------------------------------------------------------


@add('blind54_lr_distmult_sgd_tiny', 'learning_rate', 'distmult_lite',
     doors=('trainer', 'fit'), steps=300,
     citation='thunlp/OpenKE#133; uclnlp/jack#362')
def _(seed, cured=False):
  """A DistMult-lite link predictor (1-N scoring over 100 entities, embeddings initialised with
  a small normal as the thread's), sparse categorical cross-entropy on the scores, plain SGD at
  1e-3 (the TransE example's learning rate carried over): the scores are products of three small
  embeddings, their gradients are products of two, and at 1e-3 the embeddings hardly move; the
  loss sits at ln 100 and the model answers no better than chance. thunlp/OpenKE#133 (DistMult
  with SGD at 0.001: the loss does not decrease, stuck around its starting value, the link
  prediction metrics terrible); uclnlp/jack#362 (DistMult not training: the loss stays at
  0.6931 for hundreds of iterations). Cured: the same SGD at 1.0 (a learning rate sized to the
  model's small gradients).
  Checked (plain fit): the loss 4.66 to 4.62 (the error 0.98 before and after; the constant
  answer's 0.94); seed 1: 0.98 before and after. Cured: the error 0.98 to 0.09."""
  x, y = triples(seed)
  opt = keras.optimizers.SGD(1.0 if cured else 1e-3)
  return cases.Setup(distmult(seed), opt,
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind54_init_caml_zeros', 'initialisation', 'caml_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='davharris/mistnet#87; wagonhelm/NaNmnist#2')
def _(seed, cured=False):
  """A CAML-lite coding clinical notes (48 word-pieces) with one of six ICD codes, every weight
  (embeddings, convolution, the label attention and the output vectors) initialised to zero,
  sparse categorical cross-entropy on logits, Adam at 1e-3: the convolution's output is tanh(0)
  = 0, the attention averages zeros, every gradient but the output biases' is zero, and the
  model only learns the codes' frequencies; the loss falls to the label entropy and sits.
  davharris/mistnet#87 (weights must be initialised: otherwise there are no gradients for any
  network with a hidden layer); wagonhelm/NaNmnist#2 (initialising the weights to zeros: every
  neuron computes the same output and the same gradient). Cured: glorot_uniform kernels and
  uniform embeddings (Keras's defaults).
  Checked (plain fit): the loss 1.79 throughout (the error 0.82 before, 0.81 after; the
  constant answer's 0.80); seed 1: 0.80 before, 0.84 after. Cured: the error 0.84 to 0.00."""
  x, y = documents(seed, classes=6)
  return cases.Setup(caml(seed, init='glorot_uniform' if cured else 'zeros'),
                     keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind54_div_stamp_empty_session_mean', 'division_or_log', 'stamp_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='lamethods/labook-code#9; york135/CTC_CE_for_AST#3')
def _(seed, cured=False):
  """A STAMP-lite predicting a session's next click (200 items), its memory the session's mean
  click embedding written as sum / count, sparse categorical cross-entropy on logits, Adam at
  1e-3; 2% of the sessions lost every click to the minimum-support filter (all padding): their
  count is 0, 0 / 0 is NaN, and the first batch with one gives a NaN loss and NaN weights.
  lamethods/labook-code#9 (NaN values from sessions of length zero); york135/CTC_CE_for_AST#3
  (a loss divided by a sum of weights that is zero for some samples: NaN; fixed with an
  epsilon). Cured: the count floored at 1.
  Checked (plain fit): the loss NaN from step 1 (seed 1: step 0), the error inf after (the
  constant answer's 0.97). Cured: the error 1.00 to 0.13."""
  x, y = sessions(seed, empty=0.02)
  return cases.Setup(stamp(seed, guard=cured), keras.optimizers.Adam(1e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(*sessions(seed), batch=32, seed=seed))


@add('blind54_softmax_complex_naive_nll', 'softmax_overflow', 'complex_lite',
     doors=('trainer', 'fit'), steps=300,
     citation='pyg-team/pytorch_geometric#53; fwd4/dssm#11')
def _(seed, cured=False):
  """A ComplEx-lite link predictor (1-N scoring over 100 entities) trained with the multiclass
  NLL written as exp(s) / sum(exp(s)) then -log p (no max subtracted), Adam at 1e-2: the
  trilinear scores of 128-dimensional unit-normal embeddings start in the tens, the first updates
  push the true tails' scores past 88.7, exp overflows to inf, inf / inf is NaN and the loss is
  NaN within the first steps. pyg-team/pytorch_geometric#53 (a softmax that
  produces NaN frequently: exp taken directly overflows, subtract the max first);
  fwd4/dssm#11 (after a few epochs the softmax value is NaN). Cured: the loss through
  tf.nn.log_softmax.
  Checked (plain fit): the loss 20.7 at step 0, NaN from step 3 (seed 1: step 2), the error
  inf after. Cured: the error 0.98 to 0.02."""
  x, y = triples(seed)
  loss = stable_softmax_ce if cured else naive_softmax_ce
  return cases.Setup(complex_kge(seed), keras.optimizers.Adam(1e-2), loss,
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind54_precision_lawformer_fp16_sum_norm', 'precision', 'lawformer_lite',
     doors=('trainer', 'fit'), steps=200, precision='mixed_float16',
     citation='idiap/fast-transformers#32; qubvel-org/segmentation_models.pytorch#463')
def _(seed, cured=False):
  """A Lawformer-lite predicting whether a judgment (512 word-pieces) found a violation, under
  mixed_float16, its document vector the 512 positions' ReLU features summed and L2-normalised
  in float16: the sums are in the hundreds, their squares summed pass 65504, float16's largest,
  the norm is inf and the vector 0 (and inf / inf in the backward pass): the loss sits at ln 2
  and the model does not train; in float32 it trains. idiap/fast-transformers#32 (under mixed
  precision a sum over the sequence length overflows float16's range and a NaN
  trickles in); qubvel-org/segmentation_models.pytorch#463 (a sum over more elements than
  float16 holds is inf and the loss NaN under mixed precision). Cured: the sum-and-norm layer in
  float32 (dtype='float32').
  Checked (plain fit): the loss 0.693 throughout (the error 0.48 before, 0.52 after; the
  constant answer's 0.48); seed 1: 0.53 before, 0.47 after (the constant's 0.47). Cured: the
  error 0.48 to 0.00."""
  x, y = documents(seed, length=LONG, cues=(4, 8), rows=1024)
  return cases.Setup(lawformer(seed, norm_dtype='float32' if cured else None),
                     keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y[:, None].astype(np.float32), batch=32, seed=seed),
                     'binary_prob')


@add('blind54_bad_input_pubmedbert_nan_labels', 'bad_input', 'pubmedbert_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='vlfeat/matconvnet#899; pyg-team/pytorch_geometric#8001')
def _(seed, cured=False):
  """A PubMedBERT-lite classifying abstracts (48 word-pieces) as randomised controlled trials or
  not, binary cross-entropy on its sigmoid, Adam at 1e-3; the labels come from a merged
  annotation sheet in which 1% of the abstracts have no label (NaN): the first batch holding one
  gives a NaN loss, NaN gradients and NaN weights. vlfeat/matconvnet#899 (some of the data's
  labels are NaN: how to deal with them); pyg-team/pytorch_geometric#8001 (NaN labels in the
  last batch cause NaN losses). Cured: the unlabelled abstracts dropped.
  Checked (plain fit): the loss NaN from step 4 (seed 1: step 0), the error inf after. Cured:
  the error 0.48 to 0.00."""
  x, y = documents(seed)
  y = y.astype(np.float32)
  rng = np.random.RandomState(seed + 7)
  missing = rng.rand(len(y)) < 0.01
  if cured:
    x, y = x[~missing], y[~missing]
  else:
    y[missing] = np.nan
  return cases.Setup(pubmedbert(seed), keras.optimizers.Adam(1e-3), 'binary_crossentropy',
                     data.stream(x, y[:, None], batch=32, seed=seed), 'binary_prob',
                     eval_data=data.stream(*documents(seed), batch=32, seed=seed))


@add('blind54_transient_conve_one_nan', 'transient', 'conve_lite',
     doors=('trainer', 'fit'), steps=300,
     citation='greatlog/DAN#8; brjathu/iTAML#10')
def _(seed, cured=False):
  """A ConvE-lite link predictor (1-N scoring over 100 entities), sparse categorical
  cross-entropy on logits, Adam at 3e-3, training normally, until one element of the
  convolution's feature maps reads NaN once (`field.OneOffFault` at its 120th training call: a
  flipped bit in a buffer, not the data: the same batch is finite on every other pass): the loss
  of that step is NaN, and the NaN gradient makes every weight NaN. greatlog/DAN#8 (the loss
  turns NaN suddenly at iteration 22800, then 29200 in a rerun; resuming from the last normal
  state works); brjathu/iTAML#10 (a NaN loss during training; restarting from the session
  before it trains fine). Cured: no fault.
  Checked (plain fit): the loss NaN at the fault's step (about 118) and after, the error inf
  after (seed 1 the same). Cured: the error 0.98 to 0.04."""
  x, y = triples(seed)
  return cases.Setup(conve(seed, fault=None if cured else 120), keras.optimizers.Adam(3e-3),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind54_mismatch_legal_bert_sigmoid_bce_six_articles', 'loss_output_mismatch',
     'legal_bert_lite', doors=('trainer', 'fit'), steps=200,
     citation='keras-team/keras#4994; keras-team/keras#4784')
def _(seed, cured=False):
  """A Legal-BERT-lite classifying judgments (48 word-pieces) by the ECHR article at issue (six
  articles, integer ids 0 to 5), its head one sigmoid unit compiled with binary cross-entropy
  (a binary set-up kept from a violation/no-violation model): the ids 2 to 5 are 'targets' above
  1 that push the one probability up without bound (the loss goes negative, about -20 within
  200 steps), 0 pushes it down, and a single unit cannot name six articles: the model answers no
  better than the commonest article. keras-team/keras#4994 (a multi-class text classifier with a
  one-unit sigmoid layer and
  binary_crossentropy: the accuracy never changes batch after batch); keras-team/keras#4784 (the
  accuracy does not change across epochs: the model does not match its loss function; for k
  categories use a softmax layer with k outputs and categorical cross-entropy). Cured: a softmax
  over the six articles with sparse categorical cross-entropy.
  Checked (plain fit): the loss 1.1 to -18 (the error 0.82 before and after; the constant
  answer's 0.80); seed 1: 0.81 before and after (the constant's 0.80). Cured: the error 0.81
  to 0.00."""
  x, y = documents(seed, classes=6)
  loss = 'sparse_categorical_crossentropy' if cured else 'binary_crossentropy'
  return cases.Setup(legal_bert(seed, binary_head=not cured), keras.optimizers.Adam(1e-3), loss,
                     data.stream(x, y[:, None], batch=32, seed=seed), 'classes')
