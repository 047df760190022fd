"""Teacher-forced scoring over HTTP: an OpenAI-compatible server scores a given output after its prompt, through the
completions API. The prompt + output travel as token ids with `max_tokens: 1`, `temperature: 0` and `echo: true`, so the
server returns the logprob of every token it was given:

- vLLM's `prompt_logprobs: k` where the server takes vLLM's extensions (vLLM, our serve): per prompt token
  {token id: {logprob, rank, decoded_token}} for the token and its top k; token ids, no text to match;
- else `logprobs: k` (OpenAI's legacy completions shape: tokens, token_logprobs, top_logprobs), tokens named by
  text and matched through the same keys as generated logprobs (`client.logprobs`).

A server returns the raw logprobs (before temperature and filters) by default, and only the top k: the sampled
gate then places each token conservatively within them.

**Text** (`scoring_text_payload`): a server that refuses token-id prompts (llama-cpp-python answers HTTP 500 to a
list of ids) gets the prompt + output decoded to text, in OpenAI's legacy shape. It tokenizes that text itself, so
its prompt part may be tokens other than ours and where the output starts is not known: `read_scoring` finds the
output's tokens among the echoed ones (`expected`: the keys the output's tokens must echo as), right before the one
token the request generates or at the very end, and refuses an answer where they are not there (a server that
splits the text otherwise scored other tokens than the output's).

**Audit** (`client.scoring_audit`): before a server's echoed logprobs score a run, its echo of its own greedy
output must give those tokens the logprobs its generation gave them; a server whose echo describes another position
(llama-cpp-python 0.3.x) is read one position back when that agrees, and otherwise has every scoring refused
with the reason, so the gate says NO-GATE, not FAIL."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ...workers.interface import OutputKeys, ScoredOutput, ScoreRequest
from .echo_tokens import LEGACY_MAX_LOGPROBS, locate
from .scoring_audit import BYTE_PIECES, ONE_BACK, audit_echo


def scoring_payload(model: str, request: ScoreRequest, vllm_extensions: bool) -> dict[str, Any]:
    """The body that scores request.output_token_ids after request.prompt_token_ids."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [*request.prompt_token_ids, *request.output_token_ids],
        "max_tokens": 1,
        "temperature": 0,
        "echo": True,
    }
    if vllm_extensions:
        body["prompt_logprobs"] = request.top_logprobs
    else:
        body["logprobs"] = min(request.top_logprobs, LEGACY_MAX_LOGPROBS)
    return body


def scoring_text_payload(model: str, text: str, request: ScoreRequest) -> dict[str, Any]:
    """The body that scores the output as text: `text` is the prompt + output decoded (see the module docstring)."""
    return {
        "model": model,
        "prompt": text,
        "max_tokens": 1,
        "temperature": 0,
        "echo": True,
        "logprobs": min(request.top_logprobs, LEGACY_MAX_LOGPROBS),
    }


def read_scoring(
    response: dict[str, Any],
    request: ScoreRequest,
    key: Callable[[str], int],
    expected: Sequence[int] | None = None,
    one_back: bool = False,
    text: bool = False,
) -> ScoredOutput:
    """The output's scoring from a server's answer to `scoring_payload` (or, with `text`, to `scoring_text_payload`;
    one_back: the echo's reading, see _from_echo). `expected`: the keys the output's tokens must echo as (default:
    from the request's ids, which a server naming ids echoes); in text mode they also find the output among the
    echoed tokens. Raises ValueError on a shape it cannot read, a count of scored tokens that is not the output's,
    or echoed tokens that are not the output's."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    choice = choices[0]
    first = len(request.prompt_token_ids)  # index of the first output token among the scored ones
    n = len(request.output_token_ids)
    if not text and isinstance(choice.get("prompt_logprobs"), list):
        return _from_prompt_logprobs(choice["prompt_logprobs"], request, first, n)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("token_logprobs"), list):
        output = OutputKeys(request.output_token_ids, expected)
        if text:
            try:
                first = locate(response, output.keys, key)
            except ValueError as exc:
                raise ValueError(f"{exc}: token-id prompts refused, so the output cannot be scored") from None
        return _from_echo(logprobs, first, output, key, one_back, min(request.top_logprobs, LEGACY_MAX_LOGPROBS))
    raise ValueError("the answer carries neither prompt_logprobs nor echoed logprobs")


def _from_prompt_logprobs(entries: list, request: ScoreRequest, first: int, n: int) -> ScoredOutput:
    """vLLM's shape, keyed by token id."""
    if len(entries) < first + n:
        raise ValueError(f"the server scored {max(len(entries) - first, 0)} of the output's {n} tokens")
    logprobs, ranks, tops = [], [], []
    for token, entry in zip(request.output_token_ids, entries[first : first + n], strict=True):
        if not isinstance(entry, dict) or str(token) not in entry:
            raise ValueError("a prompt_logprobs entry lacks its own token")
        logprobs.append(float(_logprob(entry[str(token)])))
        rank = entry[str(token)].get("rank") if isinstance(entry[str(token)], dict) else None
        ranks.append(int(rank) if isinstance(rank, int) else 0)
        alternatives = [(int(t), float(_logprob(v)), _rank(v)) for t, v in entry.items()]
        top = sorted((a for a in alternatives if a[2] is not None and a[2] <= request.top_logprobs), key=lambda a: a[2])
        tops.append([[t, lp] for t, lp, _ in top])
    return ScoredOutput(logprobs, tops, ranks=ranks if all(ranks) else None)


def _logprob(value: Any) -> float:
    return value["logprob"] if isinstance(value, dict) else value


def _rank(value: Any) -> int | None:
    rank = value.get("rank") if isinstance(value, dict) else None
    return rank if isinstance(rank, int) else None


def _from_echo(
    logprobs: dict[str, Any],
    first: int,
    output: OutputKeys,
    key: Callable[[str], int],
    one_back: bool = False,
    keep: int = LEGACY_MAX_LOGPROBS,
) -> ScoredOutput:
    """OpenAI's legacy shape: tokens named by text (or "token_id:N"), the scored output after the prompt, which must
    echo as the output's own tokens (a server or proxy that echoes others scored another output). one_back: a
    token's distribution is the top logprobs of the entry before it (llama-cpp-python's echo, see
    `client.scoring_audit`), whose `keep` highest are that distribution's top (the entry adds its own token's value,
    which may sit anywhere below them); a token not listed there has logprob NaN (unknown, below the top)."""
    n = len(output.ids)
    tokens, values = logprobs.get("tokens") or [], logprobs["token_logprobs"]
    tops = logprobs.get("top_logprobs") or [None] * len(values)
    if min(len(tokens), len(values), len(tops)) < first + n:
        raise ValueError(f"the server echoed {max(len(values) - first, 0)} of the output's {n} tokens")
    keys = [key(t) if isinstance(t, str) else None for t in tokens[first : first + n]]
    wrong = output.first_mismatch(keys)
    named = list(output.keys) if output.keys is not None else [int(t) for t in output.ids]  # ids name themselves
    if wrong is not None:
        raise ValueError(f"the server echoed other tokens than the output's (from output token {wrong} of {n})")
    if not one_back:
        own = [float(v) for v in values[first : first + n]]
        entries = tops[first : first + n]
        top = [sorted(([key(t), float(v)] for t, v in (alts or {}).items()), key=lambda a: -a[1]) for alts in entries]
        # judged on the list alone, never on the token drawn (leaving out positions by what was drawn would bias u)
        unreadable = [j for j, alts in enumerate(entries) if merged(alts, keep)]
        return ScoredOutput(own, top, token_keys=keys, output_keys=named, unreadable=tuple(unreadable))
    if first < 1:
        raise ValueError("no echoed entry before the output to read its first token's distribution from")
    own, top, unreadable = [], [], []
    for j, (mine, alts) in enumerate(zip(keys, tops[first - 1 : first + n - 1], strict=True)):
        listed = sorted(([key(t), float(v)] for t, v in (alts or {}).items()), key=lambda a: -a[1])
        own.append(next((v for k, v in listed if k == mine), math.nan))
        top.append(listed[:keep])
        if merged(alts, keep):
            unreadable.append(j)
    return ScoredOutput(own, top, token_keys=keys, output_keys=named, unreadable=tuple(unreadable))


PRINTS_ALIKE = "\ufffd"  # what a byte piece that is not whole UTF-8 prints as: such tokens are told apart by id only


def merged(alternatives: Any, asked: int) -> bool:
    """Whether a top-alternatives entry keyed by text cannot be the whole top `asked`: fewer entries than asked (texts
    that print alike collapsed into one key of the object), or an entry whose text stands for several tokens."""
    if not isinstance(alternatives, dict):
        return True
    return len(alternatives) < asked or any(PRINTS_ALIKE in t for t in alternatives)


AUDIT_CUTS = (8, 16, 32, 64)  # output tokens after the prompt where the audit tries again (see _audit)


class ScoringChannel:
    """How one server takes scoring requests: as token ids until it refuses them (and never answered one), then as
    text (see the module docstring). `call(body, sent)`: the request's Answer (lm-eval's retry policy; `sent` the
    text an error message quoting the input would repeat). Thread-safe: the requests of a run go `concurrency` at a
    time. `mode` ("token ids" / "text", None before the first answer) and `refused` (the server's error to the ids)
    are what the run records."""

    def __init__(
        self,
        model: str,
        tokenizer: Any,
        key: Callable[[str], int],
        vllm_extensions: bool,
        call: Callable[[dict[str, Any], str], Any],
    ) -> None:
        self.model, self.tokenizer, self.key = model, tokenizer, key
        self.vllm_extensions = vllm_extensions
        self.call = call
        self.mode: str | None = None
        self.refused: str | None = None
        self.audit: dict[str, Any] | None = None
        self._lock, self._audit_lock = threading.Lock(), threading.Lock()

    def score(self, request: ScoreRequest) -> ScoredOutput:
        if not request.output_token_ids:
            return ScoredOutput([], [])
        audit = self._audit(request)
        if audit.get("agrees") is False:
            return ScoredOutput([], [], error=audit["reason"])
        if not self.vllm_extensions and audit.get("agrees") is None:  # an echo nobody could check scores nothing
            return ScoredOutput(
                [],
                [],
                error=f"the server's echo could not be audited ({audit['reason']}): its "
                "logprobs are not trusted to score a run",
            )
        ids_error = None
        expected = [self.key(self.tokenizer.decode([t])) for t in request.output_token_ids]
        if self.mode != "text":
            scored = self._ask(scoring_payload(self.model, request, self.vllm_extensions), request, expected)
            if scored.error is None or self.mode == "token ids":
                self._settle("token ids", None, scored)
                return scored
            ids_error = scored.error
        text = self.tokenizer.decode([*request.prompt_token_ids, *request.output_token_ids])
        scored = self._ask(scoring_text_payload(self.model, text, request), request, expected, text=True)
        if scored.error is None:
            self._settle("text", ids_error, scored)
            return scored
        if ids_error is not None:
            return ScoredOutput([], [], error=f"as token ids: {ids_error}; as text: {scored.error}")
        return scored

    def _audit(self, request: ScoreRequest) -> dict[str, Any]:
        """The echo's check against the server's own generation (`client.scoring_audit`), made once, on the
        first request's prompt; vLLM's prompt_logprobs (keyed by id, per position) are not audited. Where the
        server's greedy output there holds byte pieces that print alike (which text cannot pair), the check moves on
        to that prompt followed by a part of the request's output, whose continuation is another."""
        with self._audit_lock:
            if self.audit is None and self.vllm_extensions:
                self.audit = {}
            if self.audit is None:
                prompt = list(request.prompt_token_ids)
                cuts = [0] + [n for n in AUDIT_CUTS if n < len(request.output_token_ids)]
                for cut in cuts:
                    text = self.tokenizer.decode(prompt + list(request.output_token_ids[:cut]))
                    self.audit = audit_echo(self.call, self.model, text, self.key)
                    if self.audit.get("agrees") is not None or BYTE_PIECES not in self.audit.get("reason", ""):
                        break
            return self.audit

    def _settle(self, mode: str, refused: str | None, scored: ScoredOutput) -> None:
        with self._lock:
            if self.mode is None and scored.error is None:
                self.mode, self.refused = mode, refused

    def _ask(
        self, body: dict[str, Any], request: ScoreRequest, expected: Sequence[int], text: bool = False
    ) -> ScoredOutput:
        sent = body["prompt"] if isinstance(body["prompt"], str) else self.tokenizer.decode(body["prompt"])
        answer = self.call(body, sent)
        if answer.error is not None:
            return ScoredOutput([], [], error=answer.error)
        try:
            one_back = (self.audit or {}).get("reading") == ONE_BACK
            return read_scoring(answer.response, request, self.key, expected, one_back, text)
        except (ValueError, TypeError, KeyError) as exc:
            return ScoredOutput([], [], error=f"unreadable scoring ({type(exc).__name__}: {str(exc)[:200]})")

    def record(self) -> dict[str, Any]:
        """What the run's server record says about scoring (empty before any answer)."""
        out: dict[str, Any] = {"scoring_audit": self.audit} if self.audit else {}
        if self.mode is None:
            return out
        out["scoring_prompts"] = self.mode
        if self.refused is not None:
            out["scoring_token_ids_refused"] = self.refused
        return out
