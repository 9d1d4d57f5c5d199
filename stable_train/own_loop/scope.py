"""`StepScope`: one guarded step of a hand-written loop, `with guard.step() as step:`."""

import dataclasses
from typing import List, Optional

import tensorflow as tf

from stable_train import errors
from stable_train.core import keras_parts
from stable_train.core import numerics
from stable_train.core import reports as reports_lib
from stable_train.core import step as step_lib


class StepScope:
  """The scope of one guarded step (made by `StepGuard.step`; traced with the loop's step).

  Entering reads what the forward pass may change (the models' non-trainable variables, the
  process-wide generators); `apply` collects each optimizer's gradients; leaving guards them all
  at once and applies every update or none, then sets `report`.

  Attributes:
    report: after the `with` block, the step's report: 'applied', 'loss', 'grad_norm' (before any
      transform), 'clipped_grad_norm', 'grads_finite', 'loss_finite', 'inputs_finite',
      'outputs_finite', 'step' (the global step after it), 'skipped_steps', 'clipped_steps', ...
      (scalar tensors).
  """

  def __init__(self, guard, batch=None):
    self._guard = guard
    # Tensors (a numpy batch of an eager step included), None entries kept.
    self._batch = None if batch is None else tf.nest.map_structure(
        lambda t: t if t is None or isinstance(t, tf.Tensor) else tf.convert_to_tensor(t), batch)
    self._grads: List[Optional[list]] = [None] * len(guard.optimizers)
    self._losses, self._outputs_ok = [], []
    self._none: List[Optional[List[bool]]] = [None] * len(guard.optimizers)
    self._scaled = False
    self._snapshots = None
    self._state = 'new'  # 'open' inside the block, 'closed' after it.
    self._report = None

  @property
  def report(self):
    """The step's report (see the class docstring); set when the `with` block ends."""
    if self._state != 'closed':
      raise errors.ConfigError('StepGuard: step.report is set when the `with guard.step()` block '
                               'ends; read it (return it) after the block.')
    return self._report

  def __enter__(self) -> 'StepScope':
    if self._guard.open_step is not None:
      raise errors.ConfigError('StepGuard: guard.step() inside another guard.step() block; one '
                               'block per step (hand every optimizer\'s gradients to its apply).')
    self._guard.open_step = self
    self._state = 'open'
    core = self._guard.core
    # Read before the forward pass assigns (automatic control dependencies keep program order).
    self._snapshots = (core.forward_snapshot(), core.random_snapshot())
    sample = self._guard.first_batch_sample
    if sample is not None and self._batch is not None:
      sample.capture(self._batch)
    return self

  def scale_loss(self, loss) -> tf.Tensor:
    """The loss to differentiate under loss scaling (unchanged without it); the gradients handed
    to `apply` are then those of the scaled loss, which the guard unscales."""
    self._scaled = True
    scale = self._guard.loss_scale
    return loss if scale is None else scale.scale_loss(loss)

  def apply(self, grads, loss, *, optimizer=None, outputs=None) -> None:
    """Hands in one optimizer's gradients (applied or skipped with the others when the `with`
    block ends).

    Args:
      grads: the gradients of the loss for that optimizer's model's `trainable_variables`, in that
        order (a None entry leaves its variable alone); of the scaled loss under loss scaling.
      loss: the (unscaled) scalar loss, reported and watched by the policies; under a strategy,
        this replica's share of the global mean.
      optimizer: which optimizer (one of the guard's); needed only with several.
      outputs: model outputs whose non-finite values are reported, or None.
    """
    g = self._guard
    if self._state != 'open':
      raise errors.ConfigError('StepGuard: step.apply outside its `with guard.step() as step:` '
                               'block (after it ended, say); call it inside the block.')
    index = self._index(optimizer)
    if self._grads[index] is not None:
      raise errors.ConfigError('StepGuard: step.apply called twice for one optimizer in one step; '
                               'add the losses, or run two steps.')
    variables = g.groups[index]
    grads = list(grads)
    _check_gradients(g.models[index], variables, grads)
    loss = numerics.widen(loss)
    if loss.shape.rank not in (0, None):
      raise errors.ConfigError(f'StepGuard: step.apply got a loss of shape {loss.shape}; pass '
                               'the scalar loss (e.g. tf.reduce_mean of the per-example losses).')
    # A None gradient is measured as zeros and its variable left alone, as Keras's apply does.
    self._none[index] = [d is None for d in grads]
    self._grads[index] = [tf.zeros_like(v) if d is None else tf.convert_to_tensor(d)
                          for d, v in zip(grads, variables)]
    self._losses.append(loss)
    if outputs is None:
      g.outputs_checked = False  # The doctor then reads no non-finite loss as the loss's own.
    else:
      self._outputs_ok.extend(tf.reduce_all(tf.math.is_finite(o)) for o in tf.nest.flatten(outputs)
                              if o is not None and o.dtype.is_floating)

  def __exit__(self, exc_type, exc, tb) -> bool:
    self._state = 'closed'
    self._guard.open_step = None
    if exc_type is not None:
      return False
    g = self._guard
    given = [grads is not None for grads in self._grads]
    if not any(given):
      raise errors.ConfigError('StepGuard: nothing to apply; call step.apply(grads, loss) inside '
                               '`with guard.step() as step:`.')
    if g.loss_scale is not None and not self._scaled and _own_scale(g):
      raise errors.ConfigError(
          'StepGuard: the step scales the loss (float16 compute): differentiate '
          'step.scale_loss(loss), or pass a keras.optimizers.LossScaleOptimizer.')
    grads = [d for group, mine in zip(g.groups, self._grads)
             for d in (mine if mine is not None else [tf.zeros_like(v) for v in group])]
    if g.loss_scale is not None:  # Every check, clip and policy sees the true gradients.
      grads = g.loss_scale.unscale_gradients(grads)
    loss = self._losses[0] if len(self._losses) == 1 else tf.add_n(self._losses)
    outputs_ok = (tf.reduce_all(tf.stack(self._outputs_ok)) if self._outputs_ok
                  else tf.constant(True))
    input_ok = self._input_checks()
    core = step_lib.GuardedStep(dataclasses.replace(g.core.parts,
                                                    apply=g.apply_groups(self._none)))
    guarded, report = core.guard_gradients(loss, grads, input_ok, outputs_ok)
    batch = self._batch if (self._batch is not None and g.end_steps) else ()
    self._report = core.agree_in_replica(guarded, report, self._snapshots, batch=batch,
                                         record=g.record)
    return False

  def _index(self, optimizer) -> int:
    g = self._guard
    if optimizer is None:
      if len(g.optimizers) > 1:
        raise errors.ConfigError('StepGuard: the guard has several optimizers; pass '
                                 'step.apply(grads, loss, optimizer=...).')
      return 0
    for i, o in enumerate(g.optimizers):
      if o is optimizer or g.inner_optimizers[i] is optimizer:
        return i
    raise errors.ConfigError(f'StepGuard: step.apply(optimizer=<{type(optimizer).__name__}>) is '
                             'not one of the guard\'s optimizers (pass the one you gave it).')

  def _input_checks(self) -> tf.Tensor:
    """The batch's input flags (the policies' `check_batch`), or none without a batch."""
    if self._batch is None:
      return tf.ones([0], tf.bool)
    features, labels = keras_parts.split_batch(self._batch)
    self._guard.input_paths = reports_lib.input_paths(features, labels)
    return self._guard.core.input_checks(features, labels)


def _check_gradients(model, variables, grads) -> None:
  """One gradient per variable the guard was made with, each of its variable's shape, and not
  all of them None; else a one-line ConfigError."""
  name = getattr(model, 'name', 'the model')
  if len(grads) != len(variables):
    now = len(getattr(model, 'trainable_variables', ()))
    hint = (f'its trainable variables changed since the guard was made (now {now}); after '
            'changing `trainable`, make a new optimizer and a new StepGuard'
            if now != len(variables) else
            'pass tape.gradient(loss, model.trainable_variables)')
    raise errors.ConfigError(f'StepGuard: {len(grads)} gradients for the {len(variables)} '
                             f'trainable variables of {name!r}; {hint}.')
  if all(d is None for d in grads):
    raise errors.ConfigError(f'StepGuard: no gradient for any variable of {name!r} (all None); '
                             'does the loss depend on the model under this tape?')
  for i, (d, v) in enumerate(zip(grads, variables)):
    if d is None or isinstance(d, tf.IndexedSlices):  # A sparse gradient's shape is its rows'.
      continue
    if not tf.TensorShape(d.shape).is_compatible_with(v.shape):
      raise errors.ConfigError(
          f'StepGuard: gradient {i} has shape {tf.TensorShape(d.shape)}, its variable '
          f'{v.path if hasattr(v, "path") else v.name} {v.shape}; pass the gradients in the order '
          'of model.trainable_variables.')


def _own_scale(guard) -> bool:
  """Whether the loss scale is the guard's own (no LossScaleOptimizer whose scale_loss the loop
  may call instead)."""
  return all(o is i for o, i in zip(guard.optimizers, guard.inner_optimizers))
