"""Run records: atomic file writes, the events.jsonl log and TensorBoard scalars."""

import json
import math
import os
import tempfile
import time
from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2


def make_temp_dir(prefix: str, directory: str, suffix: str = '') -> str:
  """`tempfile.mkdtemp` with the mode `os.mkdir` would give (mkdtemp makes 0700 whatever the
  umask), for folders that are renamed into place."""
  path = tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=directory)
  os.chmod(path, 0o777 & ~_umask())
  return path


def default_file_mode() -> int:
  """The mode `open()` gives a new file under the current umask (0644 under umask 022)."""
  return 0o666 & ~_umask()


def _umask() -> int:
  """The process umask (read by setting and restoring it: Python 3.11 has no getter)."""
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def write_atomic(path: str, text: str) -> None:
  """Writes `text` to `path` so that a reader sees the old file or the new one, never half of it."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', dir=directory)
  try:
    # mkstemp creates 0600 whatever the umask; give the file the mode open() would have.
    os.fchmod(fd, 0o666 & ~_umask())
    with os.fdopen(fd, 'w') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def to_json_value(value: Any) -> Any:
  """Converts numpy scalars/arrays and non-finite floats into strict-JSON values."""
  if isinstance(value, dict):
    return {str(k): to_json_value(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_json_value(v) for v in value]
  if isinstance(value, np.ndarray):
    return to_json_value(value.tolist())
  if isinstance(value, (np.bool_, bool)):
    return bool(value)
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, (np.floating, float)):
    value = float(value)
    return value if math.isfinite(value) else repr(value)  # 'nan', 'inf' as strings.
  return value


def write_json_atomic(path: str, data: Dict[str, Any]) -> None:
  write_atomic(path, json.dumps(to_json_value(data), indent=2, sort_keys=True) + '\n')


class EventLog:
  """Appends one JSON object per line to `<model_dir>/events.jsonl`; every record has step and event."""

  def __init__(self, path: Optional[str]):
    self.path = path
    if path:
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

  def emit(self, event: str, step: int, **fields) -> Dict[str, Any]:
    record = {'event': event, 'step': int(step), 'time': round(time.time(), 3)}
    record.update(to_json_value(fields))
    if self.path:
      with open(self.path, 'a') as f:
        f.write(json.dumps(record, sort_keys=True) + '\n')
    return record


def read_events(path: str):
  """Reads an events.jsonl file into a list of dicts."""
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


# TensorFlow 2.21 no longer depends on the tensorboard package, and tf.summary.scalar needs it.
# tf.summary.write with the scalars plugin's metadata writes the same records without it.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name='scalars'))


class Scalars:
  """Writes per-step scalars to TensorBoard event files under `<model_dir>/tensorboard`."""

  def __init__(self, logdir: Optional[str]):
    self._writer = tf.summary.create_file_writer(logdir) if logdir else None

  def write(self, step: int, values: Dict[str, float]) -> None:
    if self._writer is None:
      return
    with self._writer.as_default():
      for name, value in values.items():
        tf.summary.write(name, tf.constant(float(value), tf.float32), step=int(step),
                         metadata=_SCALAR_METADATA)

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None  # Later writes (after a run) are dropped, not an error.
