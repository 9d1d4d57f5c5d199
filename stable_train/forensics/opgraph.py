"""What fed the op Forensics located, read from the re-run's traced graph.

One question so far: is a division's denominator, or a log's argument, a sum of exponentials,
or is a log's argument such a division (or a value picked from it)? That is a softmax, a
logsumexp or a cross-entropy written by hand (`exp(x) / sum(exp(x))`, `log(sum(exp(x)))`,
`-log(gather(exp(x) / sum(exp(x)), label))`) with no maximum subtracted: its exps underflowed to
0 (0 / 0, log 0) or overflowed (inf / inf). The op located is then a division or a log, but the
cure is the exponential's (`tf.nn.softmax`, `tf.nn.log_softmax`, `tf.reduce_logsumexp`, a loss
from logits), not an epsilon in the division.
"""

import re
from typing import Dict, Optional, Tuple

import tensorflow as tf

# Ops a value passes through unchanged in kind (the numerics check's own included).
_PASS = frozenset({'Identity', 'CheckNumerics', 'CheckNumericsV2', 'Cast', 'ExpandDims', 'Reshape',
                   'Squeeze', 'BroadcastTo', 'StopGradient', 'Tile', 'Transpose', 'ConcatV2'})
_REDUCTIONS = frozenset({'Sum', 'Mean', 'Cumsum'})  # A sum over exps (of its first input)...
_ADDS = frozenset({'AddV2', 'Add'})  # ...plus a constant (an epsilon).
# Ops that pick a log's argument out of a softmax's (the label's probability). Not a product or
# a sum: a factor that can be 0 (a mask, a gate) makes a log of 0 with no exp underflowing.
_PICKS = frozenset({'GatherV2', 'GatherNd', 'StridedSlice', 'Slice', 'Max'})
_DEPTH = 8  # Ops walked back from the operand at most.
SUM_OF_EXP = 'a sum of exp()'  # The record's `operand` for a softmax or logsumexp by hand.
_GRAPH = re.compile(r'Graph name: "([^"]+)"')  # The graph check_numerics stopped in.


def _constant(tensor: tf.Tensor) -> bool:
  op = tensor.op
  while op.type in _PASS and op.inputs:
    op = op.inputs[0].op
  return op.type == 'Const'


def _sum_of_exp(tensor: tf.Tensor, depth: int, summed: bool,
                seen: Dict[Tuple[str, int, bool], bool]) -> bool:
  """Whether `tensor` is a reduction (sum, mean, cumulative sum) over an `Exp`'s output, through
  pass-through ops and the addition of constants only (`seen`: answers so far, so a graph whose
  additions share their inputs is walked once)."""
  key = (tensor.name, depth, summed)
  if key not in seen:
    seen[key] = False  # A cycle (none in a graph) or an answer still to come.
    seen[key] = _walk(tensor.op, depth, summed, seen)
  return seen[key]


def _walk(op, depth, summed, seen) -> bool:
  if op.type == 'Exp':
    return summed
  if depth <= 0 or not op.inputs:
    return False
  if op.type in _PASS:
    return _sum_of_exp(op.inputs[0], depth - 1, summed, seen)
  if op.type in _REDUCTIONS:
    return _sum_of_exp(op.inputs[0], depth - 1, True, seen)
  if op.type == 'AddN':
    return any(_sum_of_exp(t, depth - 1, True, seen) for t in op.inputs)
  if op.type in _ADDS:  # sum(exp(x)) + eps, never + a learned term that may cancel it.
    terms = [t for t in op.inputs if not _constant(t)]
    return len(terms) == 1 and _sum_of_exp(terms[0], depth - 1, summed, seen)
  return False


def _softmax_by_hand(tensor: tf.Tensor, depth: int) -> bool:
  """Whether `tensor` is a division over a sum of exps (a softmax by hand), through pass-through
  ops and ops that pick its values (a gather of the label's column, a slice)."""
  op = tensor.op
  if op.type in ('RealDiv', 'Div'):
    return _sum_of_exp(op.inputs[1], _DEPTH, False, {})
  if depth <= 0 or not op.inputs or op.type not in _PASS | _PICKS:
    return False
  return _softmax_by_hand(op.inputs[0], depth - 1)


def operand(fn, batch, op_name: str, op_type: str, error: str = '') -> Optional[str]:
  """`SUM_OF_EXP` where the op `op_name` in the graph of the `tf.function` `fn` traced for `batch`
  is a division (its denominator) or a log (its argument) over a sum of exps; None otherwise:
  where the op is not in the graph's top level (a loop's or a nested function's body, named in
  the check_numerics `error` text: an op of the same name at the top level is another op).
  Never raises: a diagnostic's detail."""
  try:
    if op_type in ('RealDiv', 'Div', 'DivNoNan'):
      index = 1
    elif op_type in ('Log', 'Log1p'):
      index = 0
    else:
      return None
    graph = fn.get_concrete_function(batch).graph
    named = _GRAPH.search(error)
    if named and named.group(1) != graph.name:
      return None
    op = graph.get_operation_by_name(op_name)
    fed = op.inputs[index]
    return SUM_OF_EXP if _sum_of_exp(fed, _DEPTH, False, {}) or (
        index == 0 and _softmax_by_hand(fed, _DEPTH)) else None
  except Exception:  # pylint: disable=broad-except  (an op or a graph it cannot read)
    return None
