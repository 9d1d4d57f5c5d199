"""The input position: the iterator over a fit's dataset, where it stands, and moving it."""

import contextlib
from typing import Iterator, Optional, Tuple

import tensorflow as tf

from stable_train.runtime import distribute


class InputPosition:
  """Owns a fit's dataset and iterator; the position is `global_step + data_offset`.

  Only the position is checkpointed (both counters are in the train state), never the iterator:
  a tf.data iterator's checkpoint holds its buffers, which for a `.cache()`d dataset is the whole
  data set. After a restore the iterator is put at the restored position: moved forward on the
  live iterator when that one stands at or before it (a rollback), else rebuilt from
  `dataset.skip(position)`, which reads through the skipped batches (O(position) at a resume).
  The iterator is moved lazily, when `iterator` is next read.
  """

  def __init__(self, *, strategy: tf.distribute.Strategy, global_step: tf.Variable,
               data_offset: tf.Variable, distributed: bool):
    """Initialises an empty position (no dataset until `start`).

    Args:
      strategy: the run's strategy (distributed input is built with it).
      global_step: the run's global step.
      data_offset: the run's batches-skipped counter (`TrainState.data_offset`).
      distributed: whether the strategy uses distributed input.
    """
    self._strategy = strategy
    self._global_step = global_step
    self._data_offset = data_offset
    self.distributed = distributed
    self.dataset: Optional[tf.data.Dataset] = None
    self._iterator = None
    # Stream index of the next batch the live single-device iterator yields, when a restore or
    # a skip has moved `position()` away from it; None while the iterator is at `position()`.
    self._iterator_at: Optional[int] = None
    self._skip_fn = None

  def start(self, dataset: tf.data.Dataset, *, from_start: bool) -> None:
    """Takes `dataset` for this fit; `from_start`: a later fit reads its dataset from the start."""
    if from_start:
      self._data_offset.assign(-self._global_step.numpy())  # Keeps `position()` true.
    self.dataset = dataset
    self._iterator = None  # Built at `position()` when first read (after any resume).
    self._iterator_at = None

  @property
  def iterator(self):
    """The iterator, standing at `position()` (built or moved there first if needed)."""
    if not self.distributed:
      self._move_to_position()
    return self._iterator

  def position(self) -> int:
    """Index (in the dataset's stream) of the next batch the iterator will yield."""
    return int(self._global_step.numpy()) + int(self._data_offset.numpy())

  def skip(self, count: int) -> Tuple[int, int]:
    """Drops `count` batches from the iterator; returns the [start, end) stream indices dropped."""
    start = self.position()
    if count > 0:
      self._note_live_position()
      self._data_offset.assign_add(count)
      if self.distributed:
        self.reset()
    return start, start + count

  @contextlib.contextmanager
  def restoring(self) -> Iterator[None]:
    """Wraps a restore of the counters: the live iterator, which stood at the position before it,
    is moved to the restored position when next read (forward in place when it can be)."""
    self._note_live_position()
    yield
    if self.distributed:
      self.reset()

  def reset(self) -> None:
    """Puts the iterator at `position()` after the counters changed outside `restoring()`.

    Distributed input is rebuilt at once; a single-device iterator is rebuilt from the dataset's
    start (skipping `position()` batches) when next read, since where it stood is not known.
    """
    if self.distributed:
      self._iterator = distribute.distributed_iterator(self._strategy, self.dataset,
                                                       self.position())
    else:
      self._iterator = None
      self._iterator_at = None

  # ------------------------------------------------------------------------------------------
  def _note_live_position(self) -> None:
    """Records where the live iterator stands before the counters move away from it."""
    if self._iterator is not None and self._iterator_at is None and not self.distributed:
      self._iterator_at = self.position()

  def _move_to_position(self) -> None:
    at = self._iterator_at
    if self._iterator is not None and at is None:
      return  # Nothing moved the counters away from the live iterator (every healthy loop).
    target = self.position()
    if self._iterator is not None and at == target:
      self._iterator_at = None
      return
    if self._iterator is None or at > target:
      # Behind the live iterator, or no live iterator: read the stream again up to `target`.
      dataset = self.dataset.skip(target) if target > 0 else self.dataset
      self._iterator = iter(dataset)
    else:
      self._read_ahead(target - at)
    self._iterator_at = None

  def _read_ahead(self, count: int) -> None:
    """Reads `count` batches from the live iterator (stops quietly at the end of the data)."""
    if self._skip_fn is None:
      def skip(iterator, n):
        for _ in tf.range(n):
          optional = iterator.get_next_as_optional()
          if not optional.has_value():
            break
      self._skip_fn = tf.function(skip)
    self._skip_fn(self._iterator, tf.constant(count, tf.int64))


def batch_signature(dataset: tf.data.Dataset) -> str:
  """The dtypes and shapes of the dataset's batches, in `tf.nest.flatten` order, as one line
  ('float32[32,1000] float32[32,1]'); a checkpoint records it so that a resume with another
  batch size or element shape is refused instead of silently reading other batches.

  Dimensions the pipeline leaves unknown (e.g. `batch()` without `drop_remainder`) are taken
  from its first batch, which is read for that.
  """
  specs = tf.nest.flatten(dataset.element_spec)
  shapes = [getattr(s, 'shape', None) for s in specs]
  if any(isinstance(s, tf.TensorSpec) and not s.shape.is_fully_defined() for s in specs):
    first = next(iter(dataset.take(1)), None)
    if first is not None:
      shapes = [getattr(v, 'shape', None) if isinstance(s, tf.TensorSpec) else shape
                for s, v, shape in zip(specs, tf.nest.flatten(first), shapes)]
  parts = []
  for spec, shape in zip(specs, shapes):
    dtype = getattr(spec, 'dtype', None)
    if shape is None or dtype is None:
      parts.append(type(spec).__name__)
    else:
      shape = tf.TensorShape(shape)
      dims = ('*' if shape.rank is None else
              ','.join('?' if d is None else str(d) for d in shape.as_list()))
      parts.append(f'{tf.as_dtype(dtype).name}[{dims}]')
  return ' '.join(parts)
