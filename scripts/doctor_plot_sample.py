#!/usr/bin/env python3
"""The sample picture of docs/doctor.md (docs/images/doctor_plot.png), from a real troubled run.

    python scripts/doctor_plot_sample.py [--out=docs/images/doctor_plot.png]

Trains the quickstart MLP with SGD warmed up to a rate far too high (2.0 over 200 steps) and
`Rollback()` in the default stack, as `stable-train` would (scripts/train.py, 300 steps, scalars
every 5 steps), then draws it with `stable-train doctor DIR --plot FILE`. The loss diverges at
the warm-up's rate, DivergenceCheck hands the run to Rollback, which goes back to a good
checkpoint at a tenth of the rate; the run completes. About a minute on 2 cores.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from stable_train.doctor import doctor  # pylint: disable=g-import-not-at-top

GIN = ['train.num_steps = 300', 'Trainer.optimizer = @keras.optimizers.SGD()',
       'keras.optimizers.SGD.learning_rate = @WarmupSchedule()',
       'WarmupSchedule.schedule_or_rate = 2.0', 'WarmupSchedule.warmup_steps = 200',
       'Trainer.checkpoint_every = 25', 'Trainer.summary_every = 5',
       'Trainer.policies = [@CheckNumerics(), @AdaptiveClip(), @SkipNonFinite(), '
       '@DivergenceCheck(), @Rollback()]']


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', default=os.path.join(ROOT, 'docs', 'images', 'doctor_plot.png'))
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    model_dir = os.path.join(tmp, 'sgd_warmup_too_hot')
    command = [sys.executable, os.path.join(ROOT, 'scripts', 'train.py'),
               f"--gin_file={os.path.join(ROOT, 'configs', 'quickstart.gin')}",
               f'--model_dir={model_dir}'] + [f'--gin_param={line}' for line in GIN]
    print('$ python', shlex.join(command[1:]), flush=True)
    code = subprocess.call(command, env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
    if code:
      return code
    return doctor.main(['stable-train doctor', model_dir, '--plot', args.out])


if __name__ == '__main__':
  sys.exit(main())
