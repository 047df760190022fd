"""Where statistics and studies sit: stats/ is a leaf (numpy, scipy and the standard library only), and the product
never imports studies/ (only the command line may, lazily). Read from the source, nothing imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEAF_ALLOWED = {"numpy", "scipy"}
PRODUCT = ("evals", "results", "workers", "serve", "launch", "specdec_eval", "stats")


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in a file, at any depth (function-level ones too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def leaf_problems(folder: Path) -> list[str]:
    """Imports in `folder` of anything but the standard library, numpy, scipy and the folder's own modules."""
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for level, module in imports_of(path):
            top = module.split(".")[0]
            if level == 1 or (level == 0 and (top in LEAF_ALLOWED or top in sys.stdlib_module_names)):
                continue
            bad.append(f"{path.relative_to(folder.parent)}: {'.' * level}{module}")
    return bad


def studies_importers(root: Path, folders: tuple[str, ...]) -> list[str]:
    """Files of `folders` under `root` that import the studies package."""
    bad = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if any("studies" in module.split(".") for _, module in imports_of(path)):
                bad.append(str(path.relative_to(root)))
    return bad


def test_stats_is_a_leaf():
    assert leaf_problems(ROOT / "stats") == []


def test_the_product_never_imports_studies():
    assert studies_importers(ROOT, PRODUCT) == []


def test_the_checks_catch_what_they_exist_for(tmp_path):
    """A statistics module that reaches up into results, and a product module that imports a study, are named."""
    leaf = tmp_path / "stats"
    leaf.mkdir()
    (leaf / "ok.py").write_text("import math\nimport numpy as np\nfrom scipy.stats import chi2\nfrom .pit import x\n")
    (leaf / "bad.py").write_text("def f():\n    from ..results.run_summary import Verdict\n")
    assert [p.split(": ")[1] for p in leaf_problems(leaf)] == ["..results.run_summary"]
    product = tmp_path / "evals"
    product.mkdir()
    (product / "gate.py").write_text("def g():\n    from ..studies.lossless_sampled import main\n")
    assert studies_importers(tmp_path, ("evals",)) == ["evals/gate.py"]
