"""`LoopHost`: the host half of a hand-written loop guarded by a `StepGuard`."""

from typing import Any, Dict, Optional

import tensorflow as tf

from stable_train import errors
from stable_train.core import loop as loop_lib
from stable_train.runtime import driven
from stable_train.runtime import options as options_lib


class LoopHost:
  """Runs a `StepGuard`'s host halves between the calls of a hand-written step.

  The same host half a guarded `fit` runs (`driven.DrivenRun`): every `read_every` steps it reads
  the guard's stored reports (one transfer) and records them (skip events, TensorBoard scalars),
  asks every policy to decide (a skip-streak limit, Rollback with its learning-rate backoff,
  DivergenceCheck, Forensics) and carries the decisions out; every `checkpoint_every` steps it
  keeps the last good state, in memory (one device) and, given a `model_dir`, as committed
  checkpoints, written only while every variable is finite. A rollback restores the models, the
  optimizers and the guard's counters in place: the loop goes on with its next batch. A run that
  cannot go on raises `errors.RunAborted` out of `after_step`.

  ```python
  with stable_train.LoopHost(guard, model_dir='/tmp/run') as host:
    for x, y in dataset:
      train_step(x, y)
      host.after_step()
  print(host.last_summary['status'])
  ```

  Args:
    guard: the `StepGuard` of the step.
    model_dir: where events.jsonl, summary.json, TensorBoard scalars, `checkpoints/` and
      forensics records go (None: nothing on disk; rollbacks restore from memory).
    read_every: read the reports every this many steps (at most the guard's `report_rows`).
    checkpoint_every, healthy_window, max_checkpoints, keep_good_checkpoints,
      max_refused_checkpoints, summary_every: as `GuardCallback`'s.
  """

  def __init__(self, guard, *, model_dir: Optional[str] = None, read_every: int = 10,
               checkpoint_every: int = 100, healthy_window: int = 50, max_checkpoints: int = 5,
               keep_good_checkpoints: int = 3, max_refused_checkpoints: int = 2,
               summary_every: int = 10):
    if type(guard).__name__ != 'StepGuard':
      raise errors.ConfigError(f'LoopHost: guard={guard!r} must be a stable_train.StepGuard.')
    self.read_every = errors.check_int('LoopHost', 'read_every', read_every, minimum=1,
                                       maximum=guard.reports_held)
    options = options_lib.RunOptions(
        checkpoint_every=checkpoint_every, max_checkpoints=max_checkpoints,
        keep_good_checkpoints=keep_good_checkpoints, summary_every=summary_every,
        max_refused_checkpoints=max_refused_checkpoints, healthy_window=healthy_window,
        owner='LoopHost')
    self.guard = guard
    self.driven = driven.DrivenRun(guard, options, model_dir)
    self._started = False

  run = property(lambda self: self.driven.host.run, doc='The run handle the policies act through.')
  keeper = property(lambda self: self.driven.host.keeper,
                    doc='The keeper of the rollback targets.')
  last_summary = property(lambda self: self.driven.host.last_summary,
                          doc='The summary of the last run (as its summary.json), or {}.')

  @property
  def epoch(self) -> int:
    """The loop's epoch, 0-based, as the loop sets it (`host.epoch = e`); events and the summary
    carry it 1-based."""
    return self.driven.epoch

  @epoch.setter
  def epoch(self, value: int) -> None:
    self.driven.epoch = errors.check_int('LoopHost', 'epoch', value)

  def start(self) -> None:
    """Starts a run (the run files, the start checkpoint a Rollback needs)."""
    self.driven.begin()
    self._started = True

  def after_step(self, steps: int = 1) -> None:
    """Call after each call of the step function (`steps`: the steps it ran, at most the guard's
    `report_rows`). Every `read_every` steps, or sooner where a checkpoint is due or a next call
    of as many steps would overwrite reports not read yet, the reports are read and acted on. Raises
    `errors.RunAborted` when the run cannot go on (the reason names the cause and the remedy)."""
    if not self._started:
      raise errors.ConfigError('LoopHost: call start() first, or use `with LoopHost(...) as host`.')
    held = self.guard.reports_held
    if steps > held:
      raise errors.ConfigError(
          f'LoopHost: after_step(steps={steps}), but the guard keeps the reports of {held} steps; '
          f'create it with StepGuard(..., report_rows={steps}) or more.')
    self.driven.steps_done(steps, every=self.read_every)

  def end(self, stopped_by: Optional[str] = None) -> Dict[str, Any]:
    """Ends the run: the last reports, the end checks, summary.json; returns the summary.
    `stopped_by`: why the loop stopped before its planned end (None: it ran its course). A run
    the end checks find untrained raises `errors.RunAborted`."""
    self._started = False
    self.driven.end(stopped_by=stopped_by)
    return self.last_summary

  def __enter__(self) -> 'LoopHost':
    self.start()
    return self

  def __exit__(self, exc_type, exc, tb) -> bool:
    if exc_type is None:
      self.end()
      return False
    if issubclass(exc_type, errors.RunAborted) or self.driven.ended:
      return False  # Recorded already.
    self._started = False
    if issubclass(exc_type, tf.errors.InvalidArgumentError):
      error = loop_lib.numerics_error(exc, int(self.guard.state.global_step.numpy()) + 1)
      if error is not None:  # CheckNumerics(mode='raise'), in the step.
        self.driven.fail(error)
        raise error from None
    if issubclass(exc_type, (tf.errors.OpError, errors.StableTrainError)):
      self.driven.fail(exc)
    else:
      self.driven.release()
    return False
