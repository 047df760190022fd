"""Stop rules, applied token by token as a step appends its tokens: EOS, stop strings, the length limit. A
multi-token (speculative) step stops at exactly the token plain decoding would stop at; tokens after a stop are
never emitted."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from .request import Request


class StopRules:
    def __init__(self, tokenizer: Any, eos_ids: set[int]) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids

    def append(self, req: Request, tokens: Iterable[int]) -> list[int]:
        """Append tokens to the request's output until one finishes it; returns the tokens kept."""
        kept: list[int] = []
        for token in tokens:
            req.output_token_ids.append(token)
            kept.append(token)
            if req.first_token_time is None:
                req.first_token_time = time.perf_counter()
            reason = self._reason(req, token)
            if reason is not None:
                req.finish_reason = reason
                req.finish_time = time.perf_counter()
                break
        return kept

    def _reason(self, req: Request, token: int) -> str | None:
        if token in self.eos_ids and not req.sampling.ignore_eos:
            return "eos"
        if req.sampling.stop and any(s in self.text(req) for s in req.sampling.stop):
            return "stop"
        if len(req.output_token_ids) >= req.max_new_tokens:
            return "length"
        return None

    def text(self, req: Request) -> str:
        return self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)

    def final_text(self, req: Request) -> str:
        """The output text, cut before the stop string that finished it."""
        text = self.text(req)
        if req.finish_reason == "stop":
            cut = min((text.find(s) for s in req.sampling.stop if s in text), default=len(text))
            text = text[:cut]
        return text
