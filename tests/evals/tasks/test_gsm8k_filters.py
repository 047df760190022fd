"""Our GSM8K filters and score equal lm-eval's stock `gsm8k` filters and exact_match metric on the same outputs.

lm-eval's side is built from the stock task config itself (lm_eval/tasks/gsm8k/gsm8k.yaml): its two `regex`
filters (each followed by `take_first`) and the `exact_match` metric with the YAML's keyword arguments. The
config values are also pinned literally, so a change in a future lm-eval release shows up here first.
"""

from __future__ import annotations

import functools
from pathlib import Path

import lm_eval.tasks
import pytest
import yaml
from lm_eval.api.metrics import exact_match_hf_evaluate
from lm_eval.api.registry import get_metric
from lm_eval.filters.extraction import RegexFilter
from lm_eval.filters.selection import TakeFirstFilter
from specdec_eval.evals.tasks import gsm8k


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect (about 0.3 s each with torch loaded): no engines are built here."""
    yield


STOCK_YAML = Path(lm_eval.tasks.__file__).parent / "gsm8k" / "gsm8k.yaml"

STRICT_PATTERN = "#### (\\-?[0-9\\.\\,]+)"
FLEXIBLE_PATTERN = "(-?[$0-9.,]{2,})|(-?[0-9]+)"
IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]


@functools.cache
def _stock_config() -> dict:
    return yaml.safe_load(STOCK_YAML.read_text(encoding="utf-8"))


def _stock_filters() -> dict[str, list[dict]]:
    return {f["name"]: f["filter"] for f in _stock_config()["filter_list"]}


def _stock_metric_kwargs() -> dict:
    (metric,) = _stock_config()["metric_list"]
    assert metric["metric"] == "exact_match"
    return {k: metric[k] for k in ("ignore_case", "ignore_punctuation", "regexes_to_ignore")}


def test_stock_config_is_what_we_reimplement():
    filters = _stock_filters()
    assert list(filters) == ["strict-match", "flexible-extract"] == list(gsm8k.FILTERS)
    strict, flexible = filters["strict-match"], filters["flexible-extract"]
    assert strict == [{"function": "regex", "regex_pattern": STRICT_PATTERN}, {"function": "take_first"}]
    assert flexible == [
        {"function": "regex", "group_select": -1, "regex_pattern": FLEXIBLE_PATTERN},
        {"function": "take_first"},
    ]
    assert _stock_metric_kwargs() == {"ignore_case": True, "ignore_punctuation": False, "regexes_to_ignore": IGNORE}
    assert _stock_config()["metadata"]["version"] == 3.0  # gsm8k.py documents the task version it follows


def _lm_eval_filter(name: str) -> RegexFilter:
    """lm-eval's RegexFilter built from the stock YAML step, exactly as lm-eval's build_filter_ensemble does."""
    regex_step, take_first_step = _stock_filters()[name]
    assert take_first_step == {"function": "take_first"}
    kwargs = {k: v for k, v in regex_step.items() if k != "function"}
    return RegexFilter(**kwargs)


def lm_eval_extract(output: str, filter_name: str, doc: dict) -> str:
    resps = [[output]]  # one doc, one response (repeats: 1)
    filtered = _lm_eval_filter(filter_name).apply(resps, [doc])
    (first,) = list(TakeFirstFilter().apply(filtered, [doc]))
    return first


def lm_eval_correct(extracted: str, reference: str) -> bool:
    score = get_metric("exact_match")(predictions=[extracted], references=[reference], **_stock_metric_kwargs())
    return bool(score["exact_match"])


def test_registered_metric_is_the_hf_evaluate_one():
    kwargs = {"ignore_case": True, "ignore_punctuation": False, "regexes_to_ignore": IGNORE}
    for pred, ref in (("1,018", "x\n#### 1018"), ("17", "#### 18"), ("$18.", "#### 18")):
        ours = get_metric("exact_match")(predictions=[pred], references=[ref], **kwargs)["exact_match"]
        direct = exact_match_hf_evaluate(predictions=[pred], references=[ref], **kwargs)["exact_match"]
        assert ours == direct


R1018 = "She sold 1000+18=<<1000+18=1018>>1018 cups.\n#### 1,018"
R18 = "Each box holds 3*6=<<3*6=18>>18 apples.\n#### 18"
RNEG = "The temperature fell from 2 to 2-5=<<2-5=-3>>-3 degrees.\n#### -3"

# (id, model output, reference solution)
CASES = [
    ("strict-exact-1018", "So the total is 1018.\n#### 1018", R1018),
    ("strict-with-comma", "#### 1,018", R1018),
    ("strict-comma-trailing-period", "#### 1,018.", R1018),
    ("trailing-period", "The answer is 1018.", R1018),
    ("dollar-comma-period-then-question", "So $1,018.\n\nQuestion:", R1018),
    ("answer-is-dollar-comma", "The answer is $1,018.", R1018),
    ("answer-is-no-period", "The answer is 1018", R1018),
    ("last-number-wins-wrong", "1018 dollars, 5 eggs", R1018),
    ("last-number-wins-right", "5 eggs cost 1018", R1018),
    ("several-numbers-comma-list", "1, 2, 18", R18),
    ("no-number", "I do not know.", R1018),
    ("empty-string", "", R1018),
    ("whitespace-only", "   \n\t  ", R18),
    ("hash-18-exact", "#### 18", R18),
    ("hash-no-space", "####18", R18),
    ("hash-two-spaces", "####  18", R18),
    ("hash-tab", "####\t18", R18),
    ("hash-dollar", "#### $18", R18),
    ("hash-18-period", "#### 18.", R18),
    ("multiple-hash-first-wrong", "#### 17\n#### 18", R18),
    ("multiple-hash-first-right", "#### 18\nThen more.\n#### 17", R18),
    ("calc-annotation-inline", "3*6=<<3*6=18>>18 apples in all", R18),
    ("calc-annotation-only", "<<3*6=18>>", R18),
    ("calc-annotation-then-hash", "3*6=<<3*6=18>>18\n#### 18", R18),
    ("decimal-18.00", "#### 18.00", R18),
    ("decimal-18.0-flexible", "The answer is 18.0", R18),
    ("decimal-18.5", "It is 18.5", R18),
    ("leading-zero", "#### 018", R18),
    ("big-wrong-thousands", "#### 1,000,018", R1018),
    ("space-thousands", "#### 1 018", R1018),
    ("newline-inside-number", "#### 1,\n018", R1018),
    ("newlines-around", "\n\nWork.\n\n#### 18\n\n", R18),
    ("number-then-next-question", "The answer is 18.\n\nQuestion: A farmer has 5", R18),
    ("negative-strict", "#### -3", RNEG),
    ("negative-flexible", "The temperature is -3 degrees.", RNEG),
    ("negative-spaced", "The answer is - 3", RNEG),
    ("negative-sign-lost", "#### 3", RNEG),
    ("negative-dollar", "It changed by -$3.", RNEG),
    ("unicode-minus", "#### \u22123", RNEG),
    ("unicode-fullwidth-digits", "#### \uff11\uff18", R18),
    ("unicode-arabic-indic-digits", "#### \u0661\u0668", R18),
    ("unicode-text-around", "Le r\u00e9sultat est 18 \u20ac.", R18),
    ("unicode-nbsp-after-hash", "####\u00a018", R18),
    ("percent", "That is 18%", R18),
    ("parenthesised", "(18)", R18),
    ("commas-around", ",18,", R18),
    ("dots-only", "...", R18),
    ("dollars-only", "$$", R18),
    ("inside-word", "abc18def", R18),
    ("literal-invalid", "[invalid]", R1018),
    ("reference-echo", R1018, R1018),
    ("upper-case-text", "THE ANSWER IS 18.", R18),
]


@pytest.mark.parametrize("output, reference", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("filter_name", gsm8k.FILTERS)
def test_filter_and_score_equal_lm_eval(filter_name, output, reference):
    doc = {"question": "q", "answer": reference}
    theirs = lm_eval_extract(output, filter_name, doc)
    ours = gsm8k.extract(output, filter_name)
    assert ours == theirs
    assert gsm8k.is_correct(ours, reference) == lm_eval_correct(theirs, reference)


def test_cases_cover_both_outcomes_for_each_filter():
    """The crafted outputs are not all right or all wrong under either filter (else the comparison is weak)."""
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)
    for name in gsm8k.FILTERS:
        outcomes = [gsm8k.is_correct(gsm8k.extract(out, name), ref) for _, out, ref in CASES]
        assert 10 <= sum(outcomes) <= len(CASES) - 10
        invalid = sum(gsm8k.extract(out, name) == gsm8k.INVALID for _, out, _ in CASES)
        assert invalid >= 3


@pytest.mark.parametrize(
    "output, strict, flexible",
    [
        ("So the total is 1018.\n#### 1018", True, True),
        ("So $1,018.\n\nQuestion:", False, True),
        ("The answer is $1,018.", False, True),
        ("The answer is 1018", False, True),
        ("1018 dollars, 5 eggs", False, False),
    ],
    ids=["hash", "dollar-comma", "answer-is-dollar", "answer-is", "last-wins"],
)
def test_documented_behaviour_table(output, strict, flexible):
    """The behaviour table in the lm-eval notes (reference '...#### 1,018')."""
    got = [gsm8k.is_correct(gsm8k.extract(output, f), R1018) for f in ("strict-match", "flexible-extract")]
    assert got == [strict, flexible]


def test_specific_extractions():
    assert gsm8k.extract("#### 17\n#### 18", "strict-match") == "17"  # first #### wins
    assert gsm8k.extract("#### 17\n#### 18", "flexible-extract") == "18"  # last number wins
    assert gsm8k.extract("####18", "strict-match") == gsm8k.INVALID
    assert gsm8k.extract("#### $18", "strict-match") == gsm8k.INVALID
    assert gsm8k.extract("#### $18", "flexible-extract") == "$18"
    assert gsm8k.extract("3*6=<<3*6=18>>18", "flexible-extract") == "18"
    assert gsm8k.final_answer(R1018) == "1018"
    assert gsm8k.final_answer(RNEG) == "-3"
    with pytest.raises(ValueError, match="unknown GSM8K filter"):
        gsm8k.extract("18", "nope")


def test_per_sample_cross_check_uses_each_documents_own_target():
    """lm-eval lists a document once per filter (all strict-match entries, then all flexible-extract ones); our
    cross-check once read the target of whichever document was seen last and reported false mismatches."""
    from types import SimpleNamespace

    from specdec_eval.evals.pipeline.lm_recording import OutputRecord
    from specdec_eval.evals.pipeline.task_records import filter_mismatches, task_records
    from specdec_eval.evals.tasks.registry import TASKS

    spec = TASKS["gsm8k"]
    answers = {0: ("She pays 12 dollars.\n#### 12\n", "12"), 1: ("So 7 + 3 = 10.\n#### 10\n", "10")}
    outputs = OutputRecord()
    for d, (text, _) in answers.items():
        outputs.add(
            spec.lm_eval_name,
            d,
            SimpleNamespace(text=text, token_ids=[1, 2], finish_reason="stop", error=None, stats={}, logprobs=None),
        )
    entries = [
        {"doc_id": d, "filter": f, "target": gold, "filtered_resps": [gold], "exact_match": 1.0}
        for f in gsm8k.FILTERS
        for d, (_, gold) in answers.items()
    ]
    records = task_records(spec, entries, outputs)
    for rec in records.samples:
        for f in gsm8k.FILTERS:
            ours = records.own_extraction[(rec.doc_id, f)]
            assert ours == (rec.extracted[f], rec.correct[f]) == (rec.target, True)
    assert filter_mismatches(spec, records) == []


def test_a_record_keeps_when_its_request_was_sent_and_why_its_logprobs_were_refused():
    """What `drift` orders documents by, and what the lossless gate names instead of "too few gap moves"."""
    from types import SimpleNamespace

    from specdec_eval.evals.pipeline.lm_recording import OutputRecord
    from specdec_eval.evals.pipeline.task_records import task_records
    from specdec_eval.evals.tasks.registry import TASKS

    spec = TASKS["gsm8k"]
    outputs = OutputRecord()
    stats = [
        {"sent_at": 1_800_000_000.5, "finished_at": 1_800_000_002.0, "logprobs_unusable": "token 1: NaN"},
        {},  # an output of a run recorded before these were kept
    ]
    for d, st in enumerate(stats):
        out = SimpleNamespace(text="#### 1\n", token_ids=[1], finish_reason="stop", error=None, stats=st, logprobs=None)
        outputs.add(spec.lm_eval_name, d, out)
    entries = [{"doc_id": d, "filter": "strict-match", "target": "1", "filtered_resps": ["1"]} for d in range(2)]
    timed, untimed = task_records(spec, entries, outputs).samples
    assert (timed.sent_at, timed.finished_at, timed.logprobs_problem) == (
        1_800_000_000.5,
        1_800_000_002.0,
        "token 1: NaN",
    )
    assert (untimed.sent_at, untimed.finished_at, untimed.logprobs_problem) == (None, None, None)
