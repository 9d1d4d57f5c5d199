"""The errors stable_train raises on purpose, and the one argument validator every constructor uses.

Each `check_*` returns the value in its canonical type or raises a one-line `ConfigError` that names
`owner: name=value` and what would be valid, so a bad gin binding reads as its own fix.
"""

import math
import numbers
import os
import re
from typing import Any, Optional, Sequence


class StableTrainError(Exception):
  """Base class of the errors stable_train raises on purpose."""

  # autograph re-raises an error raised while tracing as its own type only where the type's
  # __init__ is Exception's (else as a StagingError, which `except ConfigError` and the CLI miss);
  # `one_line` drops the lines it wraps around the message.
  __init__ = Exception.__init__


class ConfigError(StableTrainError, ValueError):
  """A configuration, flag or argument is invalid; the message says how to fix it."""


class NumericsError(StableTrainError, FloatingPointError):
  """A non-finite value was found and the run was configured to stop on it."""


class CheckpointError(StableTrainError):
  """No usable checkpoint could be restored or written."""


class RunAborted(StableTrainError):
  """A policy stopped a guarded Keras `fit` (a skip-streak limit, no checkpoint to roll back
  to); the model, its checkpoints and a `BackupAndRestore` backup stand as they were."""


class ModelDirBusyError(StableTrainError):
  """Another live process holds the model_dir's run lock."""


def check_int(owner: str, name: str, value, *, minimum: int = 0,
              maximum: Optional[int] = None) -> int:
  """`value` as an int if it is an integer in [minimum, maximum] (bools and floats are refused;
  numpy integers accepted)."""
  ok = (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= minimum
        and (maximum is None or value <= maximum))
  if not ok:
    bound = f'>= {minimum}' if maximum is None else f'in [{minimum}, {maximum}]'
    raise ConfigError(f'{owner}: {name}={value!r} must be an integer {bound}.')
  return int(value)


def check_number(owner: str, name: str, value, *, low: float = -math.inf, high: float = math.inf,
                 low_open: bool = False, high_open: bool = False, finite: bool = True,
                 allow_none: bool = False, what: Optional[str] = None) -> Optional[float]:
  """`value` as a float if it is a real number (not a bool or a string) within the bounds.

  Args:
    owner, name, value: the constructor, the argument and its value (for the message).
    low, high: the bounds; `low_open` / `high_open` exclude them.
    finite: refuse inf and NaN (NaN is always refused).
    allow_none: None passes through unchanged.
    what: the message's description of a valid value; default: the interval.
  """
  if value is None and allow_none:
    return None
  ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
  number = float(value) if ok else math.nan
  ok = (ok and not math.isnan(number) and (math.isfinite(number) or not finite)
        and (number > low if low_open else number >= low)
        and (number < high if high_open else number <= high))
  if not ok:
    if what is None:
      kind = 'a finite number' if finite else 'a number'
      left = '(' if low_open or low == -math.inf else '['
      right = ')' if high_open or high == math.inf else ']'
      what = f'{kind} in {left}{low:g}, {high:g}{right}'
    raise ConfigError(f'{owner}: {name}={value!r} must be {what}.')
  return number


def check_bool(owner: str, name: str, value) -> bool:
  """`value` if it is True or False (not 0/1 or a string)."""
  if not isinstance(value, bool):
    raise ConfigError(f'{owner}: {name}={value!r} must be True or False.')
  return value


def check_dir(owner: str, name: str, value) -> Optional[str]:
  """`value` as a str, or None: a directory path whose nearest existing part is a directory
  (a file in the way would fail the run's first write, after its set-up)."""
  if value is None:
    return None
  if not isinstance(value, (str, os.PathLike)) or not str(value):
    raise ConfigError(f'{owner}: {name}={value!r} must be a directory path or None.')
  path = os.path.abspath(str(value))
  while not os.path.exists(path):
    path = os.path.dirname(path)
  if not os.path.isdir(path):
    raise ConfigError(f'{owner}: {name}={str(value)!r} cannot be a directory: {path} is a file; '
                      f'remove it, or use another {name}.')
  return str(value)


def check_choice(owner: str, name: str, value, choices: Sequence[Any], *,
                 hint: str = '') -> Any:
  """`value` if it is one of `choices`; `hint` ends the message (e.g. "use 'flag' or 'raise'")."""
  if value not in tuple(choices):
    raise ConfigError(f'{owner}: {name}={value!r} is not one of {tuple(choices)}'
                      + (f'; {hint}' if hint else '') + '.')
  return value


# What an OS failure says, in the words of strerror: the line that names one is the line that
# matters (a full disk inside a TensorFlow op reads "Graph execution error:" first).
_OS_FAILURES = ('No space left on device', 'Disk quota exceeded', 'Read-only file system',
                'Permission denied', 'Input/output error', 'File too large')
# Lines around the one that says what went wrong: gin's "In call to configurable ...", the
# "in user code:", File/source lines and headers of errors raised in traced code.
_NOISE = ('In call to configurable', 'in user code', 'Traceback', 'Arguments received', '•',
          '^', '[[{{node', 'Detected at node', 'Graph execution error',
          'Exception encountered when calling', 'Hint: If you want to see')


def one_line(error: BaseException) -> str:
  """The line of an error message that says what went wrong (at most 600 characters).

  Drops the lines gin, Keras and TensorFlow wrap around it, TensorFlow's `{{function_node ...}}`
  prefix and `[Op:...]` suffix; a line that names an OS failure (a full disk, a read-only file
  system) wins, as 'No space left on device: <path>'.
  """
  text = re.sub(r'\x1b\[[0-9;]*m', '', str(error))  # Keras bolds its message with ANSI codes.
  lines, under_file = [], False
  for line in text.splitlines():
    line = line.strip()
    if under_file:  # The source line printed under a File line.
      under_file = False
      continue
    if line.startswith('File "'):
      under_file = True
      continue
    line = re.sub(r'^[A-Za-z_.]*(Error|Exception): ', '', line)
    line = re.sub(r'^\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]*\]$', '', line)
    if line and not line.startswith(_NOISE):
      lines.append(line)
  for line in lines:
    failure = next((f for f in _OS_FAILURES if f in line), None)
    if failure is not None:
      return _os_failure(line, failure)[:600]
  return (lines[0] if lines else type(error).__name__)[:600]


def _os_failure(line: str, failure: str) -> str:
  """'<failure>: <path>' for TensorFlow's '<path>; <failure>' and Python's "[Errno N] <failure>:
  '<path>'"; any other line that names the failure as it is."""
  raw = re.fullmatch(r'(.+?)[;:,]\s*' + re.escape(failure), line)
  if raw:
    return f'{failure}: {raw.group(1)}'
  raw = re.fullmatch(r'\[Errno \d+\] ' + re.escape(failure) + r"(?:: '?(.*?)'?)?", line)
  if raw:
    return failure + (f': {raw.group(1)}' if raw.group(1) else '')
  return line


def describe(value) -> str:
  """What a value is, in a few words for a message: an array's kind, shape and dtype, never its
  contents."""
  if hasattr(value, 'shape') and hasattr(value, 'dtype'):
    name = type(value).__name__
    kind = ('numpy array' if type(value).__module__ == 'numpy' else
            'tensor' if 'Tensor' in name else name)
    return f'a {kind} of shape {tuple(value.shape)} ({getattr(value.dtype, "name", value.dtype)})'
  if isinstance(value, (tuple, list, dict)):
    items = list(value.values() if isinstance(value, dict) else value)
    inner = '; '.join(describe(v) for v in items[:3]) + ('; ...' if len(items) > 3 else '')
    return f'a {type(value).__name__} of {len(items)} ({inner})'[:300]
  text = repr(value)
  return text if len(text) <= 80 else f'a {type(value).__name__}'
