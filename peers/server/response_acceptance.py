"""Speculative-decoding acceptance of one request, read from that request's own response, in our layout
(`AcceptanceStats.to_dict()`) plus "source". Per-request counts are what make a run's AL
immune to other traffic on the server, and what the paired per-request AL test and the AL-by-length plot need.

The shapes read are each engine profile's `read_acceptance` (`profiles`: vLLM's and our serve's
`metrics.speculative_decoding`, SGLang's `meta_info`); lm-eval's backend keeps the raw response JSON, so nothing
is lost between the server and here.

Counts no drafter can produce (more accepted than drafted, more than K accepted per step:
`AcceptanceStats.totals_problem`) raise `ImpossibleAcceptance`: the endpoint records that request as failed with
the reason, so they never become an acceptance length, a gate's evidence or a populated reference. A histogram that
contradicts the totals gives no per-position counts (which of the two is right cannot be told).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..profiles import PROFILES
from ..profiles.acceptance_counts import ImpossibleAcceptance

# Each reader once (our serve's profile shares vLLM's), in profile order, and the keys they read.
RESPONSE_KEYS = tuple(dict.fromkeys(k for p in PROFILES.values() for k in p.response_keys))
CHOICE_KEYS = tuple(dict.fromkeys(k for p in PROFILES.values() for k in p.choice_keys))
READERS = tuple(dict.fromkeys(p.read_acceptance for p in PROFILES.values() if p.read_acceptance is not None))


def response_acceptance(response: Any, declared_k: int | None = None) -> dict[str, Any] | None:
    """The acceptance one response reports, or None when it carries none (a plain server, llama.cpp). Raises
    ImpossibleAcceptance for counts beyond what K allows."""
    if not isinstance(response, Mapping):
        return None
    for read in READERS:
        found = read(response, declared_k)
        if found is not None:
            return found
    return None


def acceptance_fields(response: Any) -> dict[str, Any]:
    """What of a response `response_acceptance` reads: the keys each profile's reader reads (a response's text is not
    kept to tally a run)."""
    if not isinstance(response, Mapping):
        return {}
    choices = response.get("choices")
    kept = [
        {k: c.get(k) for k in CHOICE_KEYS}
        for c in (choices if isinstance(choices, list) else [])
        if isinstance(c, Mapping)
    ]
    return {**{k: response.get(k) for k in RESPONSE_KEYS}, "choices": kept}


__all__ = ["ImpossibleAcceptance", "acceptance_fields", "response_acceptance"]
