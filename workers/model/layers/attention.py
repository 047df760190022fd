"""Paged attention over the block pool: write this step's K/V into their slots, then attend. Context requests
attend one by one over their gathered keys; decoding requests as one padded batch, over either a per-step gather
of their blocks or (CPU) the decode copy, a contiguous copy of their KV kept across steps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...loading.model_config import ModelConfig
from ..attn_metadata import AttentionMetadata
from ..parallel import TPGroup
from .decode_copy import CopyPlan
from .linear import ColumnParallelLinear, RowParallelLinear
from .norm import RMSNorm
from .paged_kv import LayerKV
from .rotary import apply_rotary


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TPGroup, in_features: int | None = None) -> None:
        super().__init__()
        cfg.check_tp_size(tp.size)
        hidden = in_features or cfg.hidden_size
        self.num_heads = cfg.num_attention_heads // tp.size
        self.num_kv_heads = cfg.num_key_value_heads // tp.size
        self.head_dim = cfg.head_dim
        self.q_proj = ColumnParallelLinear(hidden, cfg.q_size, cfg.attention_bias, tp)
        self.k_proj = ColumnParallelLinear(hidden, cfg.kv_size, cfg.attention_bias, tp)
        self.v_proj = ColumnParallelLinear(hidden, cfg.kv_size, cfg.attention_bias, tp)
        self.o_proj = RowParallelLinear(cfg.q_size, cfg.hidden_size, False, tp)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        kv: LayerKV,
    ) -> torch.Tensor:
        """x: [T, hidden]; kv: this layer's view of the pool (and of the decode copy)."""
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = cos_sin
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        kv.data[0, meta.slot_mapping] = k
        kv.data[1, meta.slot_mapping] = v
        out = paged_attention(q, kv, meta, k, v)
        return self.o_proj(out.reshape(t, self.num_heads * self.head_dim))


def paged_attention(
    q: torch.Tensor,
    kv: LayerKV,
    meta: AttentionMetadata,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
) -> torch.Tensor:
    """q: [T, heads, d] for the flattened batch -> [T, heads, d]. Context requests attend one by one; generation
    requests (a few query tokens each) as one padded batch. k, v: this step's keys and values [T, kv_heads, d]
    (already in the pool), read directly by a context request that brings its whole sequence."""
    kv_layer = kv.data
    out = torch.empty_like(q)
    heads = q.shape[1]
    gqa = kv_layer.shape[2] != heads
    for view in meta.context_views:
        if view.mask is None and k is not None and k.dtype == kv_layer.dtype:
            # A whole sequence from position 0: its keys are exactly this step's, the values just written to the
            # pool; read them where they are instead of gathering them back (a copy per layer per prompt).
            keys = k[view.token_start : view.token_end].transpose(0, 1)[None]  # [1, kv_heads, kv_len, d]
            values = v[view.token_start : view.token_end].transpose(0, 1)[None]
        else:
            keys = kv_layer[0][view.key_slots].transpose(0, 1)[None]
            values = kv_layer[1][view.key_slots].transpose(0, 1)[None]
        query = q[view.token_start : view.token_end].transpose(0, 1)[None]
        o = F.scaled_dot_product_attention(
            query, keys, values, attn_mask=view.mask, is_causal=view.mask is None, enable_gqa=gqa
        )
        out[view.token_start : view.token_end] = o[0].transpose(0, 1)
    plan = kv.copy_plan(meta) if meta.gen_max_q else None
    if plan is not None:
        out[meta.gen_token_start :] = _decode_copy_attention(q[meta.gen_token_start :], kv, plan, meta)
    elif meta.gen_max_q:
        g0, d = meta.gen_token_start, q.shape[2]
        num_gen = meta.num_generations
        blocks = kv_layer.view(2, -1, meta.block_size, kv_layer.shape[2], d)  # [2, num_blocks, block, kv_heads, d]
        keys = blocks[0].index_select(0, meta.gen_key_blocks).view(num_gen, -1, kv_layer.shape[2], d)
        values = blocks[1].index_select(0, meta.gen_key_blocks).view(num_gen, -1, kv_layer.shape[2], d)
        q_pad = q.new_zeros(keys.shape[0], meta.gen_max_q, heads, d)
        q_pad[meta.gen_batch_index, meta.gen_offset_in_seq] = q[g0:]
        o = F.scaled_dot_product_attention(
            q_pad.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=meta.gen_attn_mask.to(q.dtype),
            enable_gqa=gqa,
        )
        out[g0:] = o.transpose(1, 2)[meta.gen_batch_index, meta.gen_offset_in_seq]
    return out


def _decode_copy_attention(q: torch.Tensor, kv: LayerKV, plan: CopyPlan, meta: AttentionMetadata) -> torch.Tensor:
    """q: [generation tokens, heads, d]. Attention over the decode copy's rows, keys a view of the copy.

    Written as two batched matmuls with the query heads of each KV head stacked (GQA), so each key and value is
    read once per step; SDPA on this CPU is slower here, and slower still on the strided gathered batch."""
    data = kv.copy_data(plan, meta.block_size)
    # This step's tokens are already in the pool; append them to their rows (refilled rows have them already).
    new_slots = meta.slot_mapping[meta.gen_token_start :]
    rows, positions = plan.row_of_token, meta.positions[meta.gen_token_start :]
    data[0][rows, :, positions] = kv.data[0, new_slots]
    data[1][rows, :, positions] = kv.data[1, new_slots]

    num_rows, num_keys, max_q = plan.num_rows, plan.num_keys, meta.gen_max_q
    heads, d = q.shape[1], q.shape[2]
    kv_heads = data.shape[2]
    group = heads // kv_heads
    keys, values = data[0, :num_rows, :, :num_keys], data[1, :num_rows, :, :num_keys]  # [rows, kv_heads, keys, d]
    q_pad = q.new_zeros(num_rows, max_q, heads, d)
    q_pad[rows, meta.gen_offset_in_seq] = q * d**-0.5
    # Head h uses KV head h // group: stack each KV head's `group` query heads (and all query rows) together.
    q_grouped = q_pad.view(num_rows, max_q, kv_heads, group, d).permute(0, 2, 3, 1, 4)
    scores = torch.matmul(q_grouped.reshape(num_rows, kv_heads, group * max_q, d), keys.transpose(-1, -2))
    # The mask is kept in float32; adding it as is would promote bf16/fp16 scores and break the matmul below.
    scores = scores.view(num_rows, kv_heads, group, max_q, num_keys) + plan.attn_mask.to(scores.dtype)
    probs = torch.softmax(scores, dim=-1).view(num_rows, kv_heads, group * max_q, num_keys)
    o = torch.matmul(probs, values).view(num_rows, kv_heads, group, max_q, d)
    o = o.permute(0, 3, 1, 2, 4).reshape(num_rows, max_q, heads, d)
    return o[rows, meta.gen_offset_in_seq]
