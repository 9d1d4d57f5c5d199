"""The host controller: the eager outer loop of `fit` and the cadence of checkpoints and records.

Per loop: run the traced loop, read its reports, record them, ask every policy to decide (pure,
from the reports and a `PolicyContext`), carry out the policies' ACT decisions in policy order,
then the one resolved continue/rollback/abort decision, then checkpoint when due.
"""

import contextlib
import dataclasses
import logging
import math
import os
import time
from typing import Any, Dict, Optional

import tensorflow as tf

from stable_train import checkpointing
from stable_train import distribute
from stable_train import errors
from stable_train import evaluation
from stable_train import events as events_lib
from stable_train import host
from stable_train import inputs
from stable_train import interfaces
from stable_train import loop as loop_lib
from stable_train import state as state_lib
from stable_train import stopping

log = logging.getLogger('stable_train')

# The statuses of a run that ended normally (evaluated, checkpointed, exported; CLI exit 0):
# num_steps (or num_epochs) reached, stopped early by a policy's STOP after an evaluation, or a
# dataset that ended before num_steps.
FINISHED = ('completed', 'stopped_early', 'data_exhausted')


class Controller:
  """Owns the host side of a Trainer's runs: set-up and resume, the checkpoint keeper and its
  cadence, the refused-checkpoint fault, signals, decisions and their actions, summary.json."""

  def __init__(self, trainer):
    """Args: trainer: the `Trainer` (its state, hooks, policies and traced loop)."""
    self._trainer = trainer
    self.keeper: Optional[checkpointing.CheckpointKeeper] = None
    self.scalars = events_lib.Scalars(None)
    self.refused_checkpoints = 0  # Refusals in a row.
    self.fitted = False
    self._lock: Optional[checkpointing.RunLock] = None
    self._recorder: Optional[host.LoopRecorder] = None
    self._eval = None  # (eval_dataset, eval_every, eval_steps) of the current fit, or None.
    self._evaluator = None
    self.eval_scalars = events_lib.Scalars(None)
    self.last_eval: Optional[Dict[str, Any]] = None
    self.best_eval_loss: Optional[float] = None
    self._last_saved: Optional[checkpointing.Entry] = None  # Written since the last restore.
    self._epochs = None  # (num_epochs, steps_per_epoch) of a fit(num_epochs=...), or None.
    # (objects key, tf.train.Checkpoint, state.Snapshot, TracedWriter of it, TracedWriter of the
    # snapshot), kept across fits: the snapshot's copies and the traced functions are built once.
    self._checkpoint_cache = None
    self._background_writes = False  # Interval checkpoints are written in the background.
    self._pending_reason = None  # The reason of the save being written in the background.
    self._report_columns = (None, ())  # (the report dtypes, their `loop.report_columns`).

  # ------------------------------------------------------------------------------------------
  # Set-up and resume.
  # ------------------------------------------------------------------------------------------
  def setup(self, dataset) -> Optional[checkpointing.Entry]:
    """Builds the run for `dataset`, opens the keeper and resumes; returns the restored entry."""
    t = self._trainer
    t._build(dataset)  # pylint: disable=protected-access
    if not t._train_loop.built:  # pylint: disable=protected-access
      t._train_loop.build()  # pylint: disable=protected-access
    t._input.start(dataset, from_start=self.fitted)  # pylint: disable=protected-access
    if t.model_dir is None:
      t.reset_input()
      return None
    if t.output_dir is not None and self._lock is None:
      # Before the keeper reads or cleans the directory: one live process per model_dir.
      self._lock = checkpointing.RunLock(t.output_dir).acquire()
    if self.keeper is not None:
      self.keeper.wait()  # A save made outside fit may still be writing into the directory.
    checkpoint, snapshot, writer, snapshot_writer = self._checkpoint_parts()
    # The data position is in the checkpoint (global_step + data_offset), never the tf.data
    # iterator, whose state would hold a `.cache()`d data set whole; the iterator is rebuilt.
    self.keeper = distribute.make_keeper(
        t.strategy, checkpoint, os.path.join(t.model_dir, 'checkpoints'),
        max_to_keep=t.max_checkpoints, keep_good=t.keep_good_checkpoints,
        warn=lambda event, step, **f: t.emit(event, step, **f), snapshot=snapshot,
        writer=writer, snapshot_writer=snapshot_writer, on_commit=self._committed)
    self.keeper.input_signature = inputs.batch_signature(dataset)
    committed = self.keeper.committed()
    if self.keeper.entries and not committed and not self.fitted:
      raise errors.CheckpointError(
          f'{self.keeper.directory}/manifest.json lists {len(self.keeper.entries)} '
          'checkpoint(s) but none of their files is there; restore them, or use a new '
          '--model_dir to start afresh.')
    entry = None
    if committed and not self.fitted:
      # Only a fresh Trainer resumes from disk; a later fit() in the same process continues from
      # the in-memory state (which the last fit() saved) with the new dataset from its start.
      entry = self._trainer.restore_latest(committed)  # Overridable, as Rollback's path is.
      if entry is None:
        why = checkpointing.why_unrestorable(getattr(self.keeper, 'restore_errors', []))
        raise errors.CheckpointError(
            f'no checkpoint in {self.keeper.directory} could be restored: {why}; or use a new '
            '--model_dir (or move that one away) to start afresh.')
      self._check_input_signature(entry)
    else:
      t.reset_input()
    return entry

  def _checkpoint_parts(self):
    """The run's `tf.train.Checkpoint`, and on a single device its `state.Snapshot` and the
    `TracedWriter`s of the live variables and of the snapshot (None under a distribution
    strategy, or where the state cannot be copied or the write traced), reused across fits
    while the checkpointed objects are the same (they are built once)."""
    t = self._trainer
    objects = t._checkpoint_objects()  # pylint: disable=protected-access
    key = tuple((name, tuple(map(id, value)) if isinstance(value, list) else id(value))
                for name, value in objects.items())
    cached = self._checkpoint_cache
    if cached is not None and cached[0] == key and (cached[2] is None or cached[2].is_current()):
      return cached[1:]
    checkpoint = tf.train.Checkpoint(**objects)
    parts = (checkpoint, None, None, None)
    distributed = t._distributed_input  # pylint: disable=protected-access
    if not distributed and t.strategy.num_replicas_in_sync == 1:
      try:
        snapshot = state_lib.Snapshot(checkpoint)
        parts = (checkpoint, snapshot, checkpointing.TracedWriter(checkpoint),
                 checkpointing.TracedWriter(tf.train.Checkpoint(**objects),
                                            object_map=snapshot.object_map()))
      except state_lib.SnapshotUnsupported as e:
        log.info('checkpoints are written in the foreground and restored from disk: %s', e)
      except Exception as e:  # pylint: disable=broad-except  (the write could not be traced)
        log.warning('checkpoints are written eagerly and restored from disk: %s',
                    str(e).splitlines()[0][:200])
    self._checkpoint_cache = (key,) + parts
    return parts

  def _check_input_signature(self, entry: checkpointing.Entry) -> None:
    """Refuses a resume whose batches differ in shape or dtype from the checkpointed run's (the
    data position counts batches, so another batch size would silently read other data)."""
    saved, now = entry.input_signature, self.keeper.input_signature
    if saved is None or saved == now:
      return  # None: written before signatures were recorded.
    old, new = saved.split(), now.split()
    if len(old) == len(new):
      old, new = next((a, b) for a, b in zip(old, new) if a != b)
      dtype = old.split('[')[0]
      if new.split('[')[0] == dtype:  # Same dtype: the shapes say it.
        old, new = old[len(dtype):], new[len(dtype):]
    else:
      old, new = saved, now
    raise errors.ConfigError(
        f'the input pipeline differs from the one checkpointed in {self.keeper.directory} '
        f'(batch size or element shape changed: checkpointed batches {old}, this pipeline '
        f'{new}); use the batch size and shapes the run started with, or a new --model_dir to '
        'start afresh.')

  def restore_latest(self, candidates) -> Optional[checkpointing.Entry]:
    """Restores the newest restorable checkpoint of `candidates` (a corrupt one is reported and
    the next older tried; from memory when the snapshot holds it), then repositions the input.
    Returns the entry, or None."""
    t = self._trainer
    with t._input.restoring():  # pylint: disable=protected-access
      entry = self.keeper.restore_latest(candidates)
    if entry is not None:
      self.refused_checkpoints = 0
      self._last_saved = None
      # The optimizer's learning-rate variable came back from the checkpoint; the rate is the
      # configured base times the restored scale, so a changed config takes effect on resume.
      t.lr_control.set_scale(float(t.lr_scale.numpy()))
    return entry

  # ------------------------------------------------------------------------------------------
  # Checkpoints.
  # ------------------------------------------------------------------------------------------
  def _healthy(self) -> bool:
    t = self._trainer
    step = int(t.global_step.numpy())
    recent_fault = step - int(t.last_fault_step.numpy()) <= t.healthy_window
    return not recent_fault and all(p.is_healthy() for p in t.policies)

  def save_checkpoint(self, reason: str = 'interval') -> Optional[checkpointing.Entry]:
    """Writes a checkpoint if every variable is finite; otherwise refuses and records why."""
    t = self._trainer
    if self.keeper is None:
      return None
    step = int(t.global_step.numpy())
    if not t.variables_finite():
      self.refused_checkpoints += 1
      bad = t.non_finite_variables()
      t.emit('checkpoint_refused', step, reason='non-finite variable', variables=bad[:10],
             in_a_row=self.refused_checkpoints)
      log.warning('step %d: checkpoint refused, non-finite variable %s', step,
                  bad[0] if bad else '?')
      return None
    self.refused_checkpoints = 0
    # An interval checkpoint of fit's loop is captured in memory and written, synced and
    # committed in the background while the next loop runs (which waits for it at its end);
    # any other save returns committed. Its `checkpoint` event is written once it is committed.
    # A failed write raises CheckpointError and stops the run: training on without checkpoints
    # would lose work.
    entry = self.keeper.save(step, good=self._healthy(),
                             background=self._background_writes and reason == 'interval')
    if self.keeper.pending is entry:
      self._pending_reason = reason
    else:
      self._committed(entry, reason)
    self._last_saved = entry
    return entry

  def checkpoint_now(self, reason: str) -> Optional[checkpointing.Entry]:
    """The checkpoint of the state as it is now: the one this run wrote at the current step
    since its last restore, else a new one (None when refused or without a model_dir)."""
    self._complete_writes()  # A checkpoint still being written counts once it is committed.
    step = int(self._trainer.global_step.numpy())
    last = self._last_saved
    if (last is not None and last.step == step and self.keeper is not None
        and any(e.number == last.number for e in self.keeper.committed())):
      return last
    return self._trainer.save_checkpoint(reason)

  def _committed(self, entry: checkpointing.Entry, reason: Optional[str] = None) -> None:
    """Records a committed checkpoint (the `checkpoint` event)."""
    self._trainer.emit('checkpoint', entry.step, checkpoint=entry.path, good=entry.good,
                       reason=reason or self._pending_reason)

  def _complete_writes(self) -> None:
    """Completes the checkpoint write in flight (committed, or a CheckpointError)."""
    if self.keeper is not None:
      self.keeper.wait()

  @contextlib.contextmanager
  def _writes_in_background(self):
    """Lets the host loop write interval checkpoints in the background; on the way out (the
    loop completes its own), waits for any still in flight before fit releases the model_dir."""
    self._background_writes = True
    try:
      yield
    finally:
      self._background_writes = False
      try:
        self._complete_writes()
      except errors.CheckpointError:
        pass  # Only when another error is on its way out; this one's event was written.

  def _stale_checkpoint_note(self) -> str:
    committed = self.keeper.committed() if self.keeper is not None else []
    if not committed:
      return 'no checkpoint was written before it'
    return f'the newest checkpoint on disk is from step {committed[-1].step}, before it'

  def _refusal_decision(self, step: int) -> Optional[interfaces.Decision]:
    """A fault once `max_refused_checkpoints` checkpoints in a row were refused, else None."""
    t = self._trainer
    if self.refused_checkpoints < t.max_refused_checkpoints:
      return None
    bad = t.non_finite_variables()
    return interfaces.Decision(
        action=interfaces.ESCALATE, trigger='checkpoint_refused', step=step,
        reason=(f'{self.refused_checkpoints} checkpoints in a row refused: variable '
                f'{bad[0] if bad else "?"} is non-finite'
                + (f' (and {len(bad) - 1} more)' if len(bad) > 1 else '')
                + '; ' + self._stale_checkpoint_note()))

  # ------------------------------------------------------------------------------------------
  # Reports, decisions, actions.
  # ------------------------------------------------------------------------------------------
  def _read_reports(self, outputs) -> interfaces.StepReports:
    """The loop's outputs as StepReports: one transfer of the packed report matrix."""
    t = self._trainer
    dtypes = t._report_dtypes  # pylint: disable=protected-access
    if self._report_columns[0] is not dtypes:
      self._report_columns = (dtypes, loop_lib.report_columns(dtypes))
    values = loop_lib.unpack_reports(outputs['reports'].numpy(), self._report_columns[1])
    variables_finite = (bool(outputs['variables_finite'].numpy())
                        if 'variables_finite' in outputs else None)
    return interfaces.StepReports.from_columns(
        values, variable_paths=t._variable_paths, input_paths=t._input_paths,  # pylint: disable=protected-access
        variables_finite=variables_finite)

  def context(self) -> interfaces.PolicyContext:
    """The read-only view the policies decide from."""
    t = self._trainer
    keeper = self.keeper
    return interfaces.PolicyContext(
        step=int(t.global_step.numpy()), data_position=t.data_position(),
        lr_scale=float(t.lr_scale.numpy()), variables_finite=t.variables_finite,
        checkpoints=lambda: keeper.committed() if keeper is not None else [],
        last_good_checkpoint=lambda: keeper.last_good() if keeper is not None else None)

  def decide(self, reports: interfaces.StepReports):
    """Every policy's decision, pure: (the ACT decisions in policy order, the resolved one).

    A policy that does not override `decide` is not asked, nor, on a clean loop (every step
    applied, none faulty or an overflow), one whose `decides_on_clean_loops` is False; the
    `PolicyContext` is built only when some policy is asked.
    """
    t = self._trainer
    clean = reports.clean()
    asked = [p for p in t.policies
             if type(p).decide is not interfaces.Policy.decide
             and (p.decides_on_clean_loops or not clean)]
    if not asked:
      return [], interfaces.Decision()
    context = self.context()
    decisions = []
    for p in asked:
      d = p.decide(reports, context)
      if d is not None and d.action == interfaces.STOP:
        raise ValueError(f'{p.name}.decide returned action={d.action!r}: a stop comes from '
                         'decide_eval (after an evaluation); from decide, ABORT stops the run.')
      if d is not None:
        # A decision names the policy that carries it out; by default the one that made it.
        decisions.append(d if d.policy else dataclasses.replace(d, policy=p.name))
    acts = [d for d in decisions if d.action == interfaces.ACT]
    return acts, host.resolve([d for d in decisions if d.action != interfaces.ACT], t.policies,
                              context)

  def _act(self, decision: interfaces.Decision) -> Optional[str]:
    """Carries out one policy's ACT decision; returns an abort reason or None to go on."""
    return self._trainer.state.policies.by_name[decision.policy].execute(
        decision, self._trainer)

  def _carry_out(self, fault: interfaces.Decision, step: int) -> Optional[str]:
    """Resolves a fault the controller itself found at `step` (eval divergence, checkpoints
    refused in a row) as it resolves a policy's escalation: a Rollback takes it over, or the run
    aborts (its `abort` event written here, with the fault's trigger). Returns the abort reason,
    or None to go on."""
    decision = host.resolve([fault], self._trainer.policies, self.context())
    stop = decision.reason if decision.action == interfaces.ABORT else self._execute(decision)
    if stop is not None:
      self._trainer.emit('abort', step, reason=stop, trigger=fault.trigger)
    return stop

  def _execute(self, decision: interfaces.Decision) -> Optional[str]:
    """Carries out a non-abort decision through the policy that made it; returns an abort reason
    or None to go on."""
    t = self._trainer
    if decision.action == interfaces.CONTINUE:
      return None
    mark = max(decision.step, int(t.global_step.numpy()))
    stop = t.state.policies.by_name[decision.policy].execute(decision, t)
    # Marked after executing: a rollback restores last_fault_step with the checkpoint (from
    # before the fault), which would otherwise let the next checkpoints be marked good.
    t.last_fault_step.assign(max(mark, int(t.last_fault_step.numpy())))
    return stop

  # ------------------------------------------------------------------------------------------
  # The outer loop.
  # ------------------------------------------------------------------------------------------
  def fit(self, dataset, num_steps: int, *, eval_dataset=None, eval_every=None,
          eval_steps=None, epochs=None) -> Dict[str, Any]:
    """Sets the run up (resuming from disk) and runs the host loop to `num_steps`, evaluating
    on `eval_dataset` every `eval_every` steps and at the end. `epochs`: (num_epochs,
    steps_per_epoch) when `dataset` is a finite one repeated num_epochs times: the run then ends
    with that stream, wherever the resumed position puts its end."""
    t = self._trainer
    self._epochs = epochs
    self._eval = (eval_dataset, eval_every, eval_steps) if eval_dataset is not None else None
    self.last_eval = None
    self.best_eval_loss: Optional[float] = None  # This fit's best (not checkpointed).
    start_time = time.perf_counter()
    try:
      restored = self.setup(dataset)
      self.fitted = True
      self.scalars = events_lib.Scalars(
          os.path.join(t.output_dir, 'tensorboard') if t.output_dir else None)
      # A separate TensorBoard run beside the training one, so the two curves overlay.
      self.eval_scalars = events_lib.Scalars(
          os.path.join(t.output_dir, 'tensorboard', 'eval')
          if t.output_dir and self._eval is not None else None)
      step = int(t.global_step.numpy())
      length = {}
      if epochs is not None:  # The stream's end, from where the (resumed) position stands.
        num_steps = step + max(epochs[0] * epochs[1] - t.data_position(), 0)
        length = dict(num_epochs=epochs[0], steps_per_epoch=epochs[1])
      if restored is not None:
        t.emit('resume', step, checkpoint=restored.path, num_steps=num_steps, **length)
      else:
        t.emit('start', step, num_steps=num_steps, **length)
      stale = self._lock.taken_over if self._lock is not None else None
      if stale:
        t.emit('lock_taken_over', step, pid=stale.get('pid'), host=stale.get('host'))
      recorder = host.LoopRecorder(emit=t.emit, scalars=self.scalars,
                                   summary_every=t.summary_every, log_every=t.log_every,
                                   metrics=t.metric_results if t.metrics else None,
                                   reset_metrics=t.reset_metrics, num_steps=num_steps,
                                   verbose=t.verbose, epoch_of=self.epoch_of,
                                   num_epochs=epochs[0] if epochs else None)
      self._recorder = recorder
      signals = host.StopSignals()
      with signals.catching(), self._writes_in_background():
        return self._host_loop(num_steps, step, start_time, recorder, signals)
    finally:
      if self._lock is not None:
        self._lock.release()
        self._lock = None

  def _host_loop(self, num_steps, start_step, start_time, recorder, signals):
    """The eager outer loop of `fit`: run a loop of steps, record, decide, act, checkpoint."""
    t = self._trainer
    step = start_step
    status, reason = 'completed', ''
    interrupted_by = stop_checkpoint = None
    last_loss = None
    last_checkpoint_step = last_eval_step = step
    already = stopping.stopped_before(t.policies) if step < num_steps else None
    if already is not None:  # Resumed after an early stop (same command again): train no more.
      status, reason = 'stopped_early', already
      log.info('step %d: resumed a run that had stopped early (%s); raise the patience to '
               'train on', step, already)
    try:
      while step < num_steps and already is None:
        n = min(t.steps_per_loop, num_steps - step)
        outputs = t._train_loop.run(t.iterator, n)  # pylint: disable=protected-access
        self._complete_writes()  # The last checkpoint's write overlapped this loop: done by now.
        data_ended = bool(outputs['data_ended'].numpy())
        reports = self._read_reports(outputs)
        if reports.num_steps == 0:
          # `fit(dataset.take(0))` builds everything and trains nothing (tests use it); the CLI
          # turns 'dataset empty' into a configuration error.
          empty = step == start_step and t.data_position() == 0
          if empty:
            reason = 'dataset empty'
            log.warning('the dataset is empty: no step was run')
          else:
            status, reason = self._data_end(step, num_steps)
          break
        step = int(reports.step[-1])
        if reports.applied[-1]:
          last_loss = float(reports.loss[-1])
        else:
          applied_losses = reports.loss[reports.applied]
          if applied_losses.size:
            last_loss = float(applied_losses[-1])
        # An fp16 overflow skip is the loss scale's business, not a fault of the run.
        if not reports.applied.all():
          faulty_steps = reports.step[~(reports.applied | reports.overflow)]
          if faulty_steps.size:
            t.last_fault_step.assign(int(faulty_steps[-1]))
        recorder.record(reports, int(outputs['skipped_steps'].numpy()))
        t.on_loop_end(reports)
        acts, decision = self.decide(reports)
        stop_reason = trigger = None
        for act in acts:  # Every policy's own action, in policy order, whatever comes next.
          stop_reason = self._act(act)
          if stop_reason is not None:
            trigger = act.trigger or act.policy
            break
        if stop_reason is None and decision.action == interfaces.ABORT:
          stop_reason, trigger = decision.reason, decision.trigger
        elif stop_reason is None and decision.action != interfaces.CONTINUE:
          stop_reason, trigger = self._execute(decision), decision.trigger
        if stop_reason is not None:
          status, reason = 'aborted', stop_reason
          t.emit('abort', step, reason=reason, trigger=trigger)
          break
        if acts or decision.action != interfaces.CONTINUE:
          step = int(t.global_step.numpy())  # An action may have moved it (a rollback).
        last_checkpoint_step = min(last_checkpoint_step, step)  # A rollback moved the step back.
        if signals.received is not None:
          interrupted_by = signals.received
          saved = t.save_checkpoint(reason=f'signal {interrupted_by}')
          stop_checkpoint = saved.path if saved else None
          last_checkpoint_step = step
          status, reason = 'interrupted', f'stopped by signal {interrupted_by}'
          t.emit('interrupted', step, signal=interrupted_by)
          break
        last_eval_step = min(last_eval_step, step)
        if self._eval_due(step, last_eval_step):
          result = self.evaluate(step)
          diverged = self.eval_divergence(result)
          last_eval_step = step
          if diverged is not None:  # A fault like any other: a Rollback acts on it.
            stop_reason = self._carry_out(diverged, step)
            if stop_reason is not None:
              status, reason = 'aborted', stop_reason
              break
            step = last_eval_step = int(t.global_step.numpy())
            last_checkpoint_step = min(last_checkpoint_step, step)
          else:  # The policies' decide_eval (best checkpoint, early stopping).
            status, reason = self._after_eval(result)
            if self._last_saved is not None and self._last_saved.step == step:
              last_checkpoint_step = step  # A best checkpoint was written at this step.
            if status != 'completed':
              break
        if step - last_checkpoint_step >= t.checkpoint_every:
          t.save_checkpoint()
          last_checkpoint_step = step
          refused = self._refusal_decision(step)
          if refused is not None:
            stop_reason = self._carry_out(refused, step)
            if stop_reason is not None:
              status, reason = 'aborted', stop_reason
              break
            step = last_checkpoint_step = int(t.global_step.numpy())
        if data_ended:
          status, reason = self._data_end(step, num_steps)
          break
      self._complete_writes()  # A failed write stops the run here, as a failed save would.
    except (errors.NumericsError, errors.CheckpointError) as e:
      # CheckNumerics(mode='raise'), or a checkpoint that could not be written: record the abort
      # (committed checkpoints stay as they were), re-raise.
      status, reason = 'aborted', str(e)
      trigger = 'check_numerics' if isinstance(e, errors.NumericsError) else 'checkpoint_failed'
      t.emit('abort', int(t.global_step.numpy()), reason=reason, trigger=trigger)
      try:
        self._finish(status, reason, last_loss, start_step, start_time)
      except OSError:
        pass  # The disk that refused the checkpoint may refuse summary.json too.
      raise
    step = int(t.global_step.numpy())
    if status in FINISHED and self._eval is not None and already is None and (
        self.last_eval is None or self.last_eval['step'] != step):
      result = self.evaluate(step)
      diverged = self.eval_divergence(result)
      if diverged is not None:
        # No steps left to recover in: the final checkpoint is simply not known good.
        t.last_fault_step.assign(step)
        t.emit('eval_divergence', step, reason=diverged.reason, handled='final checkpoint not good')
      else:
        final_status, final_reason = self._after_eval(result, final=True)
        if final_status == 'aborted':
          status, reason = final_status, final_reason
        if self._last_saved is not None and self._last_saved.step == step:
          last_checkpoint_step = step
    if status in FINISHED and step != last_checkpoint_step:
      t.save_checkpoint(reason='end')
    if status in FINISHED and self.refused_checkpoints:
      # Never "completed" while the newest checkpoint is stale.
      bad = t.non_finite_variables()
      status = 'aborted'
      reason = (f'the final checkpoint was refused: variable {bad[0] if bad else "?"} is '
                'non-finite; ' + self._stale_checkpoint_note())
      t.emit('abort', step, reason=reason, trigger='checkpoint_refused')
    if status in FINISHED:
      done = 'num_epochs reached' if self._epochs is not None else 'num_steps reached'
      t.emit('done', step, status=status, reason=reason or done)
    extra = ({'signal': interrupted_by, 'checkpoint': stop_checkpoint}
             if interrupted_by is not None else {})
    return self._finish(status, reason, last_loss, start_step, start_time, **extra)

  def epoch_of(self, step: int) -> Optional[int]:
    """The 1-based epoch of the batch global step `step` consumed (the first epoch for step 0),
    under `fit(num_epochs=...)`; None otherwise."""
    if self._epochs is None:
      return None
    num_epochs, per_epoch = self._epochs
    position = max(step - 1 + int(self._trainer.data_offset.numpy()), 0)
    return min(position // per_epoch + 1, num_epochs)

  def _data_end(self, step: int, num_steps: int):
    """(status, reason) of a run whose data ended before `num_steps`: under num_epochs the
    stream's end is the run's (a rollback's skipped batches shorten it); otherwise
    'data_exhausted', with a warning line."""
    if self._epochs is not None:
      return 'completed', 'num_epochs reached'
    reason = f'dataset exhausted at step {step} of {num_steps}'
    log.warning('%s: the run ends here (repeat the dataset, or lower num_steps)', reason)
    return 'data_exhausted', reason

  def _eval_due(self, step: int, last_eval_step: int) -> bool:
    if self._eval is None or self._eval[1] is None:
      return False
    every = self._eval[1]
    return step // every > last_eval_step // every

  def evaluate(self, step: int) -> Dict[str, Any]:
    """Evaluates on the fit's eval data; records it (event, log line, eval TensorBoard run)."""
    t = self._trainer
    dataset, _, steps = self._eval
    if self._evaluator is None:
      self._evaluator = evaluation.Evaluator(t)
    result = self._evaluator.evaluate(dataset, steps)
    result = dict(step=step, **result)
    self.last_eval = result
    t.emit('eval', step, loss=result['loss'], batches=result['batches'],
           metrics=result['metrics'])
    shown = ''.join(f'  {k} {v:.4g}' for k, v in result['metrics'].items())
    if t.verbose:
      log.info('step %d  eval loss %.5g%s  (%d batches)', step, result['loss'], shown,
               result['batches'])
    values = {'loss': result['loss']}
    values.update({f'metrics/{k}': v for k, v in result['metrics'].items()})
    self.eval_scalars.write(step, values)
    return result

  def decide_eval(self, result: Dict[str, Any]):
    """Every policy's `decide_eval` on one evaluation, pure: the decisions in policy order."""
    t = self._trainer
    train_metrics = {}
    if t.metrics:
      train_metrics = (self._recorder.metric_window() if self._recorder is not None
                       else t.metric_results())
    values = stopping.monitored_values(result, train_metrics)
    context = self.context()
    decisions = []
    for p in t.policies:
      d = p.decide_eval(values, context)
      if d is None:
        continue
      if d.action not in (interfaces.ACT, interfaces.STOP):
        raise ValueError(f'{p.name}.decide_eval returned action={d.action!r}; an evaluation '
                         'decision is ACT or STOP.')
      decisions.append(d if d.policy else dataclasses.replace(d, policy=p.name))
    return decisions

  def _after_eval(self, result: Dict[str, Any], final: bool = False):
    """Carries out the policies' decisions on an evaluation, in policy order; returns the run's
    (status, reason): ('completed', '') to go on, ('stopped_early', why) after a STOP (at the
    `final` evaluation a STOP is dropped: the run ends anyway), or ('aborted', why) when an
    execute says so."""
    t = self._trainer
    stop = None
    for d in self.decide_eval(result):
      if d.action == interfaces.STOP and final:
        continue
      aborted = self._act(d)
      if aborted is not None:
        t.emit('abort', d.step, reason=aborted, trigger=d.trigger or d.policy)
        return 'aborted', aborted
      if d.action == interfaces.STOP and stop is None:
        stop = d.reason
    return ('stopped_early', stop) if stop is not None else ('completed', '')

  def eval_divergence(self, result: Dict[str, Any]) -> Optional[interfaces.Decision]:
    """An ESCALATE decision (trigger `eval_divergence`) if the eval loss is non-finite or above
    `eval_divergence_factor` times this fit's best; None (and the best updated) otherwise."""
    t = self._trainer
    loss, best, factor = result['loss'], self.best_eval_loss, t.eval_divergence_factor
    if not math.isfinite(loss):
      why = f'eval loss {loss} is non-finite'
    elif best is not None and factor is not None and loss > factor * max(best, 1e-12):
      why = f'eval loss {loss:.5g} is above {factor:g} x the best {best:.5g}'
    else:
      self.best_eval_loss = loss if best is None else min(best, loss)
      return None
    return interfaces.Decision(action=interfaces.ESCALATE, trigger='eval_divergence',
                               step=result['step'], reason=why)

  def _finish(self, status, reason, last_loss, start_step, start_time, **extra) -> Dict[str, Any]:
    """Writes summary.json and flushes the summaries."""
    t = self._trainer
    elapsed = time.perf_counter() - start_time
    step = int(t.global_step.numpy())
    summary = self._summary(status, reason, last_loss, step - start_step, elapsed)
    summary.update(extra)
    self.scalars.close()
    self.eval_scalars.close()
    if t.output_dir:
      events_lib.write_json_atomic(os.path.join(t.output_dir, 'summary.json'), summary)
    t.last_summary = summary
    return summary

  def _summary(self, status, reason, last_loss, steps_run, elapsed) -> Dict[str, Any]:
    t = self._trainer
    summary = {
        'status': status,
        'global_step': int(t.global_step.numpy()),
        'applied_steps': int(t.applied_steps.numpy()),
        'skipped_steps': int(t.skipped_steps.numpy()),
        'input_faults': int(t.input_faults.numpy()),
        'overflow_skips': int(t.overflow_steps.numpy()),
        'final_loss': last_loss,
        'steps_this_run': steps_run,
        'seconds': round(elapsed, 3),
    }
    for p in t.policies:
      summary.update(p.summary())
    if self._epochs is not None:
      summary.update(epoch=self.epoch_of(summary['global_step']), num_epochs=self._epochs[0],
                     steps_per_epoch=self._epochs[1])
    if self.last_eval is not None:
      summary['eval'] = dict(self.last_eval)
    if t.metrics:
      summary['metrics'] = (self._recorder.metric_window() if self._recorder is not None
                            else t.metric_results())
    if reason and status != 'completed':
      summary['reason'] = reason
    elif reason:
      summary['note'] = reason
    return summary
