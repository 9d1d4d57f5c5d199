"""`BatchCheck`: whether a Keras model can take a dataset's batches, told from their spec before
the first step; one check for the training and the eval data of both front doors.

Refused, each with one line that names the elements and the fix: elements that are not batches (a
tensor without a batch axis, tensors whose first dimensions differ, or one example of what the
model's input takes), string features the model's inputs do not take, and labels its loss cannot
read against its one output (`labels.shape_problem`: they would broadcast, or fail in the first
step). Where the model's inputs or outputs cannot be told (a subclassed model Keras cannot call
symbolically), what depends on them is not checked: the run's own error stands.
"""

import contextlib
from typing import Any, Callable, Iterator, List, Optional

import keras
import tensorflow as tf

from stable_train.core import labels as labels_lib
from stable_train import errors

BATCH_FIX = 'batch it, e.g. dataset.batch(32)'
_STRING_FIX = ('map them to numbers in the pipeline (e.g. dataset.map with tf.strings.to_number, '
               "or keras.layers.StringLookup), or give the model a string input "
               "(keras.Input(dtype='string') and a lookup layer)")
# What a model's call raises on inputs it cannot take (Keras's symbolic build: RuntimeError).
_CALL_ERRORS = (ValueError, TypeError, RuntimeError, NotImplementedError, tf.errors.OpError)


def describe(element_spec) -> str:
  """The elements' dtypes and shapes in `tf.nest.flatten` order ('float32[None, 4], int32[None]');
  tensors and arrays are described as their specs."""
  parts = []
  for spec in tf.nest.flatten(element_spec):
    dtype, shape = getattr(spec, 'dtype', None), getattr(spec, 'shape', None)
    if dtype is None or shape is None:
      parts.append(type(spec).__name__)
      continue
    shape = tf.TensorShape(shape)
    dims = '[...]' if shape.rank is None else str(shape.as_list())
    parts.append(f'{tf.as_dtype(dtype).name}{dims}')
  return ', '.join(parts)


class BatchCheck:
  """The check of one dataset's elements (specs, or the tensors of a traced batch) against a
  Keras model.

  Args:
    element_spec: the dataset's `element_spec` (or a batch of tensors).
    split: element -> (features, labels), as the step splits a batch.
    subject: the data, as the message names it ('the dataset', 'the eval dataset').
    where: appended to every message (e.g. '; check train.eval_dataset_fn').
  """

  def __init__(self, element_spec, *, split: Callable[[Any], Any], subject: str = 'the dataset',
               where: str = ''):
    self.element_spec = element_spec
    self.features, self.labels = split(element_spec)
    self.subject, self.where = subject, where

  def refuse(self, problem: str, fix: str) -> errors.ConfigError:
    """The one-line error: the data, its elements, what is wrong and the fix."""
    return errors.ConfigError(f'{self.subject} (elements {describe(self.element_spec)}) '
                              f'{problem}; {fix}{self.where}.')

  def check(self, model, loss=None) -> None:
    """`inputs` and `outputs` (a built model)."""
    self.inputs(model)
    self.outputs(model, loss)

  def inputs(self, model) -> None:
    """Batches, and features the model's inputs take: one example of a declared input (a
    functional or Sequential model's), a tensor without a batch axis, first dimensions that
    differ; string features for a declared input of numbers. Needs no built model."""
    pairs = _input_pairs(model, self.features)
    for feature, wanted in pairs:
      if _one_example(feature.shape, wanted.shape):
        raise self.refuse(
            f'is not batched: the model takes inputs of shape {tuple(wanted.shape)} and gets one '
            f'example, {tuple(feature.shape)}', BATCH_FIX)
    self._batch_axes()
    for feature, wanted in pairs:
      if _is_string(feature) and not _is_string(wanted):
        raise self.refuse(f'has string features, which the model\'s input ({wanted.dtype} '
                          f'{tuple(wanted.shape)}) cannot take', _STRING_FIX)

  def _batch_axes(self) -> None:
    dense = [s for s in tf.nest.flatten(self.element_spec)
             if getattr(s, 'shape', None) is not None and tf.TensorShape(s.shape).rank is not None]
    for spec in dense:
      if tf.TensorShape(spec.shape).rank == 0:
        raise self.refuse(f'is not batched: {describe(spec)} has no batch axis', BATCH_FIX)
    firsts = sorted({tf.TensorShape(s.shape)[0] for s in dense} - {None})
    if len(firsts) > 1:
      raise self.refuse(f'is not batched: its tensors\' first dimensions differ ({firsts}), '
                        'where a batch\'s are its batch size', BATCH_FIX)

  @contextlib.contextmanager
  def building(self) -> Iterator[None]:
    """Around a build of the model from this data: a failure with string features is refused as
    such (else raised as it came)."""
    try:
      yield
    except _CALL_ERRORS as e:
      self._strings_failed(e)
      raise

  def outputs(self, model, loss=None) -> None:
    """The labels against the model's one output under `loss` (None: the labels are not checked:
    a loss of the caller's own may read them freely). A model that cannot be called on string
    features symbolically is refused for them."""
    try:
      outputs = labels_lib.output_specs(model, self.features)
    except _CALL_ERRORS as e:
      self._strings_failed(e)
      return  # Not told symbolically: the model's own call will say.
    if loss is None or len(outputs) != 1 or tf.nest.is_nested(self.labels):
      return
    problem = labels_lib.shape_problem(_as_spec(self.labels), outputs[0], loss)
    if problem is not None:
      raise self.refuse(*problem)

  def _strings_failed(self, error: Exception) -> None:
    if any(_is_string(f) for f in tf.nest.flatten(self.features)):
      raise self.refuse(f'has string features, which the model cannot take '
                        f'({errors.one_line(error)[:200]})', _STRING_FIX) from None


def for_trainer(trainer, element_spec, **kwargs) -> Optional[BatchCheck]:
  """The check of a Trainer's data, split by its `split_batch`, where its own `forward` calls a
  Keras model on the features (`uses_own_forward()`); None otherwise. `kwargs`: `BatchCheck`'s."""
  t = trainer
  if not (isinstance(t.model, keras.Model) and t.uses_own_forward()):
    return None
  return BatchCheck(element_spec, split=t.split_batch, **kwargs)


def trainer_loss(trainer) -> Optional[Any]:
  """The loss a Trainer reads the labels with, where its own `compute_loss` does; else None."""
  return trainer.loss_fn if trainer.uses_own_loss() else None


class FitDataCheck:
  """The check of a compiled Keras model's data in `fit` (and `evaluate`), run where Keras first
  looks at it (`compat.keras_fit_data_hook`): before its symbolic build, the train function and
  any callback. A model Keras has not built yet has its outputs checked at the first trace
  (`after_build`), once Keras has built it from the data."""

  def __init__(self, model):
    self._model = model
    self._pending: Optional[BatchCheck] = None  # Inputs checked, outputs not yet (not built).
    self._checked = set()  # (data, loss) checked whole: fit's next epoch's evaluate, say.

  @contextlib.contextmanager
  def around_build(self, element_spec) -> Iterator[None]:
    """Checks the batches of `element_spec` (None: a single batch, not checked) around Keras's
    symbolic build from them."""
    m = self._model
    key = (repr(element_spec), id(m.loss))
    if element_spec is None or key in self._checked:
      self._pending = None  # A single batch (train_on_batch) is Keras's own to check.
      yield
      return
    check = BatchCheck(element_spec, split=_split_compiled, subject='the data')
    check.inputs(m)
    with check.building():
      yield
    self._pending = check
    if m.built and all(layer.built for layer in m.layers):
      self.after_build()
      self._checked.add(key)

  def building(self):
    """Around the build at the first trace: `BatchCheck.building` of the data checked last."""
    return self._pending.building() if self._pending else contextlib.nullcontext()

  def after_build(self) -> None:
    """The outputs check left from `around_build` (the model is built now), if any."""
    check, self._pending = self._pending, None
    if check is not None:
      check.outputs(self._model, labels_lib.compiled_loss(self._model))


def _split_compiled(element):
  x, y, _ = keras.utils.unpack_x_y_sample_weight(element)
  return x, y


def _input_pairs(model, features) -> List[tuple]:
  """(feature spec, the model's input) pairs where the model declares its inputs and the
  features match them one to one; else []."""
  try:
    wanted = model.input  # The structure the model was built with.
  except (AttributeError, ValueError):
    wanted = getattr(model, 'inputs', None)
  if wanted is None:
    return []
  flat_features, flat_wanted = tf.nest.flatten(features), tf.nest.flatten(wanted)
  if len(flat_features) != len(flat_wanted):
    return []
  if len(flat_wanted) > 1:
    try:
      tf.nest.assert_same_structure(features, wanted, check_types=False)
    except (ValueError, TypeError):
      return []
  return [(f, w) for f, w in zip(flat_features, flat_wanted)
          if getattr(f, 'shape', None) is not None and getattr(f, 'dtype', None) is not None
          and tf.TensorShape(f.shape).rank is not None]


def _one_example(shape, wanted) -> bool:
  """Whether `shape` is one example of the input `wanted` (its shape without the batch axis,
  every dimension known; not where Keras would add a last axis of 1 to a batch)."""
  shape, wanted = tf.TensorShape(shape), tf.TensorShape(wanted)
  if wanted.rank is None or shape.rank != wanted.rank - 1 or not shape.is_fully_defined():
    return False
  if wanted.rank > 1 and wanted[-1] == 1:
    return False  # (k,) for an input of (None, 1) may be a batch: Keras gives it a last axis.
  return all(w is None or w == s for s, w in zip(shape.as_list(), wanted.as_list()[1:]))


def _is_string(spec) -> bool:
  dtype = getattr(spec, 'dtype', None)  # A tf.DType, or a KerasTensor's name ('string').
  return dtype is not None and tf.as_dtype(dtype) == tf.string


def _as_spec(value):
  """A label's TensorSpec from a spec, tensor or KerasTensor."""
  if isinstance(value, (tf.Tensor, keras.KerasTensor)):
    return tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))
  return value
