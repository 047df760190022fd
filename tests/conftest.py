"""Shared fixtures: checkpoints and tokenizers are loaded once per session and shared between engines."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
from specdec_eval.workers.config import EngineConfig, KVCacheConfig
from specdec_eval.workers.engine.engine import Engine
from specdec_eval.workers.loading.checkpoint import load_checkpoint

from .budget import Budget
from .parallel import WORKER, make_scheduler, one_thread_per_worker, order

# One definition of the session's vLLM servers for every test module (a fixture imported into two modules would be two
# session fixtures, each starting its own servers).
from .vllm_server import vllm_matrix_servers, vllm_servers  # noqa: F401

# CPU budgets: plenty for the tests, cheap to allocate (the KV pool takes most of what weights leave).
TEST_MEMORY = {"preset:tiny": 256 * 2**20}
DEFAULT_TEST_MEMORY = 1 * 2**30  # SmolLM2: 0.6 GiB of fp32 weights, ~0.25 GiB of KV


def pytest_configure(config):
    one_thread_per_worker()
    if not hasattr(config, "workerinput"):  # serial, or xdist's controller (the workers' reports reach it)
        config.pluginmanager.register(Budget(), "specdec-time-budget")


def pytest_collection_modifyitems(items):
    """The order of the tests (tests/parallel.py)."""
    order(items, parallel=WORKER is not None)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # optional: pytest-xdist may be missing; first: before xdist's
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: test files as units of work, the files sharing a session's servers as one unit."""
    return make_scheduler(config, log)


@pytest.fixture(autouse=True)
def _collect_engines():
    """An engine and its executor reference each other; collect them after every test, so that the KV pools
    and weights of finished tests do not pile up until the cyclic GC happens to run."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def tiny():
    ckpt = load_checkpoint("tiny")
    return ckpt, ckpt.load_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    ckpt = load_checkpoint("smollm2")
    return ckpt, ckpt.load_tokenizer()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2) -> Engine:
    """One plain SmolLM2 engine (KV v1) for the tests that need only plain greedy outputs or encodings, built once
    per session (seconds and ~1 GiB each time). Prefix reuse is off, so no test's prefill depends on what another
    test generated before it."""
    return make_engine(smollm2, kv_enable_block_reuse=False)


def make_engine(shared, kv: str = "v1", tp=None, **overrides) -> Engine:
    """An engine over a shared (checkpoint, tokenizer) pair; `kv_*` overrides go to KVCacheConfig."""
    ckpt, tokenizer = shared
    if tp is not None:
        overrides["tp_size"] = tp.size
    kv_fields = {k.removeprefix("kv_"): overrides.pop(k) for k in list(overrides) if k.startswith("kv_")}
    config = EngineConfig(
        model=ckpt.source,
        device="cpu",
        device_memory=overrides.pop("device_memory", TEST_MEMORY.get(ckpt.source, DEFAULT_TEST_MEMORY)),
        kv_cache=KVCacheConfig(version=kv, **kv_fields),
        **overrides,
    )
    return Engine.build(config, tp, checkpoint=ckpt, tokenizer=tokenizer)


@pytest.fixture(autouse=True)
def _nothing_written_into_the_working_directory():
    """Tests write under tmp_path only: a `runs/` left in the working directory is picked up by the next run's
    resume-by-default. Fails the test that created anything there."""
    cwd = Path.cwd()
    before = set(os.listdir(cwd))
    yield
    created = sorted(set(os.listdir(cwd)) - before - IGNORED_IN_CWD)
    assert not created, f"the test wrote {created} into the working directory {cwd}; use tmp_path"


IGNORED_IN_CWD = {".pytest_cache", "__pycache__", ".ruff_cache"}
