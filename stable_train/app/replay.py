"""Replays a forensics record: rebuilds the model from gin, restores the saved state and batch,
re-runs the faulty step and reports whether (and where) the non-finite result comes back."""

import dataclasses
import json
import os
from typing import Any, Dict, Optional, Sequence

import gin
import keras
import tensorflow as tf

from stable_train.app import commands
from stable_train.core import interfaces
from stable_train.core import labels as labels_lib
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.forensics import provenance
from stable_train.forensics import report as forensics_report


class ReplayError(errors.ConfigError):
  """The record, the gin configuration or the checkpoint cannot be used for a replay."""


@dataclasses.dataclass(frozen=True)
class ReplayResult:
  """What a replay found."""
  reproduced: bool  # The re-run was non-finite again (or the batch failed the input checks).
  same_op: Optional[bool]  # The op-level provenance names the recorded op (None: nothing to compare).
  report: Dict[str, Any]  # The new report (same fields as report.json).
  recorded: Dict[str, Any]  # The recorded report.json.

  def text(self) -> str:
    lines = [provenance.format_report(self.report).rstrip()]
    rec = self.recorded
    rec_op = rec.get('op_level') or {}
    lines.append(f"Recorded: {rec.get('fault')} fault at step {rec.get('step')}, first op "
                 f"{rec_op.get('op_type')} {rec_op.get('op_name')} (layer {rec_op.get('layer')})")
    if self.reproduced:
      same = {True: 'same op', False: 'a different op', None: 'op not compared'}[self.same_op]
      lines.append(f'REPRODUCED: the re-run is non-finite again ({same}).')
    else:
      lines.append('NOT REPRODUCED: the re-run on the saved batch and state is finite.')
    return '\n'.join(lines) + '\n'


def parse_gin(forensics_dir: str, recorded: Dict[str, Any], gin_files: Sequence[str] = (),
              gin_params: Sequence[str] = ()) -> None:
  """Parses the run's operative_config.gin (or `gin_files`) and `gin_params`.

  `train.*` bindings (the CLI's root configurable) are skipped: a replay builds only the Trainer.
  """
  from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
  files = list(gin_files)
  if not files:
    model_dir = recorded.get('model_dir') or os.path.dirname(os.path.dirname(
        os.path.abspath(forensics_dir)))
    operative = os.path.join(model_dir, 'operative_config.gin')
    if not os.path.isfile(operative):
      operative = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(forensics_dir))),
                               'operative_config.gin')
    if not os.path.isfile(operative):
      raise ReplayError(f'no operative_config.gin for this record (looked in {model_dir}); '
                        'pass the run\'s --gin_file.')
    files = [operative]
  for path in files:
    if not os.path.isfile(path):
      raise ReplayError(f'gin file not found: {path!r}.')
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings(files, gin_params, skip_unknown=['train'])
  except (ValueError, KeyError, TypeError, SyntaxError) as e:
    raise ReplayError(f'bad gin configuration: {str(e).strip().splitlines()[0]}'
                      f'{commands.faults_hint(e)}') from e


def restore_trainer(trainer, forensics_dir: str, batch, recorded: Dict[str, Any]) -> None:
  """Builds `trainer`'s model and optimizer on `batch` and restores the record's checkpoint."""
  features, _ = trainer.split_batch(batch)
  if isinstance(trainer.model, keras.Model) and not trainer.model.built:
    trainer.model(features, training=False)
  trainer.optimizer.build(trainer.model.trainable_variables)
  # The step's own label check, as in the run: a label out of range must not crash the re-run.
  trainer.label_classes = labels_lib.trainer_classes(
      trainer, tf.nest.map_structure(tf.TensorSpec.from_tensor, batch))
  prefix = os.path.join(forensics_dir, recorded.get('checkpoint', forensics.CHECKPOINT_PREFIX))
  try:
    status = trainer.model_checkpoint().read(prefix)
    status.assert_existing_objects_matched()
  except (tf.errors.OpError, ValueError, AssertionError) as e:
    raise ReplayError(f'the checkpoint {prefix} does not fit the model built from this gin '
                      f'configuration: {str(e).strip().splitlines()[0][:300]}') from e
  rng_path = os.path.join(forensics_dir, forensics.RNG_JSON)
  if os.path.isfile(rng_path):
    with open(rng_path) as f:
      state = json.load(f).get('tf_global_generator')
    if state is not None:
      generator = tf.random.get_global_generator()
      generator.reset(tf.constant(state, generator.state.dtype))


def replay(forensics_dir: str, *, trainer=None, gin_files: Sequence[str] = (),
           gin_params: Sequence[str] = ()) -> ReplayResult:
  """Reproduces a recorded non-finite step.

  Args:
    forensics_dir: a `<model_dir>/forensics/step_<N>` folder.
    trainer: a Trainer to replay with (its model unbuilt, or built to the same shapes); None
      builds one from the run's operative_config.gin or `gin_files` plus `gin_params`.
    gin_files: gin files to use instead of the run's operative_config.gin.
    gin_params: extra gin bindings.

  Raises:
    ReplayError: the folder is not a forensics record, or the config does not fit the checkpoint.
  """
  if not os.path.isfile(os.path.join(forensics_dir, forensics.REPORT_JSON)):
    raise ReplayError(f'{forensics_dir!r} is not a forensics record (no {forensics.REPORT_JSON}).')
  try:
    recorded, batch = forensics.read_record(forensics_dir)
    batch = tf.nest.map_structure(tf.convert_to_tensor, batch)
  except Exception as e:  # pylint: disable=broad-except  (JSON, npz, structure: not its form)
    raise ReplayError(f'{forensics_dir!r} is not a readable forensics record '
                      f'({errors.one_line(e)[:200]}); replay a record as Forensics wrote it.'
                      ) from None
  if trainer is None:
    from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    parse_gin(forensics_dir, recorded, gin_files, gin_params)
    try:
      trainer = trainer_lib.Trainer(model_dir=None)
    except TypeError as e:
      raise ReplayError(f'cannot build the Trainer from the gin configuration: {e}') from e
  restore_trainer(trainer, forensics_dir, batch, recorded)
  again = provenance.rerun(trainer, batch)
  features, labels = trainer.split_batch(batch)
  paths = [provenance.variable_path(v) for v in trainer.model.trainable_variables]
  observed = provenance.observed_from_rerun(again, paths, interfaces.input_paths(features, labels))
  report = forensics_report.build_report(trainer, batch, step=recorded['step'], observed=observed,
                                  again=again)
  report.update(state='restored from the record', checkpoint=recorded.get('checkpoint'),
                last_good_checkpoint=recorded.get('last_good_checkpoint'))
  rec_op, new_op = recorded.get('op_level') or {}, report['op_level']
  same_op = None
  if rec_op.get('found') and new_op.get('found'):
    same_op = (rec_op['op_type'], rec_op['layer']) == (new_op['op_type'], new_op['layer'])
  return ReplayResult(reproduced=not again.finite, same_op=same_op, report=report,
                      recorded=recorded)

