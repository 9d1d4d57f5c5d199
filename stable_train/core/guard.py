"""The guard: pure, traced pieces of the step between the gradients and the apply-or-skip verdict.

`aggregate` averages the replicas' gradients and sums their fault counts; `guard` measures the
gradients, lets every policy transform them and vote on the update, and fills the step's report.
"""

import re
from typing import Dict, List, Sequence, Tuple

import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import numerics


def aggregate(grads: List[tf.Tensor], loss: tf.Tensor, inputs_bad: tf.Tensor,
              outputs_bad: tf.Tensor, num_replicas: int, mean: bool = True):
  """Averages (or, with `mean=False`, sums) gradients and loss over the replicas and sums the
  fault counts. Replica context.

  Aggregating before any check means every replica then sees the same gradients, norm and flags,
  so the apply-or-skip decision is one decision. Two all-reduces: the gradients, and one small
  packed vector (loss, output faults, one fault count per input tensor).

  Returns:
    (grads, loss, inputs_bad, outputs_bad), aggregated; unchanged on one replica.
  """
  if num_replicas == 1:
    return grads, loss, inputs_bad, outputs_bad
  ctx = tf.distribute.get_replica_context()
  share = (lambda t: t / num_replicas) if mean else (lambda t: t)
  grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [share(g) for g in grads])
  counts = tf.cast(tf.concat([[outputs_bad], inputs_bad], axis=0), loss.dtype)
  packed = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                          tf.concat([[share(loss)], counts], axis=0))
  return grads, packed[0], tf.cast(packed[2:], tf.float32), tf.cast(packed[1], tf.float32)


MEASURED_STATS = interfaces.MEASURED_STATS


class GradientStats(dict):
  """The `stats` dict of `guard`: its `MEASURED_STATS` always describe the current gradients.

  They are measured lazily, at trace time, the first time a key is read, so a stack whose policies
  set them (ClipByGlobalNorm does) or never read them pays no extra op. After a transform that
  returned a different list, the keys it did not set itself are dropped and measured again on the
  next read.

  A key of the form '<policy name>/<what>' is a value a policy's transform hands on to its own
  `update_state` (`carried`): `guard` copies it into the report, so the policy reads its
  variables and computes what it derives from them once per step, not twice.
  """

  def __init__(self, grads, **values):
    super().__init__(**values)
    self._grads = list(grads)
    self._written = set()

  def __missing__(self, key):
    if key == 'grad_finite_flags':
      value = numerics.finite_flags(self._grads)
    elif key == 'grads_finite':
      value = tf.reduce_all(self['grad_finite_flags'])
    elif key == 'grad_norm':
      value = numerics.global_norm(self._grads)
    else:
      raise KeyError(key)
    super().__setitem__(key, value)
    return value

  def __setitem__(self, key, value):
    self._written.add(key)
    super().__setitem__(key, value)

  def __contains__(self, key):
    return key in MEASURED_STATS or super().__contains__(key)

  def get(self, key, default=None):
    return self[key] if key in self else default

  def carried(self) -> Dict[str, tf.Tensor]:
    """The values policies hand on to their `update_state` (keys '<policy name>/<what>')."""
    return {k: v for k, v in self.items() if '/' in k}

  def transform(self, policy, grads):
    """Calls `policy.transform_gradients(grads, self)` and keeps the stats true to its output."""
    self._written = set()
    out = policy.transform_gradients(grads, self)
    if out is not grads:
      out = list(out)
      self._grads = out
      for key in MEASURED_STATS:
        if key not in self._written:
          dict.pop(self, key, None)
    return out


# The root name scope of every policy's in-graph ops ('policy/<name>/...'; TensorFlow numbers
# the name when the scope is entered again in one graph: 'policy/<name>_1/...').
SCOPE_ROOT = 'policy'


def scope(policy) -> tf.name_scope:
  """The name scope of a policy's in-graph hooks, `SCOPE_ROOT/<its name>`: its ops carry its name
  (a profile of the step, `scripts/step_ops.py --profile`, charges each policy its own) and no
  layer's (Forensics names no layer for an op under the root); nothing else changes."""
  return tf.name_scope(f"{SCOPE_ROOT}/{re.sub(r'[^A-Za-z0-9_.-]', '_', policy.name)}")


def guard(grads: List[tf.Tensor], loss: tf.Tensor, inputs_bad: tf.Tensor,
          outputs_bad: tf.Tensor, policies: Sequence, variable_paths: Sequence[str],
          xla: bool, loss_scale=None) -> Tuple[List[tf.Tensor], Dict[str, tf.Tensor]]:
  """Checks aggregated gradients, lets the policies transform them and decide whether to apply.

  The `stats` passed to `transform_gradients` and `allow_update` always describe the gradients
  currently being passed (see `Policy.transform_gradients` and `GradientStats`); the verdicts see
  the final gradients.

  Args:
    grads: aggregated gradients, one per trainable variable in layer order.
    loss: aggregated scalar loss.
    inputs_bad: per input tensor, how many replicas found it bad (0 = fine).
    outputs_bad: how many replicas had non-finite model outputs.
    policies: the Trainer's policies (their in-graph hooks are called).
    variable_paths: names of the trainable variables.
    xla: whether the step is compiled with XLA.
    loss_scale: the policy that scales the loss (`interfaces.LossScaler`), or None: with it,
      non-finite gradients of a finite loss may be an fp16 overflow rather than a fault.

  Returns:
    (transformed gradients, report) where report has the `reports.REPORT_FIELDS` the guard knows
    ('step' and 'learning_rate' are the caller's) plus 'grad_finite_flags'. 'grad_norm' is the
    norm before any transform, 'clipped_grad_norm' the norm of the final gradients;
    'grads_finite' is False if the gradients were non-finite before or after the transforms;
    'grad_finite_flags' are the raw gradients' flags if one was non-finite, else the final ones.
  """
  inputs_finite_flags = tf.equal(inputs_bad, 0.0)
  grad_flags, grad_norm = numerics.finite_flags_and_norm(grads, xla=xla)
  grads_finite = tf.reduce_all(grad_flags)
  stats = GradientStats(
      grads, loss=loss, loss_finite=tf.math.is_finite(loss), grads_finite=grads_finite,
      grad_finite_flags=grad_flags, inputs_finite=tf.reduce_all(inputs_finite_flags),
      outputs_finite=tf.equal(outputs_bad, 0.0), grad_norm=grad_norm, raw_grad_norm=grad_norm,
      variable_paths=variable_paths, xla=xla, loss_scaled=loss_scale is not None)
  for p in policies:
    with scope(p):
      grads = stats.transform(p, grads)
  allow = stats['inputs_finite']
  for p in policies:
    with scope(p):
      verdict = p.allow_update(stats)
    if verdict is not None:
      allow = tf.logical_and(allow, verdict)
  return grads, _report(stats, grad_flags, grad_norm, grads_finite, inputs_finite_flags, allow,
                        loss_scale)


def _report(stats, grad_flags, grad_norm, grads_finite, inputs_finite_flags, allow,
            loss_scale) -> Dict[str, tf.Tensor]:
  """The guard's part of the step report, from the stats after the transforms and the raw
  gradients' flags, norm and finiteness."""
  # The report names where non-finite values first appeared: the raw gradients' flags when one
  # was non-finite (a clip then spreads NaN to all), else the flags after the transforms.
  final_flags = stats['grad_finite_flags']
  if final_flags is not grad_flags:
    grad_flags = tf.where(grads_finite, final_flags, grad_flags)
  final_finite = stats['grads_finite']
  if final_finite is not grads_finite:
    grads_finite = tf.logical_and(grads_finite, final_finite)
  report = stats.carried()
  report.update((k, stats[k]) for k in ('loss', 'loss_finite', 'inputs_finite', 'outputs_finite'))
  report.update(grad_norm=grad_norm, clipped_grad_norm=stats['grad_norm'],
                grads_finite=grads_finite, grad_finite_flags=grad_flags,
                first_bad_grad=numerics.first_false(grad_flags),
                first_bad_input=numerics.first_false(inputs_finite_flags), applied=allow)
  if loss_scale is None:
    report.update(overflow=tf.constant(False), loss_scale=tf.constant(1.0))
  else:
    report.update(overflow=loss_scale.is_overflow(report),
                  loss_scale=tf.identity(loss_scale.loss_scale()))
  return report
