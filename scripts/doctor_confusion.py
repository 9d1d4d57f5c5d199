#!/usr/bin/env python3
"""The doctor's confusion table: seeded scenarios of each cause, and healthy runs, diagnosed.

    python scripts/doctor_confusion.py [--stacks=diagnostic,default] [--only=NAME,...]

Each scenario trains a small model (MLP, BatchNorm convnet, transformer) made to fail one way,
with a model_dir, then runs the doctor offline on that directory (`doctor.load` + `diagnose`,
what scripts/doctor.py prints). Stacks: 'default' is `default_policies()`; 'diagnostic' adds
`Forensics(recheck=True)` (the op, the batch and a re-run verdict in the records). How each
cause is produced (the doctor reads none of it; injected faults are never read):
  learning_rate        a rate far too high for the model (plain SGD, or Adam)
  exploding_gradients  the backward pass through the outputs gains x4 per applied step after
                       step 30 (forward unchanged): the chain rule of an unstable deep path
  initialisation       every initial weight x100 (normalisation layers' scales included)
  division_or_log      log of a softmax that underflows; |y - p| / |y| with zero labels; a
                       masked mean over an empty mask
  softmax_overflow     -log(exp(x) / sum(exp(x))) on logits of large inputs, or at temperature
                       0.01
  precision            mixed_float16 with inputs or activations beyond float16's 65504
  bad_input            NaN batches, a stretch of outlier batches (a feature = 1e4)
  transient            one NaN/Inf loss or gradient at one step (a Faults plan), never again
  (healthy)            the same models trained well: the doctor must not name a cause confidently
Prints one line per run and Markdown tables (for docs/doctor.md).
"""

import argparse
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
from stable_train.doctor import doctor  # pylint: disable=g-import-not-at-top
from stable_train.forensics import forensics  # pylint: disable=g-import-not-at-top
from stable_train.policies import precision as precision_lib  # pylint: disable=g-import-not-at-top
from stable_train.testing import faults as faults_lib  # pylint: disable=g-import-not-at-top
from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
from stable_train.zoo import data  # pylint: disable=g-import-not-at-top
from stable_train.zoo import models  # pylint: disable=g-import-not-at-top

F, C = 32, 8  # Features and classes of the small tasks.


def _regression(seed=0, **kw):
  return data.synthetic_regression(num_features=F, num_examples=1024, seed=seed, **kw)


def _classification(seed=0, **kw):
  return data.synthetic_classification(num_features=F, num_classes=C, num_examples=1024,
                                       seed=seed, **kw)


def _images(seed=0, **kw):
  return data.synthetic_images(image_shape=(8, 8, 3), num_classes=C, num_examples=512, seed=seed,
                               **kw)


def _sequences(seed=0):
  return data.synthetic_sequences(seq_len=8, vocab_size=32, num_classes=C, seed=seed)


ARCHS = {
    'mlp': lambda seed: models.mlp(input_dim=F, hidden=(32, 16), outputs=1, seed=seed),
    'mlp_cls': lambda seed: models.mlp(input_dim=F, hidden=(32, 16), outputs=C, seed=seed),
    'convnet': lambda seed: models.convnet_bn(image_shape=(8, 8, 3), num_classes=C,
                                              filters=(8, 16), dropout=0.1, seed=seed),
    'transformer': lambda seed: models.transformer(vocab_size=32, seq_len=8, dim=16, heads=2,
                                                   ffn=32, num_classes=C, seed=seed),
    'lstm': lambda seed: models.lstm(vocab_size=32, seq_len=8, units=16, num_classes=C,
                                     seed=seed),
}
DATA = {'mlp': _regression, 'mlp_cls': _classification, 'convnet': _images,
        'transformer': _sequences, 'lstm': _sequences}
CE = losses.sparse_softmax_cross_entropy
MSE = keras.losses.MeanSquaredError()


def _scaled(dataset, factor):
  return dataset.map(lambda x, y: (x * factor, y))


def _scale_weights(model, factor, only=None):
  for v in model.trainable_variables:
    if only is None or only in v.path:
      v.assign(v * factor)
  return model


def log_of_softmax(labels, logits):
  """-log(softmax(x)) as log(tf.nn.softmax(x)): a probability that underflows gives log(0)."""
  probs = tf.nn.softmax(tf.cast(logits, tf.float32))
  picked = tf.gather(probs, tf.cast(tf.reshape(labels, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked))


def sharpened_naive_ce(labels, logits):
  """The naive -log(exp(x) / sum(exp(x))) at temperature 0.01: exp(100 x) overflows."""
  return losses.naive_softmax_cross_entropy(labels, 100.0 * tf.cast(logits, tf.float32))


def relative_error(labels, predictions):
  """mean |y - p| / |y|: a zero label divides by zero."""
  labels = tf.cast(labels, tf.float32)
  return tf.reduce_mean(tf.abs(labels - tf.cast(predictions, tf.float32)) / tf.abs(labels))


def masked_class0_ce(labels, logits):
  """The cross-entropy of the class-0 examples among the first 4 of a batch, averaged over how
  many there are: a batch without one divides by zero."""
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.cast(tf.reshape(labels, [-1]), tf.int32), logits=tf.cast(logits, tf.float32))
  mask = tf.cast(tf.equal(tf.reshape(labels, [-1])[:4], 0), tf.float32)
  return tf.reduce_sum(ce[:4] * mask) / tf.reduce_sum(mask)


def _zero_labels(dataset):
  return dataset.map(lambda x, y: (x, tf.where(tf.abs(y) < 0.05, tf.zeros_like(y), y)))


class _Iterations:
  """Holds the optimizer's iteration count for the gain, out of Keras's tracking."""
  variable = None


def exploding(loss_fn, holder, start=30, doublings=2.0):
  """`loss_fn` whose gradients through the predictions gain 2**doublings per applied step after
  `start` (the forward pass is unchanged)."""

  @tf.custom_gradient
  def gain(p):
    def grad(dy):
      k = tf.maximum(tf.cast(holder.variable, tf.float32) - start, 0.0)
      return dy * tf.cast(tf.pow(2.0, doublings * k), dy.dtype)
    return tf.identity(p), grad

  return lambda y, p: loss_fn(y, gain(p))


def _opt(kind, lr):
  return keras.optimizers.SGD(lr) if kind == 'sgd' else keras.optimizers.Adam(lr)


# name: (cause or 'healthy', arch, seed, optimizer spec, loss, dataset fn, options).
# options: precision, weights (x factor, layer substring), faults (Faults kwargs), gain (True),
# steps.
SCENARIOS = {
    'lr_mlp_sgd': ('learning_rate', 'mlp', 0, ('sgd', 1.5), MSE, None, {}),
    'lr_mlp_sgd_s1': ('learning_rate', 'mlp', 1, ('sgd', 3.0), MSE, None, {}),
    'lr_mlp_cls_sgd': ('learning_rate', 'mlp_cls', 0, ('sgd', 30.0), CE, None, {}),
    'lr_convnet_sgd': ('learning_rate', 'convnet', 0, ('sgd', 100.0), CE, None, {}),
    'lr_transformer_adam': ('learning_rate', 'transformer', 0, ('adam', 1.0), CE, None, {}),
    'grad_mlp': ('exploding_gradients', 'mlp', 0, ('adam', 1e-3), MSE, None, {'gain': True}),
    'grad_mlp_cls': ('exploding_gradients', 'mlp_cls', 1, ('sgd', 0.1), CE, None,
                     {'gain': True}),
    'grad_convnet': ('exploding_gradients', 'convnet', 0, ('adam', 1e-3), CE, None,
                     {'gain': True}),
    'grad_transformer': ('exploding_gradients', 'transformer', 0, ('adam', 1e-3), CE, None,
                         {'gain': True}),
    'init_mlp': ('initialisation', 'mlp', 0, ('adam', 1e-3), MSE, None, {'weights': (100.0,)}),
    'init_mlp_cls': ('initialisation', 'mlp_cls', 0, ('adam', 1e-3), CE, None,
                     {'weights': (100.0,)}),
    'init_convnet': ('initialisation', 'convnet', 0, ('adam', 1e-3), CE, None,
                     {'weights': (100.0,)}),
    'init_transformer': ('initialisation', 'transformer', 0, ('adam', 1e-3), CE, None,
                         {'weights': (100.0,)}),
    'div_mlp_cls_log': ('division_or_log', 'mlp_cls', 0, ('sgd', 0.1), log_of_softmax,
                        lambda seed: _classification(seed, scale=30.0), {}),
    'div_mlp_relative': ('division_or_log', 'mlp', 0, ('adam', 1e-3), relative_error,
                         lambda seed: _zero_labels(_regression(seed)), {}),
    'div_convnet_mask': ('division_or_log', 'convnet', 0, ('adam', 1e-3), masked_class0_ce, None,
                         {}),
    'div_transformer_mask': ('division_or_log', 'transformer', 0, ('adam', 1e-3),
                             masked_class0_ce, None, {}),
    'exp_mlp_cls': ('softmax_overflow', 'mlp_cls', 0, ('sgd', 0.5),
                    losses.naive_softmax_cross_entropy, lambda seed: _classification(seed, scale=30.0), {}),
    'exp_mlp_cls_s1': ('softmax_overflow', 'mlp_cls', 1, ('adam', 1e-3),
                       losses.naive_softmax_cross_entropy,
                       lambda seed: _classification(seed, scale=50.0), {}),
    'exp_convnet': ('softmax_overflow', 'convnet', 0, ('adam', 1e-3), sharpened_naive_ce, None,
                    {}),
    'exp_transformer': ('softmax_overflow', 'transformer', 0, ('adam', 1e-3), sharpened_naive_ce,
                        None, {}),
    'fp16_mlp': ('precision', 'mlp', 0, ('adam', 1e-3), MSE, lambda seed: _scaled(_regression(seed), 3e4),
                 {'precision': 'mixed_float16'}),
    'fp16_mlp_cls': ('precision', 'mlp_cls', 0, ('adam', 1e-3), CE,
                     lambda seed: _scaled(_classification(seed), 3e4), {'precision': 'mixed_float16'}),
    'fp16_convnet': ('precision', 'convnet', 0, ('adam', 1e-3), CE,
                     lambda seed: _scaled(_images(seed), 1e5), {'precision': 'mixed_float16'}),
    'input_mlp_nan': ('bad_input', 'mlp', 0, ('adam', 1e-3), MSE,
                      lambda seed: _regression(seed, poison_batches=list(range(60, 160, 20))), {}),
    'input_mlp_stretch': ('bad_input', 'mlp', 0, ('adam', 1e-3), MSE,
                          lambda seed: _regression(seed, poison_batches=list(range(80, 120)),
                                                   poison_value=1e4), {}),
    'input_convnet_nan': ('bad_input', 'convnet', 0, ('adam', 1e-3), CE,
                          lambda seed: _images(seed, poison_batches=[50, 51, 52, 90]), {}),
    'transient_mlp': ('transient', 'mlp', 0, ('adam', 1e-3), MSE, None,
                      {'faults': {'loss_nan_steps': [60]}}),
    'transient_convnet': ('transient', 'convnet', 0, ('adam', 1e-3), CE, None,
                          {'faults': {'gradient_nan_steps': [50],
                                      'gradient_variable': 'conv_1/kernel'}}),
    'transient_transformer': ('transient', 'transformer', 0, ('adam', 1e-3), CE, None,
                              {'faults': {'loss_inf_steps': [40]}}),
    'healthy_mlp': ('healthy', 'mlp', 0, ('adam', 1e-3), MSE, None, {}),
    'healthy_mlp_cls': ('healthy', 'mlp_cls', 0, ('sgd', 0.1), CE, None, {}),
    'healthy_convnet': ('healthy', 'convnet', 0, ('adam', 1e-3), CE, None, {}),
    'healthy_transformer': ('healthy', 'transformer', 0, ('adam', 1e-3), CE, None, {}),
    'healthy_lstm': ('healthy', 'lstm', 0, ('adam', 1e-3), CE, None, {}),
    'healthy_mlp_fp16': ('healthy', 'mlp', 0, ('adam', 1e-3), MSE, None,
                         {'precision': 'mixed_float16'}),
}


def run(name, stack, steps, seed_offset=0):
  """Trains one scenario with one stack (its model and data seeds moved by `seed_offset`);
  returns (expected, the offline diagnosis, status)."""
  cause, arch, seed, opt, loss, dataset_fn, options = SCENARIOS[name]
  seed += seed_offset
  with precision_lib.using(options.get('precision', 'float32')):
    model = ARCHS[arch](seed)
    if 'weights' in options:
      _scale_weights(model, *options['weights'])
    optimizer = _opt(*opt)
    if options.get('gain'):
      holder = _Iterations()
      holder.variable = optimizer.iterations
      loss = exploding(loss, holder)
    policies = trainer_lib.default_policies()
    if stack == 'diagnostic':
      policies.append(forensics.Forensics(recheck=True))
    faults = faults_lib.Faults(**options['faults']) if 'faults' in options else None
    with tempfile.TemporaryDirectory() as model_dir:
      trainer = trainer_lib.Trainer(model=model, optimizer=optimizer, loss=loss,
                                    policies=policies, model_dir=model_dir, steps_per_loop=10,
                                    checkpoint_every=50, healthy_window=20, log_every=10**6,
                                    faults=faults, verbose=False)
      dataset = dataset_fn(seed) if dataset_fn else DATA[arch](seed)
      summary = trainer.fit(dataset, num_steps=options.get('steps', steps))
      events, saved, records, names = doctor.load(model_dir)
      diagnosis = doctor.diagnose(events, saved, records, names=names)
  return cause, diagnosis, summary['status']


def _tables(results, stacks):
  """Markdown: per stack the accuracy, the healthy runs' worst answer, and the confusion table."""
  causes = list(doctor.CAUSES) + [None]
  label = lambda c: 'none' if c is None else c
  for stack in stacks:
    rows = [(n, e, d) for (n, s), (e, d, _) in results.items() if s == stack]
    faulty = [(n, e, d) for n, e, d in rows if e != 'healthy']
    right = sum(d['cause'] == e for _, e, d in faulty)
    healthy = [(n, d) for n, e, d in rows if e == 'healthy']
    confident_wrong = [n for n, d in healthy
                       if d['cause'] is not None and d['confidence'] != 'low']
    print(f'\n### Stack `{stack}`: first answer right in {right} of {len(faulty)} '
          f'({100.0 * right / max(len(faulty), 1):.0f} %); healthy runs: {len(healthy)}, '
          f'confident wrong answers: {len(confident_wrong)} {confident_wrong or ""}\n')
    print('| expected \\ answered | ' + ' | '.join(label(c) for c in causes) + ' |')
    print('| --- ' * (len(causes) + 1) + '|')
    for expected in list(doctor.CAUSES) + ['healthy']:
      counts = [sum(1 for _, e, d in rows if e == expected and d['cause'] == c) for c in causes]
      if sum(counts):
        print(f'| {expected} | ' + ' | '.join(str(n) if n else '' for n in counts) + ' |')


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--stacks', default='diagnostic,default')
  parser.add_argument('--only', default='', help='comma-separated scenario names')
  parser.add_argument('--steps', type=int, default=200)
  parser.add_argument('--verbose', action='store_true', help='print each diagnosis')
  parser.add_argument('--seed_offset', type=int, default=0,
                      help='moves every scenario\'s model and data seeds (held-out variants)')
  args = parser.parse_args()
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('stable_train').setLevel(logging.ERROR)
  tf.get_logger().setLevel('ERROR')
  names = [n for n in args.only.split(',') if n] or list(SCENARIOS)
  stacks = args.stacks.split(',')
  results = {}
  print('| scenario | stack | expected | status | answer | confidence | right | s |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- |')
  for name in names:
    for stack in stacks:
      start = time.perf_counter()
      expected, diagnosis, status = run(name, stack, args.steps, args.seed_offset)
      results[name, stack] = (expected, diagnosis, status)
      answer = diagnosis['cause'] or 'none'
      right = (answer == expected if expected != 'healthy' else
               diagnosis['cause'] is None or diagnosis['confidence'] == 'low')
      print(f"| {name} | {stack} | {expected} | {status} | {answer} | "
            f"{diagnosis['confidence']} | {'yes' if right else 'NO'} | "
            f'{time.perf_counter() - start:.0f} |', flush=True)
      if args.verbose:
        print(doctor.format_diagnosis(diagnosis), flush=True)
  _tables(results, stacks)


if __name__ == '__main__':
  main()
