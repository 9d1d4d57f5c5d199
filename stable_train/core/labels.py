"""Labels against the model's outputs: the class count of sparse labels where it is unambiguous,
the in-graph range check and safe labels that go with it, and labels a known loss cannot read
against the outputs (they would broadcast silently, or fail in the first step).

Core: pure functions of specs and tensors. On CPU, TensorFlow's sparse cross-entropy (and a
`tf.gather` by label) raises on a label outside [0, classes) and kills the step; on GPU it gives
NaN. With the class count known, the step fails such a batch's input check (an input fault that
names the labels) and feeds the loss safe labels instead, so one bad row never ends a run.
"""

import inspect
from typing import Any, List, Optional, Tuple

import keras
import tensorflow as tf

from stable_train.core import losses

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
# Losses that read labels of the outputs' shape: the elementwise ones and those that compare
# each row's labels with its outputs (a shape mismatch raises there, in the first step).
_SAME_SHAPE = _ELEMENTWISE + (keras.losses.categorical_crossentropy,
                              keras.losses.categorical_focal_crossentropy,
                              keras.losses.categorical_hinge, keras.losses.kl_divergence,
                              keras.losses.cosine_similarity)


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


def shape_problem(label_spec, output_spec, loss) -> Optional[Tuple[str, str]]:
  """(what is wrong, the fix) when `loss` cannot read one label tensor against one floating model
  output as they are shaped; None where they fit or it cannot be told (several labels or outputs,
  unknown ranks, a loss it does not know: a custom loss may read them as it means to).

  A sparse categorical loss reads class indices: labels of the outputs' shape without its last
  axis, or with a last axis of 1. Every other loss it knows reads labels of the outputs' shape,
  after Keras squeezes or expands a last axis of 1; other labels broadcast against the outputs
  (a finite, wrong loss) or fail in the first step. The batch axis is not compared (a model
  built by a call has its first batch's size there).
  """
  function = _function(keras.losses.get(loss) if isinstance(loss, str) else loss)
  shapes = _dense_shapes(label_spec, output_spec)
  if shapes is None or function not in _SPARSE + _SAME_SHAPE:
    return None
  labels, outputs = shapes
  name = _name(loss, function)
  if tf.as_dtype(label_spec.dtype) == tf.string:
    return (f'has string labels, which {name} cannot read',
            'map them to numbers in the pipeline (e.g. keras.layers.StringLookup for class names)')
  fits = f'does not fit the model: labels of shape {labels} and model outputs of shape {outputs}'
  if function in _SPARSE:
    indices = outputs[:-1]
    if _fits(labels, indices) or _fits(labels, indices + (1,)):
      return None
    one_hot = ' (one-hot labels: use categorical_crossentropy)' if _fits(labels, outputs) else ''
    return (f'{fits} under {name}, which reads one class index per output row',
            f'give labels of shape {indices} or {indices + (1,)}{one_hot}')
  labels, outputs = _same_rank(labels, outputs)
  if _fits(labels, outputs):
    return None
  dims = [(a, b) for a, b in zip(labels[1:], outputs[1:]) if None not in (a, b) and a != b]
  if len(labels) == len(outputs) and all(1 not in pair for pair in dims):
    problem = f'{fits} under {name}, which reads one label per output'
  elif len(labels) == len(outputs) and dims and dims[-1][1] == 1:
    problem = (f'{fits} would broadcast under {name} (each output compared with all '
               f'{dims[-1][0]} labels)')
  else:
    problem = (f'{fits} would broadcast under {name} (each label compared with all '
               f'{outputs[-1]} outputs)')
  count = {1: 1, 2: labels[-1]}.get(len(labels)) if len(outputs) == 2 else None
  model = (f'the model {count} output{"" if count == 1 else "s"}' if count is not None
           else f'the model outputs of shape {labels}')
  return problem, f"give the labels the outputs' shape {outputs}, or {model}"


def _dense_shapes(label_spec, output_spec):
  """(label shape, output shape) as tuples when there is one dense label tensor and one floating
  output, both of known rank (the output of rank 1 or more); else None."""
  if not isinstance(label_spec, tf.TensorSpec) or output_spec is None:
    return None
  output_shape = getattr(output_spec, 'shape', None)
  if label_spec.shape.rank is None or output_shape is None or len(output_shape) < 1:
    return None
  if not tf.as_dtype(output_spec.dtype).is_floating:
    return None
  return tuple(label_spec.shape.as_list()), tuple(output_shape)


def _same_rank(label_shape, output_shape):
  """The shapes as Keras's losses see them (`squeeze_or_expand_to_same_rank`): where the ranks
  differ by one and the longer shape ends in 1, a rank-1 shorter one gains a last axis of 1,
  else the longer one loses it."""
  if len(label_shape) == len(output_shape) + 1 and label_shape[-1] == 1:
    if len(output_shape) == 1:
      return label_shape, output_shape + (1,)
    return label_shape[:-1], output_shape
  if len(output_shape) == len(label_shape) + 1 and output_shape[-1] == 1:
    if len(label_shape) == 1:
      return label_shape + (1,), output_shape
    return label_shape, output_shape[:-1]
  return label_shape, output_shape


def _fits(shape, wanted) -> bool:
  """Whether `shape` is `wanted` but for the batch axis and unknown dimensions."""
  return len(shape) == len(wanted) and all(
      a is None or b is None or a == b for a, b in zip(shape[1:], wanted[1:]))


def _name(loss, function) -> str:
  """The loss's name for a message: a Keras loss object's class, the name given for a private
  wrapper ('mse' as given by name), a function's name."""
  if isinstance(loss, str):
    return loss
  if isinstance(loss, keras.losses.Loss):
    return loss.name if type(loss).__name__.startswith('_') else type(loss).__name__
  return function.__name__


def output_specs(model, features) -> List[Any]:
  """The flattened outputs (KerasTensors) a Keras model gives for `features` (specs or tensors):
  a functional or Sequential model's own, else a symbolic call (`compute_output_spec`), which
  raises what the model's call raises on such inputs."""
  outputs = getattr(model, 'outputs', None)
  if outputs is None:
    outputs = model.compute_output_spec(
        tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, tf.as_dtype(s.dtype).name),
                              features))
  return tf.nest.flatten(outputs)


def model_classes(model, features, label_spec, loss, *, guarded: bool) -> Optional[int]:
  """The class count of sparse labels (`sparse_classes`) against a Keras model's one output,
  from the specs of its features (or tensors) and labels. None where the output cannot be told
  from the specs, and when not `guarded` (a bare step, no guard at all): the labels are then not
  checked in the step."""
  if not guarded:
    return None
  try:
    outputs = output_specs(model, features)
  except Exception:  # pylint: disable=broad-except  (a model Keras cannot trace symbolically)
    return None
  return sparse_classes(label_spec, outputs[0] if len(outputs) == 1 else None, loss)


def trainer_classes(trainer, element_spec) -> Optional[int]:
  """`model_classes` for a Trainer's data where the Trainer's own `forward` and `compute_loss`
  feed a Keras model's one output and the labels to the loss (its `uses_own_forward()` and
  `uses_own_loss()`); None otherwise."""
  t = trainer
  if not (isinstance(t.model, keras.Model) and t.uses_own_forward() and t.uses_own_loss()):
    return None
  features, label_spec = t.split_batch(element_spec)
  return model_classes(t.model, features, label_spec, t.loss_fn, guarded=bool(t.policies))


def compiled_loss(model) -> Optional[Any]:
  """The one loss a compiled Keras model's `compute_loss` reads its labels with (a Keras loss
  object, or its name as given), or None: a `compute_loss` override, a loss per output or one
  that is not a Keras loss or name."""
  if (type(model).compute_loss is not keras.Model.compute_loss
      or not isinstance(getattr(model, 'loss', None), (str, keras.losses.Loss))):
    return None
  return model.loss


def compiled_classes(model, policies, data) -> Optional[int]:
  """`model_classes` for a compiled model's batch `data` (x, y[, sample_weight]) as its compiled
  loss reads it; None for a `compute_loss` override, a loss that is not a Keras loss or name,
  nested labels and no policies (no guard at all)."""
  x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
  loss = compiled_loss(model)
  if not policies or y is None or tf.nest.is_nested(y) or loss is None:
    return None
  loss = keras.losses.get(loss) if isinstance(loss, str) else loss
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
