"""Tests for stable_train.diagnostics: a bad initialisation or learning rate is named, not hidden."""

import json
import os

import keras
import tensorflow as tf

from stable_train import data
from stable_train import diagnostics
from stable_train import errors
from stable_train import events
from stable_train import models
from stable_train import trainer as trainer_lib


def run(model_dir, initializer, optimizer, steps=30):
  check = diagnostics.InitialisationCheck()
  t = trainer_lib.Trainer(model=models.mlp(kernel_initializer=initializer), optimizer=optimizer,
                          loss=keras.losses.MeanSquaredError(),
                          policies=trainer_lib.default_policies() + [check],
                          model_dir=model_dir, steps_per_loop=10)
  t.fit(data.synthetic_regression(), num_steps=steps)
  with open(os.path.join(model_dir, 'summary.json')) as f:
    summary = json.load(f)
  warnings = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
              if e['event'] == 'warning']
  return summary, warnings


class InitialisationCheckTest(tf.test.TestCase):

  def test_huge_initial_outputs_are_named_with_the_remedy(self):
    summary, warnings = run(self.get_temp_dir() + '/bad',
                            keras.initializers.RandomNormal(stddev=0.5),
                            keras.optimizers.Adam(1e-3))
    self.assertEqual([w['cause'] for w in warnings], ['initialisation'])
    self.assertEqual(warnings[0]['step'], 0)
    self.assertIn('initial weights are too large', warnings[0]['message'])
    self.assertIn('HeNormal', warnings[0]['message'])
    self.assertGreater(warnings[0]['output_rms'], 100 * warnings[0]['label_rms'])
    self.assertEqual(summary['init_check']['warnings'], ['huge_initial_outputs'])
    self.assertEqual(summary['status'], 'completed')  # A warning, not a stop.

  def test_loss_that_stays_far_above_its_start_names_the_learning_rate(self):
    # The same bad start with SGD: the loss swings between ~1e9-1e20 and ~20 for dozens of
    # steps (first value 1.6e5) while clipping and skipping keep the run alive.
    summary, warnings = run(self.get_temp_dir() + '/sgd',
                            keras.initializers.RandomNormal(stddev=0.5),
                            keras.optimizers.SGD(0.01), steps=40)
    causes = [w['cause'] for w in warnings]
    self.assertEqual(causes, ['initialisation', 'learning_rate_or_initialisation'])
    loss_warning = warnings[1]
    self.assertIn('learning rate is likely too high', loss_warning['message'])
    self.assertGreaterEqual(loss_warning['median_loss'], 100 * loss_warning['initial_loss'])
    self.assertEqual(summary['init_check']['warnings'],
                     ['huge_initial_outputs', 'loss_stays_high'])

  def test_a_resumed_run_does_not_repeat_the_warning(self):
    model_dir = self.get_temp_dir() + '/resume'
    bad = keras.initializers.RandomNormal(stddev=0.5)
    first, _ = run(model_dir, bad, keras.optimizers.Adam(1e-3), steps=20)
    summary, warnings = run(model_dir, bad, keras.optimizers.Adam(1e-3), steps=40)
    self.assertEqual([w['step'] for w in warnings], [0])  # Only the first run's.
    self.assertEqual(summary['init_check']['warnings'], ['huge_initial_outputs'])
    # Restored with the checkpoint, not re-measured on the trained model.
    self.assertEqual(summary['init_check']['initial_loss'], first['init_check']['initial_loss'])

  def test_a_healthy_start_gives_no_warning(self):
    summary, warnings = run(self.get_temp_dir() + '/good', 'glorot_uniform',
                            keras.optimizers.Adam(1e-3))
    self.assertEqual(warnings, [])
    self.assertEqual(summary['init_check']['warnings'], [])
    self.assertLess(summary['init_check']['output_rms'], 10 * summary['init_check']['label_rms'])

  def test_bad_arguments(self):
    for kwargs, text in (({'output_ratio': 1.0}, 'output_ratio=1.0'),
                         ({'loss_ratio': float('nan')}, 'loss_ratio=nan'),
                         ({'patience': 0}, 'patience=0')):
      with self.assertRaises(errors.ConfigError) as ctx:
        diagnostics.InitialisationCheck(**kwargs)
      self.assertIn(text, str(ctx.exception))


if __name__ == '__main__':
  tf.test.main()
