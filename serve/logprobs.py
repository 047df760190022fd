"""Log-probabilities in OpenAI's two shapes, from what the engine recorded per output token (GenerationOutput.logprobs:
[logprob, [[id, logprob], ...top k]]): /v1/completions' `{tokens, token_logprobs, top_logprobs, text_offset}` and
/v1/chat/completions' `{content: [{token, logprob, bytes, top_logprobs: [...]}]}`. A token is shown as its own
decoded text; `text_offset` counts characters of those texts from the start of the completion."""

from __future__ import annotations

from typing import Any

from ..workers.interface import GenerationOutput


def _piece(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([int(token_id)])


def completion_logprobs(output: GenerationOutput, tokenizer: Any) -> dict[str, Any] | None:
    if output.logprobs is None:
        return None
    tokens = [_piece(tokenizer, t) for t in output.token_ids[: len(output.logprobs)]]
    offsets, at = [], 0
    for piece in tokens:
        offsets.append(at)
        at += len(piece)
    return {
        "tokens": tokens,
        "token_logprobs": [rec[0] for rec in output.logprobs],
        "top_logprobs": [{_piece(tokenizer, t): lp for t, lp in rec[1]} for rec in output.logprobs],
        "text_offset": offsets,
    }


def chat_logprobs(output: GenerationOutput, tokenizer: Any) -> dict[str, Any] | None:
    if output.logprobs is None:
        return None

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        piece = _piece(tokenizer, token_id)
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}

    content = []
    for token_id, rec in zip(output.token_ids, output.logprobs, strict=False):
        content.append({**entry(token_id, rec[0]), "top_logprobs": [entry(t, lp) for t, lp in rec[1]]})
    return {"content": content}
