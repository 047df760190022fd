"""ngram (prompt-lookup) speculative decoding: the proposal rule, and that it is lossless (token-identical to plain
decoding, greedy and sampled) while accepting drafts on text that repeats."""

from __future__ import annotations

import json

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.spec.ngram import propose_ngram

from ...cli_helpers import run_cli
from ...conftest import make_engine


@pytest.mark.parametrize(
    "history, n, k, expected",
    [
        ([1, 2, 3, 4, 1, 2, 3], 2, 3, [4, 1, 2]),  # what followed "2 3" last time
        ([1, 2, 9, 1, 2, 7, 1, 2], 2, 1, [7]),  # the most recent earlier occurrence wins
        ([5, 1, 2, 1, 2], 2, 4, [1, 2, 1, 2]),  # a match at the tail runs on into the period
        ([1, 2, 3], 2, 2, [3, 3]),  # no earlier occurrence: the last token, K times
        ([7, 7], 2, 2, [7, 7]),  # a history of n tokens cannot contain an earlier occurrence
        ([1, 2, 3, 1, 2, 4, 2], 1, 2, [4, 2]),  # n = 1
    ],
)
def test_proposal_rule(history, n, k, expected):
    assert propose_ngram(history, n, k) == expected


PROMPTS = ["The cat sat on the mat. The cat sat on the mat. The cat sat on the", "Hello world, hello world, hello"]


def _outputs(engine, params):
    return [o.token_ids for o in engine.generate(PROMPTS, params)]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=24, ignore_eos=True),
        SamplingParams(max_new_tokens=24, ignore_eos=True, temperature=0.8, top_p=0.9),
    ],
    ids=["greedy", "sampled"],
)
def test_ngram_is_token_identical_to_plain_and_accepts(tiny, params):
    plain = _outputs(make_engine(tiny), params)
    engine = make_engine(tiny, spec=SpecConfig(algorithm="ngram", max_draft_len=3, ngram_size=2))
    assert engine.draft_model is None and engine.config.num_extra_kv_layers == 0
    assert _outputs(engine, params) == plain
    acceptance = engine.last_stats.acceptance
    assert acceptance["num_cycles"] > 0
    if params.greedy:  # the random tiny model falls into loops that the lookup then predicts
        assert acceptance["acceptance_length"] > 1.5, acceptance  # 2.35 measured; the last token K times: ~1


def test_generate_spec_ngram_on_the_command_line(capsys, monkeypatch):
    argv = ["generate", "-", "--model", "tiny", "-n", "12", "--ignore-eos", "--spec", "ngram", "--draft-len", "2"]
    code, out, err = run_cli(capsys, *argv, stdin="a b a b a b\n", monkeypatch=monkeypatch)
    assert code == 0, err
    record = json.loads(out.splitlines()[0])
    assert len(record["token_ids"]) == 12 and record["stats"]["acceptance"]["max_draft_len"] == 2
    code, _, err = run_cli(
        capsys,
        "generate",
        "-",
        "--model",
        "tiny",
        "--spec",
        "ngram",
        "--capture-layers",
        "1,2,3",
        stdin="hi\n",
        monkeypatch=monkeypatch,
    )
    assert code == 2 and "applies to eagle3, not ngram" in err and err.count("\n") == 1, err
