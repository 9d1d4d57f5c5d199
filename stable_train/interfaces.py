"""The interfaces of stable_train: step reports, host decisions and the Policy base class.

A policy has two halves. Its in-graph half runs inside the one traced train step (no Python
control flow on tensors there); its host half runs eagerly between loops, reads the reports the
step produced and returns a `Decision`. Policy state lives in `tf.Variable`s owned by the policy (a
`tf.Module`), so it is checkpointed with the model and restored on resume and rollback.
"""

import dataclasses
from typing import Any, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

CONTINUE = 'continue'
ESCALATE = 'escalate'  # "something is wrong that this policy cannot fix": a recovery policy may act.
ROLLBACK = 'rollback'
ABORT = 'abort'


@dataclasses.dataclass(frozen=True)
class Decision:
  """What a host-side policy asks the loop to do after a loop of steps."""
  action: str = CONTINUE
  reason: str = ''
  trigger: str = ''
  step: int = -1  # The global step at which the trigger fired.
  policy: str = ''  # Name of the policy that carries out a ROLLBACK decision (`Policy.execute`).
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class StepReports:
  """Per-step reports of one loop, as numpy arrays of length `num_steps` (read once per loop).

  Attributes:
    step: global step of each batch after it was consumed (1-based).
    loss: loss, averaged over replicas.
    grad_norm: global gradient norm before clipping (inf or nan when non-finite).
    clipped_grad_norm: global gradient norm after the policies' transformations.
    loss_finite: whether the loss was finite.
    grads_finite: whether every gradient was finite.
    inputs_finite: whether the batch passed every input check.
    outputs_finite: whether the model outputs were finite.
    first_bad_grad: index (into `variable_paths`) of the first non-finite gradient, or -1.
    first_bad_input: index (into `input_paths`) of the first bad input tensor, or -1.
    applied: whether the update was applied.
    learning_rate: learning rate used for the step.
    variable_paths: names of the trainable variables, in layer order.
    input_paths: names of the input tensors, in the order of the batch's flattened structure.
  """
  step: np.ndarray
  loss: np.ndarray
  grad_norm: np.ndarray
  clipped_grad_norm: np.ndarray
  loss_finite: np.ndarray
  grads_finite: np.ndarray
  inputs_finite: np.ndarray
  outputs_finite: np.ndarray
  first_bad_grad: np.ndarray
  first_bad_input: np.ndarray
  applied: np.ndarray
  learning_rate: np.ndarray
  variable_paths: Sequence[str] = ()
  input_paths: Sequence[str] = ()
  variables_finite: Optional[bool] = None  # After the loop; computed if a policy reads it.

  @property
  def num_steps(self) -> int:
    return int(self.step.shape[0])

  def fault(self, i: int) -> Optional[str]:
    """The kind of fault of step `i` ('input', 'loss', 'gradient') or None when it was finite."""
    if not self.inputs_finite[i]:
      return 'input'
    if not self.loss_finite[i]:
      return 'loss'
    if not self.grads_finite[i]:
      return 'gradient'
    return None

  def offending_tensor(self, i: int) -> str:
    """Names the first offending tensor of step `i`, e.g. 'gradient of sequential/dense_1/kernel'."""
    if not self.inputs_finite[i]:
      j = int(self.first_bad_input[i])
      return 'input ' + (self.input_paths[j] if 0 <= j < len(self.input_paths) else '?')
    j = int(self.first_bad_grad[i])
    gradient = ('gradient of ' + self.variable_paths[j]) if 0 <= j < len(self.variable_paths) else ''
    if not self.loss_finite[i]:
      name = 'loss (model outputs already non-finite)' if not self.outputs_finite[i] else 'loss'
      return f'{name}; first non-finite {gradient}' if gradient else name
    return gradient or 'none'


def flatten_inputs(features, labels):
  """The flattened input tensors of a batch, in the order `StepReports.input_paths` names them."""
  return tf.nest.flatten({'features': features, 'labels': labels})


def input_paths(features, labels):
  """Names of the flattened input tensors, e.g. 'features/image', 'labels'."""
  def walk(prefix, value):
    # Same order as tf.nest.flatten: dict keys sorted, sequences in order.
    if isinstance(value, dict):
      return [p for k in sorted(value) for p in walk(f'{prefix}/{k}', value[k])]
    if isinstance(value, (list, tuple)):
      return [p for i, v in enumerate(value) for p in walk(f'{prefix}/{i}', v)]
    return [prefix]

  return walk('features', features) + walk('labels', labels)


class Policy(tf.Module):
  """Base class of stable_train policies. Override only the hooks a policy needs.

  In-graph hooks (traced into the train step; use tensor ops, no Python `if` on tensors):
    `check_batch`, `sanitize_labels`, `transform_loss`, `transform_gradients`, `allow_update`,
    `update_state`; and `end_step`, traced into the loop around the step (never compiled with XLA).
  Host hooks (eager, once per loop): `decide`, `handle_escalation`, `execute`, `is_healthy`,
    `summary`.
  """

  # Set True by a policy whose host half reads `StepReports.variables_finite`: the loop then
  # checks every model and optimizer variable once, in the same graph, at its end.
  reads_variables_finite = False

  def check_batch(self, features, labels) -> Optional[tf.Tensor]:
    """Returns a bool vector, one flag per tensor of `flatten_inputs` (True = fine), or None."""
    del features, labels
    return None

  def sanitize_labels(self, labels):
    """Returns labels that are safe to feed to the loss (traced, before the forward pass).

    Only labels of a batch that fails `check_batch` may change: that batch is never applied, but
    it must not crash the step (e.g. an out-of-range sparse label raises on CPU).
    """
    return labels

  def transform_loss(self, loss):
    """Returns the loss to differentiate (traced, under the tape; e.g. fault injection)."""
    return loss

  def transform_gradients(self, grads, stats):
    """Returns transformed gradients.

    Args:
      grads: list of aggregated gradients (one per trainable variable, in layer order).
      stats: dict of the step's tensors: 'loss', 'grad_norm', 'loss_finite', 'grads_finite',
        'grad_finite_flags', plus the Python values 'variable_paths' and 'xla' (compiled with XLA).
    """
    del stats
    return grads

  def allow_update(self, stats) -> Optional[tf.Tensor]:
    """Returns a scalar bool: may this step's update be applied? None means no opinion."""
    del stats
    return None

  def update_state(self, report, applied: tf.Tensor) -> None:
    """Updates the policy's variables after the apply/skip decision of one step.

    Args:
      report: dict of the step's report tensors (see `StepReports`), in cross-replica context.
      applied: scalar bool, whether the update was applied.
    """
    del report, applied

  def end_step(self, batch, report) -> Optional[tf.Tensor]:
    """Runs in the in-graph loop after each step, outside XLA, in cross-replica context.

    Args:
      batch: the step's dataset element, as local tensors (per-replica parts concatenated).
      report: dict of the step's report tensors, plus 'grad_finite_flags' (one bool per trainable
        variable, in layer order).

    Returns:
      A scalar bool: end the loop right after this step (the host then sees the state the step
      left), or None for no opinion.
    """
    del batch, report
    return None

  def decide(self, reports: StepReports, context) -> Optional[Decision]:
    """Reads one loop of reports and returns a Decision (or None to continue)."""
    del reports, context
    return None

  def handle_escalation(self, decision: Decision, context) -> Optional[Decision]:
    """Turns another policy's escalation into an action (e.g. a rollback); None if it cannot."""
    del decision, context
    return None

  def execute(self, decision: Decision, trainer) -> Optional[str]:
    """Carries out a decision this policy returned (e.g. a rollback).

    Returns:
      None to go on training, or the reason why the run must stop (it then ends "aborted").
    """
    raise NotImplementedError(f'{type(self).__name__} cannot carry out {decision.action!r}')

  def summary(self) -> Dict[str, Any]:
    """Extra fields for summary.json (e.g. {'rollbacks': 2})."""
    return {}

  def is_healthy(self) -> bool:
    """Whether a checkpoint written now may be marked as a known-good rollback target."""
    return True
