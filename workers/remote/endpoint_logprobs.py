"""Log-probabilities read from an OpenAI-compatible answer, in either shape, as the per-token records our engine keeps
(GenerationOutput.logprobs): [logprob, [[key, logprob], ...alternatives, best first], key].

/v1/completions: choices[0].logprobs = {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}
(vLLM, SGLang, trtllm-serve, llama.cpp's server, ours). /v1/chat/completions: choices[0].logprobs.content =
[{token, logprob, top_logprobs: [{token, logprob}]}]. A server names tokens by their text, not their ids; `key`
turns a token's text into a number (the local tokenizer's id when the text is exactly one token, else a negative
hash), so records hold numbers only and equal texts compare equal on both sides of a divergence. A server that
names tokens "token_id:N" (vLLM's and ours, asked with `return_tokens_as_token_ids`) gives the ids themselves: byte
tokens that print alike (U+FFFD) stay apart there, and only there."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

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


def parse_logprobs(choice: dict[str, Any], key: Callable[[str], int]) -> list[list] | None:
    """The records of one choice, or None when the server sent none (or a shape neither API has)."""
    lp = choice.get("logprobs") if isinstance(choice, dict) else None
    if not isinstance(lp, dict):
        return None
    try:
        if isinstance(lp.get("content"), list):  # chat
            return [_record(key, e["token"], e["logprob"], [(t["token"], t["logprob"]) for t in e.get("top_logprobs")
                                                            or []]) for e in lp["content"]]  # fmt: skip
        if isinstance(lp.get("tokens"), list) and isinstance(lp.get("token_logprobs"), list):  # completions
            tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
            return [_record(key, t, v, list((top or {}).items()))
                    for t, v, top in zip(lp["tokens"], lp["token_logprobs"], tops, strict=True)]  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _record(key: Callable[[str], int], token: str, logprob: Any, top: list[tuple[str, Any]]) -> list:
    if not isinstance(token, str) or not isinstance(logprob, int | float):
        raise ValueError("not a token's logprob")
    alternatives = sorted(((key(t), round(float(v), 5)) for t, v in top if isinstance(v, int | float)),
                          key=lambda x: -x[1])  # fmt: skip
    return [round(float(logprob), 5), [list(a) for a in alternatives], key(token)]
