"""Tests for stable_train.compat: each private TF/Keras internal is where the code expects it, and
no other module reaches one."""

import os
import re

from absl.testing import parameterized
import keras
import tensorflow as tf

from stable_train import compat

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'stable_train')
# Another object's underscored attribute (`x._y`), not the object's own (`self._y`, `cls._y`).
FOREIGN_PRIVATE = re.compile(r'(?<![\w.])(?!self\b|cls\b)\w+(\(\))?\._[a-z]\w*')


class FeatureTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*[(name, name) for name in compat.FEATURE_CHECKS])
  def test_internal_is_where_stable_train_expects_it(self, name):
    # Fails with InternalMoved naming the feature, TensorFlow's and Keras's versions.
    compat.FEATURE_CHECKS[name]()

  def test_the_error_names_the_versions(self):
    text = str(compat.InternalMoved('flat_call', 'gone'))
    self.assertIn(tf.__version__, text)
    self.assertIn(keras.__version__, text)
    self.assertIn('flat_call', text)

  def test_flat_caller_matches_the_public_call(self):
    fn = tf.function(lambda x: x + 1.0)
    x = tf.constant([1.0, 2.0])
    call = compat.flat_caller(fn.get_concrete_function(x), (x,))
    self.assertAllEqual(call(), fn(x))

  def test_aggregated_gradients_switch_is_undone(self):
    opt = keras.optimizers.SGD(0.1)
    with compat.gradients_already_aggregated(opt) as switched:
      self.assertTrue(switched)
      self.assertIs(opt._all_reduce_sum_gradients, list)  # pylint: disable=protected-access
    self.assertIsNot(opt._all_reduce_sum_gradients, list)  # pylint: disable=protected-access

  def test_a_cond_marked_runs_only_the_branch_it_takes(self):
    ran = tf.Variable(0)

    @tf.function
    def f(take):
      def long():
        ran.assign_add(1)
        return tf.constant(2.0)
      return compat.taken_branch_only(tf.cond(take, long, lambda: tf.constant(1.0)))

    graph = f.get_concrete_function(tf.constant(True)).graph
    ifs = [op for op in graph.get_operations() if op.type in ('If', 'StatelessIf')]
    self.assertLen(ifs, 1)  # Else the internal moved: TF now builds another op for tf.cond.
    self.assertFalse(ifs[0].get_attr('_lower_using_switch_merge'))
    self.assertEqual([float(f(tf.constant(t))) for t in (True, False, True)], [2.0, 1.0, 2.0])
    self.assertEqual(int(ran.numpy()), 2)
    self.assertEqual(float(compat.taken_branch_only(tf.constant(3.0))), 3.0)  # Eager: as is.
    empty = tf.function(lambda p: compat.taken_branch_only(tf.cond(p, list, list)))
    self.assertEqual(empty(tf.constant(True)), [])  # No output: nothing to mark.

  def test_namedtuple_fields(self):
    import collections  # pylint: disable=g-import-not-at-top
    point = collections.namedtuple('Point', ['x', 'y'])(1, 2)
    self.assertEqual(tuple(compat.namedtuple_fields(point)), ('x', 'y'))
    self.assertIsNone(compat.namedtuple_fields((1, 2)))


class OnlyCompatReachesInternalsTest(tf.test.TestCase):

  def _offending_lines(self):
    found = []
    for root, _, files in os.walk(PACKAGE):
      for name in sorted(files):
        path = os.path.join(root, name)
        if not name.endswith('.py') or os.path.samefile(root, os.path.dirname(compat.__file__)):
          continue
        with open(path, encoding='utf-8') as f:
          for number, line in enumerate(f, 1):
            code = line.split('#', 1)[0]
            if ('tensorflow.python' in code or 'keras.src' in code
                or FOREIGN_PRIVATE.search(code)):
              found.append(f'{os.path.relpath(path, PACKAGE)}:{number}: {line.strip()}')
    return found

  def test_no_module_but_compat_imports_or_reads_private_internals(self):
    self.assertEqual(self._offending_lines(), [])

  def test_the_pattern_finds_a_foreign_private_read(self):
    self.assertTrue(FOREIGN_PRIVATE.search('x = optimizer._learning_rate'))
    self.assertTrue(FOREIGN_PRIVATE.search('t._build(dataset)'))
    self.assertFalse(FOREIGN_PRIVATE.search('self._writer = writer'))
    self.assertFalse(FOREIGN_PRIVATE.search('path = os.path.join(root, name)'))
    self.assertFalse(FOREIGN_PRIVATE.search('cls._held[key] = 1'))


if __name__ == '__main__':
  tf.test.main()
