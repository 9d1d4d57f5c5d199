"""The checkpoint keeper: checkpoints only ever written finite, committed by the manifest, restored
safely; and `TracedWriter`, a checkpoint write traced once.

The files of a checkpoint are written, synced to disk, then listed in `manifest.json` (the commit,
`manifest.Manifest`). On a single device the newest good checkpoint is also kept in memory
(`state.Snapshot`): it is written from there in the background while training goes on, and a
rollback to it restores from there. Under a multi-worker strategy every worker takes part in each
save; only the chief's files are kept (`WorkerCheckpointKeeper`).
"""

import contextlib
import errno
import glob
import logging
import os
import re
import shutil
import threading
from typing import Callable, List, Optional

import tensorflow as tf

from stable_train import errors
from stable_train.runfiles import background as background_lib
from stable_train.runfiles import manifest as manifest_lib

Entry = manifest_lib.Entry
MANIFEST = manifest_lib.MANIFEST
# TensorFlow writes a checkpoint into `<prefix>_temp/` and renames the files out when complete; a
# kill during a save leaves the folder behind. It is never committed.
_TEMP_FOLDER = re.compile(r'ckpt-\d+_temp$')


class CheckpointKeeper:
  """Writes, lists, prunes and restores the checkpoints of one run."""

  def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, *, max_to_keep: int = 5,
               keep_good: int = 3, warn: Optional[Callable[..., None]] = None,
               snapshot=None, writer: Optional[Callable[[str], str]] = None,
               snapshot_writer: Optional[Callable[[str], str]] = None,
               before_commit: Optional[Callable[[Entry], None]] = None,
               before_write: Optional[Callable[[str], None]] = None):
    """Initialises the keeper.

    Args:
      checkpoint: the `tf.train.Checkpoint` holding everything to save.
      directory: where checkpoints live (`<model_dir>/checkpoints`).
      max_to_keep, keep_good: retention (`manifest.Manifest`): the newest, and good ones besides.
      warn: warn(event, step, **fields) for `checkpoint_corrupt` and `checkpoint_failed`.
      snapshot: a `state.Snapshot` of the same checkpoint (good checkpoints are captured in it;
        a rollback to the one it holds restores from memory), or None.
      writer: writes the live variables at a prefix (`state.TracedWriter`); None: plain write.
      snapshot_writer: writes the snapshot's copies under the live keys: good checkpoints are
        then written from the snapshot, and may be written in the background.
      before_commit: called with each entry in its writing thread once its files are on disk,
        just before the commit (the `checkpoint` event; an error from it fails the write).
      before_write: called with each prefix before its files are written; an OSError from it
        fails that write (the seam fault injection uses for a full disk).
    """
    self.checkpoint = checkpoint
    checkpoint.save_counter  # pylint: disable=pointless-statement  (created, as a save would)
    self.directory = directory
    self._warn = warn or (lambda *a, **k: None)
    self.snapshot = snapshot
    self._writer = writer
    self._snapshot_writer = snapshot_writer
    self._before_commit = before_commit
    self._before_write = before_write
    self.input_signature: Optional[str] = None  # Recorded in each new entry.
    self.restored_from: Optional[str] = None  # 'memory' or 'disk': the last restore's source.
    # The write in flight (a `background_lib.Write`); its error once it has failed.
    self._pending, self._pending_error = None, None
    self._pruning: Optional[threading.Thread] = None  # A committed write's thread, pruning.
    os.makedirs(directory, exist_ok=True)
    self.manifest = self._open_manifest(directory, max_to_keep, keep_good)
    self.restore_errors: List = []  # (path, first error line) of the last restore_latest.
    self._remove_orphan_temps()

  def _open_manifest(self, directory, max_to_keep, keep_good) -> manifest_lib.Manifest:
    return manifest_lib.Manifest(directory, max_to_keep=max_to_keep, keep_good=keep_good)

  def _remove_orphan_temps(self) -> None:
    """Deletes `ckpt-N_temp/` folders left by a process killed during a save (never committed;
    safe while the run holds the model_dir's lock)."""
    for name in os.listdir(self.directory):
      path = os.path.join(self.directory, name)
      if _TEMP_FOLDER.match(name) and os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)

  # -- queries --------------------------------------------------------------------------------
  @property
  def entries(self) -> List[Entry]:
    """The manifest's entries (committed; their files may be gone), oldest first."""
    return self.manifest.entries

  def committed(self) -> List[Entry]:
    """Committed checkpoints whose files are present, oldest first (not the one in flight)."""
    return self.manifest.committed()

  def good(self) -> List[Entry]:  # The committed checkpoints marked good.
    return [e for e in self.committed() if e.good]

  def last_good(self, before_step: Optional[int] = None) -> Optional[Entry]:
    return next((e for e in reversed(self.good()) if before_step is None or e.step < before_step),
                None)

  def best(self) -> Optional[Entry]:  # The committed checkpoint marked best, or None.
    return next((e for e in reversed(self.committed()) if e.best), None)

  @property
  def pending(self) -> Optional[Entry]:
    """The entry being written in the background (not committed yet), or None."""
    return self._pending.entry if self._pending is not None else None

  # -- writing --------------------------------------------------------------------------------
  def _write_files(self, number: int) -> str:
    """Writes the checkpoint files and syncs them (and the folder's renames) to disk; returns
    their prefix. From the snapshot when it was captured for this checkpoint (the state of the
    save, whatever training did since), else from the live variables."""
    prefix = os.path.join(self.directory, f'ckpt-{number}')
    if self._before_write is not None:
      self._before_write(prefix)
    snapshot = self.snapshot
    if snapshot is not None and snapshot.captured_for == number and self._snapshot_writer:
      prefix = self._snapshot_writer(prefix)
    elif self._writer is not None:
      prefix = self._writer(prefix)
    else:
      prefix = self.checkpoint.write(prefix)
    _fsync([prefix + '.index'] + glob.glob(glob.escape(prefix) + '.data-*') + [self.directory])
    return prefix

  def _write_manifest(self) -> None:
    self.manifest.write()

  def save(self, step: int, good: bool, *, background: bool = False,
           eval_due: bool = False) -> Entry:
    """Writes a checkpoint of the current state (the caller has verified that every variable is
    finite), after completing any write still in flight. A good checkpoint is captured in the
    snapshot and written from it; with `background` (a good checkpoint, a snapshot writer) a
    thread writes, syncs and commits it while the caller goes on (`wait` completes it). Returns
    the entry (committed, unless written in the background). `eval_due`: the evaluation at
    this step has not run yet (`Entry.eval_due`).

    Raises:
      errors.CheckpointError: this write, or the one in flight, failed (a full disk, a lost
        mount); what it wrote was removed and the committed checkpoints are as they were.
    """
    self.wait()
    number = self.manifest.next_number()
    entry = Entry(number=number, step=int(step), good=bool(good), path=f'ckpt-{number}',
                  input_signature=self.input_signature, eval_due=bool(eval_due))
    if self.snapshot is not None and entry.good:
      self.snapshot.capture(tag=number)
    if background and entry.good and self.snapshot is not None and self._snapshot_writer:
      self._pending = background_lib.Write(entry, self._write_and_commit)
      return entry
    self._pending = background_lib.Write(entry)
    self._write_and_commit(entry, self._pending.committed)
    return self.wait()

  def wait(self, prune: bool = True) -> Optional[Entry]:
    """Completes the write in flight, if any; returns its committed entry (or None). Raises
    `errors.CheckpointError` if it failed (after a `checkpoint_failed` warning). `prune=False`:
    to its commit only (its thread prunes on; the next `wait` joins it)."""
    if self._pruning is not None:  # The last write's prune.
      self._pruning = self._pruning.join()  # (None.)
    if self._pending is None:
      return None
    entry, self._pruning = self._pending.entry, self._pending.join(prune)
    self._pending = None
    error, self._pending_error = self._pending_error, None
    if error is not None:
      _raise_write_error(entry, error, self._warn, self.committed())
    if self.snapshot is not None and self.snapshot.captured_for == entry.number:
      self.snapshot.holds = entry.number
    return entry

  def _write_and_commit(self, entry: Entry, committed: threading.Event) -> None:
    """Writes and syncs `entry`'s files, commits it (then sets `committed`), prunes; an error is
    recorded, not raised (this may run in a thread of its own)."""
    manifest = self.manifest
    try:
      entry.path = os.path.basename(self._write_files(entry.number))
      if self._before_commit is not None:
        self._before_commit(entry)
      with manifest.lock:
        before = list(manifest.entries)
        manifest.entries.append(entry)
        manifest.select_kept()
        try:
          self._write_manifest()  # The commit point.
        except Exception:
          manifest.entries = before  # The manifest on disk is the old one (written atomically).
          raise
    except Exception as e:  # pylint: disable=broad-except
      self._remove_uncommitted(entry.number)  # A full disk leaves half a checkpoint; never listed.
      self._pending_error = e
      return
    finally:
      committed.set()  # Committed or failed: what `wait(prune=False)` waits for.
    try:
      with manifest.lock:
        # Only now delete files: a crash before the commit must still find the old ones.
        manifest.delete_unlisted()
    except OSError as e:  # The new checkpoint is committed; old files wait for the next prune.
      logging.getLogger('stable_train').warning('could not prune old checkpoints: %s', e)

  def _remove_uncommitted(self, number: int) -> None:
    """Deletes what a failed save of checkpoint `number` left (it is in no manifest)."""
    prefix = os.path.join(self.directory, f'ckpt-{number}')
    for name in glob.glob(glob.escape(prefix) + '.*'):
      with contextlib.suppress(OSError):
        os.remove(name)
    shutil.rmtree(prefix + '_temp', ignore_errors=True)

  def mark_bad(self, after_step: int) -> List[Entry]:
    """Marks every good checkpoint written after `after_step` as not good (persisted)."""
    self.wait()
    changed = self.manifest.mark_bad(after_step)
    if changed:
      with self.manifest.lock:
        self._write_manifest()
    return changed

  def mark_best(self, entry: Entry) -> Entry:
    """Marks committed checkpoint `entry` the best, persisted (see `Manifest.mark_best`)."""
    self.wait()  # A checkpoint still being written in the background is committed first.
    with self.manifest.lock:
      best = self.manifest.mark_best(entry)
      self._write_manifest()
      self.manifest.delete_unlisted()
    return best

  # -- restoring ------------------------------------------------------------------------------
  def restore(self, entry: Entry) -> None:
    """Restores one checkpoint from disk; raises on a missing or corrupt one (values nothing here
    takes, e.g. an old checkpoint's tf.data iterator state, are left unread)."""
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
    """Restores the newest candidate from memory if the snapshot holds it; returns it, or None."""
    snapshot = self.snapshot
    if not candidates or snapshot is None or snapshot.holds != candidates[-1].number:
      return None
    snapshot.restore()
    self.restored_from = 'memory'
    return candidates[-1]

  def restore_latest(self, candidates: Optional[List[Entry]] = None) -> Optional[Entry]:
    """Restores the newest restorable checkpoint of `candidates` (default: all committed).

    From memory when the snapshot holds the newest (captured from the very state that was
    written and verified finite: the values of the files, without the disk); else from disk,
    where a corrupt or truncated one is reported through `warn` and the next older one is tried.
    Returns the restored entry, or None when there was none to restore.
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
        error = errors.one_line(e)[:300]
        self.restore_errors.append((entry.path, error))
        self._warn('checkpoint_corrupt', entry.step, checkpoint=entry.path, error=error)
        if _written_for_another_program(error):
          break  # The older ones were written by the same program: they would not fit either.
    return None


def _raise_write_error(entry: Entry, error: BaseException, warn, committed: List[Entry]):
  """Raises a failed write's CheckpointError (after a `checkpoint_failed` warning)."""
  # A full disk, a lost mount: what the write left was removed; the committed checkpoints
  # stand. Training on without checkpoints would lose work, so the caller stops the run.
  if not isinstance(error, (OSError, tf.errors.OpError)):
    raise error
  message = errors.one_line(error)[:300]  # 'No space left on device: <path>', not TF's header.
  warn('checkpoint_failed', entry.step, error=message)
  resume = (f'from {committed[-1].path} (step {committed[-1].step})' if committed
            else 'from step 0')
  raise errors.CheckpointError(
      f'could not write a checkpoint at step {entry.step}: {message}; free space (or fix the '
      f'directory) and rerun the same command: it resumes {resume}.') from None


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


# How a restore says that the checkpoint holds another structure than the objects restoring it.
_MISMATCH = ('not bound', 'unresolved', 'not found in checkpoint', 'python objects',
             'does not match the shape stored', 'received incompatible tensor with shape')
_DTYPES = re.compile(r'expected dtype (\w+) does not equal original dtype (\w+)')
_FLOAT_DTYPES = {'half', 'float', 'double', 'bfloat16', 'float16', 'float32', 'float64'}


def _written_for_another_program(error: str) -> bool:
  return bool(_DTYPES.search(error)) or any(k in error.lower() for k in _MISMATCH)


def why_unrestorable(errors_seen) -> str:
  """What the restore errors of `CheckpointKeeper.restore_latest` say, as advice for one line."""
  if not errors_seen:
    return 'no checkpoint to restore'
  path, error = errors_seen[0]  # The newest checkpoint's error.
  dtypes = _DTYPES.search(error)
  if dtypes and {dtypes.group(1), dtypes.group(2)} <= _FLOAT_DTYPES:
    return (f'{path} was written in another precision ({dtypes.group(2)} variables; this run has '
            f'{dtypes.group(1)}); resume with the train.precision that wrote it')
  if _written_for_another_program(error):
    return (f'{path} was written for another model or policy set ({error[:160]}); resume with '
            'the same model and Trainer.policies that wrote it')
  return f'{path} is corrupt ({error[:120]}) and so is every older one'
