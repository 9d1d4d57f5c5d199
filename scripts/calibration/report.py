"""The calibration report: one line per run, and the Markdown tables of the two matrices (the
healthy matrix's alarms, the sick matrix's accuracy on each split, the confusion table, the
confident wrong answers and the `completed` runs that did not train)."""

from typing import Dict, List, Sequence

from scripts.calibration import cases

HEADER = ('| run | door | seed | split | expected | status | answer | confidence | right | '
          'trained | s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |')


def line(r: Dict) -> str:
  """One run as a Markdown table row (HEADER's columns)."""
  return (f"| {r['name']} | {r['door']} | {r['seed']} | {r['split']} | {r['expected']} | "
          f"{r['status']} | {r['answer'] or 'none'} | {r['confidence'] or ''} | "
          f"{'yes' if r['right'] else 'NO'} | {'yes' if r['trained'] else 'NO'} | "
          f"{r['seconds']:.0f} |")


def alarms(r: Dict) -> List[str]:
  """What a healthy run should not have: a stop, a rollback, `diverged`, a named cause."""
  found = []
  if r['status'] not in ('completed',):
    found.append(f"stopped ({r['status']})")
  if r['rollbacks']:
    found.append(f"{r['rollbacks']} rollback(s)")
  if r['answer']:
    found.append(f"cause {r['answer']} ({r['confidence']})")
  return found


def healthy_tables(results: Sequence[Dict]) -> str:
  """The healthy matrix: the counts, then each run's alarms and whether it trained."""
  runs = [r for r in results if r['expected'] == 'healthy']
  if not runs:
    return ''
  stops = sum(r['status'] != 'completed' for r in runs)
  diverged = sum(r['status'] == 'diverged' for r in runs)
  rollbacks = sum(bool(r['rollbacks']) for r in runs)
  named = sum(r['answer'] is not None for r in runs)
  archs = sorted({r['arch'] for r in runs})
  out = [f'\n### Healthy matrix: {len(runs)} runs over {len(archs)} architectures',
         f'\nstops: {stops}, rollbacks: {rollbacks}, diverged: {diverged}, named causes: '
         f'{named}; did not train: {sum(not r["trained"] for r in runs)}; '
         f'{sum(r["seconds"] for r in runs) / 60:.1f} min\n',
         '| run | door | arch | precision | XLA | status | alarms | error untrained -> final '
         '| s |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- |']
  for r in runs:
    out.append(f"| {r['name']} | {r['door']} | {r['arch']} | {r['precision']} | "
               f"{'on' if r['jit'] else 'off'} | {r['status']} | "
               f"{'; '.join(alarms(r)) or 'none'} | {r['error_before']:.3g} -> "
               f"{r['error_after']:.3g} | {r['seconds']:.0f} |")
  return '\n'.join(out)


def _accuracy(runs: Sequence[Dict], label: str) -> str:
  right = sum(r['right'] for r in runs)
  wrong_high = sum((not r['right']) and r['confidence'] == 'high' for r in runs)
  pct = 100.0 * right / len(runs) if runs else 0.0
  return (f'| {label} | {len(runs)} | {right} | {pct:.0f} % | {wrong_high} |')


def sick_tables(results: Sequence[Dict]) -> str:
  """The sick matrix: accuracy per split, per cause, the confusion table, the confident wrong
  answers and the completed runs that did not train."""
  runs = [r for r in results if r['expected'] != 'healthy']
  if not runs:
    return ''
  refused = [r for r in runs if r['status'] == 'refused']
  # Nothing to diagnose: the stack kept the disease from showing (no skip, rollback, stop or
  # warning) and the model trained; no answer is asked of the doctor, none is scored.
  prevented = [r for r in runs if not r['troubled'] and r['trained'] and r['status'] != 'refused']
  runs = [r for r in runs if r['status'] != 'refused' and r not in prevented]
  out = [f'\n### Sick matrix: {len(runs)} runs, '
         f'{sum(r["seconds"] for r in runs) / 60:.1f} min\n',
         '| part | runs | first answer right | % | wrong at high confidence |',
         '| --- | --- | --- | --- | --- |']
  for split in cases.SPLITS:
    part = [r for r in runs if r['split'] == split]
    if part:
      out.append(_accuracy(part, split))
  out.append(_accuracy(runs, 'all'))
  out += ['', '| cause | ' + ' | '.join(cases.SPLITS) + ' |',
          '| --- | ' + ' | '.join('---' for _ in cases.SPLITS) + ' |']
  for cause in cases.CAUSES:
    cells = []
    for split in cases.SPLITS:
      part = [r for r in runs if r['expected'] == cause and r['split'] == split]
      cells.append(f"{sum(r['right'] for r in part)}/{len(part)}" if part else '-')
    out.append(f'| {cause} | ' + ' | '.join(cells) + ' |')
  out.append(confusion(runs))
  out.append(_listing('Wrong at high confidence', [
      r for r in runs if not r['right'] and r['confidence'] == 'high']))
  out.append(_listing('Wrong answers', [r for r in runs if not r['right']]))
  out.append(_listing('Sick runs with no trouble in their records that did not train (nothing '
                      'skipped, rolled back, stopped or warned of: the doctor is not asked)', [
                          r for r in runs if not r['troubled']]))
  out.append(_listing('Refused before the first step (a one-line ConfigError, not scored '
                      'above)', refused))
  out.append(_listing('Nothing to diagnose: no trouble recorded and the model trained (not '
                      'scored above)', prevented))
  out.append(_listing('`completed` but did not train (healthy runs included)', [
      r for r in results if r['status'] == 'completed' and not r['trained']]))
  return '\n'.join(out)


def confusion(runs: Sequence[Dict]) -> str:
  """Expected cause x the doctor's first answer, over every sick run."""
  answers = list(cases.CAUSES) + [None]
  answers += sorted({r['answer'] for r in runs} - set(answers), key=str)
  label = lambda c: 'none' if c is None else c
  out = ['\n#### Confusion (all splits)\n',
         '| expected \\ answered | ' + ' | '.join(label(c) for c in answers) + ' |',
         '| --- ' * (len(answers) + 1) + '|']
  for expected in cases.CAUSES:
    counts = [sum(r['expected'] == expected and r['answer'] == c for r in runs) for c in answers]
    if sum(counts):
      out.append(f'| {expected} | ' + ' | '.join(str(n) if n else '' for n in counts) + ' |')
  return '\n'.join(out)


def _listing(title: str, runs: Sequence[Dict]) -> str:
  out = [f'\n#### {title}: {len(runs)}\n']
  for r in runs:
    evidence = '; '.join(r['evidence'][:2]) or r['reason'] or ''
    out.append(f"- `{r['name']}` ({r['door']}, seed {r['seed']}, {r['split']}): expected "
               f"{r['expected']}, answered {r['answer'] or 'none'} ({r['confidence'] or '-'}), "
               f"status {r['status']}, error {r['error_before']:.3g} -> {r['error_after']:.3g}"
               f"; evidence: {evidence[:300]}")
  return '\n'.join(out)
