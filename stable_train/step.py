"""Pure, traced pieces of the train step: aggregation across replicas and the policy guard."""

from typing import Dict, List, Sequence, Tuple

import tensorflow as tf

from stable_train import numerics

# Report fields the loop stores per step, with their dtypes (see interfaces.StepReports); `None`
# stands for the run's report float type (`report_dtypes`).
REPORT_DTYPES = {
    'step': tf.int64,
    'loss': None,
    'grad_norm': None,
    'clipped_grad_norm': None,
    'loss_finite': tf.bool,
    'grads_finite': tf.bool,
    'inputs_finite': tf.bool,
    'outputs_finite': tf.bool,
    'first_bad_grad': tf.int32,
    'first_bad_input': tf.int32,
    'applied': tf.bool,
    'overflow': tf.bool,
    'loss_scale': tf.float32,
    'learning_rate': tf.float32,
}


def report_dtypes(float_dtype: tf.DType = tf.float32) -> Dict[str, tf.DType]:
  """`REPORT_DTYPES` with the loss and norms in `float_dtype` (float64 for a float64 model, so a
  loss beyond float32's range is reported as the finite value it is)."""
  return {k: float_dtype if d is None else d for k, d in REPORT_DTYPES.items()}


def is_fault(report) -> tf.Tensor:
  """Traced: whether a step's report shows a fault (a bad input, a non-finite loss or gradient).

  An fp16 overflow under dynamic loss scaling is not a fault: it is the loss scale's business.
  """
  healthy = tf.logical_and(report['inputs_finite'],
                           tf.logical_and(report['loss_finite'], report['grads_finite']))
  return tf.logical_and(tf.logical_not(healthy), tf.logical_not(report['overflow']))


def aggregate(grads: List[tf.Tensor], loss: tf.Tensor, inputs_bad: tf.Tensor,
              outputs_bad: tf.Tensor, num_replicas: int):
  """Averages gradients and loss over the replicas and sums the fault counts. Replica context.

  Aggregating before any check means every replica then sees the same gradients, norm and flags,
  so the apply-or-skip decision is one decision. Two all-reduces: the gradients, and one small
  packed vector (loss, output faults, one fault count per input tensor).

  Returns:
    (grads, loss, inputs_bad, outputs_bad), aggregated; unchanged on one replica.
  """
  if num_replicas == 1:
    return grads, loss, inputs_bad, outputs_bad
  ctx = tf.distribute.get_replica_context()
  grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [g / num_replicas for g in grads])
  counts = tf.cast(tf.concat([[outputs_bad], inputs_bad], axis=0), loss.dtype)
  packed = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                          tf.concat([[loss / num_replicas], counts], axis=0))
  return grads, packed[0], tf.cast(packed[2:], tf.float32), tf.cast(packed[1], tf.float32)


def guard(grads: List[tf.Tensor], loss: tf.Tensor, inputs_bad: tf.Tensor,
          outputs_bad: tf.Tensor, policies: Sequence, variable_paths: Sequence[str],
          xla: bool, loss_scale=None) -> Tuple[List[tf.Tensor], Dict[str, tf.Tensor]]:
  """Checks aggregated gradients, lets the policies transform them and decide whether to apply.

  Args:
    grads: aggregated gradients, one per trainable variable in layer order.
    loss: aggregated scalar loss.
    inputs_bad: per input tensor, how many replicas found it bad (0 = fine).
    outputs_bad: how many replicas had non-finite model outputs.
    policies: the Trainer's policies (their in-graph hooks are called).
    variable_paths: names of the trainable variables.
    xla: whether the step is compiled with XLA.
    loss_scale: the run's `precision.DynamicLossScale`, or None: with it, non-finite gradients
      of a finite loss may be an fp16 overflow rather than a fault.

  Returns:
    (transformed gradients, report) where report has the `REPORT_DTYPES` fields the step knows
    ('step' and 'learning_rate' are the caller's) plus 'grad_finite_flags'.
  """
  inputs_finite_flags = tf.equal(inputs_bad, 0.0)
  grad_flags = numerics.finite_flags(grads)
  stats = {
      'loss': loss,
      'loss_finite': tf.math.is_finite(loss),
      'grads_finite': tf.reduce_all(grad_flags),
      'grad_finite_flags': grad_flags,
      'inputs_finite': tf.reduce_all(inputs_finite_flags),
      'outputs_finite': tf.equal(outputs_bad, 0.0),
      'grad_norm': numerics.global_norm(grads),
      'variable_paths': variable_paths,
      'xla': xla,
      'loss_scaled': loss_scale is not None,
  }
  stats['clipped_grad_norm'] = stats['grad_norm']
  for p in policies:
    grads = p.transform_gradients(grads, stats)
  allow = stats['inputs_finite']
  for p in policies:
    verdict = p.allow_update(stats)
    if verdict is not None:
      allow = tf.logical_and(allow, verdict)
  # The decision (and so every counter update after it) waits for the transformed gradients,
  # so an in-graph check that raises stops the step before anything is counted.
  with tf.control_dependencies(grads):
    allow = tf.identity(allow)
  report = {k: stats[k] for k in ('loss', 'grad_norm', 'clipped_grad_norm', 'loss_finite',
                                  'grads_finite', 'inputs_finite', 'outputs_finite',
                                  'grad_finite_flags')}
  report.update(first_bad_grad=numerics.first_false(grad_flags),
                first_bad_input=numerics.first_false(inputs_finite_flags), applied=allow)
  if loss_scale is None:
    report.update(overflow=tf.constant(False), loss_scale=tf.constant(1.0))
  else:
    report.update(overflow=loss_scale.is_overflow(report),
                  loss_scale=tf.identity(loss_scale.scale))
  return grads, report
