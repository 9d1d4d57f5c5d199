"""A run's checkpoints on the host: the keeper, saves that refuse a non-finite state, resume and
restores (`RunCheckpoints`), and the interval cadence (`CheckpointAction`)."""

import contextlib
import logging
import os
from typing import Any, Callable, Dict, Iterator, Optional

import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import state as state_lib
from stable_train import errors
from stable_train.runfiles import checkpointing
from stable_train.runtime import distribute
from stable_train.runtime import inputs

log = logging.getLogger('stable_train')


class RunCheckpoints:
  """Opens the keeper for each fit, writes checkpoints only while every variable is finite, counts
  refusals in a row, restores (resume and rollback) and puts the input at the restored position.

  The run calls the Trainer's `save_checkpoint` / `restore_latest` hooks, whose default
  implementations are `save` / `restore_latest` here.
  """

  def __init__(self, trainer, input_position: inputs.InputPosition,
               objects: Callable[[], Dict[str, Any]]):
    """Args: trainer: the Trainer (its settings and hooks); input_position: the run's input;
    objects: () -> the checkpoint's object map (`state.TrainState.checkpoint_objects`)."""
    self._trainer = trainer
    self._input = input_position
    self._objects = objects
    self.keeper: Optional[checkpointing.CheckpointKeeper] = None
    self.refused = 0  # Checkpoints refused in a row.
    self.last_saved: Optional[checkpointing.Entry] = None  # Written since the last restore.
    # (objects key, checkpoint, snapshot, writer, snapshot writer): built once, kept across fits.
    self._cache = None
    self._background = False  # Interval checkpoints are written in the background.
    self._reason = 'interval'  # The reason of the save being written (its `checkpoint` event).
    # step -> whether the fit's evaluation at that step is still to run (`eval_action`).
    self.eval_due: Callable[[int], bool] = lambda step: False

  # -- opening and resuming ---------------------------------------------------------------------
  def open(self, dataset, *, fitted: bool) -> Optional[checkpointing.Entry]:
    """Opens the keeper of `<model_dir>/checkpoints` and, for a fresh Trainer, resumes from the
    newest restorable checkpoint; returns the restored entry (None: nothing restored)."""
    t = self._trainer
    self.eval_due = lambda step: False  # Until this fit's evaluation cadence says otherwise.
    if self.keeper is not None:
      self.keeper.wait()  # A save made outside fit may still be writing into the directory.
    checkpoint, snapshot, writer, snapshot_writer = self._parts()
    # The data position is in the checkpoint (global_step + data_offset), never the tf.data
    # iterator, whose state would hold a `.cache()`d data set whole; the iterator is rebuilt.
    self.keeper = distribute.make_keeper(
        t.strategy, checkpoint, os.path.join(t.model_dir, 'checkpoints'),
        max_to_keep=t.options.max_checkpoints, keep_good=t.options.keep_good_checkpoints,
        warn=lambda event, step, **f: t.emit(event, step, **f), snapshot=snapshot,
        writer=writer, snapshot_writer=snapshot_writer, before_commit=self._committed,
        before_write=t.faults.before_checkpoint_write if t.faults is not None else None)
    self.keeper.input_signature = inputs.batch_signature(dataset)
    committed = self.keeper.committed()
    if self.keeper.entries and not committed and not fitted:
      raise errors.CheckpointError(
          f'{self.keeper.directory}/manifest.json lists {len(self.keeper.entries)} '
          'checkpoint(s) but none of their files is there; restore them, or use a new '
          '--model_dir to start afresh.')
    if not committed or fitted:
      # Only a fresh Trainer resumes from disk; a later fit() continues from the in-memory state
      # (which the last fit saved) with the new dataset from its start.
      self._input.reset()
      if not committed and int(t.global_step.numpy()) == 0 and any(
          p.wants_start_checkpoint for p in t.policies):
        t.save_checkpoint(reason='start')  # A rollback target before the first update.
      return None
    entry = t.restore_latest(committed)
    if entry is None:
      why = checkpointing.why_unrestorable(self.keeper.restore_errors)
      raise errors.CheckpointError(
          f'no checkpoint in {self.keeper.directory} could be restored: {why}; or use a new '
          '--model_dir (or move that one away) to start afresh.')
    _check_input_signature(entry, self.keeper)
    return entry

  def _parts(self):
    """`checkpoint_parts` of the run's objects, reused while the objects are the same."""
    objects = self._objects()
    key = tuple((name, tuple(map(id, value)) if isinstance(value, list) else id(value))
                for name, value in objects.items())
    cached = self._cache
    if cached is not None and cached[0] == key and (cached[2] is None or cached[2].is_current()):
      return cached[1:]
    parts = checkpoint_parts(objects, self._trainer.strategy)
    self._cache = (key,) + parts
    return parts

  def restore_latest(self, candidates) -> Optional[checkpointing.Entry]:
    """Restores the newest restorable checkpoint of `candidates` (from memory when the snapshot
    holds it), then repositions the input. Returns the entry, or None."""
    t = self._trainer
    with self._input.restoring():
      entry = self.keeper.restore_latest(candidates)
    if entry is not None:
      self.refused = 0
      self.last_saved = None
      # The learning-rate variable came back from the checkpoint; the rate is the configured
      # base times the restored scale, so a changed config takes effect on resume.
      t.lr_control.set_scale(float(t.lr_scale.numpy()))
    return entry

  # -- saving -----------------------------------------------------------------------------------
  def healthy(self) -> bool:
    """Whether a checkpoint written now may be marked good: no fault within `healthy_window`
    steps before it and every policy healthy."""
    t = self._trainer
    recent = int(t.global_step.numpy()) - int(t.last_fault_step.numpy()) <= t.options.healthy_window
    return not recent and all(p.is_healthy() for p in t.policies)

  def save(self, reason: str = 'interval') -> Optional[checkpointing.Entry]:
    """Writes a checkpoint if every variable is finite; otherwise refuses and records why.

    An interval checkpoint of fit's loop is captured in memory and written, synced and committed
    in the background while the next loop runs (which waits for it at its end); any other save
    returns committed. Its `checkpoint` event is written once its files are on disk, just before
    the commit. A failed write raises CheckpointError: training on without checkpoints would
    lose work.
    """
    t = self._trainer
    if self.keeper is None:
      return None
    step = int(t.global_step.numpy())
    if not t.variables_finite():
      self.refused += 1
      bad = t.non_finite_variables()
      t.emit('checkpoint_refused', step, reason='non-finite variable', variables=bad[:10],
             in_a_row=self.refused)
      log.warning('step %d: checkpoint refused, non-finite variable %s', step,
                  bad[0] if bad else '?')
      return None
    self.refused = 0
    self.complete_writes()  # The write in flight reads its own reason before this one is set.
    self._reason = reason
    entry = self.keeper.save(step, good=self.healthy(),
                             background=self._background and reason == 'interval',
                             eval_due=self.eval_due(step))
    self.last_saved = entry
    return entry

  def checkpoint_now(self, reason: str) -> Optional[checkpointing.Entry]:
    """The checkpoint of the state as it is now: the one written at the current step since the
    last restore, else a new one (`Trainer.save_checkpoint`); None when refused or no model_dir."""
    self.complete_writes()  # A checkpoint still being written counts once it is committed.
    step = int(self._trainer.global_step.numpy())
    last = self.last_saved
    if (last is not None and last.step == step and self.keeper is not None
        and any(e.number == last.number for e in self.keeper.committed())):
      return last
    return self._trainer.save_checkpoint(reason)

  def _committed(self, entry: checkpointing.Entry) -> None:
    """The keeper's `before_commit`: the `checkpoint` event (from the writing thread)."""
    self._trainer.emit('checkpoint', entry.step, checkpoint=entry.path, good=entry.good,
                       reason=self._reason)

  def complete_writes(self) -> None:
    """Completes the checkpoint write in flight (committed, or a CheckpointError); its
    `checkpoint` event, written by the writing thread, reaches `on_event` on this one."""
    if self.keeper is not None:
      self.keeper.wait()
      self._trainer.events.deliver()

  @contextlib.contextmanager
  def writes_in_background(self) -> Iterator[None]:
    """Interval checkpoints are written in the background inside, their `checkpoint` events
    delivered to `on_event` on this thread; on the way out, waits for any still in flight
    (before fit releases the model_dir)."""
    self._background = True
    with self._trainer.events.owned():
      try:
        yield
      finally:
        self._background = False
        with contextlib.suppress(errors.CheckpointError):  # Only when another error is leaving.
          self.complete_writes()

  # -- refusals ---------------------------------------------------------------------------------
  def stale_note(self) -> str:
    committed = self.keeper.committed() if self.keeper is not None else []
    if not committed:
      return 'no checkpoint was written before it'
    return f'the newest checkpoint on disk is from step {committed[-1].step}, before it'

  def refused_reason(self, what: str) -> str:
    bad = self._trainer.non_finite_variables()
    return (f'{what}: variable {bad[0] if bad else "?"} is non-finite'
            + (f' (and {len(bad) - 1} more)' if len(bad) > 1 else '') + '; ' + self.stale_note())

  def refusal_fault(self, step: int) -> Optional[interfaces.Decision]:
    """A fault once `max_refused_checkpoints` checkpoints in a row were refused, else None."""
    if self.refused < self._trainer.options.max_refused_checkpoints:
      return None
    return interfaces.Decision(
        action=interfaces.ESCALATE, trigger='checkpoint_refused', step=step,
        reason=self.refused_reason(f'{self.refused} checkpoints in a row refused'))


def checkpoint_parts(objects: Dict[str, Any], strategy: tf.distribute.Strategy):
  """A run's `tf.train.Checkpoint` of `objects`, and on a single device its `state.Snapshot` and
  the `TracedWriter`s of the live variables and of the snapshot (None under a strategy, or where
  the state cannot be copied or the write traced)."""
  checkpoint = tf.train.Checkpoint(**objects)
  if distribute.uses_distributed_input(strategy) or strategy.num_replicas_in_sync != 1:
    return checkpoint, None, None, None
  try:
    snapshot = state_lib.Snapshot(checkpoint)
    return (checkpoint, snapshot, state_lib.TracedWriter(checkpoint),
            state_lib.TracedWriter(tf.train.Checkpoint(**objects),
                                   object_map=snapshot.object_map()))
  except state_lib.SnapshotUnsupported as e:
    log.info('checkpoints are written in the foreground and restored from disk: %s', e)
  except Exception as e:  # pylint: disable=broad-except  (the write could not be traced)
    log.warning('checkpoints are written eagerly and restored from disk: %s',
                str(e).splitlines()[0][:200])
  return checkpoint, None, None, None


def _check_input_signature(entry: checkpointing.Entry, keeper) -> None:
  """Refuses a resume whose batches differ in shape or dtype from the checkpointed run's (the
  data position counts batches, so another batch size would silently read other data)."""
  saved, now = entry.input_signature, keeper.input_signature
  if saved is None or saved == now:
    return  # None: written before signatures were recorded.
  old, new = saved.split(), now.split()
  if len(old) == len(new):
    old, new = next((a, b) for a, b in zip(old, new) if a != b)
    dtype = old.split('[')[0]
    if new.split('[')[0] == dtype:  # Same dtype: the shapes say it.
      old, new = old[len(dtype):], new[len(dtype):]
  else:
    old, new = saved, now
  raise errors.ConfigError(
      f'the input pipeline differs from the one checkpointed in {keeper.directory} '
      f'(batch size or element shape changed: checkpointed batches {old}, this pipeline '
      f'{new}); use the batch size and shapes the run started with, or a new --model_dir to '
      'start afresh.')


class CheckpointAction:
  """Cadence: a checkpoint every `checkpoint_every` steps (at loop ends) since the last one
  written (any reason: a best or a signal checkpoint counts); `checkpoint_refused` in a row is
  a fault for the dispatcher."""

  def __init__(self, checkpoints: RunCheckpoints, trainer, dispatcher, start_step: int):
    self._checkpoints = checkpoints
    self._trainer = trainer
    self._dispatch = dispatcher
    self._last_step = start_step

  def _last(self, step: int) -> int:
    """The step of the last checkpoint on this timeline (a rollback moves the step back)."""
    last = self._checkpoints.last_saved
    if last is not None and last.step <= step:
      self._last_step = max(self._last_step, last.step)
    self._last_step = min(self._last_step, step)
    return self._last_step

  def due(self, step: int) -> bool:
    return step - self._last(step) >= self._trainer.options.checkpoint_every

  def run(self, step: int):
    """Saves; a refusal fault is carried out (a rollback, or the run's abort Outcome)."""
    self._trainer.save_checkpoint()
    self._last_step = step
    refused = self._checkpoints.refusal_fault(step)
    return None if refused is None else self._dispatch.carry_out(refused)

  def saved_at(self, step: int) -> bool:
    """Whether the state at `step` has a checkpoint already (the end of run needs none then)."""
    return self._last(step) == step
