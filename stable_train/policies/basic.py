"""The core policies: CheckNumerics, ClipByGlobalNorm and ValidateInputs (SkipNonFinite lives in
`skipping`; its name is kept here too).

Every policy class is registered with gin where it is defined (`@gin.register`): a new policy is
one class in one file plus its gin line.
"""

import logging
from typing import Optional, Tuple

import gin
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train import errors
from stable_train.policies.skipping import SkipNonFinite

__all__ = ['CheckNumerics', 'ClipByGlobalNorm', 'SkipNonFinite', 'ValidateInputs']

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
