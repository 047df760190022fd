"""A spec-dec run and its lossless baseline from one prefill per prompt (paired decoding), recorded as two runs.

The speculative outputs are scored as the run, the plain twins' outputs as the twin run (recorded first, under a key
of its own: a twin is never a later run's plain baseline), and a seeded share of the twins is audited on an engine of
the same weights with no spec worker; the lossless gate FAILs when the audit shows
that the spec-dec engine changed the target's own outputs. Only a backend that can build that plain engine beside
the spec-dec one pairs (its `abilities.pairs`); the run pipeline decides when."""

from __future__ import annotations

from collections.abc import Callable

from ...results.run_summary import RunSummary
from ...workers.interface import InferenceEngine, PairedEngine
from ..lossless.baseline import NO_LOSSLESS_GATE, BaselineKind, BaselineRef, resolve_baseline
from ..lossless.scoring import Scorer
from ..lossless.twin_audit import AuditedTwins, audit_record
from ..run_identity import run_key, twin_identity
from ..run_types import EvalOptions, RunPlan, TaskResult
from .evaluation import check_references, evaluate
from .one_run import stop_inputs
from .recording import claim_run, discarded_on_user_error, open_run, record_run

# Spec-only events: a baseline decoded beside a spec-dec run (paired) does not carry them.
SPEC_ONLY_EVENTS = ("spec_state_restored", "spec_state_leak", "fault_injected")


def run_paired(
    engine: PairedEngine,
    plan: RunPlan,
    make_plain: Callable[[int], InferenceEngine],
    progress: Callable | None = None,
    control: str | None = None,
    scorer: Scorer | None = None,
) -> RunSummary:
    """The run's summary; the twin run is recorded beside it. make_plain(tokens): the audit's plain engine, built
    only when the audit needs it, its KV pool holding `tokens` positions. control: the noise-floor control's run
    folder when the caller made or found one. scorer: the plain engine that scores the sampled outputs of our
    coupled sampler for the gate (its "coupled" judge), None when no task is sampled."""
    identity = engine.identity
    dtype = identity.resolved_dtype or identity.dtype
    base = AuditedTwins(twin_identity(identity), engine.tokenizer, None, make_plain, plan.options.seed, dtype)
    base_key, key = run_key(base.identity, plan.options), run_key(identity, plan.options)
    check_references(base, plan.options)  # before the run folders are made
    check_references(engine, plan.options)
    base_run, base_resumed = claim_run(plan, base_key)
    with base_run:
        run, resumed = claim_run(plan, key)
        with run, discarded_on_user_error((base_run, base_resumed), (run, resumed)):
            opened_base = open_run(base, plan, base_run, base_key, base_resumed, paired_with=run.run_id)
            opened = open_run(engine, plan, run, key, resumed, paired_with=base_run.run_id)
            base.twins = opened_base.cache
            stop = stop_inputs(identity, plan, opened)  # each output meets its twin as it comes
            results = evaluate(
                engine, plan.options, progress, cache=opened.cache, pair_cache=opened_base.cache, stop_inputs=stop
            )
            events = engine.collect_events()
            # The baseline is scored from the twins' outputs, all in its cache; every one passes through the audit
            # side (no cache here), which checks its seeded share on the plain engine.
            try:
                base_results = evaluate(base, plan.options, only=_evaluated(results, plan.options))
            finally:
                base.close()
            audit = audit_record(base.record, base_results)
            base_events = [e for e in events if e["type"] not in SPEC_ONLY_EVENTS]
            record_run(
                base,
                plan,
                opened_base,
                base_results,
                base_events,
                NO_LOSSLESS_GATE,
                twin={"of": run.run_id, "audit": audit},
            )
            twins = BaselineRef(str(base_run.path), BaselineKind.TWIN, audit, control=control, scorer=scorer)
            resolved = resolve_baseline(twins, identity, plan.out, plan.options)
            return record_run(engine, plan, opened, results, events, resolved)


def _evaluated(results: list[TaskResult], options: EvalOptions) -> set[tuple[str, int]] | None:
    """The (lm-eval task, document) pairs a run evaluated; None when it evaluated all it planned."""
    if not any(r.stopped for r in results):
        return None
    names = {t.name: t.lm_eval_name for t in options.tasks}
    return {(names[s.task], s.doc_id) for r in results for s in r.samples}
