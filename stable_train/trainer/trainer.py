"""The Trainer: the model parts and settings of a run, its overridable hooks, and `fit`."""

import logging
import os
from typing import Any, Dict, List, Optional, Sequence

import keras
import tensorflow as tf

from stable_train.core import keras_parts
from stable_train.core import lr as lr_lib
from stable_train.core import numerics
from stable_train.core import state as state_lib
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.runfiles import events as events_lib
from stable_train.runtime import controller as controller_lib
from stable_train.runtime import distribute
from stable_train.runtime import options as options_lib
from stable_train.runtime import seams
from stable_train.trainer import run_access
from stable_train.trainer import step_access
from stable_train.trainer import setup

log = logging.getLogger('stable_train')

# The public names of the set-up helpers (stable_train.default_policies, ...).
EMPTY_DATASET = setup.EMPTY_DATASET
default_policies = setup.default_policies
random_state_variables = state_lib.random_state_variables
show_progress = setup.show_progress
steps_per_epoch = setup.steps_per_epoch


class Trainer(step_access.StepAccess, run_access.RunAccess):
  """Trains a model with a traced GradientTape step guarded by policies; keeps going past NaN.

  Meant to be overridden (all optional):
    - traced, inside the step's `tf.function`: `compute_loss(batch, training)` (the scalar loss
      of one per-replica batch), `forward(features, training)`, `split_batch(batch)`,
      `apply_gradients(grads)`;
    - eager, on the host: `on_loop_end(reports)` after each loop, `on_event(record)` with each
      events.jsonl record, `save_checkpoint(reason)` for every checkpoint the run writes and
      `restore_latest(candidates)` for every restore (call `super()` to do it).
  The run itself is `controller.Controller` (`trainer.controller`); the checkpointed counters are
  `trainer.state`.

  Args (keyword-only, the gin `Trainer.*` bindings):
    model, optimizer, loss: a Keras 3 model (or a callable `tf.Module` with `trainable_variables`),
      a Keras 3 optimizer or name ('adam'), a `(labels, predictions) -> loss` function (per-example
      losses are averaged, as `compile` does) or Keras loss name; None: the compiled model's own
      (`keras_parts`).
    policies: list of `Policy` objects; None means `default_policies()`; `[]` a bare step.
    model_dir: where checkpoints, events.jsonl, summary.json and TensorBoard files go (None:
      nothing on disk).
    steps_per_loop, checkpoint_every, max_checkpoints, keep_good_checkpoints, healthy_window,
      log_every, summary_every, max_refused_checkpoints: the run's cadence, kept (validated) as
      `trainer.options`, a frozen `runtime.options.RunOptions` whose docstring says each.
    jit_compile: compile the step with XLA.
    strategy: a `tf.distribute.Strategy`; None means the current one.
    faults: a `seams.RunSeams` plug-in, e.g. a `stable_train.testing.Faults` plan to rehearse
      failure; None: none.
    metrics: Keras metrics or names ('accuracy'; None: a compiled model's), updated by applied
      steps only, reset after each progress line (under a strategy, create them in its scope).
    eval_divergence_factor: an evaluation whose loss is non-finite or above this factor times
      the run's best eval loss is a fault (`eval_divergence`); None: only a non-finite one.
    verbose: progress lines on the 'stable_train' logger at INFO (a library caller with no
      logging configured gets a stderr handler); False: none (warnings still show).
  """

  def __init__(self, *, model, optimizer=None, loss=None, policies: Optional[Sequence] = None,
               model_dir: Optional[str], steps_per_loop: int = 1, jit_compile: bool = False,
               checkpoint_every: int = 100, max_checkpoints: int = 5, keep_good_checkpoints: int = 3,
               healthy_window: int = 50, log_every: int = 10, summary_every: int = 10,
               max_refused_checkpoints: int = 2, strategy=None,
               faults: Optional[seams.RunSeams] = None, metrics: Optional[Sequence] = None,
               eval_divergence_factor: Optional[float] = 10.0, verbose: bool = True):
    self.strategy = strategy or tf.distribute.get_strategy()
    optimizer, loss, metrics, wrapper = setup.model_parts(
        model, optimizer, loss, metrics, self.strategy, faults=faults, model_dir=model_dir)
    self.policies, self.loss_scale = setup.policy_stack(policies, model, self.strategy, wrapper)
    forensics.stand_down_optional(self.policies, model_dir=model_dir)
    self.jit_compile = errors.check_bool('Trainer', 'jit_compile', jit_compile)
    self.options = options_lib.RunOptions(
        steps_per_loop=steps_per_loop, checkpoint_every=checkpoint_every,
        max_checkpoints=max_checkpoints, keep_good_checkpoints=keep_good_checkpoints,
        log_every=log_every, summary_every=summary_every,
        max_refused_checkpoints=max_refused_checkpoints, healthy_window=healthy_window)
    self.eval_divergence_factor = errors.check_number(
        'Trainer', 'eval_divergence_factor', eval_divergence_factor, low=1.0, low_open=True,
        finite=False, allow_none=True, what='a number > 1, or None')
    self.verbose = errors.check_bool('Trainer', 'verbose', verbose)
    if verbose:
      setup.show_progress(log)
    self.metrics = setup.check_metrics(metrics, self.strategy)
    self.model, self.optimizer, self.loss_fn, self.faults = model, optimizer, loss, faults
    self.model_dir = str(model_dir) if model_dir is not None else None
    # Only the chief writes files (TF's multi-worker convention; `distribute.is_chief`).
    self.is_chief = distribute.is_chief(self.strategy)
    self.output_dir = self.model_dir if self.is_chief else None
    distribute.check_jit(self.strategy, jit_compile)
    # Everything a checkpoint holds besides the model and optimizer (`state.TrainState`).
    self.state = state_lib.TrainState(policies=self.policies, strategy=self.strategy)
    self.lr_control = lr_lib.LearningRateControl(optimizer, self.lr_scale)
    self.events = events_lib.EventLog(
        os.path.join(self.output_dir, 'events.jsonl') if self.output_dir else None,
        deliver=lambda record: self.on_event(record))
    self._outputs: List[Any] = []  # The model outputs of the forward passes being traced.
    self.label_classes: Optional[int] = None  # Checked sparse labels' classes (set at build).
    self.controller = controller_lib.Controller(self)
    setup.claim(self.policies)

  # -- overridable, traced parts of the step ------------------------------------------------
  def split_batch(self, batch):
    """(features, labels) of an element: (x, y), (x, y, sample_weight), a dict with 'labels'."""
    return keras_parts.split_element(batch)

  def forward(self, features, training):
    """Runs the model. Traced. Keras models get `training`; plain tf.Modules are just called."""
    if isinstance(self.model, keras.layers.Layer):
      outputs = self.model(features, training=training)
    else:
      outputs = self.model(features)
    self._outputs.append(outputs)  # For the report (outputs finite?) and the metrics.
    return outputs

  def compute_loss(self, batch, training):
    """Returns the scalar loss of a batch (per replica). Traced. Override for custom losses."""
    features, labels = self.split_batch(batch)
    predictions = self.forward(features, training)
    value = keras_parts.call_loss(self.loss_fn, labels, predictions, batch)  # Sample weights.
    loss = numerics.widen(distribute.unscale_keras_loss(self.loss_fn, value))
    if loss.shape.rank:  # A plain function's per-example losses: their mean, as compile takes it.
      loss = tf.reduce_mean(loss)
    regularization = getattr(self.model, 'losses', None)
    if regularization:  # float32 terms under mixed precision; float64 ones under float64.
      loss = loss + tf.add_n([tf.cast(r, loss.dtype) for r in regularization])
    return loss

  def apply_gradients(self, grads):
    """Applies aggregated, transformed gradients with the optimizer. Traced."""
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

  def uses_own_loss(self) -> bool:
    """Whether `compute_loss` is the Trainer's own (the loss on `forward`'s outputs and labels)."""
    return type(self).compute_loss is Trainer.compute_loss

  def uses_own_forward(self) -> bool:
    """Whether `forward` is the Trainer's own (the model called on the features)."""
    return type(self).forward is Trainer.forward

  def build(self, dataset) -> tuple:
    """Builds the model (from `dataset`'s first batch), the optimizer's slots and the policies,
    all checked (`trainer_setup.build`); (trainable variables, their paths)."""
    return setup.build(self, dataset)

  # -- host-side hooks --------------------------------------------------------------------------
  def on_loop_end(self, reports) -> None:
    """Called eagerly after each loop of steps with its `reports.StepReports`."""

  def on_event(self, record: Dict[str, Any]) -> None:
    """Called eagerly with each event record."""

  def save_checkpoint(self, reason: str = 'interval'):
    """Writes a checkpoint if every variable is finite, else refuses and records why; returns
    the entry, or None. The run calls this for every checkpoint it writes."""
    return self.controller.checkpoints.save(reason)

  def restore_latest(self, candidates):
    """Restores the newest restorable checkpoint of `candidates` (a corrupt one is reported and
    the next older tried) and repositions the input; returns the entry, or None. The run calls
    this for every restore (resume and rollback)."""
    return self.controller.host.restore(candidates)

  # -- fit ----------------------------------------------------------------------------------------
  def fit(self, dataset: tf.data.Dataset, *, num_steps: Optional[int] = None,
          num_epochs: Optional[int] = None, eval_dataset: Optional[tf.data.Dataset] = None,
          eval_every: Optional[int] = None, eval_steps: Optional[int] = None,
          class_weight: Optional[Dict[int, float]] = None) -> Dict[str, Any]:
    """Trains until the global step reaches `num_steps` (a total: a resumed run, or a later fit,
    stops at the same step), or for `num_epochs` passes over a finite dataset, or to its end.

    Args:
      dataset: a `tf.data.Dataset` of elements `split_batch` takes.
      num_steps: the global step to stop at.
      num_epochs: instead: passes over `dataset` (finite, not repeated); an epoch is its
        cardinality, or counted by reading it once. A resumed run goes on at the same position
        and stops at the end of the last epoch; a later `fit` does `num_epochs` more.
      eval_dataset: held-out data: loss and metrics on it (inference mode, no state change)
        every `eval_every` steps and at the end of a run that ended normally.
      eval_every: evaluate when the global step reaches a multiple of this; None: at the end.
      eval_steps: batches per evaluation, from the eval data's start; None: all of it.
      class_weight: {class id: weight}: labels weigh their batch's loss, as in Keras's fit.

    Returns:
      The run summary (also written to `<model_dir>/summary.json`).
    """
    dataset, num_steps, epochs, eval_every, eval_steps = setup.fit_plan(
        self, dataset, num_steps, num_epochs, class_weight, eval_dataset, eval_every, eval_steps)
    return self.controller.fit(dataset, num_steps, eval_dataset=eval_dataset,
                               eval_every=eval_every, eval_steps=eval_steps, epochs=epochs)


for _name in options_lib.SETTINGS:  # trainer.steps_per_loop, ...: trainer.options' settings.
  setattr(Trainer, _name, options_lib.setting(_name))
