"""The deep provenance report of one faulty step (`build_report`): the variable level, the op
level (a check_numerics re-run), the batch's inputs and the activations' scales."""

from typing import Any, Dict, Optional

import numpy as np

from stable_train.core import interfaces
from stable_train.forensics import activations
from stable_train.forensics import provenance


def _num_classes(probe) -> Optional[int]:
  """The class count labels are checked against: a policy's that checks the labels' range (its
  `num_classes`, as `ValidateInputs` has it), else the step's own."""
  for p in probe.policies:
    if getattr(p, 'num_classes', None) is not None:
      return p.num_classes
  return probe.label_classes


def build_report(probe, batch, *, step: int, observed: Dict[str, Any],
                 again: Optional[provenance.Rerun] = None,
                 now: Optional[int] = None) -> Dict[str, Any]:
  """The deep provenance of one faulty step: variable level, op level (a re-run) and the batch.

  Args:
    probe: the run's `handle.Probe` (or a Trainer), holding the state the step started from.
    batch: the step's dataset element.
    step: its global step.
    observed: what the step itself saw: 'fault', 'offending_tensor', 'loss', 'loss_finite',
      'outputs_finite', 'grad_flags' (per variable, layer order), 'applied'.
    again: a non-XLA re-run of the step on this state and batch, if the caller has one already.
    now: the run's step at the investigation, where the reports were read later than the step
      (a LoopHost's `read_every`): the state is then that step's.
  """
  paths = [provenance.variable_path(v) for m in provenance.models_of(probe)
           for v in m.trainable_variables]
  features, labels = probe.split_batch(batch)
  flat = [np.asarray(t) for t in interfaces.flatten_inputs(features, labels)]
  if again is None:
    again = provenance.rerun(probe, batch)
  applied = observed['applied']
  grad_flags = observed['grad_flags']
  return {
      'step': step,
      'fault': observed['fault'],
      'offending_tensor': observed['offending_tensor'],
      'loss': observed['loss'],
      'loss_finite': observed['loss_finite'],
      'outputs_finite': observed['outputs_finite'],
      'applied': applied,
      'state': (f'of step {now}, {now - step} step(s) after the faulty one (its reports were '
                'read then)' if now is not None and now > step else
                'after the applied faulty update' if applied else
                'before the faulty step (the skip left it bit-identical)'),
      'variable_paths': paths,
      'grad_finite_flags': grad_flags,
      'variable_level': provenance.variable_provenance(
          grad_flags, paths, loss_finite=observed['loss_finite'],
          outputs_finite=observed['outputs_finite']),
      'op_level': provenance.locate_op(probe, batch),
      'inputs': provenance.input_summary(interfaces.input_paths(features, labels), flat,
                                         again.input_flags, _num_classes(probe)),
      'rerun': {'loss': again.loss, 'finite': again.finite},
      'activations': activations.activation_scales(probe.model, features),
  }
