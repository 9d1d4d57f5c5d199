"""The Trainer's parts taken as Keras's `compile` and `fit` take them: a compiled model's own
optimizer, loss and metrics, string identifiers ('adam', 'sparse_categorical_crossentropy',
'accuracy'), `(x, y, sample_weight)` batches and class weights."""

import logging
from typing import Any, List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from stable_train import compat
from stable_train import errors

log = logging.getLogger('stable_train')

_ACCURACY = ('accuracy', 'acc')


def parts(model, optimizer, loss, metrics) -> Tuple[Any, Any, Optional[List[Any]]]:
  """(optimizer, loss, metrics) with a compiled model's own filling those not given, and string
  identifiers resolved as `compile` resolves them. Metrics are created here (in the caller's
  strategy scope); the compiled ones are new objects of the same configuration."""
  compiled = isinstance(model, keras.Model) and getattr(model, 'compiled', False)
  if compiled:
    optimizer = model.optimizer if optimizer is None else optimizer
    loss = model.loss if loss is None else loss
    if metrics is None:
      metrics = _compiled_metrics(model)
  for name, value in (('optimizer', optimizer), ('loss', loss)):
    if value is None:
      raise errors.ConfigError(
          f'Trainer: {name}=None; pass one (e.g. optimizer=\'adam\', loss='
          "'sparse_categorical_crossentropy'), or a model compiled with it (model.compile(...)).")
  if isinstance(loss, (list, tuple, dict)):
    raise errors.ConfigError(
        f'Trainer: loss={loss!r} is one loss per output; pass one loss for the whole model, or '
        'override Trainer.compute_loss.')
  if isinstance(optimizer, str):
    optimizer = _get('optimizer', optimizer, keras.optimizers.get)
  if isinstance(loss, str) or (compiled and loss is model.loss and not _is_loss(loss)):
    loss = as_loss(loss)
  if metrics is not None and not isinstance(metrics, (str, keras.metrics.Metric)):
    metrics = [as_metric(m) for m in metrics]
  return optimizer, loss, metrics


def build_compiled(model, data) -> None:
  """Builds a compiled model, its compiled loss and metrics and its optimizer from `data` (a batch,
  its symbolic tensors or its spec) as Keras's symbolic build does. A model Keras cannot call on
  symbolic tensors (a gradient taken inside `call` is None there): built already, it gets its
  optimizer built alone, as Keras's own first trace does without a strategy (its compiled loss
  builds in that trace); not built, a one-line error that names the fix."""
  try:
    compat.keras_symbolic_build(model, data)
  except (RuntimeError, ValueError) as e:
    if model.built and all(layer.built for layer in model.layers):
      model.optimizer.build(model.trainable_variables)
    elif isinstance(e, ValueError):
      raise  # Keras's own: inputs the model does not take.
    else:
      raise errors.ConfigError(
          'stable_train.guard_fit: Keras could not build the model from symbolic inputs (a '
          'gradient taken inside call?); build it first by calling it on one batch: '
          'model(x[:1])') from e


def without_optionals(spec):
  """A dataset's element spec as Keras hands the step its elements: an empty Optional (what
  Keras makes of a None in the data, a missing sample weight) as None."""
  return tf.nest.map_structure(lambda s: None if isinstance(s, tf.OptionalSpec) else s, spec)


def as_loss(identifier) -> keras.losses.Loss:
  """A Keras loss object from a string or a per-example loss function, reduced to a scalar mean
  over the batch (and weighted by a sample weight) as `compile` does."""
  fn = _get('loss', identifier, keras.losses.get) if isinstance(identifier, str) else identifier
  if _is_loss(fn):
    return fn
  name = identifier if isinstance(identifier, str) else getattr(fn, '__name__', 'loss')
  return _FunctionLoss(fn, name=name)


def as_metric(identifier):
  """A Keras metric object from a string or a function (a metric object is kept); 'accuracy' is
  the binary, sparse or categorical accuracy by the labels' and predictions' shapes, as in
  `compile`."""
  if isinstance(identifier, str) and identifier.lower() in _ACCURACY:
    return keras.metrics.MeanMetricWrapper(accuracy_by_shape, name=identifier)
  fn = _get('metric', identifier, keras.metrics.get) if isinstance(identifier, str) else identifier
  if isinstance(fn, keras.metrics.Metric) and isinstance(identifier, str):
    fn.name = identifier  # A new object from its name, named as compile names it ('mae').
  if isinstance(fn, (keras.metrics.Metric, type)) or not callable(fn):
    return fn  # A metric object, or what the Trainer's own check refuses with one line.
  name = identifier if isinstance(identifier, str) else getattr(fn, '__name__', 'metric')
  return keras.metrics.MeanMetricWrapper(fn, name=name)


def split_element(batch):
  """The Trainer's (features, labels) of an element: (x, y), (x, y, sample_weight), or a dict
  with a 'labels' (or 'label') key; a one-line ConfigError for anything else."""
  if isinstance(batch, dict):
    for key in ('labels', 'label'):
      if key in batch:
        return {k: v for k, v in batch.items() if k != key}, batch[key]
    raise errors.ConfigError(
        f"Trainer: a dict batch needs a 'labels' key; got keys {sorted(batch)}.")
  if isinstance(batch, (tuple, list)) and len(batch) in (2, 3):
    return batch[0], batch[1]
  raise errors.ConfigError('Trainer: each dataset element must be (x, y), (x, y, sample_weight) '
                           'or a dict with a "labels" key.')


def split_batch(batch):
  """(features, labels) of a Keras batch: x, y or x, y, sample_weight (labels () without y)."""
  x, y, _ = keras.utils.unpack_x_y_sample_weight(batch)
  return x, (() if y is None else y)


def call_loss(loss, labels, predictions, batch):
  """`loss(labels, predictions)`, with `sample_weight=` the third part of an (x, y,
  sample_weight) batch; a loss that takes no sample weights (a plain function) then is a
  ConfigError naming the fix."""
  if not (isinstance(batch, (tuple, list)) and len(batch) == 3):
    if not _is_loss(loss) and _dense(labels) and _dense(predictions):
      labels, predictions = _same_rank(labels, predictions)  # As compile's wrapper does.
    return loss(labels, predictions)
  check_sample_weights(batch, loss)
  return loss(labels, predictions, sample_weight=batch[2])


def check_sample_weights(batch, loss) -> None:
  """A ConfigError naming the fix when `batch` (a batch or its element spec) is (features,
  labels, sample_weight) and `loss` takes no sample weights (a plain function); eager, before
  the first trace, and again in the traced call."""
  if isinstance(batch, (tuple, list)) and len(batch) == 3 and not _is_loss(loss):
    raise errors.ConfigError(
        f'Trainer: (features, labels, sample_weight) batches need a Keras loss, but loss={loss!r} '
        'takes no sample_weight; pass e.g. keras.losses.MeanSquaredError() or its name.')


def with_class_weight(dataset: tf.data.Dataset, class_weight) -> tf.data.Dataset:
  """`dataset` of (x, y) batches as (x, y, w): w the weight of each label's class (1.0 for a
  class not listed), as Keras's fit turns class weights into sample weights."""
  if not isinstance(class_weight, dict) or not class_weight or not all(
      isinstance(k, int) and k >= 0 for k in class_weight):
    raise errors.ConfigError(
        f'Trainer.fit: class_weight={class_weight!r} must map class ids (ints >= 0) to weights, '
        'e.g. {0: 1.0, 1: 5.0}.')
  spec = dataset.element_spec
  if not isinstance(spec, tuple) or len(spec) != 2 or tf.nest.is_nested(spec[1]):
    raise errors.ConfigError(
        'Trainer.fit: class_weight needs (features, labels) batches with one label tensor '
        '(no sample weights besides).')
  # One more entry, 1.0, for every class above the highest listed; a label out of range weighs
  # 1.0 too (the step's label check fails its batch: no gather error in the input pipeline).
  table = tf.constant([float(class_weight.get(c, 1.0)) for c in range(max(class_weight) + 2)])

  def weigh(x, y):
    classes = (tf.argmax(y, axis=-1) if y.shape.rank >= 2 and y.shape[-1] != 1
               else tf.reshape(y, tf.shape(y)[:1]))
    classes = tf.cast(tf.round(tf.cast(classes, tf.float32)), tf.int32)
    unlisted = len(table) - 1
    classes = tf.where((classes < 0) | (classes > unlisted), unlisted, classes)
    return x, y, tf.gather(table, classes)

  return dataset.map(weigh)


@keras.saving.register_keras_serializable(package='stable_train')
def accuracy_by_shape(y_true, y_pred):
  """Keras's rule for 'accuracy': binary for one output, sparse for class-id labels, else
  categorical. Registered: the evaluation's copy of a metric is made from its config."""
  if y_pred.shape[-1] == 1:
    return keras.metrics.binary_accuracy(y_true, y_pred)
  if len(y_true.shape) < len(y_pred.shape) or (len(y_true.shape) >= 2 and y_true.shape[-1] == 1):
    return keras.metrics.sparse_categorical_accuracy(y_true, y_pred)
  return keras.metrics.categorical_accuracy(y_true, y_pred)


class _FunctionLoss(keras.losses.Loss):
  """A per-example loss function as a Keras loss (mean over the batch, sample weights), its
  labels and outputs brought to one rank first as `compile`'s wrapper does: labels (B,) against
  outputs (B, 1) become (B, 1) (Keras's binary cross-entropy refuses ranks that differ)."""

  def __init__(self, fn, name: str):
    super().__init__(name=name)
    self.fn = fn

  def call(self, y_true, y_pred):
    return self.fn(*_same_rank(y_true, y_pred))


def plain_call(loss) -> bool:
  """Whether `loss` computes its function as given: not a Keras loss object, or one whose `call`
  is Keras's own for its built-in losses (one for all) or that of `as_loss`'s wrapper (the
  Trainer's loss given by name). A subclass with a `call` of its own may transform its labels or
  outputs: a check that reads the function alone says nothing of it."""
  return not isinstance(loss, keras.losses.Loss) or type(loss).call in (
      keras.losses.MeanSquaredError.call, _FunctionLoss.call)


def _dense(value) -> bool:
  """A plain tensor or array (not a nest, nor a sparse or ragged tensor)."""
  return isinstance(value, (tf.Tensor, np.ndarray))  # A SparseTensor or RaggedTensor is not.


def _same_rank(a, b):
  """`a` and `b` at one rank where they differ by a trailing dimension of 1: a rank-1 tensor
  gains one, any other loses it."""
  a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
  if a.shape.rank is None or b.shape.rank is None or abs(a.shape.rank - b.shape.rank) != 1:
    return a, b
  longer, shorter = (a, b) if a.shape.rank > b.shape.rank else (b, a)
  if longer.shape[-1] != 1:
    return a, b
  if shorter.shape.rank == 1:
    shorter = tf.expand_dims(shorter, -1)
  else:
    longer = tf.squeeze(longer, -1)
  return (longer, shorter) if a.shape.rank > b.shape.rank else (shorter, longer)


def _is_loss(value) -> bool:
  return isinstance(value, keras.losses.Loss)


def _get(kind: str, identifier: str, get):
  try:
    return get(identifier)
  except ValueError:
    raise errors.ConfigError(
        f'Trainer: {kind}={identifier!r} is not a Keras {kind} name; e.g. '
        f'{ {"optimizer": "adam", "loss": "mse", "metric": "accuracy"}[kind]!r}, or an '
        'object.') from None


def _compiled_metrics(model) -> Optional[List[Any]]:
  """The metrics a compiled model was given (new objects), from its compile config; None when
  the config cannot be read (a lambda: pass Trainer(metrics=...))."""
  try:
    config = model.get_compile_config() or {}
  except Exception as e:  # pylint: disable=broad-except  (Keras cannot serialize a lambda)
    log.warning("the compiled model's metrics could not be read (%s); pass Trainer(metrics=...)",
                str(e).splitlines()[0][:120])
    return None
  metrics = config.get('metrics')
  if not metrics:
    return None
  return [m if isinstance(m, str) else keras.metrics.get(m) for m in metrics]


def check_guardable(model) -> None:
  """A one-line ConfigError unless `model` is a compiled keras.Model whose own `train_step` is
  Keras's (`guard_fit` replaces it)."""
  if not isinstance(model, keras.Model):
    raise errors.ConfigError(
        f'stable_train.guard_fit: model must be a keras.Model, got {type(model).__name__}.')
  if getattr(model, 'optimizer', None) is None or not getattr(model, 'compiled', False):
    raise errors.ConfigError(
        'stable_train.guard_fit: compile the model first (model.compile(optimizer=..., loss=...)), '
        'then guard it.')
  if type(model).train_step is not keras.Model.train_step:
    raise errors.ConfigError(
        f'stable_train.guard_fit: {type(model).__name__} overrides train_step, which the guard '
        'replaces; override compute_loss (and compute_metrics) instead: the guard calls them.')
