"""Registers stable_train's classes and Keras optimizers, schedules, initializers, regularizers
and losses with gin. Importing this module is all that is needed (the CLI does)."""

import gin
import keras

from stable_train.core import losses
from stable_train.core import lr  # pylint: disable=unused-import
from stable_train.forensics import forensics  # pylint: disable=unused-import
from stable_train.policies import basic as policies  # pylint: disable=unused-import
from stable_train.policies import clipping  # pylint: disable=unused-import
from stable_train.policies import diagnostics  # pylint: disable=unused-import
from stable_train.policies import divergence  # pylint: disable=unused-import
from stable_train.policies import outliers  # pylint: disable=unused-import
from stable_train.policies import precision  # pylint: disable=unused-import
from stable_train.policies import recovery  # pylint: disable=unused-import
from stable_train.policies import stopping  # pylint: disable=unused-import
from stable_train.runtime import distribute
from stable_train.trainer import trainer
from stable_train.zoo import data
from stable_train.zoo import models

_done = False


def _register_keras_module(module, gin_module: str) -> None:
  for name in dir(module):
    obj = getattr(module, name)
    if name.startswith('_') or not isinstance(obj, type) or not name[:1].isupper():
      continue
    try:
      gin.external_configurable(obj, name=name, module=gin_module)
    except ValueError:  # Already registered (a re-import).
      pass


def register() -> None:
  """Registers everything once; safe to call repeatedly."""
  global _done
  if _done:
    return
  _done = True
  # Trainer is made configurable in place (not through a subclass), so a user's subclass that
  # calls super().__init__(**kwargs) still receives the `Trainer.*` bindings.
  gin.configurable('Trainer', module='stable_train')(trainer.Trainer)
  # The policies register themselves where they are defined (`@gin.register`; WarmupSchedule in
  # lr.py): importing those modules above registers them. The testing tools' `Faults` registers
  # when a config imports it (`import stable_train.testing`): the library never imports them.
  for fn in (data.synthetic_regression, data.synthetic_classification, data.synthetic_images,
             data.synthetic_sequences, models.convnet_bn, models.transformer, models.lstm,
             models.mlp,
             losses.sparse_softmax_cross_entropy, losses.naive_softmax_cross_entropy,
             trainer.default_policies):
    gin.register(fn, module='stable_train')
  for fn in (distribute.default_strategy, distribute.mirrored_strategy,
             distribute.multi_worker_mirrored_strategy, distribute.tpu_strategy):
    gin.register(fn, module='stable_train')
  _register_keras_module(keras.optimizers, 'keras.optimizers')
  _register_keras_module(keras.optimizers.schedules, 'keras.optimizers.schedules')
  _register_keras_module(keras.initializers, 'keras.initializers')
  _register_keras_module(keras.regularizers, 'keras.regularizers')
  _register_keras_module(keras.losses, 'keras.losses')
  _register_keras_module(keras.metrics, 'keras.metrics')


register()
