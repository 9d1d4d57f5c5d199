"""Every shipped gin config parses with unknown bindings rejected, and builds its trainer and data."""

import glob
import json
import os
import subprocess
import sys

import gin
import tensorflow as tf
import pytest

from stable_train.app import cli
from stable_train.app import configurables  # pylint: disable=unused-import

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(REPO, 'configs', '*.gin')))


class ConfigsTest(tf.test.TestCase):

  def test_there_are_configs(self):
    names = {os.path.basename(c) for c in CONFIGS}
    self.assertTrue({'quickstart.gin', 'unstable_lr.gin', 'classification.gin'} <= names, names)

  @pytest.mark.slow
  def test_every_config_parses_builds_and_trains_two_steps(self):
    cwd = os.getcwd()
    os.chdir(self.get_temp_dir())  # Includes must resolve from anywhere, as in the CLI.
    gin.add_config_file_search_path(REPO)
    try:
      for path in CONFIGS:
        name = os.path.basename(path)
        if 'distributed' in name:
          continue  # test_distributed_config_trains_on_two_replicas, in its own process.
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
    finally:
      os.chdir(cwd)
      gin.clear_config()

  @pytest.mark.slow
  def test_distributed_config_trains_on_two_replicas(self):
    # A separate process: collectives of two MirroredStrategy objects in one process can collide
    # on instance keys (BUILD_NOTES), which would break later distributed tests of this session.
    path = os.path.join(REPO, 'configs', 'distributed_mirrored.gin')
    self.assertIn(path, CONFIGS)
    model_dir = os.path.join(self.get_temp_dir(), 'distributed')
    done = subprocess.run([sys.executable, '-c', _DISTRIBUTED_RUN, path, model_dir],
                          capture_output=True, text=True, timeout=300, cwd=self.get_temp_dir(),
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
                                   PYTHONPATH=os.pathsep.join(
                                       [REPO, os.environ.get('PYTHONPATH', '')])))
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    self.assertEqual(result['replicas'], 2)
    self.assertEqual((result['global_step'], result['status']), (2, 'completed'))
    self.assertTrue(os.path.isfile(os.path.join(model_dir, 'checkpoints', 'manifest.json')))


# Parses the config, keeps the strategy it builds (to report its replica count) and trains 2 steps.
_DISTRIBUTED_RUN = """
import json, os, sys
import gin
from stable_train.app import cli
from stable_train.app import configurables
config, model_dir = sys.argv[1:]
gin.add_config_file_search_path(os.path.dirname(os.path.dirname(config)))
gin.parse_config_files_and_bindings([config], ['train.num_steps = 2'], skip_unknown=False)
strategy = gin.query_parameter('train.strategy_fn').scoped_configurable_fn()
with gin.unlock_config():
  gin.bind_parameter('train.strategy_fn', lambda: strategy)
summary = cli.train(model_dir=model_dir)
print(json.dumps(dict(summary, replicas=strategy.num_replicas_in_sync)))
"""


if __name__ == '__main__':
  tf.test.main()
