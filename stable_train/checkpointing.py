"""Checkpoints that are only ever written finite, committed by a manifest, and restored safely.

A checkpoint counts only once it is listed in `manifest.json` (written atomically after its files
are complete and synced to disk), so a crash mid-write never leaves a checkpoint that the next run
would load. Each manifest entry carries the global step and a `good` mark (written while the run
was healthy); only good checkpoints are rollback targets. At most one
entry is marked `best` (the best evaluation so far, `stopping.BestCheckpoint`); rotation keeps it
while it is the best. On a single device the newest good one
is also kept in memory (`state.Snapshot`): it is written from there in the background while
training goes on, and a rollback to it restores from there.
"""

import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import keras
import tensorflow as tf

from stable_train import compat
from stable_train import errors
from stable_train import events as events_lib

MANIFEST = 'manifest.json'
LOCK = 'run.lock'
# TensorFlow writes a checkpoint into `<prefix>_temp/` and renames the files out when complete; a
# kill during a save leaves the folder behind. It is never committed.
_TEMP_FOLDER = re.compile(r'ckpt-\d+_temp$')


@dataclasses.dataclass
class Entry:
  """One committed checkpoint."""
  number: int
  step: int
  good: bool
  path: str  # Prefix, relative to the checkpoint directory (e.g. 'ckpt-3').
  best: bool = False  # The checkpoint of the best evaluation so far (at most one entry).
  # The batches' dtypes and shapes (`inputs.batch_signature`); None in older manifests.
  input_signature: Optional[str] = None


class CheckpointKeeper:
  """Writes, lists, prunes and restores the checkpoints of one run."""

  def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, *, max_to_keep: int = 5,
               keep_good: int = 3, warn: Optional[Callable[..., None]] = None,
               snapshot=None, writer: Optional[Callable[[str], str]] = None,
               snapshot_writer: Optional[Callable[[str], str]] = None,
               on_commit: Optional[Callable[[Entry], None]] = None):
    """Initialises the keeper.

    Args:
      checkpoint: the `tf.train.Checkpoint` holding everything to save.
      directory: where checkpoints live (`<model_dir>/checkpoints`).
      max_to_keep: how many of the newest checkpoints to keep.
      keep_good: how many good checkpoints to keep besides those, so that repeated rollbacks can
        step further back.
      warn: called as warn(event, step, **fields) when a checkpoint cannot be restored
        (`checkpoint_corrupt`) or written (`checkpoint_failed`).
      snapshot: a `state.Snapshot` of the same checkpoint, or None: good checkpoints are then
        captured in it, and a rollback to the one it holds restores from memory.
      writer: writes the live variables at a prefix (`TracedWriter`); None: the manager's save.
      snapshot_writer: writes the snapshot's copies at a prefix, under the live keys; with it,
        good checkpoints are written from the snapshot and can be written in the background.
      on_commit: called with the entry when a write made in the background is committed.
    """
    self.checkpoint = checkpoint
    self.directory = directory
    self.max_to_keep = max_to_keep
    self.keep_good = keep_good
    self._warn = warn or (lambda *a, **k: None)
    self.snapshot = snapshot
    self._writer = writer
    self._snapshot_writer = snapshot_writer
    self._on_commit = on_commit
    self.input_signature: Optional[str] = None  # Recorded in each new entry.
    self.restored_from: Optional[str] = None  # 'memory' or 'disk': the last restore's source.
    # The write in flight: (entry, thread or None); its error once it has failed. Entries and the
    # manifest change under the lock (a background write commits from its own thread).
    self._pending = None
    self._pending_error: Optional[BaseException] = None
    self._lock = threading.RLock()
    os.makedirs(directory, exist_ok=True)
    # max_to_keep=None: retention follows the manifest (keep good ones), not file age.
    self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None,
                                              checkpoint_name='ckpt')
    self.entries: List[Entry] = self._read_manifest()
    self.restore_errors: List = []  # (path, first error line) of the last restore_latest.
    self._remove_orphan_temps()

  def _remove_orphan_temps(self) -> None:
    """Deletes `ckpt-N_temp/` folders left by a process killed during a save (never committed).

    Safe only while this process owns the directory (the Trainer holds the model_dir's RunLock).
    """
    for name in os.listdir(self.directory):
      path = os.path.join(self.directory, name)
      if _TEMP_FOLDER.match(name) and os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)

  # -- manifest -------------------------------------------------------------------------------
  def _manifest_path(self) -> str:
    return os.path.join(self.directory, MANIFEST)

  def _read_manifest(self) -> List[Entry]:
    """The committed entries. A directory with checkpoint files but no readable manifest is
    refused (CheckpointError): the next save would otherwise start at step 0 and prune them."""
    path = self._manifest_path()
    fix = (f'restore it from a backup, or move {self.directory} away (or use a new --model_dir) '
           'to start afresh; nothing was changed.')
    if not os.path.exists(path):
      found = sorted(set(re.match(r'(ckpt-\d+)\.', n).group(1) for n in os.listdir(self.directory)
                         if re.match(r'ckpt-\d+\.(index|data-)', n)))
      if found:
        raise errors.CheckpointError(
            f'{path} is missing but {self.directory} holds checkpoint files '
            f'({", ".join(found[:5])}{", ..." if len(found) > 5 else ""}): the commit record was '
            f'deleted; {fix}')
      # Written at once on a fresh directory, so that files without a manifest always mean a
      # deleted one (a crash during the first save leaves files and this empty manifest).
      self.entries = []
      self._write_manifest()
      return []
    try:
      with open(path) as f:
        data = json.load(f)
      return [Entry(**e) for e in data['checkpoints']]
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # JSONDecodeError: ValueError
      raise errors.CheckpointError(
          f'{path} is unreadable ({str(e).splitlines()[0][:120]}); {fix}') from None

  def _write_manifest(self) -> None:
    events_lib.write_json_atomic(
        self._manifest_path(), {'checkpoints': [dataclasses.asdict(e) for e in self.entries]})

  def _files_present(self, entry: Entry, names: Optional[set] = None) -> bool:
    names = set(os.listdir(self.directory)) if names is None else names
    return (entry.path + '.index' in names and
            any(n.startswith(entry.path + '.data-') for n in names))

  # -- queries --------------------------------------------------------------------------------
  def committed(self) -> List[Entry]:
    """Committed checkpoints whose files are present, oldest first (not the one in flight)."""
    with self._lock:
      entries = list(self.entries)
      names = set(os.listdir(self.directory))  # One listing (a rollback reads this).
    return [e for e in entries if self._files_present(e, names)]

  def good(self) -> List[Entry]:
    return [e for e in self.committed() if e.good]

  def last_good(self, before_step: Optional[int] = None) -> Optional[Entry]:
    cands = [e for e in self.good() if before_step is None or e.step < before_step]
    return cands[-1] if cands else None

  def best(self) -> Optional[Entry]:
    """The committed checkpoint marked best, or None."""
    marked = [e for e in self.committed() if e.best]
    return marked[-1] if marked else None

  # -- writing --------------------------------------------------------------------------------
  def _numbers_on_disk(self) -> List[int]:
    return [int(m.group(1)) for m in (re.match(r'ckpt-(\d+)\.', n)
                                      for n in os.listdir(self.directory)) if m]

  def _next_number(self) -> int:
    """One more than any number in the manifest or on disk: a checkpoint is never overwritten."""
    return max([e.number for e in self.entries] + self._numbers_on_disk(), default=0) + 1

  def _write_files(self, number: int) -> str:
    """Writes the checkpoint files and syncs them (and the folder's renames) to disk; returns
    their prefix.

    From the snapshot when it was captured for this checkpoint (the state of the save, whatever
    training did since), else from the live variables.
    """
    prefix = os.path.join(self.directory, f'ckpt-{number}')
    snapshot = self.snapshot
    if snapshot is not None and snapshot.captured_for == number and self._snapshot_writer:
      prefix = self._snapshot_writer(prefix)
    elif self._writer is not None:
      prefix = self._writer(prefix)
    else:
      prefix = self.manager.save(checkpoint_number=number)
    _fsync([prefix + '.index'] + tf.io.gfile.glob(prefix + '.data-*') + [self.directory])
    return prefix

  def save(self, step: int, good: bool, *, background: bool = False) -> Entry:
    """Writes a checkpoint of the current state; the caller has verified that every variable is
    finite. A write still in flight is completed (and committed) first.

    A good checkpoint is captured in the snapshot (when the keeper has one) and written from it;
    with `background`, a thread then writes the files, syncs them to disk and commits them in
    the manifest while the caller goes on (`wait` completes it); otherwise all of it is done
    before returning.

    Args:
      step: the global step of the state.
      good: whether it is a rollback target.
      background: return once the state is captured (only for a good checkpoint, with a
        snapshot and its writer; any other is written at once).

    Returns:
      The entry (committed, unless written in the background).

    Raises:
      errors.CheckpointError: this write, or the one in flight, failed (a full disk, a lost
        mount); what it wrote was removed and the committed checkpoints are as they were.
    """
    self.wait()
    number = self._next_number()
    entry = Entry(number=number, step=int(step), good=bool(good), path=f'ckpt-{number}',
                  input_signature=self.input_signature)
    if self.snapshot is not None and entry.good:
      self.snapshot.capture(tag=number)
    if background and entry.good and self.snapshot is not None and self._snapshot_writer:
      thread = threading.Thread(target=self._write_and_commit, args=(entry,),
                                name=f'stable_train checkpoint {number}', daemon=True)
      self._pending = (entry, thread)
      thread.start()
      return entry
    self._pending = (entry, None)
    self._write_and_commit(entry)
    return self.wait()

  def wait(self) -> Optional[Entry]:
    """Completes the write in flight, if any; returns its committed entry (or None).

    Raises:
      errors.CheckpointError: that write failed (a `checkpoint_failed` warning is given first).
    """
    if self._pending is None:
      return None
    entry, thread = self._pending
    if thread is not None:
      thread.join()
    self._pending = None
    error, self._pending_error = self._pending_error, None
    if error is not None:
      self._raise_write_error(entry, error)
    if self.snapshot is not None and self.snapshot.captured_for == entry.number:
      self.snapshot.holds = entry.number
    if thread is not None and self._on_commit is not None:
      self._on_commit(entry)
    return entry

  @property
  def pending(self) -> Optional[Entry]:
    """The entry being written in the background (not committed yet), or None."""
    return self._pending[0] if self._pending is not None else None

  def _raise_write_error(self, entry: Entry, error: BaseException):
    if not isinstance(error, (OSError, tf.errors.OpError)):
      raise error
    # A full disk, a lost mount: what the write left was removed; the committed checkpoints
    # stand. Training on without checkpoints would lose work, so the caller stops the run.
    message = str(error).splitlines()[0][:200]
    self._warn('checkpoint_failed', entry.step, error=message)
    last = self.committed()
    resume = f'from {last[-1].path} (step {last[-1].step})' if last else 'from step 0'
    raise errors.CheckpointError(
        f'could not write a checkpoint at step {entry.step}: {message}; free space (or fix the '
        f'directory) and rerun the same command: it resumes {resume}.') from None

  def _write_and_commit(self, entry: Entry) -> None:
    """Writes `entry`'s files and syncs them to disk, then lists it in the manifest (the commit)
    and prunes; records an error instead of raising it (this may run in a thread of its own)."""
    try:
      entry.path = os.path.basename(self._write_files(entry.number))
      with self._lock:
        before = list(self.entries)
        self.entries.append(entry)
        self._select_kept()
        try:
          self._write_manifest()  # The commit point.
        except Exception:
          self.entries = before  # The manifest on disk is the old one (written atomically).
          raise
    except Exception as e:  # pylint: disable=broad-except
      self._remove_uncommitted(entry.number)  # A full disk leaves half a checkpoint; never listed.
      self._pending_error = e
      return
    try:
      with self._lock:
        # Only now delete files: a crash before the commit must still find the old ones.
        self._delete_unlisted()
    except OSError as e:  # The new checkpoint is committed; old files wait for the next prune.
      logging.getLogger('stable_train').warning('could not prune old checkpoints: %s', e)

  def _remove_uncommitted(self, number: int) -> None:
    """Deletes what a failed save of checkpoint `number` left (it is in no manifest)."""
    prefix = os.path.join(self.directory, f'ckpt-{number}')
    for name in tf.io.gfile.glob(prefix + '.*'):
      try:
        os.remove(name)
      except OSError:
        pass
    shutil.rmtree(prefix + '_temp', ignore_errors=True)

  def mark_bad(self, after_step: int) -> List[Entry]:
    """Marks every good checkpoint written after `after_step` as not good (persisted)."""
    self.wait()
    with self._lock:
      changed = [e for e in self.entries if e.good and e.step > after_step]
      for e in changed:
        e.good = False
      if changed:
        self._write_manifest()
    return changed

  def mark_best(self, entry: Entry) -> Entry:
    """Marks committed checkpoint `entry` as the best (persisted); the previous best loses its
    mark and, no longer protected, is pruned if rotation would have dropped it.

    Raises:
      ValueError: `entry` is not a committed entry of this keeper.
    """
    self.wait()  # A checkpoint still being written in the background is committed first.
    with self._lock:
      mine = [e for e in self.entries if e.number == entry.number]
      if not mine:
        raise ValueError(
            f'mark_best: {entry.path} (step {entry.step}) is not a committed checkpoint')
      for e in self.entries:
        e.best = e is mine[0]
      self._select_kept()
      self._write_manifest()
      self._delete_unlisted()
    return mine[0]

  def _select_kept(self) -> None:
    """Keeps the newest `max_to_keep` entries, the newest `keep_good` good ones and the best."""
    keep = set(id(e) for e in self.entries[-self.max_to_keep:])
    keep.update(id(e) for e in [e for e in self.entries if e.good][-self.keep_good:])
    keep.update(id(e) for e in self.entries if e.best)
    self.entries = [e for e in self.entries if id(e) in keep]

  def _delete_unlisted(self) -> None:
    """Deletes checkpoint files the manifest does not list: pruned ones and crashed saves."""
    listed = {e.path for e in self.entries}
    for name in os.listdir(self.directory):
      match = re.match(r'(ckpt-\d+)\.(index|data-)', name)
      if match and match.group(1) not in listed:
        tf.io.gfile.remove(os.path.join(self.directory, name))
    # Keep TF's own `checkpoint` state file (what tf.train.latest_checkpoint reads) to the listed
    # checkpoints: a `TracedWriter` write bypasses the manager, which would otherwise keep it.
    if self.entries:
      kept = [os.path.join(self.directory, e.path) for e in self.entries]
      tf.compat.v1.train.update_checkpoint_state(self.directory, kept[-1],
                                                 all_model_checkpoint_paths=kept)

  # -- restoring ------------------------------------------------------------------------------
  def restore(self, entry: Entry) -> None:
    """Restores one checkpoint from disk; raises on a missing or corrupt one.

    Values in the file that nothing here takes (the tf.data iterator state older checkpoints
    hold) are left unread.
    """
    self.wait()
    status = self.checkpoint.restore(os.path.join(self.directory, entry.path))
    status.assert_existing_objects_matched()
    status.expect_partial()
    self.restored_from = 'disk'
    snapshot = self.snapshot
    if snapshot is not None and entry.good and entry.number != snapshot.holds:
      snapshot.capture(tag=entry.number)  # A rollback back to it then needs no disk read.
      snapshot.holds = entry.number

  def _restore_from_snapshot(self, candidates: List[Entry]) -> Optional[Entry]:
    """Restores the newest candidate from memory if the snapshot holds it; returns it, or None.

    The snapshot was captured from the very state that was written (and verified finite), so
    its values are those of the files, read back without touching the disk.
    """
    snapshot = self.snapshot
    if not candidates or snapshot is None or snapshot.holds != candidates[-1].number:
      return None
    snapshot.restore()
    self.restored_from = 'memory'
    return candidates[-1]

  def restore_latest(self, candidates: Optional[List[Entry]] = None) -> Optional[Entry]:
    """Restores the newest restorable checkpoint of `candidates` (default: all committed).

    From memory when the snapshot holds the newest; else from disk, where a corrupt or
    truncated one is reported through `warn` and the next older one is tried. Returns the
    restored entry, or None when there was none to restore.
    """
    self.wait()
    candidates = self.committed() if candidates is None else candidates
    self.restore_errors = []
    entry = self._restore_from_snapshot(candidates)
    if entry is not None:
      return entry
    for entry in reversed(candidates):
      try:
        self.restore(entry)
        return entry
      except Exception as e:  # pylint: disable=broad-except
        # A truncated file surfaces as IndexError, DataLossError, ValueError...: all mean corrupt.
        error = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        self.restore_errors.append((entry.path, error))
        self._warn('checkpoint_corrupt', entry.step, checkpoint=entry.path, error=error)
    return None


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


def _fsync(paths: List[str]) -> None:
  """Flushes files (and directories: their renames) to disk before a commit refers to them."""
  for path in paths:
    fd = os.open(path, os.O_RDONLY)
    try:
      os.fsync(fd)
    except OSError as e:
      if not (e.errno == errno.EINVAL and os.path.isdir(path)):  # Some file systems refuse it.
        raise
    finally:
      os.close(fd)


def why_unrestorable(errors_seen) -> str:
  """What the restore errors of `CheckpointKeeper.restore_latest` say, as advice for one line."""
  if not errors_seen:
    return 'no checkpoint to restore'
  path, error = errors_seen[0]  # The newest checkpoint's error.
  text = error.lower()
  if any(k in text for k in ('not bound', 'unresolved', 'not found in checkpoint',
                             'python objects', 'shape')):
    return (f'{path} was written for another model or policy set (its checkpoint_corrupt event '
            'has the details); resume with the same model and Trainer.policies that wrote it')
  if 'dtype' in text:
    return (f'{path} was written in another precision ({error[:80]}); resume with the '
            'train.precision that wrote it')
  return f'{path} is corrupt ({error[:120]}) and so is every older one'


class RunLock:
  """`<model_dir>/run.lock`: at most one live process trains in a model_dir.

  The lock is an exclusive `flock` on the file, which the kernel releases when the holder dies
  (kill -9 included), so a lock left by a killed process is taken over without guessing from pids.
  The file names the holder (pid, host, start time) for the refusal message; a clean release
  empties it, so a non-empty file found unlocked is the mark of a killed holder (`taken_over`).
  Re-entrant within a process (the CLI and the Trainer both take it). The file is never deleted:
  deleting a locked file lets two processes lock two different files of the same name.
  """

  _held: Dict[str, Dict[str, Any]] = {}  # realpath -> {'fd', 'count', 'taken_over'}

  def __init__(self, model_dir: str):
    self.path = os.path.join(model_dir, LOCK)
    self._key = None

  @property
  def taken_over(self) -> Optional[Dict[str, Any]]:
    """The holder a killed process left in the file, when this process took the lock over."""
    return self._held[self._key]['taken_over'] if self._key in self._held else None

  def acquire(self) -> 'RunLock':
    """Takes the lock; raises `errors.ModelDirBusyError` naming the live holder."""
    os.makedirs(os.path.dirname(self.path) or '.', exist_ok=True)
    key = os.path.realpath(self.path)
    if key in self._held:
      self._held[key]['count'] += 1
      self._key = key
      return self
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if not isinstance(e, BlockingIOError):  # ENOLCK, EOPNOTSUPP: this file system cannot lock.
        os.close(fd)
        logging.getLogger('stable_train').warning(
            'cannot lock %s (%s): two runs on this model_dir would not be stopped', self.path, e)
        return self
      holder = _read_holder(fd)
      os.close(fd)
      who = (f"pid {holder.get('pid')} on host {holder.get('host')}" if holder else
             'another process (it has not written its pid yet)')
      raise errors.ModelDirBusyError(
          f'{os.path.dirname(self.path) or "."} is in use by {who}; wait for it to finish, stop '
          'it, or use another --model_dir.') from None
    previous = _read_holder(fd)
    me = {'pid': os.getpid(), 'host': socket.gethostname(), 'start_time': round(time.time(), 3)}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(me) + '\n').encode(), 0)
    self._held[key] = {'fd': fd, 'count': 1, 'taken_over': previous or None}
    self._key = key
    return self

  def release(self) -> None:
    if self._key not in self._held:
      return
    held = self._held[self._key]
    held['count'] -= 1
    if held['count'] == 0:
      del self._held[self._key]
      try:
        os.ftruncate(held['fd'], 0)  # Released cleanly: nothing to take over.
      finally:
        os.close(held['fd'])  # Closing the last descriptor releases the flock.
    self._key = None


def _read_holder(fd: int) -> Optional[Dict[str, Any]]:
  try:
    text = os.pread(fd, 4096, 0).decode(errors='replace').strip()
    return json.loads(text) if text else None
  except (OSError, ValueError):
    return {'pid': '?', 'host': '?'}
