"""`compare` over runs with several samples per document: samples pair on (document, repeat), and the accuracy
test is the clustered paired test on per-document means, not McNemar on samples as if independent."""

from __future__ import annotations

import pytest
from specdec_eval.results.compare import compare_runs, render_compare
from specdec_eval.results.paired import pair_samples
from specdec_eval.results.sample_record import SampleRecord

from .test_compare import task_summary
from .test_runs_table import make_run

DOCS, REPEATS = 30, 4


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def samples(correct: dict[int, list[bool]]) -> list[dict]:
    out = []
    for doc, flags in correct.items():
        for r, ok in enumerate(flags):
            out.append(
                {
                    "task": "gpqa_diamond_aa",
                    "doc_id": doc,
                    "repeat": r,
                    "prompt_hash": f"p{doc}",
                    "output_hash": f"{doc}-{r}-{ok}",
                    "output_token_ids": [doc, r, int(ok)],
                    "finish_reason": "stop",
                    "error": None,
                    "acceptance_length": None,
                    "extracted[strict-match]": "B" if ok else "C",
                    "correct[strict-match]": ok,
                }
            )
    return out


BASE = {d: [d % 3 != 0, d % 2 == 0, True, d % 5 == 0] for d in range(DOCS)}


def runs(tmp_path, worse_docs: list[int]):
    b_correct = {d: ([False] * REPEATS if d in worse_docs else flags) for d, flags in BASE.items()}
    flat = lambda c: [ok for flags in c.values() for ok in flags]  # noqa: E731
    a = make_run(tmp_path, 1, samples=samples(BASE), tasks={"gpqa_diamond_aa": task_summary(flat(BASE))})
    b = make_run(tmp_path, 2, samples=samples(b_correct), tasks={"gpqa_diamond_aa": task_summary(flat(b_correct))})
    return a, b


def test_samples_pair_on_document_and_repeat():
    a, b = samples(BASE), samples(BASE)
    a, b = [SampleRecord.from_row(s) for s in a], [SampleRecord.from_row(s) for s in b]
    pairs = pair_samples(a, list(reversed(b)))
    assert len(pairs["gpqa_diamond_aa"]) == DOCS * REPEATS and pairs.unpaired == {}
    assert all((x.doc_id, x.repeat) == (y.doc_id, y.repeat) for x, y in pairs["gpqa_diamond_aa"])
    with pytest.raises(ValueError, match="doc 3 repeat 1 twice"):
        pair_samples(a + [a[13]], b)
    pairs = pair_samples(a, [s for s in b if s.repeat < 2])
    assert pairs.unpaired["gpqa_diamond_aa"]["only_a"] == list(range(DOCS))  # each document listed once


def test_identical_runs_show_no_change(tmp_path):
    result = compare_runs(*runs(tmp_path, []), filter="strict-match")
    t = result["tasks"]["gpqa_diamond_aa"]
    assert t["n"] == DOCS * REPEATS and t["clustered"]["n_docs"] == DOCS and t["clustered"]["p"] == 1.0
    assert t["verdict"] == "no significant change"
    assert "verdict: no significant change (alpha 0.05, clustered paired test on" in render_compare(result)


def test_a_regression_on_ten_documents(tmp_path):
    result = compare_runs(*runs(tmp_path, list(range(0, 30, 3))), filter="strict-match")
    t = result["tasks"]["gpqa_diamond_aa"]
    assert t["verdict"] == "regression" and t["clustered"]["p"] < 0.01 and t["clustered"]["delta"] < 0
    assert "clustered by document on strict-match (30 documents, up to 4 samples each" in render_compare(result)


def test_three_documents_are_not_nine_independent_pairs(tmp_path):
    """Nine discordant samples from three documents: McNemar on samples would call it a regression (p = 2/512);
    over documents it is three of thirty, not significant."""
    result = compare_runs(*runs(tmp_path, [2, 4, 8]), filter="strict-match")
    t = result["tasks"]["gpqa_diamond_aa"]
    assert (t["mcnemar"]["b"], t["mcnemar"]["c"]) == (9, 0) and t["mcnemar"]["p"] < 0.005  # samples as independent
    assert t["clustered"]["p"] > 0.05 and t["verdict"] == "no significant change"


def test_acceptance_pairs_documents_with_their_samples_counts_summed(tmp_path):
    """The paired acceptance test's unit is the document: with 4 samples each, 30 documents (not 120 samples as if
    independent), each side's cycles and accepted drafts summed over the document's samples."""

    def drafted(rows: list[dict], accepted_of) -> list[dict]:
        return [{**s, "acceptance": {"num_cycles": 10, "num_accepted_drafts": accepted_of(s)}} for s in rows]

    rows = samples(BASE)
    a = drafted(rows, lambda s: 4 + s["repeat"] + s["doc_id"] % 3)
    b = drafted(rows, lambda s: 3 + s["repeat"] + s["doc_id"] % 3)
    flat = [ok for flags in BASE.values() for ok in flags]
    run_a = make_run(tmp_path, 1, samples=a, tasks={"gpqa_diamond_aa": task_summary(flat)})
    run_b = make_run(tmp_path, 2, samples=b, tasks={"gpqa_diamond_aa": task_summary(flat)})
    per_document = compare_runs(run_a, run_b, filter="strict-match")["tasks"]["gpqa_diamond_aa"]["acceptance"][
        "per_document"
    ]
    assert per_document["n"] == DOCS and per_document["unpaired"] == 0
    # AL over the documents' summed counts: (4 + 1.5 + mean of d % 3) / 10 accepted per cycle on A, one less on B
    assert per_document["al_a"] - per_document["al_b"] == pytest.approx(0.1)
