"""One run on one engine: evaluate, record, gate (`run_evaluation`), and the same for one side of a run (the run
under test, its plain baseline, its noise-floor control) on an engine a backend built (`evaluate_side`), which
also closes the engine and shows progress. Every backend's evaluation goes through here: in this process (local,
endpoint) or on rank 0 of a torchrun job."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from ...results.run_summary import RunSummary
from ...results.sample_record import SampleRecord
from ...workers.interface import EngineIdentity, InferenceEngine
from ..gates.acceptance import acceptance_path
from ..lossless.baseline import NO_LOSSLESS_GATE, BaselineKind, BaselineRef, ResolvedBaseline, resolve_baseline
from ..lossless.check import EXACT_DTYPES
from ..lossless.control import ControlEngine, not_reusable
from ..lossless.scoring import scored_task_names
from ..run_identity import find_baseline, run_key
from ..run_types import RunPlan
from .evaluation import StopInputs, check_references, evaluate
from .recording import OpenRun, claim_run, discarded_on_user_error, open_run, record_run
from .run_sides import Side

# progress_for(): a context manager giving a progress callback (done, total, stats), one per evaluation
ProgressFor = Callable[[], AbstractContextManager[Callable | None]]
NO_BASELINE = BaselineRef(None, BaselineKind.NONE)  # a plain run: it has no lossless gate


def run_evaluation(
    engine: InferenceEngine, plan: RunPlan, progress: Callable | None = None, baseline: BaselineRef = NO_BASELINE
) -> RunSummary:
    """Evaluate on this engine, record the run, apply the gates; returns the summary (also in summary.json).
    baseline: what a spec-dec run's lossless gate compares with (the run policy decides it), resolved here once."""
    key = run_key(engine.identity, plan.options)
    check_references(engine, plan.options)  # before the run folder is made
    run, resumed = claim_run(plan, key)
    with run, discarded_on_user_error((run, resumed)):
        opened = open_run(engine, plan, run, key, resumed)
        resolved = resolve_baseline(baseline, engine.identity, plan.out, plan.options)
        stop = stop_inputs(engine.identity, plan, opened, resolved)
        results = evaluate(engine, plan.options, progress, cache=opened.cache, stop_inputs=stop)
        return record_run(engine, plan, opened, results, engine.collect_events(), resolved)


def evaluate_side(
    engine: InferenceEngine,
    side: Side,
    plan: RunPlan,
    baseline: BaselineRef = NO_BASELINE,
    progress_for: ProgressFor | None = None,
) -> RunSummary:
    """One side of a run on an engine built for it, closed afterwards. A control is recorded under its own
    identity (the plain configuration marked with its shape) and, once recorded, reused (a server's control is
    found here: only the started server knows the identity it is recorded under)."""
    if side.role == "control":
        engine = ControlEngine(engine, dict(side.shape or {}))
    try:
        if side.role == "control":
            unsure = not_reusable(engine.identity)
            found = find_baseline(plan.out, engine.identity, plan.options) if unsure is None else None
            if found is not None:
                print(f"lossless gate: the noise-floor control is recorded ({found.run_id}); reused", file=sys.stderr)
                return found.run_summary()
            later = "reused by later runs" if unsure is None else f"measured again each run: {unsure}"
            print(f"lossless gate: decoding {side.describe()}; {later}", file=sys.stderr)
        if progress_for is None:
            return run_evaluation(engine, plan, None, baseline)
        with progress_for() as progress:
            return run_evaluation(engine, plan, progress, baseline)
    finally:
        engine.close()


def stop_inputs(
    identity: EngineIdentity, plan: RunPlan, opened: OpenRun, baseline: ResolvedBaseline = NO_LOSSLESS_GATE
) -> StopInputs | None:
    """What the sequential controller needs besides the references (only with --early-stop)."""
    if not plan.options.early_stop:
        return None
    exact = (identity.resolved_dtype or identity.dtype) in EXACT_DTYPES
    if identity.spec is None:
        return StopInputs(opened.test_id, exact)
    from ..gates.acceptance_file import load_acceptance_references

    refs = load_acceptance_references(acceptance_path(plan.options))
    return StopInputs(opened.test_id, exact, refs, _baseline_tokens(identity, plan, baseline))


def _baseline_tokens(
    identity: EngineIdentity, plan: RunPlan, baseline: ResolvedBaseline
) -> Callable[[str, int, int], Any] | None:
    """(task, doc_id, repeat) -> the baseline's output tokens of that sample (sample r pairs with the baseline's
    sample r, drawn with the same seed), for the first-divergence stop (None: no decoded baseline; a paired run
    compares each output with its twin as it comes)."""
    if baseline.run_id is None:
        return None
    # a sampled task judged in distribution has no first divergence: its tokens may differ from a plain run's
    scored = set(scored_task_names(plan.options, identity))
    names = {t.lm_eval_name: t.name for t in plan.options.tasks}
    return tokens_by_sample([s for s in baseline.samples if s.task not in scored], names)


def tokens_by_sample(
    samples: Iterable[SampleRecord], names: Mapping[str, str] | None = None
) -> Callable[[str, int, int], list[int] | None]:
    """(task, doc_id, repeat) -> the output tokens of that sample among `samples` (None: not there). `names`: the
    lm-eval task name -> the samples' task name (lookups by another name pass through)."""
    tokens = {(s.task, s.doc_id, s.repeat): s.output_token_ids for s in samples}
    names = dict(names or {})
    return lambda task, doc_id, repeat: tokens.get((names.get(task, task), doc_id, repeat))
