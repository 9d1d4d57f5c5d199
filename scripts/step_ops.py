"""Counts what the default policies add to the Trainer's traced step: ops, variable reads and
writes, captured inputs, conditionals, per policy and for the whole stack.

  python3 scripts/step_ops.py                      # seed MLP and the BatchNorm convnet
  python3 scripts/step_ops.py --model mlp --xla    # the step as XLA compiles it (same graph)

Deterministic, unlike timings on a shared machine: the counts are of the step's function graph
as traced (before Grappler), one Trainer per stack, 10 steps per loop, nothing on disk. `e` is the
skeleton (`policies=[]`), `i` the default stack without its input finiteness check, `d` the
default stack; `+X` lines are the skeleton with one default policy. Ops are non-constant graph
nodes at the step's top level (each a few microseconds in TensorFlow's executor); a `tf.cond`'s
branches are counted apart (`cond nodes`), as only one runs.
"""

import argparse
import collections
import os
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


def one_policy(make):
  stack = lambda: [make()]  # noqa: E731
  stack.__name__ = make.__name__
  return stack


def main():
  p = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
  p.add_argument('--model', choices=('mlp', 'convnet', 'both'), default='both')
  p.add_argument('--xla', action='store_true', help='trace the step for jit_compile=True')
  a = p.parse_args()
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
