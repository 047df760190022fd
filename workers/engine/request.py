"""A request's state as the scheduler sees it: tokens, progress through the KV cache, and why it finished."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import torch

from ..config import SamplingParams
from ..spec.metrics import AcceptanceStats


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    request_id: int  # unique over the engine's life (warmup requests are negative)
    prompt_token_ids: list[int]
    sampling: SamplingParams
    max_new_tokens: int  # sampling.max_new_tokens, clamped to the engine's max_seq_len
    seed: int | None = None  # sampling seed (None: greedy); draws are keyed by it and the position (`sampling`)
    # --spec-sampling rejection: the request's own random stream, seeded by `seed` (the rejection sampler); None:
    # the coupled sampler's keyed draws (or greedy)
    stream: torch.Generator | None = field(default=None, repr=False)
    index: int = 0  # position of the prompt in its generate() call (what outputs are ordered and seeded by)
    speculative: bool = True  # carries drafts in a spec-dec engine (False: the plain twin of a pair)
    # Paired decoding: a speculative request and its plain twin decode from one prefill. The twin waits, parked
    # outside the scheduler's queues, until its speculative partner's prefill is done; then it forks from it.
    twin: Request | None = field(default=None, repr=False)
    parked: bool = False
    output_token_ids: list[int] = field(default_factory=list)
    # sampling.logprobs set: one [logprob, top alternatives] record per output token (the keyed sampler module)
    output_logprobs: list[list] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV is in the cache
    num_cached_tokens: int = 0  # prompt tokens reused from cached blocks at the last admission
    finish_reason: str | None = None  # "eos" | "stop" | "length" | "error" | "aborted"
    error: str | None = None  # why a request failed (finish_reason "error")
    num_retries: int = 0
    text: str = ""
    draft_tokens: list[int] = field(default_factory=list)  # K proposals for the next step (spec-dec)
    draft_probs: torch.Tensor | None = field(default=None, repr=False)  # rejection-q: q of each draft, [K, V]
    spec_stats: AcceptanceStats | None = None
    num_steps: int = 0
    num_preemptions: int = 0
    arrival_time: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_token_ids) + self.max_new_tokens

    @property
    def is_warmup(self) -> bool:
        """A dummy request of the general warmup (negative id): never counted in metrics."""
        return self.request_id < 0

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
