"""Whether a server's `token_ids` are the tokens of the text it returned, checked with the local tokenizer.

Output identity and the lossless gate's first divergence are measured on token ids (the output hash hashes them),
the score on the text. A server whose ids and text disagree (a bug, or a proxy that rewrote one of them) would have
one judged and the other scored: the baseline's ids with another text passed as "identical 4/4". So an answer's
ids, decoded locally, must give its text, up to what detokenisation legitimately changes:

- special tokens (end of sequence) are in the ids but not in the text: decoded with `skip_special_tokens`;
- a stop string the server cut from the text keeps its tokens in the ids (vLLM's and our engine's answers): the
  decoded text may go on past the returned text, if what follows starts with one of the request's stop strings;
- a character split over byte tokens at the very end (a length cut) decodes to U+FFFD, which a server's incremental
  detokeniser holds back: trailing U+FFFD is ignored on both sides;
- SentencePiece tokenisers drop the leading space of the first token when decoding it alone, which a server that
  decodes in context keeps: one leading space is ignored;
- `clean_up_tokenization_spaces` (" ." -> "."), which servers set either way: either decoding may match.

Anything else is a mismatch, reported by position only: the text may quote a GPQA question."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

REPLACEMENT = "\ufffd"


def ids_text_problem(tokenizer: Any, token_ids: Sequence[int], text: str, stop: Sequence[str] = ()) -> str | None:
    """Why `token_ids` are not the tokens of `text` (the answer as the server sent it, before any cut of ours), in
    one phrase that quotes neither; None when they are."""
    ids = [int(t) for t in token_ids]
    try:
        decoded = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    except Exception as exc:  # an id outside the local vocabulary: no text at all
        return f"the server's token_ids cannot be decoded by the local tokenizer ({type(exc).__name__})"
    # The clean-up applied to the decoded text (transformers warns when a BPE tokenizer is asked to decode with it)
    clean_up = getattr(tokenizer, "clean_up_tokenization", None)
    if _agrees(decoded, text, stop) or (callable(clean_up) and _agrees(clean_up(decoded), text, stop)):
        return None
    decoded = _trimmed(decoded)
    at = next((i for i, (a, b) in enumerate(zip(decoded, _trimmed(text), strict=False)) if a != b), None)
    where = f"character {at}" if at is not None else f"length ({len(decoded)} vs {len(_trimmed(text))} characters)"
    return (
        f"the server's token_ids decode to other text than it returned (they first differ at {where}; "
        f"{len(ids)} token ids)"
    )


def _trimmed(text: str) -> str:
    return text.rstrip(REPLACEMENT)


def _agrees(decoded: str, text: str, stop: Sequence[str]) -> bool:
    decoded, text = _trimmed(decoded), _trimmed(text)
    for d, t in ((decoded, text), (decoded.removeprefix(" "), text.removeprefix(" "))):
        if d == t:
            return True
        rest = d[len(t) :] if d.startswith(t) else None
        if rest is not None and any(s and rest.startswith(s) for s in stop):
            return True
    return False
