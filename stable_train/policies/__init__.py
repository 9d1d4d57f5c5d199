"""The built-in policies, one family per module: each a small class with its state in variables."""
