"""The bug-class matrix behind `specdec-eval selftest --mutants`: what this tool catches.

Each bug class (a planted behaviour fault, or the seed's unrestored metadata) runs through the default `run`
configuration (local backend, paired baseline, early stop, a seeded random GSM8K subset), each in a fresh runs folder;
the unmutated engine runs the same way and must PASS every gate. A class that changes outputs counts as caught only
when the lossless gate FAILs it (a collapsed acceptance is a symptom of some bugs only); one that changes no output
is caught by the events gate or, when it only makes the drafter worse (aux_layers_off_by_one), by the paired
acceptance test against the unmutated run (`acceptance_paired`, as `compare` tests two commits), while the single-run
acceptance gate's cell shows the miss with its own statement of the smallest drop it could see. The sampling class
runs `gsm8k_sampled` beside an unmutated sampled run.

The rejection sampler's classes (`--spec-sampling rejection`) are judged in distribution, so only the sampled
lossless gate can catch them. They run only when asked (`--only`): at the default size (SmolLM2, `--limit 10`: a few
hundred sampled positions) the gate's power against them is low (`python -m specdec_eval.studies.lossless_sampled
power` says how low).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...event_types import FAILING_EVENTS
from ...results.acceptance_paired import paired_counts
from ...results.paired import pair_samples
from ...results.run_summary import GateResult, RunSummary, TaskSummary, Verdict, as_run_summary
from ...results.sample_record import SampleRecord
from ...results.store import Run
from ...stats.acceptance_ratio import DROP, NO_DROP, judge_pairs
from ...workers import bug_classes
from ...workers.config import EngineConfig
from ..gates.accuracy_gate import GATE as ACCURACY
from ..gates.lossless_gate import GATE as LOSSLESS
from ..gates.registry import gates
from ..pipeline.backends import RunTarget, make_backend
from ..pipeline.evaluation import EvalOptions
from ..pipeline.run import run
from ..run_types import RunPlan
from ..tasks.registry import TASKS

PAIRED = "paired_acceptance"  # the per-document acceptance of a class's run against the unmutated run's
# The matrix's columns: every gate a run always has (the registry's, in its order), then the paired acceptance and
# the failing events.
GATES = (*(g.name for g in gates() if not g.opt_in), PAIRED, "events")


@dataclass(frozen=True)
class BugClass:
    name: str
    what: str  # one line, for the matrix
    inject: tuple[str, ...] = ()
    guard: str = "template"
    warmup: str | None = None  # the general warmup must run for a warmup fault to fire
    sampled: bool = False  # evaluated at temperature > 0 (gsm8k_sampled)
    catcher: str | None = LOSSLESS.name  # the gate that must FAIL it; None: the unmutated engine, which must PASS
    spec_sampling: str = "coupled"  # the spec sampler the class lives in (`SPEC_SAMPLINGS`)

    @property
    def is_clean(self) -> bool:
        return self.catcher is None


CLEAN = BugClass("unmutated", "the engine as it is: every gate must PASS", catcher=None)
CLEAN_SAMPLED = BugClass("unmutated, sampled", "the same at temperature > 0", sampled=True, catcher=None)
CLEAN_REJECTION = BugClass(
    "unmutated, rejection-sampled",
    "the same on --spec-sampling rejection, judged in distribution",
    sampled=True,
    catcher=None,
    spec_sampling="rejection",
)
SEED = BugClass(
    "unrestored_metadata",
    "the seed: --spec-guard none, a tolerated warmup OOM leaves draft metadata saved",
    ("warmup_oom",),
    guard="none",
    warmup="on",
    catcher="events",
)


def _planted_rows() -> tuple[BugClass, ...]:
    """The matrix's rows of the planted classes (`bug_classes`, each declared once there), the classes only the
    paired acceptance test can catch last, and the seed (an environmental fault, not a planted class) before the
    first class the events gate must catch."""
    planted = [
        BugClass(c.name, c.help, (c.name,), sampled=c.sampled, catcher=c.catcher, spec_sampling=c.spec_sampling)
        for c in bug_classes.PLANTED_CLASSES
        if c.in_matrix
    ]
    planted.sort(key=lambda b: b.catcher == PAIRED)
    first_events = next((i for i, b in enumerate(planted) if b.catcher == "events"), len(planted))
    return (*planted[:first_events], SEED, *planted[first_events:])


BUG_CLASSES = _planted_rows()
CLASS_NAMES = tuple(b.name for b in BUG_CLASSES)


def select_classes(only: Sequence[str] | None) -> list[BugClass]:
    """The matrix's rows: the unmutated runs (the sampled one only when a sampled class runs, the rejection-sampled
    one only when a class of that sampler runs), then the classes asked for (by default all but the rejection
    sampler's)."""
    names = [n.strip() for item in only or () for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in CLASS_NAMES]
    if unknown:
        raise UserError(f"--only: unknown bug class {', '.join(unknown)} (known: {', '.join(CLASS_NAMES)})")
    classes = [b for b in BUG_CLASSES if b.name in names] if names else [b for b in BUG_CLASSES if not _opt_in(b)]
    coupled = any(b.sampled and b.spec_sampling == "coupled" for b in classes)
    rejection = any(b.spec_sampling == "rejection" for b in classes)
    return [CLEAN] + ([CLEAN_SAMPLED] if coupled else []) + ([CLEAN_REJECTION] if rejection else []) + classes


def _opt_in(bug: BugClass) -> bool:
    """A class the default matrix leaves out: the rejection sampler's (see the module docstring)."""
    return bug.spec_sampling == "rejection"


def mutant_config(base: EngineConfig, bug: BugClass) -> EngineConfig:
    """The run's engine configuration with the class planted."""
    if base.spec is None:
        raise UserError("the bug-class matrix needs a spec-dec engine (--spec eagle3)")
    spec = replace(base.spec, guard=bug.guard, sampling=bug.spec_sampling)
    return replace(base, inject=tuple(base.inject) + bug.inject, spec=spec, warmup=bug.warmup or base.warmup)


def matrix_options(base: EvalOptions, bug: BugClass) -> EvalOptions:
    """The default run's evaluation: a seeded random subset in a seeded random order, early stop on; GSM8K sampled
    at temperature > 0 for the sampling classes (T = 0.7, or what `--gen-kwargs` sets: e.g. both top-k and top-p,
    which spec_filter_order needs to fire); the greedy classes' runs stay greedy."""
    if bug.sampled:
        return replace(base, tasks=[TASKS["gsm8k_sampled"]], sample="random", early_stop=True)
    return replace(base, tasks=[TASKS["gsm8k"]], sample="random", early_stop=True, gen_kwargs=None)


def run_matrix(
    config: EngineConfig,
    options: EvalOptions,
    classes: Sequence[BugClass],
    note: Callable[[str], None] = lambda line: None,
    workdir: str | None = None,
) -> dict[str, Any]:
    """Every class through the run pipeline, each in a fresh runs folder; returns the
    matrix (JSON-ready). The unmutated greedy run's per-document acceptance is kept for the paired test of the classes
    after it (run first when a class needs it and the matrix has no unmutated row before it)."""
    rows = []
    unmutated: list[SampleRecord] | None = None
    for i, bug in enumerate(classes, 1):
        if bug.catcher == PAIRED and unmutated is None:
            note(f"[{i}/{len(classes)}] {bug.name}: first the unmutated run its acceptance is paired with")
            unmutated = _run(config, options, CLEAN, workdir)[1]
        note(f"[{i}/{len(classes)}] {bug.name}: {bug.what}")
        (summary, samples, order), elapsed = _run(config, options, bug, workdir, timed=True)
        if bug == CLEAN:
            unmutated = samples
        paired = paired_cell(unmutated, samples, elapsed) if not bug.is_clean and not bug.sampled else None
        row = judge(bug, summary, elapsed, order, paired)
        cells = ", ".join(f"{gate} {_brief(cell)}" for gate, cell in row["cells"].items())
        note(f"[{i}/{len(classes)}] {bug.name}: {row['result']} ({row['elapsed_s']:.0f} s; {cells})")
        rows.append(row)
    ok = all(r["result"] in ("caught", "PASS") for r in rows)
    return {"ok": ok, "model": config.model, "limit": options.limit, "rows": rows, "gates": list(GATES)}


def _run(config: EngineConfig, options: EvalOptions, bug: BugClass, workdir: str | None, timed: bool = False):
    """One class's run in a fresh runs folder: (summary, its samples, its evaluation order), with the seconds it took
    when `timed`; the samples are read before the folder goes."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{bug.name.split(',')[0]}-", dir=workdir) as out:
        plan = RunPlan(matrix_options(options, bug), out=out, resume=False)
        started = time.perf_counter()
        summary = run(plan, make_backend("local", RunTarget(mutant_config(config, bug))))
        elapsed = time.perf_counter() - started
        found = (summary, Run(Path(summary.run_dir)).samples(), evaluation_order(summary))
    return (found, elapsed) if timed else found


def paired_cell(unmutated: list[SampleRecord] | None, samples: list[SampleRecord], elapsed: float) -> dict:
    """The paired acceptance test of a class's run (B) against the unmutated run (A) over their common documents:
    FAIL when B's acceptance is shown lower (alpha 0.05), PASS when a 5 % drop is ruled out, "-" when it cannot
    decide (or no side drafted)."""
    if not unmutated:
        return {"verdict": "-"}
    pairs = pair_samples(unmutated, samples)
    counts, weighted = paired_counts([p for task_pairs in pairs.values() for p in task_pairs])
    test = judge_pairs(counts, weighted)
    if test is None:
        return {"verdict": "-"}
    verdict = {DROP: "FAIL", NO_DROP: "PASS"}.get(test.verdict, "-")
    cell: dict[str, Any] = {"verdict": verdict, "reason": test.reason, "relative": round(test.relative, 4)}
    if verdict == "FAIL":
        cell.update(doc=test.n, seconds=round(elapsed, 1))
    return cell


def _brief(cell: dict[str, Any]) -> str:
    return f"FAIL at doc {cell['doc']}" if cell["verdict"] == Verdict.FAIL else cell["verdict"]


def evaluation_order(summary: RunSummary) -> list[Any]:
    """The documents of the run's task in the order it evaluated them (from its manifest)."""
    manifest = json.loads((Path(summary.run_dir) / "manifest.json").read_text())
    orders = manifest.get("orders") or {}
    return next(iter(orders.values()), {}).get("order") or []


def judge(
    bug: BugClass,
    summary: RunSummary | Mapping[str, Any],
    elapsed: float,
    order: list[Any],
    paired: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row: each gate's cell (FAIL with the document and the time, PASS, or "-" where it could not decide) and
    the row's result: a class is "caught" only by its own gate, and the unmutated engine must PASS every gate.
    `paired`: the paired acceptance test's cell (`paired_cell`; "-" without one)."""
    summary = as_run_summary(summary)
    (task,) = summary.tasks.values()
    cells = {gate: _cell(gate, summary, task, elapsed, order) for gate in GATES if gate != PAIRED}
    cells[PAIRED] = dict(paired) if paired else {"verdict": "-"}
    cells = {gate: cells[gate] for gate in GATES}
    if bug.is_clean:
        result = "FALSE FAIL" if any(c["verdict"] == "FAIL" for c in cells.values()) else "PASS"
    else:
        result = "caught" if cells[bug.catcher]["verdict"] == Verdict.FAIL else "MISSED"
    return {
        "class": bug.name,
        "what": bug.what,
        "catcher": bug.catcher,
        "result": result,
        "cells": cells,
        "elapsed_s": round(elapsed, 1),
        "documents": task.num_samples,
        "of": len(order) or task.num_samples,
        "fired_in_steps": summary.events.get("fault_injected", 0),
        "never_fired": list(summary.faults_never_fired or []),
    }


def _cell(gate: str, summary: RunSummary, task: TaskSummary, elapsed: float, order: list[Any]) -> dict:
    verdict, docs = _verdict(gate, summary, task), []
    found = _gate(gate, task)
    if verdict == Verdict.PASS and found is not None and isinstance(found.numbers.get("power"), Mapping):
        power = found.numbers["power"]
        # what the single-run gate could have seen: a class it misses is reported with the gate's own statement
        return {"verdict": verdict, **({"power": power["statement"]} if power.get("statement") else {})}
    if verdict != Verdict.FAIL:
        return {"verdict": verdict}
    stopped = task.stopped or {}
    if gate == LOSSLESS.name:  # the spec-dec outputs' divergences from the twins, or the twins' audit's
        audited = ((summary.baseline or {}).get("audit") or {}).get("first_divergence")
        numbers = found.numbers if found is not None else {}
        docs = [d["doc_id"] for d in numbers.get("divergences") or []] + ([audited["doc_id"]] if audited else [])
        docs += [v["doc_id"] for v in numbers.get("violations") or []]  # a sampled verdict's support violations
    positions = sorted(order.index(d) + 1 for d in docs if d in order)
    doc = positions[0] if positions else (stopped.get("n") if stopped.get("gate") == gate else task.num_samples)
    return {"verdict": Verdict.FAIL, "doc": doc, "seconds": round(elapsed, 1), "reason": _reason(gate, summary, task)}


def _gate(gate: str, task: TaskSummary) -> GateResult | None:
    """A matrix column's gate result on the task (None for the columns that are no recorded gate: events, the
    paired acceptance, the accuracy test kept as the task's own verdict)."""
    known = {g.name: g for g in gates()}
    return known[gate].result(task) if gate in known else None


def _verdict(gate: str, summary: RunSummary, task: TaskSummary) -> str:
    """FAIL, PASS, or "-" (the gate could not decide in this run: no reference, no baseline)."""
    if gate == "events":
        return Verdict.FAIL if summary.failing_events else Verdict.PASS
    if gate == ACCURACY.name:
        return task.verdict if task.verdict in (Verdict.PASS, Verdict.FAIL) else "-"
    found = _gate(gate, task)
    stopped = task.stopped or {}
    if stopped.get("gate") == gate and stopped.get("verdict") == Verdict.FAIL:
        return Verdict.FAIL
    return found.verdict if found is not None and found.verdict in (Verdict.PASS, Verdict.FAIL) else "-"


def _reason(gate: str, summary: RunSummary, task: TaskSummary) -> str:
    if gate == "events":
        return ", ".join(f"{n} {t}" for t, n in summary.events.items() if t in FAILING_EVENTS)
    if gate == ACCURACY.name:
        return task.report.splitlines()[-1] if task.report else ""
    found = _gate(gate, task)
    return (found.reason if found is not None else "") or (task.stopped or {}).get("reason", "")
