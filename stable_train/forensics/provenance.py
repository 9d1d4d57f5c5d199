"""Provenance of a non-finite step: the variable and layer it reached first, and the op that made it.

Two levels. The cheap one reads the step's per-variable gradient finite flags (computed on every
step anyway). The deep one re-runs the step's forward and backward pass on the saved batch in a
fresh `tf.function` (never XLA: check_numerics is silent there) under op-level numerics checks
whose checks gate each op's consumers (`compat.check_numerics_in_order`: ungated, a check runs
beside the graph and one downstream may fail first), so the op its error names made NaN/Inf from
finite inputs; the layer follows from its name scope. Both serve Forensics and scripts/replay.py.
"""

import dataclasses
import re
import weakref
from typing import Any, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from stable_train import compat
from stable_train.core import guard as guard_lib
from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train.core import state as state_lib
from stable_train.forensics import opgraph


def variable_path(v) -> str:
  """The name reports use for a variable, e.g. 'mlp/dense_1/kernel' (same as the Trainer's)."""
  path = getattr(v, 'path', None) or v.name
  return path[:-2] if path.endswith(':0') else path


def layer_of(path: str) -> str:
  """The layer part of a variable path: 'mlp/dense_1/kernel' -> 'mlp/dense_1'."""
  return path.rsplit('/', 1)[0] if '/' in path else path


def variable_provenance(grad_flags: Sequence[bool], variable_paths: Sequence[str], *,
                        loss_finite: bool, outputs_finite: bool) -> Dict[str, Any]:
  """Where the fault shows at variable level, from the per-variable gradient finite flags.

  Gradients flow from the loss back to the input, so a fault born in the backward pass of layer k
  poisons the gradients of layer k and of every layer before it, while the layers after k stay
  finite: the origin is the *last* variable (in layer order) with a non-finite gradient. A fault
  born in the forward pass (non-finite outputs or loss) usually poisons every gradient, so the flags
  cannot place it; the op-level re-run does.

  Args:
    grad_flags: one bool per trainable variable, in layer order (True = finite).
    variable_paths: the variables' paths, same order.
    loss_finite: whether the step's loss was finite.
    outputs_finite: whether the model outputs were finite.

  Returns:
    A dict with 'bad_variables', 'first_bad_variable', 'origin_variable', 'origin_layer' (None
    where the flags cannot tell) and 'rule' (how the origin was chosen, in words).
  """
  bad = [p for p, ok in zip(variable_paths, grad_flags) if not ok]
  result = {'bad_variables': bad, 'first_bad_variable': bad[0] if bad else None,
            'origin_variable': None, 'origin_layer': None}
  if not outputs_finite:
    result['rule'] = 'forward pass: model outputs were non-finite; see the op-level provenance'
  elif not loss_finite:
    result['rule'] = 'loss function: outputs were finite but the loss was not'
  elif not bad:
    result['rule'] = 'no non-finite gradient'
  else:
    result['origin_variable'] = bad[-1]
    result['origin_layer'] = layer_of(bad[-1])
    result['rule'] = ('backward pass: last variable in layer order with a non-finite gradient '
                      '(every earlier layer inherits it)')
  return result


def layer_names(model) -> List[str]:
  """Names of the model and all of its nested layers (or sub-modules of a plain tf.Module)."""
  names, stack = [], [model]
  while stack:
    layer = stack.pop()
    name = getattr(layer, 'name', None)
    if name and name not in names:
      names.append(name)
    if isinstance(layer, keras.layers.Layer):
      stack.extend(getattr(layer, 'layers', None) or [])
      stack.extend(getattr(layer, '_layers', None) or [])
    elif isinstance(layer, tf.Module) and layer is model:
      stack.extend(layer.submodules)
  return names


def layer_of_op(op_name: str, known_layers: Sequence[str]) -> Optional[str]:
  """The innermost layer whose name scope holds op `op_name`, e.g. 'mlp_1/dense_1_1/MatMul'.

  Graph name scopes get a '_<n>' suffix when a layer is called again in a new graph, so a scope
  matches a layer by its exact name, or with one such suffix removed; inside a scope that was
  such a re-call (the re-run's 'sequential_1' of model 'sequential'), the suffixed reading wins
  ('sequential_1/dense_1/MatMul' is layer 'dense' where both 'dense' and 'dense_1' exist).
  None for a policy's op (under `guard.SCOPE_ROOT`), even one named like a layer.
  """
  known = set(known_layers)
  scopes = [s for s in op_name.split('/')[:-1] if s and s != 'gradient_tape']
  if guard_lib.SCOPE_ROOT in scopes:
    return None  # A policy's own op (`guard.scope`), whatever its name.
  found, recalled = None, False
  for scope in scopes:  # Outermost first; the innermost match is the answer.
    stripped = re.sub(r'_\d+$', '', scope)
    if scope in known and not (recalled and stripped != scope and stripped in known):
      found = scope
    elif stripped in known:
      found, recalled = stripped, True
  return found


@dataclasses.dataclass(frozen=True)
class OpProvenance:
  """The first op that produced NaN/Inf in a check_numerics re-run."""
  op_type: str
  op_name: str
  layer: Optional[str]
  input_name: Optional[str]
  source: Optional[str]  # 'file:line in function' of the innermost user frame that made the op.
  message: str  # The error's line naming the op.
  dtype: Optional[str] = None  # The op output's dtype, e.g. 'float16'.

  def as_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


_NODE = re.compile(r"Detected at node '?([^\s']+?)'? defined at")
_OP = re.compile(r'(Detected Infinity or NaN in output \d+ of (?:graph|eagerly-executing) op '
                 r'"([^"]+)"[^\n]*)')
_DTYPE = re.compile(r"dtype: <dtype: '(\w+)'>")
_INPUT = re.compile(r'Input tensor: (?:Tensor|tf\.Tensor)\("([^"]+)"')
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def parse_check_numerics_error(text: str, known_layers: Sequence[str]) -> Optional[OpProvenance]:
  """Reads op type, op name, input and layer from a check_numerics `InvalidArgumentError` text."""
  op = _OP.search(text)
  if op is None:
    return None
  node = _NODE.search(text)
  op_name = re.sub(r'/CheckNumericsV2(_\d+)?$', '', node.group(1) if node else '')
  input_match = _INPUT.search(text)
  dtype = _DTYPE.search(text, op.end())
  # The "defined at" frames end with the innermost user code that created the op.
  head = text[:op.start()]
  frames = _FRAME.findall(head[node.end():] if node else head)
  source = f'{frames[-1][0]}:{frames[-1][1]} in {frames[-1][2]}' if frames else None
  return OpProvenance(op_type=op.group(2), op_name=op_name,
                      layer=layer_of_op(op_name, known_layers) if op_name else None,
                      input_name=input_match.group(1) if input_match else None,
                      source=source, message=op.group(1).strip(),
                      dtype=dtype.group(1) if dtype else None)


def observed_from_rerun(again: 'Rerun', variable_paths: Sequence[str],
                        input_paths: Sequence[str]) -> Dict[str, Any]:
  """The `observed` fields of a report (fault kind, offending tensor, ...) from a re-run, in the
  same words the training step's report uses (`interfaces.fault_kind` / `offending_tensor`)."""
  return {'fault': again.fault, 'offending_tensor': again.offending_tensor(variable_paths, input_paths),
          'loss': again.loss, 'loss_finite': again.loss_finite,
          'outputs_finite': again.outputs_finite, 'grad_flags': list(again.grad_flags),
          'applied': False}


@dataclasses.dataclass(frozen=True)
class Rerun:
  """The result of re-running one step's forward and backward pass (no update applied)."""
  loss: float
  grad_flags: List[bool]
  input_flags: List[bool]  # From the Trainer's policies' `check_batch`, per flattened input.
  outputs_finite: bool

  @property
  def loss_finite(self) -> bool:
    return bool(np.isfinite(self.loss))

  @property
  def fault(self) -> Optional[str]:
    """The fault kind, by the training step's rule (`interfaces.fault_kind`)."""
    return interfaces.fault_kind(inputs_finite=all(self.input_flags),
                                 loss_finite=self.loss_finite, grads_finite=all(self.grad_flags))

  @property
  def finite(self) -> bool:
    return self.fault is None

  def offending_tensor(self, variable_paths: Sequence[str], input_paths: Sequence[str]) -> str:
    """The first offending tensor, by the training step's rule (`interfaces.offending_tensor`)."""
    return interfaces.offending_tensor(
        inputs_finite=all(self.input_flags), loss_finite=self.loss_finite,
        outputs_finite=self.outputs_finite,
        first_bad_input=interfaces.first_false(self.input_flags),
        first_bad_grad=interfaces.first_false(self.grad_flags), input_paths=input_paths,
        variable_paths=variable_paths)


def models_of(trainer) -> List[Any]:
  """The models a run's step trains: a guard's several (`Probe.models`), else its one model."""
  return list(getattr(trainer, 'models', None) or [trainer.model])


class _RestoreModelState:
  """Puts every variable of the models and the process-wide generators back after a re-run (a
  training-mode forward pass may move BatchNormalization statistics and seed generators, and a
  loss may draw from the global generators)."""

  def __init__(self, trainer):
    variables = [v for m in models_of(trainer) for v in m.variables]
    variables += state_lib.random_state_variables()
    self._variables = list({id(v): v for v in variables}.values())

  def __enter__(self):
    self._values = [v.numpy() for v in self._variables]
    return self

  def __exit__(self, *exc):
    for v, value in zip(self._variables, self._values):
      v.assign(value)
    return False


def _compute_fn(trainer):
  def compute(batch):
    loss, grads, input_ok, outputs_ok = trainer.loss_and_gradients(batch)
    return loss, numerics.finite_flags(grads), input_ok, outputs_ok

  return compute


_RERUN_FNS: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


def rerun(trainer, batch, *, jit_compile: bool = False) -> Rerun:
  """Re-runs the step on `batch` with the current variables: loss and finite flags, no update.

  Args:
    trainer: the Trainer (its model, loss, `split_batch`, `compute_loss` and policies).
    batch: one dataset element (tensors), the structure `compute_loss` expects.
    jit_compile: compile with XLA, as the training step was (for a like-for-like recheck).
  """
  key = (id(trainer.model), bool(jit_compile))
  fn = _RERUN_FNS.get(trainer, {}).get(key)
  if fn is None:  # One function per trainer and mode, so repeated rechecks do not retrace.
    fn = tf.function(_compute_fn(trainer), jit_compile=jit_compile or None, reduce_retracing=True)
    _RERUN_FNS.setdefault(trainer, {})[key] = fn
  with _RestoreModelState(trainer):
    loss, grad_flags, input_flags, outputs_ok = fn(batch)
  return Rerun(loss=float(loss.numpy()), grad_flags=[bool(f) for f in grad_flags.numpy()],
               input_flags=[bool(f) for f in input_flags.numpy()],
               outputs_finite=bool(outputs_ok.numpy()))


def locate_op(trainer, batch) -> Dict[str, Any]:
  """Re-runs the step under op-level numerics checks and names the first op that made NaN/Inf:
  {'found': True, **OpProvenance fields} or {'found': False, 'note': why}."""
  known, found = [n for m in models_of(trainer) for n in layer_names(m)], None
  for gated in (True, False):  # Ungated where the gate breaks a graph (or an error unread).
    try:
      with compat.check_numerics_in_order(gated=gated):  # Instruments the graphs traced in it.
        fn = tf.function(_compute_fn(trainer))
        with _RestoreModelState(trainer):
          fn(batch)
      return {'found': False, 'note': 'the re-run produced no NaN/Inf'}
    except Exception as e:  # pylint: disable=broad-except
      if not (gated or isinstance(e, tf.errors.InvalidArgumentError)):
        raise
      found, error = parse_check_numerics_error(str(e), known), e
      if found is not None:
        break
  if found is None:
    return {'found': False,
            'note': 'unrecognised error: ' + str(error).strip().splitlines()[0][:300]}
  if found.op_type == 'Const':  # Built on purpose (a -inf mask fill, a sparse CE's NaN under
    # op determinism): no op's arithmetic; what it holds ('-Inf', 'NaN', ...) and where.
    held = re.search(r'Tensor had (.+?) values', str(error))
    held = held.group(1) if held else 'NaN or Inf'
    dtype = re.search(r"dtype: <dtype: '(\w+)'>", str(error))  # A float16 -inf may be a -1e30.
    return {'found': False, 'constant': held, 'source': found.source,
            **({'dtype': dtype.group(1)} if dtype else {}),
            'note': f'a constant holding {held} in {found.op_name}: {found.source}'}
  fed = opgraph.operand(fn, batch, found.op_name, found.op_type, str(error))
  return {'found': True, **found.as_dict(), **({'operand': fed} if fed else {})}


def input_summary(paths: Sequence[str], arrays: Sequence[np.ndarray], flags: Sequence[bool],
                  num_classes: Optional[int] = None) -> List[Dict[str, Any]]:
  """Per input tensor of a batch: shape, dtype, NaN/Inf counts, first bad index, label range."""
  out = []
  for path, a, ok in zip(paths, arrays, flags):
    a = np.asarray(a)
    entry = {'path': path, 'shape': list(a.shape), 'dtype': str(a.dtype), 'passed_checks': bool(ok)}
    if np.issubdtype(a.dtype, np.floating):
      nan, inf = np.isnan(a), np.isinf(a)
      finite = np.abs(a[~(nan | inf)])
      entry.update(nan=int(nan.sum()), inf=int(inf.sum()),
                   max_abs=float(finite.max()) if finite.size else None)
      bad = np.argwhere(nan | inf)
      if bad.size:
        entry['first_non_finite_index'] = bad[0].tolist()
    if num_classes is not None and path.startswith('labels') and np.issubdtype(a.dtype, np.number):
      with np.errstate(invalid='ignore'):
        out_of_range = (a < 0) | (a >= num_classes)
      entry['labels_out_of_range'] = int(out_of_range.sum())
    out.append(entry)
  return out


def format_report(report: Dict[str, Any]) -> str:
  """The human-readable report.txt of one forensics record."""
  lines = [f"NaN forensics: step {report['step']}, {report['fault']} fault",
           f"  first offending tensor (cheap flags): {report['offending_tensor']}",
           f"  loss {report['loss']}  (finite: {report['loss_finite']}); "
           f"model outputs finite: {report['outputs_finite']}"]
  var = report.get('variable_level') or {}
  if var:
    lines.append('Variable level:')
    lines.append(f"  origin variable: {var.get('origin_variable')}  (layer {var.get('origin_layer')})")
    lines.append(f"  rule: {var.get('rule')}")
    bad = var.get('bad_variables') or []
    lines.append(f"  non-finite gradients ({len(bad)}): {', '.join(bad) if bad else 'none'}")
  op = report.get('op_level')
  if op is not None:
    lines.append('Op level (re-run with tf.debugging.enable_check_numerics):')
    if op.get('found'):
      lines.append(f"  op type: {op['op_type']}" + (f" ({op['dtype']})" if op.get('dtype') else ''))
      lines.append(f"  op name: {op['op_name']}")
      lines.append(f"  layer:   {op['layer']}")
      if op.get('input_name'):
        lines.append(f"  input:   {op['input_name']}")
      if op.get('source'):
        lines.append(f"  created at: {op['source']}")
    else:
      lines.append(f"  not located: {op.get('note')}")
  inputs = report.get('inputs') or []
  if inputs:
    lines.append('Batch:')
    for e in inputs:
      extra = ''.join(f', {k} {e[k]}' for k in ('nan', 'inf', 'first_non_finite_index',
                                                 'labels_out_of_range') if k in e)
      lines.append(f"  {e['path']}: {e['dtype']}{e['shape']}, passed checks {e['passed_checks']}"
                   f"{extra}")
  if report.get('recheck'):
    lines.append(f"Recheck (same batch, same state): {report['recheck']}")
  lines.append(f"State saved: {report.get('state')}; checkpoint {report.get('checkpoint')}; "
               f"last good checkpoint {report.get('last_good_checkpoint')}")
  return '\n'.join(lines) + '\n'
