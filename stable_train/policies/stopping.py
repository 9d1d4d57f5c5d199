"""Policies that read evaluations: BestCheckpoint (marks the best checkpoint) and EarlyStopping.

Both act after each evaluation of `fit(eval_dataset=...)` through `decide_eval` (`EvalWatcher`): it
reads the monitored value, updates the policy's own variables (best value, its step, evaluations
without improvement: checkpointed, so a resumed run goes on counting) and returns a decision that
`execute` carries out (mark the checkpoint of this step `best` in the manifest; record an early
stop).
"""

import logging
import math
from typing import Dict, Optional, Sequence

import gin
import tensorflow as tf

from stable_train.core import interfaces
from stable_train import errors

log = logging.getLogger('stable_train')

MODES = ('auto', 'min', 'max')
# Under mode='auto' a monitor whose name holds one of these is maximised; any other is minimised.
_HIGHER_IS_BETTER = ('acc', 'auc', 'precision', 'recall', 'f1', 'iou')


def available_monitors(metric_names: Sequence[str]) -> list:
  """The names `decide_eval` values carry: 'eval_loss', 'eval_<metric>' for each metric, and the
  training metrics' own names (their latest window)."""
  return ['eval_loss'] + [f'eval_{m}' for m in metric_names] + list(metric_names)


def monitored_values(result: Dict, train_metrics: Dict[str, float]) -> Dict[str, float]:
  """The values of one evaluation (`Controller.evaluate`'s result) and the training metrics' latest
  window under the names of `available_monitors`."""
  values = {'eval_loss': float(result['loss'])}
  values.update({f'eval_{k}': float(v) for k, v in result['metrics'].items()})
  values.update({k: float(v) for k, v in train_metrics.items()})
  return values


@gin.register(module='stable_train')
class BestCheckpoint(interfaces.Policy):
  """Marks the checkpoint of the best evaluation so far `best` in the checkpoint manifest.

  After each evaluation that improves the monitored value by more than `min_delta`, the checkpoint
  of that step (written then if the step has none since the last restore) is marked `best`;
  rotation keeps it while it is the best, and `export.py --checkpoint=best` exports it. A
  checkpoint that is refused (a non-finite variable) is never marked. Without a model_dir only the
  best value and step are kept. One BestCheckpoint (or EarlyStopping, which is one) per Trainer.
  """

  summary_key = 'best_checkpoint'

  def __init__(self, *, monitor: str = 'eval_loss', mode: str = 'auto', min_delta: float = 0.0,
               name: str = 'best_checkpoint'):
    """Initialises the policy.

    Args:
      monitor: the value to watch: 'eval_loss', 'eval_<metric name>' (e.g.
        'eval_sparse_categorical_accuracy') or a training metric's name (its latest window).
      mode: 'min' (lower is better), 'max', or 'auto' ('max' when the name holds 'acc', 'auc',
        'precision', 'recall', 'f1' or 'iou'; otherwise 'min').
      min_delta: an improvement is a change in the better direction by more than this; >= 0.
      name: policy name (unique within a Trainer; also its checkpoint key).
    """
    super().__init__(name=name)
    cls = type(self).__name__
    if not isinstance(monitor, str) or not monitor.strip():
      raise errors.ConfigError(f"{cls}: monitor={monitor!r} must be a non-empty name, e.g. "
                               "'eval_loss'.")
    errors.check_choice(cls, 'mode', mode, MODES)
    min_delta = errors.check_number(cls, 'min_delta', min_delta, low=0.0,
                                    what='a finite number >= 0')
    self.monitor = monitor
    if mode == 'auto':
      mode = 'max' if any(k in monitor.lower() for k in _HIGHER_IS_BETTER) else 'min'
    self.mode = mode
    self.min_delta = float(min_delta)
    # NaN: no evaluation yet. Checkpointed: a resumed run compares with the best before it.
    self.best_value = tf.Variable(math.nan, dtype=tf.float64, trainable=False, name='best_value')
    self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name='best_step')
    self.evals_without_improvement = tf.Variable(0, dtype=tf.int64, trainable=False,
                                                 name='evals_without_improvement')

  # -- when -----------------------------------------------------------------------------------
  def check_monitor(self, available: Sequence[str]) -> None:
    """Raises a one-line ConfigError if `monitor` is not one of `available`."""
    if self.monitor not in available:
      raise errors.ConfigError(
          f'{type(self).__name__}: monitor={self.monitor!r} is not a value the evaluation '
          f'gives; available: {", ".join(available)}.')

  def improves(self, value: float) -> bool:
    """Whether `value` beats the best so far by more than `min_delta` (never when non-finite)."""
    if not math.isfinite(value):
      return False
    best = float(self.best_value.numpy())
    if math.isnan(best):
      return True
    if self.mode == 'min':
      return value < best - self.min_delta
    return value > best + self.min_delta

  def decide_eval(self, values, context):
    self.check_monitor(list(values))
    value, step = float(values[self.monitor]), context.step
    if self.improves(value):
      previous = float(self.best_value.numpy())
      self.best_value.assign(value)
      self.best_step.assign(step)
      self.evals_without_improvement.assign(0)
      return interfaces.Decision(
          action=interfaces.ACT, policy=self.name, trigger='best_checkpoint', step=step,
          details={'monitor': self.monitor, 'value': value,
                   'previous': None if math.isnan(previous) else previous})
    self.evals_without_improvement.assign_add(1)
    return self.no_improvement(value, step)

  def no_improvement(self, value: float, step: int) -> Optional[interfaces.Decision]:
    """The decision after an evaluation that did not improve (None here; EarlyStopping stops)."""
    del value, step
    return None

  # -- what -----------------------------------------------------------------------------------
  def execute(self, decision, run) -> Optional[str]:
    """Marks the checkpoint of this step best (writing it first if needed) and records it."""
    if decision.trigger != 'best_checkpoint':
      raise NotImplementedError(f'{type(self).__name__} cannot carry out {decision.trigger!r}')
    details = decision.details
    entry = run.checkpoint_now('best') if run.has_checkpoints else None
    if entry is not None:
      entry = run.mark_best(entry)
    fields = dict(monitor=details['monitor'], value=details['value'],
                  previous=details['previous'], checkpoint=entry.path if entry else None)
    if entry is None and run.has_checkpoints:
      fields['note'] = 'checkpoint refused (a non-finite variable): not marked'
    run.emit('best_checkpoint', decision.step, **fields)
    return None

  def check_fit(self, *, metric_names, has_eval) -> None:
    """Before training: evaluations, and a monitor they give."""
    if not has_eval:
      raise errors.ConfigError(
          f'{type(self).__name__}({self.monitor!r}) acts on evaluations, but fit has no '
          'eval_dataset; pass eval_dataset= and eval_every= (train.eval_dataset_fn, '
          'train.eval_every).')
    self.check_monitor(available_monitors(metric_names))

  def summary(self):
    best = float(self.best_value.numpy())
    return {self.summary_key: {
        'monitor': self.monitor, 'mode': self.mode,
        'best': None if math.isnan(best) else best,
        'best_step': int(self.best_step.numpy()) if not math.isnan(best) else None,
        'evals_without_improvement': int(self.evals_without_improvement.numpy())}}


@gin.register(module='stable_train')
class EarlyStopping(BestCheckpoint):
  """Stops the run cleanly when the monitored eval value has not improved for `patience` evals.

  A BestCheckpoint (the checkpoint of each improvement is marked `best`) that, once `patience`
  evaluations in a row have not improved the monitored value by more than `min_delta`, ends the
  run: status 'stopped_early', its reason in the summary ('early stopping: eval_loss did not
  improve by more than 0 for 3 evaluations; best 0.12 at step 400'), an `early_stop` event, CLI
  exit code 0. Its state (best value and step, evaluations without improvement) is checkpointed,
  so a resumed run goes on counting.
  """

  summary_key = 'early_stopping'

  def __init__(self, *, monitor: str = 'eval_loss', patience: int = 5, min_delta: float = 0.0,
               mode: str = 'auto', name: str = 'early_stopping'):
    """Initialises the policy.

    Args:
      monitor: see `BestCheckpoint` ('eval_loss', 'eval_<metric name>', a training metric name).
      patience: evaluations in a row without improvement that stop the run; an integer >= 1.
      min_delta: see `BestCheckpoint`; >= 0.
      mode: 'auto', 'min' or 'max' (see `BestCheckpoint`).
      name: policy name.
    """
    patience = errors.check_int('EarlyStopping', 'patience', patience, minimum=1)
    super().__init__(monitor=monitor, mode=mode, min_delta=min_delta, name=name)
    self.patience = patience

  def stop_reason(self) -> Optional[str]:
    """Why the run stops, once `patience` evaluations in a row have not improved (the restored
    count included: a run resumed after it stopped early stops again at once); else None."""
    waited = int(self.evals_without_improvement.numpy())
    if waited < self.patience:
      return None
    best, best_step = float(self.best_value.numpy()), int(self.best_step.numpy())
    best_text = (f'best {best:.6g} at step {best_step}' if not math.isnan(best)
                 else 'no finite value yet')
    return (f'early stopping: {self.monitor} did not improve by more than {self.min_delta:g} '
            f'for {waited} evaluations; {best_text}')

  def no_improvement(self, value, step):
    reason = self.stop_reason()
    if reason is None:
      return None
    return interfaces.Decision(
        action=interfaces.STOP, policy=self.name, trigger='early_stop', step=step, reason=reason,
        details={'monitor': self.monitor, 'value': value,
                 'best': float(self.best_value.numpy()), 'best_step': int(self.best_step.numpy()),
                 'evals_without_improvement': int(self.evals_without_improvement.numpy())})

  def execute(self, decision, run):
    if decision.action != interfaces.STOP:
      return super().execute(decision, run)
    details = decision.details
    run.emit('early_stop', decision.step, reason=decision.reason, monitor=details['monitor'],
             value=details['value'], best=details['best'], best_step=details['best_step'],
             evals_without_improvement=details['evals_without_improvement'])
    log.info('step %d: %s', decision.step, decision.reason)
    return None

  def already_stopped(self) -> Optional[str]:
    return self.stop_reason()
