"""`specdec-eval conditions`: each task's generation conditions, its reference and the accuracy gate's rule about
them; every bad --gen-kwargs / --chat-template-kwargs / --repeats value is one line and exit status 2."""

from __future__ import annotations

import json

import pytest

from ..cli_helpers import run_cli

SEED = (
    "--tasks",
    "gpqa_diamond_aa",
    "--model-key",
    "GPT-OSS/120B-MXFP4",
    "--spec",
    "eagle3",
    "--apply-chat-template",
    "--chat-template-kwargs",
    '{"reasoning_effort": "medium"}',
)


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


def test_the_seeds_configuration_reads_no_gate_against_the_greedy_reference(capsys):
    code, out, err = run_cli(capsys, "conditions", *SEED, "--gen-kwargs", "temperature=1.0,top_p=1.0", "--repeats", "2")
    assert code == 0 and err == ""
    assert out.splitlines()[0] == (
        'gpqa_diamond_aa: sampled at T=1; chat template with {"reasoning_effort":"medium"}; '
        "0-shot; gpqa_diamond_cot_zeroshot_aa; up to 512 tokens; 2 samples per question"
    )
    assert "reference: GPT-OSS/120B-MXFP4 65 (TensorRT-LLM (fork) references/gpqa_diamond.yaml)" in out
    assert (
        "NO-GATE: this run's conditions differ from the reference's: reference greedy, this run sampled at T=1" in out
    )


def test_matching_conditions_and_accepting_a_mismatch(capsys):
    code, out, _ = run_cli(capsys, "conditions", *SEED, "--json")
    [task] = json.loads(out)
    assert code == 0 and task["reference"]["check"] == {
        "differences": [],
        "unstated": ["max_output_len"],
        "accepted": False,
        "blocks": False,
    }
    code, out, _ = run_cli(
        capsys, "conditions", *SEED, "--gen-kwargs", "temperature=1.0", "--repeats", "2", "--accept-condition-mismatch"
    )
    assert code == 0 and "judged although the conditions differ (--accept-condition-mismatch)" in out


BAD = [
    (("--gen-kwargs", "temp=1.0"), "unknown key 'temp'"),
    (("--gen-kwargs", "temperature=nan"), "finite"),
    (("--gen-kwargs", "temperature=-1"), ">= 0"),
    (("--gen-kwargs", "top_p=1.5"), "(0, 1]"),
    (("--gen-kwargs", "top_k=-2"), "[0,"),
    (("--gen-kwargs", "seed=-1"), "[0,"),
    (("--gen-kwargs", "max_gen_toks=0"), "[1,"),
    (("--gen-kwargs", "do_sample=maybe"), "true or false"),
    (("--gen-kwargs", "temperature"), "not key=value"),
    (("--gen-kwargs", "temperature=1,temperature=2"), "given twice"),
    (("--gen-kwargs", "do_sample=false,temperature=0.7"), "do_sample=false decodes greedily"),
    (("--gen-kwargs", "do_sample=true"), "needs a temperature > 0"),
    (("--chat-template-kwargs", "reasoning_effort=medium"), "not JSON"),
    (("--chat-template-kwargs", "[1, 2]"), "must be a JSON object"),
    (("--chat-template-kwargs", '{"x": NaN}'), "NaN is not a JSON number"),
    (("--chat-template-kwargs", '{"messages": []}'), "set by the chat template call itself"),
    (("--chat-template-kwargs", '{"reasoning effort": "low"}'), "not a template variable name"),
    (("--repeats", "0"), "--repeats"),
    (("--repeats", "65"), "--repeats"),
    (("--repeats", "two"), "--repeats"),
    (("--repeats", "4"), "copies of one answer"),  # greedy
]


@pytest.mark.parametrize(("args", "expected"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_every_bad_value_is_one_line_and_exit_2(capsys, args, expected):
    base = ["conditions", "--tasks", "gsm8k", "--apply-chat-template"]
    code, out, err = run_cli(capsys, *base, *args)
    assert code == 2 and out == ""
    assert err.startswith("specdec-eval: error: ") and err.count("\n") == 1 and expected in err, err


def test_template_kwargs_without_the_template_are_refused(capsys):
    code, _, err = run_cli(capsys, "conditions", "--chat-template-kwargs", '{"enable_thinking": false}')
    assert code == 2 and "needs --apply-chat-template" in err and err.count("\n") == 1
