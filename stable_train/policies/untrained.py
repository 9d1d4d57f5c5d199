"""The last word of DivergenceCheck on a run about to end 'completed': whether it trained at all.

Judged only on what a model that learned anything cannot show: not one weight moved, or half
its kernels moved with their units all still alike (`moved`); or, once its loss stopped coming
down (`Trail`), outputs the same for every example while the labels are not (nothing of the
input reaches them), or a classifier no better than a uniform guess, on its training loss *and*
on the first batch (without sample weights or regularisation, the lower of inference and
training mode; a guess for every example, or worse than one beyond the batch's noise); a
classifier whose loss came down only to the guess itself, or stays at twice it or more, is
judged even while it comes down. Answers that barely vary from example to example (`answers`)
are judged too: a regression's at its labels' mean, and a classifier's at the guess's loss.
"""

import math
from typing import Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from stable_train.core import loss_match
from stable_train.policies import answers
from stable_train.policies import collapse
from stable_train.policies import diagnostics

# A classifier that did not train: on the first batch, worse than a uniform guess's loss log(K)
# by more than twice its standard error, or a uniform guess for every example (each example's
# loss within `UNIFORM_SPREAD` of log(K) on average, at `CHANCE_LEVEL` x log(K) or above: a weak
# but real signal varies from example to example, a guess does not); its smoothed training loss
# at `CHANCE_LEVEL` x log(K) or above too.
CHANCE_LEVEL, UNIFORM_SPREAD = 0.99, 0.05
# ...and its smoothed loss came down by less than this fraction from the run's second quarter to
# its last (a slow run still on its way down is not judged; the smoothed loss of a stalled run
# wanders by a few % from batch to batch), unless it is this many times the guess or more.
PROGRESS, FAR = 0.05, 2.0
TRAIL_LENGTH = 256  # (count, smoothed) pairs kept per run, thinned by half when full.
CONSTANT, CHANCE = 'constant_outputs', 'chance_level'
MEAN = 'mean_level'  # A regression no better than predicting its labels' mean (or median).
FLAT = 'flat_answers'  # A regression whose answers stopped depending on the input, at the mean.
# ...judged at MEAN_FAR x that loss or above, on a first batch of MEAN_ROWS rows or more: one
# batch's label spread is a noisy baseline (at 2x, 32 rows of zero-inflated labels stopped a
# model that predicted their overall mean 8 % of the time; 4 rows, an optimal model 15-43 %).
MEAN_FAR, MEAN_ROWS = 10.0, 32
# ...judged even while it comes down (it ends far worse than a constant); or at MEAN_NEAR x it or
# above where, at the pace of the run's second half (`Trail`), it would take more than
# MEAN_HORIZON x the run's steps again to come down to it (at 3x about the classifier's PROGRESS;
# a loss falling 5 % a half-run from 7x needs 19 runs) and its smoothed loss is still MEAN_START
# x the run's first loss or more (a model that came far down from its start has trained, whatever
# one batch's spread says), and its loss on the first batch is within MEAN_AGREE x its smoothed
# loss (not at MEAN_FAR: a loss falling fast from far off scale is far from its lagging average).
# Either only where the untrained model's loss on the first batch is within MEAN_AGREE x the
# mean of the run's first losses: a first batch far easier than the run's (an unshuffled series
# that starts in a dry spell: a trained model's loss there 14x to 139x the batch's centre's,
# under MAE and MSE) is no baseline.
MEAN_NEAR, MEAN_HORIZON, MEAN_START, MEAN_AGREE = 3.0, 10.0, 0.5, 3.0
# ...or, stalled at MEAN_FLAT_LEVEL x that loss or above, with answers whose spread from example
# to example is MEAN_FLAT of the labels' or less (`flatness`): the regression's collapse, its
# answers no longer depending on the input (blind31's FastSpeech at Adam 1e-2: 0.06 %, its loss
# 1.05 x the mean's; healthy regressions end at 0.94-0.98, and runs that learnt a little, at
# 0.93 x the mean's loss, at 0.14-0.37: those are not judged).
MEAN_FLAT, MEAN_FLAT_LEVEL = 0.05, 0.9


class Trail:
  """The smoothed loss along the run, once per loop (host only, not checkpointed: a resumed run
  judges from what it saw since): how far it came down in the run's second half. Kept at
  `TRAIL_LENGTH` points at most, spaced evenly by count (the spacing doubles when full)."""

  def __init__(self):
    self._points = []  # (count, smoothed), count increasing, at least `_stride` apart.
    self._stride = 1.0
    self._now = None

  def record(self, count: float, smoothed: float) -> None:
    while self._points and self._points[-1][0] >= count:  # A restore took the count back.
      self._points.pop()
    self._now = (count, smoothed)
    if not self._points or count >= self._points[-1][0] + self._stride:
      self._points.append(self._now)
      if len(self._points) > TRAIL_LENGTH:
        self._stride *= 2
        self._points = self._points[::2]

  def progress(self, ceiling: Optional[float] = None) -> Optional[float]:
    """1 - the mean smoothed loss over the run's last quarter / its mean over the second quarter
    (means of the points kept, the loss being noisy from batch to batch), or None before both
    quarters hold a point. With a `ceiling` each point counts at it at most (a classifier's
    loss falling from far above a uniform guess's down to it is no progress: a model that
    learned anything is below it), unless the loss still comes down over the last half (its
    last quarter `PROGRESS` below its third, from any level): then that is the progress."""
    if self._now is None:
      return None
    capped = self._down(count_from=0.25, ceiling=math.inf if ceiling is None else ceiling)
    if ceiling is None or capped is None:
      return capped
    recent = self._down(count_from=0.5, ceiling=math.inf)
    return capped if recent is None else max(capped, recent)

  def never_below(self, guess: Optional[float]) -> bool:
    """Whether the smoothed loss stayed at `guess` or above since the run's first quarter (the
    untrained model's own loss may start a little under it)."""
    if self._now is None or guess is None:
      return False
    kept = [v for c, v in self._points if c >= self._now[0] / 4] + [self._now[1]]
    return min(kept) >= guess

  def _down(self, count_from: float, ceiling: float) -> Optional[float]:
    """1 - the mean over the last quarter / the mean over the quarter from `count_from` x the
    count, each point at `ceiling` at most; None without points in both."""
    count = self._now[0]
    earlier = [min(v, ceiling) for c, v in self._points
               if count_from * count <= c <= (count_from + 0.25) * count]
    last = [min(v, ceiling) for c, v in self._points if c >= 3 * count / 4]
    last.append(min(self._now[1], ceiling))
    if not earlier or not np.mean(earlier) > 0:
      return None
    return 1.0 - float(np.mean(last)) / float(np.mean(earlier))


def verdict(probe, smoothed: float, steps: int, progress: Optional[float],
            broken_start: str = '', chance_start: bool = False,
            never_below: bool = False, start: Optional[float] = None,
            warm: Optional[float] = None) -> Optional[Tuple[str, str]]:
  """(rule, reason) when the run's model did not train after `steps` applied steps (its
  smoothed training loss `smoothed`, down by `progress` over the second half, see `Trail`),
  else None; never raises (a diagnostic never ends a run). Rules: `CONSTANT`, `CHANCE`, `MEAN`,
  `FLAT`.
  `broken_start`: what the start check found wrong, if anything (`diagnostics.bad_start`);
  `chance_start`: that was a loss far above a uniform guess's (then `at_chance` is lenient);
  `never_below`: the smoothed loss never went below the guess (`Trail.never_below`): however it
  moved above it, no progress, and `at_chance` is lenient. `start`: the run's first loss (its
  first batch's, untrained); `warm`: the mean of its first losses (DivergenceCheck's warm-up)."""
  try:
    return _verdict(probe, smoothed, steps, progress, broken_start, chance_start or never_below,
                    never_below, start, warm)
  except Exception:  # pylint: disable=broad-except  (a model or batch it cannot judge)
    return None


def _verdict(probe, smoothed, steps, progress, broken_start, chance_start, never_below=False,
             start=None, warm=None):
  stalled = progress is not None and (progress < PROGRESS or never_below)
  # Outputs the same for every example at the run's end are judged even while the loss still
  # comes down: only a bias can bring it down then, towards the labels' mean (a PINN with zero
  # kernels, 0.25 to 0.13 over 150 steps, still 26 % down over its second half).
  if progress is not None and collapse.constant(probe) is not None:
    return CONSTANT, (
        f'the model did not train: after {steps} steps its outputs on the first batch are the '
        'same for every example while its labels are not: nothing of the input reaches them '
        '(weights initialised to zeros or to one constant keep every unit alike); '
        f'{diagnostics.INIT_REMEDY}')
  guess = uniform_guess(probe)
  if guess is None:
    return _mean_verdict(probe, smoothed, steps, progress, start, warm)
  # At the guess itself (within 1 - CHANCE_LEVEL of it), a loss that came down only to it.
  at_guess = abs(smoothed / guess - 1.0) <= 1.0 - CHANCE_LEVEL
  if not smoothed >= CHANCE_LEVEL * guess or not (
      stalled or at_guess or smoothed >= FAR * guess):
    return None
  losses = first_batch_losses(probe)
  flat = None
  if losses is None or not at_chance(losses, guess, lenient=chance_start):
    # The same answer for every example, not a uniform one (the classes' frequencies, one class
    # for all): stalled at the guess's loss or above (a weak real edge is below it) with answers
    # that no longer depend on the input.
    flat = (answers.classifier_flatness(probe)
            if stalled and losses is not None and smoothed >= guess else None)
    if flat is None or not flat <= MEAN_FLAT:
      return None
  first = float(np.mean(losses))
  if broken_start:
    why = (f'from a start where {broken_start}: initial weights too large, or a forward pass '
           f'that scales its inputs up (see the warning at the start); {diagnostics.INIT_REMEDY}')
  elif stalled or at_guess:
    why = ('and it never got below it (a learning rate too high knocks a network to this '
           'level; one too low never leaves it)')
  else:  # Judged for how far above the guess it still is.
    why = f'and {smoothed / guess:.3g} x it at the end, far above'
  if flat is not None and not broken_start:
    why = (f"and its answers barely vary from example to example ({flat:.2%} of the labels' "
           'spread): they no longer depend on the input (a learning rate too high knocks a '
           'network there; one too low never leaves it)')
  return CHANCE, (
      f'the model did not train: after {steps} steps its loss (smoothed {smoothed:.4g}, '
      f"{first:.4g} on the first batch) is no better than a uniform guess's, {guess:.4g}, "
      + why)


def _mean_verdict(probe, smoothed, steps, progress=None, start=None, warm=None):
  """`MEAN` for a regression whose loss is at MEAN_FAR x that of predicting the first batch's
  label means (medians under MAE) for every example or more, on its training loss and on the
  first batch (`mean_level`), judged even while it comes down; at MEAN_NEAR x where the pace of
  its `progress` (down over the run's second half) is far too slow to get there and it is still
  MEAN_START x its `start` or more and its first-batch loss agrees with the smoothed one. Either
  only where the untrained model's loss on the first batch (`start`) agrees with the mean of the
  run's first losses (`warm`, where known): a first batch far easier than the run's is no
  baseline. Never where `warm` is NaN (a resumed run's first losses, unknown here): its first
  batch cannot be shown a baseline. `FLAT` for one stalled at MEAN_FLAT_LEVEL x that loss or
  above whose answers vary by MEAN_FLAT of the labels' spread or less (`flatness`)."""
  if warm is not None and (math.isnan(warm) or (start is not None and warm > MEAN_AGREE * start)):
    return None  # Unknown, or a first batch far easier than the run's next ones: no baseline.
  found = mean_level(probe)
  if found is None or not found[0] > 0:
    return None
  level, first = found
  ratio = min(smoothed, first) / level
  near = (start is not None and smoothed >= MEAN_START * start
          and _runs_to_reach(ratio, progress) > MEAN_HORIZON
          and max(smoothed, first) <= MEAN_AGREE * min(smoothed, first))
  flat = None
  if not (ratio >= MEAN_FAR or (ratio >= MEAN_NEAR and near)):
    stalled = progress is not None and progress < PROGRESS
    flat = answers.flatness(probe) if stalled and ratio >= MEAN_FLAT_LEVEL else None
    if flat is None or not flat <= MEAN_FLAT:
      return None
  centre = 'median' if _CENTRES[loss_match.loss_function(probe.loss)] is np.median else 'mean'
  pace = ('' if ratio >= MEAN_FAR else ', and at the pace of the run\'s second half it would '
          f'need more than {MEAN_HORIZON:.3g} x its steps again to get there')
  if flat is not None:
    pace = (f', no longer coming down, and its answers barely vary from example to example '
            f"({flat:.2%} of the labels' spread): they no longer depend on the input")
  return FLAT if flat is not None else MEAN, (
      f'the model did not train: after {steps} steps its loss (smoothed {smoothed:.4g}, '
      f'{first:.4g} on the first batch) is {ratio:.3g} x that of predicting the '
      f"labels' {centre} for every example, {level:.4g}{pace}: inputs or labels far off scale "
      '(standardise them), an initialiser wrong for the architecture, or a learning rate that '
      'knocked it there or is too low to leave it')


def _runs_to_reach(ratio: float, progress: Optional[float]) -> float:
  """How many times the run's steps a loss `ratio` x its target, down by `progress` over half
  the run, would take again to reach it at that pace (inf when it does not come down; 0 when
  the pace is unknown: no trail, no judgement on it)."""
  if progress is None:
    return 0.0
  if progress <= 0:
    return math.inf
  return math.log(ratio) / -math.log1p(-min(progress, 1.0 - 1e-12)) / 2


_CENTRES = {keras.losses.mean_squared_error: np.mean, keras.losses.mean_absolute_error: np.median}


def mean_level(probe) -> Optional[Tuple[float, float]]:
  """(the loss of predicting the first batch's label means, medians under MAE, for every
  example; the model's own loss on that batch, the lower of its `collapse.modes`) for a
  Keras MSE or MAE reduced by a mean over one output tensor the size of one label tensor, on
  unweighted batches of MEAN_ROWS rows or more; None otherwise. No variable moves."""
  centre = None if probe.loss is None else _CENTRES.get(loss_match.loss_function(probe.loss))
  first = probe.first_batch()
  reduction = getattr(probe.loss, 'reduction', diagnostics.MEAN_REDUCTIONS[0])
  if centre is None or first is None or reduction not in diagnostics.MEAN_REDUCTIONS or (
      isinstance(first, (tuple, list)) and len(first) == 3):
    return None
  found = answers.answers_of(probe, first)
  if found is None:
    return None
  y, outputs = found
  if len(y) < MEAN_ROWS:
    return None
  error = ((lambda p: np.mean(np.square(p - y))) if centre is np.mean
           else (lambda p: np.mean(np.abs(p - y))))
  level, own = error(np.broadcast_to(centre(y, axis=0), y.shape)), min(map(error, outputs))
  return (float(level), float(own)) if np.isfinite(level) and np.isfinite(own) else None


def uniform_guess(probe) -> Optional[float]:
  """A uniform guess's cross-entropy, log(K), for a Keras cross-entropy loss over K classes
  (`diagnostics.uniform_guess`) on unweighted batches; None otherwise (class weights scale the
  loss)."""
  first = probe.first_batch()
  if first is None or (isinstance(first, (tuple, list)) and len(first) == 3):
    return None
  return diagnostics.uniform_guess(probe)


def at_chance(losses, guess: float, lenient: bool = False) -> bool:
  """Whether per-example `losses` are no better than a uniform guess's `guess`: above it by
  more than twice their standard error, or all close to it (see `UNIFORM_SPREAD`). `lenient`
  (after a start far above the guess, or a training loss that never went below it, which make
  a model that did not train the likely case): their mean not below `CHANCE_LEVEL` x the guess
  by more than twice their standard error is enough (one batch of a model at the guess falls
  2-3 % below it as often as above: the two front doors' first batches differed so)."""
  mean, error = float(np.mean(losses)), float(np.std(losses) / math.sqrt(len(losses)))
  if mean - 2 * error >= guess or (lenient and mean + 2 * error >= CHANCE_LEVEL * guess):
    return True
  spread = float(np.sqrt(np.mean(np.square(losses - guess))))
  return mean >= CHANCE_LEVEL * guess and spread <= UNIFORM_SPREAD * guess


def first_batch_losses(probe) -> Optional[np.ndarray]:
  """The cross-entropy of each example of the run's first batch (no sample weights, label
  smoothing or regularisation losses), in each of `collapse.modes` (training mode too where
  BatchNorm's moving statistics may lag the weights), whichever is lower on average; None where
  it cannot be computed or is not finite. No variable moves."""
  terms = None if probe.loss is None else loss_match.loss_terms(probe.loss)
  first = probe.first_batch()
  if terms is None or first is None:
    return None
  per_example = {'sparse': keras.losses.sparse_categorical_crossentropy,
                 'categorical': keras.losses.categorical_crossentropy,
                 'binary': keras.losses.binary_crossentropy}[terms.family]
  features, labels = probe.split_batch(first)
  found = []
  try:  # A diagnostic never ends a run: a model or batch it cannot judge gives None.
    for training in collapse.modes(probe.model):
      outputs = tf.cast(diagnostics.model_outputs(probe.model, features, None, training),
                        tf.float32)
      target = labels
      if terms.family != 'sparse' and np.size(labels) == np.size(outputs):  # (B,) to (B, 1).
        target = tf.reshape(tf.cast(labels, tf.float32), tf.shape(outputs))
      losses = per_example(target, outputs, from_logits=terms.from_logits)
      found.append(np.asarray(losses, np.float64).reshape(len(np.asarray(outputs)), -1).mean(1))
  except Exception:  # pylint: disable=broad-except
    return None
  losses = min(found, key=np.mean)
  return losses if np.all(np.isfinite(losses)) else None
