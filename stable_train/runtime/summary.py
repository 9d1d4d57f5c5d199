"""summary.json: what a run did and how it ended (`RunSummary`; the host writes it)."""

import logging
import time
from typing import Any, Callable, Dict, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import outcome as outcome_lib

log = logging.getLogger('stable_train')


def optimizer_family(optimizer) -> str:
  """The Keras optimizer an optimizer is (the one a `LossScaleOptimizer` wraps): the nearest
  class of its MRO that `keras.optimizers` names, `Adam` for a `class MyAdam(Adam)`; its own
  class's name where none is (a subclass of the abstract `Optimizer` is no family of Keras's)."""
  cls = type(getattr(optimizer, 'inner_optimizer', optimizer))
  return next((c.__name__ for c in cls.__mro__
               if c is getattr(keras.optimizers, c.__name__, None)
               and c.__name__ not in ('Optimizer', 'LossScaleOptimizer')), cls.__name__)


def _layers(model) -> Dict[int, Any]:
  """Every layer and tracked object of `model` by id, found through tracked attributes and each
  model's `layers` (which list a subclassed model's layers held in a Python list); a node it
  cannot walk is left out."""
  layers, queue = {}, [model]
  while queue:
    node = queue.pop()
    if node is None or id(node) in layers:
      continue
    layers[id(node)] = node
    try:
      queue += tf.train.TrackableView(node).descendants()[1:]
      queue += list(node.layers) if isinstance(node, keras.Model) else []
    except Exception:  # pylint: disable=broad-except  (a node it cannot walk: unknown)
      continue
  return layers


def recurrent_share(model) -> float:
  """The share of `model`'s trainable weights, `Embedding` tables left out (lookups, a few rows a
  step: a word model's table would hide its recurrence), held by trainable Keras recurrent layers
  (`keras.layers.RNN`: LSTM, GRU, SimpleRNN, a custom cell in `RNN`, in a `Bidirectional`): the
  doctor reads a divergence under SGD in a model that is mostly a recurrence as gradients it
  multiplied. 0.0 for a frozen one, a hand-written loop, or a model it cannot walk."""
  layers = _layers(model)

  def size(kind, trainable_only=False) -> int:  # Each weight once (a layer shared or nested).
    weights = {id(w): w for l in layers.values() if isinstance(l, kind)
               and (l.trainable or not trainable_only) for w in l.trainable_weights}
    return sum(int(np.prod(w.shape)) for w in weights.values())

  total = size(keras.layers.Layer) - size(keras.layers.Embedding)
  return size(keras.layers.RNN, trainable_only=True) / total if total > 0 else 0.0


def embedded(model) -> bool:
  """Whether `model` looks a sequence of tokens up in a Keras `Embedding` table (its input, as
  built, of rank 2 or more with a time axis longer than 1: a word or character model, whose
  rate the doctor reads against a language model's recipes). A table of one ID per example (a
  sensor's or an item's, beside a recurrence over measurements) is no token sequence."""
  for layer in _layers(model).values():
    built = layer.get_build_config() if isinstance(layer, keras.layers.Embedding) else None
    shape = (built or {}).get('input_shape')
    if shape is not None and len(shape) >= 2 and (shape[1] is None or shape[1] > 1):
      return True
  return False


def model_fields(model) -> Dict[str, Any]:
  """For the doctor: the share of `model`'s weights that is `recurrent`, and whether it looks a
  token sequence up in an `embedded` table (a token model, whose recipes' rates are a language
  model's); nothing for a model with no recurrence."""
  share = recurrent_share(model)
  if not share:
    return {}
  return {'recurrent': round(share, 4), **({'embedded': True} if embedded(model) else {})}


def half_variables(optimizer) -> bool:
  """Whether the optimizer's variables (its slots, whose dtype is their weights') include float16
  ones: a model built in float16 (`set_floatx('float16')`), not `mixed_float16`'s float32
  weights."""
  inner = getattr(optimizer, 'inner_optimizer', optimizer)
  return any(str(getattr(v, 'dtype', '')) == 'float16' for v in getattr(inner, 'variables', ()))


def optimizer_clip(optimizer) -> Dict[str, float]:
  """The clipping the optimizer does itself, the tightest of each kind down its wrappers (a
  `LossScaleOptimizer`'s inner one; a wrapper's own, `own_clip()`, as `GuardedOptimizer`'s
  global clip): Keras's `clipnorm`, `global_clipnorm` or `clipvalue`, finite and above 0. The
  doctor's remedy for exploding gradients must not propose a clip the run already had."""
  found, level = {}, optimizer
  while level is not None:
    own = level.own_clip() if hasattr(level, 'own_clip') else {
        k: getattr(level, k, None) for k in ('global_clipnorm', 'clipnorm', 'clipvalue')}
    for kind, value in own.items():
      try:
        value = float(value)
      except (TypeError, ValueError):
        continue
      if 0 < value < float('inf'):
        found[kind] = min(value, found.get(kind, value))
    level = getattr(level, 'inner_optimizer', None)
  return found


class RunSummary:
  """Keeps the figures of one fit as it goes (the last applied loss) and builds the summary."""

  def __init__(self, state, policies: Sequence[interfaces.Policy], *, start_step: int,
               epochs=None, epoch_of: Callable[[int], Optional[int]] = lambda step: None):
    """Args: state: the run's `state.TrainState` (its counters); policies: the run's policies;
    start_step: the step the fit starts at; epochs: (num_epochs, steps_per_epoch) under
    `fit(num_epochs=)`; epoch_of: the 1-based epoch of a step."""
    self._state = state
    self._policies = policies
    self._start_step = start_step
    self._start_time = time.perf_counter()
    self._epochs = epochs
    self._epoch_of = epoch_of
    self.last_loss: Optional[float] = None  # The loss of the last applied step.
    self._last_step: Optional[int] = None  # The last step recorded (a rollback goes back).

  def record(self, reports) -> None:
    """Notes the loss of one loop's last applied step."""
    self._last_step = int(reports.step[-1])
    if reports.applied[-1]:
      self.last_loss = float(reports.loss[-1])
    else:
      applied = reports.loss[reports.applied]
      if applied.size:
        self.last_loss = float(applied[-1])

  def build(self, outcome: outcome_lib.Outcome, *, last_eval: Optional[Dict[str, Any]] = None,
            metrics: Optional[Dict[str, float]] = None,
            notes: Optional[Dict[str, Any]] = None, optimizer=None,
            model=None) -> Dict[str, Any]:
    """The summary dict of a run that ended with `outcome` (`notes`: the front door's own
    fields, e.g. what its step did not check; `optimizer`: the run's, named by its class, a
    LossScaleOptimizer's inner one: the doctor reads whether the rate was a usual one for it;
    `model`: the share of its weights that is `recurrent`, and whether that recurrence reads an
    `embedded` table, for the doctor too)."""
    t = self._state
    step = int(t.global_step.numpy())
    summary = {
        'status': outcome.status.value,
        'global_step': step,
        'applied_steps': int(t.applied_steps.numpy()),
        'skipped_steps': int(t.skipped_steps.numpy()),
        'input_faults': int(t.input_faults.numpy()),
        'overflow_skips': int(t.overflow_steps.numpy()),
        'final_loss': self.last_loss,
        'steps_this_run': step - self._start_step,
        'seconds': round(time.perf_counter() - self._start_time, 3),
    }
    if optimizer is not None:
      summary['optimizer'] = type(getattr(optimizer, 'inner_optimizer', optimizer)).__name__
      family = optimizer_family(optimizer)
      if family != summary['optimizer']:  # A subclass: the doctor judges its rate as Keras's.
        summary['optimizer_family'] = family
      if half_variables(optimizer):  # For the doctor: float16 weights, not mixed precision.
        summary['variable_dtype'] = 'float16'
      clip = optimizer_clip(optimizer)
      if clip:
        summary['optimizer_clip'] = clip
    summary.update(model_fields(model))
    for p in self._policies:
      summary.update(p.summary())
    summary.update(notes or {})
    if self._epochs is not None:
      summary.update(epoch=self._epoch_of(step), num_epochs=self._epochs[0],
                     steps_per_epoch=self._epochs[1])
    if last_eval is not None:
      summary['eval'] = dict(last_eval)
    if metrics is not None:
      summary['metrics'] = metrics
    note = outcome.reason if outcome.status == outcome_lib.Status.COMPLETED else ''
    if outcome.reason and not note:
      summary['reason'] = outcome.reason
    if outcome.finished and self._last_step is not None and step < self._last_step:
      # Its last loop rolled back, then the data or Keras's epochs ended: no step since.
      undone = (f'the run ended right after a rollback from step {self._last_step} to step '
                f"{step}: the model is that checkpoint's, trained no further (fit again to "
                'train on)')
      log.warning(undone)
      note = f'{note}; {undone}' if note else undone
    if note:
      summary['note'] = note
    summary.update(outcome.extra)
    return summary
