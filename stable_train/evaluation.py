"""`Evaluator`: loss and metrics of a Trainer's model on held-out data, in inference mode."""

from typing import Any, Dict, Optional

import tensorflow as tf

from stable_train import distribute
from stable_train import errors

_ALL = 2**62  # "every batch": the traced loop stops when the data ends.


class Evaluator:
  """One traced evaluation loop over a dataset: `compute_loss(batch, training=False)` and fresh
  copies of the Trainer's metrics, with no state change (no optimizer, no counters; BatchNorm and
  Dropout in inference mode). The loss is the mean of the batch losses.

  Under a distributed strategy each global batch is split across the replicas
  (`experimental_distribute_dataset`); a batch's loss is the replicas' losses weighted by their
  shard sizes (what one device computes on the whole batch, for a mean loss; an empty shard of a
  short last batch weighs nothing), and the metric copies, created in the strategy's scope, sum
  the replicas' counts.
  """

  def __init__(self, trainer):
    """Args: trainer: the `Trainer` whose `forward_loss`, `split_batch` and metrics are used."""
    self._trainer = trainer
    self._distributed = distribute.uses_distributed_input(trainer.strategy)
    # Copies: evaluation never mixes into the training windows.
    with trainer.strategy.scope():
      self.metrics = [type(m).from_config(m.get_config()) for m in trainer.metrics]
    self._loop_fn = tf.function(self._loop)

  def _loop(self, iterator, num_batches):
    """Traced: the summed loss and the number of batches evaluated."""
    total = tf.constant(0.0, tf.float64)
    count = tf.constant(0, tf.int64)
    for _ in tf.range(num_batches):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        break
      total += self._batch_loss(optional.get_value())
      count += 1
    return total, count

  def _batch_loss(self, batch):
    """Traced: one global batch's loss (float64); updates the metrics."""
    if not self._distributed:
      return tf.cast(self._evaluate_batch(batch), tf.float64)
    strategy = self._trainer.strategy
    weighted, size = strategy.run(self._evaluate_shard, (batch,))
    weighted = strategy.reduce(tf.distribute.ReduceOp.SUM, weighted, axis=None)
    size = strategy.reduce(tf.distribute.ReduceOp.SUM, size, axis=None)
    return weighted / size

  def _evaluate_shard(self, batch):
    """Per replica, traced: (its loss x its shard size, its shard size), float64."""
    size = tf.cast(tf.shape(tf.nest.flatten(self._trainer.split_batch(batch)[1])[0])[0],
                   tf.float64)
    # An empty shard (a short last batch) is not run at all: besides a NaN mean loss, TF 2.21's
    # CPU Conv2D returns an empty batch with the input's channels, which breaks the next layer.
    return tf.cond(
        size > 0, lambda: (tf.cast(self._evaluate_batch(batch), tf.float64) * size, size),
        lambda: (tf.constant(0.0, tf.float64), size))

  def _evaluate_batch(self, batch):
    """Traced: one batch's loss; updates the metrics. (Its own method: AutoGraph would make the
    Trainer attributes assigned here loop variables of `_loop`, reading stale tensors.)"""
    t = self._trainer
    loss, predictions, _ = t.forward_loss(batch, training=False)
    if self.metrics:
      labels = t.split_batch(batch)[1]
      for m in self.metrics:
        m.update_state(labels, predictions)
    return loss

  def evaluate(self, dataset: tf.data.Dataset, steps: Optional[int]) -> Dict[str, Any]:
    """Evaluates `steps` batches (None: all) from the start of `dataset`.

    Returns:
      {'loss': the mean batch loss (NaN or Inf as they came), 'batches': n, 'metrics': {name: value}}.
    """
    for m in self.metrics:
      m.reset_state()
    if self._distributed:
      iterator = distribute.distributed_iterator(self._trainer.strategy, dataset)
    else:
      iterator = iter(dataset)
    total, count = self._loop_fn(iterator, tf.constant(steps or _ALL, tf.int64))
    count = int(count.numpy())
    if count == 0:
      raise errors.ConfigError('the eval dataset is empty (not one batch): check '
                               'train.eval_dataset_fn / fit(eval_dataset=...).')
    loss = float(total.numpy()) / count
    return {'loss': loss, 'batches': count, 'metrics': {m.name: float(m.result()) for m in self.metrics}}


def check_eval_args(eval_dataset, eval_every, eval_steps):
  """Validates `fit`'s eval arguments; returns (eval_every, eval_steps)."""
  if eval_dataset is None:
    if eval_every is not None or eval_steps is not None:
      raise errors.ConfigError(
          f'Trainer.fit: eval_every={eval_every!r} / eval_steps={eval_steps!r} need an '
          'eval_dataset.')
    return None, None
  if not isinstance(eval_dataset, tf.data.Dataset):
    raise errors.ConfigError(
        f'Trainer.fit: eval_dataset must be a tf.data.Dataset, got {errors.describe(eval_dataset)}.')
  if eval_every is not None:
    eval_every = errors.check_int('Trainer.fit', 'eval_every', eval_every, minimum=1)
  if eval_steps is not None:
    eval_steps = errors.check_int('Trainer.fit', 'eval_steps', eval_steps, minimum=1)
  elif int(eval_dataset.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
    raise errors.ConfigError(
        'Trainer.fit: eval_dataset repeats forever; set eval_steps (batches per evaluation).')
  return eval_every, eval_steps
