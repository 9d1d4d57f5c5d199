"""A run's files: atomic writes and events, the checkpoint keeper, its manifest, the run lock."""
