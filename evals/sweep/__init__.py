"""`specdec-eval sweep`: one command runs an engine over a grid of configurations and judges every cell against
one base cell on the same documents (grid.py the cells, runner.py running them, judge.py the verdicts, drift.py a
trend test of acceptance over a run)."""
