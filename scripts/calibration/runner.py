"""One calibration run: a case's model trained through one front door (the Trainer, or
`guard_fit` + Keras `fit`) into a run directory, the doctor run offline on that directory
(`doctor.load` + `diagnose`), and whether the model trained.

"Did it train" is measured here, not read from the run: the task error of the model on fixed
clean batches (4 batches drawn before training) after the run against the same model untrained:
for classes, binary and pair tasks the error rate (argmax, or the 0.5 / 0 threshold), for
regression the mean squared error. A run trained when its final error is finite and at most
`TRAINED_RATIO` x the lower of the untrained model's and the best constant prediction's (the
labels' variance, the commonest class), in inference mode or in training mode (`trained`).
"""

import contextlib
import gc
import os
import shutil
import tempfile
import time
from typing import Any, Dict, Optional

import keras
import numpy as np
import tensorflow as tf

import stable_train
from stable_train import errors
from stable_train.doctor import doctor
from stable_train.forensics import forensics
from stable_train.policies import precision as precision_lib
from stable_train.trainer import trainer as trainer_lib

TRAINED_RATIO = 0.8
EVAL_BATCHES = 4
# The run's cadence, both doors: a checkpoint every 50 steps, good after 20 healthy ones.
CADENCE = dict(checkpoint_every=50, healthy_window=20)


def task_error(kind: str, outputs, labels) -> float:
  """The task error of outputs against labels (see the module docstring); inf if any output is
  not finite."""
  out = np.asarray(outputs, np.float64)
  labels = np.asarray(labels)
  if not np.all(np.isfinite(out)):
    return float('inf')
  if kind == 'classes':
    if out.shape[-1] == 1:  # One unit: the only class there is.
      return float(np.mean(labels.reshape(-1) != 0))
    return float(np.mean(np.argmax(out, axis=-1) != labels.reshape(-1)))
  if kind in ('binary_prob', 'binary_logit', 'pairs'):
    threshold = 0.0 if kind == 'binary_logit' else 0.5
    predicted = out.reshape(-1) > threshold
    if kind == 'pairs':  # A short distance says "the same".
      predicted = out.reshape(-1) < threshold
    return float(np.mean(predicted != (labels.reshape(-1) > 0.5)))
  return float(np.mean((out.reshape(len(out), -1) - labels.reshape(len(out), -1)) ** 2))


def evaluate(model, batches, kind: str, training: bool = False) -> float:
  """The mean task error of `model` over `batches` [(x, y), ...], in inference mode or, with
  `training`, in training mode (BatchNorm on the batch's statistics) through `stateless_call`,
  which changes no variable."""
  values = []
  for x, y in batches:
    if training:
      out, _ = model.stateless_call([v.value for v in model.trainable_variables],
                                    [v.value for v in model.non_trainable_variables], x,
                                    training=True)
    else:
      out = model(x, training=False)
    values.append(task_error(kind, tf.cast(out, tf.float32).numpy(), y))
  return float(np.mean(values))


def constant_error(kind: str, batches) -> float:
  """The task error of the best constant prediction on `batches`: the labels' variance for
  regression, the error of always answering the commonest class otherwise."""
  labels = np.concatenate([np.asarray(y, np.float64).reshape(len(y), -1) for _, y in batches])
  if kind == 'regression':
    return float(np.mean((labels - labels.mean(axis=0)) ** 2))
  if kind != 'classes':
    labels = labels > 0.5
  _, counts = np.unique(labels, return_counts=True)
  return float(1.0 - counts.max() / counts.sum())


def trained(before, after, constant) -> bool:
  """Whether the task error fell to `TRAINED_RATIO` x the lower of its untrained value and the
  best constant prediction's, in inference or in training mode (a BatchNorm net a hundred steps
  old still has its moving statistics near their start: it has trained, but only training mode
  shows it); inference outputs finite."""
  return bool(np.isfinite(after[0]) and any(
      np.isfinite(a) and a <= TRAINED_RATIO * min(b, constant) for b, a in zip(before, after)))


def policies_for(stack: str, door: str, jit: bool):
  """The policy list of a stack: 'default' (None: the front door's default stack) or
  'diagnostic' (the default stack + Forensics(recheck=True); not under XLA in fit)."""
  if stack == 'default' or (door == 'fit' and jit):
    return None
  return trainer_lib.default_policies() + [forensics.Forensics(recheck=True)]


def _train_trainer(case, setup, model_dir, policies) -> None:
  trainer = trainer_lib.Trainer(
      model=setup.model, optimizer=setup.optimizer, loss=setup.loss, policies=policies,
      model_dir=model_dir, steps_per_loop=10, log_every=10**6, jit_compile=case.jit,
      verbose=False, **CADENCE)
  trainer.fit(setup.data, num_steps=case.steps)


def _train_fit(case, setup, model_dir, policies) -> None:
  model = setup.model
  model.compile(optimizer=setup.optimizer, loss=setup.loss, jit_compile=case.jit)
  guard = stable_train.guard_fit(model, policies=policies)
  try:
    model.fit(setup.data, epochs=1, steps_per_epoch=case.steps, verbose=0,
              callbacks=[guard.callback(model_dir=model_dir, **CADENCE)])
  except errors.ConfigError:
    raise  # Refused before the first step: a result of its own (`run`).
  except errors.StableTrainError:
    pass  # RunAborted / NumericsError: summary.json has the status.


def _record(case, door, seed, summary, events, diagnosis) -> Dict[str, Any]:
  kinds = [e.get('event') for e in events]
  cause = diagnosis['cause']
  return {
      'name': case.name, 'door': door, 'seed': seed, 'split': case.split or 'healthy',
      'expected': case.expected, 'arch': case.arch, 'citation': case.citation,
      'precision': case.precision, 'jit': case.jit,
      'status': summary.get('status', 'no summary'), 'reason': summary.get('reason', ''),
      'global_step': summary.get('global_step'), 'skipped': summary.get('skipped_steps'),
      'rollbacks': kinds.count('rollback'), 'troubled': doctor.troubled(summary, events),
      'answer': cause,
      'confidence': diagnosis['confidence'] if cause else None,
      'evidence': diagnosis.get('evidence', [])[:3],
      'alternatives': diagnosis.get('alternatives', []),
      'right': (cause is None) if case.expected == 'healthy' else cause == case.expected,
  }


def run(case, door: str, seed: int, stack: str = 'default',
        keep: Optional[str] = None) -> Dict[str, Any]:
  """Trains one (case, door, seed) run in a temporary run directory (or one kept under `keep`,
  for `rediagnose`) and diagnoses it offline.

  Returns:
    A flat dict (JSON-ready): the case's name, door, seed, split, expected cause, status and
    reason, steps, skips and rollbacks, the doctor's answer, confidence, evidence and
    runners-up, 'right', the untrained and final task errors, 'trained', and seconds.
  """
  start = time.perf_counter()
  error = refused = None
  if keep:
    kept = os.path.join(keep, f'{case.name}.{door}.{seed}')
    shutil.rmtree(kept, ignore_errors=True)
    os.makedirs(kept)
  with (contextlib.nullcontext(kept) if keep else
        tempfile.TemporaryDirectory(prefix=f'calib_{case.name}_')) as model_dir:
    with precision_lib.using(case.precision):
      setup = case.build(seed)
      batches = [tf.nest.map_structure(lambda t: t.numpy(), b)  # Features may be nested.
                 for b in (setup.eval_data or setup.data).take(EVAL_BATCHES)]
      before = _errors(setup.model, batches, setup.kind)
      train = _train_trainer if door == 'trainer' else _train_fit
      try:
        train(case, setup, model_dir, policies_for(stack, door, case.jit))
      except errors.ConfigError as e:  # Refused before the first step, the cause in one line.
        refused = str(e).splitlines()[0][:300]
      except Exception as e:  # pylint: disable=broad-except  (a crash is a result too)
        error = f'{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ""}'
      after = _errors(setup.model, batches, setup.kind)
    events, summary, records, names = doctor.load(model_dir)
    diagnosis = doctor.diagnose(events, summary, records, names=names)
  result = _record(case, door, seed, summary, events, diagnosis)
  result['model_dir'] = kept if keep else None
  if error:
    result.update(status='crashed', reason=error)
  if refused:  # No doctor's answer to score: counted apart (report.sick_tables).
    result.update(status='refused', reason=refused, right=False)
  constant = constant_error(setup.kind, batches)
  result.update(error_before=before[0], error_after=after[0], train_error_before=before[1],
                train_error_after=after[1], constant_error=constant,
                trained=trained(before, after, constant),
                seconds=time.perf_counter() - start)
  del setup
  keras.backend.clear_session()
  gc.collect()
  return result


def _errors(model, batches, kind):
  """(inference-mode error, training-mode error) of `model` on `batches`."""
  return evaluate(model, batches, kind), evaluate(model, batches, kind, training=True)


def runs_of(case, doors=None):
  """The (door, seed) pairs of a case, its doors limited to `doors` (None: all)."""
  return [(d, s) for d in case.doors if doors is None or d in doors for s in case.seeds]


def rediagnose(result: Dict[str, Any]) -> Dict[str, Any]:
  """`result` with the doctor's answer read again from its kept run directory (the doctor of the
  code in front of you, on the records of the run as it was trained)."""
  events, summary, records, names = doctor.load(result['model_dir'])
  diagnosis = doctor.diagnose(events, summary, records, names=names)
  cause = diagnosis['cause']
  return dict(result, answer=cause, confidence=diagnosis['confidence'] if cause else None,
              evidence=diagnosis.get('evidence', [])[:3],
              alternatives=diagnosis.get('alternatives', []),
              troubled=doctor.troubled(summary, events),
              right=(cause is None) if result['expected'] == 'healthy' else
              cause == result['expected'])
