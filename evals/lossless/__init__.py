"""The lossless gate in one package: does a spec-dec run emit what its non-speculative baseline emits?

- check.py: token identity task by task (identical outputs, first divergences, McNemar), exact dtypes;
- margins.py: outside float32, each divergence's logit margin against the noise a control measured (the rule);
- control.py: the noise-floor control (the plain side at another batch shape): its identity, shape, lookup;
- baseline.py: what a verdict rests on (paired twin, separate or recorded plain run) and what `--baseline RUN` must be;
- twin_audit.py: the paired twins' audit on an engine with no spec worker;
- gate.py: the gate itself, one GateResult per task, `JUDGES` by kind of judge;
- identity_judge.py: the steps from token identity to a verdict (margins, the twins' audit, UNCALIBRATED);
- sampled.py (with scoring.py): at T > 0 with a rejection sampler, lossless in distribution: the baseline scores
  the spec-dec outputs by teacher forcing, and a randomized PIT tests them (its seeded null and power: studies).

When the control and the baseline are decoded is the run pipeline's one policy (evals/pipeline/run.py). The report
shows what the gate recorded in each run's summary (results/report/margins.py). Imports workers/, results/ and the
run's shared values (evals/run_types.py, evals/run_identity.py); never the pipeline or the other gates."""
