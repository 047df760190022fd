"""One task's generation conditions in a run: built from the task's YAML, its own and the run's generation kwargs;
recorded, folded into the run key only when they differ from the task's defaults; the same layering in the task
YAMLs a run writes; `gsm8k_sampled` is `gsm8k` with generation kwargs."""

from __future__ import annotations

import pytest
import yaml
from specdec_eval.evals.conditions.conditions import GenerationConditions
from specdec_eval.evals.conditions.gen_kwargs import GenKwargs
from specdec_eval.evals.conditions.repeats import MAX_REPEATS, check_repeats, sample_seed
from specdec_eval.evals.tasks.registry import TASKS, source_for, task_conditions, write_task_yamls
from specdec_eval.workers.loading.chat_template import ChatTemplateKwargs

from specdec_eval.errors import UserError

MEDIUM = ChatTemplateKwargs.parse('{"reasoning_effort": "medium"}')


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def test_task_defaults():
    c = task_conditions(TASKS["gpqa_diamond_aa"])
    assert (c.task_variant, c.num_fewshot, c.greedy, c.max_output_len, c.repeats) == (
        "gpqa_diamond_cot_zeroshot_aa",
        0,
        True,
        512,
        1,
    )
    assert c.identity() == {}  # the task's defaults add nothing to a run key
    assert task_conditions(TASKS["gsm8k"]).describe() == "greedy; no chat template; 5-shot; gsm8k; up to 256 tokens"


def test_the_seeds_configuration():
    c = task_conditions(
        TASKS["gpqa_diamond_aa"],
        gen_kwargs=GenKwargs.parse("temperature=1.0,top_p=1.0"),
        apply_chat_template=True,
        chat_template_kwargs=MEDIUM,
        repeats=2,
    )
    assert (c.temperature, c.top_p, c.repeats, c.chat_template_kwargs) == (1.0, 1.0, 2, MEDIUM)
    assert c.describe() == (
        'sampled at T=1; chat template with {"reasoning_effort":"medium"}; 0-shot; '
        "gpqa_diamond_cot_zeroshot_aa; up to 512 tokens; 2 samples per question"
    )
    assert c.identity() == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "repeats": 2,
        "chat_template_kwargs": {"reasoning_effort": "medium"},
    }
    assert dict(c.generation_kwargs) == {"until": ["</s>"], "do_sample": True, "temperature": 1.0, "top_p": 1.0}
    assert GenerationConditions.from_dict(c.to_dict()) == c


def test_sampled_and_greedy_runs_never_share_a_key():
    greedy = task_conditions(TASKS["gsm8k"])
    sampled = task_conditions(TASKS["gsm8k"], gen_kwargs=GenKwargs.parse("temperature=0.7"))
    other_top_p = task_conditions(TASKS["gsm8k"], gen_kwargs=GenKwargs.parse("temperature=0.7,top_p=0.9"))
    assert len({repr(c.identity()) for c in (greedy, sampled, other_top_p)}) == 3
    # top_p and top_k mean nothing to a greedy run: they do not split its key
    assert task_conditions(TASKS["gsm8k"], gen_kwargs=GenKwargs.parse("top_p=0.5")).identity() == {}


def test_gsm8k_sampled_is_gsm8k_with_generation_kwargs():
    alias = task_conditions(TASKS["gsm8k_sampled"])
    same = task_conditions(TASKS["gsm8k"], gen_kwargs=GenKwargs.parse("temperature=0.7"))
    assert alias == same and alias.temperature == 0.7 and TASKS["gsm8k_sampled"].temperature == 0.7


def test_output_length_from_kwargs_or_option():
    assert task_conditions(TASKS["gsm8k"], max_output_len=100).max_output_len == 100
    assert task_conditions(TASKS["gsm8k"], gen_kwargs=GenKwargs.parse("max_gen_toks=64")).max_output_len == 64


def test_bad_combinations_are_one_line_errors():
    with pytest.raises(UserError, match="needs --apply-chat-template"):
        task_conditions(TASKS["gsm8k"], chat_template_kwargs=MEDIUM)
    with pytest.raises(UserError, match="copies of one answer"):
        task_conditions(TASKS["gsm8k"], repeats=4)
    for bad in (0, -1, MAX_REPEATS + 1, 2.5, True):
        with pytest.raises(UserError, match="--repeats must be"):
            check_repeats(bad, 1.0)  # type: ignore[arg-type]


def test_sample_seeds_depend_on_exactly_seed_task_document_and_repeat():
    base = sample_seed(0, "gsm8k", 17, 0)
    assert base == sample_seed(0, "gsm8k", 17, 0) and 0 <= base < 2**63
    others = [
        sample_seed(1, "gsm8k", 17, 0),
        sample_seed(0, "gpqa_diamond", 17, 0),
        sample_seed(0, "gsm8k", 18, 0),
        sample_seed(0, "gsm8k", 17, 1),
        sample_seed(0, "gsm8k", 1, 70),
    ]
    assert base not in others and len(set(others)) == len(others)
    seeds = {sample_seed(0, "gsm8k", d, r) for d in range(200) for r in range(8)}
    assert len(seeds) == 1600
    with pytest.raises(ValueError):
        sample_seed(0, "gsm8k", 0, -1)


def _yaml_kwargs(tmp_path, name: str, **kwargs) -> dict:
    spec = TASKS[name]
    folder = write_task_yamls([spec], {spec.name: source_for(spec, None)}, tmp_path, 0, **kwargs)
    text = (folder / f"{spec.lm_eval_name}.yaml").read_text()
    loader = type("L", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda *_: None)
    return yaml.load(text, Loader=loader)  # noqa: S506


def test_task_yamls_state_the_applied_kwargs(tmp_path):
    written = _yaml_kwargs(tmp_path / "a", "gsm8k_smoke", gen_kwargs=GenKwargs.parse("temperature=0.6,top_p=0.95"))
    assert written["generation_kwargs"] == {
        "until": ["Question:", "</s>", "<|im_end|>"],
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.95,
    }
    assert "repeats" not in written
    again = _yaml_kwargs(tmp_path / "b", "gpqa_diamond_aa_smoke", repeats=3)
    assert again["generation_kwargs"] == {"until": ["</s>"], "do_sample": False, "temperature": 0.0}
    assert again["repeats"] == 3


def test_a_task_module_that_states_no_generation_kwargs_still_has_conditions(tmp_path):
    """A user's family may leave its kwargs to the YAML it includes: greedy conditions, and no kwargs applied."""
    from specdec_eval.evals.tasks.family import TaskFamily, TaskSpec

    class Arith(TaskFamily):
        name = "arith_conditions_test"
        filters = ("exact",)
        max_output_len = 8

    spec = TaskSpec("arith_conditions_test", Arith())
    c = task_conditions(spec, stock=tmp_path)
    assert (c.task_variant, c.greedy, c.max_output_len) == ("arith_conditions_test", True, 8)
    assert Arith.reference_name == "arith_conditions_test"
    with pytest.raises(UserError, match="does not state its generation_kwargs"):
        task_conditions(spec, gen_kwargs=GenKwargs.parse("temperature=1"), stock=tmp_path)
