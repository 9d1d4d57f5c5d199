"""SIGTERM/SIGINT for the whole process, in one place: a clean stop instead of dying mid-step.

One `Signals` object (`SIGNALS`) owns the handlers. A library caller's `fit` installs them for the
run only (`training()`), and puts the previous handlers back after it. The CLI installs them for
the whole process (`install()`) before TensorFlow is imported; during its start-up (`raising()`)
the process's first signal raises `StartupInterrupted` (nothing was written yet); during training
a signal is recorded and the host loop stops at the next loop end with a checkpoint; after that,
and for any repeat, a signal is only recorded, so a second SIGTERM 20 ms after the first cannot
kill a run mid-checkpoint.
"""

import contextlib
import signal
from typing import Iterator, List, Optional

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # SIGTERM last: once it is caught, both are.


class StartupInterrupted(BaseException):
  """SIGTERM/SIGINT before training began (a BaseException, like KeyboardInterrupt)."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


class Training:
  """One training run's view of the signals: the first one received during it (`received`)."""

  def __init__(self):
    self.received: Optional[int] = None


class Signals:
  """The process's SIGTERM/SIGINT handling (see the module docstring)."""

  def __init__(self):
    self.received: List[int] = []  # Every signal the handler saw, in order.
    self._installed = False
    self._raising = False
    self._training: Optional[Training] = None
    self.at_start_up: Optional[int] = None  # The signal that raised `StartupInterrupted`.

  def _handle(self, signum, frame) -> None:
    del frame
    self.received.append(signum)
    if self._training is not None:
      if self._training.received is None:  # The first signal is the cause.
        self._training.received = signum
    elif self._raising and len(self.received) == 1:
      self.at_start_up = signum  # Kept: an import in C may turn the exception into another.
      raise StartupInterrupted(signum)

  def install(self) -> None:
    """Takes SIGTERM/SIGINT for the whole process (the CLI; main thread only)."""
    for sig in _STOP_SIGNALS:
      signal.signal(sig, self._handle)
    self._installed = True

  def ignore(self) -> None:
    """Ignores both signals from now on: the outcome is decided, a repeat must not change the exit
    status (Python resets its own handlers while the interpreter shuts down, but leaves an
    ignored signal ignored)."""
    for sig in _STOP_SIGNALS:
      signal.signal(sig, signal.SIG_IGN)

  @contextlib.contextmanager
  def raising(self) -> Iterator[None]:
    """While active, the process's first signal raises `StartupInterrupted` (outside training)."""
    self._raising = True
    try:
      yield
    finally:
      self._raising = False

  def stop_raising(self) -> None:
    """From here on a signal outside training is only recorded (training ran)."""
    self._raising = False

  @contextlib.contextmanager
  def training(self) -> Iterator[Training]:
    """While active, a signal is recorded in the yielded `Training` (the host loop reads it).

    Without `install`, the handlers are installed for the block only (main thread: elsewhere
    signals are left alone) and the previous ones put back after it.
    """
    previous = {}
    if not self._installed:
      for sig in _STOP_SIGNALS:
        try:
          previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # Not the main thread.
          pass
    outer, self._training = self._training, Training()
    try:
      yield self._training
    finally:
      self._training = outer
      for sig, handler in previous.items():
        signal.signal(sig, handler)


SIGNALS = Signals()
