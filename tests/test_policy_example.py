"""The worked example of docs/policies.md ("### A worked example"): the page's code runs as written,
and the policy it defines skips the steps it should through all three front doors."""

import dataclasses
import json
import logging
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import stable_train

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                   'policies.md')
HEADING = '### A worked example'
FEATURES = 8
BATCH = 16
LOGGER = 'policy_example'  # The `__name__` the example's module runs under here.


def example_blocks():
  """The ```python blocks of the section under HEADING, up to the next heading, each preceded by
  as many newlines as lie before it in the page: compiled with the page's name, its lines are the
  page's (autograph reads a hook's source from there, and a traceback points at the page)."""
  with open(DOC) as f:
    text = f.read()
  start = text.index('\n' + HEADING)
  # The next heading ('## ' or '### ' at a line's start: no comment in the blocks starts so).
  end = re.compile(r'\n#{2,3} ').search(text, start + 1)
  end = end.start() if end else len(text)
  return ['\n' * text.count('\n', 0, m.start(1)) + m.group(1)
          for m in re.compile(r'```python\n(.*?)```', re.S).finditer(text, start, end)]


def _load_example():
  """Runs the policy definition (the first block) once per process (it registers with gin)."""
  namespace = {'__name__': LOGGER}
  exec(compile(example_blocks()[0], DOC, 'exec'), namespace)  # pylint: disable=exec-used
  return namespace['SkipLossAbove']


SkipLossAbove = _load_example()


def regression(bad_batches, num_batches=20, scale=1000.0):
  """y = x·w; the labels of `bad_batches` are scaled by `scale` (a huge but finite loss)."""
  rng = np.random.RandomState(0)
  x = rng.normal(size=(num_batches * BATCH, FEATURES)).astype('float32')
  w = rng.normal(scale=0.3, size=(FEATURES, 1)).astype('float32')
  y = x @ w
  for b in bad_batches:
    y[b * BATCH:(b + 1) * BATCH] *= scale
  return x, y


def mlp():
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation='relu'),
                           keras.layers.Dense(1)])


def test_the_page_has_the_definition_and_the_three_front_doors():
  blocks = example_blocks()
  assert len(blocks) == 2, blocks
  usage = blocks[1]
  compile(usage, DOC, 'exec')  # Valid Python, though it needs a model and data to run.
  for front_door in ('stable_train.Trainer(', 'stable_train.guard_fit(',
                     'stable_train.StepGuard('):
    assert front_door in usage
  assert issubclass(SkipLossAbove, stable_train.Policy)


def test_hooks_and_decide_in_isolation():
  p = SkipLossAbove(max_loss=5.0)
  for loss, allowed in ((1.0, True), (9.0, False), (np.nan, True), (np.inf, True)):
    assert bool(p.allow_update({'loss': tf.constant(loss)}).numpy()) == allowed
  assert bool(p.update_state({'loss': tf.constant(9.0)}, tf.constant(False)).numpy())
  assert not bool(p.update_state({'loss': tf.constant(1.0)}, tf.constant(True)).numpy())
  assert int(p.vetoed_steps.numpy()) == 1
  n = 4
  applied = np.array([True, False, False, True])
  reports = stable_train.StepReports(
      step=np.arange(1, n + 1), loss=np.array([1.0, 9.0, np.nan, 2.0]), grad_norm=np.ones(n),
      clipped_grad_norm=np.ones(n), loss_finite=np.array([True, True, False, True]),
      grads_finite=np.array([True, True, False, True]), inputs_finite=np.ones(n, bool),
      outputs_finite=np.ones(n, bool), first_bad_grad=-np.ones(n, int),
      first_bad_input=-np.ones(n, int), applied=applied, learning_rate=np.ones(n))
  decision = p.decide(reports, None)
  assert decision.action == 'act' and decision.step == 2  # The NaN step is SkipNonFinite's.
  assert decision.details == {'steps': [2], 'loss': [9.0]}
  assert p.decide(dataclasses.replace(reports, applied=np.ones(n, bool)), None) is None
  try:
    SkipLossAbove(max_loss=0.0)
  except stable_train.ConfigError as e:
    assert 'max_loss=0.0' in str(e)
  else:
    raise AssertionError('max_loss=0.0 was accepted')


def test_the_trainer_skips_the_huge_loss_batches(tmp_path, caplog):
  bad = [5, 11, 12]  # Batches (0-based); the global steps are one more.
  x, y = regression(bad)
  policy = SkipLossAbove(max_loss=5.0)
  model = mlp()
  trainer = stable_train.Trainer(
      model=model, optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
      policies=stable_train.default_policies() + [policy], model_dir=str(tmp_path),
      steps_per_loop=5, verbose=False)
  with caplog.at_level(logging.WARNING, logger=LOGGER):
    summary = trainer.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH),
                          num_steps=20)
  vetoed = [b + 1 for b in bad]
  assert summary['status'] == 'completed'
  assert summary['skipped_steps'] == len(bad) == int(policy.vetoed_steps.numpy())
  assert summary['applied_steps'] == 20 - len(bad)
  assert int(trainer.optimizer.iterations.numpy()) == 20 - len(bad)  # Healthy steps applied.
  with open(tmp_path / 'summary.json') as f:
    assert json.load(f)['skip_loss_above'] == {'vetoed_steps': len(bad)}
  with open(tmp_path / 'events.jsonl') as f:
    records = [json.loads(line) for line in f if line.strip()]
  events = [r for r in records if r['event'] == 'loss_above']
  assert [s for e in events for s in e['steps']] == vetoed
  assert all(loss > 5.0 for e in events for loss in e['loss'])
  assert all(e['max_loss'] == 5.0 for e in events)
  skips = [r for r in records if r['event'] == 'skip']
  assert [(r['step'], r['fault']) for r in skips] == [(s, 'policy') for s in vetoed]
  warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
  assert len(warnings) == len(events) and 'loss above 5' in warnings[0]
  assert summary['final_loss'] < 5.0


def test_a_step_guard_step_is_vetoed(tmp_path):
  x, y = regression([0], num_batches=2)
  model = mlp()
  optimizer = keras.optimizers.Adam(1e-2)
  policy = SkipLossAbove(max_loss=5.0)
  guard = stable_train.StepGuard(model, optimizer,
                                 policies=stable_train.default_policies() + [policy])
  mse = keras.losses.MeanSquaredError()

  @tf.function
  def train_step(xb, yb):
    with guard.step((xb, yb)) as step:
      with tf.GradientTape() as tape:
        loss = mse(yb, model(xb, training=True))
      step.apply(tape.gradient(loss, model.trainable_variables), loss)
    return step.report

  before = [v.numpy().copy() for v in model.trainable_variables]
  with stable_train.LoopHost(guard, model_dir=str(tmp_path)) as host:
    report = train_step(x[:BATCH], y[:BATCH])  # The huge-loss batch.
    host.after_step()
    assert not bool(report['applied'].numpy())
    for b, v in zip(before, model.trainable_variables):
      np.testing.assert_array_equal(b, v.numpy())
    report = train_step(x[BATCH:], y[BATCH:])
    host.after_step()
    assert bool(report['applied'].numpy())
  assert int(policy.vetoed_steps.numpy()) == 1
  assert host.last_summary['skip_loss_above'] == {'vetoed_steps': 1}
  assert host.last_summary['skipped_steps'] == 1
  with open(tmp_path / 'events.jsonl') as f:
    events = [json.loads(line) for line in f if line.strip()]
  assert [e['steps'] for e in events if e['event'] == 'loss_above'] == [[1]]


@pytest.mark.slow
def test_guard_fit_skips_them_too(tmp_path):
  bad = [2, 5]
  x, y = regression(bad, num_batches=8)
  model = mlp()
  model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse')
  guard = stable_train.guard_fit(
      model, policies=stable_train.default_policies() + [SkipLossAbove(max_loss=5.0)])
  model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
            callbacks=[guard.callback(model_dir=str(tmp_path))])
  with open(tmp_path / 'summary.json') as f:
    summary = json.load(f)
  assert summary['skip_loss_above'] == {'vetoed_steps': len(bad)}
  assert summary['skipped_steps'] == len(bad) and summary['applied_steps'] == 8 - len(bad)
  with open(tmp_path / 'events.jsonl') as f:
    events = [json.loads(line) for line in f if line.strip()]
  assert [s for e in events if e['event'] == 'loss_above' for s in e['steps']] == [
      b + 1 for b in bad]
