"""What the tool knows about one server engine, in one value: how to recognise it, how to start it, how to read its
log, its metrics and its responses, and what to ask it for. One module per engine builds one `EngineProfile`; the
registry (`profiles`) lists them, and the readers of logs, metrics and responses take their tables from there."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .counters import Counters
from .signature import LogFormat

# Reads one response's own acceptance counts (our layout, `AcceptanceStats.to_dict()` plus "source"), or None when
# the response carries none in this engine's shape; the second argument is the run's declared K.
AcceptanceReader = Callable[[Mapping[str, Any], "int | None"], "dict[str, Any] | None"]

SCORES_BY_PROMPT_LOGPROBS = "prompt_logprobs"  # vLLM's extension: per prompt token, keyed by token id
SCORES_BY_ECHO = "echo"  # the completions API's echo with logprobs (audited, as ids or as text)


@dataclass(frozen=True)
class PrometheusNames:
    """The spec-decode counters an engine exports in Prometheus text (names without the `_total` suffix): draft
    cycles, draft tokens, accepted drafts (bonus excluded), and the per-position (accepted, drafted) counters with
    their label. Several names for one number: the first present is read (a re-exporter's prefix). exporter: whose
    names these are, as a run's acceptance source says ("vllm names (Prometheus)": our serve exports vLLM's)."""

    exporter: str
    cycles: tuple[str, ...] = ()
    draft_tokens: tuple[str, ...] = ()
    accepted: tuple[str, ...] = ()
    accepted_per_pos: tuple[str, ...] = ()
    drafted_per_pos: tuple[str, ...] = ()
    position_label: str = "position"

    @property
    def counted(self) -> tuple[str, ...]:
        """The names whose presence says this exporter wrote the page."""
        return self.cycles + self.draft_tokens + self.accepted + self.accepted_per_pos


@dataclass(frozen=True)
class EngineProfile:
    """One server engine.

    name: what `--engine-profile` takes (and its log table's name). log: its log table (signatures, line tags,
    markers). owners: the `owned_by` of its /v1/models cards and its Server header's product, lower case: what names
    this engine. loose_owners: an `owned_by` it says that other servers may say too (llama-cpp-python's "me"): it
    picks the request defaults, never the log table. prometheus: its spec-decode counters, when it exports them.
    kv_gauges: its KV-cache usage gauges (fraction in use), first present wins. read_acceptance: its per-response
    acceptance reader, when responses carry counts; response_keys / choice_keys: the keys of a response (and of each
    of its choices) it reads, all that a run keeps of a response to tally it. read_json_metrics /
    read_json_kv_usage: its readers of a metrics page in JSON (parsed), each None for a page of another shape.
    names_tokens_by_id: takes vLLM's `return_tokens_as_token_ids` and `prompt_logprobs` (logprobs then name token
    ids). returns_token_ids: answers `return_token_ids` with the answer's own token ids. neutral_sampling: fields a
    sampled request states so that the engine's own filtering defaults do not narrow the distribution. scores: how
    it scores a given text (teacher forcing): SCORES_BY_PROMPT_LOGPROBS or SCORES_BY_ECHO. launch: a note on how it
    is started here, when the project starts it (its command builder lives in the same module)."""

    name: str
    log: LogFormat
    owners: tuple[str, ...]
    loose_owners: tuple[str, ...] = ()
    prometheus: PrometheusNames | None = None
    kv_gauges: tuple[str, ...] = ()
    read_acceptance: AcceptanceReader | None = None
    response_keys: tuple[str, ...] = ()
    choice_keys: tuple[str, ...] = ()
    read_json_metrics: Callable[[Any], Counters | None] | None = None
    read_json_kv_usage: Callable[[Any], tuple[str, float] | None] | None = None
    names_tokens_by_id: bool = False
    returns_token_ids: bool = False
    neutral_sampling: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    scores: str = SCORES_BY_ECHO
    launch: str | None = None

    def __post_init__(self) -> None:
        if self.name != self.log.name:
            raise ValueError(f"profile {self.name!r}: its log table is named {self.log.name!r}")
        if self.scores not in (SCORES_BY_PROMPT_LOGPROBS, SCORES_BY_ECHO):
            raise ValueError(f"profile {self.name!r}: unknown scoring {self.scores!r}")
