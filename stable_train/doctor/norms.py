"""The gradient norms of a run's history as the doctor reads them: which steps a reading keeps,
and the largest one-step jump among them. numpy only."""

from typing import Any, Dict, Optional

import numpy as np


def after(history: Optional[Dict[str, Any]], since: int, size: int) -> np.ndarray:
  """Which of the history's `size` entries are of steps after `since` (all where unknown)."""
  steps = np.asarray((history or {}).get('steps') or [], np.float64)
  return steps > since if since and steps.size == size else np.ones(size, bool)


def largest_jump(norms: np.ndarray) -> float:
  """The largest one-step rise of the finite gradient norms `norms` (1.0 where none): a rise under
  100x that the norm came back down from (to within 2x its level before it) is the noise of a
  run's batches, not a jump."""
  if norms.size < 2:
    return 1.0
  after_rise = np.minimum.accumulate(norms[::-1])[::-1][1:]  # The lowest norm from each rise on.
  jumps = norms[1:] / np.maximum(norms[:-1], 1e-30)
  return float(np.where((after_rise > 2 * norms[:-1]) | (jumps >= 100), jumps, 1.0).max())


def healthy(norms: np.ndarray, steps: np.ndarray, began: Optional[int],
            clip_mean: float) -> Optional[float]:
  """The run's healthy gradient norm: the median of the history's finite `norms` of `steps`
  before its trouble `began` (the whole window reads high where it is mostly the blow-up), else
  AdaptiveClip's running mean `clip_mean` (NaN: none), else None (unknown)."""
  if began is not None and steps.size == norms.size:
    norms = norms[steps < began]
  norms = norms[np.isfinite(norms)]
  if norms.size:
    return float(np.median(norms))
  return float(clip_mean) if 0 < clip_mean < np.inf else None
