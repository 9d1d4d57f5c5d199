"""tf.distribute support: gin strategy factories, the chief rule, the agreed apply and the input."""

import json
import os
import shutil
import tempfile
from typing import Optional, Sequence

import keras
import tensorflow as tf

from stable_train import compat
from stable_train import errors
from stable_train.runfiles import checkpointing
from stable_train.runfiles import manifest as manifest_lib

# Reductions after which a keras.losses.Loss scales by 1/num_replicas (Keras's Loss.__call__).
_KERAS_SCALED_REDUCTIONS = ('sum_over_batch_size', 'mean', 'mean_with_sample_weight')
_MIRRORED_KINDS = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)


# ----------------------------------------------------------------------------------------------
# Strategy factories (registered with gin in configurables.py).
# ----------------------------------------------------------------------------------------------
def default_strategy() -> tf.distribute.Strategy:
  """TensorFlow's default strategy: one device, the single-device path of the Trainer."""
  return tf.distribute.get_strategy()


def _ensure_logical_cpus(n: int) -> None:
  """Splits the first CPU into `n` logical devices, or checks that the runtime already has them."""
  cpus = tf.config.list_physical_devices('CPU')
  configured = tf.config.get_logical_device_configuration(cpus[0])
  if configured is not None and len(configured) >= n:
    return
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
  except RuntimeError:  # The runtime is already initialised: use what it has.
    have = len(tf.config.list_logical_devices('CPU'))
    if have < n:
      raise errors.ConfigError(
          f'mirrored_strategy: num_logical_cpus={n} but TensorFlow already started with {have} '
          'logical CPU(s); build the strategy before any TensorFlow op runs.') from None


def mirrored_strategy(*, devices: Optional[Sequence[str]] = None,
                      num_logical_cpus: Optional[int] = None) -> tf.distribute.MirroredStrategy:
  """A `MirroredStrategy` (one machine, several devices, synchronous).

  Args:
    devices: device names, e.g. ['/gpu:0', '/gpu:1']; None means every GPU, or the logical CPUs
      when `num_logical_cpus` is given, or the CPU.
    num_logical_cpus: split the CPU into this many logical devices (each one a replica), so a
      mirrored config runs on any machine. Must be set before TensorFlow's runtime starts; if it has
      started already with enough logical CPUs, those are used.
  """
  if num_logical_cpus is not None:
    num_logical_cpus = errors.check_int('mirrored_strategy', 'num_logical_cpus',
                                        num_logical_cpus, minimum=1)
    _ensure_logical_cpus(num_logical_cpus)
    if devices is None:
      devices = [f'/cpu:{i}' for i in range(num_logical_cpus)]
  if devices is not None:
    if isinstance(devices, str) or not devices or not all(isinstance(d, str) for d in devices):
      raise errors.ConfigError(
          f"mirrored_strategy: devices={devices!r} must be a non-empty list of device names, "
          "e.g. ['/cpu:0', '/cpu:1'].")
    def key(name):
      spec = tf.DeviceSpec.from_string(name)
      return ((spec.device_type or '').upper(), spec.device_index)

    known = {key(d.name): d.name for d in tf.config.list_logical_devices()}
    for d in devices:
      if key(d) not in known:
        raise errors.ConfigError(
            f'mirrored_strategy: device {d!r} does not exist here; available: '
            f'{sorted(known.values())}.')
    devices = list(devices)
  return tf.distribute.MirroredStrategy(devices=devices)


def _read_tf_config() -> dict:
  text = os.environ.get('TF_CONFIG')
  if not text:
    raise errors.ConfigError(
        'multi_worker_mirrored_strategy: TF_CONFIG is not set; set it in every worker to '
        '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}.')
  try:
    config = json.loads(text)
  except ValueError as e:
    raise errors.ConfigError(f'multi_worker_mirrored_strategy: TF_CONFIG is not JSON ({e}).') from None
  cluster = config.get('cluster') if isinstance(config, dict) else None
  task = config.get('task') if isinstance(config, dict) else None
  if not isinstance(cluster, dict) or not cluster:
    raise errors.ConfigError(
        'multi_worker_mirrored_strategy: TF_CONFIG has no "cluster" mapping of job names to '
        'host:port lists.')
  if not isinstance(task, dict) or 'type' not in task or 'index' not in task:
    raise errors.ConfigError(
        'multi_worker_mirrored_strategy: TF_CONFIG needs "task": {"type": ..., "index": ...}.')
  jobs = cluster.get(task['type'])
  if not isinstance(jobs, list) or not isinstance(task['index'], int) or not (
      0 <= task['index'] < len(jobs)):
    raise errors.ConfigError(
        f'multi_worker_mirrored_strategy: TF_CONFIG task {task} is not in cluster {cluster}.')
  return config


def multi_worker_mirrored_strategy(
    *, communication: str = 'auto') -> tf.distribute.MultiWorkerMirroredStrategy:
  """A `MultiWorkerMirroredStrategy`: synchronous data parallelism over the workers in TF_CONFIG.

  Every worker runs the same program with its own `TF_CONFIG` (same cluster, its own task).

  Args:
    communication: 'auto', 'ring' or 'nccl' (the collective implementation).
  """
  kinds = {'auto': tf.distribute.experimental.CommunicationImplementation.AUTO,
           'ring': tf.distribute.experimental.CommunicationImplementation.RING,
           'nccl': tf.distribute.experimental.CommunicationImplementation.NCCL}
  if communication not in kinds:
    raise errors.ConfigError(
        f'multi_worker_mirrored_strategy: communication={communication!r} is not one of '
        f'{sorted(kinds)}.')
  _read_tf_config()
  options = tf.distribute.experimental.CommunicationOptions(implementation=kinds[communication])
  return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def tpu_strategy(*, tpu: str = '') -> tf.distribute.TPUStrategy:
  """A `TPUStrategy` on the TPU named `tpu` ('' means the local or environment-given one).

  Not exercised by the tests (no TPU here); the Trainer treats it like any other strategy.
  """
  if not isinstance(tpu, str):
    raise errors.ConfigError(f'tpu_strategy: tpu={tpu!r} must be a string (a TPU name or address).')
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, RuntimeError, tf.errors.OpError) as e:
    raise errors.ConfigError(f'tpu_strategy: no TPU found for tpu={tpu!r} ({str(e).splitlines()[0]}).') from None
  return tf.distribute.TPUStrategy(resolver)


# ----------------------------------------------------------------------------------------------
# Who writes files.
# ----------------------------------------------------------------------------------------------
def task_of(strategy: tf.distribute.Strategy):
  """(task_type, task_id) of this process under a multi-worker strategy, else (None, None)."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return None, None
  return resolver.task_type, resolver.task_id


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """Whether this process writes checkpoints and summaries (TF's multi-worker convention).

  The chief is the task of type 'chief', or worker 0 when the cluster has no chief. Every process
  of a single-worker strategy is the chief.
  """
  task_type, task_id = task_of(strategy)
  if task_type is None:
    return True
  if task_type == 'chief':
    return True
  jobs = strategy.cluster_resolver.cluster_spec().jobs
  return task_type == 'worker' and task_id == 0 and 'chief' not in jobs


def uses_distributed_input(strategy: tf.distribute.Strategy) -> bool:
  """Whether batches go through `experimental_distribute_dataset` (one shard per replica)."""
  return isinstance(strategy, _MIRRORED_KINDS) or isinstance(strategy, tf.distribute.TPUStrategy)


def distributed_iterator(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset,
                         position: int = 0):
  """An iterator over `dataset` split across replicas, starting after `position` global batches.

  Distributed iterators cannot be checkpointed, so the data position is a step count saved with
  the model; every worker skips the same number of global batches before splitting, so every
  worker resumes at the same place. (This assumes the default auto-sharding, under which one step
  reads one global batch; with sharding OFF each worker reads its own copy and the position is
  per worker's input.)
  """
  if position:
    dataset = dataset.skip(position)
  with strategy.scope():
    return iter(strategy.experimental_distribute_dataset(dataset))


def unscale_keras_loss(loss_fn, value):
  """Undoes the 1/num_replicas scaling Keras 3 losses apply under a strategy. Traced.

  A `keras.losses.Loss` with a mean reduction divides its value by the number of replicas in sync
  when a strategy is active (Keras then SUMs the replicas' gradients). The Trainer's step averages
  the replicas' losses and gradients itself, so it wants each replica's plain mean loss, as on one
  device; without this the loss and the gradients would be num_replicas times too small.
  """
  n = tf.distribute.get_strategy().num_replicas_in_sync
  if (n > 1 and isinstance(loss_fn, keras.losses.Loss)
      and getattr(loss_fn, 'reduction', None) in _KERAS_SCALED_REDUCTIONS):
    value = value * tf.cast(n, value.dtype)
  return value


def unscale_replica_loss(value):
  """Undoes the 1/num_replicas scaling of a Keras model's `compute_loss` under a strategy (its
  compiled loss and its `add_loss` terms are all scaled). Traced, per replica."""
  n = tf.distribute.get_strategy().num_replicas_in_sync
  return value * tf.cast(n, value.dtype) if n > 1 else value


# ----------------------------------------------------------------------------------------------
# The agreed apply.
# ----------------------------------------------------------------------------------------------
# Keras's own cross-replica path cannot apply already aggregated gradients (it needs a replica
# context for its merge_call): the agreed apply switches its second all-reduce off instead.
gradients_already_aggregated = compat.gradients_already_aggregated


def check_optimizer(optimizer, strategy: tf.distribute.Strategy, owner: str = 'Trainer') -> None:
  """Rejects optimizer settings that cannot work on aggregated gradients under a strategy
  (`owner` names the front door in the message)."""
  if strategy.num_replicas_in_sync <= 1 and not isinstance(strategy, _MIRRORED_KINDS):
    return
  own = compat.optimizer_strategy(optimizer, strategy)  # Keras captures it when built.
  if own is not strategy:
    raise errors.ConfigError(
        f'{owner}: the optimizer was created outside {type(strategy).__name__}.scope(); create '
        'the model and the optimizer inside `with strategy.scope():`.')
  for name in ('clipnorm', 'clipvalue', 'global_clipnorm'):
    if getattr(optimizer, name, None):
      raise errors.ConfigError(
          f'{owner}: optimizer {name}={getattr(optimizer, name)!r} under a distribution strategy; '
          'use the ClipByGlobalNorm policy, which clips the aggregated gradient.')
  if getattr(optimizer, 'gradient_accumulation_steps', None):
    raise errors.ConfigError(
        f'{owner}: optimizer gradient_accumulation_steps is not supported under a distribution '
        'strategy (its accumulate-or-apply cond cannot be agreed across replicas).')


def check_jit(strategy: tf.distribute.Strategy, jit_compile: bool, owner: str = 'Trainer') -> None:
  """Refuses XLA under a mirrored strategy (it would need a nested function that all-reduces)."""
  if jit_compile and isinstance(strategy, _MIRRORED_KINDS):
    raise errors.ConfigError(
        f'{owner}: jit_compile=True under {type(strategy).__name__} is not supported: an XLA '
        'function that all-reduces inside strategy.run fails with merge_call errors in TF 2.21; '
        'set jit_compile=False.')


# ----------------------------------------------------------------------------------------------
# Checkpoints on a non-chief worker.
# ----------------------------------------------------------------------------------------------
class WorkerCheckpointKeeper(checkpointing.CheckpointKeeper):
  """A non-chief worker's keeper: it saves like the chief, into scratch space it then deletes.

  TensorFlow's multi-worker convention: every worker takes part in a save (a save may need
  collectives, e.g. to read sync-on-read variables), only the chief's files are kept. This keeper
  writes each save into a fresh local temporary directory and removes it at once; it never writes
  in the chief's directory. It reads the chief's manifest once (a shared file system, as for any
  multi-worker run) and then mirrors the chief's bookkeeping in memory (same numbers, same marks),
  so restores and rollbacks pick the same checkpoint on every worker without waiting on the
  chief's file writes.
  """

  def _open_manifest(self, directory, max_to_keep, keep_good) -> manifest_lib.Manifest:
    manifest = _WorkerManifest(directory, max_to_keep=max_to_keep, keep_good=keep_good,
                               writes=False)
    # What the chief's keeper sees at start-up (its manifest and its files), then its own saves.
    manifest.numbers = [e.number for e in manifest.entries] + manifest.numbers_on_disk()
    return manifest

  def _write_files(self, number: int) -> str:
    scratch = tempfile.mkdtemp(prefix='stable_train_worker_ckpt_')
    try:  # The chief's code path, the chief's number.
      path = self.checkpoint.write(os.path.join(scratch, f'ckpt-{number}'))
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
    self.manifest.numbers.append(number)
    return path

  def _remove_orphan_temps(self) -> None:
    pass  # The chief's directory: the chief cleans it, under its lock.

  def _remove_uncommitted(self, number: int) -> None:
    pass  # Its scratch space is gone already; the chief's files are the chief's.


class _WorkerManifest(manifest_lib.Manifest):
  """The chief's record mirrored in memory: numbered without reading the chief's directory (its
  `numbers`: what the chief had at start-up, then this worker's saves)."""

  def next_number(self) -> int:
    return max([e.number for e in self.entries] + self.numbers, default=0) + 1


def make_keeper(strategy: tf.distribute.Strategy, checkpoint: tf.train.Checkpoint, directory: str,
                **kwargs) -> checkpointing.CheckpointKeeper:
  """The chief's keeper writes `directory`; other workers get a `WorkerCheckpointKeeper`."""
  if is_chief(strategy):
    return checkpointing.CheckpointKeeper(checkpoint, directory, **kwargs)
  return WorkerCheckpointKeeper(checkpoint, directory, **kwargs)
