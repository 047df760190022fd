"""What an engine is built from, loaded and sized before it exists: the checkpoint and tokenizer, the target and draft
models on their device, and the KV pool's layout in the device memory left for it (`build_parts`). `Engine.build`
builds these, then the engine over them, then runs its warmup; the engine's constructor only wires them together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...errors import UserError
from ..config import EngineConfig
from ..kv_cache.layout import KVLayout
from ..loading.checkpoint import Checkpoint, load_checkpoint, preset_of
from ..memory.capacity import plan_capacity
from ..memory.device import MemoryReport, resolve_device, resolve_dtype
from ..memory.profiling import profile_forward
from ..model.causal_lm import CausalLM
from ..model.parallel import TPGroup
from ..registry import spec_method
from ..spec.base import DraftBuild


@dataclass(frozen=True)
class EngineParts:
    config: EngineConfig
    tp: TPGroup
    checkpoint: Checkpoint
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    model: CausalLM
    draft_model: torch.nn.Module | None
    kv_layout: KVLayout
    memory: MemoryReport


def build_parts(
    config: EngineConfig,
    tp: TPGroup | None = None,
    checkpoint: Checkpoint | None = None,
    tokenizer: Any = None,
    model: CausalLM | None = None,
) -> EngineParts:
    """Load the checkpoint (unless given), build the target (unless given) and draft models, and size the KV pool
    from the device memory they leave."""
    tp = tp or TPGroup()
    if config.tp_size != tp.size:
        raise UserError(f"engine config asks for TP size {config.tp_size}, but the TP group has {tp.size}")
    checkpoint = checkpoint or load_checkpoint(config.model)
    checkpoint.config.check_tp_size(tp.size)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    model = model if model is not None else build_target_model(config, checkpoint, tp)
    tokenizer = tokenizer if tokenizer is not None else checkpoint.load_tokenizer()
    draft = _build_draft_model(config, checkpoint, tp, dtype, device)
    if device.type == "cuda":
        # The allocator's peak after one forward at the max context shape includes activations before the pool is
        # sized from what is left.
        profile_forward(model, config, max_seq_len(config, checkpoint), tp.size, dtype, device)
    plan = plan_capacity(checkpoint.config, config, weights_bytes=weights_bytes(model, draft))
    return EngineParts(config, tp, checkpoint, tokenizer, device, dtype, model, draft, plan.layout, plan.memory)


def _build_draft_model(
    config: EngineConfig, checkpoint: Checkpoint, tp: TPGroup, dtype: torch.dtype, device: torch.device
) -> torch.nn.Module | None:
    """The spec method's draft model (its registry entry builds it), or None for plain decoding or a method without
    one."""
    if config.spec is None:
        return None
    build = DraftBuild(
        target=checkpoint.config,
        model_name=preset_of(checkpoint) or config.model,
        spec=config.spec,
        tp=tp,
        dtype=dtype,
        device=device,
    )
    return spec_method(config.spec.algorithm).build_draft(build)


def max_seq_len(config: EngineConfig, checkpoint: Checkpoint) -> int:
    return min(config.max_seq_len or 4096, checkpoint.config.max_position_embeddings)


def weights_bytes(model: torch.nn.Module, draft: torch.nn.Module | None) -> int:
    modules = [model] + ([draft] if draft is not None else [])
    return sum(p.numel() * p.element_size() for m in modules for p in m.parameters())


def build_target_model(config: EngineConfig, checkpoint: Checkpoint, tp: TPGroup | None = None) -> CausalLM:
    """The target model of an engine of this configuration, its weights loaded from the checkpoint (built apart
    from an engine to be shared: `Engine.build(..., model=)`)."""
    device = resolve_device(config.device)
    model = CausalLM(checkpoint.config, tp or TPGroup()).to(resolve_dtype(config.dtype, device))
    model.load_weights(checkpoint.tensors())
    return model.to(device).eval()
