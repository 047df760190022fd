"""The baseline side of a paired run (evals/pipeline.py `run_paired`): an engine whose outputs were all generated
beside the spec-dec run's and sit in the baseline run's generation cache. The lm-eval adapter finds every output
there, so `generate` is never reached; if it is, that is a bug and it says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..workers.interface import EngineIdentity, GenerateStats, GenerationOutput, Prompt
from ..workers.tokenizer import encode_any


class CachedOutputs:
    def __init__(self, identity: EngineIdentity, tokenizer: Any) -> None:
        self._identity = identity
        self._tokenizer = tokenizer
        self.last_stats = GenerateStats()

    @property
    def identity(self) -> EngineIdentity:
        return self._identity

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_any(self._tokenizer, prompt)

    def generate(self, prompts: Sequence[Prompt], sampling=None, progress=None, sink=None) -> list[GenerationOutput]:
        raise RuntimeError(
            f"{len(prompts)} baseline output(s) of the paired run are missing from its cache (a bug: the twins' "
            "outputs should all be there)"
        )

    def score(self, pairs) -> list[tuple[float, bool]]:
        raise RuntimeError("the baseline of a paired run scores from cached generations only")

    def collect_events(self) -> list[dict[str, Any]]:
        return []

    def reported_acceptance(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        return None
