"""Tests for stable_train.runfiles.runlock: one live process per model_dir, a killed holder taken over."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from stable_train import errors
from stable_train.runfiles import runlock

_HOLDER = r"""
import os, sys
from stable_train.runfiles import runlock
lock = runlock.RunLock(sys.argv[1]).acquire()
print('locked', flush=True)
if sys.argv[2] == 'die':
  os._exit(137)
sys.stdin.read()
lock.release()
"""



class RunLockTest(tf.test.TestCase):

  def _holder(self, model_dir, mode):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
               TF_CPP_MIN_LOG_LEVEL='3')
    proc = subprocess.Popen([sys.executable, '-c', _HOLDER, model_dir, mode], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    self.addCleanup(lambda: (proc.kill(), proc.wait(), proc.stdin.close(), proc.stdout.close()))
    self.assertEqual(proc.stdout.readline().strip(), 'locked')
    return proc

  def test_hold_releases_on_the_way_out(self):
    model_dir = self.get_temp_dir() + '/held'
    with runlock.hold(model_dir) as lock:
      with open(lock.path) as f:
        self.assertEqual(json.load(f)['pid'], os.getpid())
    with open(lock.path) as f:
      self.assertEqual(f.read(), '')

  def test_a_live_holder_is_named_and_a_dead_one_taken_over(self):
    model_dir = self.get_temp_dir()
    live = self._holder(model_dir, 'hold')
    with self.assertRaisesRegex(errors.ModelDirBusyError,
                                rf'in use by pid {live.pid} on host \S+; wait'):
      runlock.RunLock(model_dir).acquire()
    live.stdin.close()
    live.wait(timeout=60)  # Released cleanly: nothing to take over.
    lock = runlock.RunLock(model_dir).acquire()
    self.assertIsNone(lock.taken_over)
    lock.release()

    dead = self._holder(model_dir, 'die')
    dead.wait(timeout=60)
    lock = runlock.RunLock(model_dir).acquire()
    self.assertEqual(lock.taken_over['pid'], dead.pid)
    again = runlock.RunLock(model_dir).acquire()  # Re-entrant in one process.
    again.release()
    with open(lock.path) as f:
      self.assertEqual(json.load(f)['pid'], os.getpid())
    lock.release()
    with open(lock.path) as f:
      self.assertEqual(f.read(), '')


  def test_a_lock_file_this_module_did_not_write_is_taken_over_or_one_line(self):
    model_dir = self.get_temp_dir() + '/odd'
    os.makedirs(model_dir)
    path = os.path.join(model_dir, runlock.LOCK)
    for text in (b'[1, 2]', b'42', b'"me"', b'\xff\xfe{', b'{"host": "h2"}'):
      with open(path, 'wb') as f:
        f.write(text)
      lock = runlock.RunLock(model_dir).acquire()
      expected = {'pid': '?', 'host': 'h2' if b'h2' in text else '?'}
      self.assertEqual(lock.taken_over, expected, text)
      lock.release()
    with open(path, 'w') as f:
      f.write('[1, 2]')
    from stable_train.runfiles import events  # pylint: disable=g-import-not-at-top
    from stable_train.trainer import trainer as trainer_lib
    import keras  # pylint: disable=g-import-not-at-top
    t = trainer_lib.Trainer(model=keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]),
                            optimizer=keras.optimizers.SGD(), loss=keras.losses.MeanSquaredError(),
                            model_dir=model_dir, policies=[], log_every=100)
    ds = tf.data.Dataset.from_tensors((tf.ones([2, 2]), tf.ones([2, 1]))).repeat()
    self.assertEqual(t.fit(ds, num_steps=1)['status'], 'completed')
    taken = [e for e in events.read_events(os.path.join(model_dir, 'events.jsonl'))
             if e['event'] == 'lock_taken_over']
    self.assertEqual([(e['pid'], e['host']) for e in taken], [('?', '?')])
    os.remove(path)
    os.mkdir(path)  # Not a file at all.
    with self.assertRaises(errors.ConfigError) as ctx:
      runlock.RunLock(model_dir).acquire()
    self.assertEqual(str(ctx.exception), f'cannot open the run lock {path} (Is a directory); it '
                     'must be a writable file: remove or fix it.')

if __name__ == '__main__':
  tf.test.main()
