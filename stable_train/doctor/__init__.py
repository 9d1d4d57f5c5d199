"""The doctor: a run's records read into symptoms, the rules that name a cause. Files only, no
TensorFlow."""
