"""The run handle a policy's `execute` acts through (`interfaces.RunHandle`), and the `Probe` that
lets forensics re-run the step on a batch."""

import dataclasses
import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from stable_train.core import interfaces
from stable_train.core import views


@dataclasses.dataclass(frozen=True, eq=False)
class Probe:
  """What forensics and diagnostics may run: the step's forward and backward pass on a batch
  (no update), the model, and the model's state as a checkpoint.

  Attributes:
    model: the model.
    policies: the run's policies (their input checks).
    split_batch: batch -> (features, labels).
    loss_and_gradients: batch -> (loss, grads, input flags, outputs finite), traced.
    model_checkpoint: () -> a `tf.train.Checkpoint` of the model, optimizer and forward state.
    first_batch: () -> the first batch of the run's dataset, or None.
    jit_compile: whether the training step is compiled with XLA.
    label_classes_of: () -> the class count the step checks sparse labels against, or None.
    loss: the loss the step applies to the model's outputs and the labels (a Keras loss, name
      or function), or None where the step computes its loss otherwise (an overridden
      compute_loss or forward).
  """
  model: Any
  policies: Sequence[interfaces.Policy]
  split_batch: Callable[[Any], Tuple[Any, Any]]
  loss_and_gradients: Callable[[Any], Tuple[Any, ...]]
  model_checkpoint: Callable[[], Any]
  first_batch: Callable[[], Any]
  jit_compile: bool = False
  label_classes_of: Callable[[], Optional[int]] = lambda: None
  loss: Any = None

  @property
  def label_classes(self) -> Optional[int]:
    """The class count of the checked sparse labels (`Trainer.label_classes`), or None."""
    return self.label_classes_of()


class LiveRun(interfaces.RunHandle):
  """`interfaces.RunHandle` over a live `controller.Controller`."""

  def __init__(self, controller):
    self._controller = controller
    self._trainer = controller.trainer
    self._first = None  # (the dataset, its first batch), read once (`_first_batch`).
    t = self._trainer
    self.probe = Probe(model=t.model, policies=t.policies, split_batch=t.split_batch,
                       loss_and_gradients=t.loss_and_gradients,
                       model_checkpoint=t.model_checkpoint, first_batch=self._first_batch,
                       jit_compile=t.jit_compile, label_classes_of=lambda: t.label_classes,
                       loss=t.loss_fn if t.uses_own_loss() and t.uses_own_forward() else None)

  def _first_batch(self):
    """The run's first batch, read once per dataset: every new iterator of a shuffled or
    generator dataset advances its seed or its stream, which changed the training after each
    probe (DivergenceCheck's, every 50 steps)."""
    dataset = self._controller.input.dataset
    if dataset is None:
      return None
    kept = self._first
    if kept is None or kept[0] is not dataset:
      kept = self._first = (dataset, next(iter(dataset.take(1)), None))
    return kept[1]

  # -- reading --------------------------------------------------------------------------------
  @property
  def step(self) -> int:
    return int(self._trainer.global_step.numpy())

  @property
  def data_position(self) -> int:
    return self._controller.input.position()

  @property
  def lr_scale(self) -> float:
    return float(self._trainer.lr_scale.numpy())

  @property
  def learning_rate(self) -> float:
    return self._trainer.lr_control.current()

  @property
  def _keeper(self):
    return self._controller.checkpoints.keeper

  @property
  def has_checkpoints(self) -> bool:
    return self._keeper is not None

  @property
  def restored_from(self) -> Optional[str]:
    return self._keeper.restored_from if self._keeper is not None else None

  @property
  def output_dir(self) -> Optional[str]:
    return self._trainer.output_dir

  @property
  def checkpoint_dir(self) -> Optional[str]:
    """The checkpoint directory (`<model_dir>/checkpoints`), or None."""
    return self._keeper.directory if self._keeper is not None else None

  def checkpoints(self) -> Sequence[Any]:
    if self._keeper is None:
      return []
    self._keeper.wait()  # A checkpoint still being committed counts, as if committed at once.
    return self._keeper.committed()

  def good_checkpoints(self) -> Sequence[Any]:
    return [e for e in self.checkpoints() if e.good]

  def batch_index(self, step: int) -> int:
    # Step s consumed batch s - 1 + data offset (the batches rollbacks skipped).
    return max(step, 1) - 1 + int(self._trainer.data_offset.numpy())

  # -- acting ---------------------------------------------------------------------------------
  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    return self._trainer.emit(event, step, **fields)

  def write_scalars(self, step: int, values: Dict[str, float]) -> None:
    self._controller.scalars.write(step, values)

  def restore(self, candidates):
    return self._trainer.restore_latest(list(candidates))

  def mark_not_good_after(self, step: int) -> None:
    if self._keeper is not None:
      self._keeper.mark_bad(after_step=step)

  def checkpoint_now(self, reason: str):
    return self._controller.checkpoints.checkpoint_now(reason)

  def mark_best(self, entry):
    return self._keeper.mark_best(entry)

  def skip_data(self, count: int) -> Tuple[int, int]:
    return self._controller.input.skip(count)

  def set_lr_scale(self, scale: float) -> None:
    self._trainer.lr_control.set_scale(scale)

  def set_norm_ceiling(self, norm: float) -> bool:
    return views.apply_norm_ceiling(self._trainer.policies, norm)

  def checkpoint_path(self, entry) -> str:
    """The prefix path of a checkpoint entry."""
    return os.path.join(self._keeper.directory, entry.path)
