"""Testing tools for rehearsing failure: `Faults`, the fault-injection plan (gin name `Faults`)."""

from stable_train.testing.faults import Faults  # pylint: disable=unused-import
