"""An echoed scoring must be of the output's own tokens (peers/client/scoring.py): a server whose echo
lists other tokens than it was sent scored another output, in token-id mode as in text mode."""

from __future__ import annotations

import pytest
from specdec_eval.peers.client.logprobs import TOKEN_ID_PREFIX
from specdec_eval.peers.client.scoring import read_scoring
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.interface import ScoreRequest

REQUEST = ScoreRequest((5, 6), (7, 8, 9), SamplingParams(temperature=0.7), 5)


def _key(text: str) -> int:
    return int(text[len(TOKEN_ID_PREFIX) :]) if text.startswith(TOKEN_ID_PREFIX) else 1000 + len(text)


def _answer(echoed: list[int]) -> dict:
    tokens = [f"{TOKEN_ID_PREFIX}{t}" for t in echoed]
    tops = [None] + [{token: -0.5, f"{TOKEN_ID_PREFIX}1": -1.5} for token in tokens[1:]]
    return {
        "choices": [
            {
                "logprobs": {
                    "tokens": tokens,
                    "token_logprobs": [None] + [-0.5] * (len(tokens) - 1),
                    "top_logprobs": tops,
                }
            }
        ]
    }


def test_the_output_s_own_echo_is_read_and_keeps_the_output_s_keys():
    scored = read_scoring(_answer([5, 6, 7, 8, 9, 3]), REQUEST, _key)
    assert scored.token_keys == [7, 8, 9] and scored.other_tokens(REQUEST.output_token_ids) is None
    named = read_scoring(_answer([5, 6, 7, 8, 9, 3]), REQUEST, _key, expected=[1001, 1002, 1003])
    assert named.output_keys == [1001, 1002, 1003]  # a key or the id itself names the token


@pytest.mark.parametrize("text", [False, True], ids=["token-ids", "text"])
def test_an_echo_of_other_tokens_is_refused_in_every_mode(text):
    reversed_output = _answer([5, 6, 9, 8, 7, 3])
    with pytest.raises(ValueError, match="other tokens than the output's|tokenized the text otherwise"):
        read_scoring(reversed_output, REQUEST, _key, expected=[7, 8, 9], text=text)
    with pytest.raises(ValueError, match=r"echoed other tokens than the output's \(from output token 1 of 3\)"):
        read_scoring(_answer([5, 6, 7, 4, 9, 3]), REQUEST, _key)
