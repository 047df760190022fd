"""A choice's text as its tokens arrive, for server-sent events: only text the final answer is sure to contain goes
out, so the chunks of a stream add up to exactly the non-streamed answer (the engine's `GenerationOutput.text`).

Held back until more tokens come: a character whose bytes are incomplete (it decodes as U+FFFD at the end), and a
tail that may be the start of a stop string (the engine cuts the answer before its stop string). Decoding is
incremental (a window from the last complete character, as vLLM's detokenizer does), so a long answer costs
linear time, not quadratic."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("specdec_eval.serve")

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, tokenizer: Any, stop: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.token_ids: list[int] = []
        self.decoded = ""  # text of the tokens so far, up to the last complete character
        self.emitted = ""  # what went out
        self._prefix = 0  # token window of the incremental decoder
        self._read = 0

    def add(self, token_ids: list[int]) -> str:
        """New tokens in; returns the text that may be sent now (possibly empty)."""
        self.token_ids.extend(token_ids)
        self._decode()
        return self._emit(_safe_prefix(self.decoded, self.stop))

    def finish(self, final_text: str) -> str:
        """The rest of the answer, once the engine gave its final text."""
        if not final_text.startswith(self.emitted):
            log.warning("streamed text %r is not a prefix of the final answer %r", self.emitted, final_text)
            return ""
        return self._emit(final_text)

    def _decode(self) -> None:
        ids = self.token_ids
        before = self._text(ids[self._prefix : self._read])
        after = self._text(ids[self._prefix :])
        if after.endswith(REPLACEMENT) or len(after) <= len(before):
            return  # an incomplete character: wait for its other bytes
        if after.startswith(before):
            self.decoded += after[len(before) :]
        else:  # a tokenizer whose window decoding is not additive: decode everything (rare, still correct)
            self.decoded = self._text(ids)
        self._prefix, self._read = self._read, len(ids)

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if ids else ""

    def _emit(self, text: str) -> str:
        if len(text) <= len(self.emitted) or not text.startswith(self.emitted):
            return ""
        new, self.emitted = text[len(self.emitted) :], text
        return new


def _safe_prefix(text: str, stop: tuple[str, ...]) -> str:
    """`text` cut before any complete stop string, then without a tail that could begin one."""
    cut = min((text.find(s) for s in stop if s in text), default=len(text))
    text = text[:cut]
    hold = 0
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return text[: len(text) - hold]


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event in OpenAI's framing."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"
