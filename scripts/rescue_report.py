#!/usr/bin/env python3
"""Rescue report: an unstable suite run as Keras fit, Keras fit + stable_train and three
stable_train stacks.

    python scripts/rescue_report.py [--steps=300] [--cases=lr_too_high,nan_inf_data]
        [--ways='keras fit + stable_train,stable_train']

Each case is a small MLP on seeded synthetic data made unstable one way; each is trained with
  - Keras `fit` with `global_clipnorm=1.0` and `TerminateOnNaN` (the usual first defence),
  - the same Keras `fit` (no clipnorm) guarded by stable_train (`guard_fit`: the default stack),
  - stable_train's default stack (CheckNumerics, AdaptiveClip, SkipNonFinite, DivergenceCheck),
  - the default stack + Rollback (the ladder: rollback, learning-rate backoff until stable),
  - the recovery stack: the default stack + OutlierSkip + LossSpike + Rollback,
and the final model is evaluated on clean data of the same task. The clean case of each task is
the reference for the ratio column; the status is the run's (CLI exit 1 for aborted and
diverged) and the diagnosis the doctor's first answer (summary.json). Prints a Markdown table
(docs/speed.md).
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import keras  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from stable_train.core import losses  # pylint: disable=g-import-not-at-top
from stable_train import errors  # pylint: disable=g-import-not-at-top
from stable_train.keras import fit as keras_fit  # pylint: disable=g-import-not-at-top
from stable_train.policies import outliers  # pylint: disable=g-import-not-at-top
from stable_train.policies import precision  # pylint: disable=g-import-not-at-top
from stable_train.policies import recovery  # pylint: disable=g-import-not-at-top
from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
from stable_train.zoo import models  # pylint: disable=g-import-not-at-top

FEATURES = 64
REGRESSION = dict(num_features=FEATURES, num_examples=2048)
CLASSIFICATION = dict(num_features=FEATURES, num_classes=8, num_examples=2048)


def _regression(**kwargs):
  return data.synthetic_regression(**dict(REGRESSION, **kwargs))


def _classification(**kwargs):
  return data.synthetic_classification(**dict(CLASSIFICATION, **kwargs))


# name: (task, dataset factory, optimizer factory, training loss, initial-weight scale, what).
# Cases in FP16 run under train.precision = 'mixed_float16' (Keras fit: the same global policy,
# which makes compile() wrap the optimizer in a LossScaleOptimizer).
FP16 = ('fp16_overflow',)
CASES = {
    'clean_regression': ('regression', _regression, lambda: ('adam', 1e-3), 'mse', 1.0,
                         'reference'),
    'lr_too_high': ('regression', _regression, lambda: ('sgd', 1.5), 'mse', 1.0,
                    'plain SGD at lr 1.5'),
    'nan_inf_data': ('regression', lambda: _regression(poison_batches=list(range(100, 300, 25))),
                     lambda: ('adam', 1e-3), 'mse', 1.0, '8 batches with a NaN feature'),
    'bad_init_x100': ('regression', _regression, lambda: ('adam', 1e-3), 'mse', 100.0,
                      'every initial weight ×100'),
    'corrupt_stretch': ('regression',
                        lambda: _regression(poison_batches=list(range(150, 190)),
                                            poison_value=1e4),
                        lambda: ('adam', 1e-3), 'mse', 1.0, 'batches 150-189: a feature = 1e4'),
    'fp16_overflow': ('regression',
                      lambda: _regression(poison_batches=list(range(100, 300, 25)),
                                          poison_value=1e5),
                      lambda: ('adam', 1e-3), 'mse', 1.0,
                      'mixed_float16; 8 batches with a feature = 1e5 (inf in float16)'),
    'clean_classification': ('classification', _classification, lambda: ('sgd', 0.5), 'stable_ce',
                             1.0, 'reference'),
    'log0_naive_loss': ('classification', lambda: _classification(scale=30.0),
                        lambda: ('sgd', 0.5), 'naive_ce', 1.0,
                        'naive -log(softmax), inputs ×30'),
}


def _optimizer(spec, clip):
  kind, lr = spec
  kwargs = {'global_clipnorm': 1.0} if clip else {}
  if kind == 'sgd':
    return keras.optimizers.SGD(lr, **kwargs)
  return keras.optimizers.Adam(lr, **kwargs)


def _loss(name):
  return {'mse': keras.losses.MeanSquaredError(), 'stable_ce': losses.sparse_softmax_cross_entropy,
          'naive_ce': losses.naive_softmax_cross_entropy}[name]


def _model(task, scale):
  model = models.mlp(input_dim=FEATURES, hidden=(64, 32),
                     outputs=1 if task == 'regression' else CLASSIFICATION['num_classes'])
  if scale != 1.0:
    for v in model.trainable_variables:
      v.assign(v * scale)
  return model


def _finite(model):
  return all(np.isfinite(v.numpy()).all() for v in model.variables)


def _evaluate(task, model):
  """Mean loss on 20 clean batches of the task (its stable loss), or nan for a broken model."""
  if not _finite(model):
    return float('nan')
  clean = (_regression() if task == 'regression' else _classification()).take(20)
  loss = _loss('mse' if task == 'regression' else 'stable_ce')
  values = [float(loss(y, model(x, training=False))) for x, y in clean]
  return float(np.mean(values))


def _keras_fit(case, steps):
  task, dataset_fn, opt, loss, scale, _ = case
  model = _model(task, scale)
  model.compile(optimizer=_optimizer(opt(), clip=True), loss=_loss(loss))
  start = time.perf_counter()
  with contextlib.redirect_stdout(sys.stderr):  # TerminateOnNaN prints; keep stdout the table.
    history = model.fit(dataset_fn(), epochs=1, steps_per_epoch=steps, verbose=0,
                        callbacks=[keras.callbacks.TerminateOnNaN()])
  seconds = time.perf_counter() - start
  terminated = len(history.history.get('loss', [])) == 0 or not np.isfinite(
      history.history['loss'][-1]) or model.stop_training
  return dict(status='stopped' if terminated else 'completed', finite=_finite(model),
              loss=_evaluate(task, model), skips=None, rollbacks=None, seconds=seconds,
              diagnosis=None)


def _keras_fit_guarded(case, steps):
  """The same Keras fit, unclipped, guarded by stable_train's default stack (`guard_fit`), its
  callback writing to a model_dir (the doctor's diagnosis, as the Trainer's runs)."""
  task, dataset_fn, opt, loss, scale, _ = case
  model = _model(task, scale)
  model.compile(optimizer=_optimizer(opt(), clip=False), loss=_loss(loss))
  guard = keras_fit.guard_fit(model)
  with tempfile.TemporaryDirectory() as model_dir:
    callback = guard.callback(model_dir=model_dir, checkpoint_every=50, healthy_window=20)
    start = time.perf_counter()
    try:
      model.fit(dataset_fn(), epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[callback])
    except errors.RunAborted:  # A skip-streak limit or a divergence: the summary says which.
      pass
    seconds = time.perf_counter() - start
  summary = callback.last_summary
  return dict(status=summary['status'], finite=_finite(model), loss=_evaluate(task, model),
              skips=summary['skipped_steps'], rollbacks=None, seconds=seconds,
              diagnosis=(summary.get('diagnosis') or {}).get('cause'))


def _stack(way):
  stack = trainer_lib.default_policies()
  if way == 'recovery':
    stack += [outliers.OutlierSkip(), recovery.LossSpike(min_ratio=10.0)]
  if way in ('rollback', 'recovery'):
    stack.append(recovery.Rollback())
  return stack


def _stable_train(case, steps, way):
  task, dataset_fn, opt, loss, scale, _ = case
  model = _model(task, scale)
  with tempfile.TemporaryDirectory() as model_dir:
    trainer = trainer_lib.Trainer(model=model, optimizer=_optimizer(opt(), clip=False),
                                  loss=_loss(loss), policies=_stack(way), model_dir=model_dir,
                                  steps_per_loop=10, checkpoint_every=50, healthy_window=20,
                                  log_every=10**6)
    start = time.perf_counter()
    summary = trainer.fit(dataset_fn(), num_steps=steps)
    seconds = time.perf_counter() - start
  diagnosis = summary.get('diagnosis') or {}
  return dict(status=summary['status'], finite=_finite(model), loss=_evaluate(task, model),
              skips=summary['skipped_steps'], rollbacks=summary.get('rollbacks'),
              seconds=seconds, diagnosis=diagnosis.get('cause'))


WAYS = {'keras fit': lambda c, steps: _keras_fit(c, steps),
        'keras fit + stable_train': lambda c, steps: _keras_fit_guarded(c, steps),
        'stable_train': lambda c, steps: _stable_train(c, steps, 'default'),
        '+ Rollback': lambda c, steps: _stable_train(c, steps, 'rollback'),
        '+ recovery': lambda c, steps: _stable_train(c, steps, 'recovery')}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--steps', type=int, default=300)
  parser.add_argument('--cases', default=','.join(CASES))
  parser.add_argument('--ways', default=','.join(WAYS), help='a comma-separated subset of: '
                      + ', '.join(WAYS))
  args = parser.parse_args()
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('stable_train').setLevel(logging.ERROR)
  tf.get_logger().setLevel('ERROR')  # Each case's new Trainer traces its own functions.
  tf.config.experimental.enable_op_determinism()
  names = args.cases.split(',')
  ways = {w: WAYS[w] for w in args.ways.split(',')}
  results = {}
  for name in names:
    case = CASES[name]
    for way, run in ways.items():
      with precision.using('mixed_float16' if name in FP16 else 'float32'):
        results[name, way] = run(case, args.steps)
      print(f'{name:22s} {way:24s} {results[name, way]}', file=sys.stderr, flush=True)
  reference = {CASES[n][0]: n for n in CASES if n.startswith('clean_')}
  print(f'\n{args.steps} steps each; final loss = mean loss on 20 clean batches of the task; '
        'ratio = final loss / the clean run of the same task and way; keras fit + stable_train = '
        '`guard_fit` (the default stack) in an unclipped fit, with a model_dir; + Rollback = the '
        'default stack + Rollback(); + recovery = the default stack + OutlierSkip + LossSpike + '
        'Rollback.\n')
  print('| case | what | way | status | final loss | ratio to clean | skips | rollbacks | '
        'diagnosis | wall s |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |')
  for (name, way), r in results.items():
    ref = results.get((reference[CASES[name][0]], way))
    ratio = (r['loss'] / ref['loss'] if ref and np.isfinite(r['loss']) and ref['loss'] > 0
             else float('nan'))
    fmt = lambda v: '—' if v is None else str(v)
    status = r['status'] + ('' if r['finite'] else ', NaN weights')
    print(f"| {name} | {CASES[name][5]} | {way} | {status} | "
          f"{r['loss']:.4g} | {ratio:.3g} | {fmt(r['skips'])} | {fmt(r['rollbacks'])} | "
          f"{fmt(r['diagnosis'])} | {r['seconds']:.1f} |")


if __name__ == '__main__':
  main()
