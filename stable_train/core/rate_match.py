"""A rate loss on negative outputs: Keras's Poisson loss is y_pred - y_true * log(y_pred + 1e-7),
so a model whose last layer is linear (or a tanh) and already gives a negative rate feeds log()
negative values, a NaN loss. Judged once at the
start, as the other loss/output mismatches (`loss_match`), from the last activation and the
first batch's outputs."""

from typing import Optional

import keras
import numpy as np

from stable_train.core import loss_match

NEGATIVE_RATES = 'signed_outputs_under_a_rate_loss'
# Activations whose outputs are never negative: a rate's log is defined on them (0 is clipped by
# the loss's epsilon).
_NON_NEGATIVE = ('softplus', 'exponential', 'relu', 'sigmoid', 'softmax')
# Activations known to give negative values (the batch-statistics rule names only these).
_SIGNED = ('linear', 'tanh', 'elu', 'selu', 'gelu', 'silu', 'swish', 'leaky_relu', 'softsign',
           'mish', 'hard_silu', 'log_softmax')




def find_signed_rates(loss, outputs, activation: Optional[str], *,
                      batch_statistics: bool = False) -> Optional[loss_match.Mismatch]:
  """The mismatch of a Poisson loss on negative outputs: a negative value among the first
  batch's outputs (inference mode) from a last activation that is not non-negative, or, in a
  model that normalises by batch statistics in training (`batch_statistics`, BatchNormalization:
  the inference outputs of an untrained one say little of the rates the loss sees), a known
  signed activation (linear, tanh, ...) whatever those outputs; None otherwise (a non-negative
  activation, or outputs all positive otherwise: an identity link may be meant)."""
  poisson = loss_match.loss_function(loss) is keras.losses.poisson
  if not poisson or outputs is None or activation in _NON_NEGATIVE:
    return None
  outputs = np.asarray(outputs, np.float64)
  if outputs.size == 0 or not np.all(np.isfinite(outputs)):
    return None
  low = float(outputs.min())
  unseen = batch_statistics and activation in _SIGNED and not low < 0
  if not (low < 0 or unseen):
    return None
  shown = f'a {activation} output' if activation else 'outputs of an unknown activation'
  return loss_match.Mismatch(
      NEGATIVE_RATES,
      f'the loss poisson takes the log of the outputs (a rate, which must be positive), but the '
      f'model ends in {shown}, from {low:.3g} to {float(outputs.max()):.3g} on the first batch'
      + (" in inference mode (in training, BatchNormalization's batch statistics give the loss "
         'other rates)' if unseen else '') + ': a negative rate makes its log, and the loss, NaN',
      "end the model in a positive activation: activation='softplus' on the last layer, or "
      "'exponential' (a log link)",
      "# no binding: the last layer's activation is in the model's code "
      "(activation='softplus')")


def uses_batch_statistics(model) -> bool:
  """Whether `model` normalises by batch statistics in training: a trainable BatchNormalization
  among its layers and nested models' (a frozen one uses its moving statistics in training too):
  its outputs then differ between inference and training."""
  stack = [model]
  while stack:
    layer = stack.pop()
    if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable:
      return True
    stack.extend(getattr(layer, 'layers', None) or [])
  return False
