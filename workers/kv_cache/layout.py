"""Sizing the KV pool from a memory budget, the v1 way (tokens) or the v2 way (bytes).

Follows TensorRT-LLM's accounting (its accuracy harness sizes the KV cache so). The same budget
gives different block counts under v1 and v2, which is why warmup behaviour can differ between them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ...errors import UserError
from ..config import KVCacheConfig
from ..loading.model_config import ModelConfig


@dataclass(frozen=True)
class KVLayout:
    """The sized KV pool for one rank, with the inputs it came from (for logs and the run manifest)."""

    version: str
    num_blocks: int
    block_size: int  # tokens per block
    num_layers: int  # target layers + extra KV layers (the Eagle3 draft layer)
    num_kv_heads: int  # on this rank
    head_dim: int
    dtype_bytes: int
    free_bytes: int  # device memory left after weights and activations
    fraction: float  # share of free_bytes given to the KV cache
    budget_bytes: int  # v1: fraction * free_bytes; v2: the byte quota

    @property
    def bytes_per_token(self) -> int:
        # 2: one tensor for keys, one for values.
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_block(self) -> int:
        return self.bytes_per_token * self.block_size

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_block * self.num_blocks

    @property
    def max_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def to_dict(self) -> dict[str, Any]:
        """Fields plus the derived sizes, for the manifest."""
        derived = ("bytes_per_token", "bytes_per_block", "total_bytes", "max_tokens")
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


def size_kv_cache(
    cfg: KVCacheConfig,
    model: ModelConfig,
    *,
    tp_size: int,
    dtype_bytes: int,
    free_bytes: int,
    num_extra_layers: int = 0,
) -> KVLayout:
    """Number of blocks the budget allows on one rank.

    v1 (token-driven): max_tokens = floor(fraction * free_bytes / bytes_per_token), capped by cfg.max_tokens;
    blocks = max_tokens // block_size.
    v2 (byte-driven): quota = cfg.max_total_bytes, else fraction * free_bytes; when cfg.max_tokens is set,
    the quota is capped at ceil(max_tokens * bytes_per_token / max_util_for_resume);
    blocks = quota // bytes_per_block.
    """
    model.check_tp_size(tp_size)
    if dtype_bytes < 1 or free_bytes < 0 or num_extra_layers < 0:
        raise ValueError(
            f"bad sizing inputs: dtype_bytes={dtype_bytes}, free_bytes={free_bytes}, "
            f"num_extra_layers={num_extra_layers}"
        )
    partial = KVLayout(
        version=cfg.version,
        num_blocks=0,
        block_size=cfg.block_size,
        num_layers=model.num_hidden_layers + num_extra_layers,
        num_kv_heads=model.num_key_value_heads // tp_size,
        head_dim=model.head_dim,
        dtype_bytes=dtype_bytes,
        free_bytes=free_bytes,
        fraction=cfg.free_memory_fraction,
        budget_bytes=0,
    )
    per_token = partial.bytes_per_token
    # floor(fraction * free / b) == floor(floor(fraction * free) / b) for an integer b, so flooring first
    # loses nothing and keeps the rest in integers.
    fraction_bytes = math.floor(cfg.free_memory_fraction * free_bytes)
    if cfg.version == "v1":
        budget = fraction_bytes
        max_tokens = budget // per_token
        if cfg.max_tokens is not None:
            max_tokens = min(max_tokens, cfg.max_tokens)
        num_blocks = max_tokens // cfg.block_size
    else:
        budget = cfg.max_total_bytes if cfg.max_total_bytes is not None else fraction_bytes
        if cfg.max_tokens is not None:
            # v2 uses max_tokens only to shape the quota; the division leaves headroom for resuming.
            budget = min(budget, math.ceil(cfg.max_tokens * per_token / cfg.max_util_for_resume))
        num_blocks = budget // partial.bytes_per_block
    layout = KVLayout(**{**asdict(partial), "num_blocks": num_blocks, "budget_bytes": budget})
    if num_blocks < 1:
        raise UserError(_too_small_message(cfg, layout))
    return layout


def _too_small_message(cfg: KVCacheConfig, layout: KVLayout) -> str:
    source = (
        f"max_total_bytes {cfg.max_total_bytes}"
        if cfg.version == "v2" and cfg.max_total_bytes is not None
        else f"{cfg.free_memory_fraction} of {layout.free_bytes} free bytes"
    )
    cap = f", capped by max_tokens {cfg.max_tokens}" if cfg.max_tokens is not None else ""
    return (
        f"KV cache {cfg.version}: the memory budget is too small for even one block: "
        f"{layout.budget_bytes} bytes ({source}{cap}) hold {layout.budget_bytes // layout.bytes_per_token} "
        f"tokens at {layout.bytes_per_token} bytes/token ({layout.num_layers} layers x {layout.num_kv_heads} "
        f"KV heads x head_dim {layout.head_dim} x {layout.dtype_bytes} bytes x 2), but one block is "
        f"{layout.block_size} tokens ({layout.bytes_per_block} bytes)"
    )
