"""Tests for stable_train.policies.basic: argument validation and in-graph state of CheckNumerics,
ClipByGlobalNorm and ValidateInputs (SkipNonFinite: test_skipping.py)."""

import tempfile

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train.core import interfaces
from stable_train.core import numerics
from stable_train import errors
from stable_train.policies import basic as policies
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models


class ValidationTest(tf.test.TestCase):

  def test_bad_arguments_name_the_argument_and_value(self):
    cases = [
        (lambda: policies.ClipByGlobalNorm(max_norm=-1.0), 'max_norm=-1.0'),
        (lambda: policies.ClipByGlobalNorm(max_norm=0), 'max_norm=0'),
        (lambda: policies.ClipByGlobalNorm(max_norm=float('nan')), 'max_norm=nan'),
        (lambda: policies.ClipByGlobalNorm(max_norm='big'), "max_norm='big'"),
        (lambda: policies.CheckNumerics(mode='loud'), "mode='loud'"),
    ]
    for make, text in cases:
      with self.assertRaises(errors.ConfigError) as ctx:
        make()
      self.assertIn(text, str(ctx.exception))
      self.assertEqual(len(str(ctx.exception).splitlines()), 1)

  def test_keyword_only(self):
    with self.assertRaises(TypeError):
      policies.CheckNumerics('raise')  # pylint: disable=too-many-function-args
    with self.assertRaises(TypeError):
      policies.ClipByGlobalNorm(1.0)  # pylint: disable=too-many-function-args


def reports_of(applied, step0=1):
  """StepReports of one loop whose steps were applied where `applied` says (one variable)."""
  n = len(applied)
  return interfaces.StepReports(
      step=np.arange(step0, step0 + n), loss=np.ones(n),
      grad_norm=np.ones(n), clipped_grad_norm=np.ones(n), loss_finite=np.ones(n, bool),
      grads_finite=np.array(applied), inputs_finite=np.ones(n, bool),
      outputs_finite=np.ones(n, bool), first_bad_grad=np.where(applied, -1, 0),
      first_bad_input=-np.ones(n, int), applied=np.array(applied), learning_rate=np.ones(n),
      variable_paths=['dense/kernel'])


class CheckNumericsTest(tf.test.TestCase):

  def test_raise_mode_on_host_names_the_tensor(self):
    p = policies.CheckNumerics(mode='raise')
    decision = p.decide(reports_of([True, False]), None)  # Decides only: the raise is its action.
    self.assertEqual((decision.action, decision.policy), (interfaces.ACT, p.name))
    with self.assertRaisesRegex(errors.NumericsError, 'gradient of dense/kernel'):
      p.execute(decision, None)

  def test_flag_mode_does_not_raise(self):
    p = policies.CheckNumerics(mode='flag')
    self.assertIsNone(p.decide(reports_of([True, True]), None))
    with self.assertNoLogs('stable_train', level='WARNING'):
      decision = p.decide(reports_of([True, False]), None)
    with self.assertLogs('stable_train', level='WARNING') as logs:
      self.assertIsNone(p.execute(decision, None))
    self.assertIn('dense/kernel', logs.output[0])

  def test_the_input_check_refuses_non_finite_values_and_fills_in_every_float_dtype(self):
    check = policies.CheckNumerics()
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
      x = np.zeros((4, 3), np.float32)
      for bad, wanted in ((0.0, True), (1e4, True), (np.nan, False), (-np.inf, False)):
        x[2, 1] = bad
        ok = check.check_batch(tf.constant(x, dtype), tf.constant([0, 1, 2, 3]))
        self.assertEqual(ok.numpy().tolist(), [wanted, True], (dtype, bad))
    fill = np.zeros((4, 3), np.float32)
    fill[0, 0] = -np.finfo(np.float32).max  # GDAL's NoData: finite, and no measurement.
    for x, wanted in ((fill, False), (fill * 1e-10, True)):
      self.assertEqual(bool(numerics.input_ok(tf.constant(x))), wanted)
    self.assertIsNone(policies.CheckNumerics(check_inputs=False).check_batch(fill, None))

  @pytest.mark.slow
  def test_only_raise_mode_has_the_loop_return_the_report(self):
    # In 'flag' mode `end_step` never acts: the traced step returns its packed row alone (the
    # report dict's fields would be outputs an XLA step pays for).
    for mode, wanted in (('flag', False), ('raise', True)):
      p = policies.CheckNumerics(mode=mode)
      t = trainer_lib.Trainer(
          model=models.mlp(input_dim=4, hidden=(4,), outputs=1, seed=0),
          optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.MeanSquaredError(),
          policies=[p], model_dir=None, jit_compile=True, verbose=False)
      t.fit(data.synthetic_regression(num_features=4, num_examples=64), num_steps=2)
      self.assertEqual(p.uses_end_step, wanted)
      self.assertEqual(p.updates_after_apply, wanted)  # Only a raise needs the skip done first.
      self.assertEqual(t.controller.loop.needs_report, wanted)
      _, report = t.controller.loop.step_fn.get_concrete_function(
          t.controller.input.iterator.element_spec).structured_outputs
      self.assertEqual(report is not None, wanted)
    self.assertFalse(policies.SkipNonFinite().uses_end_step)  # No override: nothing to run.



class ProtocolsTest(tf.test.TestCase):
  """Capabilities with methods are protocols: a policy has one by defining its methods."""

  def test_the_built_in_policies_and_a_users_ceiling(self):
    from stable_train.core import views  # pylint: disable=g-import-not-at-top
    from stable_train.policies import clipping, precision  # pylint: disable=g-import-not-at-top

    class Ceiling(interfaces.Policy):
      def set_norm_ceiling(self, norm):
        self.ceiling = norm

    clip, skip, mine = clipping.AdaptiveClip(), policies.SkipNonFinite(), Ceiling(name='mine')
    self.assertIsInstance(precision.DynamicLossScale(), interfaces.LossScaler)
    for p in (clip, skip, mine):
      self.assertNotIsInstance(p, interfaces.LossScaler)
    self.assertEqual([isinstance(p, interfaces.NormCeiling) for p in (clip, skip, mine)],
                     [True, False, True])
    self.assertTrue(views.apply_norm_ceiling([skip, clip, mine], 2.0))
    self.assertEqual((float(clip.norm_ceiling.numpy()), mine.ceiling), (2.0, 2.0))
    self.assertFalse(views.apply_norm_ceiling([skip], 2.0))

  def test_each_one_user_capability_is_its_policys_protocol_alone(self):
    from stable_train.forensics import forensics  # pylint: disable=g-import-not-at-top
    # pylint: disable=g-import-not-at-top
    from stable_train.policies import clipping, divergence, recovery, stopping
    built_in = {'rollback': recovery.Rollback(), 'divergence': divergence.DivergenceCheck(),
                'best': stopping.BestCheckpoint(), 'early': stopping.EarlyStopping(),
                'forensics': forensics.Forensics(), 'skip': policies.SkipNonFinite(),
                'clip': clipping.AdaptiveClip(), 'numerics': policies.CheckNumerics()}
    wanted = {interfaces.Recovery: {'rollback'}, interfaces.Rechecker: {'divergence'},
              interfaces.EvalWatcher: {'best', 'early'}, interfaces.FitCheck: {'best', 'early'},
              interfaces.BestMarker: {'best', 'early'},
              interfaces.Stopper: {'early'}}
    for protocol, names in wanted.items():
      self.assertEqual({k for k, p in built_in.items() if isinstance(p, protocol)}, names,
                       protocol.__name__)
    # The base class carries none of their methods: a policy has one by defining it.
    for name in ('handle_escalation', 'decide_after_act', 'decide_eval', 'check_fit', 'improves',
                 'check_monitor', 'already_stopped', 'marks_best', 'wants_start_checkpoint',
                 'reads_variables_finite', 'decides_after_act'):
      self.assertFalse(hasattr(interfaces.Policy, name), name)

    class Helper(interfaces.Policy):  # A method of the same name alone declares nothing.
      def improves(self, value):
        return value < 1.0

    self.assertNotIsInstance(Helper(name='h'), interfaces.BestMarker)

  def test_an_old_flag_is_refused_whatever_its_value(self):
    from stable_train.policies import recovery  # pylint: disable=g-import-not-at-top

    class NoStart(recovery.Rollback):
      wants_start_checkpoint = False  # Once an opt-out; now read by nothing.

    class Audit(interfaces.Policy):
      reads_variables_finite = True

    for policy, text in ((NoStart(name='r'), "policy 'r' sets wants_start_checkpoint, which "
                                             'stable_train no longer reads; define '
                                             'handle_escalation'),
                         (Audit(name='a'), r'or read context.variables_finite\(\) in decide')):
      with self.assertRaisesRegex(errors.ConfigError, text):
        trainer_lib.Trainer(model=models.mlp(input_dim=16, hidden=(8,)),
                            optimizer=keras.optimizers.SGD(0.01),
                            loss=keras.losses.MeanSquaredError(), policies=[policy],
                            model_dir=None)

  def test_an_evaluation_policy_is_refused_where_no_evaluation_runs(self):
    import stable_train  # pylint: disable=g-import-not-at-top

    class OnEval(interfaces.Policy):
      def decide_eval(self, values, context):
        return None

    model = models.mlp(input_dim=16, hidden=(8,))
    guard = stable_train.StepGuard(model, keras.optimizers.SGD(0.01), policies=[OnEval(name='e')])
    with self.assertRaisesRegex(errors.ConfigError, r"LoopHost: policies \['e'\] act on "
                                r'evaluations .* only the Trainer\'s fit\(eval_dataset=...\)'):
      stable_train.LoopHost(guard)

  def test_a_recovery_of_ones_own_gets_the_start_checkpoint_and_the_variable_check(self):
    class GiveUp(interfaces.Policy):  # Takes an escalation over with an abort of its wording.
      def handle_escalation(self, decision, context):
        return interfaces.Decision(action=interfaces.ABORT, reason='gave up', step=decision.step)

    def run(policy):
      model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
      t = trainer_lib.Trainer(model=models.mlp(input_dim=16, hidden=(8,)),
                              optimizer=keras.optimizers.SGD(0.01),
                              loss=keras.losses.MeanSquaredError(), policies=[policy],
                              model_dir=model_dir, steps_per_loop=2)
      t.fit(data.synthetic_regression(num_examples=64, num_features=16, batch_size=16), num_steps=2)
      return [e.step for e in t.checkpoints.entries], t.controller.loop.checks_variables

    self.assertEqual(run(GiveUp(name='mine')), ([0, 2], True))
    self.assertEqual(run(policies.SkipNonFinite()), ([2], False))

  def test_a_policy_that_still_sets_an_old_flag_is_named(self):
    class OldScale(interfaces.Policy):
      scales_loss = True  # The flag stable_train read before LossScaler.

      def scale_loss(self, loss):
        return loss * 8.0

    with self.assertRaisesRegex(errors.ConfigError, "policy 'old' sets scales_loss, "
                                'which stable_train no longer reads; define scale_loss, '
                                'unscale_gradients, is_overflow and loss_scale'):
      trainer_lib.Trainer(model=models.mlp(input_dim=16, hidden=(8,)),
                          optimizer=keras.optimizers.SGD(0.01),
                          loss=keras.losses.MeanSquaredError(), policies=[OldScale(name='old')],
                          model_dir=None)


class InputFaultWordingTest(tf.test.TestCase):
  """A batch that failed an input check (say, a finite label out of range) is not a NaN."""

  def _input_faults(self, n):
    return interfaces.StepReports(
        step=np.arange(1, n + 1), loss=np.ones(n), grad_norm=np.ones(n),
        clipped_grad_norm=np.ones(n), loss_finite=np.ones(n, bool), grads_finite=np.ones(n, bool),
        inputs_finite=np.zeros(n, bool), outputs_finite=np.ones(n, bool),
        first_bad_grad=-np.ones(n, int), first_bad_input=np.ones(n, int),
        applied=np.zeros(n, bool), learning_rate=np.ones(n), variable_paths=['dense/kernel'],
        input_paths=['features', 'labels'])

  def test_check_numerics_and_skip_non_finite_name_a_bad_batch(self):
    p = policies.CheckNumerics(mode='flag')
    with self.assertLogs('stable_train', level='WARNING') as logs:
      p.execute(p.decide(self._input_faults(1), None), None)
    self.assertEqual(logs.output, ['WARNING:stable_train:step 1: bad input (the batch failed an '
                                   'input check), first offending tensor: input labels'])
    skip = policies.SkipNonFinite(max_consecutive=2)
    self._run_skips(skip, 3)
    decision = skip.decide(self._input_faults(3), None)
    self.assertEqual(decision.reason, '3 consecutive skipped steps (limit 2), last offending '
                     'tensor: input labels')

  def _run_skips(self, policy, n):
    # Batches that failed an input check (finite loss and gradients), as the host reads them.
    policy.observe(self._input_faults(n))


if __name__ == '__main__':
  tf.test.main()
