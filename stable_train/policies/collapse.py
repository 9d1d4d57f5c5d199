"""The collapse probe of DivergenceCheck: whether a model's outputs stopped depending on the
example, judged against an untrained model of the same architecture (host side, eager)."""

import logging
from typing import Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from stable_train.core import heads
from stable_train.policies import diagnostics

log = logging.getLogger('stable_train')

# A model is collapsed whose outputs on the first batch vary from row to row by at most this
# fraction of their scale, in inference and in training mode (a dead ReLU net: exactly 0 on any
# CPU; a healthy net: 1e-2 and more; a BatchNorm net early in training may be constant in
# inference mode only, its moving statistics behind). A tolerance, never bit equality: no verdict
# hangs on a kernel's last bits...
COLLAPSE_SPREAD = 1e-5
# ...where an untrained model of the same architecture varied by more than COLLAPSE_SPREAD of the
# outputs' scale now (outputs the same for every row are no news in a model that started that
# way: an untrained keras.applications model's outputs, in inference mode, are the same for every
# row, or vary at 1e-21 to 1e-11, nothing next to a trained head's bias; an untrained regression
# whose outputs were small beside unscaled targets, 0.05 against 70, varied at 6e-4 of the
# outputs' scale once they predict the targets' mean), or where the run's own initial weights
# (a subclassed model's) varied by more than UNTRAINED_SPREAD of their own scale.
UNTRAINED_SPREAD = 1e-3
_UNKNOWN = object()


class CollapseProbe:
  """Probes the outputs' spread and keeps the untrained reference, measured once per process:
  a fresh copy of the model (`untrained_deviation`), else the initial weights'
  (`measure_initial`, at the start check), else unknown (no verdict)."""

  def __init__(self):
    self._initial = None  # The initial weights' (deviation, scale), when the start check had them.
    self._fresh = _UNKNOWN  # A fresh copy's (deviation, scale) (None: it cannot be copied).
    self._features = _UNKNOWN  # The model up to its last layer's inputs (None: none to cut).
    self._lifted = False  # A gradient reached a weight since the last probe (`saw`).

  def measure_initial(self, probe, weights) -> None:
    """Keeps the deviation of the model's outputs with its initial `weights`."""
    self._initial = diagnostics.output_deviation(probe, weights)

  def started_varied(self) -> bool:
    """Whether this run's own initial weights gave outputs that varied from row to row (more
    than `UNTRAINED_SPREAD` of their scale); False where they were not measured."""
    return self._initial is not None and self._initial[0] > UNTRAINED_SPREAD * self._initial[1]

  def untrained(self, probe) -> Optional[Tuple[float, float]]:
    """An untrained model's (deviation, scale) on the first batch, or None where unknown."""
    if self._fresh is _UNKNOWN:
      self._fresh = untrained_deviation(probe)
    return self._initial if self._fresh is None else self._fresh

  def collapsed(self, probe) -> Optional[Tuple[float, float]]:
    """(the outputs' spread, the untrained model's deviation over the outputs' scale now) when
    the model collapsed, else None."""
    found = constant(probe)
    if found is None:
      return None
    deviation, scale = found
    if self._initial is not None and not self.started_varied() and _own_class(probe.model):
      return None  # A subclassed model's own start gave one output for all: its config can
      # miss a constructor argument (its initialiser), so a fresh copy is no reference. (A
      # Keras-built model's copy is; its own start may be resumed dead weights.)
    untrained = self.untrained(probe)
    reference = None if untrained is None else untrained[0] / max(scale, untrained[1], 1e-30)
    if reference is None or not reference > COLLAPSE_SPREAD:
      log.debug('outputs the same for every example, as an untrained model\'s (%s): no collapse',
                reference)
      return None
    return (deviation / scale if scale > 0 else 0.0), reference


  def saw(self, reports) -> None:
    """Notes whether a gradient reached a weight (a norm above 0) in the loop's applied steps."""
    norms = np.asarray(reports.grad_norm, np.float64)[np.asarray(reports.applied, bool)]
    self._lifted = self._lifted or bool(np.any(norms > 0.0))

  def at_floor(self, probe) -> bool:
    """Whether the model's outputs on the first batch are all 0 from a ReLU output over features
    that vary from row to row (inference mode, more than `COLLAPSE_SPREAD` of their scale): a
    head below 0 on these rows. False where unknown (a subclassed model, several outputs)."""
    outputs = diagnostics.output_deviation(probe)
    if outputs is None or outputs[1] != 0.0 or heads.last_activation(probe.model) != 'relu':
      return False
    if self._features is _UNKNOWN:
      self._features = feature_model(probe.model)
    found = None if self._features is None else diagnostics.output_deviation(
        probe, model=self._features)
    return found is not None and bool(found[0] > COLLAPSE_SPREAD * found[1])

  def report(self, run, step: int, details) -> bool:
    """Probes the run's model (`collapsed`); a collapse is a `divergence_check` event (rule
    'collapsed', the spreads, the smoothed and best loss of `details`) and a log line. Whether
    it collapsed. A ReLU output at 0 on the first batch over features that vary (`at_floor`)
    while gradients still reached the weights since the last probe (`saw`) is none: other rows
    lift that head (a regression on targets mostly 0, early on or where the first batch's are
    all 0); with no gradient at all, nothing can, and it is. A model with weight penalties
    (`model.losses`) always has a gradient, so there the flow tells nothing: a collapse."""
    lifted, self._lifted = self._lifted, False
    spreads = self.collapsed(run.probe)
    if spreads is None:
      return False
    if lifted and not _penalised(run.probe.model) and self.at_floor(run.probe):
      log.debug('step %d: a ReLU output at 0 on the first batch, gradients flowing: no collapse',
                step)
      return False
    run.emit('divergence_check', step, rule='collapsed', verdict='model',
             output_spread=spreads[0], untrained_spread=spreads[1],
             smoothed_loss=details['smoothed'], best=details['best'])
    log.warning("step %d: the model's outputs on the first batch are the same for every example "
                "(spread %.3g, an untrained model's %.3g): the network collapsed", step, *spreads)
    return True


def _penalised(model) -> bool:
  """Whether the model adds losses of its own (weight penalties: their gradient is never 0)."""
  try:
    return bool(getattr(model, 'losses', None))
  except Exception:  # pylint: disable=broad-except
    return True


def _own_class(model) -> bool:
  """Whether the model's class is the user's (subclassed), not one Keras rebuilds from its
  config (Sequential, Functional, keras.applications)."""
  return not type(model).__module__.startswith('keras.')


def modes(model) -> Tuple[bool, ...]:
  """The modes a probe reads `model` in (`training` flags): inference mode, and training mode too
  where inference mode reads state that training mode replaces by the batch's own (moving
  statistics, BatchNorm's: a non-trainable float variable; a frozen layer's weights count too);
  inference mode alone elsewhere, where training mode differs only by its dropout draws, noise a
  verdict must not hang on (the two front doors' draws differ). Both where unknown."""
  try:
    held = list(model.non_trainable_variables)
  except Exception:  # pylint: disable=broad-except  (a plain tf.Module may have none to list)
    return (False, True)
  return (False, True) if any(tf.as_dtype(v.dtype).is_floating for v in held) else (False,)


def constant(probe) -> Optional[Tuple[float, float]]:
  """(the outputs' deviation, their scale) in inference mode when the model's outputs on the
  first batch are the same for every row, within `COLLAPSE_SPREAD` of their scale, in inference
  and (where it reads moving statistics, `modes`) in training mode, while its labels are not
  (the same output for a batch of one class, or for a target that is itself constant, is the
  right answer); else None (or where the probe cannot tell)."""
  if labels_constant(probe):
    return None
  for training in modes(probe.model):  # Training mode only when inference mode is constant.
    found = diagnostics.output_deviation(probe, training=training)
    if found is None or found[0] > COLLAPSE_SPREAD * found[1]:
      return None
    if not training:
      inference = found
  return inference


def labels_constant(probe) -> bool:
  """Whether the first batch's numeric labels are the same in every row (within
  `COLLAPSE_SPREAD` of their scale); False without labels."""
  first = probe.first_batch()
  if first is None:
    return False
  labels = [np.asarray(t) for t in tf.nest.flatten(probe.split_batch(first)[1])
            if np.ndim(t) and np.shape(t)[0] > 1]
  labels = [t.reshape(len(t), -1).astype(np.float64) for t in labels if t.dtype.kind in 'fiub']
  if not labels:
    return False
  deviation = np.sqrt(np.mean(np.concatenate([np.square(t - t[:1]).ravel() for t in labels])))
  scale = np.sqrt(np.mean(np.concatenate([np.square(t).ravel() for t in labels])))
  return bool(deviation <= COLLAPSE_SPREAD * scale)


def moved(probe, initial) -> bool:
  """Whether a trainable weight differs from its `initial` value: outputs the same for every row
  that the initial weights gave (x * sqrt(0), say) are no collapse."""
  return any(not np.array_equal(w, v.numpy())
             for w, v in zip(initial, probe.model.trainable_variables))


def reason(step: int, smoothed: float, start: float) -> str:
  """The stop reason of a collapse."""
  return (f"the model collapsed by step {step}: its outputs on the first batch are the same for "
          f"every example (an untrained one's were not), its smoothed loss {smoothed:.4g} "
          f"against the untrained model's {start:.4g}; its units died or saturated, as a "
          'learning rate too high, exploding gradients or a loss that does not fit the output '
          'make them (the diagnosis weighs which)')


def feature_model(model) -> Optional[keras.Model]:
  """A Keras model from `model`'s inputs to the inputs of the layer (or operation) that makes
  its one output (`heads.output_layer`; sharing its weights), or None where there is none
  to read (a subclassed model, several outputs, a layer called more than once)."""
  try:  # A diagnostic never ends a run: a model it cannot cut gives None.
    last = None if _own_class(model) else heads.output_layer(model)
    if last is None or isinstance(last, keras.Model):
      return None
    return keras.Model(model.inputs, last.input)
  except Exception:  # pylint: disable=broad-except
    return None


def untrained_deviation(probe, training: bool = False) -> Optional[Tuple[float, float]]:
  """`output_deviation` of a fresh copy of the model (`keras.models.clone_model`: the same
  architecture with new initial weights): how much an untrained model of this kind varies from
  row to row. None where the model cannot be copied or run (a plain tf.Module, a subclassed
  model without a config)."""
  model = probe.model
  if not isinstance(model, keras.Model):
    return None
  try:  # A diagnostic never ends a run: a model it cannot copy gives None.
    clone = keras.models.clone_model(model)
    if not clone.built:
      features, _ = probe.split_batch(probe.first_batch())
      clone(features, training=False)
    return diagnostics.output_deviation(probe, model=clone, training=training)
  except Exception:  # pylint: disable=broad-except
    return None
