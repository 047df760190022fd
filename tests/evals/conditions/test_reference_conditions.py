"""References carry their conditions: what an entry states is read and checked, a run's differences are named in
words, the accuracy gate reads NO-GATE on them unless accepted, and the lookup prefers an entry the run matches."""

from __future__ import annotations

from pathlib import Path

import pytest
from specdec_eval.evals.conditions.gen_kwargs import GenKwargs
from specdec_eval.evals.conditions.reference import ReferenceConditions, check_conditions, differences
from specdec_eval.evals.gates.references import load_references, lookup
from specdec_eval.evals.tasks.registry import TASKS, task_conditions
from specdec_eval.results.run_summary import FAIL, NO_GATE, PASS
from specdec_eval.stats.hypothesis import HypothesisTest
from specdec_eval.workers.loading.chat_template import ChatTemplateKwargs

from specdec_eval.errors import UserError

MEDIUM = ChatTemplateKwargs.parse('{"reasoning_effort": "medium"}')
SAMPLED_REF = {
    "accuracy": 60.0,
    "task_variant": "gpqa_diamond_cot_zeroshot_aa",
    "temperature": 1.0,
    "top_p": 1.0,
    "apply_chat_template": True,
    "chat_template_kwargs": {"reasoning_effort": "medium"},
    "num_fewshot": 0,
    "source": "test",
}


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def aa(gen: str = "", chat: bool = True, kwargs: ChatTemplateKwargs = MEDIUM, task: str = "gpqa_diamond_aa", **kw):
    return task_conditions(
        TASKS[task],
        gen_kwargs=GenKwargs.parse(gen),
        apply_chat_template=chat,
        chat_template_kwargs=kwargs if chat else ChatTemplateKwargs(),
        **kw,
    )


def test_greedy_run_against_a_sampled_reference_reads_no_gate_with_the_mismatch_named():
    check = check_conditions(aa(), SAMPLED_REF)
    assert check.differences == ("reference sampled at T=1, this run greedy",)
    assert check.blocks and check.verdict(PASS) == NO_GATE and check.verdict(FAIL) == NO_GATE
    assert check.lines()[0].startswith(
        "NO-GATE: this run's conditions differ from the reference's: reference "
        "sampled at T=1, this run greedy (pass --accept-condition-mismatch"
    )


def test_matching_conditions_let_the_gate_judge():
    check = check_conditions(aa("temperature=1.0,top_p=1.0", repeats=2), SAMPLED_REF)
    assert check.differences == () and not check.blocks
    assert (check.verdict(PASS), check.verdict(FAIL)) == (PASS, FAIL)
    assert check.lines() == ["conditions match the reference's", "the reference does not state: top_k, max_output_len"]


def test_accepting_the_mismatch_lets_the_gate_judge_and_says_so():
    check = check_conditions(aa(), SAMPLED_REF, accepted=True)
    assert check.verdict(FAIL) == FAIL and check.verdict(PASS) == PASS
    assert check.lines()[0] == (
        "judged although the conditions differ (--accept-condition-mismatch): reference sampled at T=1, this run greedy"
    )
    assert check.to_dict()["accepted"] is True and check.to_dict()["blocks"] is False


def test_other_verdicts_pass_through():
    check = check_conditions(aa(), SAMPLED_REF)
    assert check.verdict("REPORT") == "REPORT" and check.verdict(NO_GATE) == NO_GATE


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (
            lambda: aa("temperature=0.6,top_p=0.95"),
            ["reference sampled at T=1, this run at T=0.6", "reference top_p 1, this run 0.95"],
        ),
        (
            lambda: aa("temperature=1.0", chat=False),
            ["reference rendered through the chat template, this run without it"],
        ),
        (
            lambda: aa("temperature=1.0", kwargs=ChatTemplateKwargs.parse('{"reasoning_effort": "high"}')),
            ['reference chat-template kwargs {"reasoning_effort":"medium"}, this run {"reasoning_effort":"high"}'],
        ),
        (
            lambda: aa("temperature=1.0", kwargs=ChatTemplateKwargs()),
            ['reference chat-template kwargs {"reasoning_effort":"medium"}, this run none'],
        ),
        (
            lambda: aa("temperature=1.0", task="gpqa_diamond"),
            ["reference measured on the gpqa_diamond_cot_zeroshot_aa prompt, this run on gpqa_diamond_cot_zeroshot"],
        ),
        (lambda: aa("temperature=1.0", num_fewshot=5), ["reference 0-shot, this run 5-shot"]),
    ],
)
def test_each_difference_in_words(run, expected):
    assert list(check_conditions(run(), SAMPLED_REF).differences) == expected


def test_a_greedy_reference_against_a_sampled_run_and_output_length():
    ref = ReferenceConditions(temperature=0.0, max_output_len=32768, top_p=0.5)
    assert differences(aa("temperature=1.0"), ref) == [
        "reference greedy, this run sampled at T=1",
        "reference up to 32768 output tokens, this run 512",
    ]
    assert differences(aa(), ref) == ["reference up to 32768 output tokens, this run 512"]  # top_p: greedy both


def test_unstated_conditions_are_listed_never_counted():
    check = check_conditions(aa("temperature=1.0"), {"accuracy": 50.0, "source": "x", "temperature": "unknown"})
    assert check.differences == () and not check.blocks
    assert "temperature" in check.unstated and "chat_template_kwargs" in check.unstated
    greedy_plain = check_conditions(aa(chat=False), {"accuracy": 50.0, "source": "x"})
    assert "top_p" not in greedy_plain.unstated and "chat_template_kwargs" not in greedy_plain.unstated


def test_tensorrt_llm_extra_acc_spec_is_read_as_generation_kwargs():
    ref = ReferenceConditions.of({"extra_acc_spec": "temperature=0.8,top_p=0.95"})
    assert (ref.temperature, ref.top_p) == (0.8, 0.95)
    assert ReferenceConditions.of({"extra_acc_spec": "use_sa_spec"}).temperature is None
    assert ReferenceConditions.of({"extra_acc_spec": "chat_template"}).temperature is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("temperature", -1),
        ("temperature", "hot"),
        ("top_p", 2.0),
        ("top_k", 1.5),
        ("num_fewshot", -1),
        ("max_output_len", 0),
        ("apply_chat_template", "yes"),
        ("chat_template_kwargs", ["x"]),
        ("task_variant", 3),
    ],
)
def test_bad_condition_values_in_a_references_file_are_one_line_errors(tmp_path, key, value):
    path = tmp_path / "arith.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"M": [{"accuracy": 50.0, "source": "x", key: value}]}))
    with pytest.raises(UserError, match=f"arith.yaml: M entry 0: {key}") as info:
        load_references("arith", tmp_path)
    assert "\n" not in str(info.value)


SELECTION = {
    "dtype": "auto",
    "quant_algo": None,
    "kv_cache_quant_algo": None,
    "spec_dec_algo": None,
    "extra_acc_spec": None,
    "kv_cache": None,
    "num_fewshot": 0,
    "max_output_len": 512,
    "apply_chat_template": True,
}


def test_lookup_prefers_the_entry_whose_conditions_the_run_shares(tmp_path: Path):
    import yaml

    (tmp_path / "gpqa_diamond.yaml").write_text(
        yaml.safe_dump(
            {
                "M": [
                    {"accuracy": 40.0, "source": "greedy", "temperature": 0.0},
                    {"accuracy": 50.0, "source": "sampled", "temperature": 1.0},
                ]
            }
        )
    )
    sampled, greedy = aa("temperature=1.0"), aa()
    assert lookup("gpqa_diamond_aa", "M", SELECTION, tmp_path, sampled).accuracy == 50.0
    assert lookup("gpqa_diamond_aa", "M", SELECTION, tmp_path, greedy).accuracy == 40.0
    assert lookup("gpqa_diamond_aa", "M", SELECTION, tmp_path).accuracy == 40.0  # without conditions: first match
    only_greedy = tmp_path / "only"
    only_greedy.mkdir()
    (only_greedy / "gpqa_diamond.yaml").write_text(
        yaml.safe_dump({"M": [{"accuracy": 40.0, "source": "g", "temperature": 0.0}]})
    )
    ref = lookup("gpqa_diamond_aa", "M", SELECTION, only_greedy, sampled)  # still found: the gate names the difference
    assert ref.accuracy == 40.0 and check_conditions(sampled, ref.entry).blocks


def test_both_gpqa_prompt_variants_read_one_references_file():
    assert load_references("gpqa_diamond_aa") == load_references("gpqa_diamond")


def test_shipped_gpt_oss_gpqa_reference_states_the_seeds_conditions():
    """TestGPTOSS: the aa prompt, chat template with reasoning_effort medium, decoded at the task's temperature 0
    (TensorRT-LLM's wrapper replaces the test's 1.0); output length unknown (32768 or 128179 by test)."""
    ref = lookup(
        "gpqa_diamond_aa", "GPT-OSS/120B-MXFP4", dict(SELECTION, spec_dec_algo="Eagle3", max_output_len=128179)
    )
    assert ref.accuracy == 65.0
    seed_run = aa("temperature=1.0,top_p=1.0", max_output_len=128179, repeats=2)
    assert check_conditions(seed_run, ref.entry).differences == ("reference greedy, this run sampled at T=1",)
    as_decoded = aa(max_output_len=128179)
    check = check_conditions(as_decoded, ref.entry)
    assert check.differences == () and check.unstated == ("max_output_len",)
    lm_eval_prompt = aa(task="gpqa_diamond", max_output_len=128179)
    assert check_conditions(lm_eval_prompt, ref.entry).blocks


def test_shipped_smollm2_references_state_greedy_and_their_prompt():
    selection = dict(SELECTION, num_fewshot=5, max_output_len=256, apply_chat_template=False)
    gsm8k = lookup("gsm8k", "HuggingFaceTB/SmolLM2-135M-Instruct", selection)
    run = task_conditions(TASKS["gsm8k"])
    assert check_conditions(run, gsm8k.entry).differences == ()
    sampled = task_conditions(TASKS["gsm8k_sampled"])
    assert check_conditions(sampled, gsm8k.entry).differences == ("reference greedy, this run sampled at T=0.7",)


def test_the_gate_rule_on_a_real_hypothesis_test():
    """A FAIL of the fixed gate against a reference of other conditions is not evidence either: NO-GATE."""
    test = HypothesisTest(ref_accuracy=65.0, num_samples=198, floor=25.0)
    check = check_conditions(aa(), SAMPLED_REF)
    assert test.verdict(40.0) == FAIL and check.verdict(test.verdict(40.0)) == NO_GATE


def test_a_sequential_verdict_obeys_the_conditions_rule_too():
    """`run --early-stop` against a reference measured under other conditions: the design's FAIL at a look is no more
    evidence than the fixed test's (it read FAIL, overriding the NO-GATE)."""
    from specdec_eval.evals.gates.accuracy_gate import accuracy_gate
    from specdec_eval.evals.gates.references import Reference

    ref = Reference("gpqa_diamond_aa", "M", 60.0, dict(SAMPLED_REF))
    sequential = {"verdict": FAIL, "n": 32, "reason": "FAIL at 32/198"}
    blocked = accuracy_gate(
        "gpqa_diamond_aa", 0.0, 32, ref, sequential=sequential, conditions=check_conditions(aa(), SAMPLED_REF)
    )
    assert blocked.verdict == NO_GATE and "the gate says NO-GATE: the conditions differ" in blocked.reason
    judged = accuracy_gate(
        "gpqa_diamond_aa",
        0.0,
        32,
        ref,
        sequential=sequential,
        conditions=check_conditions(aa("temperature=1.0,top_p=1.0"), SAMPLED_REF),
    )
    assert judged.verdict == FAIL
