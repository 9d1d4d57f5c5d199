"""A checkpoint write in flight (`Write`): on a thread of its own, waited for to its commit point
or to its end, or done on the caller's thread."""

import threading
from typing import Any, Callable, Optional


class Write:
  """One checkpoint write. With `run`, a thread runs `run(entry, committed)`, which sets
  `committed` once the write is committed (or has failed) and then prunes; without, the caller
  writes and sets `committed` itself."""

  def __init__(self, entry: Any, run: Optional[Callable[[Any, threading.Event], None]] = None):
    self.entry = entry
    self.committed = threading.Event()
    self.thread = None if run is None else threading.Thread(
        target=run, args=(entry, self.committed), name=f'stable_train checkpoint {entry.number}',
        daemon=True)
    if self.thread is not None:
      self.thread.start()

  def join(self, prune: bool = True) -> Optional[threading.Thread]:
    """Waits for the write to end, or (`prune=False`) to its commit: then returns its thread,
    which may still be deleting the files the commit dropped (None: the write has ended)."""
    if self.thread is None:
      return None
    if prune:
      self.thread.join()
      return None
    self.committed.wait()
    return self.thread
