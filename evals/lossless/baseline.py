"""What a lossless verdict rests on: its baseline run, of one of three kinds, and what a run named by `--baseline RUN`
must be.

- "twin": the plain twins of a paired run, decoded in the spec-dec engine from the same prefill, trusted only as far
  as their audit on a plain engine shows (twin_audit.py); a divergence there FAILs the gate;
- "separate": a plain run this command just made, on an engine with no spec worker;
- "recorded": a finished plain run found in the runs folder, or the one `--baseline RUN` names;
- "scored": no decoded run: the plain engine scores a sampled run's outputs by teacher forcing (scoring.py), for a
  run whose sampler does not reproduce the plain run's tokens (`--spec-sampling rejection`, a server).

A named run must be a finished, clean, non-speculative run of a comparable configuration (`baseline_problem`).
Anything else would let the gate compare a spec-dec run with another spec-dec run, with a run whose outputs a fault
changed, or with a run that itself failed, and say PASS. It is checked before anything is decoded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import UserError
from ...results import store
from ...results.run_summary import Verdict
from ...workers.interface import EngineIdentity
from ..run_identity import baseline_identity, find_baseline, is_paired_twin, run_config
from ..run_types import EvalOptions
from .baseline_rules import recorded_baseline_problem

if TYPE_CHECKING:
    from .scoring import Scorer

BASELINE_KINDS = {
    "twin": "paired twin, audited",
    "separate": "separate plain run",
    "recorded": "recorded plain run",
    "scored": "teacher-forced scoring by the plain engine",  # a sampled verdict (scoring.py): nothing decoded
}


@dataclass(frozen=True)
class BaselineRef:
    """Which run a lossless gate compares with (None: look one up) and what kind of baseline it is."""

    run: str | None
    kind: str  # "twin" | "separate" | "recorded" | "scored" (no decoded baseline) | "none" (no lossless gate)
    audit: dict[str, Any] | None = None  # the twins' audit (kind "twin")
    checked: bool = False  # `--baseline RUN`: must pass baseline_problem first
    # The noise-floor control's run folder when the caller made or found it (an endpoint's: keyed by the baseline
    # server, which the spec-dec run's own identity cannot name); None: looked up from the run's identity.
    control: str | None = None
    # The plain engine that scores a sampled task's outputs (scoring.py), built by the backend in this process; it
    # does not travel in a torchrun job's payload (a job's rank 0 has none: its sampled tasks read NO-GATE)
    scorer: Scorer | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a torchrun job's payload)."""
        return {
            "run": self.run,
            "kind": self.kind,
            "audit": self.audit,
            "checked": self.checked,
            "control": self.control,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaselineRef:
        return cls(d["run"], d["kind"], d.get("audit"), d.get("checked", False), d.get("control"))


def baseline_label(kind: str, audit: dict[str, Any] | None) -> str:
    """In words, e.g. "paired twin, audited on 3 of 3 planned documents" or "separate plain run"."""
    if kind == "twin" and audit is not None:
        return f"paired twin, audited on {audit['num_audited']} of {audit['planned']} planned documents"
    return BASELINE_KINDS[kind]


def check_named_baseline(run: str, identity: EngineIdentity, options: EvalOptions, out: str) -> store.Run:
    """`--baseline RUN`: the run, or UserError saying why no lossless verdict may rest on it."""
    try:
        base = store.open_run(run, out)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"--baseline: {e}") from None
    problem = baseline_problem(base, identity, options)
    if problem is not None:
        raise UserError(f"--baseline: {problem}")
    return base


def open_baseline(baseline: BaselineRef, identity: EngineIdentity, out: str, options: EvalOptions) -> store.Run | None:
    """The baseline run a gate compares with: the one named (checked again if it is `--baseline RUN`: the store may
    have changed since), else the newest finished plain run of this configuration (None: there is none)."""
    if baseline.run is None:
        return find_baseline(out, baseline_identity(identity), options)
    if baseline.checked:
        return check_named_baseline(baseline.run, identity, options, out)
    try:
        base = store.open_run(baseline.run, out)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"--baseline: {e}") from None
    if not base.is_finished:
        raise UserError(f"--baseline: run {base.run_id} is not finished")
    return base


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
    if summary.verdict == Verdict.FAIL:
        return f"{name} FAILed; a baseline is a run that passed"
    # the control, another kind of engine, another model: a different engine process of the same model it must be
    if (problem := recorded_baseline_problem(name, manifest, identity)) is not None:
        return problem
    return _incomparable(name, manifest, identity, options)


def _incomparable(name: str, manifest: dict[str, Any], identity: EngineIdentity, options: EvalOptions) -> str | None:
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
