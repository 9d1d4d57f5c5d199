"""The collapse probe of DivergenceCheck: whether a model's outputs stopped depending on the
example, judged against an untrained model of the same architecture (host side, eager)."""

import logging
from typing import Optional, Tuple

import numpy as np

from stable_train.policies import diagnostics

log = logging.getLogger('stable_train')

# A model is collapsed whose outputs on the first batch vary from row to row by at most this
# fraction of their scale (a dead ReLU net: exactly 0 on any CPU; a healthy net: 1e-2 and more).
# A tolerance, never bit equality: no verdict hangs on a kernel's last bits...
COLLAPSE_SPREAD = 1e-5
# ...where an untrained model of the same architecture varied by more than this: outputs the same
# for every row are no news in a model that started that way (a keras.applications model's
# BatchNorm statistics at initialisation give every row the same outputs in inference mode).
UNTRAINED_SPREAD = 1e-3
_UNKNOWN = object()


class CollapseProbe:
  """Probes the outputs' spread and keeps the untrained reference, measured once per process:
  a fresh copy of the model (`diagnostics.untrained_spread`), else the initial weights' spread
  (`measure_initial`, at the start check), else unknown (no verdict)."""

  def __init__(self):
    self._initial = None  # The initial weights' spread, when the start check had them.
    self._fresh = _UNKNOWN  # A fresh copy's spread (None: the model cannot be copied).

  def measure_initial(self, probe, weights) -> None:
    """Keeps the spread of the model's outputs with its initial `weights`."""
    self._initial = diagnostics.output_spread(probe, weights)

  def untrained(self, probe) -> Optional[float]:
    """An untrained model's output spread on the first batch, or None where unknown."""
    if self._fresh is _UNKNOWN:
      self._fresh = diagnostics.untrained_spread(probe)
    return self._initial if self._fresh is None else self._fresh

  def collapsed(self, probe) -> Optional[Tuple[float, float]]:
    """(the outputs' spread, the untrained model's) when the model collapsed, else None."""
    spread = diagnostics.output_spread(probe)
    if spread is None or spread > COLLAPSE_SPREAD:
      return None
    untrained = self.untrained(probe)
    if untrained is None or not untrained > UNTRAINED_SPREAD:
      log.debug('outputs the same for every example, as an untrained model\'s (spread %s): no '
                'collapse', untrained)
      return None
    return spread, untrained


def moved(probe, initial) -> bool:
  """Whether a trainable weight differs from its `initial` value: outputs the same for every row
  that the initial weights gave (x * sqrt(0), say) are no collapse."""
  return any(not np.array_equal(w, v.numpy())
             for w, v in zip(initial, probe.model.trainable_variables))
