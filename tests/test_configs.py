"""Every shipped gin config parses with unknown bindings rejected, and builds its trainer and data."""

import glob
import os

import gin
import tensorflow as tf

from stable_train import cli  # pylint: disable=unused-import  (registers `train`)
from stable_train import configurables  # pylint: disable=unused-import
from stable_train import trainer as trainer_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(REPO, 'configs', '*.gin')))


class ConfigsTest(tf.test.TestCase):

  def test_there_are_configs(self):
    names = {os.path.basename(c) for c in CONFIGS}
    self.assertTrue({'quickstart.gin', 'unstable_lr.gin', 'classification.gin'} <= names, names)

  def test_every_config_parses_and_builds(self):
    cwd = os.getcwd()
    os.chdir(self.get_temp_dir())  # Includes must resolve from anywhere, as in the CLI.
    gin.add_config_file_search_path(REPO)
    try:
      for path in CONFIGS:
        with self.subTest(config=os.path.basename(path)):
          gin.clear_config()
          gin.parse_config_files_and_bindings([path], [], skip_unknown=False)
          self.assertGreater(gin.query_parameter('train.num_steps'), 0)
          dataset = gin.query_parameter('train.dataset_fn').scoped_configurable_fn()
          self.assertIsInstance(dataset, tf.data.Dataset)
          if 'distributed' in path:
            continue  # Its strategy splits the CPU; building it is its own test's job.
          trainer = trainer_lib.Trainer(model_dir=None)
          self.assertTrue(trainer.policies)
    finally:
      os.chdir(cwd)
      gin.clear_config()


if __name__ == '__main__':
  tf.test.main()
