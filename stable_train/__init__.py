"""stable_train: TensorFlow 2 training loops that keep going past NaN."""

import importlib

from stable_train.errors import (CheckpointError, ConfigError, NumericsError, RunAborted,
                                 StableTrainError)

# Imported on first use, so that `stable_train.cli` starts (and installs its signal handlers)
# before TensorFlow is imported: a signal during that import is then a clean one-line stop.
_LAZY = {
    'Forensics': 'forensics', 'ValidateInputs': 'policies',
    'Decision': 'interfaces', 'Policy': 'interfaces', 'PolicyContext': 'interfaces',
    'RunHandle': 'interfaces',
    'StepReports': 'interfaces',
    'CheckNumerics': 'policies', 'ClipByGlobalNorm': 'policies', 'SkipNonFinite': 'policies',
    'LossSpike': 'recovery', 'Rollback': 'recovery',
    'Trainer': 'trainer', 'default_policies': 'trainer',
    'Faults': 'testing.faults',
    'AdaptiveClip': 'clipping', 'AdaptiveGradClip': 'clipping', 'ClipByNorm': 'clipping',
    'ClipByValue': 'clipping', 'InitialisationCheck': 'diagnostics', 'WarmupSchedule': 'lr',
    'DivergenceCheck': 'divergence', 'OutlierSkip': 'outliers',
    'DynamicLossScale': 'precision', 'load_for_inference': 'export',
    'BestCheckpoint': 'stopping', 'EarlyStopping': 'stopping',
    'guard_fit': 'keras_fit', 'KerasGuard': 'keras_fit', 'GuardCallback': 'keras_callbacks',
}

__all__ = ['CheckpointError', 'ConfigError', 'NumericsError', 'RunAborted', 'StableTrainError',
           *_LAZY]
__version__ = '0.1.0'


def __getattr__(name):
  if name in _LAZY:
    value = getattr(importlib.import_module(f'stable_train.{_LAZY[name]}'), name)
    globals()[name] = value
    return value
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(__all__)
