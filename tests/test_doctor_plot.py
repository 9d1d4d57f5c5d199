"""Tests for stable_train.doctor.plot and `stable-train doctor DIR --plot FILE.png`: the picture of
a real troubled run (skips, a clip, a rollback), its marks read back from the PNG's own text
chunks, the fallbacks for older run directories, and the line without matplotlib."""

import contextlib
import io
import json
import os
import shutil
import struct
import sys
import tempfile
import zlib
from unittest import mock

import keras
import tensorflow as tf
import pytest

from stable_train.doctor import doctor
from stable_train.doctor import plot
from stable_train.policies import basic as policies
from stable_train.policies import clipping
from stable_train.policies import recovery
from stable_train.runfiles import events as events_lib
from stable_train.testing import faults as faults_lib
from stable_train.trainer import trainer as trainer_lib
from stable_train.zoo import data
from stable_train.zoo import models

FEATURES = 16
SKIPPED = [6, 14, 15]  # NaN gradients, injected; 14 and 15 in a row trigger the rollback.
ROLLBACK = {'from': 15, 'to': 10}  # Back to the checkpoint at step 10.
SPIKE = 20  # A loss x1000 at step 20: AdaptiveClip clips its gradient.


def png_text(path):
  """{key: text} of a PNG's tEXt, zTXt and iTXt chunks (read here, without an image library)."""
  with open(path, 'rb') as f:
    data = f.read()
  if data[:8] != b'\x89PNG\r\n\x1a\n':
    raise AssertionError(f'{path} is not a PNG')
  out, pos = {}, 8
  while pos + 8 <= len(data):
    length, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind in (b'tEXt', b'zTXt', b'iTXt'):
      key, rest = body.split(b'\0', 1)
      if kind == b'tEXt':
        text = rest.decode('latin-1')
      elif kind == b'zTXt':
        text = zlib.decompress(rest[1:]).decode('latin-1')
      else:  # Compression flag and method, language tag, translated key, text.
        _, _, value = rest[2:].split(b'\0', 2)
        text = (zlib.decompress(value) if rest[0] else value).decode('utf-8')
      out[key.decode('latin-1')] = text
    pos += 12 + length
  return out


def run_doctor(*argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = doctor.main(['stable-train doctor'] + list(argv))
  return code, out.getvalue(), err.getvalue()


class PlotTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.run_dir = os.path.join(cls.root, 'troubled')
    # A real run, written by the real recorder: scalars every step, faults injected by `Faults`
    # (a NaN gradient of one variable, a loss spike: the same on every CPU).
    t = trainer_lib.Trainer(
        model=models.mlp(input_dim=FEATURES, hidden=(16,), outputs=1),
        optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.MeanSquaredError(),
        policies=[policies.CheckNumerics(), clipping.AdaptiveClip(warmup_steps=3),
                  policies.SkipNonFinite(max_consecutive=1), recovery.Rollback()],
        faults=faults_lib.Faults(gradient_nan_steps=SKIPPED,
                                 gradient_variable='mlp/dense_0/kernel',
                                 loss_spike_steps=[SPIKE], loss_spike_factor=1000.0),
        model_dir=cls.run_dir, steps_per_loop=5, checkpoint_every=5, healthy_window=0,
        summary_every=1, verbose=False)
    cls.summary = t.fit(data.synthetic_regression(num_features=FEATURES, num_examples=256),
                        num_steps=25)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_the_png_shows_the_skips_the_rollback_the_clip_and_the_diagnosis(self):
    self.assertEqual(self.summary['status'], 'completed')
    path = os.path.join(self.get_temp_dir(), 'figures', 'run.png')  # Its folder is made.
    code, out, err = run_doctor(self.run_dir, '--plot', path)
    self.assertEqual(code, 0)
    events, summary, forensics, names = doctor.load(self.run_dir)
    d = doctor.diagnose(events, summary, forensics, names=names)
    self.assertEqual(out, doctor.format_diagnosis(d))  # The diagnosis is printed as before.
    self.assertIn(f'doctor: drew {path} (3 skips, 1 clips, 1 rollbacks, 0 stops; values from '
                  'tensorboard scalars + history events)', err)
    text = png_text(path)  # Read from the file itself.
    marks = json.loads(text[plot.METADATA_KEY])
    self.assertEqual(marks['skips'], SKIPPED)
    self.assertEqual(marks['skip_faults'], {'gradient': SKIPPED})
    self.assertEqual([{k: r[k] for k in ('from', 'to')} for r in marks['rollbacks']], [ROLLBACK])
    self.assertEqual(marks['clips'], [SPIKE])
    self.assertEqual(marks['stops'], [])
    self.assertEqual(marks['trouble_began'], 6)
    self.assertEqual((marks['label'], marks['source']),
                     (d['label'], 'tensorboard scalars + history events'))
    self.assertEqual(marks['steps'], [0, 25])  # From the start event to the last step.
    self.assertEqual(marks['panels'], ['loss', 'grad_norm', 'learning_rate'])  # Scale all 1.
    self.assertIn(d['label'], text['Title'])
    self.assertEqual(text['Description'], doctor.format_diagnosis(d))
    # The Python API draws the same marks; the file is replaced whole (no temporary left).
    self.assertEqual(doctor.plot(self.run_dir, path), marks)
    self.assertEqual(os.listdir(os.path.dirname(path)), ['run.png'])
    code, out, _ = run_doctor(self.run_dir, '--json', '--plot', path)
    self.assertEqual((code, json.loads(out)), (0, json.loads(json.dumps(d))))

  def test_without_scalars_the_history_events_are_drawn(self):
    old = os.path.join(self.get_temp_dir(), 'no_scalars')
    shutil.copytree(self.run_dir, old, ignore=shutil.ignore_patterns('tensorboard'))
    marks = doctor.plot(old, os.path.join(old, 'run.png'))
    self.assertEqual(marks['source'], 'history events')
    self.assertEqual(marks['skips'], SKIPPED)
    self.assertEqual([{k: r[k] for k in ('from', 'to')} for r in marks['rollbacks']], [ROLLBACK])
    self.assertLessEqual(marks['steps'][0], 6)  # The window before the first trouble.

  @pytest.mark.slow
  def test_a_directory_with_no_per_step_records_still_draws_its_marks(self):
    # The records of a run written before the doctor: skips and an abort, no history, no
    # TensorBoard scalars.
    old = os.path.join(self.get_temp_dir(), 'old')
    os.makedirs(old)
    records = [{'event': 'start', 'step': 0, 'num_steps': 200}] + [
        {'event': 'skip', 'step': k, 'fault': 'loss', 'loss': 'nan', 'grad_norm': 'nan'}
        for k in range(1, 22)] + [{'event': 'abort', 'step': 21, 'trigger': 'consecutive_skips',
                                   'reason': '21 consecutive non-finite steps'}]
    with open(os.path.join(old, 'events.jsonl'), 'w') as f:
      f.writelines(json.dumps(r) + '\n' for r in records)
    events_lib.write_json_atomic(os.path.join(old, 'summary.json'),
                                 {'status': 'aborted', 'skipped_steps': 21})
    path = os.path.join(old, 'run.png')
    code, _, err = run_doctor(old, '--plot', path)
    self.assertEqual(code, 0)
    self.assertIn('values from no per-step record: the marks only', err)
    marks = json.loads(png_text(path)[plot.METADATA_KEY])
    self.assertEqual((marks['source'], marks['skips']), (None, list(range(1, 22))))
    self.assertEqual(marks['stops'], [{'step': 21, 'status': 'aborted',
                                       'trigger': 'consecutive_skips'}])
    self.assertEqual(marks['steps'], [0, 21])

  @pytest.mark.slow
  def test_a_loss_scale_that_moved_gets_its_panel_and_overflows_their_mark(self):
    fp16 = os.path.join(self.get_temp_dir(), 'fp16')
    writer = events_lib.Scalars(os.path.join(fp16, 'tensorboard'))
    for step, scale in ((1, 32768.0), (2, 16384.0), (3, 16384.0), (4, 8192.0)):
      writer.write(step, {'loss': 1.0, 'grad_norm': 1.0, 'grad_norm_clipped': 1.0,
                          'learning_rate': 1e-3, 'loss_scale': scale})
    writer.close()
    with open(os.path.join(fp16, 'events.jsonl'), 'w') as f:
      f.writelines(json.dumps({'event': 'skip', 'step': k, 'fault': 'overflow'}) + '\n'
                   for k in (2, 4))
    marks = doctor.plot(fp16, os.path.join(fp16, 'run.png'))
    self.assertEqual(marks['panels'], ['loss', 'grad_norm', 'learning_rate', 'loss_scale'])
    self.assertEqual((marks['skip_faults'], marks['label']),
                     ({'overflow': [2, 4]}, 'no trouble found'))

  def test_without_matplotlib_the_doctor_says_how_to_get_it(self):
    path = os.path.join(self.get_temp_dir(), 'none.png')
    hidden = {name: None for name in list(sys.modules)
              if name == 'matplotlib' or name.startswith('matplotlib.')}
    with mock.patch.dict(sys.modules, {'matplotlib': None, **hidden}):
      self.assertFalse(plot.available())
      code, out, err = run_doctor(self.run_dir, '--plot', path)
      with self.assertRaises(plot.MatplotlibMissing):
        doctor.plot(self.run_dir, path)
    self.assertEqual((code, out), (2, ''))
    self.assertEqual(err, "doctor: --plot needs matplotlib: pip install 'stable_train[plot]'\n")
    self.assertFalse(os.path.exists(path))

  def test_a_plot_that_cannot_be_written_is_one_line_and_exit_2(self):
    blocker = os.path.join(self.get_temp_dir(), 'a_file')
    with open(blocker, 'w') as f:
      f.write('not a folder')
    code, out, err = run_doctor(self.run_dir, '--plot', os.path.join(blocker, 'run.png'))
    self.assertEqual(code, 2)
    self.assertTrue(out.startswith('doctor: '))  # The diagnosis came first.
    self.assertRegex(err, r'^doctor: cannot write .*a_file/run\.png: ')
    self.assertEqual(err.count('\n'), 1)


if __name__ == '__main__':
  tf.test.main()
