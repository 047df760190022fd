"""SpecWorkerBase: the exception-safe template every spec-dec worker inherits.

A spec worker adds drafting to the engine step (the executor owns the step: target forward, verification,
commit); it never runs the target itself. The failure this product exists to catch: a forward aborts half-way (a
tolerated warmup OOM, a bad kernel) after the worker saved attention metadata for its draft loop; nobody restores
it, and every later step dies at the "never restored" assertion ("Sampling failed"). Here `forward()` is a template
method: it runs the subclass's `_forward_impl()` and, in `finally`, restores any saved metadata and applies any
pending KV rewind, emitting `spec_state_restored` when the cleanup path had to act. Subclasses cannot override
`forward`.

guard "none" keeps the historical behaviour (no cleanup) on purpose, so the harness can show it catches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..config import SpecConfig
from ..events import EventLog
from ..faults import FaultInjector
from ..kv_cache.manager import KVCacheManager
from ..loading.model_config import ModelConfig
from ..memory.budget import MemoryBudget
from ..model.attn_metadata import AttentionMetadata
from ..model.causal_lm import CausalLM
from ..model.layers.paged_kv import PagedKV
from ..model.parallel import TPGroup

if TYPE_CHECKING:
    from ..engine.scheduler import ScheduledRequest  # the engine hands these in; spec/ sits below it


@dataclass(frozen=True)
class DraftBuild:
    """What a method's draft-model builder gets from the engine (SpecMethod.build_draft)."""

    target: ModelConfig
    model_name: str  # the preset or the --model value (which shipped head "auto" means)
    spec: SpecConfig
    tp: TPGroup
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class SpecContext:
    """The engine's parts a spec worker may use, handed over as one value (SpecMethod.worker_class()(context))."""

    target: CausalLM
    draft: torch.nn.Module | None  # None for a method without a draft model
    kv: PagedKV
    kv_manager: KVCacheManager
    spec: SpecConfig
    events: EventLog
    tp: TPGroup
    memory: MemoryBudget
    faults: FaultInjector | None = None


@dataclass
class DraftInput:
    """What the step hands the spec worker after verification."""

    meta: AttentionMetadata
    input_ids: torch.Tensor  # [T] flattened: context prompts, then [last token, d_1..d_K] per generation
    items: list[ScheduledRequest]
    captured: list[torch.Tensor]  # the target's captured layers, [T, H] each
    emitted: list[list[int]]  # per item: accepted drafts + the target's token
    step: int

    @property
    def num_accepted(self) -> list[int | None]:
        """Accepted drafts per item (None for context requests, which carried no drafts)."""
        return [None if it.is_context else len(e) - 1 for it, e in zip(self.items, self.emitted, strict=True)]

    @property
    def num_computed(self) -> list[int]:
        """Per item: tokens whose KV (target and draft layer) is final after this step."""
        return [
            it.start + it.num_new_tokens if it.is_context else it.start + len(e)
            for it, e in zip(self.items, self.emitted, strict=True)
        ]


class SpecWorkerBase:
    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides forward(); implement _forward_impl() instead: forward() is the "
                "exception-safe template that restores spec-dec state"
            )

    capture_layers: tuple[int, ...] = ()  # target layers whose inputs the draft needs (the step captures them)

    def __init__(self, context: SpecContext) -> None:
        self.context = context
        self.kv_manager = context.kv_manager
        self.events = context.events
        self.memory = context.memory  # activation requests go through it
        self.guard = context.spec.guard
        self.faults = context.faults
        self.K = context.spec.max_draft_len
        self.step = 0  # the engine step being served (for events and fault injection)
        self._pending_rewinds: dict[int, int] = {}  # request id -> KV length to rewind to after drafting

    def forward(self, step: DraftInput) -> list[list[int]]:
        """The next K draft tokens of every item."""
        self.step = step.step
        leaked = step.meta.saved_fields
        if leaked:
            self.events.emit(
                "spec_state_leak",
                fields=list(leaked),
                detected_at=f"step {step.step} start",
                worker=type(self).__name__,
            )
        cause: BaseException | None = None
        try:
            return self._forward_impl(step)
        except BaseException as exc:
            cause = exc
            raise
        finally:
            if self.guard == "template":
                self._cleanup(step, cause)

    def _forward_impl(self, step: DraftInput) -> list[list[int]]:
        raise NotImplementedError

    # --- helpers for subclasses -----------------------------------------------------------------------

    def fault_point(self, point: str, arg: int | None = None) -> None:
        """Where `--inject` may raise (prepare_for_spec_dec, draft_step:K, restore)."""
        if self.faults is not None:
            self.faults.check(point, self.step, arg)

    def need_memory(self, requested: int, what: str, last_of_forward: bool = False) -> None:
        self.memory.check(requested, what, self.step, last_of_forward)

    def schedule_rewind(self, request_id: int, num_tokens: int) -> None:
        """KV past num_tokens is speculative; it is discarded after the draft loop (or by the cleanup)."""
        self._pending_rewinds[request_id] = num_tokens

    def apply_rewinds(self) -> list[int]:
        done = []
        for rid, n in self._pending_rewinds.items():
            if self.kv_manager.has(rid):
                self.kv_manager.rewind(rid, n)
                done.append(rid)
        self._pending_rewinds.clear()
        return done

    def _cleanup(self, step: DraftInput, cause: BaseException | None) -> None:
        fields = step.meta.restore_from_spec_dec()
        rewound = self.apply_rewinds()
        if fields or rewound:
            self.events.emit(
                "spec_state_restored",
                worker=type(self).__name__,
                fields=list(fields),
                rewound_requests=rewound,
                cause=f"{type(cause).__name__}: {cause}" if cause is not None else None,
                step=step.step,
            )
