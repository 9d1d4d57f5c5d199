"""How a run ended: the `Status` enum and the `Outcome` a host-loop step returns to end the run."""

import dataclasses
import enum
from typing import Any, Dict, Optional


class Status(str, enum.Enum):
  """The `status` of summary.json (the enum's value is the word written there)."""
  COMPLETED = 'completed'  # num_steps or num_epochs reached.
  STOPPED_EARLY = 'stopped_early'  # A policy's STOP after an evaluation (EarlyStopping).
  DATA_EXHAUSTED = 'data_exhausted'  # A finite dataset ended before num_steps.
  ABORTED = 'aborted'  # A policy or a fault stopped the run; the checkpoints stand.
  # The loss diverged while staying finite, or never came down from a broken start: stopped
  # early, the last good checkpoint intact and named (no Rollback took it over).
  DIVERGED = 'diverged'
  INTERRUPTED = 'interrupted'  # SIGTERM/SIGINT: stopped cleanly after a checkpoint.

  @property
  def finished(self) -> bool:
    """Whether the run ended normally (evaluated, checkpointed, exported; CLI exit 0)."""
    return self in FINISHED

  def __str__(self) -> str:
    return self.value


# The statuses of a run that ended normally.
FINISHED = (Status.COMPLETED, Status.STOPPED_EARLY, Status.DATA_EXHAUSTED)


@dataclasses.dataclass(frozen=True)
class Outcome:
  """The end of a run: its status, why, the trigger that caused it and extra summary fields."""
  status: Status
  reason: str = ''
  trigger: str = ''
  extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def finished(self) -> bool:
    return self.status.finished


def aborted(reason: str, trigger: str = '', status: Status = Status.ABORTED,
            extra: Optional[Dict[str, Any]] = None) -> Outcome:
  """An `ABORTED` (or `DIVERGED`) outcome."""
  return Outcome(status, reason=reason, trigger=trigger, extra=dict(extra or {}))
