"""Activation memory of a forward, and the budget that turns "does not fit" into an out-of-memory error.

On CUDA the allocator is the judge: a forward that does not fit raises torch.OutOfMemoryError by itself, and
`MemoryBudget.check` only asks the allocator for the numbers. On CPU a budget stands in for device memory: the
weights and the KV pool are held for the engine's life, and each forward asks for its activations first; when
they do not fit, the same torch.OutOfMemoryError is raised, so warmup OOMs are reproducible on any machine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ..events import EventLog
from ..faults import FaultInjector
from ..loading.model_config import ModelConfig


def forward_activation_bytes(cfg: ModelConfig, num_tokens: int, logit_rows: int, dtype_bytes: int, tp: int) -> int:
    """Target forward: per token the residual stream and a few temporaries, q/k/v and the MLP's intermediates;
    per logits row a float32 row over the vocabulary (and its softmax/argmax temporary)."""
    per_token = 4 * cfg.hidden_size + (cfg.q_size + 2 * cfg.kv_size + 3 * cfg.intermediate_size) // tp
    return num_tokens * per_token * dtype_bytes + logit_rows * cfg.vocab_size * 4 * 2


def draft_activation_bytes(
    layer: ModelConfig, target_hidden: int, draft_vocab: int, num_tokens: int, rows: int, dtype_bytes: int, tp: int
) -> int:
    """Eagle3 draft pass 0: the three captured target states, fc output, the 2H attention input, q/k/v and the
    MLP of the draft layer per token; float32 draft logits per proposed row."""
    h = layer.hidden_size
    per_token = 3 * target_hidden + 4 * h + (layer.q_size + 2 * layer.kv_size + 3 * layer.intermediate_size) // tp
    return num_tokens * per_token * dtype_bytes + rows * draft_vocab * 4 * 2


class MemoryBudget:
    def __init__(
        self,
        device: torch.device,
        total_bytes: int,
        held_bytes: int,
        events: EventLog,
        faults: FaultInjector | None = None,
    ) -> None:
        self.device = device
        self.total_bytes = total_bytes
        self.held_bytes = held_bytes  # weights + KV pool, for the engine's life
        self.events = events
        self.faults = faults
        self.in_warmup = False  # true while the general warmup runs its shapes (`warmup()`)
        self.last_request: tuple[int, int] = (0, 0)  # (requested, free) of the last check

    @property
    def free_bytes(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.mem_get_info(self.device)[0]
        return self.total_bytes - self.held_bytes

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        """While the general warmup runs: `--inject warmup_oom` may fire."""
        self.in_warmup = True
        try:
            yield
        finally:
            self.in_warmup = False

    def check(self, requested: int, what: str, step: int, last_of_forward: bool = False) -> None:
        """Ask for `requested` activation bytes in engine step `step`. Raises torch.OutOfMemoryError when they
        do not fit (CPU), or when `--inject warmup_oom` is due (at the last allocation of a warmup forward: for
        spec-dec that is the draft pass, after the worker saved its attention metadata)."""
        free = self.free_bytes
        self.last_request = (requested, free)
        if self.in_warmup and last_of_forward and self.faults is not None:
            self.faults.check("warmup_oom", step)
        if self.device.type != "cuda" and requested > free:
            raise torch.OutOfMemoryError(
                f"CPU memory budget: {what} needs {requested / 2**20:.1f} MiB, {free / 2**20:.1f} MiB free "
                f"of {self.total_bytes / 2**20:.1f} MiB (weights and KV pool hold {self.held_bytes / 2**20:.1f} MiB)"
            )
