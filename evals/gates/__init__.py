"""Gates and references: reference accuracies (references, with their YAML in evals/references), the accuracy gate
on the shared hypothesis test (accuracy_gate), the acceptance-length gate (acceptance), and the run's verdict from its
gates and failing events (verdict). The lossless gate is a package of its own. Imports workers, results, stats, the
run's shared values and the lossless gate; never the pipeline."""
