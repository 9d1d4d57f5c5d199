"""`StepGuard`: the guarded step's core as a building block of a hand-written GradientTape step.

The same core as the other two front doors (`step.GuardedStep`): the gradients the loop hands in
are aggregated over the replicas, measured, transformed and voted on by the policies' in-graph
hooks, and applied or skipped in one `tf.cond` agreed in cross-replica context. A skipped step
leaves every model and optimizer variable, the models' forward state (BatchNorm statistics,
seed-generator states) and the process-wide generators bit-identical. Every model's update of a
step is applied or skipped together, on one verdict. The host half is `own_loop.host.LoopHost`
(`stable_train.LoopHost(guard)`).
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

import keras
import tensorflow as tf

from stable_train import compat
from stable_train import errors
from stable_train.core import keras_parts
from stable_train.core import ring
from stable_train.core import state as state_lib
from stable_train.core import step as step_lib
from stable_train.forensics import forensics
from stable_train.forensics import provenance
from stable_train.keras import first_batch as first_batch_lib
from stable_train.own_loop import scope as scope_lib
from stable_train.policies import precision
from stable_train.runtime import distribute
from stable_train.runtime import driven
from stable_train.runtime import handle
from stable_train.runtime import host as host_lib
from stable_train.trainer import setup as trainer_setup


class StepGuard(driven.DrivenGuard):
  """Guards a hand-written training step (see the module docstring and docs/own_loop.md).

  ```python
  guard = stable_train.StepGuard(model, optimizer)
  @tf.function(jit_compile=True)
  def train_step(x, y):
    with guard.step() as step:
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      step.apply(tape.gradient(loss, model.trainable_variables), loss)
    return step.report
  ```

  Create it eagerly, after the models are built, in the strategy's scope when there is one.
  Under a strategy each replica hands in its share of the global mean loss and its gradients
  (`tf.nn.compute_average_loss`), as it would hand them to the optimizer: the replicas are
  summed. Under `mixed_float16` a `keras.optimizers.LossScaleOptimizer` is kept (its scale
  variables scale the loss): differentiate `optimizer.scale_loss(loss)` or `step.scale_loss(loss)`
  and hand in those gradients; the guard unscales them and applies through the inner optimizer.

  Args:
    models: the model (a built `keras.Model` or `tf.Module`), or a list of models, the step trains.
    optimizers: the optimizer of each model (one, or a list as long as `models`).
    policies: the in-graph and host policies (None: `stable_train.default_policies()`; `[]`: no
      check at all).
    jit_compile: whether the training function is compiled with XLA (the XLA-fast formulas).
    report_rows: the step reports kept for the host half: it reads at least every this many steps.
    loss_fn: `batch -> loss` of one batch in training mode, or None; with it (and the batch passed
      to `step(batch)`), the host checks that re-run the first batch (DivergenceCheck's reference)
      and Forensics can run.

  Attributes:
    state: the `state.TrainState` counters (global_step, applied_steps, skipped_steps, ...).
    clipped_steps: applied steps whose gradients a transform shrank.
    policies: the policies, in order (a loss scale first under float16 compute).
    loss_scale: the loss-scaling policy, or None.
  """

  door = 'own_loop'

  def __init__(self, models, optimizers, *, policies=None, jit_compile: bool = False,
               report_rows: int = 100, loss_fn: Optional[Callable[[Any], Any]] = None):
    self.models = _listed('models', models)
    self.optimizers = _listed('optimizers', optimizers)
    _check(self.models, self.optimizers)
    self.jit_compile = errors.check_bool('StepGuard', 'jit_compile', jit_compile)
    report_rows = errors.check_int('StepGuard', 'report_rows', report_rows, minimum=1)
    if loss_fn is not None and not callable(loss_fn):
      raise errors.ConfigError(f'StepGuard: loss_fn={loss_fn!r} must be a function batch -> loss.')
    self.loss_fn = loss_fn
    self.strategy = tf.distribute.get_strategy()
    self.inner_optimizers, wrapper = _split_loss_scale(self.optimizers)
    for optimizer in self.inner_optimizers:
      if compat.optimizer_strategy(optimizer, self.strategy) is not self.strategy:
        raise errors.ConfigError(
            'StepGuard: the optimizer belongs to another distribution strategy than the one in '
            'scope; create the guard inside the same `with strategy.scope():` as the models and '
            'optimizers.')
      distribute.check_optimizer(optimizer, self.strategy, 'StepGuard')
    if self.jit_compile:
      distribute.check_jit(self.strategy, True, 'StepGuard')
    self.policies, self.loss_scale = trainer_setup.policy_stack(
        policies, self.models[0], self.strategy, wrapper=wrapper, owner='StepGuard')
    self._check_policies()
    self.groups = [list(m.trainable_variables) for m in self.models]
    with self.strategy.scope():
      for optimizer, variables in zip(self.optimizers, self.groups):
        if not optimizer.built:
          optimizer.build(variables)
    if wrapper is not None and self.loss_scale not in (policies or ()):
      self.loss_scale.follow(wrapper)  # The wrapper's scale variables scale the loss.
    self.variables = [v for group in self.groups for v in group]
    self.variable_paths = [provenance.variable_path(v) for v in self.variables]
    for p in self.policies:
      p.build(self.variables, self.variable_paths)
    with self.strategy.scope():
      self.state = state_lib.TrainState(policies=self.policies, strategy=self.strategy)
      self.clipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='clipped_steps')
    self.random_states = state_lib.random_state_variables()
    _check_random_states(self.random_states, self.strategy)
    self.rows = ring.ReportRing(report_rows, self.strategy)
    self.first_batch_sample = (first_batch_lib.FirstBatch.for_policies(self.policies, self.strategy)
                               if loss_fn is not None else None)
    self.input_paths: List[str] = []
    self.host = None  # The `driven.DrivenRun` of the run going on, if any.
    self.outputs_checked = True  # False once a traced step handed in no outputs.
    self.open_step = None  # The `StepScope` whose block is being traced now.
    self.end_steps = [p for p in self.policies if p.uses_end_step]
    self.core = step_lib.GuardedStep(step_lib.StepParts(
        split_batch=keras_parts.split_batch, compute=self._compute, variables=lambda: self.variables,
        apply=None, forward_state=self.forward_state, random_states=self.random_states,
        policies=self.policies, variable_paths=self.variable_paths,
        learning_rate=lambda: self.inner_optimizers[0].learning_rate, counters=self.state,
        strategy=self.strategy, distributed=distribute.uses_distributed_input(self.strategy),
        xla=self.jit_compile, loss_scale=self.loss_scale, optimizer=list(self.inner_optimizers),
        replica_sum=True))
    trainer_setup.claim(self.policies)

  @property
  def model(self):
    """The first model (the one the host checks re-run on the first batch)."""
    return self.models[0]

  @property
  def optimizer(self):
    """The first model's optimizer, inside any LossScaleOptimizer (its learning rate is the
    run's)."""
    return self.inner_optimizers[0]

  @property
  def scaled_optimizers(self) -> list:
    """Every model's optimizer, inside any LossScaleOptimizer: a rollback backs off all their
    learning rates alike (the step's one verdict found them all unstable)."""
    return list(self.inner_optimizers)

  def step(self, batch=None) -> 'scope_lib.StepScope':
    """The guarded scope of one training step (a context manager; see `scope.StepScope`).

    Args:
      batch: the step's batch, `(features, labels)` or features, or None. Given, its inputs are
        checked by the policies (`ValidateInputs`, ...) and named in the reports, and the policies
        that read the batch (`end_step`, the first batch) see it.
    """
    return scope_lib.StepScope(self, batch)

  # -- the state ---------------------------------------------------------------------------------
  def forward_state(self) -> List[tf.Variable]:
    """The variables a forward pass may assign: every model's non-trainable variables."""
    seen, out = set(), []
    for m in self.models:
      for v in m.variables:
        if not v.trainable and id(v) not in seen:
          seen.add(id(v))
          out.append(v)
    return out

  def checkpoint_objects(self) -> Dict[str, Any]:
    """The object map of the run's checkpoints (the model and optimizer, or lists of them)."""
    one = len(self.models) == 1
    objects = self.state.checkpoint_objects(
        model=self.models[0] if one else list(self.models),
        optimizer=self.optimizers[0] if one else list(self.optimizers),
        forward_state=self.forward_state(), random_states=self.random_states)
    objects['clipped_steps'] = self.clipped_steps
    return objects

  def float_variables(self) -> List[tf.Variable]:
    """Every float variable of the models and optimizers (checked before each checkpoint)."""
    return [v for m, o in zip(self.models, self.optimizers) for v in host_lib.float_variables(m, o)]

  def probe(self) -> handle.Probe:
    """What forensics and the host checks may re-run (through `loss_fn`)."""
    return handle.Probe(
        model=self.models[0], policies=self.policies, split_batch=keras_parts.split_batch,
        loss_and_gradients=self.loss_and_gradients, model_checkpoint=self.model_checkpoint,
        first_batch=self.first_batch, jit_compile=self.jit_compile,
        models=self.models)

  def summary_notes(self):
    return {**super().summary_notes(), 'outputs_checked': self.outputs_checked}

  def ready_for_checkpoint(self) -> bool:
    return True  # Built at construction.

  def model_checkpoint(self) -> tf.train.Checkpoint:
    """The models, optimizers and forward state (Forensics' records)."""
    return tf.train.Checkpoint(models=list(self.models), optimizers=list(self.optimizers),
                               model_state=self.forward_state())

  def loss_and_gradients(self, batch):
    """One replica's loss, gradients, input flags and outputs finite of `batch` through
    `loss_fn`, no update (what the host checks re-run). Traced."""
    if self.loss_fn is None:
      raise errors.ConfigError('StepGuard: a host check re-runs a batch: pass loss_fn=... .')
    return self.core.loss_and_gradients(batch)[:4]

  def _compute(self, batch):
    loss = self.loss_fn(batch)
    return loss, (), tf.constant(True)

  # -- traced, from `StepScope` ---------------------------------------------------------------------
  def apply_groups(self, none: Sequence[Optional[List[bool]]]):
    """grads -> None: applies the gradients of the groups handed in through their optimizers
    (`none[i]`: group i's None-gradient flags, or None for a group not handed in, left alone;
    a variable whose gradient was None is left alone too). Replica context, in the agreed
    apply."""
    def apply(grads):
      start = 0
      for optimizer, variables, skipped in zip(self.inner_optimizers, self.groups, none):
        mine = grads[start:start + len(variables)]
        start += len(variables)
        if skipped is not None:
          pairs = [(g, v) for g, v, n in zip(mine, variables, skipped) if not n]
          optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
    return apply

  def record(self, report, batches) -> Dict[str, tf.Tensor]:
    """In cross-replica context: the `end_step` hooks, the report stored for the host, a clipped
    step counted; returns the report the step returns."""
    if self.end_steps and batches != ():
      local = lambda v: tf.concat(self.strategy.experimental_local_results(v), axis=0)
      batch = tf.nest.map_structure(local, batches)
      for p in self.end_steps:
        p.end_step(batch, report)
    self.rows.store(report)
    clipped = tf.logical_and(report['applied'], report['clipped_grad_norm'] < report['grad_norm'])
    out = {k: v for k, v in report.items() if k != 'grad_finite_flags' and '/' not in k}
    out.update(skipped_steps=tf.identity(self.state.skipped_steps),
               clipped_steps=self.clipped_steps.assign_add(tf.cast(clipped, tf.int64)))
    return out

  def _check_policies(self) -> None:
    forensics.stand_down_optional(self.policies, whole_step_xla=self.jit_compile,
                                  loss_fn=self.loss_fn is not None)
    if self.jit_compile:
      slow = [p.name for p in self.policies if not p.end_step_compiles]
      if slow:
        raise errors.ConfigError(
            f'StepGuard: policies {slow} need a step outside XLA; use jit_compile=False, or drop '
            'them.')
    if self.loss_fn is None:
      rerun = [p.name for p in self.policies if isinstance(p, forensics.Forensics) and p.active]
      if rerun:
        raise errors.ConfigError(
            f'StepGuard: {rerun} re-runs the offending batch: pass loss_fn=(batch -> loss) and '
            'the batch to guard.step(batch).')


def _listed(name: str, value) -> list:
  if isinstance(value, (list, tuple)):
    if not value:
      raise errors.ConfigError(f'StepGuard: {name} is empty; pass at least one.')
    return list(value)
  return [value]


def _check(models, optimizers) -> None:
  """One-line ConfigErrors for models and optimizers a guard cannot use."""
  if len(models) != len(optimizers):
    raise errors.ConfigError(
        f'StepGuard: {len(models)} models but {len(optimizers)} optimizers; pass one optimizer '
        'per model (the same one twice is refused: each model needs its own slots).')
  if len({id(o) for o in optimizers}) != len(optimizers):
    raise errors.ConfigError('StepGuard: the same optimizer is given for two models; create one '
                             'optimizer per model.')
  for m in models:
    if isinstance(m, type) or not all(hasattr(m, a) for a in ('trainable_variables', 'variables')):
      raise errors.ConfigError(f'StepGuard: {m!r} is not a model (a keras.Model or tf.Module).')
    if not m.trainable_variables:
      raise errors.ConfigError(
          f'StepGuard: model {getattr(m, "name", m)!r} has no trainable variables yet; build it '
          'first (call it on a batch, or model.build(input_shape)), then create the guard.')
  for o in optimizers:
    if isinstance(o, type) or not isinstance(o, keras.optimizers.Optimizer):
      hint = ' (add "()" after the class)' if isinstance(o, type) else ''
      raise errors.ConfigError(
          f'StepGuard: {o!r} is not a Keras optimizer instance{hint}, e.g. '
          'keras.optimizers.Adam(1e-3).')


def _check_random_states(states, strategy) -> None:
  """The process-wide generators are usable under `strategy` (not another strategy's)."""
  if not tf.distribute.has_strategy():
    return
  for v in states:
    own = compat.variable_strategy(v)
    if own is not None and own is not strategy:
      raise errors.ConfigError(
          'StepGuard: Keras\'s global seed generator was created under another distribution '
          'strategy; call keras.utils.set_random_seed(seed) outside any strategy scope (it '
          'makes a new one), then create the strategy and the guard.')


def _split_loss_scale(optimizers):
  """(the optimizers that apply, the one LossScaleOptimizer among the given ones or None)."""
  split = [precision.split_loss_scale_optimizer(o) for o in optimizers]
  wrappers = [w for _, w in split if w is not None]
  if len(wrappers) > 1:
    raise errors.ConfigError(
        'StepGuard: more than one LossScaleOptimizer; one loss scale serves the whole step: '
        'wrap one optimizer, and differentiate step.scale_loss(loss) for every loss.')
  return [o for o, _ in split], (wrappers[0] if wrappers else None)

