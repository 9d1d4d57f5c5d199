"""Missing-value codes among regression labels: a data set's "no value" marker (-999, -9999, a
raster's nodata) read as a value, which a squared or absolute error then pulls the model toward.

Core: pure functions of a loss and one batch's labels (numpy). The start check
(`runtime.loss_check`) names a finding once, as a `warning` event of cause 'bad_input'.
"""

import dataclasses
from typing import Dict, Optional, Tuple

import numpy as np

from stable_train.core import keras_parts
from stable_train.core import loss_match

# The codes data sets write for a missing value: hydrology and climate records (-999, -9999),
# survey files (-99, 999, 9999), int16 rasters' nodata (-32768, -32767) and float32 ones'
# (-3.4028235e38, float32's lowest), uint16 ones' (65535). Each is compared as the labels' own
# float type stores it (float16 holds -9999 as -10000).
MISSING_CODES: Tuple[float, ...] = (-9999.0, -999.0, -99.0, 999.0, 9999.0, -32768.0, -32767.0,
                                    65535.0, float(np.finfo(np.float32).min))
# A code is a marker only where it lies beyond the other labels by more than FAR times their
# range: a value the data could hold (a -99 dB floor beside levels down to -60) is not one.
FAR = 10.0
MIN_OTHERS = 8  # Labels besides the code needed to tell it from them.
KIND = 'missing_value_code_labels'
@dataclasses.dataclass(frozen=True)
class Finding:
  """A missing-value code found: the `code`, the `rows` holding it of `total`, the others'
  range (`low`, `high`), and the warning's one-line `message` and `fix`."""
  code: float
  rows: int
  total: int
  low: float
  high: float
  message: str
  fix: str
  kind: str = KIND

  def fields(self) -> Dict[str, object]:
    """The `warning` event's fields."""
    return {'kind': self.kind, 'message': self.message, 'fix': self.fix, 'code': self.code,
            'rows': self.rows}


def _as_stored(dtype) -> np.ndarray:
  """MISSING_CODES as labels of `dtype` hold them (float64): rounded to a float type narrower
  than float32 (float16, bfloat16; those beyond its range dropped), as they are otherwise."""
  codes = np.asarray(MISSING_CODES, np.float64)
  dtype = np.dtype(dtype)
  narrow_float = dtype.itemsize < 4 and (dtype.kind == 'f' or dtype.name == 'bfloat16')
  if not narrow_float:
    return codes
  with np.errstate(over='ignore'):
    rounded = codes.astype(dtype).astype(np.float64)
  return rounded[np.isfinite(rounded)]


def find_missing_codes(loss, labels) -> Optional[Finding]:
  """A missing-value code among the labels of a Keras regression loss (MSE, MAE, Huber, ...), or
  None. Found where some labels equal one of MISSING_CODES exactly and lie more than FAR x the
  other labels' range beyond them, with at least MIN_OTHERS others. Not judged: another loss (a
  custom one may mask the code out), a subclass with its own `call` (Keras's regression losses
  share one), non-finite labels (the input check's), or too few other labels to tell."""
  name = loss_match.regression_loss(loss)
  if name is None or labels is None or not keras_parts.plain_call(loss):
    return None
  stored = np.asarray(labels)
  values = stored.astype(np.float64).reshape(-1)
  if values.size == 0 or not np.all(np.isfinite(values)):
    return None
  coded = np.isin(values, _as_stored(stored.dtype))
  others = values[~coded]
  if not coded.any() or others.size < MIN_OTHERS:
    return None
  low, high = float(others.min()), float(others.max())
  margin = FAR * max(high - low, 1e-12)
  codes = [c for c in np.unique(values[coded]) if c < low - margin or c > high + margin]
  if not codes:
    return None
  code = float(codes[0])
  rows = int(np.sum(values == code))
  return Finding(
      code, rows, int(values.size), low, high,
      f'{rows} of the first batch\'s {values.size} labels are {code:g}, a missing-value code '
      f'far outside the others ({low:.3g} to {high:.3g}): read as a value, it pulls the '
      f'{name} loss and the model toward it',
      f'drop the rows whose label is {code:g} from the dataset (dataset.filter), or give them '
      'a sample weight of 0')
