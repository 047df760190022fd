"""The run pipeline (DESIGN.md, "Seams"): evaluate -> record -> gates -> summary, on any `InferenceEngine`.

`run_evaluation(engine, plan)` is one run: it finds the run folder (resuming an unfinished run of exactly this
configuration), evaluates through lm-eval with finished generations persisted as they come, records samples,
events and the summary, and applies the gates: accuracy against the reference (evals/runner.py), and for a
spec-dec run the lossless gate against its non-speculative baseline of the same configuration
(results/lossless.py). `run_with_baseline(config, plan)` is what `specdec-eval run` does in one process: the
baseline first when none is recorded, then the run (a torchrun job runs `run_evaluation` on rank 0).

Commands parse options, call these, and print (cli/run.py).
"""

from __future__ import annotations

import functools
import re
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from ..results import claims, store
from ..results import manifest as mf
from ..results.lossless import lossless_check
from ..workers.config import EngineConfig
from ..workers.engine import identity_of
from ..workers.errors import UserError
from ..workers.events import count_events, failing_events
from ..workers.interface import EngineIdentity, InferenceEngine
from .resume import GenerationCache
from .runner import EvalOptions, TaskResult, evaluate, model_key_for


@dataclass
class RunPlan:
    """Everything about a run that is not the engine: what to evaluate and where to record it."""

    options: EvalOptions
    out: str = store.DEFAULT_ROOT
    resume: bool | None = None  # None: resume an unfinished run of this configuration when there is one
    baseline_run: str | None = None  # the lossless gate's baseline (a run id or folder); None: look it up by key

    def to_dict(self) -> dict[str, Any]:
        return {"options": self.options.to_dict(), "out": self.out, "resume": self.resume,
                "baseline_run": self.baseline_run}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunPlan:
        return cls(EvalOptions.from_dict(d["options"]), d["out"], d["resume"], d.get("baseline_run"))


# --- identity of a run -------------------------------------------------------------------------------------


def run_config(identity: EngineIdentity, options: EvalOptions) -> dict[str, Any]:
    """Everything that affects the samples: the engine configuration and the evaluation options."""
    eval_opts = {
        "tasks": [t.name for t in options.tasks], "data_dir": options.data_dir, "limit": options.limit,
        "num_fewshot": options.num_fewshot, "max_output_len": options.max_output_len,
        "apply_chat_template": options.apply_chat_template, "seed": options.seed,
    }  # fmt: skip
    return {"engine": identity.config, "eval": eval_opts}


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, Any]:
    """Read once per process: a commit made while a run is going must not change which baseline it pairs with."""
    return mf.git_state()


def run_key(identity: EngineIdentity, options: EvalOptions) -> str:
    return store.config_key({**run_config(identity, options), "commit": git_state()["commit"]})


def test_id(engine: InferenceEngine, options: EvalOptions) -> str:
    """A pytest node id in TensorRT-LLM's accuracy-test style, so runs line up with waives.txt entries, e.g.
    accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]."""
    i = engine.identity
    name = model_key_for(engine, options.model_key).split("/")[-1]
    cls = "Test" + re.sub(r"[^0-9A-Za-z]+", "_", name.replace("-Instruct", "")).strip("_")
    test = "test_eagle3" if i.spec else "test_auto_dtype"
    params = ([f"{i.kv_cache}_kv_cache"] if i.kv_cache else []) + (["one_model"] if i.spec else []) + [f"tp{i.tp_size}"]
    return f"accuracy/test_specdec.py::{cls}::{test}[{'-'.join(params)}]"


def baseline_config(config: EngineConfig) -> EngineConfig:
    """The non-speculative twin of a spec-dec configuration: same model, KV cache, dtype, batch and seed; no
    draft and no injected faults (the baseline is the clean reference the spec-dec outputs must equal)."""
    return replace(config, spec=None, inject=())


def baseline_identity(identity: EngineIdentity) -> EngineIdentity:
    config = {**identity.config, "spec": None, "inject": ()}
    return replace(identity, spec=None, max_draft_len=0, config=config)


def find_baseline(out: str, identity: EngineIdentity, options: EvalOptions) -> store.Run | None:
    """The newest finished run of exactly this (non-speculative) configuration at this commit, if any."""
    return store.find_finished(out, run_key(identity, options))


# --- one run ------------------------------------------------------------------------------------------------


def run_evaluation(engine: InferenceEngine, plan: RunPlan, progress=None) -> dict[str, Any]:
    """Evaluate on this engine, record the run, apply the gates; returns the summary (also in summary.json)."""
    identity, options = engine.identity, plan.options
    key = run_key(identity, options)
    try:
        run, resumed = claims.acquire_run(plan.out, key, plan.resume)  # one writer per run
    except (claims.RunBusyError, FileNotFoundError) as e:
        raise UserError(str(e)) from None
    with run:
        return _record_run(engine, plan, run, key, resumed, progress)


def _record_run(engine: InferenceEngine, plan: RunPlan, run: store.Run, key: str, resumed: bool, progress):
    identity, options = engine.identity, plan.options
    started = time.time()
    manifest = {
        "run_id": run.run_id, "config_key": key, "test_id": test_id(engine, options),
        "config": run_config(identity, options), **git_state(), "engine": _engine_record(identity),
        "versions": mf.versions(), "devices": mf.devices(), "world_size": identity.world_size, "command": sys.argv,
        "started": started, "resumed": resumed,
    }  # fmt: skip
    run.write_manifest(manifest)
    cache = GenerationCache(run.partial_dir)
    if resumed:
        print(f"resuming run {run.run_id}: {len(cache.entries)} finished generations reused", file=sys.stderr)
    results = evaluate(engine, options, progress, cache=cache)
    events = engine.collect_events()  # every rank's events, in time order
    summary = summarise(results, identity, events, time.time() - started)
    summary.update(run_id=run.run_id, run_dir=str(run.path), test_id=manifest["test_id"],
                   reused_generations=len(cache.entries) if resumed else 0)  # fmt: skip
    reported = engine.reported_acceptance()
    if reported is not None:
        summary["reported_acceptance"] = reported
    samples = [s for r in results for s in r.samples]
    if identity.spec is not None:
        apply_lossless_gate(summary, samples, identity, plan, results)
    run.write_samples(samples)
    run.write_events(events)
    run.write_summary(summary)
    run.write_manifest({**manifest, "finished": time.time(), "elapsed_s": round(time.time() - started, 1)})
    return summary


def _engine_record(identity: EngineIdentity) -> dict[str, Any]:
    """What the manifest says about the engine beyond its configuration."""
    record = {"kind": identity.kind, "model": identity.model, "resolved_dtype": identity.resolved_dtype}
    if identity.server is not None:
        record["server"] = identity.server
    return record


def apply_lossless_gate(summary: dict, samples: list[dict], identity: EngineIdentity, plan: RunPlan,
                        results: list[TaskResult]) -> None:  # fmt: skip
    """Compare every spec-dec sample with the non-speculative baseline run of the same configuration (or with the
    run the plan names: another engine's, e.g. the same server without speculation)."""
    if plan.baseline_run is not None:
        try:
            base = store.open_run(plan.baseline_run, plan.out)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(f"--baseline: {e}") from None
        if not base.is_finished:
            raise UserError(f"--baseline: run {base.run_id} is not finished")
    else:
        base = find_baseline(plan.out, baseline_identity(identity), plan.options)
    if base is None:
        for t in summary["tasks"].values():
            t["lossless"] = {"verdict": "NO-BASELINE", "reason": f"no finished baseline run under {plan.out}"}
        return
    dtype = identity.resolved_dtype or identity.dtype
    tolerances = {r.task: (r.reference.entry.get("lossless_tolerance") if r.reference else None) for r in results}
    per_task = lossless_check(samples, base.samples(), dtype)
    for task, check in per_task.items():
        if tolerances.get(task) is not None and check["verdict"] == "UNCALIBRATED":
            check = lossless_check([s for s in samples if s["task"] == task], base.samples(), dtype,
                                   tolerances[task])[task]  # fmt: skip
        check["baseline_run"] = base.run_id
        summary["tasks"][task]["lossless"] = check
        if check["verdict"] == "FAIL":
            summary["verdict"] = "FAIL"


def summarise(
    results: list[TaskResult], identity: EngineIdentity, events: list[dict], elapsed_s: float
) -> dict[str, Any]:
    failing = failing_events(events)
    tasks = {}
    for r in results:
        tasks[r.task] = {
            "num_samples": r.num_samples,
            "score": round(r.score, 4),
            "filter_scores": {k: round(v, 4) for k, v in r.filter_scores.items()},
            "reference": r.reference.accuracy if r.reference else None,
            "threshold": round(r.threshold, 4) if r.threshold is not None else None,
            "theta": round(r.theta, 4) if r.theta is not None else None,
            "verdict": r.verdict,
            "num_failed_requests": r.num_failed_requests,
            "acceptance": r.acceptance,
            "data": r.data_origin,
            "report": r.report,
            "filter_mismatches": r.filter_mismatches,
        }
    verdicts = [t["verdict"] for t in tasks.values()]
    verdict = "FAIL" if "FAIL" in verdicts or failing else "PASS"
    return {"verdict": verdict, "tasks": tasks, "events": count_events(events), "failing_events": len(failing),
            "elapsed_s": round(elapsed_s, 1), "model": identity.model, "kv_cache": identity.kv_cache,
            "spec": identity.spec, "world_size": identity.world_size}  # fmt: skip


# --- a run with its baseline ----------------------------------------------------------------------------------


def needs_baseline(config: EngineConfig, plan: RunPlan) -> bool:
    """A spec-dec run whose non-speculative baseline is not recorded yet."""
    if config.spec is None:
        return False
    return find_baseline(plan.out, baseline_identity(identity_of(config)), plan.options) is None


def run_with_baseline(config: EngineConfig, plan: RunPlan, progress_for=None) -> dict[str, Any]:
    """One process: the baseline first when a spec-dec run has none recorded (reused by later runs), then the run.
    progress_for(): a context manager giving a progress callback, per evaluation."""
    from ..workers.engine import Engine

    if needs_baseline(config, plan):
        print("lossless gate: running the non-speculative baseline first (reused by later runs)", file=sys.stderr)
        _evaluate_on(Engine(baseline_config(config)), plan, progress_for)  # its own run folder; freed after
    return _evaluate_on(Engine(config), plan, progress_for)


def _evaluate_on(engine: InferenceEngine, plan: RunPlan, progress_for) -> dict[str, Any]:
    """run_evaluation with a progress display from progress_for() (a context manager), then close the engine."""
    try:
        if progress_for is None:
            return run_evaluation(engine, plan)
        with progress_for() as progress:
            return run_evaluation(engine, plan, progress)
    finally:
        engine.close()


def run_endpoint(config, plan: RunPlan, baseline=None, progress_for=None) -> dict[str, Any]:
    """An evaluation of an OpenAI-compatible server (evals/endpoint.py), after its baseline server's when given
    (`baseline`: an EndpointConfig of the same engine without speculation), whose run the lossless gate uses."""
    from .endpoint import EndpointEngine

    def one(cfg, run_plan: RunPlan) -> dict[str, Any]:
        engine = EndpointEngine(cfg)
        try:
            if progress_for is None:
                return run_evaluation(engine, run_plan)
            with progress_for() as progress:
                return run_evaluation(engine, run_plan, progress)
        finally:
            engine.close()

    if baseline is not None:
        print("lossless gate: evaluating the baseline endpoint first", file=sys.stderr)
        base = one(baseline, plan)
        plan = replace(plan, baseline_run=base["run_dir"])
    return one(config, plan)
