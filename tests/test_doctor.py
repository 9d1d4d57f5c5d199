"""Tests for stable_train.doctor.doctor: the diagnosis of a run's records, live and offline (old run
directories included), and `doctor.main`."""

import contextlib
import io
import json
import os

import keras
import tensorflow as tf

from stable_train.doctor import doctor
from stable_train.doctor import remedies
from stable_train.policies import basic as policies
from stable_train.runfiles import events as events_lib
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models

FEATURES = 16


def write_run(model_dir, records, summary):
  os.makedirs(model_dir, exist_ok=True)
  with open(os.path.join(model_dir, 'events.jsonl'), 'w') as f:
    for r in records:
      f.write(json.dumps(r) + '\n')
  events_lib.write_json_atomic(os.path.join(model_dir, 'summary.json'), summary)


def run_main(*argv):
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    code = doctor.main(['stable-train doctor'] + list(argv))
  return code, out.getvalue()


class DiagnoseTest(tf.test.TestCase):

  def test_a_stop_with_no_numeric_symptom_is_not_called_clean(self):
    d = doctor.diagnose([{'event': 'abort', 'step': 3, 'trigger': 'runtime_error',
                          'reason': 'TensorFlow InvalidArgumentError after step 2: ...'}],
                        {'status': 'aborted'})
    self.assertIsNone(d['cause'])
    self.assertEqual((d['label'], d['confidence']),
                     ('no numeric cause found; see the stop reason', 'low'))

  def test_a_healthy_run_has_no_cause(self):
    d = doctor.diagnose([{'event': 'start', 'step': 0, 'num_steps': 100},
                         {'event': 'done', 'step': 100}],
                        {'status': 'completed', 'skipped_steps': 0})
    self.assertIsNone(d['cause'])
    # fp16 loss-scale overflows alone are the scale's calibration, not trouble.
    d = doctor.diagnose([{'event': 'skip', 'step': 1, 'fault': 'overflow'}],
                        {'status': 'completed', 'skipped_steps': 1, 'overflow_skips': 1})
    self.assertIsNone(d['cause'])

  def test_a_completed_untouched_run_whose_checks_cleared_the_model_has_no_cause(self):
    # An unshuffled series whose wet seasons lift the loss 10x above the dry start's best: each
    # season's check clears the model on the first batch; nothing was skipped or clipped.
    checks = [{'event': 'divergence_check', 'step': k, 'rule': 'above_best', 'verdict': v,
               'reference_loss': 0.2, 'smoothed_loss': 4.0, 'best': 0.3}
              for k, v in ((22, 'recovered'), (61, 'data'), (101, 'data'))]
    untouched = {'status': 'completed', 'skipped_steps': 0,
                 'adaptive_clip': {'clipped_steps': 0}}
    self.assertIsNone(doctor.diagnose(checks, untouched)['cause'])
    # The same checks on a run that clipped steps, or that did not complete, are read.
    for summary in (dict(untouched, adaptive_clip={'clipped_steps': 7}),
                    dict(untouched, status='diverged')):
      self.assertTrue(doctor.troubled(summary, checks))
      self.assertEqual(doctor.diagnose(checks, summary)['cause'], 'bad_input')

  def test_the_remedy_names_the_run_s_optimizer_and_the_rate_the_ladder_found(self):
    records = [{'event': 'divergence_check', 'step': 20, 'verdict': 'model'},
               {'event': 'rollback', 'step': 30, 'trigger': 'divergence', 'to_step': 0,
                'learning_rate': 0.15}]
    # Decisive: the run trained on at the rate the ladder backed off to.
    d = doctor.diagnose(records, {'status': 'completed', 'rollbacks': 1, 'global_step': 100},
                        names={'optimizer': 'keras.optimizers.SGD'})
    self.assertEqual((d['cause'], d['confidence']), ('learning_rate', 'high'))
    # The divergence alone (the summary says nothing of the steps after): not decisive.
    self.assertEqual(doctor.diagnose(records, {'status': 'completed', 'rollbacks': 1})[
        'confidence'], 'medium')
    self.assertIn('keras.optimizers.SGD.learning_rate = 0.15', d['remedy'])
    self.assertIn('1 rollback(s)', d['applied'])

  def test_the_softmax_remedy_follows_the_op_a_masked_row_or_an_overflowing_exp(self):
    skips = [{'event': 'skip', 'step': k, 'fault': 'loss', 'loss': 'nan', 'grad_norm': 'nan',
              'tensor': 'loss (model outputs already non-finite)'} for k in (30, 77, 140)]
    summary = {'status': 'completed', 'skipped_steps': 3, 'inputs_checked': True}
    record = lambda op: [{'op_level': {'found': True, 'op_type': op, 'op_name': 'att/' + op,
                                       'source': 'model.py:12'}, 'inputs': []}]
    exp = doctor.diagnose(skips, summary, record('Exp'))
    self.assertEqual(exp['cause'], 'softmax_overflow')
    self.assertTrue(exp['remedy'].startswith('Trainer.loss = '), exp['remedy'])
    self.assertNotIn('-inf', exp['remedy'])  # An exp overflowed: no mask to blame.
    # A softmax op cannot overflow (it subtracts the row's maximum): a row masked to -inf.
    masked = doctor.diagnose(skips, summary, record('Softmax'))
    self.assertTrue(masked['remedy'].startswith('mask scores with a large finite negative'))
    self.assertIn('att/Softmax', masked['remedy'])
    # No op located: the masked row first, the hand-written softmax second.
    unlocated = doctor.diagnose(skips, summary)
    self.assertEqual(unlocated['cause'], 'softmax_overflow')
    self.assertLess(unlocated['remedy'].index('never -inf'),
                    unlocated['remedy'].index('from_logits=True'))
    # A division over a sum of exps: a softmax or logsumexp by hand, anywhere in the model (an
    # attention pooling, a Cox likelihood): TensorFlow's own ops first, the loss only for a loss.
    by_hand = record('RealDiv')
    by_hand[0]['op_level']['operand'] = 'a sum of exp()'
    hand = doctor.diagnose(skips, summary, by_hand)
    self.assertEqual(hand['cause'], 'softmax_overflow')
    self.assertTrue(hand['remedy'].startswith('tf.nn.softmax, tf.nn.log_softmax'), hand['remedy'])
    self.assertIn('att/RealDiv', hand['remedy'])
    self.assertIn('for a classification loss: Trainer.loss = ', hand['remedy'])
    # Its exps underflowed to a 0 the division met: a division's kind too, so never high.
    self.assertEqual(hand['confidence'], 'medium')
    self.assertEqual(hand['alternatives'][0]['cause'], 'division_or_log')

  def test_a_guard_fit_or_own_loop_run_gets_its_remedies_as_code(self):
    rollback = [{'event': 'divergence_check', 'step': 20, 'verdict': 'model'},
                {'event': 'rollback', 'step': 30, 'trigger': 'divergence', 'to_step': 0,
                 'learning_rate': 0.15}]
    fit = {'status': 'completed', 'rollbacks': 1, 'global_step': 100, 'front_door': 'guard_fit'}
    names = {'optimizer': 'keras.optimizers.SGD'}
    self.assertIn('keras.optimizers.SGD(learning_rate=0.15)',
                  doctor.diagnose(rollback, fit, names=names)['remedy'])
    trainer = dict(fit, front_door=None)  # The Trainer's (and an older run's): gin lines.
    self.assertIn('keras.optimizers.SGD.learning_rate = 0.15',
                  doctor.diagnose(rollback, trainer, names=names)['remedy'])
    exp = [{'op_level': {'found': True, 'op_type': 'Exp', 'op_name': 'x', 'source': 'm.py:3'},
            'inputs': []}]
    skips = [{'event': 'skip', 'step': k, 'fault': 'loss', 'loss': 'nan', 'grad_norm': 'nan',
              'tensor': 'loss'} for k in range(1, 12)]
    d = doctor.diagnose(skips, {'status': 'aborted', 'front_door': 'own_loop'}, exp)
    self.assertTrue(d['remedy'].startswith(
        'model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))'),
        d['remedy'])
    self.assertNotIn('@', d['remedy'])
    text = ('Trainer.policies = [@CheckNumerics(), @ClipByGlobalNorm(), @SkipNonFinite()] and '
            'ClipByGlobalNorm.max_norm = 2.5  # the healthy norm')
    self.assertEqual(remedies.in_door(text, 'guard_fit'),
                     'stable_train.guard_fit(model, policies=[stable_train.CheckNumerics(), '
                     'stable_train.ClipByGlobalNorm(max_norm=2.5), stable_train.SkipNonFinite()])'
                     '  # the healthy norm')

  def test_a_loss_output_mismatch_warning_is_trouble_and_its_fix_the_remedy(self):
    warning = {'event': 'warning', 'step': 10, 'cause': 'loss_output_mismatch',
               'kind': 'logits_to_probability_loss', 'message': 'logits into probabilities',
               'fix': 'use keras.losses.BinaryCrossentropy(from_logits=True)',
               'gin': 'Trainer.loss = @keras.losses.BinaryCrossentropy()\n'
                      'keras.losses.BinaryCrossentropy.from_logits = True'}
    d = doctor.diagnose([warning], {'status': 'completed', 'skipped_steps': 0})
    self.assertEqual((d['cause'], d['label'], d['confidence']),
                     ('loss_output_mismatch', 'loss/output mismatch', 'high'))
    self.assertEqual(d['remedy'], 'Trainer.loss = @keras.losses.BinaryCrossentropy(); '
                                  'keras.losses.BinaryCrossentropy.from_logits = True  # or in '
                                  'code: use keras.losses.BinaryCrossentropy(from_logits=True)')
    self.assertIn('logits into probabilities', d['evidence'][0])
    # A fix with no gin binding (the model's activation): the code alone.
    warning.update(gin='# no binding: the activation is in the model', fix='a softmax')
    self.assertEqual(doctor.diagnose([warning], {'status': 'completed'})['remedy'], 'a softmax')
    # A broken start's warning (DivergenceCheck's, InitialisationCheck's) is trouble too, even in
    # a run that recovered; a warning of another cause is not, by itself.
    warning.update(cause='initialisation')
    self.assertEqual(doctor.diagnose([warning], {'status': 'completed'})['cause'],
                     'initialisation')
    warning.update(cause='something_else')
    self.assertIsNone(doctor.diagnose([warning], {'status': 'completed'})['cause'])


class MainTest(tf.test.TestCase):

  def test_an_old_run_directory_is_diagnosed_from_what_it_has(self):
    # The records of a run written before the doctor: skip events and an abort, no history,
    # no divergence block; a naive softmax overflowed on every step.
    model_dir = self.get_temp_dir() + '/old'
    records = [{'event': 'start', 'step': 0, 'num_steps': 200}] + [
        {'event': 'skip', 'step': k, 'fault': 'loss', 'loss': 'nan', 'grad_norm': 'nan',
         'tensor': 'loss; first non-finite gradient of mlp/dense_0/kernel'} for k in range(1, 22)]
    records.append({'event': 'abort', 'step': 21, 'trigger': 'consecutive_skips',
                    'reason': '21 consecutive non-finite steps'})
    write_run(model_dir, records, {'status': 'aborted', 'skipped_steps': 21,
                                   'reason': '21 consecutive non-finite steps'})
    with open(os.path.join(model_dir, 'operative_config.gin'), 'w') as f:
      f.write('Trainer.optimizer = @keras.optimizers.SGD()\nTrainer.model = @mlp()\n')
    code, text = run_main(f'--model_dir={model_dir}')
    self.assertEqual(code, 0)
    self.assertIn('division by zero / log(0)', text)  # The loss function, without forensics.
    self.assertIn('add Forensics() to name the op', text)
    code, text = run_main(model_dir, '--json')  # `stable-train doctor DIR --json`.
    self.assertEqual(json.loads(text)['cause'], 'division_or_log')

  def test_a_directory_without_records_is_a_usage_error(self):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      code, _ = run_main(f'--model_dir={self.get_temp_dir()}/nothing')
    self.assertEqual(code, 2)
    self.assertIn('holds no events.jsonl or summary.json', err.getvalue())
    with contextlib.redirect_stderr(io.StringIO()) as err:
      self.assertEqual(run_main()[0], 2)  # No directory at all.
    self.assertIn('give one run directory', err.getvalue())


class LiveTest(tf.test.TestCase):

  def test_a_run_that_skips_gets_a_diagnosis_event_and_block_the_offline_doctor_repeats(self):
    model_dir = self.get_temp_dir() + '/live'
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=FEATURES, hidden=(16,), outputs=1),
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError(),
        policies=[policies.ValidateInputs()] + trainer_lib.default_policies(),
        model_dir=model_dir, steps_per_loop=5, verbose=False)
    summary = t.fit(data.synthetic_regression(num_features=FEATURES, num_examples=256,
                                              poison_batches=[12, 30]), num_steps=40)
    self.assertEqual(summary['status'], 'completed')
    self.assertEqual(summary['diagnosis']['cause'], 'bad_input')
    records = events_lib.read_events(os.path.join(model_dir, 'events.jsonl'))
    live = [r for r in records if r['event'] == 'diagnosis']
    self.assertEqual([r['cause'] for r in live], ['bad_input'])
    history = [r for r in records if r['event'] == 'history']
    self.assertEqual(history[0]['step'], 13)  # The first trouble: batch 12 is step 13.
    self.assertEqual(history[0]['steps'][-1], 13)
    events, saved, forensics, names = doctor.load(model_dir)
    self.assertEqual(doctor.diagnose(events, saved, forensics, names=names)['cause'],
                     'bad_input')

  def test_a_clean_run_has_no_diagnosis(self):
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=FEATURES, hidden=(16,), outputs=1),
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.MeanSquaredError(),
        model_dir=None, steps_per_loop=5, verbose=False)
    summary = t.fit(data.synthetic_regression(num_features=FEATURES, num_examples=256),
                    num_steps=20)
    self.assertNotIn('diagnosis', summary)
