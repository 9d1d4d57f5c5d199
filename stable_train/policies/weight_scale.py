"""The initial weights' scale against the standard one: whether outputs that start far off scale
come from the weights (an initialiser too wide, a mean taken for a standard deviation) or from
a forward computation that scales sound weights up (a sum over an unnormalised adjacency, a
division by a small temperature). Host-side, at a broken start's check; the doctor reads 3 or
more as off scale (`doctor.evidence.KERNEL_OFF_SCALE`: He's initialiser gives 1.41, Glorot's
less)."""

import math
from typing import Dict, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

# Kernels whose RMS is this many times LeCun's or more are off the standard scale (the doctor's
# `evidence.KERNEL_OFF_SCALE` too); inputs of an RMS above INPUTS_LARGE are not normalised (its
# `symptoms.INPUTS_LARGE` too).
OFF_SCALE, INPUTS_LARGE = 3.0, 10.0



def kernel_ratio(variables: Sequence, values: Optional[Sequence] = None,
                 fan_ins: Optional[Dict[str, int]] = None) -> Optional[float]:
  """The weights' scale against the standard one, with `values` (numpy, in the order of
  `variables`) or their current ones: the largest of each kernel's RMS / sqrt(1 / fan_in)
  (a weight of rank 2 or more whose path does not end in 'embeddings': a Dense or convolution
  kernel, or a custom layer's weight matrix; fan_in from `fan_ins` by path (an EinsumDense's,
  `einsum_fan_ins`), else the product of all but the last dimension) and every other weight's
  plain RMS (a bias starts at 0, a scale at 1, an embedding at 0.05: each row read alone, no
  fan-in; a bias of 300 is off scale). None without a kernel, or with a weight that is not
  finite."""
  values = [None] * len(variables) if values is None else values
  fan_ins = fan_ins or {}
  ratios, kernels = [], 0
  for v, value in zip(variables, values):
    path = str(getattr(v, 'path', getattr(v, 'name', '')))
    shape = tuple(int(d) for d in v.shape)
    if not _floating(v) or 0 in shape:
      continue
    array = np.asarray(v.numpy() if value is None else value, np.float64)
    rms = float(np.sqrt(np.mean(np.square(array))))
    if not math.isfinite(rms):
      return None
    kernel = len(shape) >= 2 and not path.split(':')[0].endswith('embeddings')
    kernels += kernel
    fan_in = fan_ins.get(path, np.prod(shape[:-1]))
    ratios.append(rms * math.sqrt(float(fan_in)) if kernel else rms)
  return max(ratios) if kernels else None


def einsum_fan_ins(model) -> Dict[str, int]:
  """The fan-in of each EinsumDense kernel in `model` (an attention layer's projections), by
  the kernel's path: the product of its dimensions summed against the input's in the layer's
  equation ('abc,cde->abde': c, the model width, not c x d). {} where there is none."""
  found = {}
  for layer in _layers(model):
    equation = getattr(layer, 'equation', None)
    if not isinstance(equation, str) or equation.count('->') != 1 or equation.count(',') != 1:
      continue
    try:  # A layer it cannot read (a kernel property that fails) keeps the plain rule.
      kernel = getattr(layer, 'kernel', None)
      (inputs, letters), out = equation.split('->')[0].split(','), equation.split('->')[1]
      dims = [int(d) for d in kernel.shape]
    except Exception:  # pylint: disable=broad-except
      continue
    summed = [d for c, d in zip(letters, dims) if c in inputs and c not in out]
    if len(letters) == len(dims) and summed:
      found[str(getattr(kernel, 'path', ''))] = int(np.prod(summed))
  return found


def depthwise_fan_ins(model) -> Dict[str, int]:
  """The fan-in of each depthwise kernel in `model` (a DepthwiseConv's, a SeparableConv's
  depthwise part), by the kernel's path: its window's size alone (each output channel reads one
  input channel: a (3, 3, 1152, 1) kernel sums over 9 inputs, not 9 x 1152, which read
  EfficientNetV2's own initialiser as 48x LeCun's). {} where there is none."""
  found = {}
  for layer in _layers(model):
    if isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
      kernel = getattr(layer, 'kernel', None)
    elif isinstance(layer, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
      kernel = getattr(layer, 'depthwise_kernel', None)
    else:
      continue
    try:  # A layer not built yet has no kernel: the plain rule.
      found[str(kernel.path)] = int(np.prod([int(d) for d in kernel.shape[:-2]]))
    except Exception:  # pylint: disable=broad-except
      continue
  return found


def _layers(model) -> list:
  """Every layer (and other trackable) inside `model`; [] where it cannot be walked (the plain
  rule then)."""
  try:
    return tf.train.TrackableView(model).descendants() if model is not None else []
  except Exception:  # pylint: disable=broad-except
    return []


def _floating(v) -> bool:
  """Whether a variable holds floating values (a Keras or TensorFlow variable)."""
  name = str(getattr(v.dtype, 'name', v.dtype))
  return 'float' in name


def fields(variables: Sequence, values: Optional[Sequence] = None,
           model=None) -> Dict[str, float]:
  """`{'kernel_ratio': kernel_ratio(...)}` for a broken start's warning event, with the fan-ins
  of `model`'s EinsumDense and depthwise kernels; {} where None."""
  ratio = kernel_ratio(variables, values, {**einsum_fan_ins(model), **depthwise_fan_ins(model)})
  return {} if ratio is None else {'kernel_ratio': ratio}


def by_design(fields_: Dict[str, float], input_rms: float) -> bool:
  """Whether outputs far off scale are the model's design, not a broken start: the kernels at a
  standard scale (`fields`'s ratio below OFF_SCALE) and the inputs normalised (RMS at most
  INPUTS_LARGE), so the forward computation itself scales them (logits over a temperature of
  0.01, a sum over an unnormalised adjacency). False where the kernels were not measured."""
  ratio = fields_.get('kernel_ratio')
  return ratio is not None and ratio < OFF_SCALE and 0 <= input_rms <= INPUTS_LARGE


def penalty(model, start_loss: float) -> float:
  """The model's weight penalties now (`model.losses`: kernel regularisers, `add_loss`), which
  the reported loss includes: an L2 over a deep net's kernels is no cross-entropy. 0 where they
  cannot be read, are not finite, or are not below `start_loss`."""
  try:
    total = sum(float(tf.reduce_sum(l)) for l in getattr(model, 'losses', []))
  except Exception:  # pylint: disable=broad-except  # Symbolic activity losses, say.
    return 0.0
  return total if math.isfinite(total) and 0.0 < total < start_loss else 0.0
