"""Whether a model's weights moved in a fit, and whether its units stayed alike: two verdicts of
DivergenceCheck's end check (`untrained`): not one weight moved (`no_weight_moved`), or more
than half of its kernels moved with every unit still the same as the others, the loss not yet
halved (`alike_units`)."""

import hashlib
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from stable_train.policies import diagnostics

FINGERPRINT_LIMIT = 2**28  # Weights (268M) up to which `fingerprint` reads them all.
UNMOVED, ALIKE = 'no_weight_moved', 'alike_units'
# `alike` judges a run whose smoothed loss is still this fraction of its first or above: one that
# came further down learnt, whatever its units (zero-initialised heads that a mean averages).
HALVED = 0.5


def fingerprint(variables) -> Optional[Tuple[bytes, ...]]:
  """One digest of each variable's values (its bytes), in order: equal fingerprints, the same
  values, and each variable's own digest says whether it moved. None where a value cannot be
  read (an uninitialised variable), or above `FINGERPRINT_LIMIT` weights (a copy and a hash each
  at the first loop and at the end)."""
  try:
    if sum(int(np.prod(v.shape)) for v in variables) > FINGERPRINT_LIMIT:
      return None
    return tuple(hashlib.blake2b(memoryview(np.ascontiguousarray(v.numpy())).cast('B'),
                                 digest_size=16).digest() for v in variables)
  except Exception:  # pylint: disable=broad-except  (never a reason to end a run)
    return None


class Moved:
  """Whether a weight moved after this fit's first loop (host only): a `fingerprint` of the
  weights then, and the applied steps counted since (a restore or a resumed fit comes first)."""

  def __init__(self, enabled: bool = True):
    self._start, self._taken, self._steps = None, not enabled, 0  # Disabled: never judged.

  def record(self, variables, applied: int) -> None:
    """After each loop: the fingerprint after the first, then the steps `applied` since."""
    if self._taken:
      self._steps += applied
    else:
      self._start, self._taken = fingerprint(variables), True

  def verdict(self, variables, least_steps: int,
              loss=None) -> Optional[Tuple[str, str]]:
    """`unmoved`, else `alike` (where the `loss` fields 'smoothed' and 'start' say it did not
    halve), after `least_steps` applied steps since the fingerprint or more; the weights read
    once for both."""
    if self._steps < least_steps:
      return None
    now = fingerprint(variables)
    halved = loss is not None and not loss['smoothed'] >= HALVED * loss['start']
    return unmoved(self._start, variables, self._steps, now) or (
        None if halved else alike(variables, self._steps, self._start, now))


def _kernel(v) -> bool:  # Rank 2 or more, 2 units or more on the last axis.
  return len(v.shape) >= 2 and (v.shape[-1] or 0) >= 2


def _one_nonzero_constant(v) -> bool:
  flat = tf.reshape(v, [-1])
  return bool(flat[0] != 0) and bool(tf.reduce_all(tf.equal(flat, flat[0])))


def alike(variables, steps: int, start, now) -> Optional[Tuple[str, str]]:
  """(`ALIKE`, reason) when more than half of the kernels of `variables` (`_kernel`) moved from
  `start` to `now` (their `fingerprint`s) and still have every unit the same, to the bit: units
  that start alike (a kernel initialised to one constant) get the same gradient and stay alike,
  the net one feature wide (random kernels never have two units alike; one alike among random
  ones, a head averaged, is a design). Where no weight of rank 2 or more moved at all (a
  one-unit head's neither: only biases learnt), a kernel that did not move counts too if it is
  still one nonzero constant (kernel_initializer='ones': sums that saturate what follows, so no
  gradient comes back: blind35's TD3 actor); an unmoved constant kernel beside one that moved
  is cut off by design (a fixed filter bank behind a stop_gradient), an unmoved kernel of zeros
  got no gradient by design (an unused head). None where no weight moved (`unmoved`'s), or
  else."""
  if start is None or now is None or start == now:
    return None
  try:
    weights = [(v, a != b) for v, a, b in zip(variables, start, now) if len(v.shape) >= 2]
    kernels = [(v, moved) for v, moved in weights if _kernel(v)]
    biases_only = not any(moved for _, moved in weights)
    same = [v for v, moved in kernels if bool(tf.reduce_all(tf.equal(v, v[..., :1]))) and (
        moved or (biases_only and _one_nonzero_constant(v)))]
    names = ', '.join(getattr(v, 'path', None) or v.name for v in same[:3])
  except Exception:  # pylint: disable=broad-except  (never a reason to end a run)
    return None
  return None if 2 * len(same) <= len(kernels) else (ALIKE, (
      f'the model did not train: after {steps} steps every unit of {len(same)} of its '
      f'{len(kernels)} kernels ({names}{", ..." if len(same) > 3 else ""}) is still the same as '
      'the others: units that start alike (a kernel initialised to one constant) get the same '
      f'gradient and stay alike, the net one feature wide; {diagnostics.INIT_REMEDY}'))


def unmoved(start, variables, steps: int, now=None) -> Optional[Tuple[str, str]]:
  """(`UNMOVED`, reason) when not one trainable weight moved from the values `start`
  (`fingerprint`) was taken of, `steps` applied steps before (`now`: their fingerprint, taken
  here where not given), else None: a learning rate of 0, or gradients that are all 0 (a loss
  that does not depend on the weights)."""
  if start is None or not variables or (now or fingerprint(variables)) != start:
    return None
  return UNMOVED, (
      f'the model did not train: after {steps} steps not one of its weights moved from its '
      'start: a learning rate of 0 (a schedule that stays at 0), or gradients that are all 0 '
      '(a loss that does not depend on the weights, a stop_gradient); check the optimizer\'s '
      'learning_rate and that the loss reaches the trainable weights')
