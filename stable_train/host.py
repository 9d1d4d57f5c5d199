"""Host-side pieces of the outer loop: resolving policy decisions, recording a loop of reports,
and turning SIGTERM/SIGINT into a clean stop."""

import contextlib
import logging
import signal
import time
from typing import Callable, Optional, Sequence

import numpy as np

from stable_train import interfaces

log = logging.getLogger('stable_train')


def resolve(decisions: Sequence[interfaces.Decision], policies: Sequence[interfaces.Policy],
            context) -> interfaces.Decision:
  """One decision from the policies' decisions: abort > escalation > rollback > continue.

  An escalation goes to the first policy that handles it (`handle_escalation`, e.g. Rollback);
  one that no policy handles stops the run. ACT decisions are not resolved (none outranks
  another): the controller carries out each one itself, before this one.
  """
  for d in decisions:
    if d.action == interfaces.ABORT:
      return d
  for d in decisions:
    if d.action == interfaces.ESCALATE:
      for p in policies:
        handled = p.handle_escalation(d, context)
        if handled is not None:
          return handled
      return interfaces.Decision(action=interfaces.ABORT, reason=d.reason, trigger=d.trigger,
                                 step=d.step)
  for d in decisions:
    if d.action == interfaces.ROLLBACK:
      return d
  return interfaces.Decision()


class LoopRecorder:
  """Writes one loop of reports out: `skip` events, TensorBoard scalars, progress lines."""

  def __init__(self, *, emit: Callable[..., object], scalars, summary_every: int, log_every: int):
    self._emit = emit
    self._scalars = scalars
    self._summary_every = summary_every
    self._log_every = log_every
    self._steps = 0
    self._time = time.perf_counter()

  def record(self, reports: interfaces.StepReports, skipped_total: int) -> None:
    """Args: reports: one loop's reports; skipped_total: the skip counter after the loop."""
    skipped = ~reports.applied.astype(bool)
    # The counter after each step, derived from its value after the loop.
    skipped_after = skipped_total - np.cumsum(skipped[::-1])[::-1] + skipped
    for i in range(reports.num_steps):
      step = int(reports.step[i])
      fault = reports.fault(i)
      if skipped[i]:
        self._emit('skip', step, fault=fault or 'policy', tensor=reports.offending_tensor(i),
                   loss=reports.loss[i], grad_norm=reports.grad_norm[i])
      if fault or step % self._summary_every == 0:
        values = {f.scalar: float(getattr(reports, f.name)[i])
                  for f in interfaces.REPORT_FIELDS if f.scalar}
        values.update(skipped_steps=float(skipped_after[i]), skipped=float(skipped[i]))
        self._scalars.write(step, values)
      self._steps += 1
      if step % self._log_every == 0:
        now = time.perf_counter()
        rate = self._steps / max(now - self._time, 1e-9)
        self._steps, self._time = 0, now
        log.info('step %d  loss %.5g  grad_norm %.4g  %.1f steps/s  skips %d', step,
                 reports.loss[i], reports.grad_norm[i], rate, int(skipped_after[i]))


class StopSignals:
  """Holds the SIGTERM/SIGINT received while active (`received`), instead of dying mid-step."""

  def __init__(self):
    self.received: Optional[int] = None

  @contextlib.contextmanager
  def catching(self):
    """Installs the handlers (main thread only) and restores the previous ones on exit."""
    previous = {}

    def handler(signum, frame):
      del frame
      if self.received is None:  # The first signal is the cause; a repeat changes nothing.
        self.received = signum

    for sig in (signal.SIGTERM, signal.SIGINT):
      try:
        previous[sig] = signal.signal(sig, handler)
      except ValueError:  # Not the main thread: leave signals alone.
        pass
    try:
      yield self
    finally:
      for sig, h in previous.items():
        signal.signal(sig, h)
