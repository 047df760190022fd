"""What a report reads from finished runs: their manifest, summary and events, and per task a 95% interval of
the score computed from the per-sample correctness flags (never from sample text).

Confidence interval of a score. A task's score is the mean of its filters' scores (strict-match and
flexible-extract for GSM8K), i.e. the mean over samples of x_i = (fraction of the scored filters that marked
sample i correct), a value in [0, 1]. For any variable in [0, 1] with mean p, Var(x) <= p(1 - p), the Bernoulli
variance; so the Wilson score interval computed at p = mean(x_i) and n = number of samples is a (slightly
conservative) 95% interval for the score, and exact Wilson whenever the filters agree on every sample. Unlike
the normal approximation, it does not collapse to a zero-width interval at a score of 0 or 100. (scipy's
`binomtest(...).proportion_ci(method="wilson")` computes the same interval, but only for a whole number of
successes, which a mean of filter fractions need not be.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..run_summary import RunSummary, TaskSummary
from ..store import Run

Z95 = 1.959963984540054


def wilson_interval(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion p (0..1) observed over n trials; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(p, 0.0), 1.0)
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class TaskRow:
    run_index: int
    run_id: str
    task: str
    summary: TaskSummary  # the task's entry in summary.json
    n: int  # samples behind the interval
    p: float | None  # the score as a fraction, from the samples (else from the summary)
    ci: tuple[float, float] | None  # 95% interval, in score units (0..100)

    @property
    def info(self) -> dict[str, Any]:
        """The task's entry as summary.json holds it (for readers of the raw record, e.g. the plots)."""
        return self.summary.to_json()


@dataclass
class RunData:
    index: int  # 1-based position in the report: "#1", "#2", ...
    run: Run
    manifest: dict[str, Any]
    summary: RunSummary
    events: list[dict[str, Any]]
    tasks: list[TaskRow] = field(default_factory=list)
    # per task, each spec-dec request's (output tokens, its acceptance counts): the AL-by-length plot
    requests: dict[str, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str(self.summary.run_id or self.manifest.get("run_id") or self.run.run_id)

    @property
    def label(self) -> str:
        return f"#{self.index}"

    @property
    def verdict(self) -> str:
        """The run's verdict, NO-GATE where it is PASS but no gate could have failed (`RunSummary.shown_verdict`)."""
        return self.summary.shown_verdict if self.summary.recorded_verdict is not None else "?"

    @property
    def engine(self) -> dict[str, Any]:
        return (self.manifest.get("config") or {}).get("engine") or {}

    def event_counts(self) -> dict[str, int]:
        if self.summary.events:
            return dict(self.summary.events)
        out: dict[str, int] = {}
        for e in self.events:
            out[str(e.get("type", "?"))] = out.get(str(e.get("type", "?")), 0) + 1
        return out


def load_run(index: int, run: Run) -> RunData:
    """A finished run's data; ValueError for an unfinished one."""
    if not run.is_finished:
        raise ValueError(f"run {run.run_id} is not finished (no summary.json)")
    data = RunData(index, run, run.manifest(), run.run_summary(), run.events())
    per_task = _sample_scores(run, data.summary.tasks)
    data.requests = request_acceptance(run)
    for task, info in data.summary.tasks.items():
        n, p = per_task.get(task, (0, None))
        if n == 0 and info.score is not None and info.num_samples:
            n, p = int(info.num_samples), float(info.score) / 100.0
        ci = None
        if n > 0 and p is not None:
            lo, hi = wilson_interval(p, n)
            ci = (100.0 * lo, 100.0 * hi)
        data.tasks.append(TaskRow(index, data.run_id, str(task), info, n, p, ci))
    return data


def _sample_scores(run: Run, tasks: Mapping[str, TaskSummary]) -> dict[str, tuple[int, float]]:
    """Per task: (samples, mean over samples of the fraction of scored filters that marked the sample correct).

    Only correctness flags are read; no sample text is kept.
    """
    sums: dict[str, list[float]] = {}
    for sample in run.samples():
        task = sample.task
        info = tasks.get(task)
        if info is None:
            continue
        filters = list((info.filter_scores or {}).keys()) or list(sample.correct)
        flags = [sample.correct.get(f) for f in filters]
        flags = [bool(v) for v in flags if v is not None]
        if not flags:
            continue
        sums.setdefault(task, []).append(sum(flags) / len(flags))
    return {task: (len(xs), sum(xs) / len(xs)) for task, xs in sums.items()}


def request_acceptance(run: Run) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Per task, (output tokens, acceptance counts) of each sample that stored its request's counts (runs before
    per-request counts were stored have none: their report leaves the plot out)."""
    out: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for sample in run.samples():
        counts = sample.acceptance
        if isinstance(counts, dict) and isinstance(counts.get("num_cycles"), int) and counts["num_cycles"] > 0:
            out.setdefault(str(sample.task), []).append((int(sample.num_output_tokens or 0), counts))
    return out
