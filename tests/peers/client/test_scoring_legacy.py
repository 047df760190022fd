"""OpenAI's legacy echo shape (top alternatives keyed by text, as llama.cpp's server answers): byte pieces that print
alike merge into one key, so such an entry is no top K and no placement rests on it; and an echo whose audit could
not check it scores nothing (NO-GATE, never a FAIL of a correct sampler). No server: answers written by hand."""

from __future__ import annotations

import math

from specdec_eval.evals.lossless.sampled import SampledSample, place
from specdec_eval.peers.client.requests import Answer
from specdec_eval.peers.client.scoring import ScoringChannel, merged, read_scoring
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.interface import ScoreRequest

T07 = SamplingParams(temperature=0.7)
KEYS = {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "\ufffd": -9}


def key(text: str) -> int:
    return KEYS.get(text, -(abs(hash(text)) % 1000) - 10)


def _echo(tops: list[dict[str, float]], tokens: list[str]) -> dict:
    """An echo of prompt token "a" then `tokens`, each with its own logprob -1 and the given top alternatives."""
    return {
        "choices": [
            {
                "logprobs": {
                    "tokens": ["a", *tokens],
                    "token_logprobs": [None] + [-1.0] * len(tokens),
                    "top_logprobs": [None, *tops],
                }
            }
        ]
    }


def test_an_entry_where_texts_that_print_alike_merged_is_no_top_k():
    assert not merged({"a": -1.0, "b": -2.0, "c": -2.5, "d": -3.0, "e": -3.5}, 5)
    assert merged({"a": -1.0, "\ufffd": -1.2, "c": -2.5, "d": -3.0}, 5)  # two byte pieces became one key: 4 of 5
    assert merged({"a": -1.0, "\ufffd": -1.2, "c": -2.5, "d": -3.0, "e": -3.5}, 5)  # one key for several tokens
    assert merged(None, 5)


def test_a_merged_entry_is_left_out_of_the_sampled_gate_and_the_others_are_placed():
    full = {"a": -0.5, "b": -1.5, "c": -2.5, "d": -3.0, "e": -3.5}
    collapsed = {"a": -0.5, "\ufffd": -1.0, "c": -2.5}  # a top 5 that kept 3 entries
    request = ScoreRequest((1,), (2, 3), T07, 5)
    scored = read_scoring(_echo([full, collapsed], ["b", "c"]), request, key)
    assert scored.unreadable == (1,)
    placements = place(SampledSample(0, [2, 3], T07, scored), 49152, 0.0)
    assert placements[0].kind == "conditional" and placements[1].kind == "unknown" and not placements[1].in_pit


def test_read_one_position_back_too():
    collapsed = {"a": -0.5, "\ufffd": -1.0}
    request = ScoreRequest((1,), (2,), T07, 2)
    scored = read_scoring(_echo([collapsed], ["b"]), request, key, one_back=True)
    assert scored.unreadable == (0,) and math.isnan(scored.logprobs[0])


class _Tokenizer:
    def decode(self, ids) -> str:
        return "".join("abcde"[i - 1] for i in ids)


def _server(greedy_for: dict[int, list[str]]):
    """A `call` that generates `greedy_for[len(prompt)]` greedily (each token's own logprob -1, a full top 5 listing
    it) and echoes any text back consistently; counts the audit's generations."""
    generated = []

    def call(body, sent):
        text = body["prompt"]
        if not body.get("echo"):
            tokens = greedy_for.get(len(text), ["b"] * 8)
            generated.append(text)
            top = [{t: -1.0, **{o: -2.0 - i for i, o in enumerate("acde") if o != t}} for t in tokens]
            return Answer(
                {
                    "choices": [
                        {"logprobs": {"tokens": tokens, "token_logprobs": [-1.0] * len(tokens), "top_logprobs": top}}
                    ]
                }
            )
        tokens = list(text) + ["a"]
        top = [{t: -1.0, **{o: -2.0 - i for i, o in enumerate("acde") if o != t}} for t in tokens]
        return Answer(
            {
                "choices": [
                    {
                        "logprobs": {
                            "tokens": tokens,
                            "token_logprobs": [None] + [-1.0] * len(tokens[1:]),
                            "top_logprobs": [None, *top[1:]],
                        }
                    }
                ],
                "usage": {"completion_tokens": 1},
            }
        )

    return call, generated


def test_an_audit_that_meets_byte_pieces_moves_on_and_one_that_cannot_check_trusts_nothing():
    request = ScoreRequest((1, 1), (2,) * 20, T07, 5)
    # after the prompt (2 characters) the greedy output holds byte pieces; 8 output tokens later it does not
    call, generated = _server({2: ["\ufffd", "\ufffd", "b"]})
    channel = ScoringChannel("m", _Tokenizer(), key, False, call)
    got = channel.score(request)
    assert generated == ["aa", "aa" + "b" * 8] and channel.audit["agrees"] is True, channel.audit
    assert got.error is None
    # whole tokens before the first byte piece: those are checked, at the first cut
    call, generated = _server({2: ["b", "c", "\ufffd", "b"]})
    channel = ScoringChannel("m", _Tokenizer(), key, False, call)
    assert channel.score(request).error is None and generated == ["aa"] and channel.audit["tokens"] == 2
    # byte pieces after every cut: the echo was never checked, so it scores nothing (NO-GATE), never a verdict
    call, generated = _server({n: ["\ufffd", "b"] for n in (2, 10, 18)})
    channel = ScoringChannel("m", _Tokenizer(), key, False, call)
    got = channel.score(request)
    assert len(generated) == 3 and channel.audit["agrees"] is None
    assert got.error is not None and got.error.startswith("the server's echo could not be audited (not checked: ")
