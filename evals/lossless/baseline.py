"""What a lossless verdict rests on: its baseline, of one `BaselineKind`, and what a run named by `--baseline RUN`
must be.

- TWIN: the plain twins of a paired run, decoded in the spec-dec engine from the same prefill, trusted only as far
  as their audit on a plain engine shows; a divergence there FAILs the gate;
- SEPARATE: a plain run this command just made, on an engine with no spec worker;
- RECORDED: a finished plain run found in the runs folder, or the one `--baseline RUN` names;
- SCORED: no decoded run: the plain engine scores a sampled run's outputs by teacher forcing, for a run whose
  sampler does not reproduce the plain run's tokens (`--spec-sampling rejection`, a server).

The run policy decides a `BaselineRef` (which kind, which run if it made one); `resolve_baseline` turns it, once,
before the run is evaluated, into a `ResolvedBaseline` holding the baseline's and the control's records, which the
early stop and the gate read and never look up again. A named run must be a finished, clean, non-speculative run of
a comparable configuration (`baseline_problem`): anything else would let the gate compare a spec-dec run with
another spec-dec run, with a run whose outputs a fault changed, or with a run that itself failed, and say PASS."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from ...errors import UserError
from ...results import store
from ...results.run_summary import Verdict
from ...results.sample_record import SampleRecord
from ...workers.interface import EngineIdentity
from ..run_identity import baseline_identity, find_baseline, is_paired_twin, run_config
from ..run_types import EvalOptions
from .baseline_rules import recorded_baseline_problem
from .control import find_control

if TYPE_CHECKING:
    from .scoring import Scorer


class BaselineKind(str, Enum):
    """What a lossless verdict's baseline is (its value is the word summary.json records)."""

    TWIN = "twin"
    SEPARATE = "separate"
    RECORDED = "recorded"
    SCORED = "scored"  # nothing decoded: the plain engine scores the run's outputs
    NONE = "none"  # a plain run: no lossless gate


BASELINE_KINDS = {
    BaselineKind.TWIN: "paired twin, audited",
    BaselineKind.SEPARATE: "separate plain run",
    BaselineKind.RECORDED: "recorded plain run",
    BaselineKind.SCORED: "teacher-forced scoring by the plain engine",
}


@dataclass(frozen=True)
class BaselineRef:
    """What the run policy decided a lossless gate compares with: its kind and, where known, its run (None: the
    newest finished plain run of the configuration, looked up once by `resolve_baseline`)."""

    run: str | None
    kind: BaselineKind
    audit: dict[str, Any] | None = None  # the twins' audit (kind "twin")
    checked: bool = False  # `--baseline RUN`: must pass baseline_problem first
    # The noise-floor control's run folder when the caller made or found it (an endpoint's: keyed by the baseline
    # server, which the spec-dec run's own identity cannot name); None: looked up from the run's identity.
    control: str | None = None
    # The plain engine that scores a sampled task's outputs (`scoring`), built by the backend in this process; it
    # does not travel in a torchrun job's payload (a job's rank 0 has none: its sampled tasks read NO-GATE)
    scorer: Scorer | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a torchrun job's payload)."""
        return {
            "run": self.run,
            "kind": self.kind.value,
            "audit": self.audit,
            "checked": self.checked,
            "control": self.control,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaselineRef:
        return cls(d["run"], BaselineKind(d["kind"]), d.get("audit"), d.get("checked", False), d.get("control"))


@dataclass(frozen=True)
class ResolvedBaseline:
    """A spec-dec run's baseline and noise-floor control, found and loaded once: what the gate and the early stop
    read. `run_id` None: no decoded baseline (SCORED, or none found: `missing` says where it was looked for)."""

    kind: BaselineKind
    run_id: str | None = None
    samples: tuple[SampleRecord, ...] = ()
    audit: Mapping[str, Any] | None = None  # the twins' audit (TWIN)
    control_run: str | None = None
    control_samples: tuple[SampleRecord, ...] | None = None  # None: no control found
    scorer: Scorer | None = field(default=None, compare=False)
    missing: str = ""  # why there is no decoded baseline, in words

    @property
    def label(self) -> str:
        return baseline_label(self.kind, self.audit)


NO_LOSSLESS_GATE = ResolvedBaseline(BaselineKind.NONE)


def resolve_baseline(ref: BaselineRef, identity: EngineIdentity, out: str, options: EvalOptions) -> ResolvedBaseline:
    """The baseline `ref` names (checked again if it is `--baseline RUN`: the store may have changed since preflight),
    else the newest finished plain run of this configuration; with it, the control the caller made or found, else the
    one recorded for this configuration. Records are loaded here, once."""
    if identity.spec is None:
        return NO_LOSSLESS_GATE
    if ref.kind == BaselineKind.SCORED:
        return ResolvedBaseline(BaselineKind.SCORED, scorer=ref.scorer, missing=f"no finished baseline run under {out}")
    base = open_baseline(ref, identity, out, options)
    if base is None:
        return ResolvedBaseline(ref.kind, scorer=ref.scorer, missing=f"no finished baseline run under {out}")
    kind = ref.kind if ref.kind in BASELINE_KINDS else BaselineKind.RECORDED
    control = store.open_run(ref.control) if ref.control else find_control(out, identity, options)
    return ResolvedBaseline(
        kind,
        base.run_id,
        tuple(base.samples()),
        ref.audit,
        control.run_id if control is not None else None,
        tuple(control.samples()) if control is not None else None,
        ref.scorer,
    )


def baseline_label(kind: BaselineKind, audit: Mapping[str, Any] | None) -> str:
    """In words, e.g. "paired twin, audited on 3 of 3 planned documents" or "separate plain run"."""
    if kind == BaselineKind.TWIN and audit is not None:
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
