"""The in-graph loop: `n` guarded steps over an iterator in one `tf.function` call, their reports
packed into one matrix (one transfer to the host per loop)."""

import functools
from typing import Callable, Dict, List, Optional, Sequence

import tensorflow as tf

from stable_train import compat
from stable_train.core import interfaces
from stable_train.core import guard as guard_lib
from stable_train.core import numerics
from stable_train.core import reports as reports_lib
from stable_train import errors


class TrainLoop:
  """Runs a `step.GuardedStep` `n` times per call; the policies' `end_step` hooks run around it.

  Under a strategy the replica computation is traced inline in the loop: a nested tf.function
  around code that all-reduces breaks MirroredStrategy's merge_call (TF 2.21), which is why
  jit_compile is refused there (`distribute.check_jit`). On one device the step is one function,
  compiled with XLA when asked; it returns its report packed into one float64 row, inside the XLA
  cluster where it fuses, and the report dict too only when a policy's `end_step` reads it.
  """

  def __init__(self, step, *, policies: Sequence[interfaces.Policy], report_dtypes,
               all_variables: Callable[[], List[tf.Variable]], global_step: tf.Variable,
               jit_compile: bool = False):
    """Wraps the step and the loop in `tf.function`s (traced on the first `run`).

    Args:
      step: the `step.GuardedStep`.
      policies: the policies (their `end_step`; a `Recovery` reads `variables_finite`).
      report_dtypes: the report's field dtypes (`reports.report_dtypes`).
      all_variables: () -> every model and optimizer float variable (checked at the loop's end
        when a policy reads `StepReports.variables_finite`).
      global_step: the run's global step (for the error of a raising check).
      jit_compile: compile the step with XLA (single device only).
    """
    self.step = step
    self._policies = list(policies)
    self.report_dtypes = report_dtypes
    self._all_variables = all_variables
    self._global_step = global_step
    self.needs_report = any(p.uses_end_step for p in self._policies)
    self.checks_variables = any(isinstance(p, interfaces.Recovery) for p in self._policies)
    # The variables the host observers read each loop: read here, in the loop's graph.
    self.observed_variables = [v for p in self._policies if isinstance(p, interfaces.LoopObserver)
                               for v in getattr(p, 'observed_variables', tuple)()]
    self.step_fn = (self.packed_step if step.distributed
                    else tf.function(self.packed_step, jit_compile=jit_compile or None))
    self.loop_fn = tf.function(self.loop)
    # (iterator, the loop's concrete function for it, {steps: bound call}).
    self._concrete = (None, None, None)

  def run(self, iterator, n: int) -> Dict[str, tf.Tensor]:
    """Runs one traced loop of `n` steps; turns an in-graph check_numerics failure into a
    `NumericsError` naming the tensor."""
    try:
      return self._loop_for(iterator, n)()
    except tf.errors.InvalidArgumentError as e:
      error = numerics_error(e, int(self._global_step.numpy()) + 1)
      if error is None:
        raise
      raise error from None

  def _loop_for(self, iterator, n: int):
    """A no-argument callable that runs the loop's concrete function for (`iterator`, `n`).

    Looked up once per iterator: calling the concrete function skips `tf.function`'s per-call
    signature matching, and its flat call (`compat.flat_caller`, bound once per (iterator, n))
    skips the structured binding of every call. A new iterator (a new fit, a rebuilt input) is
    looked up again, so a pipeline with another element structure gets its own trace.
    """
    cached_iterator, concrete, calls = self._concrete
    if cached_iterator is not iterator:
      concrete = self.loop_fn.get_concrete_function(iterator, tf.constant(1, tf.int64))
      calls = {}
      self._concrete = (iterator, concrete, calls)
    call = calls.get(n)
    if call is None:
      count = tf.constant(n, tf.int64)
      call = (compat.flat_caller(concrete, (iterator, count))
              or functools.partial(concrete, iterator, count))
      calls[n] = call
    return call

  # -- traced -----------------------------------------------------------------------------------
  def packed_step(self, batch):
    """The step, its report packed into one row: (row, report dict or None). Traced."""
    report = self.step(batch)
    return (reports_lib.pack_report(report, self.report_dtypes),
            report if self.needs_report else None)

  def loop(self, iterator, num_steps):
    """Runs up to `num_steps` steps in one graph (stops early when the data ends). Traced.

    Returns a dict: 'reports', a float64 [steps, fields] matrix, one packed row per step
    (`reports.unpack_reports` turns it back into typed columns); 'data_ended'; 'skipped_steps'
    (the counter after the loop); 'variables_finite' when a policy reads it; and 'observed',
    the values of `observed_variables`, when a host observer names any.
    """
    rows = tf.TensorArray(tf.float64, size=0, dynamic_size=True,
                          element_shape=[len(self.report_dtypes)])
    data_ended = tf.constant(False)
    for i in tf.range(num_steps):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        data_ended = tf.constant(True)
        break
      batch = optional.get_value()
      row, report = self.step_fn(batch)
      rows = rows.write(tf.cast(i, tf.int32), row)
      if report is not None:
        stop = self._end_step(batch, report)
        if stop is not None:  # Python check at trace time: no policy asks, no extra graph.
          if stop:
            break
    outputs = {'reports': rows.stack(), 'data_ended': data_ended,
               'skipped_steps': tf.identity(self.step.parts.counters.skipped_steps)}
    if self.checks_variables:
      outputs['variables_finite'] = tf.reduce_all(numerics.finite_flags(self._all_variables()))
    if self.observed_variables:
      outputs['observed'] = [tf.identity(v) for v in self.observed_variables]
    return outputs

  def _end_step(self, batch, report) -> Optional[tf.Tensor]:
    """Calls every policy's `end_step` hook; returns 'end the loop now' or None. Traced."""
    local = tf.nest.map_structure(self._local_value, batch)
    stop = None
    for p in self._policies:
      with guard_lib.scope(p):
        verdict = p.end_step(local, report)
      if verdict is not None:
        stop = verdict if stop is None else tf.logical_or(stop, verdict)
    return stop

  def _local_value(self, value):
    """One tensor from a possibly per-replica value (replica parts concatenated on axis 0)."""
    parts = self.step.parts.strategy.experimental_local_results(value)
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)


def numerics_error(error: tf.errors.InvalidArgumentError,
                   step: int) -> Optional[errors.NumericsError]:
  """The `NumericsError` naming the tensor for an in-graph check_numerics failure at `step`
  (CheckNumerics(mode='raise')), or None for another InvalidArgumentError."""
  # The op's message ("non-finite gradient of <path> : Tensor had NaN values") sits among the
  # graph's traceback lines.
  lines = [l for l in (error.message or '').splitlines() if 'non-finite' in l]
  if not lines:
    return None
  # Under a strategy the line may begin with the error's index and code ("(1) INVALID_ARGUMENT:").
  what = lines[-1][lines[-1].index('non-finite'):].strip()
  return errors.NumericsError(
      f"non-finite value at step {step}: {what}; CheckNumerics(mode='raise') "
      "stops here; use mode='flag' with SkipNonFinite to skip it.")
