"""Small Keras model factories for the shipped configs."""

from typing import Optional, Sequence

import keras

from stable_train import errors


def mlp(*, input_dim: int = 1000, hidden: Sequence[int] = (256, 128), outputs: int = 1,
        activation: str = 'relu', kernel_initializer='glorot_uniform',
        kernel_regularizer=None, seed: Optional[int] = 0, name: str = 'mlp') -> keras.Model:
  """A multi-layer perceptron: Dense(h, activation) for each h in `hidden`, then Dense(outputs).

  Args:
    input_dim: number of input features.
    hidden: widths of the hidden layers.
    outputs: width of the output layer (1 for regression, the class count for logits).
    activation: hidden activation.
    kernel_initializer: a Keras initializer (object or name).
    kernel_regularizer: an optional Keras regularizer.
    seed: seeds Keras's random initialisation, so the same config gives the same weights.
    name: model name.
  """
  if isinstance(input_dim, bool) or not isinstance(input_dim, int) or input_dim < 1:
    raise errors.ConfigError(f'mlp: input_dim={input_dim!r} must be a positive integer.')
  if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in hidden):
    raise errors.ConfigError(f'mlp: hidden={hidden!r} must be positive integers.')
  if seed is not None:
    keras.utils.set_random_seed(seed)
  layers = [keras.Input((input_dim,))]
  for i, width in enumerate(hidden):
    layers.append(keras.layers.Dense(width, activation=activation, name=f'dense_{i}',
                                     kernel_initializer=kernel_initializer,
                                     kernel_regularizer=kernel_regularizer))
  layers.append(keras.layers.Dense(outputs, name=f'dense_{len(hidden)}',
                                   kernel_initializer=kernel_initializer,
                                   kernel_regularizer=kernel_regularizer))
  return keras.Sequential(layers, name=name)
