"""The guarded train step: the one traced (state, batch) -> (new state, report) function.

Core: it knows the `StepParts` it is given and the policies' in-graph hooks; nothing of a Trainer,
a host loop or files. The Trainer's in-graph loop calls it in cross-replica context (`__call__`);
a Keras model's `train_step` calls it per replica (`in_replica`), which agrees the apply-or-skip
in cross-replica context through a merge_call. Either way a skipped step leaves every variable
bit-identical: the optimizer never runs, and what the forward pass assigned (BatchNorm statistics,
seed-generator states) and the process-wide generators are put back.
"""

import contextlib
import dataclasses
from typing import Any, Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from stable_train import compat
from stable_train.core import guard as guard_lib
from stable_train.core import labels as labels_lib
from stable_train.core import numerics
from stable_train.core import reports as reports_lib
from stable_train import errors


@dataclasses.dataclass(frozen=True)
class StepParts:
  """What the step needs from the code that trains; every callable is traced into the step.

  Attributes:
    split_batch: batch -> (features, labels).
    compute: batch -> (loss, predictions, outputs_finite): one replica's loss of a batch in
      training mode, called under the gradient tape, with its model outputs and whether they
      were finite.
    variables: () -> the trainable variables, in layer order.
    apply: grads -> None: applies the aggregated, transformed gradients (in replica context).
    forward_state: () -> the variables a forward pass may assign.
    random_states: the process-wide generators' state variables.
    policies: the policies whose in-graph hooks run, in order.
    variable_paths: the names of `variables()`.
    learning_rate: () -> the learning rate the step uses (reported).
    counters: the checkpointed counters (`state.TrainState`: global_step, applied_steps,
      skipped_steps, input_faults, overflow_steps), updated by the step.
    strategy: the `tf.distribute.Strategy`.
    distributed: whether batches come split across replicas (`distribute.uses_distributed_input`):
      the apply and the skip then run per replica.
    update_metrics: (labels, predictions) -> None, called for applied steps only; or None.
    xla: whether the step is compiled with XLA.
    loss_scale: the policy that scales the loss (`interfaces.LossScaler`), or None.
    optimizer: the optimizer `apply` updates, or a list of them (under a strategy their own
      all-reduce of the already aggregated gradients is switched off), or None.
    label_classes: the class count of sparse labels (`labels.sparse_classes`), or None: a batch
      with a label outside [0, label_classes) fails its input check (the labels named), and the
      loss gets safe labels instead (the batch is skipped; it must not crash the step).
    replica_sum: each replica's loss and gradients are its share of the global mean
      (`tf.nn.compute_average_loss`, as a hand-written step hands them to an optimizer, whose
      all-reduce sums): the replicas are summed, not averaged.
  """
  split_batch: Callable[[Any], Tuple[Any, Any]]
  compute: Callable[[Any], Tuple[tf.Tensor, Any, tf.Tensor]]
  variables: Callable[[], List[tf.Variable]]
  apply: Callable[[List[tf.Tensor]], None]
  forward_state: Callable[[], List[tf.Variable]]
  random_states: Sequence[tf.Variable]
  policies: Sequence[Any]
  variable_paths: Sequence[str]
  learning_rate: Callable[[], tf.Tensor]
  counters: Any
  strategy: tf.distribute.Strategy
  distributed: bool = False
  update_metrics: Optional[Callable[[Any, Any], None]] = None
  xla: bool = False
  loss_scale: Any = None
  optimizer: Any = None
  label_classes: Optional[int] = None
  replica_sum: bool = False


class GuardedStep:
  """The guarded step built from `StepParts` (see the module docstring)."""

  def __init__(self, parts: StepParts):
    self.parts = parts
    self.distributed = parts.distributed

  # -- per replica ------------------------------------------------------------------------------
  def input_checks(self, features, labels) -> tf.Tensor:
    """One flag per flattened input tensor: the sparse labels are in range and every policy's
    `check_batch` passed. Traced."""
    ok = tf.ones([len(reports_lib.flatten_inputs(features, labels))], tf.bool)
    classes = self.parts.label_classes
    if classes is not None:  # One label tensor: the last input (features come first).
      ok = tf.concat([ok[:-1], [labels_lib.in_range(labels, classes)]], axis=0)
    for p in self.parts.policies:
      with guard_lib.scope(p):
        flags = p.check_batch(features, labels)
      if flags is not None:
        ok = tf.logical_and(ok, flags)
    return ok

  def sanitize(self, batch):
    """The batch with labels made safe for the loss (sparse labels in range, then the policies'
    `sanitize_labels`)."""
    _, labels = self.parts.split_batch(batch)
    classes = self.parts.label_classes
    safe = labels if classes is None else labels_lib.safe(labels, classes)
    for p in self.parts.policies:
      safe = p.sanitize_labels(safe)
    return labels_lib.replace_labels(batch, labels, safe)

  def loss_and_gradients(self, batch):
    """One replica's loss, gradients (None -> zeros), input-check flags, whether the model outputs
    were finite, and its (labels, predictions) for the metrics ((), without metrics), before any
    aggregation. Traced; also what forensics re-runs."""
    p = self.parts
    features, labels = p.split_batch(batch)
    input_ok = self.input_checks(features, labels)
    variables = p.variables()
    with tf.GradientTape() as tape:
      loss, predictions, outputs_ok = p.compute(self.sanitize(batch))
      loss = numerics.widen(loss)
      for policy in p.policies:
        loss = policy.transform_loss(loss)
      target = loss if p.loss_scale is None else p.loss_scale.scale_loss(loss)
    grads = tape.gradient(target, variables)
    grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
             for g, v in zip(grads, variables)]
    if p.loss_scale is not None:  # Every check, clip and policy sees the true gradients.
      grads = p.loss_scale.unscale_gradients(grads)
    metric_inputs = (labels, predictions) if p.update_metrics is not None else ()
    return loss, grads, input_ok, outputs_ok, metric_inputs

  def replica_part(self, batch):
    """Per replica: a snapshot of the forward state, then the aggregated, guarded gradients and
    the report. Traced."""
    # Read before the forward pass assigns: automatic control dependencies order the reads and
    # the layers' assigns of each variable in program order (under XLA too).
    snapshot = self.forward_snapshot()
    loss, grads, input_ok, outputs_ok, metric_inputs = self.loss_and_gradients(batch)
    grads, report = self.guard_gradients(loss, grads, input_ok, outputs_ok)
    return grads, report, snapshot, metric_inputs

  def forward_snapshot(self) -> List[tf.Tensor]:
    """The values of the forward state now (read before the forward pass). Traced."""
    return [tf.identity(v) for v in self.parts.forward_state()]

  def guard_gradients(self, loss, grads, input_ok, outputs_ok):
    """One replica's loss, gradients and flags, aggregated over the replicas and guarded:
    (the gradients to apply, the report). Traced, per replica."""
    p = self.parts
    inputs_bad = tf.cast(tf.logical_not(input_ok), tf.float32)
    outputs_bad = tf.cast(tf.logical_not(outputs_ok), tf.float32)
    grads, loss, inputs_bad, outputs_bad = guard_lib.aggregate(
        grads, loss, inputs_bad, outputs_bad, p.strategy.num_replicas_in_sync,
        mean=not p.replica_sum)
    return guard_lib.guard(grads, loss, inputs_bad, outputs_bad, p.policies, p.variable_paths,
                           p.xla, loss_scale=p.loss_scale)

  def restore_forward_state(self, snapshot) -> None:
    """Assigns a `replica_part` snapshot back (the skip branch; per replica). Traced."""
    for v, value in zip(self.parts.forward_state(), snapshot):
      v.assign(value)

  def apply_aggregated(self, grads, metric_inputs=()) -> None:
    """Per replica, in the agreed apply: the update, then the metrics of this applied batch."""
    self.parts.apply(list(grads))
    if metric_inputs:  # Applied steps only: a skipped batch never counts.
      # Under a strategy the metric variables are sync-on-read sums (created in its scope):
      # each replica adds its own shard; reading them sums the replicas.
      self.parts.update_metrics(*metric_inputs)

  # -- cross-replica ------------------------------------------------------------------------------
  def __call__(self, batch):
    """One step from cross-replica context: compute on every replica, then one agreed
    apply-or-skip. Returns the report dict. Traced."""
    strategy = self.parts.strategy
    with strategy.scope():  # Cross-replica context, also when called outside the scope.
      # The process-wide generators (a layer drawing keras.random.* without a seed) move in the
      # forward pass too: read here, before it, put back on a skip.
      random_snapshot = self.random_snapshot()
      grads, report, snapshot, metric_inputs = strategy.run(self.replica_part, (batch,))
      # Every field is computed from aggregated values, so all replicas agree: take the first.
      report = {k: strategy.experimental_local_results(v)[0] for k, v in report.items()}
      # A strategy's apply (Keras's optimizer merges) needs a replica context, also where the
      # input is not distributed (OneDeviceStrategy); the default strategy's does not.
      run = strategy.run if self.distributed or tf.distribute.has_strategy() else (
          lambda fn, args: fn(*args))
      return self._agree(report, random_snapshot,
                         apply=lambda: run(self.apply_aggregated, (grads, metric_inputs)),
                         restore=lambda: run(self.restore_forward_state, (snapshot,)),
                         has_snapshot=bool(tf.nest.flatten(snapshot)))

  def in_replica(self, batch, record: Optional[Callable[[Any], Any]] = None):
    """One step from replica context (a Keras `train_step`): compute here, then the agreed
    apply-or-skip in cross-replica context (a merge_call: the optimizer's own merge_call cannot
    run inside a `tf.cond` in replica context; Keras's LossScaleOptimizer agrees the same way).

    Args:
      batch: this replica's batch.
      record: called in cross-replica context as `record(report, batch)` with the agreed
        report and the replicas' batches (per-replica values); what it returns is returned
        instead of the report (e.g. the report stored for the host, and logs).

    Returns:
      The report dict (or what `record` returned), the same on every replica. Traced.
    """
    random_snapshot = self.random_snapshot()
    grads, report, snapshot, metric_inputs = self.replica_part(batch)
    return self.agree_in_replica(grads, report, (snapshot, random_snapshot), metric_inputs,
                                 batch if record else (), record)

  def random_snapshot(self) -> List[tf.Tensor]:
    """The process-wide generators' states now (read before the forward pass). Traced."""
    return [tf.identity(v) for v in self.parts.random_states]

  def agree_in_replica(self, grads, report, snapshots, metric_inputs=(), batch=(), record=None):
    """From replica context: the apply-or-skip of guarded gradients (`guard_gradients`) agreed
    in cross-replica context through a merge_call (see `in_replica`).

    Args:
      grads, report: what `guard_gradients` returned.
      snapshots: (`forward_snapshot()`, `random_snapshot()`), both read before the forward pass.
      metric_inputs: what `update_metrics` takes on an applied step, or ().
      batch: this replica's batch, handed to `record` ((): none).
      record: called in cross-replica context as `record(report, batches)`, or None.

    Returns:
      The report dict (or what `record` returned), the same on every replica. Traced.
    """
    snapshot, random_snapshot = snapshots

    def agree(strategy, grads, report, snapshot, metric_inputs, batches):
      # Every field is computed from aggregated values, so all replicas agree: take the first.
      report = {k: strategy.experimental_local_results(v)[0] for k, v in report.items()}
      each = lambda fn, args: strategy.extended.call_for_each_replica(fn, args=args)
      # A strategy's apply (Keras's optimizer merges) needs a replica context, also where the
      # input is not distributed (OneDeviceStrategy); the default strategy's does not.
      run = each if self.distributed or tf.distribute.has_strategy() else (
          lambda fn, args: fn(*args))
      report = self._agree(report, random_snapshot,
                           apply=lambda: run(self.apply_aggregated, (grads, metric_inputs)),
                           restore=lambda: run(self.restore_forward_state, (snapshot,)),
                           has_snapshot=bool(tf.nest.flatten(snapshot)))
      return report if record is None else record(report, batches)

    return tf.distribute.get_replica_context().merge_call(
        agree, args=(grads, report, snapshot, metric_inputs, batch))

  def _agree(self, report, random_snapshot, *, apply, restore, has_snapshot: bool):
    """The apply-or-skip on the one agreed flag, the policies' state updates and the counters."""
    p = self.parts
    applied = report['applied']
    learning_rate = tf.cast(p.learning_rate(), tf.float32)

    def do_apply():
      if self.distributed:
        # The apply runs in replica context (Keras's optimizer merge_calls from there), without a
        # second all-reduce of the already aggregated gradients (switched off around it: replicas
        # are traced in threads).
        optimizers = p.optimizer if isinstance(p.optimizer, (list, tuple)) else [p.optimizer]
        with contextlib.ExitStack() as stack:
          for optimizer in optimizers:
            stack.enter_context(compat.gradients_already_aggregated(optimizer))
          apply()
      else:
        apply()
      return tf.constant(True)

    def do_skip():
      # The optimizer never ran; the forward pass's assigns are undone.
      if has_snapshot:
        restore()
      for v, value in zip(p.random_states, random_snapshot):
        v.assign(value)
      return tf.constant(False)

    done = tf.cond(applied, do_apply, do_skip)
    # Where a policy raises in `update_state` (CheckNumerics('raise')), the updates follow the
    # apply or skip (the raise finds the forward state put back) and the counters follow them (a
    # raise counts nothing); otherwise they run beside the apply, off its critical path.
    ordered = any(policy.updates_after_apply for policy in p.policies)
    with tf.control_dependencies([done] if ordered else []):
      report['flagged'] = self._update(report, applied)
    with tf.control_dependencies([report['flagged']] if ordered else []):
      self._count(report, applied)
    report['learning_rate'] = learning_rate
    return report

  def _update(self, report, applied) -> tf.Tensor:
    """Every policy's `update_state`; returns whether a detector flagged the step."""
    flags = []
    for policy in self.parts.policies:
      with guard_lib.scope(policy):
        flag = policy.update_state(report, applied)
      if flag is not None:
        flags.append(_checked_flag(policy, flag))
    # A detector's flag makes the loop not clean: the host then asks every policy to decide.
    return (tf.reduce_any(tf.stack(flags)) if len(flags) > 1 else
            flags[0] if flags else tf.identity(False))

  def _count(self, report, applied) -> None:
    """The counters of one agreed step; sets the report's 'step' (the global step after it)."""
    p = self.parts
    counters = p.counters
    counters.applied_steps.assign_add(tf.cast(applied, tf.int64))
    counters.skipped_steps.assign_add(tf.cast(tf.logical_not(applied), tf.int64))
    if p.loss_scale is not None:  # Without loss scaling no step is an overflow: no op.
      counters.overflow_steps.assign_add(tf.cast(report['overflow'], tf.int64))
    counters.input_faults.assign_add(tf.cast(tf.logical_not(report['inputs_finite']), tf.int64))
    with tf.control_dependencies([applied]):
      report['step'] = counters.global_step.assign_add(1)


def _checked_flag(policy, flag) -> tf.Tensor:
  """A policy's `update_state` flag as a scalar bool tensor, or a one-line error naming it."""
  flag = tf.convert_to_tensor(flag)
  if flag.dtype != tf.bool or flag.shape.rank not in (0, None):
    raise errors.ConfigError(
        f'{type(policy).__name__} {policy.name!r}: update_state returned a {flag.dtype.name} '
        f'of shape {flag.shape}; return None or a scalar bool (True flags the step).')
  return flag
