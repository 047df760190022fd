"""The run pipeline (DESIGN.md, "Seams"): evaluate -> record -> gates -> summary, on any `InferenceEngine`.

`run_evaluation(engine, plan)` is one run: it claims the run folder (resuming an unfinished run of exactly this
configuration), evaluates through lm-eval with finished generations persisted as they come, records samples,
events and the summary, and applies the gates (evals/gates/verdict.py). `run_paired(engine, plan, make_plain)` is a
spec-dec run and its lossless baseline from one prefill per prompt (paired decoding), recorded as two runs, the twins
audited on a seeded share of the documents by a plain engine (evals/lossless/twin_audit.py) and never reused as a plain
run. `run_with_baseline(config, plan)` is a run with its baseline in one process; `run_endpoint` the same for an
OpenAI-compatible server. `run(plan, backend)` is the one path every command takes: the backend (backends.py: local,
torchrun, endpoint) says where the engine runs. Commands parse options, call it, and print (cli/run.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ...errors import UserError
from ...results import claims, store
from ...results import manifest as mf
from ...results.run_summary import RunSummary
from ...workers.config import EngineConfig
from ...workers.engine.engine import identity_of
from ...workers.engine.faults import behaviour_faults
from ...workers.interface import EngineIdentity, InferenceEngine, PairedEngine
from ..gates.acceptance import load_acceptance_references
from ..gates.verdict import acceptance_path, apply_acceptance_gate, populate_acceptance, summarise
from ..lossless.baseline import BaselineRef
from ..lossless.baseline import check_named_baseline as check_named_run
from ..lossless.check import EXACT_DTYPES
from ..lossless.control import ControlEngine, find_control, other_shape, wants_control
from ..lossless.gate import apply_lossless_gate
from ..lossless.twin_audit import AuditedTwins, WeightSeal, audit_record
from ..run_identity import (
    baseline_config,
    baseline_identity,
    find_baseline,
    git_state,
    run_config,
    run_key,
    test_id,
    twin_identity,
)
from ..run_types import EvalOptions, RunPlan, TaskResult
from .evaluation import check_references, evaluate
from .resume import GenerationCache

BASELINE_MODES = ("paired", "separate")
# Spec-only events: a baseline decoded beside a spec-dec run (paired) does not carry them.
_SPEC_ONLY_EVENTS = ("spec_state_restored", "spec_state_leak", "fault_injected")


@dataclass
class _OpenRun:
    """A claimed run folder with its manifest written, being evaluated."""

    run: store.Run
    key: str
    manifest: dict[str, Any]
    cache: GenerationCache
    resumed: bool
    started: float
    reused: int = 0  # generations found in partial/ when the run was opened (the cache grows as the run goes)


def _claim(plan: RunPlan, key: str) -> tuple[store.Run, bool]:
    try:
        return claims.acquire_run(plan.out, key, plan.resume)  # one writer per run
    except (claims.RunBusyError, FileNotFoundError) as e:
        raise UserError(str(e)) from None


def _open(engine: InferenceEngine, plan: RunPlan, run: store.Run, key: str, resumed: bool, **extra) -> _OpenRun:
    identity, options = engine.identity, plan.options
    started = time.time()
    manifest = {
        "run_id": run.run_id, "config_key": key, "test_id": test_id(engine, options),
        "config": run_config(identity, options), **git_state(), "engine": _engine_record(identity),
        "versions": mf.versions(), "devices": mf.devices(), "world_size": identity.world_size,
        "command": mf.command_line(),
        "started": started, "resumed": resumed, **extra,
    }  # fmt: skip
    run.write_manifest(manifest)
    cache = GenerationCache(run.partial_dir)
    if resumed:
        print(f"resuming run {run.run_id}: {len(cache.entries)} finished generations reused", file=sys.stderr)
    return _OpenRun(run, key, manifest, cache, resumed, started, len(cache.entries) if resumed else 0)


def _record(engine: InferenceEngine, plan: RunPlan, opened: _OpenRun, results: list[TaskResult], events: list[dict],
            baseline: BaselineRef, twin: dict[str, Any] | None = None) -> RunSummary:  # fmt: skip
    """Summary and gates; then samples, events, summary and the finished manifest are written."""
    identity, run = engine.identity, opened.run
    summary = summarise(results, identity, events, time.time() - opened.started)
    summary = summary.replace(run_id=run.run_id, run_dir=str(run.path), test_id=opened.manifest["test_id"],
                              reused_generations=opened.reused,
                              reported_acceptance=engine.reported_acceptance())  # fmt: skip
    fired = {e.get("spec") for e in events if e["type"] == "fault_injected"}
    # A planted bug on a spec-dec path cannot fire in a plain engine that carries it (a baseline of a mutated build)
    expected = [f for f in identity.config.get("inject") or () if identity.spec or f not in behaviour_faults([f])]
    never = [f for f in expected if f not in fired]
    if never:  # e.g. target_forward@100000 in a run of fewer steps: the run tested nothing it was asked to
        summary = summary.replace(faults_never_fired=tuple(never))
    samples = [s for r in results for s in r.samples]
    if twin is not None:  # this run is the plain twins of a paired run: say so, and what the audit found
        summary = summary.replace(paired_twin=twin)
        opened.manifest["paired_twin"] = twin
    if identity.spec is not None:
        summary = apply_lossless_gate(summary, samples, identity, plan.out, plan.options, results, baseline)
        if baseline.audit is not None:
            opened.manifest["baseline_audit"] = baseline.audit
        test = opened.manifest["test_id"]
        if plan.populate_acceptance:
            summary = populate_acceptance(summary, results, test, acceptance_path(plan.options))
        refs = load_acceptance_references(acceptance_path(plan.options))
        summary = apply_acceptance_gate(summary, results, test, refs, plan.options.acceptance_rtol)
    if any(r.stopped for r in results):
        # a partial evaluation: never some later run's lossless baseline
        summary = summary.replace(early_stopped=True)
    orders = {r.task: r.subset for r in results if r.subset}
    if orders:  # the seeded document order of every task, as evaluated
        opened.manifest["orders"] = orders
    run.write_samples(samples)
    run.write_events(events)
    run.write_summary(summary.to_json())
    run.write_manifest(
        {**opened.manifest, "finished": time.time(), "elapsed_s": round(time.time() - opened.started, 1)}
    )
    return summary


def _engine_record(identity: EngineIdentity) -> dict[str, Any]:
    """What the manifest says about the engine beyond its configuration."""
    record = {"kind": identity.kind, "model": identity.model, "resolved_dtype": identity.resolved_dtype}
    if identity.server is not None:
        record["server"] = identity.server
    return record


# --- one run ------------------------------------------------------------------------------------------------


def run_evaluation(engine: InferenceEngine, plan: RunPlan, progress=None, baseline: BaselineRef | None = None
                   ) -> RunSummary:  # fmt: skip
    """Evaluate on this engine, record the run, apply the gates; returns the summary (also in summary.json).
    baseline: the lossless baseline when the caller just made it (a separate plain run); None: the plan's."""
    key = run_key(engine.identity, plan.options)
    check_references(engine, plan.options)  # before the run folder is made
    run, resumed = _claim(plan, key)
    with run, _discarded_on_user_error((run, resumed)):
        opened = _open(engine, plan, run, key, resumed)
        baseline = baseline or _named_or_recorded(plan)
        stop = _stop_inputs(engine, plan, opened, None, baseline.run)
        results = evaluate(engine, plan.options, progress, cache=opened.cache, stop_inputs=stop)
        return _record(engine, plan, opened, results, engine.collect_events(), baseline)


def _named_or_recorded(plan: RunPlan) -> BaselineRef:
    """The baseline of a run that decodes none itself: the run `--baseline RUN` names, or one recorded earlier."""
    return BaselineRef(plan.baseline_run, "recorded", checked=plan.baseline_run is not None)


@contextmanager
def _discarded_on_user_error(*claimed: tuple[store.Run, bool]):
    """A user error raised while evaluating into newly made runs removes them again if they hold no finished
    generation (store.Run.discard_unstarted), so that nothing is left half written; a resumed run is kept as it was.
    A safety net: what can be checked (the references, --sample) is checked before a run folder is made."""
    try:
        yield
    except UserError:
        for run, resumed in claimed:
            if not resumed:
                run.discard_unstarted()
        raise


def _stop_inputs(engine: InferenceEngine, plan: RunPlan, opened: _OpenRun, paired: bool | None,
                 baseline_run: str | None = None) -> dict | None:  # fmt: skip
    """What the sequential controller needs besides the references (only with --early-stop)."""
    if not plan.options.early_stop:
        return None
    identity = engine.identity
    inputs: dict[str, Any] = {"test_id": opened.manifest["test_id"],
                              "exact": (identity.resolved_dtype or identity.dtype) in EXACT_DTYPES}  # fmt: skip
    if identity.spec is not None:
        inputs["acceptance_refs"] = load_acceptance_references(acceptance_path(plan.options))
        if not paired:  # paired runs compare each output with its twin as it comes
            inputs["baseline_tokens"] = _baseline_tokens(identity, plan, baseline_run)
    return inputs


def _baseline_tokens(identity: EngineIdentity, plan: RunPlan, baseline_run: str | None):
    """(task, doc_id) -> the recorded baseline's output tokens, for the first-divergence stop (None: no baseline)."""
    if baseline_run is not None:
        base = store.open_run(baseline_run, plan.out)
    else:
        base = find_baseline(plan.out, baseline_identity(identity), plan.options)
    if base is None:
        return None
    tokens = {(s["task"], s["doc_id"]): s["output_token_ids"] for s in base.samples()}
    names = {t.lm_eval_name: t.name for t in plan.options.tasks}
    return lambda task, doc_id: tokens.get((names.get(task, task), doc_id))


def run_paired(engine: PairedEngine, plan: RunPlan, make_plain: Callable[[], InferenceEngine], progress=None
               ) -> RunSummary:  # fmt: skip
    """A spec-dec run and its non-speculative baseline from one prefill per prompt: the speculative outputs are
    scored as this run, the plain twins' outputs as the twin run (recorded first, under a key of its own: a twin is
    never a later run's plain baseline), a seeded share of the twins is audited on `make_plain()` (an engine of the
    same weights with no spec worker, built only when the audit needs it), and the lossless gate compares the two:
    it FAILs when the audit shows that the spec-dec engine changed the target's own outputs."""
    identity = engine.identity
    dtype = identity.resolved_dtype or identity.dtype
    base = AuditedTwins(twin_identity(identity), engine.tokenizer, None, make_plain, plan.options.seed, dtype)
    base_key, key = run_key(base.identity, plan.options), run_key(identity, plan.options)
    check_references(base, plan.options)  # before the run folders are made
    check_references(engine, plan.options)
    base_run, base_resumed = _claim(plan, base_key)
    with base_run:
        run, resumed = _claim(plan, key)
        with run, _discarded_on_user_error((base_run, base_resumed), (run, resumed)):
            opened_base = _open(base, plan, base_run, base_key, base_resumed, paired_with=run.run_id)
            opened = _open(engine, plan, run, key, resumed, paired_with=base_run.run_id)
            base.twins = opened_base.cache
            stop = _stop_inputs(engine, plan, opened, paired=True)
            results = evaluate(engine, plan.options, progress, cache=opened.cache, pair_cache=opened_base.cache,
                               stop_inputs=stop)  # fmt: skip
            events = engine.collect_events()
            # The baseline is scored from the twins' outputs, all in its cache; every one passes through the audit
            # side (no cache here), which checks its seeded share on the plain engine.
            try:
                base_results = evaluate(base, plan.options, only=_evaluated(results, plan.options))
            finally:
                base.close()
            audit = audit_record(base.record, base_results)
            base_events = [e for e in events if e["type"] not in _SPEC_ONLY_EVENTS]
            _record(base, plan, opened_base, base_results, base_events, BaselineRef(None, "none"),
                    twin={"of": run.run_id, "audit": audit})  # fmt: skip
            return _record(engine, plan, opened, results, events, BaselineRef(str(base_run.path), "twin", audit))


def _evaluated(results: list[TaskResult], options: EvalOptions) -> set[tuple[str, int]] | None:
    """The (lm-eval task, document) pairs a run evaluated; None when it evaluated all it planned."""
    if not any(r.stopped for r in results):
        return None
    names = {t.name: t.lm_eval_name for t in options.tasks}
    return {(names[s["task"]], s["doc_id"]) for r in results for s in r.samples}


# --- a run with its baseline ----------------------------------------------------------------------------------


def needs_baseline(config: EngineConfig, plan: RunPlan) -> bool:
    """A spec-dec run whose non-speculative baseline is not recorded yet."""
    if config.spec is None or plan.baseline_run is not None:
        return False
    return find_baseline(plan.out, baseline_identity(identity_of(config)), plan.options) is None


def pairs_with_baseline(config: EngineConfig, plan: RunPlan, baseline: str) -> bool:
    """Whether a run decodes its missing baseline paired (one prefill) rather than as a separate run first.
    Environmental faults act on one engine (they would touch the twins too), so those runs use a separate clean
    baseline. Behaviour faults are planted code bugs, in every engine the run builds (twins and audit included, each
    firing only on its own code path), so they pair like a code patch: the audit is what catches one that reaches
    the twins."""
    if baseline not in BASELINE_MODES:
        raise UserError(f"--baseline-mode must be one of {', '.join(BASELINE_MODES)}, got {baseline!r}")
    environmental = [f for f in config.inject if f not in behaviour_faults([f])]
    return baseline == "paired" and not environmental and needs_baseline(config, plan)


def check_named_baseline(config: EngineConfig, plan: RunPlan) -> None:
    """`--baseline RUN`: refuse, before any engine is built, a run no lossless verdict may rest on."""
    if config.spec is None or plan.baseline_run is None:
        return
    check_named_run(plan.baseline_run, identity_of(config), plan.options, plan.out)


def run(plan: RunPlan, backend, progress_for=None) -> RunSummary | None:
    """The run pipeline on any backend (evals/pipeline/backends.py): evaluate, record and gate `plan` on the
    backend's engine, its lossless baseline included; returns the summary (None when the backend ran nothing: a
    torchrun dry run). progress_for(): a context manager giving a progress callback, per evaluation."""
    return backend.run(plan, progress_for)


def run_with_baseline(config: EngineConfig, plan: RunPlan, progress_for=None, baseline: str = "paired") -> RunSummary:
    """One process. A spec-dec run whose baseline is not recorded gets it paired (one prefill), or with
    baseline="separate" as a run of its own first (reused by later runs); then the run.
    progress_for(): a context manager giving a progress callback, per evaluation."""
    from ...workers.engine.engine import Engine, build_target_model
    from ...workers.loading.checkpoint import load_checkpoint

    check_named_baseline(config, plan)
    _local_control(config, plan, progress_for)
    if pairs_with_baseline(config, plan, baseline):
        checkpoint = load_checkpoint(config.model)
        target = build_target_model(config, checkpoint)
        seal = WeightSeal(target)  # before a spec worker is attached: the audit shares these weights while it holds
        engine = Engine(config, checkpoint=checkpoint, model=target)

        def make_plain(tokens: int) -> Engine:  # the audit's engine: same weights, its own KV pool, no spec worker
            model = engine.model if seal.intact() else None  # changed by the spec engine: load its own
            return Engine(audit_config(config, engine, tokens, model is not None), checkpoint=engine.checkpoint,
                          tokenizer=engine.tokenizer, model=model)  # fmt: skip

        return _with_progress(engine, progress_for, lambda progress: run_paired(engine, plan, make_plain, progress))
    made = None
    if needs_baseline(config, plan):
        print("lossless gate: running the non-speculative baseline first (reused by later runs)", file=sys.stderr)
        made = BaselineRef(_separate_baseline(config, plan, progress_for), "separate")
    engine = Engine(config)
    return _with_progress(engine, progress_for, lambda progress: run_evaluation(engine, plan, progress, made))


def _separate_baseline(config: EngineConfig, plan: RunPlan, progress_for) -> str:
    """The plain baseline as a run of its own; returns its folder. Its engine is gone when this returns (an engine
    and its executor refer to each other: only a collection frees its KV pool before the spec engine takes one)."""
    import functools
    import gc

    from ...workers.engine.engine import Engine

    base = Engine(baseline_config(config))
    summary = _with_progress(base, progress_for, functools.partial(run_evaluation, base, plan))
    del base
    gc.collect()
    return summary.run_dir


def audit_config(config: EngineConfig, spec_engine, tokens: int | None = None, shares_weights: bool = False
                 ) -> EngineConfig:  # fmt: skip
    """The twin audit's engine: the baseline configuration (behaviour faults included: they are in the build) for
    one sequence at a time, its KV pool capped at `tokens` positions (the longest audited document; None: one longest
    sequence), with a memory budget of its weights, activations and that pool (twice over: the pool takes a fraction
    of what is free), not a second copy of the spec engine's whole pool. shares_weights: the spec engine's weights,
    already held on the device (a CPU budget counts them either way: the engine subtracts its weights from it)."""
    import torch

    from ...workers.memory.device import activation_estimate

    plain = replace(baseline_config(config), max_batch_size=1)
    block = spec_engine.kv_layout.block_size
    positions = min(spec_engine.max_seq_len, tokens) if tokens else spec_engine.max_seq_len
    positions += 4 * block  # the window and a partial block or two past the longest document
    if tokens:
        plain = replace(plain, kv_cache=replace(plain.kv_cache, max_tokens=positions))
    dtype_bytes = torch.empty((), dtype=spec_engine.dtype).element_size()
    kv = 2 * spec_engine.kv_layout.bytes_per_token * positions
    budget = activation_estimate(spec_engine.model_config, plain, dtype_bytes, config.tp_size) + kv
    if spec_engine.device.type == "cuda":  # the cap counts what this process already holds on the device
        budget += torch.cuda.memory_allocated(spec_engine.device)
    if spec_engine.device.type != "cuda" or not shares_weights:
        budget += spec_engine.weights_bytes
    return replace(plain, device_memory=budget)


def _with_progress(engine: InferenceEngine, progress_for, body) -> RunSummary:
    """body(progress) with a progress display from progress_for() (a context manager), then close the engine."""
    try:
        if progress_for is None:
            return body(None)
        with progress_for() as progress:
            return body(progress)
    finally:
        engine.close()


def run_endpoint(config, plan: RunPlan, baseline=None, progress_for=None) -> RunSummary:
    """An evaluation of an OpenAI-compatible server (workers/remote/endpoint.py), after its baseline server's when given
    (`baseline`: an EndpointConfig of the same engine without speculation), whose run the lossless gate uses."""
    from ...workers.remote.endpoint import EndpointEngine

    if baseline is not None:
        control = _endpoint_control(baseline, plan, progress_for, config.spec is not None)
        print("lossless gate: evaluating the baseline endpoint first", file=sys.stderr)
        base = EndpointEngine(baseline)
        summary = _with_progress(base, progress_for, lambda progress: run_evaluation(base, plan, progress))
        made = BaselineRef(summary.run_dir, "separate", control=control)
        engine = EndpointEngine(config)
        return _with_progress(engine, progress_for, lambda progress: run_evaluation(engine, plan, progress, made))
    engine = EndpointEngine(config)
    return _with_progress(engine, progress_for, lambda progress: run_evaluation(engine, plan, progress))


def _local_control(config, plan, progress_for) -> str | None:
    """Decode the control of a local run unless it is recorded or not wanted; returns its run folder (None: none).
    The engine is freed before the caller builds the next one."""
    import functools
    import gc

    from ...workers.engine.engine import Engine
    from ...workers.memory.device import dtype_name, resolve_device, resolve_dtype

    dtype = dtype_name(resolve_dtype(config.dtype, resolve_device(config.device)))
    if not wants_control(plan.control, config.spec is not None, dtype):
        return None
    shape = {"max_batch_size": other_shape(config.max_batch_size)}
    found = find_control(plan.out, identity_of(config), plan.options)
    if found is not None:
        return str(found.path)
    print(f"lossless gate: decoding the noise-floor control (the plain side at max batch size "
          f"{shape['max_batch_size']}; reused by later runs)", file=sys.stderr)  # fmt: skip
    engine = ControlEngine(Engine(replace(baseline_config(config), max_batch_size=shape["max_batch_size"])), shape)
    summary = _with_progress(engine, progress_for, functools.partial(run_evaluation, engine, plan))
    del engine
    gc.collect()
    return summary.run_dir


def _endpoint_control(baseline, plan, progress_for, spec: bool) -> str | None:
    """The control of an endpoint run: the baseline server (an EndpointConfig) at another concurrency."""
    from ...workers.remote.endpoint import EndpointEngine

    if baseline is None or not wants_control(plan.control, spec, baseline.dtype):
        return None
    shape = {"concurrency": other_shape(baseline.concurrency)}
    engine = ControlEngine(EndpointEngine(replace(baseline, concurrency=shape["concurrency"])), shape)
    found = find_baseline(plan.out, engine.identity, plan.options)
    if found is not None:
        engine.close()
        return str(found.path)
    print(f"lossless gate: evaluating the baseline endpoint again at concurrency {shape['concurrency']} (the "
          "noise-floor control)", file=sys.stderr)  # fmt: skip
    summary = _with_progress(engine, progress_for, lambda progress: run_evaluation(engine, plan, progress))
    return summary.run_dir
