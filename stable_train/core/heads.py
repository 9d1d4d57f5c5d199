"""The layer (or Functional operation) that makes a Keras model's one output, and its activation:
what the loss/output checks and the collapse probe read of a model's head."""

from typing import Optional

import keras

_LAMBDA_NAMES = dict(sigmoid='sigmoid', softmax='softmax', softmax_v2='softmax', tanh='tanh')
# The activations of keras.ops that a Functional model can end with, by their operation's class.
_OP_NAMES = dict(Relu='relu', Sigmoid='sigmoid', Softmax='softmax', Tanh='tanh')
# The activations that make probabilities (the loss/output checks', `loss_match`).
PROBABILITY_ACTIVATIONS = ('softmax', 'sigmoid', 'hard_sigmoid', 'sparse_sigmoid', 'sparsemax')
UNIT_ACTIVATIONS = ('sigmoid', 'hard_sigmoid', 'sparse_sigmoid')  # Each unit in [0, 1] alone.
# Keras's other activations make no probabilities. Any other name (a function of one's own, a
# softmax by hand) is an activation not known: its numbers decide.
LOGIT_ACTIVATIONS = tuple(
    name for name in dir(keras.activations) if not name.startswith('_')
    and name not in PROBABILITY_ACTIVATIONS + ('get', 'serialize', 'deserialize'))
_SHAPE_ONLY = (keras.layers.Flatten, keras.layers.Reshape, keras.layers.Permute,
               keras.layers.Identity)
# TensorFlow's own functions given as an activation, by their names in Keras.
_TF_NAMES = dict(softmax_v2='softmax', log_softmax_v2='log_softmax', identity='linear',
                 exp='exponential')


def last_activation(model) -> Optional[str]:
  """The name of the activation that makes a Keras model's only output ('softmax', 'sigmoid',
  'linear', ...): that of the layer that produces it (a Sequential's last, a Functional model's
  output's, a nested model's own; a Softmax layer; a Lambda of a named activation). None where
  it cannot be told (a subclassed model, several outputs, another layer; a model or layer whose
  class of the user's has a `call` of its own, which the graph or the attribute may not show)."""
  if not isinstance(model, keras.Model) or own_call(model):
    return None
  layer = output_layer(model)
  if own_call(layer):  # A Dense subclass that applies a softmax in its own call, say.
    return None
  if isinstance(layer, keras.Model):
    return last_activation(layer)
  if isinstance(layer, keras.layers.Softmax):
    return 'softmax'
  if isinstance(layer, keras.layers.ReLU):  # A plain ReLU(); a leaky or capped one is another.
    plain = not layer.max_value and not layer.negative_slope and not layer.threshold
    return 'relu' if plain else None
  if not isinstance(layer, keras.layers.Layer) and type(layer).__module__.startswith('keras.'):
    return _OP_NAMES.get(type(layer).__name__)  # keras.ops.relu(x) in a Functional model.
  if isinstance(layer, keras.layers.Lambda):  # Lambda(tf.sigmoid): its function's own name.
    return _LAMBDA_NAMES.get(getattr(layer.function, '__name__', None))
  activation = getattr(layer, 'activation', None)
  if activation is None:
    return None
  name = getattr(activation, '__name__', None)
  return _TF_NAMES.get(name, name) if isinstance(name, str) else None


def own_call(obj) -> bool:
  """Whether `obj`'s class, or a class of the user's it inherits from before Keras's own, defines
  a `call` of its own (then what it computes is not what its graph or attributes say)."""
  for cls in type(obj).__mro__:
    if cls.__module__.startswith('keras.') or cls is object:
      return False
    if 'call' in vars(cls):
      return True
  return False


def _moves_only(layer) -> bool:
  """Whether `layer` only moves or casts values: a head behind it is the head (a softmax, then
  mixed precision's `Activation('linear', dtype='float32')`, is a softmax head)."""
  return not own_call(layer) and (isinstance(layer, _SHAPE_ONLY) or (
      isinstance(layer, keras.layers.Activation)
      and getattr(layer.activation, '__name__', None) == 'linear'))


def output_layer(model):
  """The layer whose output is a Keras model's only output (or, in a Functional model, the
  operation: `keras.ops.relu(x)`), past layers that only move or cast values (`Flatten`,
  `Reshape`, `Permute`, `Identity`, a linear `Activation`: a ReLU head then a Flatten is a ReLU
  head), or None (subclassed, several outputs)."""
  if isinstance(model, keras.Sequential):
    layers = list(model.layers)
    while len(layers) > 1 and _moves_only(layers[-1]):
      layers.pop()
    return layers[-1] if layers else None
  try:
    outputs = model.outputs
    if not outputs or len(outputs) != 1:
      return None
    layer = _producer(model, outputs[0])
    while _moves_only(layer):
      layer = _producer(model, layer.input)
    return layer
  except (AttributeError, ValueError, RuntimeError):  # Subclassed, or a layer used twice.
    return None


def _producer(model, tensor):
  """The layer or operation of a Functional `model` whose output is `tensor`, or None."""
  for layer in reversed(getattr(model, 'operations', None) or model.layers):
    if layer.output is tensor:
      return layer
  return None
