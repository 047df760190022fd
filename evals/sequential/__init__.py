"""Sequential designs: group-sequential boundaries (boundaries.py), the accuracy gate's sequential test
(accuracy.py), `run --early-stop` (early_stop.py), the paired sequential A/B tests on accuracy (paired.py) and on
acceptance (acceptance.py), their controller (ab.py), and what they cost (table.py; `python -m
specdec_eval.evals.sequential`; for acceptance, `python -m specdec_eval.evals.sequential.acceptance_study` from real
runs). Pure statistics: imports gates/, results/ and workers/ only."""
