"""Where a given run of tokens sits among the tokens a server echoed for a text prompt (OpenAI's legacy completions
logprobs: `tokens`, `text_offset`). The server tokenized the text itself, so only the end is known: the tokens end
right before the one token the request generated, or at the very end when it generated none. A run of tokens that
repeats (an output of newlines) can match both; then the answer's `usage.completion_tokens` says which (servers
disagree on `text_offset`, so it is not used), and without it the one before a generated token is taken (the request
asks for one)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

LEGACY_MAX_LOGPROBS = 5  # OpenAI's cap on completions' `logprobs` (vLLM's --max-logprobs is 20)


def locate(answer: dict[str, Any], expected: Sequence[int], key: Callable[[str], int]) -> int:
    """The index of the first of the `expected` keys among the tokens the answer echoed; ValueError when they are
    not there."""
    tokens = answer["choices"][0]["logprobs"].get("tokens") or []
    keys = [key(t) if isinstance(t, str) else None for t in tokens]
    n = len(expected)
    found = [s for s in (len(keys) - n - 1, len(keys) - n) if s >= 0 and keys[s : s + n] == list(expected)]
    if not found:
        raise ValueError(
            f"the server tokenized the text otherwise ({len(tokens)} echoed tokens do not end with the given {n})"
        )
    usage = answer.get("usage")
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if len(found) > 1 and generated == 0:
        return found[1]
    return found[0]
