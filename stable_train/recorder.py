"""The loop recorder: one loop of step reports written out as `skip` events, TensorBoard scalars
and progress lines."""

import logging
import math
import time
from typing import Callable, Dict, Optional

import numpy as np

from stable_train import reports as reports_lib

log = logging.getLogger('stable_train')


class LoopRecorder:
  """Writes one loop of reports out: `skip` events, TensorBoard scalars, progress lines."""

  def __init__(self, *, emit: Callable[..., object], scalars, summary_every: int, log_every: int,
               metrics: Optional[Callable[[], Dict[str, float]]] = None,
               reset_metrics: Optional[Callable[[], None]] = None,
               num_steps: Optional[int] = None, verbose: bool = True,
               epoch_of: Optional[Callable[[int], Optional[int]]] = None,
               num_epochs: Optional[int] = None):
    """Args: emit: writes an event; scalars: `events.Scalars`; summary_every, log_every: in
    steps; metrics, reset_metrics: the Trainer's metric values (read at the end of a loop that
    holds a progress step, shown on its lines and written as scalars) and their reset (after it);
    num_steps: the run's target global step (percent and ETA on the progress lines);
    verbose: False writes no progress lines; epoch_of, num_epochs: the epoch of a step's batch
    and the epochs of the run (`epoch 2/3` on the progress lines), under fit(num_epochs=...).
    """
    self._epoch_of = epoch_of
    self._num_epochs = num_epochs
    self._verbose = verbose
    self._num_steps = num_steps
    self._window_losses = []  # Applied, finite losses since the last progress line.
    self._loops = 0  # The first loop of a fit holds the tracing: left out of steps/s.
    self._metrics = metrics
    self._reset_metrics = reset_metrics
    self.last_metrics: Dict[str, float] = {}  # The values of the last metric window shown.
    self._applied_since_reset = 0
    self._emit = emit
    self._scalars = scalars
    self._summary_every = summary_every
    self._log_every = log_every
    self._steps = 0
    self._counted = 0  # Steps of the current loop already counted into `_steps`.
    self._time = time.perf_counter()

  def record(self, reports: reports_lib.StepReports, skipped_total: int) -> None:
    """Args: reports: one loop's reports; skipped_total: the skip counter after the loop."""
    n = reports.num_steps
    if n and reports.clean() and not self._due(int(reports.step[0]), int(reports.step[-1])):
      # A clean loop with no summary or progress step in it (most loops): nothing to write.
      self._applied_since_reset += n
      self._window_losses.extend(reports.loss.tolist())  # Clean: applied and finite, all.
      self._end_loop(n)
      return
    skipped = ~reports.applied.astype(bool)
    steps = reports.step
    n = reports.num_steps
    # The counter after each step, derived from its value after the loop.
    skipped_after = skipped_total - np.cumsum(skipped[::-1])[::-1] + skipped
    self._applied_since_reset += n - int(skipped.sum())
    summary_due = steps % self._summary_every == 0
    log_due = steps % self._log_every == 0
    # One window per loop end that holds a progress step (steps_per_loop rounds the window up).
    metrics = self._metrics() if (self._metrics is not None and log_due.any()) else {}
    if metrics and not self._applied_since_reset:
      # A window whose every step was skipped counted no sample: Keras reads such a metric as 0,
      # which a monitor (EarlyStopping on a training metric) would take for a value.
      metrics = {name: math.nan for name in metrics}
    # Only the steps that write something are visited in Python: skips, faults, and the steps
    # on the summary or progress cadence (a healthy loop between them costs a few array ops).
    faulty = ~(reports.inputs_finite & reports.loss_finite & reports.grads_finite) | (
        reports.overflow.astype(bool))
    visit = np.flatnonzero(skipped | faulty | summary_due | log_due)
    start = 0
    for i in visit:
      self._add_window_losses(reports, skipped, start, i)
      start = i + 1
      step = int(steps[i])
      fault = reports.fault(i)
      if skipped[i]:
        self._emit('skip', step, fault=fault or 'policy', tensor=reports.offending_tensor(i),
                   loss=reports.loss[i], grad_norm=reports.grad_norm[i])
      if fault or summary_due[i]:
        values = {f.scalar: float(getattr(reports, f.name)[i])
                  for f in reports_lib.REPORT_FIELDS if f.scalar}
        values.update(skipped_steps=float(skipped_after[i]), skipped=float(skipped[i]))
        self._scalars.write(step, values)
      if not skipped[i] and np.isfinite(reports.loss[i]):
        self._window_losses.append(float(reports.loss[i]))
      if self._loops:
        self._steps += i + 1 - self._counted
        self._counted = i + 1
      if self._verbose and log_due[i]:
        self._progress_line(step, float(reports.grad_norm[i]), int(skipped_after[i]), metrics)
      if metrics and log_due[i]:
        self._scalars.write(step, {f'metrics/{k}': v for k, v in metrics.items()})
    self._add_window_losses(reports, skipped, start, n)
    self._end_loop(n)
    if metrics:
      self.last_metrics = metrics
      if self._reset_metrics is not None:
        self._reset_metrics()
        self._applied_since_reset = 0

  def _progress_line(self, step: int, grad_norm: float, skips: int, metrics) -> None:
    """Logs one progress line: the mean loss of the window since the last one, steps/s, ETA."""
    now = time.perf_counter()
    rate = self._steps / (now - self._time) if self._steps else None
    if self._loops:
      self._steps, self._time = 0, now
    shown = ''.join(f'  {name} {value:.4g}' for name, value in metrics.items())
    mean = np.mean(self._window_losses) if self._window_losses else float('nan')
    self._window_losses = []
    epoch = self._epoch_of(step) if self._epoch_of is not None else None
    log.info('step %d%s%s  loss %.5g  grad_norm %.4g  %s  skips %d%s', step,
             self._progress(step, rate),
             f'  epoch {epoch}/{self._num_epochs}' if epoch is not None else '',
             mean, grad_norm, f'{rate:.1f} steps/s' if rate else '- steps/s (tracing)', skips,
             shown)

  def _due(self, first: int, last: int) -> bool:
    """Whether a summary or progress step lies in the consecutive steps [first, last]."""
    return any(last // every > (first - 1) // every
               for every in (self._summary_every, self._log_every))

  def _end_loop(self, n: int) -> None:
    """Counts a loop of `n` steps into the steps/s figure."""
    if self._loops:
      self._steps += n - self._counted
    self._counted = 0
    if not self._loops:  # Steps/s from here on: the first loop traced the step.
      self._time = time.perf_counter()
    self._loops += 1

  def _add_window_losses(self, reports, skipped, start: int, end: int) -> None:
    """Adds the applied, finite losses of steps [start, end) to the progress window."""
    if end > start:
      losses = reports.loss[start:end][~skipped[start:end]]
      self._window_losses.extend(float(v) for v in losses[np.isfinite(losses)])

  def _progress(self, step: int, rate: Optional[float]) -> str:
    """'/N (P%, ETA 1m05s)' for a run with a target step; '' otherwise."""
    if not self._num_steps:
      return ''
    text = f'/{self._num_steps} ({100.0 * step / self._num_steps:.0f}%'
    if rate:
      eta = int(round(max(self._num_steps - step, 0) / rate))
      text += f', ETA {eta // 3600}h{eta % 3600 // 60:02d}m' if eta >= 3600 else (
          f', ETA {eta // 60}m{eta % 60:02d}s')
    return text + ')'

  def metric_window(self) -> Dict[str, float]:
    """The last metric window: the open one if an applied step counted since the last progress
    line (the run's end), else the last one shown."""
    if self._metrics is not None and self._applied_since_reset:
      return self._metrics()
    return dict(self.last_metrics)
