"""Gates and references: reference accuracies (references.py, YAML under evals/references/), the accuracy
hypothesis test (hypothesis.py), the acceptance-length gate (acceptance.py), and the run's verdict from its gates and
failing events (verdict.py). The lossless gate is a package of its own (evals/lossless/). Imports workers/, results/,
the run's shared values (evals/run_types.py) and evals/lossless/; never the pipeline."""
