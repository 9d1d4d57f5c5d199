"""Tests of stable_train.policies.moved: weights that did not move, units that stayed alike."""

import keras
import tensorflow as tf

from stable_train.policies import moved


def mlp(kernel='glorot_uniform', units=(16, 4)):
  keras.utils.set_random_seed(0)
  layers = [keras.layers.Dense(u, kernel_initializer=kernel) for u in units]
  return keras.Sequential([keras.Input((8,))] + layers)


def alike(model, start):
  variables = model.trainable_variables
  return moved.alike(variables, 100, start, moved.fingerprint(variables))


class MovedTest(tf.test.TestCase):

  def test_unmoved_until_one_weight_moves(self):
    model = mlp()
    start = moved.fingerprint(model.trainable_variables)
    self.assertIsNotNone(moved.unmoved(start, model.trainable_variables, 100))
    model.trainable_variables[1].assign_add([1e-7] * 16)  # One bias, by one step's worth.
    self.assertIsNone(moved.unmoved(start, model.trainable_variables, 100))

  def test_most_kernels_moved_and_still_alike(self):
    model = mlp(keras.initializers.Constant(0.05), units=(16, 8, 4))
    variables = model.trainable_variables
    start = moved.fingerprint(variables)
    self.assertIsNone(alike(model, start))  # Alike, but nothing moved yet.
    for layer in model.layers[:2]:  # The same step for every unit: still alike.
      layer.kernel.assign_add(tf.fill(layer.kernel.shape, 0.01))
    rule, reason = alike(model, start)  # The head's, unmoved beside them, is not counted.
    self.assertEqual(rule, moved.ALIKE)
    self.assertIn('2 of its 3 kernels', reason)
    # Half or fewer (an alike head averaged, a layer's design): no verdict.
    model.layers[1].kernel.assign(tf.random.normal(model.layers[1].kernel.shape))
    self.assertIsNone(alike(model, start))

  def test_judged_only_where_the_loss_did_not_halve(self):
    model = mlp(keras.initializers.Constant(0.05), units=(16, 8, 4))
    record = moved.Moved()
    record.record(model.trainable_variables, 0)  # The first loop's fingerprints.
    for layer in model.layers[:2]:
      layer.kernel.assign_add(tf.fill(layer.kernel.shape, 0.01))
    record.record(model.trainable_variables, 100)
    for smoothed, verdict in ((0.9, moved.ALIKE), (0.4, None)):  # From a start of 1.0.
      found = record.verdict(model.trainable_variables, 50, {'smoothed': smoothed, 'start': 1.0})
      self.assertEqual(found and found[0], verdict)

  def test_alike_kernels_that_never_moved_are_no_verdict(self):
    # A zero head that no gradient reached (an unused output, a single-key attention's bias):
    # whatever the rest did, never "did not train" for it.
    model = mlp(keras.initializers.Zeros())
    self.assertIsNone(alike(model, moved.fingerprint(model.trainable_variables)))
    # Kernels of one nonzero constant that never moved while a bias did (Dense(ones) sums that
    # saturate a tanh, so no gradient comes back: blind35's TD3 actor): alike, counted; zeros
    # beside them are not.
    for init, verdict in (('ones', moved.ALIKE), ('zeros', None)):
      model = mlp(init, units=(16, 8, 4))
      start = moved.fingerprint(model.trainable_variables)
      model.layers[-1].bias.assign_add(tf.fill([4], 0.1))
      found = alike(model, start)
      self.assertEqual(found and found[0], verdict, init)
    # Beside a kernel that moved, even a one-unit head's, they are cut off by design (a fixed
    # filter bank behind a stop_gradient before a trained Dense(1)): not counted.
    model = mlp('ones', units=(16, 8, 1))
    start = moved.fingerprint(model.trainable_variables)
    model.layers[-1].kernel.assign_add(tf.fill([8, 1], 0.1))
    self.assertIsNone(alike(model, start))
    random = mlp()  # Random kernels never have two units alike, moved or not.
    start = moved.fingerprint(random.trainable_variables)
    for v in random.trainable_variables:
      v.assign_add(tf.ones_like(v))
    self.assertIsNone(alike(random, start))


if __name__ == '__main__':
  tf.test.main()
