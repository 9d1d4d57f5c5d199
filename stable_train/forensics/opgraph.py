"""What fed the op Forensics located, read from the re-run's traced graph.

One question so far: is a division's denominator, or a log's argument, a sum of exponentials?
That is a softmax or a logsumexp written by hand (`exp(x) / sum(exp(x))`,
`log(sum(exp(x)))`) with no maximum subtracted: its exps underflowed to 0 (0 / 0, log 0) or
overflowed (inf / inf). The op located is then a division or a log, but the cure is the
exponential's (`tf.nn.softmax`, `tf.nn.log_softmax`, `tf.reduce_logsumexp`, a loss from logits),
not an epsilon in the division.
"""

from typing import Optional

import tensorflow as tf

# Ops a value passes through unchanged in kind (the numerics check's own included).
_PASS = frozenset({'Identity', 'CheckNumerics', 'CheckNumericsV2', 'Cast', 'ExpandDims', 'Reshape',
                   'Squeeze', 'BroadcastTo', 'StopGradient', 'Tile', 'Transpose', 'ConcatV2'})
_REDUCTIONS = frozenset({'Sum', 'Mean', 'AddN', 'Cumsum'})  # A sum over exps...
_ADDS = frozenset({'AddV2', 'Add'})  # ...plus an epsilon (or another term).
_DEPTH = 8  # Ops walked back from the operand at most.
SUM_OF_EXP = 'a sum of exp()'  # The record's `operand` for a softmax or logsumexp by hand.


def _sum_of_exp(tensor: tf.Tensor, depth: int = _DEPTH, summed: bool = False) -> bool:
  """Whether `tensor` is a reduction (sum, mean, cumulative sum) over an `Exp`'s output, through
  pass-through ops and additions only."""
  op = tensor.op
  if op.type == 'Exp':
    return summed
  if depth <= 0:
    return False
  if op.type in _PASS:
    return _sum_of_exp(op.inputs[0], depth - 1, summed) if op.inputs else False
  if op.type in _REDUCTIONS or op.type in _ADDS:
    operands = op.inputs[:1] if op.type in ('Sum', 'Mean', 'Cumsum') else op.inputs
    return any(_sum_of_exp(t, depth - 1, summed or op.type in _REDUCTIONS) for t in operands)
  return False


def operand(fn, batch, op_name: str, op_type: str) -> Optional[str]:
  """`SUM_OF_EXP` where the op `op_name` in the graph of the `tf.function` `fn` traced for `batch`
  is a division (its denominator) or a log (its argument) over a sum of exps; None otherwise,
  or where the op is not in the graph's top level (inside a loop's or a nested function's body).
  Never raises: a diagnostic's detail."""
  try:
    if op_type in ('RealDiv', 'Div', 'DivNoNan'):
      index = 1
    elif op_type in ('Log', 'Log1p'):
      index = 0
    else:
      return None
    op = fn.get_concrete_function(batch).graph.get_operation_by_name(op_name)
    return SUM_OF_EXP if _sum_of_exp(op.inputs[index]) else None
  except Exception:  # pylint: disable=broad-except  (an op or a graph it cannot read)
    return None
