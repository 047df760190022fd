"""SpecWorkerBase: the exception-safe template every spec-dec worker inherits.

A spec worker adds drafting to the engine step: it takes what the step verified (`DraftInput`) and returns the next
drafts (`Drafts`: tokens, and q where they were sampled). The executor owns the rest of the step: target forward,
verification, commit, and the rewind of the KV the target wrote for rejected drafts. The failure this product exists
to catch: a forward aborts half-way (a tolerated warmup OOM, a bad kernel) after the worker saved attention metadata
for its draft loop; nobody restores it, and every later step dies at the "never restored" assertion ("Sampling
failed"). Here `forward()` is a template method: it runs the subclass's `_forward_impl()` and, in `finally`,
restores any saved metadata and, when drafting raised, discards the step's speculative KV (the executor's rewind,
handed in with the step), emitting `spec_state_restored` when the cleanup path had to act. Subclasses cannot
override `forward`.

guard "none" keeps the historical behaviour (no cleanup) on purpose, so the harness can show it catches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..config import SpecConfig
from ..events import EventLog
from ..faults import FaultInjector
from ..loading.model_config import ModelConfig
from ..memory.budget import MemoryBudget
from ..model.attn_metadata import AttentionMetadata
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
class DraftParts:
    """What a method with a draft model drafts with: the draft model, the target's token embedding (shared, as
    Eagle3's head reads the target's embeddings of the tokens it drafts from), the target's shape (its layer count
    places the draft's KV layer after the target's; its vocabulary sizes q), the KV pool the draft layer writes and
    the TP group whose rank 0 decides the drafts."""

    model: torch.nn.Module
    embed: torch.nn.Module
    target: ModelConfig
    kv: PagedKV
    tp: TPGroup


@dataclass(frozen=True)
class SpecContext:
    """What a spec worker gets from the engine, as one value (SpecMethod.worker_class()(context)): its options, where
    its events go, the memory budget its activations are asked of, the fault injector its fault points ask, and the
    draft model's parts (None for a method without one). Nothing of the KV bookkeeping: the executor rewinds."""

    spec: SpecConfig
    events: EventLog
    memory: MemoryBudget
    faults: FaultInjector | None = None
    drafter: DraftParts | None = None


@dataclass(frozen=True)
class Drafts:
    """What a spec worker proposes in one step: K tokens per scheduled item and, where they were drawn from the
    draft's distribution (`--spec-sampling rejection-q` at temperature > 0), each item's q ([K, V], None where the
    item's drafts are greedy; `probs` None: no item of the step drew its drafts). The executor hands both to the
    requests when it commits the step."""

    tokens: list[list[int]]
    probs: tuple[torch.Tensor | None, ...] | None = None

    @classmethod
    def of(cls, proposed: Drafts | list[list[int]]) -> Drafts:
        """A worker's proposal as Drafts: a worker that draws no q may return just the token lists."""
        return proposed if isinstance(proposed, Drafts) else cls(proposed)


@dataclass
class DraftInput:
    """What the step hands the spec worker after verification."""

    meta: AttentionMetadata
    input_ids: torch.Tensor  # [T] flattened: context prompts, then [last token, d_1..d_K] per generation
    items: list[ScheduledRequest]
    captured: list[torch.Tensor]  # the target's captured layers, [T, H] each
    emitted: list[list[int]]  # per item: accepted drafts + the target's token
    step: int
    # The executor's discard of the KV past what this step verified (returns the requests it rewound): the executor
    # calls it once drafting returns, the template's cleanup when drafting raised.
    rewind: Callable[[], list[int]] = field(default=lambda: [], repr=False)

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
        self.events = context.events
        self.memory = context.memory  # activation requests go through it
        self.guard = context.spec.guard
        self.faults = context.faults
        self.K = context.spec.max_draft_len
        self.step = 0  # the engine step being served (for events and fault injection)

    def forward(self, step: DraftInput) -> Drafts:
        """The next K draft tokens of every item (and q where they were sampled)."""
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
            return Drafts.of(self._forward_impl(step))
        except BaseException as exc:
            cause = exc
            raise
        finally:
            if self.guard == "template":
                self._cleanup(step, cause)

    def _forward_impl(self, step: DraftInput) -> Drafts | list[list[int]]:
        raise NotImplementedError

    # --- helpers for subclasses -----------------------------------------------------------------------

    def fault_point(self, point: str, arg: int | None = None) -> None:
        """Where `--inject` may raise (prepare_for_spec_dec, draft_step:K, restore)."""
        if self.faults is not None:
            self.faults.check(point, self.step, arg)

    def need_memory(self, requested: int, what: str, last_of_forward: bool = False) -> None:
        self.memory.check(requested, what, self.step, last_of_forward)

    def _cleanup(self, step: DraftInput, cause: BaseException | None) -> None:
        """Restore any metadata left saved; when drafting raised, discard the step's speculative KV as well (once
        drafting returns, the executor does)."""
        fields = step.meta.restore_from_spec_dec()
        rewound = step.rewind() if cause is not None else []
        if fields or rewound:
            self.events.emit(
                "spec_state_restored",
                worker=type(self).__name__,
                fields=list(fields),
                rewound_requests=rewound,
                cause=f"{type(cause).__name__}: {cause}" if cause is not None else None,
                step=step.step,
            )
