"""DivergenceCheck's reference re-run: when a divergence rule fires, is it the model or only the
batches? The model's loss on the run's first batch, against the rule's threshold."""

import logging
import math

from stable_train.forensics import provenance
from stable_train.policies import trend

log = logging.getLogger('stable_train')

_I = trend.INDEX
DAMAGED, DATA = 1.0, -1.0  # `verdict` of a streak: the model got worse, or only the batches.


class Told:
  """Which verdicts that cleared the model a run has warned of (host-only): each run (a fit,
  through its callback or the Trainer) warns of each kind once, anew."""

  def __init__(self):
    self._run, self._kinds = None, set()

  def first(self, run, kind: str) -> bool:
    """Whether `run` meets `kind` for the first time (it is noted)."""
    if run is not self._run:
      self._run, self._kinds = run, set()
    new = kind not in self._kinds
    self._kinds.add(kind)
    return new


def check(state, decision, run, warmup, told: Told) -> None:
  """The loss on the first batch when a rule fires; good there (`DATA`): bad batches where the run
  was below the threshold after its warm-up; where never, a blow-up it came back ('recovered').
  Each verdict that clears the model is logged as a warning once per run (`told`), later at INFO
  (an unshuffled series whose seasons differ clears the model at every season), each an event."""
  first = run.probe.first_batch()
  loss = math.inf if first is None else provenance.rerun(run.probe, first).loss
  damaged = not loss <= decision.details['threshold']  # NaN counts as damaged.
  trained = state[_I['above']] < state[_I['count']] - warmup  # Below it once since the warm-up.
  state[[_I['verdict'], _I['reference']]] = [DAMAGED if damaged else DATA,
                                             loss if math.isfinite(loss) else trend.HUGE]
  verdict = 'model' if damaged else 'data' if trained else 'recovered'
  run.emit('divergence_check', decision.step, rule=decision.details['rule'], verdict=verdict,
           reference_loss=loss, smoothed_loss=decision.details['smoothed'],
           best=decision.details['best'])
  if not damaged:
    (log.warning if told.first(run, verdict) else log.info)(
        'step %d: the training loss is far above its %s, but the model does as well as before '
        'on the first batch (loss %.4g): %s', decision.step, *(
            ('best', loss, 'the batches changed, not the model (bad rows, or unshuffled data '
             'that differs from its start): not a divergence') if trained else
            ('start', loss, 'the loss blew up in its first steps and came back')))
