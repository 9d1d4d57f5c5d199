"""The doctor's evidence as a picture (`stable-train doctor DIR --plot FILE.png`): a run's loss,
gradient norm, learning rate and loss scale over the steps, with its skips, clips, rollbacks,
stops and the diagnosis marked.

matplotlib is an optional extra (`pip install 'stable_train[plot]'`), imported only when a plot
is drawn, on the Agg canvas (no pyplot, no change to the process's backend). What was marked is
returned and also kept in the PNG itself, as JSON under the text key `METADATA_KEY`.
"""

import json
import os
import tempfile
import textwrap
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from stable_train.doctor import series as series_lib

METADATA_KEY = 'stable_train.doctor'
MISSING = "doctor: --plot needs matplotlib: pip install 'stable_train[plot]'"
_PANELS = (('loss', 'loss'), ('grad_norm', 'grad norm'), ('learning_rate', 'learning rate'),
           ('loss_scale', 'loss scale'))
_FAULT_COLOURS = {'input': 'tab:brown', 'loss': 'tab:red', 'gradient': 'tab:purple',
                  'overflow': 'tab:gray', 'policy': 'tab:olive'}


class MatplotlibMissing(ImportError):
  """matplotlib is not installed (`MISSING` says how to get it)."""


def _matplotlib():
  """(Figure, FigureCanvasAgg), imported now; MatplotlibMissing without matplotlib."""
  try:
    from matplotlib import figure  # pylint: disable=g-import-not-at-top
    from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise MatplotlibMissing(MISSING) from e
  return figure.Figure, backend_agg.FigureCanvasAgg


def available() -> bool:
  """Whether a plot can be drawn here (matplotlib imports)."""
  try:
    _matplotlib()
  except MatplotlibMissing:
    return False
  return True


def draw(model_dir: str, path: str, *, events: Sequence[Dict[str, Any]],
         diagnosis: Dict[str, Any], text: str = '', dpi: int = 80) -> Dict[str, Any]:
  """Draws a run as a PNG at `path` (written atomically: a temporary file, then a rename).

  Args:
    model_dir: the run directory (its TensorBoard scalars are read here: `series`).
    path: the PNG to write; its folder is made if missing.
    events: the run's events (`doctor.load`).
    diagnosis: the doctor's diagnosis of them (`doctor.diagnose`).
    text: the diagnosis for people, kept as the PNG's Description.
    dpi: the image's resolution (80: about 720 x 640 pixels for four panels).

  Returns:
    `series.marks(...)` plus 'source' (where the per-step values came from, None for none),
    'steps' ([first, last] step drawn) and 'panels' (the series drawn); the same dict is the
    JSON text under `METADATA_KEY` in the PNG.

  Raises:
    MatplotlibMissing: without matplotlib. OSError: the file could not be written.
  """
  figure_class, canvas_class = _matplotlib()
  source, stretches = series_lib.stretches(model_dir, events)
  drawn = series_lib.marks(events, diagnosis, stretches)
  scale = np.concatenate([s['loss_scale'] for s in stretches]) if stretches else np.ones(0)
  scale = scale[np.isfinite(scale)]
  panels = [p for p in _PANELS if p[0] != 'loss_scale' or np.any(scale != 1.0)]
  fig = figure_class(figsize=(9, 1.5 + 1.6 * len(panels)), layout='constrained')
  canvas_class(fig)
  axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
  for ax, (key, label) in zip(axes, panels):
    _plot_series(ax, stretches, key, legend=ax is axes[0])
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
  if stretches:
    _mark_clips(axes[1], stretches, len(drawn['clips']))
  else:
    axes[0].text(0.5, 0.5, 'no per-step values recorded (no tensorboard/ scalars, no history '
                 'events): the marks only', transform=axes[0].transAxes, ha='center',
                 va='center', fontsize=9, color='0.4')
  _mark_events(axes, drawn)
  steps = _extent(stretches, events)
  axes[0].set_xlim(steps[0], max(steps[1], steps[0] + 1))
  axes[-1].set_xlabel('step')
  handles = axes[0].get_legend_handles_labels()
  if handles[0]:
    axes[0].legend(*handles, loc='lower left', bbox_to_anchor=(0, 1.01), fontsize=7, ncol=4,
                   borderaxespad=0, frameon=False)
  title = _titles(fig, model_dir, diagnosis, source)
  drawn.update(source=source, steps=list(steps), panels=[key for key, _ in panels])
  _save(fig, path, dpi, {'Title': title, 'Description': text or None,
                         METADATA_KEY: json.dumps(drawn, sort_keys=True)})
  return drawn


def _plot_series(ax, stretches, key: str, legend: bool) -> None:
  """One field over the steps, a line per stretch; the steps a later stretch went back over
  (rolled back, or lost before a resume) dashed and faded (`legend`: labelled once)."""
  for s in stretches:
    steps, values = s['step'], s[key]
    undone = (steps > s['undone_after'] if s['undone_after'] is not None else
              np.zeros(steps.shape, bool))
    kept = ~undone
    ax.plot(steps[kept], values[kept], color='tab:blue', lw=1.2)
    if undone.any():
      tail = steps >= steps[kept][-1] if kept.any() else undone
      ax.plot(steps[tail], values[tail], color='tab:blue', lw=1.2, ls='--', alpha=0.5,
              label='rolled back' if legend else None)
      legend = False
  values = np.concatenate([s[key] for s in stretches]) if stretches else np.ones(0)
  finite = values[np.isfinite(values)]
  if finite.size and finite.min() > 0 and (key in ('grad_norm', 'loss_scale') or
                                           finite.max() > 100 * finite.min()):
    ax.set_yscale('log', base=2 if key == 'loss_scale' else 10)


def _mark_clips(ax, stretches, count: int) -> None:
  """A cross at each clipped step's norm before the clip, a line down to the norm after it."""
  label = f'clipped ({count}): before, down to after'
  for s in stretches:
    at = series_lib.clipped(s)
    if at.any():
      ax.vlines(s['step'][at], s['clipped_grad_norm'][at], s['grad_norm'][at],
                color='tab:green', lw=1)
      ax.scatter(s['step'][at], s['grad_norm'][at], marker='x', color='tab:green', zorder=3,
                 label=label)
      label = None
  if count:
    ax.legend(loc='upper left', fontsize=7)


def _mark_events(axes, drawn: Dict[str, Any]) -> None:
  """Skips (triangles along the loss panel's top, one colour per fault kind), rollbacks (a
  dashed line at the step and an arrow back), stops and the trouble's onset (lines)."""
  top = axes[0]
  for kind, steps in drawn['skip_faults'].items():
    top.scatter(steps, [0.97] * len(steps), transform=top.get_xaxis_transform(), marker='v',
                s=18, color=_FAULT_COLOURS.get(kind, 'black'), zorder=3, clip_on=False,
                label=f'skip: {kind} ({len(steps)})')
  for i, r in enumerate(drawn['rollbacks']):
    for ax in axes:
      ax.axvline(r['from'], color='tab:red', ls='--', lw=1, label=None if i or ax is not top
                 else f"rollback ({len(drawn['rollbacks'])})")
    if r['to'] is not None:
      top.annotate('', xy=(r['to'], 0.85), xytext=(r['from'], 0.85),
                   xycoords=top.get_xaxis_transform(),
                   arrowprops={'arrowstyle': '->', 'color': 'tab:red'})
      top.text(r['from'], 0.72, f" {r['from']}→{r['to']}", transform=top.get_xaxis_transform(),
               color='tab:red', fontsize=7)
  for stop in drawn['stops']:
    for ax in axes:
      ax.axvline(stop['step'], color='black', lw=1.5,
                 label=f"{stop['status']} ({stop['trigger']})" if ax is top else None)
  if drawn['trouble_began'] is not None:
    for ax in axes:
      ax.axvline(drawn['trouble_began'], color='tab:orange', ls=':', lw=1.5,
                 label='trouble began' if ax is top else None)


def _extent(stretches, events) -> Tuple[int, int]:
  """[first, last] step of what is drawn: the stretches' and every event's (a rollback's
  target too), so a mark outside the recorded values still shows."""
  steps = [int(s['step'][k]) for s in stretches for k in (0, -1)]
  steps += [int(e[k]) for e in events for k in ('step', 'to_step') if isinstance(e.get(k), int)]
  return (min(steps), max(steps)) if steps else (0, 1)


def _titles(fig, model_dir: str, diagnosis: Dict[str, Any], source: Optional[str]) -> str:
  """The diagnosis as the title (returned); its remedy and the values' source below the
  panels."""
  name = os.path.basename(os.path.normpath(model_dir))
  title = f"{name}: {diagnosis.get('label') or 'no diagnosis'}"
  if diagnosis.get('cause'):
    title += f" ({diagnosis['confidence']} confidence)"
  if diagnosis.get('trouble_began') is not None:
    title += f", trouble began at step {diagnosis['trouble_began']}"
  fig.suptitle(title, fontsize=11)
  foot = [f"remedy: {diagnosis['remedy']}"] if diagnosis.get('remedy') else []
  foot.append(f'values: {source}' if source else 'values: none recorded')
  wrapped = '\n'.join(textwrap.fill(line, 120) for line in foot)
  # The panels above the footnote's lines (7 pt each).
  bottom = (wrapped.count('\n') + 1.5) * 7 * 1.25 / 72 / fig.get_figheight()
  fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))  # left, bottom, width, height.
  fig.text(0.01, 0.005, wrapped, fontsize=7, va='bottom', color='0.25')
  return title


def _save(fig, path: str, dpi: int, metadata: Dict[str, Optional[str]]) -> None:
  """Saves the figure as a PNG with `metadata` as text chunks: temporary file, then rename."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', dir=directory)
  try:
    mask = os.umask(0o022)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)  # mkstemp makes 0600; the mode open() would give.
    with os.fdopen(fd, 'wb') as f:
      fig.savefig(f, format='png', dpi=dpi, metadata=metadata)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
