"""Run records: atomic file writes, the events.jsonl log and TensorBoard scalars."""

import collections
import contextlib
import itertools
import json
import math
import os
import socket
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tensorflow.core.framework import types_pb2
from tensorflow.core.util import event_pb2


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


def write_atomic(path: str, text: str, sync: bool = True) -> None:
  """Writes `text` to `path` so that a reader sees the old file or the new one, never half of it;
  `sync`: on disk before the rename (False: for a file nothing is committed by)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', dir=directory)
  try:
    # mkstemp creates 0600 whatever the umask; give the file the mode open() would have.
    os.fchmod(fd, 0o666 & ~_umask())
    with os.fdopen(fd, 'w') as f:
      f.write(text)
      if sync:
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
  """Appends one JSON object per line to `<model_dir>/events.jsonl` (every record has step and
  event) and passes each record to `deliver` (the Trainer's `on_event`).

  Inside `batched()` the calling thread's records are held and appended together when it ends
  (one write for a loop's `skip` events). A record emitted from another thread (a checkpoint
  written in the background) is appended at once, after every record held before it, so the file
  is complete up to it whenever it is there; while a thread holds the log (`owned()`, fit), such
  a record is delivered on that thread, at its next emit or `deliver()`.
  """

  def __init__(self, path: Optional[str],
               deliver: Optional[Callable[[Dict[str, Any]], None]] = None):
    self.path = path
    self._deliver = deliver
    self._lock = threading.Lock()
    self._held = []  # Lines emitted inside a batch, not written yet.
    self._local = threading.local()  # The calling thread's batch depth.
    self._undelivered = collections.deque()
    self._owner = None  # The thread records are delivered on (None: the emitting one).
    if path:
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

  def emit(self, event: str, step: int, **fields) -> Dict[str, Any]:
    record = {'event': event, 'step': int(step), 'time': round(time.time(), 3)}
    record.update(to_json_value(fields))
    if self.path:
      line = json.dumps(record, sort_keys=True) + '\n'
      with self._lock:
        self._held.append(line)
        if not getattr(self._local, 'depth', 0):
          self._write_held()
    if self._deliver is not None:
      self._undelivered.append(record)
      if self._owner in (None, threading.get_ident()):
        self.deliver()
    return record

  def deliver(self) -> None:
    """Passes the records not delivered yet, in order, to `deliver`."""
    while self._undelivered:
      self._deliver(self._undelivered.popleft())

  @contextlib.contextmanager
  def owned(self) -> Iterator[None]:
    """Inside, every record is delivered on this thread; on the way out, the rest of them."""
    self._owner = threading.get_ident()
    try:
      yield
    finally:
      self._owner = None
      self.deliver()

  @contextlib.contextmanager
  def batched(self) -> Iterator[None]:
    """Holds this thread's records inside and appends them in one write on the way out."""
    self._local.depth = getattr(self._local, 'depth', 0) + 1
    try:
      yield
    finally:
      self._local.depth -= 1
      if not self._local.depth:
        with self._lock:
          self._write_held()

  def _write_held(self) -> None:
    """Appends the held lines (the caller holds the lock)."""
    if self._held:
      text, self._held = ''.join(self._held), []
      with open(self.path, 'a') as f:
        f.write(text)


def read_events(path: str):
  """Reads an events.jsonl file into a list of dicts."""
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


# TensorFlow 2.21 no longer depends on the tensorboard package, and tf.summary.scalar needs it.
# The scalars plugin reads a float tensor with this metadata, as tf.summary.write would write it.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name='scalars'))
_FILE_NUMBERS = itertools.count()  # Two writers of one process, one second: two files.


class Scalars:
  """Writes per-step scalars to a TensorBoard event file under `logdir` (`<model_dir>/tensorboard`).

  The events are built on the host and appended to one TFRecord file, the format TensorBoard
  reads: an eager `tf.summary.write` per value cost ~0.65 ms (5 ms a summary step of the report's
  scalars), a reused `Event` message ~3 us. Written to the file at `flush` (before a checkpoint,
  so they are on disk up to the last committed one), `flush_due` (every `flush_seconds`, for a
  TensorBoard watching the run; a flush per loop cost ~25 us) and `close`.
  """

  def __init__(self, logdir: Optional[str], *, flush_seconds: float = 2.0):
    self._writer = None
    self._unflushed = False
    self._flush_seconds = flush_seconds
    self._flushed_at = time.monotonic()
    self._events: Dict[Tuple[str, ...], Tuple[event_pb2.Event, list]] = {}
    if logdir:
      os.makedirs(logdir, exist_ok=True)
      name = (f'events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.'
              f'{next(_FILE_NUMBERS)}.v2')
      self._writer = tf.io.TFRecordWriter(os.path.join(logdir, name))
      self._writer.write(event_pb2.Event(wall_time=time.time(),
                                         file_version='brain.Event:2').SerializeToString())

  @property
  def writing(self) -> bool:
    """Whether writes go to a file (False without a logdir, or once closed)."""
    return self._writer is not None

  def write(self, step: int, values: Dict[str, float]) -> None:
    if self._writer is None:
      return
    names = tuple(values)
    if names not in self._events:
      self._events[names] = _scalar_event(names)
    event, slots = self._events[names]
    event.step, event.wall_time = int(step), time.time()
    for slot, value in zip(slots, values.values()):
      slot[0] = float(value)  # float32, as TensorBoard's scalars are.
    self._writer.write(event.SerializeToString())
    self._unflushed = True

  def flush(self) -> None:
    if self._writer is not None and self._unflushed:
      self._writer.flush()
      self._unflushed = False
      self._flushed_at = time.monotonic()

  def flush_due(self) -> None:
    """Flushes if `flush_seconds` have passed since the last flush."""
    if self._unflushed and time.monotonic() - self._flushed_at >= self._flush_seconds:
      self.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None  # Later writes (after a run) are dropped, not an error.


def _scalar_event(names: Tuple[str, ...]) -> Tuple[event_pb2.Event, list]:
  """An `Event` with one scalar value per name, and each value's one-element float list (set
  in place for every step: a message reused costs a tenth of a new one)."""
  event = event_pb2.Event()
  slots = []
  for name in names:
    value = event.summary.value.add(tag=name)
    value.metadata.CopyFrom(_SCALAR_METADATA)
    value.tensor.dtype = types_pb2.DT_FLOAT
    value.tensor.tensor_shape.SetInParent()  # A scalar: shape [].
    value.tensor.float_val.append(0.0)
    slots.append(value.tensor.float_val)
  return event, slots
