"""Recovery policies: the LossSpike detector and the Rollback ladder that brings a diverging run back."""

import logging
import math
from typing import Mapping, Optional, Union

import gin
import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train import errors

log = logging.getLogger('stable_train')


# Default `start_fraction` of each metric. Adam on a model that has converged to float32 round-off
# (loss ~1e-14) turns gradients of pure round-off into full-size steps: the run leaves its minimum
# and comes back within ~100 steps, and when, and how high, the last bits decide (they differ
# between CPUs). Over 54 such clean runs (seeds, learning rates, batch sizes, last-bit changes of
# the initial weights) the loss climbed back to at most 0.25x and the grad norm to at most 1.21x
# its warm-up peak: the gradient norm overshoots where it started, the loss does not.
_START_FRACTIONS = {'loss': 0.5, 'grad_norm': 3.0}


@gin.register(module='stable_train')
class LossSpike(interfaces.Policy):
  """Flags a loss or grad-norm spike: a value more than `num_stds` standard deviations above the
  mean of a rolling window of recent healthy values.

  Only applied, finite, non-spike values enter the window (spikes and non-finite values would
  otherwise widen it and hide the next spike); after warm-up a non-finite applied value is itself
  a spike. A spike must also clear two floors: `min_ratio` × the window mean, and the metric's
  `start_fraction` × its starting level (the highest of its first `warmup` healthy values), so
  the noise of a run that has converged near zero, down to round-off, is never read as a
  divergence. The window lives in checkpointed variables, so a rollback or resume restores it with
  the model. A spike escalates (trigger `loss_spike` or `grad_norm_spike`): a Rollback policy
  takes it over; without one the run stops.
  """

  def __init__(self, *, window: int = 128, num_stds: float = 6.0, warmup: int = 64,
               min_ratio: float = 1.5,
               start_fraction: Union[float, Mapping[str, float], None] = None,
               metrics=('loss', 'grad_norm'), name: str = 'loss_spike'):
    """Initialises the detector.

    Args:
      window: how many recent healthy values each metric's statistics use.
      num_stds: how many standard deviations above the mean count as a spike.
      warmup: how many values the window must hold before the detector is active.
      min_ratio: a spike must also be at least this multiple of the window's mean. A loss that
        converges towards zero has a tiny standard deviation, and without this floor its ordinary
        noise would read as 6-sigma spikes. 1.0 disables it (pure z-score, as Levanter and OLMo).
      start_fraction: a spike must also reach this multiple of the metric's starting level (the
        highest of its first `warmup` healthy values): a divergence climbs back to where the run
        started, while a converged run's excursions stay below it. One number >= 0 for every
        metric (0 disables the floor), or a mapping from metric name to number; None, or a
        metric the mapping leaves out, takes the default: 0.5 for 'loss', 3.0 for 'grad_norm'.
      metrics: which report fields to watch: 'loss' and/or 'grad_norm'.
      name: policy name.
    """
    super().__init__(name=name)
    window = errors.check_int('LossSpike', 'window', window, minimum=2)
    num_stds = errors.check_number('LossSpike', 'num_stds', num_stds, low=0.0, low_open=True,
                                   what='a positive number')
    warmup = errors.check_int('LossSpike', 'warmup', warmup, minimum=2, maximum=window)
    self.min_ratio = errors.check_number('LossSpike', 'min_ratio', min_ratio, low=1.0,
                                         what='a number >= 1')
    metrics = tuple(metrics) if not isinstance(metrics, str) else (metrics,)
    if not metrics or not all(m in _START_FRACTIONS for m in metrics):
      raise errors.ConfigError(
          f"LossSpike: metrics={metrics!r} must be a subset of ('loss', 'grad_norm').")
    self.start_fraction = _start_fractions(start_fraction, metrics)
    self.window, self.num_stds, self.warmup, self.metrics = window, float(num_stds), warmup, metrics
    self.history = tf.Variable(tf.zeros([len(metrics), window], tf.float32), trainable=False,
                               name='history')
    self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name='count')
    # Highest of each metric's first `warmup` healthy values: the run's own scale.
    self.start_level = tf.Variable(tf.zeros([len(metrics)], tf.float32), trainable=False,
                                   name='start_level')
    self.last_spike_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name='last_spike_step')

  def decide(self, reports, context):
    history = self.history.numpy()
    start_level = self.start_level.numpy()
    start_fraction = np.array([self.start_fraction[m] for m in self.metrics])
    count = int(self.count.numpy())
    decision = None
    for i in range(reports.num_steps):
      if not reports.applied[i]:
        continue  # Skipped: never enters the window.
      values = np.array([float(getattr(reports, m)[i]) for m in self.metrics])
      finite = np.isfinite(values)
      filled = min(count, self.window)
      if filled >= self.warmup:
        past = history[:, :filled]
        mean, std = past.mean(axis=1), past.std(axis=1)
        threshold = np.maximum(np.maximum(mean + self.num_stds * std, self.min_ratio * mean),
                               start_fraction * start_level)
        over = [j for j in range(len(values)) if not finite[j] or values[j] > threshold[j]]
        if over:
          j = over[0]
          step = int(reports.step[i])
          self.last_spike_step.assign(step)
          decision = interfaces.Decision(
              action=interfaces.ESCALATE, trigger=f'{self.metrics[j]}_spike', step=step,
              reason=(f'{self.metrics[j]} spike at step {step}: {values[j]:.4g} > '
                      f'{threshold[j]:.4g} (window mean {mean[j]:.4g}, std {std[j]:.3g})'),
              details={'metric': self.metrics[j], 'value': values[j],
                       'threshold': float(threshold[j])})
          break  # What follows a spike is judged after the recovery.
      if not finite.all():
        continue  # Non-finite (applied without a skip policy): never enters the window.
      history[:, count % self.window] = values
      count += 1
      if count == self.warmup:
        # The peak, not the mean: a run that converges fast has left its starting level long
        # before the warm-up ends, and the mean would sit below where it started.
        start_level = history[:, :self.warmup].max(axis=1)
    self.history.assign(history)
    self.count.assign(count)
    self.start_level.assign(start_level)
    return decision


def _start_fractions(start_fraction, metrics):
  """Each metric's `start_fraction` from one number, a mapping by metric name, or None."""
  mapping = isinstance(start_fraction, Mapping)
  if mapping:
    given = dict(start_fraction)
    if not set(given) <= set(_START_FRACTIONS):
      raise errors.ConfigError(f'LossSpike: start_fraction={given!r} must be a mapping with '
                               "keys in ('loss', 'grad_norm').")
  else:
    given = {} if start_fraction is None else {m: start_fraction for m in metrics}
  for metric, value in given.items():
    errors.check_number('LossSpike', f'start_fraction[{metric!r}]' if mapping else
                        'start_fraction', value, low=0.0, what='a number >= 0')
  return {m: float(given.get(m, _START_FRACTIONS[m])) for m in metrics}


@gin.register(module='stable_train')
class Rollback(interfaces.Policy):
  """Restores the newest known-good checkpoint when a run diverges, backs off the learning rate
  and skips the data that led there; gives up after `max_rollbacks`.

  Triggers: another policy's escalation (SkipNonFinite's consecutive skips, a LossSpike) and any
  model or optimizer variable found non-finite after a loop. A further trigger within
  `retry_window` steps of the last rollback's target steps further back, to an older good
  checkpoint. Rollback's own counters are not rolled back with the checkpoint. The newest good
  checkpoint is restored from its copy in memory when the run keeps one (single device), any
  other from disk; the `rollback` event says which (`restored_from`).
  """

  def __init__(self, *, max_rollbacks: int = 5, lr_backoff: float = 0.5,
               divergence_backoff: float = 0.1, probation: int = 100, skip_batches: int = 0,
               retry_window: int = 500, restore_lr_after: Optional[int] = None,
               name: str = 'rollback'):
    """Initialises the policy.

    Args:
      max_rollbacks: rollbacks allowed in a run; one more trigger stops it ("aborted", exit 1).
      lr_backoff: the learning rate is multiplied by this on each rollback; in (0, 1].
      divergence_backoff: the factor instead, when the trigger is a sustained divergence
        (DivergenceCheck's `divergence`, or a failed probation): the rate itself is too high,
        and halving it leaves a ReLU net that the first hot steps killed stuck; in (0, 1].
      probation: after a divergence sends the run back to its start, the median of its last 10
        losses must fall below half the untrained model's loss within this many steps, else it
        counts as the same divergence again (trigger `stalled`; a net the first hot steps
        killed stays near its untrained loss): the ladder backs off until the run trains. 0
        turns it off.
      skip_batches: after a restore the data skips ahead from the restored position through the
        batch that triggered (so none of the batches that led there is replayed), plus this many
        more batches beyond it (PaLM skipped 200-500); >= 0.
      retry_window: a trigger within this many steps after the last rollback's target step counts
        as the same divergence and goes to an older good checkpoint.
      restore_lr_after: after this many steps without a trigger the learning rate returns to its
        original scale; None keeps the backed-off rate.
      name: policy name.
    """
    super().__init__(name=name)
    max_rollbacks = errors.check_int('Rollback', 'max_rollbacks', max_rollbacks)
    self.lr_backoff, self.divergence_backoff = (
        errors.check_number('Rollback', arg, value, low=0.0, low_open=True, high=1.0,
                            what='a number in (0, 1]')
        for arg, value in (('lr_backoff', lr_backoff), ('divergence_backoff', divergence_backoff)))
    self.probation = errors.check_int('Rollback', 'probation', probation)
    skip_batches = errors.check_int('Rollback', 'skip_batches', skip_batches)
    retry_window = errors.check_int('Rollback', 'retry_window', retry_window)
    if restore_lr_after is not None:
      restore_lr_after = errors.check_int('Rollback', 'restore_lr_after', restore_lr_after,
                                          minimum=1)
    self.max_rollbacks = max_rollbacks
    self.skip_batches = skip_batches
    self.retry_window = retry_window
    self.restore_lr_after = restore_lr_after
    self.num_rollbacks = tf.Variable(0, dtype=tf.int64, trainable=False, name='num_rollbacks')
    self.last_target_step = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                        name='last_target_step')
    self.last_trigger_step = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                         name='last_trigger_step')
    # The step a probation ends at (-1: none), kept across the restore like the counters.
    self.probation_until = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                       name='probation_until')
    self._watch = None  # Host side: (probation end, applied losses since the restore).

  # -- when -----------------------------------------------------------------------------------
  def decide(self, reports, context):
    step = int(reports.step[-1])
    finite = reports.variables_finite
    if not (context.variables_finite() if finite is None else finite):
      return interfaces.Decision(action=interfaces.ROLLBACK, policy=self.name,
                                 trigger='non_finite_variable', step=step,
                                 reason=f'a model or optimizer variable is non-finite at step {step}')
    stalled = self._stalled(reports)
    if stalled is not None:
      return stalled
    if (self.restore_lr_after is not None and context.lr_scale < 1.0 and
        step - int(self.last_trigger_step.numpy()) >= self.restore_lr_after):
      return interfaces.Decision(action=interfaces.ACT, policy=self.name, trigger='lr_restored',
                                 step=step, reason=f'{self.restore_lr_after} steps without a trigger')
    return None

  def _stalled(self, reports) -> Optional[interfaces.Decision]:
    """The probation after a divergence sent the run back to its start: a loss that has not
    halved by its end is the same divergence again. Host-side; the end step is a variable."""
    if self._watch is None:  # A new process: the end step from the (restored) variable.
      self._watch = (int(self.probation_until.numpy()), [])
    until, losses = self._watch
    if until < 0:
      return None
    losses.extend(reports.loss[reports.applied & np.isfinite(reports.loss)].tolist())
    step = int(reports.step[-1])
    if len(losses) >= 10 and np.median(losses[-10:]) < 0.5 * losses[0]:
      self.probation_until.assign(-1)  # Trains: the probation is over.
      self._watch = (-1, [])
      return None
    if step < until:
      return None
    self.probation_until.assign(-1)
    self._watch = (-1, [])
    return interfaces.Decision(
        action=interfaces.ROLLBACK, policy=self.name, trigger='stalled', step=step,
        status=interfaces.DIVERGED,
        reason=(f'the loss has not halved in the {self.probation} steps since the rollback to '
                f'the start (median {np.median(losses[-10:]) if losses else math.nan:.4g}, '
                f'untrained {losses[0] if losses else math.nan:.4g}): the learning rate is '
                'still too high'))

  def handle_escalation(self, decision, context):
    del context
    return interfaces.Decision(action=interfaces.ROLLBACK, policy=self.name,
                               trigger=decision.trigger, step=decision.step,
                               reason=decision.reason, details=decision.details,
                               status=decision.status)

  # -- what -----------------------------------------------------------------------------------
  def execute(self, decision, run) -> Optional[str]:
    if decision.action == interfaces.ACT:  # Back to the configured learning rate.
      run.set_lr_scale(1.0)
      run.emit('lr_restored', decision.step, learning_rate=run.learning_rate)
      return None
    from_step = run.step
    done = int(self.num_rollbacks.numpy())
    if not run.has_checkpoints:
      return f'{decision.reason}; no model_dir, so no checkpoint to roll back to'
    if done >= self.max_rollbacks:
      return (f'rollback limit reached ({done} of {self.max_rollbacks}); last trigger: '
              f'{decision.trigger}: {decision.reason}')
    good = run.good_checkpoints()  # A checkpoint still being committed counts.
    # The same divergence again (soon after the last rollback): step further back.
    last_target = int(self.last_target_step.numpy())
    repeat = last_target >= 0 and decision.step - last_target <= self.retry_window
    before = last_target if repeat else decision.step
    candidates = [e for e in good if e.step < before]
    if not candidates and repeat:
      candidates = [e for e in good if e.step <= last_target]
    if not candidates:
      return f'{decision.reason}; no known-good checkpoint before step {before} to roll back to'
    divergence = decision.trigger in ('divergence', 'stalled')
    # Read before the restore brings an older one back.
    scale = run.lr_scale * (self.divergence_backoff if divergence else self.lr_backoff)
    trigger_batch = run.batch_index(decision.step)
    entry = run.restore(candidates)
    if entry is None:
      return f'{decision.reason}; every known-good checkpoint failed to restore'
    # Everything after the target belongs to the abandoned timeline: never a target again.
    run.mark_not_good_after(entry.step)
    # The restore brought back this policy's old counters too: set them past this rollback.
    self.num_rollbacks.assign(done + 1)
    self.last_target_step.assign(entry.step)
    self.last_trigger_step.assign(decision.step)
    until = entry.step + self.probation if divergence and entry.step == 0 and self.probation else -1
    self.probation_until.assign(until)
    self._watch = (until, [])
    run.set_lr_scale(scale)
    # A gradient-norm spike: exploding gradients get a fixed ceiling at the run's healthy norm.
    ceiling = (decision.details.get('threshold')
               if decision.details.get('metric') == 'grad_norm' else None)
    if ceiling is not None and not run.set_norm_ceiling(ceiling):
      ceiling = None
    skipped = run.skip_data(max(trigger_batch + 1 + self.skip_batches - run.data_position, 0))
    run.emit('rollback', from_step, to_step=entry.step, checkpoint=entry.path,
             trigger=decision.trigger, reason=decision.reason, rollback=done + 1,
             learning_rate=run.learning_rate, lr_scale=scale, skipped_batches=list(skipped),
             restored_from=run.restored_from, norm_ceiling=ceiling)
    run.write_scalars(from_step, {'rollbacks': done + 1, 'learning_rate': run.learning_rate})
    log.warning('rollback %d: step %d -> %d (%s); learning rate x%g; skipped batches [%d, %d)',
                done + 1, from_step, entry.step, decision.trigger, scale, *skipped)
    return None

  def summary(self):
    return {'rollbacks': int(self.num_rollbacks.numpy())}
