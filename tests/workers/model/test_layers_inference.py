"""The inference fast paths of the layers give exactly the values of their plain formulas: a whole-sequence prefill
reads this step's keys and values instead of gathering them back from the pool; RMSNorm, rotary and SwiGLU work
in place and still train (draft-head training records their gradients)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from specdec_eval.workers.model.attn_metadata import AttentionMetadata, BatchEntry
from specdec_eval.workers.model.layers.attention import paged_attention
from specdec_eval.workers.model.layers.mlp import SwiGLU
from specdec_eval.workers.model.layers.norm import RMSNorm
from specdec_eval.workers.model.layers.paged_kv import LayerKV, PagedKV
from specdec_eval.workers.model.layers.rotary import apply_rotary
from specdec_eval.workers.model.parallel import TPGroup

BLOCK, KV_HEADS, HEADS, D = 4, 2, 6, 8


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_whole_sequence_prefill_reads_the_step_keys_exactly_as_the_gather_would():
    # Two fresh prompts (mask None: keys are this step's) and one that reuses a cached prefix (gathered).
    entries = [
        BatchEntry(1, 0, 7, [3, 4], True),
        BatchEntry(2, 0, 5, [8, 9], True),
        BatchEntry(3, 4, 3, [5, 6], True),
    ]
    meta = AttentionMetadata(BLOCK, torch.device("cpu")).prepare(entries)
    pool = torch.randn(2, 12 * BLOCK, KV_HEADS, D, generator=_gen(0))
    k = torch.randn(meta.num_tokens, KV_HEADS, D, generator=_gen(1))
    v = torch.randn(meta.num_tokens, KV_HEADS, D, generator=_gen(2))
    pool[0, meta.slot_mapping], pool[1, meta.slot_mapping] = k, v  # as the model writes them before attending
    q = torch.randn(meta.num_tokens, HEADS, D, generator=_gen(3))
    layer = LayerKV(0, pool, PagedKV(pool[None]))
    assert [view.mask is None for view in meta.context_views] == [True, True, False]
    gathered = paged_attention(q, layer, meta)
    direct = paged_attention(q, layer, meta, k, v)
    assert torch.equal(direct, gathered)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_and_rotary_in_place_equal_their_formulas_bit_for_bit(dtype):
    x = torch.randn(37, 64, generator=_gen(4)).to(dtype)
    norm = RMSNorm(64, 1e-5).to(dtype)
    norm.weight.data = torch.randn(64, generator=_gen(5)).to(dtype)
    x32 = x.float()
    expected = norm.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    with torch.inference_mode():
        assert torch.equal(norm(x), expected)
    q = torch.randn(37, 3, 64, generator=_gen(6)).to(dtype)
    cos, sin = (torch.randn(37, 64, generator=_gen(s)).to(dtype) for s in (7, 8))
    rotated = torch.cat((-q[..., 32:], q[..., :32]), dim=-1)
    assert torch.equal(apply_rotary(q, cos, sin), q * cos[:, None] + rotated * sin[:, None])


def _swiglu_formula(mlp: SwiGLU, x: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, mlp.gate_proj.weight), F.linear(x, mlp.up_proj.weight)
    return F.linear(F.silu(gate) * up, mlp.down_proj.weight)


def test_swiglu_in_place_equals_its_formula_and_trains():
    mlp = SwiGLU(16, 24, TPGroup())
    for p in mlp.parameters():
        p.data = torch.randn(p.shape, generator=_gen(p.numel()))
    x = torch.randn(5, 16, generator=_gen(9))
    with torch.inference_mode():
        assert torch.equal(mlp(x), _swiglu_formula(mlp, x))
    # Training records gradients through the in-place operations: they must still come out as the formulas'.
    reference = SwiGLU(16, 24, TPGroup())
    reference.load_state_dict(mlp.state_dict())
    _swiglu_formula(reference, x).sum().backward()
    mlp(x).sum().backward()
    for name, p in mlp.named_parameters():
        torch.testing.assert_close(p.grad, dict(reference.named_parameters())[name].grad, rtol=0, atol=0)


def test_rms_norm_in_place_trains_like_its_formula():
    norm = RMSNorm(16, 1e-5)
    norm.weight.data = torch.randn(16, generator=_gen(10))
    x = torch.randn(5, 16, generator=_gen(11), requires_grad=True)
    norm(x).pow(2).sum().backward()
    got = (x.grad.clone(), norm.weight.grad.clone())
    x.grad, norm.weight.grad = None, None
    (norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))).pow(2).sum().backward()
    torch.testing.assert_close(got, (x.grad, norm.weight.grad))
