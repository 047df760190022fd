"""The docs scripts (scripts/docs/) as modules, and a strict MkDocs build of a scratch copy of docs/."""

from __future__ import annotations

import importlib
import logging
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "docs"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))


def module(name: str):
    return importlib.import_module(name)


def scratch_site(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of docs/ under tmp_path and a mkdocs.yml that builds it with the project's own hooks: (config, docs)."""
    import yaml

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), site_dir=str(tmp_path / "site"), hooks=[str(SCRIPTS / "hooks.py")])
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path, docs


def strict_build(config: Path, caplog) -> list[str]:
    """Build strictly in process; the warnings it logged (empty: the build passed). Fails the test if the build
    passed while warning, or aborted without a warning."""
    pytest.importorskip("mkdocs", reason="the docs extra: make docs installs it")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        try:
            build(load_config(str(config), strict=True))
            aborted = False
        except Abort:
            aborted = True
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert aborted == bool(warnings), (aborted, warnings)
    return warnings
