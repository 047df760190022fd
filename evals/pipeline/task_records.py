"""A task's per-document records (`SampleRecord`) from lm-eval's logged samples and the engine outputs the
evaluation recorded (`OutputRecord`), and the cross-check of a family's own filters against lm-eval's
on every sample. The task's family says what a record keeps: a sealed family's (GPQA's) hold no question, choice or
output text, only ids, hashes, what its extraction may keep (a letter) and correctness."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ...results.sample_record import SampleRecord
from ...workers.config import SamplingParams
from ...workers.interface import GenerationOutput
from ..tasks.registry import TaskSpec
from .lm_recording import OutputRecord

# A request's acceptance counts as a sample keeps them (the report's AL by output length)
COUNTS = ("num_cycles", "num_draft_tokens", "num_accepted_drafts", "accepted_per_position", "max_draft_len")
# what a sealed family's output (and a sampled one's prompt) could be read back from
SEALED_FIELDS = ("output_token_ids", "logprobs", "prompt_token_ids")


@dataclass(frozen=True)
class TaskRecords:
    samples: list[SampleRecord]  # one per evaluated document, by doc id
    acceptance: list[dict[str, Any]]  # each request's acceptance counters (spec-dec), in the samples' order
    own_extraction: dict[tuple[Any, str], tuple[Any, bool]] = field(default_factory=dict)  # (doc, filter) -> ours


def task_records(
    spec: TaskSpec, entries: list[dict[str, Any]], outputs: OutputRecord, task: Any = None, repeats: int = 1
) -> TaskRecords:
    """One record per document, whatever lm-eval's per-(doc, filter) layout; documents an early stop skipped are
    left out. repeats > 1: one record per sample of each document (repeat 0 as lm-eval scored it, the others by the
    task's filters and metric on their own; `task` is the loaded lm-eval Task)."""
    family = spec.family
    fields: dict[int, dict[str, Any]] = {}
    extracted: dict[int, dict[str, Any]] = {}
    correct: dict[int, dict[str, bool]] = {}
    ours: dict[tuple[Any, str], tuple[Any, bool]] = {}
    acceptance: dict[int, dict[str, Any]] = {}
    for entry in entries:
        doc_id = int(entry["doc_id"])
        if outputs.is_skipped(spec.lm_eval_name, doc_id):
            continue  # an early-stopped task never evaluated this document
        filt = entry.get("filter", "none")
        target = str(entry["target"])  # per entry: lm-eval lists each document once per filter
        if doc_id not in fields:
            out = outputs.get(spec.lm_eval_name, doc_id)
            fields[doc_id] = _fields(spec, entry, target, out, outputs.sampling(spec.lm_eval_name, doc_id))
            extracted[doc_id], correct[doc_id] = {}, {}
            counters = out.stats.get("acceptance") if out is not None else None
            if counters:
                acceptance[doc_id] = counters
        resp = entry["filtered_resps"][0] if isinstance(entry["filtered_resps"], list) else entry["filtered_resps"]
        extracted[doc_id][filt] = family.extracted(str(resp))
        correct[doc_id][filt] = bool(entry.get("exact_match", 0.0))
        # The family's own filters on the same generation: must agree with lm-eval's (filter_mismatches)
        output = fields[doc_id]["output"]
        own = family.own_extraction(output, filt, target) if output is not None else None
        if own is not None:
            ours[(doc_id, filt)] = tuple(own)
    docs = sorted(fields)
    samples = [SampleRecord(**fields[d], extracted=extracted[d], correct=correct[d]) for d in docs]
    counters = [acceptance[d] for d in docs if d in acceptance]
    if repeats > 1:
        more = _other_repeats(spec, entries, outputs, task, repeats, set(docs))
        samples = sorted(samples + [s for s, _ in more], key=lambda s: (s.doc_id, s.repeat))
        counters += [c for _, c in more if c]
    return TaskRecords(samples, counters, ours)


def _other_repeats(
    spec: TaskSpec, entries: list[dict[str, Any]], outputs: OutputRecord, task: Any, repeats: int, docs: set[int]
) -> list[tuple[SampleRecord, dict[str, Any] | None]]:
    """Samples 1..repeats-1 of each document, each scored on its own (lm-eval's take_first kept only sample 0)."""
    from ..tasks.scoring import score_each

    if task is None:
        raise RuntimeError(f"{spec.name}: several samples per document need the loaded task to score them")
    first = {}
    for entry in entries:
        first.setdefault(int(entry["doc_id"]), entry)
    out = []
    for doc_id in sorted(docs):
        entry = first[doc_id]
        target = str(entry["target"])
        got = [(r, outputs.get(spec.lm_eval_name, doc_id, r)) for r in range(1, repeats)]
        scored = score_each(task, entry["doc"], [o.text if o is not None else "" for _, o in got])
        for (r, o), per_filter in zip(got, scored, strict=True):
            sampling = outputs.sampling(spec.lm_eval_name, doc_id, r)
            record = SampleRecord(
                **{**_fields(spec, entry, target, o, sampling), "repeat": r},
                extracted={f: spec.family.extracted(x) for f, (x, _) in per_filter.items()},
                correct={f: ok for f, (_, ok) in per_filter.items()},
            )
            out.append((record, (o.stats.get("acceptance") or None) if o is not None else None))
    return out


def _fields(
    spec: TaskSpec,
    entry: dict[str, Any],
    target: str,
    out: GenerationOutput | None,
    sampling: SamplingParams | None = None,
) -> dict[str, Any]:
    family = spec.family
    counters = (out.stats.get("acceptance") or None) if out is not None else None
    sampled = out is not None and sampling is not None and not sampling.greedy
    return {
        "task": spec.name,
        "doc_id": int(entry["doc_id"]),
        "doc_hash": entry.get("doc_hash"),
        "prompt_hash": entry.get("prompt_hash"),
        "target": family.target(target),
        "output": None if family.sealed else (out.text if out is not None else ""),
        "output_hash": _hash(",".join(map(str, out.token_ids))) if out is not None else None,
        "num_output_tokens": len(out.token_ids) if out is not None else 0,
        "output_token_ids": list(out.token_ids) if out is not None else [],
        "logprobs": out.logprobs if out is not None else None,  # numbers and ids only
        "finish_reason": out.finish_reason if out is not None else "missing",
        "error": out.error if out is not None else "no engine output for this document",
        "acceptance_length": (counters or {}).get("acceptance_length"),
        "acceptance": {k: counters[k] for k in COUNTS} if counters else None,
        "sealed_fields": list(SEALED_FIELDS) if family.sealed else None,  # its output can quote the question
        # what the sampled lossless gate's baseline scores a sampled output on (`scoring`)
        "prompt_token_ids": list(out.prompt_token_ids) if sampled else None,
        "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p}
        if sampled
        else None,
        # when the request was sent and answered (the engine's wall clock; `drift` orders documents by them)
        "sent_at": _time(out, "sent_at"),
        "finished_at": _time(out, "finished_at"),
        # logprobs asked for but refused as evidence (non-finite values): a gate names them, not "too few"
        "logprobs_problem": out.stats.get("logprobs_unusable") if out is not None else None,
    }


def _time(out: GenerationOutput | None, name: str) -> float | None:
    value = out.stats.get(name) if out is not None else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def filter_mismatches(spec: TaskSpec, records: TaskRecords) -> list[dict[str, Any]]:
    """Where a family's own filters (GSM8K's) disagree with lm-eval's on a sample: recorded in the result and
    reported, never silently fixed (lm-eval's value is the one scored)."""
    out = []
    for s in records.samples:
        if s.repeat:  # the family's own extraction is made on sample 0, the one lm-eval's filters kept
            continue
        for f in spec.family.filters:
            ours = records.own_extraction.get((s.doc_id, f))
            theirs = (s.extracted.get(f), s.correct.get(f))
            if ours is not None and ours != theirs:
                out.append({"doc_id": s.doc_id, "filter": f, "ours": list(ours), "lm_eval": list(theirs)})
    return out


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
