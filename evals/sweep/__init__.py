"""`specdec-eval sweep`: one command runs an engine over a grid of configurations and judges every cell against
one base cell on the same documents (`grid` the cells, `runner` running them, `judge` the verdicts, `drift` a
trend test of acceptance over a run)."""
