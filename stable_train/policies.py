"""The core policies: CheckNumerics, ClipByGlobalNorm and SkipNonFinite."""

import logging
from typing import Optional

import tensorflow as tf

from stable_train import errors
from stable_train import interfaces
from stable_train import numerics
from stable_train import step as step_lib

log = logging.getLogger('stable_train')


class CheckNumerics(interfaces.Policy):
  """Checks the loss and every gradient each step and names the first offending tensor.

  In 'flag' mode a non-finite value is logged and recorded (the step's apply/skip decision is left
  to SkipNonFinite). In 'raise' mode the run stops with a `NumericsError` naming the tensor: inside
  the step through `tf.debugging.check_numerics`, and, because that op lets NaN pass silently under
  XLA, also on the host from the step's finite flags.
  """

  MODES = ('flag', 'raise')

  def __init__(self, *, mode: str = 'flag', name: str = 'check_numerics'):
    """Initialises the policy.

    Args:
      mode: 'flag' (log and record, keep going) or 'raise' (stop with a clear error).
      name: policy name (unique within a Trainer; also its checkpoint key).
    """
    super().__init__(name=name)
    if mode not in self.MODES:
      raise errors.ConfigError(
          f"CheckNumerics: mode={mode!r} is not one of {self.MODES}; use 'flag' or 'raise'.")
    self.mode = mode

  def end_step(self, batch, report):
    if self.mode != 'raise':
      return None
    # End the loop at the faulty step, so the host raises before any later step runs (under XLA
    # the in-graph check cannot raise).
    del batch
    return step_lib.is_fault(report)

  def allow_update(self, stats):
    if self.mode != 'raise':
      return None
    # Under XLA the raise happens on the host after the step: the step itself must not apply.
    return tf.logical_and(stats['loss_finite'], stats['grads_finite'])

  def transform_gradients(self, grads, stats):
    if self.mode != 'raise' or stats['xla']:
      return grads
    if stats['loss_scaled']:
      # An fp16 overflow gives non-finite gradients that are no fault: the host raises on real
      # faults only (the update is vetoed by allow_update either way).
      tf.debugging.check_numerics(stats['loss'], 'non-finite loss')
      return grads
    # check_numerics aborts the whole tf.function call, so the update is never applied.
    tf.debugging.check_numerics(stats['loss'], 'non-finite loss')
    return [
        tf.debugging.check_numerics(g, f'non-finite gradient of {path}')
        for g, path in zip(grads, stats['variable_paths'])
    ]

  def decide(self, reports, context):
    for i in range(reports.num_steps):
      if reports.fault(i) in (None, 'overflow'):
        continue
      step = int(reports.step[i])
      tensor = reports.offending_tensor(i)
      if self.mode == 'raise':
        raise errors.NumericsError(
            f'non-finite value at step {step}: {tensor} (loss={reports.loss[i]}); '
            "CheckNumerics(mode='raise') stops here; use mode='flag' with SkipNonFinite to skip it.")
      log.warning('step %d: non-finite %s fault, first offending tensor: %s',
                  step, reports.fault(i), tensor)
    return None


class ClipByGlobalNorm(interfaces.Policy):
  """Clips the aggregated gradients by their global norm (overflow-safe for huge finite values)."""

  def __init__(self, *, max_norm: float = 1.0, name: str = 'clip_by_global_norm'):
    """Initialises the policy.

    Args:
      max_norm: the largest global norm allowed; a positive finite number.
      name: policy name.
    """
    super().__init__(name=name)
    try:
      value = float(max_norm)
    except (TypeError, ValueError):
      value = float('nan')
    if not value > 0 or value == float('inf'):
      raise errors.ConfigError(
          f'ClipByGlobalNorm: max_norm={max_norm!r} must be a positive finite number, e.g. 1.0.')
    # Configuration, not state: a plain float, so a resumed run uses the value configured now.
    self.max_norm = value

  def transform_gradients(self, grads, stats):
    clipped, _, after = numerics.clip_by_global_norm(
        grads, self.max_norm, norm=stats['grad_norm'], all_finite=stats['grads_finite'])
    stats['clipped_grad_norm'] = after
    return clipped


class SkipNonFinite(interfaces.Policy):
  """Skips the update when the loss or any gradient is non-finite; escalates after too many in a row.

  A skipped step leaves every model and optimizer variable (slots, iteration count) bit-identical.
  """

  def __init__(self, *, max_consecutive: int = 10, name: str = 'skip_non_finite'):
    """Initialises the policy.

    Args:
      max_consecutive: how many consecutive skips are tolerated; one more escalates (the run aborts,
        or a recovery policy such as Rollback takes over). A non-negative integer.
      name: policy name.
    """
    super().__init__(name=name)
    self.max_consecutive = errors.check_int('SkipNonFinite', 'max_consecutive', max_consecutive)
    self.total_skips = tf.Variable(0, dtype=tf.int64, trainable=False, name='total_skips')
    self.consecutive_skips = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name='consecutive_skips')
    # The longest run of consecutive skips since the host last looked: with several steps per
    # loop a run can exceed the limit and end inside one loop.
    self.peak_consecutive = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name='peak_consecutive')

  def allow_update(self, stats):
    return tf.logical_and(stats['loss_finite'], stats['grads_finite'])

  def update_state(self, report, applied):
    # An fp16 overflow skip is the loss scale's (DynamicLossScale): it counts towards no limit.
    overflow = report.get('overflow', tf.constant(False))
    skipped = tf.cast(tf.logical_and(tf.logical_not(applied), tf.logical_not(overflow)), tf.int64)
    self.total_skips.assign_add(skipped)
    self.consecutive_skips.assign((self.consecutive_skips + skipped) * skipped)
    self.peak_consecutive.assign(tf.maximum(self.peak_consecutive, self.consecutive_skips))

  def decide(self, reports, context):
    consecutive = int(self.peak_consecutive.numpy())
    self.peak_consecutive.assign(self.consecutive_skips)
    if consecutive > self.max_consecutive:
      last = reports.num_steps - 1
      return interfaces.Decision(
          action=interfaces.ESCALATE, trigger='consecutive_skips',
          step=int(reports.step[last]),
          reason=(f'{consecutive} consecutive non-finite steps (limit {self.max_consecutive}), '
                  f'last offending tensor: {reports.offending_tensor(last)}'))
    return None

  def is_healthy(self) -> bool:
    return int(self.consecutive_skips.numpy()) == 0
