"""tests/parallel.py on a scratch suite run by two pytest-xdist workers: a file's tests run on one worker (so its
module-scoped fixture is built once), the slow ones are handed out first, and every worker runs one torch thread;
and a new file using a session's servers is refused until it joins their unit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from .parallel import check_server_files, unit_of

REPO = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
import pytest
from tests.parallel import WORKER, make_scheduler, one_thread_per_worker, order

def pytest_configure(config):
    one_thread_per_worker()

def pytest_collection_modifyitems(items):
    order(items, parallel=WORKER is not None)

@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log)

@pytest.fixture(scope="module")
def model():
    return os.getpid()  # built once per module per worker

@pytest.fixture
def record(request):
    def write(**extra):
        time.sleep(0.3)  # long enough that both workers take work
        worker = os.environ["PYTEST_XDIST_WORKER"]
        Path(os.environ["PARALLEL_OUT"], request.node.name).write_text(json.dumps({{"worker": worker, **extra}}))
    return write
"""

SHARED = """
import pytest

@pytest.mark.parametrize("i", range(6))
def test_shared(model, record, i):
    record(pid=model)
"""

ALONE = """
import os
import pytest

@pytest.mark.parametrize("i", range(6))
def test_alone(record, i):
    record(threads=os.environ.get("OMP_NUM_THREADS"))
"""

SLOW = """
import pytest

@pytest.mark.slow
def test_slow(record):
    record()
"""


def test_a_file_runs_on_one_worker_the_slow_one_first_and_workers_run_one_thread(tmp_path):
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for name, text in {"test_a_alone.py": ALONE, "test_b_shared.py": SHARED, "test_z_slow.py": SLOW}.items():
        (suite / name).write_text(textwrap.dedent(text))
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"]
    cmd += ["--no-loadscope-reorder", "-v", str(suite)]
    env = {**os.environ, "PARALLEL_OUT": str(out), "OMP_NUM_THREADS": "7"}
    p = subprocess.run(cmd, cwd=suite, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = {f.name: json.loads(f.read_text()) for f in out.iterdir()}
    shared = [seen[f"test_shared[{i}]"] for i in range(6)]
    assert len({s["worker"] for s in shared}) == 1 and len({s["pid"] for s in shared}) == 1, shared
    assert {s["worker"] for s in seen.values()} == {"gw0", "gw1"}, seen
    assert {seen[f"test_alone[{i}]"]["threads"] for i in range(6)} == {"1"}  # not the 7 it was given
    passed = [line for line in p.stdout.splitlines() if "PASSED" in line]
    assert any("test_slow" in line for line in passed[:3]), passed  # handed out first, though collected last


def test_a_file_using_a_session_server_must_join_its_unit():
    assert unit_of("tests/evals/pipeline/test_vllm_peer.py::t[x]") == unit_of(
        "tests/evals/selftest/test_vllm_mutants.py::t"
    )
    assert unit_of("tests/cli/test_probe.py::t") == "tests/cli/test_probe.py"
    known = SimpleNamespace(nodeid="tests/evals/pipeline/test_vllm_peer.py::t", fixturenames=["vllm_servers"])
    check_server_files([known])
    new = SimpleNamespace(nodeid="tests/evals/test_new.py::t", fixturenames=["tmp_path", "vllm_servers"])
    with pytest.raises(pytest.UsageError, match="tests/evals/test_new.py uses vllm_servers: add it to SERVER_FILES"):
        check_server_files([known, new])
