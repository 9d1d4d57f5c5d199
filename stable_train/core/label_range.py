"""Labels a loss or the model's head cannot fit: a regression's labels outside the range of a
bounded last activation (`find_unreachable_labels`), a binary cross-entropy's outside [0, 1]
(`find_binary_labels_outside`); each a `loss_match.Mismatch` with the fix as code and as gin."""

from typing import Optional

import numpy as np

from stable_train.core import keras_parts
from stable_train.core import loss_match

# The range each bounded activation's outputs lie in (a softmax over one unit: 1 for every input).
_BOUNDS = {'sigmoid': (0.0, 1.0), 'softmax': (0.0, 1.0), 'tanh': (-1.0, 1.0)}


def find_unreachable_labels(loss, labels, activation: Optional[str],
                            columns: int) -> Optional[loss_match.Mismatch]:
  """A regression loss whose labels lie clearly outside what the last activation can output
  (a sigmoid or softmax in [0, 1], a tanh in [-1, 1], a softmax over one unit always 1): the
  outputs can never reach them, and the loss stalls. None when they can, or it cannot be told."""
  name = loss_match.regression_loss(loss)
  if name is None or activation not in _BOUNDS or labels is None:
    return None
  labels = np.asarray(labels, np.float64)
  if labels.size == 0 or not np.all(np.isfinite(labels)):
    return None
  low, high = _BOUNDS[activation]
  if activation == 'softmax' and columns == 1:
    low = high = 1.0
  margin = 0.1 * max(high - low, 1.0)
  below, above = float(labels.min()), float(labels.max())
  if below >= low - margin and above <= high + margin:
    return None
  what = ('a softmax over one unit, 1 for every input' if low == high else
          f'a {activation}, always in [{low:g}, {high:g}]')
  return loss_match.Mismatch(
      loss_match.BOUNDED_OUTPUTS,
      f"the model's last activation is {what}, but the labels of the loss {name} run from "
      f'{below:.3g} to {above:.3g}: the outputs can never reach them, and the loss stalls',
      "drop the last layer's activation (a linear output for a regression), or scale the "
      'labels into its range; for class ids, a softmax over the classes with '
      'keras.losses.SparseCategoricalCrossentropy()',
      "# no binding: the last layer's activation is in the model's code (activation=None)")


def find_binary_labels_outside(loss, labels) -> Optional[loss_match.Mismatch]:
  """A Keras binary cross-entropy whose labels lie clearly outside [0, 1] (ratings from 1 to 5,
  -1/+1 targets): its terms -y log(p) - (1 - y) log(1 - p) have no minimum there, so the loss
  falls without bound (below 0) while the model learns nothing. None when they are in [0, 1]
  (soft labels too), when one negative value marks rows of a 0/1 task (an "ignore" label that a
  sample weight of 0 or a mask keeps out of the loss), for a subclass with its own `call`, or
  where it cannot be told (the caller leaves out batches with sample weights)."""
  terms = loss_match.loss_terms(loss)
  if (terms is None or terms.family != 'binary' or labels is None
      or not keras_parts.plain_call(loss)):
    return None
  labels = np.asarray(labels, np.float64)
  if labels.size == 0 or not np.all(np.isfinite(labels)):
    return None
  in_range = (labels >= -loss_match.OUTSIDE) & (labels <= 1.0 + loss_match.OUTSIDE)
  outside, inside = np.unique(labels[~in_range]), labels[in_range]
  if not outside.size or (outside.size == 1 and outside[0] < 0 and inside.size
                          and inside.min() <= loss_match.OUTSIDE
                          and inside.max() >= 1.0 - loss_match.OUTSIDE):
    return None
  return loss_match.Mismatch(
      loss_match.BINARY_LABELS_OUTSIDE,
      f'the labels of the loss {terms.shown} run from {labels.min():.3g} to {labels.max():.3g}, '
      'but a binary cross-entropy takes labels in [0, 1]: outside it the loss has no minimum '
      'and falls below 0 without bound while the model learns nothing',
      'for a regression (ratings, counts), a linear last layer with keras.losses.'
      'MeanSquaredError(); for classes, labels 0/1 (or class ids with keras.losses.'
      'SparseCategoricalCrossentropy() over one unit per class)',
      'Trainer.loss = @keras.losses.MeanSquaredError()')
