"""Every shipped gin config parses with unknown bindings rejected, and builds its trainer and data."""

import glob
import os

import gin
import tensorflow as tf

from stable_train import cli
from stable_train import configurables  # pylint: disable=unused-import

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(REPO, 'configs', '*.gin')))


class ConfigsTest(tf.test.TestCase):

  def test_there_are_configs(self):
    names = {os.path.basename(c) for c in CONFIGS}
    self.assertTrue({'quickstart.gin', 'unstable_lr.gin', 'classification.gin'} <= names, names)

  def test_every_config_parses_builds_and_trains_two_steps(self):
    self.assertIn('distributed_mirrored.gin', {os.path.basename(c) for c in CONFIGS})
    cwd = os.getcwd()
    os.chdir(self.get_temp_dir())  # Includes must resolve from anywhere, as in the CLI.
    gin.add_config_file_search_path(REPO)
    try:
      for path in CONFIGS:
        name = os.path.basename(path)
        with self.subTest(config=name):
          gin.clear_config()
          gin.parse_config_files_and_bindings([path], ['train.num_steps = 2'],
                                              skip_unknown=False)
          model_dir = os.path.join(self.get_temp_dir(), name)
          summary = cli.train(model_dir=model_dir)  # Strategy, Trainer and dataset, built.
          self.assertEqual(summary['global_step'], 2)
          self.assertEqual(summary['status'], 'completed')
          self.assertTrue(os.path.isfile(os.path.join(model_dir, 'operative_config.gin')))
          self.assertTrue(os.path.isfile(os.path.join(model_dir, 'checkpoints', 'manifest.json')))
          strategy = gin.query_parameter('train.strategy_fn') if 'distributed' in name else None
          if strategy is not None:  # The distributed config really ran on two replicas.
            self.assertEqual(strategy.scoped_configurable_fn().num_replicas_in_sync, 2)
    finally:
      os.chdir(cwd)
      gin.clear_config()


if __name__ == '__main__':
  tf.test.main()
