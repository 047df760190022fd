"""CUDA only: one forward at the max context shape with a throw-away KV pool, so that the allocator's peak (read by
`device.measure_memory`) includes activations before the real pool is sized from what is left."""

from __future__ import annotations

import torch

from ..config import EngineConfig
from ..model.attn_metadata import AttentionMetadata, BatchEntry
from ..model.causal_lm import CausalLM
from ..model.layers.paged_kv import PagedKV


@torch.inference_mode()
def profile_forward(
    model: CausalLM, config: EngineConfig, max_seq_len: int, tp_size: int, dtype: torch.dtype, device: torch.device
) -> None:
    block = config.kv_cache.block_size
    n = min(config.max_num_tokens, max_seq_len - 1)
    blocks = -(-n // block)
    cfg = model.config
    pool = torch.zeros(
        cfg.num_hidden_layers,
        2,
        blocks * block,
        cfg.num_key_value_heads // tp_size,
        cfg.head_dim,
        dtype=dtype,
        device=device,
    )
    torch.cuda.reset_peak_memory_stats(device)
    meta = AttentionMetadata(block, device).prepare([BatchEntry(-1, 0, n, list(range(blocks)), True)])
    hidden, _ = model(torch.zeros(n, dtype=torch.int64, device=device), meta, PagedKV(pool))
    model.compute_logits(hidden[meta.last_token_index])
    del pool, hidden
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()  # give the throw-away pool back, so mem_get_info sees it as free
