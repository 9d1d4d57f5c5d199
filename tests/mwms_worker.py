"""One MultiWorkerMirroredStrategy worker for tests/test_distribute.py (run as a subprocess).

Usage: python tests/mwms_worker.py MODEL_DIR OUT_NPZ, with TF_CONFIG set. Trains 4 steps (a NaN in
global batch 2, inside the shard this cluster's worker 1 reads), then resumes from the chief's
checkpoint in a fresh Trainer and trains to step 6; saves weights and facts to OUT_NPZ.
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import keras  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from stable_train.policies import basic as policies  # pylint: disable=g-import-not-at-top
from stable_train.runtime import distribute  # pylint: disable=g-import-not-at-top
from stable_train.trainer import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
from stable_train.zoo import models  # pylint: disable=g-import-not-at-top

GLOBAL_BATCH = 8
POISON_BATCH, POISON_ROW = 2, 6  # Row 6 of a global batch of 8 lies in worker 1's half.


def dataset(repeat=True):
  rng = np.random.RandomState(0)
  x = rng.normal(size=(12 * GLOBAL_BATCH, 8)).astype(np.float32)
  y = rng.normal(size=(12 * GLOBAL_BATCH, 1)).astype(np.float32)
  x[POISON_BATCH * GLOBAL_BATCH + POISON_ROW, 3] = np.nan
  ds = tf.data.Dataset.from_tensor_slices((x, y))
  # Infinite, as in the shipped configs: a finite dataset adds TF's partial-batch agreement
  # (one int64 all-reduce per step) to get_next_as_optional under a multi-worker strategy.
  return (ds.repeat() if repeat else ds).batch(GLOBAL_BATCH, drop_remainder=True)


def collective_ops(concrete_fn):
  """Counts collective all-reduce ops in a traced function, its loop bodies and branches."""
  graph_def = concrete_fn.graph.as_graph_def()
  nodes = list(graph_def.node)
  for f in graph_def.library.function:
    nodes.extend(f.node_def)
  return sum(1 for n in nodes if n.op.startswith(('CollectiveReduce', 'CollectiveAllReduce')))


def make_trainer(strategy, model_dir):
  with strategy.scope():
    model = models.mlp(input_dim=8, hidden=(4,), outputs=1, seed=0)
    return trainer_lib.Trainer(
        model=model, optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.MeanSquaredError(),
        policies=[policies.CheckNumerics(), policies.ClipByGlobalNorm(max_norm=1.0),
                  policies.SkipNonFinite()],
        model_dir=model_dir, steps_per_loop=2, checkpoint_every=2, strategy=strategy)


def main(model_dir, out):
  strategy = distribute.multi_worker_mirrored_strategy()
  task_id = strategy.cluster_resolver.task_id

  # What this worker's own shard of the poisoned batch holds (the step sees only aggregates).
  local = list(iter(strategy.experimental_distribute_dataset(dataset(repeat=False))))[POISON_BATCH]
  local_x = strategy.experimental_local_results(local[0])[0].numpy()

  first = make_trainer(strategy, model_dir)
  summary = first.fit(dataset(), num_steps=4)
  n_collectives = collective_ops(
      first.controller.loop.loop_fn.get_concrete_function(first.iterator, tf.constant(2, tf.int64)))  # pylint: disable=protected-access
  num_vars = len(first.model.trainable_variables)

  # A barrier (one collective): the chief has finished writing its step-4 checkpoint before any
  # worker looks for it. Separate runs need none: a restarted job starts after the old one ended.
  strategy.reduce(tf.distribute.ReduceOp.SUM,
                  strategy.run(lambda: tf.constant(1.0)), axis=None)
  second = make_trainer(strategy, model_dir)  # Resumes from the chief's checkpoint at step 4.
  resumed = second.fit(dataset(), num_steps=6)
  weights = [v.numpy() for v in second.model.trainable_variables]
  np.savez(out, *weights,
           facts=json.dumps(dict(
               task_id=task_id, is_chief=distribute.is_chief(strategy),
               tf_should_checkpoint=bool(strategy.extended.should_checkpoint),
               local_shard_has_nan=bool(np.isnan(local_x).any()),
               summary=summary, resumed=resumed, collective_ops=n_collectives,
               num_trainable_variables=num_vars,
               data_position=second.data_position(),
               iterations=int(second.optimizer.iterations.numpy()))))


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2])
