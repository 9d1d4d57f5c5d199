"""Tests for stable_train.core.lr: scaling a constant learning rate and a schedule."""

import os

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import lr


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


class WarmupScheduleTest(tf.test.TestCase):

  def test_a_numpy_rate_is_a_rate(self):
    schedule = lr.WarmupSchedule(schedule_or_rate=np.float32(1e-3), warmup_steps=4)
    self.assertAllClose(float(schedule(tf.constant(3))), 1e-3)

  def test_constant_rate_rises_linearly_then_holds(self):
    schedule = lr.WarmupSchedule(schedule_or_rate=0.1, warmup_steps=4)
    self.assertAllClose([schedule(s) for s in range(6)], [0.025, 0.05, 0.075, 0.1, 0.1, 0.1])

  def test_wraps_a_keras_schedule_and_composes_with_the_rollback_backoff(self):
    decay = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    opt = keras.optimizers.SGD(lr.WarmupSchedule(schedule_or_rate=decay, warmup_steps=5))
    opt.build([tf.Variable(1.0)])
    control = lr.LearningRateControl(opt, tf.Variable(1.0))  # What the Trainer does.
    self.assertIsInstance(opt._learning_rate, lr.ScaledSchedule)  # pylint: disable=protected-access
    self.assertAllClose(control.current(), 0.1 * 1 / 5)
    opt.iterations.assign(2)
    self.assertAllClose(control.current(), 0.1 * 0.5 ** 0.2 * 3 / 5)
    control.set_scale(0.5)  # A rollback's backoff: the warmed-up, decayed rate, halved.
    self.assertAllClose(control.current(), 0.5 * 0.1 * 0.5 ** 0.2 * 3 / 5)
    opt.iterations.assign(10)  # Past the warm-up: the decay alone, still backed off.
    self.assertAllClose(control.current(), 0.5 * 0.05)

  def test_in_a_trainer_from_gin(self):
    import gin  # pylint: disable=g-import-not-at-top
    from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
    from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    gin.parse_config("""
        Trainer.model = @mlp()
        mlp.input_dim = 8
        mlp.hidden = (4,)
        Trainer.optimizer = @keras.optimizers.SGD()
        keras.optimizers.SGD.learning_rate = @WarmupSchedule()
        WarmupSchedule.schedule_or_rate = @keras.optimizers.schedules.CosineDecay()
        WarmupSchedule.warmup_steps = 4
        keras.optimizers.schedules.CosineDecay.initial_learning_rate = 0.1
        keras.optimizers.schedules.CosineDecay.decay_steps = 1000
        Trainer.loss = @keras.losses.MeanSquaredError()
        Trainer.steps_per_loop = 6
    """)
    seen = []

    class Recording(trainer_lib.Trainer):
      def on_loop_end(self, reports):
        seen.extend(reports.learning_rate)

    t = Recording(model_dir=None)
    t.fit(data.synthetic_regression(num_features=8, num_examples=64), num_steps=6)
    cosine = lambda s: 0.1 * 0.5 * (1 + np.cos(np.pi * s / 1000))
    expected = [cosine(s) * min(1.0, (s + 1) / 4) for s in range(6)]
    self.assertAllClose(seen, expected, rtol=1e-5)

  @pytest.mark.slow
  def test_resumed_run_continues_the_warm_up(self):
    from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
    from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    seen = []

    class Recording(trainer_lib.Trainer):
      def on_loop_end(self, reports):
        seen.extend(reports.learning_rate)

    def run(steps):
      t = Recording(model=models.mlp(input_dim=8, hidden=(4,)),
                    optimizer=keras.optimizers.SGD(
                        lr.WarmupSchedule(schedule_or_rate=0.1, warmup_steps=10)),
                    loss=keras.losses.MeanSquaredError(), model_dir=self.get_temp_dir(),
                    policies=[])
      t.fit(data.synthetic_regression(num_features=8, num_examples=64), num_steps=steps)
      return t

    run(5)
    t = run(8)
    t.lr_control.set_scale(0.5)  # A rollback's backoff after the resume.
    self.assertAllClose(seen, [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08], rtol=1e-6)
    self.assertAllClose(t.lr_control.current(), 0.5 * 0.09)

  def test_bad_arguments(self):
    from stable_train import errors  # pylint: disable=g-import-not-at-top
    for kwargs, text in (({'schedule_or_rate': -0.1, 'warmup_steps': 3}, 'schedule_or_rate=-0.1'),
                         ({'schedule_or_rate': 0.1, 'warmup_steps': 0}, 'warmup_steps=0'),
                         ({'schedule_or_rate': 'fast', 'warmup_steps': 3}, "schedule_or_rate='fast'")):
      with self.assertRaises(errors.ConfigError) as ctx:
        lr.WarmupSchedule(**kwargs)
      self.assertIn(text, str(ctx.exception))


class SerializationTest(tf.test.TestCase):

  def test_scaled_schedule_config_round_trips(self):
    cosine = keras.optimizers.schedules.CosineDecay(0.1, decay_steps=100)
    schedule = lr.ScaledSchedule(lr.WarmupSchedule(schedule_or_rate=cosine, warmup_steps=4),
                                 tf.Variable(0.25))
    config = keras.optimizers.schedules.serialize(schedule)
    again = keras.optimizers.schedules.deserialize(config)
    self.assertIsInstance(again, lr.ScaledSchedule)
    self.assertIsInstance(again.schedule, lr.WarmupSchedule)
    self.assertEqual(keras.optimizers.schedules.serialize(again), config)
    for step in (0, 3, 50):
      self.assertAllClose(again(step), schedule(step), rtol=1e-7)

  @pytest.mark.slow
  def test_keras_file_saved_with_the_trainers_optimizer_reloads(self):
    from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
    from stable_train.zoo import models  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    cosine = keras.optimizers.schedules.CosineDecay(0.01, decay_steps=100)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=8, hidden=(4,)),
                            optimizer=keras.optimizers.Adam(cosine),
                            loss=keras.losses.MeanSquaredError(), model_dir=self.get_temp_dir(),
                            policies=[])
    t.fit(data.synthetic_regression(num_features=8, num_examples=64), num_steps=3)
    t.lr_control.set_scale(0.5)
    wrapped = t.optimizer._learning_rate  # pylint: disable=protected-access
    self.assertIsInstance(wrapped, lr.ScaledSchedule)
    t.model.compile(optimizer=t.optimizer, loss='mse')
    path = os.path.join(self.get_temp_dir(), 'with_optimizer.keras')
    t.model.save(path)
    loaded = keras.saving.load_model(path)
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    self.assertAllClose(loaded.predict(x, verbose=0), t.model.predict(x, verbose=0), atol=0)
    schedule = loaded.optimizer._learning_rate  # pylint: disable=protected-access
    self.assertIsInstance(schedule, lr.ScaledSchedule)
    self.assertAllClose(schedule(7), 0.5 * cosine(7), rtol=1e-6)


if __name__ == '__main__':
  tf.test.main()
