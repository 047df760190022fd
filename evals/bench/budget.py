"""The memory budget `bench` gives each of its engines when --device-memory is not set: what the plan needs, not
the engine's general default.

The bench holds two engines (plain and spec-dec) and HF's copy of the weights in one process. At the general CPU
default (4 GiB per engine) that came to ~9.5 GB and was OOM-killed on a shared 23 GB machine; sized from the
plan, each engine holds its weights, the activation estimate at its max shapes and the KV blocks of the largest
batch of the longest prompts (with the draft window), over the pool's free-memory fraction, rounded up.
"""

from __future__ import annotations

import math

import torch

from ...workers.config import EngineConfig
from ...workers.kv_cache.layout import size_kv_cache
from ...workers.loading.model_config import ModelConfig
from ...workers.memory.capacity import weights_bytes_estimate
from ...workers.memory.device import activation_estimate, resolve_device, resolve_dtype

ROUND_TO = 256 * 2**20
DRAFT_HEAD_ALLOWANCE = 256 * 2**20  # an Eagle3 head is one decoder layer and a small LM head (~40 MB in fp32)


def bench_device_memory(config: EngineConfig, model: ModelConfig, max_prompt_tokens: int, new_tokens: int) -> int:
    """Bytes for `config` to hold config.max_batch_size requests of max_prompt_tokens + new_tokens at once."""
    dtype = resolve_dtype(config.dtype, resolve_device(config.device))
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    weights = weights_bytes_estimate(model, config.tp_size, dtype_bytes)
    weights += DRAFT_HEAD_ALLOWANCE if config.spec is not None else 0
    activations = activation_estimate(model, config, dtype_bytes, config.tp_size)
    # sized against a huge budget only to read the block's bytes
    layout = size_kv_cache(
        config.kv_cache,
        model,
        tp_size=config.tp_size,
        dtype_bytes=dtype_bytes,
        free_bytes=2**40,
        num_extra_layers=config.num_extra_kv_layers,
    )
    draft_window = config.spec.max_draft_len + 1 if config.spec is not None else 0
    blocks_per_request = math.ceil((max_prompt_tokens + new_tokens + draft_window) / layout.block_size) + 1
    kv = config.max_batch_size * blocks_per_request * layout.bytes_per_block
    total = weights + activations + math.ceil(kv / config.kv_cache.free_memory_fraction)
    return math.ceil(total / ROUND_TO) * ROUND_TO
