"""A clean stop on SIGTERM/SIGINT: at the first loop end after the signal, a checkpoint, the
`interrupted` event and the run's end (`signals.SIGNALS` records the signal)."""

from typing import Optional

from stable_train.core import outcome as outcome_lib
from stable_train.runtime import signals as signals_lib


class SignalAction:
  """Due once a signal arrived during this run's training."""

  def __init__(self, training: signals_lib.Training, trainer):
    """Args: training: the run's `signals.Training` record; trainer: the Trainer (its
    `save_checkpoint` and `emit`)."""
    self._training = training
    self._trainer = trainer

  def due(self, step: int) -> bool:
    del step
    return self._training.received is not None

  def run(self, step: int) -> Optional[outcome_lib.Outcome]:
    signum = self._training.received
    saved = self._trainer.save_checkpoint(reason=f'signal {signum}')
    self._trainer.emit('interrupted', step, signal=signum)
    return outcome_lib.Outcome(outcome_lib.Status.INTERRUPTED, reason=f'stopped by signal {signum}',
                               extra={'signal': signum, 'checkpoint': saved.path if saved else None})
