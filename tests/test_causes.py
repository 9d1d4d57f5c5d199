"""Tests for stable_train.doctor.causes: which cause each symptom speaks for."""

import tensorflow as tf

from stable_train.doctor import causes
from stable_train.doctor import doctor
from stable_train.doctor import evidence
from stable_train.doctor import symptoms


def skip(step, fault='loss', tensor='loss; first non-finite gradient of net/d/kernel'):
  return {'event': 'skip', 'step': step, 'fault': fault, 'tensor': tensor, 'loss': 'nan',
          'grad_norm': 'nan'}


def top(events, summary=None, forensics=()):
  scores = causes.score(symptoms.Symptoms.read(events, summary or {}, list(forensics)))
  return max(scores, key=lambda c: scores[c][0]), scores


class RulesTest(tf.test.TestCase):

  def test_an_op_named_by_forensics_decides_the_arithmetic_causes(self):
    for op, cause in (('Log', 'division_or_log'), ('RealDiv', 'division_or_log'),
                      ('Acosh', 'division_or_log'),  # A Poincaré distance past the ball.
                      ('Exp', 'softmax_overflow')):
      record = {'op_level': {'found': True, 'op_type': op, 'op_name': 'x'}, 'inputs': []}
      self.assertEqual(top([skip(k) for k in range(1, 12)], {}, [record])[0], cause)
    # An inverse function's NaN is its argument outside its domain: the remedy says so.
    record = {'op_level': {'found': True, 'op_type': 'Acosh', 'op_name': 'x'}, 'inputs': []}
    found = doctor.diagnose([skip(k) for k in range(1, 12)], {'status': 'aborted'}, [record])
    self.assertIn('inside its domain', found['remedy'])

  def test_a_division_or_log_over_a_sum_of_exps_is_a_softmax_by_hand(self):
    for op in ('RealDiv', 'Log'):
      record = {'op_level': {'found': True, 'op_type': op, 'op_name': 'x',
                             'operand': 'a sum of exp()'}, 'inputs': []}
      cause, scores = top([skip(k) for k in range(1, 12)], {}, [record])
      self.assertEqual(cause, 'softmax_overflow')
      self.assertIn('over a sum of exp()', scores[cause][1][0])
      self.assertNotIn('division_or_log', [c for c in scores if scores[c][0] >= 5])

  def test_nan_in_the_saved_batch_is_bad_input(self):
    record = {'op_level': {'found': False}, 'inputs': [{'path': 'features', 'nan': 1, 'inf': 0}]}
    self.assertEqual(top([skip(50, tensor='loss (model outputs already non-finite)')], {},
                         [record])[0], 'bad_input')

  def test_outputs_that_turn_non_finite_on_the_same_weights_with_nothing_growing(self):
    # 12 healthy steps, flat loss and norm, then every batch's outputs non-finite: the batches.
    def history(norms):
      return {'event': 'history', 'step': 13, 'steps': list(range(1, 14)),
              'loss': [1.0] * 12 + ['nan'], 'grad_norm': norms + ['nan'],
              'learning_rate': [1e-2] * 13, 'loss_scale': [1.0] * 13,
              'applied': [True] * 12 + [False]}
    outputs = 'loss (model outputs already non-finite)'
    skips = [skip(k, tensor=outputs) for k in range(13, 16)]
    summary = {'status': 'aborted'}
    cause, scores = top([history([2.0] * 12)] + skips, summary)
    self.assertEqual(cause, 'bad_input')
    self.assertTrue(any('the batch changed' in e for e in scores['bad_input'][1]))
    # The same outputs after a norm that grew 100x: the model, not the batch.
    _, scores = top([history([2.0] * 6 + [2.0 * 3**k for k in range(6)])] + skips, summary)
    self.assertFalse(any('the batch changed' in e for e in scores['bad_input'][1]))

  def test_a_finite_re_run_is_transient(self):
    events = [skip(50), {'event': 'forensics', 'step': 50, 'recheck': 'transient'}]
    self.assertEqual(top(events)[0], 'transient')

  def test_a_gradient_that_explodes_under_a_flat_loss(self):
    history = {'event': 'history', 'step': 30, 'steps': list(range(1, 31)), 'loss': [1.0] * 30,
               'grad_norm': [1.0] * 15 + [4.0**k for k in range(15)],
               'learning_rate': [1e-3] * 30, 'loss_scale': [1.0] * 30, 'applied': [True] * 30}
    events = [history] + [skip(k, 'gradient', 'gradient of net/d/kernel') for k in range(31, 40)]
    self.assertEqual(top(events, {'status': 'aborted'})[0], 'exploding_gradients')

  def test_a_cliff_in_the_gradient_norm_is_an_explosion_even_with_the_loss_rising(self):
    # A ReLU RNN's norm: noisy around 100, one step at 1e10, the loss rising with it.
    norms = [100.0 * (1 + 0.5 * (k % 3)) for k in range(40)]
    loss = [2.0 * 1.1**k for k in range(40)]
    def run(peak, vetoed=False, lr=1e-2):
      history = {'event': 'history', 'step': 40, 'steps': list(range(1, 41)), 'loss': loss,
                 'grad_norm': norms[:30] + [peak] + norms[31:], 'learning_rate': [lr] * 40,
                 'loss_scale': [1.0] * 40, 'applied': [True] * 30 + [not vetoed] + [True] * 9}
      return top([history, {'event': 'diverged', 'step': 40, 'trigger': 'divergence',
                            'reason': 'r'}], {'status': 'diverged', 'optimizer': 'SGD'})
    cause, scores = run(1e10)
    self.assertEqual(cause, 'exploding_gradients')
    self.assertTrue(any('step 31' in e for e in scores['exploding_gradients'][1]))
    # A rate too high raises the norm with the loss by hundreds, not orders beyond: no cliff.
    self.assertEqual(run(3e4)[0], 'learning_rate')
    # A spike the run skipped on finite values (an outlier veto) was the batch's: no cliff.
    self.assertNotEqual(run(1e10, vetoed=True)[0], 'exploding_gradients')
    # At SGD 1.0 (10x the usual top, an FNO with momentum): the rate throws the norm off any
    # cliff; the rate first.
    cause, scores = run(1e10, lr=1.0)
    self.assertEqual(cause, 'learning_rate')
    self.assertTrue(any('above the usual top for SGD' in e for e in scores['learning_rate'][1]))

  def test_a_finite_divergence_on_a_damaged_model_is_the_learning_rate(self):
    events = [{'event': 'divergence_check', 'step': 20, 'verdict': 'model'},
              {'event': 'diverged', 'step': 30, 'trigger': 'divergence', 'reason': 'r'}]
    self.assertEqual(top(events, {'status': 'diverged'})[0], 'learning_rate')
    # The same high loss on a model still good on a clean batch: the batches.
    events = [{'event': 'divergence_check', 'step': 20, 'verdict': 'data'}]
    self.assertEqual(top(events, {'status': 'completed'})[0], 'bad_input')

  def test_a_rollback_is_a_rescue_only_if_the_run_trained_after_it(self):
    events = [{'event': 'divergence_check', 'step': 21, 'verdict': 'model'},
              {'event': 'rollback', 'step': 30, 'to_step': 0, 'trigger': 'divergence',
               'learning_rate': 0.0316}]
    def rescued(global_step):
      cause, scores = top(events, {'status': 'completed', 'global_step': global_step})
      self.assertEqual(cause, 'learning_rate')
      return any('the run trained once' in e for e in scores['learning_rate'][1])
    self.assertTrue(rescued(30))
    # A Keras fit whose last read rolled back ends there: it never trained at the new rate.
    self.assertFalse(rescued(0))

  def test_huge_start_outputs_are_the_initialisation_unless_the_inputs_explain_them(self):
    summary = {'divergence': {'output_rms': 1e5, 'label_rms': 1.0, 'input_rms': 1.0}}
    events = [{'event': 'diverged', 'step': 50, 'trigger': 'untrainable_start', 'reason': 'r'}]
    self.assertEqual(top(events, summary)[0], 'initialisation')
    summary['divergence']['input_rms'] = 300.0
    _, scores = top([skip(k) for k in range(1, 12)], summary)
    self.assertEqual(scores['initialisation'][0], 0)

  def test_a_loss_far_off_scale_from_outputs_in_range_is_no_decisive_initialisation(self):
    # untrainable_start from a loss far above a uniform guess's while the outputs are in range
    # (a softmax over one unit the mismatch check could not read): initialisation, not high.
    events = [{'event': 'diverged', 'step': 50, 'trigger': 'untrainable_start', 'reason': 'r'},
              {'event': 'warning', 'step': 1, 'cause': 'initialisation', 'message': 'm'}]
    in_range = {'divergence': {'output_rms': 1.0, 'label_rms': 1.0, 'input_rms': 1.0}}
    found = doctor.diagnose(events, dict(in_range, status='diverged'))
    self.assertEqual((found['cause'], found['confidence']), ('initialisation', 'medium'))
    off_scale = {'divergence': {'output_rms': 1e5, 'label_rms': 1.0, 'input_rms': 1.0}}
    found = doctor.diagnose(events, dict(off_scale, status='diverged'))
    self.assertEqual((found['cause'], found['confidence']), ('initialisation', 'high'))

  def test_outputs_off_scale_from_kernels_at_a_standard_scale_are_no_decisive_initialisation(self):
    # A sum over an unnormalised adjacency, a division by a small temperature: sound weights,
    # outputs off scale. The kernels' ratio in the start warning tells them from a wide init.
    off_scale = {'divergence': {'output_rms': 1e5, 'label_rms': 1.0, 'input_rms': 1.0},
                 'status': 'diverged'}
    def diagnose(kernel_ratio):
      events = [{'event': 'diverged', 'step': 50, 'trigger': 'untrainable_start', 'reason': 'r'},
                {'event': 'warning', 'step': 1, 'cause': 'initialisation', 'message': 'm',
                 'kernel_ratio': kernel_ratio}]
      found = doctor.diagnose(events, off_scale)
      return found['cause'], found['confidence']
    self.assertEqual(diagnose(12.0), ('initialisation', 'high'))  # Kernels off scale.
    cause, confidence = diagnose(1.2)
    self.assertNotEqual(confidence, 'high')
    self.assertEqual(diagnose(None), ('initialisation', 'high'))  # Not measured: as before.

  def test_outputs_amplified_by_the_architecture_are_exploding_gradients_not_a_bad_init(self):
    # A deep residual MLP without normalisation (He kernels): no start warning, since the start
    # check found the kernels sound; its `start_check` event says so. NaN from step 2.
    summary = {'status': 'aborted', 'divergence': {
        'output_rms': 2600.0, 'label_rms': 0.9, 'input_rms': 1.0}}
    checked = {'event': 'start_check', 'step': 1, 'output_ratio': 2600.0, 'kernel_ratio': 1.4}
    events = [checked] + [skip(k, tensor='loss (model outputs already non-finite)')
                          for k in range(2, 14)]
    found = doctor.diagnose(events, summary)
    self.assertEqual(found['cause'], 'exploding_gradients')
    self.assertNotEqual(found['confidence'], 'high')
    checked['kernel_ratio'] = 40.0  # Kernels far off scale: the initialiser's.
    self.assertEqual(doctor.diagnose(events, summary)['cause'], 'initialisation')

  def test_the_records_finite_re_run_of_the_one_faulty_step_is_a_recheck(self):
    # The default stack's Forensics record re-runs the faulty batch from the state the skip left
    # bit-identical: finite, no op located (RNNoise's one inf activation, then a saturated
    # sigmoid under a log): what Forensics(recheck=True) would have said.
    report = {'applied': False, 'state': 'before the faulty step (the skip left it bit-identical)',
              'rerun': {'loss': 0.42, 'finite': True},
              'op_level': {'found': False, 'note': 'a constant holding +Inf in ...'}}
    found = doctor.diagnose([skip(76)], {'status': 'completed', 'skipped_steps': 1}, [report])
    # Medium, not the explicit recheck's high: a random draw in the model that failed once (a
    # keep-rate drawn 0) is re-drawn by the re-run and reads the same.
    self.assertEqual((found['cause'], found['confidence']), ('transient', 'medium'))
    # Not where the record does not stand for every fault, nor for the state the step saw, nor
    # where an op reproduced it: the loss's arithmetic keeps its reading.
    for events, changed in (([skip(76), skip(120)], {}),  # Several faults: the first re-run.
                            ([skip(76)], {'applied': True, 'state': 'after the applied update'}),
                            ([skip(76)], {'rerun': {'loss': 'nan', 'finite': False}}),
                            ([skip(76)], {'op_level': {'found': True, 'op_type': 'Log'}})):
      cause, scores = top(events, {}, [dict(report, **changed)])
      self.assertNotEqual(cause, 'transient', changed)
      self.assertLess(scores['transient'][0], 4, changed)

  def test_isolated_non_finite_losses_from_finite_outputs_are_the_losss_arithmetic(self):
    # Two batches of 200 whose loss divides by a count of 0 (a Cox loss on a batch without an
    # event), outputs finite: the loss, not a flake; the same steps with only the gradients
    # non-finite (a backward-pass flake, or a derivative infinite at a point) keep transient's
    # points.
    summary = {'inputs_checked': True}
    cause, scores = top([skip(40), skip(150)], summary)
    self.assertEqual((cause, scores['transient'][0]), ('division_or_log', 1))
    gradient_only = [dict(skip(k, fault='gradient', tensor='gradient of net/d/kernel'),
                          loss=1.0) for k in (40, 150)]
    self.assertEqual(top(gradient_only, summary)[1]['transient'][0], 3)

  def test_outputs_whose_squares_sum_past_float32_grew_without_bound(self):
    # An MSE regression's outputs at 1.66e19 (under 1.8e19: each square finite): the batch's Sum
    # in the loss overflowed first. No exp anywhere: the model's growth, not an overflowing exp.
    record = {'op_level': {'found': True, 'op_type': 'Sum', 'op_name': 'compile_loss/mse/Sum',
                           'layer': None, 'dtype': 'float32'}, 'inputs': [],
              'activations': [{'layer': 'dense_9', 'finite': True, 'max_abs': 1.66e19}]}
    events = [skip(k, tensor='loss') for k in range(2, 13)]
    summary = {'status': 'aborted', 'inputs_checked': True}
    cause, scores = top(events, summary, [record])
    self.assertEqual(cause, 'exploding_gradients')
    self.assertEqual(scores['softmax_overflow'][0], 0)
    record['activations'][0]['max_abs'] = 1e17  # Its squares' sum finite: nothing said of it.
    self.assertFalse(any('grew without bound' in e
                         for e in top(events, summary, [record])[1]['exploding_gradients'][1]))

  def test_float16_activations_beyond_65504(self):
    record = {'op_level': {'found': False}, 'inputs': [],
              'activations': [{'layer': 'dense_0', 'dtype': 'float16', 'finite': False,
                               'max_abs': 6e4}]}
    events = [skip(k, tensor='loss (model outputs already non-finite)') for k in range(1, 12)]
    self.assertEqual(top(events, {'loss_scale': 1.0}, [record])[0], 'precision')

  def test_a_float16_activation_after_an_infinity_built_on_purpose_is_not_the_range(self):
    # A -inf mask fill under mixed_float16 over rows with nothing to attend to: Forensics
    # stops at the -inf constant; the pooled layer's float16 outputs hold NaN, its finite
    # values small. The same record as in float32: the mask, not float16's range.
    record = {'op_level': {'found': False, 'constant': '-Inf', 'source': 'net.py:13 in call',
                           'dtype': 'float32'},
              'inputs': [], 'activations': [{'layer': 'pool', 'dtype': 'float16',
                                             'finite': False, 'max_abs': 0.09}]}
    events = [skip(k, tensor='loss (model outputs already non-finite)') for k in range(1, 12)]
    summary = {'loss_scale': 1.0, 'status': 'aborted', 'inputs_checked': True}
    found = doctor.diagnose(events, summary, [record])
    self.assertEqual(found['cause'], 'softmax_overflow')
    self.assertIn('never -inf', found['remedy'])
    self.assertEqual(top(events, summary, [record])[1]['precision'][0], 0)
    # A -1e30 penalty written into the float16 computation holds -inf in float16: the range's.
    # (A record from before the constant's dtype was kept reads the same.)
    for dtype in ('float16', None):
      record['op_level']['dtype'] = dtype
      self.assertEqual(top(events, summary, [record])[0], 'precision')
    # Finite values near float16's top in that layer: its range after all.
    record['op_level']['dtype'] = 'float32'
    record['activations'][0]['max_abs'] = 6e4
    self.assertEqual(top(events, summary, [record])[0], 'precision')

  def test_a_located_op_that_computed_in_float16_is_first_the_float16_range(self):
    # An RMSNorm's x / sqrt(mean(x^2) + 1e-8) in float16: the epsilon is 0 there.
    record = {'op_level': {'found': True, 'op_type': 'RealDiv', 'op_name': 'rms/truediv',
                           'layer': 'rms', 'dtype': 'float16'}, 'inputs': []}
    events = [skip(k, tensor='loss (model outputs already non-finite)') for k in range(1, 12)]
    record['activations'] = [{'layer': 'rms', 'dtype': 'float16', 'finite': False,
                              'max_abs': 3.0}]  # Its own NaN: no overflow shown.
    found = doctor.diagnose(events, {'loss_scale': 1.0, 'status': 'aborted'}, [record])
    self.assertEqual(found['cause'], 'precision')
    self.assertIn('float16 RealDiv', found['evidence'][0])
    # ...but a division or a log by a real 0 (NaN in float32 too) leaves the same record: never
    # high. A product or an exp located in float16 is the range's alone.
    self.assertEqual(found['confidence'], 'medium')
    record['op_level']['op_type'] = 'MatMul'
    found = doctor.diagnose(events, {'loss_scale': 1.0, 'status': 'aborted'}, [record])
    self.assertEqual((found['cause'], found['confidence']), ('precision', 'high'))
    record['op_level']['op_type'] = 'RealDiv'
    record['op_level']['dtype'] = 'float32'  # The same op in float32 is the division's.
    self.assertEqual(top(events, {'loss_scale': 1.0}, [record])[0], 'division_or_log')

  def test_a_model_built_in_float16_without_a_loss_scale_is_read_as_float16(self):
    # Every layer in float16 (the user's floatx), no loss scale: Adam's default epsilon is 0
    # there, and the first NaN comes out of a float16 MatMul.
    record = {'op_level': {'found': True, 'op_type': 'MatMul', 'op_name': 'net/dense_1/MatMul',
                           'layer': 'dense_1', 'dtype': 'float16'}, 'inputs': [],
              'activations': [{'layer': 'dense_1', 'dtype': 'float16', 'finite': False,
                               'max_abs': 3.0}]}
    events = [skip(k, tensor='loss (model outputs already non-finite)') for k in range(2, 21)]
    summary = {'status': 'aborted'}  # No loss scale anywhere.
    self.assertTrue(symptoms.Symptoms.read(events, summary, [record]).fp16)
    found = doctor.diagnose(events, summary, [record])
    self.assertEqual((found['cause'], found['confidence']), ('precision', 'high'))
    self.assertIn("build the model's layers in float32 or under 'mixed_float16'", found['remedy'])
    # Under a loss scale, the model is mixed already: the remedy does not say it.
    scaled = doctor.diagnose(events, dict(summary, loss_scale=1.0), [record])
    self.assertEqual(scaled['cause'], 'precision')
    self.assertNotIn("'mixed_float16'", scaled['remedy'])
    # NaN in the batch forensics saved (features of a float16 model): the float16 activations
    # say nothing of float16's range.
    bad = dict(record, inputs=[{'path': 'features', 'nan': 3, 'inf': 0}])
    self.assertEqual(top(events, summary, [bad])[1]['precision'][0], 0)
    self.assertEqual(top(events, dict(summary, loss_scale=1.0), [bad])[1]['precision'][0], 0)
    # The same record from a float32 model: no precision evidence.
    record['op_level']['dtype'] = record['activations'][0]['dtype'] = 'float32'
    self.assertFalse(symptoms.Symptoms.read(events, summary, [record]).fp16)
    self.assertEqual(top(events, summary, [record])[1]['precision'][0], 0)

  def test_weights_in_float16_that_diverge_at_a_usual_rate_are_float16s(self):
    # set_floatx('float16'): a loss scale, Adam at 1e-3, the loss diverged while finite.
    history = {'event': 'history', 'step': 26, 'steps': list(range(1, 27)),
               'loss': [0.8] + [1.5 + 0.1 * k for k in range(25)], 'grad_norm': [1.0] * 26,
               'learning_rate': [1e-3] * 26, 'loss_scale': [32768.0] * 26, 'applied': [True] * 26}
    events = [{'event': 'start', 'step': 0, 'num_steps': 384}, history,
              {'event': 'divergence_check', 'step': 26, 'rule': 'above_best', 'verdict': 'model'},
              {'event': 'abort', 'step': 26, 'trigger': 'divergence', 'reason': 'diverged'}]
    summary = {'status': 'diverged', 'optimizer': 'Adam', 'loss_scale': 32768.0}
    self.assertNotEqual(doctor.diagnose(events, summary)['cause'], 'precision')
    found = doctor.diagnose(events, dict(summary, variable_dtype='float16'))
    self.assertEqual(found['cause'], 'precision')
    self.assertIn("build the model's layers in float32 or under 'mixed_float16'", found['remedy'])
    # The loss and the gradient norm grew 40x together before it (blind35's Demucs, its Adam
    # epsilon 0 in float16): still float16's at a usual rate, the rate's in float32.
    history['loss'] = [0.05] + [0.05 * 1.2**k for k in range(25)]
    history['grad_norm'] = [0.01 * 1.2**k for k in range(26)]
    self.assertEqual(doctor.diagnose(events, summary)['cause'], 'learning_rate')
    self.assertEqual(doctor.diagnose(events, dict(summary, variable_dtype='float16'))['cause'],
                     'precision')
    # A warm-up to 0.05 (10x Adam's usual top) after first updates at a usual rate: the rate's
    # (a review: the first updates alone had read as usual).
    history['learning_rate'] = [1e-3 * (k + 1) for k in range(26)]
    self.assertEqual(doctor.diagnose(events, dict(summary, variable_dtype='float16'))['cause'],
                     'learning_rate')
    history['learning_rate'] = [1.0] * 26  # Far above Adam's usual: the rate's, first.
    self.assertNotEqual(doctor.diagnose(events, dict(summary, variable_dtype='float16'))['cause'],
                        'precision')

  def test_a_missing_value_code_in_the_labels_explains_a_run_that_did_not_train(self):
    coded = {'event': 'warning', 'step': 10, 'cause': 'bad_input',
             'kind': 'missing_value_code_labels', 'message': 'm', 'fix': 'f', 'code': -999.0}
    history = {'event': 'history', 'step': 60, 'steps': list(range(1, 61)),
               'loss': [3e4 + 1e4 * (k % 3) for k in range(60)], 'grad_norm': [50.0] * 60,
               'learning_rate': [1e-3] * 60, 'loss_scale': [1.0] * 60, 'applied': [True] * 60}
    stopped = [history, {'event': 'diverged', 'step': 60, 'trigger': 'no_progress', 'reason': 'r'}]
    cause, scores = top([coded] + stopped, {'status': 'diverged'})
    self.assertEqual(cause, 'bad_input')
    self.assertNotEqual(top(stopped, {'status': 'diverged'})[0], 'bad_input')

  def test_a_loss_output_mismatch_explains_a_finite_trouble_not_an_op_s_nan(self):
    mismatch = {'event': 'warning', 'step': 10, 'cause': 'loss_output_mismatch',
                'kind': 'logits_to_probability_loss', 'message': 'm', 'fix': 'f',
                'gin': 'Trainer.loss = @keras.losses.SparseCategoricalCrossentropy()'}
    history = {'event': 'history', 'step': 40, 'steps': list(range(1, 41)),
               'loss': [1.0 * 1.5**k for k in range(40)], 'grad_norm': [1.0 * 1.3**k
                                                                         for k in range(40)],
               'learning_rate': [1e-2] * 40, 'loss_scale': [1.0] * 40, 'applied': [True] * 40}
    diverged = [{'event': 'divergence_check', 'step': 30, 'verdict': 'model'}, history,
                {'event': 'diverged', 'step': 40, 'trigger': 'divergence', 'reason': 'r'}]
    self.assertEqual(top(diverged, {'status': 'diverged'})[0], 'learning_rate')
    cause, scores = top([mismatch] + diverged, {'status': 'diverged'})
    self.assertEqual(cause, 'loss_output_mismatch')
    self.assertGreater(scores[cause][0], scores['learning_rate'][0])
    # NaN steps that forensics traced to a Log op in a layer: the op decides, not the warning.
    skips = [mismatch] + [skip(k) for k in range(11, 22)]
    record = {'op_level': {'found': True, 'op_type': 'Log', 'op_name': 'dense/Log',
                           'layer': 'dense'}, 'inputs': []}
    cause, scores = top(skips, {'status': 'aborted'}, [record])
    self.assertEqual(cause, 'division_or_log')
    self.assertGreater(scores['loss_output_mismatch'][0], 0)
    # A Log of the loss itself (no layer), fed the outputs it does not fit: the mismatch.
    record['op_level'].update(op_name='poisson/Log', layer=None)
    cause, scores = top(skips, {'status': 'aborted'}, [record])
    self.assertEqual(cause, 'loss_output_mismatch')
    self.assertGreater(scores['division_or_log'][0], 0)


class ProductOverflowTest(tf.test.TestCase):

  def test_a_product_in_the_loss_that_overflows_is_an_exp_overflow(self):
    record = {'op_level': {'found': True, 'op_type': 'Mul', 'op_name': 'mul_62', 'layer': None},
              'inputs': []}
    faults = [skip(k, fault='loss') for k in range(11, 30)]
    cause, _ = top(faults, {'status': 'aborted'}, [record])
    self.assertEqual(cause, 'softmax_overflow')
    record['op_level']['layer'] = 'dense'  # In a layer: activations that grew, not the loss.
    cause, scores = top(faults, {'status': 'aborted'}, [record])
    self.assertNotEqual(cause, 'softmax_overflow')

  def test_outputs_whose_own_square_overflows_need_no_exp_terms(self):
    # An MSE's Square of outputs at 6e23 (their square is above float32's 3.4e38).
    record = {'op_level': {'found': True, 'op_type': 'Square', 'op_name': 'mse/Square',
                           'layer': None}, 'inputs': [],
              'activations': [{'layer': 'head', 'max_abs': 6e23, 'finite': True,
                               'dtype': 'float32'}]}
    faults = [skip(k, fault='loss') for k in range(11, 30)]
    cause, scores = top(faults, {'status': 'aborted'}, [record])
    self.assertFalse(any('a product that overflows' in e for e in scores['softmax_overflow'][1]))
    self.assertEqual(cause, 'exploding_gradients')  # No exp, no division: the model grew.
    self.assertEqual(scores['softmax_overflow'][0], 0.0)
    record['activations'][0]['max_abs'] = 1e6  # Outputs of that size: the loss made the Inf.
    _, scores = top(faults, {'status': 'aborted'}, [record])
    self.assertTrue(any('a product that overflows' in e for e in scores['softmax_overflow'][1]))


class RankingTest(tf.test.TestCase):
  """Evidence ranked as a clinician would: the op over the norm history, no explosion without
  growth, no data verdict over a dead net, high confidence only on decisive evidence."""

  def _history(self, norms, trouble=40):
    n = len(norms)
    return {'event': 'history', 'step': trouble, 'steps': list(range(trouble - n + 1, trouble + 1)),
            'loss': [1.0] * (n - 1) + ['nan'], 'grad_norm': norms[:-1] + ['nan'],
            'learning_rate': [1e-3] * n, 'loss_scale': [1.0] * n, 'applied': [True] * (n - 1) +
            [False]}

  def test_a_backward_op_that_forensics_located_outranks_a_growing_norm(self):
    # sqrt(0)'s gradient is infinite: SqrtGrad, whatever the norm did before.
    grown = self._history([1.0] * 15 + [4.0**k for k in range(15)], trouble=40)
    gradient = [skip(k, 'gradient', 'gradient of net/d/kernel') for k in range(40, 50)]
    record = {'op_level': {'found': True, 'op_type': 'SqrtGrad', 'op_name': 'gradients/Sqrt'},
              'inputs': []}
    d = doctor.diagnose([grown] + gradient, {'status': 'aborted'}, [record])
    self.assertEqual((d['cause'], d['confidence']), ('division_or_log', 'high'))
    self.assertIn('SqrtGrad', d['evidence'][0])
    record['op_level']['op_type'] = 'Softmax'  # A fully masked row (-inf everywhere).
    self.assertEqual(doctor.diagnose([grown] + gradient, {'status': 'aborted'}, [record])['cause'],
                     'softmax_overflow')

  def test_a_non_finite_gradient_with_a_steady_norm_is_no_explosion(self):
    steady = self._history([1.0] * 30)
    gradient = [skip(k, 'gradient', 'gradient of net/d/kernel') for k in range(40, 50)]
    d = doctor.diagnose([steady] + gradient, {'status': 'aborted'})
    self.assertEqual(d['cause'], 'division_or_log')
    self.assertNotEqual(d['confidence'], 'high')  # No op named: not decisive.
    self.assertIn('Forensics()', d['evidence'][0])
    grown = self._history([1.0] * 15 + [4.0**k for k in range(15)])
    self.assertEqual(doctor.diagnose([grown] + gradient, {'status': 'aborted'})['cause'],
                     'exploding_gradients')

  def test_nan_a_later_layer_dropped_before_the_output_is_a_fully_masked_softmax(self):
    # A BERT-style -inf padding mask: the padded rows' attention is NaN, the masked pooling
    # drops them (finite loss and outputs) and the gradient is NaN: not a tf.where'd log.
    steady = self._history([1.0] * 30)
    gradient = [skip(k, 'gradient', 'gradient of net/emb/embeddings') for k in range(40, 50)]
    acts = lambda attention: [{'layer': 'emb', 'finite': True, 'max_abs': 0.05},
                              {'layer': 'attention', 'finite': attention, 'max_abs': 0.03},
                              {'layer': 'norm', 'finite': attention, 'max_abs': 2.0},
                              {'layer': 'head', 'finite': True, 'max_abs': 1.9}]
    d = doctor.diagnose([steady] + gradient, {'status': 'aborted'},
                        [{'fault': 'gradient', 'activations': acts(False)}])
    self.assertEqual(d['cause'], 'softmax_overflow')
    self.assertNotEqual(d['confidence'], 'high')
    self.assertIn('attention', d['evidence'][0])
    for clean in (acts(True), acts(False)[:1] + [dict(acts(False)[1], finite=True)] * 3):
      self.assertEqual(doctor.diagnose([steady] + gradient, {'status': 'aborted'},
                                       [{'fault': 'gradient', 'activations': clean}])['cause'],
                       'division_or_log')  # Every layer finite: the gradient's own arithmetic.
    # NaN in the saved batch that the model dropped: the input's, not a masked softmax's.
    d = doctor.diagnose([steady] + gradient, {'status': 'aborted'},
                        [{'fault': 'gradient', 'activations': acts(False),
                          'inputs': [{'nan': 3, 'inf': 0}]}])
    self.assertEqual(d['cause'], 'bad_input')
    self.assertNotIn('softmax_overflow', [a['cause'] for a in d['alternatives']])

  def test_a_minus_inf_constant_forensics_stopped_at_is_shown_not_scored(self):
    # check_numerics stops at a -inf constant before any op: a fill that makes a fully masked
    # row's softmax NaN, or a causal mask there in every step whatever goes wrong (a reviewer's
    # causal decoder: a division behind tf.where, an explosion in its first steps). The records
    # cannot tell them apart: the constant is shown, never scored.
    steady = self._history([1.0] * 30)
    gradient = [skip(k, 'gradient', 'gradient of net/emb/embeddings') for k in range(40, 50)]
    record = [{'fault': 'gradient', 'activations': [], 'op_level': {
        'found': False, 'constant': '-Inf', 'source': 'model.py:30 in call',
        'note': 'a constant holding -Inf in attn/Cast: model.py:30 in call'}}]
    with_record = doctor.diagnose([steady] + gradient, {'status': 'aborted'}, record)
    without = doctor.diagnose([steady] + gradient, {'status': 'aborted'})
    self.assertEqual((with_record['cause'], with_record['alternatives']),
                     (without['cause'], without['alternatives']))
    self.assertIn('Forensics did not name it: a constant holding -Inf', with_record['evidence'][0])
    self.assertNotIn('model.py:30', with_record['remedy'])  # The division's remedy: no mask.
    # Where the softmax is the answer (non-finite outputs from checked inputs), the remedy is
    # the mask fill alone, at the constant's line.
    outputs = [skip(k, tensor='loss (model outputs already non-finite)') for k in (30, 77, 140)]
    d = doctor.diagnose([{'event': 'start', 'step': 0, 'num_steps': 200}] + outputs,
                        {'status': 'completed', 'skipped_steps': 3, 'inputs_checked': True},
                        record)
    self.assertEqual(d['cause'], 'softmax_overflow')
    self.assertTrue(d['remedy'].startswith('mask scores with a large finite negative'))
    self.assertIn('(the -inf constant at model.py:30 in call)', d['remedy'])
    self.assertNotIn('from_logits', d['remedy'])

  def test_a_few_scattered_loss_only_faults_are_the_loss_s_arithmetic(self):
    # A per-batch count that is 0 on some batches, 4 of 200 steps: beyond the 3 isolated ones,
    # still a small share in short stretches. It used to get no cause at all.
    events = [{'event': 'start', 'step': 0, 'num_steps': 200}] + [skip(k) for k in (6, 13, 38, 45)]
    d = doctor.diagnose(events, {'status': 'completed', 'skipped_steps': 4})
    self.assertEqual(d['cause'], 'division_or_log')
    self.assertIn('4 scattered step(s) with a non-finite loss', d['evidence'][0])
    every = [skip(k) for k in range(6, 200, 2)]  # Half the steps: no longer a few batches'.
    self.assertNotIn('scattered', ' '.join(doctor.diagnose(
        events[:1] + every, {'status': 'completed', 'skipped_steps': len(every)})['evidence']))

  def test_the_evidence_says_what_forensics_found_of_the_op(self):
    self.assertEqual(evidence.name_the_op(None), 'add Forensics() to name the op')
    self.assertEqual(evidence.name_the_op(
        {'op_level': {'found': True, 'op_type': 'Mul', 'op_name': 'loss/mul'}}),
        'Forensics located a Mul (loss/mul)')
    self.assertEqual(evidence.name_the_op({'op_level': {'found': False, 'note': 'no NaN'}}),
                     'Forensics did not name it: no NaN')

  def test_a_dead_net_is_never_bad_input(self):
    events = [{'event': 'divergence_check', 'step': 20, 'rule': 'above_best', 'verdict': 'data'},
              {'event': 'divergence_check', 'step': 50, 'rule': 'collapsed', 'verdict': 'model'},
              {'event': 'diverged', 'step': 50, 'trigger': 'divergence', 'reason': 'collapsed'}]
    d = doctor.diagnose(events, {'status': 'diverged'})
    self.assertEqual(d['cause'], 'learning_rate')
    self.assertTrue(any('units died' in e for e in d['evidence']))

  def test_input_check_failures_are_decisive(self):
    events = [skip(k, 'input', 'features') for k in (5, 17, 40)]
    d = doctor.diagnose(events, {'status': 'completed', 'skipped_steps': 3})
    self.assertEqual((d['cause'], d['confidence']), ('bad_input', 'high'))

  def test_non_finite_outputs_from_checked_inputs_are_the_forward_arithmetic(self):
    # A -inf attention mask over an empty sequence: a few batches' outputs NaN, their inputs
    # finite. With the inputs checked (the default stack) that is no bad input.
    outputs = 'loss (model outputs already non-finite)'
    events = [{'event': 'start', 'step': 0, 'num_steps': 200}] + [
        skip(k, tensor=outputs) for k in (30, 77, 140)]
    d = doctor.diagnose(events, {'status': 'completed', 'skipped_steps': 3,
                                 'inputs_checked': True})
    self.assertEqual(d['cause'], 'softmax_overflow')
    self.assertNotEqual(d['confidence'], 'high')
    self.assertEqual(doctor.diagnose(events, {'status': 'completed', 'skipped_steps': 3})['cause'],
                     'bad_input')  # Unchecked inputs: the batches stay the likeliest source.
    once = doctor.diagnose(events[:2], {'status': 'completed', 'skipped_steps': 1,
                                        'inputs_checked': True})
    self.assertEqual(once['cause'], 'transient')  # Once, never again: a one-off.

  def test_a_few_gradient_only_faults_beside_many_forward_ones_are_the_forward_pass_s(self):
    # Mostly non-finite outputs (an exp overflowing in attention pooling), two steps whose NaN
    # showed in the gradients only: the run's pattern is the forward pass, not a derivative.
    outputs = 'loss (model outputs already non-finite)'
    events = ([{'event': 'start', 'step': 0, 'num_steps': 80}]
              + [skip(k, tensor=outputs) for k in range(3, 40, 2)]
              + [skip(k, 'gradient', 'gradient of net/d/kernel') for k in (41, 43)])
    summary = {'status': 'aborted', 'skipped_steps': 21, 'inputs_checked': True}
    self.assertEqual(doctor.diagnose(events, summary)['cause'], 'softmax_overflow')
    # Gradient-only faults as the pattern, no growth before them: a derivative infinite at a point.
    events = events[:1] + [skip(k, 'gradient', 'gradient of net/d/kernel') for k in range(3, 40, 2)]
    self.assertEqual(doctor.diagnose(events, summary)['cause'], 'division_or_log')

  def test_a_fault_at_the_first_step_is_no_learning_rate(self):
    events = [{'event': 'start', 'step': 0, 'num_steps': 100}] + [
        skip(k, 'gradient', 'gradient of net/d/kernel') for k in range(1, 12)]
    d = doctor.diagnose(events, {'status': 'aborted'})
    self.assertNotEqual(d['cause'], 'learning_rate')
    self.assertNotIn('learning_rate', [a['cause'] for a in d['alternatives']])
