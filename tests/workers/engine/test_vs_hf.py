"""Greedy non-speculative output equals Hugging Face transformers `generate` token for token (fp32), at batch
size 1 and with all prompts batched, under KV cache v1 and v2."""

from __future__ import annotations

import pytest
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.loading.hf_reference import build_hf_model, hf_greedy

from ...conftest import make_engine
from ...prompts import encoded_prompts

NEW_TOKENS = 48
GREEDY = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)


def _reference(shared, prompts):
    hf = build_hf_model(shared[0])
    return [hf_greedy(hf, [p], NEW_TOKENS)[0] for p in prompts]  # batch 1: no padding on the reference side


def _check(shared, kv: str, reference, prompts, batched: bool, engine=None) -> None:
    engine = engine or make_engine(shared, kv)
    if batched:
        outs = engine.generate(prompts, GREEDY)
        assert engine.last_stats.num_steps == NEW_TOKENS  # really all in one batch
    else:
        outs = [engine.generate([p], GREEDY)[0] for p in prompts]
    for i, (out, ref) in enumerate(zip(outs, reference, strict=True)):
        assert out.token_ids == ref, f"prompt {i} diverges at token {_first_diff(out.token_ids, ref)}"


def _first_diff(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@pytest.fixture(scope="module")
def tiny_case(tiny):
    prompts = encoded_prompts(make_engine(tiny))
    return prompts, _reference(tiny, prompts)


@pytest.mark.parametrize("kv", ["v1", "v2"])
@pytest.mark.parametrize("batched", [False, True], ids=["batch1", "batched"])
def test_tiny_matches_hf(tiny, tiny_case, kv, batched):
    prompts, reference = tiny_case
    assert len(prompts) == 16
    _check(tiny, kv, reference, prompts, batched)


@pytest.fixture(scope="module")
def smollm2_case(smollm2, smollm2_engine):
    prompts = encoded_prompts(smollm2_engine)[::2]  # 8 of the 16, raw and chat: HF at batch 1 costs ~4 s a prompt
    return prompts, _reference(smollm2, prompts)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kv, batched", [("v1", False), ("v1", True), ("v2", True)], ids=["v1-batch1", "v1-batched", "v2-batched"]
)
def test_smollm2_matches_hf(smollm2, smollm2_engine, smollm2_case, kv, batched):
    """The real model against HF: batched under both KV managers, batch 1 on 4 prompts under v1 (one prompt at a
    time is ~13 tok/s here). The tiny model runs all 16 prompts in all four combinations."""
    prompts, reference = smollm2_case
    if not batched:
        prompts, reference = prompts[:4], reference[:4]
    _check(smollm2, kv, reference, prompts, batched, smollm2_engine if kv == "v1" else None)
