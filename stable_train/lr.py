"""Learning-rate control: one checkpointed scale factor applied to a constant rate or a schedule."""

import keras
import numpy as np
import tensorflow as tf

# Set on the optimizer by every control that scales a constant rate: (base, rate it assigned).
_BASE_ATTR = '_stable_train_lr_base'


class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """`schedule(step) * scale`, where `scale` is a variable the host can change between loops."""

  def __init__(self, schedule, scale: tf.Variable):
    self.schedule = schedule
    self.scale = scale

  def __call__(self, step):
    return self.schedule(step) * tf.cast(self.scale, tf.float32)

  def get_config(self):
    return {'schedule': keras.optimizers.schedules.serialize(self.schedule),
            'scale': float(self.scale.numpy())}


class LearningRateControl:
  """Scales an optimizer's learning rate by a factor, for a constant rate and a schedule alike.

  A constant rate is kept as `base * scale` in the optimizer's own learning-rate variable; a
  `LearningRateSchedule` is wrapped in `ScaledSchedule`. Either way `scale` is a variable that goes
  into the checkpoint, so a resumed run continues with the same (backed-off) rate.
  """

  def __init__(self, optimizer, scale: tf.Variable):
    self.optimizer = optimizer
    self.scale = scale
    current = optimizer._learning_rate  # pylint: disable=protected-access  (no public getter)
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
