"""A host decision: what a policy asks the loop to do after a loop of steps, and its actions."""

import dataclasses
from typing import Any, Dict

CONTINUE = 'continue'
ESCALATE = 'escalate'  # "something is wrong that this policy cannot fix": a recovery policy may act.
ROLLBACK = 'rollback'
ABORT = 'abort'
# "Carry out this policy's own action now (`Policy.execute`), then go on": writing a record,
# emitting a warning, restoring the learning rate. Run for every policy that asks, in policy
# order, before the one resolved continue/rollback/abort decision.
ACT = 'act'
# "End the run cleanly after this evaluation" (early stopping): only from `EvalWatcher.decide_eval`.
# The policy's `execute` records it, then the run ends with status 'stopped_early' and this
# decision's reason in the summary.
STOP = 'stop'
ACTIONS = (CONTINUE, ESCALATE, ROLLBACK, ABORT, ACT, STOP)
# A `Decision.status`: how a run that this decision stops ends ('' is 'aborted').
DIVERGED = 'diverged'
STOP_STATUSES = ('', 'aborted', DIVERGED)


@dataclasses.dataclass(frozen=True)
class Decision:
  """What a host-side policy asks the loop to do after a loop of steps."""
  action: str = CONTINUE
  reason: str = ''
  trigger: str = ''
  step: int = -1  # The global step at which the trigger fired.
  policy: str = ''  # The policy that carries out an ACT or ROLLBACK; default: the decider.
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)
  # How the run ends when this decision stops it (an ABORT, or an ESCALATE no policy takes
  # over): '' for 'aborted', or 'diverged' (the loss diverged while finite, or never came down).
  status: str = ''

  def __post_init__(self):
    if self.action not in ACTIONS:  # A typo must not read as "continue".
      raise ValueError(f'Decision: action={self.action!r} is not one of {ACTIONS}.')
    if self.status not in STOP_STATUSES:
      raise ValueError(f'Decision: status={self.status!r} is not one of {STOP_STATUSES}.')
