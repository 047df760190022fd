"""The memory of an engine built beside a running one in the same process: the twin audit's plain engine (one
sequence at a time) next to the spec-dec engine whose twins it audits. It gets a KV pool for its longest document
and a memory budget of what it needs, not a second copy of the running engine's whole pool."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..config import EngineConfig
from .device import activation_estimate

WINDOW_BLOCKS = 4  # the verify window and a partial block or two past the longest document


def sibling_config(
    plain: EngineConfig, running: Any, tokens: int | None = None, shares_weights: bool = False
) -> EngineConfig:
    """`plain` (its batch size as the caller wants it, the twin audit's: 1) for an engine beside `running` (an
    Engine): its KV pool capped at `tokens` positions (None: one longest sequence), with a memory budget of its
    weights, activations and that pool (twice over: the pool takes a fraction of what is free). shares_weights: the
    running engine's weights, already held on the device (a CPU budget counts them either way: the engine subtracts
    its weights from it)."""
    block = running.kv_layout.block_size
    positions = min(running.max_seq_len, tokens) if tokens else running.max_seq_len
    positions += WINDOW_BLOCKS * block
    if tokens:
        plain = replace(plain, kv_cache=replace(plain.kv_cache, max_tokens=positions))
    dtype_bytes = torch.empty((), dtype=running.dtype).element_size()
    kv = 2 * running.kv_layout.bytes_per_token * positions
    budget = activation_estimate(running.model_config, plain, dtype_bytes, plain.tp_size) + kv
    if running.device.type == "cuda":  # the cap counts what this process already holds on the device
        budget += torch.cuda.memory_allocated(running.device)
    if running.device.type != "cuda" or not shares_weights:
        budget += running.weights_bytes
    return replace(plain, device_memory=budget)
