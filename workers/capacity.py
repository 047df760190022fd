"""Memory plan: weights + activations + KV pool on the chosen device. One place for the sizing arithmetic, used
by the engine when it starts and by `engine info` without loading weights."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import EngineConfig
from .device import (
    MemoryReport,
    activation_estimate,
    dtype_name,
    measure_memory,
    resolve_device,
    resolve_dtype,
)
from .kv_cache.layout import KVLayout, size_kv_cache
from .model_config import ModelConfig

GIB = 2**30


def weights_bytes_estimate(cfg: ModelConfig, tp_size: int, dtype_bytes: int) -> int:
    """Bytes of one rank's parameters as `CausalLM` holds them: embeddings and norms replicated, projections
    and the lm_head (a separate copy even when tied) sharded over the TP ranks."""
    h, v, t = cfg.hidden_size, cfg.vocab_size, tp_size
    per_layer = 2 * h + (2 * cfg.head_dim if cfg.qk_norm else 0)
    per_layer += (2 * h * cfg.q_size + 2 * h * cfg.kv_size) // t + 3 * h * cfg.intermediate_size // t
    if cfg.attention_bias:
        per_layer += (cfg.q_size + 2 * cfg.kv_size) // t
    return (v * h + v * h // t + cfg.num_hidden_layers * per_layer + h) * dtype_bytes


@dataclass(frozen=True)
class CapacityPlan:
    device: str
    dtype: str
    memory: MemoryReport
    layout: KVLayout

    def memory_summary(self) -> dict:
        m = self.memory
        return {
            "total_gib": round(m.total_bytes / GIB, 3),
            "weights_gib": round(m.weights_bytes / GIB, 3),
            "activation_gib": round(m.activation_bytes / GIB, 3),
            "free_gib": round(m.free_bytes / GIB, 3),
            "measured": m.measured,
        }

    def layout_summary(self) -> dict:
        lay = self.layout
        return {
            "num_blocks": lay.num_blocks,
            "block_size": lay.block_size,
            "max_tokens": lay.max_tokens,
            "bytes_per_token": lay.bytes_per_token,
            "total_gib": round(lay.total_bytes / GIB, 3),
            "num_layers": lay.num_layers,
        }


def plan_capacity(
    cfg: ModelConfig,
    engine: EngineConfig,
    num_extra_layers: int | None = None,
    weights_bytes: int | None = None,
) -> CapacityPlan:
    device = resolve_device(engine.device)
    dtype = resolve_dtype(engine.dtype, device)
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    if weights_bytes is None:
        weights_bytes = weights_bytes_estimate(cfg, engine.tp_size, dtype_bytes)
    activations = activation_estimate(cfg, engine, dtype_bytes, engine.tp_size)
    memory = measure_memory(device, engine, weights_bytes, activations)
    extra = engine.num_extra_kv_layers if num_extra_layers is None else num_extra_layers
    layout = size_kv_cache(
        engine.kv_cache, cfg, tp_size=engine.tp_size, dtype_bytes=dtype_bytes, free_bytes=memory.free_bytes,
        num_extra_layers=extra,
    )  # fmt: skip
    return CapacityPlan(device.type, dtype_name(dtype), memory, layout)
