"""OutlierSkip: skips the update of a step whose loss or gradient norm is a statistical outlier
against a rolling window of the run's own healthy steps, decided in the step itself."""

from typing import Sequence

import gin
import numpy as np
import tensorflow as tf

from stable_train.core import interfaces
from stable_train import errors

METRICS = ('loss', 'grad_norm')


@gin.register(module='stable_train')
class OutlierSkip(interfaces.Policy):
  """Skips a step whose loss or global gradient norm (before any clip) is an outlier (the
  OLMo-core / Levanter skip step: 6 standard deviations over 128 steps).

  A value is an outlier, once the window holds `warmup` values, when it is above all of: the
  window's mean + `num_stds` standard deviations, `min_ratio` × its mean, and `start_fraction` ×
  the metric's starting level (the mean of its first `warmup` values). The two floors keep the
  noise of a loss converging towards zero, whose standard deviation shrinks with it, from being
  skipped. Decided in the step, so every replica agrees and a skipped step changes nothing. Only
  applied steps with finite values that were not outliers enter the window (OLMo-core and
  Levanter record every step's values, so a stretch of bad batches widens their window until it
  lets the next ones through); a non-finite value is left to SkipNonFinite. The window lives in
  variables, so a resume or rollback restores it bit-exactly. More than `max_consecutive`
  outlier skips in a row escalate (trigger `outlier_streak`: a lasting change is no outlier):
  a Rollback takes it over, or the run aborts. Each loop with outlier skips writes an `outliers`
  event (steps, stream indices of the skipped batches, values, thresholds).
  """

  decides_on_clean_loops = False  # A clean loop skipped nothing.

  def __init__(self, *, window: int = 128, num_stds: float = 6.0, warmup: int = 32,
               min_ratio: float = 10.0, start_fraction: float = 0.5,
               metrics: Sequence[str] = METRICS, max_consecutive: int = 50,
               name: str = 'outlier_skip'):
    """Initialises the policy.

    Args:
      window: how many recent healthy values the statistics use (>= 2).
      num_stds: standard deviations above the window's mean that make an outlier (> 0).
      warmup: values the window needs before anything is skipped (2 <= warmup <= window).
      min_ratio: an outlier is also at least this multiple of the window mean (>= 1).
      start_fraction: ... and at least this fraction of the starting level (>= 0).
      metrics: which values are judged: 'loss' and/or 'grad_norm'.
      max_consecutive: outlier skips in a row tolerated; one more escalates (>= 1).
      name: policy name.
    """
    super().__init__(name=name)
    owner = 'OutlierSkip'
    self.window = errors.check_int(owner, 'window', window, minimum=2)
    self.num_stds = errors.check_number(owner, 'num_stds', num_stds, low=0.0, low_open=True)
    self.warmup = errors.check_int(owner, 'warmup', warmup, minimum=2, maximum=self.window)
    self.min_ratio = errors.check_number(owner, 'min_ratio', min_ratio, low=1.0)
    self.start_fraction = errors.check_number(owner, 'start_fraction', start_fraction, low=0.0)
    metrics = tuple(metrics) if not isinstance(metrics, str) else ()
    if not metrics or len(set(metrics)) != len(metrics) or not set(metrics) <= set(METRICS):
      raise errors.ConfigError(f"OutlierSkip: metrics={metrics!r} must be a subset of {METRICS}, "
                               "e.g. ('loss', 'grad_norm').")
    self.metrics = metrics
    self.max_consecutive = errors.check_int(owner, 'max_consecutive', max_consecutive, minimum=1)
    m = len(metrics)
    self.history = tf.Variable(tf.zeros([m, self.window]), trainable=False, name='history')
    self.start_level = tf.Variable(tf.zeros([m]), trainable=False, name='start_level')
    self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name='count')
    self.consecutive = tf.Variable(0, dtype=tf.int64, trainable=False, name='consecutive')
    self.peak_consecutive = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name='peak_consecutive')
    self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name='skipped_steps')

  # -- in-graph ---------------------------------------------------------------------------------
  def thresholds(self) -> tf.Tensor:
    """Each metric's outlier threshold for the next step (+inf during the warm-up)."""
    filled = tf.cast(tf.minimum(self.count, self.window), tf.float32)
    mask = tf.cast(tf.range(self.window, dtype=tf.float32) < filled, tf.float32)
    n = tf.maximum(filled, 1.0)
    history = tf.convert_to_tensor(self.history)
    mean = tf.reduce_sum(history * mask, axis=1) / n
    std = tf.sqrt(tf.reduce_sum(tf.square((history - mean[:, None]) * mask), axis=1) / n)
    threshold = tf.maximum(tf.maximum(mean + self.num_stds * std, self.min_ratio * mean),
                           self.start_fraction * self.start_level)
    return tf.where(self.count >= self.warmup, threshold, tf.fill([len(self.metrics)], np.inf))

  def _values(self, loss, grad_norm) -> tf.Tensor:
    named = {'loss': loss, 'grad_norm': grad_norm}
    return tf.stack([tf.cast(named[m], tf.float32) for m in self.metrics])

  def _outlier(self, values) -> tf.Tensor:
    # A non-finite value is never an outlier here: skipping it is SkipNonFinite's job.
    return tf.reduce_any(tf.logical_and(tf.math.is_finite(values), values > self.thresholds()))

  def allow_update(self, stats):
    return tf.logical_not(self._outlier(self._values(stats['loss'], stats['raw_grad_norm'])))

  def update_state(self, report, applied):
    # The same verdict as allow_update's: the variables have not changed since.
    values = self._values(report['loss'], report['grad_norm'])
    outlier = self._outlier(values)
    enter = tf.logical_and(tf.logical_and(applied, tf.logical_not(outlier)),
                           tf.reduce_all(tf.math.is_finite(values)))
    slot = tf.math.floormod(self.count, self.window)
    column = tf.one_hot(slot, self.window, dtype=tf.float32)[None, :]
    history = tf.convert_to_tensor(self.history)
    self.history.assign(tf.where(enter, history * (1.0 - column) + values[:, None] * column,
                                 history))
    count = self.count + tf.cast(enter, tf.int64)
    # The starting level: the mean of the first `warmup` values, fixed once the window has them.
    first = tf.reduce_mean(self.history[:, :self.warmup], axis=1)
    self.start_level.assign(tf.where(tf.logical_and(enter, tf.equal(count, self.warmup)), first,
                                     self.start_level))
    self.count.assign(count)
    skipped = tf.logical_and(outlier, tf.logical_not(applied))
    consecutive = tf.where(skipped, self.consecutive + 1,
                           tf.where(applied, tf.zeros_like(self.consecutive), self.consecutive))
    self.consecutive.assign(consecutive)
    self.peak_consecutive.assign(tf.maximum(self.peak_consecutive, consecutive))
    self.skipped_steps.assign_add(tf.cast(skipped, tf.int64))

  # -- host -------------------------------------------------------------------------------------
  def decide(self, reports, context):
    del context
    peak = int(self.peak_consecutive.numpy())
    streak = int(self.consecutive.numpy())
    self.peak_consecutive.assign(0 if peak > self.max_consecutive else streak)
    if peak > self.max_consecutive:
      return interfaces.Decision(
          action=interfaces.ESCALATE, trigger='outlier_streak', step=int(reports.step[-1]),
          reason=(f'{peak} outlier steps in a row skipped (limit {self.max_consecutive}): the '
                  'loss or gradient norm has moved to a new level'))
    # Outlier skips: finite values vetoed (no fault); the event records them.
    vetoed = np.flatnonzero(~reports.applied & reports.loss_finite & reports.grads_finite
                            & reports.inputs_finite & ~reports.overflow.astype(bool))
    if not vetoed.size:
      return None
    return interfaces.Decision(
        action=interfaces.ACT, policy=self.name, trigger='outliers',
        step=int(reports.step[vetoed[0]]),
        details={'steps': reports.step[vetoed].tolist(), 'loss': reports.loss[vetoed].tolist(),
                 'grad_norm': reports.grad_norm[vetoed].tolist(),
                 'thresholds': dict(zip(self.metrics, self.thresholds().numpy().tolist()))})

  def execute(self, decision, run):
    """Records the loop's outlier skips: the `outliers` event (the batches, quarantined)."""
    d = decision.details
    run.emit('outliers', decision.step, steps=d['steps'],
             batches=[run.batch_index(s) for s in d['steps']], loss=d['loss'],
             grad_norm=d['grad_norm'], thresholds=d['thresholds'])
    return None

  def is_healthy(self) -> bool:
    return int(self.consecutive.numpy()) == 0

  def summary(self):
    return {'outlier_skip': {'skipped_steps': int(self.skipped_steps.numpy()),
                             'thresholds': dict(zip(self.metrics,
                                                    self.thresholds().numpy().tolist()))}}
