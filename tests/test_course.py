"""Tests for stable_train.doctor.course: the rules on the training's course, here the blow-up of
the first updates at a usual rate (the model's gradients, not the rate)."""

import tensorflow as tf

from stable_train.doctor import causes
from stable_train.doctor import symptoms

# A deep-sets model under Adam: its loss 1200x the first step's after one update.
LOSS = [11.6, 14100.0, 278.0, 19500.0, 2.3e8, 2.6e7, 40.0, 12.0, 11.0, 11.5]


def run(loss=LOSS, lr=2e-3, optimizer='Adam', input_rms=1.4, first=0):
  """(events, summary) of a run that diverged, its outputs collapsed, after `loss` per step."""
  n = len(loss)
  events = [{'event': 'start', 'step': first, 'num_steps': 150},
            {'event': 'history', 'step': first + n, 'steps': list(range(first + 1, first + n + 1)),
             'loss': loss, 'grad_norm': [769.0 * (1 + k % 3) for k in range(n)],
             'learning_rate': [lr] * n, 'loss_scale': [1.0] * n, 'applied': [True] * n},
            {'event': 'divergence_check', 'step': first + n, 'rule': 'collapsed',
             'verdict': 'model'},
            {'event': 'diverged', 'step': first + n, 'trigger': 'divergence', 'reason': 'x'}]
  summary = {'status': 'diverged', 'optimizer': optimizer,
             'divergence': {'input_rms': input_rms, 'output_rms': 2.6, 'label_rms': 0.85}}
  return events, summary


def verdict(events, summary):
  scores = causes.score(symptoms.Symptoms.read(events, summary, []))
  return max(scores, key=lambda c: scores[c][0]), scores


class FirstUpdatesTest(tf.test.TestCase):

  def test_a_blow_up_at_a_usual_rate_is_the_models_gradients(self):
    cause, scores = verdict(*run())
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('at a rate usual for Adam (0.002), multiplied the loss' in e
                        for e in scores['exploding_gradients'][1]))
    # Under SGD at 0.01 (momentum or not) too.
    self.assertEqual(verdict(*run(lr=0.01, optimizer='SGD'))[0], 'exploding_gradients')

  def test_the_same_blow_up_at_a_rate_above_the_usual_one_is_the_rate(self):
    for lr, optimizer in ((1.0, 'Adam'), (0.5, 'SGD')):
      cause, scores = verdict(*run(lr=lr, optimizer=optimizer))
      self.assertEqual(cause, 'learning_rate')
      self.assertFalse(any('multiplied the loss' in e for e in scores['exploding_gradients'][1]))

  def test_what_is_no_blow_up_of_the_model(self):
    self.assertGreater(symptoms.Symptoms.read(*run(), []).amplified(), 30)
    odd = [11.6, 14100.0, 12.0, 11.0] + LOSS[4:]  # One odd batch among steps 2 to 4.
    for events, summary in (run(loss=odd), run(input_rms=50.0),  # Unscaled inputs.
                            run(optimizer='MyOptimizer'),  # A rate nobody knows the range of.
                            run(first=40)):  # A resumed run: its first updates are not the start.
      s = symptoms.Symptoms.read(events, summary, [])
      self.assertEqual(s.amplified(), 0.0)
      self.assertEqual(verdict(events, summary)[0], 'learning_rate')

  def test_a_guarded_fit_start_event_without_num_steps_still_marks_the_first_step(self):
    events, summary = run()
    del events[0]['num_steps']
    s = symptoms.Symptoms.read(events, summary, [])
    self.assertEqual((s.first_step, s.num_steps), (1, 0))
    self.assertEqual(verdict(events, summary)[0], 'exploding_gradients')


if __name__ == '__main__':
  tf.test.main()
