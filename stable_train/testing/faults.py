"""Fault injection, a testing tool for rehearsing failure: bad data, bad loss or gradients, process
and disk faults.

`Faults` is not a policy: the run wires it in through seams, and it injects nothing and adds no op
to the step or the input pipeline for a fault kind that is not configured. Pass it as
`Trainer(faults=Faults(...))` (gin: `Trainer.faults = @Faults()`). Its seams: `wrap_dataset` (a
dataset stage), `transform_loss` (traced into the step's loss, before the policies'; a no-op until
`bind`, so a replay of a record never injects), `before_checkpoint_write` (the checkpoint keeper's
write seam) and `after_loop` (host faults, at the end of each loop). Kinds:

  - data (a dataset stage keyed on the element's index in the stream, like `poison_batches`):
    NaN/Inf in the first element of the features or the labels of given batches, or of each batch
    with a probability (seeded, stateless: the same batches on every run);
  - loss and gradient (in the step, keyed on the 1-based global step being computed): a NaN/Inf
    loss (its gradients follow), a finite loss spike ×K, a NaN gradient of one named variable with
    a finite loss;
  - process and disk (on the host, at the end of the loop that reaches the step): a hard exit
    (as after kill -9: nothing flushed), SIGTERM to itself, the newest committed checkpoint corrupted
    (data file cut in half) or deleted, `manifest.json` corrupted or deleted, and a full disk (the
    next checkpoint write fails with ENOSPC).

Every injection is logged as a `fault_injected` event (data faults when their step's reports
arrive). Checkpoints hold the data position, not the iterator, so a run resumes with or without
the data faults; process and disk faults change nothing that is saved (rerun without the process
fault to continue).
"""

import errno
import logging
import os
import signal
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gin
import tensorflow as tf

from stable_train import compat
from stable_train import errors
from stable_train.runtime import seams
from stable_train.testing import data_faults

log = logging.getLogger('stable_train')

_HOST_FAULTS = ('corrupt_checkpoint', 'delete_checkpoint', 'corrupt_manifest', 'delete_manifest',
                'disk_full', 'sigterm', 'exit')  # Order of injection when several share a step.


class _Bound:
  """What the in-graph faults need from the run, set by `Faults.bind`."""

  def __init__(self, global_step: tf.Variable, variables, variable_index: Optional[int]):
    self.global_step = global_step
    self.variables = list(variables)
    self.variable_index = variable_index
    # The highest step this process has run: a step fault fires once per process, so the
    # steps a rollback repeats do not fault again (a restarted process replays its plan).
    with tf.init_scope():
      self.ran_until = tf.Variable(0, dtype=tf.int64, trainable=False, name='faults_ran_until')


@gin.register(module='stable_train')
class Faults(seams.RunSeams):
  """Injects configured faults, each logged as a `fault_injected` event. Seeded; off by default.

  Data faults name 0-based batch indices in the dataset's stream (`poison_batches` numbering: a
  rollback's data skip moves past them). Every other fault names a 1-based global step (the
  `step` of events and reports); a host fault fires at the end of the loop that reaches its step.

  Args (keyword-only; the gin `Faults.*` bindings):
    seed: seed of the probabilistic data faults.
    feature_nan_batches, feature_inf_batches: batches whose first feature becomes NaN / +Inf.
    label_nan_batches, label_inf_batches: batches whose first (float) label becomes NaN / +Inf.
    feature_nan_probability: each batch's first feature becomes NaN with this probability.
    loss_nan_steps, loss_inf_steps: steps whose loss (and so its gradients) is NaN / Inf.
    loss_spike_steps: steps whose loss (and gradients) are multiplied by `loss_spike_factor`.
    loss_spike_factor: a finite factor > 1.
    gradient_nan_steps: steps whose gradient of `gradient_variable` is NaN (the loss finite).
    gradient_variable: the variable's path as events name it (e.g. 'mlp/dense_0/kernel').
    exit_step: the process ends at once with `exit_code` at this step (nothing flushed).
    exit_code: the exit status of that hard exit.
    sigterm_step: the process sends itself SIGTERM at this step.
    corrupt_checkpoint_step, delete_checkpoint_step: the newest committed checkpoint's data file
      is cut in half / its files are deleted at the end of the loop that reaches this step,
      before that loop's own checkpoint (if one is due) is written: the checkpoint hit is the
      newest one written before the step.
    corrupt_manifest_step, delete_manifest_step: `checkpoints/manifest.json` is cut in half /
      deleted at this step.
    disk_full_step: from this step on, the next checkpoint write fails with ENOSPC.
    name: the plan's name.
  """

  def __init__(self, *, seed: int = 0,
               feature_nan_batches: Sequence[int] = (), feature_inf_batches: Sequence[int] = (),
               label_nan_batches: Sequence[int] = (), label_inf_batches: Sequence[int] = (),
               feature_nan_probability: float = 0.0,
               loss_nan_steps: Sequence[int] = (), loss_inf_steps: Sequence[int] = (),
               loss_spike_steps: Sequence[int] = (), loss_spike_factor: float = 1e4,
               gradient_nan_steps: Sequence[int] = (), gradient_variable: str = '',
               exit_step: Optional[int] = None, exit_code: int = 137,
               sigterm_step: Optional[int] = None,
               corrupt_checkpoint_step: Optional[int] = None,
               delete_checkpoint_step: Optional[int] = None,
               corrupt_manifest_step: Optional[int] = None,
               delete_manifest_step: Optional[int] = None,
               disk_full_step: Optional[int] = None,
               name: str = 'faults'):
    self.name = name
    self.seed = errors.check_int('Faults', 'seed', seed)
    self.data = data_faults.DataFaults(
        seed=self.seed, feature_nan_batches=feature_nan_batches,
        feature_inf_batches=feature_inf_batches, label_nan_batches=label_nan_batches,
        label_inf_batches=label_inf_batches, feature_nan_probability=feature_nan_probability)
    self.loss_steps = {
        'loss_nan': data_faults.steps('Faults', 'loss_nan_steps', loss_nan_steps, 1),
        'loss_inf': data_faults.steps('Faults', 'loss_inf_steps', loss_inf_steps, 1),
        'loss_spike': data_faults.steps('Faults', 'loss_spike_steps', loss_spike_steps, 1),
    }
    factor = _spike_factor(loss_spike_factor)
    self.loss_spike_factor = factor
    self.gradient_nan_steps = data_faults.steps('Faults', 'gradient_nan_steps', gradient_nan_steps, 1)
    if self.gradient_nan_steps and not gradient_variable:
      raise errors.ConfigError(
          "Faults: gradient_nan_steps needs gradient_variable, e.g. 'mlp/dense_0/kernel'.")
    self.gradient_variable = str(gradient_variable)
    self.exit_code = errors.check_int('Faults', 'exit_code', exit_code, minimum=0, maximum=255)
    self.host_steps = {}
    for kind, value in (('exit', exit_step), ('sigterm', sigterm_step),
                        ('corrupt_checkpoint', corrupt_checkpoint_step),
                        ('delete_checkpoint', delete_checkpoint_step),
                        ('corrupt_manifest', corrupt_manifest_step),
                        ('delete_manifest', delete_manifest_step),
                        ('disk_full', disk_full_step)):
      if value is not None:
        self.host_steps[kind] = errors.check_int('Faults', f'{kind}_step', value, minimum=1)
    self._fired = set()  # Host faults fire once per process.
    self._bound: Optional[_Bound] = None
    self._disk_full = False  # The next checkpoint write fails with ENOSPC.

  # -- configuration queries ----------------------------------------------------------------------
  @property
  def has_data_faults(self) -> bool:
    return self.data.active

  @property
  def _has_step_faults(self) -> bool:
    return any(self.loss_steps.values()) or bool(self.gradient_nan_steps)

  def bind(self, *, global_step: tf.Variable, variables, variable_paths) -> None:
    """Called by the run once its variables exist: resolves `gradient_variable`.

    Args:
      global_step: the run's global step (the step faults are keyed on it).
      variables: the trainable variables, in layer order.
      variable_paths: their names.
    """
    index = None
    if self.gradient_nan_steps:
      paths = list(variable_paths)
      if self.gradient_variable not in paths:
        raise errors.ConfigError(
            f'Faults: gradient_variable={self.gradient_variable!r} is not a trainable variable; '
            f'choose one of {paths}.')
      index = paths.index(self.gradient_variable)
    if self._bound is None or self._bound.global_step is not global_step:
      self._bound = _Bound(global_step, variables, index)
    else:
      self._bound.variables, self._bound.variable_index = list(variables), index

  # -- data faults --------------------------------------------------------------------------------
  def data_faults(self, index: int) -> List[Dict[str, Any]]:
    """The data faults injected into batch `index` (host side, the same decision as the stage)."""
    return self.data.hits(index)

  def wrap_dataset(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The dataset with the configured data faults; the dataset itself when there are none."""
    return self.data.wrap(dataset)

  # -- loss and gradient faults (traced) ---------------------------------------------------------
  def transform_loss(self, loss):
    """The loss with the step faults due at the step being computed. Traced."""
    if not self._has_step_faults or self._bound is None:
      return loss  # No op added (unbound: a replay re-runs a step, it never injects).
    step = self._bound.global_step + 1  # The step being computed (reports' numbering).
    fresh = step > self._bound.ran_until  # Not a step a rollback repeats.

    def hit(steps):
      return tf.logical_and(fresh, tf.reduce_any(tf.equal(tf.constant(steps, tf.int64), step)))

    factor = tf.constant(1.0, loss.dtype)
    for kind, value in (('loss_nan', float('nan')), ('loss_inf', float('inf')),
                        ('loss_spike', self.loss_spike_factor)):
      if self.loss_steps[kind]:
        factor = tf.where(hit(self.loss_steps[kind]), tf.constant(value, loss.dtype), factor)
    loss = loss * factor  # A non-finite factor makes the gradients non-finite too, as in life.
    if self.gradient_nan_steps:
      poison = tf.where(hit(self.gradient_nan_steps), tf.constant(float('nan'), loss.dtype),
                        tf.constant(0.0, loss.dtype))

      @tf.custom_gradient
      def tap(value):
        # Forward: 0 (the loss stays finite); backward: NaN into this one variable's gradient.
        return tf.zeros([], loss.dtype), lambda dy: dy * poison * tf.ones_like(value)

      variable = self._bound.variables[self._bound.variable_index]
      loss = loss + tap(tf.cast(tf.convert_to_tensor(variable), loss.dtype))
    return loss

  # -- seams on the host --------------------------------------------------------------------------
  def before_checkpoint_write(self, prefix: str) -> None:
    """The checkpoint keeper's write seam: fails the one write after `disk_full` with ENOSPC."""
    if self._disk_full:
      self._disk_full = False  # One failed write: the fault, not a broken disk for ever.
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), prefix)

  def after_loop(self, reports, run) -> None:
    """At the end of each loop: the `fault_injected` records of the faults the loop injected,
    then the host faults due (in `_HOST_FAULTS` order), through the run handle."""
    if reports.num_steps == 0:
      return
    steps = [int(s) for s in reports.step]
    ran_until = int(self._bound.ran_until.numpy()) if self._bound is not None else 0
    if self._bound is not None:  # The steps this process has run.
      self._bound.ran_until.assign(max(ran_until, steps[-1]))
    if self.has_data_faults:
      # The batch of step s: the loop read its batches in order up to the current position.
      position = run.data_position
      for i, s in enumerate(steps):
        for fault in self.data_faults(position - (len(steps) - i)):
          run.emit('fault_injected', s, **fault)
    step_faults = dict(self.loss_steps, gradient_nan=self.gradient_nan_steps)
    for s in steps:
      for kind, at in step_faults.items():
        if s in at and s > ran_until:
          extra = ({'variable': self.gradient_variable} if kind == 'gradient_nan' else
                   {'factor': self.loss_spike_factor} if kind == 'loss_spike' else {})
          run.emit('fault_injected', s, kind=kind, **extra)
    for kind in _HOST_FAULTS:
      at = self.host_steps.get(kind)
      # Only a loop that reaches the step fires it (a run resumed past it does not).
      if at is not None and kind not in self._fired and steps[0] <= at <= steps[-1]:
        self._fired.add(kind)
        self._inject(kind, steps[-1], run)

  def _inject(self, kind: str, step: int, run) -> None:
    fields: Dict[str, Any] = {'kind': kind}
    if kind in ('corrupt_checkpoint', 'delete_checkpoint'):
      committed = run.checkpoints()
      if not committed:
        fields['note'] = 'no committed checkpoint yet'
      else:
        newest = committed[-1]
        prefix = os.path.join(run.checkpoint_dir, newest.path)
        fields['checkpoint'] = newest.path
        for name in tf.io.gfile.glob(prefix + '.*'):
          if kind == 'delete_checkpoint':
            os.remove(name)
          elif '.data-' in name:
            os.truncate(name, os.path.getsize(name) // 2)
    elif kind in ('corrupt_manifest', 'delete_manifest'):
      path = os.path.join(run.checkpoint_dir, 'manifest.json')
      fields['path'] = path
      if kind == 'delete_manifest':
        os.remove(path)
      else:
        os.truncate(path, os.path.getsize(path) // 2)
    elif kind == 'disk_full':
      self._disk_full = True
    run.emit('fault_injected', step, **fields)
    log.warning('step %d: fault injected: %s', step, kind)
    if kind == 'sigterm':
      os.kill(os.getpid(), signal.SIGTERM)
    elif kind == 'exit':
      logging.shutdown()
      compat.hard_exit(self.exit_code)


def _spike_factor(value) -> float:
  return errors.check_number('Faults', 'loss_spike_factor', value, low=1.0, low_open=True,
                             what='a finite number > 1')
