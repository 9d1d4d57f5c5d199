"""Tests for stable_train.trainer.setup: progress lines for a library caller (the validation of
Trainer arguments is tested through the Trainer, in test_trainer.py)."""

import numpy as np
import tensorflow as tf
import pytest


class VerboseTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_verbose_false_writes_no_progress_lines(self):
    import keras  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    data = tf.data.Dataset.from_tensor_slices(
        (np.ones((8, 2), np.float32), np.ones((8, 1), np.float32))).batch(2)

    def fit(verbose):
      t = trainer_lib.Trainer(model=keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]),
                              optimizer=keras.optimizers.SGD(0.01),
                              loss=keras.losses.MeanSquaredError(), model_dir=None, log_every=1,
                              verbose=verbose)
      t.fit(data, num_steps=2, eval_dataset=data)

    with self.assertLogs('stable_train', level='INFO') as logs:
      fit(True)
    self.assertLen([l for l in logs.output if 'steps/s' in l], 2)
    self.assertLen([l for l in logs.output if 'eval loss' in l], 1)
    with self.assertNoLogs('stable_train', level='INFO'):
      fit(False)

  def test_a_library_caller_without_logging_gets_a_handler(self):
    import logging  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    root = logging.getLogger()
    saved = root.handlers[:]
    logger = logging.getLogger('stable_train.test_verbose')
    try:
      root.handlers = []
      trainer_lib.show_progress(logger)
      self.assertLen(logger.handlers, 1)
      self.assertEqual(logger.level, logging.INFO)
      self.assertFalse(logger.propagate)  # A root handler added later does not print it again.
      root.handlers = saved or [logging.NullHandler()]
      other = logging.getLogger('stable_train.test_verbose_configured')
      trainer_lib.show_progress(other)
      self.assertEqual(other.handlers, [])  # Configured by the caller: left alone.
    finally:
      root.handlers = saved
      logger.handlers = []
      logger.propagate = True

  @pytest.mark.slow
  def test_each_progress_line_is_printed_once_by_a_plain_library_caller(self):
    import os  # pylint: disable=g-import-not-at-top
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = (  # The README's library example, small, with checkpoints.
        'import keras, stable_train\n'
        'from stable_train.zoo import data, models\n'
        'trainer = stable_train.Trainer(model=models.mlp(input_dim=8, hidden=(4,)), '
        'optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError(), '
        f'model_dir={self.get_temp_dir()!r}, checkpoint_every=5, log_every=5)\n'
        'trainer.fit(data.synthetic_regression(num_features=8, batch_size=8), num_steps=20)\n')
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=300, cwd=repo,
                          env=dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL='3'))
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    progress = [l for l in proc.stderr.splitlines() if 'steps/s' in l]
    self.assertEqual([l.split()[:2] for l in progress],
                     [['step', f'{s}/20'] for s in (5, 10, 15, 20)], proc.stderr[-2000:])

  def test_bad_verbose_is_a_config_error(self):
    import keras  # pylint: disable=g-import-not-at-top
    from stable_train import errors  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(errors.ConfigError, 'verbose=1'):
      trainer_lib.Trainer(model=keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]),
                          optimizer=keras.optimizers.SGD(0.01),
                          loss=keras.losses.MeanSquaredError(), model_dir=None, verbose=1)

if __name__ == '__main__':
  tf.test.main()


class PolicyStackTest(tf.test.TestCase):

  def test_a_policy_class_without_parentheses_is_named_with_the_fix(self):
    from stable_train import errors  # pylint: disable=g-import-not-at-top
    from stable_train.policies import basic as policies  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import setup as trainer_setup  # pylint: disable=g-import-not-at-top
    # What gin passes for `Trainer.policies = [@SkipNonFinite]`: the class itself.
    with self.assertRaisesRegex(errors.ConfigError,
                                r'the class SkipNonFinite; pass an instance, e.g. SkipNonFinite\(\) '
                                r'\(in gin: add "\(\)"'):
      trainer_setup.policy_stack([policies.SkipNonFinite], None, tf.distribute.get_strategy())
