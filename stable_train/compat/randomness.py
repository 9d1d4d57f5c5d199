"""The random states a skip or a rollback must restore: TensorFlow's global generator and Keras's
global SeedGenerator, and the strategy a distributed variable belongs to (private internals,
reached here and in this package only; `check_random_internals` in its __init__ checks them)."""

import threading
from typing import Optional

import keras
import tensorflow as tf
def tf_global_generator() -> tf.random.Generator:
  """TensorFlow's global generator; created from the global seed when one is set (else TF seeds
  it from the OS, and two runs of one seeded config checkpoint different random states)."""
  from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  from tensorflow.python.ops import stateful_random_ops  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  seed = context.global_seed()

  def make():
    if seed is not None:
      tf.random.set_global_generator(tf.random.Generator.from_seed(seed))
    return tf.random.get_global_generator()

  if getattr(stateful_random_ops, 'global_generator', None) is not None:
    return tf.random.get_global_generator()
  if not tf.distribute.has_strategy():
    return make()
  # In a strategy's scope the generator would become that strategy's distributed variable, which
  # no later strategy could use: it is made on a thread of its own, outside every scope.
  made = []
  worker = threading.Thread(target=lambda: made.append(make()))
  worker.start()
  worker.join()
  return made[0]


def variable_strategy(variable) -> Optional[tf.distribute.Strategy]:
  """The strategy a (Keras or TF) distributed variable was created under; None: a plain one."""
  inner = variable.value if isinstance(variable, keras.Variable) else variable
  return getattr(inner, '_distribute_strategy', None)


def keras_global_seed_generator(create: bool = True):
  """Keras's global SeedGenerator (unseeded `keras.random.*` draw from it), made if `create`;
  None when Keras keeps it elsewhere or (without `create`) it does not exist yet."""
  try:
    if create:
      from keras.src.random import seed_generator  # pylint: disable=g-import-not-at-top
      return seed_generator.global_seed_generator()
    from keras.src.backend.common import global_state  # pylint: disable=g-import-not-at-top
    return global_state.get_global_attribute('global_seed_generator')
  except (ImportError, AttributeError):
    return None
