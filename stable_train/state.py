"""The train state: every counter a run checkpoints, and the checkpoint's object map."""

from typing import Any, Dict, Sequence

import tensorflow as tf

# The run's int64 counters (name, initial value, what it counts), in checkpoint order.
COUNTERS = (
    ('global_step', 0, 'train steps run (applied or skipped); reports number steps from 1'),
    ('applied_steps', 0, 'steps whose update was applied'),
    ('skipped_steps', 0, 'steps whose update was skipped (faults and fp16 overflows)'),
    ('input_faults', 0, 'steps whose batch failed an input check'),
    ('overflow_steps', 0, 'skips caused by an fp16 loss-scale overflow (in skipped_steps too)'),
    ('data_offset', 0, 'batches skipped by rollbacks: the data position is global_step + this'),
    ('last_fault_step', -(2**62), 'the global step of the last fault (skip, spike, rollback)'),
)


class TrainState(tf.Module):
  """The run's own state, checkpointed with the model: counters, learning-rate scale, policies.

  Attributes:
    global_step, applied_steps, skipped_steps, input_faults, overflow_steps, data_offset,
      last_fault_step: int64 counters (see `COUNTERS`).
    lr_scale: float32, the factor on the configured learning rate (rollbacks back it off).
    policies: a `tf.Module` holding the policies (`policies.by_name`), so their variables are
      checkpointed under their names.
  """

  def __init__(self, *, policies: Sequence[tf.Module], strategy: tf.distribute.Strategy):
    """Creates the variables under `strategy`'s scope.

    Args:
      policies: the Trainer's policies, in order.
      strategy: the run's `tf.distribute.Strategy`.
    """
    super().__init__(name='train_state')
    with strategy.scope():
      for name, initial, _ in COUNTERS:
        setattr(self, name, tf.Variable(initial, dtype=tf.int64, trainable=False, name=name))
      self.lr_scale = tf.Variable(1.0, dtype=tf.float32, trainable=False, name='lr_scale')
    self.policies = tf.Module(name='policies')
    self.policies.by_name = {p.name: p for p in policies}

  def checkpoint_objects(self, *, model, optimizer, forward_state: Sequence[tf.Variable],
                         random_states: Sequence[tf.Variable]) -> Dict[str, Any]:
    """The object map of a run's checkpoint (the keys are its format: never rename one).

    Args:
      model: the model.
      optimizer: the optimizer.
      forward_state: the variables a forward pass may assign (`Trainer.forward_state`).
      random_states: the process-wide generators' states (`trainer.random_state_variables`).
    """
    objects = dict(model=model, optimizer=optimizer)
    objects.update({name: getattr(self, name) for name, _, _ in COUNTERS})
    # Keras seed generators are not trackable objects, so a model checkpoint leaves their states
    # (dropout masks to come) out: saved here by position, with the global generators, so a
    # resume or rollback continues the same random stream.
    objects.update(lr_scale=self.lr_scale, policies=self.policies,
                   model_state=list(forward_state), random=list(random_states))
    return objects
