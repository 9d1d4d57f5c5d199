"""The calibration set of issue 33: healthy runs and field-derived sick scenarios, both front doors,
diagnosed offline by the doctor (`scripts/calibrate.py` is the entry point)."""
