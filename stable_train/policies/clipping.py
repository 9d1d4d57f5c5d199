"""Gradient transforms beyond the fixed global clip: AdaptiveClip (the default), ClipByValue,
ClipByNorm and AdaptiveGradClip (AGC)."""

import functools
import math
from typing import Optional, Sequence

import gin
import tensorflow as tf

from stable_train import compat
from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train import errors

NO_CEILING = float(tf.float32.max)  # AdaptiveClip's norm_ceiling when none is set.


# Every float argument here: a finite number in the open interval (low, high), (0, inf) by default.
_number = functools.partial(errors.check_number, low=0.0, low_open=True, high_open=True)


def _keep_non_finite(original: tf.Tensor, transformed: tf.Tensor) -> tf.Tensor:
  """`transformed` where `original` is finite, else `original`: a transform must never turn a
  NaN/Inf gradient into a finite one (skipping it is SkipNonFinite's job)."""
  return tf.where(tf.math.is_finite(original), transformed, original)


@gin.register(module='stable_train')
class AdaptiveClip(interfaces.Policy):
  """Clips the global gradient norm only when it spikes above its own recent statistics (ZClip).

  An exponential moving mean and variance of the global gradient norm are kept in variables (so
  they are checkpointed and restored bit-identically on resume and rollback). A step whose norm
  exceeds `mean + z_threshold * std` is clipped to that value. A healthy run, whose norm stays
  within its own noise, is therefore almost never touched, unlike a fixed `ClipByGlobalNorm`,
  which clips every step of a run whose natural norm is above its `max_norm`.

  Which norms enter the statistics: only those of applied steps whose norm was finite and below
  the threshold. A clipped spike does not enter at all (ZClip feeds in the clipped value instead).
  Feeding it in ratchets the threshold upwards by a few per cent per step while a run stays above
  it, so a persistently diverging run (too high a learning rate) would raise the threshold
  without bound; leaving spikes out keeps the clip where the healthy statistics put it. The
  price: a genuine, sudden and lasting jump of the norm by more than `z_threshold` stds stays
  clipped at the old level (`clipped_steps` in summary.json shows it).

  Before the statistics are ready (`warmup_steps` accepted norms) the threshold is
  `warmup_ratio` × the mean of the norms accepted so far, and on the very first step, with no
  statistics at all, only `max_norm` applies. `max_norm` is an absolute ceiling at every step
  (None: none); the default is far above any healthy norm and only stops finite-but-huge
  gradients (a 1e25-scaled loss) from overflowing the optimizer's second moments.
  """

  def __init__(self, *, z_threshold: float = 4.0, alpha: float = 0.97, warmup_steps: int = 25,
               warmup_ratio: float = 4.0, max_norm: Optional[float] = 1e6,
               name: str = 'adaptive_clip'):
    """Initialises the policy.

    Args:
      z_threshold: a norm more than this many standard deviations above the mean is clipped.
        ZClip uses 2.5; here that clipped ordinary early steps of a healthy MLP and changed its
        loss by 17 % (BUILD_NOTES.md), so the default is 4.
      alpha: EMA decay of the mean and variance, in (0, 1): each accepted norm has weight
        1 - alpha (about 1 / (1 - alpha) steps of memory). During warm-up the plain mean and
        variance of the accepted norms are used.
      warmup_steps: accepted norms needed before the z-score threshold is used (>= 2).
      warmup_ratio: during warm-up a norm above this multiple of the mean so far is clipped to it
        (> 1).
      max_norm: absolute ceiling on the global norm, at every step, or None.
      name: policy name.
    """
    super().__init__(name=name)
    self.z_threshold = _number('AdaptiveClip', 'z_threshold', z_threshold)
    self.alpha = _number('AdaptiveClip', 'alpha', alpha, high=1.0)
    self.warmup_steps = errors.check_int('AdaptiveClip', 'warmup_steps', warmup_steps, minimum=2)
    self.warmup_ratio = _number('AdaptiveClip', 'warmup_ratio', warmup_ratio, low=1.0)
    self.max_norm = _number('AdaptiveClip', 'max_norm', max_norm, allow_none=True)
    # State: the statistics of accepted norms and a count of clipped steps.
    self.mean = tf.Variable(0.0, dtype=tf.float32, trainable=False, name='mean')
    self.var = tf.Variable(0.0, dtype=tf.float32, trainable=False, name='var')
    self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name='count')
    self.clipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='clipped_steps')
    # A ceiling a recovery set (`set_norm_ceiling`): state, not configuration; until then the
    # largest float32 (not inf: everything a checkpoint holds is finite).
    self.norm_ceiling = tf.Variable(NO_CEILING, dtype=tf.float32, trainable=False,
                                    name='norm_ceiling')

  def set_norm_ceiling(self, norm: float) -> None:
    self.norm_ceiling.assign(min(float(norm), float(self.norm_ceiling.numpy())))

  def threshold(self) -> tf.Tensor:
    """The clip threshold the next step will use (a pure function of the variables)."""
    return self._threshold(*self._statistics())

  def _statistics(self):
    """(mean, var, count): each variable read once (a read is an op in every step)."""
    return (tf.convert_to_tensor(self.mean), tf.convert_to_tensor(self.var),
            tf.convert_to_tensor(self.count))

  def _threshold(self, mean, var, count) -> tf.Tensor:
    ceiling = tf.convert_to_tensor(self.norm_ceiling)
    if self.max_norm is not None:
      ceiling = tf.minimum(tf.constant(self.max_norm, tf.float32), ceiling)
    adaptive = mean + self.z_threshold * tf.sqrt(tf.maximum(var, 0.0))
    threshold = tf.where(count >= self.warmup_steps, adaptive,
                         tf.where(count > 0, self.warmup_ratio * mean, ceiling))
    return tf.minimum(threshold, ceiling)

  def transform_gradients(self, grads, stats):
    norm = stats['grad_norm']
    statistics = self._statistics()
    threshold32 = self._threshold(*statistics)
    # Handed on to update_state through the report: the same reads, measured once per step.
    for key, value in zip(('mean', 'var', 'count', 'threshold'), statistics + (threshold32,)):
      stats[f'{self.name}/{key}'] = value
    threshold = tf.cast(threshold32, norm.dtype)  # float64 gradients have a float64 norm.
    # A non-finite gradient is left alone (non-finite stays non-finite).
    clip = tf.logical_and(stats['grads_finite'], norm > threshold)
    # Beyond float32's range (norm inf, or above 2**126) the clip takes its rescaled path.
    if stats['xla']:
      # Under XLA a conditional around the gradients costs more than the products, which fuse
      # into the optimizer's update: factors of exactly 1 when the step is not clipped.
      a, b = numerics.clip_factors(grads, threshold, norm, all_finite=clip)
      one = tf.ones_like(norm)
      a, b = tf.where(clip, a, one), tf.where(clip, b, one)
      grads = [(g * tf.cast(a, g.dtype)) * tf.cast(b, g.dtype) for g in grads]
    else:
      # The unclipped branch is the identity (a product by 1.0 is a pass over every gradient),
      # and only the branch taken runs: lowered, the clip's ~100 ops would pass the executor,
      # dead, on every step (4-7 % of a seed-MLP step, docs/speed.md).
      grads = compat.taken_branch_only(tf.cond(
          clip,
          lambda: numerics.clip_by_global_norm(grads, threshold, norm=norm, all_finite=True)[0],
          lambda: list(grads)))
    after = tf.where(clip, threshold, norm)
    # Exact stats of the output, so the guard measures nothing again: only finite gradients are
    # scaled, by a positive factor of at most 1 (or clipped into range), so finiteness is as it was.
    stats['grad_norm'] = after
    stats['clipped_grad_norm'] = after
    stats['grads_finite'] = stats['grads_finite']
    stats['grad_finite_flags'] = stats['grad_finite_flags']
    return grads

  def update_state(self, report, applied):
    # The statistics and threshold the transform used (read once, before this step's update), or
    # read now from the same, not yet updated, variables when no transform ran this step.
    # `report['grad_norm']` is the norm before clipping, or (while the guard reports the
    # transformed norm) min(norm, threshold): a value at the threshold counts as clipped either
    # way; the small margin absorbs float rounding between the two computations.
    carried = [report.get(f'{self.name}/{k}') for k in ('mean', 'var', 'count', 'threshold')]
    if any(v is None for v in carried):
      statistics = self._statistics()
      carried = list(statistics) + [self._threshold(*statistics)]
    mean, var, count, threshold = carried
    norm = tf.cast(report['grad_norm'], tf.float32)
    # A norm of 0 (no gradient reached a weight: a ReLU output below 0 on every row) sets no
    # scale: accepted, it would make the threshold 0 and clip every later step to nothing.
    finite = tf.logical_and(applied, tf.logical_and(tf.math.is_finite(norm), norm > 0.0))
    accept = tf.logical_and(finite, norm < threshold * (1.0 - 1e-6))
    self.clipped_steps.assign_add(tf.cast(tf.logical_and(finite, tf.logical_not(accept)), tf.int64))
    # Plain running mean/variance during warm-up (weight 1/n), then an EMA (weight 1 - alpha).
    weight = tf.where(count < self.warmup_steps,
                      1.0 / tf.cast(count + 1, tf.float32), tf.constant(1.0 - self.alpha))
    # A norm not accepted (inf or NaN included) is computed with, then discarded by the selects.
    delta = norm - mean
    new_mean = mean + weight * delta
    new_var = (1.0 - weight) * (var + weight * tf.square(delta))
    self.mean.assign(tf.where(accept, new_mean, mean))
    self.var.assign(tf.where(accept, new_var, var))
    self.count.assign_add(tf.cast(accept, tf.int64))

  def summary(self):
    return {'adaptive_clip': {'clipped_steps': int(self.clipped_steps.numpy()),
                              'norm_mean': float(self.mean.numpy()),
                              'norm_std': math.sqrt(max(float(self.var.numpy()), 0.0)),
                              'threshold': float(self.threshold().numpy())}}


@gin.register(module='stable_train')
class ClipByValue(interfaces.Policy):
  """Clips every gradient element to [-clip_value, clip_value] (Keras's `clipvalue`)."""

  def __init__(self, *, clip_value: float = 1.0, name: str = 'clip_by_value'):
    """Initialises the policy.

    Args:
      clip_value: the largest magnitude allowed for any gradient element; positive and finite.
      name: policy name.
    """
    super().__init__(name=name)
    self.clip_value = _number('ClipByValue', 'clip_value', clip_value)

  def transform_gradients(self, grads, stats):
    c = self.clip_value
    grads = [_keep_non_finite(g, tf.clip_by_value(g, -c, c)) for g in grads]
    # The new norm costs a reduction; the finite flags are unchanged (non-finite is kept).
    norm = numerics.global_norm(grads)
    stats['grad_norm'] = norm
    stats['clipped_grad_norm'] = norm
    return grads


@gin.register(module='stable_train')
class ClipByNorm(interfaces.Policy):
  """Clips each gradient tensor separately to an L2 norm of at most `max_norm`
  (`tf.clip_by_norm` per variable, overflow-safe)."""

  def __init__(self, *, max_norm: float = 1.0, name: str = 'clip_by_norm'):
    """Initialises the policy.

    Args:
      max_norm: the largest L2 norm allowed for any one variable's gradient; positive, finite.
      name: policy name.
    """
    super().__init__(name=name)
    self.max_norm = _number('ClipByNorm', 'max_norm', max_norm)

  def transform_gradients(self, grads, stats):
    out, norms = [], []
    for g, finite in zip(grads, tf.unstack(stats['grad_finite_flags'], num=len(grads))):
      clipped, _, after = numerics.clip_by_global_norm([g], self.max_norm, all_finite=finite)
      out.append(_keep_non_finite(g, clipped[0]))
      norms.append(after)
    # The global norm of the output follows from the per-variable norms after clipping.
    norm = tf.where(stats['grads_finite'], numerics.global_norm([tf.stack(norms)]),
                    stats['grad_norm'])
    stats['grad_norm'] = norm
    stats['clipped_grad_norm'] = norm
    return out


def unitwise_axes(rank: int) -> Optional[Sequence[int]]:
  """Axes of a unit-wise norm: all but the last (output) axis; None (the whole tensor) for
  scalars and vectors. Dense kernels [in, out] give one norm per output unit, conv kernels
  [h, w, in, out] one per output channel (as in Brock et al. 2021)."""
  return None if rank <= 1 else list(range(rank - 1))


def _unitwise_norm(x: tf.Tensor) -> tf.Tensor:
  """Unit-wise L2 norm (keepdims), overflow-safe: divided by the unit's largest magnitude first."""
  axes = unitwise_axes(len(x.shape))
  m = tf.reduce_max(tf.abs(x), axis=axes, keepdims=True)
  safe = tf.where(m > 0, m, tf.ones_like(m))
  return safe * tf.sqrt(tf.reduce_sum(tf.square(x / safe), axis=axes, keepdims=True))


@gin.register(module='stable_train')
class AdaptiveGradClip(interfaces.Policy):
  """Adaptive gradient clipping (AGC, Brock et al. 2021): each unit's gradient G is clipped so
  that ‖G‖ / max(‖W‖, eps) <= clipping, W being the unit's weights.

  Units are output units (see `unitwise_axes`). Variables whose path contains one of `exclude`
  are left alone (the paper excludes the final classifier layer).
  """

  def __init__(self, *, clipping: float = 0.01, eps: float = 1e-3,
               exclude: Sequence[str] = (), name: str = 'adaptive_grad_clip'):
    """Initialises the policy.

    Args:
      clipping: λ, the largest ratio of gradient norm to weight norm per unit; positive.
      eps: floor of the weight norm, so zero-initialised weights (biases) can still move.
      exclude: substrings of variable paths not to clip, e.g. ('logits',) for the final layer.
      name: policy name.
    """
    super().__init__(name=name)
    self.clipping = _number('AdaptiveGradClip', 'clipping', clipping)
    self.eps = _number('AdaptiveGradClip', 'eps', eps)
    if isinstance(exclude, str) or not all(isinstance(s, str) and s for s in exclude):
      raise errors.ConfigError(
          f'AdaptiveGradClip: exclude={exclude!r} must be a list of non-empty path substrings.')
    self.exclude = tuple(exclude)
    self._variables = None

  def build(self, variables, variable_paths):
    self._variables = list(variables)

  def clips(self, path: str) -> bool:
    """Whether the variable at `path` is clipped (not excluded)."""
    return not any(s in path for s in self.exclude)

  def transform_gradients(self, grads, stats):
    if self._variables is None:
      raise errors.ConfigError('AdaptiveGradClip: the Trainer did not build it with its variables.')
    out = []
    for g, v, path in zip(grads, self._variables, stats['variable_paths']):
      if not self.clips(path):
        out.append(g)
        continue
      w = tf.cast(tf.convert_to_tensor(v), g.dtype)
      limit = tf.maximum(_unitwise_norm(w), self.eps) * self.clipping
      g_norm = _unitwise_norm(g)
      clipped = g * (limit / tf.maximum(g_norm, 1e-6))
      out.append(_keep_non_finite(g, tf.where(g_norm > limit, clipped, g)))
    norm = numerics.global_norm(out)
    stats['grad_norm'] = norm
    stats['clipped_grad_norm'] = norm
    return out
