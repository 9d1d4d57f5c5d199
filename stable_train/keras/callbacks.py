"""The host half of a guarded Keras `fit`: `GuardCallback`.

After each execution of fit's train function the callback reads the guard's reports of its steps
(one transfer) and does what the Trainer's host loop does with a loop of them, with the same
pieces: the loop recorder (skip events, TensorBoard scalars), the dispatcher (every policy's
`decide`, then `execute` through the run handle: a skip-streak limit, Rollback with its
learning-rate backoff, Forensics of the offending batch), and a checkpoint of the last good state
every `checkpoint_every` steps, kept in memory (one device) and, given a `model_dir`, as committed
checkpoints with the manifest, written only while every variable is finite: the Trainer's
`host.RunHost`, driven from fit's hooks over a `keras_run.FitModel`. An abort raises
`errors.RunAborted` out of `fit`, so that a `BackupAndRestore` keeps its backup.
"""

import logging
import os
from typing import Optional

import keras

from stable_train.core import outcome as outcome_lib
from stable_train import errors
from stable_train.keras import run as keras_run
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events as events_lib
from stable_train.runfiles import runlock
from stable_train.runtime import dispatch
from stable_train.runtime import distribute
from stable_train.runtime import host as host_lib
from stable_train.runtime import options as options_lib
from stable_train.runtime import recorder as recorder_lib

log = logging.getLogger('stable_train')


class GuardCallback(keras.callbacks.Callback):
  """Runs a `keras_fit.KerasGuard`'s policies on the host during `fit` (see the module doc).

  Args:
    guard: the guard of the model being fitted (`stable_train.guard_fit(model)`).
    model_dir: where events.jsonl, summary.json, TensorBoard scalars, `checkpoints/` and
      forensics records go (None: nothing on disk; rollbacks restore from memory).
    checkpoint_every: keep a checkpoint of the state every this many steps.
    healthy_window: a checkpoint is a rollback target only if no fault happened in this many
      steps before it.
    max_checkpoints, keep_good_checkpoints: retention on disk (the newest, and good ones).
    max_refused_checkpoints: this many checkpoints in a row refused (a non-finite variable) are
      a fault: a Rollback takes over, or the run aborts.
    summary_every: TensorBoard scalars every this many steps (and on every fault).
  """

  def __init__(self, guard, *, model_dir: Optional[str] = None, checkpoint_every: int = 100,
               healthy_window: int = 50, max_checkpoints: int = 5, keep_good_checkpoints: int = 3,
               max_refused_checkpoints: int = 2, summary_every: int = 10):
    super().__init__()
    self.options = options_lib.RunOptions(
        checkpoint_every=checkpoint_every, max_checkpoints=max_checkpoints,
        keep_good_checkpoints=keep_good_checkpoints, summary_every=summary_every,
        max_refused_checkpoints=max_refused_checkpoints, healthy_window=healthy_window,
        owner='GuardCallback')
    _check_policies(guard.policies)
    self.guard = guard
    self.model_dir = errors.check_dir('GuardCallback', 'model_dir', model_dir)
    self.host = host_lib.RunHost(
        keras_run.FitModel(self), self.options,
        variables=lambda: host_lib.float_variables(guard.model, guard.model.optimizer))
    # Opened once the model and optimizer are built (the first save or restore).
    self.host.open_when_needed(lambda: keras_run.open_keeper(self.host, guard, self.model_dir))
    self.fit_epoch = 0  # fit's epoch now, 0-based.
    self._lock = None

  run = property(lambda self: self.host.run, doc='The run handle the policies act through.')
  keeper = property(lambda self: self.host.keeper, doc='The keeper of the rollback targets.')
  output_dir = property(lambda self: self.host.output_dir,
                        doc='Where this process writes the fit\'s run files (None: nowhere).')
  last_summary = property(lambda self: self.host.last_summary,
                          doc='The summary of the last fit (as its summary.json), or {}.')

  # -- fit's hooks -----------------------------------------------------------------------------
  def on_train_begin(self, logs=None):
    g = self.guard
    _check_fit(g, self.model)
    if g.host is not None:  # The last fit was ended by an exception (an interrupt, say).
      g.host.release()
    host = self.host
    out = host.output_dir = self.model_dir if distribute.is_chief(g.strategy) else None
    self._lock = runlock.RunLock(out).acquire() if out else None
    host.events = events_lib.EventLog(os.path.join(out, 'events.jsonl') if out else None)
    host.scalars = events_lib.Scalars(os.path.join(out, 'tensorboard') if out else None)
    for p in g.policies:  # E.g. EarlyStopping needs the Trainer's evaluations: refused here.
      p.check_fit(metric_names=[], has_eval=False)
    self._seen = host.step()
    self._skipped = int(g.state.skipped_steps.numpy())
    self._skipped_logged, self._unread, self._ended = None, 0, False
    self._last_save = self._seen
    self.dispatch = dispatch.Dispatcher(policies=g.policies, run=host.run, context=host.context,
                                        mark_fault=host.mark_fault)
    self.recorder = recorder_lib.LoopRecorder(
        emit=host.emit, scalars=host.scalars, summary_every=self.options.summary_every,
        log_every=2**62, verbose=False)
    host.start_summary(self._seen)
    host.emit('start', self._seen)
    if (self._seen == 0 and any(p.wants_start_checkpoint for p in g.policies)
        and _built_for_a_checkpoint(g)):
      self.save('start')  # A rollback target before the first update, as the Trainer keeps.
    g.host = self

  def on_epoch_begin(self, epoch, logs=None):
    self.fit_epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    # fit's logs are on the host already (Keras converts them for every batch hook): a skip shows
    # in them without a read. A clean stretch is read with the next batch of reports.
    skipped = (logs or {}).get('skipped_steps')
    self._unread += 1
    g = self.guard
    spe = int(g.model.steps_per_execution)
    # At least as often as a checkpoint is due (the guard's ring of reports holds read_every).
    every = min(g.read_every, max(1, (self._last_save + self.options.checkpoint_every - self._seen) // spe))
    if skipped != self._skipped_logged or self._unread >= every:
      self._skipped_logged = skipped
      self._read()

  def on_epoch_end(self, epoch, logs=None):
    self._read()

  def _read(self) -> None:
    """Reads the reports of the executions since the last read and does what the host loop
    does after a loop of steps."""
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
      self._record(reports)
    return reports

  def on_train_end(self, logs=None):
    self._read()
    if self._ended:  # The last read ended the run.
      return
    stopped = self.guard.model.stop_training  # Keras's EarlyStopping, say.
    ended = None if stopped else self.dispatch.at_end(self.host.step())
    self._end(ended or outcome_lib.Outcome(
        outcome_lib.Status.STOPPED_EARLY if stopped else outcome_lib.Status.COMPLETED,
        reason='a Keras callback stopped training' if stopped else ''))

  # -- what the host loop does after a loop of steps ---------------------------------------------
  def _record(self, reports) -> None:
    """The summary's loss, the fault mark, skip events and scalars of one execution's steps."""
    self.host.record(reports)
    if not reports.clean():
      self._skipped = int(self.guard.state.skipped_steps.numpy())
    self.recorder.record(reports, self._skipped)

  def _interval_checkpoint(self) -> Optional[outcome_lib.Outcome]:
    """Saves; refusals in a row are a fault the dispatcher carries out."""
    self.save('interval')
    fault = self.host.refusal_fault(self.host.step())
    return None if fault is None else self.dispatch.carry_out(fault)

  def fail(self, error: Exception) -> None:
    """Records a fit that `error` ends (CheckNumerics(mode='raise'), or a TensorFlow error at run
    time) as the Trainer does: the reports read so far, the abort (`Dispatcher.abort_on_error`),
    summary.json; releases the model_dir. The caller raises."""
    self._read_new()
    self._end(self.dispatch.abort_on_error(error, self.host.step()), raise_abort=False)

  def _end(self, ended: outcome_lib.Outcome, raise_abort: bool = True) -> None:
    """Writes summary.json (and `done` on a normal end), releases the model_dir; raises an
    abort (`errors.RunAborted`) if `raise_abort`."""
    self._ended = True
    if ended.finished:
      self.host.emit('done', self.host.step(), status=ended.status.value,
                reason=ended.reason or 'fit ended')
    self.host.end_summary(ended, optimizer=self.guard.optimizer)
    self.release()
    if not ended.finished and raise_abort:
      self.guard.model.stop_training = True
      raise errors.RunAborted(f'stable_train aborted the fit: {ended.reason}')

  def release(self) -> None:
    """Closes the scalars and releases the model_dir (also after a fit an exception ended)."""
    self.guard.host = None
    self.host.scalars.close()
    if self._lock is not None:
      self._lock.release()
      self._lock = None

  # -- checkpoints -----------------------------------------------------------------------------
  def save(self, reason: str) -> Optional[checkpointing.Entry]:
    """`RunHost.save` (a checkpoint of the state now, refused while a variable is not finite);
    the interval cadence counts from here, refused or not."""
    self._last_save = self.host.step()
    return self.host.save(reason)

  def restored(self) -> None:
    """After a restore (`keras_run.FitModel.restored`): the reports and the cadence start again
    from the restored step."""
    self.guard.forget_reports()
    self._seen = self._last_save = self.host.step()
    self._skipped = int(self.guard.state.skipped_steps.numpy())


def _check_fit(g, m) -> None:
  """This fit runs this guard's step: else the callback would read no reports at all."""
  if m is not g.model:
    raise errors.ConfigError(
        f'GuardCallback: fit of {getattr(m, "name", m)!r}, not the model its guard guards '
        f'({g.model.name!r}); pass stable_train.guard_fit(model).callback() of the fitted model.')
  if getattr(m.train_step, '__self__', None) is not g:
    raise errors.ConfigError(
        'GuardCallback: another guard took the model over (guard_fit was called again); pass '
        'the newest guard\'s callback().')


def _built_for_a_checkpoint(guard) -> bool:
  """Whether the model is built; its optimizer is then built as Keras's first trace would, and
  the guard prepared (its random states and policies), so that a checkpoint holds the whole
  state. A model Keras builds from the data has no start checkpoint (the first interval one is
  the first rollback target)."""
  m = guard.model
  if not (m.built and all(layer.built for layer in m.layers)):
    return False
  if not m.optimizer.built:
    with guard.strategy.scope():
      m.optimizer.build(m.trainable_variables)
  guard.prepare()
  return True


def _check_policies(policies) -> None:
  for p in policies:
    if getattr(p, 'skip_batches', 0):
      raise errors.ConfigError(
          f'GuardCallback: {p.name} has skip_batches={p.skip_batches}, but model.fit owns the '
          'data iterator (after a rollback the stream goes on past the trigger batch); use '
          'skip_batches=0.')


# callback.checkpoint_every, ...: the settings of callback.options a guarded fit uses.
for _name in ('checkpoint_every', 'max_checkpoints', 'keep_good_checkpoints', 'summary_every',
              'max_refused_checkpoints', 'healthy_window'):
  setattr(GuardCallback, _name, options_lib.setting(_name))
