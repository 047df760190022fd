"""A ready test double of the `InferenceEngine` protocol (workers/interface.py), shared by the tests that need an engine
without a model (lm-eval's `dummy.py` shape): every output is what `answer(prompt)` says (default: the prompt itself),
finished with reason "length", handed to the sink as it finishes; what was asked is kept for the test to check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specdec_eval.workers.config import EngineConfig, SamplingParams
from specdec_eval.workers.engine.engine import identity_of
from specdec_eval.workers.interface import EngineIdentity, GenerateStats, GenerationOutput


class FakeEngine:
    def __init__(
        self, tokenizer: Any = None, identity: EngineIdentity | None = None, answer: Callable[[Any], str] | None = None
    ) -> None:
        """tokenizer: a Hugging Face tokenizer (token ids of prompts and answers; None: one id per character);
        identity: what the engine says it is (default: a plain tiny engine in float32)."""
        self._tokenizer = tokenizer
        self._identity = identity or identity_of(EngineConfig(model="tiny"), "float32")
        self.answer = answer or (lambda prompt: prompt if isinstance(prompt, str) else str(prompt))
        self.last_stats = GenerateStats()
        self.prompts: list[Any] = []  # every prompt generate() was given, in order
        self.closed = False

    @property
    def identity(self) -> EngineIdentity:
        return self._identity

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def encode(self, prompt: Any) -> list[int]:
        text = prompt if isinstance(prompt, str) else str(prompt)
        if self._tokenizer is None:
            return [ord(c) for c in text]
        return self._tokenizer.encode(text, add_special_tokens=False)

    def generate(self, prompts: Sequence[Any], sampling=None, progress=None, sink=None) -> list[GenerationOutput]:
        params = list(sampling) if isinstance(sampling, Sequence) else [sampling or SamplingParams()] * len(prompts)
        outputs = []
        for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
            text = self.answer(prompt)
            out = GenerationOutput(i, self.encode(prompt), self.encode(text), text, "length")
            if sink is not None:
                sink.put(prompt, p, out)
            outputs.append(out)
        self.prompts += list(prompts)
        return outputs

    def score(self, pairs) -> list[tuple[float, bool]]:
        raise NotImplementedError("the fake engine generates only")

    def collect_events(self) -> list[dict[str, Any]]:
        return []

    def reported_acceptance(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        self.closed = True
