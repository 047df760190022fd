"""TensorRT-LLM's GPQA prompt (`gpqa_diamond_cot_zeroshot_aa`) as our task `gpqa_diamond_aa`: its prompt, target,
regex and metric through lm-eval on our data, the same seeded choice order as `gpqa_diamond`, sealed records.

Rows written here are INVENTED (tests/gpqa_helpers.py). The real zip is read in memory only; its tests assert counts
and hashes, and compute every message-worthy value outside the assert, so that no failure report can hold its text.
"""

from __future__ import annotations

import re

import pytest
from lm_eval.api.metrics import exact_match_hf_evaluate
from lm_eval.filters.extraction import RegexFilter
from lm_eval.utils import apply_template
from specdec_eval.evals.tasks import gpqa, gpqa_aa
from specdec_eval.evals.tasks.data import DataSource
from specdec_eval.evals.tasks.registry import TASKS, task_conditions, write_task_yamls

from ...gpqa_helpers import REAL_ZIP, ROWS, write_csv

# TensorRT-LLM tensorrt_llm/evaluate/lm_eval_tasks/gpqa/cot_zeroshot_aa/_gpqa_cot_zeroshot_aa_yaml, as published
THEIR_PROMPT = (
    "Answer the following multiple choice question. The last line of your response should be of the following format: "
    "'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering.\n"
    "{{Question}}\nA) {{choice1}}\nB) {{choice2}}\nC) {{choice3}}\nD) {{choice4}}"
)
THEIR_REGEX = "(?i)Answer[ \\t]*:[ \\t]*([A-D])"


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def build(tmp_path, source: DataSource, seed: int = 0, name: str = "gpqa_diamond_aa"):
    from lm_eval.tasks import TaskManager

    spec = TASKS[name]
    folder = write_task_yamls([spec], {spec.name: source}, tmp_path / f"tasks-{name}-{seed}", seed)
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    return manager.load([spec.lm_eval_name])["tasks"][spec.lm_eval_name]


def docs_of(task) -> list[dict]:
    return list(task.test_docs() if task.has_test_docs() else task.validation_docs())


def test_prompt_regex_and_generation_are_tensorrt_llms():
    assert gpqa_aa.PROMPT == THEIR_PROMPT and gpqa_aa.ANSWER_REGEX == THEIR_REGEX
    c = task_conditions(TASKS["gpqa_diamond_aa"])
    assert dict(c.generation_kwargs) == {"until": ["</s>"], "do_sample": False, "temperature": 0.0}
    assert (c.num_fewshot, c.task_variant) == (0, "gpqa_diamond_cot_zeroshot_aa")


OUTPUTS = [
    "Reasoning...\nAnswer: B",
    "answer:c",
    "Answer :\tD and more",
    "ANSWER: a",
    "Answer: E",
    "The answer is (B)",
    "Answer: B\nAnswer: C",
    "Final Answer: D",
    "Answer:  B",
    "Answer - B",
    "",
    "Answer: (B)",
    "Answer: b)",
]


@pytest.mark.parametrize("target", ["A", "B", "C", "D"])
def test_our_extraction_and_score_equal_lm_evals_filter_and_metric(target):
    """lm-eval's regex filter (group_select 0, fallback [invalid]) and exact_match ignoring case and punctuation."""
    theirs = list(RegexFilter(regex_pattern=THEIR_REGEX, group_select=0).apply([[o] for o in OUTPUTS], [{}] * 13))
    for output, (their,) in zip(OUTPUTS, theirs, strict=True):
        ours = gpqa_aa.extract(output)
        assert ours == their, output
        metric = exact_match_hf_evaluate([their], [target], ignore_case=True, ignore_punctuation=True)["exact_match"]
        assert gpqa_aa.is_correct(ours, target) == bool(metric), output
        assert gpqa_aa.is_correct(ours, f"({target})") == bool(metric)  # our docs' "(B)" form too


def test_records_keep_only_a_letter():
    family = gpqa_aa.FAMILY
    assert [family.extracted(x) for x in ("b", "C", "[invalid]", "quoted text")] == ["B", "C", "[invalid]", "[other]"]
    assert family.sealed and family.filters == ("strict-match",)
    assert family.live_correct("so... Answer: C", {"answer": "(C)"}) is True
    assert family.live_correct("Answer: A", {"answer": "(C)"}) is False
    assert family.live_correct("Answer: A", {"answer": "C"}) is None


def test_lm_eval_builds_their_prompt_on_our_docs(tmp_path):
    source = DataSource("synthetic", "csv", {"train": str(write_csv(tmp_path / "gpqa_diamond.csv", ROWS))})
    task = build(tmp_path, source, seed=3)
    docs = docs_of(task)
    assert len(docs) == len(ROWS)
    correct = {r["Record ID"]: r["Correct Answer"] for r in ROWS}
    ours = {d["Record ID"]: d["answer"][1] for d in docs_of(build(tmp_path, source, 3, "gpqa_diamond"))}
    for doc in docs:
        prompt, target = task.doc_to_text(doc), task.doc_to_target(doc)
        assert prompt == apply_template(THEIR_PROMPT, doc)
        assert re.fullmatch("[ABCD]", target) and target == ours[doc["Record ID"]]  # gpqa_diamond's order
        assert f"\n{target}) {correct[doc['Record ID']]}" in prompt
    assert task.config.generation_kwargs == {"until": ["</s>"], "do_sample": False, "temperature": 0.0}
    assert [f.name for f in task._filters] == ["strict-match"]


def test_a_response_is_scored_by_lm_eval_as_ours_scores_it(tmp_path):
    source = DataSource("synthetic", "csv", {"train": str(write_csv(tmp_path / "gpqa_diamond.csv", ROWS[:8]))})
    task = build(tmp_path, source)
    for doc in docs_of(task):
        target = task.doc_to_target(doc)
        wrong = next(x for x in "ABCD" if x != target)
        for output in (f"thinking\nAnswer: {target}", f"Answer: {wrong}", "no answer line"):
            [[filtered]] = list(RegexFilter(regex_pattern=THEIR_REGEX).apply([[output]], [doc]))
            scored = task.process_results(doc, [filtered])["exact_match"]
            assert bool(scored) == gpqa_aa.is_correct(gpqa_aa.extract(output), target)


def test_smoke_variant_uses_the_shared_smoke_questions(tmp_path):
    spec = TASKS["gpqa_diamond_aa_smoke"]
    source = spec.family.source(spec, None)
    assert source.files["train"].endswith("gpqa_diamond/gpqa_diamond.csv")
    assert len(docs_of(build(tmp_path, source, name="gpqa_diamond_aa_smoke"))) >= 5


needs_real_zip = pytest.mark.skipif(not REAL_ZIP.is_file(), reason=f"{REAL_ZIP} not present")


@needs_real_zip
def test_on_the_real_zip_every_target_indexes_the_correct_answer(tmp_path):
    """198 questions in memory; counts only (never text) reach an assertion."""
    source = DataSource(f"local:{REAL_ZIP}", "gpqa-zip", {"train": str(REAL_ZIP)})
    task = build(tmp_path, source)
    docs = docs_of(task)
    rows = gpqa.read_rows("gpqa-zip", str(REAL_ZIP), None)
    by_id = {r["Record ID"]: r for r in rows}
    num_docs = len(docs)
    shown = sum(
        f"\n{task.doc_to_target(d)}) {by_id[d['Record ID']]['Correct Answer'].strip()}" in task.doc_to_text(d)
        for d in docs
    )
    starts = sum(task.doc_to_text(d).startswith(THEIR_PROMPT.split("{{")[0]) for d in docs)
    raw_question = sum(by_id[d["Record ID"]]["Question"] in task.doc_to_text(d) for d in docs)
    lm_eval_variant = docs_of(build(tmp_path, source, 0, "gpqa_diamond"))
    same_order = sum(a["answer"] == b["answer"] for a, b in zip(docs, lm_eval_variant, strict=True))
    assert (num_docs, shown, starts, raw_question, same_order) == (198, 198, 198, 198, 198)
