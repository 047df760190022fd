"""The project's own plumbing: pinned dependency ranges hold what the tests run on, `.ci/run` reports
its wall time also when the tests fail, and the manifest's git probe prints nothing outside a checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


def test_every_dependency_is_bounded_and_holds_the_installed_version():
    from packaging.requirements import Requirement

    for text in _requirements():
        req = Requirement(text)
        assert any(s.operator in ("<", "==", "~=") for s in req.specifier), f"{text}: no upper bound"
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            continue  # not installed here (the tests do not need it)
        assert req.specifier.contains(installed, prereleases=True), f"{text} excludes the installed {installed}"


def test_ci_run_reports_its_wall_time_on_failure_too(tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    for recipe, status, word in (("false", 2, "FAILED"), ("true", 0, "passed")):
        (tmp_path / "Makefile").write_text(f"setup-tests:\n\t@true\ntest:\n\t@{recipe}\n")
        p = subprocess.run([bash, str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60)
        assert p.returncode == status
        assert ".ci/run: setup (main job and tests) took 0m" in p.stdout
        last = p.stdout.strip().splitlines()[-1]
        assert last.startswith(f".ci/run: {word} in 0m") and "s wall" in last and f"exit status {status}" in last


def test_make_test_prints_the_slowest_tests():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    pytest_command = makefile.split("\nPYTEST :=", 1)[1].split("\n", 1)[0]
    recipe = recipe.replace("$(PYTEST)", pytest_command)  # the one pytest command both test targets run
    assert "pytest" in recipe and "--durations=25" in recipe and "-n $(TEST_WORKERS)" in recipe


def test_git_state_outside_a_checkout_prints_nothing(tmp_path, capfd):
    from specdec_eval.results.manifest import git_state

    assert git_state(tmp_path) == {"commit": None, "dirty": None, "diff_sha256": None}
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_make_run_sets_up_only_the_main_job_and_make_test_the_tests_too(tmp_path):
    """A first `make run` does not compile llama.cpp or install Chromium (the tests' peer and screenshot
    browser); `make test`, so CI, does. Read from make's own plan (-n) in a copy without a venv."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    for name in (
        "Makefile",
        "pyproject.toml",
        "scripts/setup.sh",
        "scripts/llama-cpp-lean.cmake",
        "scripts/check_llama_peer.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)

    def plan(target: str) -> list[str]:
        p = subprocess.run([make, "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return [line for line in p.stdout.splitlines() if "scripts/setup.sh" in line]

    assert plan("run") == ["bash scripts/setup.sh"]
    assert plan("test") == ["bash scripts/setup.sh", "bash scripts/setup.sh --for-tests"]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    main_part = setup.split("main_job_setup() {", 1)[1].split("\n}\n", 1)[0]
    assert "[peer]" not in main_part and "chromium" not in main_part and "[dev]" not in main_part
    tests_part = setup.split("test_setup() {", 1)[1].split("\n}\n", 1)[0]
    assert '".[peer]"' in tests_part and "apt-get install" in tests_part and "llama-cpp-lean.cmake" in tests_part
    # a portable build (a native one compiled ggml's AMX kernels: SIGILL on the Xeon), never a cached wheel
    assert "-DGGML_NATIVE=OFF" in tests_part and "--no-cache-dir" in tests_part
    assert "scripts/check_llama_peer.py" in tests_part


def test_setup_stops_in_one_line_when_the_llama_peer_crashes(tmp_path):
    """The peer loads but dies on its first completion (the 2026-12-05 native build: a signal in llama_decode): setup
    stops there with one line naming the signal and what to do, instead of leaving it to the endpoint tests. A fake
    venv whose python imports everything and dies by SIGSEGV when asked for the completion."""
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text('#!/bin/bash\n[ "$1" = scripts/check_llama_peer.py ] && kill -SEGV $$\nexit 0\n')
    (bin_dir / "pip").write_text("#!/bin/bash\nexit 0\n")
    for tool in ("python", "pip"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "VENV": str(tmp_path / "venv"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    p = subprocess.run(
        ["bash", "scripts/setup.sh", "--for-tests"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 1
    errors = [line for line in p.stderr.splitlines() if line.startswith("setup: error:")]
    assert len(errors) == 1 and "first completion" in errors[0] and "SIGSEGV" in errors[0], p.stderr
    assert "make setup-tests" in errors[0]


def test_every_package_folder_is_installed():
    """pyproject lists its packages (one namespace over the top-level folders): a sub-package left out of the list
    imports from a checkout and is missing from a `pip install .` (evals/conditions/ was)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {"cli", "launch", "workers", "evals", "results", "serve", "specdec_eval", "stats", "studies"}
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        parts = init.parent.relative_to(ROOT).parts
        if parts[0] in folders:
            found.add(".".join(["specdec_eval"] + ([] if parts[0] == "specdec_eval" else list(parts))))
    assert found - listed == set(), f"packages not in pyproject's list: {sorted(found - listed)}"
    for name in listed - {"specdec_eval"}:  # each maps onto its folder
        assert (ROOT / setuptools["package-dir"][name]).is_dir(), name
