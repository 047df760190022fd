"""What declaring a planted bug class takes (`PlantedClass`), and the names its fields take."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...gates.acceptance import GATE as ACCEPTANCE_GATE
from ...gates.accuracy import GATE as ACCURACY_GATE
from ...gates.lossless import GATE as LOSSLESS_GATE

# Where a class acts: the verifier (the accept decision and the emitted tokens), the target model (its forward, its
# KV writes), the spec worker (drafting), the KV-cache manager, the rejection sampler (a rule of the verifier's).
WHERE = ("verifier", "target", "proposer", "kv_cache", "rejection_sampler")
# The gates that can be asked to catch a class (the selftest matrix's columns).
# The gates' names come from their declarations; the paired acceptance comparison and the events check are not gates.
LOSSLESS, ACCEPTANCE = LOSSLESS_GATE.name, ACCEPTANCE_GATE.name
CATCHERS = (ACCURACY_GATE.name, LOSSLESS, ACCEPTANCE, "paired_acceptance", "events")

# An edit of one engine step's verified tokens: (scheduled items, the step's logits, emitted tokens per item, the
# fault injector, the engine step) -> emitted tokens. It asks `faults.due(name, step)` before it changes anything.
AfterVerify = Callable[[Any, Any, "list[list[int]]", Any, int], "list[list[int]]"]
# A sampled class's own rejection verification of one request, in place of the textbook one: (the sampler's functions
# it may draw with, its rows of logits [K+1, V], its drafts, its SamplingParams, its random stream, q [K, V] or None)
# -> the emitted tokens. The planted verifier runs it where the class is asked and the request verifies drafts by
# rejection sampling. The sampler is handed in (`planted.rejection.SAMPLER`), not imported: the engine's config
# imports this package for the class names, so an import of the sampler from here would close a circle.
RejectionVerify = Callable[[Any, Any, "list[int]", Any, Any, Any], "list[int]"]


@dataclass(frozen=True)
class PlantedClass:
    """One planted bug class.

    name: what `--inject` takes. acts_in: where it acts (`WHERE`). catcher: the gate that must FAIL it (`CATCHERS`).
    help: one line, for `--inject --help`, the selftest matrix and the docs. sampled: it fires only at temperature
    > 0 (its selftest run samples). spec_sampling: the spec sampler it lives in ("coupled", or "rejection": run only
    when asked). recurring: a code bug fires every time its path is reached (False: once, or xCOUNT). in_matrix: a
    row of `selftest --mutants` (False: a class its tests judge elsewhere). after_verify: its code, for a class
    declared in its own module (`AfterVerify`). rejection_verify: its code, for a class of the rejection sampler
    declared in its own module (`RejectionVerify`; acts_in then names "rejection_sampler"). planted_at: for a class
    planted in a peer engine, where in that engine's code."""

    name: str
    acts_in: tuple[str, ...]
    catcher: str
    help: str
    sampled: bool = False
    spec_sampling: str = "coupled"
    recurring: bool = True
    in_matrix: bool = True
    after_verify: AfterVerify | None = None
    rejection_verify: RejectionVerify | None = None
    planted_at: str = ""  # a peer engine's class (`vllm`): the code point of that engine it is planted at

    def __post_init__(self) -> None:
        unknown = [w for w in self.acts_in if w not in WHERE]
        if not self.acts_in or unknown:
            raise ValueError(f"planted class {self.name}: acts_in must be among {', '.join(WHERE)}, not {unknown}")
        if self.catcher not in CATCHERS:
            raise ValueError(f"planted class {self.name}: catcher must be one of {', '.join(CATCHERS)}")
        if self.rejection_verify is not None and "rejection_sampler" not in self.acts_in:
            raise ValueError(f"planted class {self.name}: a rejection_verify acts in the rejection_sampler")
