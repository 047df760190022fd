"""Teacher-forced scoring over HTTP: an OpenAI-compatible server scores a given output after its prompt, through
the completions API (shared/reference/sampling-at-temperature.md §4). The prompt + output travel as token ids with
`max_tokens: 1`, `temperature: 0` and `echo: true`, so the server returns the logprob of every token it was given:

- vLLM's `prompt_logprobs: k` where the server takes vLLM's extensions (vLLM, our serve): per prompt token
  {token id: {logprob, rank, decoded_token}} for the token and its top k; token ids, no text to match;
- else `logprobs: k` (OpenAI's legacy completions shape: tokens, token_logprobs, top_logprobs), tokens named by
  text and matched through the same keys as generated logprobs (endpoint_logprobs.py).

A server returns the raw logprobs (before temperature and filters) by default, and only the top k: the sampled
gate then places each token conservatively within them (evals/lossless/pit.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..interface import ScoredOutput, ScoreRequest

LEGACY_MAX_LOGPROBS = 5  # OpenAI's cap on completions' `logprobs` (vLLM's --max-logprobs is 20)


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


def read_scoring(response: dict[str, Any], request: ScoreRequest, key: Callable[[str], int]) -> ScoredOutput:
    """The output's scoring from a server's answer to `scoring_payload`; raises ValueError on a shape it cannot read
    or a count of scored tokens that is not the output's."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    choice = choices[0]
    first = len(request.prompt_token_ids)  # index of the first output token among the scored ones
    n = len(request.output_token_ids)
    if isinstance(choice.get("prompt_logprobs"), list):
        return _from_prompt_logprobs(choice["prompt_logprobs"], request, first, n)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("token_logprobs"), list):
        return _from_echo(logprobs, first, n, key)
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
        top = sorted((a for a in alternatives if a[2] is not None and a[2] <= request.top_logprobs),
                     key=lambda a: a[2])  # fmt: skip
        tops.append([[t, lp] for t, lp, _ in top])
    return ScoredOutput(logprobs, tops, ranks=ranks if all(ranks) else None)


def _logprob(value: Any) -> float:
    return value["logprob"] if isinstance(value, dict) else value


def _rank(value: Any) -> int | None:
    rank = value.get("rank") if isinstance(value, dict) else None
    return rank if isinstance(rank, int) else None


def _from_echo(logprobs: dict[str, Any], first: int, n: int, key: Callable[[str], int]) -> ScoredOutput:
    """OpenAI's legacy shape: tokens named by text (or "token_id:N"), the scored output after the prompt."""
    tokens, values = logprobs.get("tokens") or [], logprobs["token_logprobs"]
    tops = logprobs.get("top_logprobs") or [None] * len(values)
    if min(len(tokens), len(values), len(tops)) < first + n:
        raise ValueError(f"the server echoed {max(len(values) - first, 0)} of the output's {n} tokens")
    own = [float(v) for v in values[first : first + n]]
    keys = [key(t) for t in tokens[first : first + n]]
    top = [sorted(([key(t), float(v)] for t, v in (alts or {}).items()), key=lambda a: -a[1])
           for alts in tops[first : first + n]]  # fmt: skip
    return ScoredOutput(own, top, token_keys=keys)
