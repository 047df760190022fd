"""What a run named by `--baseline RUN` must be before a lossless verdict may rest on it: a finished, clean,
non-speculative run of a comparable configuration. Anything else would let the gate compare a spec-dec run with
another spec-dec run, with a run whose outputs a fault changed, or with a run that itself failed, and say PASS."""

from __future__ import annotations

from typing import Any

from ...results import store
from ...workers.interface import EngineIdentity
from ..pipeline.evaluation import EvalOptions
from ..pipeline.run_identity import is_paired_twin, run_config

# Evaluation options that change the prompts or the generation: a baseline must have the same ones.
_SAME_EVAL = ("num_fewshot", "max_output_len", "apply_chat_template", "seed")


def baseline_problem(base: store.Run, identity: EngineIdentity, options: EvalOptions) -> str | None:
    """Why `base` cannot be the lossless baseline of a run of `identity` with `options`, in one phrase; None if
    it can."""
    name = f"run {base.run_id}"
    if not base.is_finished:
        return f"{name} is not finished"
    summary, manifest = base.run_summary(), base.manifest()
    engine = (manifest.get("config") or {}).get("engine") or {}
    if summary.spec or engine.get("spec"):
        return f"{name} is speculative ({summary.spec or 'spec-dec'}); a baseline is a run without --spec"
    if is_paired_twin(base):
        return f"{name} is a paired twin (decoded beside a spec-dec run), not an independent run"
    if engine.get("inject"):
        return f"{name} ran with injected faults ({', '.join(engine['inject'])}); a baseline is a clean run"
    if summary.early_stopped:
        return f"{name} stopped early; it did not evaluate every document"
    if summary.num_failed_requests:
        return f"{name} has {summary.num_failed_requests} failed request(s)"
    if summary.failing_events:
        return f"{name} recorded {summary.failing_events} failing event(s)"
    if summary.verdict == "FAIL":
        return f"{name} FAILed; a baseline is a run that passed"
    return _incomparable(name, manifest, identity, options)


def _incomparable(name: str, manifest: dict[str, Any], identity: EngineIdentity,
                  options: EvalOptions) -> str | None:  # fmt: skip
    """Different tasks, prompts, generation limits or (for two local engines) model or dtype."""
    ours = run_config(identity, options)["eval"]
    theirs = (manifest.get("config") or {}).get("eval") or {}
    missing = [t for t in ours["tasks"] if t not in (theirs.get("tasks") or [])]
    if missing:
        return f"{name} did not evaluate {', '.join(missing)}"
    for key in _SAME_EVAL:
        if key in theirs and theirs[key] != ours[key]:
            return f"{name} has {key} {theirs[key]!r}, this run {ours[key]!r}"
    record = manifest.get("engine") or {}
    if identity.kind == "local" and record.get("kind") == "local":
        if record.get("model") != identity.model:
            return f"{name} is of model {record.get('model')!r}, this run of {identity.model!r}"
        dtype = identity.resolved_dtype or identity.dtype
        if record.get("resolved_dtype") and dtype != "auto" and record["resolved_dtype"] != dtype:
            return f"{name} ran in {record['resolved_dtype']}, this run in {dtype}"
    return None
