"""Tests for stable_train.runtime.evaluation and evaluation during `Trainer.fit`."""

import json
import os

import keras
import numpy as np
import tensorflow as tf
import pytest

from stable_train import errors
from stable_train.runfiles import events
from stable_train.runtime.actions import eval_action
from stable_train.runtime import evaluation
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models


def images(num_examples=32, seed=0, repeat=False):
  return data.synthetic_images(num_examples=num_examples, image_shape=(8, 8, 3), num_classes=4,
                               batch_size=8, seed=seed, repeat=repeat)


def make_trainer(model_dir=None, **kwargs):
  return trainer_lib.Trainer(
      model=models.convnet_bn(image_shape=(8, 8, 3), num_classes=4, filters=(4,), dropout=0.5),
      optimizer=keras.optimizers.Adam(1e-2),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      model_dir=model_dir, metrics=[keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
      **kwargs)


def inference_loss_and_accuracy(model, dataset):
  """What evaluation must compute: the mean batch loss and the accuracy, training=False."""
  loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  losses, right, total = [], 0, 0
  for x, y in dataset:
    logits = model(x, training=False)
    losses.append(float(loss_fn(y, logits)))
    right += int(np.sum(np.argmax(logits.numpy(), -1) == y.numpy()))
    total += int(y.shape[0])
  return float(np.mean(losses)), right / total


class EvaluatorTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_inference_mode_and_no_state_change(self):
    t = make_trainer()
    t.fit(images(repeat=True), num_steps=3)  # BatchNorm statistics move away from their start.
    before = {v.path: v.numpy().copy() for v in t.model.variables + t.optimizer.variables}
    result = evaluation.Evaluator(t).evaluate(images(seed=1), None)
    for v in t.model.variables + t.optimizer.variables:
      self.assertTrue(np.array_equal(before[v.path], v.numpy()), f'{v.path} changed')
    self.assertEqual(int(t.global_step.numpy()), 3)
    loss, accuracy = inference_loss_and_accuracy(t.model, images(seed=1))
    self.assertEqual(result['batches'], 4)
    self.assertAllClose(result['loss'], loss, rtol=1e-5)
    self.assertAllClose(result['metrics']['accuracy'], accuracy)

  @pytest.mark.slow
  def test_the_lstm_seed_state_is_put_back(self):
    # Keras's LSTM advances its seed generator on an inference-mode call too.
    t = trainer_lib.Trainer(model=models.lstm(seed=0), optimizer=keras.optimizers.Adam(1e-3),
                            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                            model_dir=None, verbose=False)
    t.fit(data.synthetic_sequences(), num_steps=2)
    before = {v.path: v.numpy().copy() for v in t.model.variables}
    evaluation.Evaluator(t).evaluate(data.synthetic_sequences(repeat=False, num_examples=64), 2)
    for v in t.model.variables:
      self.assertAllEqual(before[v.path], v.numpy(), msg=v.path)

  @pytest.mark.slow
  def test_a_batch_with_a_label_out_of_range_is_left_out(self):
    t = make_trainer()
    t.fit(images(repeat=True), num_steps=2)
    self.assertEqual(t.label_classes, 4)
    x, y = (np.concatenate(a) for a in zip(*[(bx.numpy(), by.numpy()) for bx, by in images(seed=1)]))
    y[9] = 7  # In the second batch of 8: TensorFlow's CPU kernel would raise on it.
    result = evaluation.Evaluator(t).evaluate(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None)
    kept = tf.data.Dataset.from_tensor_slices((np.delete(x, np.s_[8:16], 0),
                                               np.delete(y, np.s_[8:16]))).batch(8)
    loss, accuracy = inference_loss_and_accuracy(t.model, kept)
    self.assertEqual((result['batches'], result['left_out']), (3, 1))
    self.assertAllClose(result['loss'], loss, rtol=1e-5)
    self.assertAllClose(result['metrics']['accuracy'], accuracy)
    everything_bad = tf.data.Dataset.from_tensor_slices((x, y + 4)).batch(8)
    with self.assertRaisesRegex(errors.ConfigError, r'every eval batch \(4\) has a label outside '
                                r'\[0, 4\)'):
      evaluation.Evaluator(t).evaluate(everything_bad, None)

  @pytest.mark.slow
  def test_a_batch_with_a_non_finite_input_is_left_out_not_a_divergence(self):
    """One NaN pixel in the eval data is a bad row, as a bad label is: its batch is left out, the
    evaluation's loss is the other batches', and the run goes on (no eval_divergence abort)."""
    t = make_trainer()
    t.fit(images(repeat=True), num_steps=2)
    x, y = (np.concatenate(a) for a in zip(*[(bx.numpy(), by.numpy()) for bx, by in images(seed=1)]))
    x[17, 0, 0, 0] = np.nan  # In the third batch of 8.
    x[3, 0, 0, 0] = -np.finfo(np.float32).max  # A NoData fill, in the first: no row either.
    result = evaluation.Evaluator(t).evaluate(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None)
    bad = np.r_[0:8, 16:24]
    kept = tf.data.Dataset.from_tensor_slices((np.delete(x, bad, 0), np.delete(y, bad))).batch(8)
    loss, _ = inference_loss_and_accuracy(t.model, kept)
    self.assertEqual((result['batches'], result['left_out']), (2, 2))
    self.assertAllClose(result['loss'], loss, rtol=1e-5)
    summary = t.fit(images(repeat=True), num_steps=4,
                    eval_dataset=tf.data.Dataset.from_tensor_slices((x, y)).batch(8), eval_every=2)
    self.assertEqual(summary['status'], 'completed')
    with self.assertRaisesRegex(errors.ConfigError, r'every eval batch \(4\) has a label outside '
                                r'\[0, 4\) \(the model.s classes\) or a non-finite or fill-sized \(\|x\| >= 1e30\) input'):
      evaluation.Evaluator(t).evaluate(
          tf.data.Dataset.from_tensor_slices((x * np.nan, y)).batch(8), None)

  @pytest.mark.slow
  def test_eval_steps_limits_the_batches(self):
    t = make_trainer()
    t.fit(images(repeat=True), num_steps=1)
    self.assertEqual(evaluation.Evaluator(t).evaluate(images(), 2)['batches'], 2)


class MirroredEvaluatorTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_two_replicas_give_the_single_device_loss_and_accuracy(self):
    # ReductionToOneDevice: no collectives that could meet other tests' stale ones (BUILD_NOTES).
    strategy = tf.distribute.MirroredStrategy(
        ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      t = make_trainer(strategy=strategy)
    t.fit(images().take(0), num_steps=1)  # Builds the model, trains nothing.
    # Weights and BatchNorm statistics away from their start, the same on both replicas (an
    # assign outside replica context sets every copy). Not trained here: under the strategy each
    # replica's BatchNorm moving statistics follow its own shard (BUILD_NOTES).
    rng = np.random.RandomState(3)
    for v in t.model.weights:
      value = rng.uniform(0.5, 1.5, v.shape) if 'variance' in v.path else rng.normal(size=v.shape)
      v.assign(value.astype(v.dtype))
    # 25 examples in batches of 8: the last global batch (1 row) leaves one replica's shard empty.
    held_out = images(seed=1).unbatch().take(25).batch(8)
    result = evaluation.Evaluator(t).evaluate(held_out, None)
    loss, accuracy = inference_loss_and_accuracy(t.model, held_out)
    self.assertEqual(result['batches'], 4)
    self.assertAllClose(result['loss'], loss, atol=1e-5, rtol=0)
    self.assertAllClose(result['metrics']['accuracy'], accuracy, atol=1e-6, rtol=0)
    # A label out of range in the first batch: that replica's shard (rows 0-3) is left out.
    x, y = (np.concatenate(a) for a in zip(*[(bx.numpy(), by.numpy()) for bx, by in held_out]))
    y[1] = 4
    bad = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    result = evaluation.Evaluator(t).evaluate(bad, None)
    kept = tf.data.Dataset.from_tensor_slices((x[4:8], y[4:8])).batch(8).concatenate(
        tf.data.Dataset.from_tensor_slices((x[8:], y[8:])).batch(8))
    loss, _ = inference_loss_and_accuracy(t.model, kept)
    self.assertEqual((result['batches'], result['left_out']), (4, 1))
    self.assertAllClose(result['loss'], loss, atol=1e-5, rtol=0)


class FitEvalTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_every_n_steps_and_at_the_end(self):
    model_dir = self.get_temp_dir() + '/run'
    t = make_trainer(model_dir, log_every=2)
    summary = t.fit(images(repeat=True), num_steps=5, eval_dataset=images(seed=1), eval_every=2)
    evals = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
             if e['event'] == 'eval']
    self.assertEqual([e['step'] for e in evals], [2, 4, 5])
    loss, accuracy = inference_loss_and_accuracy(t.model, images(seed=1))
    self.assertEqual(summary['eval']['step'], 5)
    self.assertAllClose(summary['eval']['loss'], loss, rtol=1e-5)
    self.assertAllClose(summary['eval']['metrics']['accuracy'], accuracy)
    self.assertAllClose(evals[-1]['loss'], loss, rtol=1e-5)
    with open(os.path.join(model_dir, 'summary.json')) as f:
      self.assertEqual(json.load(f)['eval']['step'], 5)
    # A separate TensorBoard run beside the training one.
    eval_dir = os.path.join(model_dir, 'tensorboard', 'eval')
    tags = set()
    for name in os.listdir(eval_dir):
      for event in tf.compat.v1.train.summary_iterator(os.path.join(eval_dir, name)):
        tags.update(v.tag for v in event.summary.value)
    self.assertEqual(tags, {'loss', 'metrics/accuracy'})
    # Training metrics were not mixed with the eval ones (separate metric objects).
    self.assertIn('accuracy', summary['metrics'])

  @pytest.mark.slow
  def test_only_at_the_end_without_eval_every(self):
    t = make_trainer(self.get_temp_dir() + '/end')
    summary = t.fit(images(repeat=True), num_steps=3, eval_dataset=images(seed=1), eval_steps=1)
    self.assertEqual(summary['eval']['step'], 3)
    self.assertEqual(summary['eval']['batches'], 1)

  def test_bad_eval_arguments_are_config_errors(self):
    t = make_trainer()
    for kwargs, words in (
        (dict(eval_every=2), 'need an eval_dataset'),
        (dict(eval_dataset=[1, 2]), 'must be a tf.data.Dataset'),
        (dict(eval_dataset=images(), eval_every=0), 'eval_every=0'),
        (dict(eval_dataset=images(), eval_steps=1.5), 'eval_steps=1.5'),
        (dict(eval_dataset=images(repeat=True)), 'repeats forever')):
      with self.assertRaisesRegex(errors.ConfigError, words):
        t.fit(images(repeat=True), num_steps=1, **kwargs)

  def test_cli_binds_the_eval_data(self):
    import gin  # pylint: disable=g-import-not-at-top
    from stable_train.app import cli  # pylint: disable=g-import-not-at-top
    from stable_train.app import configurables  # pylint: disable=g-import-not-at-top,unused-import
    model_dir = self.get_temp_dir() + '/cli'
    gin.parse_config([
        'train.num_steps = 4', 'train.eval_every = 2', 'train.eval_steps = 1',
        'train.dataset_fn = @synthetic_regression',
        'train.eval_dataset_fn = @eval/synthetic_regression',
        'synthetic_regression.num_features = 4', 'synthetic_regression.batch_size = 4',
        'eval/synthetic_regression.seed = 7',
        'Trainer.model = @mlp()', 'mlp.input_dim = 4', 'mlp.hidden = (4,)',
        'Trainer.optimizer = @keras.optimizers.SGD()',
        'Trainer.loss = @keras.losses.MeanSquaredError()',
    ])
    summary = cli.train(model_dir=model_dir)
    self.assertEqual(summary['eval']['step'], 4)
    self.assertEqual(summary['eval']['batches'], 1)
    self.assertTrue(np.isfinite(summary['eval']['loss']))


class BadEvalTrainer(trainer_lib.Trainer):
  """A Trainer whose eval loss is multiplied by `eval_scale` (NaN: a non-finite eval loss)."""

  def __init__(self, eval_scale, **kwargs):
    super().__init__(**kwargs)
    self.eval_scale = tf.Variable(eval_scale, dtype=tf.float32, trainable=False)

  def compute_loss(self, batch, training):
    loss = super().compute_loss(batch, training)
    return loss if training else loss * tf.cast(self.eval_scale, loss.dtype)


def make_bad_eval_trainer(model_dir, eval_scale=float('nan'), **kwargs):
  return BadEvalTrainer(
      eval_scale,
      model=models.convnet_bn(image_shape=(8, 8, 3), num_classes=4, filters=(4,), dropout=0.5),
      optimizer=keras.optimizers.Adam(1e-2),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), model_dir=model_dir,
      **kwargs)


class EvalDivergenceTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_a_non_finite_eval_loss_rolls_back_to_a_good_checkpoint(self):
    from stable_train.policies import recovery  # pylint: disable=g-import-not-at-top
    model_dir = self.get_temp_dir() + '/rollback'
    t = make_bad_eval_trainer(
        model_dir, checkpoint_every=2, healthy_window=0,
        policies=trainer_lib.default_policies() + [recovery.Rollback(max_rollbacks=1)])
    summary = t.fit(images(repeat=True), num_steps=6, eval_dataset=images(seed=1),
                    eval_every=3)
    records = events.read_events(os.path.join(model_dir, 'events.jsonl'))
    rollbacks = [e for e in records if e['event'] == 'rollback']
    self.assertLen(rollbacks, 1)
    self.assertEqual(rollbacks[0]['trigger'], 'eval_divergence')
    self.assertEqual((rollbacks[0]['step'], rollbacks[0]['to_step']), (3, 2))
    # The second bad eval meets the rollback limit: the run stops, naming the trigger.
    self.assertEqual(summary['status'], 'aborted')
    self.assertIn('eval_divergence', summary['reason'])

  @pytest.mark.slow
  def test_without_rollback_the_run_aborts(self):
    t = make_bad_eval_trainer(self.get_temp_dir() + '/abort')
    summary = t.fit(images(repeat=True), num_steps=4, eval_dataset=images(seed=1),
                    eval_every=2)
    self.assertEqual(summary['status'], 'aborted')
    self.assertEqual(summary['global_step'], 2)
    self.assertIn('eval loss nan is non-finite', summary['reason'])

  def test_factor_times_the_best(self):
    c = eval_action.EvalDivergence(make_trainer(eval_divergence_factor=3.0).eval_divergence_factor)
    self.assertIsNone(c.check({'step': 1, 'loss': 1.0}))
    self.assertIsNone(c.check({'step': 2, 'loss': 2.9}))
    decision = c.check({'step': 3, 'loss': 3.5})
    self.assertEqual((decision.action, decision.trigger), ('escalate', 'eval_divergence'))
    self.assertEqual(c.best, 1.0)
    c2 = eval_action.EvalDivergence(make_trainer(eval_divergence_factor=None).eval_divergence_factor)
    self.assertIsNone(c2.check({'step': 1, 'loss': 1.0}))
    self.assertIsNone(c2.check({'step': 2, 'loss': 100.0}))
    self.assertIsNotNone(c2.check({'step': 3, 'loss': float('inf')}))

  def test_bad_factor_is_a_config_error(self):
    for bad in (1.0, 0, '3', True):
      with self.assertRaisesRegex(errors.ConfigError, 'eval_divergence_factor'):
        make_trainer(eval_divergence_factor=bad)

  @pytest.mark.slow
  def test_a_bad_final_eval_leaves_the_final_checkpoint_not_good(self):
    model_dir = self.get_temp_dir() + '/final'
    t = make_bad_eval_trainer(model_dir, checkpoint_every=100, healthy_window=0)
    t.fit(images(repeat=True), num_steps=2, eval_dataset=images(seed=1))
    entries = t.checkpoints.committed()
    self.assertEqual([(e.step, e.good) for e in entries], [(2, False)])

  @pytest.mark.slow
  def test_also_when_an_interval_checkpoint_was_written_at_that_step(self):
    from stable_train.app import export  # pylint: disable=g-import-not-at-top
    model_dir = self.get_temp_dir() + '/same_step'
    t = make_bad_eval_trainer(model_dir, checkpoint_every=2, healthy_window=0)
    t.fit(images(repeat=True), num_steps=4, eval_dataset=images(seed=1))
    self.assertEqual([(e.step, e.good) for e in t.checkpoints.committed()],
                     [(2, True), (4, False)])
    self.assertEqual(export.choose_checkpoint(model_dir)[1], 'last_good (step 2)')


class EvalDataCheckTest(tf.test.TestCase):
  """Eval data that cannot work is refused before the first step, with nothing written."""

  def test_empty_or_unfit_eval_data_is_refused_before_training(self):
    for name, eval_data, words in (
        ('empty', images(seed=1).take(0), 'the eval dataset is empty (not one batch)'),
        ('channels', data.synthetic_images(num_examples=16, image_shape=(8, 8, 1),
                                           num_classes=4, batch_size=8, repeat=False),
         'the eval dataset (elements float32[8, 8, 8, 1], int32[8]) does not fit the '
         'model: ')):
      model_dir = os.path.join(self.get_temp_dir(), name)
      t = make_trainer(model_dir, checkpoint_every=1)
      with self.assertRaises(errors.ConfigError) as ctx:
        t.fit(images(repeat=True), num_steps=4, eval_dataset=eval_data, eval_every=2)
      self.assertIn(words, str(ctx.exception))
      self.assertIn('check train.eval_dataset_fn / fit(eval_dataset=...)', str(ctx.exception))
      self.assertNotIn('\n', str(ctx.exception))
      self.assertEqual(int(t.global_step.numpy()), 0)
      self.assertEqual(sorted(os.listdir(model_dir)), ['run.lock'])  # No checkpoint, no event.

  def test_eval_labels_that_would_broadcast_are_refused_as_training_labels_are(self):
    """(B, 1) eval labels against (B, 3) outputs under MSE: every label compared with every output,
    a finite, wrong eval loss; refused before the first step, as such training labels are."""
    x = np.random.RandomState(0).normal(size=(16, 4)).astype(np.float32)
    targets = np.random.RandomState(1).normal(size=(16, 3)).astype(np.float32)
    t = trainer_lib.Trainer(model=models.mlp(input_dim=4, hidden=(4,), outputs=3),
                            optimizer='adam', loss='mse', model_dir=None, verbose=False)
    with self.assertRaisesRegex(errors.ConfigError, r'^the eval dataset \(elements .*\) does not '
                                r'fit the model: labels of shape \(None, 1\) and model '
                                r'outputs of shape \(None, 3\) would broadcast under mse .*'
                                r'check train.eval_dataset_fn'):
      t.fit(tf.data.Dataset.from_tensor_slices((x, targets)).batch(8), num_steps=2,
            eval_dataset=tf.data.Dataset.from_tensor_slices((x, targets[:, :1])).batch(8),
            eval_every=1)
    self.assertEqual(int(t.global_step.numpy()), 0)
