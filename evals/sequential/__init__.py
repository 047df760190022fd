"""Sequential designs: group-sequential boundaries (boundaries.py), the accuracy gate's sequential test
(accuracy.py), `run --early-stop` (early_stop.py), the paired sequential A/B test (paired.py, ab.py), and what they
cost (table.py; `python -m specdec_eval.evals.sequential`). Pure statistics: imports gates/ and workers/ only."""
