"""What a guarded Keras `fit`'s policies act through: `KerasRun` (the `interfaces.RunHandle` over
a `keras_callbacks.GuardCallback`), its keeper of rollback targets (`open_keeper`: on disk, or
`MemoryKeeper`, the last good state in memory) and `VariableAudit` (are all variables finite)."""

import os
from typing import Any, Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from stable_train import compat
from stable_train.core import interfaces
from stable_train.core import keras_parts
from stable_train.core import lr as lr_lib
from stable_train.core import numerics
from stable_train.core import views
from stable_train.forensics import provenance
from stable_train.runfiles import checkpointing
from stable_train.runtime.actions import checkpoint_action
from stable_train.runtime import distribute
from stable_train.runtime import handle


def open_keeper(guard, model_dir: Optional[str], *, max_to_keep: int, keep_good: int, warn):
  """The keeper of a guarded fit's rollback targets: on disk under `model_dir/checkpoints` (with
  a copy in memory on one device), else in memory only (`MemoryKeeper`); None where neither can
  be kept (under a strategy without a model_dir)."""
  m = guard.model
  objects = guard.state.checkpoint_objects(model=m, optimizer=m.optimizer,
                                           forward_state=guard.forward_state(),
                                           random_states=guard.random_states)
  objects['clipped_steps'] = guard.clipped_steps
  checkpoint, snapshot, writer, snapshot_writer = checkpoint_action.checkpoint_parts(
      objects, guard.strategy)
  if model_dir:
    keeper = distribute.make_keeper(
        guard.strategy, checkpoint, os.path.join(model_dir, 'checkpoints'),
        max_to_keep=max_to_keep, keep_good=keep_good, warn=warn, snapshot=snapshot,
        writer=writer, snapshot_writer=snapshot_writer)
    # Another process's checkpoints are not this run's timeline: never rollback targets.
    keeper.mark_bad(after_step=-(2**62))
    return keeper
  return MemoryKeeper(snapshot) if snapshot is not None else None


class VariableAudit:
  """Whether a model's and its optimizer's float variables are all finite (one traced call),
  and which are not."""

  def __init__(self, model):
    self._model = model
    self._fn = None

  def _variables(self):
    vs = list(self._model.variables) + list(self._model.optimizer.variables)
    return [v for v in vs if tf.as_dtype(v.dtype).is_floating]

  def all_finite(self) -> bool:
    if self._fn is None:
      self._fn = tf.function(lambda: tf.reduce_all(numerics.finite_flags(self._variables())))
    return bool(self._fn().numpy())

  def non_finite(self) -> List[str]:
    return [provenance.variable_path(v) for v in self._variables()
            if not np.all(np.isfinite(v.numpy()))]


class MemoryKeeper:
  """The newest good state, held in memory only (a `state.Snapshot`): the rollback target of a
  guarded fit without a model_dir, on one device. The keeper interface the callback uses."""

  directory = None

  def __init__(self, snapshot):
    self.snapshot = snapshot
    self.entry: Optional[checkpointing.Entry] = None
    self.restored_from: Optional[str] = None
    self._number = 0

  def save(self, step: int, good: bool) -> Optional[checkpointing.Entry]:
    if not good:
      return None  # Only a rollback target is worth the copy.
    self.snapshot.capture()
    self._number += 1
    self.entry = checkpointing.Entry(number=self._number, step=int(step), good=True,
                                     path='memory')
    return self.entry

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


class KerasRun(interfaces.RunHandle):
  """`interfaces.RunHandle` over a guarded fit (its `keras_callbacks.GuardCallback`): fit owns
  the data iterator, so `skip_data` moves nothing (Rollback's `skip_batches` > 0 is refused)."""

  def __init__(self, callback):
    self._cb = callback
    g = callback.guard
    self._lr_control = None
    self.probe = handle.Probe(
        model=g.model, policies=g.policies, split_batch=keras_parts.split_batch,
        loss_and_gradients=g.loss_and_gradients, model_checkpoint=g.model_checkpoint,
        first_batch=g.first_batch, jit_compile=bool(g.model.jit_compile),
        # The compiled loss, where the model's compute_loss is Keras's (which applies it).
        loss=(g.model.loss if type(g.model).compute_loss is keras.Model.compute_loss
              else None))

  @property
  def step(self) -> int:
    return self._cb.current_step()

  @property
  def data_position(self) -> int:
    state = self._cb.guard.state
    return int(state.global_step.numpy()) + int(state.data_offset.numpy())

  @property
  def lr_scale(self) -> float:
    return float(self._cb.guard.state.lr_scale.numpy())

  @property
  def learning_rate(self) -> float:
    return float(tf.cast(self._cb.guard.optimizer.learning_rate, tf.float32).numpy())

  @property
  def has_checkpoints(self) -> bool:
    return self._cb.checkpoints() is not None

  @property
  def restored_from(self) -> Optional[str]:
    keeper = self._cb.checkpoints()
    return keeper.restored_from if keeper is not None else None

  @property
  def output_dir(self) -> Optional[str]:
    return self._cb.output_dir

  @property
  def checkpoint_dir(self) -> Optional[str]:
    keeper = self._cb.checkpoints()
    return keeper.directory if keeper is not None else None

  def checkpoints(self):
    keeper = self._cb.checkpoints()
    return keeper.committed() if keeper is not None else []

  def good_checkpoints(self):
    return [e for e in self.checkpoints() if e.good]

  def batch_index(self, step: int) -> int:
    return max(step, 1) - 1 + int(self._cb.guard.state.data_offset.numpy())

  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    return self._cb.emit(event, step, **fields)

  def write_scalars(self, step: int, values: Dict[str, float]) -> None:
    self._cb.scalars.write(step, values)

  def restore(self, candidates):
    return self._cb.restore(candidates)

  def mark_not_good_after(self, step: int) -> None:
    keeper = self._cb.checkpoints()
    if keeper is not None:
      keeper.mark_bad(after_step=step)

  def checkpoint_now(self, reason: str):
    return self._cb.save(reason)

  def mark_best(self, entry):
    return self._cb.checkpoints().mark_best(entry)

  def skip_data(self, count: int):
    position = self.data_position  # fit owns the iterator (skip_batches > 0 is refused).
    return position, position

  def set_lr_scale(self, scale: float) -> None:
    """Sets the factor on the learning rate: a schedule is wrapped once (`lr.ScaledSchedule`),
    a constant rate is scaled by new / old factor, so a change by ReduceLROnPlateau stands."""
    state, optimizer = self._cb.guard.state, self._cb.guard.optimizer
    old = float(state.lr_scale.numpy())
    state.lr_scale.assign(scale)
    if callable(compat.learning_rate_of(optimizer)):
      if self._lr_control is None:
        self._lr_control = lr_lib.LearningRateControl(optimizer, state.lr_scale)
    else:
      optimizer.learning_rate = float(optimizer.learning_rate.numpy()) * float(scale) / old

  def set_norm_ceiling(self, norm: float) -> bool:
    return views.apply_norm_ceiling(self._cb.guard.policies, norm)
