"""`StepAccess`: what the guarded step, the evaluator and forensics call of a Trainer, built from
its overridable parts (`compute_loss`, `forward`, `split_batch`, `apply_gradients`, ...)."""

from typing import List

import tensorflow as tf

from stable_train import errors
from stable_train.core import numerics
from stable_train.core import step as step_lib
from stable_train.runtime import distribute


class StepAccess:
  """The step's view of a `Trainer` (its parts, called while tracing)."""

  def update_metrics(self, labels, predictions) -> None:
    """Updates every metric with one applied batch. Traced (the step's apply branch only)."""
    for m in self.metrics:
      m.update_state(labels, predictions)

  def forward_state(self) -> List[tf.Variable]:
    """Variables a forward pass may assign (BatchNorm moving statistics, dropout and attention
    seed-generator states): the model's non-trainable ones. A skip puts them back."""
    return [v for v in self.model.variables if not v.trainable]

  def forward_loss(self, batch, training):
    """(loss, predictions, outputs finite): `compute_loss` and what its `forward` calls saw (the
    last one's outputs are the predictions the metrics get). Traced."""
    self._outputs = []
    loss = self.compute_loss(batch, training=training)
    if training and self.faults is not None:
      loss = self.faults.transform_loss(numerics.widen(loss))
    flags = [tf.reduce_all(tf.math.is_finite(o)) for out in self._outputs
             for o in tf.nest.flatten(out) if o.dtype.is_floating]
    if self.metrics and not self._outputs:
      raise errors.ConfigError(
          'Trainer: metrics need the predictions, but this compute_loss does not call '
          'self.forward(features, training); call it, or drop the metrics.')
    return (loss, self._outputs[-1] if self._outputs else None,
            tf.reduce_all(flags) if flags else tf.constant(True))

  def step_parts(self, *, variable_paths, random_states) -> step_lib.StepParts:
    """The parts of the guarded step (`step.StepParts`) this Trainer trains with."""
    return step_lib.StepParts(
        split_batch=self.split_batch, compute=lambda batch: self.forward_loss(batch, True),
        variables=lambda: list(self.model.trainable_variables), apply=self.apply_gradients,
        forward_state=self.forward_state, random_states=random_states, policies=self.policies,
        variable_paths=variable_paths, learning_rate=lambda: self.optimizer.learning_rate,
        counters=self.state, strategy=self.strategy,
        distributed=distribute.uses_distributed_input(self.strategy),
        update_metrics=self.update_metrics if self.metrics else None, xla=self.jit_compile,
        loss_scale=self.loss_scale, optimizer=self.optimizer, label_classes=self.label_classes)

  def loss_and_gradients(self, batch):
    """One replica's loss, gradients, input-check flags and whether the outputs were finite,
    before aggregation (what forensics and a replay re-run, also before any fit). Traced."""
    step = self.controller.step or step_lib.GuardedStep(
        self.step_parts(variable_paths=(), random_states=()))
    return step.loss_and_gradients(batch)[:4]
