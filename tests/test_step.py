"""Tests for stable_train.core.step: the `update_state` flag contract of the guarded step (the step's
skip, counters and state are tested through its users: test_trainer, test_keras_fit)."""

from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

import stable_train as st
from stable_train.core import interfaces
from stable_train import errors


class Flags(interfaces.Policy):
  """Counts its updates and returns `flag(count)` as its `update_state` flag."""

  def __init__(self, flag):
    super().__init__(name='flags')
    self.flag = flag
    self.count = tf.Variable(0, dtype=tf.int64, trainable=False)

  def update_state(self, report, applied):
    return self.flag(self.count.assign_add(1))


def _data():
  x = np.random.RandomState(0).randn(40 * 16, 8).astype('float32')
  return tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 2.0)).batch(16)


def _trainer(policies):
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation='tanh'),
                            keras.layers.Dense(1)])
  return st.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.MeanSquaredError(), policies=policies, model_dir=None,
                    steps_per_loop=5)


class UpdateStateFlagTest(tf.test.TestCase):
  """A policy's `update_state` returns None or a scalar bool; anything else is named."""

  def test_a_flag_that_is_not_a_scalar_bool_is_refused(self):
    for what, flag in {'float': lambda n: tf.cast(n, tf.float32),
                       'vector': lambda n: tf.stack([n > 2, n > 3])}.items():
      with self.subTest(what):
        trainer = _trainer([st.SkipNonFinite(), Flags(flag)])
        with self.assertRaisesRegex(errors.ConfigError,
                                    "Flags 'flags': update_state returned a .*; return None or "
                                    'a scalar bool'):
          trainer.fit(_data(), num_steps=5)

  @pytest.mark.slow
  def test_python_and_tensor_bool_flags_flag_the_step(self):
    for what, flag in {'python': lambda n: True, 'tensor': lambda n: n > 7}.items():
      with self.subTest(what):
        trainer = _trainer([st.SkipNonFinite(), Flags(flag)])
        with mock.patch.object(trainer, 'on_loop_end') as on_loop_end:
          trainer.fit(_data(), num_steps=10)
        flagged = np.concatenate([c.args[0].flagged for c in on_loop_end.call_args_list])
        self.assertEqual(flagged.tolist(), [True] * 10 if what == 'python' else
                         [False] * 7 + [True] * 3)


if __name__ == '__main__':
  tf.test.main()
