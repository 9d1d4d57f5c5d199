"""The job the CLI runs: the root configurable `train` builds the strategy, the Trainer and the
datasets from gin, runs `fit` and exports the model. TensorFlow is imported only when it runs, so
the CLI takes the signals first."""

import contextlib
import os
from typing import Callable, Optional

import gin

from stable_train.runtime import signals


@gin.configurable('train', denylist=['model_dir'])
def train(*, model_dir: str, num_steps: Optional[int] = None, num_epochs: Optional[int] = None,
          dataset_fn: Optional[Callable] = None, trainer_fn: Optional[Callable] = None,
          strategy_fn: Optional[Callable] = None, precision: str = 'float32',
          seed: Optional[int] = None, export_format: Optional[str] = None,
          export_checkpoint: str = 'last_good',
          eval_dataset_fn: Optional[Callable] = None, eval_every: Optional[int] = None,
          eval_steps: Optional[int] = None):
  """The root configurable: builds the strategy, the trainer and the dataset, then trains.

  Args:
    model_dir: where the run keeps its files (from --model_dir).
    num_steps: the global step to train to (this or num_epochs is required).
    num_epochs: instead of num_steps: passes over the finite dataset (`dataset_fn` without
      repeat); one epoch is its cardinality in batches, or counted by reading it once.
    dataset_fn: gin reference to a function returning a `tf.data.Dataset`.
    trainer_fn: gin reference to a Trainer class or factory, called as trainer_fn(model_dir=...,
      strategy=...); everything else comes from its own bindings. Default: `@Trainer`.
    strategy_fn: gin reference to a function returning a `tf.distribute.Strategy`; default: the
      default strategy (one device).
    precision: 'float32', 'mixed_float16' (dynamic loss scaling added), 'mixed_bfloat16' or
      'float64'; set before the model is built, and put back afterwards.
    seed: seeds Python's, numpy's and TensorFlow's random generators
      (`keras.utils.set_random_seed`) before anything is built, so a model factory that does not
      seed itself (`mlp.seed = None`) initialises the same way on a rerun of operative_config.gin.
      None: not seeded.
    export_format: None, 'keras' or 'saved_model': once the run has ended normally (completed,
      stopped early, or its data exhausted), the `export_checkpoint` checkpoint is exported to
      `<model_dir>/export/model.keras` or `<model_dir>/export/saved_model` (chief only),
      loadable without stable_train.
    export_checkpoint: which checkpoint the end-of-run export takes: 'last_good', 'best' (the
      best evaluation, marked by an EarlyStopping or BestCheckpoint policy; last_good, with a
      warning, when none is marked) or 'latest'.
    eval_dataset_fn: gin reference to a function returning the held-out `tf.data.Dataset`;
      None: no evaluation.
    eval_every: evaluate every this many steps (and at the end); None: only at the end.
    eval_steps: batches per evaluation; None: the whole eval dataset.

  Returns:
    The run summary.
  """
  length = _check_length(num_steps, num_epochs)
  _check_choices(seed, export_format, export_checkpoint, dataset_fn)
  import keras  # pylint: disable=g-import-not-at-top
  from stable_train.policies import precision as precision_lib  # pylint: disable=g-import-not-at-top
  previous = (keras.config.floatx(), keras.mixed_precision.global_policy())
  precision_lib.set_precision(precision)
  if seed is not None:
    keras.utils.set_random_seed(seed)  # Before the strategy, the model and the dataset.
  try:
    return _train(model_dir, length, dataset_fn, trainer_fn, strategy_fn,
                  (export_format, export_checkpoint), eval_dataset_fn, eval_every, eval_steps)
  finally:  # In-process callers (tests, notebooks) get their precision back.
    keras.config.set_floatx(previous[0])
    keras.mixed_precision.set_global_policy(previous[1])


def _check_length(num_steps, num_epochs):
  """{'num_steps': n} or {'num_epochs': n}: exactly one of them, a positive integer."""
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  if num_steps is None and num_epochs is None:
    raise errors.ConfigError(
        'train.num_steps is not set; add `train.num_steps = 1000` (or `train.num_epochs = 3` for '
        "a finite dataset) to a gin file or --gin_param='train.num_steps=1000'.")
  if num_steps is not None and num_epochs is not None:
    raise errors.ConfigError(
        f'train.num_steps={num_steps!r} and train.num_epochs={num_epochs!r} are both set; keep '
        'one.')
  if num_epochs is not None:
    return {'num_epochs': errors.check_int('train', 'num_epochs', num_epochs, minimum=1)}
  return {'num_steps': errors.check_int('train', 'num_steps', num_steps, minimum=1)}


def _check_choices(seed, export_format, export_checkpoint, dataset_fn) -> None:
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  if seed is not None:
    errors.check_int('train', 'seed', seed, minimum=0)
  if export_format not in (None, 'keras', 'saved_model'):
    raise errors.ConfigError(f"train.export_format={export_format!r} must be None, 'keras' or "
                             "'saved_model'.")
  if export_checkpoint not in ('last_good', 'best', 'latest'):
    raise errors.ConfigError(f"train.export_checkpoint={export_checkpoint!r} must be "
                             "'last_good', 'best' or 'latest'.")
  if dataset_fn is None:
    raise errors.ConfigError(
        'train.dataset_fn is not set; bind it, e.g. `train.dataset_fn = @synthetic_regression`.')


def _train(model_dir, length, dataset_fn, trainer_fn, strategy_fn, export,
           eval_dataset_fn=None, eval_every=None, eval_steps=None):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from stable_train import errors  # pylint: disable=g-import-not-at-top
  from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from stable_train.runtime import distribute  # pylint: disable=g-import-not-at-top
  from stable_train.runfiles import runlock  # pylint: disable=g-import-not-at-top
  strategy = strategy_fn() if strategy_fn is not None else tf.distribute.get_strategy()
  chief = distribute.is_chief(strategy)  # Only the chief writes files (multi-worker runs).
  # Held before the model and the data are built, so a busy model_dir is refused at once (fit
  # holds the same lock for its run).
  with runlock.hold(model_dir) if chief else contextlib.nullcontext():
    with strategy.scope():
      trainer = (trainer_fn or trainer_lib.Trainer)(model_dir=model_dir, strategy=strategy)
    dataset = dataset_fn()
    if not isinstance(dataset, tf.data.Dataset):
      raise errors.ConfigError(
          f'train.dataset_fn returned {type(dataset).__name__}, not a tf.data.Dataset.')
    eval_dataset = eval_dataset_fn() if eval_dataset_fn is not None else None
    if eval_dataset is not None and not isinstance(eval_dataset, tf.data.Dataset):
      raise errors.ConfigError(
          f'train.eval_dataset_fn returned {type(eval_dataset).__name__}, not a tf.data.Dataset.')
    if chief:
      write_operative_config(model_dir)
    try:
      summary = trainer.fit(dataset, **length, eval_dataset=eval_dataset,
                            eval_every=eval_every, eval_steps=eval_steps)
      signals.SIGNALS.stop_raising()  # Training ran: from here on a signal is only recorded.
    except signals.StartupInterrupted:
      # The process's first signal, outside training. After fit wrote its summary (the signal
      # came as fit returned) the run is over and stands; before, nothing trained.
      signals.SIGNALS.stop_raising()
      if not trainer.last_summary:
        raise
      summary = trainer.last_summary
    if chief:
      write_operative_config(model_dir)
    if summary.get('note') == 'dataset empty':
      raise errors.ConfigError(trainer_lib.EMPTY_DATASET)
    from stable_train.core import outcome  # pylint: disable=g-import-not-at-top
    if chief and export[0] and summary.get('status') in outcome.FINISHED:
      summary['export'], summary['export_checkpoint'] = _export(trainer, model_dir, *export)
  return summary


def _export(trainer, model_dir: str, export_format: str, checkpoint: str):
  """Restores the run's `checkpoint` ('last_good', 'best' or 'latest') into the trainer's model
  (the run is over) and exports it to `<model_dir>/export/`; returns (the path written, which
  checkpoint it holds, e.g. 'best (step 400)')."""
  from stable_train.app import export  # pylint: disable=g-import-not-at-top
  _, described = export.choose_checkpoint(model_dir, checkpoint,
                                          option='train.export_checkpoint = {!r}')
  export.load_for_inference(trainer.model, model_dir, checkpoint=checkpoint)
  path = os.path.join(model_dir, 'export', export.DEFAULT_NAMES[export_format])
  return export.export(trainer.model, path, format=export_format), described


def write_operative_config(model_dir: str) -> None:
  """Writes every binding the run uses to `<model_dir>/operative_config.gin`, atomically."""
  from stable_train.runfiles import events  # pylint: disable=g-import-not-at-top
  events.write_atomic(os.path.join(model_dir, 'operative_config.gin'), gin.operative_config_str())
