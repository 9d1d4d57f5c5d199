"""Tests for stable_train.runtime.controller: decisions are pure, the controller carries out the actions."""

import errno
import json
import os
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

from stable_train.core import interfaces
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.policies import basic as policies
from stable_train.policies import diagnostics
from stable_train.policies import recovery
from stable_train.runfiles import checkpointing
from stable_train.runfiles import events
from stable_train.testing import faults
from stable_train.trainer import trainer as trainer_lib

FEATURES = 8


def make_data(num_batches=40, batch_size=8):
  rng = np.random.RandomState(0)
  x = rng.normal(size=(num_batches * batch_size, FEATURES)).astype(np.float32)
  y = (x[:, :1] * 0.5).astype(np.float32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def make_trainer(policies_, trainer_class=trainer_lib.Trainer, **kwargs):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation='relu'),
                            keras.layers.Dense(1)], name='net')
  kwargs.setdefault('model_dir', None)
  return trainer_class(model=model, optimizer=keras.optimizers.Adam(0.01),
                       loss=keras.losses.MeanSquaredError(), policies=policies_, **kwargs)


class _Watched(trainer_lib.Trainer):
  """Fails on any event written while a policy decides; keeps the events."""

  deciding = None

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.records = []

  def on_event(self, record):
    assert self.deciding is None, f'{self.deciding}.decide emitted {record}'
    self.records.append(record)


def _files(root):
  return sorted((os.path.join(d, f), os.path.getsize(os.path.join(d, f)))
                for d, _, names in os.walk(root) for f in names)


def _pure_call(t, model_dir, name, decide, values, context):
  """Calls policy `name`'s `decide(values, context)` (or `decide_eval`) and fails if it acted:
  changed a model or optimizer variable, the step, the data position or a file, or (through
  `_Watched`) wrote an event."""
  assert isinstance(context, interfaces.PolicyContext), type(context)

  def state():
    return ([v.numpy().copy() for v in t.model.variables + t.optimizer.variables],
            int(t.global_step.numpy()), t.data_position(), _files(model_dir))

  if t.checkpoints is not None:  # A write in flight commits on its own thread, not in decide.
    t.checkpoints.wait()
  before = state()
  t.deciding = name
  try:
    decision = decide(values, context)
  finally:
    t.deciding = None
  after = state()
  for a, b in zip(before[0], after[0]):
    np.testing.assert_array_equal(a, b, err_msg=f'{name} decided and changed a variable')
  assert before[1:] == after[1:], f'{name} decided and acted on the run: {before[1:]} {after[1:]}'
  return decision


class _Act(interfaces.Policy):
  """Asks for its own action every loop; optionally stops the run from it."""

  def __init__(self, log, stop_at=None, **kwargs):
    super().__init__(**kwargs)
    self._log, self._stop_at = log, stop_at

  def decide(self, reports, context):
    return interfaces.Decision(action=interfaces.ACT, policy=self.name, step=context.step)

  def execute(self, decision, trainer):
    self._log.append((self.name, decision.step))
    return 'stopped by an action' if decision.step == self._stop_at else None


class _Abort(interfaces.Policy):

  def __init__(self, log, at, **kwargs):
    super().__init__(**kwargs)
    self._log, self._at = log, at

  def decide(self, reports, context):
    if int(reports.step[-1]) >= self._at:
      return interfaces.Decision(action=interfaces.ABORT, reason='enough', trigger='abort_test',
                                 step=int(reports.step[-1]))
    return None


class _Reader(interfaces.Policy):
  """Keeps the context of every loop."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.seen = []

  def decide(self, reports, context):
    good = context.last_good_checkpoint()
    self.seen.append((int(reports.step[-1]), context, [e.step for e in context.checkpoints()],
                      good.step if good else None))
    return None


class ControllerTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_decide_never_acts_and_every_action_still_happens(self):
    model_dir = self.get_temp_dir()
    stack = [faults.Faults(feature_nan_batches=[7]), policies.CheckNumerics(),
             diagnostics.InitialisationCheck(), forensics.Forensics(when='first'),
             policies.SkipNonFinite(max_consecutive=0), recovery.Rollback(restore_lr_after=6)]
    t = make_trainer(stack[1:], trainer_class=_Watched, model_dir=model_dir,
                     faults=stack[0], checkpoint_every=5, healthy_window=0)
    set_scale = t.lr_control.set_scale

    def guarded_set_scale(scale):
      assert t.deciding is None, f'{t.deciding}.decide changed the learning rate'
      set_scale(scale)

    t.lr_control.set_scale = guarded_set_scale
    kinds = []

    def watch(p):
      decide = p.decide

      def wrapped(reports, context):
        decision = _pure_call(t, model_dir, p.name, decide, reports, context)
        if decision is not None:
          kinds.append((p.name, decision.action))
        return decision

      p.decide = wrapped

    for p in t.policies:
      watch(p)
    summary = t.fit(make_data(), num_steps=20)
    self.assertEqual(summary['status'], 'completed')
    events = {r['event'] for r in t.records}
    # Each policy's action happened, through execute.
    self.assertContainsSubset({'fault_injected', 'forensics', 'rollback', 'lr_restored'}, events)
    self.assertIsNotNone(summary['init_check']['output_rms'])  # The model ran, in execute.
    self.assertContainsSubset({('forensics', interfaces.ACT),
                               ('check_numerics', interfaces.ACT),
                               ('init_check', interfaces.ACT), ('rollback', interfaces.ACT),
                               ('skip_non_finite', interfaces.ESCALATE)}, set(kinds))

  @pytest.mark.slow
  def test_the_divergence_check_and_the_outlier_skip_only_decide(self):
    from stable_train.policies import divergence  # pylint: disable=g-import-not-at-top
    from stable_train.policies import outliers  # pylint: disable=g-import-not-at-top
    model_dir = self.get_temp_dir()
    stack = [policies.CheckNumerics(), policies.SkipNonFinite(),
             outliers.OutlierSkip(warmup=4, metrics=('loss',)),
             divergence.DivergenceCheck(patience=2, warmup=2), recovery.Rollback()]
    # Too hot: the loss climbs above the untrained one; batch 10 is an outlier (1e4).
    t = make_trainer(stack, trainer_class=_Watched, model_dir=model_dir, checkpoint_every=5)
    t.optimizer.learning_rate = 3.0
    kinds = []
    for p in t.policies:
      decide = p.decide

      def wrapped(reports, context, p=p, decide=decide):
        decision = _pure_call(t, model_dir, p.name, decide, reports, context)
        if decision is not None:
          kinds.append((p.name, decision.action, decision.trigger))
        return decision

      p.decide = wrapped
    rng = np.random.RandomState(0)
    x = rng.normal(size=(320, FEATURES)).astype(np.float32)
    x[80, 0] = 1e4
    data = tf.data.Dataset.from_tensor_slices((x, (x[:, :1] * 0.5))).batch(8)
    summary = t.fit(data, num_steps=30)
    events = {r['event'] for r in t.records}
    self.assertContainsSubset({'divergence_check', 'rollback', 'diagnosis'}, events)
    self.assertContainsSubset({('divergence', interfaces.ACT, 'divergence_check'),
                               ('divergence', interfaces.ESCALATE, 'divergence')}, set(kinds))
    self.assertIn('diagnosis', summary)

  def test_actions_run_in_policy_order_before_the_resolved_decision(self):
    log = []
    t = make_trainer([_Act(log, name='a'), _Abort(log, at=3, name='stop'), _Act(log, name='b')])
    summary = t.fit(make_data(), num_steps=10)
    self.assertEqual((summary['status'], summary['reason']), ('aborted', 'enough'))
    self.assertEqual(log, [('a', 1), ('b', 1), ('a', 2), ('b', 2), ('a', 3), ('b', 3)])

  @pytest.mark.slow
  def test_an_action_that_returns_a_reason_aborts_the_run(self):
    log = []
    t = make_trainer([_Act(log, stop_at=2, name='a'), _Act(log, name='b')])
    summary = t.fit(make_data(), num_steps=10)
    self.assertEqual((summary['status'], summary['reason']), ('aborted', 'stopped by an action'))
    self.assertEqual(log, [('a', 1), ('b', 1), ('a', 2)])  # The run stops at the first reason.

  def test_the_policy_context_is_a_narrow_read_only_view(self):
    reader = _Reader(name='reader')
    t = make_trainer([reader], model_dir=self.get_temp_dir(), steps_per_loop=2,
                     checkpoint_every=2, healthy_window=0)
    t.fit(make_data(), num_steps=6)
    self.assertEqual([s[0] for s in reader.seen], [2, 4, 6])
    step, context, checkpoints, last_good = reader.seen[-1]
    self.assertEqual((context.step, context.data_position, context.lr_scale), (step, 6, 1.0))
    self.assertTrue(context.variables_finite())
    self.assertEqual((checkpoints, last_good), ([2, 4], 4))  # Decided before step 6's save.
    for name in ('emit', 'model', 'restore_latest', 'skip_batches', 'lr_control', 'policies'):
      self.assertFalse(hasattr(context, name), name)


class HealthTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_a_skipped_bad_batch_is_no_fault_of_the_model_and_a_non_finite_step_is(self):
    from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
    model_dir = self.get_temp_dir() + '/health'
    t = make_trainer([policies.ValidateInputs()] + trainer_lib.default_policies(),
                     model_dir=model_dir, checkpoint_every=4, healthy_window=3, log_every=100,
                     faults=faults.Faults(loss_nan_steps=[14]))
    # Bad batches at steps 4, 8, 12, 16 and 20, on the checkpoint steps themselves; a NaN loss
    # at step 14, two steps before the checkpoint of step 16.
    dataset = data.synthetic_regression(num_examples=64, num_features=FEATURES, batch_size=8,
                                        poison_batches=[3, 7, 11, 15, 19])
    summary = t.fit(dataset, num_steps=20)
    self.assertEqual((summary['status'], summary['input_faults'], summary['skipped_steps']),
                     ('completed', 5, 6))
    self.assertEqual([(e.step, e.good) for e in t.checkpoints.committed()],
                     [(4, True), (8, True), (12, True), (16, False), (20, True)])

class EvalDecisionsTest(tf.test.TestCase):

  def test_decide_eval_only_decides_and_execute_acts(self):
    from stable_train.policies import stopping  # pylint: disable=g-import-not-at-top
    model_dir = self.get_temp_dir()
    stop = stopping.EarlyStopping(patience=1, min_delta=1e9)  # Stops at the second eval.
    t = make_trainer([policies.SkipNonFinite(), stop], trainer_class=_Watched,
                     model_dir=model_dir, checkpoint_every=100)
    decide_eval, seen = stop.decide_eval, []

    def guarded(values, context):
      decision = _pure_call(t, model_dir, stop.name, decide_eval, values, context)
      seen.append((context.step, decision.action if decision else None))
      return decision

    stop.decide_eval = guarded
    summary = t.fit(make_data(), num_steps=10, eval_dataset=make_data(2), eval_every=2)
    self.assertEqual(seen, [(2, interfaces.ACT), (4, interfaces.STOP)])
    self.assertEqual((summary['status'], summary['global_step']), ('stopped_early', 4))
    events = [r['event'] for r in t.records]
    # What the decisions asked for happened, in execute: the best save and mark, the stop record.
    self.assertContainsSubset(['best_checkpoint', 'early_stop', 'done'], events)
    self.assertEqual(t.checkpoints.best().step, 2)

  @pytest.mark.slow
  def test_a_stop_from_decide_or_a_rollback_from_decide_eval_is_refused(self):

    class StopInDecide(interfaces.Policy):
      def decide(self, reports, context):
        return interfaces.Decision(action=interfaces.STOP, reason='x')

    with self.assertRaisesRegex(ValueError, "action='stop': a stop comes from decide_eval"):
      make_trainer([StopInDecide(name='s')]).fit(make_data(), num_steps=2)

    class RollbackInDecideEval(interfaces.Policy):
      def decide_eval(self, values, context):
        return interfaces.Decision(action=interfaces.ROLLBACK)

    with self.assertRaisesRegex(ValueError, "action='rollback'; an evaluation decision is ACT"):
      make_trainer([RollbackInDecideEval(name='r')]).fit(
          make_data(), num_steps=2, eval_dataset=make_data(1), eval_every=1)


# Found by a break-it review of the split (each failed before its fix).

def _b9_data(n=40, nan_at=()):
  rng = np.random.RandomState(0)
  x = rng.randn(n, 4, 4).astype('float32')
  y = rng.randn(n, 4, 1).astype('float32')
  for i in nan_at:
    x[i, 0, 0] = np.nan
  return tf.data.Dataset.from_tensor_slices((x, y))


def _b9_trainer(policies_=None, model_dir=None, cls=trainer_lib.Trainer, **kwargs):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
  return cls(model=model, optimizer=keras.optimizers.SGD(0.01),
             loss=keras.losses.MeanSquaredError(), policies=policies_, model_dir=model_dir,
             **kwargs)



@pytest.mark.slow
def test_subclass_save_checkpoint_and_restore_latest_overrides_are_called(tmp_path):
  # Before the split, fit's cadence (interval/end/signal) called self.save_checkpoint and resume
  # called self.restore_latest; the Controller now calls its own methods, bypassing overrides.
  calls = []

  class Sub(trainer_lib.Trainer):
    def save_checkpoint(self, reason='interval'):
      calls.append('save')
      return super().save_checkpoint(reason)

    def restore_latest(self, candidates):
      calls.append('restore')
      return super().restore_latest(candidates)

  _b9_trainer(None, str(tmp_path), cls=Sub, checkpoint_every=2).fit(_b9_data(), num_steps=5)
  assert 'save' in calls
  calls.clear()
  _b9_trainer(None, str(tmp_path), cls=Sub, checkpoint_every=2).fit(_b9_data(), num_steps=7)
  assert 'restore' in calls


def test_interval_commits_are_done_by_the_next_loop_end_and_a_failed_one_stops_the_run(
    tmp_path):
  model_dir = str(tmp_path)
  directory = os.path.join(model_dir, 'checkpoints')
  commits = []  # (global step when the commit was waited for, manifest steps then)

  class Watch(trainer_lib.Trainer):
    def on_loop_end(self, reports):
      with open(os.path.join(directory, checkpointing.MANIFEST)) as f:
        commits.append((int(reports.step[-1]),
                        [e['step'] for e in json.load(f)['checkpoints']]))

  fsync, calls = checkpointing._fsync, []

  def fsync_then_full(paths):
    calls.append(paths)
    if len(calls) == 3:  # The third checkpoint's files (step 6): the disk fills.
      raise OSError(errno.ENOSPC, 'No space left on device')
    fsync(paths)

  t = _b9_trainer(None, model_dir, cls=Watch, checkpoint_every=2, steps_per_loop=1)
  with mock.patch.object(checkpointing, '_fsync', fsync_then_full):
    with pytest.raises(errors.CheckpointError,
                       match=r'could not write a checkpoint at step 6: .*No space left.*'
                             r'resumes from ckpt-2 \(step 4\)'):
      t.fit(_b9_data(), num_steps=20)
  # Each checkpoint is committed at the end of the loop after its save (here one step later).
  assert [c for c in commits if c[0] in (3, 5)] == [(3, [2]), (5, [2, 4])]
  with open(os.path.join(model_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert (summary['status'], summary['global_step']) == ('aborted', 7)  # Stopped a step later.
  log = events.read_events(os.path.join(model_dir, 'events.jsonl'))
  assert [e['step'] for e in log if e['event'] == 'checkpoint_failed'] == [6]
  assert [e['trigger'] for e in log if e['event'] == 'abort'] == ['checkpoint_failed']
  with open(os.path.join(directory, checkpointing.MANIFEST)) as f:
    assert [e['step'] for e in json.load(f)['checkpoints']] == [2, 4]
  assert not [n for n in os.listdir(directory) if n.startswith('ckpt-3')]


def embedding_data(bad_batch=2, input_dim=10):
  """Batches of 8 token-id pairs for an Embedding of `input_dim` ids; batch `bad_batch` (0-based)
  holds an id out of range, which the CPU gather refuses with an InvalidArgumentError."""
  ids = np.random.RandomState(0).randint(0, input_dim, size=(40, 2)).astype(np.int32)
  ids[bad_batch * 8 + 3, 1] = input_dim + 2
  return tf.data.Dataset.from_tensor_slices((ids, np.ones((40, 1), np.float32))).batch(8)


def embedding_model(input_dim=10):
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((2,), dtype='int32'), keras.layers.Embedding(input_dim, 4),
                           keras.layers.Flatten(), keras.layers.Dense(1)])


def test_a_tensorflow_error_in_training_is_an_abort_with_a_summary_then_raised(tmp_path):
  """An Embedding id out of range at step 3: the error propagates; summary.json and the abort
  event name it (trigger runtime_error); the committed checkpoints stand, none added."""
  model_dir = str(tmp_path / 'run')
  t = trainer_lib.Trainer(model=embedding_model(), optimizer='adam', loss='mse', verbose=False,
                          policies=[policies.SkipNonFinite()], model_dir=model_dir,
                          checkpoint_every=1)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r'= 12 is not in \[0, 10\)'):
    t.fit(embedding_data(), num_steps=5)
  with open(os.path.join(model_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert (summary['status'], summary['global_step'], summary['applied_steps']) == ('aborted', 2, 2)
  assert summary['reason'].startswith('TensorFlow InvalidArgumentError after step 2: indices[')
  assert summary['reason'].endswith('= 12 is not in [0, 10)')
  # The newest committed one (step 2's may still be in flight: committed right after).
  assert summary['last_good_checkpoint']['step'] in (1, 2)
  log = events.read_events(os.path.join(model_dir, 'events.jsonl'))
  assert [(e['step'], e['trigger'], e['reason']) for e in log if e['event'] == 'abort'] == [
      (2, 'runtime_error', summary['reason'])]
  with open(os.path.join(model_dir, 'checkpoints', checkpointing.MANIFEST)) as f:
    assert [e['step'] for e in json.load(f)['checkpoints']] == [1, 2]
  with open(os.path.join(model_dir, 'run.lock')) as f:
    assert f.read() == ''  # Released.


def test_old_style_decide_fails_naming_the_contract():
  class Old(interfaces.Policy):
    def decide(self, reports, context):
      context.emit('mine', int(context.global_step.numpy()))

  with pytest.raises(AttributeError, match=r"PolicyContext has no 'emit'.*execute"):
    _b9_trainer([Old(name='old')]).fit(_b9_data(), num_steps=2)


def test_act_without_policy_name_is_a_clear_error_or_defaults_to_the_decider():
  ran = []

  class NoName(interfaces.Policy):
    def decide(self, reports, context):
      return interfaces.Decision(action=interfaces.ACT)

    def execute(self, decision, trainer):
      ran.append(decision)

  try:
    _b9_trainer([NoName(name='nn')]).fit(_b9_data(), num_steps=2)
  except KeyError as e:  # Observed: KeyError: ''
    pytest.fail(f'bare KeyError {e!r} for an ACT decision without policy=')
  assert ran


def test_unknown_decision_action_is_not_silently_ignored():
  class Typo(interfaces.Policy):
    def decide(self, reports, context):
      return interfaces.Decision(action='rollbak', policy=self.name)

  with pytest.raises(ValueError, match="action='rollbak' is not one of"):
    _b9_trainer([Typo(name='typo')]).fit(_b9_data(), num_steps=2)


def test_fit_after_an_abort_does_not_reabort_on_a_clean_step():
  t = _b9_trainer([policies.SkipNonFinite(max_consecutive=1), recovery.Rollback(max_rollbacks=0)],
               None)
  assert t.fit(_b9_data(40, nan_at=(4, 5, 6)), num_steps=10)['status'] == 'aborted'
  summary = t.fit(_b9_data(40), num_steps=14)
  # Observed: aborted after 1 clean step, '2 consecutive non-finite steps ... tensor: none'.
  assert summary['status'] == 'completed', summary.get('reason')


if __name__ == '__main__':
  tf.test.main()


class _Counting(interfaces.Policy):
  """Counts its decide calls; optionally declares itself quiet on clean loops."""

  def __init__(self, quiet, **kwargs):
    super().__init__(**kwargs)
    self.decides_on_clean_loops = not quiet
    self.calls = 0

  def decide(self, reports, context):
    self.calls += 1
    return None


def test_policies_quiet_on_clean_loops_are_asked_only_on_loops_with_a_skip():
  quiet, chatty = _Counting(True, name='quiet'), _Counting(False, name='chatty')
  t = _b9_trainer([policies.CheckNumerics(), policies.SkipNonFinite(), quiet, chatty],
                  steps_per_loop=4)
  t.fit(_b9_data(n=40, nan_at=(9,)), num_steps=40)  # 10 loops; step 10 is skipped.
  assert int(t.skipped_steps.numpy()) == 1
  assert chatty.calls == 10
  assert quiet.calls == 1  # Only the loop of steps 9-12.


def test_skip_streaks_split_by_clean_loops_escalate_only_when_one_streak_is_too_long():
  # Limit 3. A streak of 3 ends a loop (stays within the limit), clean loops follow (decide is
  # not called, so the streak peak is not reset), then a streak of 2: no escalation. Then a
  # streak of 4: escalation (the run aborts without a Rollback).
  nan_at = [5, 6, 7] + [20, 21] + [30, 31, 32, 33]
  t = _b9_trainer([policies.CheckNumerics(check_inputs=False),  # The NaN reaches the model.
                   policies.SkipNonFinite(max_consecutive=3)], steps_per_loop=4)
  summary = t.fit(_b9_data(n=48, nan_at=nan_at), num_steps=48)
  assert summary['status'] == 'aborted'
  assert '4 consecutive non-finite steps' in summary['reason']
  assert summary['global_step'] == 36  # The loop of steps 33-36 holds the 4th skip.


@pytest.mark.slow
def test_scalars_are_flushed_before_each_checkpoint_not_after_every_loop(tmp_path):
  calls = []
  real_flush, real_save = events.Scalars.flush, checkpointing.CheckpointKeeper.save

  def flush(self):
    if self.writing:
      calls.append('flush')
    real_flush(self)

  def save(self, step, good, **kwargs):
    calls.append(f'save {step}')
    return real_save(self, step, good, **kwargs)

  t = make_trainer(None, model_dir=str(tmp_path), steps_per_loop=5,
                   checkpoint_every=10, summary_every=5, verbose=False)
  with mock.patch.object(events.Scalars, 'flush', flush), \
       mock.patch.object(checkpointing.CheckpointKeeper, 'save', save):
    t.fit(make_data(), num_steps=30)
  saves = [i for i, c in enumerate(calls) if c.startswith('save')]
  assert [calls[i] for i in saves] == ['save 10', 'save 20', 'save 30'], calls
  assert all(calls[i - 1] == 'flush' for i in saves), calls  # Scalars on disk before a commit.
  assert calls.count('flush') < 6, calls  # Not once per loop of 5 steps (the 2 s interval).


def test_host_observers_read_their_variables_from_the_loop_not_from_the_host():
  """The loop hands the observers' variables over with the reports (`StepReports.observed`); a
  host write between loops (a restore, a later fit) is what the next loop hands over."""
  from stable_train.core import state as state_lib  # pylint: disable=g-import-not-at-top
  from stable_train.policies import divergence  # pylint: disable=g-import-not-at-top
  skip, check = policies.SkipNonFinite(), divergence.DivergenceCheck(output_ratio=None)
  t = make_trainer([skip, check], steps_per_loop=5)
  seen = []
  fold = skip.observe
  skip.observe = lambda reports: seen.append(reports) or fold(reports)
  t.fit(make_data(), num_steps=5)
  observed = seen[-1].observed
  assert observed is not None
  assert set(observed) == {v.ref() for v in skip.observed_variables() + [check.state]}
  np.testing.assert_array_equal(observed[skip.consecutive_skips.ref()], 0)
  skip.consecutive_skips.assign(2)  # As a restore of a checkpoint mid-streak would leave it.
  state = check.state.numpy()
  t.fit(make_data(), num_steps=10)
  np.testing.assert_array_equal(seen[-1].observed[skip.consecutive_skips.ref()], 2)
  np.testing.assert_array_equal(seen[-1].observed[check.state.ref()], state)
  assert int(skip.consecutive_skips.numpy()) == 0  # The clean loop ended the streak it was read.
  assert not np.array_equal(check.state.numpy(), state)  # ...and the trend folded on.
  # Where the reports carry no value, the variable is read.
  assert int(state_lib.host_value(skip.total_skips, seen[-1])) == 0
  skip.total_skips.assign(7)
  assert int(state_lib.host_value(skip.total_skips, None)) == 7
  assert int(state_lib.host_value(skip.total_skips, seen[-1])) == 0  # The loop's value.
  keras_variable = keras.Variable(3.0)  # No `ref()`: found by its id, else read.
  assert float(state_lib.host_value(keras_variable, seen[-1])) == 3.0
