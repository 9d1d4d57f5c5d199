"""A Trainer run's checkpoints on the host: the keeper opened for each fit, resume, background
writes (`RunCheckpoints`), the parts a keeper writes (`checkpoint_parts`), and the interval
cadence (`CheckpointAction`). Saves, refusals and restores are the `host.RunHost`'s."""

import contextlib
import logging
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
  """The Trainer's checkpoints around its `host.RunHost`: opens the host's keeper for each fit,
  resumes from it, and writes interval checkpoints in the background inside `fit`'s loop.

  The run calls the Trainer's `save_checkpoint` / `restore_latest` hooks, whose default
  implementations are `save` here and `RunHost.restore`.
  """

  def __init__(self, trainer, host, input_position: inputs.InputPosition,
               objects: Callable[[], Dict[str, Any]]):
    """Args: trainer: the Trainer (its settings and hooks); host: the run's `host.RunHost`;
    input_position: the run's input; objects: () -> the checkpoint's object map
    (`state.TrainState.checkpoint_objects`)."""
    self._trainer = trainer
    self._host = host
    self._input = input_position
    self._objects = objects
    # (objects key, checkpoint, snapshot, writer, snapshot writer): built once, kept across fits.
    self._cache = None
    self._background = False  # Interval checkpoints are written in the background.
    # step -> whether the fit's evaluation at that step is still to run (`eval_action`).
    self.eval_due: Callable[[int], bool] = lambda step: False

  @property
  def keeper(self) -> Optional[checkpointing.CheckpointKeeper]:
    """The host's keeper (None before the first fit with a model_dir)."""
    return self._host.keeper

  # -- opening and resuming ---------------------------------------------------------------------
  def open(self, dataset, *, fitted: bool) -> Optional[checkpointing.Entry]:
    """Opens the keeper of `<model_dir>/checkpoints` and, for a fresh Trainer, resumes from the
    newest restorable checkpoint; returns the restored entry (None: nothing restored)."""
    t = self._trainer
    self.eval_due = lambda step: False  # Until this fit's evaluation cadence says otherwise.
    if self.keeper is not None:
      self.keeper.wait()  # A save made outside fit may still be writing into the directory.
    # The data position is in the checkpoint (global_step + data_offset), never the tf.data
    # iterator, whose state would hold a `.cache()`d data set whole; the iterator is rebuilt.
    keeper = self._host.keeper = self._host.open_keeper(
        t.strategy, self._parts(), t.model_dir,
        before_write=t.faults.before_checkpoint_write if t.faults is not None else None)
    keeper.input_signature = inputs.batch_signature(dataset)
    committed = keeper.committed()
    if keeper.entries and not committed and not fitted:
      raise errors.CheckpointError(
          f'{keeper.directory}/manifest.json lists {len(keeper.entries)} '
          'checkpoint(s) but none of their files is there; restore them, or use a new '
          '--model_dir to start afresh.')
    if not committed or fitted:
      # Only a fresh Trainer resumes from disk; a later fit() continues from the in-memory state
      # (which the last fit saved) with the new dataset from its start.
      self._input.reset()
      if not committed and int(t.global_step.numpy()) == 0 and any(
          isinstance(p, interfaces.Recovery) for p in t.policies):
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

  # -- saving -----------------------------------------------------------------------------------
  def save(self, reason: str = 'interval') -> Optional[checkpointing.Entry]:
    """`RunHost.save`: writes a checkpoint if every variable is finite; otherwise refuses and
    records why.

    An interval checkpoint of fit's loop is captured in memory and written, synced and committed
    in the background while the next loop runs (which waits for it at its end); any other save
    returns committed. Its `checkpoint` event is written once its files are on disk, just before
    the commit. A failed write raises CheckpointError: training on without checkpoints would
    lose work.
    """
    if self.keeper is None:
      return None
    background = self._background and reason == 'interval'
    return self._host.save(reason, lambda step: dict(background=background,
                                                     eval_due=self.eval_due(step)))

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
          self._host.complete_writes()


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

  def __init__(self, host, trainer, dispatcher, start_step: int):
    """Args: host: the run's `host.RunHost`; trainer: the Trainer (its save hook, its cadence);
    dispatcher: the run's `dispatch.Dispatcher`; start_step: the step the fit starts at."""
    self._host = host
    self._trainer = trainer
    self._dispatch = dispatcher
    self._last_step = start_step

  def _last(self, step: int) -> int:
    """The step of the last checkpoint on this timeline (a rollback moves the step back)."""
    last = self._host.last_saved
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
    refused = self._host.refusal_fault(step)
    return None if refused is None else self._dispatch.carry_out(refused)

  def saved_at(self, step: int) -> bool:
    """Whether the state at `step` has a checkpoint already (the end of run needs none then)."""
    return self._last(step) == step
