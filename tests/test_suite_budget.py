"""Tests for tests/conftest.py's budget: an unmarked test over STABLE_TRAIN_TEST_BUDGET_S fails,
naming the fix; a `slow` one and a quick one pass."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = '''
import time
import pytest


def test_sleepy():
  time.sleep(1.0)


@pytest.mark.slow
def test_sleepy_but_marked():
  time.sleep(1.0)


def test_quick():
  pass
'''


class BudgetTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.folder = tempfile.mkdtemp()  # Its own rootdir: the conftest as the suite has it.
    shutil.copy(os.path.join(HERE, 'conftest.py'), cls.folder)
    with open(os.path.join(cls.folder, 'test_sample.py'), 'w') as f:
      f.write(SAMPLE)
    with open(os.path.join(cls.folder, 'pytest.ini'), 'w') as f:
      f.write('[pytest]\nmarkers =\n    slow: long\n')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.folder)

  def _pytest(self, budget):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', STABLE_TRAIN_TEST_BUDGET_S=budget)
    return subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                           self.folder], capture_output=True, text=True, timeout=300, env=env,
                          cwd=self.folder)

  @pytest.mark.slow
  def test_an_unmarked_test_over_the_budget_fails_with_the_fix(self):
    proc = self._pytest('0.5')
    self.assertEqual(proc.returncode, 1, proc.stdout[-2000:])
    self.assertIn('FAILED test_sample.py::test_sleepy ', proc.stdout)
    self.assertIn('over the fast set\'s budget of 0.5 s', proc.stdout)
    self.assertIn('1 failed, 2 passed', proc.stdout)


if __name__ == '__main__':
  unittest.main()
