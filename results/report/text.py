"""Values of a run as short plain text, shared by the HTML page and the Markdown summary (each escapes them)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..run_summary import TaskSummary


def num(v: Any, digits: int = 2) -> str:
    if isinstance(v, bool) or v is None:
        return "—" if v is None else str(v)
    if isinstance(v, (int, float)):
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)
    return str(v)


def spec_text(engine: dict[str, Any]) -> str:
    """The spec-dec method of a run's engine config: a local engine's {algorithm, max_draft_len}, or an endpoint's
    declared method name with its max_draft_len beside it."""
    spec = engine.get("spec")
    if isinstance(spec, str) and spec:
        k = engine.get("max_draft_len")
        return f"{spec} (K={k})" if k else spec
    if not isinstance(spec, dict) or not spec:
        return "none"
    alg = spec.get("algorithm", "?")
    k = spec.get("max_draft_len")
    return f"{alg} (K={k})" if k is not None else str(alg)


def kv_text(kv: Any) -> str:
    if isinstance(kv, dict):
        return str(kv.get("version", "?"))
    return "—" if kv is None else str(kv)


def device_text(manifest: dict[str, Any], engine: dict[str, Any]) -> str:
    devices = manifest.get("devices") or {}
    gpus = devices.get("gpus") if isinstance(devices, dict) else None
    parts = []
    if gpus:
        counts = Counter(str(g) for g in gpus)
        parts.append(", ".join(f"{c}× {name}" for name, c in counts.items()))
    else:
        dev = engine.get("device")
        cpu = devices.get("cpu") if isinstance(devices, dict) else None
        parts.append(" / ".join(str(x) for x in (dev, cpu) if x))
    host = devices.get("host") if isinstance(devices, dict) else None
    if host:
        parts.append(f"host {host}")
    return "; ".join(p for p in parts if p) or "—"


def commit_text(manifest: dict[str, Any]) -> str:
    commit = manifest.get("commit")
    text = str(commit)[:12] if commit else "unknown"
    dirty = manifest.get("dirty")
    if dirty:
        text += " (dirty)"
    elif dirty is None:
        text += " (dirty: unknown)"
    return text


def acceptance_length(info: Mapping[str, Any] | TaskSummary) -> float | None:
    acc = info.acceptance if isinstance(info, TaskSummary) else info.get("acceptance")
    if isinstance(acc, Mapping) and isinstance(acc.get("acceptance_length"), (int, float)):
        return float(acc["acceptance_length"])
    return None


def basis_text(acc: dict[str, Any]) -> str:
    """What an acceptance figure was computed from, and which fields of whose (runs before the label: unknown)."""
    basis = acc.get("basis") or ("per-request counts" if "scope" not in acc else "unknown")
    source = acc.get("source")
    return f"{basis} ({source})" if source else str(basis)


def utc(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return "—"
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
