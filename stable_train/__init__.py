"""stable_train: TensorFlow 2 training loops that keep going past NaN."""

import importlib

from stable_train.errors import (CheckpointError, ConfigError, NumericsError, RunAborted,
                                 StableTrainError)

# Imported on first use, so that `stable_train.app.cli` starts (and installs its signal handlers)
# before TensorFlow is imported: a signal during that import is then a clean one-line stop.
_LAZY = {
    'Forensics': 'forensics.forensics', 'ValidateInputs': 'policies.basic',
    'Decision': 'core.interfaces', 'Policy': 'core.interfaces', 'PolicyContext': 'core.interfaces',
    'RunHandle': 'core.interfaces',
    'StepReports': 'core.interfaces',
    'CheckNumerics': 'policies.basic', 'ClipByGlobalNorm': 'policies.basic',
    'SkipNonFinite': 'policies.skipping',
    'LossSpike': 'policies.recovery', 'Rollback': 'policies.recovery',
    'Trainer': 'trainer.trainer', 'default_policies': 'trainer.trainer',
    'Faults': 'testing.faults',
    'AdaptiveClip': 'policies.clipping', 'AdaptiveGradClip': 'policies.clipping',
    'ClipByNorm': 'policies.clipping', 'ClipByValue': 'policies.clipping',
    'InitialisationCheck': 'policies.diagnostics', 'WarmupSchedule': 'core.lr',
    'DivergenceCheck': 'policies.divergence', 'OutlierSkip': 'policies.outliers',
    'DynamicLossScale': 'policies.precision', 'load_for_inference': 'app.export',
    'BestCheckpoint': 'policies.stopping', 'EarlyStopping': 'policies.stopping',
    'StepGuard': 'own_loop.guard', 'LoopHost': 'own_loop.host',
    'guard_fit': 'keras.fit', 'KerasGuard': 'keras.fit', 'GuardCallback': 'keras.callbacks',
    'GuardedOptimizer': 'own_loop.optimizer',
}

# Modules that lived at the top of the package before the layers: `from stable_train import
# events` (and models, data) still works for scripts written then (../shared/bench/perf.py).
_MOVED_MODULES = {'events': 'runfiles.events', 'models': 'zoo.models', 'data': 'zoo.data'}

__all__ = ['CheckpointError', 'ConfigError', 'NumericsError', 'RunAborted', 'StableTrainError',
           *_LAZY]
__version__ = '0.1.0'


def __getattr__(name):
  if name in _LAZY:
    value = getattr(importlib.import_module(f'stable_train.{_LAZY[name]}'), name)
    globals()[name] = value
    return value
  if name in _MOVED_MODULES:
    return importlib.import_module(f'stable_train.{_MOVED_MODULES[name]}')
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(__all__)
