"""DivergenceCheck: a run whose loss diverges while staying finite, or never comes down from a
broken start, is stopped (status 'diverged') or handed to a Rollback, instead of ending
'completed' with a useless model."""

import logging
import math
from typing import Optional

import gin
import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import state as state_lib
from stable_train import errors
from stable_train.policies import collapse
from stable_train.policies import diagnostics
from stable_train.policies import moved
from stable_train.policies import reference
from stable_train.policies import trend
from stable_train.policies import weight_scale
from stable_train.policies import untrained

log = logging.getLogger('stable_train')

_FIELDS, _I, _COLLAPSED, _UNSET = trend.FIELDS, trend.INDEX, trend.COLLAPSED, trend.UNSET
# Every value in the state is finite, as everything else a checkpoint holds (a reader can audit
# a checkpoint by finiteness): the scales (never negative) are _UNSET until the start check and
# _NOTHING where it had nothing to compare; 'best' is _HUGE until there is one, as is a
# 'reference' or scale that was not finite.
_SCALES, _NOTHING = ('output_rms', 'label_rms', 'input_rms', 'output_max'), -2.0
_HUGE, _TINY = trend.HUGE, float(np.finfo(np.float32).tiny)
KEEP_FRACTION = 0.5  # A broken start stops when the loss is still above this fraction of it.
# A classifier's broken start: a cross-entropy this many times a uniform guess's (`init_bad` then
# _CHANCE, else 1.0); an untrained EfficientNetB0's is 3.3x, a GRU's with N(0, 3) kernels 8.9x.
CHANCE_EXCESS, _CHANCE = 5.0, 2.0
INITIAL_COPY_LIMIT = 2**24  # Weights (16M) up to which the start check keeps the initial ones.


def _number(arg, value, **kwargs):
  return errors.check_number('DivergenceCheck', arg, value, **kwargs)


@gin.register(module='stable_train')
class DivergenceCheck(interfaces.Policy):
  """Flags a finite divergence and a start the run cannot train from (in the default stack).

  Folded on the host from each loop's reports (`observe`, a `LoopObserver`: nothing in the
  traced step), over applied steps with a finite loss: the smoothed loss (an EMA; the plain mean
  of the first `warmup` losses, which is also the run's starting level), its best value after
  the warm-up, and two streaks. The policies decide when a rule fires (the loop is noticed):
    - 'above_best': the smoothed loss stayed above both `factor` × its best and the starting
      level for `patience` steps in a row (the run climbed back above where it started);
    - 'rising': it rose on `rise_patience` steps in a row, doubling along the streak, and is
      above a tenth of the starting level.
  Either escalates (trigger `divergence`): a Rollback takes it over (rollback, rate backoff, until
  the run is stable); else the run stops 'diverged', its last good checkpoint intact and named.
  With `output_ratio`, the model's outputs on the first batch with its initial weights (up to
  16M; beyond, those after the first loop) are compared with the labels in inference mode:
  outputs over `output_ratio` x max(label RMS, 1) or a loss far above a guess's, unless kernels
  and inputs are at a standard scale (`weight_scale.by_design`: a sum over a graph's edges), still
  above half the start after `rise_patience` steps stop the run ('diverged', `untrainable_start`).
  With `collapse_every`, every that many steps while the smoothed loss is above a tenth of its
  start, at the start check once the first loop moved a weight, and once more at the end of a run
  about to end 'completed', the outputs on the first batch are probed (`collapse`): the same
  output for every example, where an untrained model of the same architecture varied, is a
  network that collapsed, its units dead (a ReLU net a too-high rate knocked out): a divergence
  (rule 'collapsed'); a checkpoint written after it is not good. With `judge_end`, a run about to
  end 'completed' after 2 x `rise_patience` steps whose model did not train ends 'diverged'
  (`untrained`: no weight moved, `no_weight_moved`; outputs the same for every example while the
  labels are not, `constant_outputs`; once the loss stopped coming down, a classifier no better
  than a guess, `chance_level`, a regression than its labels' mean, `mean_level`, or at it with
  answers that ignore the input, `flat_answers`). Losses that are not positive are not judged."""

  decides_on_clean_loops = False  # A loop where a rule fired is noticed (`observe`).
  uses_first_batch = True  # The start check and the reference re-run.

  def __init__(self, *, factor: float = 10.0, patience: int = 20, rise_patience: int = 50,
               smoothing: float = 0.9, warmup: int = 10, output_ratio=30.0,
               collapse_every: Optional[int] = 50, judge_end: bool = True,
               name: str = 'divergence'):
    """Initialises the check.

    Args:
      factor: 'above_best' needs the smoothed loss above this multiple of its best (> 1).
      patience: steps in a row the smoothed loss must stay that high (>= 1).
      rise_patience: steps in a row of a rising smoothed loss for 'rising', and the steps a
        broken start gets to come down (>= 2).
      smoothing: the EMA's decay, in (0, 1): each loss weighs 1 - smoothing.
      warmup: losses averaged into the starting level before the best is tracked (>= 1).
      output_ratio: the start check's ratio of the outputs' RMS to the labels' (> 1; healthy
        runs start at 1.5 or less, broken inits at 15 and more), or None to skip that check.
      collapse_every: steps between collapse probes (>= 1), or None for none.
      judge_end: whether a run about to end 'completed' after 2 x `rise_patience` steps or
        more is judged on whether it trained at all (`check_at_end`).
      name: policy name.
    """
    super().__init__(name=name)
    self.factor = _number('factor', factor, low=1.0, low_open=True)
    self.patience = errors.check_int('DivergenceCheck', 'patience', patience, minimum=1)
    self.rise_patience = errors.check_int('DivergenceCheck', 'rise_patience', rise_patience,
                                          minimum=2)
    self.smoothing = _number('smoothing', smoothing, low=0.0, high=1.0, low_open=True,
                             high_open=True)
    self.warmup = errors.check_int('DivergenceCheck', 'warmup', warmup, minimum=1)
    self.output_ratio = _number('output_ratio', output_ratio, low=1.0, low_open=True,
                                allow_none=True)
    self.collapse_every = None if collapse_every is None else errors.check_int(
        'DivergenceCheck', 'collapse_every', collapse_every, minimum=1)
    self.judge_end = errors.check_bool('DivergenceCheck', 'judge_end', judge_end)
    self.state = tf.Variable(trend.initial(), trainable=False, name='state')
    self._initial, self._variables, self._moved = None, [], moved.Moved()  # Set by `build`.
    self._collapse = collapse.CollapseProbe()  # Host-only: the untrained model's spread.
    self._trail = untrained.Trail()  # Host-only: the smoothed loss along the run.
    self._flagged_step = None  # The last loop's first flagged step (`observe`).
    self._told, self._warm = reference.Told(), None  # Host-only: the warnings given; the mean
    # loss of the run's first `warmup` steps (`untrained.verdict`'s `warm`; NaN: unknown, the
    # run resumed past them from a checkpoint another process wrote).
    self._fold = trend.Fold(smoothing=self.smoothing, factor=self.factor, warmup=self.warmup,
                            patience=self.patience, rise_patience=self.rise_patience,
                            collapse_every=self.collapse_every)

  def build(self, variables, variable_paths):
    del variable_paths
    # The start check (after the first loop) judges the initial weights where a copy is cheap.
    self._variables, self._moved = variables, moved.Moved(self.judge_end)  # Anew each fit.
    if self.output_ratio is not None and sum(int(np.prod(v.shape)) for v in variables) <= (
        INITIAL_COPY_LIMIT):
      self._initial = [np.array(v.numpy()) for v in variables]

  def threshold(self, start, best):
    """The smoothed loss over which a step counts towards 'above_best' (`trend.Fold`'s)."""
    return max(start, min(self.factor * best, trend.START_MARGIN * start))

  # -- host, every loop -------------------------------------------------------------------------
  def observed_variables(self):  # `LoopObserver`: the loop reads the state, not the host.
    return [self.state]

  def observe(self, reports) -> bool:
    """Folds the loop into the state (`fold`); True when a step flagged it for `decide`."""
    flagged = np.flatnonzero(self.fold(reports))
    self._flagged_step = int(reports.step[flagged[0]]) if flagged.size else None
    return self._flagged_step is not None

  def fold(self, reports) -> np.ndarray:
    """Folds one loop's steps into the state in float32 (applied steps with a finite loss);
    returns one flag per step: a rule fired, a check or probe is due, a collapse awaits."""
    old = state_lib.host_value(self.state, reports)
    s = list(old)
    flags = np.zeros(reports.num_steps, bool)
    unprobed = self.output_ratio is not None and s[_I['output_rms']] == _UNSET
    if self._warm is None and old[_I['count']] >= self.warmup:
      self._warm = math.nan  # Resumed: its first losses were another process's.
    with np.errstate(over='ignore'):  # `factor` x an unset best (float32's max) is inf.
      for i, (loss, applied) in enumerate(zip(reports.loss.astype(np.float32).tolist(),
                                              reports.applied.tolist())):
        if applied and math.isfinite(loss):  # A subnormal loss is 0 (TF's CPU kernels flush it).
          flags[i] = self._fold.step(s, np.float32(loss if abs(loss) >= _TINY else 0.0))
          if s[_I['count']] == self.warmup and old[_I['count']] < self.warmup:
            self._warm = float(s[_I['smoothed']])
        flags[i] |= unprobed  # Until the host has probed the outputs (a skipped first step too).
    if any(a != b for a, b in zip(s, old)):
      state_lib.host_assign(self.state, np.array(s, np.float32))
    self._collapse.saw(reports)
    self._trail.record(float(s[_I['count']]), float(s[_I['smoothed']]))
    self._moved.record(self._variables, int(np.sum(reports.applied)))
    return flags

  def decide_after_act(self, reports, context):
    """A `Rechecker`: what a check's ACT found escalates in the same loop (`decide` again)."""
    return self.decide(reports, context)

  def decide(self, reports, context):
    del context, reports  # Folded by `observe`, which found the first flagged step.
    if self._flagged_step is None:
      return None
    state = dict(zip(_FIELDS, self.state.numpy().tolist()))
    step = self._flagged_step
    act = lambda check, **details: interfaces.Decision(
        action=interfaces.ACT, policy=self.name, trigger='divergence_check', step=step,
        details=dict(details, check=check, best=_shown('best', state['best']),
                     smoothed=state['smoothed']))
    if state['output_rms'] == _UNSET and self.output_ratio is not None:
      return act('start')
    fields = _reported(state)
    if (state['init_bad'] > 0 and state['count'] >= self.rise_patience
        and state['smoothed'] > KEEP_FRACTION * state['start']):
      return interfaces.Decision(
          action=interfaces.ABORT, trigger='untrainable_start', step=step,
          status=interfaces.DIVERGED, details=dict(fields, rule='untrainable_start'),
          reason=(f'the loss has not come down in {self.rise_patience} steps (smoothed '
                  f"{state['smoothed']:.4g}, start {state['start']:.4g}) from a start where "
                  f'{_bad_start(state)}: the initial weights are too large; '
                  f'{diagnostics.INIT_REMEDY}'))
    if state['verdict'] == _COLLAPSED:
      return _collapsed(step, state)
    threshold = self.threshold(state['start'], state['best'])
    if state['above'] >= self.patience:
      rule, what = 'above_best', (
          f"stayed above {threshold:.4g} (its best {_text('best', state['best'])}, the untrained "
          f"model's {state['start']:.4g}) for {int(state['above'])} steps")
    elif state['rising'] >= self.rise_patience:
      rule, what = 'rising', (f"rose on {int(state['rising'])} steps in a row, from "
                              f"{state['rise_base']:.4g}")
    else:  # The collapse probe, or the start check with a loss that came down.
      due = self.collapse_every is not None and (
          state['smoothed'] > trend.COLLAPSE_LOSS * state['start'] > 0)
      return act('collapse') if due else None
    if state['verdict'] == 0:  # Is it the model, or only the batches? Checked once per streak.
      return act('reference', rule=rule, threshold=threshold)
    if state['verdict'] == reference.DATA:
      return None  # The model is fine on a clean batch: the batches are bad, not the run.
    return _diverged(step, fields, rule, (
        f"the training loss diverged at step {step}: smoothed {state['smoothed']:.4g} {what}; "
        f"the first batch's loss is {_text('reference', state['reference'])} now"))

  def execute(self, decision, run):
    """The two checks that need the model: the outputs' scale on the first batch ('start'), and
    the loss on it when a rule fires ('reference': a model that still does well there has met
    bad batches, not diverged)."""
    state = self.state.numpy()
    if decision.details['check'] == 'start':
      initial, self._initial = self._initial, None
      scales = diagnostics.output_scale(run.probe, initial)
      if scales[0] is None:
        ratio, scales = math.nan, (_NOTHING,) * 4  # Nothing to compare: done, never bad.
      else:
        ratio = scales[0] / max(scales[1], 1.0)
        scales = [x if math.isfinite(x) else _HUGE for x in scales]
      excess = diagnostics.chance_excess(run.probe, float(state[_I['start']]))
      kernels = weight_scale.fields(self._variables, initial, run.probe.model)
      off, designed = (float(math.isfinite(ratio) and ratio > self.output_ratio),
                       weight_scale.by_design(kernels, scales[2]))  # Its loss is no bad start.
      bad = (_CHANCE if excess is not None and excess > CHANCE_EXCESS and not (off and designed)
             else off * (not designed))
      state[[_I[k] for k in _SCALES + ('init_bad',)]] = [*scales, bad]
      if bad:
        diagnostics.warn_bad_start(run, decision.step, _bad_start(dict(zip(
            _FIELDS, state.tolist()))), self.rise_patience, self.name, **kernels,
                                   **({'chance_excess': excess} if bad == _CHANCE else {}))
      elif ratio > self.output_ratio:  # Off scale by design: said (the doctor reads kernels).
        run.emit('start_check', decision.step, policy=self.name, output_ratio=ratio, **kernels)
      # Probed too once the loop trained: a first loop (or a fit's resumed weights) may kill it.
      if self.collapse_every is not None and initial is not None:
        self._collapse.measure_initial(run.probe, initial)
        if collapse.moved(run.probe, initial):
          _probe_collapse(self._collapse, state, decision.step, decision.details, run)
    elif decision.details['check'] == 'collapse':
      _probe_collapse(self._collapse, state, decision.step, decision.details, run)
    else:
      reference.check(state, decision, run, self.warmup, self._told)
    self.state.assign(state)
    return None

  def check_at_end(self, run) -> Optional[interfaces.Decision]:
    """At the end of a run about to end 'completed' (`EndCheck`): with `judge_end`, after 2 x
    `rise_patience` steps, whether it trained (`moved`, `untrained.verdict`); the collapse probe
    once more, at any loss, outranking `constant_outputs` (an untrained model's varied)."""
    state = self.state.numpy()
    fields = dict(zip(_FIELDS, state.tolist()))
    found = None
    if self.judge_end and fields['count'] >= 2 * self.rise_patience:
      guess = untrained.uniform_guess(run.probe)
      bad = _bad_start(fields) if fields['init_bad'] else ''
      found = self._moved.verdict(self._variables, 2 * self.rise_patience, fields) or (
          untrained.verdict(run.probe, fields['smoothed'], int(fields['count']),
                            self._trail.progress(guess), bad, fields['init_bad'] == _CHANCE,
                            self._trail.never_below(guess), start=fields['start'],
                            warm=self._warm))
    # The collapse probe once more, whatever the loss: a net that died and whose last bias still
    # wobbles (its loss down to the labels' spread, not quite flat) never ends 'completed'.
    if self.collapse_every is not None:
      if fields['verdict'] != _COLLAPSED:
        _probe_collapse(self._collapse, state, run.step, {
            'smoothed': fields['smoothed'], 'best': _shown('best', fields['best'])}, run)
        self.state.assign(state)
      if state[_I['verdict']] == _COLLAPSED:
        return _collapsed(run.step, dict(zip(_FIELDS, state.tolist())))
    if found is None:
      return None
    return interfaces.Decision(action=interfaces.ABORT, trigger=found[0], step=run.step,
                               status=interfaces.DIVERGED, reason=found[1],
                               details=dict(_reported(fields), rule=found[0]))

  def is_healthy(self) -> bool:
    """False while the smoothed loss is above the divergence threshold or the model collapsed: a
    checkpoint written then (the run may end `diverged`) is not marked good, never a target."""
    state = self.state.numpy()
    return float(state[_I['above']]) == 0.0 and float(state[_I['verdict']]) != _COLLAPSED

  def summary(self):
    state = dict(zip(_FIELDS, self.state.numpy().tolist()))
    shown = {k: _shown(k, state[k]) for k in ('best', 'start') + _SCALES}
    return {'divergence': dict(smoothed_loss=_shown('smoothed', state['smoothed']), **shown)}


def _bad_start(state) -> str:  # What was wrong at a broken start.
  return diagnostics.bad_start(state['init_bad'] == _CHANCE, state['start'],
                               state['output_rms'] / max(state['label_rms'], 1.0))


def _collapsed(step, state) -> interfaces.Decision:
  return _diverged(step, _reported(state), 'collapsed',
                   collapse.reason(step, state['smoothed'], state['start']))


def _probe_collapse(prober, state, step, details, run) -> None:
  """Marks the model collapsed (`verdict`) when a `collapse.CollapseProbe` finds (and reports) it."""
  if prober.report(run, step, details):
    state[_I['verdict']] = _COLLAPSED


def _diverged(step, fields, rule, reason) -> interfaces.Decision:
  return interfaces.Decision(
      action=interfaces.ESCALATE, trigger='divergence', step=step, status=interfaces.DIVERGED,
      details=dict(fields, rule=rule), reason=reason)


def _reported(state):  # The state's fields a decision reports (`_shown`).
  return {k: _shown(k, state[k]) for k in ('smoothed', 'best', 'start', 'reference') + _SCALES[:2]}


def _shown(name: str, value: float):
  """A state value as reported: None where unset, not yet had, nothing to compare or infinite."""
  return None if value >= _HUGE or (name in _SCALES and value < 0) else value


def _text(name: str, value: float) -> str:
  return 'not finite' if _shown(name, value) is None else f'{_shown(name, value):.4g}'
