"""Each cell judged against the base on the same documents: a cell whose acceptance falls is a FAIL with its size
and p-value, a cell whose greedy outputs move is a FAIL naming its first divergent document, a cell equal to the
base passes, and a cell that never ran is shown as such (recorded runs made by hand, no engine)."""

from __future__ import annotations

from specdec_eval.evals.sweep.judge import BASE, FAIL, NOT_RUN, PASS, UNJUDGED, judge
from specdec_eval.evals.sweep.runner import DONE, NOT_STARTED, CellRecord
from specdec_eval.results.report.sweep_page import sweep_verdict

from ...results.test_compare_acceptance import _documents, _samples, _summary
from ...results.test_runs_table import make_run


def _cell(tmp_path, n: int, counts, outputs=None, verdict="PASS") -> CellRecord:
    samples = _samples(counts)
    for s, ids in zip(samples, outputs or [], strict=False):
        s["output_token_ids"] = ids
    tasks = _summary(counts)
    tasks["gsm8k"]["verdict"] = verdict
    run = make_run(tmp_path, n, samples=samples, tasks=tasks)
    return CellRecord(f"batch={n}", {"batch": str(n)}, DONE, 0, str(run.path))


def test_a_drop_at_one_cell_fails_that_cell_only(tmp_path):
    docs = _documents(1, n=12)
    dropped = [(c, a // 3) for c, a in docs]  # the drafter reads another request's state: far fewer accepted
    records = [_cell(tmp_path, 1, docs), _cell(tmp_path, 2, list(docs)), _cell(tmp_path, 4, dropped)]
    records.append(CellRecord("batch=8", {"batch": "8"}, NOT_STARTED, 2, error="specdec-eval: error: bad"))
    base, same, drop, never = judge(records, exact=True)
    assert base.verdict == BASE and same.verdict == PASS and same.acceptance_change == 0.0
    assert drop.verdict == FAIL and drop.acceptance_verdict == "DROP" and drop.acceptance_change < -0.2
    assert drop.acceptance_p < 0.01 and "acceptance fell" in drop.reasons[0]
    assert drop.outputs_identical == drop.outputs_compared == 12  # the outputs never moved: only acceptance shows it
    assert never.verdict == NOT_RUN and never.status == NOT_STARTED


def test_moved_outputs_fail_in_an_exact_dtype_and_name_the_first_divergent_document(tmp_path):
    docs = _documents(2, n=6)
    outputs = [[1, 2, 3]] * 3 + [[1, 2, 9]] + [[1, 2, 3]] * 2
    records = [_cell(tmp_path, 1, docs), _cell(tmp_path, 2, docs, outputs)]
    moved = judge(records, exact=True)[1]
    assert moved.verdict == FAIL and moved.first_divergent == "gsm8k doc 3 (token 2)"
    assert moved.outputs_identical == 5 and "outputs moved on 1 of 6 documents" in moved.reasons[0]
    noisy = judge(records, exact=False)[1]  # outside float32 its own lossless gate judges the move
    assert noisy.verdict == PASS and "see its lossless gate" in noisy.reasons[0]


def test_a_failing_base_fails_the_sweep_and_nothing_is_judged_against_it(tmp_path):
    docs = _documents(3, n=6)
    broken = _cell(tmp_path, 1, docs, outputs=[[]] * 6, verdict="FAIL")  # its run FAILed, its outputs empty
    healthy = _cell(tmp_path, 2, docs)
    (alone,) = judge([broken], exact=True)
    assert alone.verdict == FAIL and "no cell is judged against a failing base" in alone.reasons[0]
    assert sweep_verdict([alone.to_json()])[0] == "FAIL"
    base, other = judge([broken, healthy], exact=True)
    assert base.verdict == FAIL and other.verdict == UNJUDGED and other.outputs_compared is None
    assert not any("outputs moved" in r for r in other.reasons)  # the healthy cell is not blamed
    verdict, why = sweep_verdict([base.to_json(), other.to_json()])
    assert verdict == "FAIL" and "batch=1: FAIL (its run FAILed" in why and "batch=2: UNJUDGED" in why


def test_a_cell_that_did_not_run_keeps_the_sweep_from_passing(tmp_path):
    records = [_cell(tmp_path, 1, _documents(4, n=4))]
    records.append(CellRecord("batch=8", {"batch": "8"}, NOT_STARTED, 2, error="specdec-eval: error: unknown task"))
    cells = [v.to_json() for v in judge(records, exact=True)]
    verdict, why = sweep_verdict(cells)
    assert verdict == "FAIL" and why == (
        "1 NOT-RUN of 2 cells: batch=8: NOT-RUN (could not start: specdec-eval: error: unknown task)"
    )
