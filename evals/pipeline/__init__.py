"""The run pipeline: our engine as an lm-eval `LM` (lm_adapter.py), one evaluation of the tasks on one engine
(evaluation.py), and the orchestration of a run with its baseline, recorded into the store and judged by the gates
(orchestration.py), with resume (resume.py), the paired baseline's audited twins (twin_audit.py), a run's identity
and key (run_identity.py), and the bug-class matrix of `selftest --mutants` (mutants.py), which runs the same
orchestration once per planted bug. `orchestration.run(plan, backend)` is the one path of every run; the backends
(backends.py: local, endpoint; backend_torchrun.py: a torchrun job and its rank-0 driver) say where the engine runs.
Imports tasks/, gates/, sequential/, workers/ and results/, and launch/ (the torchrun backend only)."""
