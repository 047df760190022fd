"""The audited baseline side of a paired run.

A paired run decodes its plain twins inside the spec-dec engine (same prefill, same batches), so a bug in a shared
component (a draft layer writing into the target's KV, a capture altering the residual stream) changes twin and
spec-dec output alike, and the two agree while both are wrong. So a seeded random share of the documents is audited
on an engine with no spec worker (same weights and configuration, its own KV pool): any difference from the twin
means the twin is not a baseline.

How much: a quarter of the documents, at least two. Such a bug touches most requests (8 of 10 outputs on the embedded
default); one touching a fraction f escapes m audited documents with probability (1 - f)^m (m = 3: 0.008 at f = 0.8;
m = 25: under 0.001 at f = 0.25). Each audited document is a forward pass on a second engine, and the paired verdict
must stay within 1.45x of a plain one (`bench --verdict`).

Sharing: the audit's engine reuses the target's weights (no second copy) only while their `WeightSeal`, taken before
any request ran, still holds; else it loads its own. Its KV pool holds the longest audited document, no more.

A greedy document is audited by scoring the twin's tokens in one forward pass (each must be the plain argmax) and is
decoded only if that fails, so a forward-width rounding difference is never a false alarm; a sampled one is decoded
with its own parameters. In an exact dtype the audit stops at its first divergence. Otherwise every planned document
is audited and the divergent share is judged like the lossless gate's, against `path_noise`: how far the top-token
gaps move between a plain decode and a prefill-shaped pass of it on the audit's engine (the control measures none of
the twins' K + 1-wide verify shapes), measured where the audit looks, never on the twins, which may carry the bug.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...errors import UserError
from ...results.paired import first_divergence
from ...results.sample_record import SampleRecord
from ...workers.config import SamplingParams
from ...workers.interface import EngineIdentity, GenerateStats, GenerationOutput, InferenceEngine, Prompt, ScoreRequest
from ...workers.loading.tokenizer import encode_any
from .check import EXACT_DTYPES
from .margins import divergence_margin, gap_moves

AUDIT_SHARE = 0.25
AUDIT_MIN_DOCS = 2


def audit_size(n: int) -> int:
    """Documents audited out of the n a paired run evaluated (see the module docstring for why these)."""
    return min(n, max(AUDIT_MIN_DOCS, math.ceil(AUDIT_SHARE * n)))


def prompt_hash(prompt: Prompt) -> str:
    """lm-eval's `prompt_hash` of a sample (sha256 of its prompt string), which names the audited documents."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def audit_order(hashes: Sequence[str], seed: int) -> list[int]:
    """Indices of the prompts in the seeded random order the audit takes them in (a function of the prompts and
    the seed only, so a resumed or repeated run audits the same documents)."""
    return sorted(range(len(hashes)), key=lambda i: hashlib.sha256(f"twin-audit:{seed}:{hashes[i]}".encode()).digest())


class WeightSeal:
    """A fingerprint of a model's weights: per parameter, the sum of its elements' bits read as integers of their
    width, wrapping (any single changed element changes it: a change d with 0 < |d| < 2^bits is never 0 modulo
    2^bits). One pass on the parameter's device, in its own integer type: summing into int64 instead is a cast that
    costs 20-100x as much on CPU (measured: 30M float32 elements, 13 ms wrapping vs 2.3 s into int64). Taken before
    the spec worker is attached to the target and checked when the audit's engine would share those weights."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.sums = self._sums()

    @torch.inference_mode()
    def _sums(self) -> list[int]:
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        sums = []
        for p in self.model.parameters():
            bits = ints[p.element_size()]
            sums.append(int(p.detach().reshape(-1).view(bits).sum(dtype=bits)))
        return sums

    def intact(self) -> bool:
        """Whether every weight still holds what it held when the seal was taken."""
        return self._sums() == self.sums


def audit_tokens(prompt_lens: Sequence[int], twins: Sequence[GenerationOutput], params: Sequence) -> int:
    """KV positions the audit's engine needs: its longest document, scored (prompt + twin output) or, where the
    check fails, decoded again (prompt + the request's own output limit)."""
    return max(n + max(len(t.token_ids), s.max_new_tokens) for n, t, s in zip(prompt_lens, twins, params, strict=True))


class AuditedTwins:
    """The baseline engine of a paired run: `generate` answers every prompt with its twin's output (all in the
    twins' generation cache) and audits a seeded share of them on a plain engine built by `make_plain(tokens)` (only
    when the audit first needs it; `tokens`: the KV positions its longest audited document takes, `audit_tokens`).
    `record` says what was audited and the first divergence, if any."""

    def __init__(
        self,
        identity: EngineIdentity,
        tokenizer: Any,
        twins: Any,
        make_plain: Callable[[int], InferenceEngine],
        seed: int,
        dtype: str,
    ) -> None:
        self._identity = identity
        self._tokenizer = tokenizer
        self.twins = twins  # evals.pipeline.resume.GenerationCache of the baseline run
        self.make_plain = make_plain
        self.plain: InferenceEngine | None = None
        self._tokens = 0  # KV positions the audit's engine must hold (set when the planned documents are known)
        self._plain_tokens = 0  # what the built one holds
        self.seed = seed
        self.sequential = dtype in EXACT_DTYPES
        self.last_stats = GenerateStats()
        self.record: dict[str, Any] = {
            "share": AUDIT_SHARE,
            "seed": seed,
            "planned": 0,
            "audited": [],
            "divergences": [],
            "sequential": self.sequential,
            "elapsed_s": 0.0,
        }

    @property
    def identity(self) -> EngineIdentity:
        return self._identity

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_any(self._tokenizer, prompt)

    def generate(self, prompts: Sequence[Prompt], sampling=None, progress=None, sink=None) -> list[GenerationOutput]:
        params = list(sampling) if isinstance(sampling, Sequence) else [sampling] * len(prompts)
        outputs = [self.twins.get(p, s) for p, s in zip(prompts, params, strict=True)]
        missing = sum(o is None for o in outputs)
        if missing:
            raise RuntimeError(
                f"{missing} baseline output(s) of the paired run are missing from its cache (a bug: "
                "the twins' outputs should all be there)"
            )
        self._audit(prompts, params, outputs)
        return outputs  # type: ignore[return-value]

    def _audit(self, prompts: Sequence[Prompt], params: list, twins: list[GenerationOutput]) -> None:
        hashes = [prompt_hash(p) for p in prompts]
        # A sampled request is reproducible only with its own seed (the twin's default seed is its index in the
        # spec engine's call, which this side does not see): one without is left out, and counted.
        eligible = [i for i, s in enumerate(params) if s.greedy or s.seed is not None]
        self.record["not_auditable"] = self.record.get("not_auditable", 0) + len(prompts) - len(eligible)
        ranked = audit_order([hashes[i] for i in eligible], self.seed)
        order = [eligible[r] for r in ranked[: audit_size(len(eligible))]] if eligible else []
        self.record["planned"] += len(order)
        if order:
            lens = [len(self.encode(prompts[i])) for i in order]
            self._tokens = max(self._tokens, audit_tokens(lens, [twins[i] for i in order], [params[i] for i in order]))
        started = time.perf_counter()
        print(
            f"lossless gate: auditing the paired twins of {len(order)} of {len(prompts)} documents on an engine "
            "with no spec worker",
            file=sys.stderr,
        )
        for i in order:
            position, margins = self._divergence(prompts[i], params[i], twins[i])
            self.record["audited"].append(hashes[i])
            if position is not None:
                self.record["divergences"].append(
                    {"prompt_hash": hashes[i], "position": position, **({"margins": margins} if margins else {})}
                )
                if self.sequential:
                    break
        self.record["elapsed_s"] = round(self.record["elapsed_s"] + time.perf_counter() - started, 2)

    def _divergence(self, prompt: Prompt, params, twin: GenerationOutput) -> tuple[int | None, dict | None]:
        """Where a plain engine's output first differs from the twin's (None: identical), with the margins there
        (`margins`) when both carry logprobs."""
        plain = self._plain()
        if params.greedy and twin.token_ids:
            try:
                _, greedy = plain.score([(plain.encode(prompt), list(twin.token_ids))])[0]
            except UserError:  # prompt and output do not fit one scoring pass: decode instead
                greedy = False
            if greedy:
                return None, None
        decoded = plain.generate([prompt], [params])[0]
        if decoded.finish_reason == "error":
            raise RuntimeError(f"the twin audit's plain engine failed a request: {decoded.error}")
        margins = divergence_margin(_decoded(decoded), _decoded(twin))
        if not self.sequential:
            self._measure_path_noise(plain, decoded)
        return first_divergence(list(decoded.token_ids), list(twin.token_ids)), margins

    def _measure_path_noise(self, plain: InferenceEngine, decoded: GenerationOutput) -> None:
        """The gap moves between the plain engine's decode of a document and its prefill-shaped scoring of the same
        tokens (see the module docstring), added to the record's `path_noise`."""
        if not decoded.token_ids or not decoded.logprobs:
            return
        width = max((len(r[1]) for r in decoded.logprobs), default=0)
        request = ScoreRequest(tuple(decoded.prompt_token_ids), tuple(decoded.token_ids), SamplingParams(), width)
        (scored,) = plain.score_outputs([request])
        if scored.error is not None or len(scored.logprobs) != len(decoded.token_ids):
            return
        records = [[lp, top] for lp, top in zip(scored.logprobs, scored.top_logprobs, strict=True)]
        as_scored = SampleRecord(task="", doc_id=None, output_token_ids=list(decoded.token_ids), logprobs=records)
        moves = gap_moves(_decoded(decoded), as_scored)
        if moves:
            noise = self.record.setdefault("path_noise", {"num_noise_samples": 0, "max_gap_move": 0.0})
            noise["num_noise_samples"] += len(moves)
            noise["max_gap_move"] = round(max(noise["max_gap_move"], max(moves)), 5)

    def _plain(self) -> InferenceEngine:
        if self.plain is not None and self._tokens > self._plain_tokens:  # a later task's longer documents
            self.plain.close()
            self.plain = None
        if self.plain is None:
            self.plain, self._plain_tokens = self.make_plain(self._tokens), self._tokens
        return self.plain

    def score(self, pairs) -> list[tuple[float, bool]]:
        raise RuntimeError("the baseline of a paired run scores from cached generations only")

    def collect_events(self) -> list[dict[str, Any]]:
        return []

    def reported_acceptance(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        if self.plain is not None:
            self.plain.close()


def _decoded(output: GenerationOutput) -> SampleRecord:
    """An output as the record the margins are read from (its tokens and their logprobs; no document)."""
    return SampleRecord(task="", doc_id=None, output_token_ids=list(output.token_ids), logprobs=output.logprobs)


def audit_record(record: dict[str, Any], results: list) -> dict[str, Any]:
    """The audit as recorded in the runs' summaries and manifests: documents named by (task, doc id)."""
    docs = {s.prompt_hash: {"task": s.task, "doc_id": s.doc_id} for r in results for s in r.samples}
    unknown = {"task": None, "doc_id": None}
    audited = [docs.get(h, unknown) for h in record["audited"]]
    divergences = [
        {
            **docs.get(d["prompt_hash"], unknown),
            "position": d["position"],
            **({"margins": d["margins"]} if d.get("margins") else {}),
        }
        for d in record["divergences"]
    ]
    return {
        "share": record["share"],
        "seed": record["seed"],
        "planned": record["planned"],
        "audited": audited,
        "num_audited": len(audited),
        "divergences": divergences,
        "first_divergence": divergences[0] if divergences else None,
        "sequential": record["sequential"],
        "not_auditable": record.get("not_auditable", 0),
        "elapsed_s": record["elapsed_s"],
        **({"path_noise": record["path_noise"]} if record.get("path_noise") else {}),
    }
