"""The margin rule of the lossless gate outside float32 (evals/lossless/margins.py): margins read at the first
divergence (exact, or bounded below when the other token is not among the stored alternatives), the one-sided Fisher
test, and the rule's false-FAIL rate measured by a seeded simulation of numerics-only divergences (and its power on a
planted bug), UNCALIBRATED as NO-GATE, float32 exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from specdec_eval.evals.lossless.check import IdentityVerdict, lossless_check
from specdec_eval.evals.lossless.identity_judge import apply_audit, judge_by_margins, uncalibrated_is_no_gate
from specdec_eval.evals.lossless.margins import (
    ALPHA,
    divergence_margin,
    fisher_greater,
    floor_missing,
    margin_verdict,
    noise_floor,
)
from specdec_eval.results.sample_record import SampleRecord
from specdec_eval.results.shown_verdict import run_verdict

K = 5


def _record(logits: np.ndarray, token: int) -> list:
    logp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    top = np.argsort(-logp)[:K]
    return [float(logp[token]), [[int(i), float(logp[i])] for i in top]]


def _sample(doc: int, rows: list[np.ndarray], tokens: list[int]) -> SampleRecord:
    return SampleRecord(
        "t",
        doc,
        prompt_hash=str(doc),
        output_token_ids=tokens,
        logprobs=[_record(r, t) for r, t in zip(rows, tokens, strict=True)],
        correct={"strict-match": False, "flexible-extract": False},
    )


def _runs(rng: np.random.Generator, docs: int, length: int, vocab: int, sigma: float, bug_doc: int | None = None):
    """Three greedy decodes of the same logits, each with its own rounding noise (scale sigma): baseline, control,
    spec. Each doc is followed up to the first position where any side departs from the baseline. With bug_doc, the
    spec side emits, at one position of that doc, a token the baseline ranks 3rd or lower."""
    sides: dict[str, list[dict]] = {"base": [], "control": [], "spec": []}
    for doc in range(docs):
        true = rng.normal(0.0, 2.0, size=(length, vocab))
        rows = {s: true + rng.normal(0.0, sigma, size=true.shape) for s in sides}
        tokens = {s: [int(np.argmax(r)) for r in rows[s]] for s in sides}
        if doc == bug_doc:
            p = 1
            tokens["spec"][p] = int(np.argsort(-rows["base"][p])[3 + rng.integers(0, vocab - 4)])
        for s in sides:
            sides[s].append(_sample(doc, list(rows[s]), tokens[s]))
    return sides["base"], sides["control"], sides["spec"]


def _verdict(base, control, spec) -> str:
    check = lossless_check(spec, base, "bfloat16")["t"]
    return judge_by_margins(
        check, "t", spec, base, noise_floor(base, control, "t"), "bfloat16", None, "control"
    ).verdict


def test_false_fail_rate_on_numerics_only_divergences_is_within_its_bound():
    """Seeded: 100 clean runs whose divergences are rounding alone (bf16-like noise, 32 documents of 16 tokens);
    the rule's stated bound is ALPHA + d / (N + 1) per run, so the measured FAIL rate must stay near ALPHA."""
    rng = np.random.default_rng(23)
    fails = divergent = 0
    trials = 100
    for _ in range(trials):
        base, control, spec = _runs(rng, docs=32, length=16, vocab=12, sigma=0.02)
        verdict = _verdict(base, control, spec)
        divergent += lossless_check(spec, base, "bfloat16")["t"].counts["divergent"]
        fails += verdict == "FAIL"
    assert divergent > trials  # the simulation does make numerics divergences (more than one a run)
    assert fails / trials <= 2 * ALPHA + 0.01, f"{fails} of {trials} clean runs failed"


def test_a_planted_confident_divergence_fails_nearly_always():
    rng = np.random.default_rng(7)
    fails = sum(_verdict(*_runs(rng, docs=32, length=16, vocab=12, sigma=0.02, bug_doc=5)) == "FAIL" for _ in range(40))
    assert fails >= 36


def _decoded(tokens: list[int], logprobs: list | None) -> SampleRecord:
    return SampleRecord("t", 0, output_token_ids=tokens, logprobs=logprobs)


def test_margin_at_first_divergence_exact_and_lower_bound():
    base = _decoded([1, 2, 3], [[-0.1, [[1, -0.1]]], [-0.5, [[2, -0.5], [7, -0.9]]], [-0.2, [[3, -0.2]]]])
    other = _decoded([1, 7, 4], [[-0.1, [[1, -0.1]]], [-0.6, [[7, -0.6], [2, -0.7]]], [-0.3, [[4, -0.3]]]])
    m = divergence_margin(base, other)
    assert (m["position"], m["baseline_token"], m["other_token"]) == (1, 2, 7)
    assert m["margin"] == pytest.approx(0.4) and not m["lower_bound"]
    assert m["reverse_margin"] == pytest.approx(0.1) and not m["reverse_lower_bound"]
    assert m["judged"] == pytest.approx(0.4)
    far = _decoded([1, 9], [[-0.1, [[1, -0.1]]], [-3.0, [[9, -3.0]]]])
    m = divergence_margin(base, far)  # 9 is not among the baseline's alternatives: at least 0.4 (to the last one)
    assert m["lower_bound"] and m["margin"] == pytest.approx(0.4)
    # the other side's own logits favour the baseline's token by 2.5: that is the judged margin
    wrong = _decoded([1, 9], [[-0.1, [[1, -0.1]]], [-3.0, [[2, -0.5], [9, -3.0]]]])
    assert divergence_margin(base, wrong)["judged"] == pytest.approx(2.5)
    assert divergence_margin(base, _decoded([1, 2, 3], None)) is None  # no logprobs on a side


def test_fisher_one_sided():
    assert fisher_greater(0, 32, 3, 32) == 1.0
    assert fisher_greater(3, 32, 3, 32) > 0.5
    # 10 of 32 against 0 of 32: P(all 10 divergent in the first 32 of 64) = C(32,10) / C(64,10)
    assert fisher_greater(10, 32, 0, 32) == pytest.approx(math.comb(32, 10) / math.comb(64, 10))
    assert fisher_greater(10, 32, 0, 32) < ALPHA


def test_uncalibrated_is_no_gate_for_the_task_and_the_run():
    d = [{"doc_id": 1, "position": 3}]
    verdict, reason, _ = margin_verdict(d, 10, None, None)
    assert verdict == "UNCALIBRATED" and "--control" in reason
    check = uncalibrated_is_no_gate(IdentityVerdict({}, verdict, reason)).record()
    assert check["verdict"] == "NO-GATE" and check["reason"].startswith("UNCALIBRATED") and check["uncalibrated"]
    summary = {"verdict": "PASS", "tasks": {"t": {"verdict": "PASS", "lossless": check}}}
    assert run_verdict(summary) == "NO-GATE"  # accuracy passed, but the lossless gate could not judge
    # a calibrated tolerance still judges (an upper limit): within it PASS, beyond it FAIL
    assert margin_verdict(d, 10, None, 0.2)[0] == "PASS"
    assert margin_verdict(d * 3, 10, None, 0.2)[0] == "FAIL"


def test_float32_stays_exact():
    rng = np.random.default_rng(1)
    base, control, spec = _runs(rng, docs=32, length=24, vocab=16, sigma=0.02)
    check = lossless_check(spec, base, "float32")["t"].record()
    assert check["divergent"] > 0
    check = judge_by_margins(
        lossless_check(spec, base, "float32")["t"],
        "t",
        spec,
        base,
        noise_floor(base, control, "t"),
        "float32",
        None,
        "control",
    ).record()
    assert check["verdict"] == "FAIL" and "any divergence fails" in check["reason"]
    assert all("margins" in x for x in check["divergences"])  # recorded, not used


def test_a_control_without_any_noise_fails_every_divergence_and_says_why():
    """A deterministic plain side (llama-cpp-python serializes requests: both concurrencies decode alike) measures
    no noise, so the bound is 0 and every divergence is beyond it; the reason says what that rests on."""
    rng = np.random.default_rng(3)
    base, _, spec = _runs(rng, docs=16, length=24, vocab=16, sigma=0.05)
    floor = noise_floor(base, base, "t")  # the control decoded exactly like the baseline
    assert floor["largest_noise"] == 0 and floor["bound"] == 0
    identity = lossless_check(spec, base, "bfloat16")["t"]
    assert identity.counts["divergent"] > 0
    check = judge_by_margins(identity, "t", spec, base, floor, "bfloat16", None, "control").record()
    assert check["verdict"] == "FAIL" and "measured no noise at all" in check["reason"]
    noisy = {**floor, "largest_noise": 0.01, "bound": 0.02}  # a control that measured some noise: no such note
    verdict, reason, _ = margin_verdict([{"doc_id": 1, "position": 2, "judged": 1.0}], 16, noisy, None)
    assert verdict == "FAIL" and "no noise at all" not in reason


def test_an_audited_twin_that_differs_by_rounding_is_judged_by_the_noise_of_the_paths_it_crosses():
    """Outside float32 a twin was decoded beside K + 1-wide verify rows, the audit's plain engine alone: a near-tie
    may flip. Judged against the larger of the control's bound and the audit path's own (a plain engine's prefill
    against its decode): the issue's case, a control that measured no noise (bound 0) and a flip of one bf16 step
    (2^-6 nats), PASSes when that path moved gaps by 0.01 and FAILs far beyond; unmeasured, it is NO-GATE."""

    def audit(judged: float, path: dict | None, logprob: float = -0.5) -> dict:
        margins = {"judged": judged, "margin": judged, "baseline_logprob": logprob, "other_logprob": logprob}
        d = {"task": "t", "doc_id": 7, "position": 3, "margins": margins}
        return {
            "first_divergence": d,
            "divergences": [d],
            "num_audited": 4,
            "planned": 4,
            "audited": [{"task": "t", "doc_id": i} for i in (1, 7, 9, 12)],
            **({"path_noise": path} if path else {}),
        }

    floor = {"bound": 0.0}
    path = {"num_noise_samples": 64, "max_gap_move": 0.01}
    identical = IdentityVerdict({}, "PASS", "every output identical to the baseline")
    near = apply_audit(identical, "t", audit(0.01563, path), "bfloat16", None, floor).record()
    assert near["verdict"] == "PASS"
    assert near["audit_margins"].startswith("1 of 4 audited twins differ") and "0.01563 within" in near["audit_margins"]
    assert "audit path's 0.02, from 64 gap moves" in near["audit_margins"]
    far = apply_audit(identical, "t", audit(0.9, path), "bfloat16", None, floor).record()
    assert far["verdict"] == "FAIL" and "changes the target's own outputs" in far["reason"]
    # the path measured no noise at all, yet the twin differs by one bf16 step at that logprob (2^-6 at 3.6 nats):
    # rounding on the twins' own path (beside verify rows) can do that, so it cannot be judged; two steps FAIL
    still = {"num_noise_samples": 64, "max_gap_move": 0.0}
    one_step = apply_audit(identical, "t", audit(0.01562, still, -3.59297), "bfloat16", None, floor).record()
    assert one_step["verdict"] == "NO-GATE" and "one bfloat16 step there (0.01563)" in one_step["reason"], one_step
    two_steps = apply_audit(identical, "t", audit(0.03125, still, -3.59297), "bfloat16", None, floor).record()
    assert two_steps["verdict"] == "FAIL"
    for unmeasured in (None, {"num_noise_samples": 5, "max_gap_move": 0.0}):
        blind = apply_audit(identical, "t", audit(0.9, unmeasured), "bfloat16", None, floor).record()
        assert blind["verdict"] == "NO-GATE" and "whose noise was not measured" in blind["reason"], blind


def test_a_baseline_whose_logprobs_contradict_its_token_is_never_a_near_tie():
    """llama.cpp's plain server once emitted a token its own logprobs ranked 3.27 nats below the spec side's (both
    sides agreed on that): a negative margin, which greedy decoding cannot give. Not a near-tie: cannot be judged."""
    floor = {"bound": 0.5, "largest_noise": 0.25, "divergent": 1, "num_pairs": 32, "num_noise_samples": 1000}
    odd = {"doc_id": 976, "position": 22, "margin": -3.26637, "reverse_margin": 3.343, "judged": -3.26637}
    near = {"doc_id": 5, "position": 3, "margin": 0.1, "judged": 0.1}
    verdict, reason, _ = margin_verdict([odd, near], 32, floor, None)
    assert verdict == "UNCALIBRATED" and "doc 976 at token 22 (3.266 nats)" in reason
    assert odd["class"] == "inconsistent" and near["class"] == "near-tie"
    far = {"doc_id": 6, "position": 1, "margin": 2.0, "judged": 2.0}
    assert margin_verdict([odd, far], 32, floor, None)[0] == "FAIL"  # a divergence beyond the bound still fails
    tie = {"doc_id": 7, "position": 1, "margin": -0.00001, "judged": -0.00001}  # rounding of an exact tie
    assert margin_verdict([tie], 32, floor, None)[0] == "PASS"


def test_nan_logprobs_from_the_baseline_name_the_dropped_pairs_not_record_a_control():
    """The control was just recorded, but the baseline's logprobs held NaN, so every pair was dropped from the
    noise floor: the NO-GATE reason said "record a control with --control". It names the dropped logprobs now."""
    base, control, spec = _runs(np.random.default_rng(5), 30, 12, 50, 0.05)
    for s in base:
        s.logprobs[0][0] = math.nan
    floor = noise_floor(base, control, "t")
    assert floor is None
    no_floor = floor_missing(base, control, "t")
    assert not no_floor.control_helps
    identity = lossless_check(spec, base, "bfloat16")["t"]
    assert identity.divergences, "the seeded runs must diverge somewhere"
    check = uncalibrated_is_no_gate(
        judge_by_margins(identity, "t", spec, base, floor, "bfloat16", None, "control", no_floor)
    ).record()
    assert check["verdict"] == "NO-GATE" and "--control" not in check["reason"]
    assert (
        "30 of 30 document pairs dropped because their logprobs are not usable numbers (first: baseline doc 0"
        in (check["reason"])
    )
    assert floor_missing(base, None, "t").control_helps  # no control at all: recording one is the advice


def test_nan_logprobs_a_server_sent_to_the_control_are_named_not_counted_as_too_few_gap_moves():
    """A control served by an endpoint that sent NaN logprobs: the client refused them (no records kept, the reason
    in `logprobs_problem`), and the gate read "fewer than 20 gap moves", as if the control were just short. It
    names the non-finite values now, and does not advise recording another control."""
    base, control, _ = _runs(np.random.default_rng(5), 30, 12, 50, 0.05)
    refused = "token 4: the emitted token's logprob is NaN"
    control = [s.replace(logprobs=None, logprobs_problem=refused) for s in control]
    assert noise_floor(base, control, "t") is None
    no_floor = floor_missing(base, control, "t")
    assert "fewer than" not in no_floor.reason and not no_floor.control_helps
    assert f"(first: control doc 0: refused when read: {refused})" in no_floor.reason
