"""A guarded Keras `fit`'s side of its `host.RunHost`: `FitModel` (the `host.ModelState` over a
`keras_callbacks.GuardCallback`) and `open_keeper` (its rollback targets: on disk, or the last good
state in memory)."""

import contextlib
from typing import Optional

import keras
import tensorflow as tf

from stable_train import compat
from stable_train.core import keras_parts
from stable_train.core import lr as lr_lib
from stable_train.runtime.actions import checkpoint_action
from stable_train.runtime import handle


def open_keeper(host, guard, model_dir: Optional[str]):
  """The keeper of a guarded fit's rollback targets (`RunHost.open_keeper`): on disk under
  `model_dir/checkpoints` (with a copy in memory on one device), else in memory only; None where
  neither can be kept (under a strategy without a model_dir)."""
  m = guard.model
  objects = guard.state.checkpoint_objects(model=m, optimizer=m.optimizer,
                                           forward_state=guard.forward_state(),
                                           random_states=guard.random_states)
  objects['clipped_steps'] = guard.clipped_steps
  keeper = host.open_keeper(guard.strategy,
                            checkpoint_action.checkpoint_parts(objects, guard.strategy), model_dir)
  if model_dir:
    # Another process's checkpoints are not this run's timeline: never rollback targets.
    keeper.mark_bad(after_step=-(2**62))
  return keeper


class FitModel:
  """The guarded fit's side of the host (a `host.ModelState`): fit owns the data iterator, so
  `skip_data` moves nothing (Rollback's `skip_batches` > 0 is refused) and a restore leaves the
  data where it stands (the data offset takes up the steps undone)."""

  # A skipped bad batch blocks good marks too: a rollback goes back before the batches that failed
  # their input check (fit cannot skip them; its data goes on past them).
  bad_batch_is_fault = True

  def __init__(self, callback):
    self._cb = callback
    g = self._guard = callback.guard
    self.state, self.policies = g.state, g.policies
    self._lr_control = None
    self.probe = handle.Probe(
        model=g.model, policies=g.policies, split_batch=keras_parts.split_batch,
        loss_and_gradients=g.loss_and_gradients, model_checkpoint=g.model_checkpoint,
        first_batch=g.first_batch, jit_compile=bool(g.model.jit_compile),
        # The compiled loss, where the model's compute_loss is Keras's (which applies it).
        loss=(g.model.loss if type(g.model).compute_loss is keras.Model.compute_loss
              else None))

  def learning_rate(self) -> float:
    return float(tf.cast(self._guard.optimizer.learning_rate, tf.float32).numpy())

  def set_lr_scale(self, scale: float) -> None:
    """Sets the factor on the learning rate: a schedule is wrapped once (`lr.ScaledSchedule`),
    a constant rate is scaled by new / old factor, so a change by ReduceLROnPlateau stands."""
    state, optimizer = self.state, self._guard.optimizer
    old = float(state.lr_scale.numpy())
    state.lr_scale.assign(scale)
    if callable(compat.learning_rate_of(optimizer)):
      if self._lr_control is None:
        self._lr_control = lr_lib.LearningRateControl(optimizer, state.lr_scale)
    else:
      optimizer.learning_rate = float(optimizer.learning_rate.numpy()) * float(scale) / old

  def skip_data(self, count: int):
    position = self._cb.host.data_position()  # fit owns the iterator (skip_batches > 0 refused).
    return position, position

  def epoch_of(self, step: int) -> int:
    return self._cb.fit_epoch + 1  # fit's, 1-based.

  def save(self, reason: str):
    return self._cb.save(reason)

  def restore(self, candidates):
    return self._cb.host.restore(candidates)

  @contextlib.contextmanager
  def restoring(self):
    """The data goes on where it stands: the data offset takes up the steps a restore undoes."""
    position = self._cb.host.data_position()
    yield
    self.state.data_offset.assign(position - int(self.state.global_step.numpy()))

  def restored(self) -> None:
    self._cb.restored()
