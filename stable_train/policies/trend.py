"""The smoothed-loss trend DivergenceCheck keeps: the layout of its state vector and the fold of
one step into it, on the host, in float32 (the state's type, as the traced step computed it)."""

from typing import List, Optional

import numpy as np

# The policy's state, one float32 vector (checkpointed under its policy's name).
FIELDS = ('smoothed', 'best', 'start', 'count', 'above', 'rising', 'rise_base', 'verdict',
          'reference', 'init_bad', 'output_rms', 'label_rms', 'input_rms', 'output_max')
INDEX = {name: i for i, name in enumerate(FIELDS)}
COLLAPSED = 2.0  # `verdict` of the collapse probe: kept until the host has escalated it.
UNSET = -1.0  # A scale the start check has not measured yet.
HUGE = float(np.finfo(np.float32).max)  # An unset best, a value that was not finite: all finite.
COUNT_CAP = 2.0**20  # `count` only gates the warm-up and the start check: capped, exact in f32.
START_MARGIN = 1.5  # A smoothed loss this far above the untrained model's is never healthy.
OUTLIER_CAP = 4.0  # A loss enters the average as at most this multiple of it.
RISE_FACTOR = 2.0  # A rising streak fires once the smoothed loss doubled along it...
RISE_FLOOR = 0.1  # ...and is at least this fraction of the starting level.
COLLAPSE_LOSS = 0.1  # The collapse probe runs while the smoothed loss is above this x the start.


def initial() -> np.ndarray:
  """The state of a run not begun: the scales not measured yet, no best."""
  state = np.zeros(len(FIELDS), np.float32)
  state[8:] = UNSET
  state[INDEX['best']], state[INDEX['init_bad']] = HUGE, 0.0
  return state


class Fold:
  """Folds applied steps' losses into the state's first eight fields (the last six are the
  host's checks'), one float32 step at a time; the arguments are DivergenceCheck's."""

  def __init__(self, *, smoothing: float, factor: float, warmup: int, patience: int,
               rise_patience: int, collapse_every: Optional[int]):
    self.warmup, self.patience, self.rise_patience = warmup, patience, rise_patience
    self.collapse_every = collapse_every
    self._f = {k: np.float32(v) for k, v in dict(
        one=1.0, zero=0.0, decay=1.0 - smoothing, cap=OUTLIER_CAP, count_cap=COUNT_CAP,
        factor=factor, margin=START_MARGIN, rise=RISE_FACTOR, floor=RISE_FLOOR,
        collapse=COLLAPSE_LOSS).items()}

  def step(self, s: List[np.float32], loss: np.float32) -> bool:
    """One applied step with a finite `loss` folded into `s` (the state's fields as float32
    scalars, updated in place); returns its flag: a rule fired, the start check or a collapse
    probe is due, or a collapse awaits the host."""
    f, get = self._f, lambda name: s[INDEX[name]]
    count, smoothed0 = get('count'), get('smoothed')
    # The plain mean during the warm-up (it becomes the starting level), then the EMA.
    weight = f['one'] / (count + f['one']) if count < self.warmup else f['decay']
    # One loss moves the average by at most OUTLIER_CAP x it: a bad batch is not a trend.
    capped = min(loss, f['cap'] * smoothed0) if count > 0 else loss
    smoothed = smoothed0 + weight * (capped - smoothed0)  # The loss itself at first.
    counted = min(count + f['one'], f['count_cap'])
    start = loss if count == 0 else get('start')  # The untrained model's loss.
    best = min(get('best'), smoothed) if counted > self.warmup else get('best')
    positive = start > 0 and best > 0
    # DivergenceCheck.threshold: back above the start and factor x the best, or far above it.
    threshold = max(start, min(f['factor'] * best, f['margin'] * start))
    above = get('above') + f['one'] if positive and smoothed > threshold else f['zero']
    rises = counted > self.warmup and smoothed > smoothed0
    rising = get('rising') + f['one'] if rises else f['zero']
    rise_base = (get('rise_base') if get('rising') > 0 else smoothed0) if rises else smoothed
    # A streak's verdict (set by the host) lasts while the streak does; a collapse until handled.
    collapsed = get('verdict') == COLLAPSED
    verdict = get('verdict') if (above > 0 or rising > 0 or collapsed) else f['zero']
    s[:8] = [smoothed, best, start, counted, above, rising, rise_base, verdict]
    fired = above >= self.patience or (
        rising >= self.rise_patience and positive and smoothed >= f['rise'] * rise_base
        and smoothed > f['floor'] * start)
    start_check = counted == self.rise_patience and get('init_bad') > 0
    due = (self.collapse_every is not None and self.warmup < counted < COUNT_CAP
           and counted % self.collapse_every == 0 and positive
           and smoothed > f['collapse'] * start)  # Probe a run whose loss has not come down far.
    return bool(fired or start_check or collapsed or due)
