"""Op-level numerics checking in the order the graph runs (a private TensorFlow internal, reached
here and in this package only; `check_numerics_internals` in its __init__ checks it)."""

import contextlib

import tensorflow as tf
from tensorflow.python.debug.lib import check_numerics_callback as _callback  # pylint: disable=g-direct-tensorflow-import


@contextlib.contextmanager
def check_numerics_in_order(gated: bool = True):
  """`tf.debugging.enable_check_numerics()` whose checks gate their ops' consumers (unless not
  `gated`); yields whether they do. In a `tf.function` TensorFlow runs each op's check beside the graph, so the
  check of an op downstream may fail first (a recurrent loop fed a NaN that another branch made
  by a race with that branch's own check): the op it names is then not where the NaN was born.
  Gated, an op runs only on inputs checked finite, so the op named made NaN/Inf from finite
  inputs. A function's inputs (Placeholders: a loop's or a branch's) are left ungated. Where
  the internal has moved, the checks run ungated (and it yields False)."""
  tf.debugging.enable_check_numerics()
  callback = getattr(getattr(_callback, '_state', None), 'check_numerics_callback', None)
  plain = getattr(callback, '_get_output_tensor', None) if gated else None
  busy = []  # The gate's own Identity, made inside the callback, is not gated again.

  def gated(op_type, tensor, checked, v1_graph):
    if v1_graph or busy or op_type == b'Placeholder':
      return plain(op_type, tensor, checked, v1_graph)
    busy.append(op_type)
    try:
      with tf.control_dependencies([checked]):
        return tf.identity(tensor)
    finally:
      busy.pop()

  if plain is not None:
    callback._get_output_tensor = gated  # pylint: disable=protected-access
  try:
    yield plain is not None
  finally:
    if plain is not None:
      del callback._get_output_tensor  # pylint: disable=protected-access  (the class's again)
    tf.debugging.disable_check_numerics()
