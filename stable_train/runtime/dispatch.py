"""The one place that turns the policies' decisions, and the faults the run finds itself, into what
happens next: go on, a policy's action, a rollback, an early stop or an abort.

Deciding is pure (`Policy.decide`, `EvalWatcher.decide_eval`, `Recovery.handle_escalation` read
reports and a `PolicyContext`); carrying out is `Policy.execute(decision, run)` with the
`RunHandle`. Precedence of the resolved decision: abort > escalation (to the first policy that
handles it, else an abort) > rollback > continue. ACT decisions are not resolved: each is carried
out, in policy order, before the resolved one. After the first loop it also runs the start's
loss/output check (`loss_check.LossOutputCheck`), a warning for the doctor, never a decision.
"""

import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from stable_train.core import interfaces
from stable_train.core import outcome as outcome_lib
from stable_train import errors
from stable_train.runtime import history as history_lib
from stable_train.runtime import loss_check

Decision = interfaces.Decision


def resolve(decisions: Sequence[Decision], policies: Sequence[interfaces.Policy],
            context) -> Decision:
  """One decision from the policies' (non-ACT) decisions: abort > escalation > rollback >
  continue. An escalation goes to the first policy that handles it (`handle_escalation`, e.g.
  Rollback); one that no policy handles stops the run."""
  for d in decisions:
    if d.action == interfaces.ABORT:
      return d
  for d in decisions:
    if d.action == interfaces.ESCALATE:
      for p in policies:
        if not isinstance(p, interfaces.Recovery):
          continue
        handled = p.handle_escalation(d, context)
        if handled is not None:
          return handled
      return Decision(action=interfaces.ABORT, reason=d.reason, trigger=d.trigger, step=d.step,
                      status=d.status)
  for d in decisions:
    if d.action == interfaces.ROLLBACK:
      return d
  return Decision()


class Dispatcher:
  """Asks the policies, resolves, and carries out through the run handle."""

  def __init__(self, *, policies: Sequence[interfaces.Policy], run: interfaces.RunHandle,
               context: Callable[[], interfaces.PolicyContext],
               mark_fault: Callable[[int], None]):
    """Initialises the dispatcher.

    Args:
      policies: the run's policies, in order.
      run: the handle every `execute` gets.
      context: builds the read-only view the policies decide from (built only when asked).
      mark_fault: records a fault at a global step (no checkpoint near it is marked good).
    """
    self._policies = list(policies)
    self._by_name = {p.name: p for p in self._policies}
    self._run = run
    self._context = context
    self._mark_fault = mark_fault
    self.acted = False  # Whether the last `after_loop` carried anything out.
    self._unresolved: List[Decision] = []  # The last `decide`'s non-ACT decisions.
    self._observers = [p for p in self._policies if isinstance(p, interfaces.LoopObserver)]
    self._noticed = False  # Whether an observer noticed the loop `observe` last folded.
    # The steps before trouble, written out when a loop skips, acts or ends the run.
    self.history = history_lib.RunHistory()
    self.loss_check = loss_check.LossOutputCheck()  # Once, after the first loop.

  def decide(self, reports, noticed: bool = False) -> Tuple[List[Decision], Decision]:
    """Every policy's decision, pure: (the ACT decisions in policy order, the resolved one).

    A policy that does not override `decide` is not asked, nor, on a clean loop (every step
    applied, none faulty or an overflow) that no `LoopObserver` `noticed`, one whose
    `decides_on_clean_loops` is False; the context is built only when some policy is asked.
    """
    clean = reports.clean() and not noticed
    asked = [p for p in self._policies
             if type(p).decide is not interfaces.Policy.decide
             and (p.decides_on_clean_loops or not clean)]
    if not asked:
      return [], Decision()
    context = self._context()
    decisions = [d for d in (_ask(p, reports, context) for p in asked) if d is not None]
    acts = [d for d in decisions if d.action == interfaces.ACT]
    self._unresolved = [d for d in decisions if d.action != interfaces.ACT]
    return acts, resolve(self._unresolved, self._policies, context)

  def redecide(self, reports, acts: Sequence[Decision], decision: Decision) -> Decision:
    """The resolved decision once the ACTs ran: a `Rechecker` policy is asked again
    (what its check found, e.g. a collapse or a damaged model, counts in the same loop, the last
    one included); its new ACTs are dropped. Pure, like `decide`."""
    again = [self._by_name[a.policy] for a in acts]
    again = [p for i, p in enumerate(again)
             if isinstance(p, interfaces.Rechecker) and p not in again[:i]]
    if not again or decision.action == interfaces.ABORT:
      return decision
    context = self._context()
    found = [d for d in (_ask_again(p, reports, context) for p in again)
             if d is not None and d.action != interfaces.ACT]
    return resolve(self._unresolved + found, self._policies, context) if found else decision

  def observe(self, reports) -> None:
    """Every `LoopObserver` folds one loop of reports into its statistics: called as soon as the
    front door has read them (before its hooks, checkpoints and `after_loop`, and on the way out
    of a run that failed), so that anything saved or read after a loop counts every step of it."""
    noticed = [p.observe(reports) for p in self._observers]
    self._noticed = any(noticed)

  def after_loop(self, reports) -> Optional[outcome_lib.Outcome]:
    """Decides on one loop of reports (folded by `observe` already) and carries it out; an
    Outcome when the run must end. The first trouble of an episode (a skip, a rollback, an end,
    a rule checked and cleared) is recorded with the steps before it (a `history` event, for the
    doctor)."""
    self.history.add(reports)
    self.loss_check.after_loop(self._run, int(reports.step[-1]), reports.loss)
    noticed, self._noticed = self._noticed, False
    acts, decision = self.decide(reports, noticed)
    ended, decision = self._carry_out(reports, acts, decision)
    self.acted = bool(acts) or decision.action != interfaces.CONTINUE
    # A rule that fired and was checked, the run going on (the batches blamed): trouble too.
    cleared = [a.step for a in acts if a.details.get('rule')] if ended is None else []
    self.history.after_loop(reports, decision.action, ended, self._run.emit,
                            cleared=cleared[0] if cleared else None)
    return ended

  def _carry_out(self, reports, acts, decision
                 ) -> Tuple[Optional[outcome_lib.Outcome], Decision]:
    """The ACTs, then the decision as resolved after them; (an Outcome or None, that decision)."""
    step = int(reports.step[-1])
    for act in acts:  # Every policy's own action, in policy order, whatever comes next.
      stop = self._by_name[act.policy].execute(act, self._run)
      if stop is not None:
        return self.abort(stop, act.trigger or act.policy, step), decision
    decision = self.redecide(reports, acts, decision)
    if decision.action == interfaces.ABORT:
      return self.abort(decision.reason, decision.trigger, step, status=decision.status), decision
    stop = self._execute(decision)
    return (None if stop is None else
            self.abort(stop, decision.trigger, step, status=decision.status)), decision

  def carry_out(self, fault: Decision) -> Optional[outcome_lib.Outcome]:
    """Resolves a fault the run found itself (an eval divergence, checkpoints refused in a row)
    as a policy's escalation: a Rollback takes it over, or the run aborts."""
    decision = resolve([fault], self._policies, self._context())
    if decision.action == interfaces.ABORT:
      return self.abort(decision.reason, fault.trigger, fault.step, status=decision.status)
    stop = self._execute(decision)
    return (None if stop is None else
            self.abort(stop, fault.trigger, fault.step, status=decision.status))

  def after_eval(self, values, final: bool = False) -> Optional[outcome_lib.Outcome]:
    """Every policy's `decide_eval` on one evaluation, carried out in policy order: None to go on,
    STOPPED_EARLY after a STOP (dropped at the `final` evaluation: the run ends anyway), or
    ABORTED when an execute says so."""
    context = self._context()
    decisions = []
    for p in self._policies:
      if not isinstance(p, interfaces.EvalWatcher):
        continue
      d = p.decide_eval(values, context)
      if d is None:
        continue
      if d.action not in (interfaces.ACT, interfaces.STOP):
        raise ValueError(f'{p.name}.decide_eval returned action={d.action!r}; an evaluation '
                         'decision is ACT or STOP.')
      decisions.append(d if d.policy else dataclasses.replace(d, policy=p.name))
    stopped = None
    for d in decisions:
      if d.action == interfaces.STOP and final:
        continue
      stop = self._by_name[d.policy].execute(d, self._run)
      if stop is not None:
        return self.abort(stop, d.trigger or d.policy, d.step)
      if d.action == interfaces.STOP and stopped is None:
        stopped = outcome_lib.Outcome(outcome_lib.Status.STOPPED_EARLY, reason=d.reason,
                                      trigger=d.trigger)
    return stopped

  def at_end(self, step: int) -> Optional[outcome_lib.Outcome]:
    """The last word of the policies that have one (`interfaces.EndCheck`) on a run about to end
    normally: the first decision found ends it with that decision's status (a run whose model
    collapsed after the last probe is 'diverged', never 'completed'), then the loss/output
    check's (a mismatch named at the start and a loss that never came down: 'diverged'), or
    None. A stop here is trouble: its `history` is written first."""
    for p in self._policies:
      d = p.check_at_end(self._run) if isinstance(p, interfaces.EndCheck) else None
      if d is not None:
        self.history.at_end(self._run.emit)  # The doctor reads what came before the verdict.
        return self.abort(d.reason, d.trigger or p.name, step, status=d.status)
    untrained = self.loss_check.at_end(self._run)
    if untrained is not None:  # Named at the start, and the loss never came down.
      self.history.at_end(self._run.emit)
      return self.abort(untrained, 'no_progress', step, status=outcome_lib.Status.DIVERGED.value)
    return None

  def already_stopped(self) -> Optional[outcome_lib.Outcome]:
    """STOPPED_EARLY when a policy's restored state says the run stopped before (the same command
    again after an early stop trains no more); None otherwise."""
    for p in self._policies:
      reason = p.already_stopped() if isinstance(p, interfaces.Stopper) else None
      if reason is not None:
        return outcome_lib.Outcome(outcome_lib.Status.STOPPED_EARLY, reason=reason)
    return None

  def abort(self, reason: str, trigger: str, step: int,
            status: str = '') -> outcome_lib.Outcome:
    """Records a stop (the `abort` event, or `diverged` for status 'diverged') and returns its
    Outcome, which names the last good checkpoint: the one a rerun or an export would take."""
    status = outcome_lib.Status(status or outcome_lib.Status.ABORTED.value)
    good = self._context().last_good_checkpoint()  # Committed; a write in flight is not waited.
    last_good = None if good is None else {'checkpoint': good.path, 'step': good.step}
    if status == outcome_lib.Status.DIVERGED:
      reason += (f'; the last good checkpoint, {good.path} (step {good.step}), is intact'
                 if good is not None else '; no good checkpoint was written')
    self._run.emit('diverged' if status == outcome_lib.Status.DIVERGED else 'abort', step,
                   reason=reason, trigger=trigger, last_good_checkpoint=last_good)
    return outcome_lib.aborted(reason, trigger, status, extra={'last_good_checkpoint': last_good})

  def abort_on_error(self, error: Exception, step: int) -> outcome_lib.Outcome:
    """Records a run that `error`, raised out of its loop after global step `step`, ends (the
    caller raises it on; no checkpoint is written from that state): CheckNumerics(mode='raise')
    (trigger 'check_numerics'), a checkpoint that could not be written ('checkpoint_failed'), or
    TensorFlow failing at run time, an op's error ('runtime_error': its class and line)."""
    if isinstance(error, errors.NumericsError):
      return self.abort(str(error), 'check_numerics', step)
    if isinstance(error, errors.CheckpointError):
      return self.abort(str(error), 'checkpoint_failed', step)
    return self.abort(f'TensorFlow {type(error).__name__} after step {step}: '
                      f'{errors.one_line(error)}', 'runtime_error', step)

  def _execute(self, decision: Decision) -> Optional[str]:
    """Carries out a resolved non-abort decision through the policy named in it; returns an abort
    reason or None to go on."""
    if decision.action == interfaces.CONTINUE:
      return None
    mark = max(decision.step, self._run.step)
    stop = self._by_name[decision.policy].execute(decision, self._run)
    # Marked after executing: a rollback restores last_fault_step with the checkpoint (from
    # before the fault), which would otherwise let the next checkpoints be marked good.
    self._mark_fault(mark)
    return stop


def _ask(policy, reports, context, again: bool = False) -> Optional[Decision]:
  """One policy's `decide` (a `Rechecker`'s `decide_after_act` when asked `again`), named after
  it unless it names another; a STOP is refused."""
  method = 'decide_after_act' if again else 'decide'
  d = getattr(policy, method)(reports, context)
  if d is not None and d.action == interfaces.STOP:
    raise ValueError(f'{policy.name}.{method} returned action={d.action!r}: a stop comes from '
                     'decide_eval (after an evaluation); from decide, ABORT stops the run.')
  # A decision names the policy that carries it out; by default the one that made it.
  return d if d is None or d.policy else dataclasses.replace(d, policy=policy.name)


def _ask_again(policy, reports, context) -> Optional[Decision]:
  """`_ask` again, after the ACTs, on reports the policy has decided on: a state transition in
  `decide_after_act` would run twice, so one is undone and refused."""
  before = [v.numpy() for v in policy.variables]
  d = _ask(policy, reports, context, again=True)
  changed = [v for v, b in zip(policy.variables, before) if not np.array_equal(v.numpy(), b)]
  if changed:
    for v, b in zip(policy.variables, before):
      v.assign(b)
    raise ValueError(
        f'{policy.name}.decide_after_act changed its variables when asked again after its ACT '
        f'({changed[0].name}): it decides each loop twice, so its state transition belongs in '
        'decide, update_state or execute.')
  return d
