"""Tests for stable_train.doctor.symptoms: what a run's records show."""

import numpy as np
import tensorflow as tf

from stable_train.doctor import symptoms


def skip(step, fault='loss', tensor='loss; first non-finite gradient of net/d/kernel'):
  return {'event': 'skip', 'step': step, 'fault': fault, 'tensor': tensor, 'loss': 'nan',
          'grad_norm': 'nan'}


class ReadTest(tf.test.TestCase):

  def test_non_finite_strings_and_missing_values_read_as_nan(self):
    self.assertTrue(np.isnan(symptoms.number('nan')))
    self.assertEqual(symptoms.number('inf'), np.inf)
    self.assertTrue(np.isnan(symptoms.number(None)))
    self.assertAllEqual(symptoms.finite_values(['nan', 1.0, None, 'inf', 2]), [1.0, 2.0])

  def test_injected_faults_are_never_read(self):
    s = symptoms.Symptoms.read([{'event': 'fault_injected', 'step': 5, 'kind': 'loss_nan'}],
                               {}, [])
    self.assertEqual((s.faults, s.triggers), ([], []))

  def test_a_history_written_for_batches_blamed_gives_way_to_a_later_trouble(self):
    def history(last):
      return {'event': 'history', 'step': last, 'steps': list(range(last - 3, last + 1)),
              'loss': [1.0] * 4, 'grad_norm': [1.0] * 4, 'applied': [True] * 4}
    cleared = {'event': 'divergence_check', 'step': 21, 'rule': 'above_best', 'verdict': 'data'}
    s = symptoms.Symptoms.read([history(21), cleared], {}, [])
    self.assertEqual(s.history['steps'][-1], 21)  # The only one: read.
    s = symptoms.Symptoms.read([history(21), cleared, history(100)], {}, [])
    self.assertEqual(s.history['steps'][-1], 100)  # The run's own trouble, later.
    s = symptoms.Symptoms.read([history(21), history(100)], {}, [])
    self.assertEqual(s.history['steps'][-1], 21)  # No batches blamed: the first, as before.

  def test_norms_of_zero_set_no_scale_for_a_cliff_growth_or_jump(self):
    # A dead ReLU output: most steps no gradient at all; the few that had one are no cliff.
    norms = [0.0] * 40 + [0.5, 0.7, 0.6, 0.4, 0.8]
    history = {'event': 'history', 'step': 45, 'steps': list(range(1, 46)), 'loss': [1.0] * 45,
               'grad_norm': norms, 'applied': [True] * 45}
    s = symptoms.Symptoms.read([history], {}, [])
    self.assertLess(s.cliff()[0], 2.0)
    _, growth, jump = s.growth()
    self.assertLess((growth, jump), (100.0, 100.0))  # Nor for growth or a jump.
    history['grad_norm'] = [0.0] * 41 + [0.5, 0.7, 0.6]
    self.assertEqual(symptoms.Symptoms.read([history], {}, []).cliff(), (1.0, None))

  def test_a_cliff_or_jump_after_a_step_leaves_the_first_ones_out(self):
    norms = [1e5, 3e3, 1.0, 1.0, 1.0, 1.0, 1.0, 300.0, 1.0, 1.0]
    history = {'event': 'history', 'step': 10, 'steps': list(range(1, 11)), 'loss': [1.0] * 10,
               'grad_norm': norms, 'applied': [True] * 10}
    s = symptoms.Symptoms.read([history], {}, [])
    self.assertEqual(s.cliff(), (1e5, 1))
    self.assertEqual(s.cliff(since=2), (300.0, 8))
    self.assertEqual((s.growth()[2], s.jump()), (300.0, 300.0))
    self.assertEqual(s.jump(since=7), 300.0)  # The rise into step 8 is after step 7...
    self.assertEqual(s.jump(since=8), 1.0)  # ...and from step 8 on the norm only falls.
    # A peak after `since` is read against the median of all the norms, so a short history
    # keeps its cliff: four norms in all, one of them after step 3.
    short = dict(history, steps=[1, 2, 3, 4], grad_norm=[30.0, 28.0, 31.0, 3e6],
                 loss=[1.0] * 4, applied=[True] * 4)
    self.assertAllClose(symptoms.Symptoms.read([short], {}, []).cliff(since=3), (3e6 / 30.5, 4))

  def test_fault_patterns(self):
    s = symptoms.Symptoms.read([skip(10), skip(40)], {}, [])
    self.assertTrue(s.isolated() and s.sporadic() and not s.persistent())
    s = symptoms.Symptoms.read([skip(k) for k in range(3, 12)], {}, [])
    self.assertTrue(s.persistent() and not s.sporadic())
    self.assertEqual(s.trouble_began, 3)

  def test_growth_and_onset_from_the_history(self):
    history = {'event': 'history', 'step': 30, 'steps': list(range(1, 31)),
               'loss': [1.0] * 20 + [1.0] * 10, 'grad_norm': [1.0] * 20 + [10.0**k for k in range(10)],
               'learning_rate': [0.1] * 30, 'loss_scale': [1.0] * 30, 'applied': [True] * 30}
    s = symptoms.Symptoms.read([history], {}, [])
    loss_growth, norm_growth, jump = s.growth()
    self.assertEqual(loss_growth, 1.0)
    self.assertGreater(norm_growth, 1e8)
    self.assertEqual(jump, 10.0)
    self.assertEqual(s.trouble_began, 23)  # The norm left 10x its lowest at step 23.

  def test_a_jump_that_came_back_down_long_before_the_trouble_is_noise(self):
    # A small-batch run's norm: 11x up at step 6, back down at step 7, the fault 40 steps later.
    norms = [0.7] * 5 + [7.5] + [0.5] * 40 + ['nan']
    history = {'event': 'history', 'step': 47, 'steps': list(range(1, 48)),
               'loss': [0.1] * 46 + [0.02], 'grad_norm': norms, 'learning_rate': [1e-3] * 47,
               'loss_scale': [1.0] * 47, 'applied': [True] * 46 + [False]}
    self.assertEqual(symptoms.Symptoms.read([history], {}, []).growth()[2], 1.0)
    history['grad_norm'] = [0.7] * 5 + [140.0] + [0.5] * 40 + ['nan']  # 200x: no batch noise.
    self.assertAlmostEqual(symptoms.Symptoms.read([history], {}, []).growth()[2], 200.0)
    # Up six steps before it and still up (a plateau the fault comes from): the jump counts.
    history['grad_norm'] = [0.7] * 40 + [7.5, 7.0, 8.0, 7.2, 7.9, 7.1, 'nan']
    self.assertAlmostEqual(symptoms.Symptoms.read([history], {}, []).growth()[2], 7.5 / 0.7)
