"""Generation kwargs: lm-eval's --gen_kwargs syntax, every bad value refused in one line, and lm-eval's meaning
(applied on a task's YAML generation_kwargs; do_sample against temperature)."""

from __future__ import annotations

import pytest
from lm_eval.models.utils import normalize_gen_kwargs
from lm_eval.utils import simple_parse_args_string
from specdec_eval.evals.conditions.gen_kwargs import GenKwargs

from specdec_eval.errors import UserError

GSM8K_YAML = {"until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False, "temperature": 0.0}


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def test_parse_types_each_key_and_keeps_the_order():
    kw = GenKwargs.parse("temperature=1.0, top_p=0.95,top_k=40,seed=7,max_gen_toks=512,do_sample=true,")
    assert kw.items == (
        ("temperature", 1.0),
        ("top_p", 0.95),
        ("top_k", 40),
        ("seed", 7),
        ("max_gen_toks", 512),
        ("do_sample", True),
    )
    assert str(kw) == "temperature=1.0,top_p=0.95,top_k=40,seed=7,max_gen_toks=512,do_sample=true"
    assert GenKwargs.parse(str(kw)) == kw  # round trip
    assert not GenKwargs.parse("") and not GenKwargs.parse(None) and not GenKwargs.parse(" , ")


def test_parse_reads_what_lm_eval_reads():
    """Same keys and values as lm-eval's own parser for every well-formed string (ours only types more strictly)."""
    for text in (
        "temperature=1.0,top_p=1.0",
        "temperature=0.6,top_p=0.95,top_k=20",
        "max_gen_toks=32768",
        "do_sample=True,temperature=0.7",
        "seed=3,temperature=2",
    ):
        ours, theirs = GenKwargs.parse(text).as_dict(), simple_parse_args_string(text)
        assert ours == {k: v for k, v in theirs.items()}, text


@pytest.mark.parametrize("alias", ["max_new_tokens", "max_tokens", "max_completion_tokens"])
def test_output_length_aliases_become_max_gen_toks(alias):
    assert GenKwargs.parse(f"{alias}=300").as_dict() == {"max_gen_toks": 300}


BAD = {
    "temperature": "--gen-kwargs: 'temperature' is not key=value",
    "temperature=1.0;top_p=0.9": "expected a number",
    "temp=1.0": "unknown key 'temp'",
    "min_p=0.1": "unknown key 'min_p'",
    "until=Question:": "unknown key 'until'",
    "temperature=nan": "finite",
    "temperature=inf": "finite",
    "temperature=-0.5": ">= 0",
    "temperature=1e-7": "decodes greedily",
    "temperature=hot": "expected a number",
    "top_p=0": "(0, 1]",
    "top_p=1.5": "(0, 1]",
    "top_p=-0.1": "(0, 1]",
    "top_p=nan": "finite",
    "top_k=-1": "[0,",
    "top_k=2.5": "whole number",
    "top_k=40.0": "whole number",
    "seed=-3": "[0,",
    "seed=9223372036854775808": "[0,",
    "max_gen_toks=0": "[1,",
    "max_tokens=-5": "[1,",
    "do_sample=yes": "true or false",
    "temperature=1,temperature=0.5": "temperature given twice",
    "max_gen_toks=10,max_tokens=20": "max_gen_toks given twice (as max_tokens)",
}


@pytest.mark.parametrize("text", BAD)
def test_every_bad_value_is_one_user_error(text):
    with pytest.raises(UserError) as info:
        GenKwargs.parse(text)
    message = str(info.value)
    assert BAD[text] in message and "\n" not in message


def test_typed_values_are_checked_too():
    """A references file or a task spec gives values already typed: the same checks apply."""
    for bad in ({"temperature": True}, {"top_k": "40"}, {"do_sample": 1}, {"temperature": float("nan")}):
        with pytest.raises(UserError):
            GenKwargs.of(bad)
    assert GenKwargs.of({"top_k": 40.0}).as_dict() == {"top_k": 40}


def test_applied_on_a_task_yaml_as_lm_eval_updates_it():
    out = GenKwargs.parse("temperature=0.6,top_p=0.95").apply(GSM8K_YAML)
    assert out == {"until": GSM8K_YAML["until"], "do_sample": True, "temperature": 0.6, "top_p": 0.95}
    assert GSM8K_YAML["do_sample"] is False  # the task's own dict is not changed
    assert GenKwargs().apply(GSM8K_YAML) == GSM8K_YAML
    assert GenKwargs.parse("max_tokens=64").apply({**GSM8K_YAML, "max_new_tokens": 9})["max_gen_toks"] == 64
    assert "max_new_tokens" not in GenKwargs.parse("max_tokens=64").apply({**GSM8K_YAML, "max_new_tokens": 9})


def test_a_temperature_means_what_it_says_where_lm_eval_would_decode_greedily():
    """lm-eval keeps the YAML's do_sample: false beside a --gen_kwargs temperature and normalize_gen_kwargs then
    decodes greedily; ours sets do_sample from the temperature given."""
    merged = {**GSM8K_YAML, **simple_parse_args_string("temperature=1.0")}
    assert normalize_gen_kwargs(merged)["temperature"] == 0.0  # lm-eval 0.4.13: greedy, with a warning
    ours = GenKwargs.parse("temperature=1.0").apply(GSM8K_YAML)
    assert ours["do_sample"] is True and normalize_gen_kwargs(ours)["temperature"] == 1.0
    greedy = GenKwargs.parse("temperature=0").apply({**GSM8K_YAML, "do_sample": True, "temperature": 0.7})
    assert greedy["do_sample"] is False


def test_do_sample_false_alone_decodes_greedily():
    sampled_yaml = {**GSM8K_YAML, "do_sample": True, "temperature": 0.7}
    out = GenKwargs.parse("do_sample=false").apply(sampled_yaml)
    assert out["do_sample"] is False and normalize_gen_kwargs(out)["temperature"] == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("do_sample=false,temperature=0.8", "do_sample=false decodes greedily"),
        ("do_sample=true", "do_sample=true needs a temperature > 0"),
    ],
)
def test_contradictions_are_refused(text, expected):
    with pytest.raises(UserError, match=expected):
        GenKwargs.parse(text).apply(GSM8K_YAML)


def test_layering_keeps_the_later_kwargs():
    task = GenKwargs.of({"temperature": 0.7})
    run = GenKwargs.parse("temperature=1.0,top_p=0.9")
    assert run.over(task).as_dict() == {"temperature": 1.0, "top_p": 0.9}
    assert GenKwargs().over(task) == task
