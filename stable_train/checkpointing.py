"""Checkpoints that are only ever written finite, committed by a manifest, and restored safely.

`tf.train.CheckpointManager` writes the files; a checkpoint counts only once it is listed in
`manifest.json` (written atomically after the files are complete), so a crash mid-write never
leaves a checkpoint that the next run would load. Each manifest entry carries the global step and
a `good` mark (written while the run was healthy); only good checkpoints are rollback targets.
"""

import dataclasses
import json
import os
import re
from typing import Callable, List, Optional

import tensorflow as tf

from stable_train import events as events_lib

MANIFEST = 'manifest.json'


@dataclasses.dataclass
class Entry:
  """One committed checkpoint."""
  number: int
  step: int
  good: bool
  path: str  # Prefix, relative to the checkpoint directory (e.g. 'ckpt-3').


class CheckpointKeeper:
  """Writes, lists, prunes and restores the checkpoints of one run."""

  def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, *, max_to_keep: int = 5,
               keep_good: int = 3, warn: Optional[Callable[..., None]] = None):
    """Initialises the keeper.

    Args:
      checkpoint: the `tf.train.Checkpoint` holding everything to save.
      directory: where checkpoints live (`<model_dir>/checkpoints`).
      max_to_keep: how many of the newest checkpoints to keep.
      keep_good: how many good checkpoints to keep besides those, so that repeated rollbacks can
        step further back.
      warn: called as warn(event, **fields) when a checkpoint cannot be restored.
    """
    self.checkpoint = checkpoint
    self.directory = directory
    self.max_to_keep = max_to_keep
    self.keep_good = keep_good
    self._warn = warn or (lambda *a, **k: None)
    os.makedirs(directory, exist_ok=True)
    # max_to_keep=None: retention follows the manifest (keep good ones), not file age.
    self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None,
                                              checkpoint_name='ckpt')
    self.entries: List[Entry] = self._read_manifest()

  # -- manifest -------------------------------------------------------------------------------
  def _manifest_path(self) -> str:
    return os.path.join(self.directory, MANIFEST)

  def _read_manifest(self) -> List[Entry]:
    path = self._manifest_path()
    if not os.path.exists(path):
      return []
    with open(path) as f:
      data = json.load(f)
    return [Entry(**e) for e in data.get('checkpoints', [])]

  def _write_manifest(self) -> None:
    events_lib.write_json_atomic(
        self._manifest_path(), {'checkpoints': [dataclasses.asdict(e) for e in self.entries]})

  def _files_present(self, entry: Entry) -> bool:
    prefix = os.path.join(self.directory, entry.path)
    return (os.path.exists(prefix + '.index') and
            bool(tf.io.gfile.glob(prefix + '.data-*')))

  # -- queries --------------------------------------------------------------------------------
  def committed(self) -> List[Entry]:
    """Committed checkpoints whose files are present, oldest first."""
    return [e for e in self.entries if self._files_present(e)]

  def good(self) -> List[Entry]:
    return [e for e in self.committed() if e.good]

  def last_good(self, before_step: Optional[int] = None) -> Optional[Entry]:
    cands = [e for e in self.good() if before_step is None or e.step < before_step]
    return cands[-1] if cands else None

  # -- writing --------------------------------------------------------------------------------
  def _numbers_on_disk(self) -> List[int]:
    return [int(m.group(1)) for m in (re.match(r'ckpt-(\d+)\.', n)
                                      for n in os.listdir(self.directory)) if m]

  def _next_number(self) -> int:
    """One more than any number in the manifest or on disk: a checkpoint is never overwritten."""
    return max([e.number for e in self.entries] + self._numbers_on_disk(), default=0) + 1

  def _write_files(self, number: int) -> str:
    """Writes the checkpoint files; returns their prefix."""
    return self.manager.save(checkpoint_number=number)

  def save(self, step: int, good: bool) -> Entry:
    """Writes a checkpoint; the caller has verified that every variable is finite."""
    number = self._next_number()
    path = self._write_files(number)
    entry = Entry(number=number, step=int(step), good=bool(good), path=os.path.basename(path))
    self.entries.append(entry)
    self._select_kept()
    self._write_manifest()  # The commit point.
    # Only now delete files: a crash before the commit must still find the old ones.
    self._delete_unlisted()
    return entry

  def mark_bad(self, after_step: int) -> List[Entry]:
    """Marks every good checkpoint written after `after_step` as not good (persisted)."""
    changed = [e for e in self.entries if e.good and e.step > after_step]
    for e in changed:
      e.good = False
    if changed:
      self._write_manifest()
    return changed

  def _select_kept(self) -> None:
    """Keeps the newest `max_to_keep` entries and the newest `keep_good` good ones."""
    keep = set(id(e) for e in self.entries[-self.max_to_keep:])
    keep.update(id(e) for e in [e for e in self.entries if e.good][-self.keep_good:])
    self.entries = [e for e in self.entries if id(e) in keep]

  def _delete_unlisted(self) -> None:
    """Deletes checkpoint files the manifest does not list: pruned ones and crashed saves."""
    listed = {e.path for e in self.entries}
    for name in os.listdir(self.directory):
      match = re.match(r'(ckpt-\d+)\.(index|data-)', name)
      if match and match.group(1) not in listed:
        tf.io.gfile.remove(os.path.join(self.directory, name))
    # Keep TF's own `checkpoint` state file to the listed checkpoints: the manager rewrites it
    # from this private record on every save, which would otherwise grow with every save ever made.
    record = getattr(self.manager, '_maybe_delete', None)
    if record is not None:
      for prefix in list(record):
        if os.path.basename(prefix) not in listed:
          del record[prefix]

  # -- restoring ------------------------------------------------------------------------------
  def restore(self, entry: Entry) -> None:
    """Restores one checkpoint; raises on a missing or corrupt one."""
    status = self.checkpoint.restore(os.path.join(self.directory, entry.path))
    status.assert_existing_objects_matched()

  def restore_latest(self, candidates: Optional[List[Entry]] = None) -> Optional[Entry]:
    """Restores the newest restorable checkpoint of `candidates` (default: all committed).

    A corrupt or truncated one is reported through `warn` and the next older one is tried.
    Returns the restored entry, or None when there was none to restore.
    """
    candidates = self.committed() if candidates is None else candidates
    for entry in reversed(candidates):
      try:
        self.restore(entry)
        return entry
      except Exception as e:  # pylint: disable=broad-except
        # A truncated file surfaces as IndexError, DataLossError, ValueError...: all mean corrupt.
        self._warn('checkpoint_corrupt', entry.step, checkpoint=entry.path,
                   error=str(e).splitlines()[0][:300])
    return None
