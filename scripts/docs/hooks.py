"""MkDocs hooks (mkdocs.yml `hooks:`): the project's own checks, logged as warnings so `mkdocs build --strict`
(`make docs`) fails on any of them while `mkdocs serve` (`make docs-serve`) still shows the page.

MkDocs itself already warns on a broken link or anchor and on a page missing from the navigation
(mkdocs.yml `validation:`); these add what it cannot know: the CLI's real options, the repository's paths, the
command reference's freshness, where each example runs, and product text citing files outside the repository.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checks  # noqa: E402
import cli_reference  # noqa: E402

log = logging.getLogger("mkdocs.plugins.specdec_docs")


def on_pre_build(config) -> None:
    """Once per build: the command reference against `--help`, citations in the product's text, the README."""
    reference = Path(config["docs_dir"]) / "reference" / "cli"
    for problem in cli_reference.stale(cli_reference.render(), reference):
        log.warning("command reference: %s", problem)
    for problem in checks.citation_problems():
        log.warning("citation: %s", problem)
    for problem in checks.readme_problems():
        log.warning("README.md: %s", problem)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Each page: its `specdec-eval` lines against the CLI, its repository paths, its example markers."""
    where = page.file.src_uri
    if where.startswith("reference/cli/"):
        return markdown  # `--help` itself
    for problem in checks.command_problems(markdown):
        log.warning("%s: %s", where, problem)
    for problem in checks.path_problems(markdown) + checks.module_problems(markdown) + checks.import_problems(markdown):
        log.warning("%s: %s", where, problem)
    for problem in checks.example_marker_problems(markdown):
        log.warning("%s: %s", where, problem)
    return markdown
