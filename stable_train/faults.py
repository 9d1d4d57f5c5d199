"""Fault injection for rehearsing failure: bad data, bad loss or gradients, process and disk faults.

`Faults` is a policy that injects nothing unless configured, and adds no op to the step or the
input pipeline for a fault kind that is not configured. Pass it as `Trainer(faults=Faults(...))`
(gin: `Trainer.faults = @Faults()`); the Trainer puts it before its other policies. Kinds:

  - data (a dataset stage keyed on the element's index in the stream, like `poison_batches`):
    NaN/Inf in the first element of the features or the labels of given batches, or of each batch
    with a probability (seeded, stateless: the same batches on every run);
  - loss and gradient (in the step, keyed on the 1-based global step being computed): a NaN/Inf
    loss (its gradients follow), a finite loss spike ×K, a NaN gradient of one named variable with
    a finite loss;
  - process and disk (on the host, at the end of the loop that reaches the step): a hard exit
    (`os._exit`, as after kill -9), SIGTERM to itself, the newest committed checkpoint corrupted
    (data file cut in half) or deleted, `manifest.json` corrupted or deleted, and a full disk (the
    next checkpoint write fails with ENOSPC).

Every injection is logged as a `fault_injected` event (data faults when their step's reports
arrive). A data stage changes the input pipeline, so a checkpointed iterator restores only into a
run with the same data faults configured; process and disk faults change nothing that is saved
(rerun without the process fault to continue).
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
from stable_train import interfaces

log = logging.getLogger('stable_train')

_HOST_FAULTS = ('corrupt_checkpoint', 'delete_checkpoint', 'corrupt_manifest', 'delete_manifest',
                'disk_full', 'sigterm', 'exit')  # Order of injection when several share a step.


def _steps(owner: str, name: str, values, minimum: int) -> Tuple[int, ...]:
  if isinstance(values, (str, bytes)) or not hasattr(values, '__iter__'):
    raise errors.ConfigError(f'{owner}: {name}={values!r} must be a list of integers, e.g. [5, 7].')
  # A tuple: a tf.Module would turn a list into tracked, checkpointed state.
  return tuple(sorted(errors.check_int(owner, name, v, minimum=minimum) for v in values))


def _probability(name: str, value) -> float:
  return errors.check_number('Faults', name, value, low=0.0, high=1.0,
                             what='a probability in [0, 1]')


class _Bound:
  """What the in-graph faults need from the Trainer, kept out of the policy's checkpoint graph."""

  def __init__(self, trainer, variable_index: Optional[int]):
    self.global_step = trainer.global_step
    self.variables = trainer._trainable_variables  # pylint: disable=protected-access
    self.variable_index = variable_index
    # The highest step this process has run: a step fault fires once per process, so the
    # steps a rollback repeats do not fault again (a restarted process replays its plan).
    with tf.init_scope():
      self.ran_until = tf.Variable(0, dtype=tf.int64, trainable=False, name='faults_ran_until')


@gin.register(module='stable_train')
class Faults(interfaces.Policy):
  """Injects configured faults, each logged as a `fault_injected` event. Seeded; off by default.

  Data faults name 0-based batch indices in the dataset's stream (`poison_batches` numbering: a
  rollback's data skip moves past them). Every other fault names a 1-based global step (the
  `step` of events and reports); a host fault fires at the end of the loop that reaches its step.
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
    """Initialises the fault plan.

    Args:
      seed: seed of the probabilistic data faults.
      feature_nan_batches, feature_inf_batches: batches whose first feature becomes NaN / +Inf.
      label_nan_batches, label_inf_batches: batches whose first (float) label becomes NaN / +Inf.
      feature_nan_probability: each batch's first feature becomes NaN with this probability.
      loss_nan_steps, loss_inf_steps: steps whose loss (and so its gradients) is NaN / Inf.
      loss_spike_steps: steps whose loss (and gradients) are multiplied by `loss_spike_factor`.
      loss_spike_factor: a finite factor > 1.
      gradient_nan_steps: steps whose gradient of `gradient_variable` is NaN (the loss finite).
      gradient_variable: the variable's path as events name it (e.g. 'mlp/dense_0/kernel').
      exit_step: the process ends with `os._exit(exit_code)` at this step (nothing flushed).
      exit_code: the exit status of that hard exit.
      sigterm_step: the process sends itself SIGTERM at this step.
      corrupt_checkpoint_step, delete_checkpoint_step: the newest committed checkpoint's data file
        is cut in half / its files are deleted at the end of the loop that reaches this step,
        before that loop's own checkpoint (if one is due) is written: the checkpoint hit is the
        newest one written before the step.
      corrupt_manifest_step, delete_manifest_step: `checkpoints/manifest.json` is cut in half /
        deleted at this step.
      disk_full_step: from this step on, the next checkpoint write fails with ENOSPC.
      name: policy name.
    """
    super().__init__(name=name)
    self.seed = errors.check_int('Faults', 'seed', seed)
    # Keyed by the event's kind: '<feature|label>_<nan|inf>'.
    self.data_steps = {
        'feature_nan': _steps('Faults', 'feature_nan_batches', feature_nan_batches, 0),
        'feature_inf': _steps('Faults', 'feature_inf_batches', feature_inf_batches, 0),
        'label_nan': _steps('Faults', 'label_nan_batches', label_nan_batches, 0),
        'label_inf': _steps('Faults', 'label_inf_batches', label_inf_batches, 0),
    }
    self.feature_nan_probability = _probability('feature_nan_probability',
                                                feature_nan_probability)
    self.loss_steps = {
        'loss_nan': _steps('Faults', 'loss_nan_steps', loss_nan_steps, 1),
        'loss_inf': _steps('Faults', 'loss_inf_steps', loss_inf_steps, 1),
        'loss_spike': _steps('Faults', 'loss_spike_steps', loss_spike_steps, 1),
    }
    factor = _spike_factor(loss_spike_factor)
    self.loss_spike_factor = factor
    self.gradient_nan_steps = _steps('Faults', 'gradient_nan_steps', gradient_nan_steps, 1)
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

  # -- configuration queries ----------------------------------------------------------------------
  @property
  def has_data_faults(self) -> bool:
    return any(self.data_steps.values()) or self.feature_nan_probability > 0

  @property
  def _has_step_faults(self) -> bool:
    return any(self.loss_steps.values()) or bool(self.gradient_nan_steps)

  def bind(self, trainer) -> None:
    """Called by the Trainer once its variables exist: resolves `gradient_variable`."""
    index = None
    if self.gradient_nan_steps:
      paths = list(trainer._variable_paths)  # pylint: disable=protected-access
      if self.gradient_variable not in paths:
        raise errors.ConfigError(
            f'Faults: gradient_variable={self.gradient_variable!r} is not a trainable variable; '
            f'choose one of {paths}.')
      index = paths.index(self.gradient_variable)
    self._bound = _Bound(trainer, index)

  # -- data faults --------------------------------------------------------------------------------
  def data_faults(self, index: int) -> List[Dict[str, Any]]:
    """The data faults injected into batch `index` (host side, the same decision as the stage)."""
    found = [{'kind': kind, 'batch': index}
             for kind, batches in self.data_steps.items() if index in batches]
    if self.feature_nan_probability > 0 and bool(self._random_hit(tf.constant(index, tf.int64))):
      if not any(f['kind'] == 'feature_nan' for f in found):
        found.append({'kind': 'feature_nan', 'batch': index, 'probability': True})
    return found

  def _random_hit(self, index):
    draw = tf.random.stateless_uniform([], seed=tf.stack([tf.constant(self.seed, tf.int64), index]))
    return draw < self.feature_nan_probability

  def wrap_dataset(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The dataset with the configured data faults; the dataset itself when there are none."""
    if not self.has_data_faults:
      return dataset
    spec = dataset.element_spec
    if isinstance(spec, dict):
      labels_spec = spec.get('labels', spec.get('label'))
      features_spec = {k: v for k, v in spec.items() if k not in ('labels', 'label')}
    else:
      features_spec, labels_spec = spec
    for part, part_spec in (('feature', features_spec), ('label', labels_spec)):
      wanted = [k for k, b in self.data_steps.items() if k.startswith(part) and b]
      if part == 'feature' and self.feature_nan_probability > 0:
        wanted.append('feature_nan')
      floats = [s for s in tf.nest.flatten(part_spec) if s.dtype.is_floating]
      if wanted and not floats:  # Checked here: raised inside the map it becomes a traceback.
        raise errors.ConfigError(
            f'Faults: {wanted[0]}_batches needs a floating-point {part} tensor to make '
            f'non-finite, but the {part}s are {[s.dtype.name for s in tf.nest.flatten(part_spec)]}; '
            f'drop the {part}_* faults for this dataset.')

    def poison_first(tensors, value, what):
      leaves = tf.nest.flatten(tensors)
      for i, t in enumerate(leaves):
        if t.dtype.is_floating:
          corner = tf.zeros([1, len(t.shape)], tf.int32)
          leaves[i] = tf.tensor_scatter_nd_update(t, corner, tf.cast(value, t.dtype)[tf.newaxis])
          return tf.nest.pack_sequence_as(tensors, leaves)
      raise errors.ConfigError(f'Faults: the {what} have no floating-point tensor to make '
                               'non-finite; drop the label_* faults for integer labels.')

    def stage(index, batch):
      if isinstance(batch, dict):
        labels_key = 'labels' if 'labels' in batch else 'label'
        features = {k: v for k, v in batch.items() if k != labels_key}
        labels = batch[labels_key]
      else:
        features, labels = batch
      parts = {'feature': features, 'label': labels}
      for kind, batches in self.data_steps.items():
        part, value = kind.split('_')
        random = kind == 'feature_nan' and self.feature_nan_probability > 0
        if not batches and not random:
          continue  # No op for a fault that is not configured.
        hit = tf.reduce_any(tf.equal(tf.constant(batches, tf.int64, shape=[len(batches)]), index))
        if random:
          hit = tf.logical_or(hit, self._random_hit(index))
        value = tf.constant(float(value), tf.float32)
        current = parts[part]
        parts[part] = tf.cond(hit, lambda c=current, v=value, p=part: poison_first(c, v, p),
                              lambda c=current: c)
      if isinstance(batch, dict):
        return dict(parts['feature'], **{labels_key: parts['label']})
      return parts['feature'], parts['label']

    return dataset.enumerate().map(stage)

  # -- loss and gradient faults (traced) ---------------------------------------------------------
  def transform_loss(self, loss):
    if not self._has_step_faults:
      return loss  # No op added.
    if self._bound is None:
      raise errors.ConfigError('Faults: not bound to a Trainer; pass it as Trainer(faults=...).')
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

      variable = self._bound.variables()[self._bound.variable_index]
      loss = loss + tap(tf.cast(tf.convert_to_tensor(variable), loss.dtype))
    return loss

  # -- host faults and the event log -------------------------------------------------------------
  def decide(self, reports: interfaces.StepReports,
             context: interfaces.PolicyContext) -> Optional[interfaces.Decision]:
    if reports.num_steps == 0:
      return None
    steps = [int(s) for s in reports.step]
    ran_until = int(self._bound.ran_until.numpy()) if self._bound is not None else 0
    if self._bound is not None:  # The policy's own state: the steps this process has run.
      self._bound.ran_until.assign(max(ran_until, steps[-1]))
    # The `fault_injected` records of the faults the loop injected, and the host faults due.
    records = []
    if self.has_data_faults:
      # The batch of step s: the loop read its batches in order up to the current position.
      position = context.data_position
      for i, s in enumerate(steps):
        for fault in self.data_faults(position - (len(steps) - i)):
          records.append((s, fault))
    step_faults = dict(self.loss_steps, gradient_nan=self.gradient_nan_steps)
    for s in steps:
      for kind, at in step_faults.items():
        if s in at and s > ran_until:
          extra = ({'variable': self.gradient_variable} if kind == 'gradient_nan' else
                   {'factor': self.loss_spike_factor} if kind == 'loss_spike' else {})
          records.append((s, dict(kind=kind, **extra)))
    inject = []
    for kind in _HOST_FAULTS:
      at = self.host_steps.get(kind)
      # Only a loop that reaches the step fires it (a run resumed past it does not).
      if at is not None and kind not in self._fired and steps[0] <= at <= steps[-1]:
        self._fired.add(kind)
        inject.append(kind)
    if not records and not inject:
      return None
    return interfaces.Decision(action=interfaces.ACT, policy=self.name, trigger='faults',
                               step=steps[-1], details={'records': records, 'inject': inject})

  def execute(self, decision, trainer) -> None:
    """Emits the injected faults' records, then injects the host faults due (in order)."""
    for s, fields in decision.details['records']:
      trainer.emit('fault_injected', s, **fields)
    for kind in decision.details['inject']:
      self._inject(kind, decision.step, trainer)
    return None

  def _inject(self, kind: str, step: int, trainer) -> None:
    keeper = trainer.checkpoints
    fields: Dict[str, Any] = {'kind': kind}
    if kind in ('corrupt_checkpoint', 'delete_checkpoint'):
      committed = keeper.committed() if keeper is not None else []
      if not committed:
        fields['note'] = 'no committed checkpoint yet'
      else:
        newest = committed[-1]
        prefix = os.path.join(keeper.directory, newest.path)
        fields['checkpoint'] = newest.path
        for name in tf.io.gfile.glob(prefix + '.*'):
          if kind == 'delete_checkpoint':
            os.remove(name)
          elif '.data-' in name:
            os.truncate(name, os.path.getsize(name) // 2)
    elif kind in ('corrupt_manifest', 'delete_manifest'):
      path = os.path.join(keeper.directory, 'manifest.json')
      fields['path'] = path
      if kind == 'delete_manifest':
        os.remove(path)
      else:
        os.truncate(path, os.path.getsize(path) // 2)
    elif kind == 'disk_full':
      write_files = keeper._write_files  # pylint: disable=protected-access

      def full_disk(number):
        keeper._write_files = write_files  # One failed write: the fault, not a broken keeper.
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                      os.path.join(keeper.directory, f'ckpt-{number}'))

      keeper._write_files = full_disk
    trainer.emit('fault_injected', step, **fields)
    log.warning('step %d: fault injected: %s', step, kind)
    if kind == 'sigterm':
      os.kill(os.getpid(), signal.SIGTERM)
    elif kind == 'exit':
      logging.shutdown()
      compat.hard_exit(self.exit_code)


def _spike_factor(value) -> float:
  return errors.check_number('Faults', 'loss_spike_factor', value, low=1.0, low_open=True,
                             what='a finite number > 1')
