"""Sick scenarios of the data and the loss: bad input (NaN cells, missing targets, sentinel
values, corrupt images) and a loss that does not match the model's output. Each builder's
docstring says the symptom users reported and where; several seeds where the data order decides
when a bad row comes."""

import keras
import numpy as np

from scripts.calibration import archs
from scripts.calibration import cases
from scripts.calibration import data

DATA = cases.Registry()
add = DATA.add
SCE = keras.losses.SparseCategoricalCrossentropy


def _spoil(x, rows, value, seed):
  """A copy of x with one cell of each of `rows` random rows set to `value`."""
  x = x.copy()
  rng = np.random.RandomState(seed + 11)
  picked = rng.choice(len(x), size=rows, replace=False)
  x.reshape(len(x), -1)[picked, rng.randint(0, x[0].size, size=rows)] = value
  return x


@add('input_csv_nan_cells_mlp', 'bad_input', 'mlp', doors=('trainer', 'fit'), seeds=(0, 1, 2),
     split='tune', steps=150, quick=True,
     citation='Nixtla/neuralforecast#186; circleAhn/TESLA-tf#1')
def _(seed):
  """A regression MLP on a table read from a CSV in which 6 of 2048 rows have an empty (NaN)
  cell. Nixtla/neuralforecast#186 ("silent bug, training with NaNs values": the loss becomes
  NaN, "hard to notice that the problem is in the data"); circleAhn/TESLA-tf#1 ("all my loss is
  Nan": missing values in the dataset)."""
  x, y = data.tabular(seed)
  clean = data.stream(x, y, batch=32, seed=seed)
  return cases.Setup(archs.mlp(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(_spoil(x, 6, np.nan, seed), y, batch=32, seed=seed),
                     'regression', eval_data=clean)


@add('input_nan_images_mobilenet_v3', 'bad_input', 'mobilenet_v3_small', doors=('fit',),
     seeds=(0, 1), split='held_out', steps=80, citation='prs-eth/Marigold#111')
def _(seed):
  """MobileNetV3Small on the digits, three images of which are corrupt (NaN). prs-eth/Marigold#111
  ("loss=nan occurs during training": "this happens when input batch contains NaN values")."""
  return cases.Setup(archs.mobilenet_v3_small(seed), keras.optimizers.Adam(1e-3), SCE(),
                     data.digits_stream(seed, nan_images=(7, 500, 1100)), 'classes',
                     eval_data=data.digits_stream(seed))


@add('input_missing_targets_gru', 'bad_input', 'gru', doors=('trainer',), seeds=(0, 1),
     split='tune', steps=150, citation='Nixtla/neuralforecast#186; WenjieDu/PyPOTS#232')
def _(seed):
  """A GRU forecaster whose target column has a few missing values (NaN). Nixtla/neuralforecast#186
  ("missing values are passed in the y column. The loss becomes nan"); WenjieDu/PyPOTS#232 (data
  "containing missing data will cause NaN loss")."""
  x, y = data.series(seed)
  return cases.Setup(archs.recurrent(seed, cell='gru'), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, _spoil(y, 4, np.nan, seed), batch=32, seed=seed),
                     'regression', eval_data=data.stream(x, y, batch=32, seed=seed))


@add('input_sentinel_values_mlp', 'bad_input', 'mlp', doors=('fit',), seeds=(0, 1),
     split='held_out', steps=150,
     citation='matterport/Mask_RCNN#1099; "NaN loss: learning rate or data" '
              '(https://theneuralbase.com/tensorflow/learn/beginner/'
              'nan-loss-learning-rate-or-data/)')
def _(seed):
  """A classifier MLP on a table where missing cells were written as a sentinel (1e9) in 8 of
  2048 rows. The page's second root cause: "data contains inf, nan, or extreme outliers that
  propagate through the network"; matterport/Mask_RCNN#1099 (values far out of the expected
  range, "my loss is going to NAN")."""
  x, y = data.classes(seed)
  return cases.Setup(archs.mlp(seed, outputs=8), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True),
                     data.stream(_spoil(x, 8, 1e9, seed), y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(x, y, batch=32, seed=seed))


@add('input_inf_ratio_subclassed', 'bad_input', 'subclassed', doors=('trainer',), seeds=(0, 1),
     split='tune', steps=150, citation='Justin1904/Low-rank-Multimodal-Fusion#10')
def _(seed):
  """A subclassed binary classifier with a feature computed as a ratio, inf in rows whose
  denominator was 0. Justin1904/Low-rank-Multimodal-Fusion#10 ("Training got into NaN values":
  "There might've been NaN values in the data that I haven't removed")."""
  x, y = data.binary(seed)
  return cases.Setup(archs.subclassed(seed, activation='sigmoid'), keras.optimizers.Adam(1e-3),
                     'binary_crossentropy',
                     data.stream(_spoil(x, 5, np.inf, seed), y, batch=32, seed=seed),
                     'binary_prob', eval_data=data.stream(x, y, batch=32, seed=seed))


@add('mismatch_softmax_from_logits', 'loss_output_mismatch', 'convnet', doors=('fit',),
     split='tune', steps=150, quick=True, citation='mmalekzadeh/dana#1; ariecattan/SciCo#2')
def _(seed):
  """The convnet with a softmax output trained with SparseCategoricalCrossentropy(from_logits=
  True): a softmax of a softmax. mmalekzadeh/dana#1 ("Usage of from_logits=True on the model
  that has softmax activated output"); ariecattan/SciCo#2 ("Double-softmax": the loss "quickly
  gets stuck around 1.0")."""
  x, y = data.digits(size=8, rgb=False)
  return cases.Setup(archs.convnet(seed, activation='softmax'), keras.optimizers.Adam(1e-3),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('mismatch_sigmoid_categorical', 'loss_output_mismatch', 'mlp', doors=('trainer',),
     split='held_out', steps=150,
     citation='"Confused with binary cross-entropy vs categorical cross-entropy" '
              '(https://stats.stackexchange.com/questions/565956)')
def _(seed):
  """One sigmoid output unit trained with categorical_crossentropy: the loss of a single
  'class' is 0 whatever the model does. The Q&A: 26 % accuracy with categorical_crossentropy,
  98 % with binary_crossentropy; "the model is predicting only class 0"."""
  x, y = data.binary(seed)
  return cases.Setup(archs.mlp(seed, activation='sigmoid'), keras.optimizers.Adam(1e-3),
                     'categorical_crossentropy', data.stream(x, y, batch=32, seed=seed),
                     'binary_prob')


@add('mismatch_softmax_one_unit_mse', 'loss_output_mismatch', 'gru', doors=('trainer',),
     split='tune', steps=150, citation='FluxML/Flux.jl#1546')
def _(seed):
  """A GRU regression whose one output unit has a softmax activation, trained with MSE: the
  output is 1 for every input. FluxML/Flux.jl#1546 ("Softmax stucks the network": the loss
  prints 0.28823 epoch after epoch)."""
  x, y = data.series(seed)
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((40, 1)), keras.layers.GRU(32),
                            keras.layers.Dense(1, activation='softmax')], name='gru')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('mismatch_softmax_mse_transformer', 'loss_output_mismatch', 'transformer', doors=('fit',),
     split='held_out', steps=150, citation='keras-team/keras#126; keras-team/keras#4784')
def _(seed):
  """The transformer with a softmax head trained with MSE against the class id (a column of
  labels, as read from a table). keras-team/keras#126 ("MLP example doesn't make progress": a
  softmax output with mean_squared_error, the loss does not improve); keras-team/keras#4784
  ("Your model doesn't match your loss function": accuracy not changing across the epochs)."""
  x, y = data.tokens(seed)
  keras.utils.set_random_seed(seed)
  base = archs.transformer(seed)
  ids = keras.Input((16,), dtype='int32')
  model = keras.Model(ids, keras.layers.Softmax()(base(ids)), name='transformer_softmax')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y[:, None].astype(np.float32), batch=32, seed=seed),
                     'classes')


@add('mismatch_sigmoid_regression_head', 'loss_output_mismatch', 'resnet_style',
     doors=('trainer',), split='tune', steps=100,
     citation='keras-team/keras#2711; keras-team/keras#1597')
def _(seed):
  """A ResNet regressing the digit's value (0-9) through a sigmoid output: the head cannot
  leave (0, 1), so the loss stalls. keras-team/keras#2711 ("Loss not changing when training":
  "you probably used a wrong activation function ... at the last output layer");
  keras-team/keras#1597 ("acc and val_acc don't change?": the output activation was the fix)."""
  x, y = data.digits()
  return cases.Setup(archs.resnet_style(seed, classes=1, activation='sigmoid'),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y[:, None].astype(np.float32), batch=32, seed=seed),
                     'regression')
