#!/usr/bin/env python3
"""Healthy runs are unchanged by the default stack: every shipped config and the zoo, against a
bare step, with the stack's detectors watching.

    python scripts/healthy_runs.py [--steps=600] [--configs=quickstart,warmup] [--zoo=mlp,lstm]

Each shipped config runs in-process as the CLI would (its gin file, `train.num_steps` lowered to
`--steps`, no export), once as shipped (its policies with DivergenceCheck added when it lists its
own) and once with `Trainer.policies = []` (bare); configs that inject faults on purpose have no
bare twin and are compared with the same policies without DivergenceCheck. The zoo (MLP,
BatchNorm convnet, transformer, LSTM, the MLP in mixed_float16) trains with `default_policies()`
and bare. The final loss is the mean loss of the final model on 10 fixed batches in inference
mode; the last column lists the rollback, divergence_check, diverged, outliers and abort events
of each run. Prints a Markdown table (docs/speed.md).
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import gin  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Configs that fail on purpose (a showcase of a fault) or need their own process.
FAULTY = ('convnet_bn', 'init_check', 'unstable_softmax', 'unstable_spike')
SKIPPED = {'distributed_mirrored': 'MirroredStrategy: run in a process of its own (tests)'}
TRIGGERS = ('rollback', 'divergence_check', 'diverged', 'outliers', 'abort')


def _events(model_dir):
  from stable_train.runfiles import events  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_dir, 'events.jsonl')
  return events.read_events(path) if os.path.exists(path) else []


def _final_loss(trainer, dataset, loss_fn):
  batches = list(dataset.take(10))
  values = []
  for batch in batches:
    features, labels = trainer.split_batch(batch)
    values.append(float(loss_fn(labels, trainer.model(features, training=False))))
  return float(np.mean(values))


OLD_DEFAULT = '[@CheckNumerics(), @AdaptiveClip(), @SkipNonFinite()]'


def _policies_binding(kind):
  """The `Trainer.policies` binding of a run: 'bare' ([]), 'old' (the config's list, or the
  default stack, without DivergenceCheck) or 'shipped' (with it); None keeps the config's."""
  if kind == 'bare':
    return 'Trainer.policies = []'
  if not _bound('Trainer.policies'):
    return f'Trainer.policies = {OLD_DEFAULT}' if kind == 'old' else None
  listed = [repr(r) for r in gin.query_parameter('Trainer.policies')]
  listed = [r for r in listed if 'DivergenceCheck' not in r]
  if kind == 'shipped':
    listed.append('@DivergenceCheck()')
  return f"Trainer.policies = [{', '.join(listed)}]"


def run_config(name, steps, kind):
  """Trains configs/<name>.gin in-process as the CLI would; `kind`: 'shipped', 'bare' or 'old'
  (see `_policies_binding`). Returns (final loss, status, triggers)."""
  from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
  from stable_train.app import job  # pylint: disable=g-import-not-at-top
  from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  kept = {}

  class Keeper(trainer_lib.Trainer):
    def __init__(self, **kwargs):
      super().__init__(**kwargs)
      kept['trainer'] = self

  path = os.path.join(ROOT, 'configs', name + '.gin')
  bindings = [f'train.num_steps = {steps}', 'train.export_format = None']
  for extra in ([], None):
    gin.clear_config()
    for folder in (os.path.join(ROOT, 'configs'), ROOT):
      gin.add_config_file_search_path(folder)
    gin.parse_config_files_and_bindings([path], bindings + (extra or []), skip_unknown=False)
    if extra is None:
      break
    policies = _policies_binding(kind)
    if policies is None:
      break
    bindings.append(policies)
  with gin.unlock_config():
    gin.bind_parameter('train.trainer_fn', Keeper)
  with tempfile.TemporaryDirectory() as model_dir:
    summary = job.train(model_dir=model_dir)
    t = kept['trainer']
    loss = _final_loss(t, t.dataset, t.loss_fn)
    triggers = sorted({e['event'] for e in _events(model_dir) if e['event'] in TRIGGERS})
  return loss, summary['status'], triggers


def _bound(name):
  try:
    gin.query_parameter(name)
    return True
  except ValueError:
    return False


def _divergence():
  from stable_train.policies import divergence  # pylint: disable=g-import-not-at-top
  return divergence.DivergenceCheck()


def run_zoo(name, steps, bare):
  """Trains one zoo model with default_policies() or bare; (final loss, status, triggers)."""
  import keras  # pylint: disable=g-import-not-at-top
  from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
  from stable_train.core import losses
  from stable_train.zoo import models
  from stable_train.policies import precision
  from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  kind = name.replace('_fp16', '')
  model_fn, data_fn, loss = {
      'mlp': (models.mlp, data.synthetic_regression, keras.losses.MeanSquaredError()),
      'convnet': (models.convnet_bn, data.synthetic_images, losses.sparse_softmax_cross_entropy),
      'transformer': (models.transformer, data.synthetic_sequences,
                      losses.sparse_softmax_cross_entropy),
      'lstm': (models.lstm, data.synthetic_sequences, losses.sparse_softmax_cross_entropy)}[kind]
  with precision.using('mixed_float16' if name.endswith('_fp16') else 'float32'):
    model = model_fn(seed=0)
    with tempfile.TemporaryDirectory() as model_dir:
      t = trainer_lib.Trainer(model=model, optimizer=keras.optimizers.Adam(1e-3), loss=loss,
                              policies=[] if bare else None, model_dir=model_dir,
                              steps_per_loop=10, verbose=False)
      summary = t.fit(data_fn(), num_steps=steps)
      triggers = sorted({e['event'] for e in _events(model_dir) if e['event'] in TRIGGERS})
      return _final_loss(t, data_fn(), loss), summary['status'], triggers


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--steps', type=int, default=600)
  names = sorted(f[:-4] for f in os.listdir(os.path.join(ROOT, 'configs')) if f.endswith('.gin'))
  parser.add_argument('--configs', default=','.join(n for n in names if n not in SKIPPED))
  parser.add_argument('--zoo', default='mlp,convnet,transformer,lstm,mlp_fp16')
  args = parser.parse_args()
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('stable_train').setLevel(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')
  print(f'{args.steps} steps each; final loss = mean loss of the final model on 10 fixed batches '
        '(inference mode); ratio = with the stack / reference.\n')
  print('| run | reference | with the stack | reference loss | loss | ratio | status | '
        'events (reference / with the stack) |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- |')
  rows = []
  for name in [n for n in args.configs.split(',') if n]:
    ref_kind = 'old' if name in FAULTY else 'bare'
    ref = run_config(name, args.steps, ref_kind)
    new = run_config(name, args.steps, 'shipped')
    rows.append((f'configs/{name}.gin', 'same policies, no DivergenceCheck' if ref_kind == 'old'
                 else 'bare step', 'as shipped + DivergenceCheck', ref, new))
  for name in [n for n in args.zoo.split(',') if n]:
    rows.append((f'zoo {name}', 'bare step', 'default_policies()', run_zoo(name, args.steps, True),
                 run_zoo(name, args.steps, False)))
  for run, ref_name, new_name, ref, new in rows:
    print(f'| {run} | {ref_name} | {new_name} | {ref[0]:.5g} | {new[0]:.5g} | '
          f'{new[0] / ref[0]:.3f} | {new[1]} | {", ".join(ref[2]) or "none"} / '
          f'{", ".join(new[2]) or "none"} |', flush=True)
  for name, why in SKIPPED.items():
    print(f'| configs/{name}.gin | skipped: {why} | | | | | | |')


if __name__ == '__main__':
  main()
