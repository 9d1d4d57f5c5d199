"""Exception types that stable_train raises for bad input and numerical faults."""


class StableTrainError(Exception):
  """Base class of the errors stable_train raises on purpose."""


class ConfigError(StableTrainError, ValueError):
  """A configuration, flag or argument is invalid; the message says how to fix it."""


class NumericsError(StableTrainError, FloatingPointError):
  """A non-finite value was found and the run was configured to stop on it."""


class CheckpointError(StableTrainError):
  """No usable checkpoint could be restored or written."""


class ModelDirBusyError(StableTrainError):
  """Another live process holds the model_dir's run lock."""


def check_int(owner: str, name: str, value, *, minimum: int = 0, maximum=None) -> int:
  """Returns `value` as an int if it is an integer in [minimum, maximum], else raises a one-line
  ConfigError naming `owner: name=value` (bools and floats are refused; numpy integers accepted)."""
  import numbers  # pylint: disable=g-import-not-at-top
  ok = (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= minimum
        and (maximum is None or value <= maximum))
  if not ok:
    bound = f'>= {minimum}' if maximum is None else f'in [{minimum}, {maximum}]'
    raise ConfigError(f'{owner}: {name}={value!r} must be an integer {bound}.')
  return int(value)
