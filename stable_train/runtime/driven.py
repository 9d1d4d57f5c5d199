"""The host half of a guarded step that another loop drives (Keras `fit`, a hand-written loop):
`DrivenRun`, and `DrivenModel`, its `host.ModelState`.

The loop that calls the step owns the data and the step count; it tells the run when steps have
run (`steps_done`). The run reads the guard's stored reports (`ring.ReportRing`, one transfer)
when a skip shows or as often as the ring and the checkpoint cadence need, and does with them
what the Trainer's host loop does with a loop of reports, with the same pieces: the loop recorder
(skip events, TensorBoard scalars), the dispatcher (every policy's `decide`, then `execute`
through the run handle: a skip-streak limit, Rollback with its learning-rate backoff, Forensics),
and a checkpoint of the last good state every `checkpoint_every` steps, kept in memory (one
device) and, given a `model_dir`, as committed checkpoints with the manifest, written only while
every variable is finite (`host.RunHost`). An abort raises `errors.RunAborted`.

The guard it drives has: `policies`, `state`, `strategy`, `optimizer`, `model`, `host` (set while
a run is on), `scaled_optimizers` (those whose rate the run's factor scales), `reports_held`
(steps the ring holds), `read_reports(since_step)`,
`forget_reports()`, `checkpoint_objects()`, `probe()`, `float_variables()`, and
`ready_for_checkpoint()` (built, so that a checkpoint holds the whole state).
"""

import contextlib
import os
from typing import Optional

import tensorflow as tf

from stable_train import compat
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.core import interfaces
from stable_train.core import lr as lr_lib
from stable_train.core import outcome as outcome_lib
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events as events_lib
from stable_train.runfiles import runlock
from stable_train.runtime import dispatch
from stable_train.runtime import distribute
from stable_train.runtime import host as host_lib
from stable_train.runtime import recorder as recorder_lib
from stable_train.runtime.actions import checkpoint_action


class DrivenGuard:
  """What every driven guard shares with its host half: the report ring it stores its steps'
  reports in (`rows`, a `ring.ReportRing`, or None before the first build) and the sample of the
  first batch (`first_batch_sample`, a `FirstBatch`, or None)."""

  rows = None
  first_batch_sample = None
  variable_paths = ()
  input_paths = ()
  door = 'guard_fit'  # summary.json's `front_door`: the doctor writes its remedies as code.

  @property
  def scaled_optimizers(self) -> list:
    """The optimizers whose learning rate the run's factor scales (a rollback's backoff): all
    that apply the step's update."""
    return [self.optimizer]

  @property
  def reports_held(self) -> int:
    """Steps whose reports the ring holds (the host reads at least this often)."""
    return 1 if self.rows is None else self.rows.size

  def read_reports(self, since_step: int):
    """The stored reports of the steps after global step `since_step`, in step order, or None
    when there are none. One transfer. Eager."""
    if self.rows is None:
      return None
    return self.rows.read(since_step, variable_paths=self.variable_paths,
                          input_paths=self.input_paths)

  def forget_reports(self) -> None:
    """Clears the stored reports (after a restore moved the global step back)."""
    if self.rows is not None:
      self.rows.clear()

  def summary_notes(self):
    """The guard's own fields of summary.json (e.g. `outputs_checked`)."""
    return {'front_door': self.door}

  def first_batch(self):
    """The kept rows of the first batch the step trained on, or None (no policy reads it, no
    step yet, or none can be kept). Eager."""
    sample = self.first_batch_sample
    return None if sample is None else sample.value()


class DrivenRun:
  """The host half of one guard's runs (see the module docstring).

  Args:
    guard: the guard (`KerasGuard`, `StepGuard`).
    options: the run's `options.RunOptions` (its `owner` names the front door in messages).
    model_dir: where the run's files go, or None (nothing on disk; rollbacks from memory).
  """

  def __init__(self, guard, options, model_dir: Optional[str]):
    for p in guard.policies:
      if getattr(p, 'skip_batches', 0):
        raise errors.ConfigError(
            f'{options.owner}: {p.name} has skip_batches={p.skip_batches}, but the loop that calls '
            'the step (model.fit, or your own) owns the '
            'data iterator (after a rollback the stream goes on past the trigger batch); use '
            'skip_batches=0.')
    idle = [p.name for p in guard.policies
            if isinstance(p, (interfaces.EvalWatcher, interfaces.Stopper))
            and not isinstance(p, interfaces.FitCheck)]  # A FitCheck says so itself, at begin.
    if idle:
      raise errors.ConfigError(
          f'{options.owner}: policies {idle} act on evaluations or stop a run for good '
          '(decide_eval, already_stopped), which only the Trainer\'s fit(eval_dataset=...) runs; '
          'train with the Trainer, or drop them.')
    self.guard = guard
    self.model_dir = errors.check_dir(options.owner, 'model_dir', model_dir)
    forensics.stand_down_optional(guard.policies, model_dir=self.model_dir)
    self.host = host_lib.RunHost(DrivenModel(self), options, variables=guard.float_variables)
    # Opened once the model and optimizer are built (the first save or restore).
    self.host.open_when_needed(lambda: open_keeper(self.host, guard, self.model_dir))
    self.epoch = 0  # The driving loop's epoch now, 0-based.
    self.ended = False
    self._lock = None

  @property
  def options(self):
    """The run's `options.RunOptions` (assigning one validates nothing more: build it with
    `RunOptions`)."""
    return self.host.options

  @options.setter
  def options(self, value) -> None:
    self.host.options = value

  def begin(self) -> None:
    """A run starts: the run files, the dispatcher, the recorder, the start checkpoint."""
    g, host = self.guard, self.host
    if g.host is not None:  # The last run was ended by an exception (an interrupt, say).
      g.host.release()
    out = host.output_dir = self.model_dir if distribute.is_chief(g.strategy) else None
    self._lock = runlock.RunLock(out).acquire() if out else None
    host.events = events_lib.EventLog(os.path.join(out, 'events.jsonl') if out else None)
    host.scalars = events_lib.Scalars(os.path.join(out, 'tensorboard') if out else None)
    for p in g.policies:  # E.g. EarlyStopping needs the Trainer's evaluations: refused here.
      if isinstance(p, interfaces.FitCheck):
        p.check_fit(metric_names=[], has_eval=False)
    self._seen = host.step()
    self._skipped = int(g.state.skipped_steps.numpy())
    self._skipped_logged, self._unread, self.ended = None, 0, False
    self._last_save = self._seen
    self.dispatch = dispatch.Dispatcher(policies=g.policies, run=host.run, context=host.context,
                                        mark_fault=host.mark_fault)
    self.recorder = recorder_lib.LoopRecorder(
        emit=host.emit, scalars=host.scalars, summary_every=self.options.summary_every,
        log_every=2**62, verbose=False)
    host.start_summary(self._seen)
    host.emit('start', self._seen)
    if (self._seen == 0 and any(isinstance(p, interfaces.Recovery) for p in g.policies)
        and g.ready_for_checkpoint()):
      self.save('start')  # A rollback target before the first update, as the Trainer keeps.
    g.host = self

  def steps_done(self, steps: int, skipped=None, every: Optional[int] = None) -> None:
    """`steps` more steps ran (one call of the loop's step function). The reports are read
    every `every` steps (None: as many as the ring holds), when a checkpoint is due, before a
    next call of as many steps would overwrite reports not read yet, and at once when `skipped`,
    the skip count the loop has on the host already (None: unknown), moved."""
    held = self.guard.reports_held
    self._unread += steps
    due = self._last_save + self.options.checkpoint_every - self._seen
    every = min(every or held, max(steps, due // steps * steps))
    if ((skipped is not None and skipped != self._skipped_logged) or self._unread >= every
        or self._unread + steps > held):
      self._skipped_logged = skipped
      self.read()

  def read(self) -> None:
    """Reads the reports of the steps since the last read and does what the host loop does
    after a loop of steps."""
    reports = self._read_new()
    if reports is None:
      return
    try:
      ended = self.dispatch.after_loop(reports)
    except errors.NumericsError as e:  # CheckNumerics(mode='raise') on the host (XLA).
      self.fail(e)
      raise
    if ended is None and self._seen - self._last_save >= self.options.checkpoint_every:
      ended = self._interval_checkpoint()
    if ended is not None:
      self._end(ended)

  def _read_new(self):
    """The reports of the steps since the last read, recorded (or None: there are none)."""
    self._unread = 0
    reports = self.guard.read_reports(self._seen)
    if reports is not None:
      self._seen = int(reports.step[-1])
      self.dispatch.observe(reports)  # Every read loop is folded, a failing run's last too.
      self.host.record(reports)
      if not reports.clean():
        self._skipped = int(self.guard.state.skipped_steps.numpy())
      self.recorder.record(reports, self._skipped)
    return reports

  def end(self, stopped_by: Optional[str] = None) -> None:
    """The loop ended (`stopped_by`: why it stopped early, e.g. a Keras callback; None: it ran
    its course): the last reports, the end checks, summary.json."""
    self.read()
    if self.ended:  # The last read ended the run.
      return
    ended = None if stopped_by else self.dispatch.at_end(self.host.step())
    self._end(ended or outcome_lib.Outcome(
        outcome_lib.Status.STOPPED_EARLY if stopped_by else outcome_lib.Status.COMPLETED,
        reason=stopped_by or ''))

  def _interval_checkpoint(self) -> Optional[outcome_lib.Outcome]:
    """Saves; refusals in a row are a fault the dispatcher carries out."""
    self.save('interval')
    fault = self.host.refusal_fault(self.host.step())
    return None if fault is None else self.dispatch.carry_out(fault)

  def fail(self, error: Exception) -> None:
    """Records a run that `error` ends (CheckNumerics(mode='raise'), or a TensorFlow error at
    run time) as the Trainer does: the reports read so far, the abort
    (`Dispatcher.abort_on_error`), summary.json; releases the model_dir. The caller raises."""
    self._read_new()
    self._end(self.dispatch.abort_on_error(error, self.host.step()), raise_abort=False)

  def _end(self, ended: outcome_lib.Outcome, raise_abort: bool = True) -> None:
    """Writes summary.json (and `done` on a normal end), releases the model_dir; raises an
    abort (`errors.RunAborted`) if `raise_abort`."""
    self.ended = True
    if ended.finished:
      self.host.emit('done', self.host.step(), status=ended.status.value,
                     reason=ended.reason or 'run ended')
    self.host.end_summary(ended, optimizer=self.guard.optimizer, model=self.guard.model,
                          notes=self.guard.summary_notes())
    self.release()
    if not ended.finished and raise_abort:
      if hasattr(self.guard.model, 'stop_training'):
        self.guard.model.stop_training = True
      raise errors.RunAborted(f'stable_train aborted the run: {ended.reason}')

  def release(self) -> None:
    """Closes the scalars and releases the model_dir (also after a run an exception ended)."""
    self.guard.host = None
    self.host.scalars.close()
    if self._lock is not None:
      self._lock.release()
      self._lock = None

  def save(self, reason: str) -> Optional[checkpointing.Entry]:
    """`RunHost.save` (a checkpoint of the state now, refused while a variable is not finite);
    the interval cadence counts from here, refused or not."""
    self._last_save = self.host.step()
    return self.host.save(reason)

  def restored(self) -> None:
    """After a restore: the reports and the cadence start again from the restored step."""
    self.guard.forget_reports()
    self._seen = self._last_save = self.host.step()
    self._skipped = int(self.guard.state.skipped_steps.numpy())


def open_keeper(host, guard, model_dir: Optional[str]):
  """The keeper of a driven run's rollback targets (`RunHost.open_keeper`): on disk under
  `model_dir/checkpoints` (with a copy in memory on one device), else in memory only; None where
  neither can be kept (under a strategy without a model_dir)."""
  parts = checkpoint_action.checkpoint_parts(guard.checkpoint_objects(), guard.strategy)
  keeper = host.open_keeper(guard.strategy, parts, model_dir)
  if model_dir:
    # Another process's checkpoints are not this run's timeline: never rollback targets.
    keeper.mark_bad(after_step=-(2**62))
  return keeper


class DrivenModel:
  """A driven run's side of the host (a `host.ModelState`): the driving loop owns the data
  iterator, so `skip_data` moves nothing (Rollback's `skip_batches` > 0 is refused) and a
  restore leaves the data where it stands (the data offset takes up the steps undone)."""

  # A skipped bad batch blocks good marks too: a rollback goes back before the batches that failed
  # their input check (the loop cannot skip them; its data goes on past them).
  bad_batch_is_fault = True

  def __init__(self, run: DrivenRun):
    self._run = run
    g = self._guard = run.guard
    self.state, self.policies = g.state, g.policies
    self._lr_controls = {}  # Of the optimizers with a schedule, by index, once one is scaled.
    self.probe = g.probe()

  def learning_rate(self) -> float:
    return float(tf.cast(self._guard.optimizer.learning_rate, tf.float32).numpy())

  def set_lr_scale(self, scale: float) -> None:
    """Sets the factor on the learning rate of every optimizer that applies the step (a GAN's
    two alike): a schedule is wrapped once (`lr.ScaledSchedule`), a constant rate is scaled by
    new / old factor, so a change by ReduceLROnPlateau stands."""
    state = self.state
    old = float(state.lr_scale.numpy())
    state.lr_scale.assign(scale)
    for i, optimizer in enumerate(self._guard.scaled_optimizers):
      if callable(compat.learning_rate_of(optimizer)):
        if i not in self._lr_controls:
          self._lr_controls[i] = lr_lib.LearningRateControl(optimizer, state.lr_scale)
      else:
        optimizer.learning_rate = float(optimizer.learning_rate.numpy()) * float(scale) / old

  def skip_data(self, count: int):
    position = self._run.host.data_position()  # The loop owns the iterator.
    return position, position

  def epoch_of(self, step: int) -> int:
    return self._run.epoch + 1  # The loop's, 1-based.

  def save(self, reason: str):
    return self._run.save(reason)

  def restore(self, candidates):
    return self._run.host.restore(candidates)

  @contextlib.contextmanager
  def restoring(self):
    """The data goes on where it stands: the data offset takes up the steps a restore undoes."""
    position = self._run.host.data_position()
    yield
    self.state.data_offset.assign(position - int(self.state.global_step.numpy()))

  def restored(self) -> None:
    self._run.restored()
