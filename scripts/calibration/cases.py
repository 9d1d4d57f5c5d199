"""The registry's record types: a `Case` (a healthy run or a sick scenario, with its expected
cause, architecture, front doors, seeds, split and citation) and the `Setup` its builder returns
(the model, optimizer, loss and data of one run)."""

import dataclasses
from typing import Any, Callable, List, Optional, Tuple

CAUSES = ('exploding_gradients', 'learning_rate', 'initialisation', 'division_or_log',
          'softmax_overflow', 'precision', 'bad_input', 'transient', 'loss_output_mismatch')
DOORS = ('trainer', 'fit')
# 'tune' (the rules may be tuned on it), 'held_out' (fixed, never tuned on), 'fresh' (written
# later, blind to the doctor's rules: sick_fresh.py), 'blind' (written later still, blind to
# the rules that came after the fresh split was read: sick_blind.py) and 'blind2' (a second blind
# set, written without reading the doctor, its policies or the other sick files, on new
# architectures: sick_blind2.py) and 'blind3' (a third, written the same way after the default
# stack took Forensics in: sick_blind3.py) and 'blind4' (a fourth, written the same way on new
# architectures: sick_blind4.py) and 'blind5' (a fifth, the same way: sick_blind5.py) and
# 'blind6' (a sixth, the same way: sick_blind6.py) and 'blind7' (a seventh, the same way:
# sick_blind7.py) and 'blind8' (an eighth, the same way: sick_blind8.py) and 'blind9' (a ninth,
# the same way: sick_blind9.py) and 'blind10' (a tenth, the same way: sick_blind10.py) and
# 'blind11' (an eleventh, the same way: sick_blind11.py) and 'blind12' (a twelfth, the same way:
# sick_blind12.py) and 'blind13' (a thirteenth, the same way: sick_blind13.py) and 'blind14' (a
# fourteenth, the same way: sick_blind14.py) and 'blind15' (a fifteenth, the same way:
# sick_blind15.py) and 'blind16' (a sixteenth, the same way: sick_blind16.py) and 'blind17' (a
# seventeenth, the same way: sick_blind17.py) and 'blind18' (an eighteenth, the same way:
# sick_blind18.py) and 'blind19' (a nineteenth, the same way: sick_blind19.py) and 'blind20' (a
# twentieth, the same way: sick_blind20.py) and 'blind21' (a twenty-first, the same way:
# sick_blind21.py) and 'blind22' (a twenty-second, the same way: sick_blind22.py) and 'blind23'
# (a twenty-third, the same way: sick_blind23.py) and 'blind24' (a twenty-fourth, the same way:
# sick_blind24.py) and 'blind25' (a twenty-fifth, the same way: sick_blind25.py) and 'blind26'
# (a twenty-sixth, the same way: sick_blind26.py) and 'blind27' (a twenty-seventh, the same
# way: sick_blind27.py) and 'blind28' (a twenty-eighth, the same way: sick_blind28.py) and
# 'blind29' (a twenty-ninth, the same way: sick_blind29.py) and 'blind30' (a thirtieth, the same
# way: sick_blind30.py) and 'blind31' (a thirty-first, the same way: sick_blind31.py) and
# 'blind32' (a thirty-second, the same way: sick_blind32.py) and 'blind33' (a thirty-third, the
# same way: sick_blind33.py) and 'blind34' (a thirty-fourth, the same way: sick_blind34.py) and
# 'blind35' (a thirty-fifth, the same way: sick_blind35.py) and 'blind36' (a thirty-sixth, the
# same way: sick_blind36.py) and 'blind37' (a thirty-seventh, the same way: sick_blind37.py)
# and 'blind38' (a thirty-eighth, the same way: sick_blind38.py) and 'blind39' (a thirty-ninth,
# the same way: sick_blind39.py) and 'blind40' (a fortieth, the same way: sick_blind40.py)
# and 'blind41' (a forty-first, the same way: sick_blind41.py) and 'blind42' (a forty-second,
# the same way: sick_blind42.py) and 'blind43' (a forty-third, the same way: sick_blind43.py)
# and 'blind44' (a forty-fourth, the same way: sick_blind44.py) and 'blind45' (a forty-fifth,
# the same way: sick_blind45.py) and 'blind46' (a forty-sixth, the same way: sick_blind46.py)
# and 'blind47' (a forty-seventh, the same way: sick_blind47.py) and 'blind48' (a forty-eighth,
# the same way: sick_blind48.py) and 'blind49' (a forty-ninth, the same way: sick_blind49.py)
# and 'blind50' (a fiftieth, the same way: sick_blind50.py) and 'blind51' (a fifty-first, the
# same way: sick_blind51.py) and 'blind52' (a fifty-second, the same way: sick_blind52.py)
# and 'blind53' (a fifty-third, the same way: sick_blind53.py) and 'blind54' (a fifty-fourth,
# the same way: sick_blind54.py).
SPLITS = ('tune', 'held_out', 'fresh', 'blind', 'blind2', 'blind3', 'blind4', 'blind5', 'blind6',
          'blind7', 'blind8', 'blind9', 'blind10', 'blind11', 'blind12', 'blind13', 'blind14',
          'blind15', 'blind16', 'blind17', 'blind18', 'blind19', 'blind20', 'blind21',
          'blind22', 'blind23', 'blind24', 'blind25', 'blind26', 'blind27', 'blind28',
          'blind29', 'blind30', 'blind31', 'blind32', 'blind33', 'blind34', 'blind35',
          'blind36', 'blind37', 'blind38', 'blind39',
          'blind40', 'blind41', 'blind42', 'blind43', 'blind44', 'blind45', 'blind46',
          'blind47', 'blind48', 'blind49', 'blind50', 'blind51', 'blind52',
          'blind53', 'blind54')
# How a run's outputs are scored by the "did it train" measure (runner.task_error).
KINDS = ('classes', 'binary_prob', 'binary_logit', 'regression', 'pairs')


@dataclasses.dataclass
class Setup:
  """What one run trains: built fresh for each door and seed (inside the run's precision).

  Attributes:
    model, optimizer, loss: the Keras model, optimizer and loss (a Keras loss or a
      `(labels, predictions) -> scalar`).
    data: an endless `tf.data` stream of (features, labels) batches.
    kind: one of KINDS: how the task error of the "did it train" measure reads the outputs.
    eval_data: clean batches for that measure (None: the first batches of a fresh `data`).
  """
  model: Any
  optimizer: Any
  loss: Any
  data: Any
  kind: str
  eval_data: Any = None


@dataclasses.dataclass(frozen=True)
class Case:
  """One registry entry; each (door, seed) of it is one run.

  Attributes:
    name: unique, a Python identifier.
    expected: 'healthy' or one of CAUSES.
    arch: the architecture's name (counted by the registry's tests).
    build: `seed -> Setup`; its docstring says what the run is and, for a sick scenario, the
      symptom reported and where (the citation).
    doors: 'trainer' (the Trainer) and/or 'fit' (`guard_fit` + Keras `fit`).
    seeds: one run per seed (several where the outcome depends on the data order).
    split: 'tune', 'held_out' or 'fresh' for a sick scenario (fixed here, visible), '' for a
      healthy run.
    citation: the public report(s) the scenario reproduces (repo#issue, or page title + URL).
    precision: 'float32' or 'mixed_float16'.
    steps: training steps per run.
    jit: XLA (Trainer(jit_compile=True) / compile(jit_compile=True)).
    quick: in the --quick subset (the tests' fast set).
  """
  name: str
  expected: str
  arch: str
  build: Callable[[int], Setup]
  doors: Tuple[str, ...] = ('trainer',)
  seeds: Tuple[int, ...] = (0,)
  split: str = ''
  citation: str = ''
  precision: str = 'float32'
  steps: int = 100
  jit: bool = False
  quick: bool = False

  @property
  def applications(self) -> bool:
    """Whether the architecture is a keras.applications model."""
    return self.arch in APPLICATIONS


APPLICATIONS = ('mobilenet', 'mobilenet_v2', 'mobilenet_v3_small', 'efficientnet_b0')


class Registry:
  """An ordered list of cases with a decorator that registers a builder as a case."""

  def __init__(self):
    self.cases: List[Case] = []

  def add(self, name: str, expected: str, arch: str, **fields) -> Callable:
    """Decorator: registers the decorated `seed -> Setup` as `Case(name, expected, arch, ...)`."""

    def register(build):
      self.cases.append(Case(name=name, expected=expected, arch=arch, build=build, **fields))
      return build

    return register

  def find(self, name: str) -> Optional[Case]:
    return next((c for c in self.cases if c.name == name), None)
