"""Random-order subsets: a seeded order that is the same everywhere, the plan handed to lm-eval, and what lm-eval
0.4.13 really does with `samples=` (checked on the self-written smoke task, no model)."""

from __future__ import annotations

import os

import pytest
from specdec_eval.evals.tasks.subsets import SubsetPlan, plan_subset, random_order, subset_note

from specdec_eval.errors import UserError


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def test_the_order_is_a_pinned_permutation():
    order = random_order(1319, seed=0, key="gsm8k")
    assert sorted(order) == list(range(1319))
    # pinned: a hash of (seed, key, index) does not change with numpy, Python or the platform
    assert order[:8] == [559, 667, 933, 1183, 871, 890, 53, 540]
    assert random_order(198, 0, "gpqa_diamond")[:4] == [117, 34, 7, 61]
    assert random_order(1319, 1, "gsm8k") != order and random_order(1319, 0, "other") != order
    assert random_order(0, 0) == []


def test_random_subsets_are_nested_prefixes_of_the_order():
    small, large = plan_subset("gsm8k", 1319, 200, "random", 7), plan_subset("gsm8k", 1319, 400, "random", 7)
    assert large.order[:200] == small.order == tuple(random_order(1319, 7, "gsm8k")[:200])
    assert small.samples == sorted(small.order) and small.n == 200 and small.seed == 7
    assert small.lm_eval_kwargs("specdec_gsm8k") == {"samples": {"specdec_gsm8k": small.samples}}
    # the order is not the dataset's: a subset of 200 spans the whole file
    assert max(small.order) > 1000 and min(small.order) < 300


def test_first_n_and_all():
    first = plan_subset("gsm8k", 1319, 50)
    assert first.how == "first" and first.order == tuple(range(50)) and first.seed is None
    assert first.lm_eval_kwargs("t") == {"limit": 50} and first.doc_id(7) == 7
    everything = plan_subset("gsm8k", 1319)
    assert everything.how == "all" and everything.n == 1319 and everything.lm_eval_kwargs("t") == {}
    assert plan_subset("gsm8k", 1319, 5000).how == "all"  # a limit above the size takes the whole task
    shuffled = plan_subset("gsm8k", 1319, None, "random", 0)
    assert shuffled.n == 1319 and shuffled.lm_eval_kwargs("t") == {}  # every document, in the seeded order
    assert shuffled.doc_id(559) == 559 and shuffled.order_key(559) == 0


def test_bad_requests_are_user_errors():
    with pytest.raises(UserError, match="--sample"):
        plan_subset("gsm8k", 1319, 10, "stratified")
    with pytest.raises(UserError, match="--limit"):
        plan_subset("gsm8k", 1319, 0, "random")
    with pytest.raises(UserError, match="no documents"):
        plan_subset("gsm8k", 0)


def test_manifest_record_rebuilds_the_plan():
    plan = plan_subset("gpqa_diamond", 198, 40, "random", 3)
    record = plan.to_dict()
    assert record["order"] == list(plan.order) and len(record["order_sha256"]) == 64
    rebuilt = plan_subset(record["task"], record["n_total"], record["n"], record["how"], record["seed"])
    assert rebuilt == plan and rebuilt.to_dict() == record
    assert SubsetPlan("t", 3, "random", 0, (2, 0)).position(0) == 1


def test_subset_notes():
    assert subset_note(1319, 1319, "all") is None and subset_note(1319, 1319, "random") is None
    first = subset_note(200, 1319, "first")
    assert "first 200 of 1319 documents (15%)" in first and "easier" in first and "--sample random" in first
    random = subset_note(300, 1319, "random")
    assert "seeded random 300 of 1319" in random and "unbiased" in random and "n = 300" in random
    with pytest.raises(ValueError):
        subset_note(10, 100, "stratified")


@pytest.fixture(scope="module")
def smoke_task(tmp_path_factory):
    """Builds lm-eval's requests for our GSM8K smoke task (8 documents, 5-shot from 5 training problems)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from lm_eval.tasks import TaskManager
    from specdec_eval.evals.tasks.registry import TASKS, source_for, write_task_yamls

    spec = TASKS["gsm8k_smoke"]
    folder = write_task_yamls([spec], {spec.name: source_for(spec, None)}, tmp_path_factory.mktemp("tasks"), 0)
    manager = TaskManager(include_path=str(folder), include_defaults=False)

    def build(**kwargs):
        task = manager.load([spec.lm_eval_name])["tasks"][spec.lm_eval_name]
        task.set_fewshot_seed(1234)  # what simple_evaluate does with its default fewshot_random_seed
        task.build_all_requests(**kwargs)
        return task

    return spec, build


def test_lm_eval_samples_follow_the_plan(smoke_task):
    spec, build = smoke_task
    plan = plan_subset(spec.name, 8, 3, "random", seed=0)
    task = build(samples=plan.lm_eval_kwargs(spec.lm_eval_name)["samples"][spec.lm_eval_name])
    docs = list(task.eval_docs)
    instances = task.instances
    # Instance.doc_id is the position within the sorted subset; the plan maps it back to the document
    assert [i.doc_id for i in instances] == [0, 1, 2]
    assert [docs[plan.doc_id(i.doc_id)]["question"] for i in instances] == [i.doc["question"] for i in instances]
    # sorting the requests by order_key gives the plan's evaluation order
    ordered = sorted(instances, key=lambda i: plan.order_key(i.doc_id))
    assert [plan.doc_id(i.doc_id) for i in ordered] == list(plan.order)


def test_lm_eval_few_shot_prompts_depend_on_position(smoke_task):
    """The pitfall subsets.py documents: a subset's k-th document gets the shots of a full run's k-th."""
    spec, build = smoke_task
    full = {i.doc_id: i.arguments[0] for i in build().instances}
    plan = plan_subset(spec.name, 8, 3, "random", seed=0)
    subset = build(samples=plan.samples).instances
    for position, instance in enumerate(subset):
        shots = instance.arguments[0].rsplit("Question:", 1)[0]
        assert shots == full[position].rsplit("Question:", 1)[0]  # the shots of the full run's document k
    # so the same document is prompted differently in the subset run and in the full run
    assert any(full[plan.doc_id(i.doc_id)] != i.arguments[0] for i in subset)
