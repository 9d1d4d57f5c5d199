"""Inference from a training run: restore a checkpoint into a fresh model, export it atomically."""

import gc
import logging
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from stable_train.app import commands
from stable_train import errors
from stable_train.runfiles import events as events_lib
from stable_train.runfiles import manifest as manifest_lib

CHECKPOINT_CHOICES = ('last_good', 'latest', 'best')
FORMATS = ('keras', 'saved_model')
# File names under `<model_dir>/export/` for each format.
DEFAULT_NAMES = {'keras': 'model.keras', 'saved_model': 'saved_model'}


def _manifest_entries(model_dir: str) -> Tuple[List[manifest_lib.Entry], set]:
  """The manifest's entries, oldest first, and the listing of the checkpoint directory
  (read-only: never writes)."""
  if not os.path.isdir(model_dir):
    raise errors.CheckpointError(
        f'model_dir {model_dir!r} does not exist; pass the --model_dir of a training run.')
  directory = os.path.join(model_dir, 'checkpoints')
  path = os.path.join(directory, manifest_lib.MANIFEST)
  if not os.path.isfile(path):
    raise errors.CheckpointError(
        f'{path} not found: {model_dir!r} holds no committed checkpoint; train there first or '
        'pass the model_dir of a run that wrote checkpoints.')
  return manifest_lib.read_entries(path, 'restore it from a backup.'), set(os.listdir(directory))


def choose_checkpoint(model_dir: str, checkpoint: str = 'last_good', *,
                      option: str = 'checkpoint={!r}') -> Tuple[str, str]:
  """A run's committed checkpoint of the kind asked for, and what it is.

  Args:
    model_dir: the run's `--model_dir`.
    checkpoint: 'last_good' (the newest checkpoint written while the run was healthy), 'latest'
      (the newest committed one, good or not) or 'best' (the one marked `best` in the manifest:
      the best evaluation of a run with an EarlyStopping or BestCheckpoint policy; when none is
      marked, 'last_good', with a warning and a note saying so).
    option: how the caller spells the choice, for the advice in errors: 'checkpoint={!r}' (this
      function's argument), '--checkpoint={}' (scripts/export.py), ...

  Returns:
    (the checkpoint prefix, e.g. `<model_dir>/checkpoints/ckpt-3`; a description, e.g.
    'best (step 400)' or 'last_good (step 900): no checkpoint is marked best').

  Raises:
    CheckpointError: the directory, its manifest or a checkpoint of that kind is missing (a best
      checkpoint whose files are gone included).
  """
  if checkpoint not in CHECKPOINT_CHOICES:
    raise errors.ConfigError(f'checkpoint={checkpoint!r} must be one of {CHECKPOINT_CHOICES} '
                             'or a checkpoint path.')
  entries, names = _manifest_entries(model_dir)
  directory = os.path.join(model_dir, 'checkpoints')
  present = [e for e in entries if manifest_lib.files_present(e, names)]
  best = [e for e in entries if e.best]
  if checkpoint == 'best' and best and best[-1] not in present:
    raise errors.CheckpointError(
        f'the best checkpoint of {model_dir!r} ({best[-1].path}, step {best[-1].step}) is marked '
        f'in its manifest but its files are gone from {directory}; restore them, or use '
        f'{option.format("last_good")} or {option.format("latest")}.')
  if not present:
    raise errors.CheckpointError(
        f'{model_dir!r} has no committed checkpoint with its files present; train there first.')
  good = [e for e in present if e.good]
  prefix = lambda e: os.path.join(directory, e.path)
  if checkpoint == 'latest':
    return prefix(present[-1]), f'latest (step {present[-1].step})'
  if checkpoint == 'best' and best:
    return prefix(best[-1]), f'best (step {best[-1].step})'
  if not good:
    raise errors.CheckpointError(
        f'{model_dir!r} has no checkpoint marked good (newest: step {present[-1].step})'
        + (' and none marked best' if checkpoint == 'best' else '')
        + f'; use {option.format("latest")} to take it anyway.')
  description = f'last_good (step {good[-1].step})'
  if checkpoint == 'best':
    description += (': no checkpoint is marked best (the run had no EarlyStopping or '
                    'BestCheckpoint policy, or no evaluation)')
  return prefix(good[-1]), description


def checkpoint_path(model_dir: str, checkpoint: str = 'last_good') -> str:
  """The prefix of a run's committed checkpoint (see `choose_checkpoint`)."""
  return choose_checkpoint(model_dir, checkpoint)[0]


def _check_keras_model(model) -> None:
  if not isinstance(model, keras.Model):
    raise errors.ConfigError(
        f'model is a {type(model).__name__}, not a keras.Model; export and load_for_inference '
        'handle Keras models (save a tf.Module with tf.saved_model.save).')


def _build(model: keras.Model, sample_input, input_shape) -> None:
  if sample_input is not None:
    model(sample_input, training=False)
  elif input_shape is not None:
    model.build(tuple(input_shape))
  if not model.built:
    raise errors.ConfigError(
        f'model {model.name!r} is not built; pass sample_input= (a batch of features) or '
        'input_shape= (with the batch dimension, e.g. (None, 32)).')


def checkpoint_prefix(model_dir: Optional[str], checkpoint: str) -> str:
  """The checkpoint prefix `load_for_inference` reads: a run's checkpoint of that kind, a path,
  or a name in the run's checkpoints folder (`ckpt-3`)."""
  if checkpoint in CHECKPOINT_CHOICES:
    if model_dir is None:
      raise errors.ConfigError(f'checkpoint={checkpoint!r} needs model_dir.')
    prefix, description = choose_checkpoint(model_dir, checkpoint)
    if checkpoint == 'best' and not description.startswith('best'):
      logging.getLogger('stable_train').warning('%s: restoring %s', model_dir, description)
    return prefix
  in_run = os.path.join(model_dir, 'checkpoints', checkpoint) if model_dir else None
  if (in_run is not None and not tf.io.gfile.exists(checkpoint + '.index')
      and tf.io.gfile.exists(in_run + '.index')):
    return in_run  # A name as the export line gives it (ckpt-3), in the run's checkpoints.
  if not tf.io.gfile.exists(checkpoint + '.index'):
    raise errors.CheckpointError(
        f'checkpoint {checkpoint!r} not found (no {checkpoint}.index); pass a prefix such as '
        f"<model_dir>/checkpoints/ckpt-3, or one of {CHECKPOINT_CHOICES} with model_dir.")
  return checkpoint


def load_for_inference(model: keras.Model, model_dir: Optional[str] = None, *,
                       checkpoint: str = 'last_good', sample_input=None,
                       input_shape: Optional[Sequence[Optional[int]]] = None) -> keras.Model:
  """Restores a training checkpoint's weights into `model`, ready for inference.

  Only the model's variables are read — its weights and its non-trainable state (BatchNorm moving
  statistics, dropout seed states), under the same `model=` / `model_state=` keys the Trainer
  writes — so `model` need not have an optimizer, and everything else in the checkpoint (optimizer
  slots, counters, policy state) is left unread.

  Args:
    model: a freshly built model of the same architecture (e.g. from the run's config). An unbuilt
      model is built from `sample_input` or `input_shape`.
    model_dir: the run's `--model_dir` (not needed when `checkpoint` is a path).
    checkpoint: 'last_good', 'latest', 'best' (see `choose_checkpoint`; 'best' falls back to
      'last_good' when no checkpoint is marked best), or a checkpoint prefix path.
    sample_input: a batch of features to build an unbuilt model with.
    input_shape: an input shape (with batch dimension) to build an unbuilt model with.

  Returns:
    `model`, its variables restored.

  Raises:
    CheckpointError: no such directory or checkpoint, or the checkpoint does not fit `model`.
    ConfigError: a bad `checkpoint` name, or an unbuilt model without a way to build it.
  """
  _check_keras_model(model)
  prefix = checkpoint_prefix(model_dir, checkpoint)
  if not model.built:
    _build(model, sample_input, input_shape)
  # The keys Trainer.model_checkpoint() writes: `model_state` also reaches the seed-generator
  # states, which Keras models do not track.
  reader = tf.train.Checkpoint(model=model,
                               model_state=[v for v in model.variables if not v.trainable])
  failure = None
  try:
    status = reader.read(prefix)
    status.expect_partial()  # The optimizer, counters and policy state are not wanted here.
    status.assert_existing_objects_matched()
  except (tf.errors.OpError, ValueError, AssertionError) as e:
    failure = (f'checkpoint {prefix} does not fit model {model.name!r} '
               f'({str(e).strip().splitlines()[0][:200]}); build the model from the run\'s '
               'operative_config.gin (the model may be partly restored).')
  if failure is None:
    return model
  # A read that failed midway never reached expect_partial(): its pending restore would log a
  # screenful of "Value in checkpoint could not be found" warnings when collected.
  logger = tf.get_logger()
  level = logger.level
  logger.setLevel(logging.ERROR)
  try:
    del reader
    gc.collect()
  finally:
    logger.setLevel(level)
  raise errors.CheckpointError(failure)


def _inference_copy(model: keras.Model) -> keras.Model:
  """`model` itself when it carries no optimizer; else a clone with the same weights, so the
  training optimizer (its slots and schedule) is not saved with it."""
  if not getattr(model, 'compiled', False) and getattr(model, 'optimizer', None) is None:
    return model
  try:
    # `keras.models.clone_model` compiles the clone again (with the optimizer); from_config
    # builds the architecture alone.
    clone = type(model).from_config(model.get_config())
  except Exception as e:  # pylint: disable=broad-except  (subclassed models without get_config)
    raise errors.ConfigError(
        f'model {model.name!r} is compiled and cannot be rebuilt from its config ({e}); '
        'export an uncompiled model (e.g. from load_for_inference).') from None
  clone.set_weights(model.get_weights())
  return clone


def export(model: keras.Model, path: str, *,
           format: str = 'keras') -> str:  # pylint: disable=redefined-builtin
  """Writes `model` for inference, atomically (a temporary file or folder, then a rename).

  The file holds no training optimizer, so it loads with plain Keras/TensorFlow, without
  stable_train: `keras.saving.load_model(path)` for 'keras'; `tf.saved_model.load(path).serve(x)`
  (or `keras.layers.TFSMLayer(path)`) for 'saved_model', whose `serve` endpoint runs the model in
  inference mode (BatchNorm with its moving statistics).

  Args:
    model: a built model.
    path: where to write: a file ending in `.keras`, or a SavedModel folder. An existing one is
      replaced.
    format: 'keras' or 'saved_model'.

  Returns:
    `path`.

  Raises:
    ConfigError: a bad format or path.
  """
  if format not in FORMATS:
    raise errors.ConfigError(f'format={format!r} must be one of {FORMATS}.')
  _check_keras_model(model)
  if format == 'keras' and not path.endswith('.keras'):
    raise errors.ConfigError(f'path={path!r} must end in .keras for format=\'keras\'.')
  if not model.built:
    raise errors.ConfigError(f'model {model.name!r} is not built; call it on a batch first.')
  model = _inference_copy(model)
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  (_write_keras if format == 'keras' else _write_saved_model)(model, path, parent)
  return path


def _write_keras(model: keras.Model, path: str, parent: str) -> None:
  """Saves a temporary `.keras` file in `parent`, then renames it to `path`."""
  fd, temp = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.', suffix='.tmp.keras',
                              dir=parent)
  os.close(fd)
  try:
    model.save(temp)
    os.chmod(temp, events_lib.default_file_mode())  # mkstemp made it 0600.
    os.replace(temp, path)  # The commit point.
  except BaseException:
    if os.path.exists(temp):
      os.remove(temp)
    raise


def _write_saved_model(model: keras.Model, path: str, parent: str) -> None:
  """Exports into a temporary folder in `parent`, then swaps it in for `path`: interrupted at
  any point, `path` holds the previous export (or none) or the new one, whole."""
  name = os.path.basename(path)
  temp = events_lib.make_temp_dir(f'.{name}.', parent, suffix='.tmp')
  old = None
  try:
    model.export(temp, format='tf_saved_model', verbose=False)
    if os.path.isdir(path):  # A folder cannot be replaced by rename: move the old one aside.
      old = tempfile.mkdtemp(prefix=f'.{name}.', suffix='.old', dir=parent)
      os.rmdir(old)
      os.rename(path, old)
    os.rename(temp, path)  # The commit point.
  except BaseException:  # A full disk, a signal: the previous export stays where it was.
    if old is not None and not os.path.exists(path):
      os.rename(old, path)
      old = None
    shutil.rmtree(temp, ignore_errors=True)
    raise
  finally:
    if old is not None:
      shutil.rmtree(old, ignore_errors=True)


def model_from_config(gin_files: Sequence[str], gin_params: Sequence[str] = ()) -> keras.Model:
  """Builds the model a run's gin configuration describes (`Trainer.model`), untrained.

  The Trainer is built from the bindings (as in the run, on the default strategy, without a
  model_dir) and its model returned; `train.*` bindings (the CLI's root) are ignored. The global
  gin configuration is cleared and replaced by these files' bindings.

  Args:
    gin_files: gin files, e.g. `[<model_dir>/operative_config.gin]`.
    gin_params: extra bindings.

  Returns:
    The model, built (weights as initialised).

  Raises:
    ConfigError: a missing gin file or a configuration that does not build.
  """
  import gin  # pylint: disable=g-import-not-at-top
  from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
  from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  for path in gin_files:
    if not os.path.isfile(path):
      raise errors.ConfigError(f'gin file not found: {path!r}; check the --gin_file path.')
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings(list(gin_files), list(gin_params), skip_unknown=['train'])
    return trainer_lib.Trainer(model_dir=None).model
  except errors.ConfigError:
    raise
  except Exception as e:  # pylint: disable=broad-except  (gin wraps what the factories raise)
    raise errors.ConfigError(
        f'cannot build the model from {list(gin_files)}: {str(e).strip().splitlines()[0][:200]}'
        f'{commands.faults_hint(e)}') from None
