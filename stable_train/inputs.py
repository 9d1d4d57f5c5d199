"""The input position: the iterator over a fit's dataset, where it stands, and moving it."""

from typing import Optional, Tuple

import tensorflow as tf

from stable_train import distribute


class InputPosition:
  """Owns a fit's dataset and iterator; the position is `global_step + data_offset`.

  A single-device tf.data iterator is checkpointed with the run (so a restore puts it back
  itself); a distributed iterator cannot be, so it is rebuilt at the saved position instead.
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
    self.iterator = None
    self._skip_fn = None

  def start(self, dataset: tf.data.Dataset, *, from_start: bool) -> None:
    """Takes `dataset` for this fit; `from_start`: a later fit reads its dataset from the start."""
    if from_start:
      self._data_offset.assign(-self._global_step.numpy())  # Keeps `position()` true.
    self.dataset = dataset
    if not self.distributed:
      self.iterator = iter(dataset)

  def position(self) -> int:
    """Index (in the dataset's stream) of the next batch the iterator will yield."""
    return int(self._global_step.numpy()) + int(self._data_offset.numpy())

  def skip(self, count: int) -> Tuple[int, int]:
    """Drops `count` batches from the iterator; returns the [start, end) stream indices dropped."""
    start = self.position()
    if count > 0 and self.distributed:
      self._data_offset.assign_add(count)
      self.reset()
    elif count > 0:
      if self._skip_fn is None:
        def skip(iterator, n):
          for _ in tf.range(n):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
              break
        self._skip_fn = tf.function(skip)
      self._skip_fn(self.iterator, tf.constant(count, tf.int64))
      self._data_offset.assign_add(count)
    return start, start + count

  def reset(self) -> None:
    """(Re)builds the distributed iterator at `position()`; called after every restore.

    A no-op for single-device input, whose iterator is restored with the checkpoint itself.
    """
    if self.distributed:
      self.iterator = distribute.distributed_iterator(self._strategy, self.dataset,
                                                      self.position())
