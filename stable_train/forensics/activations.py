"""Activation scales: each layer's output magnitude on a batch, the evidence that tells an
overflow (softmax/exp, float16's 65504) from a bad loss or bad input."""

import math
import weakref
from typing import Any, Dict, List

import keras
import numpy as np

FLOAT16_MAX = 65504.0
EXP_OVERFLOW = 88.7  # exp(x) overflows float32 above this.

_EXTRACTORS: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


def _extractor(model):
  """A Keras model returning every top-level layer's output (cached), or None when the model is
  not a graph of layers (a subclassed model or a plain tf.Module)."""
  if model in _EXTRACTORS:
    return _EXTRACTORS[model]
  extractor = None
  if isinstance(model, keras.Model):
    try:
      layers = [l for l in model.layers if not isinstance(l, keras.layers.InputLayer)
                and not isinstance(l.output, (list, tuple, dict))]  # One tensor each.
      inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
      extractor = (keras.Model(inputs, [l.output for l in layers]),
                   [l.name for l in layers])
    except (AttributeError, ValueError, TypeError):  # Not a functional graph of layers.
      extractor = None
  _EXTRACTORS[model] = extractor
  return extractor


def activation_scales(model, features) -> List[Dict[str, Any]]:
  """Per top-level layer of a functional or Sequential Keras model, on `features` in inference
  mode (nothing assigned): its output's largest magnitude among finite values, RMS, dtype,
  whether it is finite. [] for a model that is not a graph of layers, or one that cannot take the
  batch's features as they are (a compute_loss of the Trainer's own feeds it otherwise)."""
  extractor = _extractor(model)
  if extractor is None:
    return []
  fn, names = extractor
  try:  # stateless_call: a plain call in inference mode still advances an LSTM's seed state.
    outputs, _ = fn.stateless_call([v.value for v in fn.trainable_variables],
                                   [v.value for v in fn.non_trainable_variables], features,
                                   training=False)
  except (ValueError, TypeError):
    return []
  outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
  scales = []
  for name, out in zip(names, outputs):
    value = np.asarray(out)
    if not np.issubdtype(value.dtype, np.floating) or not value.size:
      continue
    wide = value.astype(np.float64)
    finite = np.isfinite(wide)
    kept = np.abs(wide[finite])
    scales.append({'layer': name, 'dtype': str(value.dtype), 'finite': bool(finite.all()),
                   'max_abs': float(kept.max()) if kept.size else math.nan,
                   'rms': float(np.sqrt(np.mean(np.square(kept)))) if kept.size else math.nan})
  return scales
