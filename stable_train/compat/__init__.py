"""Every private TensorFlow/Keras internal stable_train uses, each behind a feature check.

No module outside this package (its `numerics` and `randomness` hold two groups) imports
`tensorflow.python` or `keras.src`, or reads another object's underscored attribute. When an
upgrade moves one of these internals, `tests/test_compat.py` fails naming the feature and the
versions, and this package is the one place to mend. Where a public fallback exists
(the flat call), the accessor falls back to it; where none does, it raises `InternalMoved`.
"""

import contextlib
import os
from typing import Any, Callable, List, Optional, Sequence

import keras
import tensorflow as tf
# The trackable base class (to tell state-saving trackables from containers) and the identity map
# a checkpoint's object map needs (variables are not hashable).
from tensorflow.python.trackable import base as _trackable_base  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.util import object_identity as _object_identity  # pylint: disable=g-direct-tensorflow-import

from stable_train.compat import numerics
from stable_train.compat import randomness

try:  # The structured binding of a concrete function's inputs (see `flat_caller`).
  from tensorflow.python.eager.polymorphic_function import function_type_utils as _ftu  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
except ImportError:  # pragma: no cover - another TensorFlow: the public call is used.
  _ftu = None


class InternalMoved(RuntimeError):
  """A TensorFlow/Keras internal this module reaches is not where it was."""

  def __init__(self, feature: str, detail: str):
    super().__init__(
        f'{feature}: a TensorFlow/Keras internal that stable_train uses has moved (TensorFlow '
        f'{tf.__version__}, Keras {keras.__version__}): {detail}; mend stable_train/compat/.')


# -- tf.function: the flat call ------------------------------------------------------------------
def flat_caller(concrete, args: Sequence[Any]) -> Optional[Callable[[], Any]]:
  """A no-argument callable: `concrete(*args)` by its flat call, without the structured binding
  of every call (~0.1 ms, a quickstart step at 10 steps per loop), its captures read on every call
  (MultiWorkerMirrored defers some); None where TensorFlow has none (use the public call)."""
  flat_call = getattr(concrete, '_call_flat', None)
  unpack = getattr(getattr(concrete, 'function_type', None), 'unpack_inputs', None)
  if None in (flat_call, unpack, _ftu):
    return None
  try:
    bound = _ftu.canonicalize_function_inputs(tuple(args), {}, concrete.function_type)
    flat = list(unpack(bound))
  except Exception:  # pylint: disable=broad-except
    return None
  return lambda: flat_call(flat, concrete.captured_inputs)


def check_flat_call() -> None:
  """Raises InternalMoved unless `flat_caller` works on this TensorFlow."""
  fn = tf.function(lambda x, n: x * tf.cast(n, tf.float32))
  x, n = tf.constant(2.0), tf.constant(3, tf.int64)
  call = flat_caller(fn.get_concrete_function(x, n), (x, n))
  if call is None or float(call()) != 6.0:
    raise InternalMoved('flat_call', 'ConcreteFunction._call_flat / function_type_utils')


# -- tf.cond ---------------------------------------------------------------------------------------
def taken_branch_only(outputs):
  """`outputs` of a traced `tf.cond`, its If op marked to call the branch taken, not lowered to
  Switch/Merge (where each op of the other branch passes the executor, dead, every step)."""
  op = None if tf.executing_eagerly() else getattr((tf.nest.flatten(outputs) or [0])[0], 'op', None)
  op = op.inputs[0].op if op is not None and op.type == 'Identity' else op
  if op is not None and op.type in ('If', 'StatelessIf'):
    op._set_attr('_lower_using_switch_merge', tf.compat.v1.AttrValue(b=False))  # pylint: disable=protected-access
  return outputs


# -- Keras optimizers ----------------------------------------------------------------------------
def learning_rate_of(optimizer):
  """The optimizer's learning rate as given: a schedule, a callable or its variable (Keras has no
  public getter for a schedule; `optimizer.learning_rate` evaluates it)."""
  if not hasattr(optimizer, '_learning_rate'):
    raise InternalMoved('optimizer_learning_rate', 'keras Optimizer._learning_rate is gone')
  return optimizer._learning_rate  # pylint: disable=protected-access


def built_for(optimizer) -> Optional[List[Any]]:
  """The variables a built Keras optimizer holds slots for, or None if it is not built."""
  if not getattr(optimizer, 'built', False):
    return None
  return getattr(optimizer, '_trainable_variables', None)


def optimizer_strategy(optimizer, default):
  """The distribution strategy a Keras TF optimizer captured when created (`default` if none)."""
  return getattr(optimizer, '_distribution_strategy', default)


@contextlib.contextmanager
def gradients_already_aggregated(optimizer):
  """While tracing, stops a Keras 3 TF optimizer from all-reducing (summing) the gradients again
  in replica context (`_all_reduce_sum_gradients`): the step aggregated them already, and a second
  sum would multiply them by the replicas. Only that method, on this instance, in the trace."""
  if not hasattr(optimizer, '_all_reduce_sum_gradients'):
    yield False  # Not a Keras TF optimizer: nothing to switch off.
    return
  optimizer.__dict__['_all_reduce_sum_gradients'] = list  # (grad, var) pairs, unchanged.
  try:
    yield True
  finally:
    del optimizer.__dict__['_all_reduce_sum_gradients']


def check_optimizer_internals() -> None:
  """Raises InternalMoved unless the optimizer internals above are where they were."""
  schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
  opt = keras.optimizers.Adam(schedule)
  if learning_rate_of(opt) is not schedule:
    raise InternalMoved('optimizer_learning_rate', 'Optimizer._learning_rate is not the schedule')
  v = tf.Variable([1.0])
  opt.build([v])
  if [id(x) for x in built_for(opt) or []] != [id(v)]:
    raise InternalMoved('optimizer_built_for', 'Optimizer._trainable_variables')
  if not hasattr(opt, '_all_reduce_sum_gradients'):
    raise InternalMoved('optimizer_all_reduce', 'TFOptimizer._all_reduce_sum_gradients')
  if not hasattr(opt, '_distribution_strategy'):
    raise InternalMoved('optimizer_strategy', 'TFOptimizer._distribution_strategy')


# -- Keras models --------------------------------------------------------------------------------
def keras_loss_tracker(model):
  """The `Mean` metric a compiled Keras model reports as `loss` (its train_step updates it)."""
  tracker = getattr(model, '_loss_tracker', None)
  if tracker is None:
    raise InternalMoved('keras_loss_tracker', 'Trainer._loss_tracker of a compiled model')
  return tracker


def keras_compute_loss(model, **kwargs):
  """`model.compute_loss(..., training=True)`, also for an override without `training`."""
  call = getattr(model, '_compute_loss', None)
  if call is None:
    return model.compute_loss(**kwargs, training=True)
  return call(**kwargs, training=True)


def keras_symbolic_build(model, data) -> None:
  """Builds a compiled Keras model, its compiled loss and metrics and its optimizer from a batch
  (or the symbolic tensors of one) as Keras does before its first train step (eager)."""
  build = getattr(model, '_symbolic_build', None)
  if build is None:
    raise InternalMoved('keras_symbolic_build', 'Trainer._symbolic_build')
  build(data_batch=data)


def keras_loss_metric_variables(model) -> List[Any]:
  """The variables of the `Mean` per loss of a compiled Keras model with several (`<output>_loss`
  logs), updated in the forward pass; empty for one loss, or before the compiled loss is built."""
  if not hasattr(model, '_compile_loss'):
    raise InternalMoved('keras_loss_metric_variables', 'Trainer._compile_loss')
  compiled = model._compile_loss  # pylint: disable=protected-access
  return [v for m in (compiled.metrics if compiled is not None else ()) for v in m.variables]


def check_keras_model_internals() -> None:
  """Raises InternalMoved unless a compiled Keras model has the internals above."""
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
  model.compile(optimizer='sgd', loss='mse')
  if not isinstance(keras_loss_tracker(model), keras.metrics.Mean):
    raise InternalMoved('keras_loss_tracker', 'Trainer._loss_tracker is not a Mean metric')
  if not callable(getattr(model, '_compute_loss', None)):
    raise InternalMoved('keras_compute_loss', 'Trainer._compute_loss')
  keras_symbolic_build(model, (tf.zeros([2, 1]), tf.zeros([2, 1])))
  if not model.optimizer.built:
    raise InternalMoved('keras_symbolic_build', 'Trainer._symbolic_build built no optimizer')
  inputs = keras.Input((1,))
  model = keras.Model(inputs, [keras.layers.Dense(1)(inputs), keras.layers.Dense(1)(inputs)])
  model.compile(optimizer='sgd', loss=['mse', 'mse'])
  keras_symbolic_build(model, (tf.zeros([2, 1]), (tf.zeros([2, 1]), tf.zeros([2, 1]))))
  if len(keras_loss_metric_variables(model)) != 4:  # Two Means, each a total and a count.
    raise InternalMoved('keras_loss_metric_variables', 'no Mean per loss in Trainer._compile_loss')


def keras_fit_data_hook(model, around: Callable[[Any], Any]) -> None:
  """Makes every `fit` and `evaluate` of this model instance run Keras's first look at its data
  (`Trainer._maybe_symbolic_build`, before the train function and any callback) inside
  `around(element_spec)`: one replica's batches' spec, None for `train_on_batch`."""
  build = getattr(type(model), '_maybe_symbolic_build', None)
  if build is None:
    raise InternalMoved('keras_fit_data_hook', 'Trainer._maybe_symbolic_build')

  def hook(iterator=None, data_batch=None):
    with around(None if iterator is None else _epoch_spec(iterator)):
      return build(model, iterator=iterator, data_batch=data_batch)

  model._maybe_symbolic_build = hook  # pylint: disable=protected-access


def keras_train_on_batch_without(model, fields: Sequence[str]) -> None:
  """This model instance's `train_on_batch` returns the plain model's list (or value), without the
  logs `fields` Keras would append (a dict, `return_dict=True`, keeps them)."""
  flatten = getattr(model, '_flatten_metrics_in_order', None)
  if flatten is None:
    raise InternalMoved('keras_train_on_batch_without', 'Trainer._flatten_metrics_in_order')
  keras_method = type(model).train_on_batch

  def train_on_batch(x, y=None, sample_weight=None, class_weight=None, return_dict=False):
    logs = keras_method(model, x, y, sample_weight, class_weight, return_dict=True)
    return logs if return_dict else flatten({k: v for k, v in logs.items() if k not in fields})

  model.train_on_batch = train_on_batch


def _epoch_spec(iterator):
  """The element spec of one replica's batches of a Keras `TFEpochIterator`."""
  batches = getattr(iterator, '_get_iterator', None)
  if batches is None:
    raise InternalMoved('keras_fit_data_hook', 'TFEpochIterator._get_iterator')
  # Under a strategy each batch spec is a PerReplicaSpec of the replicas' equal specs.
  return tf.nest.map_structure(lambda spec: getattr(spec, '_value_specs', (spec,))[0],
                               batches().element_spec)


def check_keras_fit_internals() -> None:
  """Raises InternalMoved unless `keras_fit_data_hook` sees a `fit`'s batches, also mirrored."""
  devices = [d.name for d in tf.config.list_logical_devices('CPU')][:2]
  for strategy in (tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(
      devices, cross_device_ops=tf.distribute.ReductionToOneDevice())):
    with strategy.scope():
      model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
      model.compile(optimizer='sgd', loss='mse')
    seen = []
    keras_fit_data_hook(model, lambda spec: seen.append(spec) or contextlib.nullcontext())
    data = tf.data.Dataset.from_tensor_slices((tf.zeros([8, 3]), tf.zeros([8, 1]))).batch(4)
    model.fit(data, epochs=1, verbose=0)
    wanted = (tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32))
    if len(seen) != 1 or not all(isinstance(s, tf.TensorSpec) and s.is_compatible_with(w)
                                 for s, w in zip(tf.nest.flatten(seen[0]), wanted)):
      raise InternalMoved('keras_fit_data_hook', f'fit under {type(strategy).__name__} showed '
                          f'{seen!r}, not the batches\' spec')


# -- op-level numerics checks --------------------------------------------------------------------
check_numerics_in_order = numerics.check_numerics_in_order


def check_numerics_internals() -> None:
  """Raises InternalMoved unless gated checks (`check_numerics_in_order`) gate an op's consumers
  and name the op that made a NaN."""
  fn = tf.function(lambda x: tf.sqrt(x - 2.0) * 3.0)
  with check_numerics_in_order() as gated:
    mul = next(op for op in fn.get_concrete_function(tf.TensorSpec([1])).graph.get_operations()
               if op.type == 'Mul')
    fed = mul.inputs[0].op
    if not gated or fed.type != 'Identity' or not fed.control_inputs:
      raise InternalMoved('check_numerics_in_order', 'check_numerics_callback._get_output_tensor')
    try:
      fn(tf.constant([1.0]))
      named = ''
    except tf.errors.InvalidArgumentError as e:
      named = str(e)
  if 'graph op "Sqrt"' not in named:
    raise InternalMoved('check_numerics_in_order', 'no error naming the Sqrt that made a NaN')


# -- random states -------------------------------------------------------------------------------
tf_global_generator = randomness.tf_global_generator
variable_strategy = randomness.variable_strategy
keras_global_seed_generator = randomness.keras_global_seed_generator


def check_random_internals() -> None:
  """Raises InternalMoved unless both global generators are reachable."""
  from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  from tensorflow.python.ops import stateful_random_ops  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  if not hasattr(context, 'global_seed') or not hasattr(stateful_random_ops, 'global_generator'):
    raise InternalMoved('tf_global_generator', 'context.global_seed / global_generator')
  if keras_global_seed_generator() is None or keras_global_seed_generator(create=False) is None:
    raise InternalMoved('keras_global_seed_generator', 'seed_generator.global_seed_generator')


# -- checkpoints ---------------------------------------------------------------------------------
def saves_own_state(node) -> bool:
  """Whether a trackable saves values of its own (beyond its children), as a variable does."""
  for cls in type(node).mro():
    if cls is _trackable_base.Trackable:
      return False
    if any(name in cls.__dict__
           for name in ('_serialize_to_tensors', '_gather_saveables_for_checkpoint')):
      return True
  return False


def identity_map():
  """A dict keyed by object identity (variables are not hashable), for `set_object_map`."""
  return _object_identity.ObjectIdentityDictionary()


def set_object_map(checkpoint: tf.train.Checkpoint, object_map) -> None:
  """Makes `checkpoint` write `object_map`'s stand-ins under its nodes' keys (TF's async way)."""
  saver = getattr(checkpoint, '_saver', None)
  if saver is None or not hasattr(saver, '_object_map'):
    raise InternalMoved('checkpoint_object_map', 'Checkpoint._saver._object_map')
  saver._object_map = object_map  # pylint: disable=protected-access


def check_checkpoint_internals() -> None:
  """Raises InternalMoved unless the checkpoint internals above behave as they did."""
  v = tf.Variable(1.0)
  if not saves_own_state(v) or saves_own_state(tf.Module()):
    raise InternalMoved('saves_own_state', 'Trackable._serialize_to_tensors')
  checkpoint = tf.train.Checkpoint(v=v)
  mapping = identity_map()
  mapping[v] = tf.Variable(2.0)
  set_object_map(checkpoint, mapping)


# -- Python ----------------------------------------------------------------------------------------
def namedtuple_fields(value) -> Optional[Sequence[str]]:
  """The field names of a namedtuple instance, or None for anything else."""
  if isinstance(value, tuple):
    return getattr(type(value), '_fields', None)
  return None


def hard_exit(code: int) -> None:
  """Ends the process at once, flushing nothing (as after kill -9): fault injection only."""
  os._exit(code)  # pylint: disable=protected-access


FEATURE_CHECKS = {
    'flat_call': check_flat_call,
    'optimizer': check_optimizer_internals,
    'random': check_random_internals,
    'checkpoint': check_checkpoint_internals,
    'keras_model': check_keras_model_internals,
    'keras_fit': check_keras_fit_internals,
    'check_numerics': check_numerics_internals,
}
