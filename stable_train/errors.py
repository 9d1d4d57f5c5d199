"""Exception types that stable_train raises for bad input and numerical faults."""


class StableTrainError(Exception):
  """Base class of the errors stable_train raises on purpose."""


class ConfigError(StableTrainError, ValueError):
  """A configuration, flag or argument is invalid; the message says how to fix it."""


class NumericsError(StableTrainError, FloatingPointError):
  """A non-finite value was found and the run was configured to stop on it."""


class CheckpointError(StableTrainError):
  """No usable checkpoint could be restored or written."""
