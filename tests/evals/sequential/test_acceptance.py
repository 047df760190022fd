"""The sequential acceptance A/B (evals/sequential/acceptance_ab.py) and its place in `ab --early-stop`'s controller
(evals/sequential/ab_watch.py): a drop of B's acceptance is shown, or a 5 % drop ruled out, as soon as the documents
allow, with the false-drop rate <= alpha and the false ruling-out <= beta, checked by simulation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from specdec_eval.evals.sequential.ab_channel import acknowledge
from specdec_eval.evals.sequential.ab_watch import (
    AcceptanceMonitor,
    DocumentProgress,
    SideProgress,
    acceptance_in_order,
    should_stop,
    watch,
)
from specdec_eval.evals.sequential.acceptance_ab import CONTINUE, AcceptanceSequentialDesign, simulate
from specdec_eval.evals.sequential.discordant_pairs import PairedSequentialDesign
from specdec_eval.evals.sequential.early_stop import EarlyStop
from specdec_eval.stats.acceptance_ratio import DROP, INCONCLUSIVE, NO_DROP


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def _draw(drop: float, noise: float = 0.3):
    """Simulated A/Bs of GSM8K-like documents: A's counts, and B's the same documents with each document's AL lowered
    by `drop` (outputs kept: cycles grow as acceptance falls) plus per-document noise of `noise` accepted drafts per
    cycle (0.3: a document's relative AL change has an sd of about 15 %, so a 5 % drop needs about 56 documents);
    under no drop the two sides are exchangeable (which side carries the noise is a coin flip)."""

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        cycles = rng.integers(20, 81, n).astype(float)
        rate = np.clip(rng.normal(0.33, 0.12, n), 0.02, 0.95)
        accepted = rng.binomial(3 * cycles.astype(int), rate).astype(float)
        al = 1 + accepted / cycles
        tokens = cycles + accepted
        cycles_b = tokens / (al * (1 - drop))
        accepted_b = np.maximum(tokens - cycles_b + rng.normal(0.0, noise, n) * cycles_b, 0.0)
        a_side, b_side = np.stack([cycles, accepted], 1), np.stack([cycles_b, accepted_b], 1)
        if drop == 0:
            swap = rng.random(n) < 0.5
            a_side[swap], b_side[swap] = b_side[swap].copy(), a_side[swap].copy()
        return np.concatenate([a_side, b_side], axis=1)

    return draw


def test_boundaries_spend_little_early_and_end_near_the_fixed_test():
    design = AcceptanceSequentialDesign.for_batches(200, 32)
    assert design.looks == (32, 64, 96, 128, 160, 192, 200)
    drops = [design.bounds(k)[0] for k in range(len(design.looks))]
    ruled = [design.bounds(k)[1] for k in range(len(design.looks))]
    assert drops == sorted(drops) and ruled == sorted(ruled, reverse=True)  # strict early, easier later
    assert -2.2 < drops[-1] < -1.64 and 0.84 < ruled[-1] < 1.3  # near the fixed t test's -1.65 and 0.84
    with pytest.raises(ValueError, match="last look"):
        AcceptanceSequentialDesign(100, (32, 64))


def test_identical_engines_rule_out_a_drop_at_the_first_look_and_a_collapse_is_a_drop():
    design = AcceptanceSequentialDesign.for_batches(1319, 32)
    same = [((40, 35), (40, 35))] * 40
    decision = design.scan(same)
    assert decision.verdict == NO_DROP and decision.n == 32 and decision.look == 1
    collapsed = [((40, 35), (40, 1))] * 40
    assert design.scan(collapsed).verdict == DROP
    assert design.scan(same[:10]).verdict == CONTINUE  # before the first look
    assert "first look at 32" in design.scan(same[:10]).reason


def test_documents_that_run_out_undecided_say_what_a_five_percent_drop_needs():
    rng = np.random.default_rng(1)
    counts = _draw(0.02)(rng, 40)
    pairs = [((c[0], c[1]), (c[2], c[3])) for c in counts]
    decision = AcceptanceSequentialDesign.for_batches(400, 32).scan(pairs, final=True)
    assert decision.verdict == INCONCLUSIVE and "a 5% drop needs about" in decision.reason
    assert "ran out at 40 of 400" in decision.reason


@pytest.mark.parametrize("n_max, batch", [(64, 32), (320, 32)])
def test_error_rates_by_simulation(n_max, batch):
    """No change: a drop is shown in at most alpha = 0.05 of the A/Bs; a 5 % drop: ruled out in at most beta = 0.2
    (4000 A/Bs each, within three Monte-Carlo standard errors)."""
    design = AcceptanceSequentialDesign.for_batches(n_max, batch)
    sims = 4000
    null = simulate(design, _draw(0.0), sims=sims, seed=1)
    dropped = simulate(design, _draw(0.05), sims=sims, seed=2)
    assert null.p_drop <= 0.05 + 3 * (0.05 * 0.95 / sims) ** 0.5
    assert dropped.p_no_drop <= 0.2 + 3 * (0.2 * 0.8 / sims) ** 0.5
    assert dropped.expected_n < n_max  # it stops early when it can
    if n_max == 320:  # enough documents for these: the 5 % drop is shown in most A/Bs
        assert dropped.p_drop > 0.75


def _skewed(rng: np.random.Generator, n: int) -> np.ndarray:
    """No change, but each document's two sides differ by skewed, heavy-tailed noise (a log-normal factor on one
    side's accepted drafts; which side is a coin flip), as the embedded default's real documents do."""
    cycles = rng.integers(20, 81, n).astype(float)
    accepted = rng.binomial(3 * cycles.astype(int), np.clip(rng.normal(0.33, 0.12, n), 0.02, 0.95)).astype(float)
    a = np.stack([cycles, accepted], 1)
    b = np.stack([cycles, np.round(accepted * rng.lognormal(0.0, 0.6, n))], 1)
    flip = rng.random(n) < 0.5
    a[flip], b[flip] = b[flip].copy(), a[flip].copy()
    return np.concatenate([a, b], axis=1)


def test_looks_of_a_few_documents_show_a_drop_by_the_swap_test():
    """Looks every 4 documents up to 16, skewed per-document noise and no drop: the swap test keeps alpha (0.046
    measured); the t alone showed a drop in 0.074 of these A/Bs."""
    null = simulate(AcceptanceSequentialDesign.for_batches(16, 4), _skewed, sims=3000, seed=5)
    assert null.p_drop <= 0.05 + 3 * (0.05 * 0.95 / 3000) ** 0.5


def _write(side: SideProgress, rows: list[tuple[float, tuple[int, int] | None]], of: int = 100) -> None:
    with side.progress_file.open("a") as f:
        for i, (score, counts) in enumerate(rows):
            record = {"task": "gsm8k", "position": i, "score": score, "of": of}
            if counts is not None:
                record["acceptance"] = list(counts)
            f.write(json.dumps(record) + "\n")


def _sides(tmp_path) -> dict[str, SideProgress]:
    return {n: SideProgress(tmp_path / f"side-{n}.stop") for n in "AB"}


def test_the_controller_stops_on_an_acceptance_drop_with_identical_outputs(tmp_path):
    """Every score the same (no discordant pair, the accuracy SPRT cannot decide), B's drafter accepts half as
    much: the acceptance test shows the drop at the first look and both sides are told to stop."""
    sides = _sides(tmp_path)
    _write(sides["A"], [(100.0, (40, 36 + i % 5)) for i in range(64)])
    _write(sides["B"], [(100.0, (40, 18 + i % 5)) for i in range(64)])
    record = watch(sides, PairedSequentialDesign(), lambda: True, poll_s=0, acceptance=AcceptanceMonitor(32))
    assert record["acceptance"]["verdict"] == DROP and record["verdict"] == "CONTINUE" and record["stopped_sides"]
    assert all("acceptance DROP" in s.stop_file.read_text() for s in sides.values())


def test_identical_sides_rule_out_a_drop_but_both_tests_must_decide_by_default(tmp_path):
    sides = _sides(tmp_path)
    rows = [(100.0, (40, 36 + i % 5)) for i in range(64)]
    _write(sides["A"], rows)
    _write(sides["B"], rows)
    record = watch(sides, PairedSequentialDesign(), lambda: False, poll_s=0, acceptance=AcceptanceMonitor(32))
    assert record["acceptance"]["verdict"] == NO_DROP and not record["stopped_sides"]  # ran to the end
    alive = watch(_sides(tmp_path / "x"), PairedSequentialDesign(), lambda: False, poll_s=0)
    assert alive["acceptance"] is None  # no progress at all: nothing paired
    sides = _sides(tmp_path / "acc")
    sides["A"].stop_file.parent.mkdir()
    _write(sides["A"], rows)
    _write(sides["B"], rows)
    record = watch(
        sides,
        PairedSequentialDesign(),
        lambda: True,
        poll_s=0,
        acceptance=AcceptanceMonitor(32),
        decide_on="acceptance",
    )
    assert record["stopped_sides"] and record["acceptance"]["verdict"] == NO_DROP


def test_the_stop_rule():
    design = PairedSequentialDesign()
    undecided, worse = design.decide(0, 0), design.decide(20, 0)
    drop, ruled = {"verdict": DROP}, {"verdict": NO_DROP}
    assert should_stop(worse, None, "both") and should_stop(undecided, drop, "both")
    assert not should_stop(undecided, ruled, "both") and should_stop(undecided, ruled, "acceptance")
    assert not should_stop(undecided, drop, "accuracy") and not should_stop(undecided, None, "acceptance")
    with pytest.raises(ValueError, match="decide_on"):
        should_stop(undecided, None, "nope")


def test_pairs_follow_the_common_prefix_and_skip_documents_without_drafts():
    doc = lambda counts: DocumentProgress((1.0,), counts)  # noqa: E731
    a = {("t", 0): doc((10, 5)), ("t", 1): doc((0, 0)), ("t", 2): doc((8, 4))}
    b = {("t", 0): doc((10, 4)), ("t", 1): doc((3, 1)), ("t", 3): doc((8, 4))}
    assert acceptance_in_order(a, b) == {"t": [((10, 5), (10, 4))]}  # position 2 missing on B: the prefix ends
    assert acceptance_in_order({("t", 0): doc(None)}, {("t", 0): doc(None)}) == {}


def test_a_documents_acceptance_sums_its_samples_counts(tmp_path):
    """--repeats 3: the sequential acceptance test's unit is the document, its counts summed over its samples (a
    sample that drafted nothing adds nothing); a document with a sample still missing is not there yet."""
    side = SideProgress(tmp_path / "side.stop")
    rows = [(0, 0, [10, 5]), (0, 1, [6, 3]), (0, 2, None), (1, 0, [4, 4]), (1, 1, [4, 2])]
    with side.progress_file.open("a") as f:
        for position, repeat, counts in rows:
            record = {"task": "t", "position": position, "repeat": repeat, "repeats": 3, "score": 0.0, "of": 9}
            f.write(json.dumps({**record, **({"acceptance": counts} if counts else {})}) + "\n")
    documents = side.documents()
    assert list(documents) == [("t", 0)]  # document 1 has two of its three samples
    assert documents[("t", 0)].acceptance == (16, 8) and documents[("t", 0)].of == 9
    assert acceptance_in_order(documents, documents) == {"t": [((16, 8), (16, 8))]}


def test_a_side_reports_each_samples_acceptance_counts_and_its_planned_documents(tmp_path):
    acknowledge(tmp_path / "side.stop", 2)  # a watcher that read both records: the side does not wait for one
    stop = EarlyStop(lambda task, n: None, batch=2, exact=False, stop_file=str(tmp_path / "side.stop"))
    stop.start("gsm8k", 5)
    stop.observe("gsm8k", 0, 100.0, {"num_cycles": 12, "num_accepted_drafts": 7}, None, "d0")
    stop.observe("gsm8k", 1, 0.0, None, None, "d1")  # a plain side's sample: no counts
    stop.after_batch("gsm8k")
    lines = [json.loads(line) for line in (tmp_path / "side.stop.progress.jsonl").read_text().splitlines()]
    one = {"repeat": 0, "repeats": 1}
    assert lines == [
        {"task": "gsm8k", "position": 0, **one, "score": 100.0, "of": 5, "acceptance": [12, 7]},
        {"task": "gsm8k", "position": 1, **one, "score": 0.0, "of": 5},
    ]
