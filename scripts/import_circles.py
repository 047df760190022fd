"""Import circles inside one folder (workers/ by default, or peers/): the groups of modules (and of units) that import
each other, directly or through others, counted once with module-level imports only and once with function-level
imports too; and the folder's modules and import edges, and the imports that leave the folder upward (to a folder
it may not import: for workers/ any other top-level folder, for peers/ any but workers/).

    python scripts/import_circles.py [ROOT] [--folder workers|peers] [--json]

A unit is a sub-package of the folder (engine, model, spec, ...) or one of its top-level modules (config, interface,
...). Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`, so those count as imported too (except a module's
own packages, which are already running when it is imported). Imports under
`if TYPE_CHECKING:` never run and are left out. Reads the files; imports nothing from them.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layout_stats import circles, module_name  # noqa: E402

PACKAGE = "specdec_eval.workers"  # the folder measured (`--folder` sets it)
# The top-level folders each measured folder may import (besides its own and specdec_eval/'s shared modules).
MAY_IMPORT = {"workers": (), "peers": ("workers",)}
TOP = ("cli", "launch", "workers", "peers", "evals", "results", "serve", "stats", "studies")


def imports_of(tree: ast.Module, module: str, is_package: bool, known: set[str]) -> tuple[set[str], set[str]]:
    """(module-level, function-level) modules of workers/ that one module imports."""
    top: set[str] = set()
    inner: set[str] = set()

    def targets(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            # `from pkg import sub` names a module when pkg.sub is one
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        found = set()
        for name in names:
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(3, len(parts) + 1)}  # the packages it runs on the way
        own = {module.rsplit(".", i)[0] for i in range(module.count(".") + 1)}  # itself and its own packages
        return {m for m in found if m in known and m not in own}

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            (inner if in_function else top).update(targets(node))
        nested = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, nested)

    visit(tree, False)
    return top, inner


def unit_of(module: str) -> str:
    """'engine' for specdec_eval.workers.engine.executor, 'config' for specdec_eval.workers.config."""
    rest = module[len(PACKAGE) + 1 :].split(".") if module != PACKAGE else ["__init__"]
    return rest[0]


def upward(root: Path, folder: str, paths: dict[str, Path]) -> list[str]:
    """'module -> imported' for each import (module or function level) of another top-level folder than those the
    folder may import."""
    allowed = {folder, *MAY_IMPORT.get(folder, ())}
    found = set()
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom | ast.Import):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                names = [".".join(package + ([node.module] if node.module else []))]
            for name in names:
                parts = name.split(".")
                if parts[0] == "specdec_eval" and len(parts) > 1 and parts[1] in TOP and parts[1] not in allowed:
                    found.add(f"{module[len('specdec_eval.') :]} -> {name[len('specdec_eval.') :]}")
    return sorted(found)


def measure(root: Path, folder: str = "workers") -> dict:
    global PACKAGE
    PACKAGE = f"specdec_eval.{folder}"
    paths = {module_name(root, p): p for p in sorted((root / folder).rglob("*.py"))}
    known = set(paths)
    module_edges: dict[str, set[tuple[str, str]]] = {"module level": set(), "function level too": set()}
    for module, path in paths.items():
        top, inner = imports_of(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py", known)
        module_edges["module level"] |= {(module, t) for t in top}
        module_edges["function level too"] |= {(module, t) for t in top | inner}
    short = len(PACKAGE) + 1
    result: dict = {
        "modules": len(paths),
        "import edges": len(module_edges["function level too"]),
        "upward imports": upward(root, folder, paths),
    }
    for kind, edges in module_edges.items():
        unit_edges = {(unit_of(a), unit_of(b)) for a, b in edges if unit_of(a) != unit_of(b)}
        modules = [[m[short:] or "__init__" for m in group] for group in circles(dict.fromkeys(edges, 1))]
        result[kind] = {
            "module circles": modules,
            "modules in circles": sum(len(g) for g in modules),
            "unit circles": circles(dict.fromkeys(unit_edges, 1)),
        }
    return result


def render(stats: dict) -> str:
    lines = [f"{stats['modules']} modules, {stats['import edges']} import edges between them (function level too)"]
    lines.append(f"{len(stats['upward imports'])} upward imports")
    lines += [f"  {edge}" for edge in stats["upward imports"]]
    for kind, found in stats.items():
        if not isinstance(found, dict):
            continue
        lines.append(f"{kind}: {len(found['module circles'])} module circles, {found['modules in circles']} modules")
        lines += [f"  modules: {' <-> '.join(group)}" for group in found["module circles"]]
        lines.append(f"  {len(found['unit circles'])} unit circles")
        lines += [f"  units: {' <-> '.join(group)}" for group in found["unit circles"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--folder", choices=sorted(MAY_IMPORT), default="workers", help="the folder measured")
    parser.add_argument("--json", action="store_true", help="print the circles as JSON")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / args.folder).is_dir():
        print(f"import_circles: {root} is not a specdec-eval checkout", file=sys.stderr)
        return 2
    stats = measure(root, args.folder)
    print(json.dumps(stats, indent=2) if args.json else render(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
