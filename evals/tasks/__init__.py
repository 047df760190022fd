"""Tasks and their data: each task family's lm-eval YAML, data source, scoring and sealing (gsm8k.py, gpqa.py),
the task registry (registry.py), where data comes from and its schema checks (data.py, data_check.py), and which
documents a run evaluates (subsets.py). Imports workers/ only (errors, tokenizer); never the pipeline or gates."""
