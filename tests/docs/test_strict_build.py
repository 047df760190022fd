"""The strict docs build fails on what it exists to catch (each planted in a scratch copy of docs/), and passes
on the docs as they are."""

from __future__ import annotations

import pytest

from .helpers import scratch_site, strict_build

pytestmark = pytest.mark.slow  # imports the CLI and renders every page (~15 s)


def test_the_docs_build_strictly_and_plants_fail_it(tmp_path, caplog):
    """One scratch copy, built clean, then with each planted bug alone: a broken link, an option the command does
    not have, a page missing from the navigation, a stale command reference, a module path that moved."""
    config, docs = scratch_site(tmp_path)
    assert strict_build(config, caplog) == []

    guide = docs / "guides" / "waive.md"
    clean = guide.read_text()
    plants = {
        "broken link": (guide, clean + "\nSee [the old page](no-such-page.md).\n", "no-such-page.md"),
        "stale option": (
            guide,
            clean.replace("specdec-eval waives\n", "specdec-eval waives --no-such-flag\n", 1),
            "'specdec-eval waives' has no option --no-such-flag",
        ),
        "unknown command": (
            guide,
            clean.replace("specdec-eval waives\n", "specdec-eval waivez\n", 1),
            "'specdec-eval waivez': no such command",
        ),
        "moved module": (
            docs / "architecture.md",
            (docs / "architecture.md").read_text() + "\nThe gate lives in `evals/gates/no_such_gate.py`.\n",
            "`evals/gates/no_such_gate.py` is not in the repository",
        ),
        "unmarked example": (
            guide,
            clean + "\n```bash\nspecdec-eval waives\n```\n",
            "without '<!-- example: ci -->'",
        ),
        "stale reference": (
            docs / "reference" / "cli" / "waives.md",
            (docs / "reference" / "cli" / "waives.md").read_text().replace("--json", "--jsonl"),
            "waives.md differs from `--help`",
        ),
    }
    for name, (page, planted, expected) in plants.items():
        original = page.read_text()
        page.write_text(planted)
        try:
            warnings = strict_build(config, caplog)
        finally:
            page.write_text(original)
        assert any(expected in w for w in warnings), f"{name}: {warnings}"

    orphan = docs / "guides" / "orphan.md"
    orphan.write_text("# Not in the nav\n")
    warnings = strict_build(config, caplog)
    orphan.unlink()
    assert any("orphan.md" in w and "nav" in w for w in warnings), warnings
