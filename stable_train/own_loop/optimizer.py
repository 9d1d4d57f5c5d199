"""`GuardedOptimizer`: the one-line guard of the simplest hand-written loop, as an optimizer
wrapper (in the manner of Keras's `LossScaleOptimizer`)."""

import functools
from typing import Any, List, Optional, Sequence

import keras
import tensorflow as tf

from stable_train import compat
from stable_train import errors
from stable_train.core import numerics

_OWNER = 'GuardedOptimizer'


@keras.saving.register_keras_serializable(package='stable_train')
class GuardedOptimizer(keras.optimizers.Optimizer):
  """Wraps a Keras optimizer so that a step with a non-finite gradient is not applied.

  Each `apply` (or `apply_gradients`) checks, in one pass over the gradients, whether every one
  is finite and what their global norm is. If all are finite they are clipped to `clipnorm` by
  their global norm (when set) and applied by the inner optimizer; otherwise the update is
  skipped: no model variable and no variable of the inner optimizer (its slots, its `iterations`)
  changes. The decision is one `tf.cond`, so the wrapper works eagerly, in `tf.function`, with
  `jit_compile=True`, and under `tf.distribute.MirroredStrategy` (call `apply` inside
  `strategy.run`; see below).

  ```python
  opt = stable_train.GuardedOptimizer(keras.optimizers.Adam(1e-3), clipnorm=1.0)

  @tf.function(jit_compile=True)
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply(grads, model.trainable_variables)
  ```

  Only the update is skipped. GuardedOptimizer sees the gradients and nothing else, so what the
  forward pass already changed stays changed on a skipped step: BatchNorm moving statistics,
  Dropout and other seed-generator states, TensorFlow's and Keras's global random generators.
  For skips that leave every variable bit-identical, use the full guard, `stable_train.StepGuard`.

  Under a distribution strategy the gradients are summed over the replicas once, by the wrapper
  (the inner optimizer's own all-reduce is switched off for them), and the check and the clip see
  that sum, so every replica reaches the same verdict and the update is the one the inner
  optimizer alone would make. The apply-or-skip then runs in cross-replica context, through a
  `merge_call`, as `LossScaleOptimizer` does. Create the model and both optimizers inside
  `strategy.scope()`.

  For loss scaling wrap this optimizer, not the other way round:
  `keras.optimizers.LossScaleOptimizer(GuardedOptimizer(inner))` (the loss scale then sees every
  overflow; the rest of the non-finite steps are counted here).

  Attributes:
    inner_optimizer: the wrapped optimizer.
    clipnorm: the global-norm clip, or None.
    skipped_steps: (int64 variable, after `build`) steps skipped so far.
    consecutive_skips: (int64 variable) skips since the last applied step.
    last_grad_norm: (float32 variable) the global norm of the last step's gradients, before any
      clip (inf or NaN on a non-finite step): for logging.
  """

  def __init__(self, optimizer, *, clipnorm: Optional[float] = None, name: Optional[str] = None):
    """Checks the arguments; the counters are made by `build` (or the first `apply`).

    Args:
      optimizer: the `keras.optimizers.Optimizer` instance to wrap (not a LossScaleOptimizer:
        see the class docstring).
      clipnorm: clip the gradients to this global norm before applying them (a positive finite
        number), or None: no clip.
      name: the optimizer's name.

    Raises:
      ConfigError: a bad argument, in one line naming it.
    """
    _check_inner(optimizer)
    clipnorm = errors.check_number(_OWNER, 'clipnorm', clipnorm, low=0.0, low_open=True,
                                   allow_none=True, what='None or a positive finite number')
    super().__init__(learning_rate=0.0, name=name)
    own, inner = compat.optimizer_strategy(self, None), compat.optimizer_strategy(optimizer, None)
    if own is not inner:
      raise errors.ConfigError(
          f'{_OWNER}: optimizer was created under another distribution strategy than the '
          'wrapper; create both inside the same `with strategy.scope():`.')
    self.inner_optimizer = optimizer
    self.clipnorm = clipnorm

  def build(self, var_list):
    """Makes the counters and builds the inner optimizer (its slots) for `var_list`."""
    if self.built:
      return
    self.skipped_steps = self.add_variable((), dtype='int64', name='skipped_steps')
    self.consecutive_skips = self.add_variable((), dtype='int64', name='consecutive_skips')
    self.last_grad_norm = self.add_variable((), dtype='float32', name='last_grad_norm')
    if not self.inner_optimizer.built:
      self.inner_optimizer.build(var_list)
    super().build(var_list)

  # -- the update ---------------------------------------------------------------------------------
  def apply(self, grads, trainable_variables=None):
    """Applies `grads` through the inner optimizer if they are all finite, else skips the step.

    Args:
      grads: one gradient (or None) per variable.
      trainable_variables: the variables; may be left out once the optimizer is built.

    Returns:
      A scalar bool tensor: whether the update was applied (None for an empty `grads`).
    """
    grads = list(grads)
    if not grads:
      return None
    variables = None if trainable_variables is None else list(trainable_variables)
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
      raise errors.ConfigError(
          f'{_OWNER}: apply() must be called in replica context: inside strategy.run(...).')
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if not self.built:
      if variables is None or replicas > 1:  # Keras cannot build in a replica of several.
        raise errors.ConfigError(
            f'{_OWNER}: apply() before the optimizer is built; call '
            'build(model.trainable_variables) first (inside strategy.scope() under a strategy)'
            + (', or pass the variables: apply(grads, model.trainable_variables).'
               if replicas == 1 else '.'))
      self.build(variables)
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
      raise errors.ConfigError(f'{_OWNER}: every gradient is None; does the loss depend on '
                               'the variables?')
    values = [tf.convert_to_tensor(grads[i]) for i in present]
    distributed = tf.distribute.has_strategy()
    if distributed and replicas > 1:
      values = ctx.all_reduce(tf.distribute.ReduceOp.SUM, values)
    values, finite, norm = self._check_and_clip(values)
    apply_inner = functools.partial(self._apply_inner, len(grads), present, variables)
    if distributed:
      return ctx.merge_call(functools.partial(self._agree, apply_inner=apply_inner),
                            args=(values, finite, norm))
    applied = tf.cond(finite, lambda: apply_inner(values), lambda: tf.constant(False))
    self._count(applied, norm)
    return applied

  def apply_gradients(self, grads_and_vars):
    """`apply` for (gradient, variable) pairs; returns the inner optimizer's `iterations`."""
    grads, variables = zip(*list(grads_and_vars))
    self.apply(grads, variables)
    return self.iterations

  def _check_and_clip(self, values: List[tf.Tensor]):
    """(the gradients, clipped when `clipnorm` is set; whether all are finite; their global
    norm before the clip). Gradients of mixed dtypes are measured and clipped in one (the widest
    of float32 and theirs) and handed on in their own."""
    dtype = tf.float64 if any(v.dtype == tf.float64 for v in values) else tf.float32
    same = all(v.dtype == dtype for v in values)
    work = values if same else [tf.cast(v, dtype) for v in values]
    flags, norm = numerics.finite_flags_and_norm(work)
    finite = tf.reduce_all(flags)
    if self.clipnorm is not None:
      work, _, _ = numerics.clip_by_global_norm(work, self.clipnorm, norm=norm, all_finite=finite)
      values = work if same else [tf.cast(w, v.dtype) for w, v in zip(work, values)]
    return values, finite, norm

  def _apply_inner(self, count: int, present: Sequence[int], variables, values) -> tf.Tensor:
    """The inner optimizer's apply of `values` (the gradients that were not None, at their
    positions `present` among `count`). Replica context."""
    full: List[Any] = [None] * count
    for i, value in zip(present, values):
      full[i] = value
    self.inner_optimizer.apply(full, variables)
    return tf.constant(True)

  def _agree(self, strategy, values, finite, norm, *, apply_inner) -> tf.Tensor:
    """Cross-replica context: the one apply-or-skip of the replicas (their verdicts come from
    the same summed gradients; any replica's non-finite verdict skips for all)."""
    local = strategy.experimental_local_results
    finite = tf.reduce_all(tf.stack([tf.convert_to_tensor(f) for f in local(finite)]))

    def apply():
      # The gradients are already summed: the inner optimizer must not all-reduce them again.
      with compat.gradients_already_aggregated(self.inner_optimizer):
        strategy.extended.call_for_each_replica(apply_inner, args=(values,))
      return tf.constant(True)

    # In cross-replica context: a cond in replica context cannot hold the inner optimizer's
    # own merge_call.
    applied = tf.cond(finite, apply, lambda: tf.constant(False))
    self._count(applied, local(norm)[0])
    return applied

  def _count(self, applied: tf.Tensor, norm: tf.Tensor) -> None:
    """The counters of one step."""
    skipped = tf.cast(tf.logical_not(applied), tf.int64)
    self.skipped_steps.assign_add(skipped)
    self.consecutive_skips.assign((self.consecutive_skips + skipped) * skipped)
    self.last_grad_norm.assign(tf.cast(norm, tf.float32))

  # -- what the inner optimizer holds -------------------------------------------------------------
  def own_clip(self):
    """Its own clip, a global norm (summary.json's `optimizer_clip`, for the doctor)."""
    return {'global_clipnorm': self.clipnorm}

  @property
  def variables(self):
    return self._variables + self.inner_optimizer.variables

  @property
  def learning_rate(self):
    return self.inner_optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, learning_rate):
    self.inner_optimizer.learning_rate = learning_rate

  @property
  def iterations(self):
    return self.inner_optimizer.iterations

  def scale_loss(self, loss):
    return self.inner_optimizer.scale_loss(loss)

  def finalize_variable_values(self, var_list):
    self.inner_optimizer.finalize_variable_values(var_list)

  def get_config(self):
    return {'name': self.name, 'clipnorm': self.clipnorm,
            'optimizer': keras.saving.serialize_keras_object(self.inner_optimizer)}

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    inner = keras.saving.deserialize_keras_object(config.pop('optimizer'),
                                                  custom_objects=custom_objects)
    return cls(inner, **config)


def _check_inner(optimizer) -> None:
  """Raises a one-line ConfigError unless `optimizer` can be wrapped."""
  if isinstance(optimizer, type) and issubclass(optimizer, keras.optimizers.Optimizer):
    raise errors.ConfigError(f'{_OWNER}: optimizer={optimizer.__name__} is a class; pass an '
                             f'instance: {optimizer.__name__}().')
  if not isinstance(optimizer, keras.optimizers.Optimizer):
    raise errors.ConfigError(
        f'{_OWNER}: optimizer={errors.describe(optimizer)} must be a keras.optimizers.Optimizer '
        'instance, e.g. keras.optimizers.Adam(1e-3).')
  if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
    raise errors.ConfigError(
        f'{_OWNER}: optimizer is a LossScaleOptimizer, whose loss scale would never see the '
        'overflows skipped here; wrap the other way round: '
        'LossScaleOptimizer(GuardedOptimizer(inner)).')
  if isinstance(optimizer, GuardedOptimizer):
    raise errors.ConfigError(f'{_OWNER}: optimizer is already a GuardedOptimizer; wrap the '
                             'inner optimizer once.')
  if optimizer.loss_scale_factor is not None:
    raise errors.ConfigError(
        f'{_OWNER}: optimizer has loss_scale_factor={optimizer.loss_scale_factor!r}: the checks '
        'and the clip would see scaled gradients; set it to None and use '
        'LossScaleOptimizer(GuardedOptimizer(inner)).')
