"""The host half of a guarded Keras `fit`: `GuardCallback`.

fit's hooks drive the one host half of a step another loop calls (`driven.DrivenRun`): after each
execution of fit's train function the run reads the guard's reports when a skip shows in fit's
logs or as often as the checkpoint cadence needs, and does what the Trainer's host loop does with
a loop of them (skip events, scalars, every policy's `decide` and `execute`: a skip-streak limit,
Rollback with its learning-rate backoff, Forensics; a checkpoint of the last good state every
`checkpoint_every` steps, in memory and, given a `model_dir`, on disk). An abort raises
`errors.RunAborted` out of `fit`, so that a `BackupAndRestore` keeps its backup.
"""

from typing import Optional

import keras

from stable_train import errors
from stable_train.runtime import driven
from stable_train.runtime import options as options_lib


def _of_host(name: str, doc: str) -> property:
  """A read-only attribute of the callback's run host (`driven.host.<name>`)."""
  return property(lambda self: getattr(self.driven.host, name), doc=doc)


class GuardCallback(keras.callbacks.Callback):
  """Runs a `keras_fit.KerasGuard`'s policies on the host during `fit` (see the module doc).

  Args:
    guard: the guard of the model being fitted (`stable_train.guard_fit(model)`).
    model_dir: where events.jsonl, summary.json, TensorBoard scalars, `checkpoints/` and
      forensics records go (None: nothing on disk; rollbacks restore from memory).
    checkpoint_every: keep a checkpoint of the state every this many steps.
    healthy_window: a checkpoint is a rollback target only if no fault happened in this many
      steps before it.
    max_checkpoints, keep_good_checkpoints: retention on disk (the newest, and good ones).
    max_refused_checkpoints: this many checkpoints in a row refused (a non-finite variable) are
      a fault: a Rollback takes over, or the run aborts.
    summary_every: TensorBoard scalars every this many steps (and on every fault).
  """

  def __init__(self, guard, *, model_dir: Optional[str] = None, checkpoint_every: int = 100,
               healthy_window: int = 50, max_checkpoints: int = 5, keep_good_checkpoints: int = 3,
               max_refused_checkpoints: int = 2, summary_every: int = 10):
    super().__init__()
    options = options_lib.RunOptions(
        checkpoint_every=checkpoint_every, max_checkpoints=max_checkpoints,
        keep_good_checkpoints=keep_good_checkpoints, summary_every=summary_every,
        max_refused_checkpoints=max_refused_checkpoints, healthy_window=healthy_window,
        owner='GuardCallback')
    self.driven = driven.DrivenRun(guard, options, model_dir)
    self.guard = guard

  @property
  def options(self):
    """The run's `options.RunOptions` (the settings below read and replace it)."""
    return self.driven.options

  @options.setter
  def options(self, value) -> None:
    self.driven.options = value

  model_dir = property(lambda self: self.driven.model_dir, doc='Where the run files go, or None.')
  host = property(lambda self: self.driven.host, doc='The run\'s `host.RunHost`.')
  run = _of_host('run', 'The run handle the policies act through.')
  keeper = _of_host('keeper', 'The keeper of the rollback targets.')
  output_dir = _of_host('output_dir',
                        'Where this process writes the fit\'s run files (None: nowhere).')
  last_summary = _of_host('last_summary',
                          'The summary of the last fit (as its summary.json), or {}.')

  # -- fit's hooks -----------------------------------------------------------------------------
  def on_train_begin(self, logs=None):
    _check_fit(self.guard, self.model)
    self.driven.begin()

  def on_epoch_begin(self, epoch, logs=None):
    self.driven.epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    # fit's logs are on the host already (Keras converts them for every batch hook): a skip shows
    # in them without a read. A clean stretch is read with the next batch of reports.
    self.driven.steps_done(int(self.guard.model.steps_per_execution),
                           skipped=(logs or {}).get('skipped_steps'))

  def on_epoch_end(self, epoch, logs=None):
    self.driven.read()

  def on_train_end(self, logs=None):
    stopped = self.guard.model.stop_training  # Keras's EarlyStopping, say.
    self.driven.end(stopped_by='a Keras callback stopped training' if stopped else None)


def _check_fit(g, m) -> None:
  """This fit runs this guard's step: else the callback would read no reports at all."""
  if m is not g.model:
    raise errors.ConfigError(
        f'GuardCallback: fit of {getattr(m, "name", m)!r}, not the model its guard guards '
        f'({g.model.name!r}); pass stable_train.guard_fit(model).callback() of the fitted model.')
  if getattr(m.train_step, '__self__', None) is not g:
    raise errors.ConfigError(
        'GuardCallback: another guard took the model over (guard_fit was called again); pass '
        'the newest guard\'s callback().')


# callback.checkpoint_every, ...: the settings of callback.options a guarded fit uses.
for _name in ('checkpoint_every', 'max_checkpoints', 'keep_good_checkpoints', 'summary_every',
              'max_refused_checkpoints', 'healthy_window'):
  setattr(GuardCallback, _name, options_lib.setting(_name))
