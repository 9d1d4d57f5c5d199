"""Counts what the default policies add to the Trainer's traced step: ops, variable reads and
writes, captured inputs, conditionals, per policy and for the whole stack.

  python3 scripts/step_ops.py                      # seed MLP and the BatchNorm convnet
  python3 scripts/step_ops.py --model mlp --xla    # the step as XLA compiles it (same graph)
  python3 scripts/step_ops.py --profile            # the default stack's executed ops, per policy

Deterministic, unlike timings on a shared machine: the counts are of the step's function graph
as traced (before Grappler), one Trainer per stack, 10 steps per loop, nothing on disk. `e` is the
skeleton (`policies=[]`), `i` the default stack without its input finiteness check, `d` the
default stack; `+X` lines are the skeleton with one default policy. Ops are non-constant graph
nodes at the step's top level (each a few microseconds in TensorFlow's executor); a `tf.cond`'s
branches are counted apart (`cond nodes`), as only one runs.

`--profile` runs the default stack's Trainer (no XLA) under TensorFlow's profiler and charges
every op the executor ran to the policy whose hook made it (each hook runs in a name scope of its
policy's name) or to the rest of the step (the model, the optimizer, the guard's own checks and
the report): ops executed per step and their kernel time per step. Kernel time leaves out the
executor's scheduling of each op (about a microsecond), so a policy's share of the step is
between its share of the kernel time and its share of the ops. A measurement the guard shares
between policies (a norm re-measured after a transform) is charged to the hook that reads it
first.
"""

import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import benchmark  # pylint: disable=g-import-not-at-top


def count(work, stack, jit):
  """(top-level op types Counter, captured inputs, [(cond, then nodes, else nodes)])."""
  import keras  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  trainer = stable_train.Trainer(
      model=work.new_model(), optimizer=keras.optimizers.Adam(1e-3), loss=work.loss,
      policies=stack(), model_dir=None, steps_per_loop=10, jit_compile=jit, verbose=False,
      log_every=10**9, summary_every=10**9)
  trainer.fit(work.dataset, num_steps=10)
  concrete = trainer.controller.loop.step_fn.get_concrete_function(work.dataset.element_spec)
  graph = concrete.graph
  ops = collections.Counter(op.type for op in graph.get_operations())
  library = {f.signature.name: f for f in graph.as_graph_def().library.function}
  conds = []
  for op in graph.get_operations():
    if op.type in ('If', 'StatelessIf'):
      sizes = [len(library[op.get_attr(b).name].node_def) for b in ('then_branch', 'else_branch')]
      conds.append((op.name, *sizes))
  return ops, len(concrete.captured_inputs), conds


def profile(work, stack, loops):
  """{group: (ops executed per step, kernel microseconds per step)} over `loops` loops of 10 steps
  of the Trainer with `stack`; groups are the policies' names and 'rest'."""
  import glob  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.core import guard  # pylint: disable=g-import-not-at-top
  policies = stack()
  trainer = stable_train.Trainer(
      model=work.new_model(), optimizer=keras.optimizers.Adam(1e-3), loss=work.loss,
      policies=policies, model_dir=None, steps_per_loop=10, verbose=False, log_every=10**9,
      summary_every=10**9)
  trainer.fit(work.dataset, num_steps=50)  # Traced and warm.
  logdir = tempfile.mkdtemp(prefix='step_ops.')
  tf.profiler.experimental.start(logdir)
  trainer.fit(work.dataset, num_steps=50 + 10 * loops)
  tf.profiler.experimental.stop()
  space = xplane_pb2.XSpace()
  with open(sorted(glob.glob(f'{logdir}/**/*.xplane.pb', recursive=True))[-1], 'rb') as f:
    space.ParseFromString(f.read())
  names = {re.sub(r'[^A-Za-z0-9_.-]', '_', p.name) for p in policies}
  found = collections.defaultdict(lambda: [0, 0])
  for plane in space.planes:
    for line in plane.lines:
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        if not line.name.startswith('tf_Compute') or name.count(':') != 1:
          continue  # Not an op the executor ran (tf.data, a function call, its own work).
        # A policy's ops are under 'policy/<its name>/' (`guard.scope`); TensorFlow numbers its
        # name when the scope is entered again in one graph ('policy/adaptive_clip_1/').
        parts = name.split(':')[0].split('/')
        at = [i for i, part in enumerate(parts[:-1]) if part == guard.SCOPE_ROOT]
        inner = parts[at[0] + 1] if at else ''
        group = inner if inner in names else re.sub(r'_\d+$', '', inner)
        group = group if group in names else 'rest'

        found[group][0] += 1
        found[group][1] += event.duration_ps
  steps = 10 * loops
  return {g: (n / steps, ps / 1e6 / steps) for g, (n, ps) in found.items()}


def print_profile(work, loops):
  """The `--profile` table for the default stack on `work`."""
  shares = profile(work, benchmark.default_stack, loops)
  ops = sum(n for n, _ in shares.values())
  us = sum(t for _, t in shares.values())
  print(f'# {work.describe}, batch 32, the default stack, {loops} loops of 10 steps profiled')
  print(f'{"group":17s} {"ops/step":>8s} {"share":>6s} {"kernel us/step":>14s} {"share":>6s}')
  for group, (n, t) in sorted(shares.items(), key=lambda kv: -kv[1][1]):
    print(f'{group:17s} {n:8.1f} {n / ops:6.1%} {t:14.1f} {t / us:6.1%}', flush=True)


def one_policy(make):
  stack = lambda: [make()]  # noqa: E731
  stack.__name__ = make.__name__
  return stack


def main():
  p = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
  p.add_argument('--model', choices=('mlp', 'convnet', 'both'), default='both')
  p.add_argument('--xla', action='store_true', help='trace the step for jit_compile=True')
  p.add_argument('--profile', action='store_true',
                 help="profile the default stack's executed ops per policy (no XLA)")
  p.add_argument('--loops', type=int, default=100, help='loops of 10 steps profiled')
  a = p.parse_args()
  if a.profile:
    for model in (('mlp', 'convnet') if a.model == 'both' else (a.model,)):
      print_profile(benchmark.Workload(model, 32, 1000), a.loops)
    return
  import stable_train  # pylint: disable=g-import-not-at-top
  from stable_train.policies import clipping, divergence  # pylint: disable=g-import-not-at-top
  singles = {'CheckNumerics': stable_train.CheckNumerics, 'AdaptiveClip': clipping.AdaptiveClip,
             'SkipNonFinite': stable_train.SkipNonFinite,
             'DivergenceCheck': divergence.DivergenceCheck}
  stacks = [('e', benchmark.no_policies), ('i', benchmark.without_input_check),
            ('d', benchmark.default_stack)]
  stacks += [(f'+{name}', one_policy(make)) for name, make in singles.items()]
  for model in (('mlp', 'convnet') if a.model == 'both' else (a.model,)):
    work = benchmark.Workload(model, 32, 1000)
    print(f'# {work.describe}, batch 32, jit_compile={a.xla}')
    print(f'{"stack":17s} {"ops":>5s} {"+ops":>5s} {"reads":>5s} {"writes":>6s} {"captured":>8s}'
          '  cond nodes (then/else)')
    base = None
    for name, stack in stacks:
      ops, captured, conds = count(work, stack, a.xla)
      nonconst = sum(v for k, v in ops.items() if k != 'Const')
      writes = sum(v for k, v in ops.items() if k.startswith('Assign'))
      base = nonconst if base is None else base
      shown = ', '.join(f'{t}/{e}' for _, t, e in conds)
      print(f'{name:17s} {nonconst:5d} {nonconst - base:+5d} {ops["ReadVariableOp"]:5d} '
            f'{writes:6d} {captured:8d}  {shown}', flush=True)


if __name__ == '__main__':
  main()
