"""Each cell judged against the base cell on the same documents, with the comparison `compare` makes:
greedy outputs token for token (the first divergent document named), acceptance paired by
document (its relative change and the swap test's p-value for a drop), and the cell's own verdicts as `run` gave
them (accuracy, lossless, failing events).

A cell that did not run to a verdict (it could not start, broke, was killed by a signal, its run cannot be read)
is NOT-RUN, with its reason. The base must itself pass: a base whose run FAILed is a FAIL, and no cell is judged
against it (nor against a base that did not run): such a cell is UNJUDGED, or FAIL when its own run FAILed. A sweep
passes only when every cell is BASE or PASS.

A cell FAILs when its own run FAILed, when its acceptance dropped against the base's (shown at alpha), or when its
greedy outputs moved while the engine promises batch invariance (a float32 run of our engine: exact, so any moved
token is a finding). Outside float32 a moved output is shown with its document; the cell's own lossless gate judges
it against the measured noise floor."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...gates.accuracy import GATE as ACCURACY
from ...results.compare import compare_runs
from ...results.store import Run
from .runner import DONE, CellRecord

PASS, FAIL, BASE, NOT_RUN, UNJUDGED = "PASS", "FAIL", "BASE", "NOT-RUN", "UNJUDGED"


@dataclass(frozen=True)
class CellVerdict:
    cell: str
    labels: dict[str, str]
    verdict: str  # PASS | FAIL | BASE | NOT-RUN | UNJUDGED
    status: str  # the runner's: finished, run failed, could not start
    run_verdict: str | None = None  # the cell's own `run` verdict
    gates: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> gate -> verdict (accuracy, lossless...)
    acceptance_length: float | None = None
    acceptance_change: float | None = None  # relative to the base, paired by document
    acceptance_p: float | None = None  # one-sided p of a drop (swap test)
    acceptance_verdict: str | None = None  # DROP | NO-DROP | INCONCLUSIVE
    outputs_identical: int | None = None
    outputs_compared: int | None = None
    first_divergent: str | None = None  # "task doc D (token P)"
    events: dict[str, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    error: str = ""
    run_dir: str | None = None
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(records: list[CellRecord], exact: bool | None = None) -> list[CellVerdict]:
    """Verdicts of every cell; records[0] is the base. exact: whether moved outputs fail a cell (None: when the base
    ran in float32)."""
    verdicts = [_judge_base(records[0])]
    base_run = Run(Path(records[0].run_dir)) if verdicts[0].verdict == BASE else None
    if exact is None and base_run is not None:
        exact = (base_run.manifest().get("engine") or {}).get("resolved_dtype") in ("float32", None)
    for record in records[1:]:
        if record.status != DONE or record.run_dir is None:
            verdicts.append(_not_run(record))
            continue
        run = Run(Path(record.run_dir))
        try:
            own = _own(run)
            if base_run is None:
                verdicts.append(_unjudged(record, own, verdicts[0]))
            else:
                verdicts.append(_against_base(record, base_run, run, own, bool(exact)))
        except (OSError, ValueError) as e:  # its run folder went away or was damaged after it ran
            verdicts.append(_not_run(record, f"its run cannot be read: {e}"))
    return verdicts


def _judge_base(record: CellRecord) -> CellVerdict:
    """The base cell: BASE when its own run passed; FAIL when it FAILed (nothing is judged against it)."""
    if record.status != DONE or record.run_dir is None:
        return _not_run(record)
    try:
        own = _own(Run(Path(record.run_dir)))
    except (OSError, ValueError) as e:
        return _not_run(record, f"its run cannot be read: {e}")
    if own["run_verdict"] == FAIL:
        reasons = [_own_failure(own) + "; no cell is judged against a failing base"]
        return CellVerdict(record.cell, record.labels, FAIL, record.status, **own, reasons=reasons, **_common(record))
    return CellVerdict(record.cell, record.labels, BASE, record.status, **own, **_common(record))


def _unjudged(record: CellRecord, own: dict[str, Any], base: CellVerdict) -> CellVerdict:
    why = "the base cell FAILed" if base.verdict == FAIL else "the base cell did not run"
    reasons = [f"{why}: nothing judged against it"]
    verdict = UNJUDGED
    if own["run_verdict"] == FAIL:
        reasons.insert(0, _own_failure(own))
        verdict = FAIL
    return CellVerdict(record.cell, record.labels, verdict, record.status, **own, reasons=reasons, **_common(record))


def _own_failure(own: dict[str, Any]) -> str:
    failed = [f"{t} {g}" for t, gs in own["gates"].items() for g, v in gs.items() if v == FAIL]
    return f"its run FAILed ({', '.join(failed) or 'failing events or requests'})"


def _common(record: CellRecord) -> dict[str, Any]:
    return {"run_dir": record.run_dir, "wall_s": record.wall_s, "error": record.error}


def _not_run(record: CellRecord, why: str | None = None) -> CellVerdict:
    """A cell without a verdict of its own, and why: its status and its run's last error line (or `why`)."""
    reason = why or (f"{record.status}: {record.error}" if record.error else record.status)
    return CellVerdict(record.cell, record.labels, NOT_RUN, record.status, reasons=[reason], **_common(record))


def _own(run: Run) -> dict[str, Any]:
    summary = run.run_summary()
    gates = {
        task: {ACCURACY.name: t.verdict, **{name: g.verdict for name, g in t.gates.items()}}
        for task, t in summary.tasks.items()
    }
    lengths = [(t.acceptance or {}).get("acceptance_length") for t in summary.tasks.values()]
    lengths = [x for x in lengths if x is not None]
    return {
        "run_verdict": str(summary.verdict.value if hasattr(summary.verdict, "value") else summary.verdict),
        "gates": gates,
        "acceptance_length": lengths[0] if len(lengths) == 1 else None,
        "events": dict(summary.events),
    }


def _against_base(record: CellRecord, base_run: Run, run: Run, own: dict[str, Any], exact: bool) -> CellVerdict:
    result = compare_runs(base_run, run)
    reasons: list[str] = []
    if own["run_verdict"] == FAIL:
        reasons.append(_own_failure(own))
    identical = compared = 0
    first = None
    acc: dict[str, Any] = {}
    for task, t in result["tasks"].items():
        outputs = t["outputs"]
        identical += outputs["identical"]
        compared += outputs["identical"] + outputs["divergent"]
        if first is None and outputs["first_divergence"]:
            d = outputs["first_divergence"][0]
            first = f"{task} doc {d['doc_id']}" + ("" if d["position"] is None else f" (token {d['position']})")
        per_doc = t["acceptance"]["per_document"]
        if per_doc is not None and not acc:
            acc = per_doc
    if compared and identical < compared:
        moved = f"outputs moved on {compared - identical} of {compared} documents, first {first}"
        reasons.append(moved if exact else moved + " (outside float32: see its lossless gate)")
    if acc.get("drop_shown"):
        reasons.append(f"acceptance fell {-acc['relative']:.1%} against the base (p = {acc['p_drop']:.3g})")
    failed = bool(reasons) and (
        own["run_verdict"] == FAIL or acc.get("drop_shown") or (exact and compared and identical < compared)
    )
    return CellVerdict(
        record.cell,
        record.labels,
        FAIL if failed else PASS,
        record.status,
        **own,
        acceptance_change=acc.get("relative"),
        acceptance_p=acc.get("p_drop"),
        acceptance_verdict=acc.get("verdict"),
        outputs_identical=identical,
        outputs_compared=compared,
        first_divergent=first,
        reasons=reasons,
        **_common(record),
    )
