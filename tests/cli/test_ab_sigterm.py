"""SIGTERM to `ab`: the signal is passed on to the running side, which is waited for (it must not keep writing),
both worktrees are unregistered and removed with the temporary installs, and `ab` exits 143.

The repository is a one-commit package that installs in a second, so that the test reaches a running side fast
(each side then runs this checkout's specdec-eval, which is on the path anyway)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
[project]
name = "ab-sigterm-probe"
version = "0"
[tool.setuptools]
py-modules = ["ab_sigterm_probe"]
"""
RUN_ARGS = [
    "--model",
    "tiny",
    "--tasks",
    "gsm8k_smoke",
    "--no-reference",
    "--limit",
    "4",
    "--max-output-len",
    "64",
    "--device-memory",
    "256MiB",
]


def _repo(path: Path) -> Path:
    path.mkdir()
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "ab_sigterm_probe.py").write_text("X = 1\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return path


def _sides_writing_to(out: Path) -> list[int]:
    """Processes running `specdec-eval run ... --out OUT` (a side; ab's own command line has no `run`)."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(out).encode() in cmdline and b"\0run\0" in cmdline:
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_sigterm_stops_the_side_and_cleans_up(tmp_path):
    repo, tmp, out = _repo(tmp_path / "repo"), tmp_path / "tmp", tmp_path / "runs"
    tmp.mkdir()
    err_path = tmp_path / "ab.err"
    cmd = [
        sys.executable,
        "-m",
        "specdec_eval.cli.main",
        "ab",
        "HEAD",
        "HEAD",
        "--repo",
        str(repo),
        "--out",
        str(out),
        "--",
        *RUN_ARGS,
    ]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 300  # a loaded machine installs slowly
        while b"side A:" not in err_path.read_bytes():  # both sides checked out and installed; A is starting
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        side = _sides_writing_to(out)
        assert side, "side A is not running"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err_path.read_text().strip().splitlines()
    assert code == 143 and lines[-1].startswith("specdec-eval: ab terminated by SIGTERM: the running side was stopped")
    assert _sides_writing_to(out) == []  # no side outlives ab
    worktrees = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1, worktrees
    assert list(tmp.iterdir()) == []  # the installs and the sides' temporary files are gone
