"""How the suite runs on two pytest-xdist workers (`make test`: `-n 2 --dist loadgroup --no-loadscope-reorder`) as
well as it runs alone (`-n 0`, or plain `pytest`).

- Threads: each worker runs one torch/OpenMP thread, so that two workers on two cores do not oversubscribe them
  (the variables also reach the subprocesses the tests start: CLI runs, servers). Serially nothing changes.
- Groups (FileGroupScheduling, chosen by `--dist loadgroup`): a test file is one unit of work, run on one worker, so
  a module-scoped model, engine or server is built once; the files sharing a session's servers (SERVER_FILES: the
  vLLM servers, the llama.cpp pair) are one unit together, so the servers start once and their GiBs are held once.
  Under xdist a session fixture is per worker: split over both, each would start its own. (xdist's own
  `xdist_group` marker does not work with pytest 9: it renames `item._nodeid`, which pytest 9 no longer reads.)
- Order: the vLLM stretch first, then the files with slow tests, then the rest, the multi-rank torchrun files
  last (RANK_FILES: never beside the vLLM servers' GiBs), so that the workers' last minutes
  are short tests and neither waits long for the other. Serially the vLLM stretch stays last (each server starts
  once and its GiBs are held only for that stretch); in both, the bug-class matrix runs last of its stretch, as its
  last class kills the speculating server."""

from __future__ import annotations

import os

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... in a worker; None when serial or the controller
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

# The session fixtures that start servers, and the files whose tests use them (one unit of work per fixture).
SERVER_FIXTURES = {"vllm_servers": "vllm", "llama_pair": "llama-pair"}
# Files whose tests start torchrun jobs of several CPU ranks (GiBs each): under xdist they run last, after the vLLM
# stretch has stopped its servers, so the two never hold memory at once (together they met the OOM killer on 24 GiB).
RANK_FILES = (
    "tests/launch/test_launch.py",
    "tests/workers/model/test_tensor_parallel.py",
    "tests/evals/pipeline/test_run_on_every_backend.py",
    "tests/serve/test_serve_sharded.py",
)
SERVER_FILES = {
    "tests/evals/pipeline/test_vllm_peer.py": "vllm",
    "tests/evals/selftest/test_vllm_mutants.py": "vllm",
    "tests/evals/pipeline/test_llama_peer.py": "llama-pair",
}


def one_thread_per_worker() -> None:
    """In an xdist worker: one torch thread, and one for the subprocesses the tests start."""
    if WORKER is None:
        return
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    import torch

    torch.set_num_threads(1)


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the server group its file shares."""
    path = nodeid.split("::", 1)[0]
    return SERVER_FILES.get(path, path)


def make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup`: the scheduler below; other `--dist` modes are xdist's own (None)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        """xdist's load-by-scope scheduling, with unit_of as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return FileGroupScheduling(config, log)


def vllm_stretch(item: pytest.Item) -> int:
    names = getattr(item, "fixturenames", ())
    return 2 if "vllm_matrix_servers" in names else 1 if "vllm_servers" in names else 0


def check_server_files(items: list[pytest.Item]) -> None:
    """A test that uses a server fixture must be in that fixture's unit, or a second worker starts its servers."""
    for item in items:
        for fixture, group in SERVER_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and unit_of(item.nodeid) != group:
                path = item.nodeid.split("::", 1)[0]
                raise pytest.UsageError(f"{path} uses {fixture}: add it to SERVER_FILES in tests/parallel.py")


def order(items: list[pytest.Item], parallel: bool) -> None:
    """Sort the collection in place (stable); under xdist, check the server files first."""
    if not parallel:
        items.sort(key=vllm_stretch)
        return
    check_server_files(items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        stretch = vllm_stretch(item)
        if stretch:
            return (0, stretch)  # the vLLM stretch first, its matrix last within it
        if item.nodeid.split("::", 1)[0] in RANK_FILES:
            return (3, 0)  # the multi-rank jobs last: never beside the vLLM servers
        return (1 if item.get_closest_marker("slow") is not None else 2, 0)

    items.sort(key=rank)
