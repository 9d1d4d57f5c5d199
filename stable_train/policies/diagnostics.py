"""InitialisationCheck: names a bad initialisation or learning rate instead of letting clipping hide it."""

import inspect
import logging
import math
from typing import List, Optional, Tuple

import gin
import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import loss_match
from stable_train.core import numerics
from stable_train.policies import weight_scale
from stable_train import errors

log = logging.getLogger('stable_train')

INIT_REMEDY = ('use keras.initializers.GlorotUniform or HeNormal from gin (e.g. '
               'mlp.kernel_initializer = @keras.initializers.HeNormal())')
# Keras reductions that keep a loss per example (a 'sum' grows with the batch).
MEAN_REDUCTIONS = ('sum_over_batch_size', 'mean', 'mean_with_sample_weight')
_OUTPUTS, _LOSS = 1, 2  # Bits of `warned`: each warning is given once per run.


def _rms(values) -> float:
  arrays = [np.asarray(v, np.float64) for v in values]
  arrays = [a for a in arrays if a.size]
  if not arrays:
    return 0.0
  return float(np.sqrt(np.mean(np.concatenate([np.square(a).ravel() for a in arrays]))))


def output_scale(probe, weights=None) -> Tuple[Optional[float], ...]:
  """(RMS of the model's float outputs, RMS of the labels (integer labels count as 1), RMS of
  the float features, the outputs' largest magnitude) on the run's first batch, in inference
  mode, with `weights` (the trainable weights, in order) or the current ones; Nones without a
  first batch, one the input check refused (a fill, a NaN: not the model's scale), or where the
  model cannot take its features as they are (a compute_loss of the Trainer's own feeds it
  otherwise: nothing to compare). No variable is left changed."""
  first = probe.first_batch()
  refused = first is not None and not all(
      bool(numerics.input_ok(t)) for t in tf.nest.flatten(first, expand_composites=False)
      if isinstance(t, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)))
  if first is None or refused:
    return None, None, None, None
  features, labels = probe.split_batch(first)
  try:
    outputs = model_outputs(probe.model, features, weights)
  except (ValueError, TypeError, tf.errors.InvalidArgumentError):
    return None, None, None, None
  flat = [numerics.dense_values(t) for t in tf.nest.flatten(labels)]
  label_rms = 1.0 if any(l.dtype.is_integer for l in flat) else _rms(flat)
  floats = lambda nest: [numerics.dense_values(t) for t in tf.nest.flatten(nest)
                         if t.dtype.is_floating]  # A sparse or ragged tensor's values.
  largest = max((float(np.max(np.abs(np.asarray(o, np.float64)))) for o in floats(outputs)
                 if np.size(o)), default=0.0)
  return _rms(floats(outputs)), label_rms, _rms(floats(features)), largest


def output_spread(probe, weights=None, model=None) -> Optional[float]:
  """How much the model's float outputs on the run's first batch vary from row to row, in
  inference mode, relative to their scale (`output_deviation`'s ratio; 0 when every row has the
  same bits: a network that collapsed, or an architecture whose untrained outputs do not yet
  depend on the input, e.g. BatchNorm's initial statistics in a keras.applications model)."""
  found = output_deviation(probe, weights, model)
  if found is None:
    return None
  deviation, scale = found
  return deviation / scale if scale > 0 else 0.0


def output_deviation(probe, weights=None, model=None,
                     training: bool = False) -> Optional[Tuple[float, float]]:
  """(the RMS of each float output's difference from the first row's, the outputs' RMS) on the
  run's first batch (at most 32 rows), with `weights` (the trainable weights, in order) or the
  current ones, in inference mode or `training` mode (no state moves either way). Against the
  first row, not the mean: a mean of identical rows can round away from them, and 0 must mean the
  same bits. None without a first batch of two rows or more, where the features are themselves
  the same in every row, where the model cannot take them as they are, or where an output is not
  finite (other checks' case). `model`: another model to run (a fresh copy,
  `collapse.untrained_deviation`)."""
  first = probe.first_batch()
  if first is None:
    return None
  def rows(nest, kind):  # The dense tensors of `kind` with two rows or more, as float64.
    return [np.asarray(t, np.float64) for t in tf.nest.flatten(nest)
            if isinstance(t, (tf.Tensor, np.ndarray)) and getattr(tf.as_dtype(t.dtype), kind)
            and len(t.shape) and t.shape[0] > 1]
  try:  # A diagnostic never ends a run: a model or batch it cannot judge gives None.
    features = _head(probe.split_batch(first)[0])
    outputs = model_outputs(probe.model if model is None else model, features, weights, training)
    inputs, outputs = rows(features, 'is_numeric'), rows(outputs, 'is_floating')
  except (ValueError, TypeError, tf.errors.OpError):
    return None
  if not outputs or not inputs or not _deviation(inputs)[0] > 0.0:
    return None
  deviation, scale = _deviation(outputs)
  return (deviation, scale) if math.isfinite(deviation) and math.isfinite(scale) else None


def chance_excess(probe, start_loss: float) -> Optional[float]:
  """The untrained model's loss `start_loss`, less its weight penalties
  (`weight_scale.penalty`), over a uniform guess's (`uniform_guess`): about 1 for sound initial
  weights, far above for logits far off scale (a classifier's analogue of outputs far above the
  labels). None where there is no guess to compare with."""
  guess = uniform_guess(probe) if math.isfinite(start_loss) else None
  if guess is None:
    return None
  return (start_loss - weight_scale.penalty(probe.model, start_loss)) / guess


def uniform_guess(probe) -> Optional[float]:
  """A uniform guess's loss, log(K), for a Keras cross-entropy over K classes (K = 2 for a
  binary one) reduced by a mean; None for any other loss (`loss_match.loss_terms`), another
  reduction, several outputs or one categorical column."""
  terms = None if probe.loss is None else loss_match.loss_terms(probe.loss)
  reduction = getattr(probe.loss, 'reduction', MEAN_REDUCTIONS[0])  # A function's: the mean.
  if terms is None or reduction not in MEAN_REDUCTIONS:
    return None
  outputs = first_outputs(probe)
  if not outputs or len(outputs) != 1 or outputs[0].ndim == 0:
    return None
  classes = 2 if terms.family == 'binary' else int(outputs[0].shape[-1])
  return math.log(classes) if classes >= 2 else None


def bad_start(chance: bool, start: float, ratio: float) -> str:
  """What was wrong at a broken start: a cross-entropy `start` far above a uniform guess's
  (`chance`, see `chance_excess`), or outputs `ratio` x the labels' scale."""
  if chance:
    return f"the loss is {start:.4g}, far above a uniform guess's log(classes)"
  return f"the model's outputs are {ratio:.3g}x the labels"


def warn_bad_start(run, step: int, what: str, patience: int, policy: str, **fields) -> None:
  """A broken start (`what`, see `bad_start`), named once by `policy`: a `warning` event (cause
  'initialisation', the doctor's; `fields` added) and a log line, recovered from or not."""
  message = f'{what}; the run stops unless its loss comes down within {patience} steps'
  log.warning('step %d: %s', step, message)
  run.emit('warning', step, policy=policy, cause='initialisation', message=message,
           fix=INIT_REMEDY, **fields)


def first_outputs(probe) -> Optional[List[np.ndarray]]:
  """The model's float outputs (numpy, in their dtype) on the first rows of the run's first
  batch, in inference mode with the current weights (no variable changes); None without a first
  batch, or where the model cannot take its features as they are."""
  first = probe.first_batch()
  if first is None:
    return None
  try:  # A diagnostic never ends a run: a model or batch it cannot judge gives None.
    outputs = model_outputs(probe.model, _head(probe.split_batch(first)[0]), None)
  except (ValueError, TypeError, tf.errors.OpError):
    return None
  return [np.asarray(o) for o in tf.nest.flatten(outputs)
          if isinstance(o, (tf.Tensor, np.ndarray)) and tf.as_dtype(o.dtype).is_floating]


def _head(features, rows: int = 32):
  """At most `rows` rows of every tensor (the Trainer's first batch is whole)."""
  return tf.nest.map_structure(
      lambda t: t[:rows] if isinstance(t, (tf.Tensor, np.ndarray)) and len(t.shape) else t,
      features)


def _deviation(arrays) -> Tuple[float, float]:
  """(RMS over `arrays` of each value's difference from the first row's, their RMS)."""
  rows = [a.reshape(a.shape[0], -1) for a in arrays]
  return _rms([r - r[:1] for r in rows]), _rms(rows)


def _takes_training(model) -> bool:
  params = inspect.signature(model.call).parameters.values()
  return any(p.name == 'training' or p.kind == p.VAR_KEYWORD for p in params)


def model_outputs(model, features, weights, training=False):
  """The model's outputs on `features` in inference mode (or `training` mode: a Keras model's
  BatchNorm on the batch's statistics, its dropout drawn; nothing kept), with `weights` or the
  current ones.

  A Keras model runs through `stateless_call`, so the probe moves no state: a plain call in
  inference mode still advances an LSTM's seed generator, and that changed the training that
  followed (the zoo LSTM's loss moved 4 %)."""
  if hasattr(model, 'stateless_call'):
    weights = [v.value for v in model.trainable_variables] if weights is None else weights
    mode = {'training': training} if _takes_training(model) else {}  # A call(x) without it.
    outputs, _ = model.stateless_call(
        weights, [v.value for v in model.non_trainable_variables], features, **mode)
  elif weights is None:  # A plain tf.Module: every variable it holds put back after the call
    # (a tf.random.Generator's state is not among `model.variables`).
    held = [v for v in tf.train.TrackableView(model).descendants() if isinstance(v, tf.Variable)]
    values = [v.numpy() for v in held]
    try:
      outputs = model(features)
    finally:
      for v, value in zip(held, values):
        v.assign(value)
  else:  # A plain tf.Module: run it with the weights put back for the call.
    variables = list(model.trainable_variables)
    current = [v.numpy() for v in variables]
    try:
      for v, w in zip(variables, weights):
        v.assign(w)
      outputs = model(features)
    finally:
      for v, w in zip(variables, current):
        v.assign(w)
  return outputs


@gin.register(module='stable_train')
class InitialisationCheck(interfaces.Policy):
  """Warns, naming the likely cause and the remedy, when a run starts or stays far off scale.

  Two host-side checks, each reported once per run as a `warning` event, a log line and in
  summary.json (`init_check`):
    - the model's outputs at step 0 (the initial weights, kept by `build`, applied to the first
      batch with Keras's `stateless_call` in inference mode: no variable changes) have an RMS more than `output_ratio` × that of the labels (integer labels: class indices,
      compared with 1): the initial weights are too large;
    - the median loss of the last `patience` applied steps is `loss_ratio` × the first step's
      loss or more (a median, because a clipped run that is too hot swings between huge and
      ordinary losses from step to step): the learning rate is too high, or the initialisation
      too large.
  Clipping and skipping keep such a run alive; this policy makes sure it is not silently slow.
  """

  uses_first_batch = True  # The output check.

  def __init__(self, *, output_ratio: float = 100.0, loss_ratio: float = 100.0,
               patience: int = 10, name: str = 'init_check'):
    """Initialises the policy.

    Args:
      output_ratio: warn when the first outputs' RMS exceeds this multiple of the labels' (> 1).
      loss_ratio: warn when the loss stays at this multiple of its first value or above (> 1).
      patience: how many recent applied steps the median is taken over (>= 1).
      name: policy name.
    """
    super().__init__(name=name)
    self.output_ratio, self.loss_ratio = (
        errors.check_number('InitialisationCheck', arg, value, low=1.0, low_open=True,
                            what='a finite number > 1')
        for arg, value in (('output_ratio', output_ratio), ('loss_ratio', loss_ratio)))
    self.patience = errors.check_int('InitialisationCheck', 'patience', patience, minimum=1)
    # State, checkpointed: a resumed run neither repeats a warning nor forgets its first loss.
    self.initial_loss = tf.Variable(float('nan'), trainable=False, name='initial_loss')
    self.recent_losses = tf.Variable(tf.zeros([self.patience]), trainable=False,
                                     name='recent_losses')
    self.num_losses = tf.Variable(0, dtype=tf.int64, trainable=False, name='num_losses')
    self.warned = tf.Variable(0, dtype=tf.int64, trainable=False, name='warned')
    self.output_rms = tf.Variable(float('nan'), trainable=False, name='output_rms')
    self.label_rms = tf.Variable(float('nan'), trainable=False, name='label_rms')
    self._initial_weights = None  # Host copies of the initial weights, until the output check.

  def build(self, variables, variable_paths):
    del variable_paths
    if np.isnan(self.output_rms.numpy()):  # Not yet checked (a resumed run has been).
      self._initial_weights = [np.array(v.numpy()) for v in variables]

  def _warn(self, run, step: int, kind: int, cause: str, message: str, **fields) -> None:
    self.warned.assign(int(self.warned.numpy()) | kind)
    log.warning('step %d: %s', step, message)
    run.emit('warning', step, policy=self.name, cause=cause, message=message, **fields)

  def _check_outputs(self, run, step: int) -> None:
    """Runs the model with its initial weights on the first batch (inference mode)."""
    initial, self._initial_weights = self._initial_weights, None
    if initial is None:
      return
    out, label_rms, _, _ = output_scale(run.probe, initial)
    if out is None:
      return
    # Outputs of order 1 are what a well-initialised model gives on unit-scale inputs: small
    # labels must not make them read as huge (that is a label-scale matter, not the init's).
    ref = max(label_rms, 1.0)
    self.output_rms.assign(out)
    self.label_rms.assign(label_rms)
    if out > self.output_ratio * ref:
      self._warn(run, step, _OUTPUTS, 'initialisation',
                 f'model outputs at the start are huge (RMS {out:.4g} vs {label_rms:.4g} for the '
                 f'labels, over {self.output_ratio:g}x the larger of that and 1): the initial '
                 f'weights are too large; {INIT_REMEDY}, or scale the inputs.',
                 output_rms=out, label_rms=label_rms)

  def decide(self, reports, context):
    del context
    warned = int(self.warned.numpy())
    # The output check runs the model, so it is an action: asked for once, before the first
    # loop's losses are judged (a resumed run has done it already).
    check_outputs = (self._initial_weights is not None and np.isnan(self.output_rms.numpy()))
    if not check_outputs:
      self._initial_weights = None  # Checked before a resume: the copy is not needed.
    initial = float(self.initial_loss.numpy())
    recent = self.recent_losses.numpy()
    count = int(self.num_losses.numpy())
    warnings = []
    for i in range(reports.num_steps):
      if not reports.applied[i]:
        continue
      loss = float(reports.loss[i])
      if math.isnan(initial):
        initial = loss  # The first applied step's loss: the untrained model's.
        continue
      recent[count % self.patience] = loss
      count += 1
      median = float(np.median(recent[:min(count, self.patience)]))
      if (count >= self.patience and median >= self.loss_ratio * abs(initial)
          and not warned & _LOSS):
        warnings.append(dict(
            step=int(reports.step[i]), kind=_LOSS, cause='learning_rate_or_initialisation',
            message=(f'the median loss of the last {self.patience} steps is {median:.4g}, over '
                     f'{self.loss_ratio:g}x its first value {initial:.4g}: the learning rate is '
                     'likely too high, or the initial weights too large; lower the learning rate '
                     f'(or warm it up with WarmupSchedule), or {INIT_REMEDY}.'),
            fields={'initial_loss': initial, 'median_loss': median}))
        warned |= _LOSS
    self.initial_loss.assign(initial)
    self.recent_losses.assign(recent)
    self.num_losses.assign(count)
    self.warned.assign(warned)  # Decided: a later loop never warns of it again.
    if not check_outputs and not warnings:
      return None
    return interfaces.Decision(
        action=interfaces.ACT, policy=self.name, trigger='init_check', step=int(reports.step[0]),
        details={'check_outputs_at': int(reports.step[0]) - 1 if check_outputs else None,
                 'warnings': warnings})

  def execute(self, decision, run):
    """Runs the initial-output check if asked, then emits the loss warnings decided."""
    at = decision.details['check_outputs_at']
    if at is not None:
      self._check_outputs(run, at)
    for w in decision.details['warnings']:
      self._warn(run, w['step'], w['kind'], w['cause'], w['message'], **w['fields'])
    return None

  def summary(self):
    warned = int(self.warned.numpy())
    kinds = [k for bit, k in ((_OUTPUTS, 'huge_initial_outputs'), (_LOSS, 'loss_stays_high'))
             if warned & bit]
    value = lambda v: None if np.isnan(v.numpy()) else float(v.numpy())
    return {'init_check': {'warnings': kinds, 'initial_loss': value(self.initial_loss),
                           'output_rms': value(self.output_rms),
                           'label_rms': value(self.label_rms)}}
