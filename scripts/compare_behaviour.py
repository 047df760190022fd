"""Compare what two trees recorded for the same commands: every sample field and every summary field of every run,
timings, run ids and paths left out.

    python scripts/compare_behaviour.py BEFORE AFTER [--json]

BEFORE and AFTER are folders holding, per command, a runs folder (BEFORE/local/, ...) and the command's standard
output beside it (BEFORE/local.out: its --json summary, or `selftest --mutants --json`'s matrix);
scripts/behaviour_runs.sh writes such a folder from a checkout. Runs are matched across the two by their recorded
configuration (manifest.json "config": engine and evaluation, which names a run's side: the run, its baseline, its
paired twins, its noise-floor control; a server's port left out), never by run id, which holds the commit. Prints,
per command, whether each run's samples and summary are identical, and every difference (a key path, before ->
after); a run only one side has is a difference too. Exit status 0 when everything is identical, 1 otherwise, 2 on
bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

# Keys whose values are timings, run ids or paths: they differ between any two executions.
IGNORED_KEYS = frozenset(
    {
        "elapsed_s",
        "seconds",
        "run_id",
        "run_dir",
        "baseline_run",
        "control_run",
        "started",
        "finished",
        "reused_generations",
        "sent_at",
        "finished_at",
    }
)
RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9A-Za-z]+(?:-\d+)?")
PORT = re.compile(r"(//[^/:\s\"]+):\d+")  # a server started for the commands listens on a port of the moment


def normalised(value: Any, runs: Path | None = None) -> Any:
    """`value` with ignored keys dropped and run ids / run paths replaced by a placeholder; None-valued keys dropped
    (a column one writer leaves out and another writes as empty holds the same data)."""
    if isinstance(value, dict):
        return {k: normalised(v, runs) for k, v in value.items() if k not in IGNORED_KEYS and v is not None}
    if isinstance(value, list):
        return [normalised(v, runs) for v in value]
    if isinstance(value, str):
        if runs is not None:
            value = value.replace(str(runs), "<runs>")
        return PORT.sub(r"\1:<port>", RUN_ID.sub("<run>", value))
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every place two normalised values differ: 'path: a -> b'."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {_short(a)} -> {_short(b)}"]


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def runs_of(folder: Path) -> dict[str, dict[str, Any]]:
    """Each run under a runs folder by its configuration: {"samples": [...], "summary": {...}} (normalised)."""
    from specdec_eval.results.store import list_runs

    out: dict[str, dict[str, Any]] = {}
    for run in list_runs(folder):
        config = json.dumps(normalised(run.manifest().get("config")), sort_keys=True)
        samples = sorted((normalised(s, folder) for s in run.sample_rows()), key=lambda s: (s["task"], s["doc_id"]))
        summary = normalised(run.summary(), folder) if run.is_finished else None
        key = config if config not in out else f"{config} #{sum(k.startswith(config) for k in out) + 1}"
        out[key] = {"samples": samples, "summary": summary, "side": _side(run.manifest())}
    return out


def _side(manifest: dict[str, Any]) -> str:
    engine = (manifest.get("config") or {}).get("engine") or {}
    if "noise_control" in engine:
        return "control"
    if "paired_twin_of" in engine:
        return "paired twins"
    return "spec-dec run" if engine.get("spec") else "plain run"


def compare_command(before: Path, after: Path, name: str) -> dict[str, Any]:
    """One command's runs and its printed output, before vs after."""
    result: dict[str, Any] = {"command": name, "runs": [], "output": []}
    a_runs = runs_of(before / name) if (before / name).is_dir() else {}
    b_runs = runs_of(after / name) if (after / name).is_dir() else {}
    for key in list(a_runs) + [k for k in b_runs if k not in a_runs]:
        a, b = a_runs.get(key), b_runs.get(key)
        side = (a or b)["side"]
        if a is None or b is None:
            result["runs"].append({"side": side, "only": "after" if a is None else "before", "differences": []})
            continue
        diffs = differences({"samples": a["samples"]}, {"samples": b["samples"]})
        diffs += differences({"summary": a["summary"]}, {"summary": b["summary"]})
        result["runs"].append({"side": side, "samples": len(a["samples"]), "differences": diffs})
    for suffix in (".out", ".rc"):
        pa, pb = before / f"{name}{suffix}", after / f"{name}{suffix}"
        if pa.exists() or pb.exists():
            result["output"] += differences(_printed(pa, before / name), _printed(pb, after / name), suffix[1:])
    return result


def _printed(path: Path, runs: Path) -> Any:
    if not path.exists():
        return "<absent>"
    text = path.read_text(encoding="utf-8")
    try:
        return normalised(json.loads(text[text.index("{") :]), runs)
    except ValueError:
        return text.strip()


def render(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        same = all(not x["differences"] and "only" not in x for x in r["runs"]) and not r["output"]
        lines.append(f"{r['command']}: {'identical' if same else 'DIFFERENT'} ({len(r['runs'])} runs)")
        for x in r["runs"]:
            if "only" in x:
                lines.append(f"  {x['side']}: only {x['only']}")
                continue
            state = "identical" if not x["differences"] else f"{len(x['differences'])} differences"
            lines.append(f"  {x['side']}: {x['samples']} samples, summary and samples {state}")
            lines += [f"    {d}" for d in x["differences"][:40]]
        lines += [f"  printed {d}" for d in r["output"][:40]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            print(f"compare_behaviour: {folder} is not a folder", file=sys.stderr)
            return 2
    names = sorted(
        {
            p.stem
            for folder in (args.before, args.after)
            for p in folder.iterdir()
            if p.suffix in (".out", ".rc") or p.is_dir()
        }
    )
    results = [compare_command(args.before, args.after, name) for name in names]
    print(json.dumps(results, indent=2) if args.json else render(results))
    same = all(not x["differences"] and "only" not in x for r in results for x in r["runs"]) and not any(
        r["output"] for r in results
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
