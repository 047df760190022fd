"""The run pipeline: `run(plan, backend)` (run.py), the one path of every run, its baseline and control policy
written once; the checks before anything starts (preflight.py); the backends that say what they can do and build
their engines (the `backends` package: local, torchrun, endpoint) for each side of a run
(run_sides.py); one run on one engine (one_run.py) or a spec-dec run paired with its twins (paired_run.py), claimed,
recorded and gated in the store (recording.py), resumed from partial/ (resume.py); one evaluation of the tasks through
lm-eval (evaluation.py), its per-document records (task_records.py), on our engine as an lm-eval `LM` (lm_adapter.py;
its outputs kept by lm_recording.py). Imports tasks/, gates/, lossless/, sequential/, workers/, results/ and launch/
(the torchrun backend only)."""
