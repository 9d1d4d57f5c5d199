"""Tests for stable_train.core.reports: the one fault predicate and offending-tensor description."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from stable_train.core import interfaces
from stable_train.core import reports
from stable_train.forensics import provenance

VARIABLES = ['net/dense_0/kernel', 'net/dense_0/bias', 'net/dense_1/kernel']
INPUTS = ['features', 'labels']


def _reports(inputs_ok, loss_ok, grad_flags, outputs_ok=True, input_flags=None):
  input_flags = input_flags or ([True, True] if inputs_ok else [True, False])
  one = lambda v, dtype=bool: np.array([v], dtype)
  return interfaces.StepReports(
      step=one(1, np.int64), loss=one(1.0 if loss_ok else np.inf, np.float32),
      grad_norm=one(1.0, np.float32), clipped_grad_norm=one(1.0, np.float32),
      loss_finite=one(loss_ok), grads_finite=one(all(grad_flags)), inputs_finite=one(inputs_ok),
      outputs_finite=one(outputs_ok),
      first_bad_grad=one(interfaces.first_false(grad_flags), np.int32),
      first_bad_input=one(interfaces.first_false(input_flags), np.int32), applied=one(False),
      learning_rate=one(0.1, np.float32), variable_paths=VARIABLES, input_paths=INPUTS)


class FaultTest(tf.test.TestCase):

  def test_training_report_in_graph_check_and_rerun_agree_on_every_combination(self):
    for inputs_ok, loss_ok, grads_ok, outputs_ok in itertools.product([True, False], repeat=4):
      with self.subTest(inputs=inputs_ok, loss=loss_ok, grads=grads_ok, outputs=outputs_ok):
        grad_flags = [True, True, True] if grads_ok else [True, False, False]
        input_flags = [True, True] if inputs_ok else [True, False]
        reports = _reports(inputs_ok, loss_ok, grad_flags, outputs_ok, input_flags)
        again = provenance.Rerun(loss=1.0 if loss_ok else float('inf'), grad_flags=grad_flags,
                                 input_flags=input_flags, outputs_finite=outputs_ok)
        expected = ('input' if not inputs_ok else 'loss' if not loss_ok else
                    'gradient' if not grads_ok else None)
        self.assertEqual(reports.fault(0), expected)
        self.assertEqual(again.fault, expected)
        self.assertEqual(again.finite, expected is None)
        in_graph = interfaces.step_faulty({'inputs_finite': tf.constant(inputs_ok),
                                           'loss_finite': tf.constant(loss_ok),
                                           'grads_finite': tf.constant(grads_ok)})
        self.assertEqual(bool(in_graph), expected is not None)
        self.assertEqual(reports.offending_tensor(0), again.offending_tensor(VARIABLES, INPUTS))
        observed = provenance.observed_from_rerun(again, VARIABLES, INPUTS)
        self.assertEqual((observed['fault'], observed['offending_tensor']),
                         (expected, reports.offending_tensor(0)))

  def test_an_fp16_overflow_is_skipped_but_no_fault(self):
    self.assertEqual(interfaces.fault_kind(inputs_finite=True, loss_finite=True,
                                           grads_finite=False, overflow=True), 'overflow')
    report = {'inputs_finite': tf.constant(True), 'loss_finite': tf.constant(True),
              'grads_finite': tf.constant(False)}
    self.assertTrue(bool(interfaces.step_faulty(report)))
    self.assertFalse(bool(interfaces.step_faulty(dict(report, overflow=tf.constant(True)))))
    self.assertTrue(bool(interfaces.step_faulty(dict(report, overflow=tf.constant(False)))))

  def test_offending_tensor_words(self):
    self.assertEqual(_reports(False, True, [True] * 3).offending_tensor(0), 'input labels')
    self.assertEqual(_reports(True, False, [True, False, True]).offending_tensor(0),
                     'loss; first non-finite gradient of net/dense_0/bias')
    self.assertEqual(_reports(True, False, [True] * 3, outputs_ok=False).offending_tensor(0),
                     'loss (model outputs already non-finite)')
    self.assertEqual(_reports(True, True, [True, True, False]).offending_tensor(0),
                     'gradient of net/dense_1/kernel')
    self.assertEqual(_reports(True, True, [True] * 3).offending_tensor(0), 'none')

  def test_first_false(self):
    self.assertEqual(interfaces.first_false([True, False, False]), 1)
    self.assertEqual(interfaces.first_false([True, True]), -1)
    self.assertEqual(interfaces.first_false([]), -1)


# Found by a break-it review of the split (each failed before its fix).

_FULL = dict(step=[1, 2], loss=[1., 2.], grad_norm=[1., 1.], clipped_grad_norm=[1., 1.],
            loss_finite=[True, True], grads_finite=[True, True], inputs_finite=[True, True],
            outputs_finite=[True, True], first_bad_grad=[-1, -1], first_bad_input=[-1, -1],
            applied=[True, True], learning_rate=[.1, .1])



def test_step_reports_scalar_or_none_step_is_a_clear_type_error():
  with pytest.raises(TypeError):
    interfaces.StepReports(**{k: v[0] for k, v in _FULL.items()})
  with pytest.raises(TypeError):
    interfaces.StepReports(**dict(_FULL, step=None))


def test_step_reports_mismatched_lengths_refused():
  with pytest.raises(TypeError, match='values for 2 steps'):
    interfaces.StepReports(**dict(_FULL, loss=[1.]))


def test_step_reports_is_still_a_dataclass():
  # Before the REPORT_FIELDS table it was a frozen dataclass: user tests use replace/asdict.
  import dataclasses  # pylint: disable=g-import-not-at-top
  reports = interfaces.StepReports(**{k: np.asarray(v) for k, v in _FULL.items()})
  changed = dataclasses.replace(reports, loss=np.array([np.nan, 1.]))
  assert changed.fault(0) == 'loss' or not np.isfinite(changed.loss[0])
  assert 'loss' in dataclasses.asdict(reports)


def test_packed_reports_unpack_to_exact_typed_columns():
  # The loop packs every report field into one float64 row per step; the host unpacks them.
  dtypes = reports.report_dtypes(tf.float64)
  rows = []
  for i in range(3):
    row = {k: (2**52 + i if k == 'step' else 3e40 * (i + 1) if k == 'loss' else
               np.float32(0.1) if d == tf.float32 else (i == 1) if d == tf.bool else -1 + i)
           for k, d in dtypes.items()}
    rows.append(reports.pack_report({k: tf.constant(v, dtypes[k]) for k, v in row.items()},
                                    dtypes).numpy())
  columns = reports.unpack_reports(np.array(rows, np.float64), dtypes)
  assert columns['step'].dtype == np.int64 and columns['step'][2] == 2**52 + 2
  assert columns['loss'][1] == 6e40
  assert columns['applied'].dtype == np.bool_ and columns['applied'].tolist() == [False, True, False]
  assert columns['learning_rate'].dtype == np.float32 and columns['learning_rate'][0] == np.float32(0.1)
  assert columns['first_bad_grad'].dtype == np.int32 and columns['first_bad_grad'].tolist() == [-1, 0, 1]


if __name__ == '__main__':
  tf.test.main()
