"""The core policies: CheckNumerics, ClipByGlobalNorm, SkipNonFinite and ValidateInputs.

Every policy class is registered with gin where it is defined (`@gin.register`): a new policy is
one class in one file plus its gin line.
"""

import logging
from typing import List, Optional, Tuple

import gin
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train.core import state as state_lib
from stable_train import errors

log = logging.getLogger('stable_train')


@gin.register(module='stable_train')
class CheckNumerics(interfaces.Policy):
  """Checks the loss and every gradient each step and names the first offending tensor.

  In 'flag' mode a non-finite value is logged and recorded (the step's apply/skip decision is left
  to SkipNonFinite). In 'raise' mode the run stops with a `NumericsError` naming the tensor: inside
  the step through `tf.debugging.check_numerics`, and, because that op lets NaN pass silently under
  XLA, also on the host from the step's finite flags.
  """

  MODES = ('flag', 'raise')
  decides_on_clean_loops = False  # It reports faulty steps only.

  def __init__(self, *, mode: str = 'flag', check_inputs: bool = True,
               name: str = 'check_numerics'):
    """Initialises the policy.

    Args:
      mode: 'flag' (log and record, keep going) or 'raise' (stop with a clear error).
      check_inputs: whether every floating input tensor (features and labels) must be finite
        and below 1e30 in magnitude (`numerics.input_ok`: a larger value is a fill): two
        integer reductions over its bits each per step; a batch that fails is not applied and
        counts as an *input* fault (the data's, not the model's: checkpoints after it may
        still be marked good).
      name: policy name (unique within a Trainer; also its checkpoint key).
    """
    super().__init__(name=name)
    self.mode = errors.check_choice('CheckNumerics', 'mode', mode, self.MODES,
                                    hint="use 'flag' or 'raise'")
    if not isinstance(check_inputs, bool):
      raise errors.ConfigError(f'CheckNumerics: check_inputs={check_inputs!r} must be True or '
                               'False.')
    self.check_inputs = check_inputs
    self._paths = []  # The trainable variables' names (`build`), for the in-graph raise.

  @property
  def uses_end_step(self) -> bool:
    return self.mode == 'raise'  # 'flag' mode ends no loop: the step returns no report dict.

  @property
  def updates_after_apply(self) -> bool:
    return self.mode == 'raise'  # Its in-graph raise must find the forward state put back.

  def end_step(self, batch, report):
    if self.mode != 'raise':
      return None
    # End the loop at the faulty step, so the host raises before any later step runs (under XLA
    # the in-graph check cannot raise).
    del batch
    return interfaces.step_faulty(report)

  def summary(self):
    return {'inputs_checked': self.check_inputs}  # For the doctor: inputs passed a finite check.

  def check_batch(self, features, labels):
    if not self.check_inputs:
      return None
    # Same order as interfaces.flatten_inputs: features first, then labels.
    return tf.stack([numerics.input_ok(t) for t in interfaces.flatten_inputs(features, labels)])

  def allow_update(self, stats):
    if self.mode != 'raise':
      return None
    # Under XLA the raise happens on the host after the step: the step itself must not apply.
    return tf.logical_and(stats['loss_finite'], stats['grads_finite'])

  def build(self, variables, variable_paths):
    del variables
    self._paths = list(variable_paths)

  def update_state(self, report, applied):
    if self.mode != 'raise':
      return None
    del applied
    # check_numerics aborts the whole tf.function call. Here, after the skip that allow_update
    # forced, the forward pass's assigns (BatchNorm statistics, seed generators) are undone: the
    # state is the one the step found, and nothing is counted. Under XLA the op does not raise
    # (the host does, from the report). An fp16 overflow is no fault.
    grads_ok = tf.logical_or(report['grad_finite_flags'], report['overflow'])
    checked = [tf.debugging.check_numerics(report['loss'], 'non-finite loss')] + [
        tf.debugging.check_numerics(tf.where(grads_ok[i], 0.0, float('nan')),
                                    f'non-finite gradient of {path}')
        for i, path in enumerate(self._paths)]
    return tf.logical_not(tf.reduce_all(tf.math.is_finite(tf.stack(
        [tf.cast(c, tf.float32) for c in checked]))))

  def decide(self, reports, context):
    del context
    faults = [(int(reports.step[i]), reports.fault(i), reports.offending_tensor(i),
               float(reports.loss[i]))
              for i in range(reports.num_steps) if reports.fault(i) not in (None, 'overflow')]
    if not faults:
      return None
    return interfaces.Decision(action=interfaces.ACT, policy=self.name, trigger='check_numerics',
                               step=faults[0][0], details={'faults': faults})

  def execute(self, decision, run):
    """Logs each faulty step ('flag'), or raises `NumericsError` on the first one ('raise')."""
    del run
    for step, fault, tensor, loss in decision.details['faults']:
      if self.mode == 'raise':
        raise errors.NumericsError(
            f'non-finite value at step {step}: {tensor} (loss={loss}); '
            "CheckNumerics(mode='raise') stops here; use mode='flag' with SkipNonFinite to skip it.")
      what = ('bad input (the batch failed an input check)' if fault == 'input' else
              f'non-finite {fault}')
      log.warning('step %d: %s, first offending tensor: %s', step, what, tensor)
    return None


@gin.register(module='stable_train')
class ClipByGlobalNorm(interfaces.Policy):
  """Clips the aggregated gradients by their global norm (overflow-safe for huge finite values)."""

  def __init__(self, *, max_norm: float = 1.0, name: str = 'clip_by_global_norm'):
    """Initialises the policy.

    Args:
      max_norm: the largest global norm allowed; a positive finite number.
      name: policy name.
    """
    super().__init__(name=name)
    # Configuration, not state: a plain float, so a resumed run uses the value configured now.
    self.max_norm = errors.check_number('ClipByGlobalNorm', 'max_norm', max_norm, low=0.0,
                                        low_open=True,
                                        what='a positive finite number, e.g. 1.0')

  def transform_gradients(self, grads, stats):
    norm, finite = stats['grad_norm'], stats['grads_finite']
    clipped, _, after = numerics.clip_by_global_norm(grads, self.max_norm, norm=norm,
                                                     all_finite=finite, xla=stats['xla'])
    # Exact stats of the output, so the guard measures nothing again: the norm is clipped; a NaN
    # norm (some gradient is NaN) makes every gradient NaN, otherwise finiteness is unchanged.
    stats['grad_norm'] = after
    stats['grads_finite'] = finite
    stats['grad_finite_flags'] = tf.logical_and(stats['grad_finite_flags'],
                                                tf.logical_not(tf.math.is_nan(norm)))
    return clipped


@gin.register(module='stable_train')
class SkipNonFinite(interfaces.Policy):
  """Skips the update when the loss or any gradient is non-finite; escalates after too many in a row.

  A skipped step leaves every model and optimizer variable (slots, iteration count) bit-identical.
  Every skip counts into the streak, a batch that failed an input check too (data that fails on
  every batch aborts the run). Health is the run's fault mark, not this policy's: a non-finite
  step keeps the checkpoints of the next `healthy_window` steps from being marked good; a skipped
  bad batch does not (the state is as it was).
  """

  # On a clean loop the streak is 0 and `peak_consecutive` holds at most a streak already found
  # within the limit (`decide` resets it only when it looks): no escalation is possible, and a
  # later streak is compared by the max, so the stale value can never trigger one.
  decides_on_clean_loops = False

  def __init__(self, *, max_consecutive: int = 10, max_share: Optional[float] = 0.5,
               share_window: int = 50, name: str = 'skip_non_finite'):
    """Initialises the policy.

    Args:
      max_consecutive: how many consecutive skips are tolerated; one more escalates (the run aborts,
        or a recovery policy such as Rollback takes over). A non-negative integer.
      max_share: the share of the last `share_window` steps that may be skipped for a fault of
        the model (a batch that failed an input check is the data's, not counted); more escalates
        like a streak: a run that skips half its batches, scattered, does not train on them, and
        must not end 'completed'. None: no limit. In (0, 1].
      share_window: the steps the share is taken over (judged once that many steps have run).
      name: policy name.
    """
    super().__init__(name=name)
    self.max_consecutive = errors.check_int('SkipNonFinite', 'max_consecutive', max_consecutive)
    self.max_share = errors.check_number('SkipNonFinite', 'max_share', max_share, low=0.0,
                                         high=1.0, low_open=True, allow_none=True)
    self.share_window = errors.check_int('SkipNonFinite', 'share_window', share_window, minimum=1)
    self._fault_steps: List[int] = []  # Host side: the recent model-fault skips' steps.
    self.total_skips = tf.Variable(0, dtype=tf.int64, trainable=False, name='total_skips')
    self.consecutive_skips = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name='consecutive_skips')
    # The longest run of consecutive skips since the host last looked: with several steps per
    # loop a run can exceed the limit and end inside one loop.
    self.peak_consecutive = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name='peak_consecutive')

  def allow_update(self, stats):
    return tf.logical_and(stats['loss_finite'], stats['grads_finite'])

  def observed_variables(self):
    return [self.total_skips, self.consecutive_skips, self.peak_consecutive]

  def observe(self, reports) -> bool:
    """Counts the loop's skips on the host (a `LoopObserver`: nothing in the step). Only a
    faulty step counts: an fp16 overflow skip is the loss scale's (DynamicLossScale), and a veto
    on finite values (OutlierSkip) is that policy's; neither ends a streak either."""
    if reports.clean():  # Every step applied: no skip, and any streak is over.
      if state_lib.host_value(self.consecutive_skips, reports):
        state_lib.host_assign(self.consecutive_skips, 0)
      return False
    finite = reports.inputs_finite & reports.loss_finite & reports.grads_finite
    skipped = ~reports.applied & ~finite & ~reports.overflow  # `step_faulty`, on the host.
    consecutive, peak = (int(state_lib.host_value(v, reports))
                         for v in (self.consecutive_skips, self.peak_consecutive))
    for applied, counts in zip(reports.applied.tolist(), skipped.tolist()):
      consecutive = 0 if applied else consecutive + counts
      peak = max(peak, consecutive)
    total = int(state_lib.host_value(self.total_skips, reports)) + int(skipped.sum())
    for v, value in ((self.total_skips, total), (self.consecutive_skips, consecutive),
                     (self.peak_consecutive, peak)):
      state_lib.host_assign(v, value)
    return False

  def decide(self, reports, context):
    consecutive = int(self.peak_consecutive.numpy())
    # The streak carries into the next loop (it may go on there), unless it is escalated now:
    # then it has been reported, and a later fit must not report it again.
    self.peak_consecutive.assign(
        0 if consecutive > self.max_consecutive else int(self.consecutive_skips.numpy()))
    if consecutive > self.max_consecutive:
      last = reports.num_steps - 1
      skipped = [i for i in range(reports.num_steps) if not reports.applied[i]] or [last]
      # A streak that ends on batches that failed an input check is the data's, not NaN.
      what = 'skipped steps' if reports.fault(skipped[-1]) == 'input' else 'non-finite steps'
      return interfaces.Decision(
          action=interfaces.ESCALATE, trigger='consecutive_skips',
          step=int(reports.step[last]),
          reason=(f'{consecutive} consecutive {what} (limit {self.max_consecutive}), last '
                  f'offending tensor: {reports.offending_tensor(skipped[-1])}'))
    return self._share_decision(reports)

  def _share_decision(self, reports) -> Optional[interfaces.Decision]:
    """ESCALATE when the model-fault skips of the last `share_window` steps exceed `max_share`
    of them. Only a loop with a fault is decided on, and only its faults are added: a clean loop
    adds nothing. The steps are kept on the host (a resumed run counts afresh; a rollback's
    earlier step drops the later ones)."""
    if self.max_share is None:
      return None
    last = reports.num_steps - 1
    step = int(reports.step[last])
    faulty = [int(reports.step[i]) for i in range(reports.num_steps)
              if not reports.applied[i] and reports.fault(i) in ('loss', 'gradient')]
    window = step - self.share_window
    self._fault_steps = [k for k in self._fault_steps + faulty if window < k <= step]
    count = len(self._fault_steps)
    if step < self.share_window or count <= self.max_share * self.share_window:
      return None
    bad = [i for i in range(reports.num_steps) if reports.fault(i) in ('loss', 'gradient')]
    self._fault_steps = []
    return interfaces.Decision(
        action=interfaces.ESCALATE, trigger='skip_share', step=step,
        reason=(f'{count} of the last {self.share_window} steps were non-finite and skipped '
                f'(limit {self.max_share:.0%}): the run does not train on those batches; last '
                f'offending tensor: {reports.offending_tensor(bad[-1] if bad else last)}'))


@gin.register(module='stable_train')
class ValidateInputs(interfaces.Policy):
  """Checks every batch's features and labels inside the step, before the update.

  A batch that fails is not applied and counts as an *input* fault (`Trainer.input_faults`, events
  with fault='input'), distinct from loss and gradient faults. Checks: floating tensors are finite;
  optionally, floating features lie within `value_range`, and labels are class indices in
  `[0, num_classes)` (sparse cross-entropy gives NaN on CPU for an out-of-range label).
  """

  def __init__(self, *, num_classes: Optional[int] = None,
               value_range: Optional[Tuple[float, float]] = None, name: str = 'validate_inputs'):
    """Initialises the policy.

    Args:
      num_classes: if set, every label must lie in [0, num_classes) (for sparse labels).
      value_range: if set, (low, high): every floating feature must lie in [low, high].
      name: policy name.
    """
    super().__init__(name=name)
    if num_classes is not None:
      num_classes = errors.check_int('ValidateInputs', 'num_classes', num_classes, minimum=1)
    if value_range is not None:
      try:
        low, high = (float(v) for v in value_range)
      except (TypeError, ValueError):
        low = high = float('nan')
      if not low < high:  # False for NaN too.
        raise errors.ConfigError(
            f'ValidateInputs: value_range={value_range!r} must be a pair (low, high) with '
            'low < high, e.g. (-10.0, 10.0).')
      value_range = (low, high)
    self.num_classes = None if num_classes is None else int(num_classes)
    self.value_range = value_range

  def _tensor_ok(self, t, is_label: bool) -> tf.Tensor:
    t = numerics.dense_values(t)
    ok = numerics.input_ok(t)
    if t.dtype.is_floating:
      if self.value_range is not None and not is_label:
        low, high = (tf.cast(v, t.dtype) for v in self.value_range)
        ok = tf.logical_and(ok, tf.reduce_all(tf.logical_and(t >= low, t <= high)))
    if is_label and self.num_classes is not None and (t.dtype.is_floating or t.dtype.is_integer):
      in_range = tf.logical_and(t >= tf.cast(0, t.dtype), t < tf.cast(self.num_classes, t.dtype))
      ok = tf.logical_and(ok, tf.reduce_all(in_range))
    return ok

  def sanitize_labels(self, labels):
    if self.num_classes is None:
      return labels

    def clip(t):
      # Identity on valid labels; an out-of-range one (its batch is skipped) must not crash the
      # loss: TF 2.21's CPU sparse cross-entropy kernel raises on it instead of returning NaN.
      if isinstance(t, tf.Tensor) and (t.dtype.is_integer or t.dtype.is_floating):
        return tf.clip_by_value(t, tf.cast(0, t.dtype), tf.cast(self.num_classes - 1, t.dtype))
      return t

    return tf.nest.map_structure(clip, labels)

  def check_batch(self, features, labels):
    # Same order as interfaces.flatten_inputs: features first ('features' < 'labels'), then labels.
    flags = [self._tensor_ok(t, False) for t in tf.nest.flatten(features)]
    flags += [self._tensor_ok(t, True) for t in tf.nest.flatten(labels)]
    return tf.stack(flags)
