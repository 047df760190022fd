"""The call trace of one run's engine identity: every call into evals/run_identity.py during a tiny run (the run key,
the test id, the model key, the baseline look-ups) and every project function those calls make, with the modules
they pass through and how many of them go upward in the layering.

    heavy .venv/bin/python scripts/identity_trace.py [--data-dir DIR] [--json] [--calls]

A call is upward when the callee's folder imports the caller's folder, directly or through others (the import graph
of scripts/layout_stats.py: no circles, so "above" is well defined): code called from below that sits above it.
Runs `specdec-eval run --model tiny --spec eagle3` on 2 gsm8k documents in a temporary folder under sys.setprofile
(a model is built and decoded: run it under `heavy`). Compare two trees by running it in each.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import layout_stats  # noqa: E402  (a sibling script: the folders and the import graph)

import specdec_eval  # noqa: E402

ROOT = Path(specdec_eval.__file__).resolve().parents[1]  # the tree the interpreter runs: compare two by their venvs

IDENTITY = "specdec_eval.evals.run_identity"


def import_graph() -> tuple[dict[str, set[str]], frozenset[str]]:
    stats = layout_stats.measure(ROOT)
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in stats["imports"]:
        a, b = edge.split(" -> ")
        graph[a].add(b)
    packages = frozenset(f for f in stats["folders"] if "/" in f)
    return graph, packages


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def trace(argv: list[str]) -> list[tuple[str, str, str, str]]:
    """(caller module, caller function, callee module, callee function) of every project call made inside a call
    into run_identity, the entries into run_identity included (their caller is whoever called it)."""
    from specdec_eval.cli.main import main

    calls: list[tuple[str, str, str, str]] = []
    active: list[object] = []  # the run_identity frames we are inside

    def profile(frame, event, arg):
        if event == "return" and active and frame is active[-1]:
            active.pop()
            return
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("specdec_eval") or frame.f_code.co_name.startswith("<"):
            return
        entering = module == IDENTITY and not active
        if not active and not entering:
            return
        back = frame.f_back
        caller = back.f_globals.get("__name__", "?") if back is not None else "?"
        calls.append((caller, back.f_code.co_name if back is not None else "?", module, frame.f_code.co_name))
        if entering:
            active.append(frame)

    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(argv)
    finally:
        sys.setprofile(None)
    return calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--calls", action="store_true", help="list every call")
    args = p.parse_args()
    graph, packages = import_graph()
    with tempfile.TemporaryDirectory() as out:
        argv = ["run", "--tasks", "gsm8k", "--limit", "2", "--model", "tiny", "--spec", "eagle3", "--no-reference"]
        argv += ["--num-fewshot", "0", "--max-output-len", "16", "--data-dir", args.data_dir, "--out", out, "--json"]
        calls = trace(argv)
    folder = lambda m: layout_stats.folder_of(m, packages) or "?"  # noqa: E731
    upward = [c for c in calls if folder(c[0]) != folder(c[2]) and reaches(graph, folder(c[2]), folder(c[0]))]
    entries = [c for c in calls if c[2] == IDENTITY and c[0] != IDENTITY]
    result = {
        "calls": len(calls),
        "modules": len({c[2] for c in calls} | {c[0] for c in entries}),
        "upward_calls": len(upward),
        "entries_into_run_identity": len(entries),
        "entries": dict(Counter(f"{c[0]}.{c[1]} -> {c[3]}" for c in entries)),
        "upward": dict(Counter(f"{folder(c[0])} -> {folder(c[2])}: {c[1]} -> {c[3]}" for c in upward)),
    }
    if args.calls:
        result["every_call"] = [f"{a}.{b} -> {c}.{d}" for a, b, c, d in calls]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"calls {result['calls']}, modules {result['modules']}, upward calls {result['upward_calls']}, ", end="")
    print(f"entries into run_identity {result['entries_into_run_identity']}")
    for what in ("entries", "upward"):
        print(f"{what}:")
        for line, n in result[what].items():
            print(f"  {n} x {line}")
    for line in result.get("every_call", []):
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
