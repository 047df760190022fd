"""What the run pipeline needs from any engine (docs/architecture.md, "Seams"): one `typing.Protocol` and the
values that cross it. Three engines implement it with the same signatures: the local `Engine`, the torchrun
`ShardedEngine`, and an engine reached over HTTP (an OpenAI-compatible endpoint). Callers never
tell them apart by their attributes: what differs between them is in `identity`.

A prompt is raw text, token ids, or chat messages ([{"role": ..., "content": ...}, ...]).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .config import MAX_LOGPROBS, SamplingParams

Prompt = str | list[int] | list[dict[str, str]]


@dataclass
class GenerationOutput:
    index: int  # position of its prompt in the generate() call
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str  # "eos" | "stop" | "length" | "error" | "aborted" (an error is never a normal answer)
    stats: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # Asked for (SamplingParams.logprobs): per output token [its log-probability, [[id or key, logprob], ...] of the
    # top alternatives]; an endpoint's token keys come from its own tokens (`client.logprobs`)
    logprobs: list[list] | None = None


@dataclass(frozen=True)
class ScoreRequest:
    """One output to score by teacher forcing (the sampled lossless gate's baseline): the
    target's log-probability of every token of `output_token_ids` after `prompt_token_ids` and what came before it,
    and where each token falls in the sampling distribution `sampling` defines there (temperature, top-k, top-p:
    what the output was sampled with). `top_logprobs`: how many raw alternatives to return per position."""

    prompt_token_ids: tuple[int, ...]
    output_token_ids: tuple[int, ...]
    sampling: SamplingParams
    top_logprobs: int = MAX_LOGPROBS


@dataclass(frozen=True)
class SampledPosition:
    """Where an emitted token falls in the target's sampling distribution at its position, known exactly (the engine
    had the whole distribution). Tokens are ranked by sampling probability, highest first, ties by id."""

    prob: float  # the token's probability in the sampling distribution (0 outside its support)
    mass_above: float  # the sampling probability of the tokens ranked above it
    # "in": inside the support; "out": outside it (a top-k / top-p violation) by more than the logit noise the
    # scorer was told to allow; "edge": outside it by less than that noise (the sides' logits may differ that much)
    support: str = "in"
    # sum of p^2 and of p^3 over the whole sampling distribution: the mean and variance of the probability of a
    # token drawn from it (the sampled gate's likelihood test); None where not computed
    sum_p2: float | None = None
    sum_p3: float | None = None


@dataclass
class ScoredOutput:
    """The teacher-forced scoring of one output. Per output token i: its raw log-probability (log-softmax of the
    logits: before temperature and filters, as engines report logprobs by default) and the raw top alternatives
    ([[id or token key, logprob], ...], best first; keys as in GenerationOutput.logprobs for an endpoint)."""

    logprobs: list[float]
    top_logprobs: list[list[list]]
    sampled: list[SampledPosition] | None = None  # exact positions (our engine); None: only the top alternatives
    error: str | None = None  # the output could not be scored (the lists are then empty)
    ranks: list[int] | None = None  # each scored token's rank among the raw logprobs (1: the most likely)
    # The scored tokens as the top alternatives name them (an endpoint that names tokens by text: their keys); None:
    # by their ids. `output_keys`: the output's own tokens named the same way, what `token_keys` must match.
    token_keys: list[int] | None = None
    # Positions whose top alternatives cannot be read as the top K (tokens that print alike merged into one entry
    # when keyed by text): no placement may rest on them
    unreadable: tuple[int, ...] = ()
    output_keys: list[int] | None = None

    def other_tokens(self, output_ids: Sequence[int]) -> int | None:
        """The first output position whose scored token is not the output's (None: all are; a scoring named by
        keys without the output's own keys cannot show it, so its first position counts)."""
        if self.token_keys is None:
            return None
        return OutputKeys(output_ids, self.output_keys).first_mismatch(self.token_keys, unknown_is_mismatch=True)


@dataclass(frozen=True)
class OutputKeys:
    """An output's tokens as a server may name them: by its text's key (`keys`), or by the id itself ("token_id:N"
    names the id). `keys` None: the ids are the only names known."""

    ids: Sequence[int]
    keys: list[int] | None = None

    def first_mismatch(self, named: Sequence[int | None], unknown_is_mismatch: bool = False) -> int | None:
        """The first position where `named` is neither the output's key nor its id (or a count that differs: the
        shorter length); None when every position names the output's token."""
        if self.keys is None and unknown_is_mismatch:
            return 0
        keys = self.keys if self.keys is not None else [None] * len(self.ids)
        for i, (name, token, key) in enumerate(zip(named, self.ids, keys, strict=False)):  # lengths: below
            if name is None or (name != int(token) and name != key):
                return i
        return None if len(named) == len(self.ids) else min(len(named), len(self.ids))


@dataclass
class GenerateStats:
    """What one `generate` call did, for progress lines and benchmarks."""

    num_requests: int = 0
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_steps: int = 0
    num_preemptions: int = 0
    elapsed_s: float = 0.0
    acceptance: dict[str, Any] | None = None  # spec-dec only: AcceptanceStats.to_dict() over all requests
    num_failed: int = 0  # requests that ended with finish reason "error"
    num_retries: int = 0
    running_score: float | None = None  # set by an evaluation layer for its progress line (0-100, so far)
    # When every request had its first token (prefill over), and the output tokens at that moment: the rest of
    # the call is pure decoding, which `decode_tokens` / `decode_s` measure within this one call.
    all_started_s: float | None = None
    tokens_when_all_started: int = 0

    @property
    def output_tokens_per_s(self) -> float:
        return self.num_output_tokens / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def decode_s(self) -> float:
        return self.elapsed_s - self.all_started_s if self.all_started_s is not None else 0.0

    @property
    def decode_tokens(self) -> int:
        return self.num_output_tokens - self.tokens_when_all_started if self.all_started_s is not None else 0


@dataclass(frozen=True)
class EngineIdentity:
    """Who produced a run's samples: what the manifest records, what picks a reference entry, and what the run key
    hashes (`config`: everything that shapes outputs)."""

    kind: str  # "local" | "torchrun" | "endpoint"
    model: str  # what was asked for: a preset, a path, or the served model id
    spec: str | None  # speculative-decoding algorithm ("eagle3"), None for plain decoding
    max_draft_len: int  # 0 without speculative decoding
    kv_cache: str | None  # "v1" | "v2"; None when the engine does not say (an endpoint)
    dtype: str  # as configured ("auto", "bfloat16", ...): the reference selection key
    resolved_dtype: str | None  # what ran ("float32"); exactness of the lossless gate depends on it
    tp_size: int
    world_size: int
    config: dict[str, Any]
    server: dict[str, Any] | None = None  # endpoint: base URL without credentials, server header, version


class OutputSink(Protocol):
    """Receives each finished output as soon as its request finishes (to persist work for resume).

    A torchrun engine hands a copy of the sink to every replica leader, which writes through `for_replica(rank)`:
    a sink must therefore pickle cheaply and open its own writer per replica."""

    def put(self, prompt: Prompt, sampling: SamplingParams, output: GenerationOutput) -> None: ...

    def for_replica(self, rank: int) -> OutputSink: ...


ProgressFn = Callable[[int, int, GenerateStats], None]  # (finished requests, all requests, stats so far)


class InferenceEngine(Protocol):
    """What the run pipeline and the lm-eval adapter use. `generate` answers one output per prompt, in prompt
    order; a request that could not be completed has finish reason "error" and an `error`, never an empty answer."""

    @property
    def identity(self) -> EngineIdentity: ...

    @property
    def tokenizer(self) -> Any: ...  # a Hugging Face tokenizer (chat template, loglikelihood splits)

    @property
    def last_stats(self) -> GenerateStats: ...

    def encode(self, prompt: Prompt) -> list[int]: ...

    def generate(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
    ) -> list[GenerationOutput]: ...

    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]: ...

    def score_outputs(self, requests: Sequence[ScoreRequest]) -> list[ScoredOutput]:
        """Teacher forcing: one prefill-shaped pass over prompt + output per request, no decoding; one result per
        request, in order (a request that cannot be scored has its `error`)."""
        ...

    def collect_events(self) -> list[dict[str, Any]]: ...  # every rank's events so far, in time order

    def reported_acceptance(self) -> dict[str, Any] | None:
        """Acceptance counters the engine itself reports over its life so far (our engine's own counters, or a
        server's metrics), as `AcceptanceStats.to_dict()` plus a "source" key naming where they came from; None
        when it reports none (plain decoding, or a server that exports no spec-decode metrics)."""
        ...

    def close(self) -> None: ...  # release ranks, connections, memory


class PairedEngine(InferenceEngine, Protocol):
    """Our own engines (local, torchrun) also decode a run and its lossless baseline from one prefill."""

    def generate_paired(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: ProgressFn | None = None,
        sink: OutputSink | None = None,
        plain_sink: OutputSink | None = None,
    ) -> tuple[list[GenerationOutput], list[GenerationOutput]]: ...  # (speculative, plain), in prompt order


@dataclass
class RequestDelta:
    """What one engine step did for one request: the tokens it got, and, once it finished, its output."""

    request_id: int
    new_token_ids: list[int]
    finished: bool = False
    output: GenerationOutput | None = None  # set when finished (finish reason "error" / "aborted" included)


class ServingEngine(InferenceEngine, Protocol):
    """An engine a server drives one step at a time (continuous batching across callers, like vLLM's engine core):
    a request added while others decode joins the running batch at the next step. Not thread-safe: one loop
    calls these."""

    def add_request(self, prompt: Prompt, sampling: SamplingParams | None = None) -> int: ...  # its request id

    def step(self) -> list[RequestDelta]: ...  # one engine step; deltas of the requests it touched

    def abort(self, request_id: int) -> bool: ...  # its KV blocks go back at once; False if it had finished

    @property
    def has_unfinished_requests(self) -> bool: ...

    def kv_usage(self) -> dict[str, int]: ...  # {"num_blocks", "free_blocks", "live_requests"} (summed over replicas)
