"""Tests for stable_train.doctor.course: the rules on the training's course, here the rate of the
first updates: a blow-up at a usual rate or a breakdown at a modest one (the model's gradients),
a blow-up above the usual top (the rate)."""

import numpy as np
import tensorflow as tf

from stable_train.doctor import causes
from stable_train.doctor import course
from stable_train.doctor import doctor
from stable_train.doctor import symptoms

# A deep-sets model under Adam: its loss 1200x the first step's after one update.
LOSS = [11.6, 14100.0, 278.0, 19500.0, 2.3e8, 2.6e7, 40.0, 12.0, 11.0, 11.5]
# A loss that diverges over the run with no blow-up of the first updates (1.1x).
CREEP = [2.3, 2.4, 2.5, 2.7, 3.0, 4.0, 6.0, 10.0, 20.0, 40.0]


def run(loss=LOSS, lr=2e-3, optimizer='Adam', input_rms=1.4, first=0, norms=None):
  """(events, summary) of a run that diverged, its outputs collapsed, after `loss` per step."""
  n = len(loss)
  norms = norms or [769.0 * (1 + k % 3) for k in range(n)]
  events = [{'event': 'start', 'step': first, 'num_steps': 150},
            {'event': 'history', 'step': first + n, 'steps': list(range(first + 1, first + n + 1)),
             'loss': loss, 'grad_norm': norms,
             'learning_rate': [lr] * n, 'loss_scale': [1.0] * n, 'applied': [True] * n},
            {'event': 'divergence_check', 'step': first + n, 'rule': 'collapsed',
             'verdict': 'model'},
            {'event': 'diverged', 'step': first + n, 'trigger': 'divergence', 'reason': 'x'}]
  summary = {'status': 'diverged', 'optimizer': optimizer,
             'divergence': {'input_rms': input_rms, 'output_rms': 2.6, 'label_rms': 0.85}}
  if input_rms is None:  # A stack without DivergenceCheck: the inputs' scale unknown.
    del summary['divergence']
  return events, summary


def cleared(loss, norms, first):
  """(events, summary) of a run that completed after a divergence check blamed the batches
  (its history written at the check's step, the last of `loss`)."""
  n = len(loss)
  steps = list(range(first, first + n))
  return ([{'event': 'start', 'step': 0, 'num_steps': 200},
           {'event': 'history', 'step': steps[-1], 'steps': steps, 'loss': loss,
            'grad_norm': norms, 'learning_rate': [1e-3] * n, 'loss_scale': [1.0] * n,
            'applied': [True] * n},
           {'event': 'divergence_check', 'step': steps[-1], 'rule': 'above_best',
            'verdict': 'data'}],
          {'status': 'completed', 'optimizer': 'Adam', 'divergence': {'input_rms': 1.0}})


def verdict(events, summary):
  scores = causes.score(symptoms.Symptoms.read(events, summary, []))
  return max(scores, key=lambda c: scores[c][0]), scores


class FirstUpdatesTest(tf.test.TestCase):

  def test_a_blow_up_at_a_usual_rate_is_the_models_gradients(self):
    cause, scores = verdict(*run())
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('at a rate usual for Adam (0.002), multiplied the loss' in e
                        for e in scores['exploding_gradients'][1]))
    # Under SGD at 0.01 (momentum or not) too. From half the usual top up (0.05 as float32
    # records it, 0.0500000007) to the top, only a blow-up of 1000x or more (this one: 1.2e3x)
    # is the model's: a reviewer's MLP and linear regressions there, which a lower rate trains,
    # blew up 35-54x, models that sum without normalisation 1.2e3x and more.
    self.assertEqual(verdict(*run(lr=0.01, optimizer='SGD'))[0], 'exploding_gradients')
    self.assertEqual(verdict(*run(lr=0.049, optimizer='SGD'))[0], 'exploding_gradients')
    modest = [11.6, 400.0, 278.0, 500.0] + LOSS[4:]  # 34x.
    for lr in (float(np.float32(0.05)), float(np.float32(0.1))):
      self.assertEqual(verdict(*run(lr=lr, optimizer='SGD'))[0], 'exploding_gradients', lr)
      cause, scores = verdict(*run(loss=modest, lr=lr, optimizer='SGD'))
      self.assertEqual(cause, 'learning_rate', lr)
      self.assertFalse(any('multiplied the loss' in e for e in scores['exploding_gradients'][1]))
    self.assertEqual(verdict(*run(loss=modest, lr=0.049, optimizer='SGD'))[0],
                     'exploding_gradients')

  def test_a_subclassed_optimizer_is_judged_as_the_keras_one_it_extends(self):
    events, summary = run(optimizer='MyAdam')  # `class MyAdam(keras.optimizers.Adam)`.
    unknown = verdict(events, summary)[1]['exploding_gradients'][0]
    summary['optimizer_family'] = 'Adam'  # As summary.json records it.
    cause, scores = verdict(events, summary)
    self.assertEqual(cause, 'exploding_gradients')
    self.assertGreater(scores['exploding_gradients'][0], unknown)  # The rate rule counts again.
    self.assertTrue(any('at a rate usual for Adam' in e for e in scores[cause][1]))

  def test_the_same_blow_up_at_a_rate_above_the_usual_one_is_the_rate(self):
    for lr, optimizer in ((1.0, 'Adam'), (0.5, 'SGD')):
      cause, scores = verdict(*run(lr=lr, optimizer=optimizer))
      self.assertEqual(cause, 'learning_rate')
      self.assertFalse(any('multiplied the loss' in e for e in scores['exploding_gradients'][1]))
      self.assertTrue(any('above the usual top' in e for e in scores['learning_rate'][1]))
    # The loss back at the untrained model's on a clean batch after that blow-up (RMSprop 1.0 on
    # a mixture of experts): the check blamed the batches, the first updates name the rate.
    events, summary = run(lr=1.0, optimizer='RMSprop')
    events[2:] = [{'event': 'divergence_check', 'step': 10, 'rule': 'above_best',
                   'verdict': 'data'}]
    summary['status'] = 'completed'
    self.assertEqual(verdict(events, summary)[0], 'learning_rate')
    # No blow-up, or an optimizer whose usual range nobody knows: no such evidence (with no
    # blow-up, a divergence above the usual top says only that, at 2 points).
    for events, summary in (run(loss=CREEP, lr=1.0, optimizer='Adam'),
                            run(lr=1.0, optimizer='MyOptimizer')):
      self.assertFalse(any('multiplied the loss' in e
                           for e in verdict(events, summary)[1]['learning_rate'][1]))
    said = verdict(*run(loss=CREEP, lr=1.0, optimizer='Adam'))[1]['learning_rate'][1]
    self.assertIn('the rate, 1, is above the usual top for Adam (0.005)', said)
    self.assertFalse(any('above the usual top' in e for e in verdict(
        *run(lr=1.0, optimizer='MyOptimizer'))[1]['learning_rate'][1]))
    # A rate that rose to 1.0 within the first updates (a warm-up of two steps): not usual.
    events, summary = run(lr=1e-4)
    events[1]['learning_rate'][1:3] = [0.3, 1.0]
    self.assertEqual(verdict(events, summary)[0], 'learning_rate')

  def test_what_is_no_blow_up_of_the_model(self):
    self.assertGreater(symptoms.Symptoms.read(*run(), []).amplified(), 30)
    odd = [11.6, 14100.0, 12.0, 11.0] + LOSS[4:]  # One odd batch among steps 2 to 4.
    tiny = [1e-6, 1e-4, 1e-4, 1e-4] + LOSS[4:]  # 100x, from a loss far below 1: no blow-up.
    for events, summary in (run(loss=odd), run(input_rms=50.0),  # Unscaled inputs.
                            run(input_rms=None), run(loss=tiny),
                            run(optimizer='MyOptimizer'),  # A rate nobody knows the range of.
                            run(first=40)):  # A resumed run: its first updates are not the start.
      s = symptoms.Symptoms.read(events, summary, [])
      self.assertEqual(s.amplified(), 0.0)
      self.assertEqual(verdict(events, summary)[0], 'learning_rate')

  def test_a_blow_up_from_kernels_off_scale_is_the_initialisers(self):
    # Outputs 1e6x the labels' at the start: from kernels 55x LeCun's scale the initialiser's
    # (its divergence then speaks for the rate half as much), from He kernels the architecture's.
    def off_start(kernel_ratio):
      # The loss and the norm growing together (no cliff): the rate's evidence too.
      events, summary = run(loss=[2.0, 100, 120, 150, 300, 1e3, 3e3, 1e4, 3e4, 1e5], lr=0.01,
                            optimizer='SGD', norms=[1.0, 5, 6, 8, 10, 30, 90, 300, 900, 3e3])
      events[2] = dict(events[2], rule='above_best')  # No collapse.
      events.insert(1, {'event': 'warning', 'step': 1, 'cause': 'initialisation',
                        'kernel_ratio': kernel_ratio})
      summary['divergence'].update(output_rms=1e6, label_rms=1.0)
      return events, summary
    s = symptoms.Symptoms.read(*off_start(55.0), [])
    self.assertEqual(s.amplified(), 0.0)
    cause, scores = verdict(*off_start(55.0))
    self.assertEqual(cause, 'initialisation')
    self.assertFalse(any('amplifies' in e for e in scores['exploding_gradients'][1]))
    self.assertEqual(verdict(*off_start(1.4))[0], 'exploding_gradients')

  def test_a_check_that_blamed_the_batches(self):
    # Poisoned batches from step 101 on, mid-run: their huge norms are no cliff of the model's.
    loss = [0.5] * 38 + [5e4] * 26
    norms = [1.0] * 38 + [2.6e5] * 26
    cause, scores = verdict(*cleared(loss, norms, first=63))
    self.assertEqual(cause, 'bad_input')
    self.assertEqual(scores['exploding_gradients'][0], 0.0)
    # The first updates blowing up at Adam's 1e-3, then a clean batch fine: the model's.
    loss = [1.5, 1.3e16, 1.2e26, 5.5e28] + [3.0] * 17
    norms = [90.0, 2e18, 1.6e28, 7.4e30] + [10.0] * 17
    self.assertEqual(verdict(*cleared(loss, norms, first=1))[0], 'exploding_gradients')

  def test_a_guarded_fit_start_event_without_num_steps_still_marks_the_first_step(self):
    events, summary = run()
    del events[0]['num_steps']
    s = symptoms.Symptoms.read(events, summary, [])
    self.assertEqual((s.first_step, s.num_steps), (1, 0))
    self.assertEqual(verdict(events, summary)[0], 'exploding_gradients')


def diverged(**kwargs):
  """`run` of CREEP whose divergence check found the model worse on a clean batch (no collapse)."""
  events, summary = run(loss=CREEP, **kwargs)
  events[2] = dict(events[2], rule='above_best')
  return events, summary


class ClassifierStartTest(tf.test.TestCase):

  def test_a_first_loss_far_above_chance_from_kernels_off_scale_is_the_initialiser(self):
    # Dense kernels from U[0, 1) (a PNN's 'uniform'): logits up to 650, a first cross-entropy 66x
    # a uniform guess's; Adam at 1e-3 then knocks the net onto one answer (a collapse).
    def events(kernel_ratio):
      return [{'event': 'start', 'step': 0, 'num_steps': 150},
              {'event': 'warning', 'step': 1, 'cause': 'initialisation', 'chance_excess': 65.7,
               'kernel_ratio': kernel_ratio, 'message': 'm'},
              {'event': 'divergence_check', 'step': 150, 'rule': 'collapsed', 'verdict': 'model'},
              {'event': 'diverged', 'step': 150, 'trigger': 'divergence', 'reason': 'r'}]
    summary = {'status': 'diverged', 'optimizer': 'Adam',
               'divergence': {'input_rms': 1.0, 'output_rms': 0.95, 'label_rms': 0.61}}
    cause, scores = verdict(events(6.5), summary)
    self.assertEqual(cause, 'initialisation')
    self.assertTrue(any('66x a uniform guess' in e or '65.7x' in e
                        for e in scores['initialisation'][1]))
    # From kernels at the standard scale the warning alone does not say whose it was.
    self.assertFalse(any('from kernels at' in e for e in verdict(
        events(1.0), summary)[1]['initialisation'][1]))
    # A run with no trouble past the warning, or one at a rate above the usual top (Adam 0.1,
    # which breaks a run from any start): no such points.
    quiet = events(6.5)[:2]
    self.assertFalse(any('from kernels at' in e for e in verdict(
        quiet, dict(summary, status='completed'))[1]['initialisation'][1]))
    fast = events(6.5)
    fast.insert(1, {'event': 'history', 'step': 150, 'steps': list(range(1, 151)),
                    'loss': [30.0] + [2.0] * 149, 'grad_norm': [1.0] * 150,
                    'learning_rate': [0.1] * 150, 'applied': [True] * 150})
    self.assertFalse(any('from kernels at' in e for e in verdict(
        fast, summary)[1]['initialisation'][1]))


  def test_a_cliff_in_the_first_updates_from_a_broken_start_is_that_starts(self):
    skip = lambda k: {'event': 'skip', 'step': k, 'fault': 'gradient', 'loss': 2.0,
                      'grad_norm': 'nan', 'tensor': 'first non-finite gradient of rnn/kernel'}
    # A FractalNet whose kernels start at N(0, 1) (24x LeCun's scale, its first loss 8300x a
    # uniform guess's), SGD 0.05 with momentum: the norm leaps from 1.4e4 to 6.7e7 at step 2,
    # then settles at 0.2 as the outputs collapse. The cliff is the start's, not a recurrence's.
    def events(cliff_at, later=None):
      norms = [0.2] * 21
      norms[0], norms[cliff_at - 1] = 13644.0, 6.65e7
      if later:
        norms[later - 1] = 5e3  # 25 000x the run's norm, 1e4 times under the start's.
      return [{'event': 'start', 'step': 0, 'num_steps': 150},
              {'event': 'warning', 'step': 1, 'cause': 'initialisation', 'chance_excess': 8310.0,
               'kernel_ratio': 24.1, 'message': 'm'},
              {'event': 'history', 'step': 21, 'steps': list(range(1, 22)),
               'loss': [1.9e4, 4.2e4] + [1.5e4] * 19, 'grad_norm': norms,
               'learning_rate': [0.05] * 21, 'applied': [True] * 21},
              {'event': 'divergence_check', 'step': 22, 'rule': 'collapsed', 'verdict': 'model'},
              {'event': 'diverged', 'step': 31, 'trigger': 'divergence', 'reason': 'r'}]
    summary = {'status': 'diverged', 'optimizer': 'SGD',
               'divergence': {'input_rms': 0.5, 'output_rms': 9.4e3, 'label_rms': 0.77}}
    cause, scores = verdict(events(2), summary)
    self.assertEqual(cause, 'initialisation')
    self.assertFalse(any('a cliff' in e for e in scores['exploding_gradients'][1]))
    # A cliff later in the run, when the start has long been left, is the backward pass's, the
    # same one or a smaller one after the start's largest norm.
    for later in (events(15), events(2, later=15)):
      self.assertTrue(any('a cliff' in e and '(step 15)' in e
                          for e in verdict(later, summary)[1]['exploding_gradients'][1]))
    # Right after the first updates, in a history too short to hold four norms after them.
    short = events(2)[:2] + [
        {'event': 'history', 'step': 7, 'steps': list(range(1, 8)), 'loss': [90.0] * 7,
         'grad_norm': [30.0, 28.0, 31.0, 29.0, 30.0, 3e6, 'nan'], 'learning_rate': [0.05] * 7,
         'applied': [True] * 6 + [False]},
        skip(7), {'event': 'aborted', 'step': 13, 'trigger': 'non_finite', 'reason': 'r'}]
    cause, scores = verdict(short, dict(summary, status='aborted'))
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('(step 6)' in e for e in scores['exploding_gradients'][1]))
    # Non-finite gradients right after a jump of the norm overflowed, whatever made the jump.
    jumped = events(2)[:2] + [
        {'event': 'history', 'step': 4, 'steps': [1, 2, 3, 4], 'loss': [90.0, 60.0, 70.0, 70.0],
         'grad_norm': [2e4, 50.0, 5e4, 'nan'], 'learning_rate': [0.05] * 4,
         'applied': [True] * 3 + [False]}] + [
        skip(k) for k in range(4, 12)] + [
        {'event': 'aborted', 'step': 11, 'trigger': 'non_finite', 'reason': 'r'}]
    scores = verdict(jumped, dict(summary, status='aborted'))[1]
    self.assertTrue(any('after the gradient norm grew' in e
                        for e in scores['exploding_gradients'][1]))
    self.assertFalse(scores['division_or_log'][1])


class ModestRateTest(tf.test.TestCase):

  def test_a_divergence_at_a_modest_rate_is_the_models_gradients(self):
    events, summary = diverged(lr=0.01, optimizer='SGD')
    self.assertEqual(symptoms.Symptoms.read(events, summary, []).amplified(), 0.0)
    cause, scores = verdict(events, summary)
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('broke down at a modest rate for SGD (0.01' in e
                        for e in scores['exploding_gradients'][1]))
    # Under Adam the step does not grow with the gradient: its divergence (a transformer at 1e-3
    # without a warm-up) says nothing of the gradients.
    cause, scores = verdict(*diverged(lr=1e-3, optimizer='Adam'))
    self.assertEqual(cause, 'learning_rate')
    self.assertFalse(any('modest rate' in e for e in scores['exploding_gradients'][1]))
    # A collapse too (units that died) is the same blow-up, told once (blind34's GAINN and
    # blind35's CNN-RUL, unscaled targets under SGD, cured by a clip); at half the usual top,
    # the rate's.
    cause, scores = verdict(*run(loss=CREEP, lr=0.01, optimizer='SGD'))
    self.assertEqual(cause, 'exploding_gradients')
    self.assertFalse(any('units died' in e for e in scores['learning_rate'][1]))
    self.assertEqual(verdict(*run(loss=CREEP, lr=0.05, optimizer='SGD'))[0], 'learning_rate')

  def test_what_is_no_modest_rate_or_no_breakdown_of_the_model(self):
    for events, summary in (diverged(lr=0.05, optimizer='SGD'),  # Half the usual top.
                            diverged(lr=3e-3, optimizer='Adam'),
                            diverged(lr=0.01, optimizer='SGD', input_rms=50.0),
                            diverged(lr=0.01, optimizer='SGD', input_rms=None),
                            diverged(lr=0.01, optimizer='SGD', first=40)):  # Resumed.
      cause, scores = verdict(events, summary)
      self.assertEqual(cause, 'learning_rate')
      self.assertFalse(any('modest rate' in e for e in scores['exploding_gradients'][1]))
    # Batches a divergence check blamed: no breakdown of the model's.
    events, summary = diverged(lr=0.01, optimizer='SGD')
    events[2] = {'event': 'divergence_check', 'step': 10, 'rule': 'above_best', 'verdict': 'data'}
    self.assertFalse(any('modest rate' in e for e in verdict(events, summary)[1][
        'exploding_gradients'][1]))

  def test_no_rate_is_modest_for_a_loss_that_sums(self):
    # A pixel cross-entropy summed over 24 x 24 pixels starts at 400 from outputs (RMS 0.02) and
    # labels (0.31) whose per-pixel mean would start under 1: its steps are 576x a mean's.
    events, summary = diverged(lr=5e-3, optimizer='SGD')
    summary['divergence'].update(output_rms=0.02, label_rms=0.31)
    sums = lambda: course.loss_sums(symptoms.Symptoms.read(events, summary, []))
    events[1]['loss'] = [v * 400 / CREEP[0] for v in CREEP]
    self.assertTrue(sums())
    cause, scores = verdict(events, summary)
    self.assertEqual(cause, 'learning_rate')
    self.assertFalse(any('modest rate' in e for e in scores['exploding_gradients'][1]))
    # At 90 it could be a regulariser's terms (L2 over a deep net): the rule stands.
    events[1]['loss'] = [v * 90 / CREEP[0] for v in CREEP]
    self.assertFalse(sums())
    self.assertEqual(verdict(events, summary)[0], 'exploding_gradients')
    # Integer labels are recorded at an RMS of 1 (class ids): an integer target's scale (ages,
    # counts) is unknown, so no sum is read from it; a larger output scale raises the bar.
    events[1]['loss'] = [v * 400 / CREEP[0] for v in CREEP]
    summary['divergence'].update(label_rms=1.0)
    self.assertFalse(sums())
    summary['divergence'].update(label_rms=0.31, output_rms=2.6)
    self.assertFalse(sums())

  def test_non_finite_steps_at_a_modest_rate(self):
    def nan_run(loss, lr=0.01, optimizer='SGD', fp16=False):
      """The history ends at the first NaN step (as RunHistory writes it), then 3 skips."""
      n = len(loss)
      norms = [1.0 if x == 'nan' else float(x) for x in loss]
      events, summary = run(loss=loss, lr=lr, optimizer=optimizer, norms=norms)
      events[2:] = [{'event': 'skip', 'step': k, 'fault': 'loss', 'tensor': 'loss'}
                    for k in range(n, n + 3)] + [
                        {'event': 'abort', 'step': n + 2, 'trigger': 'consecutive_skips'}]
      summary['status'] = 'aborted'
      if fp16:
        summary['loss_scale'] = 32768.0
      return events, summary

    def located(events, summary, op, layer='dense_3'):
      report = {'op_level': {'found': True, 'op_type': op, 'op_name': f'model/{layer}/{op}',
                             'layer': layer}}
      return causes.score(symptoms.Symptoms.read(events, summary, [report]))

    modest = lambda scores: any('modest rate' in e for e in scores['exploding_gradients'][1])
    # The loss grew 1000x, then NaN: the model's growth.
    grew = nan_run([2.3, 2.4, 2.5, 2.7, 30.0, 300.0, 3e3, 'nan'])
    s = symptoms.Symptoms.read(*grew, [])
    self.assertEqual(course.modest_rate(s), 0.01)
    self.assertTrue(modest(causes.score(s)))
    # A product that overflowed in the model is its growth; a log located names its cause.
    self.assertTrue(modest(located(*grew, 'MatMul')))
    self.assertFalse(modest(located(*grew, 'Log')))
    # Nothing grew before the NaN (a log(0) with no forensics record): no such breakdown.
    flat = nan_run([2.3, 2.2, 2.1, 2.0, 2.0, 1.9, 1.9, 'nan'])
    self.assertFalse(modest(causes.score(symptoms.Symptoms.read(*flat, []))))
    # Under float16 compute the non-finite steps are precision's to explain.
    self.assertFalse(modest(causes.score(symptoms.Symptoms.read(
        *nan_run(grew[0][1]['loss'], lr=1e-3, optimizer='Adam', fp16=True), []))))

  def test_a_warm_up_to_a_rate_above_the_modest_one_is_no_modest_rate(self):
    # Plain SGD, the first updates at a warm-up's 0.005 to 0.015, the divergence at its end, 0.05.
    events, summary = diverged(lr=0.05, optimizer='SGD')
    events[1]['learning_rate'] = [0.005 * (k + 1) for k in range(10)]
    s = symptoms.Symptoms.read(events, summary, [])
    self.assertIsNone(course.modest_rate(s))
    self.assertEqual(verdict(events, summary)[0], 'learning_rate')

class FlatAnswersTest(tf.test.TestCase):

  def test_a_regression_whose_answers_stopped_depending_on_the_input_is_the_rate(self):
    # FastSpeech at Adam 1e-2, settled on the average frame: stopped at its end (`flat_answers`).
    flat = [1.2, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1]
    events, summary = run(loss=flat, lr=1e-2)
    del events[2]  # No collapse (not constant to the probe's tolerance).
    events[-1] = {'event': 'diverged', 'step': 10, 'trigger': 'flat_answers', 'reason': 'x'}
    cause, scores = verdict(events, summary)
    self.assertEqual(cause, 'learning_rate')
    self.assertTrue(any("a regression's answers barely varied" in e
                        for e in scores['learning_rate'][1]))


class RecurrentSgdTest(tf.test.TestCase):

  def _verdict(self, recurrent=True, **kwargs):
    events, summary = diverged(**kwargs)
    if recurrent:
      summary['recurrent'] = True
    return verdict(events, summary)

  def test_a_recurrence_that_diverged_under_sgd_within_its_recipes_rates(self):
    # A char-RNN at SGD 0.2 (twice the usual top for SGD, a fifth of the recurrent recipes').
    cause, scores = self._verdict(lr=0.2, optimizer='SGD')
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('recurrent model diverged under SGD at 0.2' in e
                        for e in scores['exploding_gradients'][1]))
    # ...through the collapse of its outputs too, up to 0.7.
    events, summary = run(loss=CREEP, lr=0.7, optimizer='SGD')
    summary['recurrent'] = True
    cause, scores = verdict(events, summary)
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('recurrent model collapsed under SGD at 0.7' in e
                        for e in scores['exploding_gradients'][1]))
    # Named at low confidence (a lower rate alone trains such runs as often as a clip alone),
    # the remedy both.
    events, summary = diverged(lr=0.2, optimizer='SGD')
    summary['recurrent'] = 0.9
    found = doctor.diagnose(events, summary)
    self.assertEqual((found['cause'], found['confidence']), ('exploding_gradients', 'low'))
    self.assertIn('if it still diverges clipped, lower the learning rate to 0.02', found['remedy'])
    # A run its own records already name (a breakdown at a modest rate): the prior is no cap.
    events, summary = diverged(lr=0.01, optimizer='SGD')
    summary['recurrent'] = 0.9
    found = doctor.diagnose(events, summary)
    self.assertEqual((found['cause'], found['confidence']), ('exploding_gradients', 'medium'))
    # The same run of a model with no recurrent layer: the rate, above its usual top.
    cause, scores = self._verdict(recurrent=False, lr=0.2, optimizer='SGD')
    self.assertEqual(cause, 'learning_rate')
    self.assertTrue(any('above the usual top' in e for e in scores['learning_rate'][1]))

  def test_a_token_model_is_read_against_a_language_models_recipes(self):
    # A word model (a recurrence over an Embedding table) at SGD 20 or 30 without its clip, as
    # PyTorch's word-language-model example and AWD-LSTM train it with one: its gradients, low.
    for lr in (20.0, 30.0):
      events, summary = diverged(lr=lr, optimizer='SGD')
      summary.update(recurrent=0.97, embedded=True)
      found = doctor.diagnose(events, summary)
      self.assertEqual((found['cause'], found['confidence']), ('exploding_gradients', 'low'), lr)
      self.assertTrue(any(f'recurrent token model diverged under SGD at {lr:.3g}' in e
                          for e in found['evidence']), found['evidence'])
      # The same rate without a table (a forecaster, blind19's SegRNN at 10), or a table with no
      # recurrence recorded: the rate, far above its usual top.
      for fields in (dict(recurrent=0.97), dict(embedded=True)):
        events, summary = diverged(lr=lr, optimizer='SGD')
        summary.update(fields)
        self.assertEqual(doctor.diagnose(events, summary)['cause'], 'learning_rate', fields)
    # Above every recipe's rate: no prior.
    events, summary = diverged(lr=100.0, optimizer='SGD')
    summary.update(recurrent=0.97, embedded=True)
    self.assertEqual(doctor.diagnose(events, summary)['cause'], 'learning_rate')

  def test_a_run_its_optimizer_already_clipped(self):
    # Its own clip did not hold it: a clip is no remedy, the rate is, and the verdict is low.
    for optimizer, lr, clip in (('SGD', 0.01, {'global_clipnorm': 1.0}),
                                ('SGD', 0.2, {'clipnorm': 0.5})):
      events, summary = diverged(lr=lr, optimizer=optimizer)
      summary.update(recurrent=0.9, optimizer_clip=clip)
      found = doctor.diagnose(events, summary)
      self.assertEqual((found['cause'], found['confidence']), ('exploding_gradients', 'low'))
      self.assertIn(f"learning_rate = {lr / 10:.3g}  # keep the optimizer's own clip",
                    found['remedy'])
      self.assertNotIn('ClipByGlobalNorm', found['remedy'])
      found = doctor.diagnose(events, dict(summary, front_door='guard_fit'))
      self.assertIn(f"(learning_rate={lr / 10:.3g})  # keep the optimizer's own clip",
                    found['remedy'])
    # A clip of each value bounds no norm, nor one 10x above the run's healthy norm: the verdict
    # stands and the remedy is the guard's clip, the optimizer's named.
    for clip, text in (({'clipvalue': 1.0}, 'clipvalue=1'),
                       ({'global_clipnorm': 1e6}, 'global_clipnorm=1e+06')):  # Healthy: 1538.
      events, summary = diverged(lr=0.01, optimizer='SGD')
      summary.update(recurrent=0.9, optimizer_clip=clip)
      found = doctor.diagnose(events, summary)
      self.assertEqual((found['cause'], found['confidence']), ('exploding_gradients', 'medium'))
      self.assertIn('ClipByGlobalNorm.max_norm', found['remedy'])
      self.assertIn(f"the optimizer's own clip ({text}) did not hold the norm", found['remedy'])

  def test_a_clip_record_the_doctor_cannot_read_is_none(self):
    # JSON's 'inf', null, a string or a list (a hand-edited summary): no clip, and no crash
    # whatever the cause named.
    for clip in ({'clipvalue': 'inf'}, {'global_clipnorm': None}, {'clipnorm': [1.0]}, [1.0],
                 {'global_clipnorm': 0}):
      for lr, optimizer in ((0.01, 'SGD'), (5.0, 'SGD')):
        events, summary = diverged(lr=lr, optimizer=optimizer)
        summary['recurrent'] = 0.9
        plain = doctor.diagnose(events, summary)
        found = doctor.diagnose(events, dict(summary, optimizer_clip=clip))
        self.assertEqual(found, plain, clip)

  def test_where_a_recurrence_is_no_evidence(self):
    for kwargs in (dict(lr=1.0, optimizer='SGD'),  # Where a lower rate alone may train it.
                   dict(lr=0.05, optimizer='Adam'),  # An adaptive step a clip does not bound.
                   dict(lr=0.05, optimizer='RMSprop')):
      cause, scores = self._verdict(**kwargs)
      self.assertEqual(cause, 'learning_rate', kwargs)
      self.assertFalse(any('recurrent' in e for e in scores['exploding_gradients'][1]), kwargs)
    # A rate that rose past 0.7 later (a warm-up), a recurrence that holds a sliver of the
    # weights: the rule reads neither.
    events, summary = diverged(lr=0.2, optimizer='SGD')
    events[1]['learning_rate'] = [0.05] * 5 + [0.5, 1.0, 2.0, 3.0, 3.0]
    self.assertIsNone(course.recurrent_sgd_rate(symptoms.Symptoms.read(
        *self._add_recurrent((events, summary)), [])))
    events, summary = diverged(lr=0.2, optimizer='SGD')
    summary['recurrent'] = 0.005
    self.assertIsNone(course.recurrent_sgd_rate(symptoms.Symptoms.read(events, summary, [])))
    # A start the check warned was broken (kernels of one constant): the initialiser's.
    events, summary = diverged(lr=0.3, optimizer='SGD')
    events.insert(1, {'event': 'warning', 'step': 0, 'cause': 'initialisation'})
    summary['recurrent'] = True
    self.assertIsNone(course.recurrent_sgd_rate(symptoms.Symptoms.read(events, summary, [])))
    # Batches a divergence check blamed, or found bad, are no divergence of the model's.
    events, summary = diverged(lr=0.2, optimizer='SGD')
    summary['recurrent'] = True
    events[2] = {'event': 'divergence_check', 'step': 10, 'rule': 'above_best', 'verdict': 'data'}
    self.assertFalse(any('recurrent' in e for e in verdict(events, summary)[1][
        'exploding_gradients'][1]))
    events, summary = diverged(lr=0.2, optimizer='SGD')
    summary['recurrent'] = True
    events.insert(2, {'event': 'outliers', 'step': 5, 'batches': [5]})
    s = symptoms.Symptoms.read(events, summary, [])
    self.assertIsNone(course.recurrent_sgd_rate(s))
    self.assertEqual(course.recurrent_sgd_rate(symptoms.Symptoms.read(
        *self._add_recurrent(diverged(lr=0.2, optimizer='SGD')), [])), 0.2)

  @staticmethod
  def _add_recurrent(run_):
    events, summary = run_
    return events, dict(summary, recurrent=True)


class NoWeightMovedTest(tf.test.TestCase):

  def _events(self, lr):
    n = 20
    return [{'event': 'start', 'step': 0, 'num_steps': 150},
            {'event': 'history', 'step': 140, 'steps': list(range(121, 141)),
             'loss': [0.6931] * n, 'grad_norm': [0.0] * n, 'learning_rate': [lr] * n,
             'loss_scale': [1.0] * n, 'applied': [True] * n},
            {'event': 'diverged', 'step': 140, 'trigger': 'no_weight_moved', 'reason': 'x'}]

  def test_no_weight_moved_at_a_rate_above_0_is_the_initialisation(self):
    # Word2vec with both embedding tables at zero: every gradient exactly 0 at Adam 1e-3.
    top, scores = verdict(self._events(1e-3), {'status': 'diverged', 'optimizer': 'Adam'})
    self.assertEqual(top, 'initialisation')
    self.assertIn('exactly 0', scores['initialisation'][1][0])
    _, scores = verdict(self._events(0.0), {'status': 'diverged', 'optimizer': 'Adam'})
    self.assertEqual(scores['initialisation'][0], 0.0)  # A rate of 0 explains it (its verdict).


class AlikeUnitsTest(tf.test.TestCase):

  def test_units_still_alike_at_the_end_are_the_initialisation(self):
    events = NoWeightMovedTest()._events(1e-3)
    events[-1]['trigger'] = 'alike_units'
    top, scores = verdict(events, {'status': 'diverged', 'optimizer': 'Adam'})
    self.assertEqual(top, 'initialisation')
    self.assertIn('units were all still the same', scores['initialisation'][1][0])


class MeanLevelTest(tf.test.TestCase):
  """A regression that ended far worse than predicting its labels' mean (`mean_level`)."""

  def _run(self, lr, input_rms=0.6, output_rms=0.97, label_rms=0.56):
    n = 20
    events = [{'event': 'start', 'step': 0, 'num_steps': 150},
              {'event': 'history', 'step': 150, 'steps': list(range(131, 151)),
               'loss': [1.04] * n, 'grad_norm': [4200.0] * n, 'learning_rate': [lr] * n,
               'loss_scale': [1.0] * n, 'applied': [True] * n},
              {'event': 'diverged', 'step': 150, 'trigger': 'mean_level', 'reason': 'x'}]
    return events, {'status': 'diverged', 'optimizer': 'Adam', 'divergence': {
        'input_rms': input_rms, 'output_rms': output_rms, 'label_rms': label_rms}}

  def test_from_normalised_inputs_at_a_usual_rate_it_is_the_initialisation(self):
    # A SIREN from Glorot kernels under Adam 1e-3: 7x the mean's loss, its outputs in scale.
    top, scores = verdict(*self._run(1e-3))
    self.assertEqual(top, 'initialisation')
    self.assertIn("labels' mean", scores['initialisation'][1][0])
    top, scores = verdict(*self._run(0.1))  # Above the usual top for Adam: the rate.
    self.assertEqual(top, 'learning_rate')
    self.assertEqual(scores['initialisation'][0], 0.0)
    for events, summary in (self._run(1e-3, input_rms=1e9),  # Unscaled inputs: theirs.
                            self._run(1e-3, output_rms=500.0),  # Outputs off scale: judged apart.
                            self._run(1e-3, label_rms=2.7, output_rms=0.5),  # Labels unscaled.
                            self._run(1e-6)):  # A rate far too low to leave the start.
      _, scores = verdict(events, summary)
      self.assertFalse(any("labels' mean" in e for e in scores['initialisation'][1]))


if __name__ == '__main__':
  tf.test.main()
