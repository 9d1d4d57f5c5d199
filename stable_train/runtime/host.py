"""The host side of a run, one object both front doors drive: `RunHost` (events, the keeper and its
refusals, the fault mark, the policy context, the run handle, the summary) over a `ModelState`."""

import logging
import os
from typing import Any, Callable, ContextManager, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train.core import outcome as outcome_lib
from stable_train.doctor import doctor
from stable_train.forensics import provenance
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events as events_lib
from stable_train.runtime import distribute
from stable_train.runtime import handle
from stable_train.runtime import options as options_lib
from stable_train.runtime import summary as summary_lib

log = logging.getLogger('stable_train')


class ModelState(Protocol):
  """What differs between the front doors: how the host reads and sets the model's side.

  Attributes:
    state: the run's `state.TrainState` (global_step, data_offset, lr_scale, last_fault_step).
    policies: the run's policies, in order.
    probe: the `handle.Probe` forensics and diagnostics run.
    bad_batch_is_fault: whether a batch that failed an input check (skipped, the state as it
      was) is a fault for the good mark too, not only the model's faults.
  """
  state: Any
  policies: Sequence[interfaces.Policy]
  probe: handle.Probe
  bad_batch_is_fault: bool

  def learning_rate(self) -> float:
    """The rate the next step will use."""

  def set_lr_scale(self, scale: float) -> None:
    """Sets the factor on the configured learning rate."""

  def skip_data(self, count: int) -> Tuple[int, int]:
    """Drops `count` batches; the [start, end) stream indices dropped."""

  def epoch_of(self, step: int) -> Optional[int]:
    """The 1-based epoch an event at `step` carries, or None."""

  def save(self, reason: str) -> Optional[checkpointing.Entry]:
    """The door's save hook (it ends in `RunHost.save`)."""

  def restore(self, candidates) -> Optional[checkpointing.Entry]:
    """The door's restore hook (it ends in `RunHost.restore`)."""

  def restoring(self) -> ContextManager:
    """Wraps the keeper's restore (the input's position across it)."""

  def restored(self) -> None:
    """After a restore: what the restored variables leave to re-derive."""


def float_variables(model, optimizer) -> List[tf.Variable]:
  """Every float variable of `model` and `optimizer`."""
  vs = list(model.variables) + list(optimizer.variables)
  return [v for v in vs if tf.as_dtype(v.dtype).is_floating]  # Keras 3 dtypes are strings.


class VariableAudit:
  """Whether a run's float variables are all finite (one traced call), and which are not."""

  def __init__(self, variables: Callable[[], List[tf.Variable]]):
    self._variables = variables
    self._fn = None

  def all_finite(self) -> bool:
    if self._fn is None:
      self._fn = tf.function(lambda: tf.reduce_all(numerics.finite_flags(self._variables())))
    return bool(self._fn().numpy())

  def non_finite(self) -> List[str]:
    """Paths of the variables that hold NaN or Inf (for messages)."""
    return [provenance.variable_path(v) for v in self._variables()
            if not np.all(np.isfinite(v.numpy()))]


class MemoryKeeper:
  """The newest good state, held in memory only (a `state.Snapshot`): the rollback target of a
  run without a model_dir, on one device. The part of the keeper interface the host uses."""

  directory = None

  def __init__(self, snapshot, before_commit: Optional[Callable[[Any], None]] = None):
    self.snapshot = snapshot
    self.entry: Optional[checkpointing.Entry] = None
    self.restored_from: Optional[str] = None
    self._number = 0
    self._before_commit = before_commit

  def save(self, step: int, good: bool, **unused) -> Optional[checkpointing.Entry]:
    if not good:
      return None  # Only a rollback target is worth the copy.
    self.snapshot.capture()
    self._number += 1
    self.entry = checkpointing.Entry(number=self._number, step=int(step), good=True,
                                     path='memory')
    if self._before_commit is not None:
      self._before_commit(self.entry)
    return self.entry

  def wait(self, prune: bool = True) -> None:  # Nothing is ever in flight.
    return None

  def committed(self):
    return [self.entry] if self.entry is not None else []

  def last_good(self, before_step: Optional[int] = None):
    e = self.entry
    return e if e is not None and (before_step is None or e.step < before_step) else None

  def restore_latest(self, candidates):
    if self.entry is None or all(c.number != self.entry.number for c in candidates):
      return None
    self.snapshot.restore()
    self.restored_from = 'memory'
    return self.entry

  def mark_bad(self, after_step: int):
    if self.entry is not None and self.entry.step > after_step:
      self.entry = None


class RunHost:
  """The host side of one run, whichever door drives it: the event log and scalars, the keeper
  with its refusals (saves only while every variable is finite), restores, the fault mark, the
  policy context, the run handle (`run`) every policy's `execute` acts through, and the run's
  summary (`last_summary`, summary.json with a troubled run's diagnosis)."""

  def __init__(self, model: ModelState, options: options_lib.RunOptions, *,
               variables: Callable[[], List[tf.Variable]],
               events: Optional[events_lib.EventLog] = None):
    """Args: model: the door's `ModelState`; options: the run's cadence; variables: () -> the
    float variables a checkpoint must find finite; events: the run's event log (None: none yet)."""
    self.model = model
    self.options = options
    self.audit = VariableAudit(variables)
    self.events = events if events is not None else events_lib.EventLog(None)
    self.scalars = events_lib.Scalars(None)
    self.output_dir: Optional[str] = None
    self.refused = 0  # Checkpoints refused in a row.
    self.last_saved: Optional[checkpointing.Entry] = None  # Written since the last restore.
    self._keeper = None
    self._opener: Optional[Callable[[], Any]] = None  # Opens the keeper at its first use.
    self._reason = 'interval'  # The reason of the save being written (its `checkpoint` event).
    self.run = handle.HostRun(self)
    self.summary: Optional[summary_lib.RunSummary] = None  # This fit's, from `start_summary`.
    self.last_summary: Dict[str, Any] = {}  # The last fit's summary (`end_summary`).

  # -- reading ----------------------------------------------------------------------------------
  def step(self) -> int:
    return int(self.model.state.global_step.numpy())

  def data_position(self) -> int:
    """Stream index of the next batch: the global step plus the batches rollbacks skipped."""
    return self.step() + int(self.model.state.data_offset.numpy())

  def batch_index(self, step: int) -> int:
    """The stream index of the batch step `step` consumed."""
    return max(step, 1) - 1 + int(self.model.state.data_offset.numpy())

  def lr_scale(self) -> float:
    return float(self.model.state.lr_scale.numpy())

  @property
  def keeper(self):
    """The run's keeper of checkpoints (on disk, or `MemoryKeeper`), or None."""
    if self._opener is not None:
      self._keeper, self._opener = self._opener(), None
    return self._keeper

  @keeper.setter
  def keeper(self, keeper) -> None:
    self._keeper, self._opener = keeper, None

  def open_when_needed(self, opener: Callable[[], Any]) -> None:
    """The keeper is `opener()`, called at its first use (once the variables are built)."""
    self._opener = opener

  def context(self) -> interfaces.PolicyContext:
    """The read-only view the policies decide from."""
    keeper = self.keeper
    return interfaces.PolicyContext(
        step=self.step, data_position=self.data_position, lr_scale=self.lr_scale,
        variables_finite=self.audit.all_finite,
        checkpoints=lambda: keeper.committed() if keeper is not None else [],
        last_good_checkpoint=lambda: keeper.last_good() if keeper is not None else None)

  # -- events and the fault mark -------------------------------------------------------------
  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    """Writes an event (with the door's epoch, where it has one) to the event log."""
    step = self.step() if step is None else step
    epoch = self.model.epoch_of(step)
    if epoch is not None:
      fields.setdefault('epoch', epoch)
    return self.events.emit(event, step, **fields)

  def mark_fault(self, step: int) -> None:
    """Records a fault at `step`: no checkpoint of the next `healthy_window` steps is good."""
    mark = self.model.state.last_fault_step
    mark.assign(max(step, int(mark.numpy())))

  def record(self, reports) -> None:
    """Records a loop of reports: the summary's last loss; the mark of its last fault: the model's
    (`last_model_fault`; an overflow is none), or any skip but an overflow's where a bad batch is
    a fault (`bad_batch_is_fault`)."""
    self.summary.record(reports)
    if reports.clean():
      return
    if self.model.bad_batch_is_fault:
      faulty = reports.step[~(reports.applied | reports.overflow)]
      fault = int(faulty[-1]) if faulty.size else None
    else:
      fault = reports.last_model_fault()
    if fault is not None:
      self.mark_fault(fault)

  def healthy(self) -> bool:
    """Whether a checkpoint written now may be marked good: no fault within `healthy_window`
    steps before it and every policy healthy."""
    recent = self.step() - int(self.model.state.last_fault_step.numpy())
    return (recent > self.options.healthy_window
            and all(p.is_healthy() for p in self.model.policies))

  # -- checkpoints ------------------------------------------------------------------------------
  def open_keeper(self, strategy, parts, model_dir: Optional[str], **kwargs):
    """The keeper of `checkpoint_parts` `parts`: under `model_dir/checkpoints` (with a copy in
    memory on one device), else in memory only (`MemoryKeeper`; None under a strategy).
    `kwargs`: the disk keeper's other options (before_write)."""
    checkpoint, snapshot, writer, snapshot_writer = parts
    if not model_dir:
      return MemoryKeeper(snapshot, self._committed) if snapshot is not None else None
    return distribute.make_keeper(
        strategy, checkpoint, os.path.join(model_dir, 'checkpoints'),
        max_to_keep=self.options.max_checkpoints, keep_good=self.options.keep_good_checkpoints,
        warn=self.emit, snapshot=snapshot, writer=writer, snapshot_writer=snapshot_writer,
        before_commit=self._committed, **kwargs)

  def save(self, reason: str = 'interval',
           write: Optional[Callable[[int], Dict[str, Any]]] = None
           ) -> Optional[checkpointing.Entry]:
    """Keeps a checkpoint of the state now if every variable is finite (good if `healthy`);
    otherwise refuses and records why. `write`: step -> the keeper's save options (background,
    eval_due), asked only when the checkpoint is written. Returns the entry, or None."""
    keeper = self.keeper
    if keeper is None:
      return None
    step = self.step()
    if not self.audit.all_finite():
      self.refused += 1
      bad = self.audit.non_finite()
      self.emit('checkpoint_refused', step, reason='non-finite variable', variables=bad[:10],
                in_a_row=self.refused)
      log.warning('step %d: checkpoint refused, non-finite variable %s', step,
                  bad[0] if bad else '?')
      return None
    self.refused = 0
    self.complete_writes()  # The write in flight reads its own reason before this one is set.
    self._reason = reason
    options = write(step) if write is not None else {}
    self.last_saved = keeper.save(step, good=self.healthy(), **options)
    return self.last_saved

  def _committed(self, entry: checkpointing.Entry) -> None:
    """The keeper's `before_commit`: the `checkpoint` event (from a writing thread, maybe)."""
    self.emit('checkpoint', entry.step, checkpoint=entry.path, good=entry.good,
              reason=self._reason)

  def restore(self, candidates) -> Optional[checkpointing.Entry]:
    """Restores the newest restorable of `candidates` (from memory when the snapshot holds it);
    the door re-derives the rest (`ModelState.restored`). Returns the entry, or None."""
    keeper = self.keeper
    if keeper is None:
      return None
    with self.model.restoring():
      entry = keeper.restore_latest(list(candidates))
    if entry is not None:
      self.refused = 0
      self.last_saved = None
      self.model.restored()
    return entry

  def checkpoint_now(self, reason: str) -> Optional[checkpointing.Entry]:
    """The checkpoint of the state as it is now: the one written at the current step since the
    last restore, else a new one (the door's save hook); None when refused or none is kept."""
    self.complete_writes()  # A checkpoint still being written counts once it is committed.
    last = self.last_saved
    if (last is not None and last.step == self.step() and self.keeper is not None
        and any(e.number == last.number for e in self.keeper.committed())):
      return last
    return self.model.save(reason)

  def complete_writes(self, prune: bool = True) -> None:
    """Completes the checkpoint write in flight (committed, or a CheckpointError) and delivers its
    `checkpoint` event here; `prune=False`: to its commit only (`CheckpointKeeper.wait`)."""
    if self._keeper is not None:
      self._keeper.wait() if prune else self._keeper.wait(prune=False)
      self.events.deliver()

  # -- refusals -----------------------------------------------------------------------------------
  def stale_note(self) -> str:
    committed = self._keeper.committed() if self._keeper is not None else []
    if not committed:
      return 'no checkpoint was written before it'
    return f'the newest checkpoint on disk is from step {committed[-1].step}, before it'

  def refused_reason(self, what: str) -> str:
    bad = self.audit.non_finite()
    return (f'{what}: variable {bad[0] if bad else "?"} is non-finite'
            + (f' (and {len(bad) - 1} more)' if len(bad) > 1 else '') + '; ' + self.stale_note())

  def refusal_fault(self, step: int) -> Optional[interfaces.Decision]:
    """A fault once `max_refused_checkpoints` checkpoints in a row were refused, else None."""
    if self.refused < self.options.max_refused_checkpoints:
      return None
    return interfaces.Decision(
        action=interfaces.ESCALATE, trigger='checkpoint_refused', step=step,
        reason=self.refused_reason(f'{self.refused} checkpoints in a row refused'))

  # -- the summary ------------------------------------------------------------------------------
  def start_summary(self, start_step: int, epochs=None) -> None:
    """This fit's summary starts at `start_step`; `epochs`: (num_epochs, steps_per_epoch) of a
    `fit(num_epochs=)`, whose summary says the epoch (the door's `epoch_of`)."""
    self.summary = summary_lib.RunSummary(self.model.state, self.model.policies, epochs=epochs,
                                          start_step=start_step, epoch_of=self.model.epoch_of)

  def end_summary(self, outcome: outcome_lib.Outcome, *, optimizer, **figures) -> Dict[str, Any]:
    """The summary of a fit that ended with `outcome` (`RunSummary.build` of `figures`: last_eval,
    metrics), with a troubled run's diagnosis (`doctor.attach`; `optimizer` names its remedy);
    closes the scalars, writes `summary.json` on the chief, keeps it as `last_summary`."""
    summary = self.summary.build(outcome, optimizer=optimizer, **figures)
    doctor.attach(summary, self.output_dir, optimizer, self.emit)
    self.scalars.close()
    if self.output_dir:
      events_lib.write_json_atomic(os.path.join(self.output_dir, 'summary.json'), summary)
    self.last_summary = summary
    return summary
