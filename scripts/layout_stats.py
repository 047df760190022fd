"""The shape of the code, measured: files and lines per folder, import statements between folders, import circles
between sub-packages, the largest files and the length of `cli/run.py`; and the shape of the layer that judges
(`judging`): the product files that name a gate as a string literal, the count of `dict[str, Any]`, the longest
function, the widest signature and the modules over 450 lines in the judging folders.

    python scripts/layout_stats.py [ROOT] [--json]

ROOT is a checkout (default: this one). Folders are the top-level ones (cli, launch, workers, peers, evals, results,
serve, specdec_eval) and, inside evals/, workers/ and peers/, their sub-packages (evals/gates, evals/pipeline, ...),
so that what the redesign of the run pipeline changed (issue 34) can be compared between two checkouts. An import
statement counts once per (statement, imported folder); `from x import a, b` is one statement. Only the package's
own modules are counted (tests/ and scripts/ are left out), and imports under `if TYPE_CHECKING:` are not (they
never run). Reads the files; imports nothing from them.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

TOP = ("specdec_eval", "cli", "launch", "workers", "peers", "evals", "results", "serve")
SPLIT = ("evals", "workers", "peers")  # folders whose sub-packages count as folders of their own


def module_name(root: Path, path: Path) -> str:
    """specdec_eval.evals.gates.lossless for ROOT/evals/gates/lossless.py."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts if parts[0] == "specdec_eval" else ["specdec_eval", *parts])


def folder_of(module: str, packages: frozenset[str] = frozenset()) -> str | None:
    """The folder a module of the package belongs to: 'evals/gates', 'cli', 'specdec_eval' (the leaves at the top).
    `packages`: the sub-packages of SPLIT folders ('workers/kv_cache'), so that a sub-package's own `__init__` (and an
    import of it) counts in that sub-package, not in the folder above it."""
    parts = module.split(".")
    if parts[0] != "specdec_eval":
        return None
    if len(parts) == 1 or parts[1] not in TOP[1:]:
        return "specdec_eval"
    if parts[1] in SPLIT and (len(parts) > 3 or ".".join(parts[1:3]).replace(".", "/") in packages):
        return f"{parts[1]}/{parts[2]}"
    return parts[1]


def imported_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The modules one import statement names, relative imports resolved against `module`."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level == 0:
        base = node.module or ""
    else:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    # `from . import x` names sub-modules; `from .x import a` names module x
    return [f"{base}.{a.name}" for a in node.names] if node.module is None else [base]


def runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, those under `if TYPE_CHECKING:` left out (they never run)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def measure(root: Path) -> dict:
    files: dict[str, list[tuple[str, int]]] = defaultdict(list)
    edges: Counter[tuple[str, str]] = Counter()
    packages = frozenset(
        f"{top}/{d.name}"
        for top in SPLIT
        if (root / top).is_dir()
        for d in (root / top).iterdir()
        if (d / "__init__.py").is_file()
    )
    for top in TOP:
        base = root / top
        for path in sorted(base.rglob("*.py")) if base.is_dir() else []:
            if ".venv" in path.parts:
                continue
            module = module_name(root, path)
            folder = folder_of(module, packages) or top
            text = path.read_text(encoding="utf-8")
            files[folder].append((str(path.relative_to(root)), text.count("\n")))
            for node in runtime_imports(ast.parse(text)):
                targets = {folder_of(m, packages) for m in imported_modules(node, module, path.name == "__init__.py")}
                for target in targets - {None, folder}:
                    edges[(folder, target)] += 1
    largest = sorted((n, f) for fs in files.values() for f, n in fs)[-5:][::-1]
    run_py = next((n for f, n in files.get("cli", []) if f == "cli/run.py"), None)
    return {
        "folders": {k: {"files": len(v), "lines": sum(n for _, n in v)} for k, v in sorted(files.items())},
        "total": {"files": sum(len(v) for v in files.values()), "lines": sum(n for v in files.values() for _, n in v)},
        "imports": {f"{a} -> {b}": n for (a, b), n in sorted(edges.items())},
        "circles": circles(edges),
        "largest": [{"file": f, "lines": n} for n, f in largest],
        "cli/run.py": run_py,
        "judging": judging(root),
    }


JUDGING = ("evals/gates", "evals/lossless", "evals/pipeline", "results")  # the folders whose code judges a run
# The string literals that name a gate as its readers spell it (the label and the key summary.json keeps it under).
GATE_LITERALS = ('"accuracy"', '"lossless"', '"acceptance"', '"acceptance_gate"')
MAX_LINES = 450


def product_files(root: Path) -> list[Path]:
    """The package's own modules (tests/, scripts/ and studies/ are not product)."""
    return [
        p for top in TOP if (root / top).is_dir() for p in sorted((root / top).rglob("*.py")) if ".venv" not in p.parts
    ]


def declared_gate_names(tree: ast.AST) -> set[str]:
    """The strings a module declares as a gate's own name or key: a class attribute `name = "..."` / `key = "..."`,
    or a `GateDeclaration(name="...", key="...")` keyword (specdec_eval/gates: one module per gate)."""
    attributes = {
        node.value
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in ("name", "key") for t in node.targets)
    }
    keywords = {
        kw.value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "GateDeclaration"
        for kw in call.keywords
        if kw.arg in ("name", "key")
    }
    return {v.value for v in attributes | keywords if isinstance(v, ast.Constant) and isinstance(v.value, str)}


def judging(root: Path) -> dict:
    """What a new gate costs and how long the judging code's functions are (module docstrings and comments left out of
    the literals: a gate's name in prose is no place a new gate must edit)."""
    literal_files: dict[str, list[str]] = {g: [] for g in GATE_LITERALS}
    typed_dicts: Counter[str] = Counter()
    functions: list[tuple[int, int, str]] = []  # (lines, parameters, where)
    long_modules: list[tuple[int, str]] = []
    for path in product_files(root):
        rel = str(path.relative_to(root))
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        strings -= declared_gate_names(tree)  # a gate's own module names it: that is no place a new gate edits
        for g in GATE_LITERALS:
            if g.strip('"') in strings:
                literal_files[g].append(rel)
        typed_dicts[rel.split("/")[0]] += text.count("dict[str, Any]")
        if not rel.startswith(JUDGING):
            continue
        lines = text.count("\n")
        if lines > MAX_LINES:
            long_modules.append((lines, rel))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                params -= bool(a.args) and a.args[0].arg in ("self", "cls")
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append((span, params, f"{rel}:{node.name}"))
    union = sorted({f for fs in literal_files.values() for f in fs})
    longest = max(functions) if functions else (0, 0, "-")
    widest = max(functions, key=lambda f: (f[1], f[0])) if functions else (0, 0, "-")
    return {
        "gate_literal_files": {g: len(fs) for g, fs in literal_files.items()},
        "gate_literal_files_any": len(union),
        "gate_literal_file_list": union,
        "dict_str_any": dict(sorted(typed_dicts.items())),
        "dict_str_any_total": sum(typed_dicts.values()),
        "longest_function": {"where": longest[2], "lines": longest[0]},
        "widest_signature": {"where": widest[2], "parameters": widest[1]},
        "modules_over_max": [{"file": f, "lines": n} for n, f in sorted(long_modules, reverse=True)],
    }


def circles(edges: Counter[tuple[str, str]]) -> list[list[str]]:
    """Groups of folders that import each other, directly or through others (strongly connected, more than one)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def render(stats: dict) -> str:
    lines = ["files and lines per folder:"]
    lines += [f"  {k:<22} {v['files']:>3} files {v['lines']:>6} lines" for k, v in stats["folders"].items()]
    lines.append(f"  {'total':<22} {stats['total']['files']:>3} files {stats['total']['lines']:>6} lines")
    lines.append("import statements between folders:")
    lines += [f"  {k:<40} {n:>3}" for k, n in stats["imports"].items()]
    lines.append("import circles: " + ("; ".join(" <-> ".join(c) for c in stats["circles"]) or "none"))
    lines.append("largest files: " + ", ".join(f"{x['file']} ({x['lines']})" for x in stats["largest"]))
    lines.append(f"cli/run.py: {stats['cli/run.py']} lines")
    j = stats["judging"]
    lines.append("judging:")
    named = ", ".join(f"{g} {n}" for g, n in j["gate_literal_files"].items())
    lines.append(f"  product files naming a gate as a string: {j['gate_literal_files_any']} ({named})")
    per = ", ".join(f"{k} {n}" for k, n in j["dict_str_any"].items() if n)
    lines.append(f"  dict[str, Any] in the product: {j['dict_str_any_total']} ({per})")
    lines.append(f"  longest function: {j['longest_function']['where']} ({j['longest_function']['lines']} lines)")
    lines.append(
        f"  widest signature: {j['widest_signature']['where']} ({j['widest_signature']['parameters']} parameters)"
    )
    over = ", ".join(f"{x['file']} ({x['lines']})" for x in j["modules_over_max"]) or "none"
    lines.append(f"  modules over {MAX_LINES} lines: {over}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / "evals").is_dir():
        print(f"layout_stats: {root} is not a specdec-eval checkout", file=sys.stderr)
        return 2
    stats = measure(root)
    print(json.dumps(stats, indent=2) if args.json else render(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
