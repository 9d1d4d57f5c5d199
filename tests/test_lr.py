"""Tests for stable_train.lr: scaling a constant learning rate and a schedule."""

import keras
import tensorflow as tf

from stable_train import lr


class LearningRateControlTest(tf.test.TestCase):

  def test_constant_rate(self):
    opt = keras.optimizers.SGD(0.2)
    control = lr.LearningRateControl(opt, tf.Variable(1.0))
    self.assertAllClose(control.current(), 0.2)
    control.set_scale(0.25)
    self.assertAllClose(control.current(), 0.05)
    self.assertAllClose(opt.learning_rate, 0.05)
    control.set_scale(1.0)
    self.assertAllClose(control.current(), 0.2)

  def test_a_second_control_on_the_same_optimizer_keeps_the_configured_constant_rate(self):
    opt = keras.optimizers.SGD(0.2)
    first = lr.LearningRateControl(opt, tf.Variable(1.0))
    first.set_scale(0.5)
    self.assertAllClose(first.current(), 0.1)
    # A second Trainer wrapping the same optimizer: its own (fresh) scale governs the base 0.2.
    second = lr.LearningRateControl(opt, tf.Variable(1.0))
    self.assertAllClose(second.base, 0.2)
    self.assertAllClose(second.current(), 0.2)
    second.set_scale(0.25)
    self.assertAllClose(second.current(), 0.05)
    # A rate the user set by hand since is the new base.
    opt.learning_rate = 0.3
    third = lr.LearningRateControl(opt, tf.Variable(1.0))
    self.assertAllClose(third.base, 0.3)

  def test_schedule(self):
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    opt = keras.optimizers.SGD(schedule)
    opt.build([tf.Variable(1.0)])
    scale = tf.Variable(1.0)
    control = lr.LearningRateControl(opt, scale)
    self.assertAllClose(control.current(), 0.1)
    opt.iterations.assign(10)
    self.assertAllClose(control.current(), 0.05)
    control.set_scale(0.5)
    self.assertAllClose(control.current(), 0.025)  # The schedule keeps going, scaled.
    opt.iterations.assign(20)
    self.assertAllClose(control.current(), 0.0125)
    # A second Trainer on the same optimizer: its own scale governs, without scaling twice.
    second = lr.LearningRateControl(opt, tf.Variable(1.0))
    self.assertAllClose(second.current(), 0.025)
    second.set_scale(0.25)
    self.assertAllClose(second.current(), 0.00625)


if __name__ == '__main__':
  tf.test.main()
