"""Seeded synthetic data and the zoo models, for the CLI, examples and tests."""
