"""`python -m specdec_eval.evals.sequential`: what the sequential designs cost and save (table.py)."""

from .table import main

main()
