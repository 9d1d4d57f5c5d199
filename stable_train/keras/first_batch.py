"""FirstBatch: a bounded copy of the first batch a guarded Keras `fit` trains on, kept in-graph
for the host checks that re-run the model on the run's first batch (Keras owns the iterator)."""

from typing import Any, Optional

import tensorflow as tf

from stable_train.runtime import distribute

MAX_ROWS = 32  # Rows of each input tensor kept: enough for a loss and an output scale.


class FirstBatch:
  """The first `MAX_ROWS` rows of every tensor of the first batch the guard's step sees,
  whatever the step then does with it (a skipped NaN batch is kept too: the Trainer's reference
  is the dataset's first batch, whatever happened to it).

  The variables are the guard's alone: no model, optimizer or checkpoint holds them. They are
  made at the first trace, from the batch's spec (padded to a fixed row count, so that XLA sees
  static shapes), and filled under a `tf.cond` on "not captured yet": later steps pay one scalar
  read and a cond. No sample is kept (`value()` is None, `unavailable` says why) under a
  distribution strategy (each replica sees its own shard) or for a batch with a tensor that is
  not dense, has an unknown non-batch dimension, or holds strings.
  """

  def __init__(self, *, strategy: tf.distribute.Strategy):
    self._structure = None
    self._variables = None  # Per flattened leaf: a variable, or None for a None leaf.
    self._rows = None  # -1 until captured; then the rows kept.
    self.unavailable: Optional[str] = (
        'under a distribution strategy' if distribute.uses_distributed_input(strategy)
        else None)

  @classmethod
  def for_policies(cls, policies, strategy) -> Optional['FirstBatch']:
    """A FirstBatch if some policy reads the first batch (`uses_first_batch`), else None."""
    return cls(strategy=strategy) if any(p.uses_first_batch for p in policies) else None

  def make_from_spec(self, spec) -> None:
    """Makes the variables from the batches' spec as the step gets them (an empty Optional as
    None: `keras_parts.without_optionals`), eager, before the step is traced (a variable
    made in the first trace would make Keras trace the step again); a later `capture` of a batch
    of this spec fills them. Nothing where they are made already or no sample is kept."""
    if self.unavailable is None and self._variables is None and spec is not None:
      self._make(spec, tf.nest.flatten(spec))

  def capture(self, batch) -> None:
    """Keeps the batch's first rows if none are kept yet. Traced, in the step."""
    if self.unavailable is not None:
      return
    flat = tf.nest.flatten(batch)
    if self._variables is None:
      with tf.init_scope():
        self._make(batch, flat)
      if self._variables is None:
        return
    if not self._fits(batch, flat):
      return  # Another fit's batches of another spec (a retrace): the first sample stays.

    def take():
      first = next(i for i, t in enumerate(flat) if t is not None)
      count = tf.minimum(tf.shape(flat[first])[0], self._variables[first].shape[0])
      for v, t in zip(self._variables, flat):
        if v is not None:
          rows = v.shape[0]
          padded = tf.concat([t[:rows], tf.zeros([rows] + t.shape[1:].as_list(), t.dtype)], 0)
          v.assign(padded[:rows])
      self._rows.assign(count)
      return tf.constant(True)

    tf.cond(self._rows < 0, take, lambda: tf.constant(False))

  def _make(self, batch, flat) -> None:
    """The sample's variables from the batch's (or its spec's) shapes (eager), or `unavailable`
    set."""
    tensors = [t for t in flat if t is not None]
    why = None
    if not tensors:
      why = 'a batch without tensors'
    for t in tensors:
      if (not isinstance(t, (tf.Tensor, tf.TensorSpec)) or t.shape.rank is None
          or t.shape.rank < 1):
        why = 'a batch tensor that is not dense with a batch dimension'
      elif not t.shape[1:].is_fully_defined():
        why = 'a batch tensor with an unknown non-batch dimension'
      elif not (t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool):
        why = f'a batch tensor of {t.dtype.name}'
    if why is not None:
      self.unavailable = why
      return
    rows = lambda t: min(MAX_ROWS, t.shape[0]) if t.shape[0] is not None else MAX_ROWS
    self._structure = tf.nest.map_structure(lambda _: 0, batch)
    self._variables = [
        None if t is None else tf.Variable(tf.zeros([rows(t)] + t.shape[1:].as_list(), t.dtype),
                                           trainable=False, name='first_batch')
        for t in flat]
    self._rows = tf.Variable(-1, dtype=tf.int32, trainable=False, name='first_batch_rows')

  def _fits(self, batch, flat) -> bool:
    """Whether `batch` has the structure, dtypes and row shapes of the kept sample."""
    try:
      tf.nest.assert_same_structure(self._structure, batch)
    except (ValueError, TypeError):
      return False
    return all((v is None) == (t is None) and (
        v is None or (v.dtype == t.dtype and v.shape[1:].is_compatible_with(t.shape[1:])))
               for v, t in zip(self._variables, flat))

  @property
  def variables(self):
    """The sample's variables (none before the first trace)."""
    if self._variables is None:
      return []
    return [v for v in self._variables if v is not None] + [self._rows]

  def value(self) -> Optional[Any]:
    """The kept rows, in the batch's structure (tensors), or None before the first step or
    where no sample is kept. Eager."""
    if self._rows is None:
      return None
    count = int(self._rows.numpy())
    if count < 0:
      return None
    return tf.nest.pack_sequence_as(
        self._structure, [None if v is None else tf.convert_to_tensor(v[:count])
                          for v in self._variables])
