"""`Evaluator`: loss and metrics of a Trainer's model on held-out data, in inference mode."""

import time
from typing import Any, Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from stable_train.core import batch_check
from stable_train.core import labels as labels_lib
from stable_train.core import numerics
from stable_train import errors
from stable_train.runtime import distribute

_ALL = 2**62  # "every batch": the traced loop stops when the data ends.
EVAL_DATA = '; check train.eval_dataset_fn / fit(eval_dataset=...)'  # Ends its refusals.
_CALL_SECONDS = 0.25  # An interruptible evaluation's calls grow until they take about this.


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

  def _loop(self, iterator, num_batches, sums):
    """Traced: `sums` (summed loss, batches evaluated, batches left out) after up to
    `num_batches` more batches (the sums go on from there: the same additions in the same order
    however the evaluation is cut into calls)."""
    total, count, left_out = sums
    for _ in tf.range(num_batches):
      optional = iterator.get_next_as_optional()
      if not optional.has_value():
        break
      loss, evaluated, bad = self._batch_loss(optional.get_value())
      total += loss
      count += tf.cast(evaluated, tf.int64)
      left_out += bad
    return total, count, left_out

  def _batch_loss(self, batch):
    """Traced: one global batch's loss (float64, 0 when not evaluated), whether it was evaluated,
    and how many batches (shards, under a strategy) it left out for a sparse label out of range;
    updates the metrics."""
    if not self._distributed:
      batch, ok = self._checked(batch)
      if ok is None:
        return (tf.cast(self._evaluate_batch(batch), tf.float64), tf.constant(True),
                tf.constant(0, tf.int64))
      loss = tf.cond(ok, lambda: tf.cast(self._evaluate_batch(batch), tf.float64),
                     lambda: tf.constant(0.0, tf.float64))
      return loss, ok, 1 - tf.cast(ok, tf.int64)
    strategy = self._trainer.strategy
    weighted, size, bad = strategy.run(self._evaluate_shard, (batch,))
    weighted, size, bad = (strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                           for v in (weighted, size, bad))
    return tf.math.divide_no_nan(weighted, size), size > 0, bad

  def _evaluate_shard(self, batch):
    """Per replica, traced: (its loss x its shard size, its shard size, 1 if it was left out),
    the size 0 for a shard left out."""
    batch, ok = self._checked(batch)
    ok = tf.constant(True) if ok is None else ok
    size = tf.cast(tf.shape(tf.nest.flatten(self._trainer.split_batch(batch)[1])[0])[0],
                   tf.float64) * tf.cast(ok, tf.float64)
    # An empty shard (a short last batch) is not run at all: besides a NaN mean loss, TF 2.21's
    # CPU Conv2D returns an empty batch with the input's channels, which breaks the next layer.
    weighted = tf.cond(size > 0, lambda: tf.cast(self._evaluate_batch(batch), tf.float64) * size,
                       lambda: tf.constant(0.0, tf.float64))
    return weighted, size, 1 - tf.cast(ok, tf.int64)

  def _checked(self, batch):
    """Traced: (the batch with safe labels, whether it may be evaluated: its sparse labels in
    range, as the train step checks them (`Trainer.label_classes`), and every floating input
    finite and below a fill's size (`numerics.input_ok`); None: not checked, for a bare step). One bad row does not end a run: a NaN input
    would make the evaluation non-finite, a divergence fault, with the model as good as before."""
    t = self._trainer
    if not t.policies:
      return batch, None
    floats = [v for v in tf.nest.flatten(t.split_batch(batch)) if v.dtype.is_floating]
    ok = tf.reduce_all(tf.stack([numerics.input_ok(v) for v in floats] or [tf.constant(True)]))
    classes = t.label_classes
    if classes is None:
      return batch, ok
    labels = t.split_batch(batch)[1]
    return (labels_lib.replace_labels(batch, labels, labels_lib.safe(labels, classes)),
            tf.logical_and(ok, labels_lib.in_range(labels, classes)))

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

  def evaluate(self, dataset: tf.data.Dataset, steps: Optional[int],
               stop: Optional[Callable[[], bool]] = None) -> Optional[Dict[str, Any]]:
    """Evaluates `steps` batches (None: all) from the start of `dataset`.

    Args:
      dataset, steps: the eval data and the batches per evaluation.
      stop: () -> whether to give the evaluation up (a signal came); asked between calls of the
        traced loop, which take up to about `_CALL_SECONDS` each. None: one call. Not under a
        multi-worker strategy, whose workers must make the same calls.

    Returns:
      {'loss': the mean batch loss (NaN or Inf as they came), 'batches': n, 'metrics': {name:
      value}, and 'left_out': n for batches with a sparse label out of range or a non-finite
      input (not evaluated)},
      or None when `stop` said so.
    """
    sums = self._sums(dataset, steps, stop)
    if sums is None:
      return None
    total, count, left_out = float(sums[0]), int(sums[1]), int(sums[2])
    if count == 0:
      if not left_out:
        raise _empty()
      classes = self._trainer.label_classes
      raise errors.ConfigError(
          f'every eval batch ({left_out}) has '
          + (f'a label outside [0, {classes}) (the model\'s classes) or '
             if classes is not None else '') + 'a non-finite or fill-sized (|x| >= 1e30) input: check '
          'train.eval_dataset_fn / fit(eval_dataset=...).')
    result = {'loss': total / count, 'batches': count,
              'metrics': {m.name: float(m.result()) for m in self.metrics}}
    if left_out:
      result['left_out'] = left_out
    return result

  def _sums(self, dataset, steps, stop):
    """(summed loss, batches evaluated, batches left out) as numpy values, or None (stopped).

    The forward state is put back after it: a Keras layer that draws a seed in inference mode
    too (an LSTM's dropout) advances its seed generator on every eval batch, which would change
    the training after an evaluation."""
    kept = [(v, v.numpy()) for v in self._trainer.forward_state()]
    try:
      return self._sums_of(dataset, steps, stop)
    finally:
      for v, value in kept:
        if not np.array_equal(v.numpy(), value):
          v.assign(value)

  def _sums_of(self, dataset, steps, stop):
    for m in self.metrics:
      m.reset_state()
    if self._distributed:
      iterator = distribute.distributed_iterator(self._trainer.strategy, dataset)
    else:
      iterator = iter(dataset)
    if distribute.task_of(self._trainer.strategy)[0] is not None:
      stop = None
    sums = (tf.constant(0.0, tf.float64), tf.constant(0, tf.int64), tf.constant(0, tf.int64))
    left = steps or _ALL
    size = left if stop is None else 1  # Batches per call: doubled while calls are short.
    while left > 0:
      started, before = time.perf_counter(), int(sums[1].numpy() + sums[2].numpy())
      sums = self._loop_fn(iterator, tf.constant(min(size, left), tf.int64), sums)
      done = int(sums[1].numpy() + sums[2].numpy()) - before
      left = 0 if done < min(size, left) else left - done  # Fewer: the data ended.
      if left and stop is not None and stop():
        return None
      if time.perf_counter() - started < _CALL_SECONDS:
        size = min(size * 2, left or 1)
    return tuple(v.numpy() for v in sums)

  def check(self, dataset: tf.data.Dataset) -> None:
    """Checks `dataset` as the training data is checked (`batch_check`: batches, features and
    labels the model and its loss take), then evaluates one batch of it, before training: eval
    data that cannot work (empty, or elements the model cannot take) is a one-line ConfigError
    naming it now, not at the first evaluation after training and checkpoints. Changes nothing
    (an evaluation)."""
    t = self._trainer
    try:  # The training data's check first (labels that would broadcast: a finite, wrong loss).
      check = batch_check.for_trainer(t, dataset.element_spec, subject='the eval dataset',
                                      where=EVAL_DATA)
    except (ValueError, TypeError) as e:  # Elements `split_batch` cannot split.
      raise _unfit(dataset, e) from None
    if check is not None:
      check.check(t.model, batch_check.trainer_loss(t))
    try:
      sums = self._sums(dataset, 1, None)
    except (ValueError, TypeError, tf.errors.OpError) as e:
      raise _unfit(dataset, e) from None
    if int(sums[1]) + int(sums[2]) == 0:  # A first batch left out for a bad row is no error.
      raise _empty()


def _unfit(dataset, error) -> errors.ConfigError:
  return errors.ConfigError(
      f'the eval dataset (elements {batch_check.describe(dataset.element_spec)}) does not fit the '
      f'model: {errors.one_line(error)[:300]}{EVAL_DATA}.')


def _empty() -> errors.ConfigError:
  return errors.ConfigError('the eval dataset is empty (not one batch): check '
                            'train.eval_dataset_fn / fit(eval_dataset=...).')


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
