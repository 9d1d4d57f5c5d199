"""`checkpoints/manifest.json`: the commit record of a run's checkpoints, their marks and retention.

A checkpoint counts only once it is listed here (the file is written atomically after the
checkpoint's files are complete and synced), so a crash mid-write never leaves a checkpoint that
the next run would load. Each entry carries the global step, a `good` mark (written while the run
was healthy: only good checkpoints are rollback targets) and at most one entry a `best` mark (the
best evaluation so far). Files the manifest does not list are deleted only after a commit.
"""

import dataclasses
import json
import os
import re
import threading
from typing import List, Optional

from stable_train import errors
from stable_train.runfiles import events as events_lib

MANIFEST = 'manifest.json'
_CHECKPOINT_FILE = re.compile(r'(ckpt-(\d+))\.(index|data-)')


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
  # An evaluation was due at this step and had not run (a signal stopped the run first, or
  # during it): a run resumed from here evaluates before it trains.
  eval_due: bool = False


_FIELD_TYPES = {'number': int, 'step': int, 'good': bool, 'path': str, 'best': bool,
                'input_signature': (str, type(None)), 'eval_due': bool}
_PATH = re.compile(r'ckpt-\d+')


def read_entries(path: str, fix: str) -> List[Entry]:
  """The entries of the manifest file at `path`, each field checked: a file in a form stable_train
  does not write is a one-line CheckpointError (what is wrong, then `fix`), never a traceback."""
  try:
    with open(path) as f:
      data = json.load(f)  # Invalid UTF-8 or JSON: a ValueError.
    if not isinstance(data, dict) or not isinstance(data.get('checkpoints'), list):
      raise ValueError('no "checkpoints" list')
    return [_entry(e) for e in data['checkpoints']]
  except (OSError, ValueError, TypeError) as e:
    raise errors.CheckpointError(
        f'{path} is unreadable ({errors.one_line(e)[:120]}); {fix}') from None


def _entry(value) -> Entry:
  if not isinstance(value, dict):
    raise ValueError(f'an entry is {json.dumps(value)[:40]}, not an object')
  entry = Entry(**value)  # TypeError for a missing or an unknown field.
  for name, types in _FIELD_TYPES.items():
    v = getattr(entry, name)
    if not isinstance(v, types) or (types is int and isinstance(v, bool)):
      raise ValueError(f'{name}={json.dumps(v)[:40]} in entry {json.dumps(value)[:80]}')
  if entry.number < 1 or entry.step < 0 or not _PATH.fullmatch(entry.path):
    raise ValueError(f'entry {json.dumps(value)[:80]} is not a checkpoint of this directory')
  return entry


def files_present(entry: Entry, names: set) -> bool:
  """Whether the listing `names` of the checkpoint directory holds `entry`'s files."""
  return (entry.path + '.index' in names and
          any(n.startswith(entry.path + '.data-') for n in names))


class Manifest:
  """The entries of one checkpoint directory; they change under `lock` (a background write
  commits from its own thread)."""

  def __init__(self, directory: str, *, max_to_keep: int, keep_good: int, writes: bool = True):
    """Reads the manifest (a fresh directory gets an empty one at once).

    Args:
      directory: the checkpoint directory.
      max_to_keep: how many of the newest checkpoints to keep.
      keep_good: how many good checkpoints to keep besides those.
      writes: False for a non-chief worker, which mirrors the chief's record in memory only.

    Raises:
      errors.CheckpointError: checkpoint files without a readable manifest.
    """
    self.directory = directory
    self.max_to_keep = max_to_keep
    self.keep_good = keep_good
    self.writes = writes
    self.lock = threading.RLock()
    self.entries: List[Entry] = []
    self.entries = self._read()

  @property
  def path(self) -> str:
    return os.path.join(self.directory, MANIFEST)

  def _read(self) -> List[Entry]:
    fix = (f'restore it from a backup, or move {self.directory} away (or use a new --model_dir) '
           'to start afresh; nothing was changed.')
    if not os.path.exists(self.path):
      found = sorted({m.group(1) for m in map(_CHECKPOINT_FILE.match, os.listdir(self.directory))
                      if m})
      if found:
        raise errors.CheckpointError(
            f'{self.path} is missing but {self.directory} holds checkpoint files '
            f'({", ".join(found[:5])}{", ..." if len(found) > 5 else ""}): the commit record was '
            f'deleted; {fix}')
      # Written at once on a fresh directory, so that files without a manifest always mean a
      # deleted one (a crash during the first save leaves files and this empty manifest).
      self.write()
      return []
    return read_entries(self.path, fix)

  def write(self) -> None:
    """Writes the entries atomically (the commit point of a checkpoint or a mark)."""
    if self.writes:
      events_lib.write_json_atomic(
          self.path, {'checkpoints': [dataclasses.asdict(e) for e in self.entries]})

  # -- queries --------------------------------------------------------------------------------
  def committed(self) -> List[Entry]:
    """The entries whose files are present, oldest first."""
    with self.lock:
      entries = list(self.entries)
      names = set(os.listdir(self.directory))  # One listing (a rollback reads this).
    return [e for e in entries if files_present(e, names)]

  def numbers_on_disk(self) -> List[int]:
    return [int(m.group(2)) for m in map(_CHECKPOINT_FILE.match, os.listdir(self.directory))
            if m]

  def next_number(self) -> int:
    """One more than any number in the manifest or on disk: a checkpoint is never overwritten."""
    return max([e.number for e in self.entries] + self.numbers_on_disk(), default=0) + 1

  # -- changes --------------------------------------------------------------------------------
  def select_kept(self) -> None:
    """Keeps the newest `max_to_keep` entries, the newest `keep_good` good ones and the best."""
    keep = set(id(e) for e in self.entries[-self.max_to_keep:])
    keep.update(id(e) for e in [e for e in self.entries if e.good][-self.keep_good:])
    keep.update(id(e) for e in self.entries if e.best)
    self.entries = [e for e in self.entries if id(e) in keep]

  def mark_bad(self, after_step: int) -> List[Entry]:
    """Marks every good entry written after `after_step` not good; returns those changed (the
    caller writes the manifest)."""
    with self.lock:
      changed = [e for e in self.entries if e.good and e.step > after_step]
      for e in changed:
        e.good = False
    return changed

  def mark_best(self, entry: Entry) -> Entry:
    """Marks committed `entry` the best (the previous best loses its mark and, no longer
    protected, is dropped if rotation would have); the caller writes and prunes.

    Raises:
      ValueError: `entry` is not an entry of this manifest.
    """
    with self.lock:
      mine = [e for e in self.entries if e.number == entry.number]
      if not mine:
        raise ValueError(
            f'mark_best: {entry.path} (step {entry.step}) is not a committed checkpoint')
      for e in self.entries:
        e.best = e is mine[0]
      self.select_kept()
    return mine[0]

  def delete_unlisted(self) -> None:
    """Deletes checkpoint files the manifest does not list (pruned ones and crashed saves), and
    keeps TF's own `checkpoint` state file (what `tf.train.latest_checkpoint` reads) to the listed
    checkpoints."""
    if not self.writes:
      return  # The chief's files are the chief's to delete.
    listed = {e.path for e in self.entries}
    for name in os.listdir(self.directory):
      match = _CHECKPOINT_FILE.match(name)
      if match and match.group(1) not in listed:
        os.remove(os.path.join(self.directory, name))
    if self.entries:  # TF's CheckpointState text format, paths relative to the directory.
      lines = [f'model_checkpoint_path: {json.dumps(self.entries[-1].path)}']
      lines += [f'all_model_checkpoint_paths: {json.dumps(e.path)}' for e in self.entries]
      # Not the commit record (the manifest is): atomic, not synced.
      events_lib.write_atomic(os.path.join(self.directory, 'checkpoint'), '\n'.join(lines) + '\n',
                              sync=False)
