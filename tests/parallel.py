"""How the suite runs on two pytest-xdist workers (`make test`: `-n 2 --dist loadgroup --no-loadscope-reorder`) as
well as it runs alone (`-n 0`, or plain `pytest`).

- Threads: each worker runs one torch/OpenMP thread, so that two workers on two cores do not oversubscribe them
  (the variables also reach the subprocesses the tests start: CLI runs, llama.cpp). Serially nothing changes.
- Groups: tests that share something expensive built once per process (the session's vLLM servers, the llama.cpp
  pair, a module-scoped model, engine or server) run on one worker, so it is built once and the GiBs it holds are
  held once. Under xdist a session fixture is per worker: without a group, both workers would start their own.
- Order: the vLLM stretch first, then the other slow and grouped work, then the many fast tests, so that the
  workers' last minutes are short tests and neither waits long for the other. Serially the vLLM stretch stays last
  (each server starts once and its GiBs are held only for that stretch; the bug-class matrix last of all, as its
  last class kills the speculating server)."""

from __future__ import annotations

import os

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... in a worker; None when serial or the controller
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

# Session fixtures that start servers: every test using one runs on the worker holding them.
SERVER_GROUPS = {"vllm_servers": "vllm", "llama_pair": "llama-pair"}


def one_thread_per_worker() -> None:
    """In an xdist worker: one torch thread, and one for the subprocesses the tests start."""
    if WORKER is None:
        return
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    import torch

    torch.set_num_threads(1)


def group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test: a server fixture's group, else its module when a module-scoped fixture is used."""
    names = item.fixturenames
    for fixture, group in SERVER_GROUPS.items():
        if fixture in names:
            return group
    defs = getattr(item, "_fixtureinfo", None)
    for name in names:
        for fixturedef in defs.name2fixturedefs.get(name, ()) if defs else ():
            if fixturedef.scope == "module":
                return item.module.__name__ if hasattr(item, "module") else None
    return None


def vllm_stretch(item: pytest.Item) -> int:
    names = getattr(item, "fixturenames", ())
    return 2 if "vllm_matrix_servers" in names else 1 if "vllm_servers" in names else 0


def order_and_group(items: list[pytest.Item], parallel: bool) -> None:
    """Sort the collection in place (stable) and, when parallel, mark each test's xdist group."""
    if not parallel:
        items.sort(key=vllm_stretch)
        return
    groups = {}
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        groups[item.nodeid] = group

    def rank(item: pytest.Item) -> tuple[int, int]:
        stretch = vllm_stretch(item)
        if stretch:
            return (0, stretch)  # the vLLM group first, its matrix last within it
        slow = item.get_closest_marker("slow") is not None or groups[item.nodeid] is not None
        return (1 if slow else 2, 0)

    items.sort(key=rank)
