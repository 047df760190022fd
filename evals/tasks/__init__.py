"""Tasks and their data: one module per task family (`gsm8k`, `gpqa`), each a `TaskFamily` (`family`: its data
source, lm-eval YAML, how its samples are recorded and sealed, its live score, floor and filters) and its tasks; the
registry of those modules (`registry`); where data comes from and its schema checks (`data`, `data_check`); and
which documents a run evaluates (`subsets`). Only a family's own module names that family. Imports workers/ only
(errors, tokenizer); never the pipeline or gates."""
