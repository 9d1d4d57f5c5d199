"""How a model's answers on the run's first batch spread from example to example: the measures
behind the end verdicts' "flat answers" (`untrained`). Each reads the model through
`diagnostics.model_outputs` (no variable moves) and gives None for a model, batch or loss it
cannot read; none raises.
"""

import math
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from stable_train.core import loss_match
from stable_train.policies import collapse
from stable_train.policies import diagnostics


def answers_of(probe, first) -> Optional[Tuple[np.ndarray, list]]:
  """(the labels of the batch `first`, the model's answers in each of `collapse.modes`), each as
  float64 rows of one column per output; None for several heads (Keras sums their losses: one
  mean is no baseline for them) or a model or batch it cannot read. No variable moves."""
  try:  # A diagnostic never ends a run: a model or batch it cannot judge gives None.
    features, labels = probe.split_batch(first)
    outputs = [diagnostics.model_outputs(probe.model, features, None, m)
               for m in collapse.modes(probe.model)]
    if any(len(tf.nest.flatten(x)) != 1 for x in [labels] + outputs):
      return None
    y = np.asarray(tf.nest.flatten(labels)[0], np.float64)
    y = y.reshape(len(y), -1)
    return y, [np.asarray(tf.cast(tf.nest.flatten(x)[0], tf.float64)).reshape(y.shape)
               for x in outputs]
  except Exception:  # pylint: disable=broad-except
    return None


def _spread_ratio(y: np.ndarray, answers: list) -> Optional[float]:
  """The largest, over the columns whose labels vary and over `answers` (one array per mode), of
  an answer column's standard deviation across the rows over its labels'; None where no label
  column varies."""
  spread = np.std(y, axis=0)
  varied = spread > 0
  if not varied.any():
    return None
  found = max(float(np.max(np.std(a, axis=0)[varied] / spread[varied])) for a in answers)
  return found if math.isfinite(found) else None


def flatness(probe) -> Optional[float]:
  """How much a regression's answers on the first batch vary from example to example, over how
  much its labels do: the largest, over the outputs whose labels vary and over `collapse.modes`,
  of an output's standard deviation across the rows over its labels' (each output on its own: a
  learnt output beside an unstandardised one of noise is no flat answer); None where it cannot
  be read or no label varies."""
  found = answers_of(probe, probe.first_batch())
  return None if found is None else _spread_ratio(*found)


def classifier_flatness(probe) -> Optional[float]:
  """`flatness` of a classifier under a Keras cross-entropy: its predicted probabilities (the
  loss's logits through a softmax, or a sigmoid for a binary loss) against the one-hot labels,
  class by class. A model that answers every example with the same distribution (the classes'
  frequencies, one class for all) reads near 0; one that learnt anything far above. None for
  another loss, several heads, or a batch it cannot read."""
  terms = None if probe.loss is None else loss_match.loss_terms(probe.loss)
  if terms is None:
    return None
  try:
    features, labels = probe.split_batch(probe.first_batch())
    labels = tf.nest.flatten(labels)
    outputs = [tf.nest.flatten(diagnostics.model_outputs(probe.model, features, None, m))
               for m in collapse.modes(probe.model)]
    if len(labels) != 1 or any(len(o) != 1 for o in outputs):
      return None
    answers = []
    for (o,) in outputs:
      o = tf.cast(o, tf.float64)
      if terms.from_logits:
        o = tf.sigmoid(o) if terms.family == 'binary' else tf.nn.softmax(o)
      answers.append(np.asarray(o).reshape(len(o), -1))
    y = np.asarray(labels[0])
    if terms.family == 'sparse':
      y = np.eye(answers[0].shape[1])[y.reshape(-1).astype(np.int64)]
    y = y.astype(np.float64).reshape(answers[0].shape)
    return _spread_ratio(y, answers)
  except Exception:  # pylint: disable=broad-except
    return None
