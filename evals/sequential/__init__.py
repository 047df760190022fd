"""Sequential designs: group-sequential boundaries (boundaries.py), the accuracy gate's sequential test
(accuracy.py), `run --early-stop` (early_stop.py), the paired sequential A/B test on the discordant pairs
(discordant_pairs.py) and on acceptance (acceptance.py), the watcher of a sequential `ab` (ab_watch.py), the A/B of
two commits as a library call (commit_ab.py), and what they cost (table.py; `python -m specdec_eval.evals.sequential`;
for acceptance, `python -m specdec_eval.evals.sequential.acceptance_study` from real runs). Imports gates/, the run's
shared values (evals/run_types.py), results/ (an A/B's sides and their comparison) and workers/."""
