"""TP=2 over gloo (two processes, tiny preset) gives the same tokens as TP=1."""

from __future__ import annotations

import json
import os
import socket

import pytest
import torch.multiprocessing as mp
from specdec_eval.workers.config import SamplingParams, SpecConfig

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# (KV version, draft length 0 = plain decoding): every pair runs in one job, each on a fresh engine over the same
# process group (a job per pair spawned and joined two processes four times, ~40 s of CI).
CONFIGS = [("v1", 0), ("v2", 0), ("v1", 3), ("v2", 2)]


def _rank_main(rank: int, world: int, port: int, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from specdec_eval.launch.dist import RankEnv, world_session
    from specdec_eval.launch.layout import Layout

    with world_session(RankEnv(rank, world, rank), "cpu", Layout(world, world), timeout_s=120) as w:
        for kv, draft_len in CONFIGS:
            _generate_on_rank(w.tp, rank, world, f"{out_path}.{kv}-{draft_len}", kv, draft_len)


def _generate_on_rank(tp, rank: int, world: int, out_path: str, kv: str, draft_len: int) -> None:
    from specdec_eval.workers.loading.checkpoint import load_checkpoint

    ckpt = load_checkpoint("tiny")
    spec = SpecConfig(max_draft_len=draft_len) if draft_len else None
    engine = make_engine((ckpt, ckpt.load_tokenizer()), kv, tp=tp, spec=spec)
    attn = engine.model.model.layers[0].self_attn
    assert (attn.num_heads, attn.num_kv_heads) == (4 // world, 2 // world)  # really sharded
    prompts = [engine.encode(p) for p in RAW_PROMPTS]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24, ignore_eos=True))
    with open(f"{out_path}.{rank}", "w") as f:
        json.dump([o.token_ids for o in outs], f)


@pytest.fixture(scope="module")
def tp2_tokens(tmp_path_factory) -> str:
    """Every CONFIGS pair generated under TP=2; returns the output files' prefix."""
    out = str(tmp_path_factory.mktemp("tp2") / "tokens")
    mp.start_processes(_rank_main, args=(2, _free_port(), out), nprocs=2, join=True, start_method="spawn")
    return out


@pytest.fixture(scope="module")
def tp1_tokens(tiny) -> list[list[int]]:
    """TP=1 plain decoding, what every pair must equal."""
    engine = make_engine(tiny)
    prompts = [engine.encode(p) for p in RAW_PROMPTS]
    return [o.token_ids for o in engine.generate(prompts, SamplingParams(max_new_tokens=24, ignore_eos=True))]


@pytest.mark.slow
@pytest.mark.parametrize("kv, draft_len", CONFIGS)
def test_tp2_equals_tp1(tp1_tokens, tp2_tokens, kv, draft_len):
    """Plain decoding, and Eagle3 (accept decisions made on rank 0 and broadcast), both equal TP=1 plain."""
    expected = tp1_tokens
    for rank in range(2):
        with open(f"{tp2_tokens}.{kv}-{draft_len}.{rank}") as f:
            assert json.load(f) == expected, f"rank {rank} differs from TP=1"


@pytest.mark.slow
def test_generate_under_torchrun_tp2_merges_events(tmp_path):
    """The README's tensor-parallel command: same tokens as one process, per-rank event files merged by rank 0."""
    import subprocess
    import sys

    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\nworld\n")
    events = tmp_path / "events.jsonl"
    common = ["generate", str(prompts), "--model", "tiny", "-n", "6", "--spec", "eagle3", "--inject", "draft_step:1@2"]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(_free_port()),
        "-m",
        "specdec_eval.cli.main",
        *common,
        "--tp",
        "2",
        "--events",
        str(events),
    ]
    tp2 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert tp2.returncode == 0, tp2.stderr[-2000:]
    one = subprocess.run([sys.executable, "-m", "specdec_eval.cli.main", *common], capture_output=True, text=True)
    tokens = [[json.loads(line)["token_ids"] for line in p.stdout.splitlines()] for p in (tp2, one)]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 2
    merged = [json.loads(line) for line in events.read_text().splitlines()]
    assert sorted({e["rank"] for e in merged}) == [0, 1]
    assert sum(e["type"] == "fault_injected" for e in merged) == 2  # the fault fired on both ranks, same step
