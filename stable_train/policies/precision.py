"""Numeric precision of a run: the precision setting and dynamic loss scaling for float16.

Under `mixed_float16` small gradients underflow to zero unless the loss is scaled up before
differentiation and the gradients scaled back down before they are used. `DynamicLossScale` does
this inside the one traced step: the gradients every check, clip and policy sees are unscaled;
a step whose loss is finite but whose gradients overflowed is an *overflow* (skipped, scale
halved, not an instability); the scale grows again after `growth_interval` applied steps; at
`min_scale` (2**-24 by default: below 1, as Keras's LossScaleOptimizer, which has no floor, goes
when unscaled inputs overflow float16's gradients at scale 1) an overflow is an ordinary
non-finite fault (SkipNonFinite counts it and escalates).
"""

import contextlib

import gin
import keras
import tensorflow as tf

from stable_train.core import interfaces
from stable_train import errors

PRECISIONS = ('float32', 'mixed_float16', 'mixed_bfloat16', 'float64')


def set_precision(precision: str) -> None:
  """Sets Keras's global dtype policy (and floatx) for models built from now on.

  Args:
    precision: 'float32', 'mixed_float16' (float16 compute, float32 variables, dynamic loss
      scaling added by the Trainer), 'mixed_bfloat16' (bfloat16 compute; no scaling needed) or
      'float64' (variables, compute, loss and gradients in float64).
  """
  if precision not in PRECISIONS:  # Named as the gin binding users set.
    raise errors.ConfigError(
        f'precision={precision!r} is not one of {PRECISIONS}; e.g. train.precision = '
        "'mixed_float16'.")
  keras.config.set_floatx('float64' if precision == 'float64' else 'float32')
  keras.mixed_precision.set_global_policy(precision)


@contextlib.contextmanager
def using(precision: str):
  """`set_precision(precision)` for the models built inside the block; float32 again after it
  (scripts that build runs of several precisions in one process)."""
  set_precision(precision)
  try:
    yield
  finally:
    set_precision('float32')


def compute_dtype(model) -> str:
  """The dtype a model computes in ('float16' under mixed_float16), from its dtype policy."""
  value = getattr(model, 'compute_dtype', None)
  if value is None:
    value = keras.mixed_precision.global_policy().compute_dtype
  return tf.as_dtype(value).name


def default_loss_scale() -> 'DynamicLossScale':
  """The DynamicLossScale the Trainer adds under mixed_float16, built through gin so that
  `DynamicLossScale.*` bindings apply to it as to one listed in `Trainer.policies`."""
  return gin.get_configurable(DynamicLossScale)()


def split_loss_scale_optimizer(optimizer):
  """(the optimizer that applies the updates, the Keras `LossScaleOptimizer` around it or None).

  `compile` wraps the optimizer in a LossScaleOptimizer under mixed_float16. The guarded step
  scales the loss itself (a `DynamicLossScale` with the wrapper's settings, `loss_scale_like`)
  and applies through the inner optimizer: the wrapper's own apply would check and unscale the
  gradients a second time.
  """
  if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
    return optimizer.inner_optimizer, optimizer
  return optimizer, None


def loss_scale_like(optimizer) -> 'DynamicLossScale':
  """A DynamicLossScale with a LossScaleOptimizer's initial scale and growth interval (built
  through gin: `DynamicLossScale.*` bindings apply to the rest)."""
  return gin.get_configurable(DynamicLossScale)(
      initial_scale=float(optimizer.initial_scale),
      growth_interval=int(optimizer.dynamic_growth_steps))


@gin.register(module='stable_train')
class DynamicLossScale(interfaces.Policy):
  """Dynamic loss scaling for float16 compute, tied into the skip.

  The loss is multiplied by `scale` before differentiation and the gradients divided by it right
  after, before any aggregation, check or clip. A step with finite inputs and loss but non-finite
  gradients, while `scale > min_scale`, is an overflow: it is skipped (every variable left as it
  was), the scale is halved, and it is reported as `overflow` apart from NaN skips. After
  `growth_interval` applied steps without an overflow the scale doubles (up to `max_scale`), as in
  Keras's LossScaleOptimizer. The scale and the counters are variables, checkpointed with the run.
  """

  def __init__(self, *, initial_scale: float = 2.0**15, growth_interval: int = 2000,
               min_scale: float = 2.0**-24, max_scale: float = 2.0**24, name: str = 'loss_scale'):
    """Initialises the policy.

    Args:
      initial_scale: the starting scale (Keras's default, 2**15); a positive power of two keeps
        scaling exact.
      growth_interval: applied steps (since the last overflow or growth) after which the scale
        doubles; >= 1.
      min_scale: the floor; at the floor an overflow counts as an ordinary non-finite fault.
        Below 1 by default: Keras's LossScaleOptimizer halves without a floor, and a run whose
        gradients overflow float16 at scale 1 (unscaled inputs) trains on there.
      max_scale: the ceiling.
      name: policy name.
    """
    super().__init__(name=name)
    growth_interval = errors.check_int('DynamicLossScale', 'growth_interval', growth_interval,
                                       minimum=1)
    values = {arg: errors.check_number('DynamicLossScale', arg, value, low=0.0, low_open=True,
                                       what='a positive finite number, e.g. 32768.0')
              for arg, value in (('initial_scale', initial_scale), ('min_scale', min_scale),
                                 ('max_scale', max_scale))}
    if not values['min_scale'] <= values['initial_scale'] <= values['max_scale']:
      raise errors.ConfigError(
          f'DynamicLossScale: need min_scale <= initial_scale <= max_scale, got {values}.')
    self.growth_interval = growth_interval
    self.min_scale, self.max_scale = values['min_scale'], values['max_scale']
    self.scale = tf.Variable(values['initial_scale'], dtype=tf.float32, trainable=False,
                             name='scale')
    self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='good_steps')
    self.overflows = tf.Variable(0, dtype=tf.int64, trainable=False, name='overflows')

  def follow(self, optimizer) -> None:
    """From now on scales with a built LossScaleOptimizer's own variables (`dynamic_scale`, and
    `step_counter` as the applied steps since the last overflow or growth), so the wrapper and
    what Keras saves of it hold the scale the step uses, as Keras's own step would."""
    self.scale = optimizer.dynamic_scale
    self.good_steps = optimizer.step_counter

  # -- traced, called by the Trainer around differentiation ------------------------------------
  def scale_loss(self, loss: tf.Tensor) -> tf.Tensor:
    """The loss to differentiate: `loss * scale`."""
    return loss * tf.cast(self.scale, loss.dtype)

  def unscale_gradients(self, grads):
    """Gradients of the scaled loss, divided by the scale (exact for a power of two)."""
    inverse = 1.0 / self.scale
    return [g * tf.cast(inverse, g.dtype) for g in grads]

  def loss_scale(self) -> tf.Tensor:
    return tf.convert_to_tensor(self.scale)

  def is_overflow(self, report) -> tf.Tensor:
    """Whether a step's non-finite gradients are a loss-scale overflow (see the class doc)."""
    clean_forward = tf.logical_and(report['inputs_finite'], report['loss_finite'])
    return tf.logical_and(tf.logical_and(clean_forward, tf.logical_not(report['grads_finite'])),
                          self.scale > self.min_scale)

  # -- policy hooks ----------------------------------------------------------------------------
  def allow_update(self, stats):
    # Never apply non-finite gradients, also without SkipNonFinite in the stack.
    return stats['grads_finite']

  def update_state(self, report, applied):
    overflow = report['overflow']
    # Applied steps since the last overflow or growth (Keras's LossScaleOptimizer counts the
    # same); a skip that is no overflow says nothing about the scale and leaves the count.
    good = self.good_steps + tf.cast(applied, tf.as_dtype(self.good_steps.dtype))
    grow = good >= self.growth_interval
    scale = tf.where(overflow, tf.maximum(self.scale * 0.5, self.min_scale),
                     tf.where(grow, tf.minimum(self.scale * 2.0, self.max_scale), self.scale))
    self.scale.assign(scale)
    self.good_steps.assign(tf.where(tf.logical_or(grow, overflow), tf.zeros_like(good), good))
    self.overflows.assign_add(tf.cast(overflow, tf.int64))

  def summary(self):
    return {'loss_scale': float(self.scale.numpy())}
