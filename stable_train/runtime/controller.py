"""The host controller: the eager outer loop of `fit`, read like Orbit's.

Per loop: run the traced loop of steps, record its reports, let the dispatcher decide and carry
out (`dispatch.Dispatcher`), then the cadence actions, each a *when* (`due`) and a *what* (`run`):
a signal's clean stop (`signal_action`), evaluation (`eval_action`), the interval checkpoint
(`checkpoint_action`). Whatever ends the run is an `outcome.Outcome`; `_finish` does the end of
run (final evaluation and checkpoint, `done`, summary.json).
"""

import contextlib
import functools
import logging
from typing import Any, Dict, Optional

import tensorflow as tf

from stable_train.core import loop as loop_lib
from stable_train.core import outcome as outcome_lib
from stable_train.core import reports as reports_lib
from stable_train.core import state as state_lib
from stable_train.core import step as step_lib
from stable_train import errors
from stable_train.runfiles import events as events_lib
from stable_train.runfiles import runlock
from stable_train.runtime.actions import checkpoint_action
from stable_train.runtime.actions import eval_action
from stable_train.runtime.actions import signal_action
from stable_train.runtime import dispatch
from stable_train.runtime import distribute
from stable_train.runtime import evaluation
from stable_train.runtime import handle
from stable_train.runtime import host as host_lib
from stable_train.runtime import inputs
from stable_train.runtime import recorder as recorder_lib
from stable_train.runtime import signals

log = logging.getLogger('stable_train')

FINISHED = tuple(s.value for s in outcome_lib.FINISHED)  # The statuses of a normal end.


class Controller:
  """The host side of one Trainer's runs: its input, checkpoints, step and loop, dispatcher."""

  def __init__(self, trainer):
    """Args: trainer: the `Trainer` (its settings, model parts and hooks, used publicly)."""
    t = self.trainer = trainer
    self.input = inputs.InputPosition(
        strategy=t.strategy, global_step=t.global_step, data_offset=t.data_offset,
        distributed=distribute.uses_distributed_input(t.strategy))
    self.host = host_lib.RunHost(TrainerModel(self), t.options, variables=t.all_variables,
                                 events=t.events)
    self.host.output_dir = t.output_dir
    self.checkpoints = checkpoint_action.RunCheckpoints(t, self.host, self.input,
                                                        self.checkpoint_objects)
    self.run = self.host.run
    self.dispatch = dispatch.Dispatcher(policies=t.policies, run=self.run,
                                        context=self.host.context,
                                        mark_fault=self.host.mark_fault)
    self.eval_scalars = events_lib.Scalars(None)
    self.step: Optional[step_lib.GuardedStep] = None  # Built at the first fit.
    self.loop: Optional[loop_lib.TrainLoop] = None
    self.variable_paths, self.input_paths, self.random_states = [], [], []
    self.recorder: Optional[recorder_lib.LoopRecorder] = None
    self.fitted = False
    self._epochs = None  # (num_epochs, steps_per_epoch) of a fit(num_epochs=...), or None.
    self._report_columns = (None, ())

  # -- the outer loop ---------------------------------------------------------------------------
  def fit(self, dataset, num_steps: int, *, eval_dataset=None, eval_every=None, eval_steps=None,
          epochs=None) -> Dict[str, Any]:
    """Sets the run up (resuming from disk), runs the host loop to `num_steps` and ends it.
    `epochs`: (num_epochs, steps_per_epoch) of a finite dataset repeated num_epochs times: the
    run then ends with that stream, wherever the resumed position puts its end."""
    t = self.trainer
    self._epochs = epochs
    lock = runlock.hold(t.output_dir) if t.output_dir else contextlib.nullcontext()
    with lock as held:
      self._build(dataset)
      if eval_dataset is not None:  # Before anything is written: eval data that cannot work.
        self._evaluator.check(eval_dataset)
      self.input.start(dataset, from_start=self.fitted)
      restored = self.checkpoints.open(dataset, fitted=self.fitted) if t.model_dir else None
      if not t.model_dir:
        self.input.reset()
      self.fitted = True
      start = self.global_step()
      if epochs is not None:  # The stream's end, from where the (resumed) position stands.
        num_steps = start + max(epochs[0] * epochs[1] - self.input.position(), 0)
      self._open_records(restored, num_steps, held, eval_dataset is not None)
      self.host.start_summary(start, epochs)
      cadence = checkpoint_action.CheckpointAction(self.host, t, self.dispatch, start)
      with signals.SIGNALS.training() as training, self.checkpoints.writes_in_background():
        signal = signal_action.SignalAction(training, t)
        evaluate = None if eval_dataset is None else eval_action.EvalAction(
            evaluator=self._evaluator, dataset=eval_dataset, every=eval_every, steps=eval_steps,
            trainer=t, dispatcher=self.dispatch, scalars=self.eval_scalars, start_step=start,
            train_metrics=self._metric_window, mark_fault=self.host.mark_fault, signal=signal,
            checkpoints=self.checkpoints)
        try:
          stopped = self.dispatch.already_stopped() if start < num_steps else None
          if stopped is not None:  # Resumed after an early stop (same command): train no more.
            log.info('step %d: resumed a run that had stopped early (%s); raise the patience '
                     'to train on', start, stopped.reason)
            return self._finish(stopped, None, cadence)
          actions = [a for a in (signal, evaluate, cadence) if a is not None]
          resumed = evaluate.resume(restored) if evaluate is not None else None
          ended = resumed or self._train(num_steps, actions)
          self.host.complete_writes()  # A failed write stops the run as a save would.
          return self._finish(ended, evaluate, cadence)
        except (errors.NumericsError, errors.CheckpointError, tf.errors.OpError) as e:
          # CheckNumerics(mode='raise'), a checkpoint that could not be written, or TensorFlow
          # failing at run time (an index out of range, memory): recorded as an abort (committed
          # checkpoints stay as they were; none is written from this state), then raised.
          ended = self.dispatch.abort_on_error(e, self.global_step())
          with contextlib.suppress(OSError):  # The disk that refused it may refuse this too.
            self._write_summary(ended, evaluate)
          raise

  def _train(self, num_steps: int, actions) -> outcome_lib.Outcome:
    """The host loop: a loop of steps, record, decide and dispatch, then the cadence actions,
    until `num_steps`, the data's end or an outcome."""
    start = step = self.global_step()
    every = self.trainer.options.steps_per_loop
    while step < num_steps:
      # Loops end on multiples of steps_per_loop, also after one that ended early (Forensics
      # ends it at a captured fault), so the cadences keep their steps.
      outputs = self.loop.run(self.input.iterator, min(every - step % every, num_steps - step))
      # The last checkpoint's write overlapped this loop: committed now (its prune goes on).
      self.host.complete_writes(prune=False)
      reports = self._read_reports(outputs)
      if reports.num_steps == 0:  # `fit(dataset.take(0))` builds everything, trains nothing.
        return self._data_end(num_steps, empty=step == start and self.input.position() == 0)
      self.dispatch.observe(reports)  # The host-kept statistics first: hooks may save them.
      self._record(reports, int(outputs['skipped_steps'].numpy()))
      ended = self.dispatch.after_loop(reports)
      # An action may move the step (a rollback): read again after one acted.
      step = self.global_step() if self.dispatch.acted else int(reports.step[-1])
      for action in actions:
        if ended is None and action.due(step):
          self.host.scalars.flush()  # On disk before a checkpoint this action writes can commit.
          ended = action.run(step)
          step = self.global_step()
      if ended is None and bool(outputs['data_ended'].numpy()):
        ended = self._data_end(num_steps)
      self.host.scalars.flush_due()
      if ended is not None:
        return ended
    return outcome_lib.Outcome(outcome_lib.Status.COMPLETED)

  def _record(self, reports, skipped_total: int) -> None:
    """Records one loop: the summary's loss and the fault mark (`RunHost.record`), events,
    scalars and progress lines, the Trainer's `on_loop_end`, and (when rehearsing failure) the
    injected faults."""
    t = self.trainer
    self.host.record(reports)  # No checkpoint of the next `healthy_window` steps is good.
    with t.events.batched():  # The loop's skip events, in one append.
      self.recorder.record(reports, skipped_total)
    t.on_loop_end(reports)
    if t.faults is not None:
      t.faults.after_loop(reports, self.run)

  def _finish(self, ended, evaluate, cadence) -> Dict[str, Any]:
    """The end of a run: the policies' last word, the final evaluation and checkpoint of a normal
    end (never completed with a stale checkpoint), the `done` event, summary.json."""
    t, step = self.trainer, self.global_step()
    ended = (ended.status == outcome_lib.Status.COMPLETED and self.dispatch.at_end(step)) or ended
    if ended.finished and evaluate is not None:
      ended = evaluate.final(step) or ended
    if ended.finished and not cadence.saved_at(step):
      t.save_checkpoint(reason='end')
    if ended.finished and self.host.refused:
      ended = self.dispatch.abort(
          self.host.refused_reason('the final checkpoint was refused'),
          'checkpoint_refused', step)
    if ended.finished:
      self.host.emit('done', step, status=ended.status.value, reason=ended.reason or (
          'num_epochs reached' if self._epochs is not None else 'num_steps reached'))
    return self._write_summary(ended, evaluate)

  def _write_summary(self, ended, evaluate) -> Dict[str, Any]:
    """summary.json (`RunHost.end_summary`) with the last evaluation and the metrics' window."""
    self.eval_scalars.close()
    return self.host.end_summary(
        ended, optimizer=self.trainer.optimizer, model=self.trainer.model,
        last_eval=evaluate.last if evaluate is not None else None,
        metrics=self._metric_window() if self.trainer.metrics else None)

  def _data_end(self, num_steps: int, empty: bool = False) -> outcome_lib.Outcome:
    """The outcome of a run whose data ended before `num_steps`: under num_epochs the stream's
    end is the run's; an empty dataset trained nothing; else 'data_exhausted' (a warning)."""
    if empty:
      log.warning('the dataset is empty: no step was run')
      return outcome_lib.Outcome(outcome_lib.Status.COMPLETED, reason='dataset empty')
    if self._epochs is not None:
      return outcome_lib.Outcome(outcome_lib.Status.COMPLETED, reason='num_epochs reached')
    reason = f'dataset exhausted at step {self.global_step()} of {num_steps}'
    log.warning('%s: the run ends here (repeat the dataset, or lower num_steps)', reason)
    return outcome_lib.Outcome(outcome_lib.Status.DATA_EXHAUSTED, reason=reason)

  # -- set-up -----------------------------------------------------------------------------------
  def _build(self, dataset) -> None:
    """Builds the run's variables and, once, the guarded step and the in-graph loop."""
    t = self.trainer
    variables, self.variable_paths = t.build(dataset)
    self.random_states = state_lib.random_state_variables()
    self.input_paths = reports_lib.input_paths(*t.split_batch(dataset.element_spec))
    if self.loop is None:
      float64 = any(tf.as_dtype(v.dtype) == tf.float64 for v in variables)
      self.step = step_lib.GuardedStep(t.step_parts(variable_paths=self.variable_paths,
                                                    random_states=self.random_states))
      self.loop = loop_lib.TrainLoop(
          self.step, policies=t.policies, global_step=t.global_step, jit_compile=t.jit_compile,
          report_dtypes=reports_lib.report_dtypes(tf.float64 if float64 else tf.float32),
          all_variables=t.all_variables)

  def _open_records(self, restored, num_steps: int, held, evaluating: bool) -> None:
    """The run's TensorBoard writers, its first events and the loop recorder."""
    t = self.trainer
    out = t.output_dir
    self.host.scalars = events_lib.Scalars(f'{out}/tensorboard' if out else None)
    # A separate TensorBoard run beside the training one, so the two curves overlay.
    self.eval_scalars = events_lib.Scalars(f'{out}/tensorboard/eval' if out and evaluating
                                           else None)
    step = self.global_step()
    length = (dict(num_epochs=self._epochs[0], steps_per_epoch=self._epochs[1])
              if self._epochs is not None else {})
    if restored is not None:
      self.host.emit('resume', step, checkpoint=restored.path, num_steps=num_steps, **length)
    else:
      self.host.emit('start', step, num_steps=num_steps, **length)
    stale = held.taken_over if held is not None else None
    if stale:
      self.host.emit('lock_taken_over', step, pid=stale.get('pid'), host=stale.get('host'))
    self.recorder = recorder_lib.LoopRecorder(
        emit=self.host.emit, scalars=self.host.scalars, summary_every=t.options.summary_every,
        log_every=t.options.log_every, metrics=t.metric_results if t.metrics else None,
        reset_metrics=t.reset_metrics, num_steps=num_steps, verbose=t.verbose,
        epoch_of=self.epoch_of, num_epochs=self._epochs[0] if self._epochs else None)

  # -- what the pieces share ----------------------------------------------------------------------
  def global_step(self) -> int:
    return int(self.trainer.global_step.numpy())

  def epoch_of(self, step: int) -> Optional[int]:
    """Under `fit(num_epochs=)`, the 1-based epoch of the batch step `step` consumed; else None."""
    if self._epochs is None:
      return None
    num_epochs, per_epoch = self._epochs
    position = max(step - 1 + int(self.trainer.data_offset.numpy()), 0)
    return min(position // per_epoch + 1, num_epochs)

  def _read_reports(self, outputs) -> reports_lib.StepReports:
    """The loop's outputs as StepReports: one transfer of the packed report matrix."""
    dtypes = self.loop.report_dtypes
    if self._report_columns[0] is not dtypes:
      self._report_columns = (dtypes, reports_lib.report_columns(dtypes))
    values = reports_lib.unpack_reports(outputs['reports'].numpy(), self._report_columns[1])
    finite = outputs.get('variables_finite')
    observed = outputs.get('observed')
    if observed is not None:  # The host observers' variables, as this loop left them.
      observed = {state_lib.observed_key(v): t.numpy()
                  for v, t in zip(self.loop.observed_variables, observed)}
    return reports_lib.StepReports.from_columns(
        values, variable_paths=self.variable_paths, input_paths=self.input_paths,
        variables_finite=None if finite is None else bool(finite.numpy()), observed=observed)

  def checkpoint_objects(self) -> Dict[str, Any]:
    """The checkpoint's object map (`state.TrainState.checkpoint_objects`)."""
    t = self.trainer
    return t.state.checkpoint_objects(model=t.model, optimizer=t.optimizer,
                                      forward_state=t.forward_state(),
                                      random_states=self.random_states)

  def _metric_window(self) -> Dict[str, float]:
    return self.recorder.metric_window() if self.recorder else self.trainer.metric_results()

  @functools.cached_property
  def _evaluator(self) -> evaluation.Evaluator:  # Built at the first fit that evaluates.
    return evaluation.Evaluator(self.trainer)


class TrainerModel:
  """The Trainer's side of its run's `host.RunHost` (a `host.ModelState`): its state, hooks and
  input position."""

  bad_batch_is_fault = False  # A skipped bad batch left the state as it was: a checkpoint is good.

  def __init__(self, controller: Controller):
    t = self._trainer = controller.trainer
    self._controller = controller
    self._first = None  # (the dataset, its first batch), read once (`_first_batch`).
    self.state, self.policies = t.state, t.policies
    self.probe = handle.Probe(
        model=t.model, policies=t.policies, split_batch=t.split_batch,
        loss_and_gradients=t.loss_and_gradients, model_checkpoint=t.model_checkpoint,
        first_batch=self._first_batch, jit_compile=t.jit_compile,
        label_classes_of=lambda: t.label_classes,
        loss=t.loss_fn if t.uses_own_loss() and t.uses_own_forward() else None)

  def _first_batch(self):
    """The run's first batch, read once per dataset: every new iterator of a shuffled or
    generator dataset advances its seed or its stream, which changed the training after each
    probe (DivergenceCheck's, every 50 steps)."""
    dataset = self._controller.input.dataset
    if dataset is None:
      return None
    kept = self._first
    if kept is None or kept[0] is not dataset:
      kept = self._first = (dataset, next(iter(dataset.take(1)), None))
    return kept[1]

  def learning_rate(self) -> float:
    return self._trainer.lr_control.current()

  def set_lr_scale(self, scale: float) -> None:
    self._trainer.lr_control.set_scale(scale)

  def skip_data(self, count: int):
    return self._controller.input.skip(count)

  def epoch_of(self, step: int) -> Optional[int]:
    return self._controller.epoch_of(step)

  def save(self, reason: str):
    return self._trainer.save_checkpoint(reason)

  def restore(self, candidates):
    return self._trainer.restore_latest(candidates)

  def restoring(self):
    return self._controller.input.restoring()

  def restored(self) -> None:
    # The learning-rate variable came back from the checkpoint; the rate is the configured
    # base times the restored scale, so a changed config takes effect on resume.
    self._trainer.lr_control.set_scale(float(self._trainer.lr_scale.numpy()))
