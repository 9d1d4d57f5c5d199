"""The Trainer: the model parts and settings of a run, its overridable hooks, and its set-up."""
