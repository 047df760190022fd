"""Generation conditions: what a score was measured under, and whether a run measured the same thing.

gen_kwargs.py   lm-eval's --gen_kwargs syntax and meaning, checked and applied on a task's YAML
conditions.py   GenerationConditions: one task's conditions in a run (manifest, run key, comparison)
repeats.py      several samples per document: each sample's seed; when repeats make sense
reference.py    the conditions a reference entry states, the differences in words, the gate's rule

Chat-template kwargs (a prompt-rendering value the engine and endpoints use too) live in
workers/loading/chat_template.py; the clustered statistics in stats.clustered. Imports nothing from
evals/pipeline/."""
