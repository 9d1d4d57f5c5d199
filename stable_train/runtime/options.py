"""`RunOptions`: how often a run's host side acts and what it keeps, validated once."""

import dataclasses

from stable_train import errors


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """The cadence of a run, shared by both front doors (the Trainer and `GuardCallback`).

  Frozen and validated at construction: a bad value is a one-line ConfigError naming `owner` and
  the setting. Every count is >= 1 but `healthy_window` (>= 0).

  Attributes:
    steps_per_loop: train steps per traced call; the host reads the reports once per loop (the
      Trainer's; a guarded fit reads per execution).
    checkpoint_every: keep a checkpoint every this many global steps (at loop ends).
    max_checkpoints, keep_good_checkpoints: keep the newest, and known-good ones besides.
    log_every: a progress line every this many steps (the Trainer's).
    summary_every: TensorBoard scalars every this many steps (and on every fault).
    max_refused_checkpoints: this many checkpoints refused in a row (a non-finite variable) are a
      fault: a Rollback takes over, or the run aborts naming the variable.
    healthy_window: a checkpoint is good (a rollback target) only if no fault happened in this
      many steps before it and every variable is finite.
    owner: who is configured, for the messages ('Trainer', 'GuardCallback').
  """
  steps_per_loop: int = 1
  checkpoint_every: int = 100
  max_checkpoints: int = 5
  keep_good_checkpoints: int = 3
  log_every: int = 10
  summary_every: int = 10
  max_refused_checkpoints: int = 2
  healthy_window: int = 50
  owner: str = dataclasses.field(default='Trainer', compare=False, repr=False)

  def __post_init__(self):
    for field in dataclasses.fields(self):
      if field.name != 'owner':
        value = errors.check_int(self.owner, field.name, getattr(self, field.name),
                                 minimum=0 if field.name == 'healthy_window' else 1)
        object.__setattr__(self, field.name, value)  # numpy integers as ints.


# The settings, in the order they are validated.
SETTINGS = tuple(f.name for f in dataclasses.fields(RunOptions) if f.name != 'owner')


def setting(name: str) -> property:
  """An attribute for one setting of its object's `options` (e.g. `trainer.checkpoint_every`):
  reads it; an assignment replaces `options` with the new value, validated."""

  def assign(self, value) -> None:
    self.options = dataclasses.replace(self.options, **{name: value})

  return property(lambda self: getattr(self.options, name), assign,
                  doc=f'`RunOptions.{name}` of `options`; assigning validates the new value.')
