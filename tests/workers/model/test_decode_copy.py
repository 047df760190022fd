"""The decode copy (CPU): attention over it equals attention over the per-step gather of the paged blocks, through
rows changing hands, preemption, spec-dec drafts and a forward that stopped half-way; its memory bound holds."""

from __future__ import annotations

import pytest
import torch
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.model.attn_metadata import AttentionMetadata, BatchEntry
from specdec_eval.workers.model.layers.attention import paged_attention
from specdec_eval.workers.model.layers.decode_copy import DecodeCopy
from specdec_eval.workers.model.layers.paged_kv import LayerKV, PagedKV

from ...conftest import make_engine
from ...prompts import RAW_PROMPTS

BLOCK, KV_HEADS, HEADS, D, NUM_BLOCKS = 4, 2, 6, 8, 40


def _pool(seed: int) -> torch.Tensor:
    return torch.randn(2, NUM_BLOCKS * BLOCK, KV_HEADS, D, generator=torch.Generator().manual_seed(seed))


def _attend(meta: AttentionMetadata, pool: torch.Tensor, seed: int, copy: DecodeCopy | None = None, layer: int = 0):
    q = torch.randn(meta.num_tokens, HEADS, D, generator=torch.Generator().manual_seed(seed))
    # The pool given here serves as KV layer `layer` (the copy keeps one tensor per layer index).
    return paged_attention(q, LayerKV(layer, pool, PagedKV(pool[None], copy)), meta)


def _prepare(entries, copy: DecodeCopy | None = None) -> AttentionMetadata:
    """Metadata of one step, as the executor builds it (the copy trims its rows at the start of each step)."""
    meta = AttentionMetadata(BLOCK, torch.device("cpu")).prepare(entries)
    if copy is not None:
        copy.begin_step(meta)
    return meta


def _both(entries, copy: DecodeCopy, pool, seed, layer: int = 0):
    """Write this step's new K/V into the pool (as the model does before attending), then attend both ways."""
    plain = _prepare(entries)
    with_copy = _prepare(entries, copy)
    assert copy.plan(with_copy) is not None
    gen = torch.Generator().manual_seed(100 + seed)
    pool[:, plain.slot_mapping] = torch.randn(2, plain.num_tokens, KV_HEADS, D, generator=gen)
    return _attend(plain, pool, seed), _attend(with_copy, pool, seed, copy, layer)


def test_copy_attention_equals_gather_attention_as_rows_change_hands():
    pool, copy = _pool(0), DecodeCopy(max_tokens=10_000)
    steps = [
        # two decoding requests, one context request (which gets no row)
        [BatchEntry(5, 0, 6, [9, 10], True), BatchEntry(1, 9, 1, [0, 1, 2], False), BatchEntry(2, 3, 1, [3], False)],
        # request 5 starts decoding; 2 keeps its row; 1 finished, so its row is free for the next newcomer
        [BatchEntry(2, 4, 1, [3, 4], False), BatchEntry(5, 6, 1, [9, 10], False)],
        # spec-dec verify: 1 + 3 draft tokens each, padded query rows; a new request 8 takes row 0
        [BatchEntry(8, 10, 4, [20, 21, 22, 23], False), BatchEntry(2, 5, 4, [3, 4, 6], False)],
    ]
    for i, entries in enumerate(steps):
        plain_out, copy_out = _both(entries, copy, pool, seed=i)
        torch.testing.assert_close(copy_out, plain_out, rtol=1e-5, atol=1e-6)
        pool[:, 30 * BLOCK :] = float("nan")  # blocks nobody holds: never read by either path
    assert sorted(copy.row_of) == [2, 8]


def test_a_layer_that_missed_a_step_refills_from_the_pool():
    """Each layer remembers whom its rows belong to: a layer that never saw a request (the draft layer, or the
    later layers of a forward that stopped half-way) fills the row from the pool before reading it."""
    pools = [_pool(1), _pool(2)]
    copy = DecodeCopy(max_tokens=10_000)
    entries = [BatchEntry(3, 7, 1, [4, 5], False)]
    meta = _prepare(entries, copy)
    _attend(meta, pools[0], seed=0, copy=copy, layer=0)  # only layer 0 runs: the forward "stopped" before layer 1
    entries = [BatchEntry(3, 8, 1, [4, 5, 6], False)]
    for layer, pool in enumerate(pools):
        plain_out, copy_out = _both(entries, copy, pool, seed=1, layer=layer)
        torch.testing.assert_close(copy_out, plain_out, rtol=1e-5, atol=1e-6)


def test_a_request_back_in_prefill_loses_its_row_and_is_refilled():
    copy, pool = DecodeCopy(max_tokens=10_000), _pool(3)
    _both([BatchEntry(3, 7, 1, [4, 5], False)], copy, pool, seed=0)
    assert copy.row_of == {3: 0}
    # preempted and recomputed: it comes back as a context request, into other blocks with other values
    _prepare([BatchEntry(3, 0, 8, [7, 8], True)], copy)
    assert copy.row_of == {}
    plain_out, copy_out = _both([BatchEntry(3, 8, 1, [7, 8, 9], False)], copy, pool, seed=1)  # row 0 again
    torch.testing.assert_close(copy_out, plain_out, rtol=1e-5, atol=1e-6)


def test_over_its_bound_the_step_uses_the_gather_path_and_the_copy_is_dropped():
    copy = DecodeCopy(max_tokens=8 * 256)  # rows are allocated 8 at a time, key positions 256 at a time
    small = [BatchEntry(1, 9, 1, [0, 1, 2], False)]
    assert copy.plan(_prepare(small, copy)) is not None
    long_table = list(range(80))  # 320 key positions: 8 x 512 > the bound
    meta = _prepare([BatchEntry(1, 300, 1, long_table, False)], copy)
    assert copy.plan(meta) is None and copy.row_of == {}
    pool = torch.randn(2, 80 * BLOCK, KV_HEADS, D)
    assert torch.isfinite(_attend(meta, pool, seed=0, copy=copy)).all()


@pytest.mark.parametrize("kv", ["v1", "v2"])
def test_engine_outputs_equal_with_and_without_the_copy(tiny, kv):
    """Greedy outputs of the tiny model with the copy on and off: a tight pool (v2 preempts), continuous batching
    (rows change hands), and Eagle3 drafts (the draft layer has its own copy)."""
    greedy = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for extra in ({"kv_max_tokens": 160, "kv_block_size": 8, "max_batch_size": 3}, {"spec": SpecConfig()}):
        outs = []
        for on in (True, False):
            engine = make_engine(tiny, kv, kv_decode_copy=on, **extra)
            outs.append([o.token_ids for o in engine.generate(RAW_PROMPTS, greedy)])
            assert (engine.kv.decode_copy is not None) == on
        assert outs[0] == outs[1]


def test_a_bfloat16_engine_decodes_over_the_copy(tiny):
    """The copy's additive mask is float32; in a bf16 engine it once promoted the scores to float32 and every decode
    step failed ("expected m1 and m2 to have the same dtype"), so bf16 on CPU could not generate at all."""
    engine = make_engine(tiny, kv_decode_copy=True, dtype="bfloat16", spec=SpecConfig())
    outs = engine.generate(RAW_PROMPTS[:2], SamplingParams(max_new_tokens=8, ignore_eos=True))
    assert engine.kv.decode_copy is not None
    assert [o.finish_reason for o in outs] == ["length", "length"]
