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

import json
import time
from pathlib import Path
from typing import Any

from ..event_types import FAILING_EVENTS
from .store import Run, list_runs

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
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def short_commit(commit: str | None, dirty: bool | None) -> str:
    return (commit or "unknown")[:10] + ("*" if dirty else "")


def run_row(run: Run) -> dict[str, Any]:
    """One run as a row. An unfinished run (no summary.json) has verdict "unfinished" and no tasks."""
    manifest = run.manifest()
    finished = run.is_finished
    summary = run.summary() if finished else {}
    if finished:
        counts = dict(summary.get("events") or {})
    else:
        counts = {}
        for event in run.events():
            counts[event.get("type")] = counts.get(event.get("type"), 0) + 1
    failing = {t: counts[t] for t in FAILING_EVENTS if counts.get(t)}
    tasks = {
        name: {
            "score": t.get("score"),
            "reference": t.get("reference"),
            "threshold": t.get("threshold"),
            "verdict": t.get("verdict"),
            "num_samples": t.get("num_samples"),
            # the losslessness gate of a spec-dec run against its baseline (None when not run)
            "lossless": (t.get("lossless") or {}).get("verdict"),
            "lossless_reason": (t.get("lossless") or {}).get("reason"),
        }
        for name, t in (summary.get("tasks") or {}).items()
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
        "verdict": summary.get("verdict") if finished else UNFINISHED,
        "finished": finished,
        "elapsed_s": manifest.get("elapsed_s"),
        "events": counts,
        "failing_events": failing,
        "num_failing_events": max(sum(failing.values()), int(summary.get("failing_events") or 0)),
    }


def run_rows(
    root: str | Path, test_id: str | None = None, commit: str | None = None, gpu: str | None = None
) -> list[dict[str, Any]]:
    """Rows of the runs under root, oldest first (newest last). Filters: test_id and gpu (short name, see
    `gpu_of`) match exactly, commit matches as a prefix of the full commit. Runs whose manifest or summary
    cannot be read (not JSON) are left out."""
    rows = []
    for run in list_runs(root):
        try:
            row = run_row(run)
        except (json.JSONDecodeError, UnicodeDecodeError, FileNotFoundError):
            continue
        if test_id is not None and row["test_id"] != test_id:
            continue
        if gpu is not None and row["gpu"] != gpu:
            continue
        if commit is not None and not (row["commit_full"] or "").lower().startswith(commit.lower()):
            continue
        rows.append(row)
    rows.sort(key=lambda r: (r["started_ts"] or 0.0, r["run_id"]))
    return rows


def format_tasks(row: dict[str, Any]) -> str:
    """Text like "gsm8k 41.20 PASS, gpqa_diamond 30.30 NO-GATE"; empty for an unfinished run."""
    parts = []
    for name, t in row["tasks"].items():
        score = "n/a" if t["score"] is None else f"{t['score']:.2f}"
        lossless = f" lossless {t['lossless']}" if t.get("lossless") else ""
        parts.append(f"{name} {score} {t['verdict']}{lossless}")
    return ", ".join(parts)
