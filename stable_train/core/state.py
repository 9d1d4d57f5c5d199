"""The train state: the checkpointed counters, the checkpoint's object map, its copy in memory, and
the traced writer that saves either."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from stable_train import compat

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
    self.policies.by_name = {p.name: p for p in policies if getattr(p, 'checkpointed', True)}

  def checkpoint_objects(self, *, model, optimizer, forward_state: Sequence[tf.Variable],
                         random_states: Sequence[tf.Variable]) -> Dict[str, Any]:
    """The object map of a run's checkpoint (the keys are its format: never rename one).

    Args:
      model: the model.
      optimizer: the optimizer.
      forward_state: the variables a forward pass may assign (`Trainer.forward_state`).
      random_states: the process-wide generators' states (`random_state_variables`).
    """
    objects = dict(model=model, optimizer=optimizer)
    objects.update({name: getattr(self, name) for name, _, _ in COUNTERS})
    # Keras seed generators are not trackable objects, so a model checkpoint leaves their states
    # (dropout masks to come) out: saved here by position, with the global generators, so a
    # resume or rollback continues the same random stream.
    objects.update(lr_scale=self.lr_scale, policies=self.policies,
                   model_state=list(forward_state), random=list(random_states))
    return objects


class SnapshotUnsupported(ValueError):
  """The checkpoint holds state other than variables (e.g. a tf.data iterator), or distributed
  variables: it cannot be mirrored in memory."""


class Snapshot:
  """A second copy, in memory, of every variable a run's checkpoint holds.

  `capture` refreshes it from the live variables by one traced call when a good checkpoint is
  saved. It serves twice: the checkpoint is written from it in the background while training goes
  on (`object_map` redirects a checkpoint's writes to the copies), and once that checkpoint is
  committed (`holds`), `restore` puts every variable back by one traced call, bit for bit what
  reading those files back would give, without touching the disk. It costs one more copy of the
  model, the optimizer slots and the counters.

  Attributes:
    holds: the number of the committed checkpoint the copy equals, or None.
    captured_for: the number of the checkpoint the copy was last captured for.
    nbytes: the memory the copy takes.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint):
    """Creates the copies (initialised from the live values).

    Args:
      checkpoint: the run's checkpoint (`TrainState.checkpoint_objects`).

    Raises:
      SnapshotUnsupported: something in the checkpoint is not a plain variable.
    """
    self._checkpoint = checkpoint
    self._live = _checkpointed_variables(checkpoint)
    variables = list({id(v): v for _, v in self._live}.values())
    self._pairs = []
    for variable in variables:
      with tf.init_scope(), tf.device(variable.device):
        copy = tf.Variable(variable.read_value(), trainable=False, name='snapshot')
      self._pairs.append((variable, copy))
    self.nbytes = sum(c.shape.num_elements() * c.dtype.size for _, c in self._pairs)
    self.holds: Optional[int] = None
    self.captured_for: Optional[int] = None
    self._capture_fn = tf.function(self._capture)
    self._restore_fn = tf.function(self._restore)

  def variables(self) -> List[tf.Variable]:
    """The live variables mirrored (each once)."""
    return [v for v, _ in self._pairs]

  def object_map(self):
    """{checkpointed node (a Keras or TensorFlow variable): its copy}, for a checkpoint saver."""
    copies = {id(v): c for v, c in self._pairs}
    mapping = compat.identity_map()
    for node, variable in self._live:
      mapping[node] = mapping[variable] = copies[id(variable)]
    return mapping

  def is_current(self) -> bool:
    """Whether the checkpoint still holds exactly the variables mirrored (none added since)."""
    try:
      live = _checkpointed_variables(self._checkpoint)
    except SnapshotUnsupported:
      return False
    return [id(v) for _, v in live] == [id(v) for _, v in self._live]

  def capture(self, tag: Optional[int] = None) -> None:
    """Copies every live variable into the snapshot; `tag` names the checkpoint it is for."""
    self._capture_fn()
    self.holds = None
    self.captured_for = tag

  def restore(self) -> None:
    """Assigns every live variable its copied value."""
    self._restore_fn()

  def _capture(self):
    for live, copy in self._pairs:
      copy.assign(live)

  def _restore(self):
    for live, copy in self._pairs:
      live.assign(copy)


def _checkpointed_variables(checkpoint: tf.train.Checkpoint) -> List[Tuple[Any, tf.Variable]]:
  """(node, tf.Variable) for every variable in the checkpoint's object graph (a Keras variable
  is the node, its TensorFlow variable the value); refuses anything else that saves state."""
  found = []
  save_counter = checkpoint.save_counter  # Created (as a save would) to be told apart.
  for node in tf.train.TrackableView(checkpoint).descendants():
    if node is checkpoint or node is save_counter:
      continue  # The checkpoint's own save counter is not the run's state.
    variable = node
    if isinstance(node, keras.Variable):
      variable = node.value
    if isinstance(variable, tf.Variable):
      if isinstance(variable, tf.distribute.DistributedValues):
        raise SnapshotUnsupported(f'distributed variable {variable.name}')
      found.append((node, variable))
    elif compat.saves_own_state(node):
      raise SnapshotUnsupported(f'{type(node).__name__} saves state other than variables')
  return found


class TracedWriter:
  """`checkpoint.write` traced once, so that a save is one call into TensorFlow.

  An eager write walks the object graph in Python on every save (~8 of its ~13 ms on the seed
  MLP); traced, the walk happens once and a save costs TensorFlow's own writer (~6 ms per 3.3 MB
  here), during which the interpreter lock is free. The files and their keys are those of
  `tf.train.CheckpointManager.save`. The object graph is fixed when traced: build a new writer
  when the checkpointed objects change.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, object_map=None):
    """Traces the writer.

    Args:
      checkpoint: what to write; with `object_map`, a checkpoint used for nothing else.
      object_map: {node: stand-in} (`state.Snapshot.object_map`): the stand-ins' values are
        written under the nodes' keys. This is how TensorFlow's own async checkpoint writes
        from copies; its copying (`CheckpointOptions(enable_async=True)`) fails on Keras 3
        variables at the second save, so the copies are the snapshot's.
    """
    if object_map is not None:
      compat.set_object_map(checkpoint, object_map)
    checkpoint.save_counter  # pylint: disable=pointless-statement  (created, as a save would)
    # The object-graph record goes on the variables' task, which keeps one data file, as an
    # eager save writes (in a function its device would otherwise have no task).
    nodes = tf.train.TrackableView(checkpoint).descendants()
    device = next((getattr(v, 'device', '') for v in nodes
                   if isinstance(v, (tf.Variable, keras.Variable))), '')
    spec = tf.DeviceSpec.from_string(device or '')
    scope = (f'/job:{spec.job}/replica:{spec.replica or 0}/task:{spec.task or 0}'
             if spec.job else None)

    def write(prefix):
      with tf.device(scope):
        return checkpoint.write(prefix)

    # Traced now: a checkpoint this cannot write fails here, at set-up, not in a save.
    self._write = tf.function(write).get_concrete_function(tf.TensorSpec([], tf.string))

  def __call__(self, prefix: str) -> str:
    """Writes the checkpoint at `prefix`; returns the prefix."""
    return self._write(tf.constant(prefix)).numpy().decode()


def random_state_variables() -> List[tf.Variable]:
  """The process-wide random states a run draws from: TensorFlow's global generator and Keras's
  global SeedGenerator (created here if they do not exist yet, so every run checkpoints the same
  structure)."""
  states = [compat.tf_global_generator().state]
  keras_generator = compat.keras_global_seed_generator()
  if keras_generator is not None:
    states.append(keras_generator.state)
  return states


def observed_key(variable):
  """The key of `variable` in `StepReports.observed` (variables are not hashable)."""
  ref = getattr(variable, 'ref', None)
  return ref() if ref is not None else id(variable)


def host_value(variable, reports=None) -> np.ndarray:
  """A policy variable's value on the host: from `reports.observed` when the loop read it there
  (a `LoopObserver`'s variable, which only the host writes, between loops: no op at all; the
  value as the loop left it, so read the variable itself after writing it in the same loop);
  else a plain variable read by its handle (a quarter of `.numpy()`'s eager cost, but 0.1-0.3 ms
  right after a loop, while the step's threads wind down); a distributed one as usual."""
  observed = getattr(reports, 'observed', None)
  if observed:
    value = observed.get(observed_key(variable))
    if value is not None:
      return value
  if isinstance(variable, tf.distribute.DistributedValues):
    return variable.numpy()
  return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype).numpy()


def host_assign(variable, value) -> None:
  """Assigns `value` to a policy variable from the host, as cheaply (see `host_value`)."""
  if isinstance(variable, tf.distribute.DistributedValues):
    variable.assign(value)
  else:
    tf.raw_ops.AssignVariableOp(resource=variable.handle,
                                value=tf.constant(value, variable.dtype))
