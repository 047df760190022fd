"""Log-probabilities read from an OpenAI-compatible answer, in either shape, as the per-token records our engine keeps
(GenerationOutput.logprobs): [logprob, [[key, logprob], ...alternatives, best first], key].

/v1/completions: choices[0].logprobs = {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}
(vLLM, SGLang, trtllm-serve, llama.cpp's server, ours). /v1/chat/completions: choices[0].logprobs.content =
[{token, logprob, top_logprobs: [{token, logprob}]}]. A server names tokens by their text, not their ids; `key`
turns a token's text into a number (the local tokenizer's id when the text is exactly one token, else a negative
hash), so records hold numbers only and equal texts compare equal on both sides of a divergence. A server that
names tokens "token_id:N" (vLLM's and ours, asked with `return_tokens_as_token_ids`) gives the ids themselves: byte
tokens that print alike (U+FFFD) stay apart there, and only there.

Logprobs that cannot be evidence (`logprob_records`: NaN, +-inf, a positive logprob, a missing entry, a
shape neither API has, more records than output tokens, token ids that are not the answer's) raise
`UnusableLogprobs` with the reason: the answer itself stands, its logprobs do not, and no gate can read them as
a margin."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ...workers.logprob_records import record_problem, records_problem

TOKEN_ID_PREFIX = "token_id:"  # vLLM's name of a token under return_tokens_as_token_ids (our serve names them so too)


def token_key(tokenizer: Any) -> Callable[[str], int]:
    """text -> a number: the id of the one token that encodes and decodes back to it, else -(a 62-bit hash) - 1."""
    cache: dict[str, int] = {}

    def key(text: str) -> int:
        if text.startswith(TOKEN_ID_PREFIX) and text[len(TOKEN_ID_PREFIX) :].isdigit():  # the server named the id
            return int(text[len(TOKEN_ID_PREFIX) :])
        if text not in cache:
            ids = tokenizer.encode(text, add_special_tokens=False) if text else []
            if len(ids) == 1 and tokenizer.decode(ids) == text:
                cache[text] = int(ids[0])
            else:
                digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                cache[text] = -(int.from_bytes(digest, "little") >> 2) - 1
        return cache[text]

    return key


class UnusableLogprobs(ValueError):
    """A server's logprobs that no gate may read; the message says why (numbers and positions only)."""


def parse_logprobs(
    choice: dict[str, Any], key: Callable[[str], int], token_ids: list[int] | None = None
) -> list[list] | None:
    """The records of one choice, or None when the server sent none. `token_ids`: the answer's tokens as the server
    gave them, when it did (records beyond them, or naming other ids, describe another output). Raises
    UnusableLogprobs when they are there but cannot be evidence."""
    lp = choice.get("logprobs") if isinstance(choice, dict) else None
    if lp is None:
        return None
    if not isinstance(lp, dict):
        raise UnusableLogprobs(f"logprobs are a {type(lp).__name__}, not an object")
    try:
        if isinstance(lp.get("content"), list):  # chat
            entries = [
                (e["token"], e["logprob"], [(t["token"], t["logprob"]) for t in e.get("top_logprobs") or []])
                for e in lp["content"]
            ]
        elif isinstance(lp.get("tokens"), list) and isinstance(lp.get("token_logprobs"), list):  # completions
            tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
            entries = [
                (t, v, list((top or {}).items()))
                for t, v, top in zip(lp["tokens"], lp["token_logprobs"], tops, strict=True)
            ]
        else:
            raise UnusableLogprobs("logprobs in a shape neither OpenAI API has")
    except (KeyError, TypeError, AttributeError) as exc:
        raise UnusableLogprobs(f"logprobs in a shape neither OpenAI API has ({type(exc).__name__})") from None
    except ValueError:  # zip(strict=True): tokens, logprobs and alternatives of different lengths
        raise UnusableLogprobs("logprobs whose tokens, values and alternatives differ in number") from None
    records = []
    for i, (token, logprob, top) in enumerate(entries):
        if not isinstance(token, str):
            raise UnusableLogprobs(f"token {i}: the logprobs name no token (a {type(token).__name__})")
        if not all(isinstance(t, str) for t, _ in top):
            raise UnusableLogprobs(f"token {i}: an alternative names no token")
        if logprob is None:
            raise UnusableLogprobs(f"token {i}: the emitted token's logprob is missing")
        record = [logprob, [[key(t), v] for t, v in top], key(token)]
        if (why := record_problem(record)) is not None:
            raise UnusableLogprobs(f"token {i}: {why}")
        if (
            token_ids is not None
            and token.startswith(TOKEN_ID_PREFIX)
            and i < len(token_ids)
            and record[2] != token_ids[i]
        ):
            raise UnusableLogprobs(
                f"token {i}: the logprobs name token {record[2]}, the answer's token_ids {token_ids[i]}"
            )
        records.append(_rounded(record))
    if (why := records_problem(records, None if token_ids is None else len(token_ids))) is not None:
        raise UnusableLogprobs(why)
    return records


def _rounded(record: list) -> list:
    """[logprob, alternatives best first, key], numbers rounded to 5 decimals as our engine stores them."""
    alternatives = sorted(([t, round(float(v), 5)] for t, v in record[1]), key=lambda x: -x[1])
    return [round(float(record[0]), 5), alternatives, record[2]]
