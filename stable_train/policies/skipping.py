"""SkipNonFinite: the skip of a non-finite step, its limits (a streak, a share of a window) and its
last word on a run that still skips at its end."""

from typing import List, Optional

import gin
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import state as state_lib
from stable_train import errors


@gin.register(module='stable_train')
class SkipNonFinite(interfaces.Policy):
  """Skips the update when the loss or any gradient is non-finite; escalates after too many in a row.

  A skipped step leaves every model and optimizer variable (slots, iteration count) bit-identical.
  Every skip counts into the streak, a batch that failed an input check too (data that fails on
  every batch aborts the run). Health is the run's fault mark, not this policy's: a non-finite
  step keeps the checkpoints of the next `healthy_window` steps from being marked good; a skipped
  bad batch does not (the state is as it was).
  """

  # On a clean loop the streak is 0 and `peak_consecutive` holds at most a streak already found
  # within the limit (`decide` resets it only when it looks): no escalation is possible, and a
  # later streak is compared by the max, so the stale value can never trigger one.
  decides_on_clean_loops = False

  def __init__(self, *, max_consecutive: int = 10, max_share: Optional[float] = 0.5,
               share_window: int = 50, max_share_at_end: Optional[float] = 0.2,
               name: str = 'skip_non_finite'):
    """Initialises the policy.

    Args:
      max_consecutive: how many consecutive skips are tolerated; one more escalates (the run aborts,
        or a recovery policy such as Rollback takes over). A non-negative integer.
      max_share: the share of the last `share_window` steps that may be skipped for a fault of
        the model (a batch that failed an input check is the data's, not counted); more escalates
        like a streak: a run that skips half its batches, scattered, does not train on them, and
        must not end 'completed'. None: no limit. In (0, 1].
      share_window: the steps the share is taken over (judged once that many steps have run).
      max_share_at_end: the share of the last `share_window` steps that may have been skipped
        for a model fault when the run reaches its end; more ends it 'aborted' instead of
        'completed' (trigger `skip_share_at_end`): its model still fails on that share of the
        batches, so it has not trained on them. None: no end check. In (0, 1].
      name: policy name.
    """
    super().__init__(name=name)
    self.max_consecutive = errors.check_int('SkipNonFinite', 'max_consecutive', max_consecutive)
    self.max_share = errors.check_number('SkipNonFinite', 'max_share', max_share, low=0.0,
                                         high=1.0, low_open=True, allow_none=True)
    self.share_window = errors.check_int('SkipNonFinite', 'share_window', share_window, minimum=1)
    self.max_share_at_end = errors.check_number(
        'SkipNonFinite', 'max_share_at_end', max_share_at_end, low=0.0, high=1.0, low_open=True,
        allow_none=True)
    # Host side: the recent model-fault skips' steps, and the tensor the last one named.
    self._fault_steps: List[int] = []
    self._last_tensor = ''
    self._last_step = 0  # The last step observed: a loop that starts at or before it followed a
    # restore (a rollback), whose later steps no longer happened.
    self.total_skips = tf.Variable(0, dtype=tf.int64, trainable=False, name='total_skips')
    self.consecutive_skips = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name='consecutive_skips')
    # The longest run of consecutive skips since the host last looked: with several steps per
    # loop a run can exceed the limit and end inside one loop.
    self.peak_consecutive = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name='peak_consecutive')

  def allow_update(self, stats):
    return tf.logical_and(stats['loss_finite'], stats['grads_finite'])

  def observed_variables(self):
    return [self.total_skips, self.consecutive_skips, self.peak_consecutive]

  def observe(self, reports) -> bool:
    """Counts the loop's skips on the host (a `LoopObserver`: nothing in the step). Only a
    faulty step counts: an fp16 overflow skip is the loss scale's (DynamicLossScale), and a veto
    on finite values (OutlierSkip) is that policy's; neither ends a streak either."""
    if reports.num_steps:
      first = int(reports.step[0])
      if first <= self._last_step:  # Restored to step `first - 1`: later skips did not happen.
        self._fault_steps = [k for k in self._fault_steps if k < first]
      self._last_step = int(reports.step[-1])
    if reports.clean():  # Every step applied: no skip, and any streak is over.
      if state_lib.host_value(self.consecutive_skips, reports):
        state_lib.host_assign(self.consecutive_skips, 0)
      return False
    finite = reports.inputs_finite & reports.loss_finite & reports.grads_finite
    skipped = ~reports.applied & ~finite & ~reports.overflow  # `step_faulty`, on the host.
    consecutive, peak = (int(state_lib.host_value(v, reports))
                         for v in (self.consecutive_skips, self.peak_consecutive))
    for applied, counts in zip(reports.applied.tolist(), skipped.tolist()):
      consecutive = 0 if applied else consecutive + counts
      peak = max(peak, consecutive)
    total = int(state_lib.host_value(self.total_skips, reports)) + int(skipped.sum())
    for v, value in ((self.total_skips, total), (self.consecutive_skips, consecutive),
                     (self.peak_consecutive, peak)):
      state_lib.host_assign(v, value)
    return False

  def decide(self, reports, context):
    consecutive = int(self.peak_consecutive.numpy())
    # The streak carries into the next loop (it may go on there), unless it is escalated now:
    # then it has been reported, and a later fit must not report it again.
    self.peak_consecutive.assign(
        0 if consecutive > self.max_consecutive else int(self.consecutive_skips.numpy()))
    if consecutive > self.max_consecutive:
      last = reports.num_steps - 1
      skipped = [i for i in range(reports.num_steps) if not reports.applied[i]] or [last]
      # A streak that ends on batches that failed an input check is the data's, not NaN.
      what = 'skipped steps' if reports.fault(skipped[-1]) == 'input' else 'non-finite steps'
      return interfaces.Decision(
          action=interfaces.ESCALATE, trigger='consecutive_skips',
          step=int(reports.step[last]),
          reason=(f'{consecutive} consecutive {what} (limit {self.max_consecutive}), last '
                  f'offending tensor: {reports.offending_tensor(skipped[-1])}'))
    return self._share_decision(reports)

  def _share_decision(self, reports) -> Optional[interfaces.Decision]:
    """ESCALATE when the model-fault skips of the last `share_window` steps exceed `max_share`
    of them. Only a loop with a fault is decided on, and only its faults are added: a clean loop
    adds nothing. The steps are kept on the host (a resumed run counts afresh; a rollback's
    earlier step drops the later ones)."""
    last = reports.num_steps - 1
    step = int(reports.step[last])
    bad = [i for i in range(reports.num_steps)
           if not reports.applied[i] and reports.fault(i) in ('loss', 'gradient')]
    if bad:
      self._last_tensor = reports.offending_tensor(bad[-1])
    count = self._count(step, [int(reports.step[i]) for i in bad])
    if (self.max_share is None or step < self.share_window
        or count <= self.max_share * self.share_window):
      return None
    self._fault_steps = []
    return interfaces.Decision(
        action=interfaces.ESCALATE, trigger='skip_share', step=step,
        reason=(f'{count} of the last {self.share_window} steps were non-finite and skipped '
                f'(limit {self.max_share:.0%}): the run does not train on those batches; last '
                f'offending tensor: {self._last_tensor or reports.offending_tensor(last)}'))

  def _count(self, step: int, faulty=()) -> int:
    """The model-fault skips among the `share_window` steps up to `step`, `faulty` added."""
    window = step - self.share_window
    self._fault_steps = [k for k in self._fault_steps + list(faulty) if window < k <= step]
    return len(self._fault_steps)

  def check_at_end(self, run) -> Optional[interfaces.Decision]:
    """At the end of a run about to end 'completed' (`EndCheck`): ABORT when more than
    `max_share_at_end` of its last `share_window` steps were skipped for a model fault. Those
    skips were scattered (a streak or a larger share escalates earlier), but the model the run
    ends with still fails on that share of its batches: a run that cannot train on them is not
    'completed'. Judged from the global step `share_window` on, on the skips this process saw (a
    resumed run counts only those since it resumed; a rollback drops those after its step)."""
    if self.max_share_at_end is None or run.step < self.share_window:
      return None
    count = self._count(run.step)
    if count <= self.max_share_at_end * self.share_window:
      return None
    return interfaces.Decision(
        action=interfaces.ABORT, trigger='skip_share_at_end', step=run.step,
        reason=(f'{count} of the last {self.share_window} steps were non-finite and skipped at '
                f'the end of the run (limit {self.max_share_at_end:.0%} at the end): the model '
                'still fails on those batches and has not trained on them; last offending '
                f'tensor: {self._last_tensor}'))
