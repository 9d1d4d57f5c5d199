"""What a Trainer is built from: the validated model parts, the policy stack, the metrics, the
process-wide random states, and the length of an epoch."""

import contextlib
import logging
import weakref
from typing import List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from stable_train import compat
from stable_train.core import batch_check
from stable_train.core import interfaces
from stable_train.core import keras_parts
from stable_train.core import labels as labels_lib
from stable_train import errors
from stable_train.forensics import forensics
from stable_train.forensics import provenance
from stable_train.policies import basic as policies_lib
from stable_train.policies import clipping
from stable_train.policies import divergence
from stable_train.policies import precision
from stable_train.runtime import distribute
from stable_train.runtime import evaluation
from stable_train.runtime import seams

log = logging.getLogger('stable_train')

EMPTY_DATASET = ('the dataset is empty (not one batch): check train.dataset_fn, its files, and a '
                 'batch_size larger than the data with drop_remainder=True.')

TRAIN_DATA = '; check train.dataset_fn / fit(dataset)'  # Ends a refusal of the training data.

# The policies some Trainer has claimed: a policy's variables are one run's state.
_OWNED_POLICIES = weakref.WeakSet()


def default_policies() -> List[interfaces.Policy]:
  """The default stack: CheckNumerics('flag'), AdaptiveClip(), SkipNonFinite(max_consecutive=10),
  DivergenceCheck(), Forensics(optional=True).

  AdaptiveClip clips only spikes above the run's own grad-norm statistics, so a healthy run trains
  as it would bare; `ClipByGlobalNorm` remains for a fixed norm. DivergenceCheck stops a run whose
  loss diverges while finite (status 'diverged'), or hands it to a Rollback when one is added.
  Forensics records the first non-finite step (the op that made the NaN: the doctor's best
  evidence) where the run has a model_dir and its step is not compiled whole by XLA; it gives way
  to a Forensics of your own.
  """
  return [policies_lib.CheckNumerics(), clipping.AdaptiveClip(), policies_lib.SkipNonFinite(),
          divergence.DivergenceCheck(), forensics.Forensics(optional=True)]


# The capability flags that became protocols, with what to define instead: a policy that still
# sets one, to any value, is named, never silently left out (a custom loss scale would not scale)
# nor opted out (the base class has none of them).
_OLD_FLAGS = {
    'scales_loss': 'scale_loss, unscale_gradients, is_overflow and loss_scale (the LossScaler '
                   'protocol)',
    'takes_norm_ceiling': 'set_norm_ceiling (the NormCeiling protocol)',
    'reads_variables_finite': 'handle_escalation (the Recovery protocol, which gets the variable '
                              'check; return None to take no escalation), or read '
                              'context.variables_finite() in decide',
    'wants_start_checkpoint': 'handle_escalation (the Recovery protocol, which gets the start '
                              'checkpoint)',
    'decides_after_act': 'decide_after_act (the Rechecker protocol)',
    'marks_best': 'check_monitor and improves (the BestMarker protocol)',
}


def _check_protocols(owner: str, policy) -> None:
  for flag, instead in _OLD_FLAGS.items():
    if hasattr(policy, flag):
      raise errors.ConfigError(
          f'{owner}: policy {policy.name!r} sets {flag}, which stable_train no longer reads; '
          f'define {instead} instead (docs/policies.md, "The hooks"); delete {flag}.')


def model_parts(model, optimizer, loss, metrics, strategy, *, faults, model_dir):
  """(optimizer, loss, metrics, the Keras LossScaleOptimizer around the optimizer or None): a
  compiled model's own parts where none is given, Keras names resolved (in `strategy`'s scope),
  the wrapper `compile` puts around the optimizer under mixed_float16 taken apart (the step
  scales the loss and applies through the inner optimizer), all checked (`check_parts`)."""
  with strategy.scope():
    optimizer, loss, metrics = keras_parts.parts(model, optimizer, loss, metrics)
  optimizer, wrapper = precision.split_loss_scale_optimizer(optimizer)
  check_parts(model, optimizer, loss, faults=faults, model_dir=model_dir)
  return optimizer, loss, metrics, wrapper


def check_parts(model, optimizer, loss, *, faults, model_dir) -> None:
  """One-line ConfigErrors for a model, optimizer, loss, fault plan or model_dir the Trainer
  cannot use."""
  for name, value, example in (('model', model, 'models.mlp()'),
                               ('optimizer', optimizer, 'keras.optimizers.Adam()'),
                               ('loss', loss, 'keras.losses.MeanSquaredError()')):
    if isinstance(value, type):  # gin `@keras.optimizers.Adam` without `()` passes the class.
      raise errors.ConfigError(
          f'Trainer: {name}={value.__name__} is a class; pass an instance, e.g. {example} '
          f'(in gin: add "()" after the reference).')
  if model is None or not callable(model) or not hasattr(model, 'trainable_variables'):
    raise errors.ConfigError(
        f'Trainer: model={model!r} must be a Keras model or a callable tf.Module with '
        'trainable_variables.')
  if optimizer is None or not hasattr(optimizer, 'apply_gradients'):
    raise errors.ConfigError(f'Trainer: optimizer={optimizer!r} must be a Keras 3 optimizer '
                             '(e.g. keras.optimizers.Adam()).')
  if loss is None or not callable(loss):
    raise errors.ConfigError(
        f'Trainer: loss={loss!r} must be callable (labels, predictions) -> scalar.')
  if faults is not None and not isinstance(faults, seams.RunSeams):
    raise errors.ConfigError(f'Trainer: faults={faults!r} must be a stable_train Faults plan '
                             '(a seams.RunSeams).')
  errors.check_dir('Trainer', 'model_dir', model_dir)


def policy_stack(policies, model, strategy, wrapper=None,
                 owner: str = 'Trainer') -> Tuple[List[interfaces.Policy], Optional[object]]:
  """The validated policy list (None: `default_policies()`) and its loss-scaling policy.

  Under float16 compute, or with a Keras LossScaleOptimizer `wrapper` around the optimizer, a
  loss scale is put first when the list has none (with the wrapper's settings): float16
  gradients underflow without it, so a run never trains fp16 unscaled.
  """
  if policies is None:
    policies = default_policies()
  if isinstance(policies, (interfaces.Policy, str)) or not hasattr(policies, '__iter__'):
    raise errors.ConfigError(
        f'{owner}: policies={policies!r} must be a list of policies, e.g. [SkipNonFinite()].')
  policies = list(policies)
  for p in policies:
    if isinstance(p, type) and issubclass(p, interfaces.Policy):  # gin `@SkipNonFinite`.
      raise errors.ConfigError(
          f'{owner}: policies contains the class {p.__name__}; pass an instance, e.g. '
          f'{p.__name__}() (in gin: add "()" after the reference).')
    if not isinstance(p, interfaces.Policy):
      raise errors.ConfigError(
          f'{owner}: policies contains {p!r}, which is not a stable_train Policy.')
    _check_protocols(owner, p)
    if p in _OWNED_POLICIES:  # A second Trainer would start with the first one's counts.
      raise errors.ConfigError(
          f'{owner}: policy {p.name!r} ({type(p).__name__}) already belongs to another '
          'run; its counters are that run\'s state: create new policies for each run.')
  policies = forensics.without_spares(policies)
  names = [p.name for p in policies]
  if len(set(names)) != len(names):
    raise errors.ConfigError(f'{owner}: policy names must be unique, got {names}; pass name=... .')
  best = [p.name for p in policies if isinstance(p, interfaces.BestMarker)]
  if len(best) > 1:
    raise errors.ConfigError(
        f'{owner}: policies {best} would each mark a best checkpoint; keep one '
        '(EarlyStopping marks the best checkpoint too).')
  fp16 = wrapper is not None or precision.compute_dtype(model) == 'float16'
  if fp16 and not any(isinstance(p, interfaces.LossScaler) for p in policies):
    with strategy.scope():
      policies.insert(0, precision.default_loss_scale() if wrapper is None
                      else precision.loss_scale_like(wrapper))
  scales = [p for p in policies if isinstance(p, interfaces.LossScaler)]
  if len(scales) > 1:
    raise errors.ConfigError(f'{owner}: policies hold more than one loss scale '
                             f'({[p.name for p in scales]}); keep one.')
  return policies, (scales[0] if scales else None)


def fit_length(dataset, num_steps, num_epochs, class_weight=None, global_step=None):
  """`fit`'s (dataset, num_steps, epochs) from its arguments: `num_steps`, or `num_epochs` over a
  finite dataset (repeated; epochs = (num_epochs, steps per epoch)); ConfigError otherwise.
  `class_weight` weighs the batches; `global_step`: a later fit's start (a `num_steps` already
  reached trains nothing: said with a warning); None for a first fit."""
  if not isinstance(dataset, tf.data.Dataset):
    raise errors.ConfigError(
        f'Trainer.fit: dataset must be a tf.data.Dataset, got {errors.describe(dataset)}; wrap '
        'arrays as tf.data.Dataset.from_tensor_slices((x, y)).batch(32).')
  if (num_steps is None) == (num_epochs is None):
    raise errors.ConfigError(
        f'Trainer.fit: pass num_steps= (the global step to stop at) or num_epochs= (passes over '
        f'a finite dataset), not {"both" if num_steps is not None else "neither"}.')
  if class_weight is not None:
    dataset = keras_parts.with_class_weight(dataset, class_weight)
  if num_epochs is None:
    num_steps = errors.check_int('Trainer', 'num_steps', num_steps, minimum=1)
    at = int(global_step.numpy()) if global_step is not None else None
    if at is not None and num_steps <= at:
      log.warning('fit(num_steps=%d) trains nothing: the run is at step %d already (num_steps '
                  'is the global step to stop at); pass num_steps=%d to train %d more',
                  num_steps, at, at + num_steps, num_steps)
    return dataset, num_steps, None
  num_epochs = errors.check_int('Trainer.fit', 'num_epochs', num_epochs, minimum=1)
  epochs = (num_epochs, steps_per_epoch(dataset))
  # num_steps until the controller knows the resumed position.
  return dataset.repeat(num_epochs), num_epochs * epochs[1], epochs


def fit_plan(trainer, dataset, num_steps, num_epochs, class_weight, eval_dataset, eval_every,
             eval_steps):
  """`Trainer.fit`'s arguments checked: (dataset, num_steps, epochs, eval_every, eval_steps), the
  dataset weighed and wrapped by the run's seams; each `FitCheck` asked whether it can work with
  this fit."""
  later = trainer.global_step if trainer.controller.fitted else None  # A later fit's start.
  dataset, num_steps, epochs = fit_length(dataset, num_steps, num_epochs, class_weight, later)
  eval_every, eval_steps = evaluation.check_eval_args(eval_dataset, eval_every, eval_steps)
  for p in trainer.policies:
    if isinstance(p, interfaces.FitCheck):
      p.check_fit(metric_names=[m.name for m in trainer.metrics],
                  has_eval=eval_dataset is not None)
  if trainer.faults is not None:
    dataset = trainer.faults.wrap_dataset(dataset)
  return dataset, num_steps, epochs, eval_every, eval_steps


def claim(policies: Sequence[interfaces.Policy]) -> None:
  """Marks the policies as one Trainer's (done last: a Trainer that failed validation claims
  nothing)."""
  _OWNED_POLICIES.update(policies)


def check_metrics(metrics, strategy) -> List[keras.metrics.Metric]:
  """The validated `Trainer(metrics=...)` list (ConfigError naming the bad value)."""
  if metrics is None:
    return []
  if isinstance(metrics, (keras.metrics.Metric, str)) or not hasattr(metrics, '__iter__'):
    raise errors.ConfigError(
        f'Trainer: metrics={metrics!r} must be a list of Keras metrics, e.g. '
        '[keras.metrics.SparseCategoricalAccuracy()].')
  metrics = list(metrics)
  for m in metrics:
    if isinstance(m, type):
      raise errors.ConfigError(
          f'Trainer: metrics contains the class {m.__name__}; pass an instance (in gin: add "()").')
    if not isinstance(m, keras.metrics.Metric):
      raise errors.ConfigError(f'Trainer: metrics contains {m!r}, which is not a Keras metric.')
  names = [m.name for m in metrics]
  if len(set(names)) != len(names):
    raise errors.ConfigError(f'Trainer: metric names must be unique, got {names}; pass name=... .')
  if distribute.uses_distributed_input(strategy):
    for m in metrics:
      # Each replica updates its own copy of a sync-on-read variable, which only the strategy's
      # scope creates; a plain variable would be assigned by every replica at once.
      if not all(strategy.extended.variable_created_in_scope(getattr(v, 'value', v))
                 for v in m.variables):
        raise errors.ConfigError(
            f'Trainer: metric {m.name!r} was created outside {type(strategy).__name__}.scope(); '
            'create the metrics inside `with strategy.scope():`, with the model and optimizer.')
  return metrics


def build(trainer, dataset) -> Tuple[List[tf.Variable], List[str]]:
  """Builds the model (from the dataset's first batch) and the optimizer's slots, checks them,
  builds the policies and binds a fault plan; returns the trainable variables and their paths."""
  t = trainer
  # Data the model cannot take is refused before anything is written (`batch_check`).
  check = batch_check.for_trainer(t, dataset.element_spec, subject='the training dataset',
                                  where=TRAIN_DATA)
  if check is not None:
    check.inputs(t.model)
  if isinstance(t.model, keras.Model) and not t.model.built:
    first = next(iter(dataset.take(1)), None)
    if first is None:
      raise errors.ConfigError(EMPTY_DATASET)
    with t.strategy.scope(), check.building() if check else contextlib.nullcontext():
      t.model(t.split_batch(first)[0], training=False)
  if check is not None:
    check.check(t.model, batch_check.trainer_loss(t))
  variables = list(t.model.trainable_variables)
  if not variables:
    raise errors.ConfigError('Trainer: the model has no trainable variables to train.')
  distribute.check_optimizer(t.optimizer, t.strategy)
  built_for = compat.built_for(t.optimizer)
  if built_for is not None and {id(v) for v in built_for} != {id(v) for v in variables}:
    # Keras keeps an optimizer's slots for the variables it was built for: another model's
    # update would fail deep in apply_gradients.
    raise errors.ConfigError(
        'Trainer: the optimizer was already built for another model\'s variables; give each '
        'model its own optimizer (e.g. keras.optimizers.Adam()).')
  with t.strategy.scope():
    t.optimizer.build(variables)
  t.label_classes = labels_lib.trainer_classes(t, dataset.element_spec)
  if t.uses_own_loss():  # The Trainer's own loss call reads the sample weights.
    keras_parts.check_sample_weights(dataset.element_spec, t.loss_fn)
  paths = [provenance.variable_path(v) for v in variables]
  for p in t.policies:
    p.build(variables, paths)
  if t.faults is not None:
    t.faults.bind(global_step=t.global_step, variables=variables, variable_paths=paths)
  return variables, paths


def steps_per_epoch(dataset: tf.data.Dataset) -> int:
  """Batches in one pass over a finite `dataset`: its cardinality when tf.data knows it, else
  counted by reading it to its end once (a pipeline with a filter, say). ConfigError for one that
  repeats forever or holds no batch."""
  cardinality = int(dataset.cardinality())
  if cardinality == int(tf.data.INFINITE_CARDINALITY):
    raise errors.ConfigError(
        'Trainer.fit: num_epochs needs a finite dataset, but this one repeats forever; drop its '
        '.repeat() (e.g. synthetic_*.repeat = False), or use num_steps.')
  if cardinality == int(tf.data.UNKNOWN_CARDINALITY):
    log.info('num_epochs: counting the batches of one epoch (the dataset does not say)')
    cardinality = int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
  if cardinality == 0:
    raise errors.ConfigError(EMPTY_DATASET)
  return cardinality


def show_progress(logger: logging.Logger) -> None:
  """Makes `logger`'s INFO progress lines visible when nothing else would show them: with no
  handler on it or on the root logger (a plain library caller), a stderr handler at INFO.

  That logger then stops propagating to the root: TensorFlow's checkpoint saver logs through
  absl, which calls `logging.basicConfig()`, and every line would otherwise be printed twice
  from then on. A caller who wants the lines in their own handlers configures logging before
  building the Trainer (it is then left alone).
  """
  if logger.handlers or logging.getLogger().handlers:
    return  # Configured by the caller (absl in the CLI, logging.basicConfig, pytest).
  handler = logging.StreamHandler()
  handler.setFormatter(logging.Formatter('%(message)s'))
  logger.addHandler(handler)
  logger.propagate = False
  if logger.level == logging.NOTSET or logger.level > logging.INFO:
    logger.setLevel(logging.INFO)
