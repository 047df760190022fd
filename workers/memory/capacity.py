"""Memory plan: weights + activations + KV pool on the chosen device. One place for the sizing arithmetic, used
by the engine when it starts and by `engine info` without loading weights."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..config import EngineConfig
from ..kv_cache.layout import KVLayout, size_kv_cache
from ..loading.checkpoint import Checkpoint, load_checkpoint
from ..loading.model_config import ModelConfig
from .device import (
    MemoryReport,
    activation_estimate,
    dtype_name,
    measure_memory,
    resolve_device,
    resolve_dtype,
)

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
        engine.kv_cache,
        cfg,
        tp_size=engine.tp_size,
        dtype_bytes=dtype_bytes,
        free_bytes=memory.free_bytes,
        num_extra_layers=extra,
    )
    return CapacityPlan(device.type, dtype_name(dtype), memory, layout)


def capacity_report(
    base: EngineConfig, draft_layers: int = 0, draft_len: int = 0, checkpoint: Checkpoint | None = None
) -> dict:
    """What `engine info` prints: the model's shape and size, its valid TP sizes, and the KV capacity the same
    device budget gives under v1 and v2 (`base`'s KV version is replaced by each), with what each reservation
    policy makes of it. No weights are loaded (`checkpoint`: an already-opened one, else `base.model`'s)."""
    ckpt = checkpoint or load_checkpoint(base.model)
    cfg = ckpt.config
    cfg.check_tp_size(base.tp_size)
    report: dict = {
        "model": base.model,
        "source": ckpt.source,
        "model_type": cfg.model_type,
        "layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "attention_heads": cfg.num_attention_heads,
        "kv_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "parameters": cfg.num_parameters(),
        "valid_tp_sizes": cfg.valid_tp_sizes(),
        "kv_cache": {},
    }
    for version in ("v1", "v2"):
        engine = replace(base, kv_cache=replace(base.kv_cache, version=version))
        plan = plan_capacity(cfg, engine, num_extra_layers=draft_layers)
        report["device"], report["dtype"], report["memory"] = plan.device, plan.dtype, plan.memory_summary()
        kv = plan.layout_summary()
        report["kv_cache"][version] = {**kv, **reservation_policy(cfg, engine, kv["num_blocks"], draft_len)}
    wanted = base.kv_cache.decode_copy
    # `decode_copy`: bounded by the pool's token capacity, not part of the budget above.
    report["decode_copy"] = {
        "enabled": wanted if wanted is not None else report["device"] == "cpu",
        "max_gib": report["kv_cache"]["v1"]["total_gib"],
    }
    return report


def reservation_policy(cfg: ModelConfig, engine: EngineConfig, num_blocks: int, draft_len: int) -> dict:
    """What a reservation policy makes of a pool of `num_blocks`, for requests of the full max_seq_len: v1 reserves
    each request's whole sequence at admission; v2 allocates blocks on demand and reserves one window (the next
    token and its drafts) per live request, preempting when it runs out."""
    block_size = engine.kv_cache.block_size
    if engine.kv_cache.version == "v1":
        seq_len = min(engine.max_seq_len or 4096, cfg.max_position_embeddings)
        return {
            "policy": "whole sequence reserved at admission",
            "request_tokens": seq_len,
            "full_length_requests_at_once": num_blocks // -(-seq_len // block_size),
        }
    return {
        "policy": "blocks on demand; one window reserved per live request, preempt when out",
        "headroom_blocks_at_max_batch": engine.max_batch_size * -(-(1 + draft_len) // block_size),
    }
