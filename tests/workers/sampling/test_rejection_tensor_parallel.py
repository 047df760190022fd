"""Rejection sampling under TP=2 over gloo (two processes, tiny preset): rank 0 draws from its streams, decides and
broadcasts (the accept decisions, and for rejection-q each draft drawn from q before the sharded head runs on it), so
every rank emits the tokens one process does with the same seeds."""

from __future__ import annotations

import json
import os

import pytest
import torch.multiprocessing as mp
from specdec_eval.workers.config import SamplingParams, SpecConfig

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS
from ..model.test_tensor_parallel import _free_port

SAMPLINGS = ("rejection", "rejection-q")


def _params() -> list[SamplingParams]:
    return [
        SamplingParams(max_new_tokens=24, temperature=1.0, ignore_eos=True, seed=100 + i)
        for i in range(len(RAW_PROMPTS))
    ]


def _generate(shared, sampling: str, tp=None) -> list[list[int]]:
    engine = make_engine(shared, "v2", tp=tp, spec=SpecConfig(max_draft_len=3, sampling=sampling))
    return [o.token_ids for o in engine.generate([engine.encode(p) for p in RAW_PROMPTS], _params())]


def _rank_main(rank: int, world: int, port: int, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from specdec_eval.launch.dist import RankEnv, world_session
    from specdec_eval.launch.layout import Layout
    from specdec_eval.workers.loading.checkpoint import load_checkpoint

    ckpt = load_checkpoint("tiny")
    with world_session(RankEnv(rank, world, rank), "cpu", Layout(world, world), timeout_s=120) as w:
        for sampling in SAMPLINGS:
            tokens = _generate((ckpt, ckpt.load_tokenizer()), sampling, tp=w.tp)
            with open(f"{out_path}.{sampling}.{rank}", "w") as f:
                json.dump(tokens, f)


@pytest.mark.slow
def test_rejection_sampling_under_tp2_equals_one_process(tiny, tmp_path):
    out = str(tmp_path / "tokens")
    mp.start_processes(_rank_main, args=(2, _free_port(), out), nprocs=2, join=True, start_method="spawn")
    for sampling in SAMPLINGS:
        expected = _generate(tiny, sampling)
        for rank in range(2):
            with open(f"{out}.{sampling}.{rank}") as f:
                assert json.load(f) == expected, f"{sampling}: rank {rank} differs from one process"
