"""scripts/probe.py: every hostile input of its list ends cleanly. It starts a process per case, so it is
slow: the whole list forked from one interpreter, and a few cases as real `python -m specdec_eval.cli.main`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "scripts" / "probe.py"


def _probe(*args: str, timeout: float) -> tuple[subprocess.CompletedProcess, int, int]:
    p = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=timeout)
    m = re.search(r"^(\d+)/(\d+) clean", p.stdout, re.MULTILINE)
    assert m, p.stdout[-3000:] + p.stderr[-3000:]
    return p, int(m[1]), int(m[2])


@pytest.mark.slow
def test_every_probe_case_is_clean():
    p, clean, total = _probe("--fork", timeout=900)
    dirty = [line for line in p.stdout.splitlines() if line.startswith("DIRTY")]
    assert p.returncode == 0 and clean == total and not dirty, "\n".join(dirty) or p.stdout[-3000:]
    assert total >= 40
    assert sum(line.startswith("clean ") for line in p.stdout.splitlines()) == total  # one line per case


@pytest.mark.slow
def test_probe_cases_as_real_processes():
    """The console entry itself (`python -m`), not only main() in a fork, on a usage error and on a broken file."""
    p, clean, total = _probe("-k", "run-limit-not-a-number", timeout=300)
    assert p.returncode == 0 and (clean, total) == (1, 1), p.stdout
    p, clean, total = _probe("-k", "gsm8k-wrong-columns", timeout=300)
    assert p.returncode == 0 and (clean, total) == (1, 1), p.stdout


def test_the_probe_is_not_fooled(tmp_path):
    """A case whose command writes into its folder, or ends differently than expected, is reported DIRTY."""
    sys.path.insert(0, str(PROBE.parent))
    try:
        import probe
    finally:
        sys.path.pop(0)
    probe.os.environ.update(probe.ENV)
    cases = [
        probe.Case("writes", ["waive", "a/t.py::t", "--bug", "b", "-f", "w.txt"], expect=0, prefix=""),
        probe.Case("wrong-status", ["--help"], message="x"),
    ]
    seen = []
    outcomes, changed = probe.run_cli_group(cases, tmp_path, 2, 120, True, seen.append)
    assert [o.case.name for o in outcomes] == ["writes", "wrong-status"] and len(seen) == 2
    assert outcomes[0].problems == ["left behind: .w.txt.lock, w.txt"], outcomes[0].problems
    assert any("exit 0, expected 2" in p for p in outcomes[1].problems), outcomes[1].problems
    assert changed == []
