"""What the doctor's plot draws, as data: a run's per-step values in stretches of rising steps,
and the marks (skips, clips, rollbacks, stops, the diagnosis). Files only, no matplotlib.

The TensorBoard scalars cover the whole run (every `summary_every` steps and every faulty step);
each `history` event adds the 64 steps before a trouble, step by step. A run directory without
scalars is drawn from its history events alone, and one with neither by its marks only.
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from stable_train.doctor import scalars as scalars_lib
from stable_train.doctor import symptoms as symptoms_lib

# A row's fields: (name, the TensorBoard scalar's tag, the `history` event's key).
FIELDS = (('loss', 'loss', 'loss'), ('grad_norm', 'grad_norm', 'grad_norm'),
          ('clipped_grad_norm', 'grad_norm_clipped', 'clipped_grad_norm'),
          ('learning_rate', 'learning_rate', 'learning_rate'),
          ('loss_scale', 'loss_scale', 'loss_scale'))
_TIME_SLACK = 0.002  # Seconds: event times are rounded to 1 ms, scalars' are not.


def stretches(model_dir: str, events: Sequence[Dict[str, Any]]
              ) -> Tuple[Optional[str], List[Dict[str, Any]]]:
  """The run's per-step values and where they came from.

  Returns:
    (source: 'tensorboard scalars', '... + history events', 'history events' or None; the
    stretches in the order run: {'step': int array, field: float array for each of `FIELDS`,
    'undone_after': the step after which a later stretch went back over this one (a rollback's
    or a resume's target), or None}). A rollback or a resume starts a new stretch.
  """
  rows = [{'time': r['time'], 'step': r['step'],
           **{name: symptoms_lib.number(r.get(tag)) for name, tag, _ in FIELDS}}
          for r in scalars_lib.read(model_dir) if 'loss' in r]  # Report rows, not extras.
  runs = _split(rows)
  windows = [(symptoms_lib.number(e.get('time')), _split(_history_rows(e)))
             for e in events if e.get('event') == 'history' and e.get('steps')]
  if runs:
    for time, subs in windows:
      _merge(runs, subs, time)
    source = 'tensorboard scalars' + (' + history events' if windows else '')
  else:
    runs = [sub for _, subs in windows for sub in subs]
    source = 'history events' if runs else None
  targets = [e.get('to_step') if e.get('event') == 'rollback' else e.get('step')
             for e in events if e.get('event') in ('rollback', 'resume')]
  out = []
  for i, run in enumerate(runs):
    undone = None
    if i + 1 < len(runs):
      after = runs[i + 1][0]['step']
      back = [t for t in targets if isinstance(t, int) and t < after]
      undone = max(back) if back else after - 1
    out.append({'step': np.asarray([r['step'] for r in run], np.int64), 'undone_after': undone,
                **{name: np.asarray([r[name] for r in run], np.float64)
                   for name, _, _ in FIELDS}})
  return source, out


def _history_rows(event: Dict[str, Any]) -> List[Dict[str, Any]]:
  values = {name: symptoms_lib.numbers(event.get(key)) for name, _, key in FIELDS}
  return [{'step': int(s), **{name: (v[i] if i < v.size else math.nan)
                              for name, v in values.items()}}
          for i, s in enumerate(event['steps'])]


def _split(rows: List[Dict[str, Any]]) -> List[List[Dict[str, Any]]]:
  """Rows in the order recorded, cut where the step goes back (a rollback, a resume)."""
  runs = []
  for row in rows:
    if not runs or row['step'] <= runs[-1][-1]['step']:
      runs.append([])
    runs[-1].append(row)
  return runs


def _merge(runs, subs, time: float) -> None:
  """Adds a history event's windows (`subs`: cut where its steps went back; the last one ends
  at the trouble) to the scalars' stretches `runs`, each to the stretch that recorded the same
  loss at one of its steps, else by time: the last one to the stretch running when the event
  was written, each earlier one to the stretch before."""
  started = [k for k, run in enumerate(runs) if run[0]['time'] <= time + _TIME_SLACK]
  for back, sub in enumerate(reversed(subs)):
    losses = {r['step']: np.float32(r['loss']) for r in sub if math.isfinite(r['loss'])}
    same = [k for k in started if any(
        r['step'] in losses and np.float32(r['loss']) == losses[r['step']] for r in runs[k])]
    k = same[-1] if same else max((started[-1] if started else 0) - back, 0)
    have = {r['step'] for r in runs[k]}
    runs[k] = sorted(runs[k] + [dict(r, time=time) for r in sub if r['step'] not in have],
                     key=lambda r: r['step'])


def clipped(stretch: Dict[str, Any]) -> np.ndarray:
  """Which steps of a stretch were clipped: the norm after the policies' transformations below
  the norm before (both finite)."""
  norm, after = stretch['grad_norm'], stretch['clipped_grad_norm']
  with np.errstate(invalid='ignore'):
    return np.isfinite(norm) & np.isfinite(after) & (after < norm * (1 - 1e-6))


def marks(events: Sequence[Dict[str, Any]], diagnosis: Dict[str, Any],
          runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
  """What the plot marks, as plain data (the PNG's metadata): the steps of the skips (and their
  fault kinds), the clipped steps among those recorded (`runs`: `stretches`), the rollbacks
  (from, to, trigger), the stops (abort, diverged) and the diagnosis (cause, label, confidence,
  trouble_began)."""
  kinds = {}
  for e in events:
    if e.get('event') == 'skip':
      kinds.setdefault(e.get('fault') or 'unknown', set()).add(int(e['step']))
  clips = {int(step) for s in runs for step in s['step'][clipped(s)]}
  return {
      'skips': sorted(set().union(*kinds.values())),
      'skip_faults': {k: sorted(v) for k, v in sorted(kinds.items())},
      'clips': sorted(clips),
      'rollbacks': [{'from': int(e['step']), 'to': e.get('to_step'), 'trigger': e.get('trigger')}
                    for e in events if e.get('event') == 'rollback'],
      'stops': [{'step': int(e['step']), 'status': 'diverged' if e['event'] == 'diverged'
                 else 'aborted', 'trigger': e.get('trigger')}
                for e in events if e.get('event') in ('abort', 'diverged')],
      'trouble_began': diagnosis.get('trouble_began'),
      'cause': diagnosis.get('cause'), 'label': diagnosis.get('label'),
      'confidence': diagnosis.get('confidence'),
  }
