"""The core: traced or pure pieces of the guarded step (reports, numerics, the guard, the step, the
loop, state); no I/O."""
