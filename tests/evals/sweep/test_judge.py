"""Each cell judged against the base on the same documents: a cell whose acceptance falls is a FAIL with its size
and p-value, a cell whose greedy outputs move is a FAIL naming its first divergent document, a cell equal to the
base passes, and a cell that never ran is shown as such (recorded runs made by hand, no engine)."""

from __future__ import annotations

from specdec_eval.evals.sweep.judge import BASE, FAIL, NOT_RUN, PASS, judge
from specdec_eval.evals.sweep.runner import DONE, NOT_STARTED, CellRecord

from ...results.test_compare_acceptance import _documents, _samples, _summary
from ...results.test_runs_table import make_run


def _cell(tmp_path, n: int, counts, outputs=None) -> CellRecord:
    samples = _samples(counts)
    for s, ids in zip(samples, outputs or [], strict=False):
        s["output_token_ids"] = ids
    run = make_run(tmp_path, n, samples=samples, tasks=_summary(counts))
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
