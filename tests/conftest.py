"""Test session set-up: quiet TensorFlow and split the CPU into logical devices before TF starts.

Logical devices can only be configured before the runtime initialises, so it happens here, once,
for the whole session; single-device tests still run on /cpu:0 under the default strategy.

The suite has two sets (setup.cfg): the fast default set, and the tests marked `slow` (process-level,
long runs), which `python3 -m pytest tests -m slow` runs and CI runs too. With
`STABLE_TRAIN_TEST_BUDGET_S` set (CI sets 15), an unmarked test that takes longer (its set-up,
a class's included, and its call) fails: mark it `slow`, or make it shorter.
"""

import gc
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import gin  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

NUM_LOGICAL_CPUS = 2

_cpus = tf.config.list_physical_devices('CPU')
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)


# With more than one logical device (above), TF 2.21 frees an autotuned tf.data iterator that a
# tf.function consumed only once its autotune thread wakes by itself (its period grows to a
# minute; 42 s measured for one iterator 100 s old; gdb: RootDataset::Iterator's destructor waits
# on Model::OptimizeLoop), and the suite's collections below waited up to minutes for them. The
# library never sets tf.data options, and no test is about autotuning: every iterator of the suite
# runs with it off.
_dataset_iter = tf.data.Dataset.__iter__


def _iter_without_autotune(dataset):
  if dataset.options().autotune.enabled is False:
    return _dataset_iter(dataset)
  options = tf.data.Options()
  options.autotune.enabled = False
  return _dataset_iter(dataset.with_options(options))


tf.data.Dataset.__iter__ = _iter_without_autotune


# Freeing many traced functions at once is slow (TensorFlow unregisters each): left to the
# collector's own timing, a full collection paused whichever test triggered it for up to 40 s.
# The suite collects between tests instead, in tear-downs (every COLLECT_EVERY tests and at the
# end of each file), so no test's own time includes another's garbage.
COLLECT_EVERY = 20
_finished = [0]


def pytest_sessionstart(session):
  del session
  gc.disable()


@pytest.fixture(autouse=True, scope='module')
def _collect_garbage_per_file():
  yield
  gc.collect()


@pytest.fixture(autouse=True)
def _collect_garbage_every_few_tests():
  yield
  _finished[0] += 1
  if _finished[0] % COLLECT_EVERY == 0:
    gc.collect()


@pytest.fixture(autouse=True)
def _clear_gin():
  gin.clear_config()
  yield
  gin.clear_config()


BUDGET_VARIABLE = 'STABLE_TRAIN_TEST_BUDGET_S'


def _budget():
  value = os.environ.get(BUDGET_VARIABLE, '')
  return float(value) if value else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """Fails an unmarked test whose set-up and call took longer than the budget."""
  outcome = yield
  report = outcome.get_result()
  budget = _budget()
  if budget is None or item.get_closest_marker('slow') is not None:
    return
  spent = getattr(item, '_budget_spent', 0.0) + call.duration
  item._budget_spent = spent  # pylint: disable=protected-access
  if call.when == 'call' and spent > budget and report.passed:
    report.outcome = 'failed'
    report.longrepr = (f'{item.nodeid} took {spent:.1f} s, over the fast set\'s budget of '
                       f'{budget:g} s ({BUDGET_VARIABLE}): make it shorter, or mark it '
                       '@pytest.mark.slow.')


def pytest_collection_modifyitems(config, items):
  """Drops tf.test.TestCase's inherited `test_session`, a deprecated helper, not a test (pytest
  would otherwise report it as skipped in every test class)."""
  del config
  items[:] = [item for item in items if item.name != 'test_session']
