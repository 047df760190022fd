"""Generation conditions: what a score was measured under, and whether a run measured the same thing.

gen_kwargs   lm-eval's --gen_kwargs syntax and meaning, checked and applied on a task's YAML
conditions   GenerationConditions: one task's conditions in a run (manifest, run key, comparison)
repeats      several samples per document: each sample's seed; when repeats make sense
reference    the conditions a reference entry states, the differences in words, the gate's rule

Chat-template kwargs (a prompt-rendering value the engine and endpoints use too) live with the workers' chat
template; the clustered statistics in stats.clustered. Imports nothing from the pipeline."""
