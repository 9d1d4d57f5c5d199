"""NaN forensics: the Forensics policy (saves the offending batch and state, names the op that made
the NaN, and tells transient from deterministic) and its on-disk record, the folder
`<model_dir>/forensics/step_<N>/` (batch.npz, checkpoint/, rng.json, report.json, report.txt;
docs/forensics.md), written atomically."""

import json
import logging
import os
import shutil
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gin
import numpy as np
import tensorflow as tf

from stable_train import compat
from stable_train.core import interfaces
from stable_train import errors
from stable_train.forensics import provenance
from stable_train.forensics import report as report_lib
from stable_train.forensics import structure
from stable_train.runfiles import events as events_lib

log = logging.getLogger('stable_train')

BATCH_FILE = 'batch.npz'
REPORT_JSON = 'report.json'
REPORT_TXT = 'report.txt'
RNG_JSON = 'rng.json'
CHECKPOINT_PREFIX = os.path.join('checkpoint', 'ckpt')


class _Stash:
  """Host-visible copies of the last faulty step's batch and flags, written in-graph on a fault only.

  Deliberately not a tf.Module attribute that checkpoints track: it is scratch space, and old
  checkpoints must keep restoring. The batch is kept serialized (`tf.io.serialize_tensor`, one
  string per tensor), so one set of variables, made at the first trace, takes a batch of any
  structure: a later fit's other structure is one more `layouts` entry, not new variables
  (which a retrace may not create).
  """

  def __init__(self):
    self.layouts: List[Tuple[Any, Tuple[tf.DType, ...]]] = []  # (structure, dtypes) per trace.
    with tf.init_scope():  # Created eagerly, even while the loop is being traced.
      self.data = tf.Variable(tf.constant([], tf.string), shape=tf.TensorShape(None),
                              trainable=False, name='forensics_batch')
      self.layout = tf.Variable(-1, dtype=tf.int64, trainable=False, name='forensics_layout')
      self.grad_flags = tf.Variable(tf.zeros([0], tf.bool), shape=tf.TensorShape(None),
                                    trainable=False, name='forensics_grad_flags')
      self.step = tf.Variable(-1, dtype=tf.int64, trainable=False, name='forensics_step')
      self.applied = tf.Variable(False, trainable=False, name='forensics_applied')
      self.captured = tf.Variable(False, trainable=False, name='forensics_captured')
      self.armed = tf.Variable(True, trainable=False, name='forensics_armed')

  def layout_of(self, batch) -> int:
    """The index of `batch`'s (structure, dtypes) in `layouts`, added if new. Trace time."""
    layout = (structure.encode(batch), tuple(t.dtype for t in tf.nest.flatten(batch)))
    if layout not in self.layouts:
      self.layouts.append(layout)
    return self.layouts.index(layout)

  @property
  def structure(self):
    """The stashed batch's structure (`structure.encode`)."""
    return self.layouts[int(self.layout.numpy())][0]

  def batch(self):
    """The stashed batch as tensors, in its original structure."""
    code, dtypes = self.layouts[int(self.layout.numpy())]
    flat = [tf.io.parse_tensor(s, d) for s, d in zip(tf.unstack(self.data.read_value()), dtypes)]
    return tf.nest.pack_sequence_as(structure.decode(code), flat)


class _Holder:  # A plain box for the stash: tf.Module tracks lists and dicts, not plain objects.
  stash: Optional[_Stash] = None


@gin.register(module='stable_train')
class Forensics(interfaces.Policy):
  """On a non-finite step: saves the batch and state, names the variable and op, rechecks.

  In the in-graph loop (outside XLA) a faulty step's batch is copied to host-visible variables (a
  healthy step pays one `tf.cond`), and the loop ends right after it, so the host sees the state
  the step left: with a skipping policy, bit-identical to the state before it. The host half then
  writes `<model_dir>/forensics/step_<N>/`, re-runs the step with op-level numerics checking, and
  emits a `forensics` event.
  """

  WHEN = ('first', 'every', 'never')
  checkpointed = property(lambda self: not self.optional,
                          doc='An optional one (the default stack\'s) is left out of checkpoints.')

  def __init__(self, *, when: str = 'first', recheck: bool = False, optional: bool = False,
               name: str = 'forensics'):
    """Initialises the policy.

    Args:
      when: deep provenance on the 'first' non-finite step of a run, on 'every' one, or 'never'.
      recheck: re-run every faulty step once on the same batch and state, and mark the fault
        'transient' (the re-run was finite: a hardware or non-determinism hint) or 'deterministic'.
      optional: stand down silently (capture nothing) where the run cannot use it, instead of
        refusing: no model_dir to write its record to, a step XLA compiles whole (`fit` with
        jit_compile=True, `StepGuard(jit_compile=True)`), a `StepGuard` without loss_fn; and give
        way to another Forensics in the same stack. The default stack's is optional.
      name: policy name.
    """
    super().__init__(name=name)
    self.when = errors.check_choice('Forensics', 'when', when, self.WHEN)
    self.recheck = errors.check_bool('Forensics', 'recheck', recheck)
    self.optional = errors.check_bool('Forensics', 'optional', optional)
    self._stood_down = False
    self.records_written = tf.Variable(0, dtype=tf.int64, trainable=False, name='records_written')
    self.transient_faults = tf.Variable(0, dtype=tf.int64, trainable=False, name='transient_faults')
    self.deterministic_faults = tf.Variable(0, dtype=tf.int64, trainable=False,
                                            name='deterministic_faults')
    self._holder = _Holder()

  @property
  def _stash(self) -> Optional[_Stash]:
    return self._holder.stash

  @property
  def active(self) -> bool:
    """Whether faulty steps are captured at all."""
    return not self._stood_down and (self.when != 'never' or self.recheck)

  @property
  def end_step_compiles(self) -> bool:
    """False while active: the stash's variables take a batch of any shape."""
    return not self.active

  uses_end_step = active

  def stand_down(self) -> None:
    """Captures nothing from now on (before the step is traced); `optional` ones only."""
    if not self.optional:
      raise ValueError(f'Forensics {self.name!r} is not optional; it cannot stand down.')
    self._stood_down = True

  def _deep_due(self) -> bool:
    return self.when == 'every' or (self.when == 'first' and
                                    int(self.records_written.numpy()) == 0)

  # -- in-graph -------------------------------------------------------------------------------
  def build(self, variables, variable_paths) -> None:
    """Makes the stash before the loop is traced: a variable made during a `tf.function`'s first
    trace makes it trace everything again (the whole loop, twice: about a second a run)."""
    del variables, variable_paths
    if self.active and self._stash is None:
      self._holder.stash = _Stash()

  def end_step(self, batch, report):
    if not self.active:
      return None
    if isinstance(batch, tuple) and compat.namedtuple_fields(batch) is None:
      batch = tuple(b for b in batch if b is not None)  # train_on_batch's sample_weight=None.
    flat = tf.nest.flatten(batch)
    if not flat or any(isinstance(t, (tf.RaggedTensor, tf.SparseTensor)) for t in flat):
      return None  # The stash takes dense tensors only: such a batch leaves no record.
    if self._stash is None:
      self._holder.stash = _Stash()
    stash = self._stash
    layout = stash.layout_of(batch)
    capture = tf.logical_and(interfaces.step_faulty(report), stash.armed)

    def save():
      stash.data.assign(tf.stack([tf.io.serialize_tensor(t) for t in flat]))
      stash.layout.assign(layout)
      stash.grad_flags.assign(report['grad_finite_flags'])
      stash.step.assign(tf.cast(report['step'], tf.int64))
      stash.applied.assign(report['applied'])
      stash.captured.assign(True)
      return tf.constant(True)

    tf.cond(capture, save, lambda: tf.constant(False))
    return capture

  # -- host -----------------------------------------------------------------------------------
  def decide(self, reports, context):
    del context
    stash = self._stash
    if stash is None or not bool(stash.captured.numpy()):
      return None
    stash.captured.assign(False)
    step = int(stash.step.numpy())
    hits = np.nonzero(reports.step == step)[0]
    if not hits.size:
      return None
    return interfaces.Decision(action=interfaces.ACT, policy=self.name, trigger='forensics',
                               step=step, details={'reports': reports, 'index': int(hits[-1])})

  def execute(self, decision, run):
    """Investigates the captured step (re-run, record folder, event), then re-arms the stash."""
    try:  # Nothing due (a resumed run's record is written): no event.
      if self.recheck or self._deep_due():
        self.investigate(run, decision.details['reports'], decision.details['index'])
      again = self.recheck or self._deep_due()
    except Exception as e:  # pylint: disable=broad-except  (a diagnostic never ends a run)
      log.warning('step %d: forensics could not investigate it (%s: %s)', decision.step,
                  type(e).__name__, e)
      run.emit('forensics', decision.step, error=f'{type(e).__name__}: {e}')
      again = False
    self._stash.armed.assign(again)
    return None

  def investigate(self, run, reports, i: int) -> Dict[str, Any]:
    """Rechecks and/or records step `i` of `reports`, whose batch is in the stash. Host side.

    Args:
      run: the `RunHandle` (its `probe` re-runs the step; its `emit` records the event).
      reports, i: the loop's reports and the faulty step's index in them.
    """
    probe = run.probe
    stash = self._stash
    batch = stash.batch()
    step = int(reports.step[i])
    applied = bool(stash.applied.numpy())
    record: Dict[str, Any] = {'fault': reports.fault(i), 'tensor': reports.offending_tensor(i)}
    again = None
    if self.recheck:
      again = provenance.rerun(probe, batch, jit_compile=probe.jit_compile)
      verdict = 'deterministic' if not again.finite else 'transient'
      counter = self.deterministic_faults if verdict == 'deterministic' else self.transient_faults
      counter.assign_add(1)
      record['recheck'] = verdict
      if applied:
        record['recheck_note'] = 'the faulty update was applied; the re-run saw the state after it'
    if self._deep_due():
      report = self._deep_report(probe, reports, i, batch, applied,
                                 None if probe.jit_compile else again, now=run.step)
      if 'recheck' in record:
        report['recheck'] = record['recheck']
      record['dir'] = write_record(run, report, batch, stash.structure)
      record.update(variable=report['variable_level']['origin_variable'],
                    layer=report['variable_level']['origin_layer'])
      op = report['op_level']
      if op.get('found'):
        record.update(op_type=op['op_type'], op_name=op['op_name'], op_layer=op['layer'])
      self.records_written.assign_add(1)
      log.warning('step %d: forensics record %s: origin variable %s, op %s (%s) in layer %s',
                  step, record['dir'], record['variable'], op.get('op_name'), op.get('op_type'),
                  op.get('layer'))
    run.emit('forensics', step, **record)
    return record

  def _deep_report(self, probe, reports, i, batch, applied, again, now) -> Dict[str, Any]:
    observed = {
        'fault': reports.fault(i), 'offending_tensor': reports.offending_tensor(i),
        'loss': float(reports.loss[i]), 'loss_finite': bool(reports.loss_finite[i]),
        'outputs_finite': bool(reports.outputs_finite[i]), 'applied': applied,
        'grad_flags': [bool(f) for f in self._stash.grad_flags.numpy()]}
    return report_lib.build_report(probe, batch, step=int(reports.step[i]), observed=observed,
                                   again=again, now=now)


def _rng_state() -> Dict[str, Any]:
  state = {'tf_global_generator': tf.random.get_global_generator().state.numpy().tolist()}
  generator = compat.keras_global_seed_generator(create=False)
  if generator is not None:  # Recorded when it exists.
    state['keras_global_seed_generator'] = np.asarray(generator.state.numpy()).tolist()
  return state


def write_record(run, report: Dict[str, Any], batch, batch_structure) -> Optional[str]:
  """Writes `<model_dir>/forensics/step_<N>/` atomically (temp folder, then rename); returns it."""
  if not run.output_dir:  # No model_dir, or not the chief: only the chief writes files.
    return None
  root = os.path.join(run.output_dir, 'forensics')
  os.makedirs(root, exist_ok=True)
  final = os.path.join(root, f"step_{report['step']}")
  n = 1
  while os.path.exists(final):  # The same step again (e.g. after a rollback): keep both.
    n += 1
    final = os.path.join(root, f"step_{report['step']}_{n}")
  tmp = events_lib.make_temp_dir(f".step_{report['step']}.", root)
  try:
    flat = [np.asarray(t) for t in tf.nest.flatten(batch)]
    np.savez(os.path.join(tmp, BATCH_FILE), **{f'input_{j}': a for j, a in enumerate(flat)})
    run.probe.model_checkpoint().write(os.path.join(tmp, CHECKPOINT_PREFIX))
    good = run.good_checkpoints()
    report = dict(report, batch_file=BATCH_FILE, batch_structure=batch_structure,
                  checkpoint=CHECKPOINT_PREFIX, model_dir=os.path.abspath(run.output_dir),
                  last_good_checkpoint=(
                      None if not good else
                      {'path': os.path.join(run.checkpoint_dir, good[-1].path),
                       'step': good[-1].step}))
    events_lib.write_json_atomic(os.path.join(tmp, RNG_JSON), _rng_state())
    events_lib.write_json_atomic(os.path.join(tmp, REPORT_JSON), report)
    events_lib.write_atomic(os.path.join(tmp, REPORT_TXT), provenance.format_report(report))
    os.replace(tmp, final)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return final


def read_record(directory: str) -> Tuple[Dict[str, Any], Any]:
  """Reads a forensics folder: (report dict, the batch in its original structure, as numpy)."""
  with open(os.path.join(directory, REPORT_JSON)) as f:
    report = json.load(f)
  with np.load(os.path.join(directory, report.get('batch_file', BATCH_FILE))) as data:
    flat = [data[f'input_{j}'] for j in range(len(data.files))]
  batch = tf.nest.pack_sequence_as(structure.decode(report['batch_structure']), flat)
  return report, batch


def without_spares(policies: List[interfaces.Policy]) -> List[interfaces.Policy]:
  """`policies` without the optional Forensics where another Forensics is in the list."""
  found = [p for p in policies if isinstance(p, Forensics)]
  keep = [p for p in found if not p.optional] or found[-1:]
  return [p for p in policies if not isinstance(p, Forensics) or p in keep]


def stand_down_optional(policies: Sequence[interfaces.Policy], *, model_dir: Optional[str] = '',
                        whole_step_xla: bool = False, loss_fn: bool = True) -> None:
  """Stands down the optional Forensics of `policies` where a run cannot use it: no `model_dir`
  (None) to write its record to, a step XLA compiles whole, no loss_fn to re-run the step with."""
  if model_dir is None or whole_step_xla or not loss_fn:
    for p in policies:
      if isinstance(p, Forensics) and p.optional:
        p.stand_down()
