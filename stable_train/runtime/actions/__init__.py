"""The cadence actions: each a *when* (`due(step)`) and a *what* (`run(step)`)."""
