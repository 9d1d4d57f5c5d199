"""`<model_dir>/run.lock`: at most one live process trains in a model_dir."""

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from typing import Any, Dict, Iterator, Optional

from stable_train import errors

LOCK = 'run.lock'


class RunLock:
  """`<model_dir>/run.lock`: at most one live process trains in a model_dir.

  The lock is an exclusive `flock` on the file, which the kernel releases when the holder dies
  (kill -9 included), so a lock left by a killed process is taken over without guessing from pids.
  The file names the holder (pid, host, start time) for the refusal message; a clean release
  empties it, so a non-empty file found unlocked is the mark of a killed holder (`taken_over`).
  The process holds a model_dir's lock once (`hold` counts its holders: the CLI around the
  whole job, `fit` around a run) and releases it when the last holder is done. The file is never
  deleted: deleting a locked file lets two processes lock two different files of the same name.
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
    try:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
    except (IsADirectoryError, PermissionError) as e:  # Not the file this module writes.
      raise errors.ConfigError(
          f'cannot open the run lock {self.path} ({e.strerror}); it must be a writable file: '
          'remove or fix it.') from None
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
  """The holder the file names (None: empty); {'pid': '?', 'host': '?'} for anything this module
  did not write there."""
  try:
    text = os.pread(fd, 4096, 0).decode(errors='replace').strip()
    holder = json.loads(text) if text else None
  except (OSError, ValueError):
    holder = {}
  if holder is None:
    return None
  if not isinstance(holder, dict):
    holder = {}
  return {'pid': holder.get('pid', '?'), 'host': holder.get('host', '?')}


@contextlib.contextmanager
def hold(model_dir: str) -> Iterator[RunLock]:
  """Holds `model_dir`'s lock for the block (see `RunLock`); raises ModelDirBusyError first when
  another live process holds it."""
  lock = RunLock(model_dir).acquire()
  try:
    yield lock
  finally:
    lock.release()
