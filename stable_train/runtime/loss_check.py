"""LossOutputCheck: a loss/output mismatch (`core.loss_match`) named once at the start of a run,
by the dispatcher both front doors drive: a `warning` event and a log line, never a stop."""

import logging
import math
from typing import Optional, Union

import keras
import numpy as np
import tensorflow as tf

from stable_train.core import heads
from stable_train.core import keras_parts
from stable_train.core import label_codes
from stable_train.core import label_range
from stable_train.core import loss_match
from stable_train.core import rate_match
from stable_train.doctor import symptoms
from stable_train.policies import collapse
from stable_train.policies import diagnostics
from stable_train.policies import untrained

log = logging.getLogger('stable_train')

CAUSE = symptoms.MISMATCH  # The `warning` event's cause: the doctor's cause key.
BAD_INPUT = 'bad_input'  # The cause of a warning of bad labels (`core.label_codes`).
# After a finding, a run "did not train" when the moving average of its loss (weight
# RECENT_WEIGHT per step) ends at NO_PROGRESS x the mean of its first START_STEPS losses or
# above, after at least MIN_STEPS steps, and it stopped coming down (`untrained.Trail`: its last
# quarter under `untrained.PROGRESS` below its second): it did not come down by a fifth, and is
# not on its way down either (a slow learning rate's short run is). The calibration's mismatched
# runs that trained ended at 0.15-0.23x their start, those that could not at 1.0x.
START_STEPS = 10
RECENT_WEIGHT = 0.1
NO_PROGRESS = 0.8
MIN_STEPS = 50
# Last activations whose values are no distribution, whatever their range.
_UNNORMALISED = ('linear', 'relu', 'relu6', 'leaky_relu', 'elu', 'selu', 'gelu', 'silu', 'swish',
                 'softplus', 'exponential', 'tanh', 'softsign', 'hard_sigmoid', 'log_softmax')


class LossOutputCheck:
  """Runs the model on the run's first batch once, after the first loop of steps, and warns when
  its loss does not fit its outputs (probabilities into a from_logits=True cross-entropy, logits
  into a from_logits=False one or a KL divergence, sigmoids into a categorical one, a bounded
  activation under a regression loss whose labels it cannot reach).

  Host side, once per dispatcher (a Trainer's runs, a guarded Keras `fit`): one inference-mode
  pass over at most 32 rows (`stateless_call`: no variable changes), nothing per step. It reads
  the first batch only where the run keeps it already (a policy reads it: `uses_first_batch`,
  e.g. the default stack's DivergenceCheck), and only a loss the step applies to the model's
  outputs (`Probe.loss`); it never changes the run.
  """

  def __init__(self):
    self.done = False
    # A mismatch, or bad labels (`label_codes.Finding`): what the run is followed for.
    self.found: Optional[Union[loss_match.Mismatch, label_codes.Finding]] = None
    self._start: list = []  # The first START_STEPS finite losses, after a finding.
    self._recent = math.nan  # Their moving average since (weight RECENT_WEIGHT).
    self._seen = 0  # Finite losses read since the finding.
    self._trail = untrained.Trail()  # The moving average along the run.

  def after_loop(self, run, step: int, losses=()):
    """The check, after the run's first loop (later calls only follow the loss): a finding is a
    `warning` event (cause 'loss_output_mismatch', kind, message, fix, gin; or 'bad_input' for a
    missing-value code among the labels, `core.label_codes`) and a log line.

    Args:
      run: the run handle (its probe, its emit).
      step: the loop's last global step.
      losses: the loop's losses, one per step: after a finding, whether the loss comes down
        (`at_end`).
    """
    if self.done:
      self._follow(losses)
      return None
    self.done = True
    found = self._check(run, step)
    if found is not None:
      self._follow(losses)
    return found

  def _follow(self, losses) -> None:
    if self.found is None:
      return
    for loss in np.asarray(losses, np.float64).reshape(-1):
      if not math.isfinite(loss):
        continue
      self._seen += 1
      if len(self._start) < START_STEPS:
        self._start.append(loss)
      self._recent = loss if math.isnan(self._recent) else (
          RECENT_WEIGHT * loss + (1 - RECENT_WEIGHT) * self._recent)
      self._trail.record(float(self._seen), self._recent)

  def at_end(self, run=None) -> Optional[str]:
    """At the end of a run about to end 'completed': why it did not train, when a mismatch (or
    bad labels) was named at the start and the loss never came down (its moving average still above
    NO_PROGRESS x its first steps' mean after at least MIN_STEPS steps, and no longer coming
    down), or the outputs still cannot tell one example from another as the loss reads them
    (`_stuck`, however the loss moved), else None. The run went on to its end (a warning never
    stops it); its status must not say it trained."""
    if self.found is None or self._seen < MIN_STEPS:
      return None
    stuck = _stuck(self.found, run)
    if stuck:
      return f'after {self._seen} steps {stuck}: {self.found.message}; fix: {self.found.fix}'
    start = float(np.mean(self._start))
    # A classifier no better than its commonest class on the first batch whose loss fell from
    # above a uniform guess's only to it did not train: the guess is the start it is judged from.
    guess = _guess(run)
    against = (f"a uniform guess's {guess:.4g} (no better than the commonest class on the first "
               'batch)') if guess and guess < start else f'{start:.4g} at the start'
    start = min(start, guess) if guess else start
    # None: a loss of 0 from the start (nothing came down). Points above the start count at it.
    progress = self._trail.progress(ceiling=start)
    if not self._recent >= NO_PROGRESS * start or (
        progress is not None and progress >= untrained.PROGRESS):
      return None
    return (f'the loss did not come down in {self._seen} steps ({self._recent:.4g} against '
            f'{against}): {self.found.message}; fix: {self.found.fix}')

  def _check(self, run, step: int):
    probe = getattr(run, 'probe', None)  # A dispatcher's test fake may have none.
    if (probe is None or probe.loss is None
        or not any(p.uses_first_batch for p in probe.policies)):
      return None
    try:  # A warning's check never ends a run: a model or loss it cannot read says nothing.
      outputs = diagnostics.first_outputs(probe)
      activation = heads.last_activation(probe.model)
      found = None if not outputs or len(outputs) != 1 else (
          loss_match.find_mismatch(probe.loss, outputs[0], activation,
                                   read_ones=_ones_unexplained(probe))
          or label_range.find_unreachable_labels(probe.loss, _labels(probe), activation,
                                                outputs[0].shape[-1])
          or rate_match.find_signed_rates(
              probe.loss, outputs[0], activation,
              batch_statistics=rate_match.uses_batch_statistics(probe.model))
          or _one_unit_softmax(probe.loss, outputs[0], activation)
          or _divergence_on_logits(probe.loss, outputs[0], activation)
          or _multi_label_softmax(probe.loss, _labels(probe), activation)
          or (None if _weighted(probe) else
              label_range.find_binary_labels_outside(probe.loss, _labels(probe))))
      coded = None if found or _weighted(probe) else (
          label_codes.find_missing_codes(probe.loss, _labels(probe)))
      coded = coded if coded is not None and _reads_codes(probe, coded) else None
    except Exception as e:  # pylint: disable=broad-except  (a custom loss's get_config, say)
      log.info('the loss/output check could not judge this run: %s',
               (str(e).splitlines() or [type(e).__name__])[0][:120])
      return None
    if coded is not None:  # Bad labels, not a mismatch; followed as one (`at_end`).
      log.warning('step %d: bad labels: %s; fix: %s', step, coded.message, coded.fix)
      run.emit('warning', step, cause=BAD_INPUT, **coded.fields())
      self.found = coded
      return coded
    if found is None:
      return None  # No batch, several outputs, or nothing wrong.
    self.found = found
    log.warning('step %d: %s', step, loss_match.describe(found))
    run.emit('warning', step, cause=CAUSE, **found.fields())
    return found


def _one_unit_softmax(loss, outputs, activation) -> Optional[loss_match.Mismatch]:
  """A known softmax over one output unit under a loss that is no Keras cross-entropy (those
  are `find_mismatch`'s): 1 for every input whatever the loss, so no gradient reaches the model
  (a one-channel segmentation head given the multi-class softmax)."""
  if activation != 'softmax' or loss_match.loss_terms(loss) is not None or (
      outputs is None or np.ndim(outputs) == 0 or np.shape(outputs)[-1] != 1):
    return None
  return loss_match.Mismatch(
      loss_match.ONE_UNIT_SOFTMAX,
      'the model ends in a softmax over one unit, which is 1 for every input: whatever the '
      'loss, the output never moves and no gradient reaches the model',
      "a sigmoid on the one unit (activation='sigmoid'), or one unit per class with the softmax",
      "# no binding: the last layer's activation is in the model's code (activation='sigmoid')")


def _divergence_on_logits(loss, outputs, activation) -> Optional[loss_match.Mismatch]:
  """Keras's KL divergence (which has no from_logits form) given outputs that are no
  distributions: values clearly outside [0, 1], or from a last activation known to make
  unnormalised values (`_UNNORMALISED`), rows not summing to 1. It clips them into [1e-7, 1]:
  the clipped ones give no gradient, and the loss falls below 0 while nothing trains (a distilled
  student's logits). Another activation of values in [0, 1] may normalise over other axes (a
  heatmap's spatial softmax, each channel a distribution): not named."""
  if (loss_match.loss_function(loss) is not keras.losses.kl_divergence
      or not keras_parts.plain_call(loss) or activation in ('softmax', 'sigmoid') or outputs is None or np.ndim(outputs) < 1
      or np.shape(outputs)[-1] < 2 or not np.all(np.isfinite(outputs))):
    return None
  values = np.asarray(outputs, np.float64).reshape(-1, np.shape(outputs)[-1])
  outside = values.min() < -loss_match.OUTSIDE or values.max() > 1 + loss_match.OUTSIDE
  if not outside and (activation not in _UNNORMALISED
                      or np.all(np.abs(values.sum(-1) - 1) <= loss_match.NOT_ONE)):
    return None
  return loss_match.Mismatch(
      loss_match.LOGITS_TO_PROBABILITIES,
      f"the model's outputs are no distributions ({activation or 'unknown activation'}: values "
      f'from {values.min():.3g} to {values.max():.3g}) but keras.losses.KLDivergence expects '
      'probabilities: it clips them into [1e-7, 1], the clipped ones give no gradient, and the '
      'loss can fall below 0 while nothing trains',
      "end the model in a softmax (activation='softmax'; for distillation, a softmax of the "
      "student's logits at the teacher's temperature): KLDivergence has no from_logits form",
      "# no binding: the last layer's activation is in the model's code (activation='softmax')")


def _multi_label_softmax(loss, labels, activation) -> Optional[loss_match.Mismatch]:
  """A known softmax under a binary or categorical cross-entropy whose labels mark two classes or
  more in a row (multi-label targets): a softmax's outputs sum to 1, so it can never give them;
  the loss falls a little and stalls (or rises, pushing the mass to one of them). One positive a
  row (a one-hot label) is a legitimate use (if unusual under a binary one)."""
  terms = loss_match.loss_terms(loss)
  if (activation != 'softmax' or terms is None or terms.family not in ('binary', 'categorical')
      or labels is None or np.ndim(labels) != 2 or np.shape(labels)[-1] < 2):
    return None
  positives = int(np.max(np.sum(np.asarray(labels, np.float64) > 0.5, axis=-1)))
  if positives < 2:
    return None
  return loss_match.Mismatch(
      loss_match.SOFTMAX_MULTI_LABEL,
      f'the model ends in a softmax, whose {np.shape(labels)[-1]} outputs sum to 1 in every row, '
      f'but the labels of its {terms.shown} mark up to {positives} classes 1 in a row '
      '(multi-label targets): the outputs can never reach them, and the loss stalls',
      "a sigmoid on the last layer (activation='sigmoid'): one independent probability a label"
      + ('' if terms.family == 'binary' else ', with keras.losses.BinaryCrossentropy()'),
      "# no binding: the last layer's activation is in the model's code (activation='sigmoid')"
      + ('' if terms.family == 'binary' else '\nTrainer.loss = @keras.losses.BinaryCrossentropy()'))


def _stuck(found: loss_match.Mismatch, run) -> str:
  """What the model's outputs on the first batch now still say, where the finding makes them
  unable to tell examples apart as its loss reads them ('' otherwise, or where unknown): a
  softmax over one unit, still 1 for every example; probabilities into a binary from_logits=True
  loss, all at or above 0, each example read as the positive class while the labels are not all
  that class. Keras may train the layers below through such a loss (it reads a softmax's or a
  sigmoid's own logits), so a falling loss does not say that the outputs trained."""
  probe = getattr(run, 'probe', None)
  if probe is None or found.kind not in (loss_match.ONE_UNIT_SOFTMAX, loss_match.
                                         PROBABILITIES_TO_LOGITS, loss_match.SOFTMAX_MULTI_LABEL):
    return ''
  try:
    outputs, labels = diagnostics.first_outputs(probe), _labels(probe)
  except Exception:  # pylint: disable=broad-except  (a judgement only, never a failure)
    return ''
  if not outputs or len(outputs) != 1:
    return ''
  values = np.asarray(outputs[0], np.float64)
  if found.kind == loss_match.SOFTMAX_MULTI_LABEL:  # Still a softmax: never two labels at once.
    return ("the model's outputs still pass 0.5 for one label a row at most" if values.ndim == 2
            and np.all(np.sum(values > 0.5, axis=-1) <= 1) else '')
  if values.shape[-1] != 1:
    return ''
  if found.kind == loss_match.ONE_UNIT_SOFTMAX and np.all(values == 1.0):
    return "the model's outputs are still 1 for every example"
  truth = None if labels is None else np.asarray(labels, np.float64).reshape(-1)
  if (found.kind == loss_match.PROBABILITIES_TO_LOGITS and np.all(values >= 0.0)
      and truth is not None and truth.size and np.any(truth < 0.5)):
    return ("the model's outputs are all at 0 or above: read as logits by its loss, every "
            'example is the positive class')
  return ''


def _guess(run) -> Optional[float]:
  """A uniform guess's loss for the run's classifier (`untrained.uniform_guess`) where its
  answers on the first batch, in each of `collapse.modes` (training mode too where BatchNorm's
  moving statistics may lag the weights), are no better than always the commonest class (within
  two standard errors): a model that learned anything, however its mismatched loss reads it, is
  not judged from the guess. None otherwise."""
  probe = getattr(run, 'probe', None)
  try:
    guess = None if probe is None else untrained.uniform_guess(probe)
    labels = None if not guess else _labels(probe)
    if labels is None:
      return None
    features, _ = probe.split_batch(probe.first_batch())
    answers = []
    for training in collapse.modes(probe.model):  # Neither mode moves a variable.
      outputs = tf.nest.flatten(diagnostics.model_outputs(probe.model, features, None, training))
      if len(outputs) != 1 or outputs[0].shape[-1] < 2:
        return None
      answers.append(np.asarray(tf.cast(outputs[0], tf.float32)).reshape(
          -1, outputs[0].shape[-1]))
    truth = (labels.reshape(answers[0].shape).argmax(-1) if labels.size == answers[0].size
             else labels.reshape(-1).astype(np.int64))
  except Exception:  # pylint: disable=broad-except  (a judgement only, never a failure)
    return None
  if truth.size != len(answers[0]) or truth.min() < 0:
    return None
  share = np.bincount(truth).max() / truth.size
  accuracy = max(float(np.mean(a.argmax(-1) == truth)) for a in answers)
  return guess if accuracy <= share + 2 * math.sqrt(share * (1 - share) / truth.size) else None


def _labels(probe):
  """The first batch's one label tensor (numpy), or None."""
  labels = tf.nest.flatten(probe.split_batch(probe.first_batch())[1])
  return np.asarray(labels[0]) if len(labels) == 1 else None


def _reads_codes(probe, coded: label_codes.Finding) -> bool:
  """Whether the run's loss reads the coded labels: on the first batch's outputs (a mask they
  carry kept, which Keras's losses apply), the loss with those labels set to the outputs is far
  below the loss as it is. A mask (a `Masking` layer, `mask=` passed on) or a loss of one's own
  that leaves them out reads them not."""
  labels = _labels(probe)
  outputs = tf.nest.flatten(diagnostics.model_outputs(
      probe.model, probe.split_batch(probe.first_batch())[0], None))
  if len(outputs) != 1 or np.size(outputs[0]) != np.size(labels):
    return False
  loss = keras_parts.as_loss(probe.loss) if isinstance(probe.loss, str) else probe.loss
  answers = np.asarray(outputs[0]).reshape(labels.shape).astype(labels.dtype)
  filled = np.where(labels == coded.code, answers, labels)
  as_is, without = (float(loss(tf.constant(y), outputs[0])) for y in (labels, filled))
  return as_is > 2.0 * without + 1e-6


def _weighted(probe) -> bool:
  """Whether the first batch carries sample weights ((x, y, sample_weight)): rows weighted 0
  may hold any label, which the loss never sees."""
  batch = probe.first_batch()
  return isinstance(batch, (tuple, list)) and len(batch) == 3 and batch[2] is not None


def _ones_unexplained(probe) -> bool:
  """Whether outputs of exactly 1 on every row would need a softmax over one unit to explain
  them: from normalised inputs (`_inputs_normalised`), on a first batch whose labels are not all
  1 (a trained sigmoid resumed on such a batch rounds to 1 there)."""
  labels = _labels(probe)
  return _inputs_normalised(probe) and not (labels is not None and labels.size
                                           and bool(np.all(labels == 1)))


def _inputs_normalised(probe) -> bool:
  """Whether the first batch's float features have an RMS of 10 or less (raw pixels, say, can
  saturate a sigmoid on every row, which then looks like a softmax over one unit)."""
  features = tf.nest.flatten(probe.split_batch(probe.first_batch())[0])
  floats = [np.asarray(t, np.float64) for t in features if tf.as_dtype(t.dtype).is_floating]
  return not floats or all(np.sqrt(np.mean(np.square(f))) <= 10 for f in floats if f.size)

