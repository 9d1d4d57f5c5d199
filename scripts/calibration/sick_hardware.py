"""Sick scenarios of the number format and the machine: float16 precision under mixed_float16,
and transient faults (a kernel that misfires once, as a bad GPU kernel or memory does). Each
builder's docstring says the symptom users reported and where."""

import keras
import numpy as np

from scripts.calibration import archs
from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

HARDWARE = cases.Registry()
add = HARDWARE.add
SCE = keras.losses.SparseCategoricalCrossentropy
MIXED = 'mixed_float16'


def _masks(seed, rows=512, size=64):
  """Images of noise and their mask (a smoothed channel mean above 0.5): a segmentation task."""
  rng = np.random.RandomState(seed)
  x = rng.rand(rows, size // 8, size // 8, 3).astype(np.float32)
  x = np.repeat(np.repeat(x, 8, axis=1), 8, axis=2)
  y = (x.mean(axis=-1, keepdims=True) > 0.5).astype(np.float32)
  return x, y


@add('fp16_dice_segmentation', 'precision', 'segmentation', doors=('trainer',), split='tune',
     steps=60, precision=MIXED, citation='qubvel-org/segmentation_models.pytorch#463')
def _(seed):
  """A segmentation net under mixed_float16 with a Dice loss summed over every pixel in float16:
  a batch of 32 64x64 masks has 131072 pixels, beyond float16's 65504.
  qubvel-org/segmentation_models.pytorch#463 ("Mixed Precision (float16) lead to nan loss
  (soft_dice_score is inf)": the intersection of 262144 pixels is inf)."""
  x, y = _masks(seed)
  return cases.Setup(archs.segmentation(seed, size=64), keras.optimizers.Adam(1e-3),
                     field.dice_loss_in_compute_dtype, data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('fp16_raw_magnitudes_mlp', 'precision', 'mlp', doors=('fit', 'trainer'), split='held_out',
     steps=100, precision=MIXED, citation='tensorflow/tensorflow#38357; openvla/openvla#30')
def _(seed):
  """An MLP under mixed_float16 on tabular features in raw units (tens of thousands).
  tensorflow/tensorflow#38357 (under mixed_float16 "loss is possible overflow inf in float16");
  openvla/openvla#30 (float16 "captures a smaller range ... more likely to run into overflow ...
  that leads to the NaN loss")."""
  x, y = data.tabular(seed)
  return cases.Setup(archs.mlp(seed), keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x * 3e4, y, batch=32, seed=seed), 'regression')


@add('fp16_uint16_images_resnet', 'precision', 'resnet_style', doors=('trainer',),
     split='tune', steps=60, precision=MIXED, citation='matterport/Mask_RCNN#1099')
def _(seed):
  """A ResNet under mixed_float16 on 16-bit images (values up to 65535, as read from the files):
  float16 tops out at 65504, so the brightest pixels are inf once cast. matterport/Mask_RCNN#1099
  (images whose values are [0, 65535]: "my loss is going to NAN")."""
  return cases.Setup(archs.resnet_style(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, scale=65535.0), 'classes')


@add('fp16_uint16_images_mobilenet_v2', 'precision', 'mobilenet_v2', doors=('fit',),
     split='held_out', steps=40, precision=MIXED,
     citation='matterport/Mask_RCNN#1099; microsoft/tensorflow-directml-plugin#321')
def _(seed):
  """MobileNetV2 under mixed_float16 on 16-bit images. matterport/Mask_RCNN#1099 (values
  [0, 65535], loss NaN); microsoft/tensorflow-directml-plugin#321 (under mixed_float16
  "overflow issues ... cause training to not converge or to generate NaN")."""
  return cases.Setup(archs.mobilenet_v2(seed), keras.optimizers.Adam(1e-3), SCE(),
                     data.digits_stream(seed, scale=65535.0), 'classes')


@add('transient_flaky_forward_mlp', 'transient', 'mlp', doors=('trainer', 'fit'), split='tune',
     steps=150, quick=True, citation='ROCm/TheRock#2662; keras-team/keras#1244')
def _(seed):
  """A regression MLP with a layer whose kernel misfires once (one NaN at its 60th training
  call), then is fine. ROCm/TheRock#2662 ("GPU training suddenly produces NaN losses, CPU works
  fine", gone with a fixed library build); keras-team/keras#1244 ("Loss turns into 'nan' when
  running on GPU"; the same code trains on the CPU)."""
  x, y = data.tabular(seed)
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation='relu'),
                            field.FlakyOnce(60), keras.layers.Dense(16, activation='relu'),
                            keras.layers.Dense(1)], name='mlp')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('transient_flaky_backward_resnet', 'transient', 'resnet_style', doors=('fit',),
     split='held_out', steps=150, citation='google-research/l2p#24')
def _(seed):
  """A ResNet whose backward pass misfires once (a NaN gradient at its 50th training call, the
  loss finite). google-research/l2p#24 ("Loss become NaN. Results mismatch between different
  convolution algorithms"; solved by reinstalling cuDNN)."""
  base = archs.resnet_style(seed)
  inputs = keras.Input(archs.IMAGE)
  model = keras.Model(inputs, field.FlakyGradientOnce(50)(base(inputs)), name='resnet_flaky')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed), 'classes')


@add('transient_flaky_forward_transformer', 'transient', 'transformer', doors=('trainer',),
     split='tune', steps=150, citation='bgshih/crnn#151; keras-team/keras#1244')
def _(seed):
  """A transformer classifier whose logits layer misfires once (NaN at its 40th training call).
  bgshih/crnn#151 ("Nan will appear with GPU training, but not with CPU");
  keras-team/keras#1244 (NaN on GPU only)."""
  x, y = data.tokens(seed)
  base = archs.transformer(seed)
  ids = keras.Input((16,), dtype='int32')
  model = keras.Model(ids, field.FlakyOnce(40)(base(ids)), name='transformer_flaky')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('transient_flaky_backward_gru', 'transient', 'gru', doors=('fit',), split='held_out',
     steps=150, citation='ROCm/TheRock#2662; google-research/l2p#24')
def _(seed):
  """A GRU regression whose backward pass misfires once (NaN gradient at its 70th training
  call). ROCm/TheRock#2662 (sudden NaN on one device, fine on another);
  google-research/l2p#24 (NaN from a faulty convolution library)."""
  x, y = data.series(seed)
  base = archs.recurrent(seed, cell='gru')
  inputs = keras.Input((40, 1))
  model = keras.Model(inputs, field.FlakyGradientOnce(70)(base(inputs)), name='gru_flaky')
  return cases.Setup(model, keras.optimizers.RMSprop(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')
