"""The strict docs build fails on what it exists to catch. Every bug is planted at once, each on its own page of a
scratch copy of docs/, and the copy is built once: each must be named by its own warning (any warning fails a
strict build). The clean build is `make docs`, which `make test` runs before the tests."""

from __future__ import annotations

import pytest

from .helpers import scratch_site, strict_build

pytestmark = pytest.mark.slow  # imports the CLI and renders every page (~15 s on an idle 2-core CPU)


def _plant(page, old: str, new: str) -> None:
    text = page.read_text()
    assert old in text, f"{page.name} no longer holds {old!r}: move the plant"
    page.write_text(text.replace(old, new, 1))


def test_every_planted_bug_fails_the_strict_build(tmp_path, caplog):
    config, docs = scratch_site(tmp_path)
    guides, reference = docs / "guides", docs / "reference" / "cli"
    expected = {
        "broken link": "'no-such-page.md'",
        "stale option": "'specdec-eval report' has no option --markdwn",
        "unknown command": "'specdec-eval runz': no such command",
        "moved module": "`evals/gates/no_such_gate.py` is not in the repository",
        "gone module": "`no_such_gate.py` is no file in the repository",
        "unmarked example": "without '<!-- example: ci -->'",
        "stale reference": "waives.md differs from `--help`",
        "page missing from the nav": "orphan.md",
    }
    _plant(guides / "waive.md", "# Waive a known failure\n", "# Waive a known failure\n\nSee [it](no-such-page.md).\n")
    _plant(guides / "report.md", "--markdown comment.md", "--markdwn comment.md")
    _plant(docs / "getting-started.md", "specdec-eval runs\n", "specdec-eval runz\n")
    _plant(
        docs / "architecture.md", "## Seams\n", "## Seams\n\nGates: `evals/gates/no_such_gate.py`, `no_such_gate.py`.\n"
    )
    _plant(docs / "development.md", "## Tests\n", "## Tests\n\n```bash\nspecdec-eval runs\n```\n")
    _plant(reference / "waives.md", "--json", "--jsonl")
    (guides / "orphan.md").write_text("# Not in the nav\n")

    warnings = strict_build(config, caplog)
    missed = {name: text for name, text in expected.items() if not any(text in w for w in warnings)}
    assert not missed, f"not caught: {missed}\nwarnings: {warnings}"
