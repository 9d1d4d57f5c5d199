"""Code as users write it in the threads the sick scenarios cite: hand-written losses, pooling and
attention without the guards the library versions have, and a flaky op (a kernel that misfires
once, as a GPU with a bad kernel or memory does). Each mechanism is the reported one; none of it
knows the doctor's rules."""

import keras
import numpy as np
import tensorflow as tf


def _f32(t):
  return tf.cast(t, tf.float32)


def euclidean_distance(pair_embeddings):
  """sqrt(sum((a - b)^2)) of two embeddings, as keras-team/keras#9097 wrote it: no epsilon, so
  two identical inputs give sqrt(0), whose gradient is inf (and 0 * inf = NaN)."""
  a, b = pair_embeddings
  return tf.sqrt(tf.reduce_sum(tf.square(a - b), axis=-1, keepdims=True))


def contrastive_loss(same, distance, margin=1.0):
  """Hadsell et al.'s contrastive loss on the distance: same pairs pulled together, others
  pushed beyond `margin`."""
  same, distance = _f32(same), _f32(distance)
  return tf.reduce_mean(same * tf.square(distance) +
                        (1 - same) * tf.square(tf.maximum(margin - distance, 0.0)))


def handwritten_bce(y, p):
  """-(y log p + (1 - y) log(1 - p)) on sigmoid outputs, with no clipping (the loss of
  "Keras custom binary cross entropy loss function. Get NaN as output for loss")."""
  y, p = _f32(y), _f32(p)
  return -tf.reduce_mean(y * tf.math.log(p) + (1 - y) * tf.math.log(1 - p))


def relu_probability_ce(y, out):
  """Cross-entropy of 'probabilities' made by normalising a ReLU output layer: a zero output
  for the true class is log(0)."""
  out = _f32(out)
  probs = out / tf.reduce_sum(out, axis=-1, keepdims=True)
  picked = tf.gather(probs, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
  return -tf.reduce_mean(tf.math.log(picked))


def relative_error(y, p):
  """mean(|y - p| / |y|), MAPE written by hand: a zero target divides by zero."""
  y, p = _f32(y), _f32(p)
  return tf.reduce_mean(tf.abs(y - p) / tf.abs(y))


def naive_softmax(x):
  """exp(x) / sum(exp(x)) without subtracting the max: exp overflows above 88.7."""
  e = tf.exp(_f32(x))
  return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def temperature_ce(temperature):
  """The cross-entropy of exp(z / T) / sum(exp(z / T)) computed naively (a distillation or
  contrastive loss at a low temperature)."""

  def loss(y, logits):
    probs = naive_softmax(_f32(logits) / temperature)
    picked = tf.gather(probs, tf.cast(tf.reshape(y, [-1]), tf.int32), batch_dims=1)
    return -tf.reduce_mean(tf.math.log(picked + 1e-7))

  return loss


class MaskedMeanPool(keras.layers.Layer):
  """The mean of the non-padding (non-zero id) positions: sum / count, with no guard for a
  sequence that is all padding (0 / 0)."""

  def call(self, inputs):
    x, ids = inputs
    mask = tf.cast(tf.not_equal(ids, 0), x.dtype)[..., None]
    return tf.reduce_sum(x * mask, axis=1) / tf.reduce_sum(mask, axis=1)


class NegInfMaskedAttention(keras.layers.Layer):
  """Single-head self-attention whose padding keys get -inf scores before the softmax: a
  sequence that is all padding has a row of -inf, and softmax of it is NaN."""

  def __init__(self, dim, **kwargs):
    super().__init__(**kwargs)
    self.dim = dim
    self.qkv = keras.layers.Dense(3 * dim)

  def call(self, inputs):
    x, ids = inputs
    q, k, v = tf.split(self.qkv(x), 3, axis=-1)
    scores = tf.matmul(q, k, transpose_b=True) / (self.dim ** 0.5)
    keep = tf.not_equal(ids, 0)[:, None, :]
    scores = tf.where(keep, scores, tf.constant(-float('inf'), scores.dtype))
    return x + tf.matmul(tf.nn.softmax(scores, axis=-1), v)


class ExpAttentionPool(keras.layers.Layer):
  """Attention pooling over time with the weights written as exp(score) / sum(exp(score))."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.score = keras.layers.Dense(1)

  def call(self, x):
    weights = naive_softmax(tf.squeeze(self.score(x), -1))[..., None]
    return tf.reduce_sum(_f32(x) * weights, axis=1)


class SumPool(keras.layers.Layer):
  """Sum over time (a bag-of-features total), in the layer's compute dtype."""

  def call(self, x):
    return tf.reduce_sum(x, axis=1)


def dice_loss_in_compute_dtype(y, p):
  """1 - 2|y.p| / (|y| + |p|) summed over every pixel in the outputs' dtype (float16 under
  mixed precision: a sum over more than 65504 ones is inf)."""
  y = tf.cast(y, p.dtype)
  intersection = tf.reduce_sum(y * p)
  total = tf.reduce_sum(y) + tf.reduce_sum(p)
  return tf.cast(1.0 - 2.0 * intersection / total, tf.float32)


class _Counter:
  """A call counter kept out of Keras's tracking (a skip puts the model's variables back; a
  misfiring kernel does not remember that it misfired)."""

  def __init__(self):
    with tf.init_scope():
      self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)


class FlakyOnce(keras.layers.Layer):
  """The identity, but on its `at`-th training call it returns NaN in one element (a kernel
  that misfires once; the same inputs give finite outputs on every other call)."""

  def __init__(self, at, **kwargs):
    super().__init__(**kwargs)
    self.at = at
    self.counter = _Counter()

  def call(self, x, training=False):
    if not training:
      return x
    calls = self.counter.calls.assign_add(1)
    corner = tf.reshape(tf.one_hot(0, tf.size(x)), tf.shape(x)) > 0
    bad = tf.logical_and(corner, tf.equal(calls, self.at))  # Never 0 * NaN: that is NaN too.
    return tf.where(bad, tf.constant(float('nan'), x.dtype), x)


class FlakyGradientOnce(FlakyOnce):
  """The identity forward; its backward pass returns NaN once, at the `at`-th training call (a
  backward kernel that misfires once: finite loss, one NaN gradient)."""

  def call(self, x, training=False):
    if not training:
      return x
    calls = self.counter.calls.assign_add(1)
    bad = tf.equal(calls, self.at)

    @tf.custom_gradient
    def flaky(t):
      def grad(dy):
        return tf.where(bad, dy * tf.constant(float('nan'), dy.dtype), dy)
      return tf.identity(t), grad

    return flaky(x)


_ONE_OFF_CALLS = {}  # OneOffFault's training-call counts, by layer: no model variable.


class OneOffFault(keras.layers.Layer):
  """A one-off fault: the identity, except at its `at`-th training call (None: never), where
  element `index` of the activations (or, `backward`, of the gradient flowing back through it)
  reads `value` (NaN, inf: a flipped bit in a buffer, a misfiring kernel). The count lives
  outside the model's variables (made under tf.init_scope): a guard that restores the model
  after a skipped step cannot replay the fault (the blind splits' subclasses fix the element,
  the value and the pass)."""

  def __init__(self, at=None, *, index, value=np.nan, backward=False, **kwargs):
    super().__init__(**kwargs)
    self.at, self.index, self.value, self.backward = at, index, value, backward

  def build(self, shape):
    with tf.init_scope():
      _ONE_OFF_CALLS[id(self)] = tf.Variable(0, dtype=tf.int32, trainable=False)

  def _flip(self, t, hit):
    flip = tf.logical_and(hit, tf.equal(tf.range(tf.size(t)), self.index))
    return t + tf.reshape(tf.where(flip, self.value, 0.0), tf.shape(t))

  def call(self, x, training=False):
    if self.at is None or not training:
      return x
    calls = _ONE_OFF_CALLS[id(self)]
    calls.assign_add(1)
    hit = tf.equal(calls, self.at)
    if not self.backward:
      return self._flip(x, hit)

    @tf.custom_gradient
    def identity(t):
      return tf.identity(t), lambda g: self._flip(g, hit)

    return identity(x)
