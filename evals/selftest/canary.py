"""The canary A/B behind `specdec-eval selftest`: the same prompts through a fault-free engine, an unguarded
engine whose max-shape warmup OOMs after the spec-dec worker saved metadata, and a guarded one under the same
OOM. The harness is healthy when the unguarded run FAILS with the stale-state signature and the guarded run
PASSES with outputs identical to the fault-free run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...results.run_summary import Verdict
from ...workers.config import EngineConfig, SamplingParams
from ...workers.engine.engine import Engine
from ...workers.events import failing_events
from ...workers.memory.budget import draft_activation_bytes, forward_activation_bytes

STALE_FIELDS = ["seq_lens", "kv_lens", "num_contexts"]


def _budget_quota(engine: Engine) -> dict[str, int]:
    """A v2 byte quota that fits the target forward of the max context shape but not the draft pass after it."""
    cfg, head = engine.model_config, engine.draft_model.config
    tokens = engine.warmup_shapes()[0][0]
    dtype_bytes, tp = engine.kv.element_size, engine.tp.size
    target = forward_activation_bytes(cfg, tokens, 1, dtype_bytes, tp)
    draft = draft_activation_bytes(
        head.layer, head.target_hidden_size, head.draft_vocab_size, tokens, 1, dtype_bytes, tp
    )
    quota = engine.memory.total_bytes - engine.weights_bytes - (target + draft) // 2
    return {"quota_bytes": quota, "target_need_bytes": target, "draft_need_bytes": draft}


def run_canary(base: EngineConfig, prompts: list[str], max_new_tokens: int, mode: str) -> dict[str, Any]:
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    clean = Engine.build(replace(base, warmup="on", spec=replace(base.spec, guard="template")))
    reference = [o.token_ids for o in clean.generate(prompts, params)]
    budget: dict[str, int] | None = None
    faulty = replace(base, warmup="on")
    if mode == "inject":
        faulty = replace(faulty, inject=("warmup_oom",))
    else:
        budget = _budget_quota(clean)
        kv = replace(base.kv_cache, version="v2", max_total_bytes=budget["quota_bytes"])
        faulty = replace(faulty, kv_cache=kv)
    runs = {"fault-free": _run(clean, reference, prompts, params, Verdict.PASS, generated=True)}
    for guard, expected in (("none", Verdict.FAIL), ("template", Verdict.PASS)):
        engine = Engine.build(
            replace(faulty, spec=replace(base.spec, guard=guard)),
            checkpoint=clean.checkpoint,
            tokenizer=clean.tokenizer,
        )
        runs[f"guard {guard}"] = _run(engine, reference, prompts, params, expected)
        if budget is not None and guard == "template":
            budget["headroom_bytes"] = engine.memory.total_bytes - engine.weights_bytes - engine.kv_layout.total_bytes
    ok = all(r["verdict"] == r["expected"] for r in runs.values())
    none, guarded = runs["guard none"], runs["guard template"]
    ok = ok and none["events"].get("warmup_oom", 0) > 0 and guarded["events"].get("warmup_oom", 0) > 0
    ok = ok and none["leaked_fields"] == STALE_FIELDS and none["failed"] > 0
    summary = (
        f"unguarded: {none['verdict']} ({none['failed']}/{none['requests']} requests failed, leaked "
        f"{', '.join(none['leaked_fields']) or 'nothing'}); guarded: {guarded['verdict']} "
        f"({guarded['identical']}/{guarded['requests']} identical to fault-free)"
    )
    return {"ok": ok, "mode": mode, "summary": summary, "runs": runs, "budget": budget}


def _run(engine: Engine, reference, prompts, params, expected: str, generated: bool = False) -> dict[str, Any]:
    """Summarise one engine's run. `generated`: the reference run itself (its outputs are the reference)."""
    outs = None if generated else engine.generate(prompts, params)
    failed = 0 if generated else sum(o.finish_reason == "error" for o in outs)
    identical = (
        len(reference)
        if generated
        else sum(o.finish_reason != "error" and o.token_ids == r for o, r in zip(outs, reference, strict=True))
    )
    leaks = engine.events.of_type("spec_state_leak")
    # A run fails on any leak or unrecovered failed request, whatever its outputs (docs/architecture.md, "Events"), and
    # a canary run that differs from the fault-free outputs fails too.
    verdict = Verdict.FAIL if failing_events(engine.events.events) or identical < len(prompts) else Verdict.PASS
    return {
        "guard": engine.config.spec.guard,
        "kv_cache": engine.config.kv_cache.version,
        "requests": len(prompts),
        "failed": failed,
        "identical": identical,
        "events": engine.events.counts(),
        "leaked_fields": leaks[0]["fields"] if leaks else [],
        "first_error": next((o.error for o in outs if o.error), None) if outs else None,
        "expected": expected,
        "verdict": verdict,
    }
