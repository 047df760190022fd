"""Several samples per document: each response scored on its own by the task's lm-eval filters and metric (where
lm-eval's `take_first` would keep only the first), equal to the families' own cross-checked extraction."""

from __future__ import annotations

import pytest
from lm_eval.api.instance import Instance
from specdec_eval.evals.tasks import gpqa_aa, gsm8k
from specdec_eval.evals.tasks.registry import TASKS, source_for, write_task_yamls
from specdec_eval.evals.tasks.scoring import score_each


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def load(tmp_path, name: str, repeats: int = 1):
    from lm_eval.tasks import TaskManager

    spec = TASKS[name]
    folder = write_task_yamls([spec], {spec.name: source_for(spec, None)}, tmp_path / name, 0, repeats=repeats)
    task = TaskManager(include_path=str(folder), include_defaults=False).load([spec.lm_eval_name])["tasks"]
    task = task[spec.lm_eval_name]
    docs = list(task.test_docs() if task.has_test_docs() else task.validation_docs())
    return task, docs


def test_gsm8k_responses_scored_one_by_one_as_our_filters_score_them(tmp_path):
    task, docs = load(tmp_path, "gsm8k_smoke")
    doc = docs[0]
    final = gsm8k.final_answer(doc["answer"])
    responses = [f"so #### {final}", f"The answer is {final}.", "#### 999999", "no number", f"{final} or 7"]
    scored = score_each(task, doc, responses)
    for response, per_filter in zip(responses, scored, strict=True):
        assert set(per_filter) == {"strict-match", "flexible-extract"}
        for name, (extracted, correct) in per_filter.items():
            assert (extracted, correct) == gsm8k.FAMILY.own_extraction(response, name, doc["answer"]), response
    assert [s["strict-match"][1] for s in scored] == [True, False, False, False, False]


def test_gpqa_aa_responses_scored_one_by_one(tmp_path):
    task, docs = load(tmp_path, "gpqa_diamond_aa_smoke")
    doc = docs[0]
    target = task.doc_to_target(doc)
    responses = [f"Answer: {target}", "Answer: E", f"answer:{target.lower()}", "nothing"]
    scored = score_each(task, doc, responses)
    assert [s["strict-match"][1] for s in scored] == [gpqa_aa.is_correct(gpqa_aa.extract(r), target) for r in responses]
    assert [s["strict-match"][1] for s in scored] == [True, False, True, False]


def test_lm_evals_take_first_would_score_only_the_first_of_the_repeats(tmp_path):
    """Why score_each exists: a task YAML with repeats gives lm-eval's filters the list, and take_first keeps one."""
    task, docs = load(tmp_path, "gpqa_diamond_aa_smoke", repeats=3)
    assert task.config.repeats == 3
    doc = docs[0]
    target = task.doc_to_target(doc)
    wrong = next(x for x in "ABCD" if x != target)
    inst = Instance("generate_until", doc, ("prompt", {}), 0, ("t", 0, 3))
    inst.resps = [f"Answer: {wrong}", f"Answer: {target}", f"Answer: {target}"]
    task._instances = [inst]
    task.apply_filters()
    assert task.process_results(doc, [inst.filtered_resps["strict-match"]])["exact_match"] == 0.0  # 1 of 3 kept
    ours = score_each(task, doc, inst.resps)
    assert [s["strict-match"][1] for s in ours] == [False, True, True]  # each sample counted: 2 of 3
