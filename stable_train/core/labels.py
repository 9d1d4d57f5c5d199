"""Labels against the model's outputs: the class count of sparse labels where it is unambiguous,
the in-graph range check and safe labels that go with it, and the label shape that would broadcast
silently against the outputs.

Core: pure functions of specs and tensors. On CPU, TensorFlow's sparse cross-entropy (and a
`tf.gather` by label) raises on a label outside [0, classes) and kills the step; on GPU it gives
NaN. With the class count known, the step fails such a batch's input check (an input fault that
names the labels) and feeds the loss safe labels instead, so one bad row never ends a run.
"""

import inspect
from typing import Any, Optional

import keras
import tensorflow as tf

from stable_train.core import losses
from stable_train import errors

# Losses that read each label as an index into the outputs' last axis.
_SPARSE = (keras.losses.sparse_categorical_crossentropy, losses.sparse_softmax_cross_entropy,
           losses.naive_softmax_cross_entropy)
# Elementwise losses: labels of another last dimension than the outputs broadcast against them,
# every label compared with every output, without an error.
_ELEMENTWISE = (keras.losses.mean_squared_error, keras.losses.mean_absolute_error,
                keras.losses.mean_absolute_percentage_error,
                keras.losses.mean_squared_logarithmic_error, keras.losses.huber,
                keras.losses.log_cosh, keras.losses.binary_crossentropy,
                keras.losses.binary_focal_crossentropy, keras.losses.hinge,
                keras.losses.squared_hinge, keras.losses.poisson)


def _function(loss) -> Any:
  """The function a loss computes with: a Keras loss object's `fn`; gin's and functools' wrappers
  taken off."""
  if isinstance(loss, keras.losses.Loss):
    loss = getattr(loss, 'fn', None)
  return inspect.unwrap(loss) if callable(loss) else None


def _one_label_and_output(label_spec, output_spec):
  """(label shape, output shape) when there is one dense label tensor of rank 1 or (B, 1) and one
  floating output of rank 2; else None."""
  if not isinstance(label_spec, tf.TensorSpec) or output_spec is None:
    return None
  label_shape, output_shape = label_spec.shape, getattr(output_spec, 'shape', None)
  if label_shape.rank is None or output_shape is None or len(output_shape) != 2:
    return None
  if not tf.as_dtype(output_spec.dtype).is_floating:
    return None
  if not (label_shape.rank == 1 or (label_shape.rank == 2 and label_shape[1] == 1)):
    return None
  return label_shape, tuple(output_shape)


def sparse_classes(label_spec, output_spec, loss) -> Optional[int]:
  """The class count C when `loss` reads the labels as class indices: a sparse categorical loss,
  one integer (or float) label tensor of shape (B,) or (B, 1) and one floating output of shape
  (B, C) with C >= 2 known. None otherwise (one-hot or dense labels, regression, several outputs,
  unknown shapes or an unknown loss): no check is made then."""
  shapes = _one_label_and_output(label_spec, output_spec)
  if shapes is None or _function(loss) not in _SPARSE:
    return None
  dtype = tf.as_dtype(label_spec.dtype)
  classes = shapes[1][-1]
  if not (dtype.is_integer or dtype.is_floating) or classes is None or classes < 2:
    return None
  return int(classes)


def check_broadcast(label_spec, output_spec, loss, owner: str = 'Trainer') -> None:
  """A one-line ConfigError when labels of shape (B,) or (B, 1) meet outputs of shape (B, C),
  C >= 2, under an elementwise loss (MeanSquaredError, BinaryCrossentropy, ...): they would
  broadcast into a (B, C) difference and train without an error, on the wrong objective."""
  shapes = _one_label_and_output(label_spec, output_spec)
  function = _function(loss)
  if shapes is None or function not in _ELEMENTWISE:
    return
  (label_shape, output_shape), classes = shapes, shapes[1][-1]
  if classes is None or classes < 2:
    return
  name = function.__name__
  if isinstance(loss, keras.losses.Loss):  # Its class; a private wrapper's name (as given: 'mse').
    name = loss.name if type(loss).__name__.startswith('_') else type(loss).__name__
  raise errors.ConfigError(
      f'{owner}: labels of shape {tuple(label_shape)} and model outputs of shape {output_shape} '
      f'would broadcast under {name} (each label compared with all {classes} outputs); give '
      f'the labels the outputs\' shape (None, {classes}), or the model 1 output.')


def model_classes(model, features, label_spec, loss, *, guarded: bool,
                  check_owner: Optional[str] = None) -> Optional[int]:
  """The class count of sparse labels (`sparse_classes`) against a Keras model's one output,
  from the specs of its features (or tensors) and labels, after a ConfigError for labels that
  would broadcast against that output (`check_broadcast`, with `check_owner` as the owner; None:
  no check). None where the output cannot be told from the specs, and when not `guarded` (a bare
  step, no guard at all): the labels are then not checked in the step."""
  outputs = getattr(model, 'outputs', None)  # A functional or Sequential model's.
  if outputs is None:
    try:
      outputs = model.compute_output_spec(
          tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), features))
    except Exception:  # pylint: disable=broad-except  (a model Keras cannot trace symbolically)
      return None
  outputs = tf.nest.flatten(outputs)
  output_spec = outputs[0] if len(outputs) == 1 else None
  if check_owner is not None:
    check_broadcast(label_spec, output_spec, loss, check_owner)
  return sparse_classes(label_spec, output_spec, loss) if guarded else None


def trainer_classes(trainer, element_spec) -> Optional[int]:
  """`model_classes` for a Trainer's data, with the broadcast check, where the Trainer's own
  `forward` and `compute_loss` feed a Keras model's one output and the labels to the loss (its
  `uses_own_forward()` and `uses_own_loss()`); None otherwise."""
  t = trainer
  if not (isinstance(t.model, keras.Model) and t.uses_own_forward() and t.uses_own_loss()):
    return None
  features, label_spec = t.split_batch(element_spec)
  return model_classes(t.model, features, label_spec, t.loss_fn, guarded=bool(t.policies),
                       check_owner='Trainer')


def compiled_classes(model, policies, data) -> Optional[int]:
  """`model_classes` for a compiled model's batch `data` (x, y[, sample_weight]) as its compiled
  loss reads it; None for a `compute_loss` override, a loss that is not a Keras loss or name,
  nested labels and no policies (no guard at all)."""
  x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
  if (not policies or y is None or tf.nest.is_nested(y)
      or type(model).compute_loss is not keras.Model.compute_loss
      or not isinstance(model.loss, (str, keras.losses.Loss))):
    return None
  loss = keras.losses.get(model.loss) if isinstance(model.loss, str) else model.loss
  return model_classes(model, x, tf.TensorSpec(y.shape, y.dtype), loss, guarded=True)


def in_range(labels: tf.Tensor, classes: int) -> tf.Tensor:
  """Traced: whether every label lies in [0, classes) (False for a NaN label)."""
  low, high = tf.cast(0, labels.dtype), tf.cast(classes, labels.dtype)
  return tf.reduce_all(tf.logical_and(labels >= low, labels < high))


def safe(labels: tf.Tensor, classes: int) -> tf.Tensor:
  """Traced: the labels, with each one outside [0, classes) replaced by 0: identical for a batch
  that passes `in_range` (whose loss is then bit-identical), crash-free for one that does not
  (which is skipped)."""
  low, high = tf.cast(0, labels.dtype), tf.cast(classes, labels.dtype)
  ok = tf.logical_and(labels >= low, labels < high)
  return tf.where(ok, labels, tf.zeros_like(labels))


def replace_labels(batch, labels, new_labels):
  """`batch` with its label tensors `labels` (its own, as `split_batch` hands them out) swapped
  for those of `new_labels` (the same structure)."""
  if new_labels is labels:
    return batch
  swap = {id(t): u for t, u in zip(tf.nest.flatten(labels), tf.nest.flatten(new_labels))}
  return tf.nest.map_structure(lambda t: swap.get(id(t), t), batch)
