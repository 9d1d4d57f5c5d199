"""stable_train: TensorFlow 2 training loops that keep going past NaN."""

from stable_train.clipping import AdaptiveClip, AdaptiveGradClip, ClipByNorm, ClipByValue
from stable_train.diagnostics import InitialisationCheck
from stable_train.errors import CheckpointError, ConfigError, NumericsError, StableTrainError
from stable_train.forensics import Forensics
from stable_train.interfaces import Decision, Policy, StepReports
from stable_train.lr import WarmupSchedule
from stable_train.policies import CheckNumerics, ClipByGlobalNorm, SkipNonFinite, ValidateInputs
from stable_train.recovery import LossSpike, Rollback
from stable_train.trainer import Trainer, default_policies

__version__ = '0.1.0'
