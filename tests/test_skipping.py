"""Tests for stable_train.policies.skipping: SkipNonFinite's counts, its streak and share limits,
and its end check: a run whose last window still skips a share of its steps for the model's
faults ends 'aborted', through the Trainer and a guarded Keras `fit`."""

import dataclasses
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from stable_train.core import interfaces
from stable_train import errors
from stable_train.keras import fit as keras_fit
from stable_train.policies import skipping
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models
from test_policies import reports_of  # pylint: disable=g-bad-import-order


class ValidationTest(tf.test.TestCase):

  def test_bad_arguments_name_the_argument_and_value(self):
    cases = [
        (lambda: skipping.SkipNonFinite(max_consecutive=-2), 'max_consecutive=-2'),
        (lambda: skipping.SkipNonFinite(max_consecutive=1.5), 'max_consecutive=1.5'),
        (lambda: skipping.SkipNonFinite(max_share=0.0), 'max_share=0.0'),
        (lambda: skipping.SkipNonFinite(max_share=1.5), 'max_share=1.5'),
        (lambda: skipping.SkipNonFinite(share_window=0), 'share_window=0'),
        (lambda: skipping.SkipNonFinite(max_share_at_end=0), 'max_share_at_end=0'),
        (lambda: skipping.SkipNonFinite(max_share_at_end='a fifth'), "max_share_at_end='a fifth'"),
    ]
    for make, text in cases:
      with self.assertRaises(errors.ConfigError) as ctx:
        make()
      self.assertIn(text, str(ctx.exception))
      self.assertEqual(len(str(ctx.exception).splitlines()), 1)
    with self.assertRaises(TypeError):
      skipping.SkipNonFinite(3)  # pylint: disable=too-many-function-args


class SkipNonFiniteTest(tf.test.TestCase):

  def _run(self, policy, applied_seq, finite_seq=None, loop=2, step0=1):
    """Folds the steps into `policy`, `loop` steps at a time (the host's `observe`)."""
    finite_seq = finite_seq or [False] * len(applied_seq)
    for k in range(0, len(applied_seq), loop):
      # A skipped step is a non-finite one unless `finite` says it was vetoed on finite values.
      ok = [bool(a or f) for a, f in zip(applied_seq[k:k + loop], finite_seq[k:k + loop])]
      reports = dataclasses.replace(reports_of(applied_seq[k:k + loop], step0=step0 + k),
                                    loss_finite=np.array(ok), grads_finite=np.array(ok))
      self.assertFalse(policy.observe(reports))  # A skip is never clean: nothing to notice.

  def test_counters(self):
    p = skipping.SkipNonFinite(max_consecutive=2)
    self._run(p, [True, False, False, True, False])
    self.assertEqual(int(p.total_skips.numpy()), 3)
    self.assertEqual(int(p.consecutive_skips.numpy()), 1)
    # Health is the run's fault mark, which tells a bad batch from a non-finite step
    # (test_controller.py: HealthTest).
    self.assertTrue(p.is_healthy())

  def test_a_streak_spans_loops_and_a_clean_loop_ends_it(self):
    p = skipping.SkipNonFinite(max_consecutive=2)
    self._run(p, [True, False, False, False, False], loop=3)  # Loops [T F F], [F F].
    self.assertEqual([int(v.numpy()) for v in (p.total_skips, p.consecutive_skips,
                                              p.peak_consecutive)], [4, 4, 4])
    p.consecutive_skips.assign(3)  # As a rollback to a checkpoint written mid-streak leaves it.
    self.assertFalse(p.observe(reports_of([True, True], step0=6)))
    self.assertEqual(int(p.consecutive_skips.numpy()), 0)
    self.assertEqual(int(p.total_skips.numpy()), 4)

  def test_a_loop_is_counted_before_the_trainers_hook_sees_it(self):
    # on_loop_end may save a checkpoint: the counts it sees (and saves) include the loop's steps.
    skip = skipping.SkipNonFinite(max_consecutive=100)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=16, hidden=(8,)),
                            optimizer=keras.optimizers.SGD(0.01),
                            loss=keras.losses.MeanSquaredError(), policies=[skip],
                            model_dir=None, steps_per_loop=5)
    seen = []
    t.on_loop_end = lambda reports: seen.append(
        (int(skip.total_skips.numpy()), int(skip.consecutive_skips.numpy())))
    t.fit(data.synthetic_regression(num_features=16, num_examples=320,
                                    poison_batches=[2, 3, 4, 7]), num_steps=10)
    self.assertEqual(seen, [(3, 3), (4, 0)])

  def test_a_veto_on_finite_values_neither_counts_nor_ends_a_streak(self):
    # An OutlierSkip veto is that policy's skip: SkipNonFinite counts faulty steps only.
    p = skipping.SkipNonFinite(max_consecutive=2)
    self._run(p, [False, False, False, True], finite_seq=[False, True, False, True])
    self.assertEqual(int(p.total_skips.numpy()), 2)
    self.assertEqual(int(p.peak_consecutive.numpy()), 2)
    self.assertEqual(int(p.consecutive_skips.numpy()), 0)  # Applied: the streak is over.

  def test_allow_update_requires_finite_loss_and_grads(self):
    p = skipping.SkipNonFinite()
    for loss_ok, grads_ok in [(True, True), (True, False), (False, True)]:
      verdict = p.allow_update({'loss_finite': tf.constant(loss_ok),
                                'grads_finite': tf.constant(grads_ok)})
      self.assertEqual(bool(verdict), loss_ok and grads_ok)

  def test_escalates_past_the_limit_even_inside_one_loop(self):
    p = skipping.SkipNonFinite(max_consecutive=2)
    applied = [False, False, False, True]  # A run of 3 > 2 that ends inside the loop.
    self._run(p, applied)
    decision = p.decide(reports_of(applied), None)
    self.assertEqual(decision.action, interfaces.ESCALATE)
    self.assertIn('3 consecutive', decision.reason)
    # Within the limit: no escalation.
    q = skipping.SkipNonFinite(max_consecutive=2)
    self._run(q, [False, False, True])
    self.assertIsNone(q.decide(reports_of([False, False, True]), None))


  def _decide_loops(self, policy, loops, step0=1):
    """Feeds `policy` loops of `applied` flags as the host would (decide only on a loop with a
    fault); returns the first decision and the step it came at, or (None, None)."""
    for applied in loops:
      self._run(policy, applied, step0=step0)
      if not all(applied):
        decision = policy.decide(reports_of(applied, step0), None)
        if decision is not None:
          return decision, step0 + len(applied) - 1
      step0 += len(applied)
    return None, None

  def test_scattered_skips_over_half_the_window_escalate(self):
    # Every other step non-finite, never two in a row: the streak never grows, the share does.
    p = skipping.SkipNonFinite(max_consecutive=10, max_share=0.5, share_window=20)
    decision, step = self._decide_loops(p, [[k % 3 == 0 for k in range(10)]] * 6)
    self.assertEqual((decision.action, decision.trigger), (interfaces.ESCALATE, 'skip_share'))
    self.assertEqual(step, 20)  # Judged once a window has run.
    self.assertIn('of the last 20 steps', decision.reason)
    self.assertIn('gradient of dense/kernel', decision.reason)

  def test_a_share_within_the_limit_or_switched_off_does_not(self):
    loops = [[k % 3 != 0 for k in range(10)]] * 10  # One step in three: 33 %.
    self.assertEqual(self._decide_loops(
        skipping.SkipNonFinite(max_share=0.5, share_window=30), loops), (None, None))
    loops = [[k % 3 == 0 for k in range(10)]] * 10  # Two in three: 67 %.
    self.assertEqual(self._decide_loops(
        skipping.SkipNonFinite(max_share=None, share_window=30), loops), (None, None))

  def test_only_the_model_s_faults_count_not_bad_batches(self):
    p = skipping.SkipNonFinite(max_share=0.3, share_window=10)
    applied = [k % 2 == 0 for k in range(10)]
    for step0 in (1, 11, 21):
      self._run(p, applied)
      reports = reports_of(applied, step0)
      reports = dataclasses.replace(reports, inputs_finite=np.array(applied),
                                    grads_finite=np.ones(10, bool))  # The batches' fault.
      self.assertIsNone(p.decide(reports, None))




def _feed(policy, skipped_steps, num_steps, loop=10):
  """Runs `num_steps` steps through `policy` as the host would (observe every loop, decide on a
  loop with a fault), the steps in `skipped_steps` non-finite; returns the decisions made."""
  decisions = []
  for step0 in range(1, num_steps + 1, loop):
    applied = [s not in skipped_steps for s in range(step0, step0 + loop)]
    reports = reports_of(applied, step0)
    policy.observe(reports)
    if not all(applied):
      decisions.append(policy.decide(reports, None))
  return [d for d in decisions if d is not None]


class EndCheckTest(tf.test.TestCase):

  def test_a_share_still_skipped_at_the_end_ends_the_run_aborted(self):
    p = skipping.SkipNonFinite(share_window=50, max_share_at_end=0.2)
    skipped = set(range(52, 101, 4))  # 13 of the last 50 steps, never two in a row: 26 %.
    self.assertEqual(_feed(p, skipped, 100), [])  # Under every limit while the run goes on.
    decision = p.check_at_end(types.SimpleNamespace(step=100))
    self.assertEqual((decision.action, decision.trigger, decision.status, decision.step),
                     (interfaces.ABORT, 'skip_share_at_end', '', 100))
    self.assertIn('13 of the last 50 steps', decision.reason)
    self.assertIn('gradient of dense/kernel', decision.reason)

  def test_a_share_at_the_limit_an_early_share_or_no_end_check_does_not(self):
    ten = set(range(55, 101, 5))  # 10 of the last 50: 20 %, not more than the limit.
    p = skipping.SkipNonFinite(share_window=50, max_share_at_end=0.2)
    _feed(p, ten, 100)
    self.assertIsNone(p.check_at_end(types.SimpleNamespace(step=100)))
    # 13 skips, all before the last window: the run got over them.
    p = skipping.SkipNonFinite(share_window=50, max_share_at_end=0.2)
    _feed(p, set(range(2, 51, 4)), 100)
    self.assertIsNone(p.check_at_end(types.SimpleNamespace(step=100)))
    p = skipping.SkipNonFinite(share_window=50, max_share_at_end=None)
    _feed(p, set(range(52, 101, 4)), 100)
    self.assertIsNone(p.check_at_end(types.SimpleNamespace(step=100)))
    # A run shorter than the window is not judged.
    p = skipping.SkipNonFinite(share_window=50, max_share_at_end=0.2)
    _feed(p, set(range(2, 41, 3)), 40)
    self.assertIsNone(p.check_at_end(types.SimpleNamespace(step=40)))

  def test_a_rollback_drops_the_skips_after_the_step_it_went_back_to(self):
    # Skips at steps 71-80 (under the streak limit here), then a rollback to step 60 and 40
    # clean steps: the skips were undone with the steps they came in.
    p = skipping.SkipNonFinite(max_consecutive=20, share_window=50, max_share_at_end=0.2)
    _feed(p, set(range(71, 81)) | {62, 66}, 80)
    for step0 in range(61, 101, 10):  # Clean loops from step 61 on: no decide is asked.
      p.observe(reports_of([True] * 10, step0))
    self.assertIsNone(p.check_at_end(types.SimpleNamespace(step=100)))
    self.assertEqual(p._fault_steps, [])  # pylint: disable=protected-access  (62, 66: undone)
    # The same skips without the rollback end the run.
    q = skipping.SkipNonFinite(max_consecutive=20, share_window=50, max_share_at_end=0.2)
    _feed(q, set(range(71, 81)) | {62, 66}, 100)
    self.assertEqual(q.check_at_end(types.SimpleNamespace(step=100)).trigger,
                     'skip_share_at_end')

  def test_it_counts_the_model_s_faults_only(self):
    p = skipping.SkipNonFinite(share_window=20, max_share_at_end=0.2)
    applied = [k % 2 == 0 for k in range(10)]
    for step0 in (1, 11, 21):  # Every other batch failed an input check: the data's fault.
      reports = dataclasses.replace(reports_of(applied, step0), inputs_finite=np.array(applied),
                                    grads_finite=np.ones(10, bool))
      p.observe(reports)
      self.assertIsNone(p.decide(reports, None))
    self.assertIsNone(p.check_at_end(types.SimpleNamespace(step=30)))


MARKED = 3  # A marked batch: one of its rows breaks the model's forward pass.


def _marked_data(marked_batches, *, batches=100, batch=8, features=4, seed=0):
  """Regression batches, in order, whose last feature is 0, except in one row of each batch
  listed in `marked_batches`, where it is -1; (x, y) arrays."""
  rng = np.random.RandomState(seed)
  x = rng.randn(batches * batch, features + 1).astype(np.float32)
  x[:, -1] = 0.0
  for b in marked_batches:
    x[b * batch, -1] = -1.0
  y = (x[:, :features].sum(axis=1, keepdims=True) * 0.5).astype(np.float32)
  return x, y


def _marked_model():
  """An MLP whose output adds log(1 + the last feature): 0 on a clean row, -inf on a marked one
  (a log(0) written in the model, as a field's hand-written loss would)."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((5,))
  h = keras.layers.Dense(8, activation='tanh')(inputs[:, :4])
  out = keras.layers.Dense(1)(h) + keras.ops.log1p(inputs[:, 4:])
  return keras.Model(inputs, out, name='marked')


class EndToEndTest(tf.test.TestCase):
  """Both front doors, the default stack: one batch in three marked over the last 40 steps of
  100 ends 'aborted' (skip_share_at_end); the same marks in steps 11 to 50 end 'completed'."""

  LATE = [b for b in range(60, 100) if b % MARKED == 0]  # 14 of the last 50 steps: 28 %.
  EARLY = [b for b in range(10, 50) if b % MARKED == 0]  # 13, all before the last 50 steps.

  def _trainer(self, marked):
    t = trainer_lib.Trainer(model=_marked_model(), optimizer=keras.optimizers.Adam(0.01),
                            loss=keras.losses.MeanSquaredError(), model_dir=None,
                            steps_per_loop=10)
    x, y = _marked_data(marked)
    return t.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), num_steps=100)

  def _fit(self, marked):
    model = _marked_model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss='mse')
    callback = keras_fit.guard_fit(model).callback()
    x, y = _marked_data(marked)
    try:  # The Keras door raises on a stop, after its summary is written.
      model.fit(x, y, batch_size=8, shuffle=False, epochs=1, verbose=0, callbacks=[callback])
    except errors.RunAborted as e:
      self.assertIn('skipped at the end of the run', str(e))
    return callback.last_summary

  def _check(self, door):
    late, early = door(self.LATE), door(self.EARLY)
    self.assertEqual((late['status'], late['skipped_steps']), ('aborted', 14), door)
    self.assertIn('14 of the last 50 steps', late['reason'])
    self.assertIn('skipped at the end of the run', late['reason'])
    self.assertEqual((early['status'], early['skipped_steps']), ('completed', 13), door)

  def test_the_trainer(self):
    self._check(self._trainer)

  @pytest.mark.slow  # The Keras door, in the slow set CI runs; the Trainer's is quick.
  def test_guard_fit(self):
    self._check(self._fit)
