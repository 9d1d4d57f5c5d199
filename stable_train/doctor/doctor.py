"""The doctor: from what a run recorded, the most likely cause of its trouble (one of
`causes.CAUSES`), the evidence, and the remedy as a gin line or a code change.

Live, at the end of a run that skipped, rolled back, diverged or aborted (`attach`): a
`diagnosis` event and summary.json's `diagnosis` block. Offline, for any run directory (old ones
too, with less evidence): `stable-train doctor DIR` or `scripts/doctor.py --model_dir=DIR`, both
`doctor.main(argv)`; `--plot FILE.png` draws the evidence too (`plot`, with matplotlib). It reads
files only (no TensorFlow import).
"""

import argparse
import dataclasses
import glob
import json
import math
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence

from stable_train.doctor import causes as causes_lib
from stable_train.doctor import plot as plot_lib
from stable_train.doctor import remedies
from stable_train.doctor import symptoms as symptoms_lib

CAUSES = causes_lib.CAUSES


def troubled(summary: Dict[str, Any], events: Sequence[Dict[str, Any]]) -> bool:
  """Whether the run skipped (beyond fp16 overflows), rolled back, diverged or aborted, met
  bad batches (an outlier skip), or started with a loss that does not fit the model's outputs or
  a broken start (a `warning` of a loss/output mismatch or of the initialisation). A divergence
  check that cleared the model counts where the run ended otherwise than 'completed' or
  AdaptiveClip clipped a step (summary.json counts no other clip): a run that completed
  untouched, its loss rising for a while on batches unlike its first (an unshuffled series whose
  seasons differ), holds no cause to name."""
  if summary.get('status') in ('aborted', 'diverged'):
    return True
  if summary.get('rollbacks'):
    return True
  if (summary.get('skipped_steps') or 0) > (summary.get('overflow_skips') or 0):
    return True
  untouched = summary.get('status') == 'completed' and not (
      (summary.get('adaptive_clip') or {}).get('clipped_steps'))
  return any(e.get('event') in ('outliers', 'rollback') or (
      e.get('event') == 'divergence_check' and not untouched) or (
      e.get('event') == 'warning' and e.get('cause') in (symptoms_lib.MISMATCH, 'initialisation'))
      for e in events)


def _forensics_reports(events: Sequence[Dict[str, Any]], model_dir: Optional[str]):
  """The forensics records' report.json contents, the events' `dir`s first, else the folder."""
  dirs = [e['dir'] for e in events if e.get('event') == 'forensics' and e.get('dir')]
  if not dirs and model_dir:
    dirs = sorted(glob.glob(os.path.join(model_dir, 'forensics', 'step_*')),
                  key=lambda d: int(re.findall(r'step_(\d+)', d)[-1]))
  reports = []
  for d in dirs:
    try:
      with open(os.path.join(d, 'report.json')) as f:
        reports.append(json.load(f))
    except (OSError, ValueError):
      continue  # A record removed or half-copied: the rest still speaks.
  return reports


def config_names(model_dir: Optional[str]) -> Dict[str, str]:
  """The optimizer's and the model factory's gin names from operative_config.gin (e.g.
  {'optimizer': 'keras.optimizers.SGD', 'model': 'mlp'}); {} without one."""
  path = os.path.join(model_dir, 'operative_config.gin') if model_dir else None
  if not path or not os.path.exists(path):
    return {}
  with open(path) as f:
    text = f.read()
  names = {}
  for key, pattern in (('optimizer', r'Trainer\.optimizer\s*=\s*@([\w.]+)'),
                       ('model', r'Trainer\.model\s*=\s*@([\w.]+)')):
    found = re.search(pattern, text)
    if found:
      names[key] = found.group(1)
  return names


def diagnose(events: Sequence[Dict[str, Any]], summary: Dict[str, Any],
             forensics: Sequence[Dict[str, Any]] = (), *,
             names: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
  """The diagnosis of a run from its records; `names`: the run's 'optimizer' and 'model'
  (factory) gin names, for concrete remedies (`config_names`).

  Returns:
    {'cause': a key of CAUSES or None (nothing wrong found), 'label', 'confidence' ('high',
    'medium' or 'low'), 'evidence' (sentences, strongest first), 'remedy' (a gin line or a code
    change), 'applied' (what the loop did about it), 'trouble_began' (a step or None),
    'alternatives' ([{'cause', 'score'}], the runners-up)}.
  """
  s = symptoms_lib.Symptoms.read(events, summary, forensics)
  if not troubled(summary, events):
    return {'cause': None, 'label': 'no trouble found', 'confidence': 'high', 'evidence': [],
            'remedy': None, 'applied': None, 'trouble_began': None, 'alternatives': []}
  scores, decisive = causes_lib.scores_and_decisive(s)
  ranked = sorted(scores, key=lambda c: -scores[c][0])
  top, runner = ranked[0], ranked[1]
  best, second = scores[top][0], scores[runner][0]
  if best <= 0:  # A stop with no numeric symptom (a TensorFlow error, say) is no clean run.
    stopped = summary.get('status') in ('aborted', 'diverged')
    return {'cause': None, 'label': 'no numeric cause found; see the stop reason' if stopped else
            'no trouble found', 'confidence': 'high' if not (
                s.faults or s.triggers or stopped) else 'low', 'evidence': [], 'remedy': None,
            'applied': None, 'trouble_began': s.trouble_began, 'alternatives': []}
  # High only on decisive evidence (an op located, batches that failed an input check, ...): a
  # verdict from the history's shape alone is at most medium.
  confidence = ('high' if best >= 4 and best - second >= 2 and top in decisive else
                'medium' if best >= 3 and best > second else 'low')
  if _by_prior(s, top) or (top == 'exploding_gradients' and remedies.clip_held(s)):
    confidence = 'low'
  fix = remedies.in_door(remedies.remedy(top, s, names or {}), summary.get('front_door'))
  return {'cause': top, 'label': CAUSES[top], 'confidence': confidence,
          'evidence': scores[top][1], 'remedy': fix,
          'applied': applied(top, s, summary), 'trouble_began': s.trouble_began,
          'alternatives': [{'cause': c, 'score': scores[c][0]} for c in ranked[1:4]
                           if scores[c][0] > 0]}


def _by_prior(s: symptoms_lib.Symptoms, top: str) -> bool:
  """Whether `top` leads only by the prior on a recurrent model (`course.recurrence_rules`): the
  same records read as a model with no recurrence name another cause first."""
  if not s.recurrent > 0:  # NaN: none recorded.
    return False
  plain = causes_lib.score(dataclasses.replace(s, recurrent=math.nan))
  return max(plain, key=lambda c: plain[c][0]) != top


def applied(cause: str, s: symptoms_lib.Symptoms, summary: Dict[str, Any]) -> Optional[str]:
  """What the loop itself did about it, from the records."""
  done = []
  if s.rollbacks:
    done.append(f"{len(s.rollbacks)} rollback(s); the learning rate is now "
                f"{s.rollbacks[-1].get('learning_rate'):.3g}")
  ceilings = [r['norm_ceiling'] for r in s.rollbacks if r.get('norm_ceiling') is not None]
  if ceilings:
    done.append(f'the gradient norm capped at {ceilings[-1]:.3g}, the run\'s healthy level')
  if s.outlier_batches:
    done.append(f'{len(s.outlier_batches)} outlier batches skipped (stream indices '
                f'{s.outlier_batches[:10]}{"..." if len(s.outlier_batches) > 10 else ""})')
  if s.faults and s.status != 'aborted':
    done.append(f'{len(s.faults)} non-finite steps skipped')
  if s.overflow_skips and cause == 'precision':
    done.append(f"{s.overflow_skips} loss-scale overflows skipped (scale "
                f"{summary.get('loss_scale')})")
  if s.clipped_steps and cause in ('exploding_gradients', 'learning_rate', 'bad_input'):
    done.append(f'{s.clipped_steps} steps clipped to the run\'s healthy norm by AdaptiveClip')
  if summary.get('status') in ('aborted', 'diverged'):
    last = summary.get('last_good_checkpoint')
    done.append(f"the run stopped ({summary['status']})" + (
        f"; last good checkpoint {last['checkpoint']} (step {last['step']})" if last else ''))
  return '; '.join(done) or None


def attach(summary: Dict[str, Any], model_dir: Optional[str], optimizer, emit) -> None:
  """At the end of a fit (the Trainer's or a guarded Keras `fit`'s): a troubled run's
  diagnosis, from the records in `model_dir` (this fit's summary, every event so far, the
  forensics records), as summary['diagnosis'] and a `diagnosis` event; `optimizer` names the
  remedy's gin line when operative_config.gin does not. Nothing without a model_dir (or off the
  chief): no records to read."""
  events = _read_events(model_dir) if model_dir else []
  if not model_dir or not troubled(summary, events):
    return
  names = {'optimizer': f'keras.optimizers.{type(optimizer).__name__}', **config_names(model_dir)}
  diagnosis = diagnose(events, summary, _forensics_reports(events, model_dir), names=names)
  emit('diagnosis', **diagnosis)
  summary['diagnosis'] = diagnosis


def _read_events(model_dir: str) -> List[Dict[str, Any]]:
  path = os.path.join(model_dir, 'events.jsonl')
  events = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          events.append(json.loads(line))
        except ValueError:
          continue  # A line cut off by a crash.
  return events


def load(model_dir: str):
  """(events, summary, forensics reports, `config_names`) of a run directory."""
  events = _read_events(model_dir)
  summary = {}
  if os.path.exists(os.path.join(model_dir, 'summary.json')):
    with open(os.path.join(model_dir, 'summary.json')) as f:
      summary = json.load(f)
  return events, summary, _forensics_reports(events, model_dir), config_names(model_dir)


def format_diagnosis(d: Dict[str, Any]) -> str:
  """The diagnosis as a few lines for people."""
  if d['cause'] is None:
    return f"doctor: {d['label']}\n"
  lines = [f"doctor: {d['label']} ({d['confidence']} confidence)" + (
      f", trouble began at step {d['trouble_began']}" if d.get('trouble_began') else '')]
  lines += [f'  evidence: {e}' for e in d['evidence']]
  lines.append(f"  remedy:   {d['remedy']}")
  if d.get('applied'):
    lines.append(f"  applied:  {d['applied']}")
  if d.get('alternatives'):
    lines.append('  also considered: ' + ', '.join(
        f"{CAUSES[a['cause']]} ({a['score']:g})" for a in d['alternatives']))
  return '\n'.join(lines) + '\n'


def plot(model_dir: str, path: str) -> Dict[str, Any]:
  """Draws a run directory's records and their diagnosis as a PNG at `path` (`plot.draw`: the
  per-step values with the skips, clips, rollbacks, stops and trouble_began marked); returns
  what was marked. Raises plot.MatplotlibMissing without matplotlib."""
  events, summary, forensics, names = load(model_dir)
  d = diagnose(events, summary, forensics, names=names)
  return plot_lib.draw(model_dir, path, events=events, diagnosis=d, text=format_diagnosis(d))


INTERRUPTED = ('the doctor writes nothing but a --plot file, replaced whole or not at all; '
               'rerun it.')  # After a SIGTERM/SIGINT.



class _Parser(argparse.ArgumentParser):
  """argparse with a usage error as an exception (one line on stderr, exit 2, in `main`)."""

  def error(self, message):
    raise ValueError(message)


def main(argv: Sequence[str]) -> int:
  """`stable-train doctor DIR [--json] [--plot FILE.png]` (or `--model_dir=DIR`; argv[0] is the
  program's name): prints the diagnosis of a run directory, and with --plot draws it; exit 0, or
  2 for a usage error, a directory with no records, --plot without matplotlib or a plot that
  could not be written."""
  parser = _Parser(prog=argv[0] if argv else 'doctor', description=__doc__.splitlines()[0])
  parser.add_argument('dir', nargs='?', help='the run directory')
  parser.add_argument('--model_dir', help='the run directory (instead of DIR)')
  parser.add_argument('--json', action='store_true', help='print the diagnosis as JSON')
  parser.add_argument('--plot', metavar='FILE.png', help='also draw the loss, grad norm, '
                      'learning rate and loss scale with the trouble marked (needs matplotlib)')
  try:
    args = parser.parse_args(list(argv[1:]))
  except ValueError as e:
    sys.stderr.write(f'doctor: usage error: {e}; see --help.\n')
    return 2
  model_dir = args.model_dir or args.dir
  if not model_dir or (args.dir and args.model_dir):
    sys.stderr.write('doctor: give one run directory: DIR or --model_dir=DIR.\n')
    return 2
  if not any(os.path.exists(os.path.join(model_dir, f)) for f in ('events.jsonl', 'summary.json')):
    sys.stderr.write(f'doctor: {model_dir} holds no events.jsonl or summary.json; give the '
                     'directory of a run.\n')
    return 2
  if args.plot and not plot_lib.available():
    sys.stderr.write(plot_lib.MISSING + '\n')
    return 2
  events, summary, forensics, names = load(model_dir)
  d = diagnose(events, summary, forensics, names=names)
  text = format_diagnosis(d)
  sys.stdout.write(json.dumps(d, indent=2) + '\n' if args.json else text)
  if not args.plot:
    return 0
  try:
    drawn = plot_lib.draw(model_dir, args.plot, events=events, diagnosis=d, text=text)
  except OSError as e:
    sys.stderr.write(f'doctor: cannot write {args.plot}: {e.strerror or e}\n')
    return 2
  counts = ', '.join(f'{len(drawn[k])} {k}' for k in ('skips', 'clips', 'rollbacks', 'stops'))
  sys.stderr.write(f"doctor: drew {args.plot} ({counts}; values from "
                   f"{drawn['source'] or 'no per-step record: the marks only'})\n")
  return 0
