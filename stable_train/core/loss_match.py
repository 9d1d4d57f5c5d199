"""The loss/output mismatch: probabilities fed to a cross-entropy that expects logits, logits fed
to one that expects probabilities, sigmoids fed to a categorical one; judged from a model's
outputs on a batch and its last activation (`find_mismatch`), with the fix as code and as gin.
Labels a loss or a head cannot fit are `label_range`'s."""

import dataclasses
from typing import Dict, Optional

import keras
import numpy as np

from stable_train.core import heads
from stable_train.core import losses

PROBABILITIES_TO_LOGITS = 'probabilities_to_logits_loss'
LOGITS_TO_PROBABILITIES = 'logits_to_probability_loss'
SIGMOID_TO_CATEGORICAL = 'sigmoid_to_categorical_loss'
BOUNDED_OUTPUTS = 'bounded_outputs_under_a_regression_loss'
ONE_UNIT_SOFTMAX, SOFTMAX_MULTI_LABEL = 'softmax_over_one_unit', 'softmax_over_multi_labels'
BINARY_LABELS_OUTSIDE = 'labels_outside_a_binary_loss'
KINDS = (PROBABILITIES_TO_LOGITS, LOGITS_TO_PROBABILITIES, SIGMOID_TO_CATEGORICAL,
         BOUNDED_OUTPUTS, ONE_UNIT_SOFTMAX, SOFTMAX_MULTI_LABEL, BINARY_LABELS_OUTSIDE)
_REGRESSION = ('mean_squared_error', 'mean_absolute_error', 'huber', 'log_cosh',
               'mean_absolute_percentage_error', 'mean_squared_logarithmic_error')

# Keras's cross-entropy functions (and the two of core.losses, which take logits) by family.
_FAMILIES = {
    keras.losses.sparse_categorical_crossentropy: ('sparse', 'SparseCategoricalCrossentropy'),
    keras.losses.categorical_crossentropy: ('categorical', 'CategoricalCrossentropy'),
    keras.losses.categorical_focal_crossentropy: ('categorical', 'CategoricalFocalCrossentropy'),
    keras.losses.binary_crossentropy: ('binary', 'BinaryCrossentropy'),
    keras.losses.binary_focal_crossentropy: ('binary', 'BinaryFocalCrossentropy'),
}
_OWN_LOGIT_LOSSES = (losses.sparse_softmax_cross_entropy, losses.naive_softmax_cross_entropy)
# Margins far above any rounding: a value this far outside [0, 1] is no probability; a row sum
# this far from 1 is no softmax. Between "sums to 1" and "clearly not" the verdict is unsure.
OUTSIDE, NOT_ONE = 0.01, 0.1
# Rows a batch needs before one unit at 1 on every row reads as a softmax over it.
_MIN_ROWS = 8


@dataclasses.dataclass(frozen=True)
class LossTerms:
  """What a loss expects: `family` ('sparse', 'categorical' or 'binary'), `from_logits`, `name`
  (the Keras class that computes it, for the fix), `shown` (the loss as given, for the message)."""
  family: str
  from_logits: bool
  name: str
  shown: str


@dataclasses.dataclass(frozen=True)
class Mismatch:
  """A finding: `kind` (one of KINDS), a one-line `message`, the `fix` as code and as `gin`."""
  kind: str
  message: str
  fix: str
  gin: str

  def fields(self) -> Dict[str, str]:
    return dataclasses.asdict(self)


def loss_terms(loss) -> Optional[LossTerms]:
  """What `loss` expects: a Keras loss object, a Keras loss function or name, a per-example
  function wrapped as a loss (`keras_parts.as_loss`), or one of core.losses' (logits). None
  for any other loss (a regression loss, a custom callable, a loss per output)."""
  if isinstance(loss, str):
    try:
      loss = keras.losses.get(loss)
    except ValueError:
      return None
  config, wrapper = {}, None
  if isinstance(loss, keras.losses.Loss):
    try:
      config = loss.get_config() or {}
    except (NotImplementedError, TypeError, ValueError):
      return None
    wrapper, loss = loss, getattr(loss, 'fn', None)  # Keras's wrappers and as_loss's.
  name = getattr(loss, '__name__', '?')
  if any(loss is f for f in _OWN_LOGIT_LOSSES):
    return LossTerms('sparse', True, 'SparseCategoricalCrossentropy', f'{name} (logits)')
  family = next((v for f, v in _FAMILIES.items() if loss is f), None)
  from_logits = config.get('from_logits', False)  # The functions' default.
  if family is None or not isinstance(from_logits, (bool, np.bool_)):
    return None
  shown = (type(wrapper).__name__ if type(wrapper).__name__ == family[1] else name)
  return LossTerms(family[0], bool(from_logits), family[1],
                   f'{shown}(from_logits={bool(from_logits)})')


def _eps(dtype) -> Optional[float]:
  """A float dtype's machine epsilon (bfloat16's too, which numpy does not count as floating)."""
  if getattr(dtype, 'name', '') == 'bfloat16':
    return 2.0**-7
  return float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else None


def _shape(outputs: np.ndarray, eps: float):
  """How the outputs read as numbers: 'outside' [0, 1] by a clear margin, 'distribution' (in
  [0, 1], two columns or more, every row summing to 1 within rounding), 'unit' (in [0, 1]; a
  row summing clearly not to 1, or one column), or None (unsure: between the margins)."""
  rows = outputs.astype(np.float64).reshape(-1, outputs.shape[-1])
  low, high = float(rows.min()), float(rows.max())
  margin = min(0.1, max(OUTSIDE, 16 * eps))
  if low < -margin or high > 1 + margin:
    return 'outside'
  if low < -8 * eps or high > 1 + 8 * eps:
    return None
  if rows.shape[1] == 1:
    return 'unit'
  off = float(np.max(np.abs(rows.sum(axis=1) - 1.0)))
  if off <= min(0.05, max(1e-3, 2 * eps * rows.shape[1])):
    return 'distribution'
  return 'unit' if off > NOT_ONE else None


def find_mismatch(loss, outputs, activation: Optional[str] = None, *,
                  read_ones: bool = True) -> Optional[Mismatch]:
  """The loss/output mismatch of `loss` on a model's `outputs` (one float array, e.g. on the
  first batch in inference mode), with the model's last `activation` where known
  (`heads.last_activation`); None when they agree or the verdict is unsure.

  The numbers must show it, and a known activation must not contradict them: probabilities
  (rows in [0, 1] summing to 1, or a softmax/sigmoid in [0, 1]) into a from_logits=True
  cross-entropy; values clearly outside [0, 1], or a Keras activation that makes no
  probabilities (relu, linear, ...: then whatever the values), into a from_logits=False one (an
  activation of one's own, a softmax by hand, is read as unknown); values in [0, 1] whose rows
  clearly do not sum to 1 (a sigmoid) into a categorical one of two classes or more; a softmax
  over one unit (1 for every input) into any of them, also where the activation cannot be read
  (a Lambda) and one unit is exactly 1 on every row of an untrained model's float32 batch
  (`_all_ones`; `read_ones` False where a saturated sigmoid could explain it: raw inputs).
  """
  terms = loss_terms(loss)
  if terms is None or outputs is None:
    return None
  if activation not in heads.PROBABILITY_ACTIVATIONS + heads.LOGIT_ACTIVATIONS:
    activation = None
  outputs = np.asarray(outputs)
  eps = _eps(outputs.dtype)
  outputs = outputs.astype(np.float32) if outputs.dtype.name == 'bfloat16' else outputs
  if eps is None or outputs.ndim == 0 or outputs.size == 0 or not np.all(np.isfinite(outputs)):
    return None
  shape = _shape(outputs, eps)
  columns = outputs.shape[-1]
  categorical = terms.family != 'binary'
  if columns == 1 and (activation == 'softmax' or (
      activation is None and read_ones and _all_ones(outputs, eps))):
    return _one_unit_softmax(terms, activation)
  if (columns > 1 and terms.family == 'binary' and activation is None and read_ones
      and _all_ones(outputs, eps)):  # Towers side by side, each a softmax over its one unit.
    return _one_unit_softmax(terms, activation, columns)
  if terms.family == 'categorical' and columns == 1:
    return _one_column(terms, activation)
  # A known head that makes no probabilities (linear, relu, ...) under a loss that expects them
  # is a mismatch whatever its values, tiny logits included (the numbers then unsure).
  known_logits = (not terms.from_logits and activation is not None
                  and activation not in heads.PROBABILITY_ACTIVATIONS)
  if (shape is None and not known_logits) or (categorical and columns < 2):
    return None
  in_unit = shape in ('unit', 'distribution')
  if activation in heads.UNIT_ACTIVATIONS and categorical and in_unit:
    return _sigmoid_to_categorical(terms, outputs)
  probabilities = (shape == 'distribution' if categorical and activation in (None, 'softmax')
                   else in_unit and activation in heads.PROBABILITY_ACTIVATIONS)
  if terms.from_logits and probabilities:
    return _probabilities_to_logits(terms, activation)
  if not terms.from_logits and activation not in heads.PROBABILITY_ACTIVATIONS and (
      shape == 'outside' or activation is not None):
    return _logits_to_probabilities(terms, outputs, activation, shape == 'outside')
  if (not terms.from_logits and categorical and shape == 'unit'
      and activation in (None,) + heads.UNIT_ACTIVATIONS):
    return _sigmoid_to_categorical(terms, outputs)
  return None


def _loss_code(terms: LossTerms, from_logits: bool) -> str:
  return f'keras.losses.{terms.name}(from_logits={from_logits})'


def _loss_gin(name: str, from_logits: bool) -> str:
  return (f'Trainer.loss = @keras.losses.{name}()\n'
          f'keras.losses.{name}.from_logits = {from_logits}')


def _probabilities_to_logits(terms: LossTerms, activation: Optional[str]) -> Mismatch:
  what = ('values in [0, 1]' if activation in heads.UNIT_ACTIVATIONS
          else 'rows in [0, 1] summing to 1')
  return Mismatch(
      PROBABILITIES_TO_LOGITS,
      f"the model's outputs are probabilities ({activation or 'unknown activation'}: {what}) "
      f'but the loss {terms.shown} takes them for logits and squashes them a second time, '
      'which trains slowly (unless Keras sees through the activation, and warns)',
      f"drop the {activation or 'softmax'} from the last layer (the loss then gets logits, the "
      f'stable form), or use {_loss_code(terms, False)}',
      _loss_gin(terms.name, False))


def _logits_to_probabilities(terms: LossTerms, outputs: np.ndarray,
                             activation: Optional[str], outside: bool) -> Mismatch:
  shown = f'{activation}: ' if activation else ''
  where = 'outside [0, 1]' if outside else 'no probabilities, whatever their values now'
  return Mismatch(
      LOGITS_TO_PROBABILITIES,
      f"the model's outputs are logits ({shown}values from {float(np.min(outputs)):.3g} to "
      f'{float(np.max(outputs)):.3g}, {where}) but the loss {terms.shown} expects '
      'probabilities: it clips them into [1e-7, 1 - 1e-7], and the clipped ones give no '
      'gradient',
      f'use {_loss_code(terms, True)} (the stable form), or end the model in a '
      f"{'sigmoid' if terms.family == 'binary' else 'softmax'}",
      _loss_gin(terms.name, True))


def _sigmoid_to_categorical(terms: LossTerms, outputs: np.ndarray) -> Mismatch:
  sums = outputs.astype(np.float64).reshape(-1, outputs.shape[-1]).sum(axis=1)
  one_label = (f'a softmax on the last layer with {_loss_code(terms, False)}, or no '
               f'activation with {_loss_code(terms, True)} (one class per example)')
  if terms.family == 'sparse':  # Class-id labels: one class per example, no binary reading.
    fix, gin = one_label, ("# no binding: the last layer's activation is in the model's code "
                           "(activation='softmax')")
  else:
    fix = f'{one_label}; keras.losses.BinaryCrossentropy() for several labels per example'
    gin = _loss_gin('BinaryCrossentropy', False) + '  # several labels per example'
  effect = ('takes them for logits: squashed into [0, 1], they cannot make a confident '
            'prediction' if terms.from_logits else
            'reads each row as one distribution over the classes')
  return Mismatch(
      SIGMOID_TO_CATEGORICAL,
      f"the model's outputs are independent sigmoids (each in [0, 1], rows summing to "
      f'{sums.min():.3g} to {sums.max():.3g}) but the categorical loss {terms.shown} {effect}',
      fix, gin)


def _one_column(terms: LossTerms, activation: Optional[str]) -> Mismatch:
  """A categorical cross-entropy over one output column: one class, always right, so the loss is
  0 and its gradient 0 whatever the model outputs (a sigmoid head for two classes)."""
  return Mismatch(
      SIGMOID_TO_CATEGORICAL,
      f"the model has one output ({activation or 'unknown activation'}) but the loss "
      f'{terms.shown} reads each row as a distribution over its classes: over one column it is '
      '0 whatever the model outputs, and nothing trains',
      'keras.losses.BinaryCrossentropy() for a 0/1 label (a sigmoid output), or one output per '
      'class with a softmax and keras.losses.CategoricalCrossentropy()',
      _loss_gin('BinaryCrossentropy', False))


def _all_ones(outputs: np.ndarray, eps: float) -> bool:
  """Whether one unit is exactly 1 on every row of a batch of at least _MIN_ROWS, in float32 or
  wider (`eps` their precision's): what a softmax over one unit gives (exp(0) / exp(0)), and a
  float32 sigmoid only from logits beyond 16.6 on every row at once (a float16 one from 8.3, a
  bfloat16 one from 5.5: not read)."""
  rows = outputs.reshape(len(outputs), -1) if outputs.ndim else outputs.reshape(1, -1)
  return (eps <= float(np.finfo(np.float32).eps) and len(rows) >= _MIN_ROWS
          and bool(np.all(rows == 1.0)))


def _one_unit_softmax(terms: LossTerms, activation: Optional[str], columns: int = 1) -> Mismatch:
  """A softmax over one unit: 1 for every input, so the loss cannot move it (its gradient is 0);
  with `columns` > 1, every one of a binary loss's outputs so (one such head per task)."""
  what = ('a softmax over one unit' if activation == 'softmax' else
          f'{columns} outputs that each look like a softmax over one unit (the untrained '
          "model's all exactly 1.0)" if columns > 1 else
          'one unit that is 1.0 for every input before training (a softmax over one unit, perhaps '
          'inside a Lambda)')
  return Mismatch(
      ONE_UNIT_SOFTMAX,
      f"the model ends in {what}, which {'are' if columns > 1 else 'is'} 1 for every input, "
      f'under the loss '
      f'{terms.shown}: the output never moves, and nothing trains',
      "a sigmoid on the one unit with keras.losses.BinaryCrossentropy() for a 0/1 label "
      "(activation='sigmoid'), or one unit per class with the softmax",
      _loss_gin('BinaryCrossentropy', False) + "  # and activation='sigmoid' in the model")


def loss_function(loss):
  """The per-example function behind a Keras loss (an object's `fn`, a function, or a name such
  as 'mse'); None for a name Keras does not know."""
  if isinstance(loss, str):
    try:
      loss = keras.losses.get(loss)
    except ValueError:
      return None
  return getattr(loss, 'fn', loss) if isinstance(loss, keras.losses.Loss) else loss


def regression_loss(loss) -> Optional[str]:
  """A Keras regression loss's name (`loss` an object, function or name, e.g. 'mse'), else None."""
  name = getattr(loss_function(loss), '__name__', '')
  return name if name in _REGRESSION else None


def describe(found: Mismatch) -> str:
  """The finding as one log line: the message, the fix in code and in gin."""
  return (f'loss/output mismatch: {found.message}; fix: {found.fix}; in gin: '
          f"{'; '.join(found.gin.splitlines())}")

