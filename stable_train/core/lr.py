"""Learning-rate control: one checkpointed scale factor applied to a constant rate or a schedule,
and a linear warm-up that wraps either."""

import math
import numbers

import gin
import keras
import numpy as np
import tensorflow as tf

from stable_train import compat
from stable_train import errors

# Set on the optimizer by every control that scales a constant rate: (base, rate it assigned).
_BASE_ATTR = '_stable_train_lr_base'


@gin.register(module='stable_train')
@keras.saving.register_keras_serializable(package='stable_train')
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Linear learning-rate warm-up in front of a constant rate or any Keras schedule.

  `rate(step) = base(step) * min(1, (step + 1) / warmup_steps)`, with `step` the optimizer's
  iteration count (0 for the first update, which therefore uses base / warmup_steps, never 0).
  After the warm-up it is the wrapped schedule itself, evaluated at the same step (the warm-up
  does not shift it). Being a `LearningRateSchedule`, it composes with `LearningRateControl`:
  a rollback's backoff scales the warmed-up rate.
  """

  def __init__(self, *, schedule_or_rate, warmup_steps: int):
    """Initialises the schedule.

    Args:
      schedule_or_rate: a positive constant rate or a `keras.optimizers.schedules.LearningRateSchedule`.
      warmup_steps: updates over which the rate rises linearly to the wrapped one (>= 1).
    """
    if isinstance(schedule_or_rate, keras.optimizers.schedules.LearningRateSchedule):
      self.schedule = schedule_or_rate
    else:
      ok = (isinstance(schedule_or_rate, numbers.Real) and not isinstance(schedule_or_rate, bool)
            and math.isfinite(schedule_or_rate) and schedule_or_rate > 0)  # numpy floats too.
      if not ok:
        raise errors.ConfigError(
            f'WarmupSchedule: schedule_or_rate={schedule_or_rate!r} must be a positive rate or a '
            'keras.optimizers.schedules.LearningRateSchedule.')
      self.schedule = float(schedule_or_rate)
    self.warmup_steps = errors.check_int('WarmupSchedule', 'warmup_steps', warmup_steps, minimum=1)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    base = (self.schedule(step) if callable(self.schedule)
            else tf.constant(self.schedule, tf.float32))
    return tf.cast(base, tf.float32) * tf.minimum(1.0, (step + 1.0) / self.warmup_steps)

  def get_config(self):
    schedule = (keras.optimizers.schedules.serialize(self.schedule) if callable(self.schedule)
                else self.schedule)
    return {'schedule_or_rate': schedule, 'warmup_steps': self.warmup_steps}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config['schedule_or_rate'], dict):
      config['schedule_or_rate'] = keras.optimizers.schedules.deserialize(
          config['schedule_or_rate'])
    return cls(**config)


@keras.saving.register_keras_serializable(package='stable_train')
class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """`schedule(step) * scale`, where `scale` is a variable the host can change between loops.

  Serializable (registered as 'stable_train>ScaledSchedule'), so an optimizer that a
  `LearningRateControl` wrapped saves into a `.keras` file and loads again (with stable_train
  imported); the loaded copy owns a new scale variable holding the value saved.
  """

  def __init__(self, schedule, scale: tf.Variable):
    self.schedule = schedule
    self.scale = scale

  def __call__(self, step):
    return self.schedule(step) * tf.cast(self.scale, tf.float32)

  def get_config(self):
    return {'schedule': keras.optimizers.schedules.serialize(self.schedule),
            'scale': float(self.scale.numpy())}

  @classmethod
  def from_config(cls, config):
    schedule = keras.optimizers.schedules.deserialize(config['schedule'])
    return cls(schedule, tf.Variable(float(config['scale']), trainable=False, dtype=tf.float32,
                                     name='lr_scale'))


class LearningRateControl:
  """Scales an optimizer's learning rate by a factor, for a constant rate and a schedule alike.

  A constant rate is kept as `base * scale` in the optimizer's own learning-rate variable; a
  `LearningRateSchedule` is wrapped in `ScaledSchedule`. Either way `scale` is a variable that goes
  into the checkpoint, so a resumed run continues with the same (backed-off) rate.
  """

  def __init__(self, optimizer, scale: tf.Variable):
    self.optimizer = optimizer
    self.scale = scale
    current = compat.learning_rate_of(optimizer)
    if isinstance(current, keras.optimizers.schedules.LearningRateSchedule):
      if isinstance(current, ScaledSchedule):  # A Trainer built on this optimizer before.
        current = current.schedule
      optimizer.learning_rate = ScaledSchedule(current, scale)
      self.base = None
    elif callable(current):
      self.base = None
      optimizer.learning_rate = lambda: current() * tf.cast(scale, tf.float32)
    else:
      self.base = float(optimizer.learning_rate.numpy())
      # A control built on this optimizer before may have scaled its rate already: the base is
      # the rate it was given, unless the rate was changed by hand since.
      previous = getattr(optimizer, _BASE_ATTR, None)
      if previous is not None and np.float32(previous[1]) == np.float32(self.base):
        self.base = previous[0]
      self.set_scale(float(scale.numpy()))

  def set_scale(self, value: float) -> None:
    """Sets the factor; the learning rate becomes base × value from the next step on."""
    self.scale.assign(value)
    if self.base is not None:
      rate = self.base * float(value)
      self.optimizer.learning_rate = rate
      setattr(self.optimizer, _BASE_ATTR, (self.base, rate))

  def current(self) -> float:
    """The learning rate the next step will use."""
    return float(tf.cast(self.optimizer.learning_rate, tf.float32).numpy())
