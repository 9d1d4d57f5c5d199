"""Tests for stable_train.errors: the shared integer validation and the description of a value."""

import os

import numpy as np
import tensorflow as tf

from stable_train import errors


class CheckIntTest(tf.test.TestCase):

  def test_accepts_python_and_numpy_integers(self):
    self.assertEqual(errors.check_int('T', 'n', 3), 3)
    self.assertEqual(errors.check_int('T', 'n', np.int64(4), minimum=1), 4)
    self.assertIsInstance(errors.check_int('T', 'n', np.int32(2)), int)

  def test_refuses_with_one_line_naming_owner_argument_and_value(self):
    for value, kwargs in [(True, {}), (2.0, {}), ('3', {}), (-1, {}), (0, {'minimum': 1}),
                          (9, {'minimum': 2, 'maximum': 8})]:
      with self.assertRaises(errors.ConfigError) as ctx:
        errors.check_int('Owner', 'count', value, **kwargs)
      message = str(ctx.exception)
      self.assertIn(f'Owner: count={value!r}', message)
      self.assertEqual(len(message.splitlines()), 1)
    self.assertIsInstance(errors.ConfigError('x'), ValueError)

  def test_every_integer_argument_goes_through_check_int(self):
    from stable_train.app import cli  # pylint: disable=g-import-not-at-top
    from stable_train.zoo import data
    from stable_train.runtime import distribute
    from stable_train.zoo import models
    from stable_train.policies import basic as policies
    calls = [
        ('train: num_steps', lambda v: cli.train(model_dir='unused', num_steps=v)),
        ('dataset: batch_size', lambda v: data.synthetic_regression(batch_size=v)),
        ('dataset: num_classes', lambda v: data.synthetic_classification(num_classes=v)),
        ('mirrored_strategy: num_logical_cpus',
         lambda v: distribute.mirrored_strategy(num_logical_cpus=v)),
        ('mlp: input_dim', lambda v: models.mlp(input_dim=v)),
        ('mlp: hidden', lambda v: models.mlp(hidden=(4, v))),
        ('mlp: outputs', lambda v: models.mlp(outputs=v)),
        ('ValidateInputs: num_classes', lambda v: policies.ValidateInputs(num_classes=v)),
    ]
    for prefix, call in calls:
      for value in (True, 2.5, 0):
        with self.subTest(argument=prefix, value=value):
          with self.assertRaisesRegex(errors.ConfigError, f'^{prefix}={value!r} must be an integer'):
            call(value)
    # numpy integers are integers everywhere.
    self.assertEqual(policies.ValidateInputs(num_classes=np.int64(3)).num_classes, 3)
    self.assertEqual(models.mlp(input_dim=np.int32(4), hidden=(np.int64(2),)).input_shape,
                     (None, 4))


# What TensorFlow 2.21 raised on this machine when a checkpoint write met a full disk (a 16 kB
# tmpfs): from the traced writer, and from an eager `tf.train.Checkpoint.write`.
FULL_DISK_GRAPH = (
    'Graph execution error:\n\nDetected at node SaveV2 defined at (most recent call last):\n'
    '  File "/tmp/r_full.py", line 7, in <module>\n\n'
    '  File "/repo/stable_train/core/state.py", line 206, in write\n\n'
    '/tmp/tiny/ckpt-1_temp/part-00000-of-00001.data-00000-of-00001.tempstate1083; No space left '
    'on device\n\t [[{{node SaveV2}}]]\nHint: If you want to see a list of allocated tensors '
    'when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current '
    "allocation info. This isn't available when running in Eager mode.\n [Op:__inference_write_31]")
FULL_DISK_EAGER = (
    '{{function_node __wrapped__SaveV2_dtypes_3_device_/job:localhost/replica:0/task:0/device:CPU:0'
    '}} /tmp/tiny/ckpt-2_temp/part-00000-of-00001.data-00000-of-00001.tempstate8443; No space '
    'left on device [Op:SaveV2]')


class CheckDirTest(tf.test.TestCase):
  test_session = None

  def test_a_file_in_the_way_is_one_line_before_anything_is_written(self):
    in_the_way = os.path.join(self.get_temp_dir(), 'a_file')
    with open(in_the_way, 'w') as f:
      f.write('kept')
    for model_dir in (in_the_way, os.path.join(in_the_way, 'run')):
      with self.assertRaisesRegex(errors.ConfigError, f'^Owner: model_dir=.* cannot be a '
                                  f'directory: {in_the_way} is a file; remove it, or use another '
                                  'model_dir.$'):
        errors.check_dir('Owner', 'model_dir', model_dir)
    with open(in_the_way) as f:
      self.assertEqual(f.read(), 'kept')  # Nothing lost.
    fresh = os.path.join(self.get_temp_dir(), 'new', 'run')
    self.assertEqual(errors.check_dir('Owner', 'model_dir', fresh), fresh)
    self.assertFalse(os.path.exists(fresh))  # Checked, not made.
    self.assertIsNone(errors.check_dir('Owner', 'model_dir', None))
    with self.assertRaisesRegex(errors.ConfigError, "model_dir=3 must be a directory path"):
      errors.check_dir('Owner', 'model_dir', 3)


class OneLineTest(tf.test.TestCase):

  def test_a_full_disk_inside_tensorflow_is_named(self):
    for text, path in ((FULL_DISK_GRAPH, '/tmp/tiny/ckpt-1_temp/'),
                       (FULL_DISK_EAGER, '/tmp/tiny/ckpt-2_temp/')):
      line = errors.one_line(tf.errors.ResourceExhaustedError(None, None, text))
      self.assertStartsWith(line, 'No space left on device: ' + path)
      self.assertNotIn('function_node', line)
      self.assertNotIn('[Op:', line)
    full = OSError(28, 'No space left on device', '/tmp/run/events.jsonl')
    self.assertEqual(errors.one_line(full), 'No space left on device: /tmp/run/events.jsonl')

  def test_the_informative_line_of_a_wrapped_error(self):
    wrapped = ValueError('Exception encountered when calling Sequential.call().\n\n'
                         '\x1b[1mInput 0 of layer "dense" is incompatible with the layer: '
                         'expected axis -1 of input shape to have value 8\x1b[0m\n\n'
                         'Arguments received by Sequential.call():\n  \u2022 inputs=tf.Tensor\n'
                         "  In call to configurable 'train' (<function train at 0x7f>)")
    self.assertEqual(errors.one_line(wrapped), 'Input 0 of layer "dense" is incompatible with '
                     'the layer: expected axis -1 of input shape to have value 8')
    self.assertEqual(errors.one_line(RuntimeError()), 'RuntimeError')

  def test_an_error_raised_while_tracing_keeps_its_type_and_its_line(self):
    """autograph re-raises only exceptions it can rebuild from a message (else a StagingError,
    which neither `except ConfigError` nor the CLI's handlers catch)."""
    for kind in (errors.ConfigError, errors.NumericsError, errors.CheckpointError):

      def traced(x, kind=kind):
        if x.shape[-1] != 2:  # Python control flow: autograph converts the function.
          raise kind('T: x must have 2 columns.')
        return x

      with self.assertRaises(kind) as caught:
        tf.function(traced)(tf.ones([1, 3]))
      self.assertEqual(errors.one_line(caught.exception), 'T: x must have 2 columns.')


if __name__ == '__main__':
  tf.test.main()


class DescribeTest(tf.test.TestCase):

  def test_names_kind_shape_and_dtype_never_the_values(self):
    big = np.full((500, 30), 7.25, np.float32)
    self.assertEqual(errors.describe(big), 'a numpy array of shape (500, 30) (float32)')
    self.assertEqual(errors.describe(tf.zeros([2, 3])), 'a tensor of shape (2, 3) (float32)')
    text = errors.describe({'x': big, 'y': big[:, 0], 'w': big, 'z': big})
    self.assertTrue(text.startswith('a dict of 4 (a numpy array of shape (500, 30)'), text)
    self.assertNotIn('7.25', text)
    self.assertLessEqual(len(text), 300)
    self.assertEqual(errors.describe(3), '3')
    self.assertEqual(errors.describe('x' * 100), 'a str')
