"""The run's recent history on the host: the last steps' reports, written out as a compact
`history` event when trouble begins (the evidence the doctor reads of what came before it)."""

import collections
from typing import Any, Callable, Dict, Optional

import numpy as np

# The report fields a `history` event carries, one list each (oldest step first).
FIELDS = ('step', 'loss', 'grad_norm', 'clipped_grad_norm', 'learning_rate', 'loss_scale',
          'applied')


class RunHistory:
  """Keeps the last `size` steps' reports (references to the loops' reports: nothing is copied
  on a healthy loop) and emits them once per episode of trouble: a skipped step that is no fp16
  overflow, a rollback, a rule checked and cleared, or the end of the run, at most `max_events`
  times a run."""

  def __init__(self, size: int = 64, max_events: int = 20):
    self.size = size
    self.max_events = max_events
    self._loops = collections.deque()
    self._steps = 0  # Steps held in `_loops`.
    self._seen = 0  # Steps added in all (the step numbers go back on a rollback; this does not).
    self._last_trouble = None  # `_seen` position of the last trouble (of any episode).
    self.events = 0

  def add(self, reports) -> None:
    """Adds one loop's reports (before the dispatcher acts on them)."""
    self._loops.append(reports)
    self._steps += reports.num_steps
    self._seen += reports.num_steps
    # Enough older steps stay for a window that ends at the newest loop's first step.
    while self._steps - reports.num_steps - self._loops[0].num_steps >= self.size:
      self._steps -= self._loops.popleft().num_steps

  def window(self, last: Optional[int] = None) -> Dict[str, Any]:
    """The last `size` steps kept, up to the `last`-th step of the newest loop (default: its
    end), oldest first; one list per field of `FIELDS`."""
    if not self._loops:
      return {f: [] for f in FIELDS}
    end = self._steps if last is None else self._steps - self._loops[-1].num_steps + last + 1
    return {f: np.concatenate([np.asarray(getattr(r, f)) for r in self._loops])[:end][
        -self.size:].tolist() for f in FIELDS}

  def after_loop(self, reports, action: str, ended, emit: Callable[..., object],
                 cleared: Optional[int] = None) -> None:
    """Emits a `history` event at the first trouble of an episode: a non-overflow skip in
    `reports` (the newest loop added), a resolved `action` other than 'continue', an `ended`
    run, or a rule that fired at step `cleared` and whose check let the run go on (a divergence
    check that blamed the batches: the doctor reads what came before it)."""
    skipped = np.flatnonzero(~reports.applied.astype(bool) & ~reports.overflow.astype(bool))
    at = np.flatnonzero(np.asarray(reports.step) == cleared) if cleared is not None else []
    if skipped.size:
      index = int(skipped[0])
    elif action != 'continue' or ended is not None:
      index = reports.num_steps - 1
    elif len(at):
      index = int(at[0])
    else:
      return
    position = self._seen - reports.num_steps + (int(skipped[-1]) if skipped.size else index)
    first = self._seen - reports.num_steps + index
    # An episode lasts while trouble keeps coming back within `size` steps.
    new_episode = self._last_trouble is None or first - self._last_trouble > self.size
    self._last_trouble = position
    if not new_episode or self.events >= self.max_events:
      return
    self._emit(emit, self.window(last=index))

  def at_end(self, emit: Callable[..., object]) -> None:
    """Emits the last steps as a `history` event for a run that an end-of-run check stops (a
    collapse, a loss never below a guess's): trouble found at the end, unless an episode of
    trouble still open covers it (its history was written)."""
    if not self._loops or (self._last_trouble is not None
                           and self._seen - 1 - self._last_trouble <= self.size):
      return
    self._last_trouble = self._seen - 1
    if self.events < self.max_events:
      self._emit(emit, self.window())

  def _emit(self, emit: Callable[..., object], window: Dict[str, Any]) -> None:
    self.events += 1
    steps = window.pop('step')
    emit('history', int(steps[-1]), steps=steps, **window)
