"""Answers in OpenAI's shapes, for /v1/completions ("text_completion") and /v1/chat/completions ("chat.completion",
chunks "chat.completion.chunk"). Our finish reasons map onto OpenAI's: eos and stop -> "stop", length -> "length";
`stop_reason` says which (vLLM's extension: the stop string, or None for the end-of-sequence token). Each choice
also carries its output token ids (`token_ids`) and prompt token ids (`prompt_token_ids`), as vLLM does with
`return_token_ids`, so a client can compare outputs token for token. Under spec-dec, an answer carries its
requests' acceptance counts in vLLM's per-request shape (`metrics.speculative_decoding`), read back by endpoint runs."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..workers.interface import GenerationOutput, ScoredOutput
from ..workers.spec.metrics import merge_acceptance
from .logprobs import chat_logprobs, completion_logprobs, echoed_completion_logprobs, prompt_logprobs

OPENAI_FINISH = {"eos": "stop", "stop": "stop", "length": "length"}


def stop_reason(output: GenerationOutput, stop: tuple[str, ...], tokenizer: Any) -> str | None:
    """The stop string that ended the answer (the earliest in the uncut text), or None."""
    if output.finish_reason != "stop" or not stop:
        return None
    full = tokenizer.decode(output.token_ids, skip_special_tokens=True)
    found = [(full.find(s), s) for s in stop if s in full]
    return min(found)[1] if found else None


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def speculative_decoding(outputs: list[GenerationOutput]) -> dict[str, Any] | None:
    """The engine's own acceptance counters of an answer's requests, summed, in vLLM's per-request shape; None
    without spec-dec. Histogram entry j: verify steps that accepted exactly j drafts (a chain accepts a prefix, so
    the steps that accepted at least j are the per-position count of position j - 1)."""
    counts = [o.stats["acceptance"] for o in outputs if o.stats.get("acceptance")]
    if not counts:
        return None
    total = merge_acceptance(counts)
    at_least = [total.num_cycles, *total.accepted_per_position, 0]
    return {
        "mean_acceptance_length": total.acceptance_length if total.num_cycles else 1.0,
        "draft_acceptance_rate": total.acceptance_rate,
        "acceptance_histogram": [at_least[j] - at_least[j + 1] for j in range(total.max_draft_len + 1)],
        "num_spec_steps": total.num_cycles,
        "num_accepted_draft_tokens": total.num_accepted,
        "num_draft_tokens": total.num_draft_tokens,
        "num_spec_tokens": total.max_draft_len,
    }


@dataclass
class Responder:
    """Builds every body of one HTTP request: the one answer, or its stream of chunks."""

    chat: bool
    model: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    tokenizer: Any = None  # renders tokens of the log-probabilities a request asked for (`logprobs`)
    token_ids_as_names: bool = False  # the request's return_tokens_as_token_ids: "token_id:N" in the logprobs
    echo: bool = False  # completions: the prompt before the completion (its logprobs too, with `logprobs`)
    logprobs: int | None = None  # completions' `logprobs: k` (the echoed prompt's alternatives)
    prompt_logprobs: int | None = None  # vLLM's `prompt_logprobs: k`

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex

    def _envelope(self, object_: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model, "choices": choices}

    def answer(
        self,
        outputs: list[GenerationOutput],
        stop_reasons: list[str | None],
        prompts: list[tuple[str, ScoredOutput | None]] | None = None,
    ) -> dict[str, Any]:
        """prompts: per choice, the prompt's text and its scoring (what `echo` and `prompt_logprobs` answer with)."""
        choices = []
        for index, (out, reason) in enumerate(zip(outputs, stop_reasons, strict=True)):
            choice: dict[str, Any] = {"index": index}
            prompt_text, scored = prompts[index] if prompts is not None else ("", None)
            if self.chat:
                choice["message"] = {"role": "assistant", "content": out.text}
            else:
                choice["text"] = prompt_text + out.text if self.echo else out.text
            if self.echo and self.logprobs is not None and scored is not None:
                logprobs = echoed_completion_logprobs(
                    list(out.prompt_token_ids), scored, self.logprobs, out, self.tokenizer, self.token_ids_as_names
                )
            else:
                logprobs = (chat_logprobs if self.chat else completion_logprobs)(
                    out, self.tokenizer, self.token_ids_as_names
                )
            choice.update(
                logprobs=logprobs,
                finish_reason=OPENAI_FINISH[out.finish_reason],
                stop_reason=reason,
                token_ids=list(out.token_ids),
                prompt_token_ids=list(out.prompt_token_ids),
            )
            if self.prompt_logprobs is not None and scored is not None:
                choice["prompt_logprobs"] = prompt_logprobs(
                    list(out.prompt_token_ids), scored, self.prompt_logprobs, self.tokenizer
                )
            choices.append(choice)
        body = self._envelope("chat.completion" if self.chat else "text_completion", choices)
        body["usage"] = usage(sum(len(o.prompt_token_ids) for o in outputs), sum(len(o.token_ids) for o in outputs))
        return _with_acceptance(body, outputs)

    def chunk(
        self,
        index: int,
        text: str,
        token_ids: list[int],
        output: GenerationOutput | None = None,
        reason: str | None = None,
        first: bool = False,
    ) -> dict[str, Any]:
        """One streamed piece of choice `index`; `output` set on its last piece (finish reason, prompt ids)."""
        choice: dict[str, Any] = {"index": index}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = OPENAI_FINISH[output.finish_reason] if output is not None else None
        if output is not None:
            choice["stop_reason"] = reason
            choice["prompt_token_ids"] = list(output.prompt_token_ids)
        choice["token_ids"] = list(token_ids)
        return self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice])

    def usage_chunk(self, outputs: list[GenerationOutput]) -> dict[str, Any]:
        """The last chunk when the client asked for stream_options.include_usage."""
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = usage(sum(len(o.prompt_token_ids) for o in outputs), sum(len(o.token_ids) for o in outputs))
        return _with_acceptance(body, outputs)


def _with_acceptance(body: dict[str, Any], outputs: list[GenerationOutput]) -> dict[str, Any]:
    spec = speculative_decoding(outputs)
    if spec is not None:
        body["metrics"] = {"speculative_decoding": spec}
    return body
