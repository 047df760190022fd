"""Where the engine runs and how much memory it may use.

On CUDA the numbers are real (`torch.cuda.mem_get_info` and the allocator's peak after a profiling forward).
On CPU a configurable budget stands in for device memory, so KV sizing (and later the warmup OOMs that depend on
it) is reproducible on any machine."""

from __future__ import annotations

import gc
from dataclasses import dataclass

import torch

from ...errors import UserError
from ..config import EngineConfig
from ..loading.model_config import ModelConfig

DEFAULT_CPU_BUDGET = 4 * 2**30

_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
}


def release_memory(device: torch.device) -> None:
    """Give back what an engine's dropped tensors held: collect the reference cycles that modules and an engine's
    parts keep among themselves, and on CUDA return the allocator's cached blocks to the device."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def resolve_device(name: str) -> torch.device:
    """auto: CUDA when available. Under torchrun launch/ has made each process's GPU (its local rank) the current
    CUDA device before any engine is built."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--device cuda was asked for, but this torch build sees no CUDA device")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in _DTYPES.items()}[dtype]


@dataclass(frozen=True)
class MemoryReport:
    total_bytes: int
    weights_bytes: int
    activation_bytes: int  # measured peak on CUDA, estimated on CPU
    free_bytes: int  # what the KV cache may take a fraction of
    measured: bool


def activation_estimate(cfg: ModelConfig, engine: EngineConfig, dtype_bytes: int, tp_size: int) -> int:
    """Activation bytes of a forward at the max shapes: the CPU stand-in for a profiling run."""
    from .budget import forward_activation_bytes

    return forward_activation_bytes(cfg, engine.max_num_tokens, engine.max_batch_size, dtype_bytes, tp_size)


def measure_memory(
    device: torch.device, engine: EngineConfig, weights_bytes: int, activation_bytes: int
) -> MemoryReport:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        peak_extra = torch.cuda.max_memory_allocated(device) - torch.cuda.memory_allocated(device)
        if engine.device_memory is not None:  # a cap below the physical memory
            free = min(free, engine.device_memory - torch.cuda.memory_allocated(device))
            total = min(total, engine.device_memory)
        return MemoryReport(total, weights_bytes, peak_extra, max(0, free - peak_extra), measured=True)
    budget = engine.device_memory if engine.device_memory is not None else DEFAULT_CPU_BUDGET
    free = budget - weights_bytes - activation_bytes
    if free <= 0:
        raise UserError(
            f"device memory budget {budget / 2**30:.2f} GiB is below the weights ({weights_bytes / 2**30:.2f} GiB) "
            f"plus activations ({activation_bytes / 2**30:.2f} GiB); raise --device-memory"
        )
    return MemoryReport(budget, weights_bytes, activation_bytes, free, measured=False)
