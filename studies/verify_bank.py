"""A bank of real verify steps, for the sampled gate's power simulation (lossless_sampled): what verification read
in a spec-dec run of the real engine (the target's logits rows and the draft head's drafts), recorded once, then
replayed through the real rejection sampler with fresh random streams and any planted rule.

The model, stated: each recorded step keeps its rows' contexts from the recorded run (a replay that rejects earlier
than the recording did still reads the recorded rows: each emitted token is judged against the distribution of its
own row, which is what the gate sees), and each row is truncated to the union of the rows' `keep` most likely tokens
(the rest of the vocabulary holds well under 1e-3 of the mass at these temperatures; tokens outside never come up).
Positions per replay: the recorded run's, about 10 GSM8K documents x 256 tokens for the default run's size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..evals.lossless.sampled import SampledSample
from ..stats.rejection_draws import DraftVerdict, residual_placement
from ..workers.config import EngineConfig, SamplingParams, SpecConfig
from ..workers.interface import SampledPosition, ScoredOutput
from ..workers.planted.rejection import RejectionRule, ruled_rejection_verify
from ..workers.sampling.rejection import request_stream

KEEP = 256  # most likely tokens kept per row


@dataclass(frozen=True)
class BankStep:
    """One request's verification in one engine step: rows [1 + K, U] of raw logits over `ids` (U vocabulary ids),
    the drafts as indexes into `ids`, and which document (request) it belongs to."""

    doc: int
    ids: np.ndarray
    logits: np.ndarray
    drafts: tuple[int, ...]


class BankRecorder:
    """A verify tap (the executor's `tap_verify`) keeping every sampled request's rows."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.steps: list[BankStep] = []

    def record(self, items, logits: torch.Tensor) -> None:
        row = 0
        for item in items:
            n = 1 if item.is_context else item.num_new_tokens
            req = item.request
            if not req.sampling.greedy and not req.is_warmup:
                rows = logits[row : row + n].float().cpu()
                drafts = [] if item.is_context else list(req.draft_tokens[: n - 1])
                top = torch.topk(rows, min(self.keep, rows.shape[-1]), dim=-1).indices.flatten()
                ids = torch.unique(torch.cat([top, torch.tensor(drafts, dtype=torch.int64)]))
                local = {int(t): i for i, t in enumerate(ids.tolist())}
                local_drafts = tuple(local[d] for d in drafts)
                self.steps.append(BankStep(req.index, ids.numpy(), rows[:, ids].numpy(), local_drafts))
            row += n


def record_bank(
    prompts: Sequence[str], sampling: SamplingParams, model: str = "smollm2", draft_len: int = 3, keep: int = KEEP
) -> list[BankStep]:
    """Decode the prompts with Eagle3 and rejection sampling (the recording's own randomness is irrelevant: only the
    rows and drafts are kept) and return every verify step of theirs."""
    from ..workers.engine.engine import Engine

    config = EngineConfig(
        model=model, spec=SpecConfig(max_draft_len=draft_len, sampling="rejection"), max_batch_size=len(prompts)
    )
    engine = Engine.build(config)
    recorder = BankRecorder(keep)
    with engine.executor.tap_verify(recorder):
        engine.generate(list(prompts), sampling)
    return recorder.steps


def save_bank(steps: Sequence[BankStep], path: str | Path) -> None:
    arrays = {}
    for i, s in enumerate(steps):
        arrays[f"ids{i}"], arrays[f"logits{i}"] = s.ids, s.logits
        arrays[f"meta{i}"] = np.array([s.doc, *s.drafts], dtype=np.int64)
    np.savez_compressed(path, **arrays)


def load_bank(path: str | Path) -> list[BankStep]:
    with np.load(path) as data:
        n = sum(1 for k in data.files if k.startswith("ids"))
        return [
            BankStep(
                int(data[f"meta{i}"][0]),
                data[f"ids{i}"],
                data[f"logits{i}"],
                tuple(int(d) for d in data[f"meta{i}"][1:]),
            )
            for i in range(n)
        ]


class _Views:
    """Each bank row's sampling distribution under one set of parameters, as the exact view needs it: every token's
    probability and the mass ranked above it (the plain sampler's function, via the teacher-forcing view)."""

    def __init__(self, steps: Sequence[BankStep], params: SamplingParams) -> None:
        from ..workers.sampling.keyed import target_probs

        self.prob, self.above, self.sums = [], [], []
        for step in steps:
            probs = target_probs(torch.from_numpy(step.logits), params)
            ordered, order = torch.sort(probs, dim=-1, descending=True, stable=True)
            above = (ordered.double().cumsum(-1) - ordered.double()).clamp(0, 1)
            wide = probs.double()
            self.prob.append(wide.numpy())
            self.above.append(torch.empty_like(above).scatter_(-1, order, above).numpy())
            self.sums.append(torch.stack([(wide**2).sum(-1), (wide**3).sum(-1)], -1).numpy())

    def position(self, step: int, row: int, token: int) -> SampledPosition:
        p = float(self.prob[step][row, token])
        p2, p3 = (float(x) for x in self.sums[step][row])
        return SampledPosition(p, float(self.above[step][row, token]), "in" if p > 0 else "out", p2, p3)


def replay(
    steps: Sequence[BankStep],
    params: SamplingParams,
    rule: RejectionRule,
    seed: int,
    views: _Views | None = None,
    drafts_known: bool = True,
) -> list[SampledSample]:
    """One simulated run: every step verified again by the rejection sampler with `rule`, each document with its own
    stream; the emitted tokens placed exactly in the plain sampling distribution of their rows, and (`drafts_known`,
    our engine's view) each verified draft's accept decision and, at a rejection, the emitted token's place in the
    residual (the drafts are one-hot: accepted with probability p(d), the residual is p without d)."""
    views = views or _Views(steps, params)
    streams: dict[int, torch.Generator] = {}
    placed: dict[int, tuple[list[int], list[SampledPosition], list[DraftVerdict]]] = {}
    for i, step in enumerate(steps):
        stream = streams.setdefault(step.doc, request_stream(seed * 100_003 + step.doc))
        emitted = ruled_rejection_verify(torch.from_numpy(step.logits), list(step.drafts), params, stream, None, rule)
        tokens, positions, verdicts = placed.setdefault(step.doc, ([], [], []))
        for row, token in enumerate(emitted):
            tokens.append(int(step.ids[token]))
            positions.append(views.position(i, row, token))
        verdicts.extend(draft_verdicts(views.prob[i], step.drafts, emitted))
    return [
        SampledSample(
            doc,
            tokens,
            params,
            ScoredOutput([0.0] * len(tokens), [[] for _ in tokens], positions),
            drafts=verdicts if drafts_known else None,
        )
        for doc, (tokens, positions, verdicts) in sorted(placed.items())
    ]


def draft_verdicts(probs: np.ndarray, drafts: Sequence[int], emitted: Sequence[int]) -> list[DraftVerdict]:
    """What one verify step says about its one-hot drafts: `emitted` is the accepted drafts, then the token at the
    first rejection (or the bonus token after all were accepted); probs [K+1, V] the plain sampling distributions."""
    accepted = len(emitted) - 1
    out = [DraftVerdict(float(probs[row, d]), True) for row, d in enumerate(drafts[:accepted])]
    if accepted < len(drafts):
        d = drafts[accepted]
        placed = residual_placement(probs[accepted], d, emitted[-1])
        out.append(DraftVerdict(float(probs[accepted, d]), False, placed))
    return out
