"""Test session set-up: quiet TensorFlow and split the CPU into logical devices before TF starts.

Logical devices can only be configured before the runtime initialises, so it happens here, once,
for the whole session; single-device tests still run on /cpu:0 under the default strategy.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import gin  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

NUM_LOGICAL_CPUS = 2

_cpus = tf.config.list_physical_devices('CPU')
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)


@pytest.fixture(autouse=True)
def _clear_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def pytest_collection_modifyitems(config, items):
  """Drops tf.test.TestCase's inherited `test_session`, a deprecated helper, not a test (pytest
  would otherwise report it as skipped in every test class)."""
  del config
  items[:] = [item for item in items if item.name != 'test_session']
