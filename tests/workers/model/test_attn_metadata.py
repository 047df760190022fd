"""Attention metadata: derived tensors, and the spec-dec save / restore hook."""

from __future__ import annotations

import pytest
import torch
from specdec_eval.workers.model.attn_metadata import AttentionMetadata, BatchEntry


def _meta() -> AttentionMetadata:
    entries = [
        BatchEntry(request_id=7, start=0, num_new_tokens=5, block_table=[3, 4], is_context=True),
        BatchEntry(request_id=9, start=10, num_new_tokens=1, block_table=[1, 2, 5], is_context=False),
    ]
    return AttentionMetadata(block_size=4, device=torch.device("cpu")).prepare(entries)


def test_prepare_derives_positions_slots_and_mask():
    m = _meta()
    assert m.num_contexts == 1 and m.num_generations == 1 and m.num_tokens == 6
    assert m.seq_lens.tolist() == [5, 1] and m.kv_lens.tolist() == [5, 11]
    assert m.positions.tolist() == [0, 1, 2, 3, 4, 10]
    # position p lives in block_table[p // 4] at offset p % 4
    assert m.slot_mapping.tolist() == [12, 13, 14, 15, 16, 5 * 4 + 2]
    assert m.last_token_index.tolist() == [4, 5]
    # the context request attends alone, causally, over exactly its own 5 keys
    (view,) = m.context_views
    assert (view.token_start, view.token_end, view.mask) == (0, 5, None)
    assert view.key_slots.tolist() == [12, 13, 14, 15, 16]
    # the generation request: one padded row over its 11 keys, all visible
    assert m.gen_token_start == 5 and m.gen_max_q == 1
    # whole blocks are gathered (3 blocks = 12 key positions); the mask hides the 12th, past kv_len
    assert m.gen_key_blocks.tolist() == [1, 2, 5]
    assert m.gen_attn_mask[0, 0, 0].tolist() == [0.0] * 11 + [float("-inf")]


def test_context_with_reused_prefix_gets_an_offset_causal_mask():
    entries = [BatchEntry(request_id=1, start=4, num_new_tokens=2, block_table=[0, 1], is_context=True)]
    m = AttentionMetadata(block_size=4, device=torch.device("cpu")).prepare(entries)
    (view,) = m.context_views
    assert view.mask.tolist() == [[True] * 5 + [False], [True] * 6]  # queries at positions 4 and 5
    assert m.gen_max_q == 0


def test_context_after_generation_is_rejected():
    entries = [
        BatchEntry(1, 4, 1, [0, 1], is_context=False),
        BatchEntry(2, 0, 3, [2], is_context=True),
    ]
    with pytest.raises(ValueError, match="precede"):
        AttentionMetadata(4, torch.device("cpu")).prepare(entries)


def test_spec_dec_save_mutate_restore():
    m = _meta()
    positions = m.positions.clone()
    m.prepare_for_spec_dec("seq_lens", "kv_lens", "num_contexts")
    m.seq_lens = torch.tensor([1, 1])
    m.kv_lens = m.kv_lens + 1
    m.num_contexts = 0
    m.on_update()
    assert m.positions.tolist() == [5, 11]
    assert m.restore_from_spec_dec() == ("seq_lens", "kv_lens", "num_contexts")
    assert m.positions.tolist() == positions.tolist() and m.num_contexts == 1
    assert m.saved_fields == ()


def test_nested_prepare_names_the_unrestored_fields():
    m = _meta()
    m.prepare_for_spec_dec("seq_lens", "kv_lens")
    with pytest.raises(AssertionError, match="seq_lens, kv_lens"):
        m.prepare_for_spec_dec("seq_lens")


def test_unknown_field_is_refused():
    with pytest.raises(ValueError, match="positions"):
        _meta().prepare_for_spec_dec("positions")


def test_saved_state_survives_the_next_prepare():
    """An unrestored save is still there after the next step's prepare(), and the next save names it."""
    m = _meta()
    m.prepare_for_spec_dec("seq_lens", "kv_lens")
    m.prepare([BatchEntry(1, 0, 3, [0], is_context=True)])
    assert m.saved_fields == ("seq_lens", "kv_lens")
    with pytest.raises(AssertionError, match="seq_lens, kv_lens"):
        m.prepare_for_spec_dec("seq_lens", "kv_lens")
