"""Teacher-forced scoring: the log-probability of every token of a given sequence after what precedes it, from one
prefill-shaped pass (chunked by the engine's max_num_tokens), with no decoding. What the sampled lossless gate's
baseline computes for a spec-dec run's outputs, and what `serve` answers for `echo` and
`prompt_logprobs`.

It runs the executor's model, KV pool and attention metadata between engine steps, in KV blocks of its own (no
cached prefix is taken, so it never writes into blocks a running request reads), and frees them after.

Where the output was sampled, each position also gets its exact place in the target's sampling distribution
(`SampledPosition`): the distribution is `target_probs`, the plain sampler's own function, over the whole
vocabulary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from ...errors import UserError
from ..config import SamplingParams
from ..interface import SampledPosition, ScoredOutput
from ..model.attn_metadata import BatchEntry
from ..sampling.keyed import filter_logits
from .executor import Executor

ROW_CHUNK = 256  # logits rows handled at once: [256, V] float32 is 50 MB for a 49k vocabulary
# A token outside the sampling support by less than this much logit noise (in nats, on the raw logits) is "edge",
# not a violation: the scoring pass and the decoding that chose the token run other shapes, whose float32 logits
# differ by ~1e-5 (bf16: pass the noise the control measured).
DEFAULT_SUPPORT_NOISE = 1e-3


@torch.inference_mode()
def teacher_force(
    executor: Executor,
    token_ids: Sequence[int],
    first: int,
    top_logprobs: int,
    max_tokens_per_forward: int,
    sampling: SamplingParams | None = None,
    support_noise: float = DEFAULT_SUPPORT_NOISE,
) -> ScoredOutput:
    """Scores token_ids[first:], each given all the tokens before it (first >= 1). `sampling`: the parameters they
    were sampled with, for the exact sampling view (None, or greedy: no view)."""
    if not 1 <= first < len(token_ids):
        raise ValueError(f"nothing to score: first={first} of {len(token_ids)} tokens")
    feed = list(token_ids[:-1])  # the last token is only ever a target
    request_id = ("teacher", id(feed))  # never collides with generate()'s integer ids
    kv_manager = executor.scheduler.kv
    if kv_manager.admit(request_id, feed, len(feed), reuse=False) is None:
        raise UserError(f"the KV cache cannot hold a {len(feed)}-token sequence for scoring; raise --device-memory")
    rows = _Rows(top_logprobs, None if sampling is None or sampling.greedy else sampling, support_noise)
    try:
        table = kv_manager.block_table(request_id)
        for start in range(0, len(feed), max_tokens_per_forward):
            end = min(start + max_tokens_per_forward, len(feed))
            meta = executor.meta.prepare([BatchEntry(request_id, start, end - start, table, True)])
            input_ids = torch.tensor(feed[start:end], dtype=torch.int64, device=meta.device)
            hidden, _ = executor.model(input_ids, meta, executor.kv)
            for lo in range(max(start, first - 1), end, ROW_CHUNK):  # row r predicts token r + 1
                hi = min(end, lo + ROW_CHUNK)
                logits = executor.model.compute_logits(hidden[lo - start : hi - start]).float().cpu()
                rows.add(logits, list(token_ids[lo + 1 : hi + 1]))
    finally:
        kv_manager.free(request_id)
    return rows.result()


class _Rows:
    """Accumulates the scoring of consecutive rows of logits."""

    def __init__(self, top_logprobs: int, sampling: SamplingParams | None, support_noise: float) -> None:
        self.k = top_logprobs
        self.sampling = sampling
        self.support_noise = support_noise
        self.logprobs: list[float] = []
        self.ranks: list[int] = []
        self.top: list[list[list]] = []
        self.sampled: list[SampledPosition] | None = [] if sampling is not None else None

    def add(self, logits: torch.Tensor, targets: list[int]) -> None:
        logp = torch.log_softmax(logits, dim=-1)
        index = torch.tensor(targets, dtype=torch.int64).unsqueeze(-1)
        own = logp.gather(-1, index)
        self.logprobs.extend(own.squeeze(-1).tolist())
        self.ranks.extend((1 + (logp > own).sum(dim=-1)).tolist())
        if self.k:
            values, ids = torch.topk(logp, self.k, dim=-1)
            self.top.extend(
                [[i, v] for i, v in zip(r_ids, r_vals, strict=True)]
                for r_ids, r_vals in zip(ids.tolist(), values.tolist(), strict=True)
            )
        else:
            self.top.extend([] for _ in targets)
        if self.sampled is not None:
            self.sampled.extend(sampling_view(logits, targets, self.sampling, self.support_noise))

    def result(self) -> ScoredOutput:
        return ScoredOutput(self.logprobs, self.top, self.sampled, ranks=self.ranks)


def sampling_view(
    logits: torch.Tensor, tokens: list[int], params: SamplingParams, support_noise: float = DEFAULT_SUPPORT_NOISE
) -> list[SampledPosition]:
    """Where each token falls in its row's sampling distribution (filter_logits, the plain sampler's function, then
    softmax): its probability, and the mass of the tokens ranked above it (probability descending, ties by id)."""
    probs = torch.softmax(filter_logits(logits, params), dim=-1)
    out = view_of_probs(probs, tokens)
    return [
        v
        if v.support == "in" or not _outside_beyond_noise(logits[r], tokens[r], params, support_noise)
        else replace(v, support="out")
        for r, v in enumerate(out)
    ]


def view_of_probs(probs: torch.Tensor, tokens: list[int]) -> list[SampledPosition]:
    """The view from the sampling distributions themselves ([n, V]): a token of probability 0 is "edge" here (only
    the logits can tell how far outside the support it is)."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    index = torch.tensor(tokens, dtype=torch.int64).unsqueeze(-1)
    rank = (order == index).int().argmax(dim=-1, keepdim=True)
    cumulative = sorted_probs.double().cumsum(dim=-1)
    own = probs.gather(-1, index).squeeze(-1).double()
    above = (cumulative.gather(-1, rank).squeeze(-1) - sorted_probs.gather(-1, rank).squeeze(-1).double()).clamp(0, 1)
    wide = probs.double()
    p2, p3 = (wide**2).sum(dim=-1).tolist(), (wide**3).sum(dim=-1).tolist()
    return [
        SampledPosition(
            prob=p, mass_above=mass if p > 0 else 1.0, support="in" if p > 0 else "edge", sum_p2=s2, sum_p3=s3
        )
        for p, mass, s2, s3 in zip(own.tolist(), above.tolist(), p2, p3, strict=True)
    ]


def _outside_beyond_noise(row: torch.Tensor, token: int, params: SamplingParams, noise: float) -> bool:
    """Whether a token outside the support would still be outside with every logit moved by up to `noise` nats: by
    top-k, its scaled logit is below the k-th by more than twice the noise; by top-p, the mass ranked above it
    (within the top k) reaches top_p by more than the noise can move it."""
    scaled = row.double() / params.temperature
    slack = 2 * noise / params.temperature  # two logits may move towards each other
    kept = torch.ones_like(scaled, dtype=torch.bool)
    if params.top_k and params.top_k < len(scaled):
        kth = float(torch.topk(scaled, params.top_k).values[-1])
        if float(scaled[token]) < kth - slack:
            return True
        kept = scaled >= min(kth, float(scaled[token]))
    if params.top_p < 1.0:
        probs = torch.softmax(scaled.masked_fill(~kept, float("-inf")), -1)
        above = float(probs[probs > probs[token]].sum())
        if above >= params.top_p * (1 + 2 * slack) + 2 * slack:  # masses move by a factor of at most e^(2 slack)
            return True
    return False
