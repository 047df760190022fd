"""The acceptance-length gate: TensorRT-LLM's reference layout read and written natively (populate edits only its
entry, byte for byte), the collapse tripwire, the two-sided move, per-position rates, the early FAIL."""

from __future__ import annotations

import difflib

import pytest
import yaml
from specdec_eval.evals.gates import acceptance
from specdec_eval.evals.gates.acceptance import (
    ACCEPTANCE_PATH,
    acceptance_early_fail,
    acceptance_gate,
    counts_problem,
)
from specdec_eval.evals.gates.acceptance_file import find_acceptance_reference, load_acceptance_references, populate
from specdec_eval.workers.spec.metrics import AcceptanceStats

from specdec_eval.errors import UserError


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


OURS_V1 = "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v1_kv_cache-one_model-tp1]"
OURS_V2 = "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]"
GPTOSS = "TestGPTOSS::test_eagle3_1gpu[cutlass-one_model]"
LLAMA_VLLM = "vllm/tests/v1/spec_decode/test_acceptance_length.py::test_eagle3_acceptance_length[llama3-8b-eagle3]"
# the brief's schema, plus `slack` (the run's own sampling error of AL, evals/gates/verdict.py)
SCHEMA = {
    "verdict",
    "acceptance_length",
    "ref_al",
    "min_al",
    "rtol",
    "slack",
    "band",
    "power",
    "reason",
    "per_position",
    "test_id",
}

# A copy of TensorRT-LLM's layout, with a comment, a test id carrying brackets and a hand-set min_al.
TRTLLM_TEXT = """\
# SPDX-License-Identifier: Apache-2.0
TestQwen3_4B::test_eagle3:
  ref_al: 2.02809899228679
  min_al: 1.9266940426724504
# The usual 95% tolerance is below 1.0 here.
TestLlama4SpeculativeDecoding::test_llama4_eagle3[linear]:
  ref_al: 1.009717
  min_al: 1.001
TestGPTOSS::test_eagle3_1gpu[cutlass-one_model]:
  ref_al: 2.894276
  min_al: 2.7495622
"""


def stats(k: int, accepted_per_cycle: list[int]) -> dict:
    """AcceptanceStats.to_dict() of a run whose cycles accepted these many drafts each."""
    s = AcceptanceStats(k)
    for n in accepted_per_cycle:
        s.record(k, n)
    return s.to_dict()


def with_al(al: float, k: int = 3, cycles: int = 1000) -> dict:
    """Stats whose AL is `al` (to 1/cycles): accepted drafts spread evenly, the longest runs first."""
    total = round((al - 1) * cycles)
    per_cycle = [total // cycles + (1 if i < total % cycles else 0) for i in range(cycles)]
    return stats(k, per_cycle)


REFS = {
    "t::ref": {"ref_al": 2.0, "min_al": 1.9},
    "t::positions": {"ref_al": 2.0, "min_al": 1.9, "ref_per_position": [0.6, 0.3, 0.1], "max_draft_len": 3},
    "t::stub": {"ref_al": None, "min_al": None},
    "t::low": {"ref_al": 1.009717, "min_al": 1.001},
}


def test_gate_returns_exactly_the_schema():
    result = acceptance_gate("t::positions", stats(3, [3, 1, 0, 2, 1, 0, 0, 1]), REFS)
    assert set(result) == SCHEMA
    assert set(result["per_position"][0]) == {"position", "rate", "ref", "verdict"}
    assert result["test_id"] == "t::positions" and result["rtol"] == acceptance.DEFAULT_RTOL == 0.05


def test_within_the_band_passes():
    result = acceptance_gate("t::ref", with_al(2.05), REFS)
    assert result["verdict"] == "PASS" and result["acceptance_length"] == pytest.approx(2.05)
    assert "within [1.900, 2.100] (ref_al 2.000 +- 5%)" in result["reason"]
    assert result["band"] == {"low": pytest.approx(1.9), "high": pytest.approx(2.1), "tolerance": 0.05}


def test_a_collapsed_drafter_fails_the_tripwire():
    result = acceptance_gate("t::ref", stats(3, [0] * 500), REFS)  # a random head: AL 1.0
    assert result["verdict"] == "FAIL"
    assert "1.000 < min_al 1.900" in result["reason"] and "collapse" in result["reason"]


def test_a_rise_fails_too():
    result = acceptance_gate("t::ref", with_al(2.2), REFS)
    assert result["verdict"] == "FAIL" and "+10.0%" in result["reason"] and "a rise fails too" in result["reason"]
    assert acceptance_gate("t::ref", with_al(2.2), REFS, rtol=0.15)["verdict"] == "PASS"


def test_a_small_drop_above_a_hand_set_min_al_is_checked_by_rtol_only():
    assert acceptance_gate("t::low", with_al(1.004), REFS)["verdict"] == "PASS"  # -0.6 %, above 1.001
    assert acceptance_gate("t::low", with_al(1.0), REFS)["verdict"] == "FAIL"


def test_per_position_rates_are_one_sided():
    # position 2 falls to 0.05 < 0.1 * 0.95 while the mean stays within 5 % (a higher position 0 makes up)
    cycles = [3] * 5 + [2] * 25 + [1] * 35 + [0] * 35  # rates 0.65, 0.30, 0.05; AL 2.0
    result = acceptance_gate("t::positions", stats(3, cycles), REFS)
    verdicts = [p["verdict"] for p in result["per_position"]]
    assert verdicts == ["PASS", "PASS", "FAIL"] and result["verdict"] == "FAIL"
    assert "position 2 rate 0.0500 < 0.0950" in result["reason"]
    assert result["per_position"][0] == {"position": 0, "rate": 0.65, "ref": 0.6, "verdict": "PASS"}


def test_no_reference_stub_and_a_different_k():
    missing = acceptance_gate("t::absent", with_al(2.0), REFS)
    assert missing["verdict"] == "NO-REFERENCE" and missing["ref_al"] is None and "no acceptance" in missing["reason"]
    stub = acceptance_gate("t::stub", with_al(2.0), REFS)
    assert stub["verdict"] == "NO-REFERENCE" and "stub" in stub["reason"]
    other_k = acceptance_gate("t::positions", with_al(2.0, k=5), REFS)
    assert other_k["verdict"] == "NO-REFERENCE" and "max_draft_len 3" in other_k["reason"]
    assert all(p["verdict"] == "NO-REFERENCE" and p["ref"] is None for p in other_k["per_position"])


def test_a_run_that_drafted_nothing_fails():
    result = acceptance_gate("t::ref", AcceptanceStats(3).to_dict(), REFS)
    assert result["verdict"] == "FAIL" and "drafted nothing" in result["reason"]


@pytest.mark.parametrize(
    "counts, words",
    [
        (
            {"num_cycles": 1, "num_draft_tokens": 3, "num_accepted_drafts": 50, "max_draft_len": 3},
            "50 accepted drafts of 3 drafted",
        ),
        (
            {"num_cycles": 10, "num_draft_tokens": 300, "num_accepted_drafts": 31, "max_draft_len": 3},
            "31 accepted drafts in 10 cycles of at most K = 3",
        ),
        ({"acceptance_length": float("nan")}, "acceptance length nan is not a number >= 1"),
        ({"acceptance_length": 0.5}, "is not a number >= 1"),
    ],
)
def test_impossible_counts_are_no_gate_never_a_verdict(counts, words):
    """Counts no drafter gives (a server claiming 50 accepted of 3 drafted read as AL 51 and PASSed)."""
    result = acceptance_gate("t::ref", counts, REFS)
    assert result["verdict"] == "NO-GATE" and result["acceptance_length"] is None and set(result) == SCHEMA
    assert result["reason"].startswith("impossible acceptance counts (") and words in result["reason"]
    assert acceptance_early_fail("t::ref", counts, REFS) is None
    assert counts_problem(with_al(2.0)) is None and counts_problem(AcceptanceStats(3).to_dict()) is None


def test_counts_win_over_rounded_rates():
    d = stats(3, [1, 1, 0])  # AL 1.6667; to_dict rounds it to 1.6667
    d["acceptance_length"] = 9.9  # a stale rounded field must not be used when the counts are there
    assert acceptance_gate("t::ref", d, REFS)["acceptance_length"] == pytest.approx(5 / 3)
    only_rounded = {"acceptance_length": 2.01, "per_position_rate": [0.6, 0.3, 0.11]}
    assert acceptance_gate("t::positions", only_rounded, REFS)["verdict"] == "PASS"


def test_early_fail_catches_a_random_drafter_after_the_first_batch():
    early = acceptance_early_fail("t::ref", stats(3, [0] * 300), REFS)
    assert early is not None and early["verdict"] == "FAIL" and set(early) == SCHEMA
    assert "early FAIL after 300 draft cycles" in early["reason"]
    assert acceptance_early_fail("t::ref", stats(3, [0] * 100), REFS) is None  # too few cycles to say
    assert acceptance_early_fail("t::ref", with_al(1.6, cycles=300), REFS) is None  # low, but not a collapse
    assert acceptance_early_fail("t::stub", stats(3, [0] * 300), REFS) is None
    assert acceptance_early_fail("t::low", stats(3, [0] * 300), REFS)["verdict"] == "FAIL"


def test_early_fail_judges_only_the_decoding_its_reference_was_measured_under():
    """A sampled run (every --repeats run is one) is never tripped by a greedy reference: acceptance falls with the
    temperature, as the full gate knows (decoding_problem)."""
    assert acceptance_early_fail("t::ref", stats(3, [0] * 300), REFS, temperature=1.0) is None
    assert acceptance_early_fail("t::ref", stats(3, [0] * 300), REFS, temperature=0.0)["verdict"] == "FAIL"


# --- the shipped references ----------------------------------------------------------------------------------


def test_shipped_references():
    refs = load_acceptance_references()
    assert refs[GPTOSS]["ref_al"] == 2.894276 and refs[GPTOSS]["min_al"] == 2.7495622
    assert refs["TestQwen3_4B::test_eagle3"]["ref_al"] == pytest.approx(2.028, abs=5e-4)
    assert refs["TestQwen3_4B::test_eagle3"]["min_al"] == pytest.approx(1.927, abs=5e-4)
    assert refs[LLAMA_VLLM]["ref_al"] == 2.60 and refs[LLAMA_VLLM]["ref_per_position"] == [0.7296, 0.5208, 0.3545]
    for test_id, entry in refs.items():
        if entry["ref_al"] is None:  # the placeholders of the embedded default
            assert test_id in (OURS_V1, OURS_V2) and entry["max_draft_len"] == 3
            continue
        assert entry["definition"] and entry["source"] and entry["engine"], test_id
        assert entry["min_al"] <= entry["ref_al"], test_id
        rates = entry.get("ref_per_position")
        if rates:  # per-position rates sum to AL - 1 (bonus token included)
            assert sum(rates) == pytest.approx(entry["ref_al"] - 1, abs=0.01), test_id
    assert {OURS_V1, OURS_V2} <= set(refs)
    for ours in (
        OURS_V1,
        OURS_V2,
    ):  # measured by the project: the random head's AL ~1.0 fails, the shipped head's passes
        assert refs[ours]["ref_al"] == pytest.approx(1 + 2086 / 2088) and refs[ours]["task"] == "gsm8k"
        assert acceptance_gate(ours, with_al(1.05), refs)["verdict"] == "FAIL"
        measured = stats(3, [3] * 343 + [2] * 284 + [1] * 489 + [0] * 972)  # the counts of the measuring run
        assert acceptance_gate(ours, measured, refs)["verdict"] == "PASS"


def test_an_endpoint_run_finds_the_published_figure():
    refs = load_acceptance_references()
    found = find_acceptance_reference(refs, model="meta-llama/Llama-3.1-8B-Instruct", max_draft_len=3, task="mt_bench")
    assert found == LLAMA_VLLM
    assert find_acceptance_reference(refs, model="meta-llama/Llama-3.1-8B-Instruct", task="gsm8k") is None
    found = find_acceptance_reference(refs, model="HuggingFaceTB/SmolLM2-135M-Instruct", max_draft_len=3, task="gsm8k")
    assert found in (OURS_V1, OURS_V2)


def test_bad_files_are_user_errors(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    for text, fragment in [
        ("a: [1\n", "not valid YAML"),
        ("- 1\n", "top level"),
        ("a: 3\n", "mapping"),
        ("a:\n  ref_al: fast\n", "ref_al must be a number"),
    ]:
        path.write_text(text)
        with pytest.raises(UserError, match=fragment):
            load_acceptance_references(path)
    assert load_acceptance_references(tmp_path / "absent.yaml") == {}


# --- populate ------------------------------------------------------------------------------------------------


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [d for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---"))]


def test_populate_with_the_same_values_leaves_every_byte(tmp_path):
    for source in (TRTLLM_TEXT.encode(), ACCEPTANCE_PATH.read_bytes(), TRTLLM_TEXT.replace("\n", "\r\n").encode()):
        path = tmp_path / "acceptance_length.yaml"
        path.write_bytes(source)
        for test_id, entry in yaml.safe_load(source.decode()).items():
            if entry["ref_al"] is not None and entry["min_al"] == pytest.approx(0.95 * entry["ref_al"], rel=1e-9):
                assert populate(path, test_id, entry["ref_al"], entry.get("ref_per_position")) is False
        assert path.read_bytes() == source


def test_populate_a_new_value_changes_only_that_entry(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    path.write_text(TRTLLM_TEXT)
    assert populate(path, "TestQwen3_4B::test_eagle3", 2.1) is True
    after = path.read_text()
    assert changed_lines(TRTLLM_TEXT, after) == [
        "-  ref_al: 2.02809899228679",
        "-  min_al: 1.9266940426724504",
        "+  ref_al: 2.1",
        "+  min_al: 1.995",
    ]
    assert "# The usual 95% tolerance is below 1.0 here.\n" in after
    assert yaml.safe_load(after)["TestQwen3_4B::test_eagle3"] == {"ref_al": 2.1, "min_al": 1.995}
    assert populate(path, "TestQwen3_4B::test_eagle3", 2.1) is False  # and again: nothing to do


def test_populate_keeps_comments_on_value_lines_and_crlf(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    text = "a::b[x-y]:\r\n  ref_al: 2.0   # measured 2026-12-03\r\n  min_al: 1.9\r\n  source: ours\r\n"
    text += "z: {ref_al: 3.0}\r\n"
    path.write_bytes(text.encode())
    populate(path, "a::b[x-y]", 2.5, per_position=[0.7, 0.5, 0.3])
    after = path.read_bytes().decode()
    assert after == (
        "a::b[x-y]:\r\n  ref_al: 2.5   # measured 2026-12-03\r\n  min_al: 2.375\r\n  source: ours\r\n"
        "  ref_per_position: [0.7, 0.5, 0.3]\r\nz: {ref_al: 3.0}\r\n"
    )


def test_populate_fills_a_stub_and_appends_a_missing_entry(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    shipped = ACCEPTANCE_PATH.read_text()
    head = shipped.index(OURS_V2)  # the shipped v2 entry made a stub again, the v1 entry left measured
    v2 = shipped[head:]
    for line in ("  ref_al: ", "  min_al: ", "  ref_per_position: "):
        start = v2.index(line)
        end = v2.index("\n", start) + 1
        v2 = v2[:start] + (line + "null\n" if "per_position" not in line else "") + v2[end:]
    path.write_text(shipped[:head] + v2)
    before = path.read_text()
    populate(path, OURS_V2, 1.42, per_position=[0.31234, 0.09, 0.02])
    after = path.read_text()
    lines = changed_lines(before, after)
    assert lines == [
        "-  ref_al: null",
        "-  min_al: null",
        "+  ref_al: 1.42",
        "+  min_al: 1.349",
        "+  ref_per_position: [0.3123, 0.09, 0.02]",
    ]
    refs = load_acceptance_references(path)
    run = stats(3, [3] * 200 + [2] * 700 + [1] * 2223 + [0] * 6877)  # rates 0.3123, 0.09, 0.02; AL 1.4223
    assert acceptance_gate(OURS_V2, run, refs)["verdict"] == "PASS"
    assert refs[OURS_V1]["ref_al"] == pytest.approx(1 + 2086 / 2088)  # the v1 entry is untouched
    populate(path, "TestNew::test_eagle3[tp2]", 2.0)
    tail = path.read_text()[len(after) :]
    assert tail == "TestNew::test_eagle3[tp2]:\n  ref_al: 2.0\n  min_al: 1.9\n"


def test_populate_rewrites_a_block_list_and_quotes_odd_keys(tmp_path):
    path = tmp_path / "acceptance_length.yaml"
    path.write_text("t:\n  ref_al: 2.0\n  min_al: 1.9\n  ref_per_position:\n    - 0.6\n    - 0.4\nu:\n  ref_al: 1.5\n")
    populate(path, "t", 2.0, per_position=[0.5, 0.5])
    assert path.read_text() == "t:\n  ref_al: 2.0\n  min_al: 1.9\n  ref_per_position: [0.5, 0.5]\nu:\n  ref_al: 1.5\n"
    populate(path, "[odd]: key", 1.5)
    assert load_acceptance_references(path)["[odd]: key"] == {"ref_al": 1.5, "min_al": 1.425}


def test_populate_creates_the_file_and_refuses_bad_values(tmp_path):
    path = tmp_path / "new" / "acceptance_length.yaml"
    assert populate(path, GPTOSS, 2.894276) is True
    assert path.read_text() == f"{GPTOSS}:\n  ref_al: 2.894276\n  min_al: 2.7495622\n"  # TensorRT-LLM's own figure
    with pytest.raises(ValueError, match=">= 1"):
        populate(path, GPTOSS, 0.5)


def test_a_small_run_is_judged_within_its_own_sampling_error():
    """Ten questions with AL 7% above the reference: within the run's sampling error (slack), so PASS; the same AL
    on a large run (no slack) moves beyond rtol and FAILs; a collapse fails whatever the slack."""
    from specdec_eval.evals.gates.acceptance_gate import acceptance_slack

    refs = {"t": {"ref_al": 2.0, "min_al": 1.9, "max_draft_len": 3}}
    stats = {
        "acceptance_length": 2.14,
        "num_cycles": 500,
        "num_accepted_drafts": 570,
        "accepted_per_position": [],
        "max_draft_len": 3,
    }
    per_request = (1.6, 2.5, 2.1, 2.6, 1.9, 2.4, 2.0, 2.3, 1.8, 2.2)  # ALs of ten requests of 50 cycles each
    small = acceptance_slack([(50, round((al - 1) * 50)) for al in per_request])
    assert 0.2 < small < 0.5
    assert acceptance_gate("t", stats, refs, slack=small)["verdict"] == "PASS"
    assert acceptance_gate("t", stats, refs)["verdict"] == "FAIL"
    collapsed = {**stats, "acceptance_length": 1.0, "num_accepted_drafts": 0}
    assert acceptance_gate("t", collapsed, refs, slack=small)["verdict"] == "FAIL"


def test_the_slack_weighs_requests_by_their_cycles():
    """Equal cycles: the ratio's error is the per-request ALs' error. One long request with a low AL pulls the
    ratio and widens its error; a lone request, or requests without cycles, give no slack."""
    from specdec_eval.evals.gates.acceptance_gate import acceptance_slack

    equal = [(50, 50), (50, 60), (50, 40), (50, 55)]
    als = [1 + a / c for c, a in equal]
    mean = sum(als) / 4
    sd = (sum((x - mean) ** 2 for x in als) / 3) ** 0.5
    assert acceptance_slack(equal) == pytest.approx(2.576 * sd / 2)
    assert acceptance_slack([*equal[:3], (400, 100)]) > acceptance_slack(equal)
    assert acceptance_slack([(50, 50)]) == 0.0 and acceptance_slack([(0, 0), (0, 0)]) == 0.0


def test_a_per_position_rate_is_judged_within_its_own_sampling_error():
    """Eight requests (146 cycles) whose position-2 rate is 0.137 against a reference of 0.1643 (a bound of 0.1561
    at rtol 5%): the unmutated SmolLM2 engine on `bench --verdict --docs 8`. Within that position's own sampling
    error, so PASS, as AL is judged; the same rates with no slack FAIL; a collapsed position FAILs whatever the
    slack."""
    from specdec_eval.evals.gates.acceptance_gate import acceptance_slack

    refs = {"t": {"ref_al": 2.0, "min_al": 1.9, "max_draft_len": 3, "ref_per_position": [0.53, 0.30, 0.1643]}}
    # (cycles, accepted at positions 0, 1, 2) of eight requests: 81 / 50 / 20 accepted of 146 cycles
    requests = [
        (20, [12, 8, 5]),
        (18, [10, 6, 1]),
        (16, [9, 5, 0]),
        (22, [12, 7, 4]),
        (15, [8, 5, 3]),
        (19, [11, 7, 2]),
        (17, [9, 6, 3]),
        (19, [10, 6, 2]),
    ]
    counts = [sum(a[i] for _, a in requests) for i in range(3)]
    cycles = sum(c for c, _ in requests)
    assert (cycles, counts) == (146, [81, 50, 20])
    stats = {
        "num_cycles": cycles,
        "num_accepted_drafts": sum(counts),
        "accepted_per_position": counts,
        "max_draft_len": 3,
    }
    slacks = [acceptance_slack([(c, a[i]) for c, a in requests]) for i in range(3)]
    assert all(0.02 < s < 0.1 for s in slacks)
    al_slack = acceptance_slack([(c, sum(a)) for c, a in requests])
    judged = acceptance_gate("t", stats, refs, slack=al_slack, position_slacks=slacks)
    assert judged["verdict"] == "PASS", judged["reason"]
    assert judged["per_position"][2]["verdict"] == "PASS" and judged["per_position"][2]["slack"] == round(slacks[2], 4)
    bare = acceptance_gate("t", stats, refs, slack=al_slack)
    assert bare["verdict"] == "FAIL" and "position 2 rate 0.1370 < 0.1561 = ref 0.1643 x (1 - 0.05)" in bare["reason"]
    collapsed = {**stats, "num_accepted_drafts": 131, "accepted_per_position": [81, 50, 0]}
    failed = acceptance_gate("t", collapsed, refs, slack=al_slack, position_slacks=slacks)
    assert failed["verdict"] == "FAIL" and "position 2 rate 0.0000 <" in failed["reason"]
    assert "of sampling error" in failed["reason"]


def test_a_reference_applies_only_to_the_decoding_it_was_measured_under():
    """A clean rejection-sampled run of the embedded default at T = 1 fell below the greedy band: acceptance depends
    on the temperature, so a sampled run is never judged against a greedy entry (nor the reverse)."""
    low = with_al(1.5)  # far below the greedy band: FAIL when judged
    assert acceptance_gate("t::ref", low, REFS)["verdict"] == "FAIL"
    sampled = acceptance_gate("t::ref", low, REFS, temperature=1.0)
    assert sampled["verdict"] == "NO-REFERENCE" and set(sampled) == SCHEMA
    assert "measured greedy, this run samples at temperature 1" in sampled["reason"]
    refs = {"t::hot": {"ref_al": 1.5, "min_al": 1.45, "temperature": 0.7}}
    assert acceptance_gate("t::hot", low, refs, temperature=0.7)["verdict"] == "PASS"
    assert "measured at temperature 0.7, this run decodes greedily" in acceptance_gate("t::hot", low, refs)["reason"]
