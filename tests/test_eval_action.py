"""Tests for stable_train.runtime.actions.eval_action: the evaluation cadence across a signal, and a signal
during an evaluation."""

import os
import signal

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.policies import stopping
from stable_train.runfiles import events
from stable_train.testing import faults as faults_lib
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import models


def _data(seed, n=64):
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(n, 8)).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 0.5)).batch(8)


def _signal_at(element, fired):
  """The eval data, sending this process SIGTERM as its `element`-th batch is read (once)."""

  def read(x):
    fired.append(1)
    if len(fired) == element:
      os.kill(os.getpid(), signal.SIGTERM)
    return x

  return _data(1, n=32).map(
      lambda x, y: (tf.ensure_shape(tf.py_function(read, [x], tf.float32), [None, 8]), y))


class InterruptedEvalTest(tf.test.TestCase):
  """Early stopping counts the same evaluations whether or not a signal stopped the run at an
  evaluation step, before the evaluation or during it."""

  def _fit(self, model_dir, eval_data, num_steps=24, faults=None):
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=8, hidden=(4,), seed=0), model_dir=model_dir,
        optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
        policies=trainer_lib.default_policies() + [
            stopping.EarlyStopping(patience=2, min_delta=1e9)],  # Nothing improves after one.
        checkpoint_every=100, log_every=100, faults=faults)
    return t.fit(_data(0).repeat(), num_steps=num_steps, eval_dataset=eval_data, eval_every=4)

  def _evals(self, model_dir):
    return [(e['step'], e['loss']) for e in events.read_events(f'{model_dir}/events.jsonl')
            if e['event'] == 'eval']

  @pytest.mark.slow
  def test_a_signal_before_or_during_the_evaluation_of_a_step_defers_it_to_the_resume(self):
    plain = self.get_temp_dir() + '/plain'
    expected = self._fit(plain, _data(1, n=32))
    self.assertEqual((expected['status'], expected['global_step']), ('stopped_early', 12))
    self.assertEqual([s for s, _ in self._evals(plain)], [4, 8, 12])
    for how in ('before', 'during'):
      model_dir = f'{self.get_temp_dir()}/{how}'
      if how == 'before':  # SIGTERM at the end of step 8's loop, before its evaluation.
        first = self._fit(model_dir, _data(1, n=32), faults=faults_lib.Faults(sigterm_step=8))
      else:  # SIGTERM as step 8's evaluation reads its second batch (after the one batch of
        first = self._fit(model_dir, _signal_at(1 + 4 + 2, []))  # the check, step 4's four).
      self.assertEqual((first['status'], first['global_step']), ('interrupted', 8), how)
      with open(f'{model_dir}/checkpoints/manifest.json') as f:
        self.assertIn('"eval_due": true', f.read())
      resumed = self._fit(model_dir, _data(1, n=32))
      self.assertEqual(resumed['status'], 'stopped_early', how)
      self.assertEqual(self._evals(model_dir), self._evals(plain), how)  # Bit for bit.
      self.assertEqual(resumed['early_stopping'], expected['early_stopping'], how)

  @pytest.mark.slow
  def test_a_signal_during_the_final_evaluation_defers_it_to_the_rerun(self):
    model_dir = self.get_temp_dir() + '/final'
    # Only the final evaluation (after the check's one batch): SIGTERM at its second batch.
    first = self._fit(model_dir, _signal_at(1 + 2, []), num_steps=3)
    self.assertEqual((first['status'], first['global_step']), ('interrupted', 3))
    self.assertEqual(self._evals(model_dir), [])
    again = self._fit(model_dir, _data(1, n=32), num_steps=3)
    self.assertEqual((again['status'], again['global_step']), ('completed', 3))
    self.assertEqual([s for s, _ in self._evals(model_dir)], [3])


if __name__ == '__main__':
  tf.test.main()
