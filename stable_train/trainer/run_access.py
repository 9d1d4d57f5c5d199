"""`RunAccess`: the run as a Trainer's callers, subclasses and policies' tests read it (the
checkpointed counters, the controller's host, keeper and input), apart from the Trainer's own
model parts and hooks."""

from typing import Any, Dict, List, Optional

import tensorflow as tf

from stable_train.runtime import host as host_lib


def _state_variable(name: str) -> property:
  """A read-only Trainer attribute for one `TrainState` variable (e.g. `trainer.global_step`)."""
  return property(lambda self: getattr(self.state, name),
                  doc=f'`TrainState.{name}`: the run\'s checkpointed `{name}` variable.')


class RunAccess:
  """What a `Trainer` reads of its run; every accessor delegates to `trainer.state` or
  `trainer.controller` (a `controller.Controller`)."""

  def checkpoint_now(self, reason: str = 'best'):
    """The committed checkpoint of the current state (written if needed), or None."""
    return self.controller.host.checkpoint_now(reason)

  def emit(self, event: str, step: Optional[int] = None, **fields) -> Dict[str, Any]:
    """Writes one record to events.jsonl and passes it to `on_event`; under `fit(num_epochs=)`
    it carries the (1-based) epoch of the step's batch."""
    return self.controller.host.emit(event, step, **fields)

  # -- the model's state ---------------------------------------------------------------------------
  def metric_results(self) -> Dict[str, float]:
    """The metrics' values since their last reset (eager)."""
    return {m.name: float(m.result()) for m in self.metrics}

  def reset_metrics(self) -> None:
    for m in self.metrics:
      m.reset_state()

  def all_variables(self) -> List[tf.Variable]:
    """Every float variable of the model and the optimizer."""
    return host_lib.float_variables(self.model, self.optimizer)

  def model_checkpoint(self) -> tf.train.Checkpoint:
    """The model and optimizer state alone (forensics records, replay, inference), with the
    model's forward state, which includes the seed-generator states a Keras checkpoint omits."""
    return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                               model_state=list(self.forward_state()))

  def variables_finite(self) -> bool:
    """Whether every model and optimizer variable is finite (checked before any checkpoint)."""
    return self.controller.host.audit.all_finite()

  def non_finite_variables(self) -> List[str]:
    """Paths of the model and optimizer variables that hold NaN or Inf (for messages)."""
    return self.controller.host.audit.non_finite()

  global_step = _state_variable('global_step')
  applied_steps = _state_variable('applied_steps')
  skipped_steps = _state_variable('skipped_steps')
  input_faults = _state_variable('input_faults')
  overflow_steps = _state_variable('overflow_steps')
  data_offset = _state_variable('data_offset')
  last_fault_step = _state_variable('last_fault_step')
  lr_scale = _state_variable('lr_scale')

  # -- the run, as policies' tests and callers read it ------------------------------------------
  last_summary = property(lambda self: self.controller.host.last_summary)  # The last fit's, or {}.
  checkpoints = property(lambda self: self.controller.host.keeper,
                         doc='The run\'s checkpoint keeper (None without a model_dir or fit).')
  scalars = property(lambda self: self.controller.host.scalars,
                     doc='The TensorBoard scalar writer of the current (or last) fit.')
  dataset = property(lambda self: self.controller.input.dataset,
                     doc='The dataset of the current (or last) fit (None before fit).')
  iterator = property(lambda self: self.controller.input.iterator,
                      doc='The iterator of the current (or last) fit, at data_position().')

  def data_position(self) -> int:
    """Index (in the dataset's stream) of the next batch the iterator will yield."""
    return self.controller.input.position()

  def skip_batches(self, count: int):
    """Drops `count` batches from the iterator; returns the [start, end) stream indices dropped."""
    return self.controller.input.skip(count)

  def reset_input(self) -> None:
    """(Re)builds the iterator at `data_position()` after the counters were changed by hand."""
    self.controller.input.reset()
