"""The run handle a policy's `execute` acts through (`HostRun`, the one `interfaces.RunHandle`, over
a `host.RunHost`), and the `Probe` that lets forensics re-run the step on a batch."""

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
    models: every model the step trains, where it trains several (empty: `model` alone); the
      step's gradients are for their trainable variables, in this order.
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
  models: Sequence[Any] = ()

  @property
  def label_classes(self) -> Optional[int]:
    """The class count of the checked sparse labels (`Trainer.label_classes`), or None."""
    return self.label_classes_of()


class HostRun(interfaces.RunHandle):
  """`interfaces.RunHandle` over a `host.RunHost`: the one handle both front doors' policies act
  through; what differs between the doors is the host's `ModelState`."""

  def __init__(self, host):
    self._host = host

  # -- reading --------------------------------------------------------------------------------
  @property
  def probe(self) -> Probe:
    return self._host.model.probe

  @property
  def step(self) -> int:
    return self._host.step()

  @property
  def data_position(self) -> int:
    return self._host.data_position()

  @property
  def lr_scale(self) -> float:
    return self._host.lr_scale()

  @property
  def learning_rate(self) -> float:
    return self._host.model.learning_rate()

  @property
  def has_checkpoints(self) -> bool:
    return self._host.keeper is not None

  @property
  def restored_from(self) -> Optional[str]:
    keeper = self._host.keeper
    return keeper.restored_from if keeper is not None else None

  @property
  def output_dir(self) -> Optional[str]:
    return self._host.output_dir

  @property
  def checkpoint_dir(self) -> Optional[str]:
    """The checkpoint directory (`<model_dir>/checkpoints`), or None."""
    keeper = self._host.keeper
    return keeper.directory if keeper is not None else None

  def checkpoints(self) -> Sequence[Any]:
    keeper = self._host.keeper
    if keeper is None:
      return []
    keeper.wait()  # A checkpoint still being committed counts, as if committed at once.
    return keeper.committed()

  def good_checkpoints(self) -> Sequence[Any]:
    return [e for e in self.checkpoints() if e.good]

  def batch_index(self, step: int) -> int:
    return self._host.batch_index(step)

  # -- acting ---------------------------------------------------------------------------------
  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    return self._host.emit(event, step, **fields)

  def write_scalars(self, step: int, values: Dict[str, float]) -> None:
    self._host.scalars.write(step, values)

  def restore(self, candidates):
    return self._host.model.restore(list(candidates))

  def mark_not_good_after(self, step: int) -> None:
    keeper = self._host.keeper
    if keeper is not None:
      keeper.mark_bad(after_step=step)

  def checkpoint_now(self, reason: str):
    return self._host.checkpoint_now(reason)

  def mark_best(self, entry):
    return self._host.keeper.mark_best(entry)

  def skip_data(self, count: int) -> Tuple[int, int]:
    return self._host.model.skip_data(count)

  def set_lr_scale(self, scale: float) -> None:
    self._host.model.set_lr_scale(scale)

  def set_norm_ceiling(self, norm: float) -> bool:
    return views.apply_norm_ceiling(self._host.model.policies, norm)

  def checkpoint_path(self, entry) -> str:
    """The prefix path of a checkpoint entry."""
    return os.path.join(self._host.keeper.directory, entry.path)
