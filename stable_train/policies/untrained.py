"""The last word of DivergenceCheck on a run about to end 'completed': whether it trained at all.

Judged only on what a model that learned anything cannot show, never on a loss level a slow run
may still be at: outputs that are still the same for every example (nothing of the input reaches
them), or a classifier no better than a uniform guess, on its training loss *and* on the first
batch (without sample weights or regularisation, the lower of inference and training mode).
"""

import math
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from stable_train.core import loss_match
from stable_train.policies import collapse
from stable_train.policies import diagnostics

# A classifier that did not train: its cross-entropy at or above this fraction of a uniform
# guess's, log(K) (a model that learned the classes' frequencies alone is already below it on
# unbalanced labels; one that outputs 1/K for every class is at 1.0 on any batch).
CHANCE_LEVEL = 0.99
CONSTANT, CHANCE = 'constant_outputs', 'chance_level'


def verdict(probe, smoothed: float, steps: int,
            broken_start: str = '') -> Optional[Tuple[str, str]]:
  """(rule, reason) when the run's model did not train after `steps` applied steps (its
  smoothed training loss `smoothed`), else None. Rules: `CONSTANT`, `CHANCE`. `broken_start`:
  what the start check found wrong, if anything (`diagnostics.bad_start`), named as the cause."""
  if collapse.constant(probe) is not None:
    return CONSTANT, (
        f'the model did not train: after {steps} steps its outputs on the first batch are '
        'still the same for every example, as they were untrained: nothing of the input reaches '
        'them (weights initialised to zeros or to one constant keep every unit alike); '
        f'{diagnostics.INIT_REMEDY}')
  guess = uniform_guess(probe)
  if guess is None or not smoothed >= CHANCE_LEVEL * guess:
    return None
  first = first_batch_loss(probe)
  if first is None or not first >= CHANCE_LEVEL * guess:
    return None
  why = (f'from a start where {broken_start}: the initial weights are too large; '
         f'{diagnostics.INIT_REMEDY}' if broken_start else
         'the outputs carry nothing of the input (a learning rate too high knocks a network to '
         'this level; one too low, or a warm-up longer than the run, never leaves it)')
  return CHANCE, (
      f'the model did not train: after {steps} steps its loss (smoothed {smoothed:.4g}, '
      f"{first:.4g} on the first batch) is no better than a uniform guess's, {guess:.4g}, "
      + why)


def uniform_guess(probe) -> Optional[float]:
  """A uniform guess's cross-entropy, log(K), for a Keras cross-entropy loss over K classes
  (`diagnostics.chance_excess`) on unweighted batches; None otherwise (class weights scale the
  loss)."""
  first = probe.first_batch()
  if first is None or (isinstance(first, (tuple, list)) and len(first) == 3):
    return None
  excess = diagnostics.chance_excess(probe, 1.0)
  return None if excess is None else 1.0 / excess


def first_batch_loss(probe) -> Optional[float]:
  """The loss function on the run's first batch (no sample weights, no regularisation losses),
  the lower of inference and training mode (BatchNorm's moving statistics may lag the weights);
  None where it cannot be computed or is not finite. No variable moves."""
  terms = None if probe.loss is None else loss_match.loss_terms(probe.loss)
  first = probe.first_batch()
  if terms is None or first is None:
    return None
  features, labels = probe.split_batch(first)
  losses = []
  try:  # A diagnostic never ends a run: a model or batch it cannot judge gives None.
    for training in (False, True):
      outputs = diagnostics.model_outputs(probe.model, features, None, training)
      outputs = tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), outputs)
      losses.append(float(np.mean(np.asarray(probe.loss(labels, outputs), np.float64))))
  except (ValueError, TypeError, tf.errors.OpError):
    return None
  found = min(losses)
  return found if math.isfinite(found) else None
