"""The loop recorder: one loop of step reports written out as `skip` events, TensorBoard scalars
and progress lines."""

import logging
import math
import time
from typing import Callable, Dict, Optional

import numpy as np

from stable_train.core import reports as reports_lib

log = logging.getLogger('stable_train')
_SCALAR_FIELDS = tuple(f for f in reports_lib.REPORT_FIELDS if f.scalar)


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
    self._window = [0.0, 0]  # Sum and count of the applied, finite losses since the last line.
    self._loops = 0  # The first loop of a fit holds the tracing: left out of steps/s.
    self._metrics = metrics
    self._reset_metrics = reset_metrics
    self.last_metrics: Dict[str, float] = {}  # The values of the last metric window shown.
    self._applied_since_reset = 0
    self._emit = emit
    self._scalars = scalars
    self._summary_every = summary_every
    self._log_every = log_every
    self._steps = 0  # Steps since the last progress line (after the first loop).
    self._time = time.perf_counter()

  def record(self, reports: reports_lib.StepReports, skipped_total: int) -> None:
    """Args: reports: one loop's reports (consecutive steps); skipped_total: the skip counter
    after the loop.

    The work is per loop, in array operations; Python visits only the steps that write
    something (skips, faults, summary and progress steps).
    """
    n = reports.num_steps
    first = int(reports.step[0]) if n else 0
    clean = reports.clean()
    if clean and not self._due(first, first + n - 1):
      # A clean loop with no summary or progress step in it (most loops): nothing to write.
      self._applied_since_reset += n
      self._add_window(reports.loss, None)  # Clean: applied and finite, all.
      self._end_loop(n)
      return
    if clean:  # No skip, no fault: the counters stand, scalars only on the summary cadence.
      skipped, skipped_after = np.zeros(n, bool), np.full(n, skipped_total)
      written = range((-first) % self._summary_every, n, self._summary_every)
    else:
      skipped = ~reports.applied.astype(bool)
      # The counter after each step, derived from its value after the loop.
      skipped_after = skipped_total - np.cumsum(skipped[::-1])[::-1] + skipped
      faulty = ~(reports.inputs_finite & reports.loss_finite & reports.grads_finite) | (
          reports.overflow.astype(bool))
      written = np.flatnonzero(faulty | (reports.step % self._summary_every == 0))
      self._emit_skips(reports, np.flatnonzero(skipped))
    self._applied_since_reset += n - int(skipped.sum())
    if self._scalars.writing:
      self._write_scalars(reports, written, skipped, skipped_after)
    usable = None if clean else ~skipped & np.isfinite(reports.loss)  # The window's losses.
    losses = reports.loss if clean else np.where(usable, reports.loss, 0.0)
    log_steps = range((-first) % self._log_every, n, self._log_every)
    # One metric window per loop end that holds a progress step (steps_per_loop rounds it up).
    metrics = self._metric_values() if log_steps else {}
    start = 0
    for i in log_steps:
      self._add_window(losses[start:i + 1], None if clean else usable[start:i + 1])
      start = i + 1
      if self._verbose:
        self._progress_line(first + i, i + 1, float(reports.grad_norm[i]),
                            int(skipped_after[i]), metrics)
      self._window = [0.0, 0]
      if metrics:
        self._scalars.write(first + i, {f'metrics/{k}': v for k, v in metrics.items()})
    self._add_window(losses[start:], None if clean else usable[start:])
    self._end_loop(n)
    if metrics:
      self.last_metrics = metrics
      if self._reset_metrics is not None:
        self._reset_metrics()
        self._applied_since_reset = 0

  def _emit_skips(self, reports, at) -> None:
    for i in at:
      self._emit('skip', int(reports.step[i]), fault=reports.fault(i) or 'policy',
                 tensor=reports.offending_tensor(i), loss=reports.loss[i],
                 grad_norm=reports.grad_norm[i])

  def _write_scalars(self, reports, at, skipped, skipped_after) -> None:
    """The report's scalars and the skip counters of the steps `at`, one event per step."""
    columns = [(f.scalar, getattr(reports, f.name)) for f in _SCALAR_FIELDS]
    for i in at:
      values = {name: float(column[i]) for name, column in columns}
      values.update(skipped_steps=float(skipped_after[i]), skipped=float(skipped[i]))
      self._scalars.write(int(reports.step[i]), values)

  def _metric_values(self) -> Dict[str, float]:
    """The metrics' window at this loop's end ({} without metrics)."""
    if self._metrics is None:
      return {}
    metrics = self._metrics()
    if metrics and not self._applied_since_reset:
      # A window whose every step was skipped counted no sample: Keras reads such a metric as 0,
      # which a monitor (EarlyStopping on a training metric) would take for a value.
      metrics = {name: math.nan for name in metrics}
    return metrics

  def _add_window(self, losses: np.ndarray, usable: Optional[np.ndarray]) -> None:
    """Adds losses (0 where not `usable`; None: all usable) to the progress window."""
    self._window[0] += float(losses.sum(dtype=np.float64))
    self._window[1] += len(losses) if usable is None else int(usable.sum())

  def _progress_line(self, step: int, done: int, grad_norm: float, skips: int, metrics) -> None:
    """Logs one progress line: the mean loss of the window since the last one, steps/s, ETA.
    `done`: the loop's steps up to this one."""
    now = time.perf_counter()
    steps = self._steps + done
    rate = steps / (now - self._time) if self._loops and steps else None
    if self._loops:
      self._steps, self._time = -done, now  # The loop's end adds its n steps.
    shown = ''.join(f'  {name} {value:.4g}' for name, value in metrics.items())
    total, count = self._window
    mean = total / count if count else float('nan')
    epoch = self._epoch_of(step) if self._epoch_of is not None else None
    log.info('step %d%s%s  loss %.5g  grad_norm %.4g  %s  skips %d%s', step,
             self._progress(step, rate),
             f'  epoch {epoch}/{self._num_epochs}' if epoch is not None else '',
             mean, grad_norm, f'{rate:.1f} steps/s' if rate else '- steps/s (tracing)', skips,
             shown)

  def _due(self, first: int, last: int) -> bool:
    """Whether a step that writes something lies in the consecutive steps [first, last]: a
    summary step (with a scalar file), a progress step (with lines or metrics to show)."""
    everies = ([self._summary_every] if self._scalars.writing else []) + (
        [self._log_every] if self._verbose or self._metrics is not None else [])
    return any(last // every > (first - 1) // every for every in everies)

  def _end_loop(self, n: int) -> None:
    """Counts a loop of `n` steps into the steps/s figure."""
    if self._loops:
      self._steps += n
    else:  # Steps/s from here on: the first loop traced the step.
      self._time = time.perf_counter()
    self._loops += 1

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
