"""The calibration registry: the healthy matrix and the sick matrix (every cause, in
`cases.CAUSES` order), and the selection the script's flags make of them."""

from typing import List, Optional, Sequence

from scripts.calibration import cases
from scripts.calibration import healthy
from scripts.calibration import sick_arith
from scripts.calibration import sick_blind
from scripts.calibration import sick_blind2
from scripts.calibration import sick_blind3
from scripts.calibration import sick_blind4
from scripts.calibration import sick_blind5
from scripts.calibration import sick_blind6
from scripts.calibration import sick_blind7
from scripts.calibration import sick_blind8
from scripts.calibration import sick_blind9
from scripts.calibration import sick_blind10
from scripts.calibration import sick_blind11
from scripts.calibration import sick_blind12
from scripts.calibration import sick_blind13
from scripts.calibration import sick_blind14
from scripts.calibration import sick_blind15
from scripts.calibration import sick_blind16
from scripts.calibration import sick_blind17
from scripts.calibration import sick_blind18
from scripts.calibration import sick_blind19
from scripts.calibration import sick_blind20
from scripts.calibration import sick_blind21
from scripts.calibration import sick_blind22
from scripts.calibration import sick_blind23
from scripts.calibration import sick_blind24
from scripts.calibration import sick_blind25
from scripts.calibration import sick_blind26
from scripts.calibration import sick_blind27
from scripts.calibration import sick_blind28
from scripts.calibration import sick_blind29
from scripts.calibration import sick_blind30
from scripts.calibration import sick_blind31
from scripts.calibration import sick_blind32
from scripts.calibration import sick_blind33
from scripts.calibration import sick_blind34
from scripts.calibration import sick_blind35
from scripts.calibration import sick_blind36
from scripts.calibration import sick_blind37
from scripts.calibration import sick_blind38
from scripts.calibration import sick_blind39
from scripts.calibration import sick_blind40
from scripts.calibration import sick_blind41
from scripts.calibration import sick_blind42
from scripts.calibration import sick_blind43
from scripts.calibration import sick_blind44
from scripts.calibration import sick_blind45
from scripts.calibration import sick_blind46
from scripts.calibration import sick_blind47
from scripts.calibration import sick_blind48
from scripts.calibration import sick_blind49
from scripts.calibration import sick_blind50
from scripts.calibration import sick_blind51
from scripts.calibration import sick_blind52
from scripts.calibration import sick_blind53
from scripts.calibration import sick_blind54
from scripts.calibration import sick_data
from scripts.calibration import sick_fresh
from scripts.calibration import sick_hardware
from scripts.calibration import sick_training

HEALTHY: List[cases.Case] = list(healthy.HEALTHY.cases)
SICK: List[cases.Case] = sorted(
    sick_arith.ARITH.cases + sick_hardware.HARDWARE.cases + sick_training.TRAINING.cases +
    sick_data.DATA.cases + sick_fresh.FRESH.cases + sick_blind.BLIND.cases +
    sick_blind2.BLIND2.cases + sick_blind3.BLIND3.cases + sick_blind4.BLIND4.cases +
    sick_blind5.BLIND5.cases + sick_blind6.BLIND6.cases + sick_blind7.BLIND7.cases +
    sick_blind8.BLIND8.cases + sick_blind9.BLIND9.cases + sick_blind10.BLIND10.cases +
    sick_blind11.BLIND11.cases + sick_blind12.BLIND12.cases + sick_blind13.BLIND13.cases +
    sick_blind14.BLIND14.cases + sick_blind15.BLIND15.cases + sick_blind16.BLIND16.cases +
    sick_blind17.BLIND17.cases + sick_blind18.BLIND18.cases + sick_blind19.BLIND19.cases +
    sick_blind20.BLIND20.cases + sick_blind21.BLIND21.cases + sick_blind22.BLIND22.cases +
    sick_blind23.BLIND23.cases + sick_blind24.BLIND24.cases + sick_blind25.BLIND25.cases +
    sick_blind26.BLIND26.cases + sick_blind27.BLIND27.cases + sick_blind28.BLIND28.cases +
    sick_blind29.BLIND29.cases + sick_blind30.BLIND30.cases + sick_blind31.BLIND31.cases +
    sick_blind32.BLIND32.cases + sick_blind33.BLIND33.cases + sick_blind34.BLIND34.cases +
    sick_blind35.BLIND35.cases + sick_blind36.BLIND36.cases + sick_blind37.BLIND37.cases +
    sick_blind38.BLIND38.cases + sick_blind39.BLIND39.cases + sick_blind40.BLIND40.cases +
    sick_blind41.BLIND41.cases + sick_blind42.BLIND42.cases + sick_blind43.BLIND43.cases +
    sick_blind44.BLIND44.cases + sick_blind45.BLIND45.cases + sick_blind46.BLIND46.cases +
    sick_blind47.BLIND47.cases + sick_blind48.BLIND48.cases + sick_blind49.BLIND49.cases +
    sick_blind50.BLIND50.cases + sick_blind51.BLIND51.cases + sick_blind52.BLIND52.cases +
    sick_blind53.BLIND53.cases + sick_blind54.BLIND54.cases,
    key=lambda c: cases.CAUSES.index(c.expected))
ALL: List[cases.Case] = HEALTHY + SICK


def find(name: str) -> cases.Case:
  """The case called `name` (KeyError if none)."""
  for case in ALL:
    if case.name == name:
      return case
  raise KeyError(f'no calibration case {name!r}; see --list')


def select(matrix: str = 'both', only: Optional[Sequence[str]] = None, split: str = 'all',
           quick: bool = False) -> List[cases.Case]:
  """The cases of `matrix` ('healthy', 'sick' or 'both'), only those named in `only` (if any),
  sick ones of `split` (one of `cases.SPLITS`, or 'all'), only the --quick subset if `quick`."""
  chosen = {'healthy': HEALTHY, 'sick': SICK, 'both': ALL}[matrix]
  if only:
    chosen = [find(n) for n in only]
  if split != 'all':
    chosen = [c for c in chosen if c.expected == 'healthy' or c.split == split]
  if quick:
    chosen = [c for c in chosen if c.quick]
  return chosen
