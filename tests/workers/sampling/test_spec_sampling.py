"""Temperature sampling with spec-dec draws from the same distribution as plain sampling.

Test: 1,500 independent samples of the first three generated tokens (temperature 1, top-k 4, tiny model) from
plain decoding and 1,500 from Eagle3 with rejection sampling, compared with a chi-square test of homogeneity at
significance level alpha = 0.01 (so a correct sampler fails this test with probability 1%; the seeds are fixed,
so the outcome is deterministic). The draft proposes the target's greedy continuation, accepted at about a tenth
of the draft positions, so both the accept and the resample paths run. A negative control (a lossy verifier that
accepts every draft) must be rejected by the same test, which shows the test has power."""

from __future__ import annotations

from collections import Counter

import pytest
import specdec_eval.workers.sampling.verify as verify_module
import torch
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.sampling.keyed import draw_generator, target_probs
from specdec_eval.workers.sampling.verify import greedy_verify

from ...conftest import make_engine
from ...spec_helpers import OracleWorker, clone_worker

ALPHA = 0.01
N = 1500
NEW = 3
PROMPT = "Once upon a time, in a village at the edge of a forest,"


def chi_square_homogeneity(a: Counter, b: Counter, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Two-sample chi-square test on category counts; sparse categories are pooled into one."""
    total_a, total_b = sum(a.values()), sum(b.values())
    cats = sorted(set(a) | set(b))
    pooled_a = pooled_b = 0
    rows = []
    for c in cats:
        n = a[c] + b[c]
        if n * min(total_a, total_b) / (total_a + total_b) < min_expected:
            pooled_a, pooled_b = pooled_a + a[c], pooled_b + b[c]
        else:
            rows.append((a[c], b[c]))
    if pooled_a + pooled_b:
        rows.append((pooled_a, pooled_b))
    stat = 0.0
    for oa, ob in rows:
        n = oa + ob
        ea, eb = n * total_a / (total_a + total_b), n * total_b / (total_a + total_b)
        stat += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
    df = len(rows) - 1
    p = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2.0)))
    return stat, df, p


def _samples(engine, seed0: int) -> Counter:
    params = [
        SamplingParams(max_new_tokens=NEW, temperature=1.0, top_k=4, ignore_eos=True, seed=seed0 + i) for i in range(N)
    ]
    return Counter(tuple(o.token_ids) for o in engine.generate([PROMPT] * N, params))


@pytest.fixture(scope="module")
def plain_samples(tiny):
    return _samples(make_engine(tiny, max_batch_size=512), seed0=0)


def _spec_engine(tiny):
    engine = make_engine(tiny, max_batch_size=512, spec=SpecConfig(max_draft_len=2))
    greedy = engine.generate([PROMPT], SamplingParams(max_new_tokens=NEW + 4, ignore_eos=True))[0].token_ids
    worker = clone_worker(OracleWorker, engine)
    worker.reference = {i: greedy for i in range(N)}
    return engine


def test_rejection_sampling_matches_plain_distribution(tiny, plain_samples):
    engine = _spec_engine(tiny)
    spec = _samples(engine, seed0=10_000)
    stat, df, p = chi_square_homogeneity(plain_samples, spec)
    acc = engine.last_stats.acceptance
    assert 0.05 < acc["acceptance_rate"] < 0.95, acc  # both accept and resample paths ran
    assert df >= 5
    assert p > ALPHA, f"spec-dec sampling differs from plain sampling: chi2={stat:.1f}, df={df}, p={p:.2e}"


def test_a_lossy_verifier_is_caught(tiny, plain_samples, monkeypatch):
    def accept_everything(logits, drafts, params, seed, position=0, *rejection_args):
        if params.greedy:
            return greedy_verify(logits, drafts)
        bonus = target_probs(logits[len(drafts)].cpu(), params)  # right distribution, wrong acceptance
        g = draw_generator(seed, position + len(drafts))
        return list(drafts) + [int(torch.multinomial(bonus, 1, generator=g))]

    monkeypatch.setattr(verify_module, "verify", accept_everything)
    stat, df, p = chi_square_homogeneity(plain_samples, _samples(_spec_engine(tiny), seed0=10_000))
    assert p < ALPHA, f"the test failed to notice a lossy verifier (chi2={stat:.1f}, df={df}, p={p:.3f})"
