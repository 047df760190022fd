"""The report as a Markdown summary compact enough for a pull-request comment; every string taken from a run is
Markdown-escaped and stripped of raw HTML (GitHub renders inline HTML in comments)."""

from __future__ import annotations

from typing import Any

from ...gates.lossless import GATE as LOSSLESS
from .data import RunData
from .gates import FAIL, banner, gate_texts, lossless_gate, overall, stopped_text
from .text import acceptance_length, commit_text, kv_text, num, spec_text


def _md(v: Any) -> str:
    """A table cell: no newlines, pipes escaped, and no raw HTML."""
    text = str(v).replace("\r", " ").replace("\n", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\|`*[]":
        text = text.replace(ch, "\\" + ch)
    return text


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _scores(runs: list[RunData]) -> list[str]:
    has_lossless = any(lossless_gate(t.summary) for r in runs for t in r.tasks)
    head = ["run", "task", "score", "reference", "threshold", "verdict", "AL"] + (
        [LOSSLESS.name] if has_lossless else []
    )
    align = ["---", "---", "---:", "---:", "---:", "---", "---:"] + (["---"] if has_lossless else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for r in runs:
        for t in r.tasks:
            info = t.summary
            cells = [
                r.label,
                t.task,
                num(info.score),
                num(info.reference),
                num(info.threshold),
                info.verdict or "?",
                num(acceptance_length(info)),
            ]
            if has_lossless:
                gate = lossless_gate(info)
                cells.append(gate.text if gate else "—")
            lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    return lines


def _gates(runs: list[RunData]) -> list[str]:
    """Each task's gates in words, one bullet per run and task."""
    lines = []
    for r in runs:
        for t in r.tasks:
            parts = [f"{name} {gate.text}" for name, gate in gate_texts(t.summary).items() if gate is not None]
            stopped = stopped_text(t.summary)
            if stopped:
                parts.append(stopped)
            lines.append(f"- {_md(r.label)} {_md(t.task)}: " + "; ".join(_md(p) for p in parts))
    return lines


def render_markdown(runs: list[RunData]) -> str:
    verdict = overall(runs)
    failed = sum(r.verdict == FAIL for r in runs)
    lines = [f"### specdec-eval report: **{verdict}**", ""]
    lines.append(f"**Overall: {verdict}** ({len(runs)} run(s)" + (f", {failed} failed)" if failed else ")"))
    lines.append(_md(banner(runs)))
    lines.append("")
    for r in runs:
        model = r.engine.get("model", _or(r.summary.model, "—"))
        kv = kv_text(r.engine.get("kv_cache", r.summary.kv_cache))
        world = r.manifest.get("world_size", _or(r.summary.world_size, "—"))
        lines.append(
            f"- {_md(r.label)} {_md(r.run_id)} **{_md(r.verdict)}**: model {_md(model)}, "
            f"KV {_md(kv)}, spec {_md(spec_text(r.engine))}, world size {_md(world)}, "
            f"commit {_md(commit_text(r.manifest))}"
        )
    lines += ["", *_scores(runs), "", "Gates:", "", *_gates(runs), ""]
    for r in runs:
        counts = r.event_counts()
        text = ", ".join(f"{_md(k)} {_md(v)}" for k, v in sorted(counts.items())) if counts else "none"
        failing = r.summary.failing_events
        tail = f" (failing: {_md(failing)})" if failing else ""
        lines.append(f"Events {_md(r.label)}: {text}{tail}  ")
    return "\n".join(lines).rstrip() + "\n"
