"""Does a server's echo score tokens with the distribution that generated them? Checked once per run before its
echoed logprobs are trusted (`client.scoring` ScoringChannel), on the server's own greedy output:
generate a few tokens after a prompt with their top logprobs, then echo prompt + those tokens, and compare what each
answer gives every token and alternative (the median difference: a near-tie that swaps in or out of the top 5 moves
one entry, not the verdict; comparing alternatives, not only the token's own logprob, tells the rows apart even for a
model whose every logprob is alike). A scorer that agrees with its own generation differs by rounding (a prefill
against a decode step: hundredths of a nat); one that pairs each echoed token with another position's
distribution differs by nats. llama-cpp-python 0.3.x does that: with `echo` it pairs token i with the logits row i,
which is the distribution of token i + 1 (`Llama._create_completion`, `token_offset = 0 if echo`), so its echoed
logprobs describe the next position, and a sampled gate reading them would blame the sampler for the scorer."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .echo_tokens import LEGACY_MAX_LOGPROBS, locate

AUDIT_TOKENS = 8
MIN_AUDIT_TOKENS = 2  # whole tokens (before any byte piece) the check needs
ALIGNED = "in place"  # each echoed token's own logprob is its own
ONE_BACK = "one position back"  # each token's distribution is in the top logprobs of the entry before it
MEDIAN_DIFF_LIMIT = 0.1  # nats: above a prefill's rounding against a decode step's, below any other row's
MISSING = 10.0  # nats counted for an alternative one side lists and the other does not
BYTE_PIECES = "byte pieces that print alike"


def audit_echo(
    call: Callable[[dict[str, Any], str], Any], model: str, prompt: str, key: Callable[[str], int]
) -> dict[str, Any]:
    """{"agrees": bool | None, "reading": ..., "tokens": m, "median_abs_diff": ...} (and "reason" when it does not
    agree); agrees None when the check could not be made (the server gave no generation logprobs, or refused, or its
    output cannot be sent back as text): then the echo is not trusted either (`client.scoring`)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": AUDIT_TOKENS,
        "temperature": 0,
        "logprobs": LEGACY_MAX_LOGPROBS,
    }
    generated = call(body, prompt)
    own = _legacy(generated.response) if generated.error is None else None
    if not own or not own[0]:
        return {"agrees": None, "reason": f"not checked: {generated.error or 'no generation logprobs'}"}
    tokens, values, gen_tops = own
    # Byte pieces print alike: text cannot send them back, nor match them. The output up to the first one is checked.
    whole = next((i for i, t in enumerate(tokens) if "\ufffd" in t), len(tokens))
    if whole < MIN_AUDIT_TOKENS:
        return {"agrees": None, "reason": f"not checked: the greedy output holds {BYTE_PIECES}"}
    tokens, values, gen_tops = tokens[:whole], values[:whole], gen_tops[:whole]
    text = prompt + "".join(tokens)
    echoed = call({**body, "prompt": text, "max_tokens": 1, "echo": True}, text)
    back = _legacy(echoed.response) if echoed.error is None else None
    if not back:
        return {"agrees": None, "reason": f"not checked: {echoed.error or 'no echoed logprobs'}"}
    m = len(tokens)
    try:
        start = locate(echoed.response, [key(t) for t in tokens], key)
    except ValueError as exc:
        return {"agrees": None, "reason": f"not checked: {exc}"}
    _, echo_values, echo_tops = back
    # each generated token's own logprob, and its top alternatives, against the echo's entry in place / one back
    own_gen = [float(v) for v in values]
    alts_gen = [_keyed(top, key) for top in gen_tops]
    own_in_place = [echo_values[start + j] for j in range(m)]
    in_place = _disagreement(own_gen, alts_gen, own_in_place, [_keyed(echo_tops[start + j], key) for j in range(m)])
    out: dict[str, Any] = {"tokens": m, "median_abs_diff": round(in_place, 4)}
    if in_place <= MEDIAN_DIFF_LIMIT:
        return {"agrees": True, "reading": ALIGNED, **out}
    if start >= 1:
        rows = [_keyed(echo_tops[start + j - 1], key) for j in range(m)]
        own_back = [row.get(key(t)) for row, t in zip(rows, tokens, strict=True)]
        one_back = _disagreement(own_gen, alts_gen, own_back, rows)
        out["one_back_median_abs_diff"] = round(one_back, 4)
        if one_back <= MEDIAN_DIFF_LIMIT:
            return {"agrees": True, "reading": ONE_BACK, **out}
    reason = (
        f"the server's echo gives its own greedy output's {m} tokens and their top alternatives logprobs "
        f"{in_place:.2f} nats off (median) those its generation gave them, and read one position back "
        f"{out.get('one_back_median_abs_diff', math.inf):.2f}: its echoed logprobs describe another "
        "distribution, so it cannot score a run"
    )
    return {"agrees": False, **out, "reason": reason}


def _keyed(top: Any, key: Callable[[str], int]) -> dict[int, float]:
    return {key(t): float(v) for t, v in top.items() if v is not None} if isinstance(top, dict) else {}


def _disagreement(
    own_gen: list[float],
    alts_gen: list[dict[int, float]],
    own_echo: list[float | None],
    alts_echo: list[dict[int, float]],
) -> float:
    """The larger of two medians of |generation - echo|: over the tokens' own logprobs, and over every alternative
    the generation lists (MISSING where the echo lacks one), so that neither a right row with wrong own values nor
    right own values in a wrong row passes."""
    own = [abs(g - e) if e is not None else MISSING for g, e in zip(own_gen, own_echo, strict=True)]
    alts = [
        abs(v - e[k]) if k in e else MISSING for g, e in zip(alts_gen, alts_echo, strict=True) for k, v in g.items()
    ]
    return max(_median(own), _median(alts) if alts else 0.0)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.inf


def _legacy(response: Any) -> tuple[list[str], list[float | None], list[Any]] | None:
    """(token texts, their logprobs, their top logprobs) of OpenAI's legacy completions logprobs; None when absent or
    unreadable."""
    try:
        logprobs = response["choices"][0]["logprobs"]
        tokens, values = list(logprobs["tokens"]), list(logprobs["token_logprobs"])
        tops = list(logprobs.get("top_logprobs") or [None] * len(tokens))
    except (KeyError, IndexError, TypeError):
        return None
    if not (len(tokens) == len(values) == len(tops)) or any(v is None for v in values[1:]):
        return None
    return tokens, values, tops
