"""Gates and references: reference accuracies (references.py, YAML under evals/references/), the accuracy
hypothesis test (hypothesis.py), the acceptance-length gate (acceptance.py), the lossless gate and the kind of
baseline it rests on (lossless.py), what a `--baseline RUN` must be (baseline_check.py), and the run's verdict from
its gates and failing events (verdict.py). Imports workers/ and results/ only (plus tasks/ for a task's definitions)."""
