"""The rows of the README's vLLM table from the `run --json` summaries `scripts/vllm_table.sh OUT` wrote into OUT:
one markdown row per run (engine, decoding, run verdict, lossless verdict and its basis, acceptance length and where
it was read, the acceptance gate against our engine's length, events).

    python scripts/vllm_table_rows.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _lossless(task: dict) -> str:
    gate = task.get("lossless") or {}
    verdict = gate.get("verdict", "-")
    if "pit" in gate:  # the sampled gate: its tests' p-values
        ps = [f"PIT p {gate['pit']['p']:.3g}", f"likelihood p {gate['likelihood']['p']:.3g}"]
        within = (gate.get("within_requests") or {}).get("p")
        if within is not None:
            ps.append(f"within p {within:.3g}")
        return f"{verdict} ({gate.get('positions')} tokens, {gate.get('basis')}; {', '.join(ps)})"
    if "identical" in gate:
        return f"{verdict} ({gate['identical']}/{gate['num_pairs']} identical)"
    return f"{verdict} ({str(gate.get('reason', ''))[:90]})"


def _acceptance(summary: dict, task: dict) -> str:
    acc = task.get("acceptance") or summary.get("reported_acceptance") or {}
    if not acc or not acc.get("num_cycles"):
        return "none drafted"
    al = acc.get("acceptance_length")
    where = acc.get("basis") or acc.get("source") or ""
    return f"{al:.3f} ({acc['num_cycles']} steps; {where})"


def _acceptance_gate(task: dict) -> str:
    gate = task.get("acceptance_gate") or {}
    if not gate or gate.get("ref_al") is None:
        return "-"
    return f"{gate['verdict']} vs ours {gate['ref_al']:.3f} (min {gate.get('min_al') or 0:.3f})"


def row(name: str, summary: dict) -> str:
    task = next(iter(summary.get("tasks", {}).values()), {})
    conditions = task.get("conditions") or {}
    decoding = "greedy"
    if conditions.get("temperature"):
        top_k = conditions.get("top_k") or "-"
        decoding = f"T={conditions['temperature']:g}, top-k {top_k}, top-p {conditions.get('top_p'):g}"
    events = summary.get("events") or {}
    events_text = ", ".join(f"{k} {v}" for k, v in events.items()) if events else "none"
    cells = [
        name,
        decoding,
        summary.get("verdict", "-"),
        _lossless(task),
        _acceptance(summary, task),
        _acceptance_gate(task),
        events_text,
    ]
    return "| " + " | ".join(cells) + " |"


def main(out: Path) -> int:
    print("| run | decoding | verdict | lossless | acceptance length | acceptance gate | events |")
    print("|---|---|---|---|---|---|---|")
    for path in sorted(out.glob("*.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"| {path.stem} | - | no summary ({e}) | | | | |")
            continue
        print(row(path.stem, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
