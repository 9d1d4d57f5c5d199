"""What a policy sees of the run: `PolicyContext` (read-only, when it decides) and `RunHandle`
(the one narrow handle, when it acts)."""

from typing import Any, Callable, Dict, Optional, Protocol, Sequence, Tuple, runtime_checkable


class PolicyContext:
  """What a policy's host half may read when it decides: a small, read-only view of the run.

  `decide`, `handle_escalation`, `decide_eval` and `decide_after_act` get this: they return
  decisions (the first three may update the policy's own variables); the run carries them out.

  Attributes:
    step: the global step after the loop.
    data_position: index in the dataset's stream of the next batch the iterator will yield.
    lr_scale: the learning-rate scale (1.0 = as configured; a rollback backs it off).
  """

  def __init__(self, *, step: int | Callable[[], int],
               data_position: int | Callable[[], int],
               lr_scale: float | Callable[[], float],
               variables_finite: Callable[[], bool],
               checkpoints: Callable[[], Sequence[Any]] = tuple,
               last_good_checkpoint: Callable[[], Optional[Any]] = lambda: None):
    """Initialises the view; what costs a graph run or a look at the disk is read on demand.

    Args:
      step, data_position, lr_scale: see the attributes; each a value, or a function that reads
        it, called at the first read and kept (a variable read on the host costs a loop 0.1-0.3
        ms where the step's threads are still busy, and most decisions read none of the three):
        a view serves one round of decisions, not a later one.
      variables_finite: returns whether every model and optimizer variable is finite.
      checkpoints: returns the committed checkpoints (`checkpointing.Entry`), oldest first.
      last_good_checkpoint: returns the newest known-good checkpoint, or None.
    """
    self._values = {'step': step, 'data_position': data_position, 'lr_scale': lr_scale}
    self._variables_finite = variables_finite
    self._checkpoints = checkpoints
    self._last_good_checkpoint = last_good_checkpoint

  def _value(self, name: str):
    value = self._values[name]
    if callable(value):
      try:
        value = self._values[name] = value()
      except AttributeError as e:  # Not this view's missing-name error (`__getattr__`).
        raise RuntimeError(f'PolicyContext: reading {name} failed: {e}') from e
    return value

  step = property(lambda self: self._value('step'))
  data_position = property(lambda self: self._value('data_position'))
  lr_scale = property(lambda self: self._value('lr_scale'))

  def variables_finite(self) -> bool:
    """Whether every model and optimizer variable is finite now (one graph run)."""
    return bool(self._variables_finite())

  def checkpoints(self) -> Sequence[Any]:
    """The committed checkpoints, oldest first; () without a model_dir."""
    return tuple(self._checkpoints())

  def last_good_checkpoint(self) -> Optional[Any]:
    """The newest known-good (rollback target) checkpoint, or None."""
    return self._last_good_checkpoint()

  def __getattr__(self, name):
    # Only reached for names the view does not have: a policy that tries to act while deciding
    # (context.emit, context.restore...) gets the contract in one line.
    raise AttributeError(
        f'PolicyContext has no {name!r}: decide() gets a read-only view (step, data_position, '
        'lr_scale, variables_finite(), checkpoints(), last_good_checkpoint()); to act on the run, '
        'return Decision(action=ACT) and do it in execute(decision, run).')


class RunHandle:
  """The one handle through which a policy's `execute` acts on the run (never the Trainer).

  Reading: `step`, `data_position`, `lr_scale`, `learning_rate`, `has_checkpoints`,
  `restored_from`, `output_dir`, `checkpoint_dir`, `checkpoints()`, `good_checkpoints()`,
  `batch_index(step)`, and `probe` (re-run the step's forward and backward pass on a batch).
  Acting: `emit`, `write_scalars`, `restore`, `mark_not_good_after`, `checkpoint_now`,
  `mark_best`, `skip_data`, `set_lr_scale`, `set_norm_ceiling`. Checkpoints are `checkpointing.Entry` records.
  """

  step: int  # The global step now.
  data_position: int  # Stream index of the next batch the input will yield.
  lr_scale: float  # The factor on the configured learning rate.
  learning_rate: float  # The rate the next step will use.
  has_checkpoints: bool  # Whether the run keeps checkpoints (a model_dir).
  restored_from: Optional[str]  # 'memory' or 'disk': where the last restore read from.
  output_dir: Optional[str]  # Where this process writes run files (None: nowhere).
  checkpoint_dir: Optional[str]  # `<model_dir>/checkpoints`, or None.
  probe: Any  # `handle.Probe`: the model, `split_batch`, `loss_and_gradients`, ...

  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    """Writes one record to events.jsonl (at `step`, default the current one)."""
    raise NotImplementedError

  def write_scalars(self, step: int, values: Dict[str, float]) -> None:
    """Writes TensorBoard scalars of the training run."""
    raise NotImplementedError

  def checkpoints(self) -> Sequence[Any]:
    """The committed checkpoints, oldest first (a write in flight is completed first)."""
    raise NotImplementedError

  def good_checkpoints(self) -> Sequence[Any]:
    """The committed checkpoints marked good (rollback targets), oldest first."""
    raise NotImplementedError

  def restore(self, candidates: Sequence[Any]) -> Optional[Any]:
    """Restores the newest restorable of `candidates` (a corrupt one is reported and the next
    older tried) and puts the input at the restored position; returns the entry, or None."""
    raise NotImplementedError

  def mark_not_good_after(self, step: int) -> None:
    """Marks every good checkpoint written after `step` not good (an abandoned timeline)."""
    raise NotImplementedError

  def checkpoint_now(self, reason: str) -> Optional[Any]:
    """The committed checkpoint of the state as it is now (written if needed); None when it was
    refused (a non-finite variable) or the run keeps no checkpoints."""
    raise NotImplementedError

  def mark_best(self, entry: Any) -> Any:
    """Marks a committed checkpoint the run's best (persisted); returns its entry."""
    raise NotImplementedError

  def batch_index(self, step: int) -> int:
    """Stream index of the batch that global step `step` consumed."""
    raise NotImplementedError

  def skip_data(self, count: int) -> Tuple[int, int]:
    """Drops `count` batches from the input; returns the [start, end) stream indices dropped."""
    raise NotImplementedError

  def set_lr_scale(self, scale: float) -> None:
    """Sets the factor on the configured learning rate from the next step on (checkpointed)."""
    raise NotImplementedError

  def set_norm_ceiling(self, norm: float) -> bool:
    """Caps the global gradient norm at `norm` from the next step on, through the policies that
    take a ceiling (`interfaces.NormCeiling`: AdaptiveClip), checkpointed; False when none
    does."""
    raise NotImplementedError


@runtime_checkable
class NormCeiling(Protocol):
  """A clip that takes a fixed ceiling on the global norm: the remedy a recovery applies to
  exploding gradients (`RunHandle.set_norm_ceiling`)."""

  def set_norm_ceiling(self, norm: float) -> None:
    """Caps the global gradient norm at `norm` from the next step on (eager; checkpointed
    state, not configuration: a remedy the run applied)."""


def apply_norm_ceiling(policies, norm: float) -> bool:
  """`RunHandle.set_norm_ceiling` over a run's policies: every policy that takes a ceiling
  (`NormCeiling`) gets it; False when none does."""
  takers = [p for p in policies if isinstance(p, NormCeiling)]
  for p in takers:
    p.set_norm_ceiling(norm)
  return bool(takers)
