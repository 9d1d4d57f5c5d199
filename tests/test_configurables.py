"""Tests for stable_train.app.configurables: gin bindings for Keras objects, policies and subclasses."""

import gin
import keras
import tensorflow as tf

import stable_train
from stable_train.app import configurables  # pylint: disable=unused-import
from stable_train.core import losses
from stable_train.policies import basic as policies
from stable_train.trainer import trainer as trainer_lib

BASE = """
Trainer.model = @mlp()
mlp.input_dim = 8
mlp.hidden = (4,)
Trainer.optimizer = @keras.optimizers.SGD()
keras.optimizers.SGD.learning_rate = @keras.optimizers.schedules.ExponentialDecay()
keras.optimizers.schedules.ExponentialDecay.initial_learning_rate = 0.1
keras.optimizers.schedules.ExponentialDecay.decay_steps = 10
keras.optimizers.schedules.ExponentialDecay.decay_rate = 0.5
Trainer.loss = @keras.losses.MeanSquaredError()
Trainer.policies = [@ClipByGlobalNorm(), @SkipNonFinite()]
ClipByGlobalNorm.max_norm = 2.5
SkipNonFinite.max_consecutive = 4
Trainer.steps_per_loop = 3
"""


@gin.configurable
class TaggedTrainer(trainer_lib.Trainer):
  """A user's subclass with an argument of its own and a custom loss."""

  def __init__(self, *, tag='none', **kwargs):
    super().__init__(**kwargs)
    self.tag = tag

  def compute_loss(self, batch, training):
    features, labels = self.split_batch(batch)
    return losses.sparse_softmax_cross_entropy(labels, self.forward(features, training))


class ConfigurablesTest(tf.test.TestCase):

  def test_every_policy_registers_itself_where_it_is_defined(self):
    from stable_train.forensics import forensics  # pylint: disable=g-import-not-at-top
    from stable_train.core import interfaces
    from stable_train.policies import recovery

    def subclasses(cls):
      for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)

    ours = {c for c in subclasses(interfaces.Policy) if c.__module__.startswith('stable_train.')}
    self.assertLessEqual({policies.CheckNumerics, policies.ClipByGlobalNorm,
                          policies.SkipNonFinite, policies.ValidateInputs, recovery.LossSpike,
                          recovery.Rollback, forensics.Forensics}, ours)
    for cls in ours:
      with self.subTest(policy=cls.__name__):
        gin.clear_config()
        # Unknown names raise: the binding resolves only if the class is registered.
        gin.parse_config(f"stable_train.{cls.__name__}.name = 'x'", skip_unknown=False)
        self.assertEqual(gin.query_parameter(f'{cls.__name__}.name'), 'x')
    self.assertIs(stable_train.ValidateInputs, policies.ValidateInputs)  # The public name.

  def test_trainer_from_bindings(self):
    gin.parse_config(BASE)
    t = trainer_lib.Trainer(model_dir=None)
    self.assertIsInstance(t.optimizer, keras.optimizers.SGD)
    # The Trainer wraps a schedule so that rollbacks can scale it.
    self.assertIsInstance(t.optimizer._learning_rate.schedule,  # pylint: disable=protected-access
                          keras.optimizers.schedules.ExponentialDecay)
    self.assertEqual([type(p) for p in t.policies],
                     [policies.ClipByGlobalNorm, policies.SkipNonFinite])
    self.assertAllClose(t.policies[0].max_norm, 2.5)
    self.assertEqual(t.policies[1].max_consecutive, 4)
    self.assertEqual(t.steps_per_loop, 3)

  def test_base_class_bindings_reach_a_subclass(self):
    gin.parse_config(BASE + "\nTaggedTrainer.tag = 'mine'\n")
    t = TaggedTrainer(model_dir=None)
    self.assertEqual(t.tag, 'mine')
    self.assertEqual(t.steps_per_loop, 3)  # A Trainer.* binding, through super().__init__.
    self.assertIsInstance(t.optimizer, keras.optimizers.SGD)

  def test_initializers_and_regularizers(self):
    gin.parse_config("""
      mlp.input_dim = 3
      mlp.hidden = (2,)
      mlp.kernel_initializer = @keras.initializers.Ones()
      mlp.kernel_regularizer = @keras.regularizers.L2()
      keras.regularizers.L2.l2 = 0.5
    """)
    model = gin.get_configurable('mlp')()
    self.assertAllEqual(model.layers[0].kernel, tf.ones([3, 2]))
    # 0.5 * (6 ones in the 3x2 kernel + 2 in the 2x1 kernel); the Trainer adds model.losses.
    self.assertAllClose(tf.add_n(model.losses), 4.0)


if __name__ == '__main__':
  tf.test.main()
