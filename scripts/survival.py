#!/usr/bin/env python3
"""The survival benchmark: a learning-rate sweep, three ways of training, how many runs end well.

    python scripts/survival.py                          # about 25 min on 2 loaded CPU cores
    python scripts/survival.py --grid=x10 --precisions=float32,mixed_float16 --steps=300

For each architecture (a small MLP on regression, the BatchNorm + Dropout convnet, the
transformer), precision and optimizer (Adam over --adam, plain SGD over --sgd, each rate x3.16
the last; --grid=x10 steps by x10), each way trains a fresh seed-0 model for --steps steps:
  keras     Keras `fit` + TerminateOnNaN (compile defaults, no clipping);
  default   stable_train's default stack (`default_policies()`);
  rollback  the default stack + Rollback().
The final loss is the mean loss of the model as the run left it on 10 fixed batches (inference
mode; NaN for a non-finite model). A run is usable when it ends within 2x of the best final loss
of its (architecture, precision, optimizer) sweep; a way's usable range is the widest band of
adjacent usable rates, as hi/lo. Prints one line per run, then Markdown tables (docs/speed.md).
"""

import argparse
import contextlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import keras  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from stable_train.policies import precision as precision_lib  # pylint: disable=g-import-not-at-top
from stable_train.policies import recovery  # pylint: disable=g-import-not-at-top
from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
from stable_train.zoo import models  # pylint: disable=g-import-not-at-top

WAYS = ('keras', 'default', 'rollback')
ARCHS = {
    'mlp': (lambda: models.mlp(input_dim=32, hidden=(64, 32), outputs=1),
            lambda: data.synthetic_regression(num_features=32, num_examples=1024), 'mse'),
    'convnet': (lambda: models.convnet_bn(image_shape=(8, 8, 3), num_classes=8, filters=(8, 16)),
                lambda: data.synthetic_images(image_shape=(8, 8, 3), num_classes=8,
                                              num_examples=512), 'ce'),
    'transformer': (lambda: models.transformer(vocab_size=32, seq_len=8, dim=16, heads=2, ffn=32,
                                               num_classes=8),
                    lambda: data.synthetic_sequences(seq_len=8, vocab_size=32, num_classes=8),
                    'ce'),
}


def _loss(kind):
  if kind == 'mse':
    return keras.losses.MeanSquaredError()
  return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _grid(low, high, grid):
  step = 10.0 if grid == 'x10' else 10.0**0.5
  n = int(round(np.log(high / low) / np.log(step)))
  return [float(f'{low * step**i:.3g}') for i in range(n + 1)]


def _final(model, dataset, loss):
  if not all(np.isfinite(v.numpy()).all() for v in model.variables):
    return float('nan')
  values = [float(loss(y, model(x, training=False))) for x, y in dataset.take(10)]
  return float(np.mean(values)) if np.all(np.isfinite(values)) else float('nan')


def run(arch, precision, optimizer, lr, way, steps):
  """One run: (final loss, status)."""
  model_fn, data_fn, loss_kind = ARCHS[arch]
  with precision_lib.using(precision):
    keras.utils.set_random_seed(0)
    model = model_fn()
    opt = keras.optimizers.SGD(lr) if optimizer == 'sgd' else keras.optimizers.Adam(lr)
    loss = _loss(loss_kind)
    if way == 'keras':
      model.compile(optimizer=opt, loss=loss)
      with contextlib.redirect_stdout(sys.stderr):  # TerminateOnNaN prints.
        history = model.fit(data_fn(), epochs=1, steps_per_epoch=steps, verbose=0,
                            callbacks=[keras.callbacks.TerminateOnNaN()])
      losses = history.history.get('loss', [])
      status = 'stopped' if model.stop_training or not losses or not np.isfinite(losses[-1]) \
          else 'completed'
      return _final(model, data_fn(), loss), status
    policies = trainer_lib.default_policies()
    if way == 'rollback':
      policies.append(recovery.Rollback())
    with tempfile.TemporaryDirectory() as model_dir:
      t = trainer_lib.Trainer(model=model, optimizer=opt, loss=loss, policies=policies,
                              model_dir=model_dir, steps_per_loop=10, checkpoint_every=50,
                              healthy_window=20, verbose=False)
      summary = t.fit(data_fn(), num_steps=steps)
    return _final(model, data_fn(), loss), summary['status']


def widest(usable):
  """The widest band of adjacent usable rates, (lo, hi), or None."""
  best, start = None, None
  for i, (lr, ok) in enumerate(usable + [(None, False)]):
    if ok and start is None:
      start = i
    if not ok and start is not None:
      lo, hi = usable[start][0], usable[i - 1][0]
      if best is None or hi / lo > best[1] / best[0]:
        best = (lo, hi)
      start = None
  return best


def _tables(results, ways):
  print('\n| architecture | precision | optimizer | best loss | way | usable runs | usable range '
        '(lo-hi, width) |')
  print('| --- | --- | --- | --- | --- | --- | --- |')
  widths = {}
  for (arch, prec, opt) in sorted({k[:3] for k in results}):
    rows = {k: v for k, v in results.items() if k[:3] == (arch, prec, opt)}
    best = np.nanmin([v[0] for v in rows.values()])
    for way in ways:
      runs = sorted((k[3], v[0]) for k, v in rows.items() if k[4] == way)
      usable = [(lr, bool(np.isfinite(f) and f <= 2 * best)) for lr, f in runs]
      band = widest(usable)
      width = band[1] / band[0] if band else 0.0
      widths[arch, prec, opt, way] = width
      shown = f'{band[0]:g}-{band[1]:g} ({width:g}x)' if band else 'none'
      print(f'| {arch} | {prec} | {opt} | {best:.4g} | {way} | '
            f'{sum(ok for _, ok in usable)}/{len(usable)} | {shown} |')
  print('\nwidth ratio default / keras (>= 10 is the target), per architecture and optimizer:')
  for (arch, prec, opt, way), width in sorted(widths.items()):
    if way == 'default':
      keras_width = widths.get((arch, prec, opt, 'keras'), 0.0)
      ratio = width / keras_width if keras_width else float('inf')
      print(f'  {arch} {prec} {opt}: {ratio:g}')


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--archs', default=','.join(ARCHS))
  parser.add_argument('--precisions', default='float32')
  parser.add_argument('--ways', default=','.join(WAYS))
  parser.add_argument('--adam', default='1e-4,1', help='lowest,highest Adam rate')
  parser.add_argument('--sgd', default='1e-3,10', help='lowest,highest SGD rate')
  parser.add_argument('--grid', choices=('x10', 'sqrt10'), default='sqrt10')
  parser.add_argument('--steps', type=int, default=150)
  args = parser.parse_args()
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('stable_train').setLevel(logging.ERROR)
  tf.get_logger().setLevel('ERROR')
  ways = args.ways.split(',')
  results = {}
  for arch in args.archs.split(','):
    for prec in args.precisions.split(','):
      for opt in ('adam', 'sgd'):
        low, high = (float(v) for v in getattr(args, opt).split(','))
        for lr in _grid(low, high, args.grid):
          for way in ways:
            results[arch, prec, opt, lr, way] = run(arch, prec, opt, lr, way, args.steps)
            final, status = results[arch, prec, opt, lr, way]
            print(f'{arch} {prec} {opt} {lr:g} {way}: {status} final {final:.4g}',
                  file=sys.stderr, flush=True)
  print(f'{args.steps} steps per run; final loss on 10 fixed batches; usable: within 2x of the '
        'best final loss of its sweep.')
  _tables(results, ways)


if __name__ == '__main__':
  main()
