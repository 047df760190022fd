"""The lossless gate in one package: does a spec-dec run emit what its non-speculative baseline emits?

- `check`: token identity task by task (identical outputs, first divergences, McNemar), exact dtypes;
- `margins`: outside float32, each divergence's logit margin against the noise a control measured (the rule);
- `control`: the noise-floor control (the plain side at another batch shape): its identity, shape, lookup;
- `baseline`: what a verdict rests on (paired twin, separate or recorded plain run) and what `--baseline RUN` must be;
- `twin_audit`: the paired twins' audit on an engine with no spec worker;
- `gate`: the gate itself, one GateResult per task, `JUDGES` by kind of judge;
- `identity_judge`: the steps from token identity to a verdict (margins, the twins' audit, UNCALIBRATED);
- `sampled` (with `scoring`): at T > 0 with a rejection sampler, lossless in distribution: the baseline scores
  the spec-dec outputs by teacher forcing, and a randomized PIT tests them.

When the control and the baseline are decoded is the run pipeline's one policy. Imports workers, results and the
run's shared values (`run_types`, `run_identity`); never the pipeline or the other gates."""
