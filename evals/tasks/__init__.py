"""Tasks and their data: one module per task family (gsm8k.py, gpqa.py), each a `TaskFamily` (family.py: its data
source, lm-eval YAML, how its samples are recorded and sealed, its live score, floor and filters) and its tasks; the
registry of those modules (registry.py); where data comes from and its schema checks (data.py, data_check.py); and
which documents a run evaluates (subsets.py). Only a family's own module names that family. Imports workers/ only
(errors, tokenizer); never the pipeline or gates."""
