"""One evaluated document of a run, as a value: what samples.parquet holds, one row per record.

The evaluation builds them, the store writes and reads them (a record's `sealed_fields` are stored sealed), the
lossless gate and `compare` pair them. A row's columns are the fields below in
this order, then per filter its `extracted[FILTER]` and `correct[FILTER]`; a column this version does not name (an
older or newer writer's) is kept in `extra`, so a run recorded by any version reads, compares and reports.

A leaf: it imports nothing from the project."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_PER_FILTER = ("extracted", "correct")  # the columns a sample has once per filter: "extracted[strict-match]"


@dataclass(frozen=True)
class SampleRecord:
    task: str
    doc_id: Any  # an int for every shipped task; a task module may number its documents otherwise
    repeat: int = 0  # which of a document's samples (--repeats: `repeats`); 0 with one per document
    doc_hash: str | None = None
    prompt_hash: str | None = None
    target: Any = None
    output: str | None = None  # None for a sealed task (its output can quote its question)
    output_hash: str | None = None
    num_output_tokens: int | None = None
    output_token_ids: Sequence[int] | None = None  # what output identity and the first divergence are measured on
    logprobs: Sequence[Any] | None = None  # per output token [logprob, top alternatives, (token)]: lossless margins
    finish_reason: str | None = None  # "error" or "missing": a failed request, never a wrong answer
    error: str | None = None
    acceptance_length: float | None = None
    acceptance: Mapping[str, Any] | None = None  # the request's own counts (spec-dec)
    sealed_fields: Sequence[str] | None = None  # fields stored sealed (`seal`)
    # A sampled output's (temperature > 0) prompt and the parameters it was sampled with: what the sampled lossless
    # gate's baseline scores it on (`scoring`); None for a greedy one
    prompt_token_ids: Sequence[int] | None = None
    sampling: Mapping[str, Any] | None = None  # {"temperature", "top_k", "top_p"}
    # When its request was sent (its first attempt) and when its answer was done, in seconds since the epoch on the
    # evaluating machine's clock: what `drift` orders a task's documents by. None in runs recorded before these were
    # kept, and for a document with no engine output
    sent_at: float | None = None
    finished_at: float | None = None
    # Why logprobs that were asked for are not kept (a server sent NaN, +-inf, ...: the client refused them as
    # evidence); None when they are kept or were not asked for
    logprobs_problem: str | None = None
    extracted: Mapping[str, Any] = field(default_factory=dict)  # filter -> the answer it extracted
    correct: Mapping[str, Any] = field(default_factory=dict)  # filter -> whether that answer was right
    extra: Mapping[str, Any] = field(default_factory=dict)  # columns this version does not name

    def __post_init__(self) -> None:
        # A run mixing one-sample rows (no repeat column) with others reads back None for them: sample 0.
        object.__setattr__(self, "repeat", int(self.repeat or 0))
        for name in ("extracted", "correct", "extra"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def filters(self) -> list[str]:
        """The filters this sample was scored on (another task's filters in the same run are None here)."""
        return [f for f, v in self.correct.items() if v is not None]

    @property
    def score(self) -> float:
        """Its contribution to the task score: the fraction of its filters that marked it correct."""
        filters = self.filters
        return sum(bool(self.correct[f]) for f in filters) / len(filters) if filters else 0.0

    @property
    def failed(self) -> bool:
        """A request that could not be completed (or whose output went missing): never scored as an answer."""
        return self.finish_reason in ("error", "missing")

    def replace(self, **changes: Any) -> SampleRecord:
        return dataclasses.replace(self, **changes)

    def to_row(self) -> dict[str, Any]:
        """The record as one row of samples.parquet (nested values as they are: the store flattens them)."""
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _MAPPINGS}
        for name in _OMITTED_WHEN_NONE:
            if row[name] is None:
                del row[name]
        if not row["repeat"]:  # one sample per document: the rows as before repeats existed
            del row["repeat"]
        row = {
            k: list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, MappingProxyType) else v
            for k, v in row.items()
        }
        for name in dict.fromkeys([*self.extracted, *self.correct]):
            if name in self.extracted:
                row[f"extracted[{name}]"] = self.extracted[name]
            if name in self.correct:
                row[f"correct[{name}]"] = self.correct[name]
        return {**row, **self.extra}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SampleRecord:
        """A row as the store reads it (any version's); unknown columns go to `extra`."""
        known = {f.name for f in dataclasses.fields(cls)} - set(_MAPPINGS)
        values: dict[str, Any] = {k: row[k] for k in known if k in row}
        per_filter: dict[str, dict[str, Any]] = {name: {} for name in _PER_FILTER}
        extra = {}
        for key, value in row.items():
            if key in known:
                continue
            column, _, rest = key.partition("[")
            if column in per_filter and rest.endswith("]"):
                per_filter[column][rest[:-1]] = value
            else:
                extra[key] = value
        return cls(**values, **per_filter, extra=extra)


_MAPPINGS = ("extracted", "correct", "extra")
# Columns a row has only where they apply (a sealed sample's; a sampled output's prompt and parameters; the times of
# a request that was sent)
_OMITTED_WHEN_NONE = ("sealed_fields", "prompt_token_ids", "sampling", "sent_at", "finished_at", "logprobs_problem")
