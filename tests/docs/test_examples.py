"""Every example the docs mark `<!-- example: ci -->` runs, page by page in a scratch folder, and exits as its
marker says (0 unless `ci exit N`). The others are marked with what they need (a GPU, a server, the real model for
minutes); scripts/docs/examples.py lists both and refreshes the output shown under them."""

from __future__ import annotations

import pytest

from .helpers import REPO, module

examples = module("examples")

PAGES = [p for p in examples.pages() if any(e.in_ci for e in examples.examples(p))]


def test_the_readme_runs_no_ci_example():
    """The README's commands are written for the repository root: a test running them would write into it."""
    assert not any(e.in_ci for e in examples.examples(REPO / "README.md"))


@pytest.mark.slow  # the tiny model, a few runs per page
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_ci_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.setattr(examples.tempfile, "mkdtemp", lambda prefix="": str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    cwd = examples.scratch()
    for example in (e for e in examples.examples(page) if e.in_ci):
        done = examples.run_in(example, cwd, timeout=600)
        assert done.returncode == example.expected_status, (
            f"{page.relative_to(REPO)}: exit {done.returncode}, expected {example.expected_status}\n"
            f"{example.body}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )
