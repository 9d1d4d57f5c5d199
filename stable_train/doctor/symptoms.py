"""The doctor's reading of a run's records: the symptoms (`Symptoms.read`) and what they add up
to (fault patterns, growth before the trouble, its onset). Pure functions of the records, no I/O;
the causes they speak for are in `causes`. Injected faults (`fault_injected` events of a
`Faults` plan) are never read: the doctor must find a rehearsed cause from its symptoms.
"""

import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from stable_train.doctor import norms as norms_lib
from stable_train.doctor.evidence import KERNEL_OFF_SCALE, OUTPUT_RATIO, record_recheck

MISMATCH = 'loss_output_mismatch'  # The cause of the start check's `warning` event.
# The highest rate each optimizer is commonly run at (Keras's defaults are SGD 0.01, Adam 1e-3;
# ResNet recipes run SGD at 0.1): a blow-up at or below it is no rate's fault.
USUAL_RATE = {'SGD': 0.1, 'Adam': 5e-3, 'AdamW': 5e-3, 'Adamax': 5e-3, 'Nadam': 5e-3,
              'RMSprop': 5e-3, 'Lion': 1e-3}
BLOWUP = 30.0  # The loss this many times its first step's within the first updates: a blow-up.
# ...the model's (`amplified`) at under AMPLIFYING_RATE x the usual top, or by BIG_BLOWUP x or
# more at any usual rate: a reviewer's MLP and linear regressions at 0.5-1x the top, which a
# lower rate trains, blew up 35-54x; models that amplify their gradients (sum pooling, residual
# stacks and graph sums without normalisation, which a lower rate does not cure) 1.2e3-1e27x
# there, and 38x to 9e11x at 0.02-0.3x it in the calibration.
AMPLIFYING_RATE, BIG_BLOWUP = 0.5, 1e3
INPUTS_LARGE = 10.0  # Float features of a larger RMS are not normalised (weight_scale's too).


def number(value) -> float:
  """A float from a record's value: JSON keeps NaN and Inf as the strings 'nan', 'inf'; None
  and anything else unreadable is NaN."""
  try:
    return float(value)
  except (TypeError, ValueError):
    return math.nan


def numbers(values) -> np.ndarray:
  return np.asarray([number(v) for v in ([] if values is None else values)], np.float64)


def finite_values(values) -> np.ndarray:
  """The finite ones of `values` (a recorded series: None, 'nan' and 'inf' dropped)."""
  a = numbers(values)
  return a[np.isfinite(a)]


def _first_history(events) -> Optional[Dict[str, List[Any]]]:
  """The first `history` event's series, passing over one written where a divergence check
  blamed the batches when a later trouble wrote another (that one is the run's own)."""
  histories = [e for e in events if e.get('event') == 'history']
  cleared = {e.get('step') for e in events
             if e.get('event') == 'divergence_check' and e.get('verdict') == 'data'}
  chosen = next((e for e in histories if e.get('step') not in cleared),
                histories[0] if histories else None)
  return None if chosen is None else {k: chosen.get(k) or [] for k in (
      'steps', 'loss', 'grad_norm', 'learning_rate', 'loss_scale', 'applied')}


class ForensicsReadings:
  """What a Forensics record (`forensics`, its report.json, or None) shows."""
  forensics: Optional[Dict[str, Any]]

  def input_bad(self) -> bool:
    """The forensics batch held NaN/Inf (the run's inputs, not its arithmetic)."""
    inputs = (self.forensics or {}).get('inputs') or []
    return any(number(e.get('nan')) + number(e.get('inf')) > 0 for e in inputs)

  def inf_fill(self) -> bool:
    """Whether forensics stopped at a constant holding an infinity outside float16 (a -inf mask
    fill, built on purpose: non-finite as much in float32; what came after it was not checked).
    A float16 one may be a -1e30 that float16 cannot hold: float16's range, not a fill."""
    op = (self.forensics or {}).get('op_level') or {}
    return (not op.get('found') and 'Inf' in str(op.get('constant') or '')
            and op.get('dtype') in ('float32', 'float64', 'bfloat16'))

  def activations(self) -> List[Dict[str, Any]]:
    return (self.forensics or {}).get('activations') or []

  def op_type(self) -> Optional[str]:
    op = (self.forensics or {}).get('op_level') or {}
    return op.get('op_type') if op.get('found') else None

  def op_name(self) -> str:
    """The full name of the op forensics located ('?' where none)."""
    return ((self.forensics or {}).get('op_level') or {}).get('op_name') or '?'

  def op_in_half(self) -> bool:
    """Whether the op forensics located computed in float16 (its output's dtype)."""
    return self.op_type() is not None and self.forensics['op_level'].get('dtype') == 'float16'

  def op_in_loss(self) -> bool:
    """Whether forensics located the op outside every layer: the loss's own arithmetic."""
    return self.op_type() is not None and not (self.forensics['op_level'].get('layer'))


@dataclasses.dataclass
class Symptoms(ForensicsReadings):
  """What the records show, in the doctor's terms (see `read`)."""
  status: str = ''
  reason: str = ''
  num_steps: int = 0  # The run's target step (0: unknown).
  global_step: int = 0  # The step it ended at.
  faults: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # Non-finite skips.
  overflow_skips: int = 0
  vetoes: int = 0  # Skips on finite values (OutlierSkip).
  triggers: List[str] = dataclasses.field(default_factory=list)  # Rollback and stop triggers.
  rollbacks: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
  checks: List[str] = dataclasses.field(default_factory=list)  # divergence_check verdicts.
  collapsed: bool = False  # A divergence_check found the outputs the same for every example.
  inputs_checked: bool = False  # The stack checked every input tensor's finiteness.
  outputs_checked: bool = True  # The step saw the outputs (StepGuard may be handed none).
  first_step: Optional[int] = None  # The run's first step (its start event's step + 1).
  outlier_batches: List[int] = dataclasses.field(default_factory=list)
  warnings: List[str] = dataclasses.field(default_factory=list)  # `warning` events' causes.
  mismatch: Optional[Dict[str, Any]] = None  # The first mismatch `warning` (kind, fix, gin).
  rechecks: List[str] = dataclasses.field(default_factory=list)  # Forensics re-run verdicts.
  forensics: Optional[Dict[str, Any]] = None  # The first forensics record's report.
  history: Optional[Dict[str, List[Any]]] = None  # The first `history` event.
  fp16: str = ''  # 'scaled' (a loss scale), 'unscaled' (float16 in forensics' record), ''.
  half_variables: bool = False  # The optimizer's variables (its weights') in float16.
  output_ratio: Optional[float] = None  # Outputs' RMS over max(labels' RMS, 1) at the start.
  output_rms: Optional[float] = None
  label_rms: Optional[float] = None  # The labels' RMS on the first batch.
  input_rms: Optional[float] = None  # The float features' RMS on the first batch.
  output_max: Optional[float] = None  # The outputs' largest magnitude there.
  kernel_ratio: Optional[float] = None  # The initial kernels' RMS over LeCun's (weight_scale).
  chance_excess: float = math.nan  # A classifier's first loss over a uniform guess's, if warned.
  clipped_steps: int = 0
  healthy_norm: Optional[float] = None
  optimizer: str = ''  # The optimizer's class (inside a LossScaleOptimizer); '' unknown.
  recurrent: float = math.nan  # The share of its weights in recurrent layers (summary.json).
  embedded: bool = False  # A recurrent model over a token sequence's Embedding lookup.
  optimizer_clip: Dict[str, float] = dataclasses.field(default_factory=dict)  # Its own clip.

  @property
  def trouble_began(self) -> Optional[int]:
    """The first faulty step, or the step the history shows the loss or the gradient norm
    leaving its level (10x its lowest so far), or the history's trouble step."""
    steps = [f['step'] for f in self.faults]
    h = self.history or {}
    if h.get('steps'):
      steps.append(h['steps'][-1])
      for key in ('loss', 'grad_norm'):
        values = numbers(h.get(key))
        low = np.fmin.accumulate(np.where(np.isfinite(values), values, np.nan))
        left = np.flatnonzero(values[1:] > 10 * low[:-1])
        if left.size:
          steps.append(h['steps'][left[0] + 1])
    return int(min(steps)) if steps else None

  @classmethod
  def read(cls, events: Sequence[Dict[str, Any]], summary: Dict[str, Any],
           forensics: Sequence[Dict[str, Any]]) -> 'Symptoms':
    """The symptoms of a run from its events, summary and forensics reports (any may be
    empty: a run directory written before the doctor existed has no history events)."""
    s = cls(status=summary.get('status', ''), reason=summary.get('reason', ''),
            global_step=int(summary.get('global_step') or 0))
    for e in events:
      kind = e.get('event')
      if e.get('kernel_ratio') is not None:  # The start check's, warned of or not: off scale?
        s.kernel_ratio = number(e['kernel_ratio'])
      if kind in ('start', 'resume'):
        s.num_steps = int(e.get('num_steps') or s.num_steps)
        s.first_step = int(e.get('step') or 0) + 1 if s.first_step is None else s.first_step
      elif kind == 'skip':
        fault = e.get('fault')
        if fault == 'overflow':
          s.overflow_skips += 1
        elif fault == 'policy':
          s.vetoes += 1
        else:
          s.faults.append(e)
      elif kind == 'rollback':
        s.rollbacks.append(e)
        s.triggers.append(e.get('trigger', ''))
      elif kind in ('abort', 'diverged'):
        s.triggers.append(e.get('trigger', ''))
        s.reason = e.get('reason', s.reason)
      elif kind == 'divergence_check':
        s.checks.append(e.get('verdict', ''))
        s.collapsed = s.collapsed or e.get('rule') == 'collapsed'
      elif kind == 'outliers':
        s.outlier_batches += list(e.get('batches') or [])
      elif kind == 'warning':
        s.warnings.append(e.get('cause', ''))
        s.chance_excess = number(e.get('chance_excess', s.chance_excess))  # A broken start's.
        if e.get('cause') == MISMATCH and s.mismatch is None:
          s.mismatch = e
      elif kind == 'forensics' and e.get('recheck'):
        s.rechecks.append(e['recheck'])
    s.history = _first_history(events)
    s.forensics = forensics[0] if forensics else None
    s.rechecks = s.rechecks or record_recheck(s.forensics, s.faults)  # Its re-run: weaker.
    s.read_summary(summary)
    return s

  def read_summary(self, summary: Dict[str, Any]) -> None:
    """The fields of `summary.json` (after the events: the history's loss scale and norms)."""
    self.inputs_checked = bool(summary.get('inputs_checked'))
    self.optimizer = str(summary.get('optimizer_family') or summary.get('optimizer') or '')
    self.outputs_checked = summary.get('outputs_checked', True) is not False
    self.recurrent = number(summary.get('recurrent'))  # Absent: NaN, no recurrence read.
    self.embedded = summary.get('embedded') is True
    clips = summary.get('optimizer_clip')
    self.optimizer_clip = {k: number(v) for k, v in (clips.items() if isinstance(clips, dict)
                                                     else ()) if 0 < number(v) < math.inf}
    scaled = 'loss_scale' in summary or any(
        v != 1.0 for v in finite_values((self.history or {}).get('loss_scale', [])))
    self.half_variables = summary.get('variable_dtype') == 'float16'
    self.fp16 = 'scaled' if scaled else 'unscaled' if (
        self.half_variables or self.op_in_half()
        or any(a.get('dtype') == 'float16' for a in self.activations())) else ''
    start = summary.get('divergence') or summary.get('init_check') or {}
    if start.get('output_rms') is not None and start.get('label_rms') is not None:
      self.output_rms, self.label_rms = number(start['output_rms']), number(start['label_rms'])
      self.output_ratio = self.output_rms / max(number(start['label_rms']), 1.0)
    self.input_rms = number(start.get('input_rms'))
    self.output_max = number(start.get('output_max'))
    clip = summary.get('adaptive_clip') or {}
    self.clipped_steps = int(clip.get('clipped_steps') or 0)
    h = self.history or {}
    self.healthy_norm = norms_lib.healthy(numbers(h.get('grad_norm')), numbers(h.get('steps')),
                                          self.trouble_began, number(clip.get('norm_mean')))

  # -- derived ------------------------------------------------------------------------------------
  def fault_kinds(self) -> Dict[str, int]:
    kinds = {}
    for f in self.faults:
      kinds[f.get('fault')] = kinds.get(f.get('fault'), 0) + 1
    return kinds

  def outputs_non_finite(self) -> int:
    return sum('model outputs already non-finite' in (f.get('tensor') or '') for f in self.faults)

  def isolated(self) -> bool:
    """A few faults, each alone: the run went on between them."""
    steps = sorted(f['step'] for f in self.faults)
    return 0 < len(steps) <= 3 and all(b - a > 1 for a, b in zip(steps, steps[1:]))

  def sporadic(self) -> bool:
    """Faults on a small share of the steps, in short stretches (at most 5 in a row) with the
    run going on between them."""
    steps = sorted(f['step'] for f in self.faults)
    span = max(self.num_steps, steps[-1] if steps else 0)
    longest = run = 1
    for a, b in zip(steps, steps[1:]):
      run = run + 1 if b - a == 1 else 1
      longest = max(longest, run)
    return 0 < len(steps) <= max(3, 0.1 * span) and longest <= 5 and self.status != 'aborted'

  def persistent(self) -> bool:
    """Faults on (nearly) every step from the first one: a deterministic, model-level fault."""
    steps = sorted(f['step'] for f in self.faults)
    return len(steps) >= 5 and (steps[-1] - steps[0] + 1) <= 1.25 * len(steps)

  def growth(self) -> Tuple[float, float, float]:
    """(loss growth, grad-norm growth, largest one-step grad-norm jump) over the history before
    trouble: the trouble step's values (or the last finite ones) over the window's first half;
    the jump as `jump` reads it over the whole history. Gradient norms of 0 (no gradient reached
    a weight: a dead ReLU output) are left out of the norms' scale and jumps."""
    h = self.history or {}
    loss, norm = numbers(h.get('loss')), numbers(h.get('grad_norm'))
    if loss.size < 4:
      return 1.0, 1.0, 1.0
    half = max(loss.size // 2, 2)
    out = []
    for series, floor in ((loss, -math.inf), (norm, 0.0)):  # A norm of 0 sets no scale.
      base, tail = finite_values(series[:half]), finite_values(series[-3:])
      base = base[base > floor]
      out.append(float(tail.max() / max(np.median(base), 1e-30)) if base.size and tail.size
                 else (math.inf if base.size else 1.0))
    return out[0], out[1], self.jump()

  def cliff(self, since: int = 0) -> Tuple[float, Optional[int]]:
    """(the largest finite gradient norm of the history's applied steps after step `since` over
    the median of all of them, the step of that norm): a cliff is a norm orders of magnitude
    above the run's own in one step. (1.0, None) with fewer than 4 such norms above 0."""
    h = self.history or {}
    norm = numbers(h.get('grad_norm'))
    applied = np.asarray(h.get('applied') or [True] * norm.size, bool)
    # A step skipped on finite values (an outlier veto) was the batch's, not the model's; a norm
    # of 0 (no gradient reached a weight: a dead ReLU output) sets no scale to rise above.
    finite = np.isfinite(norm) & (norm > 0) & (applied if applied.size == norm.size else True)
    late = finite & norms_lib.after(self.history, since, norm.size)
    if finite.sum() < 4 or not late.any():
      return 1.0, None
    top = int(np.argmax(np.where(late, norm, -np.inf)))
    steps = h.get('steps') or []
    step = int(steps[top]) if top < len(steps) else None
    return float(norm[top] / max(np.median(norm[finite]), 1e-30)), step

  def jump(self, since: int = 0) -> float:
    """The largest one-step jump of the gradient norm (`norms.largest_jump`, norms of 0 left out)
    over the rises into the history's steps after `since` (from step `since` on)."""
    norm = numbers((self.history or {}).get('grad_norm'))
    norms = finite_values(norm[norms_lib.after(self.history, since - 1, norm.size)])
    return norms_lib.largest_jump(norms[norms > 0])

  def first_blowup(self) -> float:
    """The median loss of a fresh run's 2nd to 4th steps (at least two finite) over its first
    step's, at least 1 (a loss of 0.01 that rises to 0.5 is no blow-up), where the history
    begins at step 1 and that step was applied; NaN otherwise. A median: one odd batch among
    them does not make a blow-up."""
    h = self.history or {}
    steps, loss = h.get('steps') or [], numbers(h.get('loss'))
    if self.first_step != 1 or not steps or steps[0] != 1 or loss.size < 3 or not (
        (h.get('applied') or [False])[0]) or not loss[0] > 0:
      return math.nan
    after = finite_values(loss[1:4])
    return float(np.median(after) / max(loss[0], 1.0)) if after.size >= 2 else math.nan

  def usual_rate(self) -> Optional[float]:
    """The largest learning rate of the first three updates where it is at most the usual one
    for the run's optimizer (USUAL_RATE), else None (above it, or the optimizer or the rate
    unknown)."""
    lr = numbers((self.history or {}).get('learning_rate', [])[:3])
    usual = USUAL_RATE.get(self.optimizer)
    top = float(lr.max()) if lr.size else math.nan
    # A float32 rate (0.1 is 0.10000000149) read against the table's decimal bound.
    return top if usual and lr.size and (lr > 0).all() and top <= usual * (1 + 1e-6) else None

  def amplified(self) -> float:
    """The first updates' blow-up (`first_blowup`) where it is one (BLOWUP or more) at a rate
    under AMPLIFYING_RATE x the usual top, or BIG_BLOWUP or more at a usual rate, from a clean
    start (`clean_start`): the model amplifies its updates (its gradients), not the rate; else
    0. A divergence check that blamed the batches later does not unmake a blow-up of the first
    updates (the median of three)."""
    blowup, rate = self.first_blowup(), self.usual_rate()
    if rate is None or not self.clean_start() or not blowup >= (
        BLOWUP if rate < AMPLIFYING_RATE * USUAL_RATE[self.optimizer] else BIG_BLOWUP):
      return 0.0
    return blowup

  def clean_start(self) -> bool:
    """Normalised inputs, no kernel off the standard scale (unknown is sound unless the outputs
    started off scale), no bad batch, no mismatch: what amplifies a step is the architecture."""
    normalised = self.input_rms is not None and self.input_rms <= INPUTS_LARGE  # NaN: unknown.
    off = self.output_ratio is not None and self.output_ratio > OUTPUT_RATIO  # Whose? Unknown.
    sound = self.kernel_ratio < KERNEL_OFF_SCALE if self.kernel_ratio is not None else not off
    return normalised and sound and not (self.input_bad() or self.fault_kinds().get('input')
                                         or self.outlier_batches or self.mismatch)

  def lr_rise(self) -> float:
    """The learning rate at trouble over its median before (> 1: it went up, e.g. a warm-up)."""
    lr = finite_values((self.history or {}).get('learning_rate', []))
    return float(lr[-1] / max(np.median(lr), 1e-30)) if lr.size > 2 else 1.0
