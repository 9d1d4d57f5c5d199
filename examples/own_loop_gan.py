#!/usr/bin/env python3
"""A GAN on the scikit-learn digits in your own training loop, guarded by stable_train.

    pip install '.[examples]' && python examples/own_loop_gan.py

Two models, two optimizers, one `StepGuard`: the generator's and the discriminator's updates of
a step are applied together or skipped together. Three real images are corrupt (NaN): a step
whose batch holds one is skipped (every weight, BatchNorm statistic and optimizer slot, and the
noise generator's state, stay as they were) and the run trains on. Prints per epoch the losses,
the steps skipped and the generated pixels' mean and std (the real ones' for comparison first),
then the run's status and where its files are.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import stable_train  # pylint: disable=g-import-not-at-top

import digits_data  # pylint: disable=g-import-not-at-top

NOISE = 16  # The generator's input size.


def make_models(seed: int = 0):
  """(generator: noise -> 64 pixels in [-1, 1], discriminator: 64 pixels -> 1 logit)."""
  keras.utils.set_random_seed(seed)
  generator = keras.Sequential([
      keras.Input((NOISE,)),
      keras.layers.Dense(64, use_bias=False), keras.layers.BatchNormalization(momentum=0.9),
      keras.layers.LeakyReLU(0.2),
      keras.layers.Dense(64, activation='tanh')], name='generator')
  discriminator = keras.Sequential([
      keras.Input((64,)),
      keras.layers.Dense(64), keras.layers.LeakyReLU(0.2), keras.layers.Dropout(0.3),
      keras.layers.Dense(1)], name='discriminator')
  return generator, discriminator


def real_images(*, shuffle: bool = True, steps_per_epoch=None):
  """(the real images as a dataset of batches of 32, their pixels' mean and std without the NaN
  ones): 64 pixels in [-1, 1]; images 7, 68 and 129 are NaN."""
  (images, _), _ = digits_data.arrays(poison=3)
  real = images.reshape(len(images), 64) * 2.0 - 1.0  # [0, 1] -> [-1, 1], as tanh gives.
  data = tf.data.Dataset.from_tensor_slices(real)
  if shuffle:
    data = data.shuffle(len(real), seed=0)  # Anew every epoch.
  data = data.batch(32, drop_remainder=True).take(steps_per_epoch or -1)
  return data, float(np.nanmean(real)), float(np.nanstd(real))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--epochs', type=int, default=5)
  parser.add_argument('--model_dir', default=None, help='default: a new temporary folder')
  parser.add_argument('--steps_per_epoch', type=int, default=None, help='default: every batch')
  parser.add_argument('--no_shuffle', action='store_true', help='keep the images in order')
  args = parser.parse_args(argv)
  model_dir = args.model_dir or tempfile.mkdtemp(prefix='own_loop_gan.')

  generator, discriminator = make_models()
  data, real_mean, real_std = real_images(shuffle=not args.no_shuffle,
                                          steps_per_epoch=args.steps_per_epoch)
  print(f'real pixels mean {real_mean:+.3f} std {real_std:.3f}')
  # The noise comes from TensorFlow's global generator (seeded here, before the guard is made):
  # its state is a variable, which a skipped step puts back and the checkpoints hold.
  # `tf.random.normal` keeps a hidden seed state in its op, which nothing can save or put back.
  tf.random.set_global_generator(tf.random.Generator.from_seed(0))
  noise = tf.random.get_global_generator()
  g_opt = keras.optimizers.Adam(1e-3, beta_1=0.5)
  d_opt = keras.optimizers.Adam(1e-3, beta_1=0.5)
  bce = keras.losses.BinaryCrossentropy(from_logits=True)
  # The default stack less DivergenceCheck (a GAN's summed loss does not fall as it trains), with
  # a Rollback for a run whose updates keep failing.
  guard = stable_train.StepGuard(                                          # stable_train, 1 of 3
      [generator, discriminator], [g_opt, d_opt],
      policies=[stable_train.CheckNumerics(), stable_train.AdaptiveClip(),
                stable_train.SkipNonFinite(max_consecutive=10), stable_train.Rollback()])

  @tf.function
  def train_step(batch):
    with guard.step(batch) as step:                                        # stable_train, 2 of 3
      with tf.GradientTape(persistent=True) as tape:
        fake = generator(noise.normal([tf.shape(batch)[0], NOISE]), training=True)
        real_logits = discriminator(batch, training=True)
        fake_logits = discriminator(fake, training=True)
        d_loss = (bce(tf.ones_like(real_logits), real_logits)
                  + bce(tf.zeros_like(fake_logits), fake_logits))
        g_loss = bce(tf.ones_like(fake_logits), fake_logits)
      step.apply(tape.gradient(g_loss, generator.trainable_variables), g_loss, optimizer=g_opt)
      step.apply(tape.gradient(d_loss, discriminator.trainable_variables), d_loss,
                 optimizer=d_opt)
    return d_loss, g_loss, step.report['applied']

  probe = np.random.default_rng(1).standard_normal((256, NOISE)).astype(np.float32)
  with stable_train.LoopHost(guard, model_dir=model_dir, checkpoint_every=50) as host:  # 3 of 3
    for epoch in range(1, args.epochs + 1):
      d_losses, g_losses, skipped = [], [], 0
      for batch in data:
        d_loss, g_loss, applied = train_step(batch)
        host.after_step()
        if applied:  # A skipped step's d_loss is NaN, and neither loss made an update.
          d_losses.append(float(d_loss))
          g_losses.append(float(g_loss))
        else:
          skipped += 1
      pixels = generator(probe, training=False).numpy()
      print(f'epoch {epoch}: d_loss {np.mean(d_losses):.3f}, g_loss {np.mean(g_losses):.3f}, '
            f'{skipped} steps skipped; generated pixels mean {pixels.mean():+.3f} '
            f'std {pixels.std():.3f}')

  summary = host.last_summary
  result = {'status': summary['status'], 'skipped_steps': int(summary['skipped_steps']),
            'd_loss': float(np.mean(d_losses)), 'g_loss': float(np.mean(g_losses)),
            'pixels_mean': float(pixels.mean()), 'pixels_std': float(pixels.std()),
            'generator': generator, 'discriminator': discriminator, 'model_dir': model_dir}
  print(f"run {result['status']}: {result['skipped_steps']} steps skipped (batches with a NaN "
        f"image); the run's events, summary and checkpoints are in {model_dir}")
  return result


if __name__ == '__main__':
  main()
