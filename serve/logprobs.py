"""Log-probabilities in OpenAI's two shapes, from what the engine recorded per output token (GenerationOutput.logprobs:
[logprob, [[id, logprob], ...top k]]): /v1/completions' `{tokens, token_logprobs, top_logprobs, text_offset}` and
/v1/chat/completions' `{content: [{token, logprob, bytes, top_logprobs: [...]}]}`. A token is shown as its own
decoded text (or, when the request asks with vLLM's `return_tokens_as_token_ids`, as "token_id:N": byte tokens
that are no whole UTF-8 character all print as U+FFFD, and a top_logprobs dict keyed by text would merge them);
`text_offset` counts characters of those texts from the start of the completion."""

from __future__ import annotations

from typing import Any

from ..workers.interface import GenerationOutput
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
