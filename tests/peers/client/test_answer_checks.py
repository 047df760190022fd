"""What a server's answer may not become (peers/): logprobs that are NaN, infinite or missing are never
evidence; token ids that are not the tokens of the returned text, several choices for one request and acceptance
counts beyond what K allows are the request's recorded failure, never an output, an acceptance length or a
reference. Driven end to end through the endpoint engine against a scripted stub (tests/serve_helpers.py)."""

from __future__ import annotations

import math

import pytest
from specdec_eval.peers.client.config import EndpointConfig, EndpointURL
from specdec_eval.peers.client.engine import EndpointEngine
from specdec_eval.peers.client.logprobs import UnusableLogprobs, parse_logprobs, token_key
from specdec_eval.peers.client.token_text import ids_text_problem
from specdec_eval.peers.server.metric_formats import Counters
from specdec_eval.peers.server.metrics import acceptance_delta
from specdec_eval.peers.server.response_acceptance import ImpossibleAcceptance, response_acceptance
from specdec_eval.workers.config import SamplingParams

from ...serve_helpers import StubServer, completion

TEXT = "The answer is 56."


def _generate(tiny, answer, logprobs: int | None = None, stop: tuple[str, ...] = (), **config):
    """One request against a stub answering `answer(ids_of)` (ids_of: the tiny tokenizer's ids of a text)."""
    tokenizer = tiny[1]

    def ids_of(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    with StubServer(lambda body: (200, answer(ids_of))) as stub:
        engine = EndpointEngine(EndpointConfig(url=stub.url, model="tiny", max_retries=0, **config), tokenizer)
        out = engine.generate(["q"], SamplingParams(max_new_tokens=16, logprobs=logprobs, stop=stop))[0]
    return out, engine


def _with_logprobs(token_logprobs: list, tops: list | None = None) -> dict:
    body = completion(TEXT)
    tokens = [f"t{i}" for i in range(len(token_logprobs))]
    body["choices"][0]["logprobs"] = {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": tops or [{t: v} for t, v in zip(tokens, token_logprobs, strict=True)],
    }
    return body


# --- item 1: logprobs that are not numbers a greedy decoder can have emitted ---------------------------------------


@pytest.mark.parametrize(
    "token_logprobs, tops, words",
    [
        ([-0.1, math.nan], None, "token 1: the emitted token's logprob is NaN"),
        ([math.inf, -0.1], None, "token 0: the emitted token's logprob is +inf"),
        ([-math.inf], None, "-inf (probability 0)"),
        ([-0.1, None], None, "token 1: the emitted token's logprob is missing"),
        ([-0.1], [{"t0": -0.1, "x": math.nan}], "an alternative's logprob is NaN"),
        ([-0.1], [{"t0": -0.1, "x": -math.inf}], "an alternative's logprob is -inf"),
        ([-0.1, -0.2], [{"t0": -0.1}], "differ in number"),
    ],
    ids=["nan", "plus-inf", "minus-inf", "missing", "alternative-nan", "alternative-minus-inf", "short-tops"],
)
def test_logprobs_that_are_no_evidence_are_dropped_and_said(tiny, token_logprobs, tops, words):
    out, _ = _generate(tiny, lambda ids_of: _with_logprobs(token_logprobs, tops), logprobs=5)
    assert out.finish_reason == "stop" and out.text == TEXT  # the answer stands: only its logprobs do not
    assert out.logprobs is None
    assert words in out.stats["logprobs_unusable"]


def test_finite_logprobs_are_kept(tiny):
    out, _ = _generate(tiny, lambda ids_of: _with_logprobs([-0.1, -0.25]), logprobs=5)
    assert [r[0] for r in out.logprobs] == [-0.1, -0.25] and "logprobs_unusable" not in out.stats


def test_each_answer_says_when_its_request_was_sent_and_answered(tiny):
    """Wall-clock seconds: what `drift` orders a task's documents by."""
    import time

    before = time.time()
    out, _ = _generate(tiny, lambda ids_of: completion(TEXT))
    assert before - 1 <= out.stats["sent_at"] <= out.stats["finished_at"] <= time.time() + 1


def test_logprobs_naming_other_ids_than_the_answer_are_no_evidence():
    key = token_key(None)  # ids named as token_id:N need no tokenizer
    choice = {
        "token_ids": [5, 6],
        "logprobs": {"tokens": ["token_id:5", "token_id:9"], "token_logprobs": [-0.1, -0.2], "top_logprobs": [{}, {}]},
    }
    with pytest.raises(UnusableLogprobs, match="token 1: the logprobs name token 9, the answer's token_ids 6"):
        parse_logprobs(choice, key, [5, 6])
    with pytest.raises(UnusableLogprobs, match="2 logprob records for 1 output tokens"):
        parse_logprobs({"logprobs": {**choice["logprobs"], "tokens": ["token_id:5", "token_id:6"]}}, key, [5])


# --- item 2: token ids that are not the tokens of the text ----------------------------------------------------------


def test_token_ids_of_another_text_are_a_recorded_failure(tiny):
    def lying(ids_of):
        body = completion("The Xnswer is 56.")
        body["choices"][0]["token_ids"] = ids_of(TEXT)  # the baseline's ids, another text
        return body

    out, engine = _generate(tiny, lying)
    assert out.finish_reason == "error" and out.token_ids == []
    assert "token_ids decode to other text than it returned (they first differ at character 4" in out.error
    assert "Xnswer" not in out.error  # positions only: the text may quote a sealed question
    assert [e["type"] for e in engine.collect_events()] == ["request_failed"]


@pytest.mark.parametrize(
    "text, extra, stop",
    [
        (TEXT, "", ()),  # exact
        ("The answer is", " 56.", (" 56",)),  # a stop string cut from the text keeps its tokens
        (" The answer is 56.", "", ()),  # one leading space decoded away
        (TEXT, "\ufffd", ()),  # half a character at a length cut, held back by the server
    ],
    ids=["exact", "stop-string-cut", "leading-space", "half-a-character"],
)
def test_what_detokenisation_changes_is_tolerated(tiny, text, extra, stop):
    tokenizer = tiny[1]
    ids = tokenizer.encode(TEXT + extra.replace("\ufffd", ""), add_special_tokens=False)
    ids += [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []  # special: not in the text
    assert ids_text_problem(tokenizer, ids, text + ("\ufffd" if extra == "\ufffd" else ""), stop) is None


def test_honest_ids_are_kept_with_their_special_tokens(tiny):
    eos = tiny[1].eos_token_id

    def honest(ids_of):
        body = completion(TEXT)
        body["choices"][0]["token_ids"] = ids_of(TEXT) + [eos]
        return body

    out, _ = _generate(tiny, honest)
    assert out.finish_reason == "stop" and out.token_ids[-1] == eos and out.stats["token_ids_source"] == "server"


# --- item 8: one request, one choice ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "indexes, words",
    [
        ((0, 1), "2 choices (indexes [0, 1])"),
        ((1, 0), "2 choices (indexes [1, 0])"),
        ((0, 0), "2 choices (indexes [0, 0])"),
        ((1,), "one choice has index 1, not 0"),
    ],
    ids=["extra", "out-of-order", "duplicate", "wrong-index"],
)
def test_an_answer_with_other_than_one_choice_is_refused_never_mixed(tiny, indexes, words):
    def answer(ids_of):
        body = completion()
        body["choices"] = [
            {"index": i, "text": f"answer {i}", "finish_reason": "stop", "token_ids": ids_of(f"x{i}")} for i in indexes
        ]
        return body

    out, _ = _generate(tiny, answer)
    assert out.finish_reason == "error" and words in out.error


# --- item 5: acceptance counts beyond what K allows -------------------------------------------------------------


def _spec(steps: int, drafted: int, accepted: int, k: int = 3, histogram: list | None = None) -> dict:
    spec = {
        "num_spec_steps": steps,
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "num_spec_tokens": k,
        **({"acceptance_histogram": histogram} if histogram else {}),
    }
    return {"metrics": {"speculative_decoding": spec}}


@pytest.mark.parametrize(
    "counts, words",
    [((1, 3, 50), "50 accepted drafts of 3 drafted"), ((2, 90, 7), "7 accepted drafts in 2 cycles of at most K = 3")],
)
def test_impossible_acceptance_counts_are_refused(counts, words):
    with pytest.raises(ImpossibleAcceptance, match=words):
        response_acceptance(_spec(*counts), declared_k=3)
    sglang = {"meta_info": {"spec_verify_ct": 1, "completion_tokens": 60}}  # 58 accepted in one step of K = 3
    with pytest.raises(ImpossibleAcceptance, match="58 accepted drafts of 3 drafted"):
        response_acceptance(sglang, declared_k=3)
    tree = {"meta_info": {"spec_verify_ct": 2, "completion_tokens": 8, "spec_draft_token_num": 16}}
    assert response_acceptance(tree, declared_k=3)["num_draft_tokens"] == 16  # a tree drafts more than K a step
    assert response_acceptance(_spec(4, 12, 5, histogram=[1, 1, 2, 0]), 3)["acceptance_length"] == 2.25


def test_a_histogram_that_contradicts_the_totals_gives_no_per_position_counts():
    got = response_acceptance(_spec(20, 60, 30, histogram=[2, 3, 5, 10]), 3)  # the histogram says 43 accepted
    assert got["acceptance_length"] == 2.5 and got["accepted_per_position"] == []
    assert "contradicts its totals (per-position counts summing to 43, not to the 30 accepted)" in got["note"]


def test_an_answer_claiming_impossible_acceptance_never_becomes_an_acceptance_length(tiny):
    out, engine = _generate(
        tiny, lambda ids_of: {**completion(TEXT), **_spec(1, 3, 50)}, spec="eagle3", max_draft_len=3
    )
    assert out.finish_reason == "error" and "impossible acceptance counts" in out.error
    assert "50 accepted drafts of 3 drafted" in out.error
    assert "acceptance" not in out.stats and engine.reported_acceptance() is None
    assert (engine.last_stats.acceptance or {}).get("acceptance_length") is None


def test_impossible_server_wide_counters_give_no_acceptance_length():
    before = Counters(source="vllm", cycles=10.0, draft_tokens=30.0, accepted=10.0)
    after = Counters(source="vllm", cycles=11.0, draft_tokens=33.0, accepted=60.0)  # 50 accepted of 3 drafted
    delta = acceptance_delta(before, after, max_draft_len=3)
    assert (
        delta["acceptance_length"] is None and "impossible counters: 50 accepted drafts of 3 drafted" in delta["note"]
    )


# --- item 4's input: two URLs of one server ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, same",
    [
        ("http://127.0.0.1:8000", "http://localhost:8000/v1", True),
        ("http://127.0.0.1:8000/v1/completions", "http://[::1]:8000", True),
        ("http://0.0.0.0:8000", "http://127.0.0.2:8000/", True),
        ("http://Host.Example/v1", "http://host.example:80", True),
        ("https://h", "https://h:443/v1/chat/completions", True),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8001", False),
        ("http://h:1/a", "http://h:1/b", False),
        ("http://h:1", "https://h:1", False),
    ],
)
def test_two_urls_of_one_server_are_the_same_server(a, b, same):
    assert EndpointURL.parse(a).same_server(EndpointURL.parse(b)) is same
