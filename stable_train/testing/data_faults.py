"""The data faults of a fault plan: NaN/Inf in the first element of the features or the labels of
chosen batches of the dataset's stream, or of each batch with a probability (seeded, stateless:
the same batches on every run), as one dataset stage."""

from typing import Any, Dict, List, Sequence, Tuple

import tensorflow as tf

from stable_train import errors


def steps(owner: str, name: str, values, minimum: int) -> Tuple[int, ...]:
  if isinstance(values, (str, bytes)) or not hasattr(values, '__iter__'):
    raise errors.ConfigError(f'{owner}: {name}={values!r} must be a list of integers, e.g. [5, 7].')
  # A tuple: a tf.Module would turn a list into tracked, checkpointed state.
  return tuple(sorted(errors.check_int(owner, name, v, minimum=minimum) for v in values))


def probability(name: str, value) -> float:
  return errors.check_number('Faults', name, value, low=0.0, high=1.0,
                             what='a probability in [0, 1]')


class DataFaults:
  """The data faults of `Faults` (0-based batch indices in the dataset's stream)."""

  def __init__(self, *, seed: int, feature_nan_batches: Sequence[int] = (),
               feature_inf_batches: Sequence[int] = (), label_nan_batches: Sequence[int] = (),
               label_inf_batches: Sequence[int] = (), feature_nan_probability: float = 0.0):
    """Args: see `Faults`."""
    self.seed = seed
    # Keyed by the event's kind: '<feature|label>_<nan|inf>'.
    self.batches = {
        'feature_nan': steps('Faults', 'feature_nan_batches', feature_nan_batches, 0),
        'feature_inf': steps('Faults', 'feature_inf_batches', feature_inf_batches, 0),
        'label_nan': steps('Faults', 'label_nan_batches', label_nan_batches, 0),
        'label_inf': steps('Faults', 'label_inf_batches', label_inf_batches, 0),
    }
    self.probability = probability('feature_nan_probability', feature_nan_probability)

  @property
  def active(self) -> bool:
    return any(self.batches.values()) or self.probability > 0

  def hits(self, index: int) -> List[Dict[str, Any]]:
    """The data faults injected into batch `index` (host side, the same decision as the stage)."""
    found = [{'kind': kind, 'batch': index}
             for kind, batches in self.batches.items() if index in batches]
    if self.probability > 0 and bool(self._random_hit(tf.constant(index, tf.int64))):
      if not any(f['kind'] == 'feature_nan' for f in found):
        found.append({'kind': 'feature_nan', 'batch': index, 'probability': True})
    return found

  def _random_hit(self, index):
    draw = tf.random.stateless_uniform([], seed=tf.stack([tf.constant(self.seed, tf.int64), index]))
    return draw < self.probability

  def wrap(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The dataset with the configured data faults; the dataset itself when there are none."""
    if not self.active:
      return dataset
    spec = dataset.element_spec
    if isinstance(spec, dict):
      labels_spec = spec.get('labels', spec.get('label'))
      features_spec = {k: v for k, v in spec.items() if k not in ('labels', 'label')}
    else:
      features_spec, labels_spec = spec
    for part, part_spec in (('feature', features_spec), ('label', labels_spec)):
      wanted = [k for k, b in self.batches.items() if k.startswith(part) and b]
      if part == 'feature' and self.probability > 0:
        wanted.append('feature_nan')
      floats = [s for s in tf.nest.flatten(part_spec) if s.dtype.is_floating]
      if wanted and not floats:  # Checked here: raised inside the map it becomes a traceback.
        raise errors.ConfigError(
            f'Faults: {wanted[0]}_batches needs a floating-point {part} tensor to make '
            f'non-finite, but the {part}s are {[s.dtype.name for s in tf.nest.flatten(part_spec)]}; '
            f'drop the {part}_* faults for this dataset.')

    def poison_first(tensors, value, what):
      leaves = tf.nest.flatten(tensors)
      for i, t in enumerate(leaves):
        if t.dtype.is_floating:
          corner = tf.zeros([1, len(t.shape)], tf.int32)
          leaves[i] = tf.tensor_scatter_nd_update(t, corner, tf.cast(value, t.dtype)[tf.newaxis])
          return tf.nest.pack_sequence_as(tensors, leaves)
      raise errors.ConfigError(f'Faults: the {what} have no floating-point tensor to make '
                               'non-finite; drop the label_* faults for integer labels.')

    def stage(index, batch):
      if isinstance(batch, dict):
        labels_key = 'labels' if 'labels' in batch else 'label'
        features = {k: v for k, v in batch.items() if k != labels_key}
        labels = batch[labels_key]
      else:
        features, labels = batch
      parts = {'feature': features, 'label': labels}
      for kind, batches in self.batches.items():
        part, value = kind.split('_')
        random = kind == 'feature_nan' and self.probability > 0
        if not batches and not random:
          continue  # No op for a fault that is not configured.
        hit = tf.reduce_any(tf.equal(tf.constant(batches, tf.int64, shape=[len(batches)]), index))
        if random:
          hit = tf.logical_or(hit, self._random_hit(index))
        value = tf.constant(float(value), tf.float32)
        current = parts[part]
        parts[part] = tf.cond(hit, lambda c=current, v=value, p=part: poison_first(c, v, p),
                              lambda c=current: c)
      if isinstance(batch, dict):
        return dict(parts['feature'], **{labels_key: parts['label']})
      return parts['feature'], parts['label']

    return dataset.enumerate().map(stage)
