"""Evaluation during a run: the cadence (`EvalAction`), the eval-divergence fault and the policies'
`decide_eval` on each result."""

import logging
import math
from typing import Any, Callable, Dict, Optional

from stable_train.core import interfaces
from stable_train.core import outcome as outcome_lib
from stable_train.policies import stopping
from stable_train.runfiles import events as events_lib

log = logging.getLogger('stable_train')


class EvalDivergence:
  """An evaluation whose loss is non-finite, or above `factor` times the best eval loss of this
  fit so far, is a fault (trigger `eval_divergence`); None: only a non-finite one."""

  def __init__(self, factor: Optional[float]):
    self.factor = factor
    self.best: Optional[float] = None

  def check(self, result: Dict[str, Any]) -> Optional[interfaces.Decision]:
    """An ESCALATE decision for a diverged evaluation; None (and the best updated) otherwise."""
    loss, best, factor = result['loss'], self.best, self.factor
    if not math.isfinite(loss):
      why = f'eval loss {loss} is non-finite'
    elif best is not None and factor is not None and loss > factor * max(best, 1e-12):
      why = f'eval loss {loss:.5g} is above {factor:g} x the best {best:.5g}'
    else:
      self.best = loss if best is None else min(best, loss)
      return None
    return interfaces.Decision(action=interfaces.ESCALATE, trigger='eval_divergence',
                               step=result['step'], reason=why)


class EvalAction:
  """Evaluates every `every` steps (when the global step crosses a multiple of it, at loop ends)
  and at the end of a run that ended normally; a divergence goes to the dispatcher as a fault,
  any other result to the policies' `decide_eval`.

  A signal during an evaluation gives it up and stops the run there (`signal`): the checkpoint
  then records the evaluation as due (`manifest.Entry.eval_due`), and the resumed run does it
  first, so the policies see the evaluations of an uninterrupted run.
  """

  def __init__(self, *, evaluator, dataset, every: Optional[int], steps: Optional[int],
               trainer, dispatcher, scalars: events_lib.Scalars,
               train_metrics: Callable[[], Dict[str, float]], start_step: int,
               mark_fault: Callable[[int], None], signal=None, checkpoints=None):
    """Args: evaluator: the `evaluation.Evaluator`; dataset, every, steps: fit's eval arguments;
    trainer: the Trainer (emit, verbose, eval_divergence_factor); dispatcher: the run's
    `dispatch.Dispatcher`; scalars: the eval TensorBoard run; train_metrics: () -> the training
    metrics' latest window; start_step: the step the fit starts at; mark_fault: the run's fault
    mark (`host.RunHost.mark_fault`), set by a diverged final evaluation; signal: the run's
    `signal_action.SignalAction` (None: an evaluation is never given up); checkpoints: the run's
    `checkpoint_action.RunCheckpoints`, whose checkpoints then record whether the evaluation at
    their step is still due, and whose good marks a bad final evaluation takes back."""
    self._evaluator = evaluator
    self._signal = signal
    self._checkpoints = checkpoints
    if checkpoints is not None:
      checkpoints.eval_due = self.due
    self._dataset, self._every, self._steps = dataset, every, steps
    self._trainer = trainer
    self._dispatch = dispatcher
    self._scalars = scalars
    self._train_metrics = train_metrics
    self._mark_fault = mark_fault
    self._divergence = EvalDivergence(trainer.eval_divergence_factor)
    self._last_step = start_step
    self.last: Optional[Dict[str, Any]] = None  # The last evaluation's result.

  def due(self, step: int) -> bool:
    self._last_step = min(self._last_step, step)  # A rollback moved the step back.
    return self._every is not None and step // self._every > self._last_step // self._every

  def run(self, step: int) -> Optional[outcome_lib.Outcome]:
    """Evaluates; a divergence is carried out as a fault, else the policies decide on it."""
    result = self.evaluate(step)
    if result is None:  # A signal came: the run stops here, this evaluation due.
      return self._signal.run(step)
    self._last_step = step
    diverged = self._divergence.check(result)
    if diverged is not None:  # A fault like any other: a Rollback acts on it.
      return self._dispatch.carry_out(diverged)
    return self._dispatch.after_eval(self._values(result))

  def resume(self, restored) -> Optional[outcome_lib.Outcome]:
    """Before training: the evaluation the restored checkpoint left due at its step (a signal
    stopped the run before it, or during it: `manifest.Entry.eval_due`); None (and nothing run)
    when there is none."""
    if restored is None or not restored.eval_due:
      return None
    self._last_step = -1  # Due until it has run (a signal during it: the checkpoint says so).
    return self.run(restored.step)

  def final(self, step: int) -> Optional[outcome_lib.Outcome]:
    """The end-of-run evaluation (unless this step was just evaluated); a divergence leaves the
    final checkpoint not good (no steps are left to recover in); a STOP is dropped."""
    if self.last is not None and self.last['step'] == step:
      return None
    result = self.evaluate(step)
    if result is None:  # A signal came: the rerun evaluates at this step, at its end.
      return self._signal.run(step)
    diverged = self._divergence.check(result)
    if diverged is None:
      return self._dispatch.after_eval(self._values(result), final=True)
    self._mark_fault(step)
    keeper = self._checkpoints.keeper if self._checkpoints is not None else None
    if keeper is not None:  # An interval checkpoint of this step came before the evaluation.
      keeper.mark_bad(after_step=step - 1)
    self._trainer.emit('eval_divergence', step, reason=diverged.reason,
                       handled='final checkpoint not good')
    return None

  def evaluate(self, step: int) -> Optional[Dict[str, Any]]:
    """Evaluates on the fit's eval data; records it (event, log line, eval TensorBoard run).
    None, and nothing recorded, when a signal came during it."""
    t = self._trainer
    stop = None if self._signal is None else lambda: self._signal.due(step)
    result = self._evaluator.evaluate(self._dataset, self._steps, stop=stop)
    if result is None:
      return None
    result = dict(step=step, **result)
    self.last = result
    left_out = {'left_out': result['left_out']} if 'left_out' in result else {}
    t.emit('eval', step, loss=result['loss'], batches=result['batches'],
           metrics=result['metrics'], **left_out)
    if left_out:
      log.warning('step %d: eval left out %d batch(es) with a non-finite or fill-sized input%s', step,
                  left_out['left_out'], '' if t.label_classes is None
                  else f' or a label outside [0, {t.label_classes})')
    if t.verbose:
      shown = ''.join(f'  {k} {v:.4g}' for k, v in result['metrics'].items())
      log.info('step %d  eval loss %.5g%s  (%d batches)', step, result['loss'], shown,
               result['batches'])
    values = {'loss': result['loss']}
    values.update({f'metrics/{k}': v for k, v in result['metrics'].items()})
    self._scalars.write(step, values)
    return result

  def _values(self, result: Dict[str, Any]) -> Dict[str, float]:
    return stopping.monitored_values(result, self._train_metrics())
