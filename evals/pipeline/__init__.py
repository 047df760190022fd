"""The run pipeline: our engine as an lm-eval `LM` (lm_adapter.py), one evaluation of the tasks on one engine
(evaluation.py), and the orchestration of a run with its baseline, recorded into the store and judged by the gates
(orchestration.py), with resume (resume.py), the paired baseline's audited twins (twin_audit.py), a run's identity
and key (run_identity.py), and the bug-class matrix of `selftest --mutants` (mutants.py), which runs the same
orchestration once per planted bug. Imports tasks/, gates/, sequential/, workers/ and results/."""
