"""One row per recorded run: what `specdec-eval runs` lists and what `decide` reasons over.

GPU short names (`gpu_of`) are what waives.txt's `full:<GPU>/` prefix and the `--gpu` filters use:

- a run whose engine device is `cpu`, or whose manifest lists no GPU, is "CPU";
- otherwise the first GPU's device name, without brand words (NVIDIA, GeForce, Tesla, Quadro, AMD, Instinct),
  cut after the first word that holds a digit, dash suffixes dropped (`A100-SXM4-80GB` -> `A100`), words joined
  with "_":  "NVIDIA H200" -> "H200", "NVIDIA H100 80GB HBM3" -> "H100", "NVIDIA A100-SXM4-80GB" -> "A100",
  "NVIDIA GeForce RTX 4090" -> "RTX_4090", "NVIDIA RTX PRO 6000 Blackwell Server Edition" -> "RTX_PRO_6000";
- a host with GPUs of different names gets their short names joined with "+" in first-seen order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..event_types import FAILING_EVENTS
from ..gates import recorded
from .run_summary import RunSummary, TaskSummary
from .shown_verdict import verdict_words
from .store import Run, UnreadableRun, UnreadableRunError, scan_runs, start_time

_BRAND_WORDS = {"NVIDIA", "GEFORCE", "TESLA", "QUADRO", "AMD", "INSTINCT", "RADEON"}
UNFINISHED = "unfinished"


def gpu_short_name(device_name: str) -> str:
    """A device name as a short GPU name (rules in the module docstring)."""
    words = [w for w in device_name.replace("_", " ").split() if w.upper() not in _BRAND_WORDS]
    kept: list[str] = []
    for word in words:
        kept.append(word)
        if any(ch.isdigit() for ch in word):
            break
    if not kept:
        return "GPU"
    kept[-1] = kept[-1].split("-")[0] or kept[-1]
    return "_".join(kept)


def gpu_of(manifest: dict[str, Any]) -> str:
    """The short GPU name a run ran on, or "CPU" (rules in the module docstring)."""
    device = str(((manifest.get("config") or {}).get("engine") or {}).get("device") or "")
    gpus = (manifest.get("devices") or {}).get("gpus") or []
    if device.lower().startswith("cpu") or not gpus:
        return "CPU"
    return "+".join(dict.fromkeys(gpu_short_name(str(g)) for g in gpus))


def iso_time(ts: float | None) -> str | None:
    """A UNIX timestamp as ISO 8601 UTC text; None for None or for what is not a time (see `start_time`)."""
    return None if start_time(ts) is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def short_commit(commit: str | None, dirty: bool | None) -> str:
    return (commit or "unknown")[:10] + ("*" if dirty else "")


def run_row(run: Run) -> dict[str, Any]:
    """One run as a row. An unfinished run (no summary.json) has verdict "unfinished" and no tasks; `live` says
    whether a process holds its writer's lock (it is running), else it was interrupted and can be resumed.

    Raises UnreadableRunError (a ValueError) when a file of the run cannot be read."""
    manifest = run.manifest()
    started = manifest.get("started")
    if started is not None and start_time(started) is None:
        raise UnreadableRunError(f"manifest.json: 'started' is {str(started)[:40]!r}, not a time")
    finished = run.is_finished
    summary = run.run_summary() if finished else RunSummary()
    if finished:
        counts = dict(summary.events)
    else:
        counts = {}
        for event in run.events():
            counts[event.get("type")] = counts.get(event.get("type"), 0) + 1
    failing = {t: counts[t] for t in FAILING_EVENTS if counts.get(t)}
    tasks = {
        name: {
            "score": t.score,
            "reference": t.reference,
            "threshold": t.threshold,
            "verdict": t.verdict,
            "num_samples": t.num_samples,
            **gate_columns(t),
        }
        for name, t in summary.tasks.items()
    }
    return {
        "run_id": run.run_id,
        "path": str(run.path),
        "started": iso_time(manifest.get("started")),
        "started_ts": manifest.get("started"),
        "commit": short_commit(manifest.get("commit"), manifest.get("dirty")),
        "commit_full": manifest.get("commit"),
        "dirty": manifest.get("dirty"),
        "test_id": manifest.get("test_id"),
        "gpu": gpu_of(manifest),
        "world_size": manifest.get("world_size"),
        "tasks": tasks,
        # NO-GATE where the summary says PASS but no gate could have failed (`run_summary`)
        "verdict": summary.shown_verdict if finished else UNFINISHED,
        "finished": finished,
        "live": (not finished) and run.is_locked(),
        "elapsed_s": manifest.get("elapsed_s"),
        "events": counts,
        "failing_events": failing,
        "num_failing_events": max(sum(failing.values()), int(summary.failing_events or 0)),
    }


@dataclass
class RunsTable:
    """Rows of the readable runs (oldest first) and the runs that could not be read, as dicts."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[dict[str, Any]] = field(default_factory=list)


def runs_table(
    root: str | Path, test_id: str | None = None, commit: str | None = None, gpu: str | None = None
) -> RunsTable:
    """The runs under root, oldest first (newest last), and the unreadable ones with their reason.

    Filters: test_id and gpu (short name, see `gpu_of`) match exactly, commit matches as a prefix of the full
    commit. An unreadable run is kept unless what can still be read of it (its manifest, when only the summary is
    broken) contradicts a filter: a run that cannot say what it ran might be any run.
    """
    scan = scan_runs(root)
    table = RunsTable()
    broken = list(scan.unreadable)
    for run in scan.runs:
        try:
            row = run_row(run)
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # a file of an unexpected shape
            reason = str(e).removeprefix(f"{run.path}/") if isinstance(e, ValueError) else f"unexpected content ({e})"
            broken.append(UnreadableRun(run.path, reason, _manifest_or_none(run)))
            continue
        if _matches(row, test_id, commit, gpu):
            table.rows.append(row)
    for u in broken:
        entry = unreadable_entry(u)
        if u.manifest is None or _matches(entry, test_id, commit, gpu):
            table.unreadable.append(entry)
    table.rows.sort(key=lambda r: (r["started_ts"] or 0.0, r["run_id"]))
    table.unreadable.sort(key=lambda u: (u["started_ts"] or 0.0, u["run_id"]))
    return table


def run_rows(
    root: str | Path, test_id: str | None = None, commit: str | None = None, gpu: str | None = None
) -> list[dict[str, Any]]:
    """The rows of `runs_table` (readable runs only: use `runs_table` to learn about the others)."""
    return runs_table(root, test_id, commit, gpu).rows


def unreadable_entry(u: UnreadableRun) -> dict[str, Any]:
    """An unreadable run as a dict; test id, commit and GPU are None unless its manifest could be read."""
    m = u.manifest
    return {
        "run_id": u.run_id,
        "path": str(u.path),
        "reason": u.reason,
        "started": iso_time(u.started),
        "started_ts": u.started,
        "test_id": m.get("test_id") if m else None,
        "commit": short_commit(m.get("commit"), m.get("dirty")) if m else None,
        "commit_full": m.get("commit") if m else None,
        "gpu": gpu_of(m) if m else None,
    }


def _manifest_or_none(run: Run) -> dict[str, Any] | None:
    try:
        manifest = run.manifest()
        gpu_of(manifest)  # the fields a filter reads must be readable too
        return manifest
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _matches(row: dict[str, Any], test_id: str | None, commit: str | None, gpu: str | None) -> bool:
    if test_id is not None and row["test_id"] != test_id:
        return False
    if gpu is not None and row["gpu"] != gpu:
        return False
    return commit is None or (row["commit_full"] or "").lower().startswith(commit.lower())


def gate_columns(task: TaskSummary) -> dict[str, str | bool | None]:
    """Each recorded gate's verdict (its column: the key summary.json keeps it under), reason and, for a gate whose
    PASS can be underpowered, whether this one was (never shown bare); None where not judged. An opt-in gate has
    columns only where the task recorded it."""
    columns: dict[str, str | bool | None] = {}
    for gate in recorded():
        result = gate.result(task)
        if result is None and gate.opt_in:
            continue
        columns[gate.key] = result.verdict if result is not None else None
        columns[gate.reason_column] = result.reason if result is not None else None
        if gate.underpowerable:
            columns[gate.underpowered_column] = gate.key in task.underpowered
    return columns


def gate_verdicts(task: Mapping[str, object]) -> str:
    """Text like " lossless PASS acceptance FAIL" from a row's task (`gate_columns`): each gate it recorded."""
    said = ((g.name, verdict_words(_word(task.get(g.key)), bool(task.get(g.underpowered_column)))) for g in recorded())
    return "".join(f" {name} {words}" for name, words in said if words)


def _word(value: object) -> str | None:
    return value if isinstance(value, str) else None


def format_tasks(row: dict[str, Any]) -> str:
    """Text like "gsm8k 41.20 PASS, gpqa_diamond 30.30 NO-GATE"; empty for an unfinished run."""
    parts = []
    for name, t in row["tasks"].items():
        score = "n/a" if t["score"] is None else f"{t['score']:.2f}"
        parts.append(f"{name} {score} {t['verdict']}{gate_verdicts(t)}")
    return ", ".join(parts)
