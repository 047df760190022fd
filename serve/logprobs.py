"""Log-probabilities in OpenAI's two shapes, from what the engine recorded per output token (GenerationOutput.logprobs:
[logprob, [[id, logprob], ...top k]]): /v1/completions' `{tokens, token_logprobs, top_logprobs, text_offset}` and
/v1/chat/completions' `{content: [{token, logprob, bytes, top_logprobs: [...]}]}`. A token is shown as its own
decoded text (or, when the request asks with vLLM's `return_tokens_as_token_ids`, as "token_id:N": byte tokens
that are no whole UTF-8 character all print as U+FFFD, and a top_logprobs dict keyed by text would merge them);
`text_offset` is where each token's text starts in the completion's text (special tokens left out, a character
split over byte tokens counted once, at the token that completes it), never past its end; chat's `bytes` are the
token's own bytes (a byte-fallback token's one byte, not the three of the U+FFFD it prints as); with `echo`, offsets
count from the prompt's start.

A scored prompt (teacher forcing, `ScoredOutput`) answers `echo` with `logprobs` (the completions shape, the prompt's
tokens first) and vLLM's `prompt_logprobs`."""

from __future__ import annotations

import functools
import re
from typing import Any

from ..peers.client.logprobs import TOKEN_ID_PREFIX
from ..workers.interface import GenerationOutput, ScoredOutput


def _namer(tokenizer: Any, as_ids: bool):
    if as_ids:
        return lambda token_id: f"{TOKEN_ID_PREFIX}{int(token_id)}"
    return lambda token_id: tokenizer.decode([int(token_id)])


def completion_logprobs(output: GenerationOutput, tokenizer: Any, as_ids: bool = False) -> dict[str, Any] | None:
    if output.logprobs is None:
        return None
    name = _namer(tokenizer, as_ids)
    emitted = output.token_ids[: len(output.logprobs)]
    return {
        "tokens": [name(t) for t in emitted],
        "token_logprobs": [rec[0] for rec in output.logprobs],
        "top_logprobs": [{name(t): lp for t, lp in rec[1]} for rec in output.logprobs],
        "text_offset": text_offsets(tokenizer, emitted, len(output.text)),
    }


def text_offsets(tokenizer: Any, token_ids: list[int], text_len: int) -> list[int]:
    """Where each token's text starts in the completion's text (characters), as an incremental detokenizer sees it
    (vLLM's prefix / read offsets): the text a token adds is what decoding the window up to it adds to the window
    before it; a special token adds nothing (the text leaves them out), and a token that ends in the middle of a
    character (U+FFFD) adds nothing until the token that completes it. Clamped to `text_len`: a stop string cut
    from the text still has its tokens. Each decode covers a few tokens: linear in the answer's length."""
    offsets, at = [], 0
    prefix = read = 0  # ids[prefix:read]: the window whose text has been counted
    for i in range(len(token_ids)):
        offsets.append(min(at, text_len))
        before = tokenizer.decode([int(t) for t in token_ids[prefix:read]], skip_special_tokens=True)
        after = tokenizer.decode([int(t) for t in token_ids[prefix : i + 1]], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            at += len(after) - len(before)
            prefix, read = read, i + 1
    return offsets


def token_bytes(tokenizer: Any, token_id: int) -> bytes:
    """A token's own bytes. Its decoded text's UTF-8 is right for a whole character; a byte-level token (GPT-2's
    byte-to-unicode alphabet) or a byte-fallback piece (SentencePiece's <0xNN>) that is part of a character decodes
    alone to U+FFFD, whose bytes are not the token's."""
    text = tokenizer.decode([int(token_id)])
    if "\ufffd" not in text:
        return text.encode("utf-8")
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    if isinstance(piece, str):
        if match := _BYTE_PIECE.fullmatch(piece):
            return bytes([int(match.group(1), 16)])
        table = _unicode_to_byte()
        if piece and all(c in table for c in piece):
            return bytes(table[c] for c in piece)
    return text.encode("utf-8")


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, reversed: the printable character each of the 256 bytes is written as."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def chat_logprobs(output: GenerationOutput, tokenizer: Any, as_ids: bool = False) -> dict[str, Any] | None:
    if output.logprobs is None:
        return None
    name = _namer(tokenizer, as_ids)

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": name(token_id), "logprob": logprob, "bytes": list(token_bytes(tokenizer, token_id))}

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
        entry = {
            str(t): {"logprob": v, "rank": r, "decoded_token": tokenizer.decode([int(t)])}
            for r, (t, v) in enumerate(alts[:k], 1)
        }
        entry.setdefault(str(token), {"logprob": lp, "rank": rank, "decoded_token": tokenizer.decode([int(token)])})
        out.append(entry)
    return out
