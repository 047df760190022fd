"""Log-probabilities in OpenAI's two shapes, from what the engine recorded per output token (GenerationOutput.logprobs:
[logprob, [[id, logprob], ...top k]]): /v1/completions' `{tokens, token_logprobs, top_logprobs, text_offset}` and
/v1/chat/completions' `{content: [{token, logprob, bytes, top_logprobs: [...]}]}`. A token is shown as its own
decoded text (or, when the request asks with vLLM's `return_tokens_as_token_ids`, as "token_id:N": byte tokens
that are no whole UTF-8 character all print as U+FFFD, and a top_logprobs dict keyed by text would merge them);
`text_offset` counts characters of those texts from the start of the completion (of the prompt, with `echo`).

A scored prompt (teacher forcing, `ScoredOutput`) answers `echo` with `logprobs` (the completions shape, the prompt's
tokens first) and vLLM's `prompt_logprobs`."""

from __future__ import annotations

from typing import Any

from ..workers.interface import GenerationOutput, ScoredOutput
from ..workers.remote.endpoint_logprobs import TOKEN_ID_PREFIX


def _namer(tokenizer: Any, as_ids: bool):
    if as_ids:
        return lambda token_id: f"{TOKEN_ID_PREFIX}{int(token_id)}"
    return lambda token_id: tokenizer.decode([int(token_id)])


def completion_logprobs(output: GenerationOutput, tokenizer: Any, as_ids: bool = False) -> dict[str, Any] | None:
    if output.logprobs is None:
        return None
    name = _namer(tokenizer, as_ids)
    emitted = output.token_ids[: len(output.logprobs)]
    texts = [tokenizer.decode([int(t)]) for t in emitted]
    tokens = [name(t) for t in emitted] if as_ids else texts
    offsets, at = [], 0
    for text in texts:  # offsets count the completion's text, whatever the tokens are named
        offsets.append(at)
        at += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [rec[0] for rec in output.logprobs],
        "top_logprobs": [{name(t): lp for t, lp in rec[1]} for rec in output.logprobs],
        "text_offset": offsets,
    }


def chat_logprobs(output: GenerationOutput, tokenizer: Any, as_ids: bool = False) -> dict[str, Any] | None:
    if output.logprobs is None:
        return None
    name = _namer(tokenizer, as_ids)

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        piece = name(token_id)
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}

    content = []
    for token_id, rec in zip(output.token_ids, output.logprobs, strict=False):
        content.append({**entry(token_id, rec[0]), "top_logprobs": [entry(t, lp) for t, lp in rec[1]]})
    return {"content": content}


def echoed_completion_logprobs(
    prompt_ids: list[int], scored: ScoredOutput, k: int, output: GenerationOutput, tokenizer: Any, as_ids: bool = False
) -> dict[str, Any]:
    """`echo` with `logprobs: k`: the prompt's tokens first (the first has no logprob: null, as OpenAI's legacy API
    and vLLM answer), then the completion's, offsets counting characters from the start of the prompt."""
    name = _namer(tokenizer, as_ids)
    texts = [tokenizer.decode([int(t)]) for t in prompt_ids]
    offsets, at = [], 0
    for text in texts:
        offsets.append(at)
        at += len(text)
    echoed = {
        "tokens": [name(t) for t in prompt_ids] if as_ids else texts,
        "token_logprobs": [None, *scored.logprobs],
        "top_logprobs": [None, *({name(t): lp for t, lp in alts[:k]} for alts in scored.top_logprobs)],
        "text_offset": offsets,
    }
    completion = completion_logprobs(output, tokenizer, as_ids)
    if completion is None:
        return echoed
    return {
        "tokens": echoed["tokens"] + completion["tokens"],
        "token_logprobs": echoed["token_logprobs"] + completion["token_logprobs"],
        "top_logprobs": echoed["top_logprobs"] + completion["top_logprobs"],
        "text_offset": echoed["text_offset"] + [at + o for o in completion["text_offset"]],
    }


def prompt_logprobs(prompt_ids: list[int], scored: ScoredOutput, k: int, tokenizer: Any) -> list[dict | None]:
    """vLLM's `prompt_logprobs` of one choice: null for the first prompt token, then per token {token id: {logprob,
    rank, decoded_token}} holding the token itself and the top k alternatives."""
    out: list[dict | None] = [None]
    ranks = scored.ranks or [None] * len(scored.logprobs)
    for token, lp, rank, alts in zip(prompt_ids[1:], scored.logprobs, ranks, scored.top_logprobs, strict=True):
        entry = {str(t): {"logprob": v, "rank": r, "decoded_token": tokenizer.decode([int(t)])}
                 for r, (t, v) in enumerate(alts[:k], 1)}  # fmt: skip
        entry.setdefault(str(token), {"logprob": lp, "rank": rank, "decoded_token": tokenizer.decode([int(token)])})
        out.append(entry)
    return out
