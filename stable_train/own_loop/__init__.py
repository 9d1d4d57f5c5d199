"""Your own training loop: the guard as a building block of a hand-written GradientTape step
(`StepGuard`, its host half `LoopHost`, and the one-line `GuardedOptimizer`)."""
