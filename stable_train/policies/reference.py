"""DivergenceCheck's reference re-run: when a divergence rule fires, is it the model or only the
batches? The model's loss on the run's first batch, against the rule's threshold."""

import logging
import math

import numpy as np

from stable_train.forensics import provenance
from stable_train.policies import trend

log = logging.getLogger('stable_train')

_I = trend.INDEX
_HUGE = float(np.finfo(np.float32).max)  # A reference loss that was not finite.
DAMAGED, DATA = 1.0, -1.0  # `verdict` of a streak: the model got worse, or only the batches.


def check(state, decision, run, warmup, told) -> bool:
  """The loss on the first batch when a rule fires; good there (`DATA`): bad batches where the run
  was below the threshold after its warm-up; where never, a blow-up it came back ('recovered').
  Logged as a warning where the fit has not `told` one yet (an unshuffled series whose seasons
  differ clears the model at every season: one warning, the rest at INFO, each an event);
  returns whether the model was cleared."""
  first = run.probe.first_batch()
  loss = math.inf if first is None else provenance.rerun(run.probe, first).loss
  damaged = not loss <= decision.details['threshold']  # NaN counts as damaged.
  trained = state[_I['above']] < state[_I['count']] - warmup  # Below it once since the warm-up.
  state[[_I['verdict'], _I['reference']]] = [DAMAGED if damaged else DATA,
                                             loss if math.isfinite(loss) else _HUGE]
  run.emit('divergence_check', decision.step, rule=decision.details['rule'],
           verdict='model' if damaged else 'data' if trained else 'recovered',
           reference_loss=loss, smoothed_loss=decision.details['smoothed'],
           best=decision.details['best'])
  if not damaged:
    (log.info if told else log.warning)(
        'step %d: the training loss is far above its %s, but the model does as well as before '
        'on the first batch (loss %.4g): %s', decision.step, *(
            ('best', loss, 'the batches changed, not the model (bad rows, or unshuffled data '
             'that differs from its start): not a divergence') if trained else
            ('start', loss, 'the loss blew up in its first steps and came back')))
  return not damaged
