"""A run's TensorBoard scalars (`<model_dir>/tensorboard/events.out.tfevents.*`) read without
TensorFlow: the TFRecord framing and the few protobuf fields of `Event` a scalar uses.

The loop recorder writes every report scalar (loss, grad_norm, grad_norm_clipped, learning_rate,
loss_scale, ...) every `summary_every` steps and at every faulty step, over the whole run: the
densest per-step record a run directory keeps. The doctor must not import TensorFlow (its
`summary_iterator` would), and the wire format is small and stable.
"""

import glob
import os
import struct
from typing import Any, Dict, Iterator, List, Tuple

_DT_FLOAT, _DT_DOUBLE = 1, 2  # tensorflow.DataType values.


def read(model_dir: str) -> List[Dict[str, Any]]:
  """The scalar records of a run directory's training event files, oldest first.

  Returns:
    One dict per Event that holds scalars: {'step': int, 'time': wall time, tag: float, ...}
    (the eval files under tensorboard/eval are not read); [] without any. A record cut off by a
    crash ends its file's records; a file that cannot be read is left out.
  """
  records = []
  for path in glob.glob(os.path.join(model_dir, 'tensorboard', 'events.out.tfevents.*')):
    try:
      with open(path, 'rb') as f:
        data = f.read()
    except OSError:
      continue
    for payload in _tfrecords(data):
      try:
        record = _event(payload)
      except (IndexError, ValueError, struct.error):
        break  # Not an Event: a damaged file; what came before it stands.
      if record is not None:
        records.append(record)
  records.sort(key=lambda r: r['time'])  # Files of a resumed run, in the order written.
  return records


def _tfrecords(data: bytes) -> Iterator[bytes]:
  """The payloads of a TFRecord file: length (uint64), its CRC, the data, the data's CRC. The
  CRCs are not checked; a record that runs past the end (a cut-off write) ends the file."""
  pos = 0
  while pos + 12 <= len(data):
    (length,) = struct.unpack_from('<Q', data, pos)
    start = pos + 12
    if start + length + 4 > len(data):
      return
    yield data[start:start + length]
    pos = start + length + 4


def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
  value = shift = 0
  while True:
    byte = buf[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if not byte & 0x80:
      return value, pos


def _fields(buf: bytes) -> Iterator[Tuple[int, int, Any]]:
  """(field number, wire type, value) of a protobuf message: an int for a varint, bytes for
  the rest (8 for fixed64, 4 for fixed32, the contents of a length-delimited field)."""
  pos = 0
  while pos < len(buf):
    key, pos = _varint(buf, pos)
    number, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = _varint(buf, pos)
    elif wire in (1, 5):
      size = 8 if wire == 1 else 4
      value, pos = buf[pos:pos + size], pos + size
    elif wire == 2:
      size, pos = _varint(buf, pos)
      value, pos = buf[pos:pos + size], pos + size
    else:
      raise ValueError(f'protobuf wire type {wire} (groups) in a scalar event')
    yield number, wire, value


def _event(buf: bytes):
  """{'step', 'time', tag: value...} of a serialized `Event` with scalars, else None."""
  step, time, values = 0, 0.0, {}
  for number, _, value in _fields(buf):
    if number == 1:  # wall_time (double).
      (time,) = struct.unpack('<d', value)
    elif number == 2:  # step (int64).
      step = value - (1 << 64) if value >= 1 << 63 else value
    elif number == 5:  # summary: repeated Value (field 1).
      for n, _, v in _fields(value):
        if n == 1:
          values.update(_value(v))
  return {'step': step, 'time': time, **values} if values else None


def _value(buf: bytes) -> Dict[str, float]:
  """{tag: the scalar} of a `Summary.Value`: a `simple_value` (tf.compat.v1 summaries) or a
  scalar float/double tensor (tf.summary and `runfiles.events.Scalars`); {} for anything else."""
  tag, scalar = None, None
  for number, _, value in _fields(buf):
    if number == 1:
      tag = value.decode('utf-8', 'replace')
    elif number == 2:  # simple_value (float).
      (scalar,) = struct.unpack('<f', value)
    elif number == 8:  # tensor.
      scalar = _tensor_scalar(value)
  return {tag: float(scalar)} if tag is not None and scalar is not None else {}


def _tensor_scalar(buf: bytes):
  """The first value of a float or double `TensorProto`, or None."""
  dtype, content, listed = None, b'', b''
  for number, _, value in _fields(buf):
    if number == 1:
      dtype = value
    elif number == 4:  # tensor_content: the values' raw bytes.
      content = value
    elif number in (5, 6):  # float_val, double_val: packed (or one fixed value each).
      listed += value
  if dtype not in (_DT_FLOAT, _DT_DOUBLE):
    return None
  raw, fmt = content or listed, '<f' if dtype == _DT_FLOAT else '<d'
  return struct.unpack_from(fmt, raw)[0] if len(raw) >= struct.calcsize(fmt) else None
