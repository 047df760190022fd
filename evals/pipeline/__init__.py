"""The run pipeline: `run(plan, backend)` (`run`), the one path of every run, its baseline and control policy
written once; the checks before anything starts (`preflight`); the backends that say what they can do and build
their engines (the `backends` package: local, torchrun, endpoint) for each side of a run
(`run_sides`); one run on one engine (`one_run`) or a spec-dec run paired with its twins (`paired_run`), claimed,
recorded and gated in the store (`recording`), resumed from partial/ (`resume`); one evaluation of the tasks through
lm-eval (`evaluation`), its per-document records (`task_records`), on our engine as an lm-eval `LM` (`lm_adapter`;
its outputs kept by `lm_recording`). Imports tasks/, gates/, lossless/, sequential/, workers/, results/ and launch/
(the torchrun backend only)."""
